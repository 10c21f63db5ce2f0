"""Pairwise reward-model loss (Bradley–Terry), PyTorch with autograd.

Sources as ``refimpl.exact.reward``: InstructGPT (arXiv 2203.02155) §3.5 eq. 1, Eisenstein et al.
(arXiv 2312.09244) eq. 2, TRL 1.16.0 RewardTrainer.compute_loss, OpenRLHF 0.11.2 PairWiseLoss and
LogExpLoss. With d_b = r_c,b − r_r,b − m_b:

    loss = mean_b −log σ(d_b) + c · mean_b (r_c,b + r_r,b)²

Both forms are evaluated with F.logsigmoid (log(1 + e^{−d}) = −log σ(d); the literal log(1 + exp(·))
overflows). bfloat16/float16 inputs are computed in float32 and the loss is cast back.
"""
from __future__ import annotations

import torch.nn.functional as F

from lossproof.refimpl import validate
from lossproof.refimpl.torch import _common

__all__ = ["pairwise"]


def pairwise(chosen_rewards, rejected_rewards, center_rewards_coefficient: float | None = None,
             form: str = "sigmoid", margin=None):
    """Bradley–Terry loss mean_b −log σ(r_c − r_r − m) plus c·mean_b (r_c + r_r)² (Eisenstein et al.
    eq. 2, as TRL 1.16.0 averages it); ``form='log-exp'`` (OpenRLHF's log(1 + exp(r_r − r_c + m)))
    is the same value. Gradients wrt both rewards; the margin is a constant."""
    c = _common.array("chosen_rewards", chosen_rewards)
    validate.rank("chosen_rewards", tuple(c.shape), 1)
    validate.nonempty("chosen_rewards", tuple(c.shape))
    r = _common.array("rejected_rewards", rejected_rewards)
    validate.same_shape(chosen_rewards=tuple(c.shape), rejected_rewards=tuple(r.shape))
    floats = [c, r]
    if margin is not None:
        m = _common.array("margin", margin)
        validate.same_shape(chosen_rewards=tuple(c.shape), margin=tuple(m.shape))
        floats.append(m)
    coef = validate.center_rewards_coefficient(center_rewards_coefficient)
    validate.reward_form(form)
    out = _common.result_dtype(*floats)
    work = _common.work_dtype(out)
    cw, rw = _common.upcast(c, work), _common.upcast(r, work)
    d = cw - rw
    if margin is not None:
        d = d - _common.constant(m, work)
    loss = -F.logsigmoid(d).mean()
    if coef is not None:
        loss = loss + coef * ((cw + rw) ** 2).mean()
    return loss.to(out)
