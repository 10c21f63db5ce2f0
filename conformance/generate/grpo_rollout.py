"""Vectors for ``grpo.rollout_correction``: weights for the rollout/training mismatch (truncated IS,
Yao et al. 2025 [tis-blog]; masked IS / IcePop, arXiv 2510.18855, the IcePop objective) as TRL 1.16.0, verl 0.9.1 and
OpenRLHF 0.11.2 compute them.

A group is one library mode (its conventions); the band ``lower``/``upper`` is an argument and
varies inside a group around the library's default. The weights carry no gradient, and they are
continuous in the inputs except where the mask mode keeps or drops a unit: random units keep a
relative distance NEAR (NEAR_LOW in bfloat16/float16) from the band's edges, so that no decision is
made by rounding; the edge cases put units exactly on an edge (ratio exp(0) = 1 with a bound 1).
"""
from __future__ import annotations

import math

from lossproof.conformance import catalog
from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.build import uid_of
from lossproof.conformance.generate.case import Case, generated
from lossproof.conformance.generate.grpo_inputs import ROLLOUT

NEAR = 1e-4
TRL = "TRL 1.16.0 trainer/grpo_trainer.py _generate_and_score_completions (vllm_importance_sampling_mode="
VERL = "verl 0.9.1 trainer/ppo/rollout_corr_helper.py"
ORLHF = "OpenRLHF 0.11.2 models/loss.py PolicyLoss.forward"


def _conv(level="token", mode="truncate", seq="sum", kept="ratio", clamp=None):
    return {"level": level, "correction": mode, "seq_log_ratio": seq, "kept_weight": kept, "log_ratio_clamp": clamp}


# group -> (conventions, default band (lower, upper), alternative bands drawn inside the group)
GROUP_SPECS = {
    "tis": (_conv(), (None, 2.0), [(None, 1.5), (None, 5.0)]),
    "icepop": (_conv(mode="mask"), (0.5, 5.0), [(0.8, 1.25), (0.5, 2.0)]),
    "trl-1.16-token_truncate": (_conv(), (None, 3.0), [(0.5, 3.0), (None, 10.0)]),
    "trl-1.16-token_mask": (_conv(mode="mask"), (None, 3.0), [(0.5, 3.0), (0.25, None)]),
    "trl-1.16-sequence_truncate": (_conv(level="sequence"), (None, 3.0), [(0.5, 3.0), (None, 10.0)]),
    "trl-1.16-sequence_mask": (_conv(level="sequence", mode="mask"), (None, 3.0), [(0.5, 3.0), (0.2, None)]),
    "verl-0.9.1-token-tis": (_conv(clamp=20.0), (None, 2.0), [(None, 5.0)]),
    "verl-0.9.1-sequence-tis": (_conv(level="sequence", clamp=20.0), (None, 2.0), [(None, 5.0)]),
    "verl-0.9.1-token-icepop": (_conv(mode="mask", clamp=20.0), (0.5, 5.0), [(0.8, 1.25)]),
    "verl-0.9.1-sequence-icepop": (_conv(level="sequence", mode="mask", clamp=20.0), (0.5, 5.0), [(0.8, 1.25)]),
    "rejection-token": (_conv(mode="mask", kept="one", clamp=20.0), (0.5, 2.0), [(0.8, 1.25)]),
    "rejection-sequence-mean": (_conv(level="sequence", mode="mask", seq="mean", kept="one", clamp=20.0),
                                (0.5, 2.0), [(0.8, 1.25)]),
    "openrlhf-0.11.2-token-mask": (_conv(mode="mask"), (0.5, 5.0), [(0.0, 2.0)]),
    "openrlhf-0.11.2-token-clip": (_conv(), (0.5, 5.0), [(0.0, 2.0)]),
    "openrlhf-0.11.2-seq-mask": (_conv(level="sequence", mode="mask", seq="mean", kept="token-ratio"), (0.5, 5.0),
                                 [(0.8, 1.25), (0.0, 2.0)]),
}

