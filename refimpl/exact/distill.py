"""Knowledge-distillation objectives: tempered softmax, Hinton's combined loss, full-vocabulary
token KL (forward / reverse, the forward one also as a cross-entropy), the symmetric KL and the
generalized Jensen–Shannon divergence of GKD.

Notation (every function): z = student logits, t = teacher logits, T = temperature,
q = softmax(z/T) (student), p = softmax(t/T) (teacher), along the last axis (the vocabulary V);
every leading axis is a batch axis and is kept. A logit of −inf marks an impossible token
(probability exactly 0); a row with no possible token is rejected.

Gradients. All objectives depend on z only through the student's log-probabilities
s = log q, and ∂s_i/∂z_j = (δ_ij − q_j)/T, so with g_i = ∂F/∂s_i

    ∂F/∂z_j = (g_j − q_j Σ_i g_i) / T.                                        (chain rule)

Each ``*_vjp`` below states its g and the resulting closed form.

Numerics. Log-probabilities are formed as (z_i − max)/T − log1p(Σ_{j≠argmax} e^{(z_j−max)/T}),
so the most probable token keeps its (tiny) distance from probability 1; log-ratios
r_i = log q_i − log p_i are formed from logit differences, never from two large
log-probabilities; and every KL is summed as Σ a_i (ℓ_i + e^{−ℓ_i} − 1) (+ Σ_{a_i=0} b_i),
whose terms are all ≥ 0, instead of Σ a_i ℓ_i, whose terms cancel when a ≈ b.
"""
from __future__ import annotations

import mpmath
import numpy as np

from lossproof.refimpl import validate
from lossproof.refimpl.exact import mp

__all__ = ["softmax", "softmax_vjp", "hinton", "hinton_vjp", "token_kl", "token_kl_vjp",
           "symmetric_kl", "symmetric_kl_vjp", "generalized_jsd", "generalized_jsd_vjp", "skew_kl", "skew_kl_vjp",
           "tvd", "tvd_vjp", "sparse_kl", "sparse_kl_vjp"]

DIRECTIONS = validate.DIRECTIONS
ENDPOINTS = validate.ENDPOINTS
RENORMALIZE = validate.RENORMALIZE


# ---------------------------------------------------------------------------------------------
# Row helpers (one distribution over the vocabulary, as Python lists of mpf)
# ---------------------------------------------------------------------------------------------

class _Row:
    """softmax(z/T) of one row: log-probabilities, probabilities and the pieces of log Z."""

    def __init__(self, z, T):
        self.z = z
        self.k = k = max(range(len(z)), key=lambda i: z[i])
        self.max = z[k]
        shifted = [(zi - self.max) / T for zi in z]  # exactly 0 at k, −inf for impossible tokens
        # log Z/e^{max/T} = log(1 + Σ_{j≠k} …): log1p keeps the top token's log-probability
        # −log1p(S) accurate when S is far below the working precision (logits ±1e4).
        self.l1 = mpmath.log1p(mpmath.fsum(mpmath.exp(x) for j, x in enumerate(shifted) if j != k))
        self.logp = [x - self.l1 for x in shifted]
        self.p = [mpmath.exp(x) for x in self.logp]
        self.support = [zi != mp.NEG_INF for zi in z]


def _log_ratio(q: _Row, p: _Row, T):
    """r_i = log q_i − log p_i where both are possible (None elsewhere).

    r_i = (z_i − t_i)/T − c with c = log Z_q − log Z_p. When |c| ≤ 1, c is taken as
    log1p(Σ_{p_j>0} p_j (e^{(z_j−t_j)/T} − 1) + Σ_{p_j=0} q_j e^{c}): the logit differences are
    exact, so r keeps its relative accuracy when q ≈ p (rows one ulp apart: r ~ 1e-16, KL ~ 1e-32).
    Otherwise r_i = ((z_i − max z) − (t_i − max t))/T − (log1p S_q − log1p S_p): grouped so that
    at a top token of both rows the logit part is exactly 0 and r keeps the relative accuracy of
    the two log1p sums, which near-one-hot rows need (T = 1e-3: r ~ e^−1500; subtracting c ~ 400
    from (z_i − t_i)/T ~ 400 leaves 0 at any working precision)."""
    c = (q.max - p.max) / T + (q.l1 - p.l1)
    if abs(c) > 1:
        dl = q.l1 - p.l1
        return [((zi - q.max) - (ti - p.max)) / T - dl if a and b else None
                for zi, ti, a, b in zip(q.z, p.z, q.support, p.support)]
    x = mpmath.fsum(pj * mpmath.expm1((zj - tj) / T)
                    for zj, tj, pj, b in zip(q.z, p.z, p.p, p.support) if b)
    x += mpmath.fsum(mpmath.exp((zj - p.max) / T - p.l1)
                     for zj, a, b in zip(q.z, q.support, p.support) if a and not b)
    c = mpmath.log1p(x)
    return [(zi - ti) / T - c if a and b else None
            for zi, ti, a, b in zip(q.z, p.z, q.support, p.support)]


def _k3(ell):
    """ℓ + e^{−ℓ} − 1 (≥ 0), evaluated with enough extra bits that the cancellation between
    ℓ and e^{−ℓ} − 1 (≈ ℓ²/2 for small ℓ) costs no digits."""
    if ell == 0:
        return mp.ZERO
    lost = -int(mpmath.mag(ell))  # bits cancelled, about log2(1/|ℓ|)
    if lost > mpmath.mp.prec + 2:
        return ell * ell / 2  # the series ℓ²/2 − ℓ³/6 + …: the next term is below the precision
    extra = max(0, lost) + 16
    with mpmath.extraprec(extra):
        v = ell + mpmath.expm1(-ell)
    return +v


def _kl_terms(a_p, a_support, b_p, ell):
    """KL(a‖b) = Σ_{a_i>0} a_i (ℓ_i + e^{−ℓ_i} − 1) + Σ_{a_i=0} b_i, with ℓ_i = log(a_i/b_i).

    Equal to Σ a_i ℓ_i because Σ_{a_i>0} a_i e^{−ℓ_i} = Σ_{a_i>0} b_i = 1 − Σ_{a_i=0} b_i.
    Requires supp a ⊆ supp b (checked by the callers)."""
    inside = mpmath.fsum(ai * _k3(li) for ai, s, li in zip(a_p, a_support, ell) if s)
    outside = mpmath.fsum(bi for bi, s in zip(b_p, a_support) if not s)
    return inside + outside


def _reverse_kl_row(q: _Row, p: _Row, r):
    """KL(q‖p), ℓ = log q − log p on supp q."""
    return _kl_terms(q.p, q.support, p.p, [ri if s else None for ri, s in zip(r, q.support)])


