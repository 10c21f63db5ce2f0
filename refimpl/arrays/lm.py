"""Language-model token objectives over the array API: cross-entropy, the sampled token's
log-probability, entropy; the fused-linear cross-entropy (the logits hidden·weightᵀ + bias, then the
cross-entropy).

Same names, formulas and contract as ``refimpl.exact.lm`` (torch.nn.functional.cross_entropy with
PyTorch's label smoothing, PaLM §5's z-loss, Gemma 2 §2's soft-capping and transformers'
num_items_in_batch as ``normalizer``; TRL 1.16.0 / verl 0.9.1 selective_log_softmax,
logprobs_from_logits and entropy_from_logits); computed in the inputs' dtype (float64, float32).
Each row is shifted by its largest logit first: −log q_y = (max − z_y) + log1p(S) and
−log q_v ≥ 0 are sums of non-negative terms, q_y − 1 is expm1(log q_y).
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.arrays import _xp

__all__ = ["cross_entropy", "cross_entropy_vjp", "linear_cross_entropy", "linear_cross_entropy_vjp",
           "token_logprobs", "token_logprobs_vjp", "entropy", "entropy_vjp"]


class _Soft:
    """softmax(z/T) along the last axis, shifted by the row maximum."""

    def __init__(self, xp, z, T: float):
        self.support = z > -xp.inf
        is_top, self.max = _xp.row_top(xp, z)
        dz = z - self.max                       # 0 at the top, −inf at impossible tokens
        self.x = dz / T if T != 1.0 else dz
        # log Σ e^{x} = log1p(S), S without the top token: exact when S is below u
        self.l1 = xp.log1p(xp.sum(_xp.masked(xp, ~is_top, xp.exp(self.x)), axis=-1, keepdims=True))
        self.logp = self.x - self.l1
        self.p = xp.exp(self.logp)
        self.lse = (self.max / T if T != 1.0 else self.max) + self.l1

    def nll(self, xp, onehot):
        """−log q_y = −x_y + log1p(S) per row (both terms ≥ 0)."""
        x_y = xp.sum(_xp.masked(xp, onehot & self.support, self.x), axis=-1)
        return -x_y + self.l1[:, 0]

    def q_minus_onehot(self, xp, onehot):
        return xp.where(onehot, xp.expm1(self.logp), self.p)


def _logits(xp, dt, logits):
    z = _xp.array(xp, "logits", logits, dt, allow_neg_inf=True)
    validate.rank("logits", _xp.shape(z), 2)
    validate.lm_logit_rows(*_xp.shape(z))
    return z


def _labels(xp, labels, n: int):
    y = _xp.int_array(xp, "labels", labels)
    validate.rank("labels", _xp.shape(y), 1)
    validate.same_shape(**{"logits rows": (n,)}, labels=_xp.shape(y))
    return y


def _host(xp, a) -> list:
    """A 1-D array's values on the host (only on the path that raises)."""
    return a.tolist()


def _check_labels(xp, y, v: int, ignore):
    counted = y != ignore if ignore is not None else xp.ones(y.shape, dtype=xp.bool)
    if bool(xp.any(counted & ((y < 0) | (y >= v)))):
        validate.token_labels([int(t) for t in _host(xp, y)], v, ignore)   # raises, naming the first row
    return counted


def _check_rows(xp, z, onehot, counted, smoothing=0.0):
    support = z > -xp.inf
    none = ~xp.any(support, axis=-1)
    at_label = counted & xp.any(onehot & ~support, axis=-1)
    some = counted & ~xp.all(support, axis=-1)
    if bool(xp.any(none | at_label | (some & (smoothing > 0)))):
        validate.lm_rows(_host(xp, none), _host(xp, at_label), _host(xp, some), _host(xp, counted), smoothing)


def _onehot(xp, y, counted, v: int):
    safe = xp.where(counted, y, xp.zeros_like(y))
    return (xp.arange(v, dtype=y.dtype) == safe[:, None]) & counted[:, None]


# --------------------------------------------------------------------------- cross-entropy

def _ce_prepare(logits, labels, ignore_index, label_smoothing, z_loss, softcap, reduction, normalizer,
                smoothing_classes):
    xp = _xp.namespace(logits, labels)
    dt = _xp.float_dtype(xp, logits=logits)
    z = _logits(xp, dt, logits)
    n, v = _xp.shape(z)
    y = _labels(xp, labels, n)
    ignore, eps, zeta, cap, reduction, norm = validate.lm_conventions(ignore_index, label_smoothing, z_loss,
                                                                      softcap, reduction, normalizer)
    # 'others' (ε over the V − 1 classes but the label) is the all-V form at weight ε·V/(V − 1)
    eps = validate.smoothing_weight(eps, smoothing_classes, v)
    counted = _check_labels(xp, y, v, ignore)
    onehot = _onehot(xp, y, counted, v)
    if cap is None:
        _check_rows(xp, z, onehot, counted, eps)
        zc, dcap = z, None
    else:
        zc = cap * xp.tanh(z / cap)
        # sech² as 4e/(1 + e)², e = exp(−2|z/s|): no 1 − tanh² cancellation, and no cosh overflow
        # (and its RuntimeWarning) where |z/s| > 710; 0 at ±inf
        e = xp.exp(-2.0 * xp.abs(z / cap))
        dcap = 4.0 * e / ((1.0 + e) * (1.0 + e))
    count = int(xp.sum(xp.astype(counted, xp.int64)))
    validate.empty_mean(reduction, norm, count)
    denominator = (norm if norm is not None else count) if reduction == "mean" else None
    return xp, dt, zc, dcap, onehot, counted, eps, zeta, reduction, denominator


