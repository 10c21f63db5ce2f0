"""The Triton kernels of ``refimpl.triton``: each program takes ``ROWS`` rows of logits and
loops over vocabulary tiles of ``BLOCK`` tokens ([ROWS, BLOCK] at a time), with float32
accumulation (float64 for float64 inputs). Per-row quantities are [ROWS] vectors.

Notation as ``refimpl.torch.distill``: z student logits, t teacher logits, T temperature,
q = softmax(z/T), p = softmax(t/T); per row, M = max logit, S = Σ e^{(x − M)/T}, so that
log q_i = (z_i − M_z)/T − log S_z.

Passes. A forward kernel reads each tile once and keeps, per row, running maxima and the
sums rescaled by e^{(M_old − M_new)/T} whenever a tile raises the maximum (the online
log-sum-exp of Milakov & Gimelshein 2018, "Online normalizer calculation for softmax",
Algorithm 3; the same rescaling carries the KL's sum Σ e^{(z−M)/T}·d). It writes the row's
value and its statistics (M, log S, and the centring constant of the gradient). A backward
kernel reads the tiles once more and writes the gradient for the row's cotangent. The
gradient cannot be written in the forward pass: every element of it needs the row's final
normaliser (and, for the reverse KL and the JSD, the row's final divergence), which is known
only after the last tile, and a row of 152,064 tokens does not fit in one program's registers
or shared memory; the cotangent, per row, is known only in backward, and folding it in there
rounds the low-precision gradient once instead of twice. Memory traffic, forward and backward
together: both models' logits read twice and the gradient written once, five [N,V] transfers
(three is the floor: one read of each model, one write). A gradient for a unit cotangent
written by the forward kernel would need the same second read of the row (it needs the final
normaliser), plus an [N,V] buffer kept until backward and one more read and write there to
scale it by the cotangent: more traffic, not less. The generalized JSD needs a second forward
pass: log m = log(β·p + (1−β)·q) is not a product of exponentials, so its sums cannot be
rescaled online; pass one gives the normalisers, pass two the sums. The softmax writes its
probabilities in a second pass (they need the final normaliser), and its backward reads the
logits and the cotangent twice (Σ q·c, then the gradient).

Impossible tokens (logit −inf) have probability 0 and contribute nothing; every term that
would be 0·(−inf) or −inf − (−inf) is selected away with ``tl.where``. A row whose value comes
out non-finite (a support mismatch, −inf everywhere, NaN or +inf in the input) is reported to
the caller, which runs the input checks (see ``refimpl.triton.distill``).

Accuracy: the plain evaluation the vectors' tolerance scale is built on
(``conformance/generate/distill.py``, tolerance scales): log-ratios formed from logit
differences (z − t)/T, exponents shifted by the maximum, sums in the working dtype.
"""
from __future__ import annotations

import triton
import triton.language as tl

NEG_INF = tl.constexpr(float("-inf"))  # a global a kernel reads must be a constexpr


