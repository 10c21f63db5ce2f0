"""Error metrics against the exact value and the tolerance policy (DESIGN §6).

A result passes when, element by element,

    |got − want| ≤ k · u(dtype) · scale + ulp_dtype(want)

where u is the unit roundoff of the output dtype, ``scale`` the magnitude stored with the
vector (the size of the terms that rounding errors are proportional to, so near-zero
results that come from cancellation are judged fairly), ulp_dtype(want) the spacing of the
dtype at the exact value (the best a correctly rounded result can do), and

    k = K_BASE[objective] · (1 + log2(n))      n = the length of the objective's reduction.

``k`` can be overridden per case (``tolerance.k`` in the vector) and per target (a JSON file
mapping objective globs to per-dtype k).
"""
from __future__ import annotations

import fnmatch
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from conformance import catalog, numbers

UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "bfloat16": 2.0**-8, "float16": 2.0**-11}
# (mantissa bits incl. the implicit one, smallest normal exponent)
_FORMAT = {"float64": (53, -1022), "float32": (24, -126), "bfloat16": (8, -126), "float16": (11, -14)}

# Base multiplier of the unit roundoff per objective: the number of roundings a careful
# implementation makes on its critical path, before the growth with the reduction length.
K_BASE = {
    "distill.softmax": 4.0,
    "distill.hinton": 8.0,
    "distill.token_kl": 8.0,
    "distill.generalized_jsd": 8.0,
    "kl.estimator": 4.0,
    "dpo.loss": 8.0,
    "grpo.advantages": 8.0,
    "grpo.clip": 4.0,
    "grpo.aggregate": 4.0,
    "grpo.loss": 8.0,
    "proximal_kl.future_cost": 4.0,
    "proximal_kl.loss": 8.0,
    # token trees: H nested log-sum-exps / products along a path, then sums over the leaves
    "tabular.optimum": 8.0,
    "tabular.sequence_kl": 8.0,
    "tabular.expected_update": 8.0,
}


def ulp(want: np.ndarray, dtype: str) -> np.ndarray:
    """Spacing of ``dtype`` at |want| (subnormal spacing near zero)."""
    bits, emin = _FORMAT[dtype]
    a = np.abs(np.asarray(want, dtype=np.float64))
    a = np.where(np.isfinite(a), a, 0.0)  # infinite exact values are matched exactly, not by ulps
    with np.errstate(divide="ignore"):
        e = np.where(a > 0, np.floor(np.log2(np.where(a > 0, a, 1.0))), emin)
    e = np.maximum(e, emin)
    return np.ldexp(1.0, (e - (bits - 1)).astype(int))


def reduction_length(spec: catalog.Objective, inputs: dict) -> int:
    if not spec.reduction or spec.reduction not in inputs:
        return 1
    shape = np.shape(inputs[spec.reduction])
    return int(shape[-1]) if len(shape) == 1 or spec.family == "distill" else int(np.prod(shape))


@dataclass
class Tolerances:
    """Per-target overrides: {objective glob: {dtype or "*": k}}."""
    overrides: dict

    @classmethod
    def from_file(cls, path: str | Path | None) -> "Tolerances":
        if path is None:
            return cls({})
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"--tolerances {path}: {err}") from None
        ok = isinstance(data, dict) and all(
            isinstance(v, dict) and all(isinstance(k, (int, float)) and k > 0 for k in v.values())
            for v in data.values())
        if not ok:
            raise ValueError(f"--tolerances {path}: expected {{objective glob: {{dtype: positive k}}}}")
        return cls(data)

    def k(self, spec: catalog.Objective, dtype: str, n: int, case_k: float | None) -> float:
        for pattern, per_dtype in self.overrides.items():
            if fnmatch.fnmatch(spec.id, pattern):
                value = per_dtype.get(dtype, per_dtype.get("*"))
                if value is not None:
                    return float(value)
        if case_k is not None:
            return float(case_k)
        return K_BASE[spec.id] * (1.0 + math.log2(max(n, 1)))

    def for_case(self, spec: catalog.Objective, test: dict, dtype: str) -> "CaseTolerance":
        """The bound for every output and gradient of one vector judged in ``dtype``."""
        n = reduction_length(spec, {name: numbers.decode_input(v) for name, v in test["inputs"].items()})
        return CaseTolerance(test, dtype, self.k(spec, dtype, n, test.get("tolerance", {}).get("k")))


@dataclass
class CaseTolerance:
    test: dict
    dtype: str
    k: float

    def measure(self, label: str, got, want) -> "Metrics":
        """Judge an output (``name``) or a gradient (``grad:name``) against the exact values."""
        kind, _, name = label.rpartition(":")
        scale = float(self.test["scale"]["grads" if kind == "grad" else "outputs"][name])
        return measure(got, want, scale, self.dtype, self.k)


@dataclass
class Metrics:
    max_abs: float
    max_rel: float
    max_ulp: float
    max_err_over_tol: float   # ≤ 1 passes
    tol: float                # the bound at the worst element
    worst_index: tuple
    got: float
    want: float

    @property
    def passed(self) -> bool:
        return self.max_err_over_tol <= 1.0

    def as_dict(self) -> dict:
        return {"max_abs": self.max_abs, "max_rel": self.max_rel, "max_ulp": self.max_ulp,
                "err_over_tol": self.max_err_over_tol, "tol": self.tol}


def measure(got, want, scale: float, dtype: str, k: float) -> Metrics:
    """Compare an output (any shape) with the exact values (float64 rounding of the 32-digit strings).

    The float64 rounding of ``want`` is exact enough for every dtype's bound except float64's
    own ulp term, which absorbs it."""
    g = np.asarray(got, dtype=np.float64)
    w = np.asarray(want, dtype=np.float64)
    if g.shape != w.shape:
        raise ValueError(f"shape {g.shape} differs from expected {w.shape}")
    same_inf = np.isinf(w) & (g == w)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(same_inf, 0.0, np.abs(g - w))
    err = np.where(np.isnan(err), np.inf, err)
    spacing = ulp(w, dtype)
    tol = k * UNIT_ROUNDOFF[dtype] * scale + spacing
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.where(err == 0, 0.0, err / tol)
        rel = np.where(err == 0, 0.0, err / np.abs(w))
        ulps = np.where(err == 0, 0.0, err / spacing)
    if g.size == 0:
        return Metrics(0.0, 0.0, 0.0, 0.0, 0.0, (), 0.0, 0.0)
    idx = np.unravel_index(int(np.argmax(ratio)), ratio.shape) if ratio.ndim else ()
    return Metrics(float(err.max()), float(np.max(rel)), float(np.max(ulps)), float(ratio.max()),
                   float(tol[idx] if tol.ndim else tol), tuple(int(i) for i in idx),
                   float(g[idx] if g.ndim else g), float(w[idx] if w.ndim else w))
