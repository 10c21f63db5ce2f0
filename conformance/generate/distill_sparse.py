"""Vectors for ``distill.sparse_kl`` (a top-k teacher, as offline distillation stores it), with its
flags and groups (its tolerance scale is in ``distill_scales``); ``conformance.generate.distill``
merges them into the family.

One group per ``renormalize`` value: 'none' ('paper': verl 0.9.1's forward_kl_topk), 'teacher',
'both' (TRL 1.16.0 IW-OPD without its tail bucket) and 'tail' (added in 1.3.0 after the others, so
their test ids stay: TRL's default, the tail bucket). Each has random cases (the teacher's top-k of
a softmax, its ids in a random order, half of them on the float32 grid), edge cases (K = 1, K = V,
padding ids, impossible student tokens off the teacher's ids, a near-deterministic teacher,
logits ±1e4), a large vocabulary and low-precision cases on the bfloat16/float16 grids. 'tail'
has K < V in its random cases (K = V leaves the student no mass for the teacher's tail), K = V
only with a one-hot teacher (tail 0), a tail of 1e-9, and its own invalid cases. 'sparse-t2'
(1.7.0, after all of these) is 'none' with ``t2_scale``: axolotl's top-k KD loss, T ≠ 1.
"""
from __future__ import annotations

import math

import mpmath
import numpy as np

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated
from lossproof.conformance.generate.distill_inputs import INF, SPK, TEMPERATURES, VOCABS
from lossproof.refimpl import validate

# Low-precision cases per convention: two in three on the bfloat16+float16 grid, so that the three
# conventions together give at least 40 valid vectors per low dtype (tests/generate/test_low_precision.py).
LOW_PER_CONVENTION = 21
# Digits at which exp and log are evaluated before their one rounding to binary64: far beyond the
# 17 that binary64 needs, so that the rounding is that of the exact value.
ROUNDED_ONCE_DPS = 40
CONVENTIONS = (("none", "paper"), ("teacher", "sparse-teacher"), ("both", "sparse-both"))

NOTES = {
    "SparseTopOne": {"category": "edge", "description": "distill.sparse_kl with K = 1: 'none' is −p_1·log q_{i_1} "
                     "plus p_1 log p_1, 'teacher' is −log q_{i_1}, 'both' is exactly 0 with gradient 0.",
                     "bugType": "degenerate-input",
                     "effect": "K = 1 makes the renormalised distributions one-hot: careless renormalisation "
                               "divides by zero or keeps a stray term."},
    "SparsePadding": {"category": "edge", "description": "distill.sparse_kl: some teacher ids carry log-probability "
                      "−inf (padding, as TRL fills a short top-k): no term, and 'both' leaves them out of the "
                      "student's renormalisation.",
                      "bugType": "masking",
                      "effect": "Padded teacher ids with log-probability −inf counted as tokens: NaN from 0·(−inf) "
                                "or mass on padding."},
    "SparseFullSupport": {"category": "edge", "description": "distill.sparse_kl with K = V and the teacher's whole "
                          "softmax: every renormalize convention is the forward KL(p‖q).",
                          "bugType": "convention",
                          "effect": "With the teacher's whole softmax every renormalisation must equal the forward "
                                    "KL; a different result reveals a renormalisation bug."},
    "SparseTailZero": {"category": "edge", "description": "distill.sparse_kl with renormalize='tail' and a one-hot "
                       "teacher (its one live log-probability is 0, K = V with padding ids): p_tail = 0, so the tail "
                       "term is 0 and the student's tail (its mass at the padding ids) only enters the gradient "
                       "through q.",
                       "bugType": "non-finite",
                       "effect": "A zero tail mass gives log 0 in the tail term: NaN or −inf instead of 0."},
    "SparseTinyTail": {"category": "edge", "description": "distill.sparse_kl with renormalize='tail' and a teacher "
                       "whose top-k holds all but ~1e-9 of its mass (below TRL's clamp of log Σ p at −1e-7).",
                       "bugType": "cancellation",
                       "effect": "A tail mass of 1e-9 formed as 1 − Σ p (or clamped) loses its digits."},
}

