"""``lm.cross_entropy`` and ``lm.linear_cross_entropy`` cases of vector set 1.7.0 (issue 37) where a
library's arithmetic leaves the definition while the rest of the vector set still passes:

* ``z-loss-none``: reduction 'none' with PaLM's z-loss (arXiv 2204.02311 §5) and ignored labels. The
  z-loss is an auxiliary of the trained tokens, so an ignored token's loss is 0, z-loss included
  (refimpl.exact.lm: ℓ = 0 at an ignored token). OLMo-core 3.0.0 olmo_core/nn/functional/
  cross_entropy_loss.py cross_entropy_loss masks z² = lse² under 'mean' and 'sum' only, and returns
  ζ·lse² at every ignored token under 'none'. The logits sit around an offset (up to 20) so that
  ζ·lse² is large beside the tolerance in every dtype.
* ``smoothing-underflow``: label smoothing in rows where a probability e^{z_v − lse} underflows:
  below e^{−103.97} (float32's smallest subnormal) in the float32 cases, below e^{−745} in the
  float64 ones. The smoothing term ε·mean_v(lse − z_v) is finite (PyTorch's definition), while
  −Σ_v log(softmax(z)_v) formed from the probabilities is +inf.

This module builds the cases' arguments only; ``lm`` makes them cases (its cotangents), so that
nothing here imports it.
"""
from __future__ import annotations

from lossproof.conformance.generate import sampling as S

CE, LCE = "lm.cross_entropy", "lm.linear_cross_entropy"

NOTES = {
    "ZLossIgnoredPerToken": {
        "category": "edge",
        "description": "reduction 'none' with a z-loss and ignored labels: every ignored token's loss is exactly "
                       "0 (no ζ·lse² there), its gradient 0; the logits carry an offset so that ζ·lse² is far "
                       "above the tolerance.",
        "bugType": "masking",
        "effect": "The z-loss kept at ignored tokens when the loss is returned per token (masked only inside "
                  "the mean or the sum): padding adds ζ·lse² to the per-token loss a caller reduces.",
    },
    "SmoothingUnderflow": {
        "category": "numerics",
        "description": "Label smoothing in rows whose smallest probability e^{z_v − lse} underflows (gap above "
                       "104 in float32, above 745 in float64): the smoothing term ε·mean_v(lse − z_v) is finite.",
        "bugType": "non-finite",
        "effect": "Smoothing formed as −Σ log(softmax(z)) from the probabilities: log 0 = −inf where a "
                  "probability underflows, and the loss is +inf.",
        "links": ["https://github.com/harvardnlp/annotated-transformer/issues/109",
                  "https://github.com/deeplearning4j/deeplearning4j/issues/785"],
    },
}

GROUPS = {
    "z-loss-none": "reduction 'none' with z-loss (PaLM arXiv 2204.02311 §5) and ignored labels: 0 at every ignored "
                   "token, as torch.nn.functional.cross_entropy's 'none' and Liger 0.8.5 "
                   "liger_kernel/ops/cross_entropy.py (an ignored row returns before the z-loss); OLMo-core 3.0.0 "
                   "olmo_core/nn/functional/cross_entropy_loss.py keeps ζ·lse² there",
    "smoothing-underflow": "label smoothing (PyTorch's definition, Szegedy et al. 2016 §7) where a probability "
                           "underflows: ε·mean_v(lse − z_v) is finite; torch.nn.functional.cross_entropy forms it "
                           "from log_softmax",
}

Z_LOSSES = (1e-4, 1e-3, 1e-2, 0.1)


def _spec(objective, inputs, params, conv, group, flags, comment, seed, recipe, low=False) -> dict:
    return {"objective": objective, "inputs": inputs, "params": params, "conventions": conv, "group": group,
            "flags": flags, "comment": comment, "seed": seed, "recipe": recipe, "low": low}


def _ignored_labels(r, n, v, ignore_index):
    """Labels with about 40 % ignored, at least one ignored and one counted."""
    y = [int(t) for t in r.integers(0, v, size=n)]
    y = [ignore_index if r.random() < 0.4 else t for t in y]
    y[0] = ignore_index
    y[-1] = int(r.integers(0, v))
    return y


def _fit(x, grid):
    return S.in_low(x, grid) if grid in S.LOW_GRIDS else S.rounded(x, grid)


