"""The ST-MoE router z-loss over the array API.

Source as ``refimpl.exact.moe``: Zoph et al. 2022 (arXiv 2202.08906) §3.1 eq. 5,
L_z = mean over the (unmasked) tokens of lse(x)², lse(x) = log Σ_e e^{x_e} over a token's router
logits, formed as max + log Σ e^{x − max} (nothing overflows at logits ±1e4). Gradient
2·lse(x)·softmax(x)/n per selected token, 0 for a masked one.
"""
from __future__ import annotations

from refimpl import validate
from refimpl.arrays import _xp

__all__ = ["router_z_loss", "router_z_loss_vjp"]


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
