"""Mutants of the GRPO family: ``grpo.advantages``, ``grpo.clip``, ``grpo.aggregate``,
``grpo.loss`` (DeepSeekMath §4.1.1–4.1.2; PPO eq. 7; DAPO §3.1–3.3; Dr. GRPO §3; dual clip,
Ye et al. 2020)."""
from __future__ import annotations

import warnings

import torch

from mutants import Pair, checked, export
from mutants.kl import estimate

# ----------------------------------------------------------------------------------- advantages

ADV = "grpo.advantages"
ADV_CONVENTIONS = {"scale": ["group", "batch", "none"], "std_ddof": [0, 1], "eps": "*",
                   "degenerate": ["zero", "drop", "raw"]}


def _std(x, ddof, dim=None):
    """Two-pass standard deviation; +inf where it is undefined (n ≤ ddof)."""
    n = x.numel() if dim is None else x.shape[dim]
    mean = x.mean() if dim is None else x.mean(dim=dim, keepdim=True)
    sq = ((x - mean) ** 2).sum() if dim is None else ((x - mean) ** 2).sum(dim=dim, keepdim=True)
    return torch.sqrt(sq / (n - ddof)) if n > ddof else torch.full_like(sq, float("inf"))


def advantages(rewards, scale, std_ddof, eps, degenerate, *, force_ddof=None, eps_inside_sqrt=False,
               no_degenerate_case=False, singleton_by_torch_std=False, batch_mean=False,
               degenerate_by_std=False, drop_keeps=False, none_scales=False, batch_uses_group_std=False,
               keep_graph=False):
    """(r − mean)/(std + eps) per group; every keyword after ``*`` switches one bug on."""
    x = rewards if keep_graph else rewards.detach()
    ddof = std_ddof if force_ddof is None else force_ddof
    n_groups, g = x.shape
    mean = x.mean() if batch_mean else x.mean(dim=1, keepdim=True)
    centred = x - mean
    if scale == "none" and not none_scales:
        degen = torch.zeros(n_groups, 1, dtype=torch.bool)
        divisor = torch.ones(())
    else:
        over_batch = scale == "batch" and not batch_uses_group_std
        if singleton_by_torch_std:
            with warnings.catch_warnings():   # torch warns that the correction exceeds n
                warnings.simplefilter("ignore")
                std = x.std(correction=ddof) if over_batch else x.std(dim=1, keepdim=True, correction=ddof)
        else:
            std = _std(x, ddof) if over_batch else _std(x, ddof, dim=1)
        if eps_inside_sqrt:
            divisor = torch.sqrt(std * std + eps)
        else:
            divisor = std + eps
        if degenerate_by_std:
            degen = (std == 0).expand(n_groups, 1) if over_batch else (std == 0)
        elif over_batch:
            degen = ((x == x.flatten()[0]).all() | (x.numel() == 1)).expand(n_groups, 1)
        else:
            degen = (x == x[:, :1]).all(dim=1, keepdim=True) | (g == 1)
        if singleton_by_torch_std:
            degen = degen & (g > 1)      # the singleton case is left to torch.std
        if no_degenerate_case:
            degen = torch.zeros_like(degen)
    adv = torch.where(degen, torch.zeros_like(x), centred / divisor)
    keep = torch.ones(n_groups, dtype=x.dtype)
    if degenerate == "drop" and not drop_keeps:
        keep = torch.where(degen[:, 0], torch.zeros_like(keep), keep)
    if degenerate == "raw" and g == 1:
        adv = x.clone() if scale == "none" else x / (1 + eps)
    return {"advantages": adv, "keep": keep}


def _adv(kw, **bug):
    return advantages(kw["rewards"], kw.get("scale", "group"), kw.get("std_ddof", 0), kw.get("eps", 0.0),
                      kw.get("degenerate", "zero"), **bug)