def _forward_kl_row(q: _Row, p: _Row, r):
    """KL(p‖q), ℓ = log p − log q on supp p."""
    return _kl_terms(p.p, p.support, q.p, [-ri if s else None for ri, s in zip(r, p.support)])


def _cross_entropy_row(q: _Row, p: _Row):
    """−Σ_{p_i>0} p_i log q_i = KL(p‖q) + H(p): every term is ≥ 0 (log q ≤ 0), so the sum
    loses nothing. Requires supp p ⊆ supp q (checked by the callers)."""
    return mpmath.fsum(-pi * li for pi, li, s in zip(p.p, q.logp, p.support) if s)


def _soft_row(q: _Row, p: _Row, r, soft_term: str):
    """The teacher-weighted soft term: KL(p‖q) ('kl') or −Σ p log q ('cross_entropy')."""
    return _cross_entropy_row(q, p) if soft_term == "cross_entropy" else _forward_kl_row(q, p, r)


def _minus_mean(q: _Row, x):
    """x_j − Σ_i q_i x_i on supp q (None elsewhere), without cancellation at the top token k:
    x_k − Σ_i q_i x_i = Σ_{i≠k} q_i (x_k − x_i) is of the size of 1 − q_k (e^{−1e4} at
    logits ±1e4), which subtracting a separately computed mean would round away."""
    k = q.k
    delta = mpmath.fsum(qi * (x[k] - xi) for i, (qi, xi, s) in enumerate(zip(q.p, x, q.support))
                        if s and i != k)
    return [None if not s else (delta if j == k else (xj - x[k]) + delta)
            for j, (xj, s) in enumerate(zip(x, q.support))]


def _q_minus_p(q: _Row, p: _Row, r):
    """q_j − p_j without cancellation: p_j (e^{r_j} − 1) where both are possible."""
    out = []
    for qj, pj, a, b, rj in zip(q.p, p.p, q.support, p.support, r):
        out.append(pj * mpmath.expm1(rj) if a and b else (qj if a else -pj))
    return out


# ---------------------------------------------------------------------------------------------
# Input handling
# ---------------------------------------------------------------------------------------------

def _logits(name: str, x, rank=None) -> np.ndarray:
    a = mp.array(name, x, allow_neg_inf=True)
    if rank is not None:
        validate.rank(name, a.shape, rank)
    elif a.ndim < 1:
        validate.fail(name, "expected at least 1 dimension (the vocabulary axis), got a scalar")
    if a.shape[-1] == 0:
        validate.fail(name, f"the vocabulary axis must not be empty, got shape {a.shape}")
    return a


def _rows(name: str, a: np.ndarray, T) -> list[_Row]:
    rows = []
    for idx in np.ndindex(a.shape[:-1]):
        z = list(a[idx])
        if all(zi == mp.NEG_INF for zi in z):
            validate.fail(name, f"row {idx} is -inf everywhere (no possible token)")
        rows.append(_Row(z, T))
    return rows


def _temperature(temperature):
    return mp.mpf(validate.temperature(temperature))


def _pair(student_logits, teacher_logits, temperature, rank=None):
    zs = _logits("student_logits", student_logits, rank)
    ts = _logits("teacher_logits", teacher_logits, rank)
    validate.same_shape(student_logits=zs.shape, teacher_logits=ts.shape)
    T = _temperature(temperature)
    return zs.shape, T, _rows("student_logits", zs, T), _rows("teacher_logits", ts, T)


def _require_support(name: str, inner: list[_Row], outer: list[_Row], lead: tuple, what: str):
    """supp inner ⊆ supp outer row by row, else the divergence is +inf: reject, naming ``name``
    (the argument whose −inf makes it infinite)."""
    for idx, a, b in zip(np.ndindex(lead), inner, outer):
        for v, (sa, sb) in enumerate(zip(a.support, b.support)):
            if sa and not sb:
                validate.fail(name, f"-inf at row {idx}, token {v}, where the other distribution "
                                    f"has probability > 0: {what} is infinite (support mismatch)")


def _cotangent(cotangent, shape: tuple) -> np.ndarray:
    ct = mp.array("cotangent", cotangent)
    validate.same_shape(output=shape, cotangent=ct.shape)
    return ct


def _per_row(lead: tuple, values) -> np.ndarray:
    out = np.empty(lead, dtype=object)
    for idx, v in zip(np.ndindex(lead), values):
        out[idx] = v
    return out


def _stack(shape: tuple, rows) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    for idx, row in zip(np.ndindex(shape[:-1]), rows):
        out[idx] = np.array(row, dtype=object)
    return out


# ---------------------------------------------------------------------------------------------
# distill.softmax
# ---------------------------------------------------------------------------------------------

@mp.exact
def softmax(logits, temperature: float = 1.0):
    """Tempered softmax q_i = exp(z_i/T) / Σ_j exp(z_j/T) along the last axis.

    Hinton, Vinyals & Dean 2015, "Distilling the Knowledge in a Neural Network", §2;
    [reading-math-3] §"Destilación clásica" ((2,0) → (0.88, 0.12) at T=1, (0.73, 0.27) at T=2).
    Returns probs with the shape of ``logits``; a −inf logit has probability 0.
    """
    z = _logits("logits", logits)
    T = _temperature(temperature)
    return _stack(z.shape, [r.p for r in _rows("logits", z, T)])


@mp.exact
def softmax_vjp(cotangent, logits, temperature: float = 1.0):
    """∂/∂z_j Σ_i c_i q_i = q_j (c_j − Σ_i c_i q_i) / T   (∂q_i/∂z_j = q_i(δ_ij − q_j)/T)."""
    z = _logits("logits", logits)
    T = _temperature(temperature)
    ct = _cotangent(cotangent, z.shape)
    grads = []
    for idx, r in zip(np.ndindex(z.shape[:-1]), _rows("logits", z, T)):
        centred = _minus_mean(r, list(ct[idx]))
        grads.append([qj * cj / T if s else mp.ZERO for qj, cj, s in zip(r.p, centred, r.support)])
    return {"logits": _stack(z.shape, grads)}


# ---------------------------------------------------------------------------------------------
# distill.hinton
# ---------------------------------------------------------------------------------------------

def _labels(labels, n: int, v: int) -> np.ndarray:
    try:
        y = mp.int_array("labels", labels)
    except validate.InputError:
        raise
    except (TypeError, ValueError, OverflowError):  # e.g. strings or None, which float() refuses
        validate.fail("labels", f"expected integers, got {labels!r}")
    validate.rank("labels", y.shape, 1)
    validate.same_shape(**{"student_logits rows": (n,)}, labels=y.shape)
    for i, yi in enumerate(y):
        if not 0 <= yi < v:
            validate.fail("labels", f"label {int(yi)} at row {i} is outside [0, {v})")
    return y


