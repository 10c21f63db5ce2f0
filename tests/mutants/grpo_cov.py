"""Mutants of the GRPO family's vector set 1.5.0: grpo.clip's log-ratio clamp, and grpo.loss's
Clip-Cov, KL-Cov (Cui et al., arXiv 2505.22617 §4; verl 0.9.1 compute_policy_loss_clip_cov /
compute_policy_loss_kl_cov) and REINFORCE (Williams 1992; verl 0.9.1 compute_policy_loss_gpg)."""
from __future__ import annotations

import torch

from mutants import Pair, checked, export
from mutants.grpo import CLIP, LOSS, MODES, aggregate, clip
from mutants.kl import estimate

# ----------------------------------------------------------------------------------- clip


def _clip(kw, **bug):
    clamp = None if bug.pop("clamp_ignored", False) else kw.get("log_ratio_clamp")
    return clip(kw["logp"], kw["old_logp"], kw["advantages"], kw.get("eps_low", 0.2), kw.get("eps_high"),
                kw.get("dual_clip"), log_ratio_clamp=clamp, **bug)


@checked(CLIP)
def clip_clamp_twin(**kw):
    """PPO eq. 7 on ρ = exp(clamp(log ρ, −c, c)) (verl 0.9.1 compute_policy_loss_vanilla)."""
    return _clip(kw)


@checked(CLIP)
def clip_declared_log_ratio_clamp_ignored(**kw):
    """A declared clamp of log ρ (verl/OpenRLHF: ±20) not applied before the exponential.

    Seen: verl-project/verl PR #1779 (negative_approx_kl clamped before exp for stability);
    OpenRLHF 0.11.2 models/loss.py PolicyLoss (raw_policy_log_ratio.clamp(-20, 20)): an adapter
    that declares it must reproduce it. Invisible until |log ρ| > 20."""
    return _clip(kw, clamp_ignored=True)


# ----------------------------------------------------------------------------------- loss

COV_CONVENTIONS = {"dual_clip": [None], "kl_kind": ["k3"], "kl_clamp": "*", "kl_ratio_weight": [False],
                   "aggregation": MODES, "policy_loss": ["clip-cov", "kl-cov", "reinforce"]}


def _top_k(logp, adv, m, ratio, *, over_padding=False):
    """KL-Cov's top-k = max(1, ⌊N·ratio⌋) tokens by (A − Ā)(log π − mean log π) (verl 0.9.1
    compute_policy_loss_kl_cov), over the valid tokens (``over_padding``: over every position)."""
    valid = torch.ones_like(m) if over_padding else m
    a, lp = adv[valid], logp.detach()[valid]
    cov = (a - a.mean()) * (lp - lp.mean())
    k = max(1, int(ratio * len(cov)))
    chosen = torch.zeros(len(cov), dtype=torch.bool)
    chosen[torch.topk(cov, k).indices] = True
    out = torch.zeros_like(m)
    out[valid] = chosen
    return out & m if not over_padding else out


def cov_loss(kw, *, penalty_signed=False, value_kept=False, clipped_kl_cov=False, topk_over_padding=False,
             reinforce_ratio=False):
    """−aggregate(C_t) + β·aggregate(KL_t) for Clip-Cov, KL-Cov and REINFORCE; every keyword after
    ``*`` switches one bug on."""
    logp, mask = kw["logp"], kw["mask"]
    m = mask != 0
    policy = kw["policy_loss"]
    mode = kw.get("aggregation", "seq-mean-token-mean")
    zero = torch.zeros_like(logp)
    old = torch.where(m, kw["old_logp"].detach(), logp.detach())   # masked: a neutral ratio of 1
    adv = kw["advantages"].detach()[:, None].expand_as(logp)
    if policy == "reinforce":
        c = torch.exp(logp - old) * adv if reinforce_ratio else adv * logp
    else:
        chosen = kw.get("selected")
        s = (chosen != 0) if chosen is not None else _top_k(logp, adv, m, kw.get("kl_cov_ratio", 0.0002),
                                                             over_padding=topk_over_padding)
        if policy == "clip-cov":
            c = clip(logp, old, adv, kw.get("eps_low", 0.2), kw.get("eps_high"), None)
            c = torch.where(s, c.detach() if value_kept else zero, c)
        else:
            rho = torch.exp(logp - old)
            if clipped_kl_cov:
                c = clip(logp, old, adv, kw.get("eps_low", 0.2), kw.get("eps_high"), None)
            else:
                c = rho * adv
            delta = logp - old
            c = c - torch.where(s, kw.get("kl_cov_coef", 1.0) * (delta if penalty_signed else delta.abs()), zero)
    per_token = torch.where(m, -c, zero)
    beta = kw.get("beta", 0.04)
    if beta != 0:
        ref = torch.where(m, kw["ref_logp"].detach(), logp.detach())
        penalty = estimate(logp, ref, kw.get("kl_kind", "k3"), kw.get("kl_clamp"))
        per_token = per_token + beta * torch.where(m, penalty, zero)
    return aggregate(per_token, mask, mode, kw.get("norm_length"))


