"""Vectors for ``gae.advantages`` (GAE, Schulman et al. 2016, arXiv 1506.02438 eqs. 10, 16, with
the libraries' batch whitening and masked tokens) and ``gae.kl_rewards`` (the KL penalty folded
into per-token rewards, verl 0.9.1 apply_kl_penalty / OpenRLHF 0.11.2 compute_reward); formulas in
refimpl/exact/gae.py. Both are detached (no gradients); float64 and float32 only.
"""
from __future__ import annotations

import math

import mpmath

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated

ADV, REWARDS = "gae.advantages", "gae.kl_rewards"

NOTES = {
    "Random": {"category": "random", "description": "Random token rewards (mostly 0, a score on the last valid "
               "token, small KL-like terms elsewhere), values and masks with trailing padding; B ≤ 6, T ≤ 12; half "
               "the cases rounded to float32.",
               "bugType": "formula",
               "links": ["https://github.com/THUDM/slime/issues/1369",
                         "https://github.com/THUDM/slime/pull/2356"]},
    "InteriorMask": {"category": "edge", "description": "Masked tokens between valid ones (observation tokens of a "
                     "multi-turn rollout): 'skip' steps over them, 'zero' takes them as steps of reward and value "
                     "0, so the two conventions differ there.",
                     "bugType": "masking",
                     "effect": "Masked interior tokens treated as steps (or skipped) against the declared "
                               "convention: advantages leak across observation tokens."},
    "PaperExample": {"category": "edge", "description": "γ = λ = 1 (the libraries' default): Â_t = Σ_{u≥t} r_u − V_t, "
                     "the return minus the value; λ = 0: the one-step TD error; γ = 0: r_t − V_t.",
                     "bugType": "formula",
                     "effect": "At γ, λ ∈ {0, 1} GAE reduces to closed forms; a wrong recursion or bootstrap shows "
                               "there."},
    "SingleToken": {"category": "edge", "description": "One valid token in the batch (the whitening's variance is 0: "
                    "the centred advantage is 0).",
                    "bugType": "degenerate-input",
                    "effect": "One valid token makes the whitening variance 0: 0/0 = NaN instead of a zero centred "
                              "advantage."},
    "KLClamped": {"category": "convention", "description": "KL estimates beyond the ±10 clamp (OpenRLHF 0.11.2 "
                  "compute_approx_kl, verl 0.9.1 low_var_kl).",
                  "bugType": "clamp",
                  "effect": "A clamp on the KL estimate that is missing, at another bound, or passes a gradient "
                            "where it holds."},
    "ScoreOnLastToken": {"category": "edge", "description": "A short row: the score sits on its last valid token, "
                         "not on the last position of the padded row.",
                         "bugType": "masking",
                         "effect": "The score placed on the last padded position instead of the last valid token of "
                                   "a short row."},
    "InvalidInput": {"category": "invalid", "description": "Input or parameter outside the objective's domain (NaN/inf, "
                     "shapes that disagree, masks that are not 0/1 or select no token, γ or λ outside [0, 1], β < 0, "
                     "unknown convention values); must be rejected.",
                     "bugType": "input-validation"},
}

ADV_GROUPS = {
    "paper": {"whiten": "none", "std_ddof": 0, "masked_tokens": "skip"},
    "zero-steps": {"whiten": "none", "std_ddof": 0, "masked_tokens": "zero"},
    "verl-0.9.1": {"whiten": "centred", "std_ddof": 1, "masked_tokens": "skip"},
    "keep-mean": {"whiten": "keep-mean", "std_ddof": 1, "masked_tokens": "skip"},
    "openrlhf-0.11.2": {"whiten": "centred", "std_ddof": 0, "masked_tokens": "zero"},
}
# whiten_eps (1.7.0): drawn after every earlier case, so that their test ids stay
EPS_GROUPS = {
    "verl-0.9.1-whiten-eps": {"whiten": "centred", "std_ddof": 1, "masked_tokens": "skip", "whiten_eps": 1e-8},
    "whiten-eps-1e-3": {"whiten": "keep-mean", "std_ddof": 1, "masked_tokens": "skip", "whiten_eps": 1e-3},
}
REWARD_GROUPS = {
    "paper": {"kind": "k1", "clamp": None},
    "k2": {"kind": "k2", "clamp": None},
    "verl-0.9.1-low-var-kl": {"kind": "k3", "clamp": 10.0},
    "openrlhf-0.11.2": {"kind": "k1", "clamp": 10.0},
    "openrlhf-0.11.2-k2": {"kind": "k2", "clamp": 10.0},
}

