"""Knowledge-distillation objectives over the array API: tempered softmax, Hinton's combined
loss, full-vocabulary token KL (forward / reverse) and the generalized Jensen–Shannon
divergence of GKD.

Notation: z = student logits, t = teacher logits, T = temperature, q = softmax(z/T)
(student), p = softmax(t/T) (teacher), along the last axis (the vocabulary); leading axes are
batch axes. A −inf logit marks an impossible token (probability exactly 0); a row with no
possible token is rejected. Same names and contract as ``refimpl.exact.distill``.

Gradients: every objective depends on z through s = log q, ∂s_i/∂z_j = (δ_ij − q_j)/T, so
with g_i = ∂F/∂s_i the gradient is (g_j − q_j Σ_i g_i)/T.

Numerics (as the exact reference): log q = (z − max)/T − log1p(Σ_{j≠argmax} e^{(z_j−max)/T}),
so the top token keeps its small distance from probability 1; log-ratios log q − log p come
from logit differences ((z − max z) − (t − max t))/T, never from two large log-probabilities;
every KL is summed from non-negative terms (``_xp.kl_terms``); q − p = p·expm1(log q − log p).
"""
from __future__ import annotations

import math

from lossproof.refimpl import validate
from lossproof.refimpl.arrays import _xp

__all__ = ["softmax", "softmax_vjp", "hinton", "hinton_vjp", "token_kl", "token_kl_vjp",
           "symmetric_kl", "symmetric_kl_vjp", "generalized_jsd", "generalized_jsd_vjp", "skew_kl", "skew_kl_vjp",
           "tvd", "tvd_vjp", "sparse_kl", "sparse_kl_vjp"]

DIRECTIONS = validate.DIRECTIONS
ENDPOINTS = validate.ENDPOINTS


# ---------------------------------------------------------------------------------------------
# Distributions
# ---------------------------------------------------------------------------------------------

class _Dist:
    """softmax(z/T) along the last axis: shifted logits, log Z pieces, log-probs, probs."""

    def __init__(self, xp, z, T: float):
        self.z = z
        self.support = z > -xp.inf
        self.is_top, self.max = _xp.row_top(xp, z)
        self.dz = z - self.max  # exactly 0 at the top, −inf for impossible tokens
        shifted = self.dz / T if T != 1.0 else self.dz
        self.e = xp.exp(shifted)
        # log Σ e^{shifted} = log1p(S), S = Σ_{j≠top} e^{shifted_j}: exact when S is below u.
        self.s = xp.sum(_xp.masked(xp, ~self.is_top, self.e), axis=-1, keepdims=True)
        self.l1 = xp.log1p(self.s)
        self.logp = shifted - self.l1
        self.p = xp.exp(self.logp)


def _log_ratio(xp, q: _Dist, p: _Dist, T: float):
    """r = log q − log p where both tokens are possible (0 elsewhere), accurate to a few ulps
    *of r* when q ≈ p (where the KL is ~r²/2 and an absolute error of u in r would be a
    relative error u/r in the KL).

    Anchored at the student's top token a: r_j = w_j − D with
    w_j = ((z_j − t_j) − (z_a − t_a))/T (differences of nearby numbers when q ≈ p, exact
    by Sterbenz) and D = log(Z_q/Z_p) for the partition sums taken relative to z_a and t_a.
    D = log1p(X), X = Σ_both p_j·expm1(w_j) + Σ_{p_j=0} q_j·e^{D₀} − Σ_{q_j=0} p_j, comes
    out of small differences too; D₀ = log1p S_q − log1p S_p − (max t − t_a)/T is the
    plain estimate, used instead when |D₀| > 1 (X near −1 would lose the digits there) or
    t_a = −inf, with r grouped as ((z_j − t_j) − (max z − max t))/T − (log1p S_q − log1p S_p)
    so that no two large numbers cancel."""
    zero = xp.zeros_like(q.dz)
    both = q.support & p.support
    zt = xp.where(both, q.z, zero) - xp.where(both, p.z, zero)
    t_a = xp.sum(xp.where(q.is_top, xp.where(p.support, p.z, zero), zero), axis=-1, keepdims=True)
    anchored = xp.any(q.is_top & p.support, axis=-1, keepdims=True)
    t_a = xp.where(anchored, t_a, p.max)
    rel_max = (p.max - t_a) / T if T != 1.0 else p.max - t_a
    d0 = (q.l1 - p.l1) - rel_max
    refine = anchored & (xp.abs(d0) <= 1.0)

    wa = zt - (q.max - t_a)
    wa = _xp.masked(xp, both, wa / T if T != 1.0 else wa)
    near = xp.abs(wa) <= 1.0
    e_d0 = xp.exp(xp.where(refine, d0, xp.zeros_like(d0)))
    term = xp.where(both, xp.where(near, p.p * xp.expm1(xp.where(near, wa, zero)), q.p * e_d0 - p.p),
                    xp.where(q.support, q.p * e_d0, -p.p))
    x = _xp.masked(xp, refine, xp.sum(term, axis=-1, keepdims=True))
    r_refined = wa - xp.log1p(x)

    wm = zt - (q.max - p.max)
    r_plain = (wm / T if T != 1.0 else wm) - (q.l1 - p.l1)
    return _xp.masked(xp, both, xp.where(refine, r_refined, r_plain))


