"""Known wrong formulas of the grpo.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

import numpy as np

from lossproof.conformance.bugforms import Form, call
from lossproof.refimpl.arrays import grpo, kl

# ----------------------------------------------------------------------------------- advantages


def _advantages(kw, *, batch_baseline=False, eps_inside_sqrt=False):
    """DeepSeekMath §4.1.2's advantages with the baseline or the divisor written another way;
    the degenerate groups, ``keep`` and verl's raw singletons as the catalog has them. Only the
    'mean' baseline and the group, batch and none scales (the others have no such variant)."""
    r, scale, eps = kw["rewards"], kw["scale"], kw["eps"]
    if kw.get("baseline", "mean") != "mean" or scale not in ("group", "batch", "none"):
        return None
    n_groups, g = r.shape
    if kw["degenerate"] == "raw" and g == 1:
        return call(grpo.advantages, kw)
    centred = r - (r.mean() if batch_baseline else r.mean(axis=1, keepdims=True))
    # the spread is the rewards' own, whichever baseline the centring takes
    if scale == "group":
        d, n, degen = r - r.mean(axis=1, keepdims=True), g, (r.max(axis=1) == r.min(axis=1)) | (g == 1)
    elif scale == "batch":
        d, n = r - r.mean(), r.size
        degen = np.full(n_groups, r.size == 1 or r.max() == r.min())
    else:
        d, n, degen = None, 0, np.zeros(n_groups, dtype=bool)
    if d is None:
        divisor = np.ones((n_groups, 1))
    else:
        var = np.sum(d * d, axis=1 if scale == "group" else None) / max(n - kw["std_ddof"], 1)
        divisor = np.sqrt(var + eps) if eps_inside_sqrt else np.sqrt(var) + eps
        divisor = np.broadcast_to(divisor, (n_groups,))[:, None]
    adv = np.where(degen[:, None], 0.0, centred / np.where(degen[:, None], 1.0, divisor))
    keep = np.where(degen, 0.0, 1.0) if kw["degenerate"] == "drop" else np.ones(n_groups)
    return {"advantages": adv, "keep": keep}


# ----------------------------------------------------------------------------------- clip


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


def _clip_max(kw):
    # max(ρA, clip(ρ)·A) = −min(ρ·(−A), clip(ρ)·(−A)): the catalog's clip on −A, negated; the
    # dual clip's floor c·A (A < 0) then applied to that value
    adv, dual = kw["advantages"], kw.get("dual_clip")
    optimistic = -call(grpo.clip, kw, advantages=-adv, dual_clip=None)
    if dual is None:
        return {"objective": optimistic}
    return {"objective": np.where(adv < 0, np.maximum(optimistic, dual * adv), optimistic)}


# ----------------------------------------------------------------------------------- aggregate


def _micro_batch_token_mean(kw):
    """token-mean formed per micro-batch (the rows split in two, ⌊B/2⌋ first), each over its
    own tokens, and the micro-batch means averaged (those with a token)."""
    values, mask = kw["values"], kw["mask"]
    if kw["mode"] != "token-mean" or values.shape[0] < 2:
        return {"value": call(grpo.aggregate, kw)}
    half = values.shape[0] // 2
    means = [call(grpo.aggregate, kw, values=values[rows], mask=mask[rows])
             for rows in (slice(None, half), slice(half, None)) if np.any(mask[rows] != 0)]
    return {"value": sum(means) / len(means)}


# ----------------------------------------------------------------------------------- loss


def _with_policy(kw, policy):
    """The loss whose policy term per valid token is ``policy`` (the bug's −C_t), reduced as the
    catalog reduces it (by ``aggregation``, times the rollout correction's weight where one is
    given), plus the catalog's KL term: the loss of REINFORCE with every advantage 0, whose
    policy term is exactly 0 (not the catalog's loss minus its policy term, which would cancel
    where the terms are large)."""
    if kw.get("is_weight") is not None:
        policy = policy * kw["is_weight"]
    policy = np.where(kw["mask"] != 0, policy, 0.0)
    kl_term = call(grpo.loss, kw, advantages=np.zeros_like(kw["advantages"]), policy_loss="reinforce", selected=None)
    return {"loss": call(grpo.aggregate, kw, values=policy, mode=kw["aggregation"]) + kl_term}


def _ratio(kw):
    """ρ_t = exp(logp − old_logp) on the valid tokens, 1 on padding (as the catalog's loss)."""
    return np.exp(np.where(kw["mask"] != 0, kw["logp"] - kw["old_logp"], 0.0))


def _reinforce_with_ratio(kw):
    if kw["policy_loss"] != "reinforce":
        return {"loss": call(grpo.loss, kw)}
    return _with_policy(kw, -_ratio(kw) * kw["advantages"][:, None])


def _kl_cov(kw, *, clipped=False, signed=False):
    """KL-Cov's −(ρA − s·k·|Δ|) (arXiv 2505.22617 §4) with its ratio term clipped as PPO's, or
    its penalty signed; s the tokens given, or the catalog's top-k by covariance (the selection
    reads neither the ratio term nor the penalty)."""
    if kw["policy_loss"] != "kl-cov":
        return {"loss": call(grpo.loss, kw)}
    valid = kw["mask"] != 0
    m = np.where(valid, 1.0, 0.0)
    selected = kw.get("selected")
    if selected is None:
        selected = grpo._selection(np, np.float64, "kl-cov", None, kw["logp"], kw["advantages"], m,
                                   kw["kl_cov_ratio"])
    adv = np.broadcast_to(kw["advantages"][:, None], kw["logp"].shape)
    delta = np.where(valid, kw["logp"] - kw["old_logp"], 0.0)
    if clipped:
        ratio_term = call(grpo.clip, kw, old_logp=np.where(valid, kw["old_logp"], kw["logp"]), advantages=adv,
                          dual_clip=None, log_ratio_clamp=None)
    else:
        ratio_term = _ratio(kw) * adv
    penalty = selected * kw["kl_cov_coef"] * (delta if signed else np.abs(delta))
    return _with_policy(kw, penalty - ratio_term)


def _kl_over_padding(kw):
    if kw["beta"] == 0:   # no KL term to misreduce
        return {"loss": call(grpo.loss, kw)}
    if kw.get("kl_aggregation") is not None or kw["ratio_level"] != "token":
        return None
    penalty = kl.estimator(kw["logp"], kw["ref_logp"], kw["kl_kind"], kw["kl_clamp"])
    if kw["kl_ratio_weight"]:
        penalty = _ratio(kw) * penalty
    return {"loss": call(grpo.loss, kw, beta=0.0) + kw["beta"] * np.mean(penalty)}


def _is_weight_ignored(kw):
    return {"loss": call(grpo.loss, kw, is_weight=None)}


# Cui et al., arXiv 2505.22617 §4 (the mutants' source: no public report of these two forms)
KL_COV = "https://arxiv.org/abs/2505.22617"

FORMS = (
    Form("grpo.advantages", "batch baseline",
         "the baseline subtracted is the mean of the whole batch of rewards, not each group's own mean "
         "(DeepSeekMath §4.1.2 centres within the group)",
         "take the mean over each group's G rewards (mean(dim=1) of the [B, G] rewards), not over the batch",
         ("XU-YIJIE/grpo-flat#2",), lambda kw: _advantages(kw, batch_baseline=True)),
    Form("grpo.advantages", "eps inside the sqrt",
         "the divisor is √(σ² + ε) where the catalog (TRL, verl) divides by σ + ε",
         "add eps to the standard deviation after the square root: (r − mean)/(std + eps)",
         ("keras-team/keras#8726", "pjreddie/darknet#17", "taokong/group_normalization#1"),
         lambda kw: _advantages(kw, eps_inside_sqrt=True)),
    Form("grpo.clip", "ratio inverted",
         "the importance ratio is π_old/π (log ρ = old_logp − logp) where PPO eq. 7 takes ρ = π/π_old",
         "form the ratio as exp(logp − old_logp): the current policy's log-probability first",
         ("tristandeleu/pytorch-maml-rl#24", "THUDM/slime#179"), _clip_ratio_inverted),
    Form("grpo.advantages", "first group's statistics",
         "the reward mean and standard deviation are those of the first group's rollouts, applied to every "
         "group, where DeepSeekMath §4.1.2 normalises each group by its own",
         "compute the mean and the std per group (over each prompt's G rollouts, axis 1), not from the first group",
         ("ServiceNow/PipelineRL#54",), _first_group_statistics),
    Form("grpo.clip", "max instead of min",
         "the clipped objective takes max(ρA, clip(ρ)·A), the optimistic bound, where PPO eq. 7 takes the min "
         "(the pessimistic bound)",
         "take torch.min of the two surrogate terms (or torch.max of the two losses −ρA and −clip(ρ)·A)",
         ("natolambert/rlhf-book#139", "openai/spinningup#315"), _clip_max),
    Form("grpo.aggregate", "micro-batch token means averaged",
         "token-mean is formed per micro-batch (the rows in two halves), each over its own tokens, and the "
         "micro-batch means are averaged: a row's weight depends on how the batch is split",
         "divide the summed token losses by the token count of the whole batch (all micro-batches, all ranks), "
         "not of each micro-batch",
         ("huggingface/trl#3231", "allenai/open-instruct#1161", "meta-pytorch/torchtune#1875"),
         _micro_batch_token_mean),
    Form("grpo.loss", "KL averaged over padding",
         "the KL term is the plain mean over all B·T positions, padding included, while the policy term is "
         "aggregated over the mask",
         "reduce the KL term with the same mask and aggregation as the policy term (masked mean, not .mean())",
         ("huggingface/trl#2995", "NovaSky-AI/SkyRL#462"), _kl_over_padding),
    Form("grpo.loss", "REINFORCE with the ratio",
         "REINFORCE's policy term is ρ·A (the importance-ratio surrogate) where the catalog has A·log π: the "
         "gradients agree at ρ = 1, the values never do",
         "write the REINFORCE term as −A·log π (verl's compute_policy_loss_gpg), not −ρ·A",
         (), _reinforce_with_ratio),
    Form("grpo.loss", "KL-Cov with a clipped ratio",
         "KL-Cov's ratio term is PPO's clipped min(ρA, clip(ρ)·A) where arXiv 2505.22617 §4 and verl's "
         "compute_policy_loss_kl_cov take the unclipped ρA",
         "drop the clip from KL-Cov's ratio term: −ρA + s·k·|log ρ|", (KL_COV,),
         lambda kw: _kl_cov(kw, clipped=True)),
    Form("grpo.loss", "KL-Cov penalty without abs",
         "KL-Cov's penalty on the selected tokens is k·(log π − log π_old), signed, where arXiv 2505.22617 §4 "
         "takes k·|log π − log π_old|: a token whose probability fell is rewarded",
         "penalise the absolute log ratio: ppo_kl_coef·(logp − old_logp).abs()", (KL_COV,),
         lambda kw: _kl_cov(kw, signed=True)),
    Form("grpo.loss", "IS weight ignored",
         "the rollout correction's importance-sampling weight is accepted and never multiplied into the policy "
         "term",
         "multiply each token's policy loss by its is_weight (TRL 1.16.0 importance_sampling_ratio, verl 0.9.1 "
         "rollout_is_weights)",
         ("rlcode/per#3",), _is_weight_ignored),
)
