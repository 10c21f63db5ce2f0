"""The ST-MoE router z-loss and the load-balancing loss over the array API.

Source as ``refimpl.exact.moe``: Zoph et al. 2022 (arXiv 2202.08906) §3.1 eq. 5,
L_z = mean over the (unmasked) tokens of lse(x)², lse(x) = log Σ_e e^{x_e} over a token's router
logits, formed as max + log Σ e^{x − max} (nothing overflows at logits ±1e4). Gradient
2·lse(x)·softmax(x)/n per selected token, 0 for a masked one.

The load-balancing loss, forms as ``refimpl.exact.moe`` (Switch Transformer arXiv 2101.03961 eq.
4–6; transformers 5.25.0 modeling_mixtral.py load_balancing_loss_func's pooled layers; the
per-layer sum; DeepSeek-V3 arXiv 2412.19437 eq. 17–20), written as loss = Σ G·q: q the
affinities (softmax, or σ(x)/Σσ(x) for 'sequence'), G the constant coefficients built from the
top-k counts. Top-k by rank (the number of logits above, ties counted for lower indices):
the lowest index wins a tie, as in the exact reference. Gradient q_j·(G_j − Σ_e G_e·q_e), times
σ(−x_j) for the normalised sigmoid.
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.arrays import _xp

__all__ = ["router_z_loss", "router_z_loss_vjp", "load_balancing", "load_balancing_vjp"]


def _prepare(router_logits, mask):
    xp = _xp.namespace(router_logits, mask)
    dt = _xp.float_dtype(xp, router_logits=router_logits)
    z = _xp.array(xp, "router_logits", router_logits, dt)
    validate.rank("router_logits", _xp.shape(z), 2)
    validate.nonempty("router_logits", _xp.shape(z))
    m = xp.ones(z.shape[:1], dtype=dt) if mask is None else _xp.mask(xp, "mask", mask, _xp.shape(z)[:1], dt)
    if not bool(xp.any(m == 1)):
        validate.fail("mask", "selects no token")
    top = xp.max(z, axis=-1, keepdims=True)
    lse = top + xp.log(xp.sum(xp.exp(z - top), axis=-1, keepdims=True))
    return xp, dt, z, m, lse


def router_z_loss(router_logits, mask=None):
    """ST-MoE eq. 5: the mean over the tokens (those ``mask`` selects) of lse(x)². Returns the
    scalar loss."""
    xp, _, _, m, lse = _prepare(router_logits, mask)
    lse = lse[:, 0]
    return xp.sum(_xp.masked(xp, m == 1, lse * lse)) / xp.sum(m)


def router_z_loss_vjp(cotangent, router_logits, mask=None):
    """Gradient of cotangent·loss: 2·m·lse(x)·softmax(x)/Σm."""
    xp, dt, z, m, lse = _prepare(router_logits, mask)
    ct = _xp.array(xp, "cotangent", cotangent, dt)
    validate.same_shape(loss=(), cotangent=_xp.shape(ct))  # the message names the cotangent
    weight = _xp.masked(xp, m[:, None] == 1, 2 * ct * lse / xp.sum(m))
    return {"router_logits": weight * xp.exp(z - lse)}


def _top_k(xp, z, k, dt):
    """1.0 where the logit is among its row's k largest (the lowest index first at a tie)."""
    e = z.shape[-1]
    above = z[..., None, :] > z[..., :, None]                       # [..., e, j]: z_j > z_e
    idx = xp.arange(e)
    tied_before = (z[..., None, :] == z[..., :, None]) & (idx[None, :] < idx[:, None])
    rank = xp.sum(xp.astype(above | tied_before, dt), axis=-1)
    return xp.astype(rank < k, dt)