def cross_entropy(logits, labels, ignore_index: int = -100, label_smoothing: float = 0.0, z_loss: float = 0.0,
                  softcap: float | None = None, reduction: str = "mean", normalizer: float | None = None,
                  smoothing_classes: str = "all"):
    """Token cross-entropy (torch.nn.functional.cross_entropy; see ``refimpl.exact.lm``): per counted
    token (1−ε)(lse − z'_y) + ε(lse − mean z') + ζ·lse², 0 at ignore_index; reduced by 'mean'
    (÷ counted tokens or ÷ normalizer), 'sum' or 'none'; ``smoothing_classes`` 'others' spreads ε
    over the classes but the label (Megatron-core)."""
    xp, _, zc, _, onehot, counted, eps, zeta, reduction, denominator = _ce_prepare(
        logits, labels, ignore_index, label_smoothing, z_loss, softcap, reduction, normalizer, smoothing_classes)
    d = _Soft(xp, zc, 1.0)
    nll = d.nll(xp, onehot)
    per = (1 - eps) * nll
    if eps:
        # lse − mean_v z_v = mean_v (max − z_v) + log1p(S): non-negative terms
        per = per + eps * (xp.mean(_xp.masked(xp, d.support, -d.x), axis=-1) + d.l1[:, 0])
    if zeta:
        per = per + zeta * d.lse[:, 0] * d.lse[:, 0]
    per = _xp.masked(xp, counted, per)
    if reduction == "none":
        return per
    total = xp.sum(per)
    return total / denominator if reduction == "mean" else total


def cross_entropy_vjp(cotangent, logits, labels, ignore_index: int = -100, label_smoothing: float = 0.0,
                      z_loss: float = 0.0, softcap: float | None = None, reduction: str = "mean",
                      normalizer: float | None = None, smoothing_classes: str = "all"):
    """Gradient of Σ cotangent·loss: w·[q_j − (1−ε)δ_{jy} − ε/V + 2ζ·lse·q_j]·sech²(z_j/s), 0 in
    ignored rows (w: cotangent ÷ the denominator of 'mean', or the token's cotangent); ε is
    ε·V/(V − 1) under 'others'."""
    xp, dt, zc, dcap, onehot, counted, eps, zeta, reduction, denominator = _ce_prepare(
        logits, labels, ignore_index, label_smoothing, z_loss, softcap, reduction, normalizer, smoothing_classes)
    n, v = _xp.shape(zc)
    ct = _xp.array(xp, "cotangent", cotangent, dt)
    validate.same_shape(**{"loss": (n,) if reduction == "none" else ()}, cotangent=_xp.shape(ct))
    d = _Soft(xp, zc, 1.0)
    # q_y − (1−ε) = expm1(log q_y) + ε (no cancellation at q_y ≈ 1), or q_y at ε = 1
    at_label = d.p if eps == 1 else xp.expm1(d.logp) + eps
    g = xp.where(onehot, at_label, d.p)
    if eps:
        g = g - eps / v
    if zeta:
        g = g + (2 * zeta) * d.lse * d.p
    if dcap is not None:
        g = g * dcap
    if reduction == "none":
        w = ct[:, None]
    else:
        w = xp.reshape(ct, (1, 1)) / denominator if reduction == "mean" else xp.reshape(ct, (1, 1))
    # q_j = 0 at an impossible token, so g is 0 there; ignored rows get exactly 0
    return {"logits": _xp.masked(xp, counted[:, None], w * g)}


# --------------------------------------------------------------------------- fused-linear cross-entropy

def _linear_logits(hidden, weight, bias):
    """z = hidden·weightᵀ (+ bias) in the working dtype (one matrix product, the bias added once)."""
    xp = _xp.namespace(hidden, weight, bias)
    dt = _xp.float_dtype(xp, hidden=hidden, weight=weight, bias=bias)
    h, w = _xp.array(xp, "hidden", hidden, dt), _xp.array(xp, "weight", weight, dt)
    b = None if bias is None else _xp.array(xp, "bias", bias, dt)
    validate.linear_shapes(_xp.shape(h), _xp.shape(w), None if b is None else _xp.shape(b))
    z = xp.matmul(h, xp.matrix_transpose(w))
    return xp, dt, h, w, b, (z if b is None else z + b)


