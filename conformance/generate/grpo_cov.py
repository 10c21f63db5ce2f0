"""Vectors of vector set 1.5.0 for the GRPO family: ``grpo.clip`` with the ±20 clamp of log ρ
(verl 0.9.1 compute_policy_loss_vanilla, OpenRLHF 0.11.2 PolicyLoss), and ``grpo.loss`` with the
policy losses Clip-Cov and KL-Cov (Cui et al., "The Entropy Mechanism of Reinforcement Learning for
Reasoning Language Models", arXiv 2505.22617 §4, as verl 0.9.1 trainer/ppo/core_algos.py
compute_policy_loss_clip_cov / compute_policy_loss_kl_cov ship them) and REINFORCE (Williams 1992;
verl 0.9.1 compute_policy_loss_gpg).

The Cov selections are inputs (``selected``), so every vector is deterministic. Clip-Cov's is
drawn here as verl draws it: among valid tokens on PPO's unclipped branch (verl never selects a
token its clip already holds, so a selection a target can reproduce stays there). KL-Cov's is
given in half the random cases and left to the reference's top-k by covariance in the others,
where the k-th and (k+1)-th covariances differ by 10⁻³ relative at least, so that a float32
target orders them as the exact reference does.
"""
from __future__ import annotations

import math

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated
from lossproof.conformance.generate.grpo_inputs import (
    CLIP_CLAMP_GROUPS,
    CLIP_PARAMS,
    COV_LOSS_GROUPS,
    LOSS,
    clip_bounds,
    clip_case,
    dtype_of,
    loss_away,
    loss_case,
)

CLAMP = 20.0
GAP = 1e-3   # relative gap between the k-th and (k+1)-th covariance of a top-k case

GROUPS = {
    "log-ratio-clamp-20": "grpo.clip: PPO eq. 7 with log ρ clamped to ±20 before exp (log_ratio_clamp = 20) and "
                          "no dual clip — OpenRLHF 0.11.2 models/loss.py PolicyLoss (dual_clip=None)",
    "dual-clip-3-clamp-20": "grpo.clip: verl 0.9.1 trainer/ppo/core_algos.py compute_policy_loss_vanilla as it "
                            "runs: log ρ clamped to ±20 before exp, clip_ratio_c = 3 (dual clip); also OpenRLHF "
                            "0.11.2 PolicyLoss(dual_clip=3)",
    "clip-cov": "grpo.loss: Clip-Cov (arXiv 2505.22617 §4): PPO's clipped term with the tokens of `selected` "
                "dropped (value and gradient), token mean, k3 KL without clamp; the selection is an input",
    "verl-0.9.1-clip-cov": "grpo.loss: verl 0.9.1 trainer/ppo/core_algos.py compute_policy_loss_clip_cov "
                           "(pg_losses = max(−ρA, −clip(ρ)A)·corr, corr = 0 on the tokens it draws; no dual clip, "
                           "no clamp of log ρ) with kl_penalty 'low_var_kl' (k3 clamped to ±10), agg_loss "
                           "'token-mean'",
    "kl-cov": "grpo.loss: KL-Cov (arXiv 2505.22617 §4): the unclipped −ρA, plus kl_cov_coef·|log π − log π_old| "
              "on the selected tokens (given, or the top-k by covariance), token mean, k3 KL without clamp",
    "verl-0.9.1-kl-cov": "grpo.loss: verl 0.9.1 trainer/ppo/core_algos.py compute_policy_loss_kl_cov (−ρA, "
                         "+ ppo_kl_coef·|Δ| on the top-k = max(1, int(N·kl_cov_ratio)) covariance tokens; no "
                         "clip, no clamp) with kl_penalty 'low_var_kl' (k3 clamped to ±10), agg_loss 'token-mean'",
    "reinforce": "grpo.loss: REINFORCE (Williams 1992): −A·log π per token, no ratio and no clip, "
                 "seq-mean-token-mean, k3 KL without clamp",
    "verl-0.9.1-gpg": "grpo.loss: verl 0.9.1 trainer/ppo/core_algos.py compute_policy_loss_gpg "
                      "(pg_losses = −log π·A) with kl_penalty 'low_var_kl' (k3 clamped to ±10), agg_loss "
                      "'token-mean'",
}

