"""Mutants of ``moe.router_z_loss`` (ST-MoE, arXiv 2202.08906, §3.1 eq. 5).

The mean over the (unmasked) tokens of lse(router logits)²; gradient with respect to the logits."""
from __future__ import annotations

import torch

from mutants import Pair, checked, export

OBJ = "moe.router_z_loss"


def z_loss(router_logits, mask, *, count_padding=False):
    """The loss; every keyword after ``*`` switches one bug on."""
    lse = torch.logsumexp(router_logits, dim=-1)
    if mask is None:
        return (lse ** 2).mean()
    m = mask.to(torch.bool)
    terms = torch.where(m, lse ** 2, torch.zeros_like(lse))
    return terms.sum() / (len(lse) if count_padding else m.sum())


@checked(OBJ)
def twin(router_logits, mask=None):
    """ST-MoE eq. 5 over the tokens the mask selects."""
    return z_loss(router_logits, mask)


@checked(OBJ)
def padding_counted_in_the_mean(router_logits, mask=None):
    """Padded positions counted in the mean's denominator.

    Seen: transformers 5.25.0 models/switch_transformers/modeling_switch_transformers.py
    router_z_loss_func divides the sum over [groups, tokens] by every position (it takes no
    attention mask), so padding dilutes the loss by the padded fraction."""
    return z_loss(router_logits, mask, count_padding=True)


PAIRS = [Pair("MOE_Z_PADDING_COUNTED", OBJ, padding_counted_in_the_mean, twin)]
export(globals(), PAIRS)
