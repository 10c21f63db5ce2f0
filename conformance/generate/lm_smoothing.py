"""lm vectors of ``smoothing_classes='others'`` (vector set 1.7.0): label smoothing over the V − 1
classes other than the label, as Megatron-core's vocab-parallel cross-entropy computes it, for
``lm.cross_entropy`` and ``lm.linear_cross_entropy``. ``conformance.generate.lm`` appends them after
every earlier case of the family, so that the earlier test ids stay.
"""
from __future__ import annotations

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case
from lossproof.conformance.generate.lm_inputs import (CE, LCE, LOW_V, case, ce_flags, float32, labels,
                                                      lce_flags, linear_inputs, logits, shape)

# ε ≤ (V − 1)/V throughout, the range where Megatron-core's weight ε·V/(V − 1) is at most 1 (it
# asserts ε < 1).

_OTHERS_SETS = (   # conventions, params
    ({}, {"label_smoothing": 0.1}),
    ({"reduction": "sum"}, {"label_smoothing": 0.2}),
    ({"reduction": "none"}, {"label_smoothing": 0.05}),
    ({}, {"label_smoothing": 0.1, "z_loss": 1e-4}),
    ({}, {"label_smoothing": 0.25, "softcap": 5.0}),
)


def _others(conv):
    return {**conv, "smoothing_classes": "others"}


def ce_cases() -> list[Case]:
    out = []
    for i in range(24):
        seed, low = 31000 + i, i >= 12
        grid = S.low_grid(i) if low else None
        conv, params = _OTHERS_SETS[i % len(_OTHERS_SETS)]
        r = S.rng(seed)
        n, v = (int(r.integers(1, 7)), int(r.choice(LOW_V[1:]))) if low else shape(r, n_max=6)
        v = max(v, 3)
        z, y = logits(r, n, v), labels(r, n, v, 0.2)
        z = S.in_low(z, grid) if low else (float32(z) if i % 2 == 0 else z)
        where = f", logits exact in {S.grid_note(grid)}" if low else ""
        out.append(case(CE, {"logits": z, "labels": y}, params, _others(conv), "smoothing-others",
                         ("Random",) + (("LowPrecision",) if low else ()) + ce_flags(params),
                         f"random N={n}, V={v}{where}, ε over the V − 1 other classes", seed,
                         "normal logits, labels with ignore_index", low=low))
    edges = (
        ({"logits": [[1.5, -0.5], [0.25, 2.0]], "labels": [0, 0]}, {"label_smoothing": 0.5}, ("LabelSmoothing",),
         "V = 2, ε = 1/2: the target is (1/2, 1/2) — Megatron's weight ε·V/(V−1) is exactly 1"),
        ({"logits": [[1.5] * 7, [-2.0] * 7], "labels": [3, 6]}, {"label_smoothing": 0.1},
         ("Uniform", "LabelSmoothing"), "equal logits: log 7 under either smoothing"),
        ({"logits": [[1e4, -1e4, 0.0, 9999.0], [-1e4, 1e4, 1e4, -1e4], [1e4, -1e4, -1e4, -1e4]],
          "labels": [0, 0, 0]}, {"label_smoothing": 0.1}, ("HugeLogits", "LabelSmoothing"),
         "±1e4: the other classes' −log q_v are ~1e4, the label's ~0 or 2e4"),
    )
    for k, (inputs, params, flags, comment) in enumerate(edges):
        out.append(case(CE, inputs, params, _others({}), "smoothing-others", flags, comment, 31100 + k))
    bad = (
        ({"logits": [[0.5], [-3.0]], "labels": [0, 0]}, {"label_smoothing": 0.1}, _others({}),
         "V = 1 with smoothing over the other classes: there is none"),
        ({"logits": [[1.0, 2.0], [0.5, -0.5]], "labels": [0, 1]}, {"label_smoothing": 0.1},
         {"smoothing_classes": "rest"}, "unknown smoothing_classes"),
    )
    out += [case(CE, inputs, params, conv, "invalid", ("InvalidInput",), why, result="invalid")
            for inputs, params, conv, why in bad]
    return out


def lce_cases() -> list[Case]:
    out = []
    for i in range(24):
        seed, low = 32000 + i, i >= 12
        grid = S.low_grid(i) if low else ("float32" if i % 2 == 0 else None)
        conv, params = _OTHERS_SETS[i % len(_OTHERS_SETS)]
        r = S.rng(seed)
        n, h = int(r.integers(1, 5)), int(r.choice((1, 2, 4, 8)))
        v = int(r.choice(LOW_V[1:])) if low else int(r.integers(3, 17))
        inputs = linear_inputs(r, n, h, v, bias=i % 4 >= 2, grid=grid)
        inputs["labels"] = labels(r, n, v, 0.2)
        where = f", inputs exact in {S.grid_note(grid)}" if low else ""
        out.append(case(LCE, inputs, params, _others(conv), "smoothing-others",
                         ("Random",) + (("LowPrecision",) if low else ()) + lce_flags(params, inputs),
                         f"random N={n}, H={h}, V={v}{', bias' if 'bias' in inputs else ''}{where}, ε over the "
                         f"V − 1 other classes", seed, "normal hidden and weight (σ/√H), labels with ignore_index",
                         low=low))
    h = [[1.0, -0.5, 2.0], [0.25, 0.75, -1.5]]
    out.append(case(LCE, {"hidden": h, "weight": [[0.5, 0.5, 0.5]], "labels": [0, 0]}, {"label_smoothing": 0.1},
                     _others({}), "invalid", ("InvalidInput",), "V = 1 with smoothing over the other classes",
                     result="invalid"))
    return out