@checked(ADV)
def adv_twin(**kw):
    """Group-relative advantages as DeepSeekMath §4.1.2 writes them, with the declared
    conventions (TRL scale_rewards='batch', Dr. GRPO scale='none', DAPO drop, verl raw)."""
    return _adv(kw)


@checked(ADV)
def adv_sample_std(**kw):
    """Undeclared sample std: Bessel's correction (torch.std's default) whatever was declared.

    Seen: pytorch/pytorch issue #29372 (torch.std defaults to the unbiased estimate);
    NVIDIA/TorchFort issue #38 (which std the advantage normalisation takes); the article's
    GRPO example needs the population std ((0,1,1,0) → std 0.5)."""
    return _adv(kw, force_ddof=1)


@checked(ADV)
def adv_eps_inside_sqrt(**kw):
    """eps inside vs outside the sqrt: √(var + eps) where std + eps was declared.

    Seen: keras-team/keras PR #8726 ("add epsilon to the denominator, not to var"),
    pjreddie/darknet PR #17 and taokong/group_normalization issue #1 (the other way round);
    TRL and verl add eps to the std (the trl-1.16 and verl-0.9.1 vector groups)."""
    return _adv(kw, eps_inside_sqrt=True)


@checked(ADV)
def adv_nan_on_zero_std(**kw):
    """NaN on zero-std groups: (r − mean)/(std + eps) formed as 0/0 when every reward is equal.

    Seen: NVIDIA-NeMo/RL PR #1423 (std guards with nan_to_num) and PR #4161; huggingface/trl
    PR #7068 (zero-variance groups); the article: such groups produce zero advantages."""
    return _adv(kw, no_degenerate_case=True)


@checked(ADV)
def adv_nan_on_singleton(**kw):
    """NaN on singleton groups: torch.std(correction=1) of one reward is NaN.

    Seen: StarsfieldAI/R1-V issue #69 (NaN advantages with num_generations=1);
    radixark/miles_diffusion PR #253; pytorch/pytorch issue #29372."""
    return _adv(kw, singleton_by_torch_std=True)


@checked(ADV)
def adv_batch_mean(**kw):
    """Batch vs group mean: the baseline is the mean over the whole batch, not the group.

    Seen: XU-YIJIE/grpo-flat issue #2 (mean and std taken over dim=0, the batch, fixed in
    597c41); DeepSeekMath §4.1.2 normalises within each group."""
    return _adv(kw, batch_mean=True)


@checked(ADV)
def adv_degenerate_by_rounded_std(**kw):
    """Zero-std groups detected by a rounded std == 0: a rounding residue becomes the divisor.

    Seen: NVIDIA-NeMo/RL PR #4161 (an fp32 std residue of ~1.6e-4 for identical rewards
    amplified a singleton's advantage ~4000×); the ZeroStdRounding vectors (0.1 seven times)."""
    return _adv(kw, degenerate_by_std=True)


@checked(ADV)
def adv_drop_keeps_group(**kw):
    """degenerate='drop' declared but degenerate groups kept (keep = 1).

    Seen: DAPO §3.2 dynamic sampling drops groups whose accuracy is 0 or 1;
    huggingface/trl PR #6365 (zero-variance groups and the loss denominator)."""
    return _adv(kw, drop_keeps=True)


@checked(ADV)
def adv_none_still_scaled(**kw):
    """scale='none' declared (Dr. GRPO) but the advantages still divided by the group std.

    Seen: Dr. GRPO (Liu et al. 2025) §3 removes the std; thinking-machines-lab/tinker-cookbook
    issue #579 / PR #589 (mean-centring without std, documented after confusion)."""
    return _adv(kw, none_scales=True)


@checked(ADV)
def adv_batch_scale_uses_group_std(**kw):
    """scale='batch' declared but the group std used (TRL scale_rewards='batch' misread).

    Seen: huggingface/trl PR #7068 review ("Mask uses batch std not group": group and batch
    statistics confused under scale_rewards='batch')."""
    return _adv(kw, batch_uses_group_std=True)


