"""Independent check of the exact reference's analytic gradients.

The analytic VJP of every objective is compared with a numerical derivative taken by
``mpmath.diff`` on the objective's value alone, evaluated at a much higher precision than
the comparison needs, so the two computations share nothing but the value function.
"""
from __future__ import annotations

import mpmath
import numpy as np

from lossproof.refimpl.exact import mp

import records

EVAL_DPS = 120     # precision of the value function inside the finite differences
DIFF_DPS = 60      # working precision of mpmath.diff
AGREE_DIGITS = 30  # required agreement (significant digits, relative to the gradient's scale)


def _weighted_sum(outputs, cotangents):
    if isinstance(outputs, dict):
        return sum(_weighted_sum(outputs[k], cotangents[k]) for k in cotangents)
    out = np.asarray(outputs, dtype=object)
    ct = np.asarray(cotangents, dtype=object)
    return mpmath.fsum((out * ct).flat) if out.shape else out.item() * ct.item()


def numerical_vjp(fn, kwargs: dict, wrt: str, cotangents) -> np.ndarray:
    """d/dx Σ cotangent·fn(**kwargs) for every element x of kwargs[wrt], by mpmath.diff."""
    base = np.array(kwargs[wrt], dtype=object)
    grad = np.empty(base.shape, dtype=object)
    with mp.precision(EVAL_DPS), mpmath.workdps(DIFF_DPS):
        for idx in np.ndindex(base.shape):
            def f(t, idx=idx):
                x = base.copy()
                x[idx] = t
                return _weighted_sum(fn(**{**kwargs, wrt: x}), cotangents)
            grad[idx] = mpmath.diff(f, mpmath.mpf(base[idx]))
    return grad


def agreement_digits(analytic, numeric) -> float:
    """Smallest number of agreeing significant digits, relative to max |gradient|."""
    a = np.asarray(analytic, dtype=object).ravel()
    n = np.asarray(numeric, dtype=object).ravel()
    scale = max([abs(v) for v in n] + [mpmath.mpf(1e-300)])
    worst = max([abs(x - y) for x, y in zip(a, n)] + [mpmath.mpf(0)])
    if worst == 0:
        return float("inf")
    return float(-mpmath.log10(worst / scale))


def assert_vjp_matches(fn, vjp, kwargs: dict, wrt: list[str], cotangents, case: str | None = None) -> float:
    """Assert the analytic VJP equals the numerical one to AGREE_DIGITS; returns the worst
    agreement in digits, also recorded for the terminal summary (tests/records.py)."""
    analytic = vjp(cotangents, **kwargs)
    worst = float("inf")
    for name in wrt:
        digits = agreement_digits(analytic[name], numerical_vjp(fn, kwargs, name, cotangents))
        assert digits >= AGREE_DIGITS, f"gradient wrt {name}: only {digits:.1f} digits agree"
        worst = min(worst, digits)
    family = fn.__module__.rpartition(".")[2].removeprefix("test_")
    records.gradient_check(family, case or fn.__name__, worst)
    return worst