@triton.jit
def _rows(N, ROWS: tl.constexpr):
    """This program's row indices and which of them exist."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    return rows, rows < N


@triton.jit
def _tile(ptr, rows, live, lo, V, BLOCK: tl.constexpr, ACC: tl.constexpr):
    """Tokens lo..lo+BLOCK of the rows in the working dtype (−inf outside) and the mask."""
    offs = lo + tl.arange(0, BLOCK)
    inside = live[:, None] & (offs[None, :] < V)
    x = tl.load(ptr + rows[:, None] * V + offs[None, :], mask=inside, other=NEG_INF).to(ACC)
    return x, offs, inside


@triton.jit
def _online(m, x, T):
    """The running maxima after tile x, the factors that rescale sums kept relative to the
    old maxima, and e^{(x − M)/T} of the tile (0 at −inf; while a row has shown no finite
    logit its maximum is −inf and nothing is rescaled)."""
    m_new = tl.maximum(m, tl.max(x, 1))
    rescale = tl.where(m_new == NEG_INF, 1.0, tl.exp((m - m_new) / T))
    e = tl.where(x == NEG_INF, 0.0, tl.exp((x - m_new[:, None]) / T))
    return m_new, rescale, e


@triton.jit
def token_kl_forward(z_ptr, t_ptr, value_ptr, stats_ptr, N, V, par_ptr, FORWARD: tl.constexpr,
                     ROWS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    T = tl.load(par_ptr)
    rows, live = _rows(N, ROWS)
    mz = tl.full((ROWS,), NEG_INF, ACC)
    mt = tl.full((ROWS,), NEG_INF, ACC)
    sz = tl.zeros((ROWS,), ACC)
    st = tl.zeros((ROWS,), ACC)
    a = tl.zeros((ROWS,), ACC)
    for lo in range(0, V, BLOCK):
        z, _, _ = _tile(z_ptr, rows, live, lo, V, BLOCK, ACC)
        t, _, _ = _tile(t_ptr, rows, live, lo, V, BLOCK, ACC)
        mz, rz, ez = _online(mz, z, T)
        mt, rt, et = _online(mt, t, T)
        sz = sz * rz + tl.sum(ez, 1)
        st = st * rt + tl.sum(et, 1)
        if FORWARD:
            d = tl.where(t == NEG_INF, 0.0, (t - z) / T)
            a = a * rt + tl.sum(et * d, 1)
        else:
            d = tl.where(z == NEG_INF, 0.0, (z - t) / T)
            a = a * rz + tl.sum(ez * d, 1)
    lz = tl.log(sz)
    lt = tl.log(st)
    if FORWARD:
        c = a / st
        kl = c - (mt - mz) / T - lt + lz
    else:
        c = a / sz
        kl = c - (mz - mt) / T - lz + lt
    tl.store(value_ptr + rows, kl.to(value_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 5, mz.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 5 + 1, lz.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 5 + 2, mt.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 5 + 3, lt.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 5 + 4, c.to(stats_ptr.dtype.element_ty), mask=live)


@triton.jit
def token_kl_backward(z_ptr, t_ptr, stats_ptr, cot_ptr, grad_ptr, N, V, par_ptr, FORWARD: tl.constexpr,
                      ROWS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    T = tl.load(par_ptr)
    rows, live = _rows(N, ROWS)
    mz = tl.load(stats_ptr + rows * 5, mask=live, other=0).to(ACC)[:, None]
    lz = tl.load(stats_ptr + rows * 5 + 1, mask=live, other=0).to(ACC)[:, None]
    mt = tl.load(stats_ptr + rows * 5 + 2, mask=live, other=0).to(ACC)[:, None]
    lt = tl.load(stats_ptr + rows * 5 + 3, mask=live, other=0).to(ACC)[:, None]
    c = tl.load(stats_ptr + rows * 5 + 4, mask=live, other=0).to(ACC)[:, None]
    k = (tl.load(cot_ptr + rows, mask=live, other=0).to(ACC) / T)[:, None]
    for lo in range(0, V, BLOCK):
        z, offs, inside = _tile(z_ptr, rows, live, lo, V, BLOCK, ACC)
        t, _, _ = _tile(t_ptr, rows, live, lo, V, BLOCK, ACC)
        q = tl.where(z == NEG_INF, 0.0, tl.exp((z - mz) / T - lz))
        if FORWARD:
            p = tl.where(t == NEG_INF, 0.0, tl.exp((t - mt) / T - lt))
            g = k * (q - p)
        else:
            d = tl.where(z == NEG_INF, 0.0, (z - t) / T)
            g = k * q * (d - c)
        tl.store(grad_ptr + rows[:, None] * V + offs[None, :], g.to(grad_ptr.dtype.element_ty), mask=inside)


# ---------------------------------------------------------------------------------------------
# Generalized JSD, 0 < β < 1: β·KL(p‖m) + (1−β)·KL(q‖m), m = β·p + (1−β)·q
# ---------------------------------------------------------------------------------------------
# log m = logsumexp(log p + log β, log q + log(1−β)) (never −inf where p or q is possible);
# ∂JSD/∂z = (1−β)·q·(ℓ − Σ q·ℓ)/T with ℓ = log q − log m (GKD, Agarwal et al. 2024, §3 eq. 2,
# differentiated: the terms through m cancel because Σ_i ∂m_i = 0 along the softmax).
# Statistics per row: M_z, log S_z, M_t, log S_t, KL(q‖m) = Σ q·ℓ.

@triton.jit
def _jsd_logs(z, t, mz, lz, mt, lt, T, log_beta, log_1mb):
    lq = (z - mz) / T - lz
    lp = (t - mt) / T - lt
    a = lp + log_beta
    b = lq + log_1mb
    hi = tl.maximum(a, b)
    lo = tl.minimum(a, b)
    lm = hi + tl.log(1.0 + tl.exp(tl.where(hi == NEG_INF, NEG_INF, lo - hi)))
    return lq, lp, lm


@triton.jit
def jsd_forward(z_ptr, t_ptr, value_ptr, stats_ptr, N, V, par_ptr,
                ROWS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    T = tl.load(par_ptr)
    beta = tl.load(par_ptr + 1)
    log_beta = tl.load(par_ptr + 2)
    log_1mb = tl.load(par_ptr + 3)
    rows, live = _rows(N, ROWS)
    mz = tl.full((ROWS,), NEG_INF, ACC)
    mt = tl.full((ROWS,), NEG_INF, ACC)
    sz = tl.zeros((ROWS,), ACC)
    st = tl.zeros((ROWS,), ACC)
    for lo in range(0, V, BLOCK):
        z, _, _ = _tile(z_ptr, rows, live, lo, V, BLOCK, ACC)
        t, _, _ = _tile(t_ptr, rows, live, lo, V, BLOCK, ACC)
        mz, rz, ez = _online(mz, z, T)
        mt, rt, et = _online(mt, t, T)
        sz = sz * rz + tl.sum(ez, 1)
        st = st * rt + tl.sum(et, 1)
    lz = tl.log(sz)
    lt = tl.log(st)
    kp = tl.zeros((ROWS,), ACC)
    kq = tl.zeros((ROWS,), ACC)
    for lo in range(0, V, BLOCK):
        z, _, _ = _tile(z_ptr, rows, live, lo, V, BLOCK, ACC)
        t, _, _ = _tile(t_ptr, rows, live, lo, V, BLOCK, ACC)
        lq, lp, lm = _jsd_logs(z, t, mz[:, None], lz[:, None], mt[:, None], lt[:, None], T, log_beta, log_1mb)
        kp += tl.sum(tl.where(t == NEG_INF, 0.0, tl.exp(lp) * (lp - lm)), 1)
        kq += tl.sum(tl.where(z == NEG_INF, 0.0, tl.exp(lq) * (lq - lm)), 1)
    # A row without a possible token leaves every term selected away: flag it non-finite.
    jsd = tl.where((mz == NEG_INF) | (mt == NEG_INF), float("nan"), beta * kp + (1 - beta) * kq)
    tl.store(value_ptr + rows, jsd.to(value_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 5, mz.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 5 + 1, lz.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 5 + 2, mt.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 5 + 3, lt.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 5 + 4, kq.to(stats_ptr.dtype.element_ty), mask=live)


@triton.jit
def jsd_backward(z_ptr, t_ptr, stats_ptr, cot_ptr, grad_ptr, N, V, par_ptr,
                 ROWS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    T = tl.load(par_ptr)
    beta = tl.load(par_ptr + 1)
    log_beta = tl.load(par_ptr + 2)
    log_1mb = tl.load(par_ptr + 3)
    rows, live = _rows(N, ROWS)
    mz = tl.load(stats_ptr + rows * 5, mask=live, other=0).to(ACC)[:, None]
    lz = tl.load(stats_ptr + rows * 5 + 1, mask=live, other=0).to(ACC)[:, None]
    mt = tl.load(stats_ptr + rows * 5 + 2, mask=live, other=0).to(ACC)[:, None]
    lt = tl.load(stats_ptr + rows * 5 + 3, mask=live, other=0).to(ACC)[:, None]
    kq = tl.load(stats_ptr + rows * 5 + 4, mask=live, other=0).to(ACC)[:, None]
    k = (tl.load(cot_ptr + rows, mask=live, other=0).to(ACC) * (1 - beta) / T)[:, None]
    for lo in range(0, V, BLOCK):
        z, offs, inside = _tile(z_ptr, rows, live, lo, V, BLOCK, ACC)
        t, _, _ = _tile(t_ptr, rows, live, lo, V, BLOCK, ACC)
        lq, _, lm = _jsd_logs(z, t, mz, lz, mt, lt, T, log_beta, log_1mb)
        g = tl.where(z == NEG_INF, 0.0, k * tl.exp(lq) * ((lq - lm) - kq))
        tl.store(grad_ptr + rows[:, None] * V + offs[None, :], g.to(grad_ptr.dtype.element_ty), mask=inside)


# ---------------------------------------------------------------------------------------------
# Skew KL (DistiLLM §3), 0 < α < 1, and total variation: two forward passes as the JSD
# ---------------------------------------------------------------------------------------------
# FORWARD: KL(p‖m), m = α·p + (1−α)·q; gradient −(1−α)·q·(x − Σ q·x)/T with x = p/m.
# reverse: KL(q‖m), m = α·q + (1−α)·p; gradient q·(y − Σ q·y)/T with y = ℓ − α·e^ℓ, ℓ = log q − log m.
# log m by ``_jsd_logs`` with the weights (log w_p, log w_q) of p and q. TVD: ½·Σ|q − p|, gradient
# q·(σ − Σ q·σ)/(2T), σ = sign(q − p), sign(0) = 0. Statistics per row: M_z, log S_z, M_t, log S_t
# and the centring constant (Σ q·x, Σ q·y or Σ q·σ).

@triton.jit
def _normalisers(z_ptr, t_ptr, rows, live, V, T, ROWS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    mz = tl.full((ROWS,), NEG_INF, ACC)
    mt = tl.full((ROWS,), NEG_INF, ACC)
    sz = tl.zeros((ROWS,), ACC)
    st = tl.zeros((ROWS,), ACC)
    for lo in range(0, V, BLOCK):
        z, _, _ = _tile(z_ptr, rows, live, lo, V, BLOCK, ACC)
        t, _, _ = _tile(t_ptr, rows, live, lo, V, BLOCK, ACC)
        mz, rz, ez = _online(mz, z, T)
        mt, rt, et = _online(mt, t, T)
        sz = sz * rz + tl.sum(ez, 1)
        st = st * rt + tl.sum(et, 1)
    return mz, tl.log(sz), mt, tl.log(st)


@triton.jit
def _flag_bad_rows(value, mz, lz, mt, lt):
    """NaN for a row without a possible token, or whose normaliser is not finite (a NaN or +inf
    logit: the maximum ignores NaN, and a divergence whose terms read one model only may not)."""
    bad = (mz == NEG_INF) | (mt == NEG_INF) | (lz != lz) | (lt != lt) | (lz == float("inf")) | (lt == float("inf"))
    return tl.where(bad, float("nan"), value)


@triton.jit
def _store_stats(stats_ptr, rows, live, mz, lz, mt, lt, c):
    tl.store(stats_ptr + rows * 5, mz.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 5 + 1, lz.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 5 + 2, mt.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 5 + 3, lt.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 5 + 4, c.to(stats_ptr.dtype.element_ty), mask=live)


@triton.jit
def _skew_terms(z, t, mz, lz, mt, lt, T, alpha, log_wp, log_wq, FORWARD: tl.constexpr):
    """(the divergence's terms, the gradient's weights x or y) of a tile; 0 at impossible tokens."""
    lq, lp, lm = _jsd_logs(z, t, mz, lz, mt, lt, T, log_wp, log_wq)
    if FORWARD:
        term = tl.where(t == NEG_INF, 0.0, tl.exp(lp) * (lp - lm))
        w = tl.where(t == NEG_INF, 0.0, tl.exp(lp - lm))
    else:
        ell = lq - lm
        term = tl.where(z == NEG_INF, 0.0, tl.exp(lq) * ell)
        w = tl.where(z == NEG_INF, 0.0, ell - alpha * tl.exp(ell))
    return term, w, lq


@triton.jit
def skew_forward(z_ptr, t_ptr, value_ptr, stats_ptr, N, V, par_ptr, FORWARD: tl.constexpr,
                 ROWS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    T = tl.load(par_ptr)
    alpha = tl.load(par_ptr + 1)
    log_wp = tl.load(par_ptr + 2)
    log_wq = tl.load(par_ptr + 3)
    rows, live = _rows(N, ROWS)
    mz, lz, mt, lt = _normalisers(z_ptr, t_ptr, rows, live, V, T, ROWS, BLOCK, ACC)
    kl = tl.zeros((ROWS,), ACC)
    c = tl.zeros((ROWS,), ACC)
    for lo in range(0, V, BLOCK):
        z, _, _ = _tile(z_ptr, rows, live, lo, V, BLOCK, ACC)
        t, _, _ = _tile(t_ptr, rows, live, lo, V, BLOCK, ACC)
        term, w, lq = _skew_terms(z, t, mz[:, None], lz[:, None], mt[:, None], lt[:, None], T, alpha,
                                  log_wp, log_wq, FORWARD)
        kl += tl.sum(term, 1)
        c += tl.sum(tl.where(z == NEG_INF, 0.0, tl.exp(lq) * w), 1)
    kl = _flag_bad_rows(kl, mz, lz, mt, lt)
    tl.store(value_ptr + rows, kl.to(value_ptr.dtype.element_ty), mask=live)
    _store_stats(stats_ptr, rows, live, mz, lz, mt, lt, c)


@triton.jit
def skew_backward(z_ptr, t_ptr, stats_ptr, cot_ptr, grad_ptr, N, V, par_ptr, FORWARD: tl.constexpr,
                  ROWS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    T = tl.load(par_ptr)
    alpha = tl.load(par_ptr + 1)
    log_wp = tl.load(par_ptr + 2)
    log_wq = tl.load(par_ptr + 3)
    rows, live = _rows(N, ROWS)
    mz = tl.load(stats_ptr + rows * 5, mask=live, other=0).to(ACC)[:, None]
    lz = tl.load(stats_ptr + rows * 5 + 1, mask=live, other=0).to(ACC)[:, None]
    mt = tl.load(stats_ptr + rows * 5 + 2, mask=live, other=0).to(ACC)[:, None]
    lt = tl.load(stats_ptr + rows * 5 + 3, mask=live, other=0).to(ACC)[:, None]
    c = tl.load(stats_ptr + rows * 5 + 4, mask=live, other=0).to(ACC)[:, None]
    k = tl.load(cot_ptr + rows, mask=live, other=0).to(ACC) / T
    if FORWARD:
        k = -(1 - alpha) * k
    for lo in range(0, V, BLOCK):
        z, offs, inside = _tile(z_ptr, rows, live, lo, V, BLOCK, ACC)
        t, _, _ = _tile(t_ptr, rows, live, lo, V, BLOCK, ACC)
        _, w, lq = _skew_terms(z, t, mz, lz, mt, lt, T, alpha, log_wp, log_wq, FORWARD)
        g = tl.where(z == NEG_INF, 0.0, k[:, None] * tl.exp(lq) * (w - c))
        tl.store(grad_ptr + rows[:, None] * V + offs[None, :], g.to(grad_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _tvd_terms(z, t, mz, lz, mt, lt, T):
    q = tl.where(z == NEG_INF, 0.0, tl.exp((z - mz) / T - lz))
    p = tl.where(t == NEG_INF, 0.0, tl.exp((t - mt) / T - lt))
    sigma = tl.where(q > p, 1.0, tl.where(q < p, -1.0, 0.0))
    return q, tl.abs(q - p), sigma


@triton.jit
def tvd_forward(z_ptr, t_ptr, value_ptr, stats_ptr, N, V, par_ptr,
                ROWS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    T = tl.load(par_ptr)
    rows, live = _rows(N, ROWS)
    mz, lz, mt, lt = _normalisers(z_ptr, t_ptr, rows, live, V, T, ROWS, BLOCK, ACC)
    total = tl.zeros((ROWS,), ACC)
    c = tl.zeros((ROWS,), ACC)
    for lo in range(0, V, BLOCK):
        z, _, _ = _tile(z_ptr, rows, live, lo, V, BLOCK, ACC)
        t, _, _ = _tile(t_ptr, rows, live, lo, V, BLOCK, ACC)
        q, d, sigma = _tvd_terms(z, t, mz[:, None], lz[:, None], mt[:, None], lt[:, None], T)
        total += tl.sum(d, 1)
        c += tl.sum(q * sigma, 1)
    value = _flag_bad_rows(total / 2, mz, lz, mt, lt)
    tl.store(value_ptr + rows, value.to(value_ptr.dtype.element_ty), mask=live)
    _store_stats(stats_ptr, rows, live, mz, lz, mt, lt, c)


@triton.jit
def tvd_backward(z_ptr, t_ptr, stats_ptr, cot_ptr, grad_ptr, N, V, par_ptr,
                 ROWS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    T = tl.load(par_ptr)
    rows, live = _rows(N, ROWS)
    mz = tl.load(stats_ptr + rows * 5, mask=live, other=0).to(ACC)[:, None]
    lz = tl.load(stats_ptr + rows * 5 + 1, mask=live, other=0).to(ACC)[:, None]
    mt = tl.load(stats_ptr + rows * 5 + 2, mask=live, other=0).to(ACC)[:, None]
    lt = tl.load(stats_ptr + rows * 5 + 3, mask=live, other=0).to(ACC)[:, None]
    c = tl.load(stats_ptr + rows * 5 + 4, mask=live, other=0).to(ACC)[:, None]
    k = (tl.load(cot_ptr + rows, mask=live, other=0).to(ACC) / (2 * T))[:, None]
    for lo in range(0, V, BLOCK):
        z, offs, inside = _tile(z_ptr, rows, live, lo, V, BLOCK, ACC)
        t, _, _ = _tile(t_ptr, rows, live, lo, V, BLOCK, ACC)
        q, _, sigma = _tvd_terms(z, t, mz, lz, mt, lt, T)
        tl.store(grad_ptr + rows[:, None] * V + offs[None, :], (k * q * (sigma - c)).to(grad_ptr.dtype.element_ty),
                 mask=inside)


# ---------------------------------------------------------------------------------------------
# Hinton: (1−α)·(−log q^{(1)}_y) + α·s·KL(p‖q) per row (the caller takes the mean)
# ---------------------------------------------------------------------------------------------
# The hard term at T = 1 shares the student's maximum: −log q^{(1)}_y = (M_z − z_y) + log S1,
# S1 = Σ e^{z − M_z}. Gradient (1−α)(q^{(1)} − e_y) + α·s·(q − p)/T (Hinton et al. 2015 §2).
# SAME_T: T = 1, the soft student is the hard one (one exponential fewer per token).
# Statistics per row: M_z, log S_z, M_t, log S_t, log S1.

@triton.jit
def hinton_forward(z_ptr, t_ptr, y_ptr, value_ptr, stats_ptr, N, V, par_ptr, SAME_T: tl.constexpr,
                   ROWS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    T = tl.load(par_ptr)
    alpha = tl.load(par_ptr + 1)
    scale = tl.load(par_ptr + 2)
    rows, live = _rows(N, ROWS)
    mz = tl.full((ROWS,), NEG_INF, ACC)
    mt = tl.full((ROWS,), NEG_INF, ACC)
    sz = tl.zeros((ROWS,), ACC)
    st = tl.zeros((ROWS,), ACC)
    s1 = tl.zeros((ROWS,), ACC)
    a = tl.zeros((ROWS,), ACC)
    for lo in range(0, V, BLOCK):
        z, _, _ = _tile(z_ptr, rows, live, lo, V, BLOCK, ACC)
        t, _, _ = _tile(t_ptr, rows, live, lo, V, BLOCK, ACC)
        m_old = mz
        mz, rz, ez = _online(mz, z, T)
        mt, rt, et = _online(mt, t, T)
        sz = sz * rz + tl.sum(ez, 1)
        st = st * rt + tl.sum(et, 1)
        if not SAME_T:
            _, r1, e1 = _online(m_old, z, 1.0)
            s1 = s1 * r1 + tl.sum(e1, 1)
        d = tl.where(t == NEG_INF, 0.0, (t - z) / T)
        a = a * rt + tl.sum(et * d, 1)
    if SAME_T:
        s1 = sz
    lz = tl.log(sz)
    lt = tl.log(st)
    l1 = tl.log(s1)
    kl = a / st - (mt - mz) / T - lt + lz
    y = tl.load(y_ptr + rows, mask=live, other=0)
    zy = tl.load(z_ptr + rows * V + y, mask=live, other=0).to(ACC)
    ce = (mz - zy) + l1
    tl.store(value_ptr + rows, ((1 - alpha) * ce + alpha * scale * kl).to(value_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 5, mz.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 5 + 1, lz.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 5 + 2, mt.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 5 + 3, lt.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 5 + 4, l1.to(stats_ptr.dtype.element_ty), mask=live)


@triton.jit
def hinton_backward(z_ptr, t_ptr, y_ptr, stats_ptr, cot_ptr, grad_ptr, N, V, par_ptr,
                    ROWS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    T = tl.load(par_ptr)
    alpha = tl.load(par_ptr + 1)
    scale = tl.load(par_ptr + 2)
    rows, live = _rows(N, ROWS)
    mz = tl.load(stats_ptr + rows * 5, mask=live, other=0).to(ACC)[:, None]
    lz = tl.load(stats_ptr + rows * 5 + 1, mask=live, other=0).to(ACC)[:, None]
    mt = tl.load(stats_ptr + rows * 5 + 2, mask=live, other=0).to(ACC)[:, None]
    lt = tl.load(stats_ptr + rows * 5 + 3, mask=live, other=0).to(ACC)[:, None]
    l1 = tl.load(stats_ptr + rows * 5 + 4, mask=live, other=0).to(ACC)[:, None]
    y = tl.load(y_ptr + rows, mask=live, other=0)[:, None]
    c = tl.load(cot_ptr + rows, mask=live, other=0).to(ACC)[:, None]
    hard = c * (1 - alpha)
    soft = c * alpha * scale / T
    for lo in range(0, V, BLOCK):
        z, offs, inside = _tile(z_ptr, rows, live, lo, V, BLOCK, ACC)
        t, _, _ = _tile(t_ptr, rows, live, lo, V, BLOCK, ACC)
        q = tl.where(z == NEG_INF, 0.0, tl.exp((z - mz) / T - lz))
        p = tl.where(t == NEG_INF, 0.0, tl.exp((t - mt) / T - lt))
        q1 = tl.where(z == NEG_INF, 0.0, tl.exp((z - mz) - l1))
        g = hard * (q1 - tl.where(offs[None, :] == y, 1.0, 0.0)) + soft * (q - p)
        tl.store(grad_ptr + rows[:, None] * V + offs[None, :], g.to(grad_ptr.dtype.element_ty), mask=inside)


# ---------------------------------------------------------------------------------------------
# Softmax and the selective log-softmax
# ---------------------------------------------------------------------------------------------

@triton.jit
def _normaliser(z_ptr, rows, live, V, T, ROWS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    """(M, log S) of the rows in one pass."""
    m = tl.full((ROWS,), NEG_INF, ACC)
    s = tl.zeros((ROWS,), ACC)
    for lo in range(0, V, BLOCK):
        z, _, _ = _tile(z_ptr, rows, live, lo, V, BLOCK, ACC)
        m, r, e = _online(m, z, T)
        s = s * r + tl.sum(e, 1)
    return m, tl.log(s)


@triton.jit
def softmax_forward(z_ptr, probs_ptr, stats_ptr, N, V, par_ptr,
                    ROWS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    """probs = e^{(z − M)/T − log S}: one pass for the normaliser, one to write."""
    T = tl.load(par_ptr)
    rows, live = _rows(N, ROWS)
    m, ls = _normaliser(z_ptr, rows, live, V, T, ROWS, BLOCK, ACC)
    tl.store(stats_ptr + rows * 2, m.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 2 + 1, ls.to(stats_ptr.dtype.element_ty), mask=live)
    # A row without a possible token would come out as zeros: it gets NaN, which flags it.
    possible = (m > NEG_INF)[:, None]
    m = m[:, None]
    ls = ls[:, None]
    for lo in range(0, V, BLOCK):
        z, offs, inside = _tile(z_ptr, rows, live, lo, V, BLOCK, ACC)
        q = tl.where((z == NEG_INF) & possible, 0.0, tl.exp((z - m) / T - ls))
        tl.store(probs_ptr + rows[:, None] * V + offs[None, :], q.to(probs_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _cotangent_tile(cot_ptr, rows, offs, inside, V, ACC: tl.constexpr):
    return tl.load(cot_ptr + rows[:, None] * V + offs[None, :], mask=inside, other=0.0).to(ACC)


@triton.jit
def softmax_backward(z_ptr, stats_ptr, cot_ptr, grad_ptr, N, V, par_ptr,
                     ROWS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    """∂/∂z_j Σ c_i q_i = q_j (c_j − Σ q·c)/T, q recomputed from the logits in the working
    dtype (not read back from the rounded probabilities): one pass for Σ q·c, one to write."""
    T = tl.load(par_ptr)
    rows, live = _rows(N, ROWS)
    m = tl.load(stats_ptr + rows * 2, mask=live, other=0).to(ACC)[:, None]
    ls = tl.load(stats_ptr + rows * 2 + 1, mask=live, other=0).to(ACC)[:, None]
    qc = tl.zeros((ROWS,), ACC)
    for lo in range(0, V, BLOCK):
        z, offs, inside = _tile(z_ptr, rows, live, lo, V, BLOCK, ACC)
        q = tl.where(z == NEG_INF, 0.0, tl.exp((z - m) / T - ls))
        qc += tl.sum(q * _cotangent_tile(cot_ptr, rows, offs, inside, V, ACC), 1)
    qc = qc[:, None]
    for lo in range(0, V, BLOCK):
        z, offs, inside = _tile(z_ptr, rows, live, lo, V, BLOCK, ACC)
        q = tl.where(z == NEG_INF, 0.0, tl.exp((z - m) / T - ls))
        g = q * (_cotangent_tile(cot_ptr, rows, offs, inside, V, ACC) - qc) / T
        tl.store(grad_ptr + rows[:, None] * V + offs[None, :], g.to(grad_ptr.dtype.element_ty), mask=inside)


@triton.jit
def selective_forward(z_ptr, y_ptr, value_ptr, stats_ptr, N, V, par_ptr,
                      ROWS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    """log q_y = (z_y − M)/T − log S, in one pass over the row."""
    T = tl.load(par_ptr)
    rows, live = _rows(N, ROWS)
    m, ls = _normaliser(z_ptr, rows, live, V, T, ROWS, BLOCK, ACC)
    y = tl.load(y_ptr + rows, mask=live, other=0)
    zy = tl.load(z_ptr + rows * V + y, mask=live, other=0).to(ACC)
    tl.store(value_ptr + rows, ((zy - m) / T - ls).to(value_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 2, m.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 2 + 1, ls.to(stats_ptr.dtype.element_ty), mask=live)


@triton.jit
def selective_backward(z_ptr, y_ptr, stats_ptr, cot_ptr, grad_ptr, N, V, par_ptr,
                       ROWS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    """∂ log q_y/∂z = (e_y − q)/T, times the row's cotangent."""
    T = tl.load(par_ptr)
    rows, live = _rows(N, ROWS)
    m = tl.load(stats_ptr + rows * 2, mask=live, other=0).to(ACC)[:, None]
    ls = tl.load(stats_ptr + rows * 2 + 1, mask=live, other=0).to(ACC)[:, None]
    y = tl.load(y_ptr + rows, mask=live, other=0)[:, None]
    k = (tl.load(cot_ptr + rows, mask=live, other=0).to(ACC) / T)[:, None]
    for lo in range(0, V, BLOCK):
        z, offs, inside = _tile(z_ptr, rows, live, lo, V, BLOCK, ACC)
        q = tl.where(z == NEG_INF, 0.0, tl.exp((z - m) / T - ls))
        g = k * (tl.where(offs[None, :] == y, 1.0, 0.0) - q)
        tl.store(grad_ptr + rows[:, None] * V + offs[None, :], g.to(grad_ptr.dtype.element_ty), mask=inside)


