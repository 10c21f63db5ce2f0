"""The token cross-entropy as fused Triton kernels (``_kernels.cross_entropy_forward`` and
``cross_entropy_backward``: one pass over vocabulary tiles with an online log-sum-exp, one more
for the gradient), with the catalog's signature and the conventions of
``refimpl.torch.lm.cross_entropy`` (torch.nn.functional.cross_entropy with PyTorch's label
smoothing, PaLM's z-loss, arXiv:2204.02311 §5, Gemma 2's soft-capping, arXiv:2408.00118 §2,
transformers' num_items_in_batch as ``normalizer``), whose docstrings give the formulas.

Inputs are tensors on a CUDA device (or CPU tensors under ``TRITON_INTERPRET=1``). The checks
that read no logit run before the launch; those that read every logit (NaN, +inf, −inf rows,
−inf at a counted label or, with smoothing, in a counted row) run when a row's value comes out
non-finite or a row's maximum is −inf, which every such input causes (``refimpl.triton.distill``
does the same). The loss comes back in the logits' dtype, the gradient too.

``linear_cross_entropy`` is the same loss of the logits hidden·weightᵀ (+ bias) without an
[N,V] logits tensor: the row chunks of ``refimpl.torch._fused_linear`` (Liger Kernel 0.8.5,
liger_kernel/ops/fused_linear_cross_entropy.py: fused_linear_cross_entropy_forward; Wijmans et
al., arXiv:2411.09009 §3), with the two kernels above on each chunk's logits instead of the
torch backend's row kernel. Per chunk of R rows: logits_c = h_c·Wᵀ (+ b) by a torch GEMM into
one [R,V] buffer in the working dtype, ``cross_entropy_forward`` (values, statistics), then
``cross_entropy_backward`` writes G_c = cot·∂ℓ/∂z over the buffer in place (each program reads
a tile before it writes the same tile, and no other program touches its rows), and the GEMMs
dh_c = G_c·W, dW += G_cᵀ·h_c, db += Σ G_c follow, all in forward for the expected cotangent.
Backward returns those gradients, scales them, or runs the chunks again (as the torch path).
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from lossproof.refimpl import validate
from lossproof.refimpl.triton import _checks, _kernels, _launch

__all__ = ["cross_entropy", "linear_cross_entropy"]

DECLINED = {
    "lm.token_logprobs": "no kernel here: logprobs.selective_log_softmax is the same computation (log q_y "
                         "at temperature T) and lossproof.refimpl.torch.lm.token_logprobs serves the catalog objective",
    "lm.entropy": "no kernel: lossproof.refimpl.torch.lm.entropy serves it",
}

# Logits per row chunk of linear_cross_entropy ([R,V] working-dtype buffer, 16 MiB in float32),
# R = CHUNK_ELEMENTS // V: the torch backend's chunk (refimpl.torch._fused_linear), 128 rows at
# V = 32768, enough rows for the GEMMs to run near their peak.
CHUNK_ELEMENTS = 1 << 22


class _CrossEntropy:
    def __init__(self, eps: float, zeta: float, cap: float | None):
        self.params = [eps, zeta, 1.0 if cap is None else cap]
        self.capped = cap is not None

    def forward(self, z, _, y):
        n, v = z.shape
        work = _launch.work_dtype(z)
        values = torch.empty(n, dtype=work, device=z.device)
        self.stats = torch.empty(n, 3, dtype=work, device=z.device)
        _launch.launch(_kernels.cross_entropy_forward, n, v, work, z, y, values, self.stats, self.params,
                       CAPPED=self.capped)
        return values, self.stats

    def backward(self, z, _, y, stats, cot, out=None):
        """The gradient for the per-row cotangent, into ``out`` (may be ``z`` itself) or a new tensor."""
        n, v = z.shape
        grad = torch.empty_like(z) if out is None else out
        _launch.launch(_kernels.cross_entropy_backward, n, v, stats.dtype, z, y, stats, cot, grad, self.params,
                       CAPPED=self.capped)
        return grad


def _row_checks(z: torch.Tensor, y: torch.Tensor, counted: torch.Tensor, eps: float, cap) -> None:
    """The checks that read every logit, in every backend's order and words (soft-capping maps
    −inf to −s: then only NaN and +inf are refused)."""
    _checks.logits("logits", z, rank=2)
    if cap is not None:
        return
    d = z.detach()
    none = (d == _checks.NEG_INF).all(dim=-1)
    at_label = counted & (d.gather(1, torch.where(counted, y, 0)[:, None])[:, 0] == _checks.NEG_INF)
    some = counted & (d == _checks.NEG_INF).any(dim=-1)
    validate.lm_rows(none.tolist(), at_label.tolist(), some.tolist(), counted.tolist(), eps)


def _counted(y: torch.Tensor, v: int, ignore) -> torch.Tensor:
    """The rows whose label counts (not ``ignore``); a counted label outside [0, V) is an input error."""
    counted = y != ignore if ignore is not None else torch.ones_like(y, dtype=torch.bool)
    if bool((counted & ((y < 0) | (y >= v))).any()):
        validate.token_labels(y.tolist(), v, ignore)   # raises, naming the first row
    return counted


def cross_entropy(logits, labels, ignore_index: int = -100, label_smoothing: float = 0.0, z_loss: float = 0.0,
                  softcap: float | None = None, reduction: str = "mean", normalizer: float | None = None,
                  smoothing_classes: str = "all"):
    """Token cross-entropy of ``logits`` [N,V] and ``labels`` [N] (see ``refimpl.torch.lm``;
    'others' runs the all-V kernel at ε·V/(V − 1), ``validate.smoothing_weight``); the
    scalar loss ('mean', 'sum') or loss[N] ('none', 0 at ignore_index); differentiable wrt the
    logits by the backward kernel."""
    z = logits if isinstance(logits, torch.Tensor) and logits.dtype in _checks.FLOATS else \
        _checks.logits("logits", logits, rank=2)
    validate.rank("logits", tuple(z.shape), 2)
    n, v = z.shape
    validate.lm_logit_rows(n, v)
    _launch.check_device(z)
    y = _checks.integers("labels", labels)
    validate.rank("labels", tuple(y.shape), 1)
    validate.same_shape(**{"logits rows": (n,)}, labels=tuple(y.shape))
    y = y.to(z.device)
    ignore, eps, zeta, cap, reduction, norm = validate.lm_conventions(ignore_index, label_smoothing, z_loss,
                                                                      softcap, reduction, normalizer)
    eps = validate.smoothing_weight(eps, smoothing_classes, v)
    counted = _counted(y, v, ignore)
    count = int(counted.sum())
    spec = _CrossEntropy(eps, zeta, cap)
    zc = z.contiguous()
    per = _launch.Rows.apply(spec, zc, None, torch.where(counted, y, -1).contiguous())
    if not bool(torch.isfinite(per).all()) or bool((spec.stats[:, 0] == _checks.NEG_INF).any()):
        _row_checks(z, y, counted, eps, cap)
        _launch.require_finite(per, lambda: None)
    validate.empty_mean(reduction, norm, count)
    out_dtype = z.dtype
    if reduction == "none":
        return per.to(out_dtype)
    total = per.sum()
    if reduction == "mean":
        total = total / (norm if norm is not None else count)
    return total.to(out_dtype)


def _linear_run(h, W, b, y, spec: _CrossEntropy, cot, need):
    """Per-row losses (working dtype) and, when ``cot`` (working dtype [N]) is given, the
    gradients (dh, dW, db: those that ``need`` asks for, in the inputs' dtypes; None for the
    others). ``y``: the labels, −1 where a row is not counted (the kernels' convention)."""
    n, width = h.shape
    v = W.shape[0]
    work = _launch.work_dtype(h, W, *([b] if b is not None else []))
    # bfloat16/float16 inputs: the GEMMs run in float32, so that the logits are not rounded to
    # 8 or 11 bits before the loss (each logit a float32 dot product of exact products)
    Ww = W.detach().to(work)
    bw = None if b is None else b.detach().to(work)
    step = max(1, CHUNK_ELEMENTS // v)
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
        per[lo:hi], stats = spec.forward(z, None, y[lo:hi])
        if not grads:
            continue
        spec.backward(z, None, y[lo:hi], stats, cot[lo:hi], out=z)
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
        # hidden, weight and bias are finite (checked): a non-finite value is an overflow
        raise FloatingPointError("linear_cross_entropy: the logits hidden·weightᵀ (+ bias) overflow the working "
                                 f"dtype {work}")
    if not grads:
        return per, (None, None, None)
    return per, (dh, None if dW is None else dW.to(W.dtype), None if db is None else db.to(b.dtype))


class _LinearCrossEntropy(torch.autograd.Function):
    """Per-row losses of hidden, weight, bias; the gradients formed in forward for the
    cotangent ``c0`` that a loss's backward from 1 gives every row (1/denominator for 'mean',
    1 otherwise). Backward returns them for that cotangent, scales them for any other
    cotangent that is the same for every row (when they are in the working dtype, one rounding
    only), and otherwise (a per-row cotangent of reduction 'none', a scaled low-precision
    gradient) runs the chunks again with the cotangent inside."""

    @staticmethod
    def forward(ctx, h, W, b, y, spec, c0):
        need = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], b is not None and ctx.needs_input_grad[2])
        work = _launch.work_dtype(h, W, *([b] if b is not None else []))
        cot = torch.full((h.shape[0],), c0, dtype=work, device=h.device) if any(need) else None
        with torch.no_grad():
            per, grads = _linear_run(h, W, b, y, spec, cot, need)
        ctx.spec, ctx.c0, ctx.need, ctx.grads = spec, c0, need, grads
        ctx.save_for_backward(h, W, b, y)
        return per

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        h, W, b, y = ctx.saved_tensors
        grads, ctx.grads = ctx.grads, (None, None, None)
        kept = any(x is not None for x in grads)
        if kept and bool((g == ctx.c0).all()):
            return (*grads, None, None, None)
        if kept and ctx.c0 != 0 and bool((g == g[0]).all()) and all(x is None or x.dtype == g.dtype for x in grads):
            r = g[0] / ctx.c0
            return (*(None if x is None else x.mul_(r) for x in grads), None, None, None)
        _, grads = _linear_run(h, W, b, y, ctx.spec, g.contiguous(), ctx.need)
        return (*grads, None, None, None)


