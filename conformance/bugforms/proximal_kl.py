"""Known wrong formulas of the proximal_kl.* objectives (``conformance.bugforms``).

k_u = logp_u − ref_logp_u, F_t = Σ_{u>t, m_u=1} k_u, ρ_t = π/μ, ℓ_t = −ρ_t·sg(A − β·(k_t + F_t)), as in
``refimpl.arrays.proximal_kl``."""
from __future__ import annotations

import numpy as np

from lossproof.conformance.bugforms import Form, call
from lossproof.refimpl.arrays import grpo, proximal_kl


def _with_current(kw, clip, window):
    """Σ_{u≥t} m_u·k_u (within the window), clipped: the future cost with the current token's k_t in it."""
    live = kw["mask"] != 0
    exclusive = proximal_kl.future_cost(kw["logp"], kw["ref_logp"], kw["mask"], None, window)
    total = exclusive + np.where(live, kw["logp"] - kw["ref_logp"], 0.0)
    return total if clip is None else np.clip(total, -clip, clip)


def _loss(kw, future, log_ratio):
    """The loss of ``proximal_kl.loss`` with the future cost ``future`` [B,T] (clipped) and the log
    ratio ``log_ratio`` in place of the catalog's: the ratio capped, the PPO clip, the aggregation."""
    live = kw["mask"] != 0
    coef = kw["advantages"][:, None] - kw["beta"] * (kw["logp"] - kw["ref_logp"] + future)
    rho = np.exp(np.where(live, log_ratio, 0.0))
    if kw["ratio_cap"] is not None:
        rho = np.minimum(rho, kw["ratio_cap"])
    eps = kw["ratio_clip"]
    objective = rho * coef if eps is None else grpo.surrogate(np, rho, coef, 1 - eps, 1 + eps, None)[0]
    return call(grpo.aggregate, kw, values=np.where(live, -objective, 0.0), mode=kw["aggregation"])


def _future(kw):
    return proximal_kl.future_cost(kw["logp"], kw["ref_logp"], kw["mask"], kw["future_clip"], kw["future_window"])


def _future_includes_current(kw):
    return {"cost": _with_current(kw, kw["clip"], kw["window"])}


def _loss_future_includes_current(kw):
    return {"loss": _loss(kw, _with_current(kw, kw["future_clip"], kw["future_window"]),
                          kw["logp"] - kw["behavior_logp"])}


def _loss_own_token_only(kw):
    return {"loss": _loss(kw, np.zeros_like(kw["logp"]), kw["logp"] - kw["behavior_logp"])}


def _loss_ratio_inverted(kw):
    return {"loss": _loss(kw, _future(kw), kw["behavior_logp"] - kw["logp"])}


# FRPO, which keeps the own-token k_t apart from the future cost over u > t
FRPO = ("https://arxiv.org/abs/2601.10201",)

FORMS = (
    Form("proximal_kl.future_cost", "current token in the future cost",
         "the future cost sums Σ_{u≥t} m_u·k_u, the current token's k_t included, where the future cost is "
         "Σ_{u>t} (the own-token k_t is a term of its own)",
         "start the suffix sum at u = t + 1 (shift the inclusive cumulative sum one position left)",
         FRPO, _future_includes_current),
    Form("proximal_kl.loss", "current token in the future cost",
         "the coefficient is A − β·(k_t + Σ_{u≥t} m_u·k_u): the current token's k_t counted twice, once on its "
         "own and once in the future cost F_t that sums u > t only",
         "sum the future cost over the later tokens u > t only",
         FRPO, _loss_future_includes_current),
    Form("proximal_kl.loss", "future cost left out",
         "the coefficient is A − β·k_t: only the own token's KL, the future cost F_t = Σ_{u>t} k_u left out "
         "(a per-token KL penalty as GRPO's)",
         "add the detached future cost F_t to the coefficient: A − β·(k_t + F_t)",
         FRPO, _loss_own_token_only),
    Form("proximal_kl.loss", "behaviour ratio inverted",
         "the importance ratio is μ/π (log ρ = behavior_logp − logp) where the loss corrects the behaviour "
         "policy's samples with ρ = π/μ",
         "form the ratio as exp(logp − behavior_logp): the current policy's log-probability first",
         ("tristandeleu/pytorch-maml-rl#24", "THUDM/slime#179"), _loss_ratio_inverted),
)
