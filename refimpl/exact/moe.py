"""Mixture-of-experts auxiliary losses: the router z-loss.

Source: ST-MoE (Zoph et al. 2022, arXiv 2202.08906) §3.1 eq. 5, the router z-loss

    L_z(x) = (1/B) · Σ_{i=1}^{B} (log Σ_{j=1}^{N} e^{x_j^{(i)}})²

over the B tokens of a batch and their N router logits (here [N, E]: N tokens, E experts), which
penalises large router logits for numerical stability. transformers 5.25.0
(models/switch_transformers/modeling_switch_transformers.py, router_z_loss_func) divides the sum
by every position of the padded batch; with ``mask`` this reference averages over the tokens the
mask selects (padding is not a token).
"""
from __future__ import annotations

import mpmath

from refimpl import validate
from refimpl.exact import mp

__all__ = ["router_z_loss", "router_z_loss_vjp"]


def _prepare(router_logits, mask):
    z = mp.array("router_logits", router_logits)
    validate.rank("router_logits", z.shape, 2)
    validate.nonempty("router_logits", z.shape)
    if mask is None:
        return z, mp.full(z.shape[:1], 1)
    m = mp.mask("mask", mask, z.shape[:1])
    if not any(e == 1 for e in m.flat):
        validate.fail("mask", "selects no token")
    return z, m


@mp.exact
def router_z_loss(router_logits, mask=None):
    """ST-MoE eq. 5: the mean over the tokens (those ``mask`` selects) of lse(x)², lse the
    log-sum-exp of the token's router logits over the experts. Returns the scalar loss."""
    z, m = _prepare(router_logits, mask)
    lse = mp.logsumexp(z, axis=-1)
    return mpmath.fsum(m * lse * lse) / mpmath.fsum(m)


@mp.exact
def router_z_loss_vjp(cotangent, router_logits, mask=None):
    """Gradient of cotangent·loss: ∂/∂x_e = 2·m·lse(x)·softmax(x)_e / Σ m (d lse/dx = softmax);
    0 for the logits of a masked token."""
    z, m = _prepare(router_logits, mask)
    ct = mp.array("cotangent", cotangent)
    validate.same_shape(loss=(), cotangent=ct.shape)  # the message names the cotangent
    lse = mp.logsumexp(z, axis=-1, keepdims=True)
    weight = 2 * ct.item() * m[:, None] * lse / mpmath.fsum(m)
    return {"router_logits": weight * mp.exp(z - lse)}
