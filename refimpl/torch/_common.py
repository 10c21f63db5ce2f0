"""Input checks and dtype handling shared by the torch objectives.

The checks raise ``refimpl.validate.InputError`` with the same messages as ``refimpl.exact``
(its ``mp.array`` / ``mp.mask`` / ``mp.int_array`` conversions and ``refimpl.validate``), so
every backend rejects the same inputs in the same words. Value checks (NaN/inf, 0/1 masks,
label ranges) read a flag back from the device: one host synchronisation per check.
"""
from __future__ import annotations

import torch

from lossproof.refimpl import validate

CHECK_CHUNK = 1 << 24  # elements per slice of a value check

_FLOATS = {torch.float64: "float64", torch.float32: "float32",
           torch.bfloat16: "bfloat16", torch.float16: "float16"}


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype computations run in: float64 stays, everything narrower runs in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _as_tensor(name: str, x) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    try:
        return torch.as_tensor(x, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        validate.fail(name, "ragged nested lists (rows of different lengths)")


def array(name: str, x, *, allow_neg_inf: bool = False) -> torch.Tensor:
    """A floating tensor of a supported dtype without NaN or infinities (−inf only where
    ``allow_neg_inf``); lists convert as float64 (the exact reference's binary64 inputs)."""
    t = _as_tensor(name, x)
    if t.dtype not in _FLOATS:
        if t.dtype == torch.bool or t.is_complex() or t.is_floating_point():
            validate.fail(name, f"dtype {t.dtype} is not supported; expected one of "
                                f"{', '.join(_FLOATS.values())}")
        t = t.to(torch.float64)  # integer tensors: exact as binary64 up to 2**53
    # In slices, so that a [N,V] logit tensor never gets a [N,V] boolean companion.
    for d in t.detach().reshape(-1).split(CHECK_CHUNK):
        if torch.isnan(d).any():
            validate.fail(name, "contains NaN")
        if (d == float("inf")).any():
            validate.fail(name, "contains +inf")
        if not allow_neg_inf and (d == float("-inf")).any():
            validate.fail(name, "contains -inf")
    return t


def mask(name: str, x, shape: tuple) -> torch.Tensor:
    """A 0/1 mask of the given shape, as a bool tensor (mirrors ``mp.mask``)."""
    m = _as_tensor(name, x)
    if m.is_floating_point() and torch.isnan(m.detach()).any():
        validate.fail(name, "contains NaN")
    if m.is_floating_point() and torch.isinf(m.detach()).any():
        validate.fail(name, "contains +inf" if (m.detach() > 0).any() else "contains -inf")
    validate.same_shape(**{name: tuple(m.shape), "inputs": tuple(shape)})
    if m.dtype != torch.bool and not ((m == 0) | (m == 1)).all():
        validate.fail(name, "must contain only 0 and 1")
    return m.detach() != 0


def int_array(name: str, x) -> torch.Tensor:
    """An int64 tensor; floating values must be integers (mirrors ``mp.int_array``)."""
    try:
        t = x if isinstance(x, torch.Tensor) else torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError):  # None, strings, dicts: as mp.int_array says
        validate.fail(name, f"expected integers, got {x!r}")
    if t.dtype == torch.bool:
        validate.fail(name, f"expected integers, got {bool(t.flatten()[0]) if t.numel() else True!r}")
    if t.is_floating_point():
        d = t.detach()
        bad = ~torch.isfinite(d) | (d != torch.trunc(d))
        if bad.any():
            validate.fail(name, f"expected integers, got {d[bad].flatten()[0].item()!r}")
    return t.detach().to(torch.int64)


def result_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The dtype of the outputs: the promoted dtype of the floating inputs."""
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def upcast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` in the working dtype (differentiable: the gradient comes back in t's dtype)."""
    return t if t.dtype == dtype else t.to(dtype)


def constant(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An input outside the catalog's ``grads``: detached and upcast."""
    return upcast(t.detach(), dtype)
