"""Vectors for ``proximal_kl.future_cost`` and ``proximal_kl.loss`` (Proximal KL, Bai, Yao, Zhang,
as summarised in [proximal-kl-summary]; FRPO arXiv 2601.10201).

The paper's text is not public in our sources and no library implements the method yet, so the
groups are the reconstruction's conventions (DESIGN §4): the paper defaults (unbounded future
cost, no ratio cap or clip, token mean) and each way the summary's "costo limitado" and the
practical update can bound or aggregate it. A group name labels one convention set, so each
value of a bound is its own group. ``beta`` is an argument and varies inside a group.
"""
from __future__ import annotations

import math

import mpmath

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated, rows_without_tokens
from lossproof.conformance.generate.grpo_scales import aggregation_weights

FC, LOSS = "proximal_kl.future_cost", "proximal_kl.loss"
NEAR = 1e-4   # random tokens keep this relative distance from the ratio cap and the clip band's edges
SUMMARY = "Proximal KL summary [proximal-kl-summary]"

NOTES = {
    "Random": {"category": "random", "description": "Random per-token log-probabilities with ragged right-padded "
               "masks (B ≤ 16, T ≤ 64; a few T = 128 or 256), behaviour and reference log-probabilities drawn "
               "near the policy's, advantages N(0, 1) per row, β among 0.01, 0.04, 0.1, 0.5, 1; half the cases "
               "rounded to float32. Tokens stay 1e-4 (relative) away from the ratio cap and the clip band's "
               "edges, so that no branch is decided by rounding.",
               "bugType": "formula",
               "links": ["https://github.com/tristandeleu/pytorch-maml-rl/issues/24",
                         "https://github.com/THUDM/slime/pull/179",
                         "https://github.com/huggingface/trl/issues/2769",
                         "https://github.com/verl-project/verl/pull/2953"]},
    "Large": {"category": "random", "description": "A large random case (B = 16, T = 256, or B = 8, T = 128): "
              "the future cost sums up to 255 later tokens.",
              "bugType": "precision",
              "effect": "An accumulation that loses accuracy with the reduction length (naive sums, low-precision "
                        "partial sums) drifts at realistic sizes."},
    "FullyMaskedRow": {"category": "edge", "description": "Rows with no token: their future cost is 0; under the "
                       "token mean they contribute nothing (and, for the cost, F_t = 0 along the row).",
                       "bugType": "masking",
                       "effect": "A row without tokens counted in a token mean changes the denominator or gives 0/0 "
                                 "= NaN.",
                       "links": ["https://github.com/NovaSky-AI/SkyRL/pull/462",
                                 "https://github.com/Tencent-Hunyuan/UniRL/pull/409"]},
    "FullyMaskedRowSeqMean": {"category": "acceptable", "description": "Rows with no token under a sequence-mean "
                              "aggregation: the exact reference (as grpo.aggregate, verl 0.9.1 agg_loss) leaves "
                              "them out of the mean over rows; an implementation that counts them as zero-loss "
                              "sequences (divides by B, as TRL 1.16.0 does for GRPO) is accepted.",
                              "bugType": "masking",
                              "effect": "A row without tokens counted in the mean over rows divides by more rows "
                                        "(or gives 0/0 = NaN)."},
    "SingleToken": {"category": "edge", "description": "One token in the whole batch (T = 1, or a single unmasked "
                    "position): F = 0 there, so ℓ = −ρ·(A − β·k).",
                    "bugType": "degenerate-input",
                    "effect": "A single token or class is a 0/0 or empty reduction for careless code: NaN or a "
                              "wrong count."},
    "ExtremeRatio": {"category": "numerics", "description": "log ρ = logp − behavior_logp = ±50 (ratios e^±50) "
                     "and log-probabilities near log(1e−300), with a moderate KL: ρ·X must be formed without "
                     "overflow or loss of the small ratios.",
                     "bugType": "overflow",
                     "effect": "exp of a large log-ratio overflows to inf; inf·0 on an inactive branch turns the "
                               "loss or gradient into NaN."},
    "ExtremeLogprob": {"category": "numerics", "description": "Log-probabilities near log(1e−300) and per-token "
                       "KL terms k = ±50: the future cost sums large terms exactly as given.",
                       "bugType": "overflow",
                       "effect": "Log-probabilities near log(1e−300) and KL terms of ±50: the future cost must sum "
                                 "them exactly."},
    "BetaExtreme": {"category": "edge", "description": "β = 1e−6 (the KL terms barely enter) or β = 10 and 100 "
                    "(the KL terms dominate the advantage).",
                    "bugType": "extreme-parameter",
                    "effect": "β near 0 or large: a KL term dropped or dominating through a wrong coefficient."},
    "FutureCancellation": {"category": "numerics", "description": "Later KL terms that cancel: F_t = 0 exactly "
                           "or of order 2^−40 (binary64) / 2^−20 (float32) while its terms are of order 1; "
                           "judged against the size of the terms (Σ |logp| + |ref_logp| over the later tokens).",
                           "bugType": "cancellation",
                           "effect": "Later KL terms that cancel: F_t formed with a cumulative sum in the wrong "
                                     "order loses its digits."},
    "CoefficientCancellation": {"category": "numerics", "description": "A = β·(k_t + F_t) up to rounding at "
                                "some tokens: the coefficient X_t = A − β·(k_t + F_t) is tiny and formed from "
                                "terms of order 1; judged against the size of its terms.",
                                "bugType": "cancellation",
                                "effect": "A − β(k + F) tiny from terms of order 1: the coefficient must be formed "
                                          "from the exact terms."},
    "FutureClipActive": {"category": "convention", "description": "Future costs beyond ±c with a future clip c: "
                         "F_t is replaced by ±c (the clip changes the detached coefficient only).",
                         "bugType": "clamp",
                         "effect": "The future-cost clip missing or applied to the gradient instead of the detached "
                                   "coefficient."},
    "OnPolicy": {"category": "edge", "description": "behavior_logp = logp (ρ = 1 exactly): the update is "
                 "−(A − β·(k_t + F_t))·∇log π, the on-policy policy gradient of E[r] − β·KL.",
                 "bugType": "degenerate-input",
                 "effect": "ρ = 1: the update must be the on-policy gradient; a stray ratio term shows here."},
    "MaskHoles": {"category": "edge", "description": "Masks with interior zeros (e.g. tool output inside a "
                  "response): masked positions are skipped by F_t = Σ_{u>t} m_u·k_u and by the aggregate, and "
                  "hold large KL terms (|k| ≈ 20) that must not leak in.",
                  "bugType": "masking",
                  "effect": "Masked interior positions included in the future cost or the aggregate."},
    "MaskHolesCost": {"category": "acceptable", "description": "Masks with interior zeros: the catalog defines "
                      "F_t = Σ_{u>t} m_u·k_u at every position, masked or not, and the exact reference returns "
                      "it there too; an implementation that returns 0 at masked positions (where F is never "
                      "used) is accepted. Unmasked positions must match either way.",
                      "bugType": "masking",
                      "effect": "The cost at masked positions is implementation-defined; the value at valid "
                                "positions is not."},
    "MaskedPadding": {"category": "edge", "description": "Padding positions hold logp = 0 and behaviour / "
                      "reference log-probabilities −30 (ρ = e^30, k = 30 there): they must not reach F, the "
                      "loss or its gradient.",
                      "bugType": "masking",
                      "effect": "Padding with ρ = e^30 leaking into the future cost, the loss or its gradient."},
    "TrailingPadding": {"category": "edge", "description": "Every row at most half the padded length T (padding "
                        "to a fixed length such as max_completion_length): 'seq-mean-token-sum-norm' divides by T, "
                        "not by the longest row.",
                        "bugType": "normalization",
                        "effect": "'seq-mean-token-sum-norm' divided by the longest row instead of the padded "
                                  "length T."},
    "BoundaryUlps": {"category": "acceptable", "description": "Ratios within a few ulps of the ratio cap C or of "
                     "1 ± ε: the value is continuous there and must match, but whether the gradient is ρ·X or 0 "
                     "is decided by rounding; either gradient is accepted.",
                     "bugType": "clamp",
                     "effect": "Which branch is active within ulps of a clip bound is decided by rounding: the "
                               "value must still match."},
    "LowPrecision": {"category": "edge", "description": "Inputs exactly representable in bfloat16 or float16 "
                     "(or both: bfloat16 values inside float16's range), judged in those dtypes; random sizes "
                     "up to T = 256 (B·T ≤ 512, one 8 × 256), every convention group, ratios 2^−5 (relative) "
                     "away from the cap and the clip band; see conformance/compare.py for the careful tolerance "
                     "model.",
                     "bugType": "precision"},
    "ZeroVarianceGroup": {"category": "edge", "description": "Rows whose advantage is exactly 0 (a group whose "
                          "rewards are all equal): the coefficient is −β·(k_t + F_t) alone.",
                          "bugType": "degenerate-input",
                          "effect": "Rows whose advantage is exactly 0 must drop the policy term but keep the KL "
                                    "term; a shortcut drops both."},
    "InvalidInput": {"category": "invalid", "description": "Input or parameter outside the objective's domain "
                     "(window < 1 or not an integer, clip ≤ 0, ratio_cap ≤ 0, ratio_clip outside (0, 1), β ≤ 0, "
                     "unknown aggregation, shapes that disagree, masks that are not 0/1 or select no token, "
                     "NaN/inf inputs); must be rejected.",
                     "bugType": "input-validation"},
}

