"""Preference losses (dpo.loss, preference.orpo, reward.pairwise) as libraries without an
adapter wrote them, each defect transcribed from a public report (``transcribed.table`` links
it), beside the corrected function."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _dpo(pc, pr, rc, rr, beta, loss_type, label_smoothing):
    delta = (pc - pr) - (rc - rr)
    z = beta * delta
    if loss_type == "ipo":
        losses = (delta - 1 / (2 * beta)) ** 2
    elif loss_type == "hinge":
        h = 1 - z
        losses = torch.where(h >= 0, h, torch.zeros_like(h))     # the kink takes the active branch
    else:
        losses = -(1 - label_smoothing) * F.logsigmoid(z) - label_smoothing * F.logsigmoid(-z)
    return {"losses": losses, "chosen_rewards": beta * (pc - rc), "rejected_rewards": beta * (pr - rr)}


def dpo_loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
             beta=0.1, loss_type="sigmoid", label_smoothing=0.0, nll_aggregation=None):
    return _dpo(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
                beta, loss_type, label_smoothing)


def dpo_loss_type_ignored(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
                          reference_rejected_logps, beta=0.1, loss_type="sigmoid", label_smoothing=0.0,
                          nll_aggregation=None):
    """ms-swift Megatron DPO before PR #10167: args.loss_type is stored but not passed to the
    shared dpo_loss(), whose default is 'sigmoid': hinge and ipo train as sigmoid DPO."""
    return _dpo(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
                beta, "sigmoid", label_smoothing)


def _orpo(c, r, beta, log_one_minus):
    def log_odds(p):
        return p - log_one_minus(p)
    losses = -c - beta * F.logsigmoid(log_odds(c) - log_odds(r))
    return {"losses": losses, "chosen_rewards": beta * c, "rejected_rewards": beta * r}


def orpo(chosen_logps, rejected_logps, beta=0.1):
    return _orpo(chosen_logps, rejected_logps, beta, lambda p: torch.log(-torch.expm1(p)))


def orpo_log_one_minus_exp(chosen_logps, rejected_logps, beta=0.1):
    """axolotl orpo_compute_loss (before PR #3910): log(1 − exp(p)), every digit of 1 − e^p lost
    as the average log-probability p approaches 0."""
    return _orpo(chosen_logps, rejected_logps, beta, lambda p: torch.log(1 - torch.exp(p)))


def orpo_offset_one_point_0001(chosen_logps, rejected_logps, beta=0.1):
    """ColossalAI OddsRatioLoss (PR #6407): log(−exp(p) + 1.0001), a constant 1e-4 added to
    1 − e^p to keep the logarithm finite."""
    return _orpo(chosen_logps, rejected_logps, beta, lambda p: torch.log(-torch.exp(p) + 1.0001))


def pairwise(chosen_rewards, rejected_rewards, margin=None, center_rewards_coefficient=None, form="sigmoid"):
    d = chosen_rewards - rejected_rewards
    if margin is not None:
        d = d - margin
    loss = -F.logsigmoid(d).mean()
    if center_rewards_coefficient is not None:
        loss = loss + center_rewards_coefficient * ((chosen_rewards + rejected_rewards) ** 2).mean()
    return loss


def pairwise_log_of_sigmoid(chosen_rewards, rejected_rewards, margin=None, center_rewards_coefficient=None,
                            form="sigmoid"):
    """DeepSpeed-Chat reward model (DeepSpeedExamples issue #423): −log(sigmoid(d)), infinite once
    σ(d) underflows to 0, where −logsigmoid (softplus(−d)) is finite."""
    d = chosen_rewards - rejected_rewards
    if margin is not None:
        d = d - margin
    loss = -torch.log(torch.sigmoid(d)).mean()
    if center_rewards_coefficient is not None:
        loss = loss + center_rewards_coefficient * ((chosen_rewards + rejected_rewards) ** 2).mean()
    return loss


def pairwise_margin_broadcast(chosen_rewards, rejected_rewards, margin=None, center_rewards_coefficient=None,
                              form="sigmoid"):
    """ms-swift reward trainer before PR #9927: rewards of shape [B, 1] minus margins of shape [B]
    broadcast to [B, B], every pair mixed with every margin."""
    d = (chosen_rewards - rejected_rewards)[:, None]
    if margin is not None:
        d = d - margin[None, :]
    loss = -F.logsigmoid(d).mean()
    if center_rewards_coefficient is not None:
        loss = loss + center_rewards_coefficient * ((chosen_rewards + rejected_rewards) ** 2).mean()
    return loss