NOTES = {
    "LogRatioClamped": {"category": "edge", "description": "Tokens with |logp − old_logp| > 20 next to tokens "
                        "inside the band: where the clamp holds, ρ = e^±20 is a constant (gradient 0); a target "
                        "without the clamp differs in value (A < 0, ρ > e^20) or gradient (A > 0, ρ < e^−20).",
                        "bugType": "clamp",
                        "effect": "Tokens beyond the ±20 clamp must be constant (gradient 0); an unclamped ratio "
                                  "overflows.",
                        "links": ["https://github.com/verl-project/verl/pull/1779"]},
    "CovSelected": {"category": "random", "description": "Clip-Cov or KL-Cov with the token selection given as "
                    "`selected` (Clip-Cov: valid tokens on PPO's unclipped branch, as verl 0.9.1 draws them).",
                    "bugType": "formula",
                    "effect": "Clip-Cov/KL-Cov applied to another token selection changes which tokens lose their "
                              "gradient or gain the penalty."},
    "CovTopK": {"category": "random", "description": "KL-Cov without `selected`: the reference selects the "
                "k = max(1, ⌊N·kl_cov_ratio⌋) valid tokens of largest (A − Ā)(log π − mean log π); the k-th and "
                "(k+1)-th covariances differ by 10⁻³ relative at least.",
                "bugType": "formula",
                "effect": "KL-Cov's top-k covariance selection with another k or ordering penalises other tokens.",
                "links": ["https://github.com/NovaSky-AI/SkyRL/pull/462"]},
    "CovAllSelected": {"category": "edge", "description": "Clip-Cov with every valid token selected: the policy "
                       "term vanishes, only the KL term is left.",
                       "bugType": "degenerate-input",
                       "effect": "Every token selected: the policy term must vanish, leaving only the KL term."},
    "CovAbsKink": {"category": "edge", "description": "KL-Cov's |log π − log π_old| on selected tokens at Δ = 0 "
                   "exactly (gradient of the penalty 0, torch.abs's subgradient) and Δ = ±2^−30 (∓kl_cov_coef).",
                   "bugType": "gradient",
                   "effect": "|Δ| at Δ = 0: a NaN or wrong subgradient in the KL-Cov penalty."},
}


# ============================================================================ grpo.clip, log ρ clamped

