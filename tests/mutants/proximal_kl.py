"""Mutants of ``proximal_kl.future_cost`` and ``proximal_kl.loss`` (Proximal KL, Bai–Yao–Zhang,
as summarised in [proximal-kl-summary]; FRPO arXiv 2601.10201; DESIGN §4).

k_u = logp_u − ref_logp_u; F_t = Σ_{u>t, m_u=1} k_u (optionally windowed to u ≤ t+W and
clipped to ±c), detached; ρ_t = π/μ on the sampled token; ℓ_t = −ρ_t·sg(A − β·(k_t + F_t)),
aggregated over the minibatch's tokens (token mean by default).

No proximal_kl vectors exist yet: ``test_kill_table.py`` marks these pairs xfail(strict) until
they land, and ``test_twins_match_reference.py`` checks every twin against
``refimpl.torch.proximal_kl`` meanwhile."""
from __future__ import annotations

import torch

from mutants import Pair, checked, export
from mutants.grpo import MODES, aggregate

FUTURE, LOSS = "proximal_kl.future_cost", "proximal_kl.loss"
FUTURE_CONVENTIONS = {"clip": "*", "window": "*"}
LOSS_CONVENTIONS = {"ratio_clip": "*", "ratio_cap": "*", "future_clip": "*", "future_window": "*",
                    "aggregation": MODES}


def future(k, mask, clip, window, *, include_current=False, ignore_mask=False):
    """F_t from per-token k [B,T]; keywords after ``*`` are bugs. Differentiable in k (the
    callers detach)."""
    mk = k if ignore_mask else torch.where(mask != 0, k, torch.zeros_like(k))
    n = mk.shape[1]
    suffix = torch.cat([mk.flip(1).cumsum(1).flip(1), torch.zeros_like(mk[:, :1])], dim=1)  # Σ_{u≥t}
    first = 0 if include_current else 1
    cost = suffix[:, first:first + n]
    if window is not None:
        stop = torch.clamp(torch.arange(n) + 1 + int(window), max=n)
        cost = cost - suffix[:, stop]
    return cost if clip is None else cost.clamp(-clip, clip)


def _future(kw, *, keep_graph=False, **bug):
    logp = kw["logp"] if keep_graph else kw["logp"].detach()
    k = logp - kw["ref_logp"].detach()
    return future(k, kw["mask"], kw.get("clip"), kw.get("window"), **bug)


@checked(FUTURE)
def future_twin(**kw):
    """F_t = Σ_{u>t} m_u·k_u as the summary describes it (detached)."""
    return _future(kw)


@checked(FUTURE)
def future_includes_current(**kw):
    """Future KL cost including the current token: Σ_{u≥t} instead of Σ_{u>t}.

    Seen: the Proximal KL summary ([proximal-kl-summary]: "un costo ... que depende de palabras
    posteriores") and FRPO (arXiv 2601.10201) separate the own-token k_t from the future cost;
    counting k_t in F_t doubles it in the coefficient A − β·(k_t + F_t)."""
    return _future(kw, include_current=True)


@checked(FUTURE)
def future_ignores_mask(**kw):
    """Future KL cost ignoring the mask: padded positions' k_u summed into F_t.

    Seen: NovaSky-AI/SkyRL PR #462 and Tencent-Hunyuan/UniRL PR #409 (padding entering sums
    that should skip it); the summary's F_t runs over the response's later tokens only."""
    return _future(kw, ignore_mask=True)


@checked(FUTURE)
def future_leaks_gradient(**kw):
    """Future KL cost left on the policy's graph (not detached).

    Seen: FRPO (arXiv 2601.10201) and the summary treat the future cost as a constant
    coefficient (sg); DESIGN §4 lists future_cost as detached. Values are exact: only the
    harness's gradient-leak probe can see it."""
    return _future(kw, keep_graph=True)