def _hinton_prepare(student_logits, teacher_logits, labels, temperature, alpha, t2_scale, soft_term):
    shape, T, qT, pT = _pair(student_logits, teacher_logits, temperature, rank=2)
    validate.soft_term(soft_term)
    n, v = shape
    if n == 0:
        validate.fail("student_logits", "needs at least one row (the loss is a mean over rows)")
    y = _labels(labels, n, v)
    a = mp.mpf(validate.alpha(alpha))
    s = T * T if validate.t2_scale(t2_scale) else mp.ONE
    zs = [r.z for r in qT]
    q1 = qT if T == 1 else [_Row(z, mp.ONE) for z in zs]
    for i, (r, yi) in enumerate(zip(q1, y)):
        if not r.support[yi]:
            validate.fail("student_logits", f"-inf at the label (row {i}, token {int(yi)}): "
                                            "the cross-entropy term is infinite")
    _require_support("student_logits", pT, qT, (n,), "KL(p‖q)")
    r = [_log_ratio(qi, pi, T) for qi, pi in zip(qT, pT)]
    return shape, T, y, a, s, q1, qT, pT, r


@mp.exact
def hinton(student_logits, teacher_logits, labels, temperature: float = 1.0, alpha: float = 0.5,
           t2_scale: bool = True, soft_term: str = "kl"):
    """Hinton distillation loss, mean over the N rows:

        L = 1/N Σ_n [ (1−α)(−log q_{y_n}^{(1)}) + α·s·KL(p^{(T)} ‖ q^{(T)}) ],  s = T² if t2_scale else 1.

    ``soft_term='cross_entropy'``: the soft term is −Σ_v p_v^{(T)} log q_v^{(T)} = KL + H(p^{(T)}),
    as Hinton et al. §2 write it ("the cross entropy with the soft targets"); the gradient is the
    same (H(p) does not depend on z).

    Hinton et al. 2015 §2 (soft targets at temperature T, hard-label term at T = 1, the soft
    term multiplied by T² "to keep the relative contributions … roughly unchanged");
    [reading-math-3] §"Destilación clásica" (λ = ``alpha``; the KL form differs from the paper's
    cross-entropy by a teacher-only constant, same gradient). Returns the scalar loss.

    Rejected (InputError naming ``student_logits``): a −inf student logit at the label, or
    at a token where the teacher has p > 0; both make the loss infinite. They are rejected
    whatever α is (also α = 1 or α = 0 where that term's weight is 0), so a vector never asks
    an implementation to evaluate 0·∞.
    """
    shape, T, y, a, s, q1, qT, pT, r = _hinton_prepare(student_logits, teacher_logits, labels,
                                                   temperature, alpha, t2_scale, soft_term)
    total = []
    for q1i, qi, pi, ri, yi in zip(q1, qT, pT, r, y):
        kl = _soft_row(qi, pi, ri, soft_term)
        total.append((1 - a) * (-q1i.logp[yi]) + a * s * kl)
    return mpmath.fsum(total) / shape[0]


@mp.exact
def hinton_vjp(cotangent, student_logits, teacher_logits, labels, temperature: float = 1.0,
               alpha: float = 0.5, t2_scale: bool = True, soft_term: str = "kl"):
    """Gradient of c·L with respect to the student logits (c = the scalar cotangent):

        ∂L/∂z_{n,j} = [ (1−α)(q_{n,j}^{(1)} − [j = y_n]) + α·s·(q_{n,j}^{(T)} − p_{n,j}^{(T)}) / T ] / N.

    Cross-entropy: g = −e_y, so ∂/∂z_j = q_j^{(1)} − δ_{jy}. Forward KL(p‖q): g_i = −p_i
    (Σ g = −1), so ∂/∂z_j = (q_j − p_j)/T. With s = T² the soft term is α·T·(q − p), which
    tends to α(z − t − mean)/V as T → ∞ (Hinton §2.1): its scale no longer shrinks with T.
    Both ``soft_term`` values have this gradient (they differ by H(p), constant in z).
    """
    shape, T, y, a, s, q1, qT, pT, r = _hinton_prepare(student_logits, teacher_logits, labels,
                                                   temperature, alpha, t2_scale, soft_term)
    n = shape[0]
    c = _cotangent(cotangent, ()).item()
    grads = []
    for q1i, qi, pi, ri, yi in zip(q1, qT, pT, r, y):
        ce = list(q1i.p)
        ce[yi] = mpmath.expm1(q1i.logp[yi])  # q_y − 1 without cancellation when q_y ≈ 1
        diff = _q_minus_p(qi, pi, ri)
        grads.append([c * ((1 - a) * cej + a * s * dj / T) / n for cej, dj in zip(ce, diff)])
    return {"student_logits": _stack(shape, grads)}


# ---------------------------------------------------------------------------------------------
# distill.token_kl
# ---------------------------------------------------------------------------------------------

def _token_kl_rows(student_logits, teacher_logits, direction, temperature, soft_term):
    shape, T, q, p = _pair(student_logits, teacher_logits, temperature)
    validate.direction(direction)
    validate.soft_term(soft_term, direction)
    lead = shape[:-1]
    if direction == "reverse":
        _require_support("teacher_logits", q, p, lead, "reverse KL(q‖p)")
    else:
        _require_support("student_logits", p, q, lead, "forward KL(p‖q)")
    r = [_log_ratio(qi, pi, T) for qi, pi in zip(q, p)]
    if direction == "reverse":
        kls = [_reverse_kl_row(qi, pi, ri) for qi, pi, ri in zip(q, p, r)]
    else:
        kls = [_soft_row(qi, pi, ri, soft_term) for qi, pi, ri in zip(q, p, r)]
    return shape, T, q, p, r, kls


@mp.exact
def token_kl(student_logits, teacher_logits, direction: str = "reverse", temperature: float = 1.0,
             soft_term: str = "kl"):
    """Full-vocabulary KL between student q and teacher p at the next token, per row:

        reverse:  kl = Σ_v q_v log(q_v / p_v)   (student first)
        forward:  kl = Σ_v p_v log(p_v / q_v)

    with q = softmax(z/T), p = softmax(t/T) and no T² factor. Reverse: MiniLLM (Gu et al. 2024)
    §2.1 eq. 1; DeepSeek-V4 §5.1.2 eq. 29; [reading-math-3] §"De la KL de secuencia a la KL de
    token" (d_t = Σ_v q_t(v) log(q_t(v)/p_t(v)), ≈ 0.157 in its example). 0·log 0 = 0; a
    token possible under the weighting distribution but impossible under the other makes the
    KL infinite and is rejected (reverse: names ``teacher_logits``; forward: ``student_logits``).
    ``soft_term='cross_entropy'`` (forward only): kl = −Σ_v p_v log q_v = KL(p‖q) + H(p), the
    form of Hinton et al. 2015 §2; the reverse direction has none (rejected, naming ``soft_term``).
    Returns kl with shape ``student_logits.shape[:-1]``.
    """
    shape, _, _, _, _, kls = _token_kl_rows(student_logits, teacher_logits, direction, temperature, soft_term)
    return _per_row(shape[:-1], kls)