GROUPS = {
    "tis": "Truncated importance sampling, Yao et al. 2025 [tis-blog]: per token min(π_old/π_rollout, C); "
           "C = 2 (verl 0.9.1's default threshold; the blog's own C is not verified in our sources)",
    "icepop": "IcePop, Ring-1T (arXiv 2510.18855), the IcePop objective: M(k) = k for k = π_train/π_infer ∈ [α, β], else 0, per "
              "token; [α, β] = [0.5, 5] (OpenRLHF 0.11.2's default band; the paper's values not verified)",
    "trl-1.16-token_truncate": TRL + "'token_truncate'): exp(d_t) clamped to [clip_min, clip_max] (clip_max "
                               "3.0, clip_min None); no log-ratio clamp",
    "trl-1.16-token_mask": TRL + "'token_mask'): exp(d_t), 0 outside [clip_min, clip_max] (closed)",
    "trl-1.16-sequence_truncate": TRL + "'sequence_truncate'): exp(Σ_t d_t) per row, clamped, broadcast",
    "trl-1.16-sequence_mask": TRL + "'sequence_mask', the default): exp(Σ_t d_t) per row, 0 outside "
                              "[clip_min, clip_max]",
    "verl-0.9.1-token-tis": VERL + " compute_rollout_correction_weights rollout_is='token', a float "
                            "threshold: exp(clamp(d_t, ±20)) clamped to max threshold (default 2.0)",
    "verl-0.9.1-sequence-tis": VERL + " compute_rollout_correction_weights rollout_is='sequence': "
                               "exp(clamp(Σ_t d_t, ±20)), clamped to max threshold, broadcast",
    "verl-0.9.1-token-icepop": VERL + " compute_rollout_correction_weights rollout_is='token', threshold "
                               "'lower_upper' (IcePop): exp(clamp(d_t, ±20)), 0 outside [lower, upper]",
    "verl-0.9.1-sequence-icepop": VERL + " compute_rollout_correction_weights rollout_is='sequence', threshold "
                                  "'lower_upper': exp(clamp(Σ_t d_t, ±20)), 0 outside [lower, upper]",
    "rejection-token": "Rejection mask per token (weight 1 inside [lower, upper], 0 outside): " + VERL +
                       " compute_rollout_rejection_mask 'token_k1' with a symmetric band (lower = 1/upper; its "
                       "band bounds π_rollout/π_old; its ±20 clamp of the log-ratio)",
    "rejection-sequence-mean": "Rejection mask per sequence on the geometric-mean ratio exp(mean_t d_t): " + VERL +
                               " compute_rollout_rejection_mask 'seq_mean_k1' (symmetric band and clamp, as above)",
    "openrlhf-0.11.2-token-mask": ORLHF + " is_correction_level='token', mode 'mask', gating 'ratio' "
                                  "(ICEPOP; default band [0.5, 5.0]; one value v gives [0, v]); no clamp",
    "openrlhf-0.11.2-token-clip": ORLHF + " is_correction_level='token', mode 'clip': clamp(exp(d_t), low, high)",
    "openrlhf-0.11.2-seq-mask": ORLHF + " is_correction_level='seq', mode 'mask', gating 'ratio': a row is kept "
                                "when exp(mean_t d_t) ∈ [low, high]; kept tokens carry their own exp(d_t)",
    "invalid": "inputs outside the domain (all conventions)",
}

