"""The fused path of the token cross-entropy (PyTorch): ``lm.cross_entropy`` over row chunks,
value and gradient in one pass. ``refimpl.torch.lm.cross_entropy`` takes it for tensor logits
(``lm.FUSED``); ``_fused_linear`` runs its row kernel on each chunk of logits it forms.

The plain path (``lm._CrossEntropy``) holds a dozen [N,V] intermediates at once (the upcast
logits, the one-hot mask, the shifted logits, the exponentials, log q, q, the gradient, ...).
Here every intermediate is [R,V] for a chunk of R rows (``CHUNK_ELEMENTS`` logits), and the
gradient, computed in forward for the expected cotangent (1/denominator for 'mean', 1
otherwise), is written straight into the logits' dtype: backward returns it when the
cotangent is the expected one (a loss's backward from 1), scales it in place in the working
dtype, or recomputes it with the cotangent inside (float16/bfloat16: one rounding, as on the
plain path; also any cotangent that varies per row where the gradient is not kept in the
working dtype). Per counted row i with z' = s·tanh(z/s) when capped (Gemma 2, arXiv:2408.00118
§2), lse = log Σ e^{z'} and q = softmax(z'):

    ℓ_i = (1−ε)(lse − z'_y) + ε(lse − mean_j z'_j) + ζ·lse²      (PaLM z-loss, arXiv:2204.02311 §5)
    ∂ℓ_i/∂z_j = [q_j − (1−ε)δ_{jy} − ε/V + 2ζ·lse·q_j]·sech²(z_j/s)

Numerics: those of the plain path (``lm._Soft``): logits shifted by the row maximum, the
normaliser S = Σ_{j≠top} e^{x_j} with the top excluded so that log1p(S) keeps −log q_top of a
saturated row, ε's term as Σ(max − z'_j)/V + log1p(S) (non-negative terms), and q_y − (1−ε)
as expm1(log q_y) + ε. On a CPU the row kernel is the compiled one (``_compiled``:
``lossproof_cross_entropy`` in ``_kernels.cpp``, the same formulas one row at a time, sums in
double); rows it flags (a value that is not finite) and every other device take the torch
chunks below, which are the fallback everywhere.
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from lossproof.refimpl import validate
from lossproof.refimpl.torch import _common, _compiled

# Logits per row chunk of the torch path: its ~8 [R,V] intermediates stay a few MiB on a CPU.
CHUNK_ELEMENTS = 1 << 18


class Conventions:
    """ε (label_smoothing), ζ (z_loss), s (softcap or None) of one call."""

    def __init__(self, eps: float, zeta: float, cap: float | None):
        self.eps, self.zeta, self.cap = eps, zeta, cap


def chunk_rows(v: int, elements: int = CHUNK_ELEMENTS) -> int:
    return max(1, elements // max(v, 1))


def torch_rows(z: torch.Tensor, y: torch.Tensor, counted: torch.Tensor, c: Conventions, cot: torch.Tensor | None,
               out: torch.Tensor | None) -> torch.Tensor:
    """Per-row losses (working dtype [R], 0 where not counted) of the chunk ``z`` [R,V] (any
    float dtype; read only), labels ``y`` [R] in range, and, when ``cot`` (working dtype [R]) is
    given, cot·∂ℓ/∂z written into ``out`` [R,V] (any float dtype; may be ``z`` itself: written
    last)."""
    work = _common.work_dtype(z.dtype)
    zw = z.to(work)
    if c.cap is not None:
        zc = torch.tanh(zw / c.cap).mul_(c.cap)
    else:
        zc = zw
    m = zc.max(dim=-1, keepdim=True).values
    top = zc.argmax(dim=-1, keepdim=True)
    m = torch.where(m == -torch.inf, torch.zeros_like(m), m)
    x = zc - m
    e = torch.exp(x).scatter_(-1, top, 0.0)
    l1 = torch.log1p(e.sum(dim=-1, keepdim=True))
    del e
    yc = y[:, None]
    xy = x.gather(-1, yc)
    per = (1 - c.eps) * (l1 - xy)[:, 0]
    if c.eps:
        # mean_v (max − z'_v) over the finite logits, + log1p(S): non-negative terms
        live = torch.where(x > -torch.inf, x, 0.0)
        per = per + c.eps * ((-live).mean(dim=-1) + l1[:, 0])
        del live
    lse = m + l1
    if c.zeta:
        per = per + c.zeta * lse[:, 0].square()
    per = torch.where(counted, per, 0.0)
    if cot is None:
        return per
    logp = x.sub_(l1)
    logpy = logp.gather(-1, yc)
    p = logp.exp_()
    v = z.shape[-1]
    g = p - c.eps / v if c.eps else p.clone()
    gy = torch.exp(logpy) if c.eps == 1 else torch.expm1(logpy) + c.eps
    gy = gy - c.eps / v if c.eps else gy
    if c.zeta:
        g.addcmul_(p, 2 * c.zeta * lse)
        gy = gy + (2 * c.zeta) * lse * p.gather(-1, yc)
    g.scatter_(-1, yc, gy)
    if c.cap is not None:
        g.mul_(torch.cosh(zw / c.cap).pow_(-2))   # sech²: 0 at ±inf, no 1 − tanh² cancellation
    g.mul_(torch.where(counted, cot, 0.0)[:, None])
    out.copy_(g)
    return per


def rows(z: torch.Tensor, y: torch.Tensor, counted: torch.Tensor, c: Conventions, cot, out):
    """``torch_rows`` over all rows of [N,V] ``z``: the compiled kernel where it applies, its
    flagged rows and everything else by chunks. ``cot``: working-dtype [N] tensor or None.
    Returns the per-row losses in the working dtype."""
    n, v = z.shape
    work = _common.work_dtype(z.dtype)
    if n == 0:
        return torch.zeros(0, dtype=work, device=z.device)
    todo = range(n)
    per = torch.empty(n, dtype=work, device=z.device)
    if _compiled.usable(z, z) and (out is None or (out.dtype == z.dtype and out.stride(-1) == 1)):
        cot_np = None if cot is None else cot.detach().to(torch.float64).numpy()
        values, flagged = _compiled.cross_entropy_rows(z, y, counted, c.eps, c.zeta, c.cap, cot_np, out,
                                                       torch.get_num_threads())
        per.copy_(torch.from_numpy(values))
        if not flagged:
            return per
        todo = flagged
    idx = torch.as_tensor(list(todo), dtype=torch.long, device=z.device)
    step = chunk_rows(v)
    for lo in range(0, len(idx), step):
        sel = idx[lo:lo + step]
        contiguous = int(sel[-1]) - int(sel[0]) == len(sel) - 1
        a, b = int(sel[0]), int(sel[-1]) + 1
        zs = z[a:b] if contiguous else z[sel]
        target = None if cot is None else (out[a:b] if contiguous else torch.empty_like(zs))
        per[sel] = torch_rows(zs, y[sel], counted[sel], c, None if cot is None else cot[sel], target)
        if cot is not None and not contiguous:
            out[sel] = target
    return per


def counted_labels(y: torch.Tensor, v: int, ignore) -> torch.Tensor:
    """The rows whose label counts (not ``ignore``); a counted label outside [0, V) is an input error."""
    counted = y != ignore if ignore is not None else torch.ones_like(y, dtype=torch.bool)
    if (counted & ((y < 0) | (y >= v))).any():
        validate.token_labels(y.tolist(), v, ignore)   # raises, naming the first row
    return counted


def check_rows(z: torch.Tensor, y: torch.Tensor, counted: torch.Tensor, eps: float) -> None:
    """``lm._check_rows`` without [N,V] masks: a row of −inf, −inf at a counted label, −inf in a
    counted row with smoothing; the same errors (validate.lm_rows)."""
    zd = z.detach()
    low = zd.amin(dim=-1) == -torch.inf
    if not bool(low.any()):
        return
    none = zd.amax(dim=-1) == -torch.inf
    at_label = counted & (zd.gather(-1, y[:, None])[:, 0] == -torch.inf)
    some = counted & low
    if bool((none | at_label | (some & (eps > 0))).any()):
        validate.lm_rows(none.tolist(), at_label.tolist(), some.tolist(), counted.tolist(), eps)


class FusedCrossEntropy(torch.autograd.Function):
    """Per-row losses (working dtype) of [N,V] logits; the gradient for the cotangent ``c0``
    per row (1/denominator for 'mean', else 1) is computed in forward and kept."""

    @staticmethod
    def forward(ctx, z, y, counted, c, c0):
        work = _common.work_dtype(z.dtype)
        cot = None
        grad = None
        if ctx.needs_input_grad[0]:
            cot = torch.full((z.shape[0],), c0, dtype=work, device=z.device)
            grad = torch.empty_like(z, memory_format=torch.contiguous_format)
        with torch.no_grad():
            per = rows(z.detach(), y, counted, c, cot, grad)
        ctx.c, ctx.c0, ctx.grad = c, c0, grad
        ctx.save_for_backward(z, y, counted)
        return per

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        z, y, counted = ctx.saved_tensors
        grad, ctx.grad = ctx.grad, None  # the caller gets it without a copy
        if grad is not None and bool((g == ctx.c0).all()):
            return grad, None, None, None, None
        if grad is not None and grad.dtype == g.dtype and ctx.c0 != 0:
            return grad.mul_((g / ctx.c0)[:, None]), None, None, None, None
        grad = torch.empty_like(z, memory_format=torch.contiguous_format)
        rows(z.detach(), y, counted, ctx.c, g.contiguous(), grad)
        return grad, None, None, None, None


def cross_entropy(z: torch.Tensor, y: torch.Tensor, counted: torch.Tensor, c: Conventions, reduction: str,
                  denominator, out_dtype: torch.dtype):
    """The reduced loss of validated [N,V] logits ``z`` (its own dtype), labels ``y`` (int64,
    any in-range value where not counted), ``counted`` (bool [N]); ``denominator``: the mean's
    divisor (counted tokens or the normalizer), None otherwise."""
    work = _common.work_dtype(out_dtype)
    c0 = float(torch.ones((), dtype=work) / denominator) if reduction == "mean" else 1.0
    per = FusedCrossEntropy.apply(z, y, counted, c, c0)
    if reduction == "none":
        return per.to(out_dtype)
    total = per.sum()
    if reduction == "mean":
        total = total / denominator
    return total.to(out_dtype)
