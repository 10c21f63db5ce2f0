"""Launching the kernels of ``_kernels`` from PyTorch: tile sizes, the working dtype, the
per-row autograd function and the device rule (CUDA, or CPU tensors under the interpreter)."""
from __future__ import annotations

import contextlib

import numpy as np
import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable
from triton.runtime.jit import JITFunction

from lossproof.refimpl.triton import _kernels

# Tokens per tile row, and logits per tile ([ROWS, BLOCK]). On a GPU a tile of 4096 float32
# logits per model is 16 values per thread and operand for 8 warps, held in registers; a
# vocabulary up to 4096 tokens puts several rows in one program, so that short rows still
# fill a tile. Under the interpreter each tile operation is one NumPy call and every program
# and helper call costs Python overhead: large tiles, few programs.
MAX_BLOCK = 4096
MIN_BLOCK = 16
TILE_ELEMENTS = 4096
INTERPRETER_TILE_ELEMENTS = 1 << 16


def interpreted() -> bool:
    """Whether the kernels run in Triton's CPU interpreter. Triton decides it when a kernel is
    defined (``TRITON_INTERPRET=1`` at import), so it is read from a kernel, not from the
    environment as it is now."""
    return not isinstance(_kernels.token_kl_forward, JITFunction)


def tile(n: int, v: int) -> tuple[int, int]:
    """(ROWS, BLOCK) of a launch over [n, v] logits."""
    b = min(MAX_BLOCK, max(MIN_BLOCK, triton.next_power_of_2(v)))
    elements = INTERPRETER_TILE_ELEMENTS if interpreted() else TILE_ELEMENTS
    return min(triton.next_power_of_2(max(n, 1)), max(1, elements // b)), b


def work_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """float64 when any input is float64, else float32 (bfloat16/float16 accumulate in float32)."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def _tl(dtype: torch.dtype):
    return tl.float64 if dtype == torch.float64 else tl.float32


def check_device(*tensors: torch.Tensor) -> None:
    for t in tensors:
        if t.device.type == "cuda" or (t.device.type == "cpu" and interpreted()):
            continue
        raise TypeError(f"lossproof.refimpl.triton: a tensor on {t.device} needs a CUDA device, or "
                        "TRITON_INTERPRET=1 (the Triton interpreter) for CPU tensors")


def launch(kernel, n: int, v: int, work: torch.dtype, *args, **constexprs) -> None:
    """``args``: the kernel's tensors before ``N, V, par_ptr``, then the list of its scalar
    parameters, which travel as a tensor of the working dtype (Triton passes Python floats
    as float32; float64 kernels get them in float64)."""
    if n == 0:
        return  # no rows: nothing to launch (a grid of zero programs is not a valid launch on a GPU)
    *pointers, params = args
    par = torch.tensor(params, dtype=work, device=pointers[0].device)
    rows, b = tile(n, v)
    # The interpreter evaluates the selected-away branches of tl.where with NumPy, whose
    # warnings (−inf − −inf, log 0) are by design here.
    with np.errstate(all="ignore") if interpreted() else contextlib.nullcontext():
        kernel[(triton.cdiv(n, rows),)](*pointers, n, v, par, ROWS=rows, BLOCK=b, ACC=_tl(work),
                                        num_warps=4 if rows * b <= 1024 else 8, **constexprs)


def require_finite(values: torch.Tensor, check) -> None:
    """Non-finite values: bad input (``check``, the backend's full input checks, raises) or an
    overflow of the kernel in its working dtype, raised as such: never a silent NaN."""
    if not bool(torch.isfinite(values).all()):
        check()
        raise FloatingPointError("lossproof.refimpl.triton: a kernel returned a non-finite value for inputs that "
                                 "pass every check (an overflow in the working dtype)")


class Rows(torch.autograd.Function):
    """Per-row values of a fused kernel pair ``spec`` (``forward(zs, ts, y) -> (values,
    stats)``, ``backward(zs, ts, y, stats, cotangent) -> gradient``); the gradient flows to
    the student's logits only."""

    @staticmethod
    def forward(ctx, spec, zs, ts, y):
        values, stats = spec.forward(zs, ts, y)
        ctx.spec = spec
        ctx.save_for_backward(zs, ts, y, stats)
        return values

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        zs, ts, y, stats = ctx.saved_tensors
        return None, ctx.spec.backward(zs, ts, y, stats, g.contiguous()), None, None