GROUPS = {
    "paper": "gae.advantages: GAE (arXiv 1506.02438 eqs. 10, 16) without whitening, a masked token is not a time "
             "step; also verl 0.9.1 trainer/ppo/core_algos.py compute_gae_advantage_return before its masked_whiten. "
             "gae.kl_rewards: the classic RLHF penalty k1 = log π/π_ref (Ziegler et al. 2019; Stiennon et al. "
             "2020), no clamp — verl 0.9.1 trainer/ppo/ray_trainer.py apply_kl_penalty with kl_penalty='kl' "
             "(its default)",
    "zero-steps": "gae.advantages: masked tokens as steps of reward and value 0, no whitening (OpenRLHF 0.11.2 "
                  "trainer/ppo_utils/experience_maker.py get_advantages_and_returns before the whitening)",
    "verl-0.9.1": "gae.advantages: verl 0.9.1 trainer/ppo/core_algos.py compute_gae_advantage_return: masked "
                  "(observation) tokens skipped, then verl.utils.torch_functional.masked_whiten (shift_mean=True, "
                  "unbiased variance; its Σm + 1e−8 and rsqrt(var + 1e−8) are not expressed)",
    "keep-mean": "gae.advantages: whitening that restores the mean (verl 0.9.1 masked_whiten shift_mean=False): "
                 "the advantages are scaled, not centred",
    "openrlhf-0.11.2": "gae.advantages: OpenRLHF 0.11.2 trainer/ppo_utils/experience_maker.py "
                       "get_advantages_and_returns (values and rewards × mask) and the batch whitening over the "
                       "action tokens (biased variance; rsqrt(clamp(var, 1e−8)) not expressed). gae.kl_rewards: "
                       "models/utils.py compute_reward with compute_approx_kl 'k1' clamped to ±10",
    "verl-0.9.1-whiten-eps": "gae.advantages: verl 0.9.1 compute_gae_advantage_return with its masked_whiten as "
                             "written (verl/utils/torch_functional.py: masked_mean over mask.sum() + 1e-8, "
                             "masked_var × N/(N − 1), (x − mean)·rsqrt(var + 1e-8); TRL's core.py whiten, which "
                             "torchtune rlhf/rewards.py whiten copies): whiten_eps 1e−8",
    "whiten-eps-1e-3": "gae.advantages: the same whitening with ε = 1e−3 and the mean kept (torchtune "
                       "rlhf/rewards.py whiten with shift_mean=True, verl masked_whiten shift_mean=False): an ε "
                       "that float32 resolves",
    "k2": "gae.kl_rewards: the k2 estimator (log r)²/2 as the per-token penalty (verl kl_penalty='mse')",
    "verl-0.9.1-low-var-kl": "gae.kl_rewards: verl 0.9.1 apply_kl_penalty with kl_penalty='low_var_kl' (k3, "
                             "clamped to ±10; its ±20 clamp of log r is not expressed)",
    "openrlhf-0.11.2-k2": "gae.kl_rewards: OpenRLHF 0.11.2 compute_approx_kl 'k2' clamped to ±10",
    "invalid": "inputs outside the domain (all conventions)",
}

PARAMS = [(1.0, 1.0), (0.99, 0.95), (1.0, 0.95), (0.9, 0.8), (1.0, 0.0), (0.0, 0.5), (0.5, 1.0)]


def _mask(r, b, t, interior):
    lengths = [int(x) for x in r.integers(1, t + 1, size=b)]
    lengths[int(r.integers(0, b))] = t
    mask = [[1 if j < n else 0 for j in range(t)] for n in lengths]
    if interior:
        for row, n in zip(mask, lengths):
            if n >= 4:
                a, k = int(r.integers(1, n - 2)), int(r.integers(1, 3))
                row[a:a + k] = [0] * k
    return mask, lengths


