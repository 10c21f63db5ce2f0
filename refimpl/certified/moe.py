"""moe.router_z_loss and moe.load_balancing in ball arithmetic.

ST-MoE (Zoph et al. 2022, arXiv 2202.08906) §3.1 eq. 5: L_z = (1/B)·Σ_i (log Σ_j e^{x_ij})² over the
B tokens (those the mask selects) and their router logits; the log-sum-exp is the tape's
``logsumexp`` primitive, written around the row's largest logit.

The load-balancing loss: Switch Transformer (Fedus et al. 2021, arXiv 2101.03961) §2.2 eq. 4–6,
E·Σ_e f_e·P_e with f_e the share of the selected tokens whose top k include expert e (a
constant: counts of exact comparisons of the binary64 logits, the lowest index first at a tie)
and P_e the mean softmax probability (the tape's ``softmax`` primitive). Layers [L, N, E] are
pooled (transformers 5.25.0 modeling_mixtral.py load_balancing_loss_func: f and P over all L·n
rows) or summed layer by layer. DeepSeek-V3 (arXiv 2412.19437) §2.1.2 eq. 17–20 per sequence:
Σ_i f_i·P_i with f_i = E/(k·T)·(count of i), P_i the mean of s_i/Σ_j s_j, s = σ(x); the mean over
the sequences that hold a token, summed over the layers.
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.certified import _ball

__all__ = ["router_z_loss", "router_z_loss_vjp", "load_balancing", "load_balancing_vjp"]


def _router_z_loss(diff, router_logits, mask=None):
    z = _ball.balls("router_logits", router_logits)
    shape = _ball.shape(z)
    validate.rank("router_logits", shape, 2)
    validate.nonempty("router_logits", shape)
    if mask is None:
        on = [True] * shape[0]
    else:
        m = _ball.balls("mask", mask)
        validate.same_shape(inputs=shape[:1], mask=_ball.shape(m))
        if any(not (v.is_zero() or v == 1) for v in m):
            validate.fail("mask", "must contain only 0 and 1")
        on = [v == 1 for v in m]
        if not any(on):
            validate.fail("mask", "selects no token")
    z = diff("router_logits", z)
    terms = []
    for row, keep in zip(z, on):
        if keep:
            top = max(range(len(row)), key=lambda j: _ball.mid_float(row[j]))
            terms.append(_ball.square(_ball.logsumexp(row, top)))
    return {"loss": _ball.fsum(terms) / _ball.ball(len(terms))}


router_z_loss, router_z_loss_vjp = _ball.pair(_router_z_loss, ("loss",), ("router_logits",))
router_z_loss.__doc__ = "ST-MoE router z-loss (arXiv 2202.08906 eq. 5), mean over the unmasked tokens, as balls."


def _top(row_floats, k):
    return set(sorted(range(len(row_floats)), key=lambda e: (-row_floats[e], e))[:k])


def _load_balancing(diff, router_logits, top_k=1, form="switch", seq_len=None, fraction_norm="none", mask=None):
    z = _ball.balls("router_logits", router_logits)
    shape = _ball.shape(z)
    validate.rank("router_logits", shape, (2, 3))
    validate.nonempty("router_logits", shape)
    form = validate.balance_form(form, len(shape) == 3)
    norm = validate.fraction_norm(fraction_norm, form)
    n, experts = shape[-2:]
    k = validate.top_k(top_k, experts)
    # 'top_k': f_e/k (Megatron-core, OLMo-core), one more factor in each form's denominator
    per_k = _ball.ball(k if norm == "top_k" else 1)
    t = validate.seq_len(seq_len, form, n)
    if mask is None:
        on = [True] * n
    else:
        mb = _ball.balls("mask", mask)
        validate.same_shape(inputs=(n,), mask=_ball.shape(mb))
        if any(not (v.is_zero() or v == 1) for v in mb):
            validate.fail("mask", "must contain only 0 and 1")
        on = [v == 1 for v in mb]
    if not any(on):
        validate.fail("mask", "selects no token")
    floats = router_logits.tolist() if hasattr(router_logits, "tolist") else router_logits
    if len(shape) == 2:
        floats = [floats]
    z = diff("router_logits", z)
    layers = z if len(shape) == 3 else [z]
    chosen = [[_top([float(v) for v in row], k) if keep else set() for row, keep in zip(layer, on)]
              for layer in floats]
    tokens = [i for i in range(n) if on[i]]

    def weighted(row, counts, sigmoid):
        """Σ_e c_e·q_e (q the row's affinities, c integer counts) as c_0 + Σ_e (c_e − c_0)·q_e (Σ q = 1):
        equal counts give cotangents of exactly 0, hence an exactly zero gradient. s/Σ s is the
        softmax of log σ(x)."""
        x = [_ball.log_sigmoid(v) for v in row] if sigmoid else row
        top = max(range(len(x)), key=lambda j: _ball.mid_float(_ball.value(x[j])))
        q = _ball.softmax(x, top)
        return _ball.ball(counts[0]) + _ball.fsum(_ball.ball(c - counts[0]) * v for c, v in zip(counts, q)
                                                  if c != counts[0])

    if form == "sequence":
        total = []
        for layer, sel in zip(layers, chosen):
            per_seq = []
            for b in range(0, n, t):
                toks = [i for i in range(b, b + t) if on[i]]
                if not toks:
                    continue
                counts = [sum(e in sel[i] for i in toks) for e in range(experts)]
                big_t = _ball.ball(len(toks))
                # Σ_i f_i·P_i = E/(k·T²)·Σ_t Σ_i count_i·s'_{i,t}
                per_seq.append(_ball.ball(experts) * _ball.fsum(weighted(layer[i], counts, True) for i in toks)
                               / (_ball.ball(k) * big_t * big_t))
            total.append(_ball.fsum(per_seq) / _ball.ball(len(per_seq)))
        return {"loss": _ball.fsum(total)}
    counts = [[sum(e in sel[i] for i in tokens) for e in range(experts)] for sel in chosen]
    e_ball, n_tok = _ball.ball(experts), len(tokens)
    if form == "concatenated":
        pooled = [sum(c[e] for c in counts) for e in range(experts)]
        rows_total = _ball.ball(len(layers) * n_tok)
        return {"loss": e_ball * _ball.fsum(weighted(layer[i], pooled, False) for layer in layers for i in tokens)
                / (rows_total * rows_total * per_k)}
    square = _ball.ball(n_tok * n_tok) * per_k
    return {"loss": _ball.fsum(e_ball * _ball.fsum(weighted(layer[i], cl, False) for i in tokens) / square
                               for layer, cl in zip(layers, counts))}


load_balancing, load_balancing_vjp = _ball.pair(_load_balancing, ("loss",), ("router_logits",))
load_balancing.__doc__ = ("Load-balancing loss (Switch eq. 4, transformers' pooled layers, per-layer sum, "
                          "DeepSeek-V3 eq. 17–20; f/k under fraction_norm 'top_k'), as balls.")