@mp.exact
def token_kl_vjp(cotangent, student_logits, teacher_logits, direction: str = "reverse",
                 temperature: float = 1.0, soft_term: str = "kl"):
    """Gradient of Σ c·kl with respect to the student logits, per row:

        reverse:  ∂kl/∂z_j = q_j (ℓ_j − Σ_i q_i ℓ_i) / T,  ℓ = log q − log p   (g_i = q_i(ℓ_i + 1))
        forward:  ∂kl/∂z_j = (q_j − p_j) / T                                   (g_i = −p_i)

    An impossible student token (q_j = 0) gets gradient 0. The cross-entropy form has the
    forward gradient (it differs from KL(p‖q) by H(p), constant in z).
    """
    shape, T, q, p, r, _ = _token_kl_rows(student_logits, teacher_logits, direction, temperature, soft_term)
    ct = _cotangent(cotangent, shape[:-1])
    grads = []
    for idx, qi, pi, ri in zip(np.ndindex(shape[:-1]), q, p, r):
        c = ct[idx]
        if direction == "reverse":
            centred = _minus_mean(qi, ri)  # ℓ_j − Σ q_i ℓ_i = ℓ_j − kl
            g = [c * qj * lj / T if s else mp.ZERO for qj, lj, s in zip(qi.p, centred, qi.support)]
        else:
            g = [c * d / T for d in _q_minus_p(qi, pi, ri)]
        grads.append(g)
    return {"student_logits": _stack(shape, grads)}


# ---------------------------------------------------------------------------------------------
# distill.symmetric_kl
# ---------------------------------------------------------------------------------------------

def _symmetric_prepare(student_logits, teacher_logits, forward_weight, temperature):
    shape, T, q, p = _pair(student_logits, teacher_logits, temperature)
    w = mp.mpf(validate.forward_weight(forward_weight))
    lead = shape[:-1]
    # Both directions must be finite whatever w is (as Hinton's terms): a vector never asks
    # for 0·∞ at w ∈ {0, 1}.
    _require_support("student_logits", p, q, lead, "forward KL(p‖q)")
    _require_support("teacher_logits", q, p, lead, "reverse KL(q‖p)")
    r = [_log_ratio(qi, pi, T) for qi, pi in zip(q, p)]
    return shape, T, q, p, r, w


@mp.exact
def symmetric_kl(student_logits, teacher_logits, forward_weight: float = 0.5, temperature: float = 1.0):
    """Weighted symmetric KL between teacher p and student q, per row (both at T):

        kl = w·KL(p ‖ q) + (1−w)·KL(q ‖ p),   w ∈ [0, 1].

    Jeffreys' symmetrised divergence KL(p‖q) + KL(q‖p) (Jeffreys 1946) with weights; w = 1/2 is
    half of it. DistiLLM (Ko et al. 2024, arXiv 2402.03898) uses it as a baseline; its repository
    (jongwooko/distillm, distillm/losses.py, ``symmetric_kl``) computes
    (1−λ)·forward + λ·reverse with λ = 0.9, i.e. w = 0.1 — and its ``forward_kl`` is the
    cross-entropy −Σ p log q, not the KL (a difference of H(p) per row: see docs/distill.md).
    No T² factor. Both KL terms must be finite (supp p = supp q), whatever w is: a mismatch is
    rejected naming the argument whose −inf makes one of them infinite.
    Returns kl with shape ``student_logits.shape[:-1]``.
    """
    shape, _, q, p, r, w = _symmetric_prepare(student_logits, teacher_logits, forward_weight, temperature)
    return _per_row(shape[:-1], [w * _forward_kl_row(qi, pi, ri) + (1 - w) * _reverse_kl_row(qi, pi, ri)
                                 for qi, pi, ri in zip(q, p, r)])


@mp.exact
def symmetric_kl_vjp(cotangent, student_logits, teacher_logits, forward_weight: float = 0.5,
                     temperature: float = 1.0):
    """Gradient of Σ c·kl with respect to the student logits, per row:

        ∂kl/∂z_j = [ w·(q_j − p_j) + (1−w)·q_j (ℓ_j − KL(q‖p)) ] / T,   ℓ = log q − log p,

    the forward and reverse gradients of ``token_kl_vjp``, weighted.
    """
    shape, T, q, p, r, w = _symmetric_prepare(student_logits, teacher_logits, forward_weight, temperature)
    ct = _cotangent(cotangent, shape[:-1])
    grads = []
    for idx, qi, pi, ri in zip(np.ndindex(shape[:-1]), q, p, r):
        c = ct[idx]
        centred = _minus_mean(qi, ri)
        diff = _q_minus_p(qi, pi, ri)
        grads.append([c * (w * dj + (1 - w) * (qj * lj if s else mp.ZERO)) / T
                      for dj, qj, lj, s in zip(diff, qi.p, centred, qi.support)])
    return {"student_logits": _stack(shape, grads)}


# ---------------------------------------------------------------------------------------------
# distill.generalized_jsd
# ---------------------------------------------------------------------------------------------

def _jsd_row(q: _Row, p: _Row, r, beta):
    """β·KL(p‖m) + (1−β)·KL(q‖m), m = βp + (1−β)q, 0 < β < 1; also ℓ^q = log q − log m
    for the gradient.

    log m = logsumexp(log p + log β, log q + log(1−β)), taken relative to log q (resp. log p):
        log q − log m = −log1p(β·(e^{−r} − 1)),   log p − log m = −log1p((1−β)·(e^{r} − 1)),
    r = log q − log p, so the small differences near q ≈ p or β → 0, 1 come out of log1p/expm1
    instead of a subtraction; where p = 0, log q − log m = −log(1−β); where q = 0,
    log p − log m = −log β (m > 0 wherever p or q is)."""
    one_b = 1 - beta
    lq_m, lp_m = [], []
    for qs, ps, ri in zip(q.support, p.support, r):
        if qs and ps:
            lq_m.append(-mpmath.log1p(beta * mpmath.expm1(-ri)))
            lp_m.append(-mpmath.log1p(one_b * mpmath.expm1(ri)))
        else:
            lq_m.append(-mpmath.log1p(-beta) if qs else None)
            lp_m.append(-mpmath.log(beta) if ps else None)
    m_where_q0 = [beta * pj for pj in p.p]      # m on supp p \ supp q
    m_where_p0 = [one_b * qj for qj in q.p]     # m on supp q \ supp p
    kl_qm = _kl_terms(q.p, q.support, m_where_q0, lq_m)
    kl_pm = _kl_terms(p.p, p.support, m_where_p0, lp_m)
    return beta * kl_pm + one_b * kl_qm, lq_m


