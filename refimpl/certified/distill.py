"""Distillation objectives in ball arithmetic: tempered softmax, Hinton's loss, token KL,
generalized JSD.

Notation: z student logits, t teacher logits, T temperature, q = softmax(z/T), p = softmax(t/T)
over the last axis (every leading axis is a batch axis); a logit of −inf is an impossible token
(probability exactly 0, gradient exactly 0).

Formulas (Hinton, Vinyals & Dean 2015 §2; MiniLLM §2.1 eq. 1; GKD, Agarwal et al. 2024 §3
eq. 2), written in forms whose *exact* zeros stay exact in ball arithmetic:

* log-probabilities: log q_i = x_i − logsumexp(x), x_i = (z_i − z_k)/T with k a largest logit
  (so x_k = 0 exactly and the log1p inside ``_ball.logsumexp`` keeps the mass of the others);
* log-ratios r_i = log q_i − log p_i = d_i − c with d_i = (z_i − t_i)/T and
  c = log(Z_q/Z_p) = log1p(Σ_{p_j>0} p_j·expm1(d_j) + Σ_{p_j=0<q_j} e^{z_j/T}/Z_p)
  (because Σ_{p_j>0} p_j = 1; expm1(d_j) = −1 where q_j = 0); identical rows give d = 0,
  c = 0 and r = 0 exactly;
* KL(a‖b) = Σ_{a_i>0} a_i·k3(ℓ_i) + Σ_{a_i=0} b_i with ℓ_i = log(a_i/b_i) and
  k3(ℓ) = ℓ + e^{−ℓ} − 1 ≥ 0 (equal to Σ a_i ℓ_i since Σ_{a_i>0} a_i e^{−ℓ_i} = Σ_{a_i>0} b_i),
  a term with a_i ≪ b_i as a_i·ℓ_i + b_i − a_i (``_kl``);
* the cross-entropy soft term −Σ_{p_i>0} p_i log q_i as KL(p‖q) + H(p), H(p) = −Σ_{p_i>0} p_i log p_i
  (terms ≥ 0; a constant of the teacher);
* generalized JSD with m = βp + (1−β)q: log q − log m = −log1p(β·expm1(−r)),
  log p − log m = −log1p((1−β)·expm1(r)); −log(1−β) where p = 0, −log β where q = 0.

Each is an identity between functions of z, so differentiating the written form (``_ball``'s
tape) gives the true gradient.
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.certified import _ball

__all__ = ["generalized_jsd", "generalized_jsd_vjp", "hinton", "hinton_vjp", "skew_kl", "skew_kl_vjp",
           "softmax", "softmax_vjp", "sparse_kl", "sparse_kl_vjp", "symmetric_kl", "symmetric_kl_vjp", "token_kl",
           "token_kl_vjp", "tvd", "tvd_vjp"]


class _Dist:
    """softmax(z/T) of one row: ``logp`` (None on impossible tokens) and ``p`` (0 there)."""

    def __init__(self, z, zf, T):
        self.z, self.support = z, [v is not None for v in z]
        k = max((i for i, s in enumerate(self.support) if s), key=lambda i: zf[i])
        top = _ball.value(z[k])
        self.x = [None if v is None else (v - top) / T for v in z]
        idx = [i for i, s in enumerate(self.support) if s]
        self.lse_shifted = _ball.logsumexp([self.x[i] for i in idx], idx.index(k))
        self.top = top
        self.logp = [None if x is None else x - self.lse_shifted for x in self.x]
        self.p = [_ball.ZERO if lp is None else _ball.exp(lp) for lp in self.logp]


def _log_ratio(q: _Dist, p: _Dist, T):
    """r_i = log q_i − log p_i where both tokens are possible (None elsewhere)."""
    if sum(q.support) == 1:
        # a one-hot student: log q = 0 on its token whatever z is (exactly 0, no dependence)
        return [qj - pj if a and b else None for qj, pj, a, b in zip(q.logp, p.logp, q.support, p.support)]
    c_direct = (q.top - p.top) / T + (_ball.value(q.lse_shifted) - _ball.value(p.lse_shifted))
    if abs(_ball.mid_float(c_direct)) <= 1:
        inner = _ball.fsum(pj * _ball.expm1((zj - tj) / T) if a else -pj   # e^{d_j} = 0 where q_j = 0
                           for zj, tj, pj, a, b in zip(q.z, p.z, p.p, q.support, p.support) if b)
        outside = _ball.fsum(_ball.exp((zj - p.top) / T - p.lse_shifted)
                             for zj, a, b in zip(q.z, q.support, p.support) if a and not b)
        c = _ball.log1p(inner + outside)
    else:
        c = (q.top - p.top) / T + (q.lse_shifted - p.lse_shifted)
    return [(zj - tj) / T - c if a and b else None
            for zj, tj, a, b in zip(q.z, p.z, q.support, p.support)]


def _kl(a_p, a_support, b_p, ell):
    """KL(a‖b) = Σ_{a_i>0} a_i·k3(ℓ_i) + Σ_{a_i=0} b_i (module docstring); ``b_p`` holds every b_i.

    Where a_i ≪ b_i (ℓ_i < −1) the term a_i·k3(ℓ_i) is written a_i·ℓ_i + b_i − a_i (the same
    function, as a_i·e^{−ℓ_i} = b_i): in the k3 form its derivative would be two terms of the
    size of b_i that cancel down to the size of a_i (e^{−2·10^7} at logits ±1e4 and T = 1e-3)."""
    terms = []
    for ai, bi, s, li in zip(a_p, b_p, a_support, ell):
        if not s:
            terms.append(bi)
        elif _ball.mid_float(li) < -1:
            terms.append(ai * li + (bi - ai))
        else:
            terms.append(ai * _ball.k3(li))
    return _ball.fsum(terms)


def _reverse_kl(q: _Dist, p: _Dist, r):
    return _kl(q.p, q.support, p.p, r)


def _forward_kl(q: _Dist, p: _Dist, r):
    return _kl(p.p, p.support, q.p, [None if ri is None else -ri for ri in r])


def _soft(q: _Dist, p: _Dist, r, soft_term):
    """KL(p‖q), or the cross-entropy −Σ_{p_i>0} p_i log q_i written as KL(p‖q) + H(p) (supp p ⊆
    supp q, checked by the callers): H(p) is a constant of the teacher, so the gradient is the
    KL's, which keeps its exact zeros (student = teacher) that −Σ p log q differentiated as
    q − p with q and p from different balls would not."""
    kl = _forward_kl(q, p, r)
    if soft_term == "cross_entropy":
        return kl + _ball.fsum(-(pi * li) for pi, li, s in zip(p.p, p.logp, p.support) if s)
    return kl


# --------------------------------------------------------------------------- inputs

def _logits(name, x, rank=None):
    b = _ball.balls(name, x, allow_neg_inf=True)
    shape = _ball.shape(b)
    if rank is not None:
        validate.rank(name, shape, rank)
    elif len(shape) < 1:
        validate.fail(name, "expected at least 1 dimension (the vocabulary axis), got a scalar")
    if shape[-1] == 0:
        validate.fail(name, f"the vocabulary axis must not be empty, got shape {shape}")
    return b, shape


def _row_lists(x, depth):
    """The rows (lists along the last axis) of nested lists of depth ``depth``, in C order."""
    if depth == 1:
        return [x]
    return [row for sub in x for row in _row_lists(sub, depth - 1)]


def _floats(x):
    return [float("-inf") if v is None else float(v.mid()) for v in x]


def _dists(name, rows, T):
    out = []
    for i, z in enumerate(rows):
        if all(v is None for v in z):
            validate.fail(name, f"row {i} is -inf everywhere (no possible token)")
        out.append(_Dist(z, _floats([_ball.value(v) if v is not None else None for v in z]), T))
    return out


def _regroup(values, shape):
    """Flat per-row values back into nested lists of the leading shape."""
    if not shape:
        return values[0]
    if len(shape) == 1:
        return list(values)
    size = len(values) // shape[0]
    return [_regroup(values[i * size:(i + 1) * size], shape[1:]) for i in range(shape[0])]


def _require_support(name, inner, outer, what):
    for i, (a, b) in enumerate(zip(inner, outer)):
        for v, (sa, sb) in enumerate(zip(a.support, b.support)):
            if sa and not sb:
                validate.fail(name, f"-inf at row {i}, token {v}, where the other distribution "
                                    f"has probability > 0: {what} is infinite (support mismatch)")


def _pair(diff, student_logits, teacher_logits, temperature, rank=None):
    zs, shape = _logits("student_logits", student_logits, rank)
    ts, tshape = _logits("teacher_logits", teacher_logits, rank)
    validate.same_shape(student_logits=shape, teacher_logits=tshape)
    T = _ball.ball(validate.temperature(temperature))
    zs = diff("student_logits", zs)
    q = _dists("student_logits", _row_lists(zs, len(shape)), T)
    p = _dists("teacher_logits", _row_lists(ts, len(shape)), T)
    return shape, T, q, p


# --------------------------------------------------------------------------- objectives

def _softmax(diff, logits, temperature=1.0):
    z, shape = _logits("logits", logits)
    T = _ball.ball(validate.temperature(temperature))
    z = diff("logits", z)
    rows = []
    for i, row in enumerate(_row_lists(z, len(shape))):
        if all(v is None for v in row):
            validate.fail("logits", f"row {i} is -inf everywhere (no possible token)")
        idx = [j for j, v in enumerate(row) if v is not None]
        k = max(idx, key=lambda j: _ball.mid_float(row[j]))
        probs = iter(_ball.softmax([row[j] / T for j in idx], idx.index(k)))
        rows.append([_ball.ZERO if v is None else next(probs) for v in row])
    return {"probs": _regroup(rows, shape[:-1])}


def _hinton(diff, student_logits, teacher_logits, labels, temperature=1.0, alpha=0.5, t2_scale=True,
            soft_term="kl"):
    shape, T, qT, pT = _pair(diff, student_logits, teacher_logits, temperature, rank=2)
    validate.soft_term(soft_term)
    n, v = shape
    if n == 0:
        validate.fail("student_logits", "needs at least one row (the loss is a mean over rows)")
    y = labels if isinstance(labels, list) else list(labels)
    validate.rank("labels", _ball.shape(y), 1)
    validate.same_shape(**{"student_logits rows": (n,)}, labels=(len(y),))
    for i, yi in enumerate(y):
        if isinstance(yi, bool) or not float(yi).is_integer():
            validate.fail("labels", f"expected integers, got {yi!r}")
        if not 0 <= yi < v:
            validate.fail("labels", f"label {int(yi)} at row {i} is outside [0, {v})")
    y = [int(yi) for yi in y]
    a = _ball.ball(validate.alpha(alpha))
    s = T * T if validate.t2_scale(t2_scale) else _ball.ONE
    one = _ball.ONE
    q1 = qT if T == 1 else [_Dist(d.z, _floats([None if e is None else _ball.value(e) for e in d.z]), one)
                            for d in qT]
    for i, (d, yi) in enumerate(zip(q1, y)):
        if not d.support[yi]:
            validate.fail("student_logits", f"-inf at the label (row {i}, token {yi}): "
                                            "the cross-entropy term is infinite")
    _require_support("student_logits", pT, qT, "KL(p‖q)")
    terms = []
    for d1, q, p, yi in zip(q1, qT, pT, y):
        r = _log_ratio(q, p, T)
        terms.append((1 - a) * (-d1.logp[yi]) + a * s * _soft(q, p, r, soft_term))
    return {"loss": _ball.fsum(terms) / n}


def _token_kl(diff, student_logits, teacher_logits, direction="reverse", temperature=1.0, soft_term="kl"):
    shape, T, q, p = _pair(diff, student_logits, teacher_logits, temperature)
    validate.direction(direction)
    validate.soft_term(soft_term, direction)
    if direction == "reverse":
        _require_support("teacher_logits", q, p, "reverse KL(q‖p)")
    else:
        _require_support("student_logits", p, q, "forward KL(p‖q)")
    if direction == "reverse":
        return {"kl": _regroup([_reverse_kl(qi, pi, _log_ratio(qi, pi, T)) for qi, pi in zip(q, p)], shape[:-1])}
    return {"kl": _regroup([_soft(qi, pi, _log_ratio(qi, pi, T), soft_term) for qi, pi in zip(q, p)], shape[:-1])}


def _symmetric_kl(diff, student_logits, teacher_logits, forward_weight=0.5, temperature=1.0):
    shape, T, q, p = _pair(diff, student_logits, teacher_logits, temperature)
    w = _ball.ball(validate.forward_weight(forward_weight))
    _require_support("student_logits", p, q, "forward KL(p‖q)")
    _require_support("teacher_logits", q, p, "reverse KL(q‖p)")
    out = []
    for qi, pi in zip(q, p):
        r = _log_ratio(qi, pi, T)
        out.append(w * _forward_kl(qi, pi, r) + (1 - w) * _reverse_kl(qi, pi, r))
    return {"kl": _regroup(out, shape[:-1])}


def _jsd_row(q: _Dist, p: _Dist, r, beta):
    one_b = 1 - beta
    lq_m, lp_m = [], []
    for qs, ps, ri in zip(q.support, p.support, r):
        if qs and ps:
            lq_m.append(-_ball.log1p(beta * _ball.expm1(-ri)))
            lp_m.append(-_ball.log1p(one_b * _ball.expm1(ri)))
        else:
            lq_m.append(-(-beta).log1p() if qs else None)
            lp_m.append(-beta.log() if ps else None)
    m = [beta * pj + one_b * qj for pj, qj in zip(p.p, q.p)]
    kl_qm = _kl(q.p, q.support, m, lq_m)
    kl_pm = _kl(p.p, p.support, m, lp_m)
    return beta * kl_pm + one_b * kl_qm


def _generalized_jsd(diff, student_logits, teacher_logits, beta=0.5, temperature=1.0, endpoints="limit"):
    shape, T, q, p = _pair(diff, student_logits, teacher_logits, temperature)
    b = _ball.ball(validate.jsd_beta(beta))
    validate.endpoints(endpoints)
    edge = b.is_zero() or b == 1
    if endpoints == "kl" and b.is_zero():
        _require_support("student_logits", p, q, "beta=0 with endpoints='kl' → KL(p‖q)")
    if endpoints == "kl" and edge and not b.is_zero():
        _require_support("teacher_logits", q, p, "beta=1 with endpoints='kl' → KL(q‖p)")
    if edge and endpoints == "limit":
        # the continuous formula at β ∈ {0, 1}: m equals q (resp. p), both KL terms weigh 0
        return {"jsd": _regroup([_ball.ZERO] * len(q), shape[:-1])}
    if edge:
        kl = _forward_kl if b.is_zero() else _reverse_kl
        return {"jsd": _regroup([kl(qi, pi, _log_ratio(qi, pi, T)) for qi, pi in zip(q, p)], shape[:-1])}
    return {"jsd": _regroup([_jsd_row(qi, pi, _log_ratio(qi, pi, T), b) for qi, pi in zip(q, p)], shape[:-1])}


softmax, softmax_vjp = _ball.pair(_softmax, ("probs",), ("logits",))
softmax.__doc__ = "Tempered softmax (Hinton et al. 2015 §2), as balls."
hinton, hinton_vjp = _ball.pair(_hinton, ("loss",), ("student_logits",))
hinton.__doc__ = ("(1−α)·CE(q^(1), y) + α·s·KL(p^(T)‖q^(T)), s = T² when t2_scale, mean over rows "
                  "(Hinton et al. 2015 §2), as balls.")
token_kl, token_kl_vjp = _ball.pair(_token_kl, ("kl",), ("student_logits",))
token_kl.__doc__ = ("Full-vocabulary reverse / forward token KL (MiniLLM §2.1 eq. 1); forward also as Hinton's "
                    "cross-entropy (§2), as balls.")
symmetric_kl, symmetric_kl_vjp = _ball.pair(_symmetric_kl, ("kl",), ("student_logits",))
symmetric_kl.__doc__ = "w·KL(p‖q) + (1−w)·KL(q‖p) (Jeffreys 1946, weighted; DistiLLM baseline), as balls."
generalized_jsd, generalized_jsd_vjp = _ball.pair(_generalized_jsd, ("jsd",), ("student_logits",))
generalized_jsd.__doc__ = "β·KL(p‖m) + (1−β)·KL(q‖m), m = βp + (1−β)q (GKD §3 eq. 2), as balls."


# --------------------------------------------------------------------------- skew KL and TVD

def _log_first_over_mix(r_first_minus_other, first_support, other_support, a):
    """log f − log m on supp f for m = α·f + (1−α)·o, with x = log o − log f given where both are
    possible: −log1p((1−α)·expm1(x)) there, −log α where o = 0."""
    return [None if not fs else (-_ball.log1p((1 - a) * _ball.expm1(x)) if os_ else -a.log())
            for x, fs, os_ in zip(r_first_minus_other, first_support, other_support)]


def _skew_kl(diff, student_logits, teacher_logits, alpha=0.1, direction="forward", temperature=1.0):
    shape, T, q, p = _pair(diff, student_logits, teacher_logits, temperature)
    a = _ball.ball(validate.skew_alpha(alpha))
    validate.direction(direction)
    rows = []
    for qi, pi in zip(q, p):
        r = _log_ratio(qi, pi, T)
        if direction == "forward":   # KL(p‖αp + (1−α)q); r = log q − log p
            m = [a * pj + (1 - a) * qj for pj, qj in zip(pi.p, qi.p)]
            rows.append(_kl(pi.p, pi.support, m, _log_first_over_mix(r, pi.support, qi.support, a)))
        else:                        # KL(q‖αq + (1−α)p); log p − log q = −r
            m = [a * qj + (1 - a) * pj for pj, qj in zip(pi.p, qi.p)]
            neg = [None if x is None else -x for x in r]
            rows.append(_kl(qi.p, qi.support, m, _log_first_over_mix(neg, qi.support, pi.support, a)))
    return {"kl": _regroup(rows, shape[:-1])}


def _tvd(diff, student_logits, teacher_logits, temperature=1.0):
    """½ Σ σ_i (q_i − p_i) with σ_i = sign(q_i − p_i) decided by the ball (0 only for an exact
    zero, e.g. identical rows, where r = 0 exactly): the same function as ½ Σ |q − p| and, with σ
    held constant, the subgradient with sign(0) = 0. A ball that straddles 0 raises Straddle."""
    shape, T, q, p = _pair(diff, student_logits, teacher_logits, temperature)
    rows = []
    for qi, pi in zip(q, p):
        r = _log_ratio(qi, pi, T)
        d = [pj * _ball.expm1(x) if a and b else (qj if a else -pj)
             for qj, pj, x, a, b in zip(qi.p, pi.p, r, qi.support, pi.support)]
        rows.append(_ball.fsum(_ball.sign(di) * di for di in d if _ball.sign(di)) / 2)
    return {"tvd": _regroup(rows, shape[:-1])}


skew_kl, skew_kl_vjp = _ball.pair(_skew_kl, ("kl",), ("student_logits",))
skew_kl.__doc__ = ("Skew KL: KL(p‖αp + (1−α)q) (forward) or KL(q‖αq + (1−α)p) (reverse) (DistiLLM §3), "
                   "as balls.")
tvd, tvd_vjp = _ball.pair(_tvd, ("tvd",), ("student_logits",))
tvd.__doc__ = "Total variation ½·Σ|q − p| with the sign(0) = 0 subgradient, as balls."


# --------------------------------------------------------------------------- sparse (top-k) teacher

def _teacher_ids(x) -> list:
    """Rows of ints (integral floats accepted, truth values and fractions refused)."""
    rows = x.tolist() if hasattr(x, "tolist") else x
    validate.rank("teacher_ids", _ball.shape(rows), 2)
    for row in rows:
        for v in row:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not float(v).is_integer():
                validate.fail("teacher_ids", f"expected integers, got {v!r}")
    return [[int(v) for v in row] for row in rows]


def _log_total(xs):
    """log Σ e^{x} over the given balls/Vars (``_ball.logsumexp`` at the largest midpoint)."""
    return _ball.logsumexp(xs, max(range(len(xs)), key=lambda k: _ball.mid_float(xs[k])))


def _sparse_kl(diff, student_logits, teacher_ids, teacher_logps, renormalize="none", temperature=1.0,
               t2_scale=False):
    """Σ_k p_k (log p_k − log q_{i_k}) over the ids with p_k > 0 (``refimpl.exact.distill.sparse_kl``),
    log q_{i_k} from the row's shifted logits; the renormalisations as log-sum-exps shifted by the
    largest term (one live id gives 0 exactly); times T² per row under ``t2_scale`` (axolotl's
    top-k KD loss)."""
    zs, shape = _logits("student_logits", student_logits, rank=2)
    ids = _teacher_ids(teacher_ids)
    lps = _ball.balls("teacher_logps", teacher_logps, allow_neg_inf=True)
    validate.rank("teacher_logps", _ball.shape(lps), 2)
    validate.sparse_teacher(ids, [_floats(row) for row in lps], shape)
    validate.renormalize(renormalize)
    if renormalize == "tail":
        validate.sparse_tail(ids, [_floats(row) for row in lps], [[v is not None for v in row] for row in zs])
    T = _ball.ball(validate.temperature(temperature))
    scale = T * T if validate.t2_scale(t2_scale) else _ball.ONE
    zs = diff("student_logits", zs)
    rows = []
    for n, (q, irow, lrow) in enumerate(zip(_dists("student_logits", zs, T), ids, lps)):
        live = [k for k, a in enumerate(lrow) if a is not None]
        for k in live:
            if not q.support[irow[k]]:
                validate.fail("student_logits", f"-inf at row ({n},), token {irow[k]}, where the teacher has "
                                                "probability > 0: the KL is infinite (support mismatch)")
        lp = [lrow[k] for k in live]
        lq = [q.logp[irow[k]] for k in live]
        if renormalize in ("teacher", "both"):
            log_s = _log_total(lp)
            lp = [a - log_s for a in lp]
        if renormalize == "both":
            x = [q.x[irow[k]] for k in live]
            log_s = _log_total(x)
            lq = [b - log_s for b in x]
        terms = [_ball.exp(a) * (a - b) for a, b in zip(lp, lq)]
        if renormalize == "tail":
            terms += _tail_term(q, [irow[k] for k in live], lp)
        rows.append(scale * _ball.fsum(terms))
    return {"kl": rows}


def _tail_term(q, held, lp):
    """[p_t (log p_t − log q_t)] with p_t = −expm1(log Σ p) and log q_t = log Σ_j e^{x_j} − log Z over
    the possible tokens j off the held ids (a direct sum: no cancellation in 1 − Σ q); [] when
    p_t = 0, i.e. the one held log-probability is exactly 0 (``validate.sparse_tail`` decided the rest)."""
    if len(lp) == 1 and _ball.value(lp[0]).is_zero():
        return []
    p_t = -_ball.expm1(_log_total(lp))
    held = set(held)
    off = [q.x[j] for j, s in enumerate(q.support) if s and j not in held]
    log_q = _log_total(off) - q.lse_shifted
    return [p_t * (_ball.log(p_t) - log_q)]


sparse_kl, sparse_kl_vjp = _ball.pair(_sparse_kl, ("kl",), ("student_logits",))
sparse_kl.__doc__ = ("Forward KL over a top-k teacher, renormalize 'none' | 'teacher' | 'both' | 'tail', times T² "
                     "under t2_scale, as balls.")
