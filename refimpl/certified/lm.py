"""Language-model token objectives in ball arithmetic: cross-entropy, sampled-token
log-probability, entropy.

Notation: z logits [N, V], y labels, a logit of −inf an impossible token (None as a ball).
Formulas (torch.nn.functional.cross_entropy; label smoothing, Szegedy et al. 2016 §7; z-loss,
PaLM §5; soft-capping, Gemma 2 §2; verl 0.9.1 / TRL 1.16.0 logprobs and entropy_from_logits),
written in forms that keep exact zeros exact and need no cancellation:

* −log q_y = log1p(Σ_{j≠y} e^{x_j − x_y}) (the identity lse − x_y with the label's logit
  factored out): its derivative at x_y is −Σ_{j≠y} q_j, a sum of small terms, so q_y − 1 at a
  saturated label (logits ±1e4) is formed without cancellation;
* the smoothing term lse − (1/V)Σ_v x_v = (−log q_y) + (1/V)Σ_v (x_y − x_v); over the V − 1
  classes other than the label (``smoothing_classes`` 'others', Megatron-core's vocab-parallel
  cross-entropy) (1/(V−1))Σ_{v≠y} (lse − x_v) = (−log q_y) + (1/(V−1))Σ_{v≠y} (x_y − x_v);
* the z-loss lse² with lse from ``_ball.logsumexp``; the cap x = s·tanh(z/s) (−inf → −s);
* the entropy as ``_ball.entropy`` (partials from logit differences).

The gradient comes from ``_ball``'s tape, so it is the derivative of exactly these functions.
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.certified import _ball

__all__ = ["cross_entropy", "cross_entropy_vjp", "entropy", "entropy_vjp", "linear_cross_entropy",
           "linear_cross_entropy_vjp", "token_logprobs", "token_logprobs_vjp"]


def _logits(logits):
    z = _ball.balls("logits", logits, allow_neg_inf=True)
    shape = _ball.shape(z)
    validate.rank("logits", shape, 2)
    validate.lm_logit_rows(*shape)
    return z, shape


def _labels(labels, n: int) -> list[int]:
    y = labels.tolist() if hasattr(labels, "tolist") else labels
    if not isinstance(y, (list, tuple)):
        validate.fail("labels", f"expected integers, got {labels!r}")
    for yi in y:
        if isinstance(yi, (list, tuple)):
            break
        if isinstance(yi, bool) or not isinstance(yi, (int, float)) or not float(yi).is_integer():
            validate.fail("labels", f"expected integers, got {yi!r}")
    validate.rank("labels", _ball.shape(list(y)), 1)
    validate.same_shape(**{"logits rows": (n,)}, labels=(len(y),))
    return [int(yi) for yi in y]


def _check_rows(z, y, counted, smoothing=0.0):
    validate.lm_rows([all(v is None for v in row) for row in z],
                     [c and row[yi] is None for row, yi, c in zip(z, y, counted)],
                     [any(v is None for v in row) for row in z], counted, smoothing)


def _nll(x, y):
    """−log q_y of softmax(x) over the possible tokens (x_j None: impossible)."""
    return _ball.log1p(_ball.fsum(_ball.exp(xj - x[y]) for j, xj in enumerate(x) if j != y and xj is not None))


def _top(x) -> int:
    return max((j for j, v in enumerate(x) if v is not None), key=lambda j: _ball.mid_float(x[j]))


def _ce_setup(z, n, v, labels, ignore_index, label_smoothing, z_loss, softcap, reduction, normalizer,
              smoothing_classes):
    """The cross-entropy's arguments checked against logits z (nested balls, None at −inf); the
    smoothing's class count (V, or V − 1 for 'others') rides in place of the convention."""
    y = _labels(labels, n)
    ignore, eps, zeta, cap, reduction, norm = validate.lm_conventions(ignore_index, label_smoothing, z_loss,
                                                                      softcap, reduction, normalizer)
    classes = v - 1 if validate.smoothing_classes(smoothing_classes, eps, v) == "others" else v
    counted = validate.token_labels(y, v, ignore)
    if cap is None:
        _check_rows(z, y, counted, eps)
    validate.empty_mean(reduction, norm, sum(counted))
    return y, counted, eps, zeta, cap, reduction, norm, classes


