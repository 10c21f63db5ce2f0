"""Tolerance scales of the distillation vectors (the reasoning is in the comment above ``SCALES``)."""
from __future__ import annotations

import mpmath
import numpy as np

from lossproof.conformance.generate.distill_inputs import (
    HIN,
    INF,
    JSD,
    SKL,
    SM,
    SPK,
    SYM,
    TKL,
    TVD,
    case_cotangent,
)

# ----------------------------------------------------------------------------- tolerance scales
#
# The tolerance is k·u·scale + ulp(want) with k = k_base·(1 + log2 V) (conformance/compare.py; k_base on the catalog entry): k_base
# roundings on the critical path, growing with the log of the vocabulary reduction. Each scale is
# the magnitude of what the result inherits rounding errors from, in two parts:
#
#   s1  the terms of the vocabulary sum (Σ w_i|ℓ_i| for a KL, the probability for a softmax), whose
#       rounding errors do grow with the reduction: they get the full k;
#   sA  the roundings made once per token while forming its log-probability. The plain evaluation
#       that libraries use — log_softmax(z/T) for both models, then Σ w·(log a − log b) (TRL 1.16.0
#       GKDTrainer.generalized_jsd_loss, Liger 0.8.5 chunked_loss/jsd_loss.py) — rounds z_i/T, the
#       log-sum-exp (≈ max/T) and log q_i, so log q_i carries an absolute error ≈ u·A_i with
#       A_i = (|z_i| + |max z|)/T + |log q_i|; weighted by the probabilities (and, for the weight
#       e^{log q_i} itself, by |ℓ_i|). These errors do not grow with V: sA enters divided by
#       d = 1 + log2 V, i.e. it is granted k_base roundings, not k_base·(1 + log2 V).
#
# Measured on these vectors (float64 and float32, every case): the plain evaluation above stays
# below 0.75·u·sA + 10·u·s1, i.e. under 1/10 of the tolerance; refimpl/torch and refimpl/arrays
# (shift-first log-softmax, log-ratios from logit differences) under 1/7; so do TRL's and Liger's own
# functions through their adapters (float32). Deliberate bugs (z·T for z/T, T on one side only, T²
# on the token KL or none in Hinton's loss, the hard label at T, swapped direction or β, the mean
# instead of the sum over V, a float16 softmax inside a float32 function) fail every float64 and
# float32 case where they change the value by more than 0.1%, except in float32 the near-ties of
# ±1e4 logits at T = 1e-3 and β = 1e-6, 1 − 1e-6, where the plain evaluation has no correct digit
# either. That is the price of the A part, which makes the scale depend on |z|/T, not only on logit
# differences: those cases test float64, NaN and overflow, while ties among logits of order 1 are
# judged tightly. One scale per output: the largest row's, so rows of very different sizes go into
# separate cases.

SCALE_DPS = 20  # the scales need two correct digits; 20 keep ℓ = log q − log p exact enough at |z|/T ~ 1e7
_NEG_INF = mpmath.mpf("-inf")


