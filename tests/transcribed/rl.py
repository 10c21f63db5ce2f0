"""Policy-gradient and KL pieces (kl.estimator, grpo.*) as libraries without an adapter wrote
them, each defect transcribed from a public report (``transcribed.table`` links it), beside the
corrected function."""
from __future__ import annotations

import torch


def _k3(x):
    return torch.expm1(x) - x


def kl_estimator(logp, ref_logp, kind="k3", clamp=None):
    x = ref_logp - logp
    if kind == "k1":
        k = -x
    elif kind == "k2":
        k = x * x / 2
    elif kind == "k3":
        k = _k3(x)
    else:
        k = x.abs()
    return k if clamp is None else k.clamp(-clamp, clamp)


def kl_estimator_fallthrough(logp, ref_logp, kind="k3", clamp=None):
    """AReaL PR #408 as first written: `if kind == "k2": …` then `if kind == "k3": …` on the same
    variable, a chain of ifs without elif; as transcribed, every kind ends up computing k3."""
    k = _k3(ref_logp - logp)
    return k if clamp is None else k.clamp(-clamp, clamp)


def kl_estimator_reversed_ratio(logp, ref_logp, kind="k3", clamp=None):
    """rocket-learn before PR #12: k3 = e^x − 1 − x with x = log(π/π_ref), the log-ratio of the
    wrong direction (k3 takes x = log(π_ref/π))."""
    k = _k3(logp - ref_logp)
    return k if clamp is None else k.clamp(-clamp, clamp)


def advantages(rewards, scale="group", std_ddof=0, eps=0.0, degenerate="zero", baseline="mean"):
    with torch.no_grad():
        centred = rewards - rewards.mean(dim=1, keepdim=True)
        std = rewards.std(dim=1, correction=std_ddof, keepdim=True) if rewards.shape[1] > 1 else None
        flat = (rewards == rewards[:, :1]).all(dim=1, keepdim=True)
        if std is None:
            adv = torch.zeros_like(rewards)
        else:
            adv = torch.where(flat, torch.zeros_like(rewards), centred / (torch.where(flat, 1.0, std) + eps))
        return {"advantages": adv, "keep": torch.ones(rewards.shape[0], dtype=rewards.dtype)}


def advantages_first_group_stats(rewards, scale="group", std_ddof=0, eps=0.0, degenerate="zero",
                                 baseline="mean"):
    """PipelineRL before PR #54: the mean reward and its standard deviation are computed from
    the first group's rollouts only and applied to every group."""
    with torch.no_grad():
        first = rewards[:1]
        std = first.std(dim=1, correction=std_ddof, keepdim=True) if rewards.shape[1] > 1 else None
        flat = (rewards == rewards[:, :1]).all(dim=1, keepdim=True)
        if std is None:
            adv = torch.zeros_like(rewards)
        else:
            adv = torch.where(flat, torch.zeros_like(rewards), (rewards - first.mean(dim=1, keepdim=True)) / (std + eps))
        return {"advantages": adv, "keep": torch.ones(rewards.shape[0], dtype=rewards.dtype)}


def advantages_one_pass_variance(rewards, scale="group", std_ddof=0, eps=0.0, degenerate="zero", baseline="mean"):
    """NeMo-RL calculate_baseline_and_std_per_prompt (PR #4161): the std as √(E[x²] − E[x]²), one
    pass: for an all-equal group whose rewards are not exact binary fractions the difference of
    the two rounded means is a residue of ~1e-16 relative, not 0, and near 1e6 every digit of the
    variance is lost."""
    with torch.no_grad():
        mean = rewards.mean(dim=1, keepdim=True)
        std = ((rewards ** 2).mean(dim=1, keepdim=True) - mean ** 2).clamp(min=0).sqrt()
        flat = std == 0
        adv = torch.where(flat, torch.zeros_like(rewards), (rewards - mean) / (torch.where(flat, 1.0, std) + eps))
        return {"advantages": adv, "keep": torch.ones(rewards.shape[0], dtype=rewards.dtype)}