@checked(ADV)
def adv_leaks_gradient(**kw):
    """Advantages left attached to the rewards' graph (no stop-gradient).

    Seen: databricks/compose-rl PR #53 (`advantages = advantages.detach()` before the policy
    loss); PPO eq. 7 treats Â as data. Values are exact: only the harness's gradient-leak
    probe (conformance.harness.DETACHED) can see it."""
    return _adv(kw, keep_graph=True)


# ----------------------------------------------------------------------------------- clip

CLIP = "grpo.clip"
CLIP_CONVENTIONS = {"dual_clip": [None, 3.0]}


def clip(logp, old_logp, advantages, eps_low, eps_high, dual_clip, *, pick=torch.minimum,
         attached_old=False, symmetric=False, dual_everywhere=False, inverted=False, log_ratio_clamp=None):
    """min(ρA, clip(ρ, 1−ε_low, 1+ε_high)·A) (and the dual clip); keywords after ``*`` are bugs."""
    hi = eps_low if (eps_high is None or symmetric) else eps_high
    old = old_logp.detach()
    if attached_old:
        old = logp + (old - logp).detach()     # same value, but on logp's graph
    log_ratio = old - logp if inverted else logp - old
    if log_ratio_clamp is not None:
        log_ratio = log_ratio.clamp(-log_ratio_clamp, log_ratio_clamp)
    rho = torch.exp(log_ratio)
    a = advantages.detach()
    c = pick(rho * a, rho.clamp(1 - eps_low, 1 + hi) * a)
    if dual_clip is not None:
        bounded = torch.maximum(c, dual_clip * a)
        c = bounded if dual_everywhere else torch.where(a < 0, bounded, c)
    return c


def _clip(kw, **bug):
    return clip(kw["logp"], kw["old_logp"], kw["advantages"], kw.get("eps_low", 0.2), kw.get("eps_high"),
                kw.get("dual_clip"), **bug)


@checked(CLIP)
def clip_twin(**kw):
    """PPO eq. 7 with DAPO's clip-higher and Ye et al.'s dual clip, as written."""
    return _clip(kw)


@checked(CLIP)
def clip_max_instead_of_min(**kw):
    """min/max swapped in the clipped objective (the optimistic bound).

    Seen: natolambert/rlhf-book PR #139 (which branch of min(ρA, clip(ρ)A) is active and
    passes the gradient); openai/spinningup PR #315 (a wrongly clipped PPO pattern)."""
    return _clip(kw, pick=torch.maximum)


@checked(CLIP)
def clip_gradient_through_old(**kw):
    """Gradient through the old log-probs: old_logp taken from the live graph, not detached.

    Seen: huggingface/trl PR #224 ("adds a missing detach to the ratio"), issues #2681/#2769
    (the `exp(logp − logp.detach())` trick: the detach is what keeps the gradient). With the
    old log-probs on the graph the ratio's gradient cancels: value right, gradient 0."""
    return _clip(kw, attached_old=True)


@checked(CLIP)
def clip_symmetric_not_higher(**kw):
    """Symmetric clip where clip-higher was declared: eps_high ignored.

    Seen: areal-project/AReaL PR #285 (decoupled clip: review of the path where eps_clip_lower
    is undefined and both bounds fall back to eps_clip); DAPO §3.1 (ε_high = 0.28)."""
    return _clip(kw, symmetric=True)


@checked(CLIP)
def clip_dual_on_positive_advantages(**kw):
    """Dual clip applied to positive advantages: max(C, c·A) for every A.

    Seen: thu-ml/tianshou issue #433 ("uses dual clipping ... only when the advantage is
    negative"); Ye et al. 2020 (arXiv 1912.09729) eq. 5."""
    return _clip(kw, dual_everywhere=True)


