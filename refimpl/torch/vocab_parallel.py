"""Vocabulary-parallel distillation divergences: the logits of every row are split over the ranks
of a process group by contiguous vocabulary ranges, and each rank holds one range.

Each function takes its rank's shard of ``student_logits`` and ``teacher_logits`` ([N, V_r]),
the catalog's parameters, the process ``group`` and (for ``hinton``) ``vocab_start``, the global
id of the shard's first token. It returns the *global* value on every rank (the same tensor as
``refimpl.torch.distill`` on the full vocabulary) and its backward gives this rank's shard of the
global gradient.

The pattern is Megatron-LM's vocabulary-parallel cross-entropy (Shoeybi et al. 2019, §3;
megatron/core/tensor_parallel/cross_entropy.py): the row maxima are all-reduced with MAX, the
shifted exponential sums with SUM, so that every rank holds the global log-sum-exp, then the
per-rank partial sums of the divergence are all-reduced with SUM. The gradient is analytic and
local, computed from those global statistics in one ``torch.autograd.Function`` per objective:
its backward needs no collective, because every rank holds the same (replicated) loss and
differentiates it only with respect to its own shard. (Backpropagating through
``torch.distributed.nn.all_reduce`` instead would sum the replicated cotangents over the ranks
and multiply the gradient by the group size.)

Formulas (q student, p teacher, both at temperature T, ℓ = log q − log p, per row):
- reverse KL(q‖p) = Σ q·ℓ, gradient q·(ℓ − KL)/T;
- forward KL(p‖q) = Σ p·(log p − log q), gradient (q − p)/T;
- generalized JSD (GKD, Agarwal et al. 2024 §3 eq. 2) β·KL(p‖m) + (1−β)·KL(q‖m), m = βp + (1−β)q,
  gradient (1−β)·q·(g − KL(q‖m))/T with g = log q − log m;
- Hinton (Hinton et al. 2015 §2) mean over rows of (1−α)·(LSE(z) − z_y) + α·s·KL(p‖q),
  gradient [(1−α)(softmax(z) − e_y) + α·s·(q − p)/T]/N.
0·log 0 = 0; inputs are assumed valid (``refimpl.torch.distill`` checks them on one process).
bfloat16 and float16 shards are computed in float32 and the results cast back, as in
``refimpl.torch``.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from refimpl import validate
from refimpl.torch import _common

__all__ = ["generalized_jsd", "hinton", "token_kl"]


def _log_softmax(x: torch.Tensor, group) -> torch.Tensor:
    """Log-softmax of the rows of ``x`` across the vocabulary shards of the group (no grad)."""
    top = x.amax(dim=-1, keepdim=True)
    dist.all_reduce(top, op=dist.ReduceOp.MAX, group=group)
    total = torch.exp(x - top).sum(dim=-1, keepdim=True)
    dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)
    return x - (top + torch.log(total))


def _xlogy_diff(a: torch.Tensor, log_a: torch.Tensor, log_b: torch.Tensor) -> torch.Tensor:
    """a·(log a − log b) with 0 where a = 0 (also where log b = −inf there)."""
    live = a > 0
    return torch.where(live, a * (log_a - torch.where(live, log_b, torch.zeros_like(log_b))), torch.zeros_like(a))


def _global_sum(x: torch.Tensor, group) -> torch.Tensor:
    s = x.sum(dim=-1)
    dist.all_reduce(s, op=dist.ReduceOp.SUM, group=group)
    return s


def _teacher_entropy(p: torch.Tensor, log_p: torch.Tensor, group) -> torch.Tensor:
    """H(p) = −Σ_{p>0} p log p per row over the shards (what −Σ p log q adds to KL(p‖q))."""
    return _global_sum(torch.where(p > 0, -p * log_p, torch.zeros_like(p)), group)


class _Divergence(torch.autograd.Function):
    """Per-row divergence over vocabulary shards; ``kind`` is 'reverse', 'forward',
    'cross_entropy' (forward KL + H(p), the same gradient) or 'jsd'."""

    @staticmethod
    def forward(ctx, z, t, kind, T, beta, group):
        work = _common.work_dtype(z.dtype)
        log_q = _log_softmax(z.detach().to(work) / T, group)
        log_p = _log_softmax(t.detach().to(work) / T, group)
        q, p = torch.exp(log_q), torch.exp(log_p)
        if kind == "reverse":
            value = _global_sum(_xlogy_diff(q, log_q, log_p), group)
            local = log_q - log_p
        elif kind in ("forward", "cross_entropy"):
            value = _global_sum(_xlogy_diff(p, log_p, log_q), group)
            if kind == "cross_entropy":
                value = value + _teacher_entropy(p, log_p, group)
            local = None
        else:
            log_m = torch.logaddexp(log_p + torch.log(torch.tensor(beta, dtype=work)),
                                    log_q + torch.log1p(torch.tensor(-beta, dtype=work)))
            kl_qm = _global_sum(_xlogy_diff(q, log_q, log_m), group)
            value = beta * _global_sum(_xlogy_diff(p, log_p, log_m), group) + (1 - beta) * kl_qm
            local = log_q - log_m
            ctx.kl_qm = kl_qm
        ctx.save_for_backward(q, p, local if local is not None else q, value)
        ctx.kind, ctx.T, ctx.beta, ctx.dtype = kind, T, beta, z.dtype
        return value.to(z.dtype)

    @staticmethod
    def backward(ctx, g):
        q, p, local, value = ctx.saved_tensors
        live = q > 0
        if ctx.kind == "reverse":
            grad = torch.where(live, q * (local - value[:, None]), torch.zeros_like(q))
        elif ctx.kind in ("forward", "cross_entropy"):
            grad = q - p
        else:
            grad = (1 - ctx.beta) * torch.where(live, q * (local - ctx.kl_qm[:, None]), torch.zeros_like(q))
        grad = grad * (g.to(q.dtype)[:, None] / ctx.T)
        return grad.to(ctx.dtype), None, None, None, None, None


class _Hinton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, t, labels, vocab_start, T, alpha, s, cross_entropy, group):
        work = _common.work_dtype(z.dtype)
        zw = z.detach().to(work)
        log_q1 = _log_softmax(zw, group)
        log_q = _log_softmax(zw / T, group)
        log_p = _log_softmax(t.detach().to(work) / T, group)
        q, p = torch.exp(log_q), torch.exp(log_p)
        local_y = labels - vocab_start
        here = (local_y >= 0) & (local_y < z.shape[-1])
        picked = torch.where(here, log_q1.gather(1, local_y.clamp(0, z.shape[-1] - 1)[:, None])[:, 0],
                             torch.zeros(z.shape[0], dtype=work))
        dist.all_reduce(picked, op=dist.ReduceOp.SUM, group=group)   # −CE: the label's shard holds it
        kl = _global_sum(_xlogy_diff(p, log_p, log_q), group)
        if cross_entropy:
            kl = kl + _teacher_entropy(p, log_p, group)
        rows = (1 - alpha) * (-picked) + alpha * s * kl
        ctx.save_for_backward(torch.exp(log_q1), q, p, local_y, here)
        ctx.T, ctx.alpha, ctx.s, ctx.dtype = T, alpha, s, z.dtype
        return rows.mean().to(z.dtype)

    @staticmethod
    def backward(ctx, g):
        q1, q, p, local_y, here = ctx.saved_tensors
        hard = q1.clone()
        rows = here.nonzero()[:, 0]
        hard[rows, local_y[rows]] -= 1
        grad = (1 - ctx.alpha) * hard + (ctx.alpha * ctx.s / ctx.T) * (q - p)
        grad = grad * (g.to(q.dtype) / q.shape[0])
        return grad.to(ctx.dtype), None, None, None, None, None, None, None, None


def token_kl(student_logits, teacher_logits, direction: str = "reverse", temperature: float = 1.0,
             soft_term: str = "kl", *, group=None):
    """Per-row KL over vocabulary shards: reverse Σ q log(q/p) or forward Σ p log(p/q), forward
    also as the cross-entropy −Σ p log q (the catalog's ``distill.token_kl``); returns kl[N], the
    global value, on every rank."""
    validate.direction(direction)
    kind = "cross_entropy" if validate.soft_term(soft_term, direction) == "cross_entropy" else direction
    return _Divergence.apply(student_logits, teacher_logits, kind, validate.temperature(temperature), 0.0, group)


def generalized_jsd(student_logits, teacher_logits, beta: float = 0.5, temperature: float = 1.0,
                    endpoints: str = "limit", *, group=None):
    """Per-row generalized JSD over vocabulary shards (the catalog's ``distill.generalized_jsd``,
    TRL's and Liger's endpoint convention with ``endpoints='kl'``)."""
    b, T = validate.jsd_beta(beta), validate.temperature(temperature)
    validate.endpoints(endpoints)
    if b in (0, 1) and endpoints == "kl":
        return _Divergence.apply(student_logits, teacher_logits, "forward" if b == 0 else "reverse", T, 0.0, group)
    if b in (0, 1):   # the continuous formula's limit: 0, with a zero gradient
        z = student_logits
        return torch.where(torch.zeros_like(z, dtype=torch.bool), z, torch.zeros_like(z)).sum(dim=-1)
    return _Divergence.apply(student_logits, teacher_logits, "jsd", T, b, group)


def hinton(student_logits, teacher_logits, labels, temperature: float = 1.0, alpha: float = 0.5,
           t2_scale: bool = True, soft_term: str = "kl", *, vocab_start: int = 0, group=None):
    """Hinton's loss over vocabulary shards (the catalog's ``distill.hinton``); ``labels`` are
    global token ids, ``vocab_start`` the global id of this shard's first token."""
    T, a = validate.temperature(temperature), validate.alpha(alpha)
    s = T * T if validate.t2_scale(t2_scale) else 1.0
    ce = validate.soft_term(soft_term) == "cross_entropy"
    y = torch.as_tensor(labels, dtype=torch.int64, device=student_logits.device)
    return _Hinton.apply(student_logits, teacher_logits, y, int(vocab_start), T, a, s, ce, group)
