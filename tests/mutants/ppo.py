"""Mutants of ``ppo.value_loss`` (PPO eq. 9; baselines ppo2's value clipping) and
``ppo.entropy_bonus`` (PPO eq. 9's c₂·S as −c·agg(H)).

value_loss: aggregate over tokens of s·max((V − R)², (V_old + clip(V − V_old, ±ε) − R)²); gradient
with respect to ``values``. entropy_bonus: −c·aggregate(H); gradient with respect to ``entropy``."""
from __future__ import annotations

import torch

from mutants import Pair, checked, export

OBJ = "ppo.value_loss"
CONVENTIONS = {"clip_range_value": "*", "half": "*", "aggregation": "*"}


def _aggregate(per_token, m, aggregation):
    lengths = m.sum(dim=1)
    sums = (per_token * m).sum(dim=1)
    if aggregation == "token-mean":
        return sums.sum() / lengths.sum()
    rows = lengths > 0
    if aggregation == "seq-mean-token-mean":
        return (sums[rows] / lengths[rows]).sum() / rows.sum()
    seq = sums.sum() / rows.sum()
    return seq if aggregation == "seq-mean-token-sum" else seq / m.shape[1]


def value_loss_of(values, old_values, returns, mask, clip_range_value, half, aggregation, *,
                  take_min=False, stale_old=False, split_at_ties=False):
    """The loss; every keyword after ``*`` switches one bug on."""
    m = mask.to(values.dtype)
    ret = returns.detach()
    old = values.detach() if stale_old else old_values.detach()
    v = torch.where(m > 0, values, ret)            # padding: no square formed
    old = torch.where(m > 0, old, ret)
    unclipped = (v - ret) ** 2
    if clip_range_value is None:
        per_token = unclipped
    else:
        eps = clip_range_value
        if split_at_ties:   # verl 0.9.1's clip_by_value and torch.max, which split the gradient at a tie
            clipped = (torch.max(torch.min(v, old + eps), old - eps) - ret) ** 2
            per_token = torch.min(unclipped, clipped) if take_min else torch.max(unclipped, clipped)
        else:
            clipped = (torch.clamp(v, old - eps, old + eps) - ret) ** 2
            keep = unclipped <= clipped if take_min else unclipped >= clipped
            per_token = torch.where(keep, unclipped, clipped)
    return (0.5 if half else 1.0) * _aggregate(per_token, m, aggregation)


@checked(OBJ)
def twin(values, old_values, returns, mask, clip_range_value=None, half=False, aggregation="token-mean"):
    """PPO eq. 9 and baselines ppo2's clipped form, the tie on the unclipped branch."""
    return value_loss_of(values, old_values, returns, mask, clip_range_value, half, aggregation)


@checked(OBJ)
def min_of_the_two_squares(values, old_values, returns, mask, clip_range_value=None, half=False,
                           aggregation="token-mean"):
    """The smaller of the two squared errors instead of the larger.

    Seen: ray-project/ray issue #2233 (RLlib's PPO value loss took tf.minimum where OpenAI
    baselines ppo2 takes tf.maximum)."""
    return value_loss_of(values, old_values, returns, mask, clip_range_value, half, aggregation, take_min=True)


@checked(OBJ)
def old_values_from_the_current_network(values, old_values, returns, mask, clip_range_value=None, half=False,
                                        aggregation="token-mean"):
    """The clip's centre recomputed with the current value network: the clip never acts.

    Seen: tensorflow/agents issue #352 (PPO value clipping "seems to have no effect": the old value
    predictions were recomputed from the same network, so V − V_old = 0)."""
    return value_loss_of(values, old_values, returns, mask, clip_range_value, half, aggregation, stale_old=True)