# future_cost: name -> (clip, window)
FC_GROUPS = {
    "paper": (None, None),
    "future-clip-0.5": (0.5, None),
    "future-clip-2": (2.0, None),
    "future-clip-10": (10.0, None),
    "future-window-1": (None, 1),
    "future-window-4": (None, 4),
    "future-window-16": (None, 16),
    "future-clip-2-window-8": (2.0, 8),
}


def _lc(ratio_clip=None, ratio_cap=None, future_clip=None, future_window=None, aggregation="token-mean"):
    return {"ratio_clip": ratio_clip, "ratio_cap": ratio_cap, "future_clip": future_clip,
            "future_window": future_window, "aggregation": aggregation}


LOSS_GROUPS = {
    "paper": _lc(),
    "future-clip-0.5": _lc(future_clip=0.5),
    "future-clip-2": _lc(future_clip=2.0),
    "future-clip-10": _lc(future_clip=10.0),
    "future-window-1": _lc(future_window=1),
    "future-window-4": _lc(future_window=4),
    "future-window-16": _lc(future_window=16),
    "ratio-cap-1": _lc(ratio_cap=1.0),
    "ratio-cap-2": _lc(ratio_cap=2.0),
    "ratio-cap-5": _lc(ratio_cap=5.0),
    "ratio-clip-0.1": _lc(ratio_clip=0.1),
    "ratio-clip-0.2": _lc(ratio_clip=0.2),
    "seq-mean-token-mean": _lc(aggregation="seq-mean-token-mean"),
    "seq-mean-token-sum": _lc(aggregation="seq-mean-token-sum"),
    "seq-mean-token-sum-norm": _lc(aggregation="seq-mean-token-sum-norm"),
    "bounded": _lc(ratio_cap=2.0, future_clip=1.0, future_window=8),
    "clipped-bounded-seq-mean": _lc(ratio_clip=0.2, ratio_cap=3.0, future_clip=5.0,
                                    aggregation="seq-mean-token-mean"),
}

_RECON = "reconstruction (no public code or text of the paper)"
GROUPS = {
    "paper": "Paper defaults: " + SUMMARY + " and FRPO arXiv 2601.10201 — unbounded future cost F_t = Σ_{u>t} k_u, "
             "no ratio cap or clip, token mean over the minibatch ('promedios de tokens por minibatch')",
    "future-clip-0.5": "F_t clipped to [−0.5, 0.5]: the summary's bounded future cost ('un costo limitado'), " + _RECON,
    "future-clip-2": "F_t clipped to [−2, 2]: the summary's bounded future cost, " + _RECON,
    "future-clip-10": "F_t clipped to [−10, 10]: the summary's bounded future cost, " + _RECON,
    "future-window-1": "F_t over the next token only: the summary's truncated future cost ('limita o trunca los "
                       "costos'), " + _RECON,
    "future-window-4": "F_t over the next 4 tokens: the summary's truncated future cost, " + _RECON,
    "future-window-16": "F_t over the next 16 tokens: the summary's truncated future cost, " + _RECON,
    "future-clip-2-window-8": "F_t over the next 8 tokens, then clipped to [−2, 2] (both bounds), " + _RECON,
    "ratio-cap-1": "ρ_t replaced by min(ρ_t, 1) (IMPALA/V-trace truncation ρ̄ = 1; zero gradient where capped, "
                   "as torch.clamp), " + _RECON,
    "ratio-cap-2": "ρ_t replaced by min(ρ_t, 2) (truncated importance weight, torch.clamp semantics), " + _RECON,
    "ratio-cap-5": "ρ_t replaced by min(ρ_t, 5) (truncated importance weight, torch.clamp semantics), " + _RECON,
    "ratio-clip-0.1": "PPO's pessimistic clip with ε = 0.1 on ρ_t·X_t (PPO eq. 7 with A → X_t), " + _RECON,
    "ratio-clip-0.2": "PPO's pessimistic clip with ε = 0.2 on ρ_t·X_t (PPO eq. 7 with A → X_t), " + _RECON,
    "seq-mean-token-mean": "aggregation 'seq-mean-token-mean' (grpo.aggregate: DeepSeekMath eq. 3; rows without "
                           "tokens leave the mean)",
    "seq-mean-token-sum": "aggregation 'seq-mean-token-sum' (grpo.aggregate; verl 0.9.1 agg_loss)",
    "seq-mean-token-sum-norm": "aggregation 'seq-mean-token-sum-norm' with the padded length T as the constant "
                               "normaliser (Dr. GRPO §3; the catalog gives this objective no norm_length)",
    "bounded": "ratio cap 2, future cost over the next 8 tokens clipped to [−1, 1], token mean: every bound of the "
               "practical update at once, " + _RECON,
    "clipped-bounded-seq-mean": "ratio cap 3 then PPO clip ε = 0.2, future cost clipped to [−5, 5], "
                                "seq-mean-token-mean, " + _RECON,
    "invalid": "inputs outside the domain (all conventions)",
}

