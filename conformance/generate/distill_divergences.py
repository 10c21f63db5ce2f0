"""Vectors for ``distill.skew_kl`` (DistiLLM §3) and ``distill.tvd`` (total variation), with their
flags and groups (their tolerance scales are in ``distill_scales``); ``conformance.generate.distill``
merges them into the family.

skew_kl: one group per ``direction`` — 'forward' (α-SKL, the paper's skew KL) and 'reverse'
(α-SRKL) — with α an argument drawn from ALPHAS_SKEW; the random, large and edge cases of the
other pair objectives (``pair_edges``, ``distill_low.low_pair_cases``).

tvd: |q − p| has a kink at every tie q_v = p_v, where the reference takes sign(0) = 0. A tie
that rounding can move (|log q_v − log p_v| small) would make a target's gradient depend on
its rounding, so every case keeps each token either an exact tie (equal rows, or a token
impossible on both sides: identical computations in every implementation) or at least
``_tie_margin`` away from one, unless flipping its sign moves the gradient by less than
min(q_v, 1 − q_v)/T ≤ ``_TIE_WEIGHT`` (the size of that flip, see ``_ties_ok``): random cases
are redrawn with the next seed until they are.
"""
from __future__ import annotations

import math

import mpmath
import numpy as np

from lossproof.conformance.generate import distill_low
from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, article, generated
from lossproof.conformance.generate.distill_inputs import (
    HUGE_STUDENT,
    HUGE_TEACHER,
    INF,
    SKL,
    TEMPERATURES,
    TVD,
    cancellation_inputs,
    clip_logits,
    near_deterministic,
    pair_case,
    pair_edges,
    pair_inputs,
    random_pairs,
    support_sets,
)
from lossproof.conformance.generate.distill_scales import SCALE_DPS, softmax_rows

ALPHAS_SKEW = (0.1, 0.01, 0.25, 0.5, 0.9, 1.0)

SEC_ONPOLICY = "Destilación on-policy: el alumno ocupa el primer lugar en la KL"
SEC_VOCAB = "Un token muestreado o todo el vocabulario"
_PRINTED_PAIR = ("las probabilidades del profesor para cat y dog son 0.8 y 0.2; las del alumno son 0.4 y 0.6.")
_PRINTED_THREE = "d_t=0.5log(0.5/0.6)+0.2log(0.2/0.3)+0.3log(0.3/0.1)≈0.157"
_PAIR_S, _PAIR_T = [[math.log(0.4), math.log(0.6)]], [[math.log(0.8), math.log(0.2)]]
_THREE_S = [[math.log(0.5), math.log(0.2), math.log(0.3)]]
_THREE_T = [[math.log(0.6), math.log(0.3), math.log(0.1)]]

NOTES = {
    "SkewAlphaOne": {"category": "edge", "description": "α = 1 in distill.skew_kl: the mixture is the first "
                     "distribution itself, the value and its gradient are exactly 0.",
                     "bugType": "extreme-parameter",
                     "effect": "At α = 1 the mixture is the distribution itself: the loss and gradient must be "
                               "exactly 0."},
    "SkewAlphaSmall": {"category": "numerics", "description": "α = 1e-6 or 0.01 in distill.skew_kl: the skew KL "
                       "approaches the plain KL but stays below −log α (finite also where the plain KL is "
                       "infinite); log α and 1 − α must keep their digits.",
                       "bugType": "cancellation",
                       "effect": "log α and 1 − α formed carelessly lose digits as the skew KL approaches the plain "
                                 "KL."},
    "SkewReverse": {"category": "convention", "description": "direction='reverse' in distill.skew_kl: α-SRKL, "
                    "KL(q‖αq + (1−α)p), weighted by the student (DistiLLM §3).",
                    "bugType": "convention",
                    "effect": "The skew direction swapped: the other mixture is weighted, another divergence is "
                              "trained."},
    "TieMargin": {"category": "edge", "description": "distill.tvd: every token is an exact tie (equal rows, or "
                  "impossible on both sides) or stays a margin away from one (1e-3 relative in float64/float32, "
                  "2^-5 in bfloat16/float16) unless its sign cannot move the gradient beyond the tolerance: the "
                  "subgradient sign(0) = 0 at ties is then the only choice left to a target, and it is the one "
                  "torch.abs and Liger-Kernel take.",
                  "bugType": "gradient",
                  "effect": "The total variation's kink at ties: a gradient taken on the wrong side where the sign "
                            "is decided by rounding."},
}