def _centred(xp, q: _Dist, g):
    """g_j − Σ_i q_i g_i, anchored at the top token:
    (g_j − g_top) − Σ_{i≠top} q_i (g_i − g_top). Equal (Σq = 1), but when q is nearly
    one-hot (T = 1e-3, logits ±1e4) the top entry comes out of the tiny q_i instead of
    cancelling g_top against Σ q g ≈ g_top. Entries with q_i = 0 take no part."""
    g = _xp.masked(xp, q.support, g)
    g_top = xp.sum(_xp.masked(xp, q.is_top, g), axis=-1, keepdims=True)
    d = g - g_top
    rest = xp.sum(_xp.masked(xp, q.support & ~q.is_top, q.p * d), axis=-1, keepdims=True)
    return d - rest


def _soft(xp, q: _Dist, p: _Dist, r, soft_term: str):
    """The teacher-weighted soft term per row: KL(p‖q), or the cross-entropy
    −Σ_{p>0} p log q = KL(p‖q) + H(p) (terms ≥ 0: nothing cancels)."""
    if soft_term == "cross_entropy":
        return -xp.sum(p.p * _xp.masked(xp, p.support, q.logp), axis=-1)   # 0·(−inf) never formed
    return _xp.kl_terms(xp, p.p, q.p, p.support, -r)


def _q_minus_p(xp, q: _Dist, p: _Dist, r):
    """q − p without cancellation: p·expm1(r) where both are possible and r ≤ 1 (beyond,
    q > e·p, the plain difference loses nothing and e^r may overflow)."""
    both = q.support & p.support
    near = both & (r <= 1.0)
    close = p.p * xp.expm1(xp.where(near, r, xp.zeros_like(r)))
    return xp.where(near, close, xp.where(q.support, q.p, xp.zeros_like(q.p)) - xp.where(p.support, p.p, xp.zeros_like(p.p)))


# ---------------------------------------------------------------------------------------------
# Input handling
# ---------------------------------------------------------------------------------------------

def _unravel(flat: int, shape: tuple) -> tuple:
    idx = []
    for d in reversed(shape):
        idx.append(flat % d)
        flat //= d
    return tuple(reversed(idx))


def _first(xp, bad) -> int:
    return int(xp.argmax(xp.astype(xp.reshape(bad, (-1,)), xp.int32)))


def _logits(xp, dt, name: str, x, rank=None):
    a = _xp.array(xp, name, x, dt, allow_neg_inf=True)
    if rank is not None:
        validate.rank(name, _xp.shape(a), rank)
    elif a.ndim < 1:
        validate.fail(name, "expected at least 1 dimension (the vocabulary axis), got a scalar")
    if a.shape[-1] == 0:
        validate.fail(name, f"the vocabulary axis must not be empty, got shape {_xp.shape(a)}")
    return a


def _dist(xp, name: str, a, T):
    dead = xp.all(a == -xp.inf, axis=-1)
    if bool(xp.any(dead)):
        idx = _unravel(_first(xp, dead), _xp.shape(a)[:-1])
        validate.fail(name, f"row {idx} is -inf everywhere (no possible token)")
    return _Dist(xp, a, T)


def _pair(student_logits, teacher_logits, temperature, rank=None):
    xp = _xp.namespace(student_logits, teacher_logits)
    dt = _xp.float_dtype(xp, student_logits=student_logits, teacher_logits=teacher_logits)
    zs = _logits(xp, dt, "student_logits", student_logits, rank)
    ts = _logits(xp, dt, "teacher_logits", teacher_logits, rank)
    validate.same_shape(student_logits=_xp.shape(zs), teacher_logits=_xp.shape(ts))
    T = validate.temperature(temperature)
    return xp, dt, _xp.shape(zs), T, _dist(xp, "student_logits", zs, T), _dist(xp, "teacher_logits", ts, T)