NOTES = {
    "RolloutRandom": {"category": "random", "description": "Random trainer log-probabilities (B ≤ 8, T ≤ 48, "
                      "ragged right-padded masks) and rollout log-probabilities drawn near them (log-ratio spread "
                      "0.02 to 1); half the cases rounded to float32. In the mask mode every unit keeps a relative "
                      "distance 1e-4 from the band's edges.",
                      "bugType": "formula",
                      "effect": "A wrong importance weight (level, correction or kept weight) between trainer and "
                                "rollout log-probabilities."},
    "RolloutEdgeOfBand": {"category": "edge", "description": "Units exactly on a bound: tokens with old_logp = "
                          "rollout_logp (ratio exp(0) = 1) and rows whose log-ratios cancel exactly (Σ_t d_t = 0), "
                          "with a bound 1: the band is closed, so they are kept (truncation leaves them at 1).",
                          "bugType": "clamp",
                          "effect": "Ratios exactly on a bound: truncation or masking applied with the wrong "
                                    "closedness."},
    "RolloutHugeLogRatio": {"category": "numerics", "description": "Log-ratios of ±50 to ±800 per token and sums "
                            "of several hundred per row: exp overflows binary64 beyond 709.8; truncation gives the "
                            "bound, the mask drops the unit, a ±20 clamp gives e^±20.",
                            "bugType": "overflow",
                            "effect": "exp of summed log-ratios overflows beyond 709.8; truncation must give the "
                                      "bound, not inf or NaN."},
    "RolloutEmptyRows": {"category": "edge", "description": "Rows without valid tokens: "
                         "their weights and keep are 0; no 0/0 in a sequence mean (a mask with no token at all is "
                         "rejected, as for every masked objective).",
                         "bugType": "masking",
                         "effect": "Rows without valid tokens give 0/0 in a sequence mean unless left out."},
    "RolloutPadding": {"category": "edge", "description": "Padding positions hold log-ratios of ±1000: they must not "
                       "reach a row's sum or mean, and their weight is 0.",
                       "bugType": "masking",
                       "effect": "Padding log-ratios of ±1000 leaking into a row's sum overflow the sequence ratio."},
    "RolloutOnPolicy": {"category": "edge", "description": "rollout_logp = old_logp: every valid weight is 1 "
                        "(the correction must vanish when the engines agree).",
                        "bugType": "degenerate-input",
                        "effect": "Equal engines must give weight 1 everywhere: any other value is a spurious "
                                  "correction."},
    "RolloutSingleToken": {"category": "edge", "description": "T = 1: the sequence ratio is the token ratio.",
                           "bugType": "degenerate-input",
                           "effect": "T = 1: a sequence ratio must equal the token ratio; a length miscount shows "
                                     "here."},
    "RolloutLowPrecision": {"category": "edge", "description": "Inputs exactly representable in bfloat16 or float16, "
                            "judged in those dtypes; units keep 2^−5 (relative) from the band's edges.",
                            "bugType": "precision",
                            "effect": "Weights computed in bfloat16/float16 drift from the exact truncation or mask "
                                      "decisions."},
    "InvalidCorrection": {"category": "invalid", "description": "Band or convention outside the domain (lower > "
                          "upper, both bounds None, upper ≤ 0, lower < 0, log_ratio_clamp ≤ 0, unknown level, correction, "
                          "seq_log_ratio or kept_weight), shapes that disagree, rank-1 inputs, masks that are not "
                          "0/1 or select no token, NaN or infinite log-probabilities; must be rejected.",
                          "bugType": "input-validation",
                          "effect": "A band or convention outside the domain is accepted and weights tokens "
                                    "arbitrarily."},
}

LENGTHS = [1, 2, 3, 5, 8, 12, 16, 24, 32, 48]
SPREADS = [0.02, 0.1, 0.3, 0.6, 1.0]


def _units(old, roll, mask, conv):
    """The unit log-ratios (float64 approximations) that the mask mode decides on."""
    out = []
    for o, r, m in zip(old, roll, mask):
        d = [a - b for a, b, on in zip(o, r, m) if on]
        if not d:
            continue
        if conv["level"] == "token":
            out.extend(d)
        else:
            out.append(sum(d) if conv["seq_log_ratio"] == "sum" else sum(d) / len(d))
    return out


def _near_edge(units, lower, upper, margin) -> bool:
    edges = [math.log(b) for b in (lower, upper) if b]
    return any(abs(u - e) < margin for u in units for e in edges)


def _case(group, inputs, band, flags, comment, seed, recipe, result="valid", low=False, conv=None):
    lower, upper = band
    return Case(ROLLOUT, inputs, params={"lower": lower, "upper": upper},
                conventions=conv if conv is not None else GROUP_SPECS[group][0], group=group, flags=flags,
                comment=comment, result=result, low_precision=low, provenance=generated(seed, recipe))