def _z_loss_none() -> list[dict]:
    out = []
    for i in range(12):
        seed = 28000 + i
        r = S.rng(seed)
        grid = S.low_grid(i - 8) if i >= 8 else ("float32" if i % 2 == 0 else None)
        low = grid in S.LOW_GRIDS
        n, v = int(r.integers(3, 9)), int(r.integers(2, 17))
        offset = float(r.choice([0.0, 5.0, 20.0])) if not low else 4.0
        z = _fit((r.normal(offset, float(r.choice([0.5, 2.0, 5.0])), size=(n, v))).tolist(), grid)
        ignore_index = -1 if i % 3 == 2 else -100
        params = {"z_loss": 1e-2 if low else float(Z_LOSSES[i % len(Z_LOSSES)])}
        if ignore_index != -100:
            params["ignore_index"] = ignore_index
        if i % 4 == 1:
            params["label_smoothing"] = 0.1
        flags = ("Random", "ZLoss", "Ignored", "ZLossIgnoredPerToken") + (("LabelSmoothing",) if i % 4 == 1 else ()) \
            + (("LowPrecision",) if low else ())
        note = f", logits exact in {S.grid_note(grid)}" if low else (", float32" if grid else "")
        out.append(_spec(CE, {"logits": z, "labels": _ignored_labels(r, n, v, ignore_index)}, params,
                         {"reduction": "none"}, "z-loss-none", flags,
                         f"random N={n}, V={v}, logits around {offset:g}, ζ={params['z_loss']:g}, ignore_index "
                         f"{ignore_index}{note}", seed, "normal logits around an offset, labels ~40 % ignored"
                         + (f", rounded to the {grid} grid" if low else ""), low))
    r = S.rng(28100)
    out.append(_spec(CE, {"logits": (r.normal(8.0, 2.0, size=(3, 5))).tolist(), "labels": [-100] * 3},
                     {"z_loss": 1e-4}, {"reduction": "none"}, "z-loss-none",
                     ("EmptyBatch", "Ignored", "ZLoss", "ZLossIgnoredPerToken"),
                     "every token ignored, logits around 8: loss 0 everywhere", 28100, "normal logits around 8"))
    for i in range(6):
        seed = 28200 + i
        r = S.rng(seed)
        grid = S.low_grid(i) if i >= 4 else ("float32" if i % 2 == 0 else None)
        low = grid in S.LOW_GRIDS
        n, h, v = int(r.integers(3, 7)), int(r.choice([2, 4, 8])), int(r.integers(2, 13))
        hidden = _fit((r.normal(0.0, 1.0, size=(n, h))).tolist(), grid)
        weight = _fit((r.normal(0.0, 2.0 / h ** 0.5, size=(v, h))).tolist(), grid)
        # a bias around 10 (a constant offset of every logit): lse around 10 as well
        bias = _fit((r.normal(10.0, 1.0, size=v)).tolist(), grid)
        z_loss = 1e-2 if low else float(Z_LOSSES[i % len(Z_LOSSES)])
        note = f", inputs exact in {S.grid_note(grid)}" if low else (", float32" if grid else "")
        out.append(_spec(LCE, {"hidden": hidden, "weight": weight, "labels": _ignored_labels(r, n, v, -100),
                               "bias": bias}, {"z_loss": z_loss}, {"reduction": "none"}, "z-loss-none",
                         ("Random", "ZLoss", "Ignored", "ZLossIgnoredPerToken", "Bias")
                         + (("LowPrecision",) if low else ()),
                         f"random N={n}, H={h}, V={v}, bias around 10, ζ={z_loss:g}{note}", seed,
                         "normal hidden and weight, bias around 10, labels ~40 % ignored", low))
    return out


def _underflow_row(r, v, gaps):
    """A row of V logits: a few near the top, and one logit per gap that far below the maximum."""
    top = r.normal(0.0, 2.0, size=v - len(gaps)).tolist()
    high = max(top)
    return top + [high - g for g in gaps]


def _smoothing_underflow() -> list[dict]:
    """Rows with gaps of 104 to 300 (float32-exact logits: a float32 probability underflows) and of
    750 to 5000 (binary64 logits: a float64 probability underflows too); ε from 0.01 to 0.5, the
    label sometimes the underflowing token."""
    out = []
    for i in range(14):
        seed = 28300 + i
        r = S.rng(seed)
        kind = "float32" if i < 6 else (None if i < 12 else S.low_grid(i - 12, 2))
        low = kind in S.LOW_GRIDS
        n, v = int(r.integers(1, 5)), int(r.integers(4, 13))
        lo, hi = (104.5, 300.0) if kind is not None else (750.0, 5000.0)
        rows = [_underflow_row(r, v, r.uniform(lo, hi, size=int(r.integers(1, 3))).tolist()) for _ in range(n)]
        z = _fit(rows, kind)
        # the label: a top logit, or (one row in three) the last, underflowing one
        y = [v - 1 if j % 3 == 2 else int(r.integers(0, v - 2)) for j in range(n)]
        eps = float(r.choice([0.01, 0.1, 0.25, 0.5]))
        params = {"label_smoothing": eps}
        note = (f", logits exact in {S.grid_note(kind)}" if low else ", float32" if kind else "")
        out.append(_spec(CE, {"logits": z, "labels": y}, params, {}, "smoothing-underflow",
                         ("LabelSmoothing", "SmoothingUnderflow") + (("LowPrecision",) if low else ()),
                         f"N={n}, V={v}, ε={eps:g}, logits {lo:g} to {hi:g} below the row's maximum{note}", seed,
                         "normal logits and one or two logits far below the maximum", low))
    return out


def cases() -> list[dict]:
    """The keyword arguments of ``lm``'s case constructor, one dict per case."""
    return _z_loss_none() + _smoothing_underflow()