def linear_cross_entropy(hidden, weight, labels, ignore_index: int = -100, label_smoothing: float = 0.0,
                         z_loss: float = 0.0, softcap: float | None = None, reduction: str = "mean",
                         normalizer: float | None = None, smoothing_classes: str = "all", bias=None):
    """``cross_entropy`` of the logits hidden·weightᵀ (+ bias) (Liger 0.8.5
    LigerFusedLinearCrossEntropyLoss, computed unfused: the [N, V] logits are materialised)."""
    *_, z = _linear_logits(hidden, weight, bias)
    return cross_entropy(z, labels, ignore_index, label_smoothing, z_loss, softcap, reduction, normalizer,
                         smoothing_classes)


def linear_cross_entropy_vjp(cotangent, hidden, weight, labels, ignore_index: int = -100,
                             label_smoothing: float = 0.0, z_loss: float = 0.0, softcap: float | None = None,
                             reduction: str = "mean", normalizer: float | None = None,
                             smoothing_classes: str = "all", bias=None):
    """With G = ∂(Σ cotangent·loss)/∂z (``cross_entropy_vjp``): hidden G·weight, weight Gᵀ·hidden,
    bias Σ_n G_n (only when a bias is given)."""
    xp, _, h, w, b, z = _linear_logits(hidden, weight, bias)
    g = cross_entropy_vjp(cotangent, z, labels, ignore_index, label_smoothing, z_loss, softcap, reduction,
                          normalizer, smoothing_classes)["logits"]
    out = {"hidden": xp.matmul(g, w), "weight": xp.matmul(xp.matrix_transpose(g), h)}
    if b is not None:
        out["bias"] = xp.sum(g, axis=0)
    return out


# --------------------------------------------------------------------------- sampled-token log-probability

def _logprob_prepare(logits, labels, temperature):
    xp = _xp.namespace(logits, labels)
    dt = _xp.float_dtype(xp, logits=logits)
    z = _logits(xp, dt, logits)
    n, v = _xp.shape(z)
    T = validate.temperature(temperature)
    y = _labels(xp, labels, n)
    counted = _check_labels(xp, y, v, None)
    onehot = _onehot(xp, y, counted, v)
    _check_rows(xp, z, onehot, counted)
    return xp, dt, z, T, onehot, _Soft(xp, z, T)


def token_logprobs(logits, labels, temperature: float = 1.0):
    """log q_y of softmax(z/T) per row (TRL 1.16.0 selective_log_softmax, verl 0.9.1
    logprobs_from_logits). Returns logp[N]."""
    xp, _, _, _, onehot, d = _logprob_prepare(logits, labels, temperature)
    return -d.nll(xp, onehot)


def token_logprobs_vjp(cotangent, logits, labels, temperature: float = 1.0):
    """Gradient of Σ_i c_i·log q_{i,y_i}: c_i·(δ_{jy} − q_j)/T."""
    xp, dt, z, T, onehot, d = _logprob_prepare(logits, labels, temperature)
    ct = _xp.array(xp, "cotangent", cotangent, dt)
    validate.same_shape(logp=(_xp.shape(z)[0],), cotangent=_xp.shape(ct))
    return {"logits": -(ct[:, None] / T) * d.q_minus_onehot(xp, onehot)}


# --------------------------------------------------------------------------- entropy

def _entropy_prepare(logits, temperature):
    xp = _xp.namespace(logits)
    dt = _xp.float_dtype(xp, logits=logits)
    z = _logits(xp, dt, logits)
    T = validate.temperature(temperature)
    none = ~xp.any(z > -xp.inf, axis=-1)
    if bool(xp.any(none)):
        false = [False] * _xp.shape(z)[0]
        validate.lm_rows(_host(xp, none), false, false, false)
    return xp, dt, z, T, _Soft(xp, z, T)


def entropy(logits, temperature: float = 1.0):
    """Entropy −Σ q log q of softmax(z/T) per row (verl 0.9.1 / TRL 1.16.0 entropy_from_logits),
    summed from the non-negative terms q_v·(−x_v + log1p S); 0·log 0 = 0 at impossible tokens."""
    xp, _, _, _, d = _entropy_prepare(logits, temperature)
    x = _xp.masked(xp, d.support, d.x)         # q = 0 there: no 0·∞
    return xp.sum(d.p * (d.l1 - x), axis=-1)


def entropy_vjp(cotangent, logits, temperature: float = 1.0):
    """Gradient of Σ_i c_i·H_i: −c_i·q_j·(x_j − Σ_k q_k x_k)/T with the shifted x (a row of equal
    logits gets exactly 0); 0 at impossible tokens."""
    xp, dt, z, T, d = _entropy_prepare(logits, temperature)
    ct = _xp.array(xp, "cotangent", cotangent, dt)
    validate.same_shape(entropy=(_xp.shape(z)[0],), cotangent=_xp.shape(ct))
    x = _xp.masked(xp, d.support, d.x)
    centre = xp.sum(d.p * x, axis=-1, keepdims=True)
    return {"logits": _xp.masked(xp, d.support, -(ct[:, None] / T) * d.p * (x - centre))}
