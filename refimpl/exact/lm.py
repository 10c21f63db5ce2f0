"""Language-model token objectives: cross-entropy, the sampled token's log-probability, entropy.

Notation: z = logits [N, V], y = labels [N], q = softmax over the vocabulary (the last axis),
lse = log Σ_v e^{z_v}. A logit of −inf is an impossible token (probability exactly 0).

* ``cross_entropy`` follows torch.nn.functional.cross_entropy (PyTorch 2.x, its documented
  formula): per counted token (label ≠ ignore_index)

      ℓ = (1−ε)·(lse − z'_y) + ε·(lse − (1/V)·Σ_v z'_v) + ζ·lse²,

  with label smoothing ε as PyTorch defines it (Szegedy et al. 2016, arXiv 1512.00567, §7: the
  target (1−ε)·e_y + ε/V, so the smoothing term is the mean over all V classes of −log q_v); the
  z-loss ζ·log²Z of PaLM (arXiv 2204.02311) §5, as Liger 0.8.5's ``lse_square_scale``; and the
  final-logit soft-capping z' = s·tanh(z/s) of Gemma 2 (arXiv 2408.00118) §2 (z' = z without it),
  applied before the softmax. ``smoothing_classes`` 'others' spreads ε over the V − 1 classes
  other than the label instead (Megatron-core 0.16.1 tensor_parallel/cross_entropy.py
  _VocabParallelCrossEntropy, after NeMo's smoothed cross-entropy: the target (1−ε)·e_y + ε/(V−1)
  off y), so the smoothing term is ε·(1/(V−1))·Σ_{v≠y}(lse − z'_v). An ignored token has ℓ = 0
  and no smoothing, no z-loss. reduction
  'mean' divides Σℓ by the number of counted tokens, or by ``normalizer`` when given (transformers
  loss/loss_utils.py fixed_cross_entropy divides the sum by num_items_in_batch); 'sum' is Σℓ;
  'none' is ℓ per token. Gradient (w the weight of the token: cotangent/denominator for a
  reduced loss, the token's cotangent for 'none'):

      ∂ℓ/∂z_j = w·[q_j − (1−ε)·δ_{jy} − ε/V + 2ζ·lse·q_j]·sech²(z_j/s)   (the sech² only when capped),

  with −ε/(V−1)·(1 − δ_{jy}) in place of −ε/V under 'others'.

* ``linear_cross_entropy``: the fused-linear form (Liger 0.8.5 LigerFusedLinearCrossEntropyLoss; Cut
  Cross-Entropy, Wijmans et al. 2024, arXiv 2411.09009; torchtune's chunked output loss): the logits
  z = hidden·weightᵀ (+ bias), each formed exactly (one rounding of an exact dot product), then
  ``cross_entropy`` of z. With G = ∂(Σ c·loss)/∂z (``cross_entropy_vjp``), the chain rule through
  the linear map gives ∂/∂hidden = G·weight, ∂/∂weight = Gᵀ·hidden, ∂/∂bias = Σ_n G_n.
* ``token_logprobs``: log q_y of softmax(z/T), TRL 1.16.0 selective_log_softmax and verl 0.9.1
  logprobs_from_logits; ∂/∂z_j = c·(δ_{jy} − q_j)/T.
* ``entropy``: H = −Σ_v q_v log q_v of softmax(z/T) (verl 0.9.1 and TRL 1.16.0
  entropy_from_logits); with x = z/T, ∂H/∂x_j = −q_j·(log q_j + H) = −q_j·Σ_i q_i·(x_j − x_i), so
  ∂H/∂z_j = −c·q_j·(s_j − Σ_i q_i s_i)/T with s = x − max x (the same, as Σ_i q_i = 1), so that a row
  of equal logits has a gradient of exactly 0.

Every row is evaluated through its largest logit m: lse = m + log1p(Σ_{j≠k} e^{z_j − m}), so that
lse − z_y = (m − z_y) + log1p(…) is a sum of non-negative terms, and q_y − 1 = expm1(log q_y) keeps
its digits when q_y is within e^{−10^4} of 1.
"""
from __future__ import annotations

import mpmath
import numpy as np

from lossproof.refimpl import validate
from lossproof.refimpl.exact import mp

