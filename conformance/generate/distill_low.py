"""Low-precision distillation vectors (bfloat16 and float16), explained below."""
from __future__ import annotations

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case
from lossproof.conformance.generate.distill_inputs import (
    ALPHAS,
    BETAS,
    INF,
    JSD,
    NI_LABELS_C,
    NI_STUDENT_B,
    NI_STUDENT_C,
    NI_TEACHER_C,
    SYM,
    TEMPERATURES,
    TKL,
    clip_logits,
    hinton_case,
    near_deterministic,
    pair_case,
    random_labels,
    softmax_case,
    support_sets,
)

# ----------------------------------------------------------------------------- low precision
#
# Cases judged in bfloat16 and float16 (the careful model of conformance/compare.py holds them to
# a few ulps of the dtype): random shapes up to V = 4096 on the two low-precision grids
# (sampling.in_low: bfloat16 values that float16 also holds, judged in both; float16 values), and
# the edges that low precision changes — ties (the coarse grid makes them common), −inf logits,
# saturated rows, logits near ±1e4, equal inputs, tiny temperatures, the α and β endpoints.

LOW_VOCABS = (2, 3, 5, 8, 13, 16, 32, 50, 64, 100, 128, 256, 512, 1000, 1024)
LOW_ELEMS = 384          # N·V of a random case; the large ones below keep the real vocabulary
LOW_LARGE = ((4096, 1), (1024, 2))
LOW_RANDOM = 45          # per objective: 30 on the bfloat16+float16 grid, 15 on the float16 grid
LOW_CLIP = 30.0
LOW_FLAGS = ("LowPrecision",)