def _shifted_log_ratios(ell, r, beta):
    """ℓ = log q − log m up to a constant, for centring (ℓ_j − Σ q_i ℓ_i ignores a shift).

    Where some token has q ≫ p (r > 1), ℓ_j = −log(1−β) − log1p(β/(1−β)·e^{−r_j}) is within
    e^{−r_j} of the constant −log(1−β), and those small parts are what the centred values of a
    near-one-hot row are made of (T = 1e-3: e^{−244} beside ℓ ≈ log 2): they are kept by dropping
    the constant, ε_j = −log1p(β/(1−β)·e^{−r_j}) (0 where p_j = 0). Rows with every |r_j| ≤ 1 keep
    ℓ, whose log1p form is exact near q ≈ p."""
    if all(ri is None or abs(ri) <= 1 for ri in r):
        return ell
    a = beta / (1 - beta)
    return [None if lj is None else (mp.ZERO if ri is None else -mpmath.log1p(a * mpmath.exp(-ri)))
            for lj, ri in zip(ell, r)]


def _jsd_prepare(student_logits, teacher_logits, beta, temperature, endpoints):
    shape, T, q, p = _pair(student_logits, teacher_logits, temperature)
    b = mp.mpf(validate.jsd_beta(beta))
    validate.endpoints(endpoints)
    lead = shape[:-1]
    # 'kl' replaces the endpoints by the divergences TRL/Liger compute there; both can be +inf.
    if endpoints == "kl" and b == 0:
        _require_support("student_logits", p, q, lead, "beta=0 with endpoints='kl' → KL(p‖q)")
    if endpoints == "kl" and b == 1:
        _require_support("teacher_logits", q, p, lead, "beta=1 with endpoints='kl' → KL(q‖p)")
    r = [_log_ratio(qi, pi, T) for qi, pi in zip(q, p)]
    return shape, T, q, p, r, b


@mp.exact
def generalized_jsd(student_logits, teacher_logits, beta: float = 0.5, temperature: float = 1.0,
                    endpoints: str = "limit"):
    """Generalized Jensen–Shannon divergence, per row (p teacher, q student, both at T):

        jsd = β·KL(p ‖ m) + (1−β)·KL(q ‖ m),   m = β·p + (1−β)·q,   β ∈ [0, 1].

    Agarwal et al. 2024 (GKD, "On-Policy Distillation of Language Models") §3, generalized JSD
    (eq. 2 there); the form TRL's GKDTrainer.generalized_jsd_loss computes. It is finite for
    every pair of rows (KL(p‖m) ≤ −log β) and tends to 0 as β → 0 or β → 1.
    ``endpoints='limit'``: the continuous formula, so β = 0 and β = 1 give 0.
    ``endpoints='kl'``: β = 0 gives KL(p‖q) (forward) and β = 1 gives KL(q‖p) (reverse), as
    TRL and Liger-Kernel special-case them (those can be infinite: rejected, naming the
    argument whose −inf causes it). For 0 < β < 1 the two agree.
    Returns jsd with shape ``student_logits.shape[:-1]``.
    """
    shape, T, q, p, r, b = _jsd_prepare(student_logits, teacher_logits, beta, temperature, endpoints)
    if b == 0 or b == 1:
        if endpoints == "limit":
            return _per_row(shape[:-1], [mp.ZERO] * len(q))
        kl_row = _forward_kl_row if b == 0 else _reverse_kl_row
        return _per_row(shape[:-1], [kl_row(qi, pi, ri) for qi, pi, ri in zip(q, p, r)])
    return _per_row(shape[:-1], [_jsd_row(qi, pi, ri, b)[0] for qi, pi, ri in zip(q, p, r)])


@mp.exact
def generalized_jsd_vjp(cotangent, student_logits, teacher_logits, beta: float = 0.5,
                        temperature: float = 1.0, endpoints: str = "limit"):
    """Gradient of Σ c·jsd with respect to the student logits, per row, for 0 < β < 1:

        ∂jsd/∂z_j = (1−β) q_j (ℓ_j − Σ_i q_i ℓ_i) / T,   ℓ = log q − log m.

    Derivation: with ∂m_i/∂s_i = (1−β) q_i, the terms through m sum to
    −(1−β) q_i (β p_i + (1−β) q_i)/m_i = −(1−β) q_i, which cancels the +(1−β) q_i from
    ∂(q log q)/∂s, leaving g_i = (1−β) q_i ℓ_i (so Σ_i g_i = (1−β) KL(q‖m)); then the chain
    rule of the module docstring. 'limit' at β ∈ {0, 1}: 0 (the formula above at those β).
    'kl' at β = 0 / β = 1: the forward / reverse ``token_kl_vjp``.
    """
    shape, T, q, p, r, b = _jsd_prepare(student_logits, teacher_logits, beta, temperature, endpoints)
    lead = shape[:-1]
    ct = _cotangent(cotangent, lead)
    if (b == 0 or b == 1) and endpoints == "kl":
        return token_kl_vjp(cotangent, student_logits, teacher_logits,
                            "forward" if b == 0 else "reverse", temperature)
    if b == 0 or b == 1:
        return {"student_logits": mp.zeros(shape)}
    grads = []
    for idx, qi, pi, ri in zip(np.ndindex(lead), q, p, r):
        _, ell = _jsd_row(qi, pi, ri, b)
        centred = _minus_mean(qi, _shifted_log_ratios(ell, ri, b))  # ℓ_j − Σ q_i ℓ_i = ℓ_j − KL(q‖m)
        c = ct[idx]
        grads.append([c * (1 - b) * qj * lj / T if s else mp.ZERO
                      for qj, lj, s in zip(qi.p, centred, qi.support)])
    return {"student_logits": _stack(shape, grads)}


# ---------------------------------------------------------------------------------------------
# distill.skew_kl
# ---------------------------------------------------------------------------------------------

def _log_p_over_mix(q: _Row, p: _Row, r, w):
    """log p − log m on supp p for m = w·p + (1−w)·q, 0 < w ≤ 1, r = log q − log p:
    −log1p((1−w)·expm1(r)) where both are possible (small near q ≈ p, from log1p), −log w
    where q = 0 (m = w·p)."""
    return [(-mpmath.log1p((1 - w) * mpmath.expm1(ri)) if qs else -mpmath.log(w)) if ps else None
            for qs, ps, ri in zip(q.support, p.support, r)]


