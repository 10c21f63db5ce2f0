"""What the distillation vectors are built from: the objective ids, the parameter grids, random
and fixed input rows, the cotangent of a case, and the case constructors that the family's case
modules share (``distill``, ``distill_divergences``, ``distill_sparse``, ``distill_low``); the
tolerance scales are in ``distill_scales``."""
from __future__ import annotations

import hashlib
import json
import math

import numpy as np

from lossproof.conformance import catalog, numbers
from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated

SM, HIN, TKL, JSD = "distill.softmax", "distill.hinton", "distill.token_kl", "distill.generalized_jsd"
SYM = "distill.symmetric_kl"
SKL, TVD, SPK = "distill.skew_kl", "distill.tvd", "distill.sparse_kl"

INF = math.inf
TEMPERATURES = (0.5, 1.0, 2.0, 4.0)
VOCABS = (2, 3, 4, 5, 7, 8, 12, 16, 24, 32, 50, 64)
ALPHAS = (0.0, 0.1, 0.5, 0.9, 1.0)
BETAS = (0.1, 0.5, 0.9)
ULP_1E4_F32 = 2.0 ** -10   # spacing of float32 (and binary64 multiples of it) near 1e4


def _cotangent_seed(objective: str, merged: dict) -> int:
    """A seed from the objective, its inputs and every parameter (paper defaults filled in): the
    scale functions, which see only those, can rebuild the cotangent a case was given."""
    spec = catalog.get(objective)
    # A parameter added later, at its default, stays out: the cases that existed before it keep
    # their cotangents (and bytes).
    content = {"objective": objective,
               "inputs": {i.name: numbers.encode_input(merged[i.name]) for i in spec.inputs},
               "params": {p.name: merged[p.name] for p in spec.params
                          if not (p.added and merged[p.name] == p.default)}}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def case_cotangent(objective: str, merged: dict):
    """The case's cotangent: nonzero multiples of 1/64 in [−2, 2] (exact in bfloat16 and float16),
    shaped like the output."""
    r = S.rng(_cotangent_seed(objective, merged))
    shape = np.shape(merged["logits" if objective == SM else "student_logits"])
    shape = () if objective == HIN else shape if objective == SM else shape[:-1]
    ks = r.integers(1, 129, size=shape) * r.choice([-1, 1], size=shape)
    return (ks / 64.0).tolist()


def with_cotangents(out: list[Case]) -> list[Case]:
    for case in out:
        if case.result != "invalid":
            spec = catalog.get(case.objective)
            merged = {**spec.defaults, **case.conventions, **case.params, **case.inputs}
            case.cotangents = {spec.outputs[0]: case_cotangent(case.objective, merged)}
    return out


def _logits(r, n: int, v: int, spread: float) -> list:
    return S.logits(r, (n, v), spread)


def _teacher(r, student: list, spread: float, independent: bool) -> list:
    if independent:
        return S.logits(r, (len(student), len(student[0])), spread)
    return S.near(r, student, 1.0)


def clip_logits(x, bound: float) -> list:
    if isinstance(x, list):
        return [clip_logits(v, bound) for v in x]
    return max(-bound, min(bound, x))