def _require_support(xp, name: str, inner: _Dist, outer: _Dist, shape: tuple, what: str):
    """supp inner ⊆ supp outer, else the divergence is +inf: reject, naming ``name``."""
    bad = inner.support & ~outer.support
    if bool(xp.any(bad)):
        *row, v = _unravel(_first(xp, bad), shape)
        validate.fail(name, f"-inf at row {tuple(row)}, token {v}, where the other distribution "
                            f"has probability > 0: {what} is infinite (support mismatch)")


def _cotangent(xp, dt, cotangent, shape: tuple):
    ct = _xp.array(xp, "cotangent", cotangent, dt)
    validate.same_shape(output=shape, cotangent=_xp.shape(ct))
    return ct


# ---------------------------------------------------------------------------------------------
# distill.softmax
# ---------------------------------------------------------------------------------------------

def _softmax_prepare(logits, temperature):
    xp = _xp.namespace(logits)
    dt = _xp.float_dtype(xp, logits=logits)
    z = _logits(xp, dt, "logits", logits)
    T = validate.temperature(temperature)
    return xp, dt, z, T, _dist(xp, "logits", z, T)


def softmax(logits, temperature: float = 1.0):
    """Tempered softmax q_i = exp(z_i/T) / Σ_j exp(z_j/T) along the last axis.

    Hinton, Vinyals & Dean 2015 §2; [reading-math-3] §"Destilación clásica". Returns probs with
    the shape of ``logits``; a −inf logit has probability 0.
    """
    return _softmax_prepare(logits, temperature)[4].p


def softmax_vjp(cotangent, logits, temperature: float = 1.0):
    """∂/∂z_j Σ_i c_i q_i = q_j (c_j − Σ_i c_i q_i) / T."""
    xp, dt, z, T, q = _softmax_prepare(logits, temperature)
    c = _cotangent(xp, dt, cotangent, _xp.shape(z))
    return {"logits": q.p * _centred(xp, q, c) / T}


# ---------------------------------------------------------------------------------------------
# distill.hinton
# ---------------------------------------------------------------------------------------------

def _labels(xp, labels, n: int, v: int):
    y = _xp.int_array(xp, "labels", labels)
    validate.rank("labels", _xp.shape(y), 1)
    validate.same_shape(**{"student_logits rows": (n,)}, labels=_xp.shape(y))
    bad = (y < 0) | (y >= v)
    if bool(xp.any(bad)):
        i = _first(xp, bad)
        validate.fail("labels", f"label {int(y[i])} at row {i} is outside [0, {v})")
    return y


def _hinton_prepare(student_logits, teacher_logits, labels, temperature, alpha, t2_scale, soft_term):
    xp, dt, shape, T, qT, pT = _pair(student_logits, teacher_logits, temperature, rank=2)
    validate.soft_term(soft_term)
    n, v = shape
    if n == 0:
        validate.fail("student_logits", "needs at least one row (the loss is a mean over rows)")
    y = _labels(xp, labels, n, v)
    a = validate.alpha(alpha)
    s = T * T if validate.t2_scale(t2_scale) else 1.0
    q1 = qT if T == 1.0 else _Dist(xp, qT.z, 1.0)
    onehot = xp.arange(v, dtype=y.dtype) == y[:, None]
    dead_label = xp.any(onehot & ~q1.support, axis=-1)
    if bool(xp.any(dead_label)):
        i = _first(xp, dead_label)
        validate.fail("student_logits", f"-inf at the label (row {i}, token {int(y[i])}): "
                                        "the cross-entropy term is infinite")
    _require_support(xp, "student_logits", pT, qT, shape, "KL(p‖q)")
    r = _log_ratio(xp, qT, pT, T)
    return xp, dt, shape, T, onehot, a, s, q1, qT, pT, r


def hinton(student_logits, teacher_logits, labels, temperature: float = 1.0, alpha: float = 0.5,
           t2_scale: bool = True, soft_term: str = "kl"):
    """Hinton distillation loss, mean over the N rows:

        L = 1/N Σ_n [ (1−α)(−log q_{y_n}^{(1)}) + α·s·KL(p^{(T)} ‖ q^{(T)}) ],  s = T² if t2_scale else 1.

    Hinton et al. 2015 §2; [reading-math-3] §"Destilación clásica" (λ = ``alpha``). A −inf student
    logit at the label or where the teacher has p > 0 is rejected whatever α is.
    ``soft_term='cross_entropy'``: the soft term is −Σ p log q = KL + H(p) (Hinton §2's form).
    """
    xp, _, shape, T, onehot, a, s, q1, qT, pT, r = _hinton_prepare(
        student_logits, teacher_logits, labels, temperature, alpha, t2_scale, soft_term)
    ce = -xp.sum(_xp.masked(xp, onehot, q1.logp), axis=-1)
    kl = _soft(xp, qT, pT, r, soft_term)
    return xp.sum((1 - a) * ce + (a * s) * kl) / shape[0]


