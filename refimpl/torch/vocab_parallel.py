"""Vocabulary-parallel distillation divergences and language-model token objectives: the logits of
every row are split over the ranks of a process group by contiguous vocabulary ranges, and each
rank holds one range.

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

The lm objectives (``cross_entropy``, ``token_logprobs``, ``entropy``: ``refimpl.torch.lm`` on
the full vocabulary) follow Megatron's cross-entropy more closely, with ``refimpl.torch.lm``'s
care for q_y ≈ 1: x = (z − M)/T with M the global row maximum, and log Σ_v e^{x_v} = log1p(S)
where S sums every token but one global maximum (the lowest rank holding M leaves out its first
arg-max, found by a MIN all-reduce), so that −log q_y = −x_y + log1p(S) keeps S below the unit
roundoff; the label's x_y comes from the one rank that owns it through a SUM all-reduce with
zeros elsewhere; q_y − 1 is expm1(log q_y) on that rank. Cross-entropy's label smoothing needs
Σ_v x_v (a SUM), the entropy lse − Σ q·x/T needs Σ q·x (a SUM); z-loss and soft-capping
s·tanh(z/s) are elementwise, before the maximum. Per-token values are replicated on every rank,
so the reduction ('mean', 'sum', 'none', ``normalizer``) runs outside the autograd Function, on
ordinary tensors, and the ``count`` of the mean is that of the labels every rank holds whole.
Unlike the divergences, they check their inputs as ``refimpl.torch.lm`` does, with the same
messages, on every rank alike: the facts of each shard (NaN or +inf, rows without a possible token,
−inf at a label) are all-reduced before any rank raises, so that none waits in a collective.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from lossproof.refimpl import validate
from lossproof.refimpl.torch import _common

__all__ = ["cross_entropy", "entropy", "generalized_jsd", "hinton", "token_kl", "token_logprobs"]


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


# --------------------------------------------------------------------------- lm objectives

class _ShardedSoft:
    """softmax(z/T) of the rows of the shard ``z`` over the group (no graph): the shard's x =
    (z − M)/T and q, l1 = log1p(S) per row, and lse = M/T + l1."""

    def __init__(self, z: torch.Tensor, T: float, group):
        self.support = z > -torch.inf
        local = z.max(dim=-1).values
        top = local.clone()
        dist.all_reduce(top, op=dist.ReduceOp.MAX, group=group)
        # the lowest rank holding the global maximum leaves its first arg-max out of S
        world = dist.get_world_size(group)
        holder = torch.where(local == top, dist.get_rank(group), world).to(torch.int64)
        dist.all_reduce(holder, op=dist.ReduceOp.MIN, group=group)
        mine = holder == dist.get_rank(group)
        is_top = torch.zeros_like(self.support).scatter_(-1, z.argmax(dim=-1, keepdim=True), True) & mine[:, None]
        dz = z - top[:, None]
        self.x = dz / T if T != 1.0 else dz
        s = torch.where(is_top, 0.0, torch.exp(self.x)).sum(dim=-1)
        dist.all_reduce(s, op=dist.ReduceOp.SUM, group=group)
        self.l1 = torch.log1p(s)[:, None]
        self.logp = self.x - self.l1
        self.p = torch.exp(self.logp)
        self.lse = (top[:, None] / T if T != 1.0 else top[:, None]) + self.l1
        self.x_live = torch.where(self.support, self.x, 0.0)   # q = 0 there: no 0·∞


def _shard_logits(logits, group) -> torch.Tensor:
    """The shard as a checked tensor. Whether any shard holds NaN or +inf is all-reduced first, so
    that every rank raises (``refimpl.torch._common.array``'s message where the value is, a
    pointer to the other shard elsewhere) instead of some waiting in a collective for ever."""
    z = logits if isinstance(logits, torch.Tensor) else _common.array("logits", logits, allow_neg_inf=True)
    validate.rank("logits", tuple(z.shape), 2)
    validate.lm_logit_rows(*z.shape)
    detached = z.detach()
    bad = torch.tensor([int(bool(torch.isnan(detached).any() or torch.isposinf(detached).any()))], device=z.device)
    dist.all_reduce(bad, op=dist.ReduceOp.MAX, group=group)
    if int(bad):
        _common.array("logits", z, allow_neg_inf=True)
        validate.fail("logits", "another vocabulary shard holds NaN or +inf")
    return z


def _check_shard_rows(z: torch.Tensor, onehot: torch.Tensor, counted: torch.Tensor, group,
                      smoothing: float = 0.0) -> None:
    """``refimpl.torch.lm``'s −inf checks over the whole vocabulary: each shard's facts per row
    (a possible token, −inf at the label it owns, any −inf) summed over the group, then the same
    ``validate.lm_rows`` on every rank."""
    support = z.detach() > -torch.inf
    facts = torch.stack([support.any(dim=-1), (onehot & ~support).any(dim=-1), (~support).any(dim=-1)],
                        dim=1).to(torch.int64)
    dist.all_reduce(facts, op=dist.ReduceOp.SUM, group=group)
    none, at_label, some = facts[:, 0] == 0, counted & (facts[:, 1] > 0), counted & (facts[:, 2] > 0)
    if (none | at_label | (some & (smoothing > 0))).any():
        validate.lm_rows(none.tolist(), at_label.tolist(), some.tolist(), counted.tolist(), smoothing)


def _owned(y: torch.Tensor, counted: torch.Tensor, vocab_start: int, width: int) -> torch.Tensor:
    """The onehot [N, V_r] of the counted labels this shard owns."""
    local = y - vocab_start
    here = counted & (local >= 0) & (local < width)
    return (torch.arange(width, device=y.device) == torch.where(here, local, 0)[:, None]) & here[:, None]


def _label_x(d: _ShardedSoft, onehot: torch.Tensor, group) -> torch.Tensor:
    """x_y per row: the owning rank's value, zeros elsewhere, summed over the group."""
    x_y = torch.where(onehot, d.x_live, 0.0).sum(dim=-1)
    dist.all_reduce(x_y, op=dist.ReduceOp.SUM, group=group)
    return x_y