BETAS = [0.01, 0.04, 0.1, 0.5, 1.0]
LENGTHS = [1, 2, 3, 5, 8, 12, 16, 24, 32, 48, 64]


# ============================================================================ future cost

def _fc_case(group, inputs, flags, comment, seed, recipe, result="valid", low=False):
    clip, window = FC_GROUPS[group]
    return Case(FC, inputs, conventions={"clip": clip, "window": window}, group=group, flags=flags,
                comment=comment, result=result, low_precision=low, provenance=generated(seed, recipe))


def _random_fc(group, gi, i, b=None, t=None, dtype=None, flags=("Random",)):
    seed = 12000 + 100 * gi + i
    r = S.rng(seed)
    b = b or int(r.integers(1, 17))
    t = t or int(r.choice(LENGTHS))
    spread = float(r.choice([0.05, 0.3, 1.0, 2.0]))
    lp = S.rounded(S.logprobs(r, (b, t)), dtype)
    ref = S.rounded(S.logprobs_near(r, lp, spread), dtype)
    mask = S.mask(r, b, t)
    return _fc_case(group, {"logp": lp, "ref_logp": ref, "mask": mask}, flags,
                    f"random B={b}, T={t}, |k| spread {spread:g}" + (f", {dtype}" if dtype else ""), seed,
                    "logprobs; ref = logp + normal offset; ragged mask")


def _fc_cases() -> list[Case]:
    out = []
    for gi, group in enumerate(FC_GROUPS):
        clip, _ = FC_GROUPS[group]
        n_random = 16 if group == "paper" else 6
        for i in range(n_random):
            out.append(_random_fc(group, gi, i, dtype="float32" if i % 2 == 0 else None))
        if group in ("paper", "future-window-16", "future-clip-2-window-8"):
            big = (16, 256) if group == "paper" else (8, 128)
            out.append(_random_fc(group, gi, 50, b=big[0], t=big[1], flags=("Random", "Large")))
        dtype = ("bfloat16", "float16")[gi % 2]
        for k, dt in enumerate([dtype] + (["float16" if dtype == "bfloat16" else "bfloat16"]
                                          if group == "paper" else [])):
            seed = 12900 + 10 * gi + k
            r = S.rng(seed)
            lp = S.in_dtype(S.logprobs(r, (4, 12)), dt)
            ref = S.in_dtype(S.logprobs_near(r, lp, 0.5), dt)
            out.append(_fc_case(group, {"logp": lp, "ref_logp": ref, "mask": S.mask(r, 4, 12)},
                                ("LowPrecision",), f"inputs exact in {dt}", seed, f"logprobs rounded to {dt}",
                                low=True))
        if clip is not None:
            # k = ±(c·0.75): sums over two or more later tokens pass ±c (both signs), one does not.
            kk = 0.75 * clip
            lp = [[-1.0, -2.0, -0.5, -3.0, -1.5], [-0.25, -4.0, -2.5, -1.0, -0.75]]
            ref = [[-1.0 - kk, -2.0 - kk, -0.5 - kk, -3.0 - kk, -1.5 - kk],
                   [-0.25 + kk, -4.0 + kk, -2.5 + kk, -1.0 + kk, -0.75 + kk]]
            out.append(_fc_case(group, {"logp": lp, "ref_logp": ref, "mask": [[1] * 5, [1, 1, 1, 1, 0]]},
                                ("FutureClipActive",), f"k = ±{kk:g} on every token: F passes ±{clip:g}", 0,
                                "fixed"))
    # Edge and numerics cases under the paper's conventions (and one bounded group).
    for group in ("paper", "future-window-4", "future-clip-2"):
        seed = 12800 + list(FC_GROUPS).index(group)
        r = S.rng(seed)
        lp = S.logprobs(r, (5, 7))
        ref = S.logprobs_near(r, lp, 0.5)
        out.append(_fc_case(group, {"logp": lp, "ref_logp": ref,
                                    "mask": S.with_empty_rows(S.mask(r, 5, 7), [0, 3])},
                            ("FullyMaskedRow",), "rows 0 and 3 without tokens", seed,
                            "logprobs; ragged mask with emptied rows"))
        out.append(_fc_case(group, {"logp": [[-0.75]], "ref_logp": [[-2.0]], "mask": [[1]]}, ("SingleToken",),
                            "B = T = 1: F = 0", 0, "fixed"))
        out.append(_fc_case(group, {"logp": [[-0.5, -1.0, -2.0], [-3.0, -0.25, -1.5]],
                                    "ref_logp": [[-1.5, -0.75, -2.5], [-1.0, -0.5, -4.0]],
                                    "mask": [[0, 0, 0], [0, 1, 0]]}, ("SingleToken",),
                            "one unmasked token in the batch", 0, "fixed"))
    # Large terms: log-probabilities near log(1e−300), k = ±50.
    for group in ("paper", "future-clip-10", "future-window-1"):
        out.append(_fc_case(group, {"logp": [[0.0, -50.0, -690.0, -1e-3, -640.0], [-50.0, -690.0, 0.0, -2.0, -1.0]],
                                    "ref_logp": [[-50.0, 0.0, -640.0, -50.001, -690.0],
                                                 [0.0, -689.5, -50.0, -1.0, -51.0]],
                                    "mask": [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]},
                            ("ExtremeLogprob",), "k = ±50 and log-probabilities near log(1e−300)", 0, "fixed"))
    # Later KL terms that cancel (F = 0 exactly, or 2^−40 / 2^−20).
    for group in ("paper", "future-window-4"):
        e64, e32 = 2.0 ** -40, 2.0 ** -20
        out.append(_fc_case(group, {"logp": [[-0.5, -1.0, -2.0, -1.25, -3.0], [-2.0, -0.5, -1.0, -3.0, -0.75]],
                                    "ref_logp": [[-0.75, -1.5, -1.5 + e64, -1.0, -3.25 - e64],
                                                 [-1.0, -1.0, -0.5, -3.5, -0.5]],
                                    "mask": [[1] * 5, [1] * 5]},
                            ("FutureCancellation",), "k = (.25, .5, −.5−2^−40, −.25, .25+2^−40) and "
                            "(−1, .5, −.5, .5, −.25): F_t = 0 or ±2^−40 from terms of order 1", 0, "fixed"))
        out.append(_fc_case(group, {"logp": [[-0.5, -1.0, -2.0, -1.25, -3.0]],
                                    "ref_logp": [[-0.75, -1.5, -1.5 + e32, -1.0, -3.25 - e32]],
                                    "mask": [[1] * 5]},
                            ("FutureCancellation",), "float32 inputs: F_t = ±2^−20 from terms of order 1", 0,
                            "fixed"))
    # Masked positions inside rows, holding large KL terms.
    for group in ("paper", "future-window-4"):
        lp = [[-1.0, -0.5, 0.0, 0.0, -2.0, -0.25], [-3.0, 0.0, -1.5, 0.0, -0.5, -1.0]]
        ref = [[-1.5, -1.0, -20.0, -20.0, -2.5, -0.5], [-2.0, -20.0, -1.0, -20.0, -1.5, -2.0]]
        out.append(_fc_case(group, {"logp": lp, "ref_logp": ref,
                                    "mask": [[1, 1, 0, 0, 1, 1], [1, 0, 1, 0, 1, 0]]},
                            ("MaskHolesCost",), "interior masked positions with k = 20", 0, "fixed",
                            result="acceptable"))
    bad_fc = _fc_invalid()
    return out + bad_fc