def _adv_random(group, seed, dtype, interior, table=ADV_GROUPS):
    r = S.rng(seed)
    b, t = int(r.integers(1, 7)), int(r.integers(2, 13))
    mask, lengths = _mask(r, b, t, interior)
    rewards = (r.normal(0, 0.05, (b, t))).tolist()
    for row, n in zip(rewards, lengths):
        row[n - 1] = float(r.normal(0, 1))    # the score on the last valid token
    values = r.normal(0, 0.7, (b, t)).tolist()
    gamma, lam = PARAMS[seed % len(PARAMS)]
    flags = ("Random",) + (("InteriorMask",) if interior else ())
    return Case(ADV, {"rewards": S.rounded(rewards, dtype), "values": S.rounded(values, dtype), "mask": mask},
                params={"gamma": gamma, "lam": lam}, conventions=table[group], group=group, flags=flags,
                comment=f"random B={b}, T={t}, γ={gamma}, λ={lam}" + (", interior masked tokens" if interior else "")
                + (", float32" if dtype else ""), provenance=generated(seed, "token rewards and values"))


def _adv_fixed(group) -> list[Case]:
    conv = ADV_GROUPS[group]
    out = []
    rewards = [[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.5, 0.0]]
    values = [[0.25, 0.5, 0.75, 0.5], [0.125, -0.25, 0.375, 0.0]]
    mask = [[1, 1, 1, 1], [1, 1, 1, 0]]
    for gamma, lam, why in ((1.0, 1.0, "γ = λ = 1: Â_t = Σ_{u≥t} r_u − V_t"), (1.0, 0.0, "λ = 0: the TD error δ_t"),
                            (0.0, 0.5, "γ = 0: r_t − V_t")):
        out.append(Case(ADV, {"rewards": rewards, "values": values, "mask": mask}, params={"gamma": gamma, "lam": lam},
                        conventions=conv, group=group, flags=("PaperExample",), comment=why,
                        provenance=generated(0, "fixed")))
    out.append(Case(ADV, {"rewards": [[0.0, 0.25, 0.0, 1.0, 0.0]], "values": [[0.5, 3.0, -2.0, 0.25, 7.0]],
                          "mask": [[1, 0, 0, 1, 0]]}, params={"gamma": 0.9, "lam": 0.95}, conventions=conv, group=group,
                    flags=("InteriorMask",), comment="observation tokens (value 3, −2; reward 0.25) between two valid "
                    "tokens, trailing padding with value 7", provenance=generated(0, "fixed")))
    out.append(Case(ADV, {"rewards": [[0.0, 1.5], [0.0, 0.0]], "values": [[0.5, 0.25], [1.0, 2.0]],
                          "mask": [[0, 1], [0, 0]]}, params={"gamma": 1.0, "lam": 0.95}, conventions=conv, group=group,
                    flags=("SingleToken",), comment="one valid token in the batch", provenance=generated(0, "fixed")))
    return out


def _rewards_random(group, seed, dtype, interior, big=False):
    r = S.rng(seed)
    b, t = int(r.integers(1, 7)), int(r.integers(1, 13))
    mask, _ = _mask(r, b, t, interior)
    logp = (-r.exponential(1.5, (b, t))).tolist()
    spread = 15.0 if big else 0.3
    ref = [[x + float(r.normal(0, spread)) for x in row] for row in logp]
    scores = r.normal(0, 1, b).tolist()
    beta = [0.001, 0.01, 0.05, 0.1, 1.0][seed % 5]
    flags = ("Random",) + (("InteriorMask",) if interior else ()) + (("KLClamped",) if big else ())
    return Case(REWARDS, {"scores": S.rounded(scores, dtype), "logp": S.rounded(logp, dtype),
                          "ref_logp": S.rounded(ref, dtype), "mask": mask},
                params={"beta": beta}, conventions=REWARD_GROUPS[group], group=group, flags=flags,
                comment=f"random B={b}, T={t}, β={beta}" + (", |log r| up to ~40" if big else "")
                + (", float32" if dtype else ""), provenance=generated(seed, "scores and log-probabilities"))


