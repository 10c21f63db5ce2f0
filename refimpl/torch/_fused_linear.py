"""Fused linear cross-entropy (PyTorch): the token cross-entropy of logits = hidden·Wᵀ (+ b)
without an [N,V] logits tensor, for the catalog's ``lm.linear_cross_entropy`` (hidden [N,H],
weight [V,H], labels [N], bias [V]; the conventions of ``lm.cross_entropy``).

Method (Liger Kernel 0.8.5, liger_kernel/ops/fused_linear_cross_entropy.py:
fused_linear_cross_entropy_forward; Wijmans et al., "Cut Your Losses in Large-Vocabulary
Language Models", arXiv:2411.09009 §3, for the memory argument): the rows go in chunks of R
(``CHUNK_ELEMENTS``/V). For each chunk, logits_c = h_c·Wᵀ (+ b) into one [R,V] buffer, the row
kernel of ``_fused_ce`` turns it in place into G_c = cot·∂ℓ/∂z (compiled on a CPU), and the
gradients follow at once: dh_c = G_c·W, dW += G_cᵀ·h_c, db += Σ_rows G_c. The buffer is
reused by the next chunk, so the memory above the inputs and the gradients is one [R,V]
buffer (plus, for bfloat16/float16 inputs, W in float32: the GEMMs run in the working dtype,
so that the logits are not rounded to 8 or 11 bits before the loss). The work is the three
GEMMs of the unfused loss (logits, dh, dW) plus one pass of the row kernel over the logits.

Backward. The gradients are formed in forward for the expected cotangent (1/denominator for
'mean', 1 per row otherwise) and kept: backward returns them for that cotangent, scales them
for any other cotangent that is the same for every row (the working dtype only), and otherwise
(a per-row cotangent of reduction 'none', or a scaled low-precision gradient) runs the chunks
again with the cotangent inside.
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from lossproof.refimpl import validate
from lossproof.refimpl.torch import _common, _fused_ce

# Logits per row chunk ([R,V] working-dtype buffer, 16 MiB in float32), R = CHUNK_ELEMENTS // V:
# 128 rows at V = 32768, 1/16 of the [N,V] logits at N = 2048. Smaller chunks make the three
# GEMMs less efficient (64 rows: about 10 % more time in all on a shared 2-core CPU).
CHUNK_ELEMENTS = 1 << 22


def _run(h, W, b, y, counted, c, cot, need):
    """Per-row losses (working dtype) and, when ``cot`` is given, the gradients (dh, dW, db:
    those that ``need`` asks for, in the inputs' dtypes; None for the others)."""
    n, width = h.shape
    v = W.shape[0]
    work = _common.work_dtype(_common.result_dtype(h, W, *([b] if b is not None else [])))
    Ww = W.detach().to(work)
    bw = None if b is None else b.detach().to(work)
    step = _fused_ce.chunk_rows(v, CHUNK_ELEMENTS)
    buf = torch.empty(min(step, n), v, dtype=work, device=h.device)
    per = torch.empty(n, dtype=work, device=h.device)
    grads = cot is not None
    dh = torch.empty(n, width, dtype=h.dtype, device=h.device) if grads and need[0] else None
    dW = torch.zeros(v, width, dtype=work, device=h.device) if grads and need[1] else None
    db = torch.zeros(v, dtype=work, device=h.device) if grads and need[2] else None
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        hc = h.detach()[lo:hi].to(work)
        z = buf[:hi - lo]
        torch.mm(hc, Ww.t(), out=z)
        if bw is not None:
            z.add_(bw)
        per[lo:hi] = _fused_ce.rows(z, y[lo:hi], counted[lo:hi], c, None if cot is None else cot[lo:hi],
                                    z if grads else None)
        if dh is not None:
            if dh.dtype == work:
                torch.mm(z, Ww, out=dh[lo:hi])
            else:
                dh[lo:hi] = z @ Ww
        if dW is not None:
            dW.addmm_(z.t(), hc)
        if db is not None:
            db.add_(z.sum(dim=0))
    if not bool(torch.isfinite(per).all()):
        raise FloatingPointError("linear_cross_entropy: the logits hidden·weightᵀ (+ bias) overflow the working "
                                 f"dtype {work}")
    if not grads:
        return per, (None, None, None)
    return per, (dh, None if dW is None else dW.to(W.dtype), None if db is None else db.to(b.dtype))


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, W, b, y, counted, c, c0):
        need = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], b is not None and ctx.needs_input_grad[2])
        work = _common.work_dtype(_common.result_dtype(h, W, *([b] if b is not None else [])))
        cot = torch.full((h.shape[0],), c0, dtype=work, device=h.device) if any(need) else None
        with torch.no_grad():
            per, grads = _run(h, W, b, y, counted, c, cot, need)
        ctx.c, ctx.c0, ctx.need, ctx.grads = c, c0, need, grads
        ctx.save_for_backward(h, W, b, y, counted)
        return per

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        h, W, b, y, counted = ctx.saved_tensors
        grads, ctx.grads = ctx.grads, (None, None, None)
        kept = any(x is not None for x in grads)
        if kept and bool((g == ctx.c0).all()):
            return (*grads, None, None, None, None)
        if kept and ctx.c0 != 0 and bool((g == g[0]).all()) and all(x is None or x.dtype == g.dtype for x in grads):
            r = g[0] / ctx.c0
            return (*(None if x is None else x.mul_(r) for x in grads), None, None, None, None)
        _, grads = _run(h, W, b, y, counted, ctx.c, g.contiguous(), ctx.need)
        return (*grads, None, None, None, None)