def _fc_invalid() -> list[Case]:
    ok = {"logp": [[-1.0, -2.0], [-0.5, -1.5]], "ref_logp": [[-1.2, -1.9], [-0.4, -2.0]], "mask": [[1, 1], [1, 0]]}
    bad = [
        (ok, {"window": 0}, "window = 0"),
        (ok, {"window": -3}, "negative window"),
        (ok, {"window": 1.5}, "window not an integer"),
        (ok, {"window": True}, "window a boolean"),
        (ok, {"clip": 0.0}, "clip = 0"),
        (ok, {"clip": -1.0}, "negative clip"),
        ({**ok, "ref_logp": [[-1.2, -1.9]]}, {}, "ref_logp shape differs"),
        ({**ok, "mask": [[1, 1, 0], [1, 0, 0]]}, {}, "mask shape differs"),
        ({**ok, "mask": [[1, 2], [1, 0]]}, {}, "mask value 2"),
        ({**ok, "mask": [[0, 0], [0, 0]]}, {}, "mask selects no token"),
        ({**ok, "logp": [[math.nan, -2.0], [-0.5, -1.5]]}, {}, "NaN log-probability"),
        ({**ok, "logp": [[-1.0, math.inf], [-0.5, -1.5]]}, {}, "+inf log-probability"),
        ({**ok, "ref_logp": [[-1.2, -1.9], [-math.inf, -2.0]]}, {}, "−inf reference log-probability"),
        ({"logp": [-1.0, -2.0], "ref_logp": [-1.2, -1.9], "mask": [1, 1]}, {}, "rank-1 log-probabilities"),
        ({"logp": [[]], "ref_logp": [[]], "mask": [[]]}, {}, "empty sequence (T = 0)"),
    ]
    return [Case(FC, inputs, conventions=conv, group="invalid", result="invalid", flags=("InvalidInput",),
                 comment=why, provenance=generated(0, "fixed")) for inputs, conv, why in bad]


def _windows(kwargs):
    """For every position t, the positions u whose KL F_t sums (u > t, within the window)."""
    T = len(kwargs["mask"][0])
    w = kwargs.get("window", kwargs.get("future_window"))
    return [range(t + 1, T if w is None else min(T, t + 1 + w)) for t in range(T)]


def _term_sizes(kwargs):
    """|logp_u| + |ref_logp_u| at unmasked positions (the absolute error of k_u is u times this)."""
    return [[(abs(mpmath.mpf(a)) + abs(mpmath.mpf(b))) * m for a, b, m in zip(ra, rb, rm)]
            for ra, rb, rm in zip(kwargs["logp"], kwargs["ref_logp"], kwargs["mask"])]


def _fc_scale(kwargs, outputs, grads):
    """F_t inherits u·Σ_{u in its window} (|logp_u| + |ref_logp_u|): the size of the terms it sums
    (F near 0 from cancelling terms is judged against them). elements (the careful low-precision
    model's terms, per position): Σ_{u in its window} m_u·|k_u|."""
    sizes = _term_sizes(kwargs)
    wins = _windows(kwargs)
    scale = max((mpmath.fsum(row[u] for u in win) for row in sizes for win in wins), default=mpmath.mpf(0))
    ks = [[abs(mpmath.mpf(a) - mpmath.mpf(b)) * m for a, b, m in zip(ra, rb, rm)]
          for ra, rb, rm in zip(kwargs["logp"], kwargs["ref_logp"], kwargs["mask"])]
    elements = [[mpmath.fsum(row[u] for u in win) for win in wins] for row in ks]
    return {"cost": max(scale, max((abs(v) for v in outputs["cost"].flat), default=0)), "elements:cost": elements}


# ============================================================================ loss

def _loss_case(group, inputs, beta, flags, comment, seed, recipe, result="valid", low=False, tolerance=None):
    return Case(LOSS, inputs, params={"beta": beta}, conventions=LOSS_GROUPS[group], group=group, flags=flags,
                comment=comment, result=result, low_precision=low, provenance=generated(seed, recipe),
                tolerance=tolerance)


def _kinks(conv):
    out = []
    if conv["ratio_cap"] is not None:
        out.append(conv["ratio_cap"])
    if conv["ratio_clip"] is not None:
        out += [1 - conv["ratio_clip"], 1 + conv["ratio_clip"]]
    return out


def _away(lp, bp, conv, dtype):
    """Move logp (re-rounded to dtype) until every ratio is NEAR (NEAR_LOW on a low-precision grid)
    away from the cap and the band."""
    kinks = _kinks(conv)
    near = S.NEAR_LOW if dtype in S.LOW_GRIDS else NEAR
    lp = [list(row) for row in lp]
    for i, row in enumerate(lp):
        for j in range(len(row)):
            step = 0
            while any(abs(math.exp(row[j] - bp[i][j]) / c - 1) < near for c in kinks):
                step += 1
                row[j] = S.rounded([min(row[j] - 0.02 * step, -1e-6)], dtype)[0]
    return lp