def _invalid() -> list[Case]:
    nan, inf = math.nan, math.inf
    ok = {"rewards": [[0.0, 1.0]], "values": [[0.5, 0.25]], "mask": [[1, 1]]}
    okr = {"scores": [1.0], "logp": [[-1.0, -2.0]], "ref_logp": [[-1.5, -2.0]], "mask": [[1, 1]]}
    bad = [
        (ADV, {**ok, "values": [[0.5, nan]]}, {}, {}, "NaN value"),
        (ADV, {**ok, "rewards": [[0.0, inf]]}, {}, {}, "+inf reward"),
        (ADV, {**ok, "values": [[0.5]]}, {}, {}, "values do not match the rewards"),
        (ADV, {**ok, "mask": [[1, 2]]}, {}, {}, "mask value 2"),
        (ADV, {**ok, "mask": [[0, 0]]}, {}, {}, "a mask that selects no token"),
        (ADV, {"rewards": [0.0, 1.0], "values": [0.5, 0.25], "mask": [1, 1]}, {}, {}, "rank-1 inputs"),
        (ADV, ok, {"gamma": 1.5}, {}, "γ > 1"),
        (ADV, ok, {"lam": -0.1}, {}, "λ < 0"),
        (ADV, ok, {}, {"whiten": "batch"}, "unknown whitening"),
        (ADV, ok, {}, {"masked_tokens": "drop"}, "unknown masked-token rule"),
        (REWARDS, {**okr, "logp": [[-1.0, nan]]}, {"beta": 0.1}, {}, "NaN log-probability"),
        (REWARDS, {**okr, "scores": [1.0, 2.0]}, {"beta": 0.1}, {}, "scores do not match the batch"),
        (REWARDS, {**okr, "mask": [[0, 0]]}, {"beta": 0.1}, {}, "a row without tokens (no last token)"),
        (REWARDS, {**okr, "ref_logp": [[-1.5]]}, {"beta": 0.1}, {}, "shapes disagree"),
        (REWARDS, okr, {"beta": -0.1}, {}, "negative β"),
        (REWARDS, okr, {"beta": 0.1}, {"kind": "k4"}, "unknown estimator"),
        (REWARDS, okr, {"beta": 0.1}, {"clamp": 0.0}, "clamp = 0"),
    ]
    return [Case(obj, inputs, params=params, conventions=conv, group="invalid", result="invalid",
                 flags=("InvalidInput",), comment=why, provenance=generated(0, "fixed"))
            for obj, inputs, params, conv, why in bad]


def cases() -> list[Case]:
    out = []
    for gi, group in enumerate(ADV_GROUPS):
        for i in range(8):
            out.append(_adv_random(group, 41000 + 100 * gi + i, "float32" if i % 2 == 0 else None, interior=i % 3 == 2))
        out.extend(_adv_fixed(group))
    for gi, group in enumerate(REWARD_GROUPS):
        for i in range(11):
            out.append(_rewards_random(group, 42000 + 100 * gi + i, "float32" if i % 2 == 0 else None,
                                       interior=i % 4 == 3, big=i in (4, 9)))
        out.append(Case(REWARDS, {"scores": [2.0, -1.0], "logp": [[-0.5, -1.0, -2.0], [-0.25, -3.0, -1.0]],
                                  "ref_logp": [[-0.75, -1.0, -1.5], [-0.5, -2.0, -1.0]], "mask": [[1, 1, 1], [1, 1, 0]]},
                        params={"beta": 0.05}, conventions=REWARD_GROUPS[group], group=group,
                        flags=("ScoreOnLastToken",),
                        comment="the score on the last valid token, −β·k elsewhere", provenance=generated(0, "fixed")))
    out.extend(_invalid())
    return out + _eps_cases()