@checked(CLIP)
def clip_ratio_inverted(**kw):
    """Ratio inverted: ρ = π_old/π instead of π/π_old.

    Seen: tristandeleu/pytorch-maml-rl issue #24 (which policy the importance weight divides
    by); THUDM/slime PR #179 (importance ratio taken against the wrong log-probs)."""
    return _clip(kw, inverted=True)


@checked(CLIP)
def clip_undeclared_log_ratio_clamp(**kw):
    """Undeclared clamp of the log-ratio to [−10, 10] before the exponential.

    Seen: verl-project/verl PR #1779 ("negative_approx_kl value is now clamped to the range
    [−10, 10] before exponentiation"). Invisible until |log ρ| > 10."""
    return _clip(kw, log_ratio_clamp=10.0)


# ----------------------------------------------------------------------------------- aggregate

AGG = "grpo.aggregate"
MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
AGG_CONVENTIONS = {"mode": MODES}


def aggregate(values, mask, mode, norm_length, *, padded_denominator=False, ignore_mask=False,
              local_token_means=False, max_length_norm=False):
    """Masked reduction of [B,T] values; every keyword after ``*`` switches one bug on."""
    m = torch.ones_like(mask, dtype=torch.bool) if ignore_mask else mask != 0
    v = torch.where(m, values, torch.zeros_like(values))   # replaced, not multiplied: ±inf-safe
    lengths = m.sum(dim=1).to(values.dtype)
    if mode == "token-mean":
        if local_token_means and v.shape[0] > 1:
            # two micro-batches, each normalised by its own tokens, then averaged
            half = v.shape[0] // 2
            parts = [(v[:half], lengths[:half]), (v[half:], lengths[half:])]
            means = [p.sum() / n.sum() for p, n in parts if n.sum() > 0]
            return sum(means) / len(means)
        return v.sum() / (torch.tensor(float(m.numel()), dtype=values.dtype) if padded_denominator
                          else lengths.sum())
    sums = v.sum(dim=1)
    n_rows = (lengths > 0).sum().to(values.dtype)
    if mode == "seq-mean-token-mean":
        return (sums / torch.where(lengths > 0, lengths, torch.ones_like(lengths))).sum() / n_rows
    seq_sum = sums.sum() / n_rows
    if mode == "seq-mean-token-sum":
        return seq_sum
    norm = norm_length if norm_length is not None else (lengths.max() if max_length_norm else values.shape[1])
    return seq_sum / norm


def _agg(kw, **bug):
    return aggregate(kw["values"], kw["mask"], kw.get("mode", "seq-mean-token-mean"), kw.get("norm_length"),
                     **bug)


@checked(AGG)
def agg_twin(**kw):
    """DeepSeekMath eq. 3, DAPO §3.3 token mean, Dr. GRPO §3 constant normaliser; rows without
    tokens leave the sequence means (verl 0.9.1 agg_loss)."""
    return _agg(kw)


@checked(AGG)
def agg_padded_denominator(**kw):
    """Wrong denominator (padded length): token-mean divides by B·T, not by the real tokens.

    Seen: NovaSky-AI/SkyRL PR #462 ("the average token loss previously included padded
    tokens"); Tencent-Hunyuan/UniRL PR #409 (reduction denominators)."""
    return _agg(kw, padded_denominator=True)


@checked(AGG)
def agg_ignores_mask(**kw):
    """Aggregation ignoring the mask: padded positions enter the mean (values and count).

    Seen: NovaSky-AI/SkyRL PR #462; Tencent-Hunyuan/UniRL PR #409 ("masked text tokens do not
    contribute to policy loss values, gradients, or reduction denominators")."""
    return _agg(kw, ignore_mask=True)


@checked(AGG)
def agg_local_token_denominator(**kw):
    """Wrong denominator (local vs global tokens): each micro-batch normalised by its own
    token count, the micro-batch means then averaged.

    Seen: huggingface/trl PR #3231 (loss normalisation not invariant to how samples split
    across devices / accumulation steps); allenai/open-instruct PR #1161 ("divides the loss by
    the total number of valid tokens in the batch, rather than just in the current
    minibatch"); meta-pytorch/torchtune PR #1875."""
    return _agg(kw, local_token_means=True)


