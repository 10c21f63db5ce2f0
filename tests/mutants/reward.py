"""Mutants of ``reward.pairwise`` (Bradley–Terry; InstructGPT §3.5 eq. 1; Eisenstein et al. eq. 2).

mean_b −log σ(r_c − r_r − m) + c·mean_b (r_c + r_r)²; gradients with respect to both rewards."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from mutants import Pair, checked, export

OBJ = "reward.pairwise"
CONVENTIONS = {"form": ["sigmoid", "log-exp"]}


def pairwise_loss(chosen_rewards, rejected_rewards, center_rewards_coefficient, margin, *,
                  literal_log_exp=False, drop_margin=False, centre_difference=False):
    """The loss; every keyword after ``*`` switches one bug on."""
    d = chosen_rewards - rejected_rewards
    if margin is not None and not drop_margin:
        d = d - margin.detach()
    loss = torch.log(1 + torch.exp(-d)).mean() if literal_log_exp else -F.logsigmoid(d).mean()
    if center_rewards_coefficient is not None:
        pair = chosen_rewards - rejected_rewards if centre_difference else chosen_rewards + rejected_rewards
        loss = loss + center_rewards_coefficient * (pair ** 2).mean()
    return loss


@checked(OBJ)
def twin(chosen_rewards, rejected_rewards, center_rewards_coefficient=None, form="sigmoid", margin=None):
    """TRL 1.16.0 RewardTrainer.compute_loss, written with logsigmoid for both forms."""
    return pairwise_loss(chosen_rewards, rejected_rewards, center_rewards_coefficient, margin)


@checked(OBJ)
def literal_log_exp(chosen_rewards, rejected_rewards, center_rewards_coefficient=None, form="sigmoid", margin=None):
    """The log-exp form evaluated literally: log(1 + exp(r_r − r_c)) overflows and absorbs.

    Seen: OpenRLHF 0.11.2 openrlhf/models/loss.py LogExpLoss.forward
    (torch.log(1 + torch.exp(reject_reward - chosen_reward))): infinite once r_r − r_c exceeds
    709.8 in float64, and 0 for a pair once e^{r_r − r_c} is below the unit roundoff."""
    return pairwise_loss(chosen_rewards, rejected_rewards, center_rewards_coefficient, margin, literal_log_exp=True)


@checked(OBJ)
def margin_ignored(chosen_rewards, rejected_rewards, center_rewards_coefficient=None, form="sigmoid", margin=None):
    """The margin is accepted and never used.

    Seen: OpenRLHF 0.11.2 openrlhf/models/loss.py LogExpLoss.forward takes `margin` and does not
    read it, so --model.margin_loss_enable has no effect with --model.loss_type logexp
    (openrlhf/trainer/rm_trainer.py passes it)."""
    return pairwise_loss(chosen_rewards, rejected_rewards, center_rewards_coefficient, margin, drop_margin=True)


@checked(OBJ)
def centring_squares_the_difference(chosen_rewards, rejected_rewards, center_rewards_coefficient=None,
                                    form="sigmoid", margin=None):
    """Centring on (r_c − r_r)² instead of (r_c + r_r)².

    Seen: huggingface/trl issue #1931 ("my PR has a bug. We don't want the mean of the squared
    differences. We want the mean of the squared sums."), in the first draft of PR #1932, which
    added center_rewards_coefficient after Eisenstein et al. (arXiv 2312.09244) eq. 2."""
    return pairwise_loss(chosen_rewards, rejected_rewards, center_rewards_coefficient, margin,
                         centre_difference=True)


PAIRS = [
    Pair("REWARD_LITERAL_LOG_EXP", OBJ, literal_log_exp, twin, CONVENTIONS),
    Pair("REWARD_MARGIN_IGNORED", OBJ, margin_ignored, twin, CONVENTIONS),
    Pair("REWARD_CENTRING_DIFFERENCE", OBJ, centring_squares_the_difference, twin, CONVENTIONS),
]
export(globals(), PAIRS)