def _ce_body(z, v, y, counted, eps, zeta, cap, reduction, norm, classes):
    e, zl = _ball.ball(eps), _ball.ball(zeta)
    per_token = []
    for row, yi, c in zip(z, y, counted):
        if not c:
            per_token.append(_ball.ZERO)
            continue
        if cap is not None:
            s = _ball.ball(cap)
            row = [-s if zj is None else s * _ball.tanh(zj / s) for zj in row]
        nll = _nll(row, yi)
        loss = (1 - e) * nll if eps != 1 else _ball.ZERO
        if eps:
            # Σ_v (x_y − x_v) is Σ_{v≠y} (x_y − x_v): only the divisor tells 'all' (V) from 'others' (V − 1)
            loss = loss + e * (nll + _ball.fsum(row[yi] - xv for xv in row) / classes)
        if zeta:
            live = [xj for xj in row if xj is not None]
            loss = loss + zl * _ball.square(_ball.logsumexp(live, _top(live)))
        per_token.append(loss)
    if reduction == "none":
        return {"loss": per_token}
    total = _ball.fsum(per_token)
    if reduction == "sum":
        return {"loss": total}
    return {"loss": total / (_ball.ball(norm) if norm is not None else _ball.ball(sum(counted)))}


def _cross_entropy(diff, logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                   reduction="mean", normalizer=None, smoothing_classes="all"):
    z, (n, v) = _logits(logits)
    setup = _ce_setup(z, n, v, labels, ignore_index, label_smoothing, z_loss, softcap, reduction, normalizer,
                      smoothing_classes)
    return _ce_body(diff("logits", z), v, *setup)


cross_entropy, cross_entropy_vjp = _ball.pair(_cross_entropy, ("loss",), ("logits",))
cross_entropy.__doc__ = ("Token cross-entropy with ignore_index, label smoothing, z-loss, soft-capping and "
                         "reduction (torch.nn.functional.cross_entropy; PaLM §5; Gemma 2 §2), as balls.")


def _linear_cross_entropy(diff, hidden, weight, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0,
                          softcap=None, reduction="mean", normalizer=None, smoothing_classes="all", bias=None):
    h, w = _ball.balls("hidden", hidden), _ball.balls("weight", weight)
    b = None if bias is None else _ball.balls("bias", bias)
    n, _, v = validate.linear_shapes(_ball.shape(h), _ball.shape(w), None if b is None else _ball.shape(b))
    h, w = diff("hidden", h), diff("weight", w)
    b = None if b is None else diff("bias", b)
    z = [[_ball.fsum([hk * wk for hk, wk in zip(hrow, wrow)] + ([b[j]] if b is not None else []))
          for j, wrow in enumerate(w)] for hrow in h]
    setup = _ce_setup(z, n, v, labels, ignore_index, label_smoothing, z_loss, softcap, reduction, normalizer,
                      smoothing_classes)
    return _ce_body(z, v, *setup)


linear_cross_entropy, linear_cross_entropy_vjp = _ball.pair(_linear_cross_entropy, ("loss",),
                                                            ("hidden", "weight", "bias"))
linear_cross_entropy.__doc__ = ("Fused-linear token cross-entropy: the cross-entropy of the logits hidden·weightᵀ "
                                "(+ bias), each a ball sum of exact products (Liger 0.8.5 "
                                "LigerFusedLinearCrossEntropyLoss; Cut Cross-Entropy, arXiv 2411.09009).")


def _tempered(logits, temperature):
    z, (n, v) = _logits(logits)
    T = _ball.ball(validate.temperature(temperature))
    return z, n, v, T


def _token_logprobs(diff, logits, labels, temperature=1.0):
    z, n, v, T = _tempered(logits, temperature)
    y = _labels(labels, n)
    counted = validate.token_labels(y, v)
    _check_rows(z, y, counted)
    z = diff("logits", z)
    out = []
    for row, yi in zip(z, y):
        x = [None if zj is None else zj / T for zj in row]
        out.append(-_nll(x, yi))
    return {"logp": out}


token_logprobs, token_logprobs_vjp = _ball.pair(_token_logprobs, ("logp",), ("logits",))
token_logprobs.__doc__ = "log q_y of softmax(z/T) per row (TRL selective_log_softmax, verl logprobs_from_logits), as balls."


def _entropy(diff, logits, temperature=1.0):
    z, n, v, T = _tempered(logits, temperature)
    none = [False] * n
    validate.lm_rows([all(zj is None for zj in row) for row in z], none, none, none)
    z = diff("logits", z)
    out = []
    for row in z:
        live = [zj / T for zj in row if zj is not None]
        out.append(_ball.entropy(live, _top(live)))
    return {"entropy": out}


entropy, entropy_vjp = _ball.pair(_entropy, ("entropy",), ("logits",))
entropy.__doc__ = "Entropy of softmax(z/T) per row (verl / TRL entropy_from_logits), as balls."
