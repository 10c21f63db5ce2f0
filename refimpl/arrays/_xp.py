"""Array-API plumbing shared by the ``refimpl.arrays`` modules.

Every function here takes the namespace ``xp`` explicitly (found with
``array_api_compat.array_namespace``), so the same code runs on NumPy, CuPy or any other
array-API library: nothing calls NumPy on an input. Input checks raise the same
``refimpl.validate.InputError`` messages as the exact reference (``refimpl/exact/mp.py``).

The numerical kernels are the stable forms the objectives need: a row maximum safe for
all-(−inf) rows, log σ and σ without overflow, log-add-exp, e^x − 1 − x without
cancellation, and a KL divergence summed from non-negative terms. (The tempered
log-softmax, with the maximum shifted out before dividing by T and log1p of the sum
without the top token, lives in ``distill._Dist``, its only user.)
"""
from __future__ import annotations

import array_api_compat

from lossproof.refimpl import validate

SUPPORTED_DTYPES = ("float64", "float32")


# --------------------------------------------------------------------------- namespace

def _is_array(x) -> bool:
    return array_api_compat.is_array_api_obj(x)


class _OnDevice:
    """The array namespace with array creation (asarray, zeros, ones, full, arange)
    defaulting to the inputs' device, so that arrays made here (cotangents given as lists,
    zero padding, index ranges) live beside the inputs (CuPy's current device, a torch
    CUDA tensor's device). Everything else is the namespace itself."""

    def __init__(self, xp, device):
        self._xp, self._device = xp, device

    def __getattr__(self, name):
        return getattr(self._xp, name)

    def _on(self, kw):
        if self._device is not None:
            kw.setdefault("device", self._device)
        return kw

    def asarray(self, obj, **kw):
        return self._xp.asarray(obj, **self._on(kw))

    def zeros(self, shape, **kw):
        return self._xp.zeros(shape, **self._on(kw))

    def ones(self, shape, **kw):
        return self._xp.ones(shape, **self._on(kw))

    def full(self, shape, fill_value, **kw):
        return self._xp.full(shape, fill_value, **self._on(kw))

    def arange(self, *args, **kw):
        return self._xp.arange(*args, **self._on(kw))


def namespace(*values):
    """The array namespace of the array-valued arguments (NumPy's, through
    array-api-compat, when every argument is a list or a Python number), creating new
    arrays on the device of the first array argument."""
    arrays = [v for v in values if _is_array(v)]
    if not arrays:
        import array_api_compat.numpy as default_xp  # lists and numbers: NumPy
        return _OnDevice(default_xp, None)
    try:
        xp = array_api_compat.array_namespace(*arrays)
    except TypeError as exc:  # arrays from two different libraries
        validate.fail("inputs", f"arrays from different array libraries ({exc})")
    return _OnDevice(xp, array_api_compat.device(arrays[0]))


def _dtype_name(xp, dtype) -> str:
    for name in ("float64", "float32", "float16", "bfloat16"):
        if hasattr(xp, name) and dtype == getattr(xp, name):
            return name
    return str(dtype)


def float_dtype(xp, **float_inputs):
    """The working dtype: that of the floating-point array inputs (float64 wins a mix);
    float64 when the inputs are lists or integer arrays. Other float dtypes are refused
    rather than silently computed at a precision the caller did not ask for."""
    names = set()
    for name, x in float_inputs.items():
        if _is_array(x) and xp.isdtype(x.dtype, "real floating"):
            dn = _dtype_name(xp, x.dtype)
            if dn not in SUPPORTED_DTYPES:
                validate.fail(name, f"dtype {dn} is not supported (supported: {', '.join(SUPPORTED_DTYPES)})")
            names.add(dn)
    return xp.float32 if names == {"float32"} else xp.float64


# --------------------------------------------------------------------------- inputs

def _first_bad(xp, name: str, a, bad) -> None:
    """Raise for the first offending element in C order, as ``mp.array`` does."""
    flat_bad = xp.reshape(bad, (-1,))
    idx = int(xp.argmax(xp.astype(flat_bad, xp.int32)))
    v = float(xp.reshape(a, (-1,))[idx])
    if v != v:
        validate.fail(name, "contains NaN")
    validate.fail(name, f"contains {'+' if v > 0 else '-'}inf")


def _leaves(x):
    """The elements of nested lists/tuples in C order (``x`` itself if it is not one)."""
    if isinstance(x, (list, tuple)):
        for e in x:
            yield from _leaves(e)
    else:
        yield x


def _as_floats(name: str, x):
    """Nested lists with numeric strings (which the exact reference accepts, as mpmath
    does) turned into floats; the first non-number is reported as ``mp.array`` does."""
    if isinstance(x, (list, tuple)):
        return [_as_floats(name, e) for e in x]
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            validate.fail(name, f"not a number: {x!r}")
    if x is None or not isinstance(x, (int, float)) and not hasattr(x, "__float__"):
        validate.fail(name, f"not a number: {x!r}")
    return x