GROUPS = {
    "sparse-teacher": "distill.sparse_kl with renormalize='teacher': the teacher's top-k probabilities divided by "
                      "their sum, the student's full-vocabulary log-probabilities gathered at the ids (no pinned "
                      "library ships this one; it is the KL of the renormalised teacher to the full student)",
    "sparse-both": "distill.sparse_kl with renormalize='both': teacher and student both renormalised over the "
                   "teacher's ids (padding ids, log-probability −inf, left out) — TRL 1.16.0 "
                   "experimental/iw_opd/iw_opd_trainer.py _compute_server_forward_kl_loss with loss_add_tail=False",
    "sparse-t2": "distill.sparse_kl with renormalize='none' and t2_scale: the teacher's top-k as stored, the "
                 "student's full-vocabulary log q at temperature T, each row times T² — axolotl "
                 "src/axolotl/integrations/kd/topk_logprob/forward_kl.py loss ('Multiply by T^2 (classical KD "
                 "scaling)', kd_temperature)",
    "sparse-tail": "distill.sparse_kl with renormalize='tail': neither side renormalised, a (K+1)-th bucket "
                   "p_tail = 1 − Σ p, q_tail = 1 − Σ q (over the live ids) on both, the forward KL over the K+1 "
                   "buckets — TRL 1.16.0's default loss_add_tail=True: _add_tail_bucket in "
                   "experimental/server_distillation/server_distillation_trainer.py:72 (and "
                   "experimental/iw_opd/iw_opd_trainer.py:99), sdpo/loss_utils.py add_tail_bucket",
}


def _log_softmax(t: np.ndarray) -> np.ndarray:
    """t − m − log Σ exp(t − m) per row, the way a library forms it, with each exp and the log
    rounded once from mpmath: NumPy's float64 exp and log take the SIMD path the CPU offers (AVX-512
    or not), whose last bit differs, and the teacher's log-probabilities are stored inputs. The rest
    are IEEE operations (the row sum is NumPy's pairwise order, which no dispatch changes)."""
    m = t.max(axis=-1, keepdims=True)
    with mpmath.workdps(ROUNDED_ONCE_DPS):
        e = np.vectorize(lambda x: S.nearest(mpmath.exp(x)), otypes=[float])(t - m)
        log_sum = np.vectorize(lambda x: S.nearest(mpmath.log(x)), otypes=[float])(e.sum(axis=-1, keepdims=True))
    return t - m - log_sum


def _top_k(r, t: list, k: int, shuffle: bool) -> tuple[list, list]:
    """The teacher's top-k ids of softmax(t) (in a random order when ``shuffle``) and their log-probabilities."""
    lp = _log_softmax(np.array(t, dtype=float))
    ids = np.argsort(-lp, axis=-1, kind="stable")[:, :k]
    if shuffle:
        ids = np.array([r.permutation(row) for row in ids])
    return ids.tolist(), np.take_along_axis(lp, ids, axis=-1).tolist()


def _case(z, ids, lps, renormalize, group, T, flags, comment, seed, recipe, low=False, t2_scale=False) -> Case:
    conventions = {"renormalize": renormalize, **({"t2_scale": True} if t2_scale else {})}
    return Case(SPK, {"student_logits": z, "teacher_ids": ids, "teacher_logps": lps},
                params={"temperature": T}, conventions=conventions, group=group, flags=flags,
                comment=comment, low_precision=low, provenance=generated(seed, recipe))


def _random_cases(renormalize, group, seed0) -> list[Case]:
    out = []
    for i in range(14):
        r = S.rng(seed0 + i)
        v = int(r.choice(VOCABS))
        n = int(r.integers(1, 9))
        k = int(r.integers(1, min(v, 16) + 1))
        spread = float(r.choice([1.0, 3.0, 6.0]))
        T = float(r.choice(TEMPERATURES))
        z = S.logits(r, (n, v), spread)
        independent = bool(i % 3 == 0)
        t = S.logits(r, (n, v), spread) if independent else S.near(r, z, 1.0)
        ids, lps = _top_k(r, t, k, shuffle=bool(i % 2))
        f32 = i % 2 == 0
        if f32:
            z, lps = S.in_dtype(z, "float32"), S.in_dtype(lps, "float32")
        out.append(_case(z, ids, lps, renormalize, group, T, ("Random",),
                         f"random N={n}, V={v}, K={k}, σ={spread:g}, T={T:g}" + (", float32" if f32 else ""),
                         seed0 + i, "normal logits; teacher independent or student + N(0,1); its top-k of softmax"))
    return out