class _Dist:
    """softmax(z/T) of one row, with per token (see ``SCALES``):
    a_i = (|z_i| + |max z|)/T, the magnitude of the exponent's roundings, and
    A_i = a_i + |log q_i|, the magnitude of the roundings of log q_i = z_i/T − lse."""

    def __init__(self, row, T):
        row = [mpmath.mpf(v) for v in row]
        self.fin = [not mpmath.isinf(z) for z in row]
        m = max(z for z, f in zip(row, self.fin) if f)
        x = [(z - m) / T if f else _NEG_INF for z, f in zip(row, self.fin)]
        l1 = mpmath.log(mpmath.fsum(mpmath.exp(xi) for xi, f in zip(x, self.fin) if f))
        self.logp = [xi - l1 if f else _NEG_INF for xi, f in zip(x, self.fin)]
        self.p = [mpmath.exp(li) if f else mpmath.mpf(0) for li, f in zip(self.logp, self.fin)]
        self.a = [(abs(z) + abs(m)) / T if f else mpmath.mpf(0) for z, f in zip(row, self.fin)]
        self.A = [ai + abs(li) if f else mpmath.mpf(0) for ai, li, f in zip(self.a, self.logp, self.fin)]
        self.d = 1 + mpmath.log(len(row), 2)

    def rel(self) -> list:
        """Relative error magnitude of each q_i from its exponents' roundings:
        (1 − q_i)·a_i + Σ_{j≠i} q_j a_j (a shift common to all exponents cancels, so a saturated top
        token keeps ~(1 − q_top))."""
        k = max(range(len(self.p)), key=lambda i: self.p[i])
        rest = mpmath.fsum(pj for j, pj in enumerate(self.p) if j != k)   # 1 − q_k, without cancelling
        qa = mpmath.fsum(pj * aj for pj, aj in zip(self.p, self.a))
        return [(rest if i == k else 1 - pi) * ai + (qa - pi * ai) if f else mpmath.mpf(0)
                for i, (pi, ai, f) in enumerate(zip(self.p, self.a, self.fin))]


class _Mixture:
    """The JSD's mixture m as a distribution for ``_kl_parts``; the error of log m is passed
    to ``_kl_parts`` as ``extra``."""

    def __init__(self, logm, m, fin):
        self.logp, self.p, self.fin = logm, m, fin
        self.A = [mpmath.mpf(0)] * len(m)


def softmax_rows(x, T) -> list[_Dist]:
    arr = np.array(x, dtype=object)
    return [_Dist(row, T) for row in arr.reshape(-1, arr.shape[-1])]


def _row_cotangents(objective, kwargs, n_rows: int) -> list:
    c = np.array(case_cotangent(objective, kwargs), dtype=object)
    return [abs(mpmath.mpf(v)) for v in c.reshape(n_rows)]


def _kl_parts(A, B, extra=None):
    """KL(A‖B) = Σ a_i ℓ_i (ℓ = log a − log b) and its two magnitudes:
        s1 = Σ_{a_i>0} a_i |ℓ_i| + Σ_{a_i=0} b_i               the terms of the sum;
        sA = Σ_{a_i>0} a_i (A^a_i (1 + |ℓ_i|) + A^b_i + x_i) + Σ_{a_i=0} b_i (A^b_i + x_i)
    the roundings of log a_i and log b_i, and of the weight a_i = e^{log a_i} times its ℓ_i
    (x_i = ``extra``: further error of log b_i, the JSD's log m)."""
    x = extra or [0] * len(A.p)
    kl, s1, sa, ell = [], [], [], []
    for i in range(len(A.p)):
        if A.fin[i]:
            li = A.logp[i] - B.logp[i]
            ell.append(li)
            kl.append(A.p[i] * li)
            s1.append(A.p[i] * abs(li))
            sa.append(A.p[i] * (A.A[i] * (1 + abs(li)) + B.A[i] + x[i]))
        else:
            ell.append(None)
            if B.fin[i]:
                s1.append(B.p[i])
                sa.append(B.p[i] * (B.A[i] + x[i]))
    return mpmath.fsum(kl), mpmath.fsum(s1), mpmath.fsum(sa), ell


def _centred_grad(Q: _Dist, ell, K, s1, sA, extra) -> mpmath.mpf:
    """max_j of the magnitude of q_j(ℓ_j − K), which autograd forms as q_j(ℓ_j + 1) − q_j(K + 1):
    terms q_j(|ℓ_j| + s1 + 1) (s1 bounds K's sum), roundings
    q_j(A^q_j (1 + |ℓ_j − K|) + x_j + sA)/d (x_j: the error of ℓ_j beyond log q_j's)."""
    return max((Q.p[j] * ((abs(ell[j]) + s1 + 1) + (Q.A[j] * (1 + abs(ell[j] - K)) + extra[j] + sA) / Q.d)
                for j in range(len(Q.p)) if Q.fin[j]), default=mpmath.mpf(0))


