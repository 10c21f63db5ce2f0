"""Pairwise reward-model loss (Bradley–Terry), with an optional margin and reward centring.

Sources: Bradley & Terry (1952), the paired-comparison model P(c ≻ r) = σ(r_c − r_r); InstructGPT
(Ouyang et al. 2022, arXiv 2203.02155) §3.5 eq. 1, the reward-model loss −log σ(r_c − r_r) averaged
over comparisons; Eisenstein et al. 2023 (arXiv 2312.09244) eq. 2, the auxiliary term
η·(r_c + r_r)² that pins the rewards' free offset to mean zero. Library conventions: TRL 1.16.0
trainer/reward_trainer.py RewardTrainer.compute_loss, per pair b of a batch of B:

    d_b  = r_c,b − r_r,b − m_b                         (m_b = 0 without a margin)
    loss = mean_b −log σ(d_b) + c · mean_b (r_c,b + r_r,b)²   (the second term only when c is given)

OpenRLHF 0.11.2 models/loss.py PairWiseLoss is the first term; its LogExpLoss writes
log(1 + exp(r_r − r_c)), the same function (``form='log-exp'``; it ignores the margin it is
passed, which the catalog's log-exp form does not: log(1 + e^{−d_b}) with the margin in d_b).
"""
from __future__ import annotations

import mpmath

from lossproof.refimpl import validate
from lossproof.refimpl.exact import mp

__all__ = ["pairwise", "pairwise_vjp"]


def _prepare(chosen_rewards, rejected_rewards, center_rewards_coefficient, form, margin):
    c = mp.array("chosen_rewards", chosen_rewards)
    validate.rank("chosen_rewards", c.shape, 1)
    validate.nonempty("chosen_rewards", c.shape)
    r = mp.array("rejected_rewards", rejected_rewards)
    validate.same_shape(chosen_rewards=c.shape, rejected_rewards=r.shape)
    m = mp.zeros(c.shape)
    if margin is not None:
        m = mp.array("margin", margin)
        validate.same_shape(chosen_rewards=c.shape, margin=m.shape)
    coef = validate.center_rewards_coefficient(center_rewards_coefficient)
    validate.reward_form(form)
    return c, r, m, (None if coef is None else mp.mpf(coef))


@mp.exact
def pairwise(chosen_rewards, rejected_rewards, center_rewards_coefficient: float | None = None,
             form: str = "sigmoid", margin=None):
    """Bradley–Terry loss mean_b −log σ(r_c − r_r − m) (InstructGPT eq. 1; TRL 1.16.0 RewardTrainer),
    plus c·mean_b (r_c + r_r)² for ``center_rewards_coefficient=c`` (Eisenstein et al. eq. 2, averaged
    over the pairs as TRL does). ``form='log-exp'`` is OpenRLHF's log(1 + exp(r_r − r_c + m)), the same
    value. Returns the scalar loss."""
    c, r, m, coef = _prepare(chosen_rewards, rejected_rewards, center_rewards_coefficient, form, margin)
    d = c - r - m
    n = len(d)
    # Both forms are this value: log(1 + e^{−d}) = −log σ(d), evaluated without forming 1 + e^{−d}
    # (at 50 digits 1 + e^{−200} would be 1).
    loss = mpmath.fsum(-mp.logsigmoid(d)) / n
    if coef is not None:
        loss += coef * mpmath.fsum((c + r) ** 2) / n
    return loss


@mp.exact
def pairwise_vjp(cotangent, chosen_rewards, rejected_rewards, center_rewards_coefficient: float | None = None,
                 form: str = "sigmoid", margin=None):
    """Gradient of cotangent·loss: ∂/∂r_c = (−σ(−d_b) + 2c·(r_c + r_r))/B and
    ∂/∂r_r = (σ(−d_b) + 2c·(r_c + r_r))/B (d/dd −log σ(d) = −σ(−d)); the margin is a constant."""
    c, r, m, coef = _prepare(chosen_rewards, rejected_rewards, center_rewards_coefficient, form, margin)
    ct = mp.array("cotangent", cotangent)
    validate.same_shape(loss=(), cotangent=ct.shape)  # the message names the cotangent
    ct = ct.item()
    n = len(c)
    push = mp.sigmoid(-(c - r - m))   # −∂(−log σ(d))/∂d
    centre = 2 * coef * (c + r) if coef is not None else mp.zeros(c.shape)
    return {"chosen_rewards": ct * (centre - push) / n, "rejected_rewards": ct * (centre + push) / n}