def _raw(xp, name: str, x):
    if _is_array(x):
        return x
    try:
        a = xp.asarray(x)
    except (ValueError, TypeError):
        validate.fail(name, "ragged nested lists (rows of different lengths)")
    if not xp.isdtype(a.dtype, ("real floating", "integral", "bool")):
        try:
            a = xp.asarray(_as_floats(name, x))
        except validate.InputError:
            raise
        except (ValueError, TypeError):
            validate.fail(name, "ragged nested lists (rows of different lengths)")
    return a


def array(xp, name: str, x, dtype, *, allow_neg_inf: bool = False):
    """A float array of ``dtype`` from a list or array, rejecting NaN and infinities
    (``-inf`` only where ``allow_neg_inf``: logits of impossible tokens)."""
    a = _raw(xp, name, x)
    if not xp.isdtype(a.dtype, ("real floating", "integral", "bool")):
        validate.fail(name, f"not a number (dtype {a.dtype})")
    if a.dtype != dtype:
        a = xp.astype(a, dtype)
    bad = ~xp.isfinite(a)
    if allow_neg_inf:
        bad = bad & ~(a < 0)
    if bool(xp.any(bad)):
        _first_bad(xp, name, a, bad)
    return a


def int_array(xp, name: str, x):
    """An int64 array; integral floats are accepted, booleans and fractions are not
    (``mp.int_array`` and distill's label check)."""
    if not _is_array(x):
        for e in _leaves(x):
            if isinstance(e, bool) or type(e).__name__ in ("bool", "bool_"):
                validate.fail(name, f"expected integers, got {e!r}")
            try:
                integral = float(e).is_integer()
            except (TypeError, ValueError, OverflowError):
                validate.fail(name, f"expected integers, got {x!r}")
            if not integral:
                validate.fail(name, f"expected integers, got {e!r}")
    a = _raw(xp, name, x)
    if xp.isdtype(a.dtype, "bool"):
        if a.ndim == 0 or size(a):
            validate.fail(name, f"expected integers, got {bool(xp.reshape(a, (-1,))[0])!r}")
    if xp.isdtype(a.dtype, "integral"):
        return xp.astype(a, xp.int64)
    if not xp.isdtype(a.dtype, "real floating"):
        validate.fail(name, f"expected integers, got {x!r}")
    bad = ~xp.isfinite(a)
    bad = bad | (xp.where(bad, 0.0, a) != xp.floor(xp.where(bad, 0.0, a)))
    if bool(xp.any(bad)):
        idx = int(xp.argmax(xp.astype(xp.reshape(bad, (-1,)), xp.int32)))
        validate.fail(name, f"expected integers, got {float(xp.reshape(a, (-1,))[idx])!r}")
    return xp.astype(a, xp.int64)


def mask(xp, name: str, x, shape: tuple, dtype):
    """A 0/1 mask of the given shape as a float array (``mp.mask``)."""
    m = array(xp, name, x, dtype)
    validate.same_shape(**{"inputs": shape, name: tuple(m.shape)})  # the message names the mask
    if bool(xp.any((m != 0) & (m != 1))):
        validate.fail(name, "must contain only 0 and 1")
    return m


def cotangents(xp, ct, dtype, outputs: tuple, like_name: str, like_shape: tuple):
    """Per-output cotangents of a multi-output objective (a dict by output name; a
    missing output has a zero cotangent)."""
    if not isinstance(ct, dict):
        validate.fail("cotangent", f"expected a dict by output name ({', '.join(outputs)})")
    out = {}
    for name in outputs:
        if name in ct:
            c = array(xp, "cotangent", ct[name], dtype)
            validate.same_shape(**{like_name: tuple(like_shape), f"cotangent[{name!r}]": tuple(c.shape)})
            out[name] = c
        else:
            out[name] = xp.zeros(like_shape, dtype=dtype)
    unknown = set(ct) - set(outputs)
    if unknown:
        validate.fail("cotangent", f"unknown outputs {sorted(map(str, unknown))}")
    return out


def shape(a) -> tuple:
    return tuple(a.shape)


def size(a) -> int:
    """Number of elements (``.size`` is a method on torch tensors, an attribute elsewhere)."""
    n = 1
    for d in a.shape:
        n *= int(d)
    return n


# --------------------------------------------------------------------------- kernels

def constant(a):
    """``a`` as a constant of differentiation: the formulas' sg(·), which the array API has no
    word for. JAX's ``jax.vjp`` differentiates this code (the jax backend), so a JAX array is
    ``jax.lax.stop_gradient`` of itself; NumPy and CuPy arrays carry no gradient."""
    if array_api_compat.is_jax_array(a):
        import jax
        return jax.lax.stop_gradient(a)
    return a


def masked(xp, cond, a):
    """``a`` where ``cond`` else 0 — a select, not a product, so an inf or NaN in an
    unselected slot (padding) cannot leak into a sum as inf·0."""
    return xp.where(cond, a, xp.zeros_like(a))