def _skew_prepare(student_logits, teacher_logits, alpha, direction, temperature):
    shape, T, q, p = _pair(student_logits, teacher_logits, temperature)
    a = mp.mpf(validate.skew_alpha(alpha))
    validate.direction(direction)
    r = [_log_ratio(qi, pi, T) for qi, pi in zip(q, p)]
    return shape, T, q, p, r, a


def _skew_forward_row(q: _Row, p: _Row, r, a):
    """KL(p‖m), m = αp + (1−α)q, and x = p/m on supp p (0 where p = 0); m = (1−α)q where p = 0."""
    lp_m = _log_p_over_mix(q, p, r, a)
    kl = _kl_terms(p.p, p.support, [(1 - a) * qj for qj in q.p], lp_m)
    return kl, lp_m


def _skew_reverse_row(q: _Row, p: _Row, r, a):
    """KL(q‖m'), m' = αq + (1−α)p (the forward form with q and p swapped), and ℓ = log q − log m'."""
    lq_m = _log_p_over_mix(p, q, [None if ri is None else -ri for ri in r], a)
    kl = _kl_terms(q.p, q.support, [(1 - a) * pj for pj in p.p], lq_m)
    return kl, lq_m


@mp.exact
def skew_kl(student_logits, teacher_logits, alpha: float = 0.1, direction: str = "forward",
            temperature: float = 1.0):
    """Skew KL divergence per row (p teacher, q student, both softmax(·/T)):

        forward (α-SKL):  kl = KL(p ‖ α·p + (1−α)·q) = Σ_v p_v log(p_v / (α p_v + (1−α) q_v))
        reverse (α-SRKL): kl = KL(q ‖ α·q + (1−α)·p) = Σ_v q_v log(q_v / (α q_v + (1−α) p_v))

    DistiLLM (Ko, Kim, Chen, Yun 2024, arXiv 2402.03898) §3, the skew KL and skew reverse KL
    (equation numbers not checked against the paper); α = 0.1 is the default of the official
    code (distillm/losses.py, ``lam=0.1``). 0 < α ≤ 1: the mixture is positive wherever the
    first argument is, so the divergence is finite for every pair of rows (at most −log α);
    α = 1 gives 0. No T² factor. Returns kl with shape ``student_logits.shape[:-1]``.
    """
    shape, _, q, p, r, a = _skew_prepare(student_logits, teacher_logits, alpha, direction, temperature)
    row = _skew_forward_row if direction == "forward" else _skew_reverse_row
    return _per_row(shape[:-1], [row(qi, pi, ri, a)[0] for qi, pi, ri in zip(q, p, r)])


def _forward_skew_weights(q: _Row, r, lp_m, a):
    """x_j = p_j/m_j on supp q (0 where p_j = 0), or x_j − 1/α when the top token has
    (1−α)e^{r_k} ≤ α (there p dominates m and x ≈ 1/α, so the differences x_j − x_k of such
    tokens are kept as differences of the small parts): x − 1/α = −((1−α)/α)·e^{r + log p − log m}
    where both are possible, −1/α where p = 0. Centring ignores the constant."""
    k = q.k
    near_top = r[k] is not None and (1 - a) * mpmath.exp(r[k]) <= a
    out = []
    for qs, ri, lj in zip(q.support, r, lp_m):
        if not qs:
            out.append(None)
        elif not near_top:
            out.append(mp.ZERO if lj is None else mpmath.exp(lj))
        else:
            out.append(-1 / a if lj is None else -(1 - a) / a * mpmath.exp(ri + lj))
    return out


def _reverse_skew_weights(q: _Row, r, a):
    """y_j = ℓ_j − α·e^{ℓ_j} + 1 up to the constant −log α, ℓ = log q − log m': with
    u = log(α q/m') = −log1p(((1−α)/α)·e^{−r}) (0 where p = 0), y + log α = −(e^u − 1 − u) =
    −k3(−u) (k3(x) = x + e^{−x} − 1), whose small values (q ≫ p, u → 0) keep their digits."""
    b = (1 - a) / a
    return [None if not qs else (mp.ZERO if ri is None else -_k3(mpmath.log1p(b * mpmath.exp(-ri))))
            for qs, ri in zip(q.support, r)]


@mp.exact
def skew_kl_vjp(cotangent, student_logits, teacher_logits, alpha: float = 0.1, direction: str = "forward",
                temperature: float = 1.0):
    """Gradient of Σ c·kl with respect to the student logits, per row (s = log q):

        forward:  g_i = ∂kl/∂s_i = −(1−α) q_i p_i/m_i         ⇒ ∂kl/∂z_j = −(1−α) q_j (x_j − Σ_i q_i x_i)/T,  x = p/m
        reverse:  g_i = q_i (ℓ_i + 1 − α q_i/m'_i)             ⇒ ∂kl/∂z_j = q_j (y_j − Σ_i q_i y_i)/T,  y = ℓ − α e^ℓ

    (m = αp + (1−α)q, m' = αq + (1−α)p, ℓ = log q − log m'; through m', ∂(−q_i log m'_i)/∂s_i
    contributes −α q_i²/m'_i). An impossible student token gets gradient 0; α = 1 gives 0.
    """
    shape, T, q, p, r, a = _skew_prepare(student_logits, teacher_logits, alpha, direction, temperature)
    ct = _cotangent(cotangent, shape[:-1])
    grads = []
    for idx, qi, pi, ri in zip(np.ndindex(shape[:-1]), q, p, r):
        c = ct[idx]
        if direction == "forward":
            _, lp_m = _skew_forward_row(qi, pi, ri, a)
            centred = _minus_mean(qi, _forward_skew_weights(qi, ri, lp_m, a))
            g = [-c * (1 - a) * qj * xj / T if s else mp.ZERO for qj, xj, s in zip(qi.p, centred, qi.support)]
        else:
            centred = _minus_mean(qi, _reverse_skew_weights(qi, ri, a))
            g = [c * qj * yj / T if s else mp.ZERO for qj, yj, s in zip(qi.p, centred, qi.support)]
        grads.append(g)
    return {"student_logits": _stack(shape, grads)}


# ---------------------------------------------------------------------------------------------
# distill.tvd
# ---------------------------------------------------------------------------------------------

# A token whose |log q − log p| is below this counts as a tie q = p (sign 0). Exact ties of
# binary64 inputs come out of ``_log_ratio`` as a rounding residue of the working precision
# (c = log(Z_q/Z_p) is not formed exactly), about 1e-50; an actual difference of two binary64
# rows' log-probabilities that small is not expected, and no vector has one.
TIE_RESOLUTION = mpmath.mpf(10) ** -40