def _edge_cases(renormalize, group, seed0) -> list[Case]:
    out = []
    r = S.rng(seed0)
    z = S.logits(r, (3, 12), 3.0)
    t = S.near(r, z, 1.0)
    ids, lps = _top_k(r, t, 1, shuffle=False)
    out.append(_case(z, ids, lps, renormalize, group, 1.0, ("SparseTopOne",), "K = 1 (the teacher's top token only)",
                     seed0, "normal logits; teacher top-1"))
    ids, lps = _top_k(r, t, 12, shuffle=True)
    out.append(_case(z, ids, lps, renormalize, group, 1.0, ("SparseFullSupport",),
                     "K = V: the teacher's whole softmax, ids shuffled (the forward KL)", seed0, "normal logits"))
    r = S.rng(seed0 + 1)
    z = S.logits(r, (2, 8), 2.0)
    ids, lps = _top_k(r, S.near(r, z, 1.0), 4, shuffle=True)
    lps[0][3], lps[1][1] = -INF, -INF
    out.append(_case(z, ids, lps, renormalize, group, 2.0, ("SparsePadding",),
                     "one padding id per row (log-probability −inf)", seed0 + 1, "normal logits; top-4, one padded"))
    z = [[1.5, -INF, 0.25, -2.0, -INF, 3.0], [-INF, 0.5, -INF, -INF, 2.0, -1.0]]
    ids, lps = [[5, 0, 2], [4, 1, 5]], [[math.log(0.5), math.log(0.25), math.log(0.125)],
                                         [math.log(0.6), math.log(0.3), math.log(0.05)]]
    out.append(_case(z, ids, lps, renormalize, group, 1.0, ("NegInfLogits",),
                     "student −inf off the teacher's ids (finite)", 0, "fixed"))
    r = S.rng(seed0 + 2)
    z = S.logits(r, (2, 16), 1.0)
    t = [[x + (30.0 if j == 3 else 0.0) for j, x in enumerate(row)] for row in S.logits(r, (2, 16), 1.0)]
    ids, lps = _top_k(r, t, 5, shuffle=True)
    out.append(_case(z, ids, lps, renormalize, group, 1.0, ("NearDeterministic",),
                     "a near-deterministic teacher (p_top ≈ 1 − 1e-12): log-probabilities near 0 and below −30",
                     seed0 + 2, "normal logits + 30 at one teacher token"))
    z = [[1e4, -1e4, 1e4 - 1, 9998.5, 0.0], [-1e4, -1e4 + 2.5, -1e4 + 1, 1e4, -1e4]]
    ids, lps = [[2, 0, 3], [3, 1, 4]], [[math.log(0.5), math.log(0.3), math.log(0.1)],
                                         [math.log(0.7), math.log(0.2), math.log(0.05)]]
    for T in (1.0, 1e-3):
        out.append(_case(z, ids, lps, renormalize, group, T, ("HugeLogits",) + (("TinyTemperature",) if T < 1 else ()),
                         f"student logits ±1e4 at T = {T:g} (saturated rows; tokens of probability e^-2e4)", 0,
                         "fixed"))
    r = S.rng(seed0 + 3)
    z = S.in_dtype(S.logits(r, (1, 4096), 4.0), "float32")
    ids, lps = _top_k(r, S.near(r, z, 1.0), 64, shuffle=True)
    out.append(_case(z, ids, S.in_dtype(lps, "float32"), renormalize, group, 2.0, ("Large",),
                     "V=4096, N=1, K=64, T=2, float32", seed0 + 3, "normal logits; teacher = student + N(0,1)"))
    return out