def _clamp_clip_cases() -> list[Case]:
    out = []
    for gi, group in enumerate(CLIP_CLAMP_GROUPS):
        dual = CLIP_CLAMP_GROUPS[group]["dual_clip"]
        for i in range(8):
            seed = 53000 + 100 * gi + i
            r = S.rng(seed)
            n = int(r.choice([4, 8, 16, 32, 64]))
            eps_low, eps_high = CLIP_PARAMS[i % len(CLIP_PARAMS)]
            dtype = dtype_of(i)
            lp = S.rounded(S.logprobs(r, n, low=-60.0), dtype)
            # log-ratios up to ±40: about half the tokens beyond the clamp, none within 0.25 of it
            delta = [d if abs(abs(d) - CLAMP) > 0.25 else d + 0.5 for d in r.uniform(-40, 40, n).tolist()]
            old = S.rounded([a - d for a, d in zip(lp, delta)], dtype)
            adv = S.rounded(r.normal(0, 1, n).tolist(), dtype)
            lp = _away_clip(lp, old, clip_bounds(eps_low, eps_high, dual), dtype)
            out.append(clip_case(group, {"logp": lp, "old_logp": old, "advantages": adv},
                                 {"eps_low": eps_low, "eps_high": eps_high}, ("Random", "LogRatioClamped"),
                                 f"random n={n}, |log ρ| up to 40, ε=({eps_low:g}, "
                                 f"{eps_high if eps_high is not None else eps_low:g})" + (", float32" if dtype else ""),
                                 seed, "logprobs down to −60; log ρ uniform in [−40, 40]"))
        # one token each: the clamp decides the value (A < 0, log ρ = 25) or the gradient (A > 0,
        # log ρ = −25), next to tokens just inside the band (±19.5) and on it (±20)
        lp = [-0.5, -0.5, -30.0, -30.0, -0.5, -0.5, -20.5, -20.5]
        old = [-25.5, -20.0, -5.0, -10.5, -20.5, -20.0, -0.5, -1.0]
        adv = [-1.0, -1.0, 1.0, 1.0, -0.5, 2.0, 1.5, -1.0]
        for k in range(0, len(lp), 2):
            out.append(clip_case(group, {"logp": lp[k:k + 2], "old_logp": old[k:k + 2], "advantages": adv[k:k + 2]},
                                 {"eps_low": 0.2, "eps_high": None}, ("LogRatioClamped",),
                                 f"log ρ = {lp[k] - old[k]:g}, {lp[k + 1] - old[k + 1]:g} with A = {adv[k]:g}, "
                                 f"{adv[k + 1]:g}", 53090 + 10 * gi + k, "fixed"))
        for j, grid in enumerate((S.BOTH, S.FP16, S.BOTH, S.BOTH)):
            seed = 53200 + 10 * gi + j
            r = S.rng(seed)
            n = 16
            lp = S.in_low(S.logprobs(r, n, low=-8.0), grid)
            delta = [(-1) ** t * (21.0 + 4 * r.uniform()) if t % 3 == 0 else r.normal(0, 0.5) for t in range(n)]
            old = S.in_low([a - d for a, d in zip(lp, delta)], grid)
            # A > 0 beyond +20 and A < 0 beyond −20 are clipped (outputs within float16's range)
            adv = S.in_low([abs(r.normal(0, 1)) * (1 if a - b > 0 else -1) if abs(a - b) > CLAMP else r.normal(0, 1)
                            for a, b in zip(lp, old)], grid)
            lp = _away_clip(lp, old, clip_bounds(0.2, None, dual), grid)
            out.append(clip_case(group, {"logp": lp, "old_logp": old, "advantages": adv},
                                 {"eps_low": 0.2, "eps_high": None}, ("LogRatioClamped", "LowPrecision"),
                                 f"every third token |log ρ| in (21, 25), inputs exact in {S.grid_note(grid)}",
                                 seed, f"logprobs; rounded to the {grid} grid", low=True))
    return out


def _away_clip(lp, old, bounds, dtype):
    """Tokens off the clip band's edges (relative 1e−3; 2^−5 in low precision)."""
    near = S.NEAR_LOW if dtype in S.LOW_GRIDS else 1e-3
    lp = list(lp)
    for i in range(len(lp)):
        step = 0
        while any(abs(math.exp(max(min(lp[i] - old[i], CLAMP), -CLAMP)) / b - 1) < near for b in bounds):
            step += 1
            lp[i] = S.rounded([lp[i] - 0.03 * step], dtype)[0]
    return lp


# ============================================================================ grpo.loss: Cov, REINFORCE

def _unclipped(lp, old, adv, mask, params):
    """Valid tokens on PPO's unclipped branch (ties included), where verl 0.9.1 may draw Clip-Cov's."""
    lo = 1 - params["eps_low"]
    hi = 1 + (params["eps_low"] if params["eps_high"] is None else params["eps_high"])
    out = []
    for i, row in enumerate(mask):
        for t, on in enumerate(row):
            rho = math.exp(lp[i][t] - old[i][t])
            if on and rho * adv[i] <= min(max(rho, lo), hi) * adv[i]:
                out.append((i, t))
    return out


def _as_mask(chosen, shape) -> list:
    b, t = shape
    return [[1 if (i, j) in chosen else 0 for j in range(t)] for i in range(b)]