def _forward_grad(Q: _Dist, P: _Dist) -> mpmath.mpf:
    """max_j of the magnitude of q_j − p_j: terms q_j + p_j, roundings (q_j A^q_j + p_j A^p_j)/d."""
    return max(Q.p[j] + P.p[j] + (Q.p[j] * Q.A[j] + P.p[j] * P.A[j]) / Q.d for j in range(len(Q.p)))


def _softmax_scale(kwargs, outputs, grads):
    """probs: max_i q_i·(1 + (rel_i + A_i)/d) — the largest probability (an absolute error policy),
    more where the row is ill-conditioned or the logits large against T. rel_i (``_Dist.rel``):
    rounding the exponents z/T (or (z − max)/T) moves q_i by q_i·rel_i·u, which matters for
    near-ties among logits whose |z|/T is large. A_i: a softmax formed as exp(log_softmax(z/T))
    (TRL 1.16.0 trainer/utils.py selective_log_softmax, exponentiated) carries the absolute error
    u·A_i of log q_i = z_i/T − lse into q_i, also in a saturated row (1 − q_top below u·|lse|).

    grad q_j(c_j − Σ q c)/T: terms q_j(|c_j| + Σ q|c|) (a saturated row cancels them entirely
    unless written in the centred form), times 1 + A_j/d for the rounding of q_j in the log
    domain, and q_j·rel_j·|c_j − Σ q c|/d for the exponents' roundings; over T."""
    with mpmath.workdps(SCALE_DPS):
        T = mpmath.mpf(kwargs["temperature"])
        rows = softmax_rows(kwargs["logits"], T)
        cts = np.array(case_cotangent(SM, kwargs), dtype=object).reshape(len(rows), -1)
        value, grad = [], []
        for D, c in zip(rows, cts):
            c = [mpmath.mpf(v) for v in c]
            rel = D.rel()
            value.append(max(pi * (1 + (ri + Ai) / D.d) for pi, ri, Ai in zip(D.p, rel, D.A)))
            mean = mpmath.fsum(pi * ci for pi, ci in zip(D.p, c))
            amean = mpmath.fsum(pi * abs(ci) for pi, ci in zip(D.p, c))
            grad.append(max(D.p[j] * ((abs(c[j]) + amean) * (1 + D.A[j] / D.d) + rel[j] * abs(c[j] - mean) / D.d) / T
                            for j in range(len(D.p))))
        return {"probs": max(value), "grad:logits": max(grad)}


def _entropy_parts(P: _Dist):
    """H(p) = Σ p_i |log p_i| and its roundings Σ p_i A^p_i (1 + |log p_i|): what the cross-entropy
    soft term −Σ p log q = KL(p‖q) + H(p) adds to the forward KL's magnitudes. Formed directly,
    −Σ p log q has terms p_i |log q_i| ≤ p_i (|log p_i| + |ℓ_i|): the same bound covers both forms."""
    h = mpmath.fsum(pi * abs(li) for pi, li, f in zip(P.p, P.logp, P.fin) if f)
    ha = mpmath.fsum(pi * Ai * (1 + abs(li)) for pi, Ai, li, f in zip(P.p, P.A, P.logp, P.fin) if f)
    return h, ha


def _kl_rows_scale(objective, kwargs, direction, forward_weight=None):
    """Per row s1 + sA/d (``_kl_parts``) and the gradient's magnitude times |c|/T; max over rows.
    ``forward_weight`` w (the symmetric KL): w times the forward row's magnitudes plus (1−w) times
    the reverse row's. A cross-entropy soft term adds H(p) (``_entropy_parts``)."""
    ce = kwargs.get("soft_term") == "cross_entropy"
    with mpmath.workdps(SCALE_DPS):
        T = mpmath.mpf(kwargs["temperature"])
        qs, ps = softmax_rows(kwargs["student_logits"], T), softmax_rows(kwargs["teacher_logits"], T)
        value, grad = [], []
        for Q, P, c in zip(qs, ps, _row_cotangents(objective, kwargs, len(qs))):
            parts = {}
            if forward_weight is not None or direction == "reverse":
                K, s1, sA, ell = _kl_parts(Q, P)
                parts["reverse"] = (s1 + sA / Q.d, _centred_grad(Q, ell, K, s1, sA, P.A))
            if forward_weight is not None or direction == "forward":
                _, s1, sA, _ = _kl_parts(P, Q)
                parts["forward"] = (s1 + sA / Q.d, _forward_grad(Q, P))
            if forward_weight is not None:
                w = mpmath.mpf(forward_weight)
                (fv, fg), (rv, rg) = parts["forward"], parts["reverse"]
                v, g = w * fv + (1 - w) * rv, w * fg + (1 - w) * rg
            else:
                v, g = parts[direction]
            if ce:
                h, ha = _entropy_parts(P)
                v += h + ha / Q.d
            value.append(v)
            grad.append(c * g / T)
        return max(value), max(grad)