def _surrogate(log_ratio, adv, lower, upper, dual, times_advantage=True):
    """min(ρA, clip(ρ)·A) (then max with c·A where A < 0), differentiable through the unclipped
    branch only where it is the one taken; a flat branch is built without a graph, so that an
    overflowing ρ never meets a zero cotangent."""
    with torch.no_grad():
        rho = torch.exp(log_ratio)
        zero = torch.zeros_like(rho)
        unclipped = torch.where(adv == 0, zero, rho * adv)
        clipped = torch.clamp(rho, lower, upper)
        clipped = torch.where(adv == 0, zero, clipped * adv) if times_advantage else clipped
        take = unclipped <= clipped
        value = torch.where(take, unclipped, clipped)
        live = take & (adv != 0)
        if dual is not None:
            on = (adv < 0) & (dual * adv > value)
            value = torch.where(on, dual * adv, value)
            live = live & ~on
    safe = torch.where(live, log_ratio, torch.zeros_like(log_ratio))
    return torch.where(live, torch.exp(safe) * adv, value)


def _band(eps_low, eps_high):
    return 1 - eps_low, 1 + (eps_low if eps_high is None else eps_high)


def clip(logp, old_logp, advantages, eps_low=0.2, eps_high=None, dual_clip=None, log_ratio_clamp=None):
    lower, upper = _band(eps_low, eps_high)
    log_ratio = logp - old_logp
    if log_ratio_clamp is not None:
        log_ratio = torch.clamp(log_ratio, -log_ratio_clamp, log_ratio_clamp)
    return _surrogate(log_ratio, advantages, lower, upper, dual_clip)


def clip_dual_ignored(logp, old_logp, advantages, eps_low=0.2, eps_high=None, dual_clip=None,
                      log_ratio_clamp=None):
    """RLinf issue #316: the dual-clip bound (clip_ratio_c) is accepted but never used by the
    policy loss."""
    return clip(logp, old_logp, advantages, eps_low, eps_high, None, log_ratio_clamp)


def clip_without_advantage(logp, old_logp, advantages, eps_low=0.2, eps_high=None, dual_clip=None,
                           log_ratio_clamp=None):
    """trax before PR #396: the clipped branch is clip(ρ) itself, not multiplied by the
    advantage: min(ρA, clip(ρ))."""
    lower, upper = _band(eps_low, eps_high)
    log_ratio = logp - old_logp
    if log_ratio_clamp is not None:
        log_ratio = torch.clamp(log_ratio, -log_ratio_clamp, log_ratio_clamp)
    return _surrogate(log_ratio, advantages, lower, upper, dual_clip, times_advantage=False)


def _aggregate(values, mask, mode, norm_length=None, mean_eps=0.0):
    m = mask.bool()
    v = torch.where(m, values, torch.zeros_like(values))
    lengths = m.sum(dim=1).to(values.dtype)
    if mode == "token-mean":
        return v.sum() / lengths.sum()
    rows = lengths > 0
    sums = v.sum(dim=1)
    if mode == "seq-mean-token-mean":
        return (sums / (torch.where(rows, lengths, torch.ones_like(lengths)) + mean_eps)).sum() / rows.sum()
    per_row = sums.sum() / rows.sum()
    if mode == "seq-mean-token-sum":
        return per_row
    return per_row / (values.shape[1] if norm_length is None else norm_length)


def aggregate(values, mask, mode="seq-mean-token-mean", norm_length=None, mean_eps=0.0):
    return _aggregate(values, mask, mode, norm_length, mean_eps)


def aggregate_batch_token_mean(values, mask, mode="seq-mean-token-mean", norm_length=None, mean_eps=0.0):
    """open-instruct issue #636 (grpo_vllm_thread_ray_gtrl.py): the loss is normalised by the
    tokens of the whole batch where GRPO averages over each sequence's tokens, then over the
    sequences."""
    return _aggregate(values, mask, "token-mean")


def _grpo_loss(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, beta, kl_sign):
    lower, upper = _band(eps_low, eps_high)
    objective = _surrogate(logp - old_logp, advantages[:, None].expand_as(logp), lower, upper, None)
    loss = -_aggregate(objective, mask, "seq-mean-token-mean")
    if beta:
        loss = loss + kl_sign * beta * _aggregate(_k3(ref_logp - logp), mask, "seq-mean-token-mean")
    return loss


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, selected=None, eps_low=0.2, eps_high=None, beta=0.04,
              norm_length=None, **conventions):
    """The paper's conventions only (PPO clip, k3, seq-mean-token-mean): the target declares no other."""
    return _grpo_loss(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, beta, 1.0)


def grpo_loss_kl_maximised(logp, old_logp, ref_logp, advantages, mask, selected=None, eps_low=0.2,
                           eps_high=None, beta=0.04, norm_length=None, **conventions):
    """verl before commit a65c915 (the version RAGEN issue #58 found in its fork): the KL loss
    enters the actor loss with the wrong sign, so the KL to the reference is maximised."""
    return _grpo_loss(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, beta, -1.0)