def _random(group, gi, i, dtype=None, flags=("RolloutRandom",)):
    conv, default, others = GROUP_SPECS[group]
    band = default if i % 3 != 2 else others[(i // 3) % len(others)]
    margin = (S.NEAR_LOW if dtype in S.LOW_GRIDS else NEAR) if conv["correction"] == "mask" else 0.0
    for attempt in range(100):
        seed = 31000 + 1000 * gi + 10 * i + attempt * 100000
        r = S.rng(seed)
        b = int(r.integers(1, 9))
        t = int(r.choice(LENGTHS))
        spread = float(r.choice(SPREADS)) / (math.sqrt(t) if conv["level"] == "sequence" else 1.0)
        old = S.rounded(S.logprobs(r, (b, t)), dtype)
        roll = S.rounded(S.logprobs_near(r, old, spread), dtype)
        mask = S.mask(r, b, t)
        if not margin or not _near_edge(_units(old, roll, mask, conv), *band, margin):
            break
    else:
        raise AssertionError(f"{group}: no random draw keeps off the band's edges")
    return _case(group, {"old_logp": old, "rollout_logp": roll, "mask": mask}, band, flags,
                 f"random B={b}, T={t}, log-ratio spread {spread:.3g}, band {band}" + (f", {dtype}" if dtype else ""),
                 seed, "logprobs; rollout = old + normal offset; ragged mask", low=dtype in S.LOW_GRIDS)


def _edge_cases(group, conv, default) -> list[Case]:
    out = []
    lo, hi = default
    # exactly on the band: d = 0 tokens and rows whose log-ratios cancel, with a bound 1
    old = [[-0.5, -1.25, -2.0, -0.75], [-1.0, -0.5, -3.0, -0.25]]
    roll = [[-0.5, -0.75, -2.5, -0.75], [-1.0, -0.5, -3.0, -0.25]]   # row 0: d = 0, −0.5, +0.5, 0
    mask = [[1, 1, 1, 1], [1, 1, 1, 0]]
    for band in ((lo if lo is not None and lo <= 1 else None, 1.0), (1.0, hi if hi is not None and hi > 1 else None)):
        out.append(_case(group, {"old_logp": old, "rollout_logp": roll, "mask": mask}, band, ("RolloutEdgeOfBand",),
                         f"ratios exactly 1 (exp 0) and cancelling rows on a bound of {band}", 0, "fixed"))
    # huge log-ratios: ±50 … ±800 per token; rows summing to several hundred
    old = [[-0.01, -800.0, -0.5, -60.0], [-0.02, -0.03, -0.04, -0.05], [-300.0, -0.1, -0.1, -0.1]]
    roll = [[-800.0, -0.01, -50.5, -0.5], [-200.0, -300.0, -250.0, -0.06], [-0.1, -0.2, -0.3, -0.4]]
    out.append(_case(group, {"old_logp": old, "rollout_logp": roll, "mask": [[1] * 4] * 3}, default,
                     ("RolloutHugeLogRatio",), "log-ratios ±50 to ±800; a row summing to +750", 0, "fixed"))
    # rows without tokens, and a mask with no token at all
    r = S.rng(31999)
    old = S.logprobs(r, (4, 6))
    roll = S.logprobs_near(r, old, 0.05)
    out.append(_case(group, {"old_logp": old, "rollout_logp": roll,
                             "mask": [[1, 1, 0, 0, 0, 0], [0] * 6, [1] * 6, [0] * 6]}, default, ("RolloutEmptyRows",),
                     "rows 1 and 3 without tokens", 31999, "logprobs; rollout = old + N(0, 0.05)"))
    # padding holding huge log-ratios; on-policy; a single token
    out.append(_case(group, {"old_logp": [[-0.25, -0.5, 0.0, 0.0], [-1.0, 0.0, 0.0, 0.0]],
                             "rollout_logp": [[-0.5, -0.25, -1000.0, -1000.0], [-0.9, -1000.0, 1000.0, -1000.0]],
                             "mask": [[1, 1, 0, 0], [1, 0, 0, 0]]}, default, ("RolloutPadding",),
                     "padding log-ratios ±1000", 0, "fixed"))
    out.append(_case(group, {"old_logp": old, "rollout_logp": old, "mask": [[1] * 6, [1, 1, 1, 0, 0, 0], [1] * 6,
                                                                            [1, 0, 0, 0, 0, 0]]},
                     default, ("RolloutOnPolicy",), "rollout_logp = old_logp", 31999, "logprobs"))
    out.append(_case(group, {"old_logp": [[-0.5], [-2.0], [-0.125]], "rollout_logp": [[-1.5], [-1.875], [-0.125]],
                             "mask": [[1], [1], [1]]}, default, ("RolloutSingleToken",), "T = 1", 0, "fixed"))
    return out


def _invalid() -> list[Case]:
    ok = {"old_logp": [[-0.5, -1.0]], "rollout_logp": [[-0.75, -1.0]], "mask": [[1, 1]]}
    rows = [
        ({}, {"lower": 3.0, "upper": 2.0}, {}, "lower > upper"),
        ({}, {"lower": None, "upper": None}, {}, "no bound at all"),
        ({}, {"upper": 0.0}, {}, "upper = 0"),
        ({}, {"upper": -1.0}, {}, "upper < 0"),
        ({}, {"lower": -0.5}, {}, "lower < 0"),
        ({}, {"upper": True}, {}, "upper given as a truth value"),
        ({}, {}, {"log_ratio_clamp": 0.0}, "log_ratio_clamp = 0"),
        ({}, {}, {"level": "batch"}, "unknown level"),
        ({}, {}, {"correction": "clip"}, "unknown correction (OpenRLHF's 'clip' is 'truncate')"),
        ({}, {}, {"seq_log_ratio": "max"}, "unknown seq_log_ratio"),
        ({}, {}, {"kept_weight": "zero"}, "unknown kept_weight"),
        ({"rollout_logp": [[-0.75, -1.0, -2.0]]}, {}, {}, "shapes disagree"),
        ({"old_logp": [-0.5, -1.0], "rollout_logp": [-0.75, -1.0], "mask": [1, 1]}, {}, {}, "rank-1 inputs"),
        ({"mask": [[1, 2]]}, {}, {}, "mask not 0/1"),
        ({"mask": [[0, 0]]}, {}, {}, "mask selects no token"),
        ({"old_logp": [[-0.5, math.nan]]}, {}, {}, "NaN old_logp"),
        ({"rollout_logp": [[-math.inf, -1.0]]}, {}, {}, "-inf rollout_logp (ratio +inf)"),
        ({"old_logp": [[-math.inf, -1.0]]}, {}, {}, "-inf old_logp"),
    ]
    out = []
    for inputs, params, conv, why in rows:
        band = {"lower": None, "upper": 2.0, **params}
        c = Case(ROLLOUT, {**ok, **inputs}, params=band, conventions={**_conv(), **conv}, group="invalid",
                 result="invalid", flags=("InvalidCorrection",), comment=why, provenance=generated(0, "fixed"))
        out.append(c)
    return out


def cases() -> list[Case]:
    out, seen = [], set()
    for gi, (group, (conv, default, _)) in enumerate(GROUP_SPECS.items()):
        n = 10 if group in ("tis", "openrlhf-0.11.2-seq-mask", "rejection-token", "rejection-sequence-mean") else 6
        out += [_random(group, gi, i, dtype="float32" if i % 2 else None) for i in range(n)]
        out += [_random(group, gi, 50 + i, dtype=S.low_grid(i), flags=("RolloutLowPrecision",)) for i in range(4)]
        for case in _edge_cases(group, conv, default):
            # groups that share conventions (IcePop and OpenRLHF's token mask) share edge cases: keep the first
            key = uid_of(catalog.get(ROLLOUT), case)
            if key not in seen:
                seen.add(key)
                out.append(case)
    return out + _invalid()