def _vocab(width: int, device, group) -> int:
    v = torch.tensor([width], dtype=torch.int64, device=device)
    dist.all_reduce(v, op=dist.ReduceOp.SUM, group=group)
    return int(v)


class _ShardedCrossEntropy(torch.autograd.Function):
    """Per-token losses (replicated) of the counted tokens, 0 elsewhere; backward ∂ℓ_i/∂z of the
    shard, saved in forward (``refimpl.torch.lm._CrossEntropy`` over the group)."""

    @staticmethod
    def forward(ctx, z, onehot, counted, vocab, eps, zeta, cap, group):
        with torch.no_grad():
            if cap is not None:
                zc = cap * torch.tanh(z / cap)
                dcap = torch.cosh(z / cap).pow(-2)
            else:
                zc, dcap = z, None
            d = _ShardedSoft(zc, 1.0, group)
            per = (1 - eps) * (-_label_x(d, onehot, group) + d.l1[:, 0])
            if eps:
                # lse − mean_v z'_v = Σ_v (M − z'_v)/V + log1p(S): non-negative terms
                spread = (-d.x_live).sum(dim=-1)
                dist.all_reduce(spread, op=dist.ReduceOp.SUM, group=group)
                per = per + eps * (spread / vocab + d.l1[:, 0])
            if zeta:
                per = per + zeta * d.lse[:, 0].square()
            per = torch.where(counted, per, 0.0)
            g = torch.where(onehot, d.p if eps == 1 else torch.expm1(d.logp) + eps, d.p)
            if eps:
                g = g - eps / vocab
            if zeta:
                g = g + (2 * zeta) * d.lse * d.p
            if dcap is not None:
                g = g * dcap
            g = torch.where(counted[:, None], g, 0.0)
        ctx.save_for_backward(g)
        return per

    @staticmethod
    def backward(ctx, grad_per):
        (g,) = ctx.saved_tensors
        return grad_per[:, None] * g, None, None, None, None, None, None, None


