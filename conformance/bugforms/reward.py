"""Known wrong formulas of the reward.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

import numpy as np

from lossproof.conformance.bugforms import Form, call
from lossproof.refimpl.arrays import reward


def _margin_broadcast(kw):
    # rewards [B, 1] − margins [B] is [B, B]: pair i with every margin j, then the mean of the B² terms
    if kw.get("margin") is None:
        return {"loss": call(reward.pairwise, kw)}
    c, r, m = kw["chosen_rewards"], kw["rejected_rewards"], kw["margin"]
    b = c.shape[0]
    # each pair repeated B times keeps mean_b (r_c + r_r)² of the centring term as it is
    return {"loss": call(reward.pairwise, kw, chosen_rewards=np.repeat(c, b), rejected_rewards=np.repeat(r, b),
                         margin=np.tile(m, b))}


FORMS = (
    Form("reward.pairwise", "margin broadcast",
         "rewards of shape [B, 1] minus margins of shape [B] broadcast to [B, B]: the loss is the mean of "
         "−log σ(r_c,i − r_r,i − m_j) over every pair i and every margin j, not over the pairs with their "
         "own margin",
         "give the rewards and the margins the same shape ([B]: squeeze the reward head's last axis) before "
         "the difference",
         ("modelscope/ms-swift#9927",), _margin_broadcast),
)
