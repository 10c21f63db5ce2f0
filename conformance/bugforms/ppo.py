"""Known wrong formulas of the ppo.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

import numpy as np

from lossproof.conformance.bugforms import Form, call
from lossproof.refimpl.arrays import grpo, ppo


def _value_min(kw):
    """s·min((V − R)², (V_c − R)²) per token, V_c = clip(V, V_old − ε, V_old + ε), reduced
    as the catalog reduces the value loss (grpo.aggregate's modes, L = T)."""
    eps = kw["clip_range_value"]
    if eps is None:   # no clipped branch to pick
        return {"loss": call(ppo.value_loss, kw)}
    v, ret = kw["values"], kw["returns"]
    clipped = np.clip(v, kw["old_values"] - eps, kw["old_values"] + eps)
    per_token = (0.5 if kw["half"] else 1.0) * np.minimum((v - ret) ** 2, (clipped - ret) ** 2)
    return {"loss": grpo.aggregate(per_token, kw["mask"], mode=kw["aggregation"])}


FORMS = (
    Form("ppo.value_loss", "min of the two squares",
         "the clipped value loss takes min((V − R)², (V_c − R)²) where baselines ppo2 (and PPO's value "
         "clipping as verl and OpenRLHF ship it) takes the max: the pessimistic bound becomes an optimistic one",
         "take torch.max of the unclipped and the clipped squared errors",
         ("ray-project/ray#2233",), _value_min),
)
