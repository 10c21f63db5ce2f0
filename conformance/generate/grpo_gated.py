"""``grpo.loss`` vectors for the token-level weights that replace PPO's clip: CISPO's clipped,
detached IS weight (MiniMax-M1, arXiv 2506.13585, §3.1) and SAPO's soft gate (arXiv 2511.20347
§3), in the paper's and each library's convention set; and PPO with verl's abs KL estimator
(verl 0.9.1 kl_penalty "abs"). Groups: ``grpo_inputs.GATED_LOSS_GROUPS``; their notes and group
texts live with the other GRPO ones in ``grpo``."""
from __future__ import annotations

import math

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated
from lossproof.conformance.generate.grpo_inputs import (
    GATED_LOSS_GROUPS,
    LOSS,
    dtype_of,
    empty_rows_case,
    loss_away,
    loss_case,
    low_loss_case,
)

# (eps_low, eps_high) per policy and cispo_clip. CISPO 'upper': MiniMax-M1 tunes only ε_high^IS (no
# printed value: DAPO's 0.28 among the bands); 'raw-upper': TRL's/Liger's raw cap, 5.0 as TRL's
# help text suggests and None (→ ε_low = 0.2: TRL's cap when epsilon_high is unset); 'both': verl.
CISPO_BANDS = {"upper": [(0.2, None), (0.2, 0.28), (0.2, 1.0)],
               "both": [(0.2, 0.28), (0.1, 0.3), (0.5, 1.0)],
               "raw-upper": [(0.2, 5.0), (0.2, None), (0.2, 1.5)]}
# (τ_pos, τ_neg): the paper's (and TRL's, verl's) 1.0 / 1.05 first.
SAPO_TAUS = [(1.0, 1.05), (0.5, 2.0), (2.0, 3.0)]


def _params(conv, k: int, beta: float) -> dict:
    """The k-th parameter set of a group (band or temperatures) with β."""
    if conv["policy_loss"] == "sapo":
        tau_pos, tau_neg = SAPO_TAUS[k % 3]
        return {"beta": beta, "sapo_tau_pos": tau_pos, "sapo_tau_neg": tau_neg}
    bands = CISPO_BANDS[conv["cispo_clip"]] if conv["policy_loss"] == "cispo" else [(0.2, None), (0.2, 0.28)]
    eps_low, eps_high = bands[k % len(bands)]
    return {"eps_low": eps_low, "eps_high": eps_high, "beta": beta}


def _random(group, gi, i, big=False) -> Case:
    conv = GATED_LOSS_GROUPS[group]
    seed = 40000 + 100 * gi + i
    r = S.rng(seed)
    b = int(r.integers(1, 17)) if not big else 16
    t = int(r.choice([1, 3, 8, 16, 24, 32, 48, 64])) if not big else 128
    dtype = dtype_of(i)
    params = _params(conv, i + gi, float(r.choice([0.04, 0.001, 0.1, 0.0])))
    lp = S.rounded(S.logprobs(r, (b, t)), dtype)
    old = S.rounded(S.logprobs_near(r, lp, float(r.choice([0.05, 0.3, 0.8]))), dtype)
    ref = S.rounded(S.logprobs_near(r, lp, float(r.choice([0.05, 0.3, 1.0]))), dtype)
    adv = S.rounded(r.normal(0, 1, b).tolist(), dtype)
    mask = S.mask(r, b, t)
    lp = loss_away(lp, old, ref, params, conv, dtype)
    flags = ("Random",) + (("Large",) if big else ()) + (("BetaZero",) if params["beta"] == 0 else ())
    comment = (f"random B={b}, T={t}, β={params['beta']:g}, "
               + ", ".join(f"{k}={v}" for k, v in params.items() if k != "beta") + (", float32" if dtype else ""))
    return loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": adv, "mask": mask},
                     params, flags, comment, seed, "logprobs; old/ref = logp + normal offsets; ragged mask")


def _weight_edges(group, gi) -> Case:
    """CISPO: ratios 5 % and 0.1 % either side of each bound of the weight (the weight, and so the
    gradient, is continuous there); SAPO: ratios from e^−4 to e^4, where the gate saturates; abs:
    tokens with log r = 0 exactly (the kink, gradient 0) and ±2^−30 (gradient ∓1). Both signs of A."""
    conv = GATED_LOSS_GROUPS[group]
    seed = 41000 + gi
    r = S.rng(seed)
    params = _params(conv, 1, 0.04)
    if conv["policy_loss"] == "cispo":
        lo = params["eps_low"]
        hi = lo if params["eps_high"] is None else params["eps_high"]
        bounds = [hi] if conv["cispo_clip"] == "raw-upper" else [1 + hi, 1 - lo]
        ratios = [q * f for q in bounds for f in (0.95, 0.999, 1.001, 1.05)]
        flag, comment = "WeightBound", "ratios 5 % and 0.1 % either side of the IS weight's bounds, A = ±1"
    elif conv["policy_loss"] == "sapo":
        ratios = [math.exp(x) for x in (-4.0, -1.0, -0.25, 0.0, 0.25, 1.0, 2.0, 4.0)]
        flag, comment = "SoftGateRange", "ratios e^−4 … e^4 (the gate saturates), A = ±1"
    else:
        ratios = [0.9, 1.1, 1.0, 1.05]
        flag, comment = "AbsKink", "log r = 0 exactly and ±2^−30 (abs's kink), A = ±1"
    lp, old, ref, adv = [], [], [], []
    for a in (1.0, -1.0):
        base = S.logprobs(r, (len(ratios),))
        lp.append(base)
        old.append([x - math.log(q) for x, q in zip(base, ratios)])
        if flag == "AbsKink":
            ref.append([base[0], base[1] + 2.0 ** -30, base[2] - 2.0 ** -30, base[3]])
        else:
            ref.append(S.logprobs_near(r, base, 0.3))
        adv.append(a)
    mask = [[1] * len(ratios) for _ in lp]
    return loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": adv, "mask": mask},
                     params, (flag,), comment, seed, "logprobs; log-ratios placed at fixed ratios")