def _tvd_rows(student_logits, teacher_logits, temperature):
    shape, T, q, p = _pair(student_logits, teacher_logits, temperature)
    rs = [_log_ratio(qi, pi, T) for qi, pi in zip(q, p)]
    diffs = [_q_minus_p(qi, pi, ri) for qi, pi, ri in zip(q, p, rs)]
    signs = [[mp.ZERO if (ri is not None and abs(ri) < TIE_RESOLUTION) else mp.mpf(mpmath.sign(dj))
              for ri, dj in zip(r, d)] for r, d in zip(rs, diffs)]
    return shape, T, q, diffs, signs


@mp.exact
def tvd(student_logits, teacher_logits, temperature: float = 1.0):
    """Total variation distance per row (p teacher, q student, both softmax(·/T)):

        tvd = ½ Σ_v |q_v − p_v|   (∈ [0, 1]; 0 iff q = p).

    The definition of the total variation distance between two distributions on a finite set;
    the form Liger-Kernel 0.8.5 ops/tvd.py computes (``0.5 * tl.abs(p - q)``) and DistiLLM's
    code (distillm/losses.py ``tv_distance``). q − p is p·expm1(log q − log p) (no
    cancellation). Returns tvd with shape ``student_logits.shape[:-1]``.
    """
    shape, _, _, diffs, _ = _tvd_rows(student_logits, teacher_logits, temperature)
    return _per_row(shape[:-1], [mpmath.fsum(abs(d) for d in row) / 2 for row in diffs])


@mp.exact
def tvd_vjp(cotangent, student_logits, teacher_logits, temperature: float = 1.0):
    """Subgradient of Σ c·tvd with respect to the student logits, per row:

        ∂tvd/∂z_j = q_j (σ_j − Σ_i q_i σ_i) / (2T),   σ_i = sign(q_i − p_i),   sign(0) = 0

    (∂tvd/∂q_i = σ_i/2 and ∂q_i/∂z_j = q_i(δ_ij − q_j)/T). |x| is not differentiable at 0;
    sign(0) = 0 is the subgradient torch.abs's backward and Liger-Kernel's kernel
    (``tl.where(p == q, 0.0, …)``) take. Where q = p on a whole row every constant choice gives
    the same gradient, 0 (the centring removes it); a tie at a token where both are 0 does not
    enter (q_j = 0). A tie is |log q_j − log p_j| < ``TIE_RESOLUTION`` (1e-40).
    """
    shape, T, q, _, signs = _tvd_rows(student_logits, teacher_logits, temperature)
    ct = _cotangent(cotangent, shape[:-1])
    grads = []
    for idx, qi, sigma in zip(np.ndindex(shape[:-1]), q, signs):
        centred = _minus_mean(qi, sigma)
        grads.append([ct[idx] * qj * sj / (2 * T) if s else mp.ZERO
                      for qj, sj, s in zip(qi.p, centred, qi.support)])
    return {"student_logits": _stack(shape, grads)}


# ---------------------------------------------------------------------------------------------
# distill.sparse_kl
# ---------------------------------------------------------------------------------------------

def _log_total(xs):
    """log Σ e^{x} of finite values, shifted by the largest."""
    top = max(xs)
    return top + mpmath.log(mpmath.fsum(mpmath.exp(x - top) for x in xs))


def _sparse_prepare(student_logits, teacher_ids, teacher_logps, renormalize, temperature):
    """Rows of (student _Row, ids, teacher log-probs after the convention, student log-probs at
    the ids after the convention) — the log-probabilities of the two top-k distributions."""
    zs = _logits("student_logits", student_logits, rank=2)
    ids = mp.int_array("teacher_ids", teacher_ids)
    lps = mp.array("teacher_logps", teacher_logps, allow_neg_inf=True)
    validate.rank("teacher_ids", ids.shape, 2)
    validate.rank("teacher_logps", lps.shape, 2)
    validate.sparse_teacher(ids.tolist(), [[float(x) for x in row] for row in lps], zs.shape)
    validate.renormalize(renormalize)
    T = _temperature(temperature)
    if renormalize == "tail":
        validate.sparse_tail(ids.tolist(), [[float(x) for x in row] for row in lps],
                             [[zi != mp.NEG_INF for zi in row] for row in zs])
    rows = []
    for idx, q, irow, lrow in zip(np.ndindex(zs.shape[:-1]), _rows("student_logits", zs, T), ids, lps):
        irow = [int(i) for i in irow]
        lp = list(lrow)
        if renormalize in ("teacher", "both"):   # log p̃_k = log p_k − log Σ_j p_j (shifted: one live id gives 0 exactly)
            log_s = _log_total([x for x in lp if x != mp.NEG_INF])
            lp = [x - log_s for x in lp]
        lq = [q.logp[i] for i in irow]
        for k, (a, b) in enumerate(zip(lp, lq)):
            if a != mp.NEG_INF and b == mp.NEG_INF:
                validate.fail("student_logits", f"-inf at row {idx}, token {irow[k]}, where the teacher has "
                                                "probability > 0: the KL is infinite (support mismatch)")
        if renormalize == "both":   # log q̃_k = log q_k − log Σ_j q_j over the ids with p_j > 0
            log_s = _log_total([b for a, b in zip(lp, lq) if a != mp.NEG_INF])
            lq = [b - log_s if a != mp.NEG_INF else mp.NEG_INF for a, b in zip(lp, lq)]
        if renormalize == "tail":   # the (K+1)-th bucket, appended to both
            lp, lq = lp + [_tail_logp(lp)], lq + [_tail_logq(q, irow, lp)]
            irow = irow + [None]
        rows.append((q, irow, lp, lq))
    return zs.shape, T, rows


def _tail_logp(lp):
    """log p_tail = log(1 − Σ_k p_k) = log(−expm1(log Σ_k p_k)), −inf when Σ p = 1 (the one live
    log-probability is 0); ``validate.sparse_tail`` has refused Σ p > 1."""
    log_s = _log_total([a for a in lp if a != mp.NEG_INF])
    return mp.NEG_INF if log_s == 0 else mpmath.log(-mpmath.expm1(log_s))


def _tail_logq(q, irow, lp):
    """log q_tail = log Σ_j q_j over the tokens j off the ids with p_k > 0 (padding ids included),
    summed directly rather than as 1 − Σ_k q_{i_k}, which cancels when the ids hold nearly all of q;
    −inf when there is no such token of probability > 0 (then p_tail = 0: ``validate.sparse_tail``)."""
    held = {i for i, a in zip(irow, lp) if a != mp.NEG_INF}
    off = [x for j, x in enumerate(q.logp) if j not in held and x != mp.NEG_INF]
    return _log_total(off) if off else mp.NEG_INF


