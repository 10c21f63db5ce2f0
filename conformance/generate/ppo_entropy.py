"""Vectors for ``ppo.entropy_bonus``: the policy loss's entropy term −c·agg(H) (PPO, Schulman et al.
2017, arXiv 1707.06347, §5 eq. 9's c₂·S[π_θ](s_t); verl 0.9.1 workers/utils/losses.py ppo_loss).

The entropies are per-token values H_t ≥ 0 up to log V of a large vocabulary (~12), a few near 0;
padding holds far-off values (1e4, 0.5·LOW_MAX) that must not reach the loss. One group per
aggregation (grpo.aggregate's modes) and one for verl's |o_i| + 1e-8 per-row token mean; the
coefficient c varies across cases (it is an argument, not a convention).
"""
from __future__ import annotations

import math

import mpmath

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated, paper, rows_without_tokens
from lossproof.refimpl.exact import grpo as exact_grpo

OBJ = "ppo.entropy_bonus"
PPO = "1707.06347"
COEFS = (0.01, 0.001, 0.05, 1.0, 0.0025)

NOTES = {
    "EntropyRandom": {"category": "random", "description": "Random per-token entropies from a fixed seed (uniform "
                      "up to log V for V between 2 and 128256, a share near 0), ragged right-padded masks, the "
                      "coefficient c among 0.01, 0.001, 0.05, 1 and 0.0025.",
                      "bugType": "formula",
                      "effect": "A wrong sign, coefficient or aggregation of the entropy bonus.",
                      "links": ["https://github.com/pukkapies/dl-imperial-maths/pull/8",
                                "https://github.com/zhangchuheng123/Reinforcement-Implementation/issues/2"]},
    "EntropyMaskedValues": {"category": "edge", "description": "Padding holds entropies far from the valid ones (1e4): "
                            "they must not reach the loss or its gradient.",
                            "bugType": "masking",
                            "effect": "Padding entropies reaching the loss or its gradient.",
                            "links": ["https://github.com/huggingface/trl/pull/6121",
                                      "https://github.com/huggingface/trl/issues/2022",
                                      "https://github.com/allenai/open-instruct/issues/756"]},
    "EntropyFullyMaskedRow": {"category": "edge", "description": "A row without tokens under token-mean: it "
                              "contributes nothing.",
                              "bugType": "masking",
                              "effect": "A row without tokens counted in the token mean."},
    "EntropyFullyMaskedRowSeqMean": {"category": "edge", "description": "A row without tokens under a sequence-mean "
                                     "aggregation: left out of the mean over rows (verl 0.9.1 agg_loss); an "
                                     "implementation that counts it divides by more rows, so the vector is "
                                     "acceptable.",
                                     "bugType": "masking",
                                     "effect": "A row without tokens counted in the mean over rows divides by more "
                                               "rows."},
    "EntropyZeroCoef": {"category": "edge", "description": "c = 0 (verl 0.9.1 and TRL 1.16.0's default: no bonus): "
                        "loss 0 and gradient 0.",
                        "bugType": "extreme-parameter",
                        "effect": "c = 0 must give loss 0 and gradient 0 exactly."},
    "EntropyNormLength": {"category": "convention", "description": "'seq-mean-token-sum-norm' with a constant L "
                          "(norm_length; verl 0.9.1 loss_scale_factor) in place of the padded T.",
                          "bugType": "normalization",
                          "effect": "The Dr. GRPO constant L replaced by the padded or longest length."},
}
# LowPrecision and InvalidInput are the family's (conformance.generate.ppo).

GROUPS = {
    "entropy-paper": "PPO (arXiv 1707.06347) §5 eq. 9: c₂·S[π_θ](s_t) inside Ê_t, the mean over the batch's time "
                     "steps (token-mean), as the loss −c·mean(H); Table 5 (Atari): c₂ = 0.01. verl 0.9.1 "
                     "workers/utils/losses.py ppo_loss with the default loss_agg_mode token-mean; OpenRLHF 0.11.2 "
                     "(entropy always token-mean); TRL 1.16.0 GRPOTrainer entropy_coef (token mean)",
    "entropy-seq-mean-token-mean": "DeepSeekMath eq. 3's per-sequence token mean (grpo.aggregate "
                                   "'seq-mean-token-mean') applied to the entropy",
    "entropy-verl-seq-mean-token-mean": "verl 0.9.1 ppo_loss with loss_agg_mode 'seq-mean-token-mean': agg_loss "
                                        "divides each row by |o_i| + 1e-8 (mean_eps)",
    "entropy-seq-mean-token-sum": "verl 0.9.1 ppo_loss with loss_agg_mode 'seq-mean-token-sum'",
    "entropy-seq-mean-token-sum-norm": "verl 0.9.1 ppo_loss with loss_agg_mode 'seq-mean-token-sum-norm' (Dr. GRPO "
                                       "§3): the padded T, or loss_scale_factor as norm_length",
    "entropy-invalid": "inputs outside the domain",
}