def hinton_vjp(cotangent, student_logits, teacher_logits, labels, temperature: float = 1.0,
               alpha: float = 0.5, t2_scale: bool = True, soft_term: str = "kl"):
    """Gradient of c·L with respect to the student logits (Hinton et al. 2015 §2):

        ∂L/∂z_{n,j} = [ (1−α)(q_{n,j}^{(1)} − [j = y_n]) + α·s·(q_{n,j}^{(T)} − p_{n,j}^{(T)}) / T ] / N

    for both ``soft_term`` values (they differ by H(p), constant in z).
    """
    xp, dt, shape, T, onehot, a, s, q1, qT, pT, r = _hinton_prepare(
        student_logits, teacher_logits, labels, temperature, alpha, t2_scale, soft_term)
    c = xp.reshape(_cotangent(xp, dt, cotangent, ()), ())
    # q_y − 1 = expm1(log q_y), without cancellation when q_y ≈ 1.
    ce = xp.where(onehot, xp.expm1(q1.logp), q1.p)
    diff = _q_minus_p(xp, qT, pT, r)
    return {"student_logits": c * ((1 - a) * ce + (a * s / T) * diff) / shape[0]}


# ---------------------------------------------------------------------------------------------
# distill.token_kl
# ---------------------------------------------------------------------------------------------

def _token_kl_prepare(student_logits, teacher_logits, direction, temperature, soft_term="kl"):
    xp, dt, shape, T, q, p = _pair(student_logits, teacher_logits, temperature)
    validate.direction(direction)
    validate.soft_term(soft_term, direction)
    if direction == "reverse":
        _require_support(xp, "teacher_logits", q, p, shape, "reverse KL(q‖p)")
    else:
        _require_support(xp, "student_logits", p, q, shape, "forward KL(p‖q)")
    r = _log_ratio(xp, q, p, T)
    kl = (_xp.kl_terms(xp, q.p, p.p, q.support, r) if direction == "reverse"
          else _soft(xp, q, p, r, soft_term))
    return xp, dt, shape, T, q, p, r, kl


def token_kl(student_logits, teacher_logits, direction: str = "reverse", temperature: float = 1.0,
             soft_term: str = "kl"):
    """Full-vocabulary KL between student q and teacher p per row: reverse Σ q log(q/p),
    forward Σ p log(p/q), at temperature T, no T² factor.

    MiniLLM (Gu et al. 2024) §2.1 eq. 1; DeepSeek-V4 §5.1.2 eq. 29; [reading-math-3] §"De la KL
    de secuencia a la KL de token". 0·log 0 = 0; an infinite KL is rejected. Forward with
    ``soft_term='cross_entropy'``: −Σ p log q = KL(p‖q) + H(p) (Hinton et al. 2015 §2). Returns kl
    with shape ``student_logits.shape[:-1]``.
    """
    return _token_kl_prepare(student_logits, teacher_logits, direction, temperature, soft_term)[7]


def token_kl_vjp(cotangent, student_logits, teacher_logits, direction: str = "reverse",
                 temperature: float = 1.0, soft_term: str = "kl"):
    """Gradient of Σ c·kl with respect to the student logits, per row:
    reverse q_j (ℓ_j − kl)/T with ℓ = log q − log p (0 where q_j = 0); forward (q_j − p_j)/T,
    also for the cross-entropy form."""
    xp, dt, shape, T, q, p, r, kl = _token_kl_prepare(student_logits, teacher_logits,
                                                      direction, temperature, soft_term)
    c = xp.expand_dims(_cotangent(xp, dt, cotangent, shape[:-1]), axis=-1)
    if direction == "reverse":
        g = _xp.masked(xp, q.support, q.p * _centred(xp, q, r))
    else:
        g = _q_minus_p(xp, q, p, r)
    return {"student_logits": c * g / T}


# ---------------------------------------------------------------------------------------------
# distill.symmetric_kl
# ---------------------------------------------------------------------------------------------

def _symmetric_prepare(student_logits, teacher_logits, forward_weight, temperature):
    xp, dt, shape, T, q, p = _pair(student_logits, teacher_logits, temperature)
    w = validate.forward_weight(forward_weight)
    _require_support(xp, "student_logits", p, q, shape, "forward KL(p‖q)")
    _require_support(xp, "teacher_logits", q, p, shape, "reverse KL(q‖p)")
    return xp, dt, shape, T, q, p, _log_ratio(xp, q, p, T), w