__all__ = ["cross_entropy", "cross_entropy_vjp", "linear_cross_entropy", "linear_cross_entropy_vjp",
           "token_logprobs", "token_logprobs_vjp", "entropy", "entropy_vjp"]


class _Row:
    """softmax(x) of one row x (mpf, −inf for impossible tokens): log q and the pieces of lse."""

    def __init__(self, x):
        self.x = x
        self.k = k = max(range(len(x)), key=lambda i: x[i])
        self.max = x[k]
        shifted = [xi - self.max for xi in x]        # 0 at k, −inf at impossible tokens
        self.l1 = mpmath.log1p(mpmath.fsum(mpmath.exp(s) for j, s in enumerate(shifted) if j != k))
        self.lse = self.max + self.l1
        self.logq = [s - self.l1 for s in shifted]
        self.q = [mpmath.exp(lq) for lq in self.logq]

    def nll(self, y):
        """−log q_y = (max − x_y) + log1p(…): two non-negative terms."""
        return (self.max - self.x[y]) + self.l1

    def q_minus_onehot(self, y):
        """q − e_y, with q_y − 1 = expm1(log q_y) (no cancellation when q_y ≈ 1)."""
        g = list(self.q)
        g[y] = mpmath.expm1(self.logq[y])
        return g


def _logits(logits):
    z = mp.array("logits", logits, allow_neg_inf=True)
    validate.rank("logits", z.shape, 2)
    validate.lm_logit_rows(*z.shape)
    return z


def _labels(labels, n: int) -> list[int]:
    y = mp.int_array("labels", labels)
    validate.rank("labels", y.shape, 1)
    validate.same_shape(**{"logits rows": (n,)}, labels=y.shape)
    return [int(v) for v in y]


def _vector(values) -> np.ndarray:
    out = mp.zeros((len(values),))
    out[:] = values
    return out


def _rows(z, y, counted, smoothing=0.0):
    validate.lm_rows([all(v == mp.NEG_INF for v in row) for row in z],
                     [row[yi] == mp.NEG_INF if c else False for row, yi, c in zip(z, y, counted)],
                     [any(v == mp.NEG_INF for v in row) for row in z], counted, smoothing)


# --------------------------------------------------------------------------- cross-entropy

def _sech2(x):
    return mpmath.sech(x) ** 2


def _ce_prepare(logits, labels, ignore_index, label_smoothing, z_loss, softcap, reduction, normalizer,
                smoothing_classes="all"):
    z = _logits(logits)
    n, v = z.shape
    y = _labels(labels, n)
    ignore, eps, zeta, cap, reduction, norm = validate.lm_conventions(ignore_index, label_smoothing, z_loss,
                                                                      softcap, reduction, normalizer)
    classes = validate.smoothing_classes(smoothing_classes, eps, v)
    eps, zeta = mp.mpf(eps), mp.mpf(zeta)
    counted = validate.token_labels(y, v, ignore)
    if cap is None:
        _rows(z, y, counted, float(eps))
        zc, dcap = z, None
    else:
        s = mp.mpf(cap)
        zc = np.frompyfunc(lambda t: s * mpmath.tanh(t / s), 1, 1)(z)
        dcap = np.frompyfunc(lambda t: _sech2(t / s), 1, 1)(z)
    validate.empty_mean(reduction, norm, sum(counted))
    if reduction == "mean":
        denominator = mp.mpf(norm) if norm is not None else mp.mpf(sum(counted))
    else:
        denominator = None
    return zc, dcap, y, counted, eps, zeta, reduction, denominator, classes


def _ce_token(row: _Row, y, eps, zeta, v, classes="all"):
    nll = row.nll(y)
    value = (1 - eps) * nll
    if eps and classes == "others":
        # (1/(V−1))·Σ_{v≠y} (lse − x_v): the same non-negative terms over the other classes
        value += eps * (mpmath.fsum(row.max - xv for j, xv in enumerate(row.x) if j != y) / (v - 1) + row.l1)
    elif eps:
        # lse − mean_v x_v = mean_v (max − x_v) + log1p(…): non-negative terms
        value += eps * (mpmath.fsum(row.max - xv for xv in row.x) / v + row.l1)
    if zeta:
        value += zeta * row.lse ** 2
    return value