@checked(AGG)
def agg_max_length_norm(**kw):
    """Wrong denominator (max length vs padded length): seq-mean-token-sum-norm divides by the
    longest response instead of the padded length T (or the declared norm_length).

    Seen: huggingface/trl PR #3138 / PR #3256 (Dr. GRPO's constant: max_completion_length vs
    per_token_loss.size(1)); NovaSky-AI/SkyRL PR #133 (max_seq_len for
    seq_mean_token_sum_norm)."""
    return _agg(kw, max_length_norm=True)


# ----------------------------------------------------------------------------------- loss

LOSS = "grpo.loss"
LOSS_CONVENTIONS = {"dual_clip": [None, 3.0], "kl_kind": ["k1", "k2", "k3"], "kl_clamp": "*",
                    "kl_ratio_weight": [True, False], "aggregation": MODES}


def cispo(logp, old, adv, kw, *, weight_attached=False):
    """CISPO's C_t = sg(ŵ)·A·log π (MiniMax-M1 §3.1 eq. 4–5), ŵ = ρ clipped to [1 − ε_low, 1 + ε_high]
    ('both'), to at most 1 + ε_high ('upper') or ε_high itself ('raw-upper', TRL)."""
    lo = kw.get("eps_low", 0.2)
    hi = lo if kw.get("eps_high") is None else kw["eps_high"]
    band = kw.get("cispo_clip", "upper")
    w = torch.clamp(torch.exp(logp - old), min=1 - lo if band == "both" else None,
                    max=hi if band == "raw-upper" else 1 + hi)
    return (w if weight_attached else w.detach()) * adv * logp


def loss(kw, *, ref_attached=False, kl_over_padding=False, weight_detached=False, aggregation=None,
         clamp_ignored=False, cispo_weight_attached=False, is_weight_ignored=False):
    """−aggregate(C_t) + β·aggregate(w_t·KL_t); every keyword after ``*`` switches one bug on."""
    logp, mask = kw["logp"], kw["mask"]
    m = mask != 0
    beta = kw.get("beta", 0.04)
    mode = aggregation or kw.get("aggregation", "seq-mean-token-mean")
    zero = torch.zeros_like(logp)
    old = torch.where(m, kw["old_logp"].detach(), logp.detach())   # masked: a neutral ratio of 1
    adv = kw["advantages"].detach()[:, None].expand_as(logp)
    if kw.get("policy_loss", "ppo-clip") == "cispo":
        c = cispo(logp, old, adv, kw, weight_attached=cispo_weight_attached)
    else:
        c = clip(logp, old, adv, kw.get("eps_low", 0.2), kw.get("eps_high"), kw.get("dual_clip"))
    if kw.get("is_weight") is not None and not is_weight_ignored:   # the rollout correction: policy term only
        c = c * kw["is_weight"].detach()
    per_token = torch.where(m, -c, zero)
    if beta != 0:   # β = 0 drops the term (no 0·inf from an unused overflowing estimate)
        ref = kw["ref_logp"].detach()
        if ref_attached:
            ref = logp + (ref - logp).detach()
        ref = torch.where(m, ref, logp.detach()) if not kl_over_padding else ref
        penalty = estimate(logp, ref, kw.get("kl_kind", "k3"),
                           None if clamp_ignored else kw.get("kl_clamp"), ref_on_graph=ref_attached)
        if kw.get("kl_ratio_weight", False):
            w = torch.exp(torch.where(m, logp - old, zero))
            penalty = (w.detach() if weight_detached else w) * penalty
        if kl_over_padding:
            return aggregate(per_token, mask, mode, kw.get("norm_length")) + beta * penalty.mean()
        per_token = per_token + beta * torch.where(m, penalty, zero)
    return aggregate(per_token, mask, mode, kw.get("norm_length"))