def _low_cases(renormalize, group, seed0) -> list[Case]:
    out = []
    for i in range(LOW_PER_CONVENTION):
        grid = S.low_grid(i)
        r = S.rng(seed0 + i)
        v = int(r.choice((8, 32, 100, 256)))
        n, k = int(r.integers(1, 5)), int(r.integers(1, 9))
        T = float(r.choice(TEMPERATURES))
        z = S.in_low(S.logits(r, (n, v), 3.0), grid)
        ids, lps = _top_k(r, S.near(r, z, 1.0), k, shuffle=True)
        out.append(_case(z, ids, S.in_low(lps, grid), renormalize, group, T, ("Random", "LowPrecision"),
                         f"{grid} grid, N={n}, V={v}, K={k}, T={T:g}", seed0 + i,
                         f"normal logits on the {grid} grid; teacher = student + N(0,1), top-k log-probs rounded",
                         low=True))
    return out


def _invalid_cases() -> list[Case]:
    z = [[0.0, 1.0, 2.0, 3.0], [1.0, 0.5, -1.0, 0.0]]
    ids, lps = [[3, 2], [0, 1]], [[-0.5, -1.5], [-1.0, -2.0]]
    bad = [
        ({"teacher_ids": [[3, 3], [0, 1]]}, {}, "an id repeated in a row"),
        ({"teacher_ids": [[3, 4], [0, 1]]}, {}, "an id ≥ V"),
        ({"teacher_ids": [[3, 2], [-1, 1]]}, {}, "a negative id"),
        ({"teacher_logps": [[-0.1, -0.2], [-1.0, -2.0]]}, {}, "teacher probabilities summing to 1.72 > 1"),
        ({"teacher_logps": [[-0.5, math.nan], [-1.0, -2.0]]}, {}, "NaN teacher log-probability"),
        ({"teacher_logps": [[-0.5, INF], [-1.0, -2.0]]}, {}, "+inf teacher log-probability"),
        ({"teacher_logps": [[-INF, -INF], [-1.0, -2.0]]}, {}, "a teacher row of padding only"),
        ({"teacher_ids": [[0, 1, 2, 3, 0], [0, 1, 2, 3, 1]], "teacher_logps": [[-2.0] * 5] * 2}, {}, "K > V"),
        ({"teacher_ids": [[3], [0]]}, {}, "ids and log-probabilities of different shapes"),
        ({"student_logits": [[0.0, 1.0, 2.0, -INF], [1.0, 0.5, -1.0, 0.0]]}, {},
         "student −inf at a teacher id with p > 0: the KL is infinite"),
        ({"student_logits": [[0.0, math.nan, 2.0, 3.0], [1.0, 0.5, -1.0, 0.0]]}, {}, "NaN student logit"),
        ({"temperature": 0.0}, {}, "T = 0"),
        ({}, {"renormalize": "student"}, "unknown renormalize value"),
    ]
    out = []
    for change, conv, why in bad:
        flag = "InfiniteDivergence" if "infinite" in why else "InvalidInput"
        inputs = {"student_logits": z, "teacher_ids": ids, "teacher_logps": lps}
        inputs.update({key: val for key, val in change.items() if key != "temperature"})
        out.append(Case(SPK, inputs, params={"temperature": change.get("temperature", 1.0)}, conventions=conv,
                        group="invalid", result="invalid", flags=(flag,), comment=why,
                        provenance=generated(0, "fixed")))
    return out


def _tail_valid(z, ids, lps) -> bool:
    """Whether a draw is in 'tail''s domain (Σ p ≤ 1 after rounding, a student tail where p_tail > 0)."""
    try:
        validate.sparse_tail(ids, lps, [[v != -INF for v in row] for row in z])
    except validate.InputError:
        return False
    return True


def _tail_random_cases(seed0) -> list[Case]:
    """As ``_random_cases``, with K < V (K = V leaves the student no tail: refused)."""
    out = []
    for i in range(14):
        r = S.rng(seed0 + i)
        v = int(r.choice(VOCABS[1:]))
        n = int(r.integers(1, 9))
        k = int(r.integers(1, min(v - 1, 16) + 1))
        spread = float(r.choice([1.0, 3.0, 6.0]))
        T = float(r.choice(TEMPERATURES))
        z = S.logits(r, (n, v), spread)
        t = S.logits(r, (n, v), spread) if i % 3 == 0 else S.near(r, z, 1.0)
        ids, lps = _top_k(r, t, k, shuffle=bool(i % 2))
        f32 = i % 2 == 0
        if f32:
            z, lps = S.in_dtype(z, "float32"), S.in_dtype(lps, "float32")
        assert _tail_valid(z, ids, lps), (seed0 + i, "draw outside 'tail''s domain")
        out.append(_case(z, ids, lps, "tail", "sparse-tail", T, ("Random",),
                         f"random N={n}, V={v}, K={k}, σ={spread:g}, T={T:g}" + (", float32" if f32 else ""),
                         seed0 + i, "normal logits; teacher independent or student + N(0,1); its top-k of softmax"))
    return out


