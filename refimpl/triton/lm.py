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
"""
from __future__ import annotations

import torch

from refimpl import validate
from refimpl.triton import _checks, _kernels, _launch

__all__ = ["cross_entropy"]

DECLINED = {
    "lm.token_logprobs": "no kernel here: logprobs.selective_log_softmax is the same computation (log q_y "
                         "at temperature T) and refimpl.torch.lm.token_logprobs serves the catalog objective",
    "lm.entropy": "no kernel: refimpl.torch.lm.entropy serves it",
    "lm.linear_cross_entropy": "no fused-linear kernel here: refimpl.torch._fused_linear chunks the rows and "
                               "runs the cross-entropy row kernel between the GEMMs (the torch backend)",
}


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

    def backward(self, z, _, y, stats, cot):
        n, v = z.shape
        grad = torch.empty_like(z)
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


def cross_entropy(logits, labels, ignore_index: int = -100, label_smoothing: float = 0.0, z_loss: float = 0.0,
                  softcap: float | None = None, reduction: str = "mean", normalizer: float | None = None):
    """Token cross-entropy of ``logits`` [N,V] and ``labels`` [N] (see ``refimpl.torch.lm``); the
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
    ignore = validate.ignore_index(ignore_index)
    eps = validate.ce_label_smoothing(label_smoothing)
    zeta = validate.z_loss(z_loss)
    cap = validate.softcap(softcap)
    reduction = validate.lm_reduction(reduction)
    norm = validate.ce_normalizer(normalizer, reduction)
    counted = y != ignore if ignore is not None else torch.ones_like(y, dtype=torch.bool)
    if bool((counted & ((y < 0) | (y >= v))).any()):
        validate.token_labels(y.tolist(), v, ignore)   # raises, naming the first row
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