@checked(LOSS)
def loss_twin(**kw):
    """DeepSeekMath eq. 3–4 with the declared KL estimator, clamp, TRL's ratio weight and
    aggregation."""
    return loss(kw)


@checked(LOSS)
def loss_gradient_through_reference(**kw):
    """Gradient through the reference log-probs: ref_logp taken from the live graph.

    Seen: huggingface/trl PR #7068 (the KL gradient flows because "per_token_logps retains
    gradients while ref_per_token_logps is detached" — with the reference on the graph, as
    when a PEFT adapter is disabled without no_grad, the KL term's gradient cancels)."""
    return loss(kw, ref_attached=True)


@checked(LOSS)
def loss_kl_over_padding(**kw):
    """KL penalty averaged over every position, padding included (mask ignored for the KL).

    Seen: huggingface/trl issue #2995 (policy term and KL term normalised differently);
    NovaSky-AI/SkyRL PR #462 (padded tokens in the mean)."""
    return loss(kw, kl_over_padding=True)


@checked(LOSS)
def loss_ratio_weight_detached(**kw):
    """TRL's KL ratio weight w_t = ρ_t detached where it was declared differentiable.

    Seen: huggingface/trl use_bias_correction_kl (TRL 1.16 multiplies the k3 term by the
    attached coef_1); allenai/open-instruct issue #534 (kl4: "why did you multiply
    ref_logprobs_diff by ratio?")."""
    return loss(kw, weight_detached=True)


@checked(LOSS)
def loss_token_mean_not_seq_mean(**kw):
    """Aggregation ignored: token-mean computed where seq-mean-token-mean was declared.

    Seen: huggingface/trl PR #2881 (GRPO switched from per-sequence to global token
    normalisation) and issue #2995 (the loss no longer matches the GRPO formula)."""
    return loss(kw, aggregation="token-mean")


@checked(LOSS)
def loss_declared_kl_clamp_ignored(**kw):
    """A declared KL clamp (verl/OpenRLHF: 10) not applied.

    Seen: verl-project/verl issue #2928 and PR #1779 (where the kld clamp sits); an adapter
    that declares verl's conventions must reproduce the clamp."""
    return loss(kw, clamp_ignored=True)


@checked(LOSS)
def loss_cispo_weight_attached(**kw):
    """CISPO's clipped IS weight left on the graph: the gradient gains ŵ·A·log π inside the band.

    Seen: verl-project/verl PR #4105 ("Missing gradient detachment on IS weights ... gradients
    incorrectly flowed through w(θ) = π_θ/π_rollout"); NVIDIA-NeMo/RL PR #2531 (the review checks
    the ".detach() on the clipped weight" against the paper's sg(·)). The value is unchanged:
    only the gradient vectors see it."""
    return loss(kw, cispo_weight_attached=True)


@checked(LOSS)
def loss_is_weight_ignored(**kw):
    """The rollout correction's importance-sampling weight taken but never multiplied into the loss.

    Seen: rlcode/per issue #3 (prioritized replay: the IS weights are computed and returned with the
    batch, "however, the weights aren't used further in the code"); TRL 1.16.0 (trainer/grpo_trainer.py
    _compute_loss, ``per_token_loss * inputs["importance_sampling_ratio"]``) and verl 0.9.1
    (``pg_losses * rollout_is_weights``) multiply it into each token's policy term."""
    return loss(kw, is_weight_ignored=True)


