"""Knowledge-distillation objectives: tempered softmax, Hinton's combined loss, full-vocabulary
token KL (forward / reverse) and the generalized Jensen–Shannon divergence of GKD (PyTorch).

Notation: z = student logits, t = teacher logits, T = temperature, q = softmax(z/T)
(student), p = softmax(t/T) (teacher), along the last axis (the vocabulary V); leading axes
are batch axes. A logit of −inf marks an impossible token (probability exactly 0); a row with
no possible token is rejected. The teacher is a constant (detached).

Gradients. ``softmax`` has its own backward (``_Softmax``: the centred form, accurate in
saturated rows). ``hinton``, ``token_kl`` and ``generalized_jsd`` run through ``_VocabRows``,
a ``torch.autograd.Function`` that returns one value per row and, in backward, recomputes the
rows in chunks and writes the analytic gradient (the closed forms of
``refimpl.exact.distill``'s ``*_vjp``) straight into a tensor of the student's dtype: no [N,V]
float32 intermediate is kept between forward and backward, and at most one chunk of them
exists at a time. Neither is twice differentiable.

Numerics (as in the exact reference). log q = (z − max)/T − log1p(Σ_{j≠argmax} e^{(z_j−max)/T});
log-ratios come from logit differences, r = ((z − t) − (max z − max t))/T − (log1p S_q −
log1p S_p); every KL is summed as Σ a·k3(−ℓ) + Σ_{a=0} b with k3(x) = expm1(x) − x ≥ 0
(``kl.k3``), whose terms do not cancel when a ≈ b; q − p is p·expm1(r) (or −q·expm1(−r)).
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from refimpl import validate
from refimpl.torch import _common
from refimpl.torch.kl import k3

DIRECTIONS = ("reverse", "forward")
ENDPOINTS = ("limit", "kl")

# Logits per chunk of rows (forward, backward and the input checks); None: by device, small
# enough on a CPU for the chunk's temporaries to stay in cache, large enough on a GPU for the
# kernel launches not to dominate (about 20 chunk-sized float32 temporaries live at a time).
CHUNK_ELEMENTS: int | None = None
_CHUNK_BY_DEVICE = {"cpu": 1 << 20, "cuda": 1 << 23}
_NEG_INF = float("-inf")


def _row_slices(n_rows: int, v: int, device=None):
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
        self.support = z != _NEG_INF
        self.max, self.top = z.max(dim=-1, keepdim=True)
        x = (z - self.max) / T  # exactly 0 at the top token, −inf for impossible tokens
        # log1p keeps the top token's log-probability −log1p(S) accurate when S < epsilon.
        others = x.scatter(-1, self.top, _NEG_INF)
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


class _ReverseKL:
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


class _ForwardKL:
    """KL(p‖q) per row; gradient (q − p)/T."""

    def __init__(self, T):
        self.T = T

    def __call__(self, z, t, y, need_grad):
        q, p = _Dist(z, self.T), _Dist(t, self.T)
        r, both = _log_ratio(q, p, self.T)
        kl = _kl(p.p, p.support, -r, q.p)
        return kl, (_q_minus_p(q, p, r, both) / self.T if need_grad else None)


class _JSD:
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


class _Hinton:
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


class _VocabRows(torch.autograd.Function):
    """Per-row values of ``kernel`` over [N,V] logits, with its analytic gradient wrt the
    student, both computed chunk by chunk in the working dtype. Saves only the inputs."""

    @staticmethod
    def forward(ctx, kernel, work, student, teacher, labels):
        n, v = student.shape
        out = torch.empty(n, dtype=work, device=student.device)
        for sl in _row_slices(n, v, student.device):
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
        for sl in _row_slices(n, v, student.device):
            _, d = ctx.kernel(student[sl].to(ctx.work), teacher[sl].to(ctx.work),
                              None if labels is None else labels[sl], True)
            grad[sl] = (g[sl, None].to(ctx.work) * d).to(student.dtype)
        return None, None, grad, None, None


def _vocab_rows(kernel, zs, ts, labels=None):
    """Apply ``kernel`` to every row of the last axis; returns [lead] in the working dtype."""
    work = _common.work_dtype(_common.result_dtype(zs, ts))
    v = zs.shape[-1]
    values = _VocabRows.apply(kernel, work, zs.reshape(-1, v), ts.detach().reshape(-1, v), labels)
    return values.reshape(zs.shape[:-1])


# ---------------------------------------------------------------------------------------------
# Input handling (messages as refimpl.exact.distill)
# ---------------------------------------------------------------------------------------------

def _row_index(flat: int, lead: tuple) -> tuple:
    return tuple(int(i) for i in np.unravel_index(flat, lead)) if lead else ()


def _first(fn, *mats):
    """First (row, token) — or (row,) — where ``fn`` of the chunks is True, else None."""
    n, v = mats[0].shape
    for sl in _row_slices(n, v, mats[0].device):
        hit = fn(*(m[sl].detach() for m in mats))
        if hit.any():
            idx = hit.nonzero()[0].tolist()
            return (sl.start + idx[0],) + tuple(idx[1:])
    return None


def _logits(name: str, x, rank=None) -> torch.Tensor:
    a = _common.array(name, x, allow_neg_inf=True)
    if rank is not None:
        validate.rank(name, tuple(a.shape), rank)
    elif a.ndim < 1:
        validate.fail(name, "expected at least 1 dimension (the vocabulary axis), got a scalar")
    if a.shape[-1] == 0:
        validate.fail(name, f"the vocabulary axis must not be empty, got shape {tuple(a.shape)}")
    return a


def _rows(name: str, a: torch.Tensor) -> None:
    hit = _first(lambda z: (z == _NEG_INF).all(dim=-1), a.reshape(-1, a.shape[-1]))
    if hit is not None:
        validate.fail(name, f"row {_row_index(hit[0], tuple(a.shape[:-1]))} is -inf everywhere "
                            "(no possible token)")


def _temperature(temperature) -> float:
    return validate.positive("temperature", temperature)


def _pair(student_logits, teacher_logits, temperature, rank=None):
    zs = _logits("student_logits", student_logits, rank)
    ts = _logits("teacher_logits", teacher_logits, rank)
    validate.same_shape(student_logits=tuple(zs.shape), teacher_logits=tuple(ts.shape))
    T = _temperature(temperature)
    _rows("student_logits", zs)
    _rows("teacher_logits", ts)
    return zs, ts, T


def _require_support(name: str, inner: torch.Tensor, outer: torch.Tensor, what: str) -> None:
    """supp inner ⊆ supp outer row by row, else the divergence is +inf: reject, naming ``name``."""
    v = inner.shape[-1]
    hit = _first(lambda a, b: (a != _NEG_INF) & (b == _NEG_INF),
                 inner.reshape(-1, v), outer.reshape(-1, v))
    if hit is not None:
        validate.fail(name, f"-inf at row {_row_index(hit[0], tuple(inner.shape[:-1]))}, token "
                            f"{hit[1]}, where the other distribution has probability > 0: {what} "
                            "is infinite (support mismatch)")


# ---------------------------------------------------------------------------------------------
# Objectives
# ---------------------------------------------------------------------------------------------

class _Softmax(torch.autograd.Function):
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


def softmax(logits, temperature: float = 1.0):
    """Tempered softmax q_i = exp(z_i/T) / Σ_j exp(z_j/T) along the last axis.

    Hinton, Vinyals & Dean 2015 §2; article 000 §"Destilación clásica" ((2,0) → (0.88, 0.12)
    at T=1, (0.73, 0.27) at T=2). ``logits`` [...,V]; returns probs of the same shape; a −inf
    logit has probability 0 and gradient 0. Gradient by ``_Softmax`` (accurate in saturated
    rows).
    """
    z = _logits("logits", logits)
    T = _temperature(temperature)
    _rows("logits", z)
    return _Softmax.apply(z, T, _common.work_dtype(z.dtype)).to(z.dtype)


def _labels(labels, n: int, v: int, device) -> torch.Tensor:
    y = _common.int_array("labels", labels)
    validate.rank("labels", tuple(y.shape), 1)
    validate.same_shape(**{"student_logits rows": (n,)}, labels=tuple(y.shape))
    bad = ((y < 0) | (y >= v)).nonzero()
    if len(bad):
        i = int(bad[0, 0])
        validate.fail("labels", f"label {int(y[i])} at row {i} is outside [0, {v})")
    return y.to(device)


def hinton(student_logits, teacher_logits, labels, temperature: float = 1.0, alpha: float = 0.5,
           t2_scale: bool = True):
    """Hinton distillation loss, mean over the N rows:

        L = 1/N Σ_n [ (1−α)(−log q_{y_n}^{(1)}) + α·s·KL(p^{(T)} ‖ q^{(T)}) ],  s = T² if t2_scale else 1.

    Hinton et al. 2015 §2 (soft targets at T, hard labels at T = 1, soft term times T²);
    article 000 §"Destilación clásica" (λ = ``alpha``). ``student_logits``, ``teacher_logits``
    [N,V], ``labels`` [N] integers in [0, V). Returns the scalar loss; gradient wrt
    ``student_logits`` by ``_VocabRows``. A −inf student logit at the label or where p > 0
    makes the loss infinite and is rejected (naming ``student_logits``) whatever α is.
    """
    zs, ts, T = _pair(student_logits, teacher_logits, temperature, rank=2)
    n, v = zs.shape
    if n == 0:
        validate.fail("student_logits", "needs at least one row (the loss is a mean over rows)")
    y = _labels(labels, n, v, zs.device)
    a = validate.in_range("alpha", alpha, 0.0, 1.0)
    s = T * T if validate.flag("t2_scale", t2_scale) else 1.0
    dead = (zs.detach().gather(1, y[:, None])[:, 0] == _NEG_INF).nonzero()
    if len(dead):
        i = int(dead[0, 0])
        validate.fail("student_logits", f"-inf at the label (row {i}, token {int(y[i])}): "
                                        "the cross-entropy term is infinite")
    _require_support("student_logits", ts, zs, "KL(p‖q)")
    rows = _vocab_rows(_Hinton(T, a, s), zs, ts, y)
    return rows.mean().to(_common.result_dtype(zs, ts))


def token_kl(student_logits, teacher_logits, direction: str = "reverse", temperature: float = 1.0):
    """Full-vocabulary KL between student q and teacher p at the next token, per row:

        reverse:  kl = Σ_v q_v log(q_v / p_v)   (student first)
        forward:  kl = Σ_v p_v log(p_v / q_v)

    at temperature T, no T² factor. Reverse: MiniLLM (Gu et al. 2024) §2.1 eq. 1; DeepSeek-V4
    §5.1.2 eq. 29; article 000 §"De la KL de secuencia a la KL de token". 0·log 0 = 0; an
    infinite KL (support mismatch) is rejected (reverse: names ``teacher_logits``; forward:
    ``student_logits``). Logits [...,V]; returns kl [...]; gradient wrt ``student_logits``
    by ``_VocabRows`` (reverse: q(ℓ − kl)/T, forward: (q − p)/T).
    """
    zs, ts, T = _pair(student_logits, teacher_logits, temperature)
    validate.choice("direction", direction, DIRECTIONS)
    if direction == "reverse":
        _require_support("teacher_logits", zs, ts, "reverse KL(q‖p)")
        kernel = _ReverseKL(T)
    else:
        _require_support("student_logits", ts, zs, "forward KL(p‖q)")
        kernel = _ForwardKL(T)
    return _vocab_rows(kernel, zs, ts).to(_common.result_dtype(zs, ts))


def generalized_jsd(student_logits, teacher_logits, beta: float = 0.5, temperature: float = 1.0,
                    endpoints: str = "limit"):
    """Generalized Jensen–Shannon divergence, per row (p teacher, q student, both at T):

        jsd = β·KL(p ‖ m) + (1−β)·KL(q ‖ m),   m = β·p + (1−β)·q,   β ∈ [0, 1].

    Agarwal et al. 2024 (GKD) §3 eq. 2; TRL GKDTrainer.generalized_jsd_loss.
    ``endpoints='limit'``: the continuous formula, 0 at β = 0 and β = 1 (zero gradient).
    ``endpoints='kl'``: β = 0 gives KL(p‖q) and β = 1 gives KL(q‖p), as TRL and Liger special-
    case them (infinite ones are rejected, naming the argument whose −inf causes it).
    Logits [...,V]; returns jsd [...]; gradient wrt ``student_logits`` by ``_VocabRows``
    ((1−β)·q(ℓ − KL(q‖m))/T, ℓ = log q − log m).
    """
    zs, ts, T = _pair(student_logits, teacher_logits, temperature)
    b = validate.in_range("beta", beta, 0.0, 1.0)
    validate.choice("endpoints", endpoints, ENDPOINTS)
    if endpoints == "kl" and b == 0:
        _require_support("student_logits", ts, zs, "beta=0 with endpoints='kl' → KL(p‖q)")
    if endpoints == "kl" and b == 1:
        _require_support("teacher_logits", zs, ts, "beta=1 with endpoints='kl' → KL(q‖p)")
    out = _common.result_dtype(zs, ts)
    if b in (0, 1) and endpoints == "limit":
        # A zero that stays in the graph (gradient exactly 0, also at −inf logits).
        flat = torch.where(torch.zeros_like(zs, dtype=torch.bool), zs, torch.zeros_like(zs))
        return flat.sum(dim=-1).to(out)
    kernel = _ForwardKL(T) if b == 0 else _ReverseKL(T) if b == 1 else _JSD(T, b)
    return _vocab_rows(kernel, zs, ts).to(out)