def _random_loss(group, gi, i, b=None, t=None, dtype=None, flags=("Random",)) -> Case:
    conv = LOSS_GROUPS[group]
    seed = 14000 + 100 * gi + i
    r = S.rng(seed)
    b = b or int(r.integers(1, 17))
    t = t or int(r.choice(LENGTHS))
    beta = float(r.choice(BETAS))
    # wide enough behaviour offsets that caps and clips bind on some tokens
    s_b = float(r.choice([0.05, 0.2, 0.5] + ([1.0] if conv["ratio_cap"] else [])))
    s_r = float(r.choice([0.05, 0.3, 1.0]))
    lp = S.rounded(S.logprobs(r, (b, t)), dtype)
    bp = S.rounded(S.logprobs_near(r, lp, s_b), dtype)
    ref = S.rounded(S.logprobs_near(r, lp, s_r), dtype)
    adv = S.rounded(r.normal(0, 1, b).tolist(), dtype)
    mask = S.mask(r, b, t)
    lp = _away(lp, bp, conv, dtype)
    return _loss_case(group, {"logp": lp, "behavior_logp": bp, "ref_logp": ref, "advantages": adv, "mask": mask},
                      beta, flags, f"random B={b}, T={t}, β={beta:g}" + (f", {dtype}" if dtype else ""), seed,
                      "logprobs; behaviour/ref = logp + normal offsets; ragged mask")


def _low_precision_loss(group, gi, dtype, k=0) -> Case:
    conv = LOSS_GROUPS[group]
    seed = 14900 + 10 * gi + k
    r = S.rng(seed)
    lp = S.in_dtype(S.logprobs(r, (4, 10)), dtype)
    bp = S.in_dtype(S.logprobs_near(r, lp, 0.3), dtype)
    ref = S.in_dtype(S.logprobs_near(r, lp, 0.3), dtype)
    adv = S.in_dtype(r.uniform(-2, 2, 4).tolist(), dtype)
    lp = _away(lp, bp, conv, dtype)
    return _loss_case(group, {"logp": lp, "behavior_logp": bp, "ref_logp": ref, "advantages": adv,
                              "mask": S.mask(r, 4, 10)}, 0.1, ("LowPrecision",), f"inputs exact in {dtype}, β = 0.1",
                      seed, f"logprobs rounded to {dtype}", low=True)


