"""Input checks of refimpl.triton on torch tensors, with the messages of every other backend
(``refimpl.validate`` for the parameters and shapes; the array checks in the words of
``refimpl.exact.mp.array`` and the distill modules). The backends share nothing but
``refimpl.validate`` (tests/test_layering.py), so these read the tensors themselves.

The checks that read every logit run only when a kernel's value comes out non-finite (see
``refimpl.triton.distill``): in one pass over the tensor each, on its device.
"""
from __future__ import annotations

import numpy as np
import torch

from lossproof.refimpl import validate

FLOATS = {torch.float64: "float64", torch.float32: "float32", torch.bfloat16: "bfloat16",
          torch.float16: "float16"}
NEG_INF = float("-inf")


def result_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The outputs' dtype: the promoted dtype of the inputs."""
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def _at(flat: int, lead: tuple) -> tuple:
    return tuple(int(i) for i in np.unravel_index(flat, lead)) if lead else ()


def _tensor(name: str, x) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    try:
        return torch.as_tensor(x, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        validate.fail(name, "ragged nested lists (rows of different lengths)")


def _dtype(name: str, x: torch.Tensor) -> None:
    if x.dtype not in FLOATS:
        validate.fail(name, f"dtype {x.dtype} is not supported; expected one of {', '.join(FLOATS.values())}")


def _no_nan_or_inf(name: str, x: torch.Tensor, neg_inf: bool) -> None:
    d = x.detach()
    if bool(torch.isnan(d).any()):
        validate.fail(name, "contains NaN")
    if bool((d == float("inf")).any()):
        validate.fail(name, "contains +inf")
    if not neg_inf and bool((d == NEG_INF).any()):
        validate.fail(name, "contains -inf")


def logits(name: str, x, rank=None) -> torch.Tensor:
    """A floating tensor ([...,V], or of the given rank) without NaN or +inf (−inf marks an
    impossible token); lists convert as float64."""
    x = _tensor(name, x)
    _dtype(name, x)
    if rank is not None:
        validate.rank(name, tuple(x.shape), rank)
    elif x.ndim < 1:
        validate.fail(name, "expected at least 1 dimension (the vocabulary axis), got a scalar")
    if x.shape[-1] == 0:
        validate.fail(name, f"the vocabulary axis must not be empty, got shape {tuple(x.shape)}")
    _no_nan_or_inf(name, x, neg_inf=True)
    return x


def finite(name: str, x) -> torch.Tensor:
    """A floating tensor without NaN or ±inf (hidden states, weights: no value of them is
    impossible), in the words of the torch backend's ``_common.array``; lists and integer
    tensors convert as float64 (exact up to 2**53)."""
    x = _tensor(name, x)
    if x.dtype not in FLOATS and not (x.dtype == torch.bool or x.is_complex() or x.is_floating_point()):
        x = x.to(torch.float64)
    _dtype(name, x)
    _no_nan_or_inf(name, x, neg_inf=False)
    return x


def possible_rows(name: str, x: torch.Tensor) -> None:
    """Every row has a possible token."""
    dead = (x.detach() == NEG_INF).all(dim=-1).reshape(-1).nonzero()
    if len(dead):
        validate.fail(name, f"row {_at(int(dead[0, 0]), tuple(x.shape[:-1]))} is -inf everywhere (no possible token)")


def support(name: str, inner: torch.Tensor, outer: torch.Tensor, what: str) -> None:
    """supp inner ⊆ supp outer row by row, else the divergence is +inf: reject, naming ``name``."""
    v = inner.shape[-1]
    hit = ((inner.detach() != NEG_INF) & (outer.detach() == NEG_INF)).reshape(-1, v).nonzero()
    if len(hit):
        row, token = int(hit[0, 0]), int(hit[0, 1])
        validate.fail(name, f"-inf at row {_at(row, tuple(inner.shape[:-1]))}, token {token}, where the other "
                            f"distribution has probability > 0: {what} is infinite (support mismatch)")


def indices(name: str, x, shape: tuple, v: int, device, against: str) -> torch.Tensor:
    """Integers in [0, v) of the given shape (labels, sampled tokens), as int64 on ``device``."""
    y = integers(name, x)
    validate.same_shape(**{against: shape}, **{name: tuple(y.shape)})
    bad = ((y < 0) | (y >= v)).nonzero()
    if len(bad):
        at = tuple(int(i) for i in bad[0])
        where = f"row {at[0]}" if len(at) == 1 else f"{at}"
        validate.fail(name, f"{'label ' if name == 'labels' else ''}{int(y[at])} at {where} is outside [0, {v})")
    return y.to(device)


def integers(name: str, x) -> torch.Tensor:
    """An int64 tensor; floating values must be integers (the words of ``mp.int_array``)."""
    try:
        y = x if isinstance(x, torch.Tensor) else torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError):
        validate.fail(name, f"expected integers, got {x!r}")
    if y.dtype == torch.bool:
        validate.fail(name, f"expected integers, got {bool(y.flatten()[0]) if y.numel() else True!r}")
    if y.is_floating_point():
        bad = ~torch.isfinite(y) | (y != torch.trunc(y))
        if bool(bad.any()):
            validate.fail(name, f"expected integers, got {y[bad].flatten()[0].item()!r}")
    return y.detach().to(torch.int64)


def pair(student_logits, teacher_logits, temperature, rank=None):
    """Both models' logits, in the order of every backend: each tensor, the shapes, T, the rows."""
    zs = logits("student_logits", student_logits, rank)
    ts = logits("teacher_logits", teacher_logits, rank)
    validate.same_shape(student_logits=tuple(zs.shape), teacher_logits=tuple(ts.shape))
    T = validate.temperature(temperature)
    possible_rows("student_logits", zs)
    possible_rows("teacher_logits", ts)
    return zs, ts, T