def _top_k_gap(lp, adv, mask, ratio):
    """Whether KL-Cov's top-k (verl 0.9.1 compute_policy_loss_kl_cov) is separated by GAP."""
    valid = [(i, t) for i, row in enumerate(mask) for t, on in enumerate(row) if on]
    n = len(valid)
    k = max(1, math.floor(ratio * n))
    if k >= n:
        return True
    a_mean = math.fsum(adv[i] for i, _ in valid) / n
    l_mean = math.fsum(lp[i][t] for i, t in valid) / n
    cov = sorted(((adv[i] - a_mean) * (lp[i][t] - l_mean) for i, t in valid), reverse=True)
    return abs(cov[k - 1] - cov[k]) > GAP * max(abs(cov[k - 1]), abs(cov[k]), 1e-300)


def selection(r, policy, lp, old, adv, mask, params, topk):
    """The ``selected`` input (None: KL-Cov's own top-k) and the flag naming how it was made."""
    shape = (len(mask), len(mask[0]))
    if policy == "clip-cov":
        pool = _unclipped(lp, old, adv, mask, params) or [(i, t) for i, row in enumerate(mask)
                                                          for t, on in enumerate(row) if on][:1]
    else:
        if topk and _top_k_gap(lp, adv, mask, params["kl_cov_ratio"]):
            return None, "CovTopK"
        pool = [(i, t) for i, row in enumerate(mask) for t, on in enumerate(row) if on]
    size = max(1, round(len(pool) * float(r.uniform(0.05, 0.5))))
    chosen = {pool[j] for j in r.choice(len(pool), size=size, replace=False).tolist()}
    return _as_mask(chosen, shape), "CovSelected"


def _params(policy, r, i):
    eps_low, eps_high = CLIP_PARAMS[i % len(CLIP_PARAMS)]
    params = {"eps_low": eps_low, "eps_high": eps_high, "beta": float(r.choice([0.04, 0.001, 0.1, 0.0]))}
    if policy == "kl-cov":
        params["kl_cov_coef"] = float(r.choice([1.0, 0.5, 2.0]))
        params["kl_cov_ratio"] = float(r.choice([0.0002, 0.1, 0.25]))
    return params


def _cov_case(group, inputs, selected, params, flags, comment, seed, recipe, low=False, result="valid"):
    if selected is not None:
        inputs = {**inputs, "selected": selected}
    return loss_case(group, inputs, params, flags, comment, seed, recipe, result=result, low=low)


def _random_loss(group, gi, i, grid=None) -> Case:
    conv = COV_LOSS_GROUPS[group]
    policy = conv["policy_loss"]
    seed = 52000 + 100 * gi + i
    r = S.rng(seed)
    b, t = int(r.integers(1, 13)), int(r.choice([1, 3, 8, 16, 24, 32, 48]))
    dtype = grid or dtype_of(i)
    params = _params(policy, r, i)
    lp = S.rounded(S.logprobs(r, (b, t)), dtype)
    old = S.rounded(S.logprobs_near(r, lp, float(r.choice([0.02, 0.1, 0.3]))), dtype)
    ref = S.rounded(S.logprobs_near(r, lp, float(r.choice([0.05, 0.3, 1.0]))), dtype)
    adv = S.rounded(r.normal(0, 1, b).tolist(), dtype)
    mask = S.mask(r, b, t)
    lp = loss_away(lp, old, ref, params, conv, dtype)
    # low precision: the selection is given (a top-k formed in bfloat16 may order differently)
    selected, how = (selection(r, policy, lp, old, adv, mask, params, i % 2 == 1 and grid is None)
                     if policy in ("clip-cov", "kl-cov") else (None, None))
    flags = ("Random",) + ((how,) if how else ()) + (("LowPrecision",) if grid else ()) \
        + (("BetaZero",) if params["beta"] == 0 else ())
    comment = (f"random B={b}, T={t}, " + ", ".join(f"{k}={v}" for k, v in params.items())
               + (f", inputs exact in {S.grid_note(grid)}" if grid else (", float32" if dtype else "")))
    return _cov_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": adv, "mask": mask},
                     selected, params, flags, comment, seed,
                     "logprobs; old/ref = logp + normal offsets; ragged mask"
                     + (f"; rounded to the {grid} grid" if grid else ""), low=grid is not None)