# ---------------------------------------------------------------------------------------------
# Token cross-entropy (lm.cross_entropy)
# ---------------------------------------------------------------------------------------------
# Per counted row, with z' = s·tanh(z/s) when capped (CAPPED), M = max z', S = Σ e^{z'−M}:
#   ℓ = (1−ε)((M − z'_y) + log S) + ε(Σ_j (M − z'_j)/V + log S) + ζ·lse²,  lse = M + log S,
# every bracket a sum of non-negative terms. The forward pass keeps, online, S, S_y = Σ_{j≠y}
# e^{z'_j−M} (so that q_y − 1 = −S_y/S, without the cancellation of q_y − 1 at q_y ≈ 1) and
# D = Σ_j (M − z'_j) (+inf with a −inf logit; rescaled as M grows: + count·(M_new − M_old)). The
# backward pass writes c·[q_j − ε/V + 2ζ·lse·q_j]·sech²(z_j/s), the label's entry
# c·[(q_y − 1) + ε − ε/V + 2ζ·lse·q_y]·sech²(z_y/s) (q_y itself at ε = 1), 0 in rows not
# counted (label −1). Statistics per row: M, log S, the label's bracket.
# tanh and sech² come from u = e^{−2|a|}: tanh|a| = −expm1(−2|a|)/(1 + u), sech² a = 4u/(1 + u)²,
# expm1 by Kahan's (u − 1)·x/log u where u > ½ (no cancellation at small |a|).

