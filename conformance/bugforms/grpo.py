"""Known wrong formulas of the grpo.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

import numpy as np

from lossproof.conformance.bugforms import Form, call
from lossproof.refimpl.arrays import grpo


def _clip_ratio_inverted(kw):
    return {"objective": call(grpo.clip, kw, logp=kw["old_logp"], old_logp=kw["logp"])}


def _first_group_statistics(kw):
    # the group-relative form only: another scale or baseline takes no per-group statistics to misplace
    if kw["scale"] != "group" or kw["baseline"] != "mean" or kw["degenerate"] == "raw":
        return None
    r = kw["rewards"]
    n_groups, g = r.shape
    if n_groups == 1 or g == 1:   # one group is its own first; a group of one is degenerate whatever the std
        return call(grpo.advantages, kw)
    d0 = r[0] - r[0].mean()
    std0 = np.sqrt(np.sum(d0 * d0) / max(g - kw["std_ddof"], 1))
    degen = r.max(axis=1) == r.min(axis=1)
    adv = np.where(degen[:, None], 0.0, (r - r[0].mean()) / (std0 + kw["eps"]))
    keep = np.where(degen, 0.0, 1.0) if kw["degenerate"] == "drop" else np.ones(n_groups)
    return {"advantages": adv, "keep": keep}


FORMS = (
    Form("grpo.clip", "ratio inverted",
         "the importance ratio is π_old/π (log ρ = old_logp − logp) where PPO eq. 7 takes ρ = π/π_old",
         "form the ratio as exp(logp − old_logp): the current policy's log-probability first",
         ("tristandeleu/pytorch-maml-rl#24", "THUDM/slime#179"), _clip_ratio_inverted),
    Form("grpo.advantages", "first group's statistics",
         "the reward mean and standard deviation are those of the first group's rollouts, applied to every "
         "group, where DeepSeekMath §4.1.2 normalises each group by its own",
         "compute the mean and the std per group (over each prompt's G rollouts, axis 1), not from the first group",
         ("ServiceNow/PipelineRL#54",), _first_group_statistics),
)