def _fixed_cases(group, gi) -> list[Case]:
    conv = GATED_LOSS_GROUPS[group]
    out = []
    out.append(low_loss_case(group, gi, 41100 + gi, _params(conv, 0, 0.04)))
    # Zero advantages: only the KL term remains.
    seed = 41200 + gi
    r = S.rng(seed)
    lp = S.logprobs(r, (3, 5))
    old = S.logprobs_near(r, lp, 0.3)
    ref = S.logprobs_near(r, lp, 0.3)
    params = _params(conv, 2, 0.1)
    lp = loss_away(lp, old, ref, params, conv, None)
    out.append(loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": [0.0, 0.0, 0.0],
                                 "mask": S.mask(r, 3, 5)}, params, ("ZeroAdvantage",),
                          "A = 0 in every row: only the KL term", seed, "logprobs; A = 0"))
    # Ratios e^±30: CISPO's weight sits on its cap (or is ~1e−13 below the band), SAPO's gate is flat.
    lp = [[-1.0, -31.0, -2.0, -0.5], [-30.5, -0.25, -3.0, -1.5]]
    old = [[-31.0, -1.0, -2.125, -0.625], [-0.5, -30.25, -3.125, -1.25]]
    ref = [[-1.25, -31.125, -2.5, -0.75], [-30.75, -0.5, -3.25, -1.75]]
    out.append(loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": [1.0, -1.0],
                                 "mask": [[1, 1, 1, 1], [1, 1, 1, 1]]}, _params(conv, 0, 0.04), ("ExtremeRatio",),
                          "token log-ratios ±30 and ±0.125", 0, "fixed"))
    out.append(empty_rows_case(group, 41300 + gi, _params(conv, 0, 0.04)))
    return out


INVALID = [
    ({"policy_loss": "cispo", "ratio_level": "sequence"}, {}, "CISPO with a sequence ratio (its weight is per token)"),
    ({"policy_loss": "sapo", "ratio_level": "sequence-token"}, {}, "SAPO with GSPO-token's ratio"),
    ({"policy_loss": "cispo", "dual_clip": 3.0}, {}, "CISPO with a dual clip (no min to bound)"),
    ({"policy_loss": "sapo", "dual_clip": 3.0}, {}, "SAPO with a dual clip (no min to bound)"),
    ({"cispo_clip": "both"}, {}, "cispo_clip with the PPO clip (only CISPO reads it)"),
    ({"policy_loss": "cispo", "cispo_clip": "lower"}, {}, "unknown cispo_clip"),
    ({"policy_loss": "cispo", "cispo_clip": "raw-upper"}, {"eps_high": 0.0}, "a raw cap of 0"),
    ({"policy_loss": "sapo"}, {"sapo_tau_pos": 0.0}, "τ_pos = 0"),
    ({"policy_loss": "sapo"}, {"sapo_tau_neg": -1.05}, "negative τ_neg"),
    ({"kl_kind": "ABS"}, {}, "unknown KL estimator (the names are lower case)"),
]


def cases() -> list[Case]:
    out = []
    for gi, group in enumerate(GATED_LOSS_GROUPS):
        for i in range(6):
            out.append(_random(group, gi, i))
        if group in ("cispo", "sapo"):
            out.append(_random(group, gi, 50, big=True))
        out.append(_weight_edges(group, gi))
        out += _fixed_cases(group, gi)
    ok = {"logp": [[-1.0, -2.0]], "old_logp": [[-1.1, -2.1]], "ref_logp": [[-1.2, -1.9]], "advantages": [1.0],
          "mask": [[1, 1]]}
    for conv, params, why in INVALID:
        # ε_high = 0 is out of range only as CISPO's raw cap: not a bad input for every target
        flag = "InvalidForPolicyLoss" if "eps_high" in params else "InvalidInput"
        out.append(Case(LOSS, ok, params={"eps_low": 0.2, "eps_high": None, "beta": 0.04, "norm_length": None,
                                          **params},
                        conventions=conv, group="invalid", result="invalid", flags=(flag,), comment=why,
                        provenance=generated(0, "fixed")))
    return out