def _eps_cases() -> list[Case]:
    """whiten_eps: random batches, interior masked tokens, one valid token (N = ddof: 0) and a batch
    of equal advantages (σ = 0: ε alone scales the offset Σ A·ε/(N + ε) of the mean), and ε with no
    whitening (invalid)."""
    out = []
    for gi, (group, conv) in enumerate(EPS_GROUPS.items()):
        for i in range(10):
            out.append(_adv_random(group, 43000 + 100 * gi + i, "float32" if i % 2 == 0 else None,
                                   interior=i % 3 == 2, table=EPS_GROUPS))
        out.append(Case(ADV, {"rewards": [[0.0, 1.0, 0.0]], "values": [[0.5, 0.0, 0.0]], "mask": [[0, 1, 0]]},
                        params={"gamma": 1.0, "lam": 1.0}, conventions=conv, group=group, flags=("SingleToken",),
                        comment="one valid token: N − 1 = 0, the centred part 0", provenance=generated(0, "fixed")))
        out.append(Case(ADV, {"rewards": [[0.0, 1.0], [0.0, 1.0]], "values": [[0.0, 0.0], [0.0, 0.0]],
                              "mask": [[1, 1], [1, 1]]}, params={"gamma": 1.0, "lam": 1.0}, conventions=conv,
                        group=group, flags=("PaperExample",),
                        comment="every advantage 1 (σ = 0): the centred part (1 − 4/(4 + ε))/√ε, not 0",
                        provenance=generated(0, "fixed")))
    out.append(Case(ADV, {"rewards": [[0.0, 1.0]], "values": [[0.5, 0.0]], "mask": [[1, 1]]},
                    conventions={"whiten": "none", "whiten_eps": 1e-8}, group="invalid", result="invalid",
                    flags=("InvalidInput",), comment="whiten_eps without whitening", provenance=generated(0, "fixed")))
    return out


# ----------------------------------------------------------------------------- tolerance scales
#
# An input rounding of u moves δ_t by about u·(|r_t| + |V_t| + γ|V_{t+1}|) and Â_t by the
# (γλ)-discounted sum of those; the whitening divides by σ and adds u·(1 + |Â|/σ) of its mean and σ.

def _adv_scale(kwargs, outputs, grads):
    g, lm = mpmath.mpf(kwargs["gamma"]), mpmath.mpf(kwargs["lam"])
    worst = mpmath.mpf(0)
    for rr, vv in zip(kwargs["rewards"], kwargs["values"]):
        follow = mpmath.mpf(0)
        for t in reversed(range(len(rr))):
            nxt = abs(mpmath.mpf(vv[t + 1])) if t + 1 < len(rr) else 0
            follow = abs(mpmath.mpf(rr[t])) + abs(mpmath.mpf(vv[t])) + g * nxt + g * lm * follow
            worst = max(worst, follow)
    values = max(abs(mpmath.mpf(x)) for row in kwargs["values"] for x in row)
    adv = max((abs(a) for a in outputs["advantages"].flat), default=mpmath.mpf(0))
    scale = worst
    if kwargs["whiten"] != "none":
        raw = [a - v for a, v in zip(outputs["returns"].flat, (mpmath.mpf(x) for row in kwargs["values"] for x in row))]
        on = [m == 1 for row in kwargs["mask"] for m in row]
        valid = [a for a, o in zip(raw, on) if o]
        mean = mpmath.fsum(valid) / len(valid)
        # whiten_eps ε: the scale is 1/√(σ² + ε)
        var = mpmath.fsum((a - mean) ** 2 for a in valid) / len(valid) + mpmath.mpf(kwargs.get("whiten_eps", 0))
        if var > 0:
            scale = worst / mpmath.sqrt(var) * (1 + adv) + adv
    return {"advantages": max(scale, adv), "returns": worst + values}


def _rewards_scale(kwargs, outputs, grads):
    beta = mpmath.mpf(kwargs["beta"])
    worst = mpmath.mpf(0)
    for lrow, rrow in zip(kwargs["logp"], kwargs["ref_logp"]):
        for a, b in zip(lrow, rrow):
            a, b = mpmath.mpf(a), mpmath.mpf(b)
            x = b - a
            size = abs(a) + abs(b)
            term = {"k1": size, "k2": abs(x) * size + x * x / 2,
                    "k3": (mpmath.exp(x) + 1) * size + abs(mpmath.expm1(x) - x)}[kwargs["kind"]]
            worst = max(worst, beta * term)
    score = max(abs(mpmath.mpf(s)) for s in kwargs["scores"])
    return {"rewards": worst + score}


SCALES = {ADV: _adv_scale, REWARDS: _rewards_scale}