GROUPS = {
    "reverse": "distill.skew_kl with direction='reverse': α-SRKL, KL(q‖αq + (1−α)p) — DistiLLM (Ko et al. 2024) "
               "§3; the official code's skewed_reverse_kl (distillm/losses.py, lam = 0.1). No pinned library "
               "(TRL 1.16.0, verl 0.9.1, OpenRLHF 0.11.2, Liger 0.8.5) ships a skew KL",
}


# ----------------------------------------------------------------------------- skew_kl

def _alpha(params) -> str:
    return "".join(f", α={val:g}" for k, val in params.items() if k == "alpha")


def _skew_cases() -> list[Case]:
    out = []
    for direction, group, seed0 in (("forward", "paper", 30000), ("reverse", "reverse", 30500)):
        conv = {"direction": direction}
        extra = () if direction == "forward" else ("SkewReverse",)
        for s, t, why, section, printed in ((_PAIR_S, _PAIR_T, "teacher (0.8, 0.2), student (0.4, 0.6)",
                                             SEC_ONPOLICY, _PRINTED_PAIR),
                                            (_THREE_S, _THREE_T, "«cat», «dog», «fox»: teacher (0.6, 0.3, 0.1), "
                                             "student (0.5, 0.2, 0.3)", SEC_VOCAB, _PRINTED_THREE)):
            out.append(Case(SKL, {"student_logits": s, "teacher_logits": t}, params={"alpha": 0.1, "temperature": 1.0},
                            conventions=conv, group=group, flags=("Article",) + extra,
                            comment=f"{direction} skew KL at α = 0.1, {why}; logits = log probabilities",
                            provenance=article(section, printed)))
        out += random_pairs(SKL, group, conv, lambda T, r: {"alpha": float(r.choice(ALPHAS_SKEW)), "temperature": T},
                            seed0, 26, extra, describe=_alpha)
        for k, (v, n, T) in enumerate(((1024, 2, 1.0), (4096, 1, 2.0))):
            r = S.rng(seed0 + 100 + k)
            z, t = pair_inputs(r, n, v, 4.0, False, True)
            out.append(pair_case(SKL, z, t, {"alpha": 0.1, "temperature": T}, conv, group, ("Large",) + extra,
                                 f"V={v}, N={n}, T={T:g}, α = 0.1, float32", seed0 + 100 + k,
                                 "normal logits; teacher = student + N(0,1)"))
        out += pair_edges(SKL, group, conv, lambda T: {"alpha": 0.1, "temperature": T}, "any", seed0 + 200, extra,
                          low_params_of=lambda T, k: {"alpha": (0.1, 0.5, 0.25, 0.9)[k], "temperature": T})
        for k, (alpha, flag) in enumerate(((1.0, "SkewAlphaOne"), (1e-6, "SkewAlphaSmall"), (0.01, "SkewAlphaSmall"))):
            r = S.rng(seed0 + 300 + k)
            z, t = pair_inputs(r, 4, 10, 3.0, True, k != 1)
            out.append(pair_case(SKL, z, t, {"alpha": alpha, "temperature": 1.0}, conv, group, (flag,) + extra,
                                 f"α = {alpha!r}", seed0 + 300 + k, "normal logits"))
            zs, ts, why = support_sets("any")[2]
            out.append(pair_case(SKL, zs, ts, {"alpha": alpha, "temperature": 1.0}, conv, group,
                                 (flag, "NegInfLogits") + extra, f"α = {alpha!r}: {why}", seed0 + 310 + k, "fixed"))
    groups = [(group, {"direction": d}, "any", lambda T, r: {"alpha": float(r.choice(ALPHAS_SKEW)), "temperature": T},
               lambda T: {"alpha": 0.25, "temperature": T})
              for group, d in (("paper", "forward"), ("reverse", "reverse"))]
    out += distill_low.low_pair_cases(SKL, groups, 31000)
    ok_z, ok_t = [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]], [[0.5, 2.5, 0.0], [1.0, -1.0, 2.0]]
    bad = [
        ({"alpha": 0.0}, {}, "α = 0 (the plain KL: distill.token_kl)"),
        ({"alpha": -0.1}, {}, "α < 0"),
        ({"alpha": 1.5}, {}, "α > 1"),
        ({"temperature": 0.0}, {}, "T = 0"),
        ({}, {"direction": "symmetric"}, "unknown direction"),
    ]
    for params, conv, why in bad:
        out.append(Case(SKL, {"student_logits": ok_z, "teacher_logits": ok_t},
                        params={"alpha": 0.1, "temperature": 1.0, **params}, conventions=conv, group="invalid",
                        result="invalid", flags=("InvalidInput",), comment=why, provenance=generated(0, "fixed")))
    for z, t, why in ((ok_z, [[0.5, 2.5], [1.0, -1.0]], "shapes disagree"),
                      ([[1.0, math.nan, 0.5], [0.0, -1.0, 3.0]], ok_t, "NaN student logit"),
                      (ok_z, [[0.5, 2.5, INF], [1.0, -1.0, 2.0]], "+inf teacher logit"),
                      (ok_z, [[-INF, -INF, -INF], [1.0, -1.0, 2.0]], "teacher row −inf everywhere"),
                      ([[]], [[]], "empty vocabulary")):
        out.append(Case(SKL, {"student_logits": z, "teacher_logits": t}, params={"alpha": 0.1, "temperature": 1.0},
                        group="invalid", result="invalid", flags=("InvalidInput",), comment=why,
                        provenance=generated(0, "fixed")))
    return out


