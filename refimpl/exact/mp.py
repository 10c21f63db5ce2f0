"""Arbitrary-precision arrays for the exact reference.

Arrays are NumPy object arrays whose elements are ``mpmath.mpf``: NumPy supplies shapes,
broadcasting and axis reductions, mpmath supplies every arithmetic operation, so a formula
reads as it does in the paper while every digit is exact to the working precision.
Inputs are binary64 numbers, converted without rounding.
"""
from __future__ import annotations

import contextlib
import functools

import mpmath
import numpy as np

from lossproof.refimpl import validate

DEFAULT_DPS = 50
_dps = DEFAULT_DPS

mpf = mpmath.mpf
ZERO = mpf(0)
ONE = mpf(1)
NEG_INF = mpf("-inf")


def get_dps() -> int:
    return _dps


@contextlib.contextmanager
def precision(dps: int):
    """Run the exact reference at ``dps`` significant digits, restoring the setting after."""
    global _dps
    if not isinstance(dps, int) or dps < 15:
        raise validate.InputError(f"dps: must be an integer >= 15, got {dps!r}")
    saved, _dps = _dps, dps
    try:
        yield
    finally:
        _dps = saved


def exact(fn):
    """Evaluate ``fn`` at the configured precision (mpmath's global precision is restored)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with mpmath.workdps(_dps):
            return fn(*args, **kwargs)
    return wrapper


def _to_mpf(name: str, x, allow_neg_inf: bool):
    if isinstance(x, (bool, np.bool_)):
        x = int(x)
    if isinstance(x, str):
        try:
            v = mpf(x)
        except (TypeError, ValueError):
            validate.fail(name, f"not a number: {x!r}")
    elif isinstance(x, mpmath.mpf):
        v = x
    else:
        try:
            v = mpf(float(x)) if not isinstance(x, (int, np.integer)) else mpf(int(x))
        except (TypeError, ValueError):
            validate.fail(name, f"not a number: {x!r}")
    if mpmath.isnan(v):
        validate.fail(name, "contains NaN")
    if mpmath.isinf(v) and not (allow_neg_inf and v < 0):
        validate.fail(name, f"contains {'+' if v > 0 else '-'}inf")
    return v


def array(name: str, x, *, allow_neg_inf: bool = False) -> np.ndarray:
    """Convert nested lists / arrays of numbers to an mpf object array, rejecting NaN and
    infinities (``-inf`` only where ``allow_neg_inf``, e.g. logits of impossible tokens)."""
    try:
        raw = np.array(x, dtype=object)
    except ValueError:
        validate.fail(name, "ragged nested lists (rows of different lengths)")
    if raw.dtype != object or any(isinstance(e, (list, tuple)) for e in raw.flat):
        validate.fail(name, "ragged nested lists (rows of different lengths)")
    out = np.empty(raw.shape, dtype=object)
    for idx, e in np.ndenumerate(raw):
        out[idx] = _to_mpf(name, e, allow_neg_inf)
    return out


def int_array(name: str, x) -> np.ndarray:
    raw = np.array(x, dtype=object)
    out = np.empty(raw.shape, dtype=object)
    for idx, e in np.ndenumerate(raw):
        try:
            integral = not isinstance(e, (bool, np.bool_)) and float(e).is_integer()
        except (TypeError, ValueError, OverflowError):  # strings, None: the input is not numbers at all
            validate.fail(name, f"expected integers, got {x!r}")
        if not integral:
            validate.fail(name, f"expected integers, got {e!r}")
        out[idx] = int(e)
    return out.astype(np.int64) if out.size else np.zeros(raw.shape, dtype=np.int64)


def mask(name: str, x, shape: tuple) -> np.ndarray:
    """A 0/1 mask as an mpf array of the given shape."""
    m = array(name, x)
    validate.same_shape(**{"inputs": shape, name: m.shape})  # the message names the mask
    if any(e != 0 and e != 1 for e in m.flat):
        validate.fail(name, "must contain only 0 and 1")
    return m


def zeros(shape) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    out.fill(ZERO)
    return out


def full(shape, value) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    out.fill(mpf(value))
    return out


exp = np.frompyfunc(mpmath.exp, 1, 1)
log = np.frompyfunc(mpmath.log, 1, 1)
log1p = np.frompyfunc(mpmath.log1p, 1, 1)
expm1 = np.frompyfunc(mpmath.expm1, 1, 1)
sqrt = np.frompyfunc(mpmath.sqrt, 1, 1)


def _logsigmoid1(x):
    # log σ(x) = −log(1 + e^{−x}); the branch keeps e^{·} ≤ 1 so nothing overflows.
    return -mpmath.log1p(mpmath.exp(-x)) if x >= 0 else x - mpmath.log1p(mpmath.exp(x))


def _sigmoid1(x):
    return 1 / (1 + mpmath.exp(-x)) if x >= 0 else mpmath.exp(x) / (1 + mpmath.exp(x))


logsigmoid = np.frompyfunc(_logsigmoid1, 1, 1)
sigmoid = np.frompyfunc(_sigmoid1, 1, 1)


def xlogy(x, y):
    """x·log(y) with the convention 0·log(0) = 0 (elementwise)."""
    return np.frompyfunc(lambda a, b: ZERO if a == 0 else a * mpmath.log(b), 2, 1)(x, y)


def logsumexp(a: np.ndarray, axis: int = -1, keepdims: bool = False) -> np.ndarray:
    """log Σ exp(a) along ``axis``; −inf entries contribute nothing."""
    m = np.max(a, axis=axis, keepdims=True)
    m_safe = np.where(m == NEG_INF, ZERO, m)
    out = log(np.sum(exp(a - m_safe), axis=axis, keepdims=True)) + m_safe
    return out if keepdims else np.squeeze(out, axis=axis)


def log_softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    lse = logsumexp(z, axis=axis, keepdims=True)
    # −inf − finite stays −inf (an impossible token keeps log-probability −inf).
    return z - lse


def softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    return exp(log_softmax(z, axis=axis))


def clip(x, lo, hi):
    return np.minimum(np.maximum(x, lo), hi)


def to_float(a) -> float | np.ndarray:
    """Round to binary64 (for quick inspection; the vectors keep decimal strings)."""
    if isinstance(a, np.ndarray):
        return np.vectorize(float, otypes=[np.float64])(a)
    return float(a)


def nstr(x, digits: int = 32) -> str:
    """A decimal string with ``digits`` significant digits (exact zero prints as '0')."""
    if x == 0:
        return "0"
    return mpmath.nstr(x, digits, strip_zeros=False)