def cross_entropy(logits, labels, ignore_index: int = -100, label_smoothing: float = 0.0, z_loss: float = 0.0,
                  softcap: float | None = None, reduction: str = "mean", normalizer: float | None = None,
                  smoothing_classes: str = "all", *, vocab_start: int = 0, group=None):
    """lm.cross_entropy over vocabulary shards (Megatron-LM's vocab-parallel cross-entropy, Shoeybi
    et al. 2019 §3, with every convention of ``refimpl.torch.lm.cross_entropy``; 'others' at
    ε·V/(V − 1) of the global V, ``validate.smoothing_weight``); ``labels`` are
    global token ids, ``vocab_start`` the global id of this shard's first token. Returns the global
    value on every rank."""
    z = _shard_logits(logits, group)
    y = torch.as_tensor(labels, dtype=torch.int64, device=z.device)
    ignore, eps, zeta, cap, reduction, norm = validate.lm_conventions(ignore_index, label_smoothing, z_loss,
                                                                      softcap, reduction, normalizer)
    vocab = _vocab(z.shape[-1], z.device, group)
    eps = validate.smoothing_weight(eps, smoothing_classes, vocab)
    counted = validate.token_labels(y.tolist(), vocab, ignore)
    counted = torch.tensor(counted, dtype=torch.bool, device=z.device)
    count = int(counted.sum())
    validate.empty_mean(reduction, norm, count)
    onehot = _owned(y, counted, int(vocab_start), z.shape[-1])
    if cap is None:   # capped logits are finite
        _check_shard_rows(z, onehot, counted, group, eps)
    work = _common.work_dtype(z.dtype)
    per = _ShardedCrossEntropy.apply(_common.upcast(z, work), onehot, counted, vocab, eps, zeta, cap, group)
    if reduction == "none":
        return per.to(z.dtype)
    total = per.sum()
    if reduction == "mean":
        total = total / (norm if norm is not None else count)
    return total.to(z.dtype)


class _ShardedTokenLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, onehot, T, group):
        with torch.no_grad():
            d = _ShardedSoft(z, T, group)
            ctx.save_for_backward(torch.where(onehot, torch.expm1(d.logp), d.p))
            ctx.T = T
            return _label_x(d, onehot, group) - d.l1[:, 0]

    @staticmethod
    def backward(ctx, grad):
        (g,) = ctx.saved_tensors
        return -(grad[:, None] / ctx.T) * g, None, None, None


def token_logprobs(logits, labels, temperature: float = 1.0, *, vocab_start: int = 0, group=None):
    """lm.token_logprobs over vocabulary shards: log q_y of softmax(z/T) per row, replicated;
    gradient c·(δ_{jy} − q_j)/T on the shard."""
    z = _shard_logits(logits, group)
    T = validate.temperature(temperature)
    y = torch.as_tensor(labels, dtype=torch.int64, device=z.device)
    validate.token_labels(y.tolist(), _vocab(z.shape[-1], z.device, group))
    every = torch.ones_like(y, dtype=torch.bool)
    onehot = _owned(y, every, int(vocab_start), z.shape[-1])
    _check_shard_rows(z, onehot, every, group)
    work = _common.work_dtype(z.dtype)
    return _ShardedTokenLogprobs.apply(_common.upcast(z, work), onehot, T, group).to(z.dtype)


class _ShardedEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, T, group):
        with torch.no_grad():
            d = _ShardedSoft(z, T, group)
            h = _global_sum(d.p * (d.l1 - d.x_live), group)
            centre = _global_sum(d.p * d.x_live, group)[:, None]
            # ∂H/∂x_j = −q_j·(x_j − Σ_k q_k x_k): exactly 0 for equal logits
            ctx.save_for_backward(torch.where(d.support, -d.p * (d.x_live - centre), 0.0))
            ctx.T = T
            return h

    @staticmethod
    def backward(ctx, grad):
        (g,) = ctx.saved_tensors
        return (grad[:, None] / ctx.T) * g, None, None


def entropy(logits, temperature: float = 1.0, *, group=None):
    """lm.entropy over vocabulary shards: −Σ q log q of softmax(z/T) per row, replicated, as
    Σ_v q_v·(log1p(S) − x_v) (every term ≥ 0)."""
    z = _shard_logits(logits, group)
    T = validate.temperature(temperature)
    nowhere = torch.zeros(z.shape, dtype=torch.bool, device=z.device)
    _check_shard_rows(z, nowhere, nowhere[:, 0], group)
    work = _common.work_dtype(z.dtype)
    return _ShardedEntropy.apply(_common.upcast(z, work), T, group).to(z.dtype)