def _edge_cases(group, gi) -> list[Case]:
    conv = COV_LOSS_GROUPS[group]
    policy = conv["policy_loss"]
    out = []
    seed = 52800 + gi
    r = S.rng(seed)
    # A = 0 in every row: only the KL term (and KL-Cov's penalty) is left
    lp = S.logprobs(r, (3, 5))
    old = S.logprobs_near(r, lp, 0.3)
    ref = S.logprobs_near(r, lp, 0.3)
    mask = S.mask(r, 3, 5)
    params = {"beta": 0.1}
    lp = loss_away(lp, old, ref, params, conv, None)
    selected = _as_mask({(0, 0), (2, 0)}, (3, 5)) if policy in ("clip-cov", "kl-cov") else None
    out.append(_cov_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": [0.0, 0.0, 0.0],
                                 "mask": mask}, selected, params, ("ZeroAdvantage",),
                         "A = 0 in every row", seed, "logprobs; A = 0"))
    # log-ratios ±30 (KL-Cov's and REINFORCE's ρ or logπ are unbounded there) and ±0.125
    lp = [[-1.0, -31.0, -2.0, -0.5], [-30.5, -0.25, -3.0, -1.5]]
    old = [[-31.0, -1.0, -2.125, -0.625], [-0.5, -30.25, -3.125, -1.25]]
    ref = [[-1.25, -31.125, -2.5, -0.75], [-30.75, -0.25, -3.25, -1.75]]
    # Clip-Cov: the tokens on the unclipped branch (ρ = e^−30 with A = 1, ρ = e^30 with A = −1, and a
    # token inside the band); KL-Cov: both extreme tokens of row 0
    selected = {"clip-cov": _as_mask({(0, 1), (1, 1), (0, 2)}, (2, 4)),
                "kl-cov": _as_mask({(0, 0), (0, 1), (1, 3)}, (2, 4))}.get(policy)
    out.append(_cov_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": [1.0, -1.0],
                                 "mask": [[1, 1, 1, 1], [1, 1, 1, 1]]}, selected, {"beta": 0.04},
                         ("ExtremeRatio",), "token log-ratios ±30 and ±0.125", 0, "fixed"))
    if policy == "clip-cov":
        lp = [[-1.0, -2.0, -0.5], [-3.0, -0.25, -1.5]]
        old = [[-1.05, -1.9, -0.55], [-3.1, -0.3, -1.4]]
        ref = [[-1.25, -2.5, -0.75], [-3.25, -0.5, -1.75]]
        out.append(_cov_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": [0.75, -1.25],
                                     "mask": [[1, 1, 1], [1, 1, 0]]},
                             _as_mask({(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)}, (2, 3)), {"beta": 0.04},
                             ("CovAllSelected",), "every valid token selected (all inside the band)", 0, "fixed"))
    if policy == "kl-cov":
        base = [-1.5, -0.75, -2.25, -3.0]
        lp = [base, base]
        old = [[-1.5, -0.75 + 2.0 ** -30, -2.25 - 2.0 ** -30, -3.0], [-1.5, -0.5, -2.25, -3.0]]
        ref = [[-1.25, -1.0, -2.0, -2.75], [-1.75, -0.5, -2.5, -3.25]]
        out.append(_cov_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": [1.0, -1.0],
                                     "mask": [[1, 1, 1, 1], [1, 1, 1, 1]]},
                             _as_mask({(0, 0), (0, 1), (0, 2), (1, 0), (1, 2)}, (2, 4)),
                             {"beta": 0.04, "kl_cov_coef": 1.0}, ("CovAbsKink",),
                             "selected tokens at Δ = 0 and ±2^−30", 0, "fixed"))
    return out


def _ok(policy):
    inputs = {"logp": [[-1.0, -2.0]], "old_logp": [[-1.1, -2.1]], "ref_logp": [[-1.2, -1.9]], "advantages": [1.0],
              "mask": [[1, 0]]}
    return {**inputs, "selected": [[1, 0]]} if policy in ("clip-cov", "kl-cov") else inputs