def _tail_edge_cases(seed0) -> list[Case]:
    """``_edge_cases`` where they are in 'tail''s domain (K = 1, padding, a near-deterministic teacher,
    logits ±1e4 — whose student tail e^{−2e4} a 1 − Σ q cannot resolve — and V = 4096), K = V with a
    one-hot teacher, a tail of 1e-9, and a student −inf at all but one token off the ids."""
    group = "sparse-tail"
    out = [c for c in _edge_cases("tail", group, seed0)
           if not {"SparseFullSupport", "NegInfLogits"} & set(c.flags)]
    r = S.rng(seed0 + 10)
    z = S.logits(r, (3, 6), 2.0)
    ids = [r.permutation(6).tolist() for _ in range(3)]
    lps = [[0.0] + [-INF] * 5 for _ in range(3)]
    out.append(_case(z, ids, lps, "tail", group, 1.0, ("SparseTailZero", "SparsePadding"),
                     "K = V, a one-hot teacher (log-probability 0, the rest padding): p_tail = 0", seed0 + 10,
                     "normal logits; teacher one-hot at a random token"))
    r = S.rng(seed0 + 11)
    z = S.logits(r, (2, 7), 2.0)
    ids = [r.permutation(7)[:3].tolist() for _ in range(2)]
    lps = [[math.log(0.6), math.log(0.3), math.log(0.1 - 1e-9)], [math.log(0.5), math.log(0.25), math.log(0.25 - 1e-9)]]
    for T in (1.0, 2.0):
        out.append(_case(z, ids, lps, "tail", group, T, ("SparseTinyTail",),
                         f"teacher mass 1 − 1e-9 on K = 3 of V = 7, T = {T:g}", seed0 + 11,
                         "normal logits; fixed teacher"))
    z = [[1.5, -INF, 0.25, -2.0, -INF, 3.0], [-INF, 0.5, -INF, 1.0, 2.0, -1.0]]
    ids, lps = [[5, 0, 2], [4, 1, 5]], [[math.log(0.5), math.log(0.25), math.log(0.125)],
                                         [math.log(0.6), math.log(0.3), math.log(0.05)]]
    out.append(_case(z, ids, lps, "tail", group, 1.0, ("NegInfLogits",),
                     "student −inf off the teacher's ids except at one token, which holds the student's tail", 0,
                     "fixed"))
    return out


def _tail_low_cases(seed0) -> list[Case]:
    """As ``_low_cases`` with K < V, drawing again (next seed) where the rounded teacher leaves the domain."""
    out, seed = [], seed0
    while len(out) < LOW_PER_CONVENTION:
        i = len(out)
        grid = S.low_grid(i)
        r = S.rng(seed)
        v = int(r.choice((8, 32, 100, 256)))
        n, k = int(r.integers(1, 5)), int(r.integers(1, 8))
        T = float(r.choice(TEMPERATURES))
        z = S.in_low(S.logits(r, (n, v), 3.0), grid)
        ids, lps = _top_k(r, S.near(r, z, 1.0), k, shuffle=True)
        lps = S.in_low(lps, grid)
        seed += 1
        if not _tail_valid(z, ids, lps):
            continue
        out.append(_case(z, ids, lps, "tail", "sparse-tail", T, ("Random", "LowPrecision"),
                         f"{grid} grid, N={n}, V={v}, K={k}, T={T:g}", seed - 1,
                         f"normal logits on the {grid} grid; teacher = student + N(0,1), top-k log-probs rounded",
                         low=True))
    return out