def _loss_cases() -> list[Case]:
    out = []
    large = {"paper": (16, 256), "bounded": (8, 128), "clipped-bounded-seq-mean": (8, 128)}
    for gi, group in enumerate(LOSS_GROUPS):
        n_random = 14 if group == "paper" else 4
        for i in range(n_random):
            out.append(_random_loss(group, gi, i, dtype="float32" if i % 2 == 0 else None))
        if group in large:
            b, t = large[group]
            out.append(_random_loss(group, gi, 50, b=b, t=t, flags=("Random", "Large")))
        dtypes = ["bfloat16", "float16"] if group == "paper" else [("bfloat16", "float16")[gi % 2]]
        for k, dt in enumerate(dtypes):
            out.append(_low_precision_loss(group, gi, dt, k))
        # rows without tokens
        seed = 14800 + gi
        r = S.rng(seed)
        lp = S.logprobs(r, (5, 6))
        bp = S.logprobs_near(r, lp, 0.1)
        ref = S.logprobs_near(r, lp, 0.3)
        lp = _away(lp, bp, LOSS_GROUPS[group], None)
        mask = S.with_empty_rows(S.mask(r, 5, 6), [1, 3])
        flag, result = rows_without_tokens(LOSS_GROUPS[group])
        out.append(_loss_case(group, {"logp": lp, "behavior_logp": bp, "ref_logp": ref,
                                      "advantages": r.normal(0, 1, 5).tolist(), "mask": mask}, 0.04,
                              (flag,), "rows 1 and 3 without tokens", seed, "logprobs; ragged mask with emptied rows",
                              result=result))
        if LOSS_GROUPS[group]["future_clip"] is not None:
            c = LOSS_GROUPS[group]["future_clip"]
            kk = 0.75 * c
            lp = [[-1.0, -2.0, -0.5, -3.0, -1.5], [-0.25, -4.0, -2.5, -1.0, -0.75]]
            ref = [[a - kk for a in lp[0]], [a + kk for a in lp[1]]]
            bp = [[a + 0.05 for a in lp[0]], [a - 0.1 for a in lp[1]]]
            bp = [[min(v, -1e-6) for v in row] for row in bp]
            lp = _away(lp, bp, LOSS_GROUPS[group], None)
            out.append(_loss_case(group, {"logp": lp, "behavior_logp": bp, "ref_logp": ref, "advantages": [0.5, -1.0],
                                          "mask": [[1] * 5, [1, 1, 1, 1, 0]]}, 0.1, ("FutureClipActive",),
                                  f"k = ±{kk:g} on every token: F passes ±{c:g}", 0, "fixed"))
    paper = "paper"
    # One token.
    for group in (paper, "ratio-clip-0.2", "future-window-1"):
        out.append(_loss_case(group, {"logp": [[-0.75]], "behavior_logp": [[-0.8]], "ref_logp": [[-2.0]],
                                      "advantages": [1.5], "mask": [[1]]}, 0.04, ("SingleToken",),
                              "B = T = 1: ℓ = −ρ·(A − β·k)", 0, "fixed"))
        out.append(_loss_case(group, {"logp": [[-0.5, -1.0, -2.0], [-3.0, -0.25, -1.5]],
                                      "behavior_logp": [[-0.6, -1.1, -2.2], [-2.9, -0.3, -1.4]],
                                      "ref_logp": [[-1.5, -0.75, -2.5], [-1.0, -0.5, -4.0]],
                                      "advantages": [0.5, -0.75], "mask": [[0, 0, 0], [0, 1, 0]]}, 0.1,
                              ("SingleToken",), "one unmasked token in the batch", 0, "fixed"))
    # Extreme ratios e^±50 with probabilities ~1e−300.
    for group in (paper, "ratio-cap-5", "ratio-clip-0.2", "future-clip-2"):
        lp = [[0.0, -50.0, -1e-3, -690.0], [-50.0, -1e-6, -640.0, -2.0]]
        bp = [[-50.0, 0.0, -50.001, -640.0], [-1e-6, -50.0, -690.0, -2.5]]
        ref = [[-0.5, -50.25, -0.5, -690.125], [-50.5, -0.125, -640.5, -2.25]]
        out.append(_loss_case(group, {"logp": lp, "behavior_logp": bp, "ref_logp": ref, "advantages": [1.0, -1.0],
                                      "mask": [[1, 1, 1, 1], [1, 1, 1, 1]]}, 0.04, ("ExtremeRatio",),
                              "ratios e^±50 with A = ±1; probabilities ~1e−300", 0, "fixed"))
    # β small and large.
    seed = 14700
    r = S.rng(seed)
    lp = S.logprobs(r, (3, 8))
    bp = S.logprobs_near(r, lp, 0.2)
    ref = S.logprobs_near(r, lp, 1.0)
    adv = r.normal(0, 1, 3).tolist()
    mask = S.mask(r, 3, 8)
    for group in (paper, "future-window-4", "ratio-clip-0.2"):
        lpg = _away(lp, bp, LOSS_GROUPS[group], None)
        for beta in (1e-6, 10.0, 100.0):
            out.append(_loss_case(group, {"logp": lpg, "behavior_logp": bp, "ref_logp": ref, "advantages": adv,
                                          "mask": mask}, beta, ("BetaExtreme",), f"β = {beta:g}", seed,
                                  "logprobs; ref far from logp"))
    # Later KL terms that cancel, and coefficients X_t ≈ 0.
    e64 = 2.0 ** -40
    lp = [[-0.5, -1.0, -2.0, -1.25, -3.0]]
    ref = [[-0.75, -1.5, -1.5 + e64, -1.0, -3.25 - e64]]
    bp = [[-0.55, -0.9, -2.1, -1.3, -2.9]]
    for group in (paper, "future-window-4", "seq-mean-token-sum"):
        out.append(_loss_case(group, {"logp": lp, "behavior_logp": bp, "ref_logp": ref, "advantages": [0.75],
                                      "mask": [[1] * 5]}, 0.5, ("FutureCancellation",),
                              "k = (.25, .5, −.5−2^−40, −.25, .25+2^−40): F_t = 0 or ±2^−40", 0, "fixed"))
    # A = β·(k_t + F_t) in binary64 at one token per row: X_t is of the order of the rounding of its terms.
    beta = 0.5
    lp = [[-0.3, -1.1, -2.7, -0.9, -1.7]]
    ref = [[-0.7, -0.6, -2.2, -1.3, -1.9]]
    bp = [[-0.35, -1.0, -2.6, -1.0, -1.6]]
    k = [a - b for a, b in zip(lp[0], ref[0])]
    adv0 = beta * math.fsum(k)
    adv1 = beta * (k[2] + math.fsum(k[3:]))
    for group in (paper, "ratio-cap-2"):
        out.append(_loss_case(group, {"logp": lp + lp, "behavior_logp": bp + bp, "ref_logp": ref + ref,
                                      "advantages": [adv0, adv1], "mask": [[1] * 5, [1] * 5]}, beta,
                              ("CoefficientCancellation",), "A = β·(k_t + F_t) rounded to binary64 at t = 0 "
                              "(row 0) and t = 2 (row 1)", 0, "fixed"))
    # On-policy: ρ = 1 exactly.
    for group in (paper, "ratio-clip-0.1", "ratio-cap-1"):
        seed = 14710
        r = S.rng(seed)
        lp = S.logprobs(r, (4, 9))
        ref = S.logprobs_near(r, lp, 0.4)
        out.append(_loss_case(group, {"logp": lp, "behavior_logp": lp, "ref_logp": ref,
                                      "advantages": r.normal(0, 1, 4).tolist(), "mask": S.mask(r, 4, 9)}, 0.04,
                              ("OnPolicy",) + (("BoundaryUlps",) if group == "ratio-cap-1" else ()),
                              "behavior_logp = logp: ρ = 1" + (" = C (at the cap: the reference passes the "
                                                               "gradient, as torch.clamp)"
                                                               if group == "ratio-cap-1" else ""),
                              seed, "logprobs; ref = logp + normal offset",
                              result="acceptable" if group == "ratio-cap-1" else "valid"))
    # Masked positions inside rows, and padding with ρ = e^30, k = 30.
    for group in (paper, "future-window-4", "seq-mean-token-mean"):
        lp = [[-1.0, -0.5, 0.0, 0.0, -2.0, -0.25], [-3.0, 0.0, -1.5, 0.0, -0.5, -1.0]]
        bp = [[-1.1, -0.4, -20.0, -20.0, -2.2, -0.3], [-2.9, -20.0, -1.4, -20.0, -0.6, -1.2]]
        ref = [[-1.5, -1.0, -20.0, -20.0, -2.5, -0.5], [-2.0, -20.0, -1.0, -20.0, -1.5, -2.0]]
        out.append(_loss_case(group, {"logp": lp, "behavior_logp": bp, "ref_logp": ref, "advantages": [1.0, -0.5],
                                      "mask": [[1, 1, 0, 0, 1, 1], [1, 0, 1, 0, 1, 0]]}, 0.1, ("MaskHoles",),
                              "interior masked positions with ρ = e^20, k = 20", 0, "fixed"))
        lp = [[-1.0, -0.5, -2.0, 0.0, 0.0], [-0.25, 0.0, 0.0, 0.0, 0.0]]
        bp = [[-1.25, -0.75, -1.5, -30.0, -30.0], [-0.5, -30.0, -30.0, -30.0, -30.0]]
        ref = [[-2.0, -1.0, -1.0, -30.0, -30.0], [-1.0, -30.0, -30.0, -30.0, -30.0]]
        out.append(_loss_case(group, {"logp": lp, "behavior_logp": bp, "ref_logp": ref, "advantages": [0.5, 2.0],
                                      "mask": [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0]]}, 0.1, ("MaskedPadding",),
                              "padding: logp 0, behaviour and reference −30", 0, "fixed"))
    # Padding beyond the longest row (a fixed padded length, e.g. max_completion_length).
    for gi, group in enumerate(("paper", "seq-mean-token-sum-norm", "seq-mean-token-mean", "bounded")):
        seed = 14720 + gi
        r = S.rng(seed)
        b, t = 6, 24
        lp = S.logprobs(r, (b, t))
        bp = S.logprobs_near(r, lp, 0.2)
        ref = S.logprobs_near(r, lp, 0.5)
        lp = _away(lp, bp, LOSS_GROUPS[group], None)
        lengths = r.integers(1, 13, size=b)
        mask = [[1 if j < n else 0 for j in range(t)] for n in lengths]
        out.append(_loss_case(group, {"logp": lp, "behavior_logp": bp, "ref_logp": ref,
                                      "advantages": r.normal(0, 1, b).tolist(), "mask": mask}, 0.1,
                              ("TrailingPadding",), f"rows of {min(lengths)}..{max(lengths)} tokens padded to T = {t}",
                              seed, "logprobs; rows at most half the padded length"))
    # Ratios within a few ulps of the cap and of the band's edges: the gradient side is rounding's.
    for group in ("ratio-cap-2", "ratio-cap-5", "ratio-clip-0.1", "ratio-clip-0.2", "clipped-bounded-seq-mean"):
        conv = LOSS_GROUPS[group]
        targets = _kinks(conv)
        base = -1.5
        lp = [[S.ulp_steps(base + math.log(c), s) for s in (-2, 0, 2)] for c in targets]
        bp = [[base] * 3 for _ in targets]
        ref = [[base - 0.25] * 3 for _ in targets]
        adv = [1.0 if c >= 1 else -1.0 for c in targets]
        out.append(_loss_case(group, {"logp": lp, "behavior_logp": bp, "ref_logp": ref, "advantages": adv,
                                      "mask": [[1, 1, 1]] * len(targets)}, 0.04, ("BoundaryUlps",),
                              "ratios within 2 ulps of " + ", ".join(f"{c:g}" for c in targets), 0, "fixed",
                              result="acceptable"))
    return out + _loss_invalid()


