"""The careful kernels of the distillation objectives (PyTorch): the plain path of
``refimpl.torch.distill``, and the fallback of its fused path for the rows that one cannot
evaluate to its accuracy.

A kernel (``ReverseKL``, ``ForwardKL``, ``JSD``, ``Hinton``, ``SkewKL``, ``TVD``) evaluates a chunk of rows [R,V] in
the working dtype and returns the per-row values and, when asked, the analytic gradient wrt the
student logits (the closed forms of ``refimpl.exact.distill``'s ``*_vjp``). ``VocabRows`` is the
``torch.autograd.Function`` of the plain path: it returns one value per row and, in backward,
recomputes the rows in chunks and writes the gradient straight into a tensor of the student's
dtype: no [N,V] float32 intermediate is kept between forward and backward, and at most one
chunk of them exists at a time. ``Softmax`` is ``distill.softmax``'s autograd Function. None of
them is twice differentiable.

Numerics (as in the exact reference). log q = (z − max)/T − log1p(Σ_{j≠argmax} e^{(z_j−max)/T});
log-ratios come from logit differences, r = ((z − t) − (max z − max t))/T − (log1p S_q −
log1p S_p); every KL is summed as Σ a·k3(−ℓ) + Σ_{a=0} b with k3(x) = expm1(x) − x ≥ 0
(``kl.k3``), whose terms do not cancel when a ≈ b; q − p is p·expm1(r) (or −q·expm1(−r)).
"""
from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from lossproof.refimpl.torch import _common
from lossproof.refimpl.torch.kl import k3

# Logits per chunk of rows (forward, backward and the input checks); None: by device, small
# enough on a CPU for the chunk's temporaries to stay in cache, large enough on a GPU for the
# kernel launches not to dominate (about 20 chunk-sized float32 temporaries live at a time).
CHUNK_ELEMENTS: int | None = None
_CHUNK_BY_DEVICE = {"cpu": 1 << 20, "cuda": 1 << 23}
NEG_INF = float("-inf")


