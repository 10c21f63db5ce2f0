"""moe.router_z_loss in ball arithmetic.

ST-MoE (Zoph et al. 2022, arXiv 2202.08906) §3.1 eq. 5: L_z = (1/B)·Σ_i (log Σ_j e^{x_ij})² over the
B tokens (those the mask selects) and their router logits; the log-sum-exp is the tape's
``logsumexp`` primitive, written around the row's largest logit.
"""
from __future__ import annotations

from refimpl import validate
from refimpl.certified import _ball

__all__ = ["router_z_loss", "router_z_loss_vjp"]


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