# An input invalid under its policy loss only (Clip-Cov without a selection, a selection given to PPO's
# clip, KL-Cov's tied top-k) is flagged InvalidForPolicyLoss: it runs for the targets that declare
# that policy loss, not under every target's own conventions, where it may be valid.
FOR_POLICY = {"Clip-Cov without its selection", "a selection with PPO's clip (only Cov reads it)"}

INVALID = [
    ({"policy_loss": "clip-cov"}, {"selected": [[0, 1]]}, {}, "a selected token the mask leaves out"),
    ({"policy_loss": "kl-cov"}, {"selected": [[1, 1]]}, {}, "a selected token the mask leaves out"),
    ({"policy_loss": "clip-cov"}, {"selected": None}, {}, "Clip-Cov without its selection"),
    ({"policy_loss": "kl-cov"}, {"selected": [[0.5, 0]]}, {}, "a selection that is not 0/1"),
    ({"policy_loss": "ppo-clip"}, {"selected": [[1, 0]]}, {}, "a selection with PPO's clip (only Cov reads it)"),
    ({"policy_loss": "kl-cov"}, {}, {"kl_cov_ratio": 0.0}, "kl_cov_ratio = 0"),
    ({"policy_loss": "kl-cov"}, {}, {"kl_cov_ratio": 1.5}, "kl_cov_ratio > 1"),
    ({"policy_loss": "kl-cov"}, {}, {"kl_cov_coef": -1.0}, "negative kl_cov_coef"),
    ({"policy_loss": "kl-cov", "log_ratio_clamp": 20.0}, {}, {}, "KL-Cov with a clamp of log ρ (no clamp there)"),
    ({"policy_loss": "clip-cov", "dual_clip": 3.0}, {}, {}, "Clip-Cov with a dual clip"),
    ({"policy_loss": "kl-cov", "ratio_level": "sequence"}, {}, {}, "KL-Cov with a sequence ratio"),
    ({"policy_loss": "reinforce", "kl_ratio_weight": True}, {}, {}, "REINFORCE with a ratio-weighted KL (no ratio)"),
    ({"policy_loss": "reinforce", "log_ratio_clamp": 20.0}, {}, {}, "REINFORCE with a clamp of log ρ (no ratio)"),
]


def _invalid() -> list[Case]:
    out = []
    for conv, inputs, params, why in INVALID:
        full = {k: v for k, v in {**_ok(conv["policy_loss"]), **inputs}.items() if v is not None}
        flag = "InvalidForPolicyLoss" if why in FOR_POLICY else "InvalidInput"
        out.append(Case(LOSS, full, params={"eps_low": 0.2, "eps_high": None, "beta": 0.04, "norm_length": None,
                                            **params},
                        conventions=conv, group="invalid", result="invalid", flags=(flag,), comment=why,
                        provenance=generated(0, "fixed")))
    # KL-Cov's top-k tied at the boundary: every token has the same covariance (A equal in the row)
    tied = {"logp": [[-1.0, -2.0, -3.0, -4.0]], "old_logp": [[-1.1, -2.1, -2.9, -4.2]],
            "ref_logp": [[-1.2, -1.9, -3.1, -4.1]], "advantages": [1.0], "mask": [[1, 1, 1, 1]]}
    out.append(Case(LOSS, tied, params={"eps_low": 0.2, "eps_high": None, "beta": 0.04, "norm_length": None,
                                        "kl_cov_ratio": 0.5},
                    conventions={"policy_loss": "kl-cov"}, group="invalid", result="invalid",
                    flags=("InvalidForPolicyLoss",),
                    comment="KL-Cov's top-2 with every covariance 0 (one row, one A): tied, `selected` needed",
                    provenance=generated(0, "fixed")))
    return out


def cases() -> list[Case]:
    out = _clamp_clip_cases()
    for gi, group in enumerate(COV_LOSS_GROUPS):
        for i in range(8):
            out.append(_random_loss(group, gi, i))
        for j, grid in enumerate((S.BOTH, S.FP16, S.BOTH)):
            out.append(_random_loss(group, gi, 60 + j, grid))
        out += _edge_cases(group, gi)
    return out + _invalid()