def _token_kl_scale(kwargs, outputs, grads):
    """kl: the largest row's s1 + sA/d (weights q for 'reverse', p for 'forward'); grad: reverse
    q_j(ℓ_j − K)/T (``_centred_grad``), forward (q_j − p_j)/T (``_forward_grad``), times |c|."""
    value, grad = _kl_rows_scale(TKL, kwargs, kwargs["direction"])
    return {"kl": value, "grad:student_logits": grad}


def _symmetric_kl_scale(kwargs, outputs, grads):
    """kl: the largest row's w·(forward s1 + sA/d) + (1−w)·(reverse s1 + sA/d); grad: the same
    weighting of (q_j − p_j)/T and q_j(ℓ_j − K)/T, times |c|."""
    value, grad = _kl_rows_scale(SYM, kwargs, None, kwargs["forward_weight"])
    return {"kl": value, "grad:student_logits": grad}


def _hinton_scale(kwargs, outputs, grads):
    """loss: mean over rows of (1−α)(|log q^(1)_y| + A^(1)_y/d) + α·s·(s1 + sA/d) of the forward
    KL(p^(T)‖q^(T)). grad: |c|/N · max over rows and tokens of (1−α)(q^(1)_j + [j = y] +
    q^(1)_j A^(1)_j/d) + α·s·(q_j + p_j + (q_j A^q_j + p_j A^p_j)/d)/T. elements (the careful
    low-precision model's terms): the mean of the per-row losses' magnitudes. The cross-entropy
    soft term adds α·s·(H(p) + its roundings/d) to the value (``_entropy_parts``)."""
    ce = kwargs.get("soft_term") == "cross_entropy"
    with mpmath.workdps(SCALE_DPS):
        T = mpmath.mpf(kwargs["temperature"])
        a = mpmath.mpf(kwargs["alpha"])
        s = T * T if kwargs["t2_scale"] else mpmath.mpf(1)
        q1s = softmax_rows(kwargs["student_logits"], mpmath.mpf(1))
        qs, ps = softmax_rows(kwargs["student_logits"], T), softmax_rows(kwargs["teacher_logits"], T)
        c = abs(mpmath.mpf(case_cotangent(HIN, kwargs)))
        value, grad, rows = [], [], []
        for Q1, Q, P, y in zip(q1s, qs, ps, kwargs["labels"]):
            kl, s1, sA, _ = _kl_parts(P, Q)
            h, ha = _entropy_parts(P) if ce else (0, 0)
            rows.append(abs((1 - a) * -Q1.logp[y] + a * s * (kl + h)))
            value.append((1 - a) * (abs(Q1.logp[y]) + Q1.A[y] / Q1.d) + a * s * (s1 + sA / Q.d + h + ha / Q.d))
            grad.append(max((1 - a) * (Q1.p[j] + (1 if j == y else 0) + Q1.p[j] * Q1.A[j] / Q1.d)
                            + a * s * (Q.p[j] + P.p[j] + (Q.p[j] * Q.A[j] + P.p[j] * P.A[j]) / Q.d) / T
                            for j in range(len(Q.p))))
        n = len(qs)
        return {"loss": mpmath.fsum(value) / n, "grad:student_logits": c * max(grad) / n,
                "elements:loss": mpmath.fsum(rows) / n}