def symmetric_kl(student_logits, teacher_logits, forward_weight: float = 0.5, temperature: float = 1.0):
    """w·KL(p‖q) + (1−w)·KL(q‖p) per row (p teacher, q student, both at T; no T² factor).

    Jeffreys 1946, weighted; the DistiLLM (Ko et al. 2024) baseline ``symmetric_kl``. Both terms
    must be finite whatever w is (support mismatch rejected). Returns kl [...].
    """
    xp, _, _, _, q, p, r, w = _symmetric_prepare(student_logits, teacher_logits, forward_weight, temperature)
    return w * _xp.kl_terms(xp, p.p, q.p, p.support, -r) + (1 - w) * _xp.kl_terms(xp, q.p, p.p, q.support, r)


def symmetric_kl_vjp(cotangent, student_logits, teacher_logits, forward_weight: float = 0.5,
                     temperature: float = 1.0):
    """Gradient of Σ c·kl: [w·(q_j − p_j) + (1−w)·q_j (ℓ_j − KL(q‖p))] / T, ℓ = log q − log p."""
    xp, dt, shape, T, q, p, r, w = _symmetric_prepare(student_logits, teacher_logits, forward_weight, temperature)
    c = xp.expand_dims(_cotangent(xp, dt, cotangent, shape[:-1]), axis=-1)
    g = w * _q_minus_p(xp, q, p, r) + (1 - w) * _xp.masked(xp, q.support, q.p * _centred(xp, q, r))
    return {"student_logits": c * g / T}


# ---------------------------------------------------------------------------------------------
# distill.generalized_jsd
# ---------------------------------------------------------------------------------------------

def _log_mix(xp, x, w_keep: float, w_other: float):
    """log(w_keep + w_other·e^{−x}) with w_keep + w_other = 1, i.e. log m − log a for
    m = w_keep·a + w_other·b and x = log a − log b: log1p(w_other·expm1(−x)) near x = 0
    (the result is small there and a log-sum-exp would cancel), logaddexp(log w_keep,
    log w_other − x) elsewhere (e^{−x} would overflow for x < −709)."""
    near = xp.abs(x) <= 1.0
    xn = xp.where(near, x, xp.zeros_like(x))
    close = xp.log1p(w_other * xp.expm1(-xn))
    far = _xp.logaddexp(xp, xp.zeros_like(x) + math.log(w_keep), math.log(w_other) - x)
    return xp.where(near, close, far)


def _jsd_parts(xp, q: _Dist, p: _Dist, r, beta: float):
    """jsd = β·KL(p‖m) + (1−β)·KL(q‖m), ℓ^q = log q − log m and KL(q‖m), for 0 < β < 1.
    Where only one of p, q is possible, m is β·p or (1−β)·q and the log-ratio a constant."""
    one_b = 1.0 - beta
    both = q.support & p.support
    zero = xp.zeros_like(r)
    lq_m = xp.where(both, -_log_mix(xp, r, one_b, beta), zero - math.log1p(-beta))
    lp_m = xp.where(both, -_log_mix(xp, -r, beta, one_b), zero - math.log(beta))
    m = beta * p.p + one_b * q.p
    kl_qm = _xp.kl_terms(xp, q.p, m, q.support, lq_m)
    kl_pm = _xp.kl_terms(xp, p.p, m, p.support, lp_m)
    return beta * kl_pm + one_b * kl_qm, lq_m, kl_qm


def _jsd_prepare(student_logits, teacher_logits, beta, temperature, endpoints):
    xp, dt, shape, T, q, p = _pair(student_logits, teacher_logits, temperature)
    b = validate.jsd_beta(beta)
    validate.endpoints(endpoints)
    if endpoints == "kl" and b == 0:
        _require_support(xp, "student_logits", p, q, shape, "beta=0 with endpoints='kl' → KL(p‖q)")
    if endpoints == "kl" and b == 1:
        _require_support(xp, "teacher_logits", q, p, shape, "beta=1 with endpoints='kl' → KL(q‖p)")
    return xp, dt, shape, T, q, p, _log_ratio(xp, q, p, T), b


def generalized_jsd(student_logits, teacher_logits, beta: float = 0.5, temperature: float = 1.0,
                    endpoints: str = "limit"):
    """Generalized Jensen–Shannon divergence per row (p teacher, q student, both at T):

        jsd = β·KL(p ‖ m) + (1−β)·KL(q ‖ m),   m = β·p + (1−β)·q,   β ∈ [0, 1].

    Agarwal et al. 2024 (GKD) §3 eq. 2; TRL GKDTrainer.generalized_jsd_loss.
    ``endpoints='limit'``: β ∈ {0, 1} give 0 (the formula); ``'kl'``: β = 0 gives KL(p‖q),
    β = 1 gives KL(q‖p) (TRL / Liger-Kernel). Returns jsd with shape ``shape[:-1]``.
    """
    xp, _, shape, _, q, p, r, b = _jsd_prepare(student_logits, teacher_logits, beta, temperature, endpoints)
    if b == 0 or b == 1:
        if endpoints == "limit":
            return xp.zeros(shape[:-1], dtype=q.p.dtype)
        if b == 0:
            return _xp.kl_terms(xp, p.p, q.p, p.support, -r)
        return _xp.kl_terms(xp, q.p, p.p, q.support, r)
    return _jsd_parts(xp, q, p, r, b)[0]