@checked(OBJ)
def gradient_split_at_the_band_edge(values, old_values, returns, mask, clip_range_value=None, half=False,
                                    aggregation="token-mean"):
    """The clip as torch.max(torch.min(V, hi), lo) and the max of the two squares as torch.max.

    Seen: verl 0.9.1 verl/utils/torch_functional.py clip_by_value used by trainer/ppo/core_algos.py
    compute_value_loss: at V − V_old = ±ε exactly each splits the gradient between two equal
    arguments, and ¾ of 2s·(V − R) comes back where the loss is differentiable."""
    return value_loss_of(values, old_values, returns, mask, clip_range_value, half, aggregation,
                         split_at_ties=True)


ENTROPY = "ppo.entropy_bonus"
ENTROPY_CONVENTIONS = {"aggregation": "*", "mean_eps": "*"}


def _aggregate_eps(per_token, m, aggregation, norm, eps):
    lengths = m.sum(dim=1)
    sums = (per_token * m).sum(dim=1)
    if aggregation == "token-mean":
        return sums.sum() / lengths.sum()
    rows = lengths > 0
    if aggregation == "seq-mean-token-mean":
        return (sums[rows] / (lengths[rows] + eps)).sum() / rows.sum()
    seq = sums.sum() / rows.sum()
    return seq if aggregation == "seq-mean-token-sum" else seq / norm


def entropy_bonus_of(entropy, mask, coef, aggregation, norm_length, mean_eps, *, plus=False, padding=False):
    """The entropy term; every keyword after ``*`` switches one bug on."""
    m = torch.ones_like(entropy) if padding else mask.to(entropy.dtype)
    h = entropy if padding else torch.where(m > 0, entropy, torch.zeros_like(entropy))
    norm = entropy.shape[1] if norm_length is None else norm_length
    agg = _aggregate_eps(h, m, aggregation, norm, mean_eps)
    return coef * agg if plus else -coef * agg


@checked(ENTROPY)
def entropy_twin(entropy, mask, coef=0.01, aggregation="token-mean", norm_length=None, mean_eps=0.0):
    """PPO eq. 9's entropy bonus as the loss −c·aggregate(H)."""
    return entropy_bonus_of(entropy, mask, coef, aggregation, norm_length, mean_eps)


@checked(ENTROPY)
def entropy_added_with_the_wrong_sign(entropy, mask, coef=0.01, aggregation="token-mean", norm_length=None,
                                      mean_eps=0.0):
    """The entropy term added to the loss with +c: minimising it drives the policy to determinism.

    Seen: pukkapies/dl-imperial-maths pull request #8 ("Fix entropy sign in PPO");
    zhangchuheng123/Reinforcement-Implementation issue #2 (ppo.py's loss_entropy enters the total
    loss with +)."""
    return entropy_bonus_of(entropy, mask, coef, aggregation, norm_length, mean_eps, plus=True)


@checked(ENTROPY)
def entropy_averaged_over_padding(entropy, mask, coef=0.01, aggregation="token-mean", norm_length=None,
                                  mean_eps=0.0):
    """The entropy averaged over every position of the padded batch, padding included.

    Seen: huggingface/trl pull request #6121 (PPO's entropy summed the padding positions' sentinel
    values, issue #2022); allenai/open-instruct issue #756 (entropy without the padding mask)."""
    return entropy_bonus_of(entropy, mask, coef, aggregation, norm_length, mean_eps, padding=True)


PAIRS = [
    Pair("PPO_ENTROPY_SIGN", ENTROPY, entropy_added_with_the_wrong_sign, entropy_twin, ENTROPY_CONVENTIONS),
    Pair("PPO_ENTROPY_OVER_PADDING", ENTROPY, entropy_averaged_over_padding, entropy_twin, ENTROPY_CONVENTIONS),
    Pair("PPO_VALUE_MIN", OBJ, min_of_the_two_squares, twin, CONVENTIONS),
    Pair("PPO_VALUE_STALE_OLD", OBJ, old_values_from_the_current_network, twin, CONVENTIONS),
    Pair("PPO_VALUE_SPLIT_AT_EDGE", OBJ, gradient_split_at_the_band_edge, twin, CONVENTIONS),
]
export(globals(), PAIRS)