def linear_cross_entropy(hidden, weight, labels, ignore_index: int = -100, label_smoothing: float = 0.0,
                         z_loss: float = 0.0, softcap: float | None = None, reduction: str = "mean",
                         normalizer: float | None = None, smoothing_classes: str = "all", bias=None):
    """Token cross-entropy of logits = hidden·weightᵀ (+ bias), as ``cross_entropy`` on those
    logits (every convention the same), never holding the [N,V] logits (module docstring).
    ``hidden`` [N,H], ``weight`` [V,H], ``labels`` [N], ``bias`` [V] or None; the checks and
    their order are those of ``refimpl.torch.lm.linear_cross_entropy``. Differentiable wrt
    hidden, weight and bias; the result is in the inputs' promoted dtype (bfloat16/float16 run
    in float32)."""
    h = _checks.finite("hidden", hidden)
    W = _checks.finite("weight", weight).to(h.device)
    b = None if bias is None else _checks.finite("bias", bias).to(h.device)
    n, _, v = validate.linear_shapes(tuple(h.shape), tuple(W.shape), None if b is None else tuple(b.shape))
    _launch.check_device(h)
    y = _checks.integers("labels", labels)
    validate.rank("labels", tuple(y.shape), 1)
    validate.same_shape(**{"hidden rows": (n,)}, labels=tuple(y.shape))
    y = y.to(h.device)
    ignore, eps, zeta, cap, reduction, norm = validate.lm_conventions(ignore_index, label_smoothing, z_loss,
                                                                      softcap, reduction, normalizer)
    eps = validate.smoothing_weight(eps, smoothing_classes, v)
    counted = _counted(y, v, ignore)
    count = int(counted.sum())
    validate.empty_mean(reduction, norm, count)
    out_dtype = _checks.result_dtype(h, W, *([b] if b is not None else []))
    work = _launch.work_dtype(h, W, *([b] if b is not None else []))
    denominator = (norm if norm is not None else count) if reduction == "mean" else None
    c0 = float(torch.ones((), dtype=work) / denominator) if reduction == "mean" else 1.0
    per = _LinearCrossEntropy.apply(h, W, b, torch.where(counted, y, -1).contiguous(),
                                    _CrossEntropy(eps, zeta, cap), c0)
    if reduction == "none":
        return per.to(out_dtype)
    total = per.sum()
    if reduction == "mean":
        total = total / denominator
    return total.to(out_dtype)