def _low_shape(r, i: int) -> tuple[int, int]:
    """(N, V) of the i-th random low-precision case: the last of the first LOW_RANDOM are the large
    vocabularies."""
    k = i - (LOW_RANDOM - len(LOW_LARGE))
    if 0 <= k < len(LOW_LARGE):
        v, n = LOW_LARGE[k]
        return n, v
    v = int(r.choice(LOW_VOCABS))
    return max(1, min(int(r.integers(1, 17)), LOW_ELEMS // v)), v


def _low_pair(r, n: int, v: int, grid: str) -> tuple[list, list, str]:
    """Student and teacher logits on ``grid``: the teacher independent, the student plus N(0, 1)
    noise, or the student plus N(0, 0.1) noise (close rows, where a swapped direction or a
    missing factor moves the value least)."""
    spread = float(r.choice([1.0, 3.0, 6.0]))
    kind = str(r.choice(["independent", "near", "close"]))
    z = S.logits(r, (n, v), spread)
    t = S.logits(r, (n, v), spread) if kind == "independent" else S.near(r, z, 1.0 if kind == "near" else 0.1)
    z, t = (S.in_low(clip_logits(x, LOW_CLIP), grid) for x in (z, t))
    return z, t, f"σ={spread:g}, teacher {kind}"


def _low_ties(r, grid: str) -> tuple[list, list]:
    """Rows with ties: uniform, a tied maximum, logits drawn from a few grid values."""
    z = [[0.5] * 6, [2.0, 2.0, -1.0, 0.25, 2.0, 1.0], [float(x) for x in r.choice([-1.0, 0.0, 1.5], 6)],
         [-3.0, 4.0, 4.0, 4.0, 0.0, -3.0]]
    t = [[1.0, 1.0, -0.5, 1.0, 1.0, 0.0], [0.5] * 6, [float(x) for x in r.choice([-2.0, 0.5, 1.0], 6)],
         [4.0, -3.0, 4.0, 0.0, 4.0, 0.0]]
    return S.in_low(z, grid), S.in_low(t, grid)


def low_saturated(r, n: int, v: int, T: float, same_top: bool) -> tuple[list, list]:
    """Rows whose top logit is 30·T above N(0, 1) others: probabilities e^−30 beside 1 (0 in
    float16, a subnormal-free bfloat16 value), q_top rounds to 1."""
    z, t = near_deterministic(r, n, v, T, same_top)
    for rows in (z, t):
        for row in rows:
            k = max(range(v), key=lambda j: row[j])
            row[k] -= 8.0 * T   # 38·T → 30·T above the rest
    return S.in_low(z, S.BOTH), S.in_low(t, S.BOTH)


def _low_huge(r, n: int, v: int) -> tuple[list, list]:
    """Logits 9984 + 64·k and −9984 − 64·k (k small integers; both grids hold them) at T = 64:
    exponents of order 1 after the maximum is shifted out, e^156 before (overflow)."""
    def row():
        sign = float(r.choice([-1.0, 1.0]))
        return [sign * 9984.0 + 64.0 * float(k) for k in r.integers(-3, 4, size=v)]
    return [row() for _ in range(n)], [row() for _ in range(n)]


def _low_tiny_t(r, n: int, v: int) -> tuple[list, list]:
    """Logits 0.5 + k/64 at T = 0.05: exponents k·0.3125."""
    return ([[0.5 + float(k) / 64 for k in r.integers(-8, 9, size=v)] for _ in range(n)],
            [[0.5 + float(k) / 64 for k in r.integers(-8, 9, size=v)] for _ in range(n)])


def _low_desc(grid, n, v, T, extra=""):
    return f"logits exact in {S.grid_note(grid)}, N={n}, V={v}, T={T:g}" + (f", {extra}" if extra else "")


def _low_softmax_cases() -> list[Case]:
    out = []
    seed0 = 20000
    for i in range(LOW_RANDOM):
        seed, grid = seed0 + i, S.low_grid(i)
        r = S.rng(seed)
        n, v = _low_shape(r, i)
        T = float(r.choice(TEMPERATURES))
        spread = float(r.choice([1.0, 3.0, 6.0]))
        lead = (n,) if i % 4 else ((int(r.integers(1, 4)), max(1, n // 3)) if n > 1 else ())
        z = S.in_low(clip_logits(S.logits(r, lead + (v,), spread), LOW_CLIP), grid)
        flags = ("Random",) + (("Large",) if v >= 1000 else ()) + LOW_FLAGS
        out.append(softmax_case(z, T, flags, _low_desc(grid, n, v, T, f"shape {lead + (v,)}, σ={spread:g}"), seed,
                                f"normal logits clipped to ±{LOW_CLIP:g}, rounded to the {grid} grid", low=True))
    r = S.rng(seed0 + 100)
    z, _ = _low_ties(r, S.BOTH)
    out.append(softmax_case(z, 1.0, ("Ties",) + LOW_FLAGS,
                            "uniform rows and tied maxima, exact in bfloat16 and float16",
                            seed0 + 100, "fixed rows", low=True))
    out.append(softmax_case(NI_STUDENT_B, 0.5, ("NegInfLogits",) + LOW_FLAGS, "−inf logits, one row with a single "
                            "possible token, T = 0.5", seed0 + 101, "fixed", low=True))
    out.append(softmax_case([[-INF, 2.0, -INF, 2.0], [0.0, -INF, 0.0, -0.5]], 2.0, ("NegInfLogits", "Ties") + LOW_FLAGS,
                            "−inf logits with ties, T = 2", seed0 + 106, "fixed", low=True))
    for T, seed in ((1.0, seed0 + 102), (4.0, seed0 + 103), (0.5, seed0 + 107)):
        r = S.rng(seed)
        z, _ = low_saturated(r, 4, 24, T, True)
        out.append(softmax_case(z, T, ("NearDeterministic",) + LOW_FLAGS,
                                f"saturated rows: top logit 30·T above, T={T:g}",
                                seed, "normal logits + 30·T at one token", low=True))
    r = S.rng(seed0 + 104)
    z, _ = _low_huge(r, 3, 16)
    out.append(softmax_case(z, 64.0, ("HugeLogits",) + LOW_FLAGS, "logits ±9984 + 64·k, T = 64", seed0 + 104,
                            "fixed grid values", low=True))
    r = S.rng(seed0 + 105)
    z, _ = _low_tiny_t(r, 3, 12)
    out.append(softmax_case(z, 0.05, ("TinyTemperature",) + LOW_FLAGS, "logits 0.5 + k/64 at T = 0.05", seed0 + 105,
                            "0.5 + k/64", low=True))
    return out


def _low_hinton_cases() -> list[Case]:
    out = []
    seed0 = 20200
    for i in range(LOW_RANDOM):
        seed, grid = seed0 + i, S.low_grid(i)
        group = ("paper", "no-t2")[i % 2]
        r = S.rng(seed)
        n, v = _low_shape(r, i)
        T = float(r.choice(TEMPERATURES))
        alpha = float(r.choice(ALPHAS))
        z, t, how = _low_pair(r, n, v, grid)
        flags = ("Random",) + (("Large",) if v >= 1000 else ()) + LOW_FLAGS
        out.append(hinton_case(z, t, random_labels(r, n, v), T, alpha, group, flags,
                               _low_desc(grid, n, v, T, f"α={alpha:g}, {how}"),
                               seed, f"normal logits clipped to ±{LOW_CLIP:g}, rounded to the {grid} grid", low=True))
    for g, group in enumerate(("paper", "no-t2")):
        s = seed0 + 100 + 20 * g
        r = S.rng(s)
        z, t = _low_ties(r, S.BOTH)
        out.append(hinton_case(z, t, [1, 0, 2, 3], 2.0, 0.5, group, ("Ties",) + LOW_FLAGS,
                               "uniform rows and tied maxima", s, "fixed rows", low=True))
        out.append(hinton_case(z, [row[:] for row in z], [1, 0, 2, 3], 2.0, 0.9, group,
                               ("EqualInputs", "Ties") + LOW_FLAGS,
                               "teacher = student: loss = (1 − α)·CE", s + 1, "fixed rows", low=True))
        out.append(hinton_case(NI_STUDENT_C, NI_TEACHER_C, NI_LABELS_C, 2.0, 0.75, group, ("NegInfLogits",) + LOW_FLAGS,
                               "teacher −inf where the student is finite (p = 0 terms)", s + 2, "fixed", low=True))
        for k, same in enumerate((True, False)):
            r = S.rng(s + 3 + k)
            z, t = low_saturated(r, 3, 12, 1.0, same)
            out.append(hinton_case(z, t, random_labels(r, 3, 12), 1.0, 0.5, group, ("NearDeterministic",) + LOW_FLAGS,
                                   "saturated rows, " + ("the same" if same else "different") + " top tokens",
                                   s + 3 + k, "normal logits + 30·T at one token", low=True))
        r = S.rng(s + 5)
        z, t = _low_huge(r, 3, 8)
        out.append(hinton_case(z, t, random_labels(r, 3, 8), 64.0, 0.25, group, ("HugeLogits",) + LOW_FLAGS,
                               "logits ±9984 + 64·k, T = 64, α = 0.25 (cross-entropy at T = 1 of logits 64 apart)",
                               s + 5, "fixed grid values", low=True))
        r = S.rng(s + 6)
        z, t, _ = _low_pair(r, 6, 16, S.BOTH)
        for k, alpha in enumerate((0.0, 1.0)):
            out.append(hinton_case(z, t, random_labels(r, 6, 16), 2.0, alpha, group, ("AlphaEndpoint",) + LOW_FLAGS,
                                   f"α = {alpha:g}", s + 6 + k, "normal logits", low=True))
    return out


def low_pair_cases(obj, groups, seed0, count=LOW_RANDOM) -> list[Case]:
    """``count`` random and the edge low-precision cases of a pair objective. ``groups``: (group,
    conventions, kind for the −inf supports, params(T, r) of a random case, params(T) of an edge)."""
    out = []
    for i in range(count):
        seed, grid = seed0 + i, S.low_grid(i)
        group, conv, _, params_of, _ = groups[i % len(groups)]
        r = S.rng(seed)
        n, v = _low_shape(r, i)
        T = float(r.choice(TEMPERATURES))
        params = params_of(T, r)
        z, t, how = _low_pair(r, n, v, grid)
        extra = "".join(f", β={val:g}" for key, val in params.items() if key == "beta")
        flags = ("Random",) + (("Large",) if v >= 1000 else ()) + LOW_FLAGS
        out.append(pair_case(obj, z, t, params, conv, group, flags, _low_desc(grid, n, v, T, how + extra), seed,
                             f"normal logits clipped to ±{LOW_CLIP:g}, rounded to the {grid} grid", low=True))
    for g, (group, conv, kind, _, edge_params) in enumerate(groups):
        out += _low_pair_edges(obj, group, conv, kind, edge_params, seed0 + 100 + 20 * g)
    return out


def _low_pair_edges(obj, group, conv, kind, edge_params, s) -> list[Case]:
    out = []
    r = S.rng(s)

    def add(z, t, T, flags, comment, k, recipe="fixed"):
        out.append(pair_case(obj, z, t, edge_params(T), conv, group, flags + LOW_FLAGS, comment, s + k, recipe,
                             low=True))
    z, t = _low_ties(r, S.BOTH)
    add(z, t, 1.0, ("Ties",), "uniform rows and tied maxima", 0, "fixed rows")
    add(z, [row[:] for row in z], 2.0, ("EqualInputs", "Ties"), "teacher = student: divergence 0", 1, "fixed rows")
    for k, (zs, ts, why) in enumerate(support_sets(kind)):   # temperatures unlike pair_edges' (new uids)
        add(zs, ts, (0.75, 1.5, 3.0)[k], ("NegInfLogits",), why, 2 + k)
    for k, same in enumerate((True, False)):
        z, t = low_saturated(S.rng(s + 5 + k), 3, 12, 1.0, same)
        add(z, t, 1.0, ("NearDeterministic",), "saturated rows, " + ("the same" if same else "different")
            + " top tokens", 5 + k, "normal logits + 30·T at one token")
    z, t = _low_huge(S.rng(s + 7), 3, 8)
    add(z, t, 64.0, ("HugeLogits",), "logits ±9984 + 64·k, T = 64", 7, "fixed grid values")
    z, t = _low_tiny_t(S.rng(s + 8), 3, 12)
    add(z, t, 0.05, ("TinyTemperature",), "logits 0.5 + k/64 at T = 0.05", 8, "0.5 + k/64")
    return out


def _low_token_kl_cases() -> list[Case]:
    groups = [(group, {"direction": d}, d, lambda T, r: {"temperature": T}, lambda T: {"temperature": T})
              for group, d in (("paper", "reverse"), ("forward", "forward"))]
    return low_pair_cases(TKL, groups, 20400)


def _low_jsd_cases() -> list[Case]:
    """β drawn from BETAS, 0.25 and the endpoints (0 and 1: zero under 'limit', a KL under 'kl');
    the edge cases at β = 0.25 (−inf supports that are finite only for 0 < β < 1)."""
    groups = [(group, {"endpoints": e}, "any",
               lambda T, r: {"beta": float(r.choice(BETAS + (0.0, 1.0, 0.25))), "temperature": T},
               lambda T: {"beta": 0.25, "temperature": T})
              for group, e in (("paper", "limit"), ("kl-endpoints", "kl"))]
    return low_pair_cases(JSD, groups, 20600)


def _low_symmetric_kl_cases() -> list[Case]:
    """w drawn from {0, 0.1, 0.5, 0.9, 1}; the edges at w = 0.5 (−inf only where both are). Six
    more random cases than the others: a few of the bfloat16 grid's results leave bfloat16's range,
    and each dtype keeps 40 valid vectors."""
    groups = [("symmetric", {}, "both",
               lambda T, r: {"forward_weight": float(r.choice((0.0, 0.1, 0.5, 0.9, 1.0))), "temperature": T},
               lambda T: {"forward_weight": 0.5, "temperature": T})]
    return low_pair_cases(SYM, groups, 20800, LOW_RANDOM + 6)


def cases() -> list[Case]:
    return _low_softmax_cases() + _low_hinton_cases() + _low_token_kl_cases() + _low_jsd_cases()


def cases_1_3() -> list[Case]:
    """The low-precision cases of the objectives added in 1.3.0 (after the others: their ids stay)."""
    return _low_symmetric_kl_cases()
