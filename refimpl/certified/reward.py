"""reward.pairwise in ball arithmetic.

Bradley–Terry (1952) paired comparisons as the reward-model loss of InstructGPT (Ouyang et al. 2022,
arXiv 2203.02155, §3.5 eq. 1): for pair b, d_b = r_c,b − r_r,b − m_b and the loss is the mean over
the B pairs of −log σ(d_b); Eisenstein et al. 2023 (arXiv 2312.09244) eq. 2's centring term, as
TRL 1.16.0 RewardTrainer adds it, is c·(1/B)·Σ_b (r_c,b + r_r,b)². OpenRLHF 0.11.2's LogExpLoss
log(1 + e^{−d_b}) is the same function (``form='log-exp'``), so it is written once.
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.certified import _ball

__all__ = ["pairwise", "pairwise_vjp"]


def _pairwise(diff, chosen_rewards, rejected_rewards, center_rewards_coefficient=None, form="sigmoid", margin=None):
    c = _ball.balls("chosen_rewards", chosen_rewards)
    shape = _ball.shape(c)
    validate.rank("chosen_rewards", shape, 1)
    validate.nonempty("chosen_rewards", shape)
    r = _ball.balls("rejected_rewards", rejected_rewards)
    validate.same_shape(chosen_rewards=shape, rejected_rewards=_ball.shape(r))
    m = [_ball.ZERO] * shape[0]
    if margin is not None:
        m = _ball.balls("margin", margin)
        validate.same_shape(chosen_rewards=shape, margin=_ball.shape(m))
    coef = validate.center_rewards_coefficient(center_rewards_coefficient)
    validate.reward_form(form)
    c, r = diff("chosen_rewards", c), diff("rejected_rewards", r)
    n = _ball.ball(shape[0])
    loss = _ball.fsum(-_ball.log_sigmoid(a - b - mb) for a, b, mb in zip(c, r, m)) / n
    if coef is not None:
        loss = loss + _ball.ball(coef) * _ball.fsum(_ball.square(a + b) for a, b in zip(c, r)) / n
    return {"loss": loss}


pairwise, pairwise_vjp = _ball.pair(_pairwise, ("loss",), ("chosen_rewards", "rejected_rewards"))
pairwise.__doc__ = "Bradley–Terry pairwise loss with margin and centring (InstructGPT eq. 1; Eisenstein eq. 2), as balls."