def _loss_invalid() -> list[Case]:
    ok = {"logp": [[-1.0, -2.0], [-0.5, -1.5]], "behavior_logp": [[-1.1, -2.1], [-0.6, -1.4]],
          "ref_logp": [[-1.2, -1.9], [-0.4, -2.0]], "advantages": [1.0, -0.5], "mask": [[1, 1], [1, 0]]}
    bad = [
        (ok, {"beta": 0.0}, {}, "β = 0"),
        (ok, {"beta": -0.04}, {}, "negative β"),
        (ok, {}, {"ratio_clip": 0.0}, "ratio_clip = 0"),
        (ok, {}, {"ratio_clip": 1.0}, "ratio_clip = 1"),
        (ok, {}, {"ratio_clip": 1.5}, "ratio_clip > 1"),
        (ok, {}, {"ratio_clip": -0.2}, "negative ratio_clip"),
        (ok, {}, {"ratio_cap": 0.0}, "ratio_cap = 0"),
        (ok, {}, {"ratio_cap": -2.0}, "negative ratio_cap"),
        (ok, {}, {"future_clip": 0.0}, "future_clip = 0"),
        (ok, {}, {"future_clip": -1.0}, "negative future_clip"),
        (ok, {}, {"future_window": 0}, "future_window = 0"),
        (ok, {}, {"future_window": 2.5}, "future_window not an integer"),
        (ok, {}, {"aggregation": "sum"}, "unknown aggregation"),
        ({**ok, "behavior_logp": [[-1.1, -2.1]]}, {}, {}, "behavior_logp shape differs"),
        ({**ok, "ref_logp": [[-1.2], [-0.4]]}, {}, {}, "ref_logp shape differs"),
        ({**ok, "advantages": [1.0]}, {}, {}, "advantages do not match the batch"),
        ({**ok, "advantages": [[1.0], [-0.5]]}, {}, {}, "per-token advantages [B,1] instead of [B]"),
        ({**ok, "mask": [[1, 1], [1, 0], [1, 1]]}, {}, {}, "mask shape differs"),
        ({**ok, "mask": [[1, 0.5], [1, 0]]}, {}, {}, "mask value 0.5"),
        ({**ok, "mask": [[0, 0], [0, 0]]}, {}, {}, "mask selects no token"),
        ({**ok, "logp": [[math.nan, -2.0], [-0.5, -1.5]]}, {}, {}, "NaN log-probability"),
        ({**ok, "behavior_logp": [[-1.1, math.inf], [-0.6, -1.4]]}, {}, {}, "+inf behaviour log-probability"),
        ({**ok, "ref_logp": [[-math.inf, -1.9], [-0.4, -2.0]]}, {}, {}, "−inf reference log-probability"),
        ({**ok, "advantages": [1.0, math.nan]}, {}, {}, "NaN advantage"),
        ({"logp": [-1.0, -2.0], "behavior_logp": [-1.1, -2.1], "ref_logp": [-1.2, -1.9], "advantages": [1.0],
          "mask": [1, 1]}, {}, {}, "rank-1 log-probabilities"),
    ]
    return [Case(LOSS, inputs, params={"beta": 0.04, **params}, conventions=conv, group="invalid",
                 result="invalid", flags=("InvalidInput",), comment=why, provenance=generated(0, "fixed"))
            for inputs, params, conv, why in bad]


def _loss_scale(kwargs, outputs, grads):
    """Σ_t w_t·T_t for the value and max_t w_t·T_t for the gradient, where T_t is the size of
    what rounding touches in ℓ_t = −ρ_t·X_t: ρ_eff·(|A| + β·(|logp_t| + |ref_t| + Σ_{u in the
    window} (|logp_u| + |ref_u|))) for the coefficient X_t, plus ρ_t·|X_t|·(1 + |logp_t| + |behavior_t|)
    where the ratio itself (not a cap or clip bound) enters. elements (the careful low-precision
    model's terms): Σ_t w_t·|ℓ_t|."""
    mask = kwargs["mask"]
    w = aggregation_weights(mask, kwargs["aggregation"], None)
    beta = mpmath.mpf(kwargs["beta"])
    cap, eps = kwargs["ratio_cap"], kwargs["ratio_clip"]
    fclip = kwargs["future_clip"]
    sizes = _term_sizes(kwargs)
    wins = _windows(kwargs)
    value_terms, grad_terms, elements = [], [mpmath.mpf(0)], []
    for i, row in enumerate(w):
        a = mpmath.mpf(kwargs["advantages"][i])
        ks = [(mpmath.mpf(x) - mpmath.mpf(y)) * m
              for x, y, m in zip(kwargs["logp"][i], kwargs["ref_logp"][i], mask[i])]
        for t, wt in enumerate(row):
            if not wt:
                continue
            lp, bp = mpmath.mpf(kwargs["logp"][i][t]), mpmath.mpf(kwargs["behavior_logp"][i][t])
            f = mpmath.fsum(ks[u] for u in wins[t])
            if fclip is not None:
                f = min(max(f, -mpmath.mpf(fclip)), mpmath.mpf(fclip))
            x = a - beta * (ks[t] + f)
            rho = mpmath.exp(lp - bp)
            eff, active = rho, True
            if cap is not None and rho > cap:
                eff, active = mpmath.mpf(cap), False
            if eps is not None:
                clipped = min(max(eff, 1 - mpmath.mpf(eps)), 1 + mpmath.mpf(eps))
                if not eff * x <= clipped * x:
                    active = active and clipped == eff
                    eff = clipped
            coef_terms = abs(a) + beta * (sizes[i][t] + mpmath.fsum(sizes[i][u] for u in wins[t]))
            term = eff * coef_terms + (rho * abs(x) * (1 + abs(lp) + abs(bp)) if active else 0)
            value_terms.append(wt * term)
            grad_terms.append(wt * term)
            elements.append(wt * abs(eff * x))
    return {"loss": mpmath.fsum(value_terms), "grad:logp": max(grad_terms), "elements:loss": mpmath.fsum(elements)}


# ============================================================================ low precision
#
# Cases judged in bfloat16 and float16 (the careful model of conformance/compare.py): random
# sizes up to T = 256 on the two low-precision grids (sampling.in_low), every convention group in
# turn, ratios NEAR_LOW away from the cap and the clip band; and the edges: zero-variance groups
# (A = 0), rows without tokens, one token, later KL terms that cancel, on-policy ratios.

LOW_LENGTHS = (1, 2, 3, 5, 8, 12, 16, 24, 32, 64, 100, 128, 256)
LOW_ELEMS = 512          # B·T of a random case (the large case: 8 × 256)
LOW_RANDOM = 42


