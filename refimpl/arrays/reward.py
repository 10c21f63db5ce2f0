"""Pairwise reward-model loss (Bradley–Terry) over the array API.

Sources as ``refimpl.exact.reward``: InstructGPT (arXiv 2203.02155) §3.5 eq. 1, Eisenstein et al.
(arXiv 2312.09244) eq. 2, TRL 1.16.0 RewardTrainer.compute_loss, OpenRLHF 0.11.2 PairWiseLoss and
LogExpLoss. With d_b = r_c,b − r_r,b − m_b:

    loss = mean_b −log σ(d_b) + c · mean_b (r_c,b + r_r,b)²

Both forms are evaluated as −log σ(d) = max(−d, 0) + log1p(e^{−|d|}), which is also the stable
log(1 + e^{−d}): the literal log(1 + exp(·)) overflows beyond 88.7 in float32 and rounds 1 + e^{−d}
to 1 once e^{−d} is below the unit roundoff.
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.arrays import _xp

__all__ = ["pairwise", "pairwise_vjp"]


def _prepare(chosen_rewards, rejected_rewards, center_rewards_coefficient, form, margin):
    xp = _xp.namespace(chosen_rewards, rejected_rewards, margin)
    dt = _xp.float_dtype(xp, chosen_rewards=chosen_rewards, rejected_rewards=rejected_rewards, margin=margin)
    c = _xp.array(xp, "chosen_rewards", chosen_rewards, dt)
    validate.rank("chosen_rewards", _xp.shape(c), 1)
    validate.nonempty("chosen_rewards", _xp.shape(c))
    r = _xp.array(xp, "rejected_rewards", rejected_rewards, dt)
    validate.same_shape(chosen_rewards=_xp.shape(c), rejected_rewards=_xp.shape(r))
    d = c - r
    if margin is not None:
        m = _xp.array(xp, "margin", margin, dt)
        validate.same_shape(chosen_rewards=_xp.shape(c), margin=_xp.shape(m))
        d = d - m
    coef = validate.center_rewards_coefficient(center_rewards_coefficient)
    validate.reward_form(form)
    return xp, dt, c, r, d, coef


def pairwise(chosen_rewards, rejected_rewards, center_rewards_coefficient: float | None = None,
             form: str = "sigmoid", margin=None):
    """Bradley–Terry loss mean_b −log σ(r_c − r_r − m) plus c·mean_b (r_c + r_r)² (Eisenstein et al.
    eq. 2, as TRL 1.16.0 averages it); ``form='log-exp'`` (OpenRLHF's log(1 + exp(r_r − r_c + m)))
    is the same value. Returns the scalar loss."""
    xp, _, c, r, d, coef = _prepare(chosen_rewards, rejected_rewards, center_rewards_coefficient, form, margin)
    loss = xp.mean(-_xp.logsigmoid(xp, d))
    if coef is not None:
        s = c + r
        loss = loss + coef * xp.mean(s * s)
    return loss


def pairwise_vjp(cotangent, chosen_rewards, rejected_rewards, center_rewards_coefficient: float | None = None,
                 form: str = "sigmoid", margin=None):
    """Gradient of cotangent·loss: ∂/∂r_c = (2c·(r_c + r_r) − σ(−d))/B, ∂/∂r_r = (2c·(r_c + r_r) + σ(−d))/B."""
    xp, dt, c, r, d, coef = _prepare(chosen_rewards, rejected_rewards, center_rewards_coefficient, form, margin)
    ct = _xp.array(xp, "cotangent", cotangent, dt)
    validate.same_shape(loss=(), cotangent=_xp.shape(ct))  # the message names the cotangent
    n = d.shape[0]
    push = _xp.sigmoid(xp, -d)
    centre = 2 * coef * (c + r) if coef is not None else xp.zeros_like(d)
    return {"chosen_rewards": ct * (centre - push) / n, "rejected_rewards": ct * (centre + push) / n}