def _tail_invalid_cases() -> list[Case]:
    z = [[0.0, 1.0, 2.0, 3.0], [1.0, 0.5, -1.0, 0.0]]
    ids, lps = [[3, 2], [0, 1]], [[-0.5, -1.5], [-1.0, -2.0]]
    half = math.log(0.5)   # rounded below −log 2: two of them sum to 1 + 1.1e-16
    bad = [
        ({"teacher_logps": [[half, half], [-1.0, -2.0]]}, "teacher probabilities summing to 1 + 1.1e-16 (two "
         "rounded log 0.5): the tail would be negative", "InvalidInput"),
        ({"teacher_logps": [[math.log(0.6), math.log(0.405)], [-1.0, -2.0]]}, "teacher probabilities summing to "
         "1.005: within the other conventions' rounding tolerance, but the tail would be negative", "InvalidInput"),
        ({"teacher_ids": [[3, 2, 1, 0], [0, 1, 2, 3]], "teacher_logps": [[-0.5, -1.5, -3.0, -4.0],
                                                                         [-1.0, -2.0, -2.5, -3.0]]},
         "K = V with Σ p < 1: the student has no tail for the teacher's, the KL is infinite", "InfiniteDivergence"),
        ({"student_logits": [[-INF, -INF, 2.0, 3.0], [1.0, 0.5, -1.0, 0.0]]},
         "student −inf at every token off the ids while p_tail > 0: the KL is infinite", "InfiniteDivergence"),
        ({"student_logits": [[0.0, 1.0, -INF, 3.0], [1.0, 0.5, -1.0, 0.0]]},
         "student −inf at a teacher id with p > 0: the KL is infinite", "InfiniteDivergence"),
    ]
    out = []
    for change, why, flag in bad:
        inputs = {"student_logits": z, "teacher_ids": ids, "teacher_logps": lps, **change}
        out.append(Case(SPK, inputs, params={"temperature": 1.0}, conventions={"renormalize": "tail"},
                        group="invalid", result="invalid", flags=(flag,), comment=why,
                        provenance=generated(0, "fixed")))
    return out


def _t2_cases(seed0) -> list[Case]:
    """'none' times T² (axolotl): random rows at T ≠ 1 (T = 1 is the unscaled loss), half on the
    float32 grid, then as many on the bfloat16/float16 grids."""
    out = []
    for i in range(24):
        r = S.rng(seed0 + i)
        low = i >= 12
        grid = S.low_grid(i) if low else ""
        v = int(r.choice((8, 32, 100, 256) if low else VOCABS))
        n, k = int(r.integers(1, 9)), int(r.integers(1, min(v, 16) + 1))
        T = float(r.choice((0.5, 2.0, 4.0)))
        z = S.logits(r, (n, v), 3.0)
        z = S.in_low(z, grid) if low else (S.in_dtype(z, "float32") if i % 2 == 0 else z)
        ids, lps = _top_k(r, S.near(r, z, 1.0), k, shuffle=True)
        lps = S.in_low(lps, grid) if low else (S.in_dtype(lps, "float32") if i % 2 == 0 else lps)
        flags = ("Random", "LowPrecision") if low else ("Random",)
        where = f"{grid} grid, " if low else ""
        out.append(_case(z, ids, lps, "none", "sparse-t2", T, flags,
                         f"{where}N={n}, V={v}, K={k}, T={T:g}, times T²", seed0 + i,
                         "normal logits; teacher = student + N(0,1), its top-k of softmax", low=low, t2_scale=True))
    return out


def cases() -> list[Case]:
    out = []
    for k, (renormalize, group) in enumerate(CONVENTIONS):
        out += _random_cases(renormalize, group, 40000 + 500 * k)
        out += _edge_cases(renormalize, group, 40200 + 500 * k)
        out += _low_cases(renormalize, group, 40300 + 500 * k)
    # 'tail' (1.3.0) after every earlier case, so that their test ids stay
    out += _invalid_cases() + _tail_random_cases(41500) + _tail_edge_cases(41700) + _tail_low_cases(41800)
    # t2_scale (1.7.0) after every earlier case, likewise
    return out + _tail_invalid_cases() + _t2_cases(42000)