@mp.exact
def cross_entropy(logits, labels, ignore_index: int = -100, label_smoothing: float = 0.0, z_loss: float = 0.0,
                  softcap: float | None = None, reduction: str = "mean", normalizer: float | None = None,
                  smoothing_classes: str = "all"):
    """Token cross-entropy (torch.nn.functional.cross_entropy; module docstring for the formula and its
    sources). ``logits`` [N, V], ``labels`` [N] integers in [0, V) or ``ignore_index``. Returns the
    scalar loss, or loss[N] for reduction 'none' (0 at ignored tokens).

    Rejected (InputError): a label outside [0, V) that is not ignore_index; a row that is −inf
    everywhere; −inf at a counted token's label, or anywhere in a counted row with
    label_smoothing > 0 (the loss is infinite; soft-capping maps −inf to −s, so with a cap these are
    finite); 'mean' without a normalizer when every token is ignored (0/0, where PyTorch returns
    NaN); a normalizer with reduction 'sum' or 'none'; smoothing_classes 'others' with V = 1 and
    label_smoothing > 0 (no other class)."""
    zc, _, y, counted, eps, zeta, reduction, denominator, classes = _ce_prepare(
        logits, labels, ignore_index, label_smoothing, z_loss, softcap, reduction, normalizer, smoothing_classes)
    v = zc.shape[1]
    per_token = [_ce_token(_Row(list(row)), yi, eps, zeta, v, classes) if c else mp.ZERO
                 for row, yi, c in zip(zc, y, counted)]
    if reduction == "none":
        return _vector(per_token)
    total = mpmath.fsum(per_token)
    return total / denominator if reduction == "mean" else total


@mp.exact
def cross_entropy_vjp(cotangent, logits, labels, ignore_index: int = -100, label_smoothing: float = 0.0,
                      z_loss: float = 0.0, softcap: float | None = None, reduction: str = "mean",
                      normalizer: float | None = None, smoothing_classes: str = "all"):
    """Gradient of Σ cotangent·loss with respect to the logits (module docstring):
    w·[q_j − (1−ε)δ_{jy} − ε/V + 2ζ·lse·q_j]·sech²(z_j/s) (−ε/(V−1) off y under 'others'), 0 in
    ignored rows. A −inf logit has gradient 0 (q_j = 0 uncapped; sech²(−∞) = 0 capped)."""
    zc, dcap, y, counted, eps, zeta, reduction, denominator, classes = _ce_prepare(
        logits, labels, ignore_index, label_smoothing, z_loss, softcap, reduction, normalizer, smoothing_classes)
    n, v = zc.shape
    ct = mp.array("cotangent", cotangent)
    validate.same_shape(**{"loss": (n,) if reduction == "none" else ()}, cotangent=ct.shape)
    weights = list(ct) if reduction == "none" else [ct.item() / denominator if reduction == "mean" else ct.item()] * n
    grad = mp.zeros((n, v))
    for i, (row, yi, c, w) in enumerate(zip(zc, y, counted, weights)):
        if not c:
            continue
        r = _Row(list(row))
        g = list(r.q)
        # q_y − (1−ε): (q_y − 1) + ε with q_y − 1 = expm1(log q_y), except at ε = 1 where it is q_y
        g[yi] = r.q[yi] if eps == 1 else mpmath.expm1(r.logq[yi]) + eps
        extra = 2 * zeta * r.lse
        for j in range(v):
            if classes == "others":   # the target puts ε/(V−1) on every class but y, 1 − ε on y
                gj = g[j] - (eps / (v - 1) if j != yi else 0) + extra * r.q[j]
            else:
                gj = g[j] - eps / v + extra * r.q[j]
            if dcap is not None:
                gj *= dcap[i, j]
            grad[i, j] = w * gj
    return {"logits": grad}


# --------------------------------------------------------------------------- fused-linear cross-entropy

def _linear_prepare(hidden, weight, bias):
    h = mp.array("hidden", hidden)
    w = mp.array("weight", weight)
    b = None if bias is None else mp.array("bias", bias)
    n, _, v = validate.linear_shapes(h.shape, w.shape, None if b is None else b.shape)
    z = mp.zeros((n, v))
    for i in range(n):
        for j in range(v):
            # mpmath.fdot sums the products (and the bias, as bias·1) exactly and rounds once
            z[i, j] = mpmath.fdot(list(h[i]) + ([b[j]] if b is not None else []),
                                  list(w[j]) + ([mp.ONE] if b is not None else []))
    return h, w, b, z