# 1.7.0, kept out of GROUPS (which the earlier cases are drawn from, group by group)
EVERY_MEAN_GROUPS = {
    "entropy-every-mean-eps": "mean_eps in every masked mean's count (mean_eps_scope='every'), token-mean's batch "
                              "count included: torchtune torchtune/rlhf/rewards.py masked_mean (mask.sum() + 1e-8); "
                              "ε = 1e−8 and 1e−3"}


def conventions(group: str) -> dict:
    if group == "entropy-invalid":
        return {}
    if group == "entropy-paper":
        return {"aggregation": "token-mean", "mean_eps": 0.0}
    if group == "entropy-verl-seq-mean-token-mean":
        return {"aggregation": "seq-mean-token-mean", "mean_eps": 1e-8}
    return {"aggregation": group.removeprefix("entropy-"), "mean_eps": 0.0}


def _case(group, inputs, params, flags, comment, seed, recipe, low=False, result="valid", provenance=None) -> Case:
    return Case(OBJ, inputs, params=params, conventions=conventions(group), group=group, flags=flags,
                comment=comment, low_precision=low, result=result, provenance=provenance or generated(seed, recipe))


def _entropies(r, b, t):
    """Per token H in [0, log V], V drawn per row; about a fifth of the tokens near-deterministic."""
    out = []
    for _ in range(b):
        top = math.log(float(r.choice([2, 64, 32000, 128256])))
        row = r.uniform(0.0, top, t)
        near_zero = r.random(t) < 0.2
        row[near_zero] = r.uniform(0.0, 1e-3, int(near_zero.sum()))
        out.append(row.tolist())
    return out


def _junk(h, mask, value):
    return [[x if on else value for x, on in zip(hr, mr)] for hr, mr in zip(h, mask)]


def _random(group: str, gi: int, i: int) -> Case:
    seed = 31000 + 100 * gi + i
    r = S.rng(seed)
    b = int(r.integers(1, 9))
    t = int(r.choice([1, 3, 8, 16, 32]))
    h = _entropies(r, b, t)
    mask = S.mask(r, b, t)
    if i % 2 == 0:
        h = S.in_dtype(h, "float32")
    params = {"coef": COEFS[i % len(COEFS)]}
    flags = ("EntropyRandom",)
    if group == "entropy-seq-mean-token-sum-norm" and i % 3 == 1:
        params["norm_length"] = 4096.0
        flags += ("EntropyNormLength",)
    if i % 4 == 3:
        h = _junk(h, mask, 1e4)
        flags += ("EntropyMaskedValues",)
    return _case(group, {"entropy": h, "mask": mask}, params, flags,
                 f"random B={b}, T={t}, c = {params['coef']:g}" + (", float32" if i % 2 == 0 else ""), seed,
                 "uniform entropies up to log V, ragged mask")


def _edges(group: str) -> list[Case]:
    flag, result = rows_without_tokens(conventions(group), "EntropyFullyMaskedRow")
    out = [_case(group, {"entropy": [[0.6931471805599453]], "mask": [[1]]}, {}, (), "B = T = 1, H = log 2", 0,
                 "fixed")]
    out.append(_case(group, {"entropy": [[1.5, 0.25, 9.0], [3.0, 3.0, 3.0], [2.0, 9.0, 9.0]],
                             "mask": [[1, 1, 0], [0, 0, 0], [1, 0, 0]]}, {"coef": 0.01},
                     (flag,), "the middle row has no token", 0, "fixed", result=result))
    out.append(_case(group, {"entropy": [[1.25, 0.5], [2.0, 0.0]], "mask": [[1, 1], [1, 0]]}, {"coef": 0.0},
                     ("EntropyZeroCoef",), "c = 0: loss 0, gradient 0", 0, "fixed"))
    return out


# ----------------------------------------------------------------------------- low precision

LOW_CASES = 60            # every fourth on the float16-only grid: 45 judged in bfloat16, 60 in float16


def _low(i: int) -> Case:
    seed, grid = 31500 + i, S.low_grid(i, every=4)
    groups = [g for g in GROUPS if g != "entropy-invalid"]
    group = groups[i % len(groups)]
    r = S.rng(seed)
    b = int(r.integers(1, 9))
    t = int(r.choice([1, 2, 5, 8, 16, 32]))
    mask = S.mask(r, b, t)
    h = _junk(_entropies(r, b, t), mask, S.LOW_MAX / 2)
    params = {"coef": COEFS[i % len(COEFS)]}
    return _case(group, {"entropy": S.in_low(h, grid), "mask": mask}, params,
                 ("EntropyRandom", "EntropyMaskedValues", "LowPrecision"),
                 f"random B={b}, T={t}, c = {params['coef']:g}, entropies exact in {S.grid_note(grid)}", seed,
                 f"uniform entropies rounded to the {grid} grid", low=True)