# ----------------------------------------------------------------------------- tvd

_TIE_WEIGHT = {"float64": 1e-15, "float32": 1e-9, "low": 2.0 ** -12}
_TIE_MARGIN = {"float64": 1e-9, "float32": 1e-3, "low": S.NEAR_LOW}


def _ties_ok(z, t, T, kind: str) -> bool:
    """Every token of every row is an exact tie, or |log q − log p| ≥ the margin of ``kind``, or
    min(q, 1 − q)/T < its weight (flipping σ_v moves ∂tvd/∂z_j by q_j(δ_vj − q_v)/(2T)·2, at most
    min(q_v, 1 − q_v)/T in size)."""
    margin, weight = mpmath.mpf(_TIE_MARGIN[kind]), mpmath.mpf(_TIE_WEIGHT[kind])
    raw_z, raw_t = (np.array(x, dtype=float).reshape(-1, np.shape(x)[-1]).tolist() for x in (z, t))
    with mpmath.workdps(SCALE_DPS + 10):
        for zr, tr, rz, rt in zip(softmax_rows(z, mpmath.mpf(T)), softmax_rows(t, mpmath.mpf(T)), raw_z, raw_t):
            if rz == rt:
                continue   # identical rows: exact ties in every implementation
            for lq, lp, q, fq, fp in zip(zr.logp, tr.logp, zr.p, zr.fin, tr.fin):
                if fq and fp and abs(lq - lp) < margin and min(q, 1 - q) / T >= weight:
                    return False
    return True


def _tvd_case(z, t, T, group, flags, comment, seed, recipe, low=False, kind=None):
    kind = kind or ("low" if low else "float32" if all(_f32(x) for x in (z, t)) else "float64")
    assert _ties_ok(z, t, T, kind), f"tvd case {comment!r}: a token is near a tie"
    return pair_case(TVD, z, t, {"temperature": T}, {}, group, flags + ("TieMargin",), comment, seed, recipe, low)


def _f32(x) -> bool:
    return S.in_dtype(x, "float32") == x