@mp.exact
def linear_cross_entropy(hidden, weight, labels, ignore_index: int = -100, label_smoothing: float = 0.0,
                         z_loss: float = 0.0, softcap: float | None = None, reduction: str = "mean",
                         normalizer: float | None = None, smoothing_classes: str = "all", bias=None):
    """``cross_entropy`` of the logits hidden·weightᵀ (+ bias) (module docstring). ``hidden`` [N, H],
    ``weight`` [V, H], ``labels`` [N], ``bias`` [V] or None. Rejected: everything ``cross_entropy``
    rejects; weight's last axis ≠ H; a bias whose length is not V; NaN or ±inf anywhere in hidden,
    weight or bias (no token is impossible here)."""
    _, _, _, z = _linear_prepare(hidden, weight, bias)
    return cross_entropy(z, labels, ignore_index, label_smoothing, z_loss, softcap, reduction, normalizer,
                         smoothing_classes)


@mp.exact
def linear_cross_entropy_vjp(cotangent, hidden, weight, labels, ignore_index: int = -100,
                             label_smoothing: float = 0.0, z_loss: float = 0.0, softcap: float | None = None,
                             reduction: str = "mean", normalizer: float | None = None,
                             smoothing_classes: str = "all", bias=None):
    """Gradients of Σ cotangent·loss: with G the logits' gradient (``cross_entropy_vjp``),
    hidden: G·weight (summed without the cancellation of a saturated row, see below), weight:
    Gᵀ·hidden, bias: Σ_n G_n (only when a bias is given)."""
    h, w, b, z = _linear_prepare(hidden, weight, bias)
    g = cross_entropy_vjp(cotangent, z, labels, ignore_index, label_smoothing, z_loss, softcap, reduction,
                          normalizer, smoothing_classes)["logits"]
    zc, dcap, y, counted, eps, zeta, reduction, denominator, classes = _ce_prepare(
        z, labels, ignore_index, label_smoothing, z_loss, softcap, reduction, normalizer, smoothing_classes)
    (n, hdim), v = h.shape, w.shape[0]
    ct = mp.array("cotangent", cotangent)
    weights = list(ct) if reduction == "none" else [ct.item() / denominator if reduction == "mean" else ct.item()] * n
    dh, dw = mp.zeros((n, hdim)), mp.zeros((v, hdim))
    for i in range(n):
        if not counted[i]:
            continue
        # Σ_v G_v·w_vk sums a row of G whose entries cancel (Σ_v (q_v − t_v) = 0): with a saturated
        # top token m, q_m = 1 − Σ_{v≠m} q_v is not representable and the product G·w would lose
        # everything below q_m's rounding (a hidden gradient of e^−400 came out 0). With G_v =
        # w·(a·q_v − t_v)·c_v, a = 1 + 2ζ·lse, c_v = sech²(z_v/s) or 1, t = (1−ε)e_y + ε/V, the same sum is
        # a·c_m·w_mk − a·Σ_{v≠m} q_v·(c_m·w_mk − c_v·w_vk) − (1−ε)·c_y·w_yk − (ε/V)·Σ_v c_v·w_vk,
        # every term formed from the data or from a small q_v ('others': t = (1−ε)e_y + ε/(V−1) off y,
        # so the last sum is (ε/(V−1))·Σ_{v≠y} c_v·w_vk).
        r, yi = _Row(list(zc[i])), y[i]
        m, a = r.k, 1 + 2 * zeta * r.lse
        c = [dcap[i, j] if dcap is not None else mp.ONE for j in range(v)]
        for k in range(hdim):
            top = c[m] * w[m, k]
            terms = [top, -(1 - eps) * c[yi] * w[yi, k], 2 * zeta * r.lse * top]
            terms += [-a * r.q[j] * (top - c[j] * w[j, k]) for j in range(v) if j != m]
            if eps and classes == "others":
                terms += [-(eps / (v - 1)) * c[j] * w[j, k] for j in range(v) if j != yi]
            elif eps:
                terms += [-(eps / v) * c[j] * w[j, k] for j in range(v)]
            dh[i, k] = weights[i] * mpmath.fsum(terms)
    for j in range(v):
        for k in range(hdim):
            dw[j, k] = mpmath.fdot(g[:, j], h[:, k])
    out = {"hidden": dh, "weight": dw}
    if b is not None:
        out["bias"] = _vector([mpmath.fsum(g[:, j]) for j in range(v)])
    return out