def loss(kw, *, inverted_ratio=False, drop_ratio=False, own_token_only=False, attached_coefficient=False,
         future_with_current=False):
    """The Proximal KL loss; every keyword after ``*`` switches one bug on."""
    logp, mask = kw["logp"], kw["mask"]
    m = mask != 0
    beta = kw.get("beta", 0.04)
    k_live = logp - kw["ref_logp"].detach()
    k = k_live if attached_coefficient else k_live.detach()
    f = future(k if attached_coefficient else k.detach(), mask, kw.get("future_clip"), kw.get("future_window"),
               include_current=future_with_current)
    if own_token_only:
        f = torch.zeros_like(f)
    x = kw["advantages"].detach()[:, None] - beta * (k + f)
    log_ratio = logp - kw["behavior_logp"].detach()
    if inverted_ratio:
        log_ratio = -log_ratio
    if drop_ratio:           # ρ ≡ 1 in value, with the on-policy gradient ∇log π
        log_ratio = logp - logp.detach()
    log_ratio = torch.where(m, log_ratio, torch.zeros_like(log_ratio))   # masked: neutral ratio
    rho = torch.exp(log_ratio)
    cap, eps = kw.get("ratio_cap"), kw.get("ratio_clip")
    if cap is not None:
        rho = rho.clamp(max=cap)
    objective = rho * x
    if eps is not None:
        objective = torch.minimum(objective, rho.clamp(1 - eps, 1 + eps) * x)
    per_token = torch.where(m, -objective, torch.zeros_like(objective))
    return aggregate(per_token, mask, kw.get("aggregation", "token-mean"), None)


@checked(LOSS)
def loss_twin(**kw):
    """−ρ_t·sg(A − β·(k_t + F_t)), token mean (the summary's per-minibatch token average)."""
    return loss(kw)


@checked(LOSS)
def loss_behaviour_ratio_inverted(**kw):
    """Behaviour ratio inverted: μ/π instead of π/μ.

    Seen: tristandeleu/pytorch-maml-rl issue #24 (which policy the importance weight divides
    by); THUDM/slime PR #179 (importance ratio between rollout and training log-probs taken
    the wrong way: "应该是要用old logp")."""
    return loss(kw, inverted_ratio=True)


@checked(LOSS)
def loss_behaviour_ratio_dropped(**kw):
    """Behaviour ratio dropped (ρ ≡ 1): off-policy tokens treated as on-policy.

    Seen: DESIGN §4 / [proximal-kl-summary] (dropping ρ moves the fixed point away from
    π_ref·exp(r/β)); huggingface/trl issue #2769 (the ratio is 1 when old = current)."""
    return loss(kw, drop_ratio=True)


@checked(LOSS)
def loss_own_token_kl_only(**kw):
    """Own-token KL only: the future cost F_t left out of the coefficient.

    Seen: FRPO (arXiv 2601.10201) and DESIGN §4 ("own-token-only KL ... move[s] the fixed
    point"); GRPO's per-token k3 penalty (DeepSeekMath eq. 4) is of this kind."""
    return loss(kw, own_token_only=True)


@checked(LOSS)
def loss_coefficient_not_detached(**kw):
    """Gradient through the coefficient A − β·(k_t + F_t) (no stop-gradient).

    Seen: the summary's update and FRPO multiply ∇log π by a constant coefficient; an
    undetached k_t adds β·ρ_t·∇k_t (the REINFORCE-vs-pathwise confusion of
    verl-project/verl PR #2953)."""
    return loss(kw, attached_coefficient=True)


@checked(LOSS)
def loss_future_includes_current(**kw):
    """Future KL cost including the current token inside the loss (k_t counted twice).

    Seen: as for future_includes_current: [proximal-kl-summary] and FRPO (arXiv 2601.10201) define
    F_t over later tokens only."""
    return loss(kw, future_with_current=True)


PAIRS = [
    Pair("FUTURE_INCLUDES_CURRENT", FUTURE, future_includes_current, future_twin, FUTURE_CONVENTIONS),
    Pair("FUTURE_IGNORES_MASK", FUTURE, future_ignores_mask, future_twin, FUTURE_CONVENTIONS),
    Pair("FUTURE_LEAKS_GRADIENT", FUTURE, future_leaks_gradient, future_twin, FUTURE_CONVENTIONS),
    Pair("PKL_BEHAVIOUR_RATIO_INVERTED", LOSS, loss_behaviour_ratio_inverted, loss_twin, LOSS_CONVENTIONS),
    Pair("PKL_BEHAVIOUR_RATIO_DROPPED", LOSS, loss_behaviour_ratio_dropped, loss_twin, LOSS_CONVENTIONS),
    Pair("PKL_OWN_TOKEN_KL_ONLY", LOSS, loss_own_token_kl_only, loss_twin, LOSS_CONVENTIONS),
    Pair("PKL_COEFFICIENT_NOT_DETACHED", LOSS, loss_coefficient_not_detached, loss_twin, LOSS_CONVENTIONS),
    Pair("PKL_FUTURE_INCLUDES_CURRENT", LOSS, loss_future_includes_current, loss_twin, LOSS_CONVENTIONS),
]
export(globals(), PAIRS)