def _jsd_scale(kwargs, outputs, grads):
    """0 < β < 1: β·(s1 + sA/d)(p‖m) + (1−β)·(s1 + sA/d)(q‖m) (``_kl_parts`` against the mixture),
    where log m = logsumexp(log q + log(1−β), log p + log β) adds x_i = A^q_i + A^p_i + |log m_i| +
    |log β| + |log(1−β)| to the roundings of log m_i. grad (1−β)·q_j(ℓ_j − KL(q‖m))/T with
    ℓ = log q − log m: ``_centred_grad`` with the same x_i (the terms through m are at most
    (1−β)q_j, inside its +1), times (1−β)|c|/T.

    β ∈ {0, 1}: endpoints='kl' is the forward / reverse KL (as ``_token_kl_scale``); endpoints=
    'limit' is exactly 0 with a zero gradient, which the continuous formula also gives in floating
    point (log m = log q or log p exactly, weights 0·finite): scale 0, an exact zero (or a
    subnormal of the dtype) is required."""
    beta = mpmath.mpf(kwargs["beta"])
    if beta in (0, 1):
        if kwargs["endpoints"] == "limit":
            return {"jsd": mpmath.mpf(0), "grad:student_logits": mpmath.mpf(0)}
        value, grad = _kl_rows_scale(JSD, kwargs, "forward" if beta == 0 else "reverse")
        return {"jsd": value, "grad:student_logits": grad}
    with mpmath.workdps(SCALE_DPS):
        T = mpmath.mpf(kwargs["temperature"])
        qs, ps = softmax_rows(kwargs["student_logits"], T), softmax_rows(kwargs["teacher_logits"], T)
        lb, l1b = abs(mpmath.log(beta)), abs(mpmath.log1p(-beta))
        value, grad = [], []
        for Q, P, c in zip(qs, ps, _row_cotangents(JSD, kwargs, len(qs))):
            m = [beta * pj + (1 - beta) * qj for pj, qj in zip(P.p, Q.p)]
            fin = [qf or pf for qf, pf in zip(Q.fin, P.fin)]
            logm = [mpmath.log(mj) if f else _NEG_INF for mj, f in zip(m, fin)]
            x = [Q.A[i] + P.A[i] + abs(logm[i]) + lb + l1b if fin[i] else 0 for i in range(len(m))]
            M = _Mixture(logm, m, fin)
            _, s1_pm, sA_pm, _ = _kl_parts(P, M, x)
            k_qm, s1_qm, sA_qm, ell = _kl_parts(Q, M, x)
            value.append(beta * (s1_pm + sA_pm / Q.d) + (1 - beta) * (s1_qm + sA_qm / Q.d))
            grad.append(c * (1 - beta) * _centred_grad(Q, ell, k_qm, s1_qm + 1, sA_qm, x) / T)
        return {"jsd": max(value), "grad:student_logits": max(grad)}


