"""Known wrong formulas of the grpo.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

from lossproof.conformance.bugforms import Form, call
from lossproof.refimpl.arrays import grpo


def _clip_ratio_inverted(kw):
    return {"objective": call(grpo.clip, kw, logp=kw["old_logp"], old_logp=kw["logp"])}


FORMS = (
    Form("grpo.clip", "ratio inverted",
         "the importance ratio is π_old/π (log ρ = old_logp − logp) where PPO eq. 7 takes ρ = π/π_old",
         "form the ratio as exp(logp − old_logp): the current policy's log-probability first",
         ("tristandeleu/pytorch-maml-rl#24", "THUDM/slime#179"), _clip_ratio_inverted),
)