def _low_fc_cases() -> list[Case]:
    out = []
    groups = list(FC_GROUPS)
    for i in range(LOW_RANDOM):
        seed, grid = 24000 + i, S.low_grid(i)
        group = groups[i % len(groups)]
        r = S.rng(seed)
        b, t = S.low_shape(r, LOW_LENGTHS, i == LOW_RANDOM - 1, LOW_ELEMS)
        spread = float(r.choice([0.05, 0.3, 1.0, 2.0]))
        lp = S.in_low(S.logprobs(r, (b, t)), grid)
        ref = S.in_low(S.logprobs_near(r, lp, spread), grid)
        flags = ("Random", "LowPrecision") + (("Large",) if b * t > LOW_ELEMS else ())
        out.append(_fc_case(group, {"logp": lp, "ref_logp": ref, "mask": S.mask(r, b, t)}, flags,
                            f"random B={b}, T={t}, |k| spread {spread:g}, inputs exact in {S.grid_note(grid)}", seed,
                            f"logprobs; ref = logp + normal offset; rounded to the {grid} grid", low=True))
    for gi, group in enumerate(groups):
        seed = 24100 + 10 * gi
        r = S.rng(seed)
        lp = S.in_low(S.logprobs(r, (5, 7)), S.BOTH)
        ref = S.in_low(S.logprobs_near(r, lp, 0.5), S.BOTH)
        out.append(_fc_case(group, {"logp": lp, "ref_logp": ref, "mask": S.with_empty_rows(S.mask(r, 5, 7), [0, 3])},
                            ("FullyMaskedRow", "LowPrecision"), "rows 0 and 3 without tokens", seed,
                            "logprobs; ragged mask with emptied rows", low=True))
        out.append(_fc_case(group, {"logp": [[-0.5, -1.0, -2.0, -1.25, -3.0], [-2.0, -0.5, -1.0, -3.0, -0.75]],
                                    "ref_logp": [[-0.75, -1.5, -1.5, -1.0, -3.25], [-1.0, -1.0, -0.5, -3.5, -0.5]],
                                    "mask": [[1] * 5, [1, 1, 1, 1, 0]]}, ("FutureCancellation", "LowPrecision"),
                            "k = (.25, .5, −.5, −.25, .25) and (−1, .5, −.5, .5): F_t = 0 from terms of order 1",
                            seed + 1, "fixed", low=True))
    return out


def _low_loss_cases() -> list[Case]:
    out = []
    groups = list(LOSS_GROUPS)
    for i in range(LOW_RANDOM):
        seed, grid = 24200 + i, S.low_grid(i)
        group = groups[i % len(groups)]
        conv = LOSS_GROUPS[group]
        r = S.rng(seed)
        b, t = S.low_shape(r, LOW_LENGTHS, i == LOW_RANDOM - 1, LOW_ELEMS)
        beta = float(r.choice(BETAS))
        s_b = float(r.choice([0.05, 0.2, 0.5] + ([1.0] if conv["ratio_cap"] else [])))
        s_r = float(r.choice([0.05, 0.3, 1.0]))
        lp = S.rounded(S.logprobs(r, (b, t)), grid)
        bp = S.rounded(S.logprobs_near(r, lp, s_b), grid)
        ref = S.rounded(S.logprobs_near(r, lp, s_r), grid)
        adv = S.rounded(r.normal(0, 1, b).tolist(), grid)
        zero_rows = [a for a in range(b) if r.uniform() < 0.2]   # zero-variance groups
        for a in zero_rows:
            adv[a] = 0.0
        mask = S.mask(r, b, t)
        lp = _away(lp, bp, conv, grid)
        flags = ("Random", "LowPrecision") + (("Large",) if b * t > LOW_ELEMS else ()) \
            + (("ZeroVarianceGroup",) if zero_rows else ())
        out.append(_loss_case(group, {"logp": lp, "behavior_logp": bp, "ref_logp": ref, "advantages": adv,
                                      "mask": mask}, beta, flags,
                              f"random B={b}, T={t}, β={beta:g}, inputs exact in {S.grid_note(grid)}"
                              + (f", {len(zero_rows)} rows with A = 0" if zero_rows else ""), seed,
                              f"logprobs; behaviour/ref = logp + normal offsets; rounded to the {grid} grid",
                              low=True))
    for gi, group in enumerate(groups):
        conv = LOSS_GROUPS[group]
        seed = 24300 + 10 * gi
        r = S.rng(seed)
        lp = S.in_low(S.logprobs(r, (4, 6)), S.BOTH)
        bp = S.in_low(S.logprobs_near(r, lp, 0.2), S.BOTH)
        ref = S.in_low(S.logprobs_near(r, lp, 0.3), S.BOTH)
        lp = _away(lp, bp, conv, S.BOTH)
        out.append(_loss_case(group, {"logp": lp, "behavior_logp": bp, "ref_logp": ref, "advantages": [0.0] * 4,
                                      "mask": S.mask(r, 4, 6)}, 0.1, ("ZeroVarianceGroup", "LowPrecision"),
                              "every group zero-variance (A = 0): only the KL coefficient", seed, "logprobs; A = 0",
                              low=True))
        lp = S.in_low(S.logprobs(r, (5, 6)), S.BOTH)
        bp = S.in_low(S.logprobs_near(r, lp, 0.1), S.BOTH)
        ref = S.in_low(S.logprobs_near(r, lp, 0.3), S.BOTH)
        lp = _away(lp, bp, conv, S.BOTH)
        flag, result = rows_without_tokens(conv)
        out.append(_loss_case(group, {"logp": lp, "behavior_logp": bp, "ref_logp": ref,
                                      "advantages": S.in_low(r.normal(0, 1, 5).tolist(), S.BOTH),
                                      "mask": S.with_empty_rows(S.mask(r, 5, 6), [1, 3])}, 0.04,
                              (flag, "LowPrecision"), "rows 1 and 3 without tokens", seed + 1,
                              "logprobs; ragged mask with emptied rows", result=result, low=True))
        if conv["ratio_cap"] != 1.0:   # ρ = 1 sits on a cap of 1 (BoundaryUlps in _loss_cases)
            lp = S.in_low(S.logprobs(r, (3, 8)), S.BOTH)
            ref = S.in_low(S.logprobs_near(r, lp, 0.4), S.BOTH)
            out.append(_loss_case(group, {"logp": lp, "behavior_logp": lp, "ref_logp": ref,
                                          "advantages": S.in_low(r.normal(0, 1, 3).tolist(), S.BOTH),
                                          "mask": S.mask(r, 3, 8)}, 0.04, ("OnPolicy", "LowPrecision"),
                                  "behavior_logp = logp: ρ = 1", seed + 2, "logprobs; ref = logp + normal offset",
                                  low=True))
    return out


# ============================================================================ all

def cases() -> list[Case]:
    return _fc_cases() + _loss_cases() + _low_fc_cases() + _low_loss_cases()


SCALES = {FC: _fc_scale, LOSS: _loss_scale}