def _tvd_cases() -> list[Case]:
    out = []
    for s, t, why, section, printed in ((_PAIR_S, _PAIR_T, "teacher (0.8, 0.2), student (0.4, 0.6): ½(0.4 + 0.4) = 0.4",
                                         SEC_ONPOLICY, _PRINTED_PAIR),
                                        (_THREE_S, _THREE_T, "«cat», «dog», «fox»: ½(0.1 + 0.1 + 0.2) = 0.2",
                                         SEC_VOCAB, _PRINTED_THREE)):
        assert _ties_ok(s, t, 1.0, "float64")
        out.append(Case(TVD, {"student_logits": s, "teacher_logits": t}, params={"temperature": 1.0},
                        flags=("Article", "TieMargin"), comment=f"total variation, {why}; logits = log probabilities",
                        provenance=article(section, printed)))
    out += random_pairs(TVD, "paper", {}, lambda T, r: {"temperature": T}, 32000, 40, ("TieMargin",),
                        accept=lambda z, t, p, f32: _ties_ok(z, t, p["temperature"], "float32" if f32 else "float64"))
    for k, (v, n, T) in enumerate(((1024, 2, 1.0), (4096, 1, 2.0))):
        seed = 32100 + k
        while True:
            r = S.rng(seed)
            z, t = pair_inputs(r, n, v, 4.0, True, True)
            if _ties_ok(z, t, T, "float32"):
                break
            seed += 10
        out.append(_tvd_case(z, t, T, "paper", ("Large",), f"V={v}, N={n}, T={T:g}, float32", seed,
                             "normal logits, independent teacher"))
    # ties: equal rows (every token a tie, also at −inf) beside rows that differ
    r = S.rng(32200)
    z = S.logits(r, (4, 8), 3.0)
    z[1] = [-0.75] * 8
    z[3][2] = z[3][5] = -INF
    out.append(_tvd_case(z, [row[:] for row in z], 2.0, "paper", ("EqualInputs", "Ties"),
                         "teacher = student (uniform row, −inf tokens): tvd 0, gradient 0 whatever sign(0) is",
                         32200, "normal logits"))
    t = [row[:] for row in z]
    t[0] = S.logits(r, (1, 8), 3.0)[0]
    t[2] = S.logits(r, (1, 8), 3.0)[0]
    out.append(_tvd_case(z, t, 1.0, "paper", ("EqualInputs", "Ties"), "rows 1 and 3 equal (all ties), rows 0 and 2 "
                         "independent", 32201, "normal logits"))
    for k, (zs, ts, why) in enumerate(support_sets("any")):
        out.append(_tvd_case(zs, ts, (1.0, 2.0, 0.5)[k], "paper", ("NegInfLogits",),
                             why + " (finite: the TVD is at most 1)", 32210 + k, "fixed"))
    out.append(_tvd_case(HUGE_STUDENT, HUGE_TEACHER, 1.0, "paper", ("HugeLogits",), "logits ±1e4, T = 1", 32220,
                         "fixed"))
    out.append(_tvd_case(HUGE_STUDENT, HUGE_TEACHER, 2.0, "paper", ("HugeLogits",), "logits ±1e4, T = 2", 32221,
                         "fixed"))
    for k, same in enumerate((True, False)):
        r = S.rng(32230 + k)
        z, t = near_deterministic(r, 3, 12, 1.0, same)
        out.append(_tvd_case(z, t, 1.0, "paper", ("NearDeterministic",), "one-hot-like rows, "
                             + ("the same" if same else "different") + " top tokens", 32230 + k,
                             "normal logits + 38·T at one token"))
    r = S.rng(32240)
    z, t = pair_inputs(r, 3, 12, 3.0, True, True)
    out.append(_tvd_case(z, t, 1e-3, "paper", ("TinyTemperature", "NearDeterministic"),
                         "normal logits at T = 1e-3 (one-hot rows), float32", 32240, "normal logits"))
    r = S.rng(32250)
    z, t = cancellation_inputs(r, 3, 10, False)
    out.append(_tvd_case(z, t, 1.0, "paper", ("Cancellation",), "teacher = student + 1e-7 noise (binary64): "
                         "|q − p| ~ 1e-7 at every token", 32250, "normal logits + tiny noise", kind="float64"))
    out += _tvd_low_cases()
    ok_z, ok_t = [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]], [[0.5, 2.5, 0.0], [1.0, -1.0, 2.0]]
    bad = [
        (ok_z, ok_t, {"temperature": 0.0}, "T = 0"),
        (ok_z, ok_t, {"temperature": -2.0}, "T < 0"),
        (ok_z, [[0.5, 2.5, 0.0]], {}, "shapes disagree (rows)"),
        ([[1.0, math.nan, 0.5], [0.0, -1.0, 3.0]], ok_t, {}, "NaN student logit"),
        (ok_z, [[0.5, 2.5, INF], [1.0, -1.0, 2.0]], {}, "+inf teacher logit"),
        ([[-INF, -INF, -INF], [0.0, -1.0, 3.0]], ok_t, {}, "student row −inf everywhere"),
        ([[], []], [[], []], {}, "empty vocabulary"),
        (1.5, 0.5, {}, "scalar logits (no vocabulary axis)"),
    ]
    for z, t, params, why in bad:
        out.append(Case(TVD, {"student_logits": z, "teacher_logits": t}, params={"temperature": 1.0, **params},
                        group="invalid", result="invalid", flags=("InvalidInput",), comment=why,
                        provenance=generated(0, "fixed")))
    return out