def cases() -> list[Case]:
    out = [_case("entropy-paper", {"entropy": [[0.5, 1.5], [2.0, 0.0]], "mask": [[1, 1], [1, 0]]}, {"coef": 0.01},
                 (), "three tokens with H = 0.5, 1.5, 2: −0.01·4/3", 0, "fixed",
                 provenance=paper(PPO, "§5 eq. 9 (c₂ = 0.01, Table 5)"))]
    for gi, group in enumerate(g for g in GROUPS if g != "entropy-invalid"):
        out += [_random(group, gi, i) for i in range(12)]
        out += _edges(group)
    out += [_low(i) for i in range(LOW_CASES)]
    ok = {"entropy": [[1.0, 2.0]], "mask": [[1, 1]]}
    bad = [
        ({**ok, "entropy": [[1.0, math.nan]]}, {}, {}, "NaN entropy"),
        ({**ok, "entropy": [[math.inf, 0.5]]}, {}, {}, "+inf entropy"),
        ({**ok, "mask": [[0, 0]]}, {}, {}, "mask selects no token"),
        ({**ok, "mask": [[1, 2]]}, {}, {}, "mask value 2"),
        ({**ok, "mask": [[1]]}, {}, {}, "mask shape differs"),
        ({"entropy": [1.0, 2.0], "mask": [1, 1]}, {}, {}, "rank-1 inputs"),
        (ok, {"coef": True}, {}, "coef given as a truth value"),
        (ok, {"coef": "0.01"}, {}, "coef given as a string"),
        (ok, {"norm_length": 0.0}, {}, "norm_length 0"),
        (ok, {}, {"aggregation": "sum"}, "unknown aggregation"),
        (ok, {}, {"mean_eps": -1e-8}, "negative mean_eps"),
    ]
    for inputs, params, conv, why in bad:
        out.append(Case(OBJ, inputs, params=params, conventions=conv, group="entropy-invalid", result="invalid",
                        flags=("InvalidInput",), comment=why, provenance=generated(0, "fixed")))
    return out + _every_mean_cases()


def _every_mean_cases() -> list[Case]:
    """mean_eps_scope 'every' (1.7.0, after every earlier case): token-mean and seq-mean-token-mean
    with ε = 1e−3 (seen in every dtype) and 1e−8 (float64 only), float64, float32 and the low grids."""
    out = []
    for i in range(16):
        low, seed = i >= 12, 35200 + i
        mode, eps = ("token-mean", "seq-mean-token-mean")[i % 2], (1e-3, 1e-8)[(i // 2) % 2]
        r = S.rng(seed)
        b, t = (4, 8) if low else (int(r.integers(1, 9)), int(r.choice([1, 3, 8, 16])))
        dtype = ("bfloat16", "float16")[i % 2] if low else ("float32" if i % 3 == 1 else None)
        h = _entropies(r, b, t)
        h = S.in_dtype(h, dtype) if low else S.rounded(h, dtype)
        out.append(Case(OBJ, {"entropy": h, "mask": S.mask(r, b, t)}, params={"coef": 0.01, "norm_length": None},
                        conventions={"aggregation": mode, "mean_eps": eps, "mean_eps_scope": "every"},
                        group="entropy-every-mean-eps",
                        flags=("EntropyRandom", "LowPrecision") if low else ("EntropyRandom",), low_precision=low,
                        comment=f"{mode}, ε={eps:g}, B={b}, T={t}"
                                + (f", entropies exact in {dtype}" if dtype else ""),
                        provenance=generated(seed, "uniform entropies in [0, log V], ragged mask")))
    return out


def scale(kwargs, outputs, grads):
    """|c|·Σ_t w_t·|H_t| for the loss and its terms (the careful low-precision model's elements), w_t
    the aggregation weight; |c|·max w_t for the gradient (it is −c·w_t, formed from the counts)."""
    c = abs(mpmath.mpf(kwargs["coef"]))
    mask = kwargs["mask"]
    zeros = [[0.0] * len(row) for row in mask]
    w = exact_grpo.aggregate_vjp(1.0, zeros, mask, mode=kwargs["aggregation"], norm_length=kwargs["norm_length"],
                                 mean_eps=kwargs["mean_eps"],
                                 mean_eps_scope=kwargs.get("mean_eps_scope", "per-row"))["values"]
    terms = [abs(wt) * abs(mpmath.mpf(h)) for wr, hr in zip(w, kwargs["entropy"]) for wt, h in zip(wr, hr) if wt]
    size = c * mpmath.fsum(terms)
    return {"loss": size, "elements:loss": size, "grad:entropy": c * max(abs(v) for v in w.flat)}