def row_max(xp, z, axis: int = -1):
    """Row maximum with keepdims, 0 for rows that are entirely −inf (so shifting by it
    never forms −inf − (−inf))."""
    m = xp.max(z, axis=axis, keepdims=True)
    return xp.where(m == -xp.inf, xp.zeros_like(m), m)


def clamp(xp, x, lo: float, hi: float):
    """``x`` clipped to [lo, hi] as selects: the same numbers as ``xp.clip``, and under JAX's
    differentiation (the jax backend) the derivative 1 on the closed band, as ``torch.clamp``'s
    and the references' (``jnp.clip``'s is 1/2 at a bound)."""
    return xp.where(x < lo, xp.zeros_like(x) + lo, xp.where(x > hi, xp.zeros_like(x) + hi, x))


def row_top(xp, z):
    """The first top token of each row of the last axis (a mask) and the row maximum read at it
    (keepdims; 0 for rows that are entirely −inf). The softmaxes leave that one token out of
    log1p(S), so the maximum is read at it: JAX differentiates this code (the jax backend), and
    its derivative of ``max`` splits among tied maxima, which the left-out token would not match."""
    top = xp.argmax(z, axis=-1, keepdims=True)
    is_top = xp.arange(z.shape[-1], dtype=top.dtype) == top
    m = xp.sum(masked(xp, is_top, z), axis=-1, keepdims=True)
    return is_top, xp.where(m == -xp.inf, xp.zeros_like(m), m)


def logsigmoid(xp, x):
    """log σ(x) = min(x, 0) − log1p(e^{−|x|}); the exponent is ≤ 0, nothing overflows. The
    kinks are selects, one branch on each side of 0, so that automatic differentiation (JAX's
    d|x|/dx = 1 and d min(x, 0)/dx = 1/2 at 0) still gives σ(−x) = 1/2 there."""
    neg = x < 0
    return xp.where(neg, x, xp.zeros_like(x)) - xp.log1p(xp.exp(xp.where(neg, x, -x)))


def sigmoid(xp, x):
    """σ(x) with e^{−|x|} ≤ 1 in both branches (no overflow, full relative accuracy in
    the tails)."""
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


# Taylor coefficients 1/(k+2)! of (e^x − 1 − x)/x². For |x| ≤ 1/2 the first omitted term
# is below the dtype's rounding unit relative to the sum (≥ 0.39): k ≤ 14 for binary64
# (0.5^15/17! ≈ 8.6e-20), k ≤ 8 for binary32 (0.5^9/11! ≈ 4.9e-11 ≪ 6e-8).
_EXPM1MX_COEFFS = []
_f = 2.0
for _k in range(15):
    _EXPM1MX_COEFFS.append(1.0 / _f)
    _f *= _k + 3
del _f, _k
_EXPM1MX_TERMS = {"float64": 15, "float32": 9}

_SERIES_RADIUS = 0.5


def expm1mx(xp, x):
    """e^x − 1 − x without the cancellation of ``expm1(x) − x`` near 0 (where the result
    is ~x²/2 but each operand is ~x): a Taylor series for |x| ≤ 1/2, ``expm1(x) − x``
    outside (at most two bits lost there)."""
    small = xp.abs(x) <= _SERIES_RADIUS
    xs = xp.where(small, x, xp.zeros_like(x))
    coeffs = _EXPM1MX_COEFFS[:_EXPM1MX_TERMS["float32" if x.dtype == xp.float32 else "float64"]]
    poly = xp.zeros_like(x) + coeffs[-1]
    for c in reversed(coeffs[:-1]):
        poly = poly * xs + c
    series = xs * xs * poly
    return xp.where(small, series, xp.expm1(x) - x)


def logaddexp(xp, a, b):
    """log(e^a + e^b) for finite a, b: max + log1p(e^{−|a−b|}), nothing overflows; max and
    −|a − b| as selects, so that JAX's derivative is 1/2 each at a = b, not 0 and 1."""
    a_top = a >= b
    return xp.where(a_top, a, b) + xp.log1p(xp.exp(xp.where(a_top, b - a, a - b)))


def kl_terms(xp, a, b, a_support, ell, axis: int = -1):
    """KL(a‖b) = Σ a·log(a/b) on ``axis`` from probabilities ``a``, ``b`` and the log-ratio
    ``ell`` = log a − log b (read only on ``a_support``; the caller has checked that
    supp a ⊆ supp b, else the KL is infinite).

    Summed as Σ_{a>0} a·(e^{−ℓ} − 1 + ℓ) + Σ_{a=0} b: the same number (Σa = Σb = 1) but
    every term is ≥ 0 and formed by ``expm1mx``, so there is no cancellation when a ≈ b
    (identical rows give exactly 0). Where ℓ < −1, a·(e^{−ℓ} − 1) is formed as b − a,
    which cannot overflow (e^{−ℓ} can, for ℓ < −709)."""
    zero = xp.zeros_like(a)
    ell = xp.where(a_support, ell, zero)
    near = ell >= -1.0
    term = xp.where(near, a * expm1mx(xp, -xp.where(near, ell, zero)), a * ell + b - a)
    return xp.sum(xp.where(a_support, term, b), axis=axis)