def generalized_jsd_vjp(cotangent, student_logits, teacher_logits, beta: float = 0.5,
                        temperature: float = 1.0, endpoints: str = "limit"):
    """Gradient of Σ c·jsd with respect to the student logits, for 0 < β < 1:

        ∂jsd/∂z_j = (1−β) q_j (ℓ_j − Σ_i q_i ℓ_i) / T,   ℓ = log q − log m

    (g_i = (1−β) q_i ℓ_i). 'limit' at β ∈ {0, 1}: 0; 'kl' there: the forward / reverse
    ``token_kl_vjp``. Source as for :func:`generalized_jsd`.
    """
    xp, dt, shape, T, q, p, r, b = _jsd_prepare(student_logits, teacher_logits, beta, temperature, endpoints)
    c = _cotangent(xp, dt, cotangent, shape[:-1])
    if (b == 0 or b == 1) and endpoints == "kl":
        return token_kl_vjp(cotangent, student_logits, teacher_logits,
                            "forward" if b == 0 else "reverse", temperature)
    if b == 0 or b == 1:
        return {"student_logits": xp.zeros(shape, dtype=q.p.dtype)}
    _, lq_m, _ = _jsd_parts(xp, q, p, r, b)
    g = _xp.masked(xp, q.support, q.p * _centred(xp, q, lq_m))
    return {"student_logits": xp.expand_dims(c, axis=-1) * ((1 - b) / T) * g}


# ---------------------------------------------------------------------------------------------
# distill.skew_kl
# ---------------------------------------------------------------------------------------------

def _skew_prepare(student_logits, teacher_logits, alpha, direction, temperature):
    xp, dt, shape, T, q, p = _pair(student_logits, teacher_logits, temperature)
    a = validate.skew_alpha(alpha)
    validate.direction(direction)
    return xp, dt, shape, T, q, p, _log_ratio(xp, q, p, T), a


def _skew_parts(xp, q: _Dist, p: _Dist, r, a: float, direction: str):
    """(kl, log a − log m) for the first distribution a (p forward, q reverse) against
    m = α·a + (1−α)·b, 0 < α < 1; −log α where b = 0."""
    first, other, x = (p, q, -r) if direction == "forward" else (q, p, r)
    both = q.support & p.support
    zero = xp.zeros_like(r)
    l_m = xp.where(both, -_log_mix(xp, x, a, 1.0 - a), zero - math.log(a))
    m = a * first.p + (1.0 - a) * other.p
    return _xp.kl_terms(xp, first.p, m, first.support, l_m), l_m


def skew_kl(student_logits, teacher_logits, alpha: float = 0.1, direction: str = "forward",
            temperature: float = 1.0):
    """Skew KL per row (p teacher, q student, both at T): forward KL(p ‖ αp + (1−α)q) (α-SKL) or
    reverse KL(q ‖ αq + (1−α)p) (α-SRKL), 0 < α ≤ 1 (α = 1 gives 0).

    DistiLLM (Ko et al. 2024, arXiv 2402.03898) §3; α = 0.1 as the official code. Returns kl with
    shape ``student_logits.shape[:-1]``.
    """
    xp, _, shape, _, q, p, r, a = _skew_prepare(student_logits, teacher_logits, alpha, direction, temperature)
    if a == 1.0:
        return xp.zeros(shape[:-1], dtype=q.p.dtype)
    return _skew_parts(xp, q, p, r, a, direction)[0]


def skew_kl_vjp(cotangent, student_logits, teacher_logits, alpha: float = 0.1, direction: str = "forward",
                temperature: float = 1.0):
    """Gradient of Σ c·kl with respect to the student logits, per row:
    forward −(1−α)·q_j (x_j − Σ q x)/T with x = p/m; reverse q_j (y_j − Σ q y)/T with
    y = ℓ − α·e^ℓ, ℓ = log q − log m' (as ``refimpl.exact.distill.skew_kl_vjp``)."""
    xp, dt, shape, T, q, p, r, a = _skew_prepare(student_logits, teacher_logits, alpha, direction, temperature)
    c = xp.expand_dims(_cotangent(xp, dt, cotangent, shape[:-1]), axis=-1)
    if a == 1.0:
        return {"student_logits": xp.zeros(shape, dtype=q.p.dtype)}
    _, l_m = _skew_parts(xp, q, p, r, a, direction)
    if direction == "forward":
        x = xp.where(p.support, xp.exp(l_m), xp.zeros_like(l_m))
        g = -(1.0 - a) * _xp.masked(xp, q.support, q.p * _centred(xp, q, x))
    else:
        g = _xp.masked(xp, q.support, q.p * _centred(xp, q, l_m - a * xp.exp(l_m)))
    return {"student_logits": c * g / T}