def _balance(router_logits, top_k, form, seq_len, fraction_norm, mask):
    """The layers [L, n, E], affinities q, σ(−x) ('sequence') or None, coefficients G and the mask."""
    xp = _xp.namespace(router_logits, mask)
    dt = _xp.float_dtype(xp, router_logits=router_logits)
    z = _xp.array(xp, "router_logits", router_logits, dt)
    validate.rank("router_logits", _xp.shape(z), (2, 3))
    validate.nonempty("router_logits", _xp.shape(z))
    layered = z.ndim == 3
    form = validate.balance_form(form, layered)
    norm = validate.fraction_norm(fraction_norm, form)
    z = z if layered else z[None, ...]
    n_layers, n, e = _xp.shape(z)
    k = validate.top_k(top_k, e)
    t = validate.seq_len(seq_len, form, n)
    m = xp.ones((n,), dtype=dt) if mask is None else _xp.mask(xp, "mask", mask, (n,), dt)
    if not bool(xp.any(m == 1)):
        validate.fail("mask", "selects no token")
    sel = _top_k(xp, z, k, dt) * m[None, :, None]
    if form == "sequence":
        s = _xp.sigmoid(xp, z)
        q, rest = s / xp.sum(s, axis=-1, keepdims=True), _xp.sigmoid(xp, -z)
        ms = xp.reshape(m, (n // t, t))
        big_t = xp.sum(ms, axis=1)                                  # tokens per sequence
        live = big_t > 0
        safe_t = xp.where(live, big_t, xp.ones_like(big_t))
        n_seq = xp.sum(xp.astype(live, dt))
        counts = xp.sum(xp.reshape(sel, (n_layers, n // t, t, e)), axis=2)        # [L, B, E]
        f = e * counts / (k * safe_t[None, :, None])
        g = f[:, :, None, :] * (ms / (safe_t * n_seq)[:, None])[None, :, :, None]
        return xp, dt, layered, q, rest, xp.reshape(g, (n_layers, n, e)), m
    top = xp.max(z, axis=-1, keepdims=True)
    ez = xp.exp(z - top)
    q = ez / xp.sum(ez, axis=-1, keepdims=True)
    counts = xp.sum(sel, axis=1)                                    # [L, E]
    n_tok = xp.sum(m)
    if form == "concatenated":
        counts = xp.broadcast_to(xp.sum(counts, axis=0, keepdims=True), _xp.shape(counts))
        n_tok = n_tok * n_layers
    square = n_tok * n_tok * (k if norm == "top_k" else 1)
    g = (e * counts / square)[:, None, :] * m[None, :, None]
    return xp, dt, layered, q, None, g, m


def load_balancing(router_logits, top_k: int = 1, form: str = "switch", seq_len: int | None = None,
                   fraction_norm: str = "none", mask=None):
    """The auxiliary load-balancing loss of ``form`` (Switch eq. 4; transformers' pooled layers;
    per-layer sum; DeepSeek-V3 eq. 17–20), f divided by k under ``fraction_norm`` 'top_k', without
    its coefficient. Returns the scalar loss."""
    xp, _, _, q, _, g, m = _balance(router_logits, top_k, form, seq_len, fraction_norm, mask)
    return xp.sum(_xp.masked(xp, m[None, :, None] == 1, g * q))


def load_balancing_vjp(cotangent, router_logits, top_k: int = 1, form: str = "switch", seq_len: int | None = None,
                       fraction_norm: str = "none", mask=None):
    """Gradient of cotangent·loss wrt the router logits through the affinities (the top-k counts
    are constants): q_j·(G_j − Σ_e G_e·q_e), times σ(−x_j) for 'sequence'; 0 for a masked token."""
    xp, dt, layered, q, rest, g, m = _balance(router_logits, top_k, form, seq_len, fraction_norm, mask)
    ct = _xp.array(xp, "cotangent", cotangent, dt)
    validate.same_shape(loss=(), cotangent=_xp.shape(ct))  # the message names the cotangent
    # Σ_e q_e·(G_j − G_e) (= G_j − Σ_e G_e q_e as Σ q = 1): equal coefficients give exactly 0
    d = q * xp.sum(q[..., None, :] * (g[..., :, None] - g[..., None, :]), axis=-1)
    if rest is not None:
        d = d * rest
    grad = ct * _xp.masked(xp, m[None, :, None] == 1, d)
    return {"router_logits": grad if layered else grad[0, ...]}