@checked(LOSS)
def cov_twin(**kw):
    """Clip-Cov and KL-Cov as arXiv 2505.22617 §4 and verl 0.9.1 write them; REINFORCE's −A·log π."""
    return cov_loss(kw)


@checked(LOSS)
def kl_cov_penalty_without_abs(**kw):
    """KL-Cov's penalty k·(log π − log π_old) without the absolute value: a token whose ratio fell
    is rewarded, not penalised.

    Seen: Cui et al., arXiv 2505.22617 §4 (the KL-Cov penalty, verl 0.9.1 core_algos.py
    compute_policy_loss_kl_cov: ppo_kl_coef * abs_kl, abs_kl = negative_approx_kl.abs())."""
    return cov_loss(kw, penalty_signed=True)


@checked(LOSS)
def clip_cov_value_kept(**kw):
    """Clip-Cov's selected tokens detached instead of dropped: gradient 0, but their −C_t stays in
    the loss value.

    Seen: Cui et al., arXiv 2505.22617 §4 ("clip" the high-covariance tokens' gradient) and
    PRIME-RL/Entropy-Mechanism-of-RL core_algos.py, as verl 0.9.1 compute_policy_loss_clip_cov
    ships it: pg_losses = torch.maximum(pg_losses1, pg_losses2) * corr, corr = 0 on the drawn
    tokens (the term itself removed)."""
    return cov_loss(kw, value_kept=True)


@checked(LOSS)
def kl_cov_clipped_ratio(**kw):
    """KL-Cov with PPO's clip on its ratio term (verl's compute_policy_loss_kl_cov has none: −ρA).

    Seen: Cui et al., arXiv 2505.22617 §4 (KL-Cov replaces the clip by the KL penalty on the
    selected tokens); verl 0.9.1 core_algos.py compute_policy_loss_kl_cov (pg_losses1 =
    -advantages * ratio, never clamped)."""
    return cov_loss(kw, clipped_kl_cov=True)


@checked(LOSS)
def kl_cov_top_k_over_padding(**kw):
    """KL-Cov's covariance and its top-k taken over every position, padding included.

    Seen: verl 0.9.1 core_algos.py compute_policy_loss_kl_cov (all_valid = response_mask > 0:
    the means and the top-k run over the valid tokens only); NovaSky-AI/SkyRL PR #462 (padded
    tokens in a batch statistic)."""
    return cov_loss(kw, topk_over_padding=True)


@checked(LOSS)
def reinforce_with_ratio(**kw):
    """REINFORCE written with the importance ratio ρA instead of A·log π: the gradient is the
    same at ρ = 1, the loss value is not (and off-policy neither is the gradient).

    Seen: Williams 1992 (REINFORCE: the score function A·∇log π); verl 0.9.1 core_algos.py
    compute_policy_loss_gpg (pg_losses = -log_prob * advantages) vs compute_policy_loss_vanilla."""
    return cov_loss(kw, reinforce_ratio=True)


PAIRS = [
    Pair("CLIP_DECLARED_LOG_RATIO_CLAMP_IGNORED", CLIP, clip_declared_log_ratio_clamp_ignored, clip_clamp_twin,
         {"dual_clip": [None, 3.0], "log_ratio_clamp": [20.0]}),
    Pair("KL_COV_PENALTY_WITHOUT_ABS", LOSS, kl_cov_penalty_without_abs, cov_twin, COV_CONVENTIONS),
    Pair("CLIP_COV_VALUE_KEPT", LOSS, clip_cov_value_kept, cov_twin, COV_CONVENTIONS),
    Pair("KL_COV_CLIPPED_RATIO", LOSS, kl_cov_clipped_ratio, cov_twin, COV_CONVENTIONS),
    Pair("KL_COV_TOP_K_OVER_PADDING", LOSS, kl_cov_top_k_over_padding, cov_twin, COV_CONVENTIONS),
    Pair("REINFORCE_WITH_RATIO", LOSS, reinforce_with_ratio, cov_twin, COV_CONVENTIONS),
]
export(globals(), PAIRS)