def linear_cross_entropy(hidden, weight, labels, ignore_index: int = -100, label_smoothing: float = 0.0,
                         z_loss: float = 0.0, softcap: float | None = None, reduction: str = "mean",
                         normalizer: float | None = None, smoothing_classes: str = "all", bias=None):
    """Token cross-entropy of logits = hidden·weightᵀ (+ bias), as ``lm.cross_entropy`` on those
    logits (every convention the same), never holding the [N,V] logits (module docstring).
    ``hidden`` [N,H], ``weight`` [V,H], ``labels`` [N], ``bias`` [V] or None. Differentiable wrt
    hidden, weight and bias; the result is in the inputs' promoted dtype (bfloat16/float16 run in
    float32)."""
    h = _common.array("hidden", hidden)
    W = _common.array("weight", weight).to(h.device)
    b = None if bias is None else _common.array("bias", bias).to(h.device)
    n, _, v = validate.linear_shapes(tuple(h.shape), tuple(W.shape), None if b is None else tuple(b.shape))
    y = _common.int_array("labels", labels)
    validate.rank("labels", tuple(y.shape), 1)
    validate.same_shape(**{"hidden rows": (n,)}, labels=tuple(y.shape))
    y = y.to(h.device)
    ignore, eps, zeta, cap, reduction, norm = validate.lm_conventions(ignore_index, label_smoothing, z_loss,
                                                                      softcap, reduction, normalizer)
    eps = validate.smoothing_weight(eps, smoothing_classes, v)
    counted = _fused_ce.counted_labels(y, v, ignore)
    count = int(counted.sum())
    validate.empty_mean(reduction, norm, count)
    out_dtype = _common.result_dtype(h, W, *([b] if b is not None else []))
    work = _common.work_dtype(out_dtype)
    denominator = (norm if norm is not None else count) if reduction == "mean" else None
    c0 = float(torch.ones((), dtype=work) / denominator) if reduction == "mean" else 1.0
    per = _LinearCrossEntropy.apply(h, W, b, torch.where(counted, y, 0), counted,
                                    _fused_ce.Conventions(eps, zeta, cap), c0)
    if reduction == "none":
        return per.to(out_dtype)
    total = per.sum()
    if reduction == "mean":
        total = total / denominator
    return total.to(out_dtype)