def _tvd_low_cases() -> list[Case]:
    """Random bfloat16/float16 cases (independent teachers, V up to 1024) kept NEAR_LOW from ties —
    57, so that with the edges each low dtype has 40 — and the low-precision edges: equal rows,
    −inf supports, saturated rows."""
    out, spare = [], 33500
    for i in range(57):
        seed, grid = 33000 + i, S.low_grid(i)
        while True:
            r = S.rng(seed)
            v = int(r.choice((2, 3, 5, 8, 13, 16, 32, 64, 128, 256, 1024)))
            n = max(1, min(int(r.integers(1, 9)), 384 // v))
            T = float(r.choice(TEMPERATURES))
            spread = float(r.choice([1.0, 3.0, 6.0]))
            z = S.in_low(clip_logits(S.logits(r, (n, v), spread), 30.0), grid)
            t = S.in_low(clip_logits(S.logits(r, (n, v), spread), 30.0), grid)
            if _ties_ok(z, t, T, "low"):
                break
            seed, spare = spare, spare + 1
        out.append(_tvd_case(z, t, T, "paper", ("Random", "LowPrecision"),
                             f"logits exact in {S.grid_note(grid)}, N={n}, V={v}, T={T:g}, σ={spread:g}, teacher "
                             "independent", seed, f"normal logits clipped to ±30, rounded to the {grid} grid",
                             low=True))
    z = S.in_low([[0.5] * 6, [2.0, 2.0, -1.0, 0.25, 2.0, 1.0], [-3.0, 4.0, 4.0, -INF, 0.0, -3.0]], S.BOTH)
    out.append(_tvd_case(z, [row[:] for row in z], 1.0, "paper", ("EqualInputs", "Ties", "LowPrecision"),
                         "teacher = student, tied logits and a −inf token: tvd 0, gradient 0", 33400, "fixed rows",
                         low=True))
    for k, (zs, ts, why) in enumerate(support_sets("any")):
        out.append(_tvd_case(zs, ts, (0.75, 1.5, 3.0)[k], "paper", ("NegInfLogits", "LowPrecision"), why,
                             33410 + k, "fixed", low=True))
    z, t = distill_low.low_saturated(S.rng(33420), 3, 12, 1.0, False)
    out.append(_tvd_case(z, t, 1.0, "paper", ("NearDeterministic", "LowPrecision"),
                         "saturated rows, different top tokens", 33420, "normal logits + 30·T at one token", low=True))
    return out


def cases() -> list[Case]:
    return _skew_cases() + _tvd_cases()