# --------------------------------------------------------------------------- sampled-token log-probability

def _tempered(z, T):
    return [_Row([zj / T for zj in row]) for row in z]


def _logprob_prepare(logits, labels, temperature):
    z = _logits(logits)
    T = mp.mpf(validate.temperature(temperature))
    n, v = z.shape
    y = _labels(labels, n)
    counted = validate.token_labels(y, v)
    _rows(z, y, counted)
    return z, T, _tempered(z, T), y


@mp.exact
def token_logprobs(logits, labels, temperature: float = 1.0):
    """log q_y of softmax(z/T) per row (TRL 1.16.0 selective_log_softmax, verl 0.9.1
    logprobs_from_logits). ``logits`` [N, V], ``labels`` [N] in [0, V). Returns logp[N].
    Rejected: a label outside [0, V); −inf at the label (log q_y = −∞); a row −inf everywhere."""
    _, _, rows, y = _logprob_prepare(logits, labels, temperature)
    return _vector([-r.nll(yi) for r, yi in zip(rows, y)])


@mp.exact
def token_logprobs_vjp(cotangent, logits, labels, temperature: float = 1.0):
    """Gradient of Σ_i c_i·log q_{i,y_i}: c_i·(δ_{jy} − q_j)/T (δ_{yy} − q_y = −expm1(log q_y))."""
    z, T, rows, y = _logprob_prepare(logits, labels, temperature)
    ct = mp.array("cotangent", cotangent)
    validate.same_shape(logp=(z.shape[0],), cotangent=ct.shape)
    grad = mp.zeros(z.shape)
    for i, (r, yi, c) in enumerate(zip(rows, y, ct)):
        for j, gj in enumerate(r.q_minus_onehot(yi)):
            grad[i, j] = -c * gj / T
    return {"logits": grad}


# --------------------------------------------------------------------------- entropy

def _entropy_prepare(logits, temperature):
    z = _logits(logits)
    T = mp.mpf(validate.temperature(temperature))
    none = [False] * z.shape[0]
    validate.lm_rows([all(v == mp.NEG_INF for v in row) for row in z], none, none, none)
    return z, T, _tempered(z, T)


def _row_entropy(r: _Row):
    # −Σ q log q with −log q_j = (max − x_j) + l1 ≥ 0; impossible tokens contribute 0 (0·log 0 = 0)
    return mpmath.fsum(qj * ((r.max - xj) + r.l1) for qj, xj in zip(r.q, r.x) if xj != mp.NEG_INF)


@mp.exact
def entropy(logits, temperature: float = 1.0):
    """Entropy H = −Σ_v q_v log q_v of softmax(z/T) per row (verl 0.9.1 and TRL 1.16.0
    entropy_from_logits). ``logits`` [N, V]. Returns entropy[N]. Rejected: a row −inf everywhere."""
    _, _, rows = _entropy_prepare(logits, temperature)
    return _vector([_row_entropy(r) for r in rows])


@mp.exact
def entropy_vjp(cotangent, logits, temperature: float = 1.0):
    """Gradient of Σ_i c_i·H_i: −c_i·q_j·Σ_k q_k·(x_j − x_k)/T with x = z/T (module docstring);
    0 at impossible tokens."""
    z, T, rows = _entropy_prepare(logits, temperature)
    ct = mp.array("cotangent", cotangent)
    validate.same_shape(entropy=(z.shape[0],), cotangent=ct.shape)
    grad = mp.zeros(z.shape)
    for i, (r, c) in enumerate(zip(rows, ct)):
        live = [k for k, xk in enumerate(r.x) if xk != mp.NEG_INF]
        # Σ_k q_k (x_j − x_k) = s_j − Σ_k q_k s_k with s = x − max (Σ q = 1): exactly 0 for equal logits
        s = {k: r.x[k] - r.max for k in live}
        mean_s = mpmath.fsum(r.q[k] * s[k] for k in live)
        for j in live:
            grad[i, j] = -c * r.q[j] * (s[j] - mean_s) / T
    return {"logits": grad}