@triton.jit
def _tanh_sech2(a):
    t = tl.abs(a)
    u = tl.exp(-2.0 * t)
    em1 = tl.where(u < 0.5, u - 1.0, tl.where(u == 1.0, -2.0 * t, (u - 1.0) * (-2.0 * t) / tl.log(u)))
    th = -em1 / (1.0 + u)
    return tl.where(a < 0, -th, th), 4.0 * u / ((1.0 + u) * (1.0 + u))


@triton.jit
def _capped_tile(z_ptr, rows, live, lo, V, cap, CAPPED: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    """z' of tokens lo..lo+BLOCK (−inf outside the row), the raw tile, offsets and mask."""
    z, offs, inside = _tile(z_ptr, rows, live, lo, V, BLOCK, ACC)
    x = z
    if CAPPED:
        th, _ = _tanh_sech2(z / cap)
        # +inf (and NaN) logits give NaN, not s: the row's value flags bad input
        x = tl.where(inside, cap * th + tl.where(z == NEG_INF, 0.0, z - z), NEG_INF)
    return x, z, offs, inside


@triton.jit
def cross_entropy_forward(z_ptr, y_ptr, value_ptr, stats_ptr, N, V, par_ptr, CAPPED: tl.constexpr,
                          ROWS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    eps = tl.load(par_ptr)
    zeta = tl.load(par_ptr + 1)
    cap = tl.load(par_ptr + 2)
    rows, live = _rows(N, ROWS)
    y = tl.load(y_ptr + rows, mask=live, other=-1)
    counted = y >= 0
    m = tl.full((ROWS,), NEG_INF, ACC)
    s = tl.zeros((ROWS,), ACC)
    s_y = tl.zeros((ROWS,), ACC)
    d = tl.zeros((ROWS,), ACC)
    cnt = tl.zeros((ROWS,), ACC)
    for lo in range(0, V, BLOCK):
        x, _, offs, inside = _capped_tile(z_ptr, rows, live, lo, V, cap, CAPPED, BLOCK, ACC)
        m_old = m
        m, r, e = _online(m, x, 1.0)
        finite = x > NEG_INF
        # a −inf logit makes the smoothing term +inf (the input checks then refuse the row)
        d = tl.where(cnt > 0, d + cnt * (m - m_old), 0.0) + tl.sum(
            tl.where(finite, m[:, None] - x, tl.where(inside, -NEG_INF, 0.0)), 1)
        cnt = cnt + tl.sum(tl.where(finite, 1.0, 0.0), 1)
        s = s * r + tl.sum(e, 1)
        s_y = s_y * r + tl.sum(tl.where(offs[None, :] == y[:, None], 0.0, e), 1)
    ls = tl.log(s)
    lse = m + ls
    zy = tl.load(z_ptr + rows * V + tl.where(counted, y, 0), mask=live & counted, other=0).to(ACC)
    if CAPPED:
        th, _ = _tanh_sech2(zy / cap)
        zy = cap * th
    value = (1 - eps) * ((m - zy) + ls) + tl.where(eps > 0, eps * (d / V + ls), 0.0) + zeta * lse * lse
    qy = tl.exp((zy - m) - ls)
    gy = tl.where(eps == 1, qy, -s_y / s + eps) - eps / V + 2 * zeta * lse * qy
    tl.store(value_ptr + rows, tl.where(counted, value, 0.0).to(value_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 3, m.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 3 + 1, ls.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + rows * 3 + 2, gy.to(stats_ptr.dtype.element_ty), mask=live)


@triton.jit
def cross_entropy_backward(z_ptr, y_ptr, stats_ptr, cot_ptr, grad_ptr, N, V, par_ptr, CAPPED: tl.constexpr,
                           ROWS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    eps = tl.load(par_ptr)
    zeta = tl.load(par_ptr + 1)
    cap = tl.load(par_ptr + 2)
    rows, live = _rows(N, ROWS)
    y = tl.load(y_ptr + rows, mask=live, other=-1)[:, None]
    m = tl.load(stats_ptr + rows * 3, mask=live, other=0).to(ACC)[:, None]
    ls = tl.load(stats_ptr + rows * 3 + 1, mask=live, other=0).to(ACC)[:, None]
    gy = tl.load(stats_ptr + rows * 3 + 2, mask=live, other=0).to(ACC)[:, None]
    c = tl.load(cot_ptr + rows, mask=live, other=0).to(ACC)[:, None]
    k = 1 + 2 * zeta * (m + ls)
    for lo in range(0, V, BLOCK):
        x, z, offs, inside = _capped_tile(z_ptr, rows, live, lo, V, cap, CAPPED, BLOCK, ACC)
        q = tl.where(x == NEG_INF, 0.0, tl.exp((x - m) - ls))
        g = tl.where(offs[None, :] == y, gy, q * k - eps / V)
        if CAPPED:
            _, s2 = _tanh_sech2(z / cap)
            g = g * s2
        g = tl.where(y >= 0, c * g, 0.0)
        tl.store(grad_ptr + rows[:, None] * V + offs[None, :], g.to(grad_ptr.dtype.element_ty), mask=inside)