def row_slices(n_rows: int, v: int, device=None):
    """Slices of ``n_rows`` rows of ``v`` logits, about a chunk's worth each (at least one row)."""
    chunk = CHUNK_ELEMENTS or _CHUNK_BY_DEVICE.get(getattr(device, "type", "cpu"), 1 << 22)
    step = max(1, chunk // max(v, 1))
    for start in range(0, n_rows, step):
        yield slice(start, min(n_rows, start + step))


# ---------------------------------------------------------------------------------------------
# One chunk of rows (all tensors [R,V] in the working dtype; no graph)
# ---------------------------------------------------------------------------------------------

class _Dist:
    """softmax(z/T) of a chunk of rows: log-probabilities, probabilities, pieces of log Z."""

    def __init__(self, z: torch.Tensor, T: float):
        self.z = z
        self.support = z != NEG_INF
        self.max, self.top = z.max(dim=-1, keepdim=True)
        x = (z - self.max) / T  # exactly 0 at the top token, −inf for impossible tokens
        # log1p keeps the top token's log-probability −log1p(S) accurate when S < epsilon.
        others = x.scatter(-1, self.top, NEG_INF)
        self.l1 = torch.log1p(torch.exp(others).sum(dim=-1, keepdim=True))
        self.logp = x - self.l1
        self.p = torch.exp(self.logp)


def _log_ratio(q: _Dist, p: _Dist, T: float):
    """r = log q − log p where both tokens are possible (0 elsewhere), and that mask.

    The logit differences z − t and max z − max t come first, so r keeps its relative accuracy
    when the student is close to the teacher."""
    both = q.support & p.support
    zero = torch.zeros_like(q.z)
    dz = torch.where(both, q.z, zero) - torch.where(both, p.z, zero)
    r = (dz - (q.max - p.max)) / T - (q.l1 - p.l1)
    return torch.where(both, r, zero), both


def _kl(a: torch.Tensor, a_support, ell: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """KL(a‖b) = Σ_{a>0} a·k3(−ℓ) + Σ_{a=0} b, ℓ = log a − log b, supp a ⊆ supp b (checked by
    the callers); every term is ≥ 0.

    Where b ≫ a (ℓ < −20) e^{−ℓ} may overflow while a·e^{−ℓ} = b does not: there the term is
    written b − a + a·ℓ, in which b dominates and nothing cancels."""
    zero = torch.zeros_like(a)
    far = a_support & (ell < -20)
    inside = torch.where(far, b - a + a * ell, a * k3(-torch.where(far, zero, ell)))
    return torch.where(a_support, inside, b).sum(dim=-1)


def _centred(x: torch.Tensor, q: torch.Tensor, top: torch.Tensor, support) -> torch.Tensor:
    """x_j − Σ_i q_i x_i (over supp q), written (x_j − x_k) − Σ_i q_i (x_i − x_k) with k = top,
    the most probable token: when q is nearly one-hot both sides are ≈ 0 and this form keeps
    their relative accuracy (every error term carries a factor q_i)."""
    d = torch.where(support, x - x.gather(-1, top), torch.zeros_like(x))
    return d - (q * d).sum(dim=-1, keepdim=True)


def _q_minus_p(q: _Dist, p: _Dist, r, both) -> torch.Tensor:
    """q − p without cancellation: p·expm1(r) for r ≤ 0, −q·expm1(−r) for r > 0 (neither
    overflows), q or −p where only one of them is possible."""
    neg = r <= 0
    zero = torch.zeros_like(r)
    d = torch.where(neg, p.p * torch.expm1(torch.where(neg, r, zero)),
                    -q.p * torch.expm1(-torch.where(neg, zero, r)))
    return torch.where(both, d, torch.where(q.support, q.p, -p.p))


def _log_mix(w: float, w_c: float, y: torch.Tensor) -> torch.Tensor:
    """log(w_c + w·e^y) = log1p(w·expm1(y)) for w, w_c > 0 with w + w_c = 1, both given to full
    relative accuracy (1 − w is never formed: it would lose β's digits at β = 1e-6), without
    overflow or cancellation:
        y > 1:                     logaddexp(log w_c, log w + y)   (value ≥ log1p(w·(e − 1)))
        y ≤ 1, w·expm1(y) ≥ −1/2:  log1p(w·expm1(y))               (value near 0 keeps its digits)
        y ≤ 1, w·expm1(y) < −1/2:  log(w_c + w·e^y)                (value ≤ log 1/2)."""
    zero = torch.zeros_like(y)
    low = y <= 1
    t = w * torch.expm1(torch.where(low, y, zero))
    near = t >= -0.5
    small = torch.log1p(torch.where(near, t, zero))
    direct = torch.log(w_c + w * torch.exp(torch.where(low, y, zero)))
    big = torch.logaddexp(torch.full_like(y, math.log(w_c)),
                          math.log(w) + torch.where(low, zero + 2, y))
    return torch.where(low, torch.where(near, small, direct), big)


class ReverseKL:
    """KL(q‖p) per row; gradient q(ℓ − KL)/T with ℓ = log q − log p (MiniLLM §2.1 eq. 1)."""

    def __init__(self, T):
        self.T = T

    def __call__(self, z, t, y, need_grad):
        q, p = _Dist(z, self.T), _Dist(t, self.T)
        r, _ = _log_ratio(q, p, self.T)
        kl = _kl(q.p, q.support, r, p.p)
        if not need_grad:
            return kl, None
        return kl, q.p * _centred(r, q.p, q.top, q.support) / self.T


class ForwardKL:
    """KL(p‖q) per row; gradient (q − p)/T."""

    def __init__(self, T):
        self.T = T

    def __call__(self, z, t, y, need_grad):
        q, p = _Dist(z, self.T), _Dist(t, self.T)
        r, both = _log_ratio(q, p, self.T)
        kl = _kl(p.p, p.support, -r, q.p)
        return kl, (_q_minus_p(q, p, r, both) / self.T if need_grad else None)


class JSD:
    """β·KL(p‖m) + (1−β)·KL(q‖m), m = βp + (1−β)q, 0 < β < 1; gradient
    (1−β)·q(ℓ − KL(q‖m))/T with ℓ = log q − log m (GKD §3)."""

    def __init__(self, T, beta):
        self.T, self.beta = T, beta

    def __call__(self, z, t, y, need_grad):
        b = self.beta
        q, p = _Dist(z, self.T), _Dist(t, self.T)
        r, both = _log_ratio(q, p, self.T)
        # log q − log m = −log(1 − β + β·e^{−r}); log p − log m = −log(β + (1−β)·e^{r}):
        # small differences come out of log1p/expm1, large ones out of logaddexp.
        lq_m = torch.where(both, -_log_mix(b, 1 - b, -r), torch.full_like(r, -math.log1p(-b)))
        lp_m = torch.where(both, -_log_mix(1 - b, b, r), torch.full_like(r, -math.log(b)))
        m = torch.exp(torch.logaddexp(math.log(b) + p.logp, math.log1p(-b) + q.logp))
        kl_qm = _kl(q.p, q.support, lq_m, m)
        kl_pm = _kl(p.p, p.support, lp_m, m)
        jsd = b * kl_pm + (1 - b) * kl_qm
        if not need_grad:
            return jsd, None
        return jsd, ((1 - b) / self.T) * q.p * _centred(lq_m, q.p, q.top, q.support)


class Hinton:
    """(1−α)(−log q^{(1)}_y) + α·s·KL(p^{(T)}‖q^{(T)}) per row; gradient
    (1−α)(q^{(1)} − e_y) + α·s·(q − p)/T (Hinton et al. 2015 §2)."""

    def __init__(self, T, alpha, s):
        self.T, self.alpha, self.s = T, alpha, s

    def __call__(self, z, t, y, need_grad):
        a, T = self.alpha, self.T
        q, p = _Dist(z, T), _Dist(t, T)
        q1 = q if T == 1 else _Dist(z, 1.0)
        r, both = _log_ratio(q, p, T)
        logq1_y = q1.logp.gather(-1, y[:, None])
        value = (1 - a) * (-logq1_y[:, 0]) + a * self.s * _kl(p.p, p.support, -r, q.p)
        if not need_grad:
            return value, None
        ce = q1.p.scatter(-1, y[:, None], torch.expm1(logq1_y))  # q_y − 1 without cancellation
        return value, (1 - a) * ce + (a * self.s / T) * _q_minus_p(q, p, r, both)


def teacher_entropy(ts: torch.Tensor, T: float, work) -> torch.Tensor:
    """H(p) = −Σ_{p>0} p log p of softmax(t/T) per row of [...,V] teacher logits, in ``work``
    (terms ≥ 0: nothing cancels), chunk by chunk, no graph. The cross-entropy soft term is
    KL(p‖q) + H(p) with the KL's gradient: this constant is all that it adds."""
    v = ts.shape[-1]
    flat = ts.detach().reshape(-1, v)
    out = torch.empty(flat.shape[0], dtype=work, device=ts.device)
    for sl in row_slices(flat.shape[0], v, ts.device):
        p = _Dist(flat[sl].to(work), T)
        out[sl] = torch.where(p.support, -p.p * p.logp, torch.zeros_like(p.p)).sum(dim=-1)
    return out.reshape(ts.shape[:-1])


class SkewKL:
    """Skew KL per row (DistiLLM §3), 0 < α < 1: forward KL(p‖αp + (1−α)q), gradient
    −(1−α)·q(x − Σqx)/T with x = p/m; reverse KL(q‖αq + (1−α)p), gradient q(y − Σqy)/T with
    y = ℓ − α·e^ℓ, ℓ = log q − log m' (``refimpl.exact.distill.skew_kl_vjp``)."""

    def __init__(self, T, alpha, direction):
        self.T, self.alpha, self.forward = T, alpha, direction == "forward"

    def __call__(self, z, t, y, need_grad):
        a, T = self.alpha, self.T
        q, p = _Dist(z, T), _Dist(t, T)
        r, both = _log_ratio(q, p, T)
        first, other = (p, q) if self.forward else (q, p)
        # log m − log first = log(α + (1−α)·e^{±r}), −log α where the other model has 0
        l_m = torch.where(both, -_log_mix(1 - a, a, r if self.forward else -r), torch.full_like(r, -math.log(a)))
        m = a * first.p + (1 - a) * other.p
        kl = _kl(first.p, first.support, l_m, m)
        if not need_grad:
            return kl, None
        if self.forward:
            x = torch.where(p.support, torch.exp(l_m), torch.zeros_like(l_m))
            return kl, (-(1 - a) / T) * q.p * _centred(x, q.p, q.top, q.support)
        return kl, q.p * _centred(l_m - a * torch.exp(l_m), q.p, q.top, q.support) / T


class TVD:
    """½·Σ|q − p| per row; subgradient q(σ − Σqσ)/(2T), σ = sign(q − p), sign(0) = 0."""

    def __init__(self, T):
        self.T = T

    def __call__(self, z, t, y, need_grad):
        q, p = _Dist(z, self.T), _Dist(t, self.T)
        r, both = _log_ratio(q, p, self.T)
        d = _q_minus_p(q, p, r, both)
        value = d.abs().sum(dim=-1) / 2
        if not need_grad:
            return value, None
        return value, q.p * _centred(torch.sign(d), q.p, q.top, q.support) / (2 * self.T)


class VocabRows(torch.autograd.Function):
    """Per-row values of ``kernel`` over [N,V] logits, with its analytic gradient wrt the
    student, both computed chunk by chunk in the working dtype. Saves only the inputs."""

    @staticmethod
    def forward(ctx, kernel, work, student, teacher, labels):
        n, v = student.shape
        out = torch.empty(n, dtype=work, device=student.device)
        for sl in row_slices(n, v, student.device):
            out[sl] = kernel(student[sl].to(work), teacher[sl].to(work),
                             None if labels is None else labels[sl], False)[0]
        ctx.kernel, ctx.work = kernel, work
        ctx.save_for_backward(student, teacher, labels)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        student, teacher, labels = ctx.saved_tensors
        n, v = student.shape
        grad = torch.empty_like(student)
        for sl in row_slices(n, v, student.device):
            _, d = ctx.kernel(student[sl].to(ctx.work), teacher[sl].to(ctx.work),
                              None if labels is None else labels[sl], True)
            grad[sl] = (g[sl, None].to(ctx.work) * d).to(student.dtype)
        return None, None, grad, None, None


def vocab_rows(kernel, zs, ts, labels=None):
    """Apply ``kernel`` to every row of the last axis; returns [lead] in the working dtype."""
    work = _common.work_dtype(_common.result_dtype(zs, ts))
    v = zs.shape[-1]
    values = VocabRows.apply(kernel, work, zs.reshape(-1, v), ts.detach().reshape(-1, v), labels)
    return values.reshape(zs.shape[:-1])


# ---------------------------------------------------------------------------------------------
# distill.softmax
# ---------------------------------------------------------------------------------------------

class Softmax(torch.autograd.Function):
    """softmax(z/T) on the last axis with the backward q_j·(c_j − Σ_i q_i c_i)/T in the centred
    form of ``_centred``. Autograd's softmax backward forms c_j − Σ q c directly, which leaves
    no correct digit in a saturated row (logits ±1e4, T = 1e-3), where the whole gradient is
    ~ 1 − q_top. Saves q and the argmax, as torch's softmax saves q."""

    @staticmethod
    def forward(ctx, z, T, work):
        zw = z.to(work)
        top_value, top = zw.max(dim=-1, keepdim=True)
        # The maximum is subtracted before dividing by T: a large logit at a small T costs no
        # absolute accuracy in the exponent.
        q = torch.softmax((zw - top_value) / T, dim=-1)
        ctx.save_for_backward(q, top)
        ctx.T, ctx.in_dtype = T, z.dtype
        return q

    @staticmethod
    @once_differentiable
    def backward(ctx, c):
        q, top = ctx.saved_tensors
        grad = q * _centred(c.to(q.dtype), q, top, q > 0) / ctx.T
        return grad.to(ctx.in_dtype), None, None