def _skew_scale(kwargs, outputs, grads):
    """The skew KL is one of the generalized JSD's two terms (``_jsd_scale``) with the
    mixture weight α on the first distribution: s1 + sA/d of KL(first‖m) (``_kl_parts`` against
    the mixture, whose log m carries x_i = A^q_i + A^p_i + |log m_i| + |log α| + |log(1−α)|).
    grad: reverse q_j(y_j − Σqy)/T with y = ℓ − α·e^ℓ (|α·e^ℓ| ≤ 1, the +1 of ``_centred_grad``);
    forward (1−α)·q_j(x_j + Σ q x)/T with x = p/m ≤ 1/α, each x_i carrying u·(A^p_i + x_i') relative
    error; times |c|. α = 1: exactly 0 (scale 0)."""
    a = mpmath.mpf(kwargs["alpha"])
    if a == 1:
        return {"kl": mpmath.mpf(0), "grad:student_logits": mpmath.mpf(0)}
    with mpmath.workdps(SCALE_DPS):
        T = mpmath.mpf(kwargs["temperature"])
        qs, ps = softmax_rows(kwargs["student_logits"], T), softmax_rows(kwargs["teacher_logits"], T)
        la, l1a = abs(mpmath.log(a)), abs(mpmath.log1p(-a))
        value, grad = [], []
        for Q, P, c in zip(qs, ps, _row_cotangents(SKL, kwargs, len(qs))):
            first, other = (P, Q) if kwargs["direction"] == "forward" else (Q, P)
            m = [a * fj + (1 - a) * oj for fj, oj in zip(first.p, other.p)]
            fin = [qf or pf for qf, pf in zip(Q.fin, P.fin)]
            logm = [mpmath.log(mj) if f and mj > 0 else mpmath.mpf("-inf") for mj, f in zip(m, fin)]
            x = [Q.A[i] + P.A[i] + abs(logm[i]) + la + l1a if fin[i] and m[i] > 0 else 0 for i in range(len(m))]
            M = _Mixture(logm, m, [f and mj > 0 for f, mj in zip(fin, m)])
            k, s1, sA, ell = _kl_parts(first, M, x)
            value.append(s1 + sA / Q.d)
            if kwargs["direction"] == "reverse":
                grad.append(c * _centred_grad(Q, ell, k, s1 + 1, sA, x) / T)
            else:
                w = [P.p[i] / m[i] if P.fin[i] else mpmath.mpf(0) for i in range(len(m))]
                err = [w[i] * (1 + (P.A[i] + x[i]) / Q.d) for i in range(len(m))]
                mean = mpmath.fsum(qi * ei for qi, ei, f in zip(Q.p, err, Q.fin) if f)
                grad.append(c * (1 - a) * max((Q.p[j] * (err[j] + mean) * (1 + Q.A[j] / Q.d)
                                               for j in range(len(m)) if Q.fin[j]), default=mpmath.mpf(0)) / T)
        return {"kl": max(value), "grad:student_logits": max(grad)}


def _tvd_scale(kwargs, outputs, grads):
    """tvd: ½·Σ (q_i + p_i)(1 + (A^q_i + A^p_i)/d) — each |q_i − p_i| is formed from two probabilities
    of those sizes, each rounded in the log domain (the magnitude of what is rounded, as for a KL's
    terms). grad q_j(σ_j − Σ q σ)/(2T): terms q_j·2·(1 + A^q_j/d) plus the roundings of Σ q σ,
    Σ_i q_i A^q_i/d; times |c|/(2T). A sign is never in doubt (``_ties_ok``)."""
    with mpmath.workdps(SCALE_DPS):
        T = mpmath.mpf(kwargs["temperature"])
        qs, ps = softmax_rows(kwargs["student_logits"], T), softmax_rows(kwargs["teacher_logits"], T)
        value, grad = [], []
        for Q, P, c in zip(qs, ps, _row_cotangents(TVD, kwargs, len(qs))):
            value.append(mpmath.fsum((Q.p[i] * (1 + Q.A[i] / Q.d) + P.p[i] * (1 + P.A[i] / Q.d))
                                     for i in range(len(Q.p))) / 2)
            spread = mpmath.fsum(Q.p[i] * Q.A[i] for i in range(len(Q.p))) / Q.d
            grad.append(c * max(Q.p[j] * (2 + Q.A[j] / Q.d) + Q.p[j] * spread for j in range(len(Q.p))) / (2 * T))
        return {"tvd": max(value), "grad:student_logits": max(grad)}