def shape_nv(r, max_elems: int = 512) -> tuple[int, int]:
    v = int(r.choice(VOCABS))
    n = int(r.integers(1, 33))
    n = max(1, min(n, max_elems // v))
    return n, v


def maybe_f32(x, flag: bool):
    return S.in_dtype(x, "float32") if flag else x


# Fixed rows with −inf logits (V = 6). A: the same impossible tokens on both sides; B: the student
# has more impossible tokens (finite for KL(q‖p)); C: the teacher has more (finite for KL(p‖q)).
NI_STUDENT_A = [[1.5, -INF, 0.25, -2.0, -INF, 3.0], [-INF, 0.5, -INF, -INF, 2.0, -1.0],
                [0.0, 0.0, -INF, 1.0, -0.5, -INF]]
NI_TEACHER_A = [[0.5, -INF, 1.25, -1.0, -INF, 2.0], [-INF, 1.5, -INF, -INF, 1.0, 0.0],
                [1.0, -0.5, -INF, 0.0, 0.5, -INF]]
NI_STUDENT_B = [[-INF, -INF, 0.25, -2.0, -INF, 3.0], [-INF, 0.5, -INF, -INF, 2.0, -1.0],
                [0.0, -INF, -INF, 1.0, -0.5, -INF], [-INF, -INF, 2.0, -INF, -INF, -INF]]
NI_TEACHER_B = NI_TEACHER_A + [[0.5, 1.0, -1.5, 0.0, 2.5, -3.0]]
NI_STUDENT_C = NI_STUDENT_A + [[0.5, 1.0, -1.5, 0.0, 2.5, -3.0]]
NI_TEACHER_C = [[0.5, -INF, 1.25, -INF, -INF, 2.0], [-INF, 1.5, -INF, -INF, 1.0, 0.0],
                [1.0, -0.5, -INF, 0.0, -INF, -INF], [-INF, -INF, 2.0, -INF, -INF, -INF]]
NI_LABELS_A = [5, 4, 3]
NI_LABELS_C = [5, 4, 3, 2]

# ±1e4 logits: T = 1 and T = 2 (gaps of order 1) and T = 1e-3 (gaps of float32 spacings).
HUGE_STUDENT = [[1e4, -1e4, 1e4 - 1, 9998.5, 0.0], [-1e4, -1e4 + 2.5, -1e4 + 1, 1e4, -1e4],
                [1e4, 1e4, -1e4, -1e4, 9999.75]]
HUGE_TEACHER = [[1e4 - 0.5, -1e4, 1e4, 9997.0, -1e4 + 3], [-1e4 + 1, -1e4, -1e4 + 2, 1e4 - 2, 1e4],
                [1e4, 9999.5, -1e4, 1e4, 9999.25]]
_U = ULP_1E4_F32
HUGE_TINY_STUDENT = [[1e4, 1e4 - _U, 1e4 - 2 * _U, -1e4], [-1e4, -1e4 + _U, -1e4 + 3 * _U, -1e4 + 2 * _U],
                     [1e4 - 4 * _U, 1e4, -1e4, 1e4 - _U]]
HUGE_TINY_TEACHER = [[1e4 - _U, 1e4, 1e4 - 3 * _U, 1e4 - 4 * _U], [-1e4 + 2 * _U, -1e4, -1e4 + _U, -1e4 + 3 * _U],
                     [1e4, 1e4 - 2 * _U, -1e4, 1e4 - _U]]


def pair_inputs(r, n: int, v: int, spread: float, independent: bool, f32: bool) -> tuple[list, list]:
    z = _logits(r, n, v, spread)
    t = _teacher(r, z, spread, independent)
    return maybe_f32(z, f32), maybe_f32(t, f32)


def random_labels(r, n: int, v: int) -> list:
    return [int(y) for y in r.integers(0, v, size=n)]


def near_deterministic(r, n: int, v: int, T: float, same_top: bool) -> tuple[list, list]:
    z = S.logits(r, (n, v), 1.0)
    t = S.logits(r, (n, v), 1.0)
    for i in range(n):
        k = int(r.integers(0, v))
        z[i][k] += 38.0 * T
        kt = k if same_top else (k + 1 + int(r.integers(0, v - 1))) % v
        t[i][kt] += 38.0 * T
    return z, t


def cancellation_inputs(r, n: int, v: int, f32: bool) -> tuple[list, list]:
    """Teacher = student + 1e-7 noise (binary64) or ± one float32 spacing on about half the tokens."""
    z = S.logits(r, (n, v), 3.0)
    if not f32:
        return z, S.near(r, z, 1e-7)
    z = S.in_dtype(z, "float32")
    zf = np.asarray(z, dtype=np.float32)
    step = r.integers(-1, 2, size=zf.shape)
    t = np.where(step > 0, np.nextafter(zf, np.float32(INF)),
                 np.where(step < 0, np.nextafter(zf, np.float32(-INF)), zf))
    return z, t.astype(float).tolist()


# ----------------------------------------------------------------------------- case constructors

def softmax_case(logits, T, flags, comment, seed, recipe, low=False):
    return Case(SM, {"logits": logits}, params={"temperature": T}, flags=flags, comment=comment,
                low_precision=low, provenance=generated(seed, recipe))


def hinton_case(z, t, y, T, alpha, group, flags, comment, seed, recipe, low=False):
    t2 = group != "no-t2"
    flags = flags + (() if t2 else ("NoT2Scale",))
    return Case(HIN, {"student_logits": z, "teacher_logits": t, "labels": y},
                params={"temperature": T, "alpha": alpha}, conventions={"t2_scale": t2}, group=group,
                flags=flags, comment=comment, low_precision=low, provenance=generated(seed, recipe))


def pair_case(obj, z, t, params, conv, group, flags, comment, seed, recipe, low=False):
    return Case(obj, {"student_logits": z, "teacher_logits": t}, params=params, conventions=conv, group=group,
                flags=flags, comment=comment, low_precision=low, provenance=generated(seed, recipe))


def random_pairs(obj, group, conv, params_of, seed0, count, extra_flags=(), accept=None, describe=None) -> list[Case]:
    """``count`` random pairs (half float32): shape, spread and T from the case's seed, then
    ``params_of(T, r)``. ``accept(z, t, params, f32)`` redraws with the next spare seed
    (seed0 + count + …) until it holds; ``describe(params)`` is what the comment says of the
    params (default: each one but the temperature)."""
    out, spare = [], seed0 + count
    for i in range(count):
        seed = seed0 + i
        while True:
            r = S.rng(seed)
            n, v = shape_nv(r)
            spread = float(r.choice([1.0, 3.0, 6.0]))
            T = float(r.choice(TEMPERATURES))
            params = params_of(T, r)
            f32 = i % 2 == 0
            z, t = pair_inputs(r, n, v, spread, bool(i % 3 == 0), f32)
            if accept is None or accept(z, t, params, f32):
                break
            seed, spare = spare, spare + 1
        out.append(pair_case(obj, z, t, params, conv, group, ("Random",) + extra_flags,
                             f"random N={n}, V={v}, σ={spread:g}, T={T:g}" + (describe or _describe)(params)
                             + (", float32" if f32 else ""), seed,
                             "normal logits; teacher independent or student + N(0,1)"))
    return out


def _describe(params) -> str:
    desc = ", ".join(f"{'β' if k == 'beta' else k}={val:g}" for k, val in params.items() if k != "temperature")
    return f", {desc}" if desc else ""


def support_sets(kind: str) -> list[tuple]:
    """(student, teacher, comment) −inf sets with a finite divergence for ``kind``:
    'reverse' needs supp q ⊆ supp p, 'forward' supp p ⊆ supp q, 'any' (0 < β < 1) neither,
    'both' (the symmetric KL) supp q = supp p."""
    sets = [(NI_STUDENT_A, NI_TEACHER_A, "−inf at the same tokens on both sides")]
    if kind in ("reverse", "any"):
        sets.append((NI_STUDENT_B, NI_TEACHER_B, "student −inf where the teacher is finite; a one-hot student row"))
    if kind in ("forward", "any"):
        sets.append((NI_STUDENT_C, NI_TEACHER_C, "teacher −inf where the student is finite; a one-hot teacher row"))
    return sets


def pair_edges(obj, group, conv, params_of, kind, seed0, extra_flags=(), onehot_seed=None,
               low_params_of=None) -> list[Case]:
    """Edge cases shared by token_kl and generalized_jsd; ``params_of(T)`` gives the params.
    ``onehot_seed`` replaces the seed of the T = 1e-3 random case where the exact reference's
    digits are not stable for the default one (see the jsd caller); ``low_params_of(T, k)`` gives
    the params of the k-th low-precision case (default ``params_of(T)``)."""
    out = []
    fl = extra_flags

    def add(z, t, T, flags, comment, seed, recipe="fixed", low=False, params=None):
        out.append(pair_case(obj, z, t, params or params_of(T), conv, group, flags + fl, comment, seed, recipe,
                             low))

    r = S.rng(seed0)
    z = S.logits(r, (4, 8), 3.0)
    z[1] = [-0.75] * 8
    z[2][1] = z[2][6] = max(z[2]) + 0.5
    add(z, [row[:] for row in z], 2.0, ("EqualInputs", "Ties"), "teacher = student: divergence 0; a uniform row "
        "and a tied maximum", seed0, "normal logits")
    r = S.rng(seed0 + 1)
    z, t = pair_inputs(r, 3, 6, 2.0, True, True)
    z[0] = [0.5] * 6
    t[2] = [-3.0] * 6
    t[1][0] = t[1][4] = max(t[1])
    add(z, t, 1.0, ("Ties",), "uniform student row, uniform teacher row, tied teacher maximum", seed0 + 1,
        "normal logits")
    add(HUGE_STUDENT, HUGE_TEACHER, 1.0, ("HugeLogits",), "logits ±1e4, T = 1", seed0 + 2)
    add(HUGE_STUDENT, HUGE_TEACHER, 2.0, ("HugeLogits",), "logits ±1e4, T = 2", seed0 + 3)
    add(HUGE_TINY_STUDENT, HUGE_TINY_TEACHER, 1e-3, ("HugeLogits", "TinyTemperature"),
        "logits ±1e4 differing by 2^-10, T = 1e-3", seed0 + 4)
    tiny_z = S.in_dtype([[0.5, 0.501, 0.4995, -3.0, 0.5005], [1.0, 1.002, 0.999, 1.0, 0.0]], "float32")
    tiny_t = S.in_dtype([[0.5005, 0.5, 0.499, 0.2, 0.5], [1.001, 1.0, 1.0, 0.998, 0.5]], "float32")
    add(tiny_z, tiny_t, 1e-3, ("TinyTemperature",), "logits 1e-3 apart, T = 1e-3, float32", seed0 + 5)
    seed = onehot_seed or seed0 + 6
    r = S.rng(seed)
    z, t = pair_inputs(r, 4, 12, 3.0, True, True)
    add(z, t, 1e-3, ("TinyTemperature", "NearDeterministic"), "normal logits at T = 1e-3 (one-hot rows), float32",
        seed, "normal logits")
    for k, (z, t, why) in enumerate(support_sets(kind)):
        add(z, t, (1.0, 2.0, 0.5)[k], ("NegInfLogits",), why, seed0 + 7 + k)
    for f32 in (False, True):
        r = S.rng(seed0 + 10 + f32)
        z, t = cancellation_inputs(r, 4, 16, f32)
        add(z, t, 1.0, ("Cancellation",), "teacher = student + " + ("one float32 spacing" if f32 else "1e-7 noise"),
            seed0 + 10 + f32, "normal logits + tiny noise")
    for k, same in enumerate((True, False)):
        r = S.rng(seed0 + 14 + k)
        z, t = near_deterministic(r, 3, 12, 1.0, same)
        add(z, t, 1.0, ("NearDeterministic",), "one-hot-like rows, " + ("the same" if same else "different")
            + " top tokens", seed0 + 14 + k, "normal logits + 38·T at one token")
    r = S.rng(seed0 + 13)
    z, t = near_deterministic(r, 2, 5, 0.5, True)
    add(z, t, 0.5, ("NearDeterministic",), "one-hot-like rows at T = 0.5, same top token", seed0 + 13,
        "normal logits + 38·T at one token")
    for k, dtype in enumerate(("bfloat16", "float16", "bfloat16", "float16")):
        seed = seed0 + 20 + k
        r = S.rng(seed)
        v = (8, 16, 64, 32)[k]
        T = (1.0, 2.0, 0.5, 1.0)[k]
        z = S.in_dtype(clip_logits(S.logits(r, (8, v), 4.0), 20.0), dtype)
        t = S.in_dtype(clip_logits(S.near(r, z, 1.5) if k % 2 else S.logits(r, (8, v), 4.0), 20.0), dtype)
        params = (low_params_of or (lambda T, k: params_of(T)))(T, k)
        extra = "".join(f", β={val:g}" for key, val in params.items() if key == "beta")
        add(z, t, T, ("LowPrecision",), f"logits exact in {dtype}, V={v}, T={T:g}{extra}", seed,
            f"normal logits clipped to ±20, rounded to {dtype}", low=True, params=params)
    return out