PAIRS = [
    Pair("ADV_SAMPLE_STD", ADV, adv_sample_std, adv_twin, ADV_CONVENTIONS),
    Pair("ADV_EPS_INSIDE_SQRT", ADV, adv_eps_inside_sqrt, adv_twin, ADV_CONVENTIONS),
    Pair("ADV_NAN_ON_ZERO_STD", ADV, adv_nan_on_zero_std, adv_twin, ADV_CONVENTIONS),
    Pair("ADV_NAN_ON_SINGLETON", ADV, adv_nan_on_singleton, adv_twin, ADV_CONVENTIONS),
    Pair("ADV_BATCH_MEAN", ADV, adv_batch_mean, adv_twin, ADV_CONVENTIONS),
    Pair("ADV_DEGENERATE_BY_ROUNDED_STD", ADV, adv_degenerate_by_rounded_std, adv_twin, ADV_CONVENTIONS),
    Pair("ADV_DROP_KEEPS_GROUP", ADV, adv_drop_keeps_group, adv_twin, ADV_CONVENTIONS),
    Pair("ADV_NONE_STILL_SCALED", ADV, adv_none_still_scaled, adv_twin, ADV_CONVENTIONS),
    Pair("ADV_BATCH_SCALE_GROUP_STD", ADV, adv_batch_scale_uses_group_std, adv_twin, ADV_CONVENTIONS),
    Pair("ADV_LEAKS_GRADIENT", ADV, adv_leaks_gradient, adv_twin, ADV_CONVENTIONS),
    Pair("CLIP_MAX_INSTEAD_OF_MIN", CLIP, clip_max_instead_of_min, clip_twin, CLIP_CONVENTIONS),
    Pair("CLIP_GRADIENT_THROUGH_OLD", CLIP, clip_gradient_through_old, clip_twin, CLIP_CONVENTIONS),
    Pair("CLIP_SYMMETRIC_NOT_HIGHER", CLIP, clip_symmetric_not_higher, clip_twin, CLIP_CONVENTIONS),
    Pair("CLIP_DUAL_ON_POSITIVE_ADV", CLIP, clip_dual_on_positive_advantages, clip_twin, CLIP_CONVENTIONS),
    Pair("CLIP_RATIO_INVERTED", CLIP, clip_ratio_inverted, clip_twin, CLIP_CONVENTIONS),
    Pair("CLIP_UNDECLARED_LOG_RATIO_CLAMP", CLIP, clip_undeclared_log_ratio_clamp, clip_twin, CLIP_CONVENTIONS),
    Pair("AGG_PADDED_DENOMINATOR", AGG, agg_padded_denominator, agg_twin, AGG_CONVENTIONS),
    Pair("AGG_IGNORES_MASK", AGG, agg_ignores_mask, agg_twin, AGG_CONVENTIONS),
    Pair("AGG_LOCAL_TOKEN_DENOMINATOR", AGG, agg_local_token_denominator, agg_twin, AGG_CONVENTIONS),
    Pair("AGG_MAX_LENGTH_NORM", AGG, agg_max_length_norm, agg_twin, AGG_CONVENTIONS),
    Pair("LOSS_GRADIENT_THROUGH_REFERENCE", LOSS, loss_gradient_through_reference, loss_twin, LOSS_CONVENTIONS),
    Pair("LOSS_KL_OVER_PADDING", LOSS, loss_kl_over_padding, loss_twin, LOSS_CONVENTIONS),
    Pair("LOSS_RATIO_WEIGHT_DETACHED", LOSS, loss_ratio_weight_detached, loss_twin, LOSS_CONVENTIONS),
    Pair("LOSS_TOKEN_MEAN_NOT_SEQ_MEAN", LOSS, loss_token_mean_not_seq_mean, loss_twin, LOSS_CONVENTIONS),
    Pair("LOSS_DECLARED_KL_CLAMP_IGNORED", LOSS, loss_declared_kl_clamp_ignored, loss_twin, LOSS_CONVENTIONS),
    Pair("LOSS_IS_WEIGHT_IGNORED", LOSS, loss_is_weight_ignored, loss_twin, LOSS_CONVENTIONS),
    Pair("LOSS_CISPO_WEIGHT_ATTACHED", LOSS, loss_cispo_weight_attached, loss_twin,
         {**LOSS_CONVENTIONS, "policy_loss": ["cispo"], "cispo_clip": ["upper", "both", "raw-upper"]}),
]
export(globals(), PAIRS)