def _sparse_scale(kwargs, outputs, grads):
    """kl: s1 + sA/d (the model at the top of this module): the terms w_k|ℓ_k| (w the teacher's weights after the
    convention, ℓ_k = log w_k − log q_k, q the student's after it) and, once per term, the
    roundings of log q_{i_k} (A^q of the student's log-softmax), of log w_k (|log p_k| and the
    renormaliser |log S|) and of the student's renormaliser |log Q| ('both').
    grad: max over the tokens of s·q_j(1 + (A^q_j + |log Q|)/d) + w_j(1 + (|log p_j| + |log S|)/d),
    divided by T, times |c| (s = S for 'none', 1 otherwise; 'both' keeps the q_j term at every
    token: a library that renormalises after a full log-softmax leaves q_j·Σg ≈ 0 there).
    'tail' adds its bucket, ℓ_t = log p_t − log q_t: to s1 p_t|ℓ_t| and S(1 + |ℓ_t|) (p_t = 1 − S
    inherits S's roundings, times ∂(p log(p/q))/∂p = 1 + ℓ_t), to sA p_t·A_t, A_t = Σ_off q_j A_j / q_t
    (log q_t a log-sum-exp of the log q_j off the ids); to the gradient off the ids q_j·(p_t/q_t)(1 +
    (A_j + A_t)/d) + S·q_j/q_t (the ratio's p_t rounded; q_j ≤ q_t there, so at most S). Both times T²
    under t2_scale."""
    with mpmath.workdps(SCALE_DPS):
        T = mpmath.mpf(kwargs["temperature"])
        mode = kwargs["renormalize"]
        qs = softmax_rows(kwargs["student_logits"], T)
        value, grad = [], []
        for Q, irow, lrow, c in zip(qs, kwargs["teacher_ids"], kwargs["teacher_logps"],
                                    _row_cotangents(SPK, kwargs, len(qs))):
            live = [(int(i), mpmath.mpf(a)) for i, a in zip(irow, lrow) if a != -INF]
            S_ = mpmath.fsum(mpmath.exp(a) for _, a in live)
            log_s = abs(mpmath.log(S_)) if mode in ("teacher", "both") else mpmath.mpf(0)
            Qs = mpmath.fsum(Q.p[i] for i, _ in live)
            log_q = abs(mpmath.log(Qs)) if mode == "both" else mpmath.mpf(0)
            s1 = sA = mpmath.mpf(0)
            weights = {}
            for i, a in live:
                lw = a - mpmath.log(S_) if mode in ("teacher", "both") else a
                lq = Q.logp[i] - mpmath.log(Qs) if mode == "both" else Q.logp[i]
                w = mpmath.exp(lw)
                weights[i] = (w, abs(a))
                s1 += w * abs(lw - lq)
                sA += w * (Q.A[i] + abs(a) + log_s + log_q)
            tail = None
            if mode == "tail":
                p_t = 1 - S_
                off = [j for j, f in enumerate(Q.fin) if f and j not in weights]
                q_t = mpmath.fsum(Q.p[j] for j in off)
                if p_t > 0:
                    l_t = abs(mpmath.log(p_t) - mpmath.log(q_t))
                    A_t = mpmath.fsum(Q.p[j] * Q.A[j] for j in off) / q_t
                    s1 += p_t * l_t + S_ * (1 + l_t)
                    sA += p_t * A_t
                    tail = (p_t / q_t, A_t, q_t)
            value.append(s1 + sA / Q.d)
            s = S_ if mode == "none" else 1
            g = []
            for j, qj in enumerate(Q.p):
                term = s * qj * (1 + (Q.A[j] + log_q) / Q.d) if Q.fin[j] else mpmath.mpf(0)
                if j in weights:
                    w, la = weights[j]
                    term += w * (1 + (la + log_s) / Q.d)
                elif tail is not None and Q.fin[j]:
                    ratio, A_t, q_t = tail
                    term += qj * ratio * (1 + (Q.A[j] + A_t) / Q.d) + S_ * qj / q_t
                g.append(term)
            grad.append(c * max(g) / T)
        t2 = T * T if kwargs.get("t2_scale") else 1   # t2_scale multiplies every term and rounding by T²
        return {"kl": t2 * max(value), "grad:student_logits": t2 * max(grad)}


SCALES = {SM: _softmax_scale, HIN: _hinton_scale, TKL: _token_kl_scale, JSD: _jsd_scale, SYM: _symmetric_kl_scale,
          SKL: _skew_scale, TVD: _tvd_scale, SPK: _sparse_scale}