@mp.exact
def sparse_kl(student_logits, teacher_ids, teacher_logps, renormalize: str = "none", temperature: float = 1.0,
              t2_scale: bool = False):
    """Forward KL over a sparse (top-k) teacher, per row:

        kl = Σ_k p_k (log p_k − log q_{i_k}),   q = softmax(z/T),   p_k = exp(teacher_logps_k)

    at the teacher's ids i_k (distinct, K ≤ V), the sum over the tokens with p_k > 0 (an id
    whose log-probability is −inf is padding: it does not enter any sum, as in TRL). The way
    offline distillation stores a teacher (its top-k per position); Anshumann et al. 2025
    (arXiv 2503.16870, "Sparse Logit Sampling") show that this top-k estimate is biased.
    ``renormalize`` (the libraries' conventions):

    * 'none': p as stored and the student's full-vocabulary log q gathered at the ids, no tail
      term — verl 0.9.1 ``compute_forward_kl_topk`` (verl/trainer/distillation/fsdp/losses.py).
      With Σ p < 1 this is not a divergence: it can be negative;
    * 'teacher': p̃_k = p_k / Σ_j p_j, the student's full log q;
    * 'both': p̃ and q̃_k = q_{i_k} / Σ_j q_{i_j}, the KL of two distributions on the ids
      (≥ 0), Σ_j over the ids with p_j > 0 — TRL 1.16.0 IW-OPD with loss_add_tail=False
      (trl/experimental/iw_opd/iw_opd_trainer.py ``_compute_server_forward_kl_loss``);
    * 'tail': neither renormalised; a (K+1)-th bucket holds what lies off the ids with p_k > 0,
      p_tail = 1 − Σ_k p_k and q_tail = 1 − Σ_k q_{i_k} = Σ_{j off the ids} q_j, and kl is the
      forward KL over the K+1 buckets, Σ_k p_k (log p_k − log q_{i_k}) + p_tail (log p_tail −
      log q_tail) (≥ 0; with p_tail = 0 its term is 0). TRL 1.16.0's default (loss_add_tail=True):
      ``_add_tail_bucket`` in trl/experimental/server_distillation/server_distillation_trainer.py:72
      (used at 223 and 521; loss_add_tail default True, server_distillation_config.py:69), the same
      function in trl/experimental/iw_opd/iw_opd_trainer.py:99 (used at 1539), and ``add_tail_bucket``
      in trl/experimental/sdpo/loss_utils.py:44. No paper defines the bucket that we could find
      (the docstrings say it keeps the loss from vanishing at K = 1; verl's open RFC #7856,
      ``forward_kl_topk_tail``, not in 0.9.1, proposes the same coarse-grained KL; Dasgupta et al.
      2026, arXiv 2602.20816, a tail-aware divergence we could not check beyond its abstract).
      It is the KL of both distributions coarse-grained onto K+1 cells, so 0 ≤ kl ≤ KL(p‖q) for
      a true top-k (data-processing inequality). TRL clamps log Σ p and log Σ q at −1e-7,
      so its tail is never below ≈1e-7 — a property of that code, not of this objective. Σ p must
      be ≤ 1 exactly and, when p_tail > 0, q_tail > 0 (``validate.sparse_tail``).

    The temperature divides the student's logits only: the teacher's log-probabilities are
    stored already at whatever temperature the teacher was sampled with. ``t2_scale``: each row's
    kl times T², Hinton et al. 2015 §2's gradient-scale factor as axolotl's top-k KD loss applies it
    (src/axolotl/integrations/kd/topk_logprob/forward_kl.py ``loss``, "Multiply by T^2 (classical KD
    scaling)"); off by default, as verl and TRL. Returns kl [N].
    """
    shape, T, rows = _sparse_prepare(student_logits, teacher_ids, teacher_logps, renormalize, temperature)
    s = _sparse_scale(T, t2_scale)
    return _per_row(shape[:-1], [s * mpmath.fsum(mpmath.exp(a) * (a - b) for a, b in zip(lp, lq) if a != mp.NEG_INF)
                                 for _, _, lp, lq in rows])


def _sparse_scale(T, t2_scale):
    return T * T if validate.t2_scale(t2_scale) else mp.ONE


@mp.exact
def sparse_kl_vjp(cotangent, student_logits, teacher_ids, teacher_logps, renormalize: str = "none",
                  temperature: float = 1.0, t2_scale: bool = False):
    """Gradient of Σ c·kl with respect to the student logits, per row (P_j = p_k at j = i_k, 0
    off the ids; S = Σ_k p_k; g_i = ∂kl/∂log q_i = −P_i and the module's chain rule):

        'none':    ∂kl/∂z_j = (S·q_j − P_j) / T
        'teacher': ∂kl/∂z_j = (q_j − P̃_j) / T
        'both':    ∂kl/∂z_j = (q̃_j − P̃_j) / T on the ids with p > 0, 0 elsewhere (Σ p̃ = Σ q̃ = 1);
        'tail':    ∂kl/∂z_j = (q_j − P_j) / T on the ids with p > 0, q_j (1 − p_tail/q_tail) / T off
                   them (∂ log q_tail/∂z_j = (q_j·[j off] / q_tail − q_j)/T; p_tail/q_tail = 0 at p_tail = 0);

    each times T² under ``t2_scale``.
    """
    shape, T, rows = _sparse_prepare(student_logits, teacher_ids, teacher_logps, renormalize, temperature)
    scale = _sparse_scale(T, t2_scale)
    ct = _cotangent(cotangent, shape[:-1])
    grads = []
    for idx, (q, irow, lp, lq) in zip(np.ndindex(shape[:-1]), rows):
        p = [mpmath.exp(a) for a in lp]
        if renormalize == "both":
            g = [mp.ZERO] * shape[-1]
            for i, pk, b in zip(irow, p, lq):
                g[i] = mpmath.exp(b) - pk   # both 0 at a padding id (p_k = 0)
        elif renormalize == "tail":
            ratio = mp.ZERO if lp[-1] == mp.NEG_INF else mpmath.exp(lp[-1] - lq[-1])   # p_tail / q_tail
            g = [qj * (1 - ratio) for qj in q.p]
            for i, pk in zip(irow[:-1], p):
                if pk:
                    g[i] = q.p[i] - pk
        else:
            s = mpmath.fsum(p) if renormalize == "none" else mp.ONE
            g = [s * qj for qj in q.p]
            for i, pk in zip(irow, p):
                g[i] -= pk
        grads.append([scale * ct[idx] * gj / T for gj in g])
    return {"student_logits": _stack(shape, grads)}