# ---------------------------------------------------------------------------------------------
# distill.tvd
# ---------------------------------------------------------------------------------------------

def _tvd_prepare(student_logits, teacher_logits, temperature):
    xp, dt, shape, T, q, p = _pair(student_logits, teacher_logits, temperature)
    return xp, dt, shape, T, q, _q_minus_p(xp, q, p, _log_ratio(xp, q, p, T))


def tvd(student_logits, teacher_logits, temperature: float = 1.0):
    """Total variation ½·Σ_v |q_v − p_v| per row (p teacher, q student, both at T), with
    q − p = p·expm1(log q − log p). Returns tvd with shape ``student_logits.shape[:-1]``."""
    xp, _, _, _, _, d = _tvd_prepare(student_logits, teacher_logits, temperature)
    return xp.sum(xp.sign(d) * d, axis=-1) / 2   # |d| whose derivative is sign(d), 0 at 0 (jnp.abs's is 1)


def tvd_vjp(cotangent, student_logits, teacher_logits, temperature: float = 1.0):
    """Subgradient q_j (σ_j − Σ_i q_i σ_i)/(2T), σ = sign(q − p) with sign(0) = 0, times c."""
    xp, dt, shape, T, q, d = _tvd_prepare(student_logits, teacher_logits, temperature)
    c = xp.expand_dims(_cotangent(xp, dt, cotangent, shape[:-1]), axis=-1)
    g = _xp.masked(xp, q.support, q.p * _centred(xp, q, xp.sign(d)))
    return {"student_logits": c * g / (2 * T)}


# ---------------------------------------------------------------------------------------------
# distill.sparse_kl
# ---------------------------------------------------------------------------------------------

def _nested(a, cast) -> list:
    """A 2-D array as rows of Python numbers (for ``validate.sparse_teacher``)."""
    n, k = _xp.shape(a)
    return [[cast(a[i, j]) for j in range(k)] for i in range(n)]


def _log_total(xp, lw):
    """log Σ_k e^{lw_k} per row (keepdims), −inf entries adding nothing."""
    m = _xp.row_max(xp, lw)
    return m + xp.log(xp.sum(xp.exp(lw - m), axis=-1, keepdims=True))


def _sparse_prepare(student_logits, teacher_ids, teacher_logps, renormalize, temperature):
    """(xp, dt, shape, T, q, onehot [N,K,V], live [N,K], log p and log q at the ids after the
    convention)."""
    xp = _xp.namespace(student_logits, teacher_logps)
    dt = _xp.float_dtype(xp, student_logits=student_logits, teacher_logps=teacher_logps)
    zs = _logits(xp, dt, "student_logits", student_logits, rank=2)
    ids = _xp.int_array(xp, "teacher_ids", teacher_ids)
    lp = _xp.array(xp, "teacher_logps", teacher_logps, dt, allow_neg_inf=True)
    validate.rank("teacher_ids", _xp.shape(ids), 2)
    validate.rank("teacher_logps", _xp.shape(lp), 2)
    shape = _xp.shape(zs)
    validate.sparse_teacher(_nested(ids, int), _nested(lp, float), shape)
    validate.renormalize(renormalize)
    if renormalize == "tail":
        validate.sparse_tail(_nested(ids, int), _nested(lp, float), _nested(zs > -xp.inf, bool))
    T = validate.temperature(temperature)
    q = _dist(xp, "student_logits", zs, T)
    onehot = ids[:, :, None] == xp.arange(shape[1], dtype=ids.dtype)
    lq = xp.sum(_xp.masked(xp, onehot, q.logp[:, None, :]), axis=-1)
    live = lp > -xp.inf
    dead = live & (lq == -xp.inf)
    if bool(xp.any(dead)):
        i, k = _unravel(_first(xp, dead), _xp.shape(dead))
        validate.fail("student_logits", f"-inf at row ({i},), token {int(ids[i, k])}, where the teacher has "
                                        "probability > 0: the KL is infinite (support mismatch)")
    if renormalize in ("teacher", "both"):
        lp = lp - _log_total(xp, lp)
    if renormalize == "both":
        lq_live = xp.where(live, lq, xp.full_like(lq, -xp.inf))
        lq = xp.where(live, lq - _log_total(xp, lq_live), lq_live)
    return xp, dt, shape, T, q, onehot, live, lp, lq


def sparse_kl(student_logits, teacher_ids, teacher_logps, renormalize: str = "none", temperature: float = 1.0,
              t2_scale: bool = False):
    """Forward KL over a top-k teacher, Σ_k p_k (log p_k − log q_{i_k}) per row, the sum over the
    ids with p_k > 0; ``renormalize`` 'none' | 'teacher' | 'both' | 'tail' (plus p_t log(p_t/q_t) of the
    (K+1)-th buckets), times T² under ``t2_scale``, as ``refimpl.exact.distill.sparse_kl`` (which cites
    the sources). Returns kl [N]."""
    xp, _, _, T, q, onehot, live, lp, lq = _sparse_prepare(student_logits, teacher_ids, teacher_logps, renormalize,
                                                           temperature)
    lp0, lq0 = _xp.masked(xp, live, lp), _xp.masked(xp, live, lq)   # padding: 0, not −inf − (−inf)
    kl = xp.sum(_xp.masked(xp, live, xp.exp(lp0) * (lp0 - lq0)), axis=-1)
    if renormalize == "tail":
        p_t, log_p, log_q, _ = _tail(xp, q, onehot, live, lp)
        kl = kl + xp.where(p_t > 0, p_t * (log_p - log_q), xp.zeros_like(p_t))[:, 0]
    return kl * (T * T) if validate.t2_scale(t2_scale) else kl


def _tail(xp, q, onehot, live, lp):
    """The (K+1)-th buckets of 'tail' per row (keepdims): p_t = −expm1(log Σ p) (0 for a one-hot
    teacher; rounding can make it ≤ 0 only where ``validate.sparse_tail`` found 0 < p_t < ~1e-16,
    read as 0), log p_t, log q_t = log Σ_j q_j over the possible tokens j off the live ids (a
    direct sum, no 1 − Σ q cancellation), and the mask of those live ids [N,V]."""
    p_t = -xp.expm1(_log_total(xp, lp))
    pos = p_t > 0
    log_p = xp.log(xp.where(pos, p_t, xp.ones_like(p_t)))
    held = xp.any(onehot & live[:, :, None], axis=1)
    off = q.support & ~held
    lw = xp.where(off, q.logp, xp.full_like(q.logp, -xp.inf))
    some = xp.any(off, axis=-1, keepdims=True)
    m = _xp.row_max(xp, lw)
    total = xp.sum(xp.exp(lw - m), axis=-1, keepdims=True)
    log_q = m + xp.log(xp.where(some, total, xp.ones_like(total)))
    return xp.where(pos, p_t, xp.zeros_like(p_t)), log_p, log_q, held


def sparse_kl_vjp(cotangent, student_logits, teacher_ids, teacher_logps, renormalize: str = "none",
                  temperature: float = 1.0, t2_scale: bool = False):
    """c·(S·q_j − P_j)/T ('none'), c·(q_j − P̃_j)/T ('teacher'), c·(q̃_j − P̃_j)/T on the ids ('both'),
    c·(q_j − P_j)/T on the live ids and c·q_j(1 − p_t/q_t)/T off them ('tail'), P the teacher's
    probabilities scattered to their ids; times T² under ``t2_scale``."""
    xp, dt, shape, T, q, onehot, live, lp, lq = _sparse_prepare(student_logits, teacher_ids, teacher_logps,
                                                                renormalize, temperature)
    c = xp.expand_dims(_cotangent(xp, dt, cotangent, shape[:-1]), axis=-1)
    if validate.t2_scale(t2_scale):
        c = c * (T * T)
    p = _xp.masked(xp, live, xp.exp(lp))

    def scatter(w):
        return xp.sum(_xp.masked(xp, onehot, w[:, :, None]), axis=1)

    if renormalize == "both":
        g = scatter(_xp.masked(xp, live, xp.exp(lq)) - p)
    elif renormalize == "tail":   # (q_j − P_j) on the live ids, q_j − p_t·(q_j/q_t) off them
        p_t, log_p, log_q, held = _tail(xp, q, onehot, live, lp)
        # q_j/q_t ≤ 1 off the ids, formed in logs: p_t/q_t alone overflows when q_t underflows
        off = q.support & ~held
        share = xp.exp(xp.where(off, q.logp, xp.broadcast_to(log_q, q.logp.shape)) - log_q)
        g = xp.where(held, q.p - scatter(p), _xp.masked(xp, off, q.p - p_t * share))
    else:
        s = xp.sum(p, axis=-1, keepdims=True) if renormalize == "none" else 1.0
        g = _xp.masked(xp, q.support, s * q.p) - scatter(p)
    return {"student_logits": c * g / T}
