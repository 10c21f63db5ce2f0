"""``--target openrlhf``: OpenRLHF 0.11.2 on CPU.

Calls OpenRLHF's own code: ``models/loss.py`` (``PolicyLoss``, ``DPOLoss``, ``aggregate_loss``),
``models/utils.py`` (``compute_approx_kl``), ``utils/loss_utils.py`` (``get_loss_batch_info``)
and ``trainer/ppo_utils/experience_maker.py`` (``RemoteExperienceMaker.compute_advantages_and_returns``
driven without a model or Ray: the group-norm advantages). ``grpo.loss`` joins the pieces as the
actor does (``trainer/ray/ppo_actor.py`` training step: ``loss = actor_loss + kl_loss * kl_ctl``), and
``ppo.entropy_bonus`` is its entropy term (``loss -= aggregate_loss(entropy, ...) * entropy_coef``, a
token mean).

``lm.token_logprobs`` is ``models/utils.py log_probs_from_logits``, ``lm.entropy`` the body of its
``compute_entropy`` (a ``@torch.compile`` function), ``lm.cross_entropy`` the SFT trainer's ``SFTLoss`` on
those log-probabilities, ``ppo.value_loss`` ``ValueLoss`` and ``reward.pairwise`` ``PairWiseLoss`` /
``LogExpLoss``. The variant ``lm.cross_entropy[gpt-lm-loss]`` (reported as ``openrlhf[gpt-lm-loss]``) is
``models/loss.py GPTLMLoss``, exported next to ``SFTLoss`` though no trainer calls it: plain
``nn.CrossEntropyLoss(ignore_index=-100)`` on the logits shifted inside, in their own dtype (``native`` in
bfloat16/float16).

OpenRLHF's modules import DeepSpeed, vLLM, flash-attn and Ray at import time (GPU-only or cluster
packages). They are loaded with the package ``__init__`` files skipped and those packages replaced
by placeholders while importing (never called by the loss code). Install:
``pip install --no-deps openrlhf==0.11.2`` next to ``transformers`` (``pip install trl==1.16.0``
brings it), or ``scripts/install-peers.sh``.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from lossproof.conformance.numbers import decode_exact
from lossproof.conformance.targets.imports import import_bare
from lossproof.conformance.targets.peers._common import Arithmetic as A
from lossproof.conformance.targets.peers._common import Convention as C
from lossproof.conformance.targets.peers._common import (
    Finding,
    arguments,
    as_array,
    build,
    decoded,
    deviation_shows,
    equal_group_mean_inexact,
    has_empty_row,
    has_neg_inf_logits,
    load_or_explain,
    log_ratio_clamp_changes,
    loss_mask_labels,
    per_element,
    require,
    where,
)
from lossproof.refimpl.arrays import grpo as exact_grpo
from lossproof.refimpl.arrays import kl as exact_kl

VERSION = "0.11.2"
INSTALL = "pip install --no-deps openrlhf==0.11.2 transformers"
LOSS = "openrlhf/models/loss.py"
UTILS = "openrlhf/models/utils.py"
MAKER = "openrlhf/trainer/ppo_utils/experience_maker.py"
ACTOR = "openrlhf/trainer/ray/ppo_actor.py"
CLI = "openrlhf/cli/train_ppo_ray.py"

CONVENTIONS = [
    C("grpo.advantages", "scale", ("group", "none"), f"{MAKER} compute_advantages_and_returns (estimator "
      "'group_norm' → 'group'; 'dr_grpo' → 'none': r − group mean)"),
    C("grpo.advantages", "std_ddof", (1, 0), f"{MAKER} compute_advantages_and_returns (rewards.std(-1): ddof 1; "
      "'dr_grpo' does not divide)"),
    C("grpo.advantages", "eps", (1e-9, 0.0), f"{MAKER} compute_advantages_and_returns ((std + 1e-9))"),
    C("grpo.advantages", "degenerate", ("zero",), f"{MAKER} (all-equal group: 0/(0 + 1e-9)); {CLI} requires "
      "n_samples_per_prompt > 1"),
    C("grpo.advantages", "baseline", ("mean", "leave-one-out", "none"), f"{MAKER} compute_advantages_and_returns "
      "(estimator 'rloo': r − (Σ − r)/(n − 1); 'reinforce_baseline': r − group mean, then whitened over the batch's "
      "tokens; 'reinforce': whitened only)"),
    C("grpo.clip", "dual_clip", (None, 3.0), f"{LOSS} PolicyLoss(dual_clip=None; --actor.dual_clip in {CLI}); "
      "log ρ clamped to ±20 before exp"),
    # always on; None keeps the cases without it running, where openrlhf-log-ratio-clamp shows
    C("grpo.clip", "log_ratio_clamp", (20.0, None), f"{LOSS} PolicyLoss.forward (policy_loss_type 'ppo': "
      "raw_policy_log_ratio.clamp(-20, 20) before exp)"),
    C("grpo.aggregate", "mode", ("token-mean", "seq-mean-token-mean"),
      f"{LOSS} aggregate_loss (token_level_loss=True; False: per-sequence means, each row divided by "
      f"(|o_i| + 1e-8), fully masked rows excluded; --actor.loss_agg_mode in {CLI})"),
    C("grpo.aggregate", "mean_eps", (1e-8, 0.0), f"{LOSS} aggregate_loss (token_level_loss=False: (loss * "
      "loss_mask).sum(dim=-1) / (token_counts + 1e-8); the token mode has no per-row count, so any ε holds there)"),
    C("ppo.entropy_bonus", "aggregation", ("token-mean",), f"{ACTOR} (entropy_loss = aggregate_loss(entropy, "
      "action_mask, **loss_batch_info): token_level_loss left at True whatever loss_agg_mode is)"),
    C("grpo.loss", "dual_clip", (None, 3.0), f"{LOSS} PolicyLoss(dual_clip)"),
    C("grpo.loss", "log_ratio_clamp", (20.0, None), f"{LOSS} PolicyLoss.forward (policy_loss_type 'ppo': "
      "raw_policy_log_ratio.clamp(min=-20.0, max=20.0) before exp; 'gspo' forms its sequence ratio without it)"),
    C("grpo.loss", "kl_aggregation", ("token-mean",), f"{ACTOR} (kl_loss = aggregate_loss(kl, "
      "experience.action_mask, **loss_batch_info): token mode whatever --actor.loss_agg_mode is; under a token-mean "
      "policy term ALTERNATIVES also admit None, the same computation)"),
    C("grpo.loss", "mean_eps", (1e-8, 0.0), f"{LOSS} aggregate_loss (token_level_loss=False: / (token_counts + "
      "1e-8); 0 is the same where both terms are token means)"),
    C("grpo.loss", "kl_kind", ("k1", "k2", "k3"), f"{UTILS} compute_approx_kl (--algo.kl.estimator, default "
      f"'k1' in {CLI})"),
    C("grpo.loss", "kl_clamp", (10.0,), f"{UTILS} compute_approx_kl (value.clamp(min=-10, max=10), every estimator)"),
    C("grpo.loss", "kl_ratio_weight", (False,), f"{ACTOR} (kl_loss = aggregate_loss(kl, action_mask))"),
    C("grpo.loss", "ratio_level", ("token", "sequence"), f"{LOSS} PolicyLoss(policy_loss_type='gspo'): ratio = "
      "exp(Σ_t Δ·m / max(Σ m, 1)), no clamp (--actor.policy_loss_type, default 'ppo')"),
    C("grpo.loss", "aggregation", ("token-mean", "seq-mean-token-mean"),
      f"{ACTOR} (PolicyLoss token_level_loss = loss_agg_mode == 'token-mean'; the KL term is always a token "
      "mean: aggregate_loss(kl, ...) without token_level_loss)"),
    C("gae.advantages", "whiten", ("centred", "none"), f"{MAKER} compute_advantages_and_returns (estimator 'gae': "
      "whitened over the action tokens; get_advantages_and_returns alone: 'none')"),
    C("gae.advantages", "std_ddof", (0,), f"{MAKER} compute_advantages_and_returns (var = mean of squares: biased)"),
    C("gae.advantages", "masked_tokens", ("zero",), f"{MAKER} get_advantages_and_returns (values = action_mask * "
      "values; rewards = action_mask * rewards)"),
    C("gae.kl_rewards", "kind", ("k1", "k2", "k3"), f"{UTILS} compute_approx_kl (--algo.kl.estimator, default 'k1') "
      "in compute_reward"),
    C("gae.kl_rewards", "clamp", (10.0,), f"{UTILS} compute_approx_kl (value.clamp(min=-10, max=10))"),
    C("kl.estimator", "kind", ("k1", "k2", "k3"), f"{UTILS} compute_approx_kl (kl_estimator, default 'k1')"),
    C("kl.estimator", "clamp", (10.0,), f"{UTILS} compute_approx_kl (value.clamp(min=-10, max=10))"),
    C("dpo.loss", "nll_aggregation", (None, "seq-mean-token-mean"), "openrlhf/trainer/dpo_trainer.py "
      "(--model.nll_loss_coef, default 0: nll_loss = −mean over pairs of the chosen token-mean log-probabilities)"),
    C("dpo.loss", "loss_type", ("sigmoid", "cdpo", "ipo"), f"{LOSS} DPOLoss (ipo=False: sigmoid, with "
      "label_smoothing ε the cDPO form; ipo=True: IPO eq. 17, label_smoothing ignored)"),
]
# group_norm divides by (std + 1e-9) with ddof 1; dr_grpo does neither.
# PolicyLoss is_correction_*: at the token level the gate and the weight are the token's own ratio
# ('ratio' = 'token-ratio'; the sequence statistic is not used); at the sequence level only the mask
# mode exists, gated on the geometric mean, each kept token weighted by its own ratio.
# rloo subtracts the leave-one-out mean only; reinforce / reinforce_baseline whiten over every action token
# with the biased variance (equal to the whitening of the B·G outcome rewards, one token each).
# The actor loss: PolicyLoss ('ppo': log ρ clamped to ±20; 'gspo': a sequence ratio, per-sequence token
# means) plus the KL loss, always a token mean. aggregate_loss's + 1e-8 is in the per-row token means only.
_OPENRLHF_KL = {"dual_clip": [None, 3.0], "kl_kind": ["k1", "k2", "k3"], "kl_clamp": 10.0, "kl_ratio_weight": False,
                "policy_loss": "ppo-clip"}
ALTERNATIVES = {"grpo.advantages": [{"scale": "group", "std_ddof": 1, "eps": 1e-9, "degenerate": "zero"},
                                    {"scale": "none", "std_ddof": 0, "eps": 0.0, "degenerate": "zero"},
                                    {"scale": "none", "std_ddof": 0, "eps": 0.0, "degenerate": "zero",
                                     "baseline": "leave-one-out"},
                                    {"scale": "whiten", "std_ddof": 0, "eps": 0.0, "degenerate": "zero",
                                     "baseline": ["mean", "none"]}],
                "grpo.aggregate": [{"mode": "seq-mean-token-mean", "mean_eps": 1e-8},
                                   {"mode": "token-mean", "mean_eps": [0.0, 1e-8]}],
                # ppo_actor reduces the entropy with aggregate_loss(**loss_batch_info): token_level_loss is
                # left at its default True, a token mean whatever loss_agg_mode is (as the KL loss)
                "ppo.entropy_bonus": [{"aggregation": "token-mean", "mean_eps": [0.0, 1e-8]}],
                "grpo.loss": [{**_OPENRLHF_KL, "ratio_level": "token", "log_ratio_clamp": 20.0,
                               "aggregation": "token-mean", "kl_aggregation": [None, "token-mean"],
                               "mean_eps": [0.0, 1e-8]},
                              {**_OPENRLHF_KL, "ratio_level": "token", "log_ratio_clamp": 20.0,
                               "aggregation": "seq-mean-token-mean", "kl_aggregation": "token-mean", "mean_eps": 1e-8},
                              {**_OPENRLHF_KL, "ratio_level": "sequence", "log_ratio_clamp": None,
                               "aggregation": "seq-mean-token-mean", "kl_aggregation": "token-mean", "mean_eps": 1e-8}],
                "grpo.rollout_correction": [
                    {"level": "token", "correction": ["mask", "truncate"], "seq_log_ratio": ["sum", "mean"],
                     "kept_weight": ["ratio", "token-ratio"], "log_ratio_clamp": None},
                    {"level": "sequence", "correction": "mask", "seq_log_ratio": "mean", "kept_weight": "token-ratio",
                     "log_ratio_clamp": None}]}
CORRECTION = [
    C("grpo.rollout_correction", "level", ("token", "sequence"), f"{LOSS} PolicyLoss(is_correction_level: 'token' "
      f"/ 'seq'; default 'off', --algo.advantage.is_correction_level in {CLI})"),
    C("grpo.rollout_correction", "correction", ("mask", "truncate"), f"{LOSS} PolicyLoss(is_correction_mode: "
      "'mask' (default) / 'clip', the latter token level only)"),
    C("grpo.rollout_correction", "seq_log_ratio", ("mean",), f"{LOSS} PolicyLoss.forward (gating 'ratio': "
      "exp(masked_mean(log ratio)) per sequence)"),
    C("grpo.rollout_correction", "kept_weight", ("token-ratio",), f"{LOSS} PolicyLoss.forward (mask mode: "
      "coef = where(keep, token_is, 0), the token's own exp(old − rollout))"),
    C("grpo.rollout_correction", "log_ratio_clamp", (None,), f"{LOSS} PolicyLoss.forward (is_log_ratio.exp(), "
      "no clamp)"),
]
PARAM_DEFAULTS = [
    C("grpo.loss", "beta", (0.01,), f"{CLI} --algo.kl.init_coef 0.01"),
]

ARITHMETIC = [
    A("dpo.loss", "native", f"{LOSS}:347-358 (DPOLoss.forward: pi_logratios − ref_logratios and the loss in the "
      "log-probabilities' dtype: the margin is formed from rounded log-ratios)"),
    A("grpo.loss", "careful", f"{UTILS}:93 (compute_approx_kl casts to float32 before the KL, where the low dtype "
      f"would cancel); {LOSS}:185-188 (PolicyLoss rounds the log ratio, the ratio and the clipped terms to the "
      "dtype: the roundings of a term the careful model grants)"),
    A("grpo.clip", "careful", f"{LOSS}:185-188 (PolicyLoss, one token: the roundings of a term, no cancellation)"),
    A("kl.estimator", "careful", f"{UTILS}:93 (log_probs.float() − log_probs_base.float(): the KL in float32)"),
    A("grpo.advantages", "careful", f"{MAKER}:244 (rewards promoted to at least float32 before the group norm)"),
    A("grpo.aggregate", "careful", f"{LOSS}:11-39 (aggregate_loss: torch sums, which accumulate bfloat16/float16 "
      "in float32, and divisions by counts: the roundings of partial sums and weights the careful model grants)"),
]


def _kl_float32_shows(case, dtype: str, tolerance) -> bool:
    """Whether forming the KL term from float32 log-probabilities (compute_approx_kl's .float())
    moves a float64 case beyond its bound: the loss moves by β times the KL term's aggregate of the
    change of the estimates, the gradient by β times its weights times the change of their
    derivatives (refimpl/arrays in float32 and in float64). Where the policy term dominates the
    scale (ratios of e^±20 and beyond), float32 KL estimates stay inside the bound."""
    inputs, declared = decoded(case.test["inputs"]), arguments(case)
    if declared["beta"] == 0:
        return False
    mask = inputs["mask"]
    logp, ref = (np.where(mask != 0, inputs[n], 0.0) for n in ("logp", "ref_logp"))
    cotangent = decoded(case.test["cotangents"])["loss"]
    kind, clamp = declared["kl_kind"], declared["kl_clamp"]
    mode, norm = declared["kl_aggregation"] or declared["aggregation"], declared["norm_length"]
    weights = exact_grpo.aggregate_vjp(cotangent, logp, mask, mode, norm, declared["mean_eps"])["values"]

    def term(lp, rp):
        kl = np.asarray(exact_kl.estimator(lp, rp, kind, clamp), dtype=np.float64)
        grad = exact_kl.estimator_vjp(weights.astype(lp.dtype), lp, rp, kind, clamp)["logp"]
        return exact_grpo.aggregate(kl, mask, mode, norm, declared["mean_eps"]), np.asarray(grad, dtype=np.float64)

    (v64, g64), (v32, g32) = term(logp, ref), term(logp.astype(np.float32), ref.astype(np.float32))
    loss = np.asarray(decode_exact(case.test["expected"]["loss"]), dtype=np.float64)
    grad = np.asarray(decode_exact(case.test["grads"]["logp"]), dtype=np.float64)
    beta = declared["beta"]
    # kl_loss * kl_ctl multiplies a float32 tensor: β is rounded to float32 and the product too
    beta32 = np.float32(beta)
    kl32 = np.float64(beta32 * np.float32(v32))
    grad32 = np.asarray(beta32 * np.asarray(g32, dtype=np.float32), dtype=np.float64)
    return deviation_shows(tolerance, {"loss": loss, "grad:logp": grad},
                           {"loss": loss + kl32 - beta * v64, "grad:logp": grad + grad32 - beta * g64})


_LOG_RATIO_CLAMP = Finding(
    "openrlhf-log-ratio-clamp", "deviation",
    "PolicyLoss clamps log ρ to ±20 before exp (policy_loss_type 'ppo'), always: grpo.clip cases without "
    "log_ratio_clamp = 20 differ where |log ρ| > 20 and the clip does not make the term constant (the "
    "log-ratio-clamp-20 groups hold it)", f"{LOSS} PolicyLoss.forward: raw_policy_log_ratio.clamp(-20, 20)",
    where(objectives=("grpo.clip",), test=log_ratio_clamp_changes))
_KL_FLOAT32 = Finding(
    "openrlhf-kl-float32", "precision",
    "compute_approx_kl casts both log-probabilities to float32 (.float()) and returns float32: the KL of float64 "
    "inputs has float32 accuracy and dtype",
    f"{UTILS} compute_approx_kl: log_ratio = log_probs.float() - log_probs_base.float()",
    where(objectives=("kl.estimator",), dtypes=("float64",)), results=("valid", "acceptable"))
_KL_TERM_FLOAT32 = Finding(
    "openrlhf-kl-term-float32", "precision",
    "the KL term of the actor loss comes from compute_approx_kl in float32 (.float()): with β ≠ 0 a float64 loss "
    "has float32 accuracy", f"{UTILS} compute_approx_kl; {ACTOR} (loss = actor_loss + kl_loss * kl_ctl)",
    where(objectives=("grpo.loss",), dtypes=("float64",), shows=_kl_float32_shows))
_EMPTY_ROW_FLOAT16 = Finding(
    "openrlhf-empty-row-float16-nan", "bug",
    "aggregate_loss(token_level_loss=False) divides a fully masked row's sum 0 by (0 + 1e-8), and 1e-8 is 0 in "
    "float16: the row's mean is 0/0 = NaN, which multiplying by seq_mask = 0 does not remove, so the loss is NaN",
    f"{LOSS} aggregate_loss: seq_loss = (loss * loss_mask).sum(dim=-1) / (token_counts + 1e-8)",
    lambda c, dtype: dtype == "float16" and "seq-mean-token-mean" in (c.conventions.get("mode"),
                                                                        c.conventions.get("aggregation"))
    and has_empty_row(c), results=("valid", "acceptable"))
_ZERO_STD = Finding(
    "openrlhf-zero-std-rounding", "numerics",
    "an all-equal group whose floating-point mean is inexact gets (r − mean)/(std + 1e-9) with std of order "
    "one ulp: advantages of order 1 instead of 0", f"{MAKER}: (rewards - mean) / (rewards.std(-1) + 1e-9)",
    lambda c, dtype: c.objective == "grpo.advantages" and c.conventions.get("scale") == "group"
    and equal_group_mean_inexact(c, dtype))
_RLOO_SINGLETON = Finding(
    "openrlhf-rloo-singleton-nan", "bug",
    "estimator 'rloo' with one sample per prompt divides the leave-one-out sum by n − 1 = 0: the advantages are "
    "NaN (0/0) where the catalog gives 0 (--rollout.n_samples_per_prompt 1 is not refused for 'rloo')",
    f"{MAKER} compute_advantages_and_returns: baseline = (rewards.sum(-1, keepdim=True) - rewards) / "
    "(n_samples_per_prompt - 1)",
    where(objectives=("grpo.advantages",), conventions={"baseline": "leave-one-out"}, flags=("SingletonGroup",)))


def _whitening_as_openrlhf(case, dtype: str):
    """compute_advantages_and_returns' batch whitening as OpenRLHF rounds it: r − baseline in the rewards'
    dtype promoted to float32, placed on the last token in the KL tensor's dtype (compute_reward:
    r.to(kl.dtype); the stand-in's KL is zeros in the rewards' dtype, as zeros_like(action_log_probs) is
    under --algo.kl.use_loss), whitened with float32 statistics (biased variance, rsqrt(clamp(var, 1e-8)))."""
    import torch
    low = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16,
           "float16": torch.float16}[dtype]
    r = torch.tensor(as_array(case.test["inputs"]["rewards"]), dtype=low).to(torch.promote_types(low, torch.float32))
    g = r.shape[1]
    baseline = case.conventions.get("baseline")
    if baseline == "leave-one-out":
        c = r - (r.sum(-1, keepdim=True) - r) / (g - 1)
    elif baseline == "none":
        c = r
    else:
        c = r - r.mean(-1, keepdim=True)
    placed = c.to(low)
    x = placed.float()
    mean = x.mean()
    var = ((x - mean) ** 2).mean()
    # the 0-dimensional float32 statistics are applied to the advantages in their own dtype
    return ((placed - mean) * var.clamp(min=1e-8).rsqrt()).double().numpy()


def _whitening_rounding_shows(case, dtype, tolerance) -> bool:
    if as_array(case.test["inputs"]["rewards"]).shape[1] == 1 and case.conventions.get("baseline") != "none":
        return False
    want = np.asarray(case.test["expected"]["advantages"], dtype=np.float64)
    return deviation_shows(tolerance, {"advantages": want}, {"advantages": _whitening_as_openrlhf(case, dtype)})


_WHITEN_FLOAT32 = Finding(
    "openrlhf-whiten-float32", "precision",
    "the batch whitening casts the advantages to float32 (torch.cat(...).float()) before the mean and variance: "
    "float64 advantages are only float32-accurate; in bfloat16/float16 compute_reward first rounds r − baseline "
    "to the KL tensor's dtype (r.to(kl.dtype); the model's dtype when the KL is a loss), and the batch mean of "
    "those rounded values, 0 before rounding, is subtracted from every advantage",
    f"{MAKER} compute_advantages_and_returns: all_advantages = torch.cat([...]).float(); {UTILS} compute_reward: "
    "src=r.unsqueeze(1).to(kl.dtype)",
    where(objectives=("grpo.advantages",), dtypes=("float64", "bfloat16", "float16"), conventions={"scale": "whiten"},
          shows=_whitening_rounding_shows))
_WHITEN_FLOOR = Finding(
    "openrlhf-whiten-var-floor", "deviation",
    "the batch whitening scales by rsqrt(clamp(var, min=1e-8)): a batch whose variance is below 1e-8 (rewards "
    "differing by 2^−40) is scaled by 1e4 instead of 1/std, so its advantages are far below ±1",
    f"{MAKER} compute_advantages_and_returns: rstd = var.clamp(min=1e-8).rsqrt()",
    where(objectives=("grpo.advantages",), conventions={"scale": "whiten"}, flags=("TinyStd",)))
_REWARD_KL_FLOAT32 = Finding(
    "openrlhf-reward-kl-float32", "precision",
    "compute_approx_kl casts both log-probabilities to float32: the KL penalty in the float64 rewards has float32 "
    "accuracy", f"{UTILS} compute_approx_kl: log_ratio = log_probs.float() - log_probs_base.float()",
    where(objectives=("gae.kl_rewards",), dtypes=("float64",)))
_GAE_WHITEN_FLOAT32 = Finding(
    "openrlhf-gae-whiten-float32", "precision",
    "the batch whitening of the GAE advantages takes the mean and variance in float32 (torch.cat(...).float()): "
    "float64 advantages are only float32-accurate",
    f"{MAKER} compute_advantages_and_returns: all_advantages = torch.cat([...]).float()",
    where(objectives=("gae.advantages",), dtypes=("float64",), conventions={"whiten": "centred"},
          test=lambda c: "SingleToken" not in c.flags))
FINDINGS = [_LOG_RATIO_CLAMP, _KL_FLOAT32, _KL_TERM_FLOAT32, _EMPTY_ROW_FLOAT16, _ZERO_STD,
            _RLOO_SINGLETON, _WHITEN_FLOOR, _WHITEN_FLOAT32, _REWARD_KL_FLOAT32, _GAE_WHITEN_FLOAT32]

_PACKAGES = ("openrlhf", "openrlhf.models", "openrlhf.utils", "openrlhf.trainer", "openrlhf.trainer.ppo_utils",
             "openrlhf.trainer.ray")
# Imported at module level by the files below, never used by the loss code.
_ABSENT = ("deepspeed", "vllm", "flash_attn", "ray", "openrlhf.trainer.ray.launcher")


def _mod(name):
    return import_bare(f"openrlhf.{name}", _PACKAGES, _ABSENT)


def _batch_info(mask):
    # The actor's loss_batch_info (single process: no DP group, dp_size 1).
    return _mod("utils.loss_utils").get_loss_batch_info(SimpleNamespace(), mask)


def _estimator(scale, baseline):
    if baseline == "leave-one-out":
        return "rloo"
    if scale == "whiten":
        return "reinforce" if baseline == "none" else "reinforce_baseline"
    return "dr_grpo" if scale == "none" else "group_norm"


def advantages(rewards, scale="group", std_ddof=0, eps=0.0, degenerate="zero", baseline="mean"):
    import torch
    maker = _mod("trainer.ppo_utils.experience_maker")
    b, g = rewards.shape
    estimator = _estimator(scale, baseline)
    args = SimpleNamespace(
        rollout=SimpleNamespace(n_samples_per_prompt=g),
        algo=SimpleNamespace(advantage=SimpleNamespace(estimator=estimator, gamma=1.0, no_std_norm=False)),
        reward=SimpleNamespace(clip_range=None))
    fake = SimpleNamespace(strategy=SimpleNamespace(args=args), kl_ctl=SimpleNamespace(value=0.0),
                           advantage_estimator=estimator)
    fake.get_cumulative_returns = lambda *a: maker.RemoteExperienceMaker.get_cumulative_returns(fake, *a)
    # One experience per sample, one action token each: the outcome reward sits on that token.
    flat = rewards.reshape(b * g)
    experiences = [SimpleNamespace(rewards=flat[i:i + 1].clone(), index=[i], info={},
                                   kl=torch.zeros(1, 1, dtype=rewards.dtype),
                                   action_mask=torch.ones(1, 1, dtype=torch.bool)) for i in range(b * g)]
    maker.RemoteExperienceMaker.compute_advantages_and_returns(fake, experiences)
    adv = torch.cat([e.advantages[:, 0] for e in experiences]).reshape(b, g)
    return {"advantages": adv, "keep": torch.ones_like(rewards[:, 0])}


def clip(logp, old_logp, advantages, eps_low=0.2, eps_high=None, dual_clip=None, log_ratio_clamp=None):
    """``log_ratio_clamp``: OpenRLHF's fixed ±20 (declared), not a setting."""
    import torch
    loss_fn = _mod("models.loss").PolicyLoss(clip_eps_low=eps_low, clip_eps_high=eps_low if eps_high is None
                                             else eps_high, dual_clip=dual_clip)

    def one(lp, olp, a):
        mask = torch.ones_like(lp, dtype=torch.bool)
        return -loss_fn(lp, olp, a, action_mask=mask, **_batch_info(mask))[0]  # PolicyLoss returns −C

    return per_element(one, logp, old_logp, advantages)


def aggregate(values, mask, mode="seq-mean-token-mean", norm_length=None, mean_eps=0.0):
    return _mod("models.loss").aggregate_loss(values, mask, token_level_loss=mode == "token-mean",
                                              **_batch_info(mask))


def entropy_bonus(entropy, mask, coef=0.01, aggregation="token-mean", norm_length=None, mean_eps=0.0):
    """The entropy term of trainer/ray/ppo_actor.py (lines 346-353): ``entropy_loss = aggregate_loss(entropy,
    action_mask, **loss_batch_info)``, then ``loss -= entropy_loss * entropy_coef``; aggregate_loss is
    OpenRLHF's, called as there without token_level_loss (a token mean: ``aggregation`` is declared), the
    subtraction is that line's."""
    return -coef * _mod("models.loss").aggregate_loss(entropy, mask, **_batch_info(mask))


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, eps_low=0.2, eps_high=None, dual_clip=None, beta=0.04,
              kl_kind="k3", kl_clamp=None, kl_ratio_weight=False, aggregation="seq-mean-token-mean",
              norm_length=None, ratio_level="token", policy_loss="ppo-clip", log_ratio_clamp=None,
              kl_aggregation=None, mean_eps=0.0, cispo_clip="upper", sapo_tau_pos=1.0, sapo_tau_neg=1.05):
    """``log_ratio_clamp``, ``kl_aggregation`` and ``mean_eps`` are OpenRLHF's fixed behaviour (declared).
    OpenRLHF has no CISPO or SAPO: policy_loss stays undeclared (the paper's PPO clip), and the
    arguments only those read are accepted and unused."""
    import torch
    loss_mod, utils = _mod("models.loss"), _mod("models.utils")
    actor_loss_fn = loss_mod.PolicyLoss(clip_eps_low=eps_low, clip_eps_high=eps_low if eps_high is None else eps_high,
                                        dual_clip=dual_clip, token_level_loss=aggregation == "token-mean",
                                        policy_loss_type={"token": "ppo", "sequence": "gspo"}.get(ratio_level,
                                                                                                ratio_level))
    # experience_maker: every response token carries the outcome return (gamma = 1), 0 after the end.
    token_adv = advantages.unsqueeze(-1) * mask
    info = _batch_info(mask)
    actor_loss = actor_loss_fn(logp, old_logp, token_adv, action_mask=mask, **info)[0]
    # ppo_actor.py training step (algo.kl.use_loss): the KL loss, then loss = actor_loss + kl_loss * kl_ctl.
    if beta > 0:
        kl = utils.compute_approx_kl(logp, ref_logp, log_probs_old=old_logp, kl_estimator=kl_kind)
    else:
        kl = torch.zeros_like(logp)
    kl_loss = loss_mod.aggregate_loss(kl, mask, **info)
    return actor_loss + kl_loss * beta


def gae_advantages(rewards, values, mask, gamma=1.0, lam=1.0, whiten="none", std_ddof=0, masked_tokens="zero"):
    """get_advantages_and_returns (whiten 'none'), or compute_advantages_and_returns with estimator 'gae' (its
    batch whitening), driven with one experience per row: the token rewards enter as compute_reward's
    −kl_coef·kl with kl_coef = 1, kl = −rewards and a score of 0 on the last token. Outputs are masked."""
    import torch
    maker = _mod("trainer.ppo_utils.experience_maker").RemoteExperienceMaker
    on = mask != 0
    rewards, values = rewards.detach(), values.detach()
    if whiten == "none":
        adv, returns = maker.get_advantages_and_returns(None, values, rewards, on, gamma, lam)
    else:
        args = SimpleNamespace(
            rollout=SimpleNamespace(n_samples_per_prompt=1),
            algo=SimpleNamespace(advantage=SimpleNamespace(estimator="gae", gamma=gamma, lambd=lam, no_std_norm=False)),
            reward=SimpleNamespace(clip_range=None))
        fake = SimpleNamespace(strategy=SimpleNamespace(args=args), kl_ctl=SimpleNamespace(value=1.0),
                               advantage_estimator="gae")
        fake.get_advantages_and_returns = lambda *a: maker.get_advantages_and_returns(fake, *a)
        experiences = [SimpleNamespace(rewards=torch.zeros(1, dtype=rewards.dtype), index=[i], info={},
                                       kl=-rewards[i:i + 1].clone(), values=values[i:i + 1].clone(),
                                       action_mask=on[i:i + 1].clone()) for i in range(rewards.shape[0])]
        maker.compute_advantages_and_returns(fake, experiences)
        adv = torch.cat([e.advantages for e in experiences])
        returns = torch.cat([e.returns for e in experiences])
    return {"advantages": torch.where(on, adv, 0.0), "returns": torch.where(on, returns, 0.0)}


def gae_kl_rewards(scores, logp, ref_logp, mask, beta=None, kind="k1", clamp=None):
    """models/utils.py compute_reward(scores, β, compute_approx_kl(logp, ref_logp, kind), action_mask); the
    masked tokens (where OpenRLHF leaves −β·k, later zeroed by get_advantages_and_returns) are masked."""
    import torch
    utils = _mod("models.utils")
    on = mask != 0
    kl = utils.compute_approx_kl(logp.detach(), ref_logp.detach(), kl_estimator=kind)
    rewards = utils.compute_reward(scores.detach(), beta, kl, action_mask=on)
    return {"rewards": torch.where(on, rewards, 0.0)}


def kl_estimator(logp, ref_logp, kind="k3", clamp=None):
    return _mod("models.utils").compute_approx_kl(logp, ref_logp, kl_estimator=kind)


def _chosen_token_means(policy_chosen_logps, chosen_lengths):
    """DPOTrainer._get_batch_logps (trainer/dpo_trainer.py:360-382) on completions of n_i tokens
    after a one-token prompt, pair i's first token carrying its sequence log-probability and the
    others 0: the mean it returns is c_i/n_i, whose negative the trainer averages over the pairs
    as nll_loss (concatenated_forward: −all_logps_mean[:B].mean())."""
    import torch
    n = [int(v) for v in chosen_lengths.tolist()]
    b, width = len(n), max(n, default=1)
    mask = torch.zeros(b, width + 1, dtype=torch.long)
    for i, k in enumerate(n):
        mask[i, :k + 1] = 1
    per_token = torch.cat([policy_chosen_logps.reshape(b, 1),
                           torch.zeros(b, width - 1, dtype=policy_chosen_logps.dtype)], dim=1)
    trainer = _dpo_trainer_module().DPOTrainer
    return trainer._get_batch_logps(None, per_token, mask, [1] * b)[1]


def _dpo_trainer_module():
    """trainer/dpo_trainer.py imports DPOLoss from the package ``openrlhf.models``, whose
    ``__init__`` (skipped here) re-exports it from models/loss.py: the bare package gets that name."""
    import sys
    models = sys.modules.get("openrlhf.models")
    if models is None or not hasattr(models, "DPOLoss"):
        loss = _mod("models.loss")
        sys.modules["openrlhf.models"].DPOLoss = loss.DPOLoss
    return _mod("trainer.dpo_trainer")


def dpo_loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
             beta=0.1, loss_type="sigmoid", label_smoothing=0.0, rpo_alpha=0.0, nll_aggregation=None,
             chosen_lengths=None):
    """``rpo_alpha`` is --model.nll_loss_coef: the trainer adds nll_loss·coef to the mean DPO loss
    (trainer/dpo_trainer.py:172-180), each pair's share being coef times −c_i/n_i."""
    import torch
    if nll_aggregation not in (None, "seq-mean-token-mean"):
        raise NotImplementedError(f"OpenRLHF 0.11.2's NLL is the mean of per-sequence token means, not "
                                  f"{nll_aggregation!r}")
    loss_fn = _mod("models.loss").DPOLoss(beta, label_smoothing=label_smoothing, ipo=loss_type == "ipo")
    losses, chosen, rejected = [], [], []
    # DPOLoss returns the mean over pairs: one call per pair gives each pair's loss.
    for i in range(policy_chosen_logps.shape[0]):
        pick = slice(i, i + 1)
        loss, c, r = loss_fn(policy_chosen_logps[pick], policy_rejected_logps[pick],
                             reference_chosen_logps[pick], reference_rejected_logps[pick])
        losses.append(loss.reshape(1))
        chosen.append(c)
        rejected.append(r)
    cat = (lambda xs: torch.cat(xs) if xs else policy_chosen_logps[:0].clone())
    out = cat(losses)
    if rpo_alpha != 0.0 and nll_aggregation is not None:
        if chosen_lengths is None:
            raise ValueError("chosen_lengths: required for OpenRLHF's NLL (per-sequence token means)")
        out = out + (-_chosen_token_means(policy_chosen_logps, chosen_lengths)) * rpo_alpha
    return {"losses": out, "chosen_rewards": cat(chosen), "rejected_rewards": cat(rejected)}


def rollout_correction(old_logp, rollout_logp, mask, level="token", correction="truncate", lower=None, upper=2.0,
                       seq_log_ratio="sum", kept_weight="ratio", log_ratio_clamp=None):
    """PolicyLoss.forward computes the correction coefficient inline and multiplies the per-token PPO
    loss by it before aggregating; it is read back as a gradient. With log_probs = old_log_probs the
    ratio is exp(0) = 1 exactly, the advantage −1 makes the per-token loss −min(−1, −1) = 1 with
    derivative exactly 1 (the tie of the min splits it in halves), and the token-level aggregate with
    batch_num_tokens = 1 is Σ coef·loss·mask: ∂/∂log_probs_t = coef_t·mask_t (coef is detached)."""
    import torch
    if level == "sequence" and correction == "truncate":
        raise NotImplementedError("OpenRLHF clips the token ratio only (is_correction_mode='clip' needs level token)")
    loss_fn = _mod("models.loss").PolicyLoss(
        is_correction_level="token" if level == "token" else "seq",
        is_correction_mode="clip" if correction == "truncate" else "mask", is_correction_gating="ratio",
        # one value v means [0, v] (train_ppo_ray.py); no upper bound: +inf
        is_correction_threshold=(0.0 if lower is None else lower, float("inf") if upper is None else upper))
    old = old_logp.detach()
    log_probs = old.clone().requires_grad_(True)
    advantages = -torch.ones_like(old)
    loss = loss_fn(log_probs, old, advantages, action_mask=mask, rollout_log_probs=rollout_logp.detach(),
                   dp_size=1, batch_num_tokens=1.0)[0]
    (weights,) = torch.autograd.grad(loss, log_probs)
    return weights



# --- lm.*, ppo.value_loss, reward.pairwise ---------------------------------------------------------

SFT = "openrlhf/trainer/sft_trainer.py"
CRITIC = "openrlhf/trainer/ray/ppo_critic.py"
RM = "openrlhf/trainer/rm_trainer.py"

CONVENTIONS += [
    C("lm.cross_entropy", "reduction", ("mean",), f"{SFT} (loss_fn = SFTLoss(): {LOSS} aggregate_loss "
      "token_level_loss=True, −Σ log-probabilities of the loss-mask tokens / batch_num_tokens, the window's "
      "all-reduced token count from openrlhf/utils/loss_utils.py get_loss_batch_info; GPTLMLoss, "
      "nn.CrossEntropyLoss(ignore_index=-100) mean, is exported but no trainer uses it)"),
    C("lm.cross_entropy[gpt-lm-loss]", "reduction", ("mean",), f"{LOSS}:50 GPTLMLoss (self.loss = "
      "nn.CrossEntropyLoss(ignore_index=self.IGNORE_INDEX): the mean over the labels other than -100; no "
      "normalizer, no other reduction)"),
    C("ppo.value_loss", "clip_range_value", (0.5, 0.2, None), f"{LOSS} ValueLoss(clip_eps) (--critic.value_clip, "
      f"default 0.5 in {CLI}; None: the plain squared error): old_values + (values − old_values).clamp(±clip_eps)"),
    C("ppo.value_loss", "half", (True,), f"{LOSS} ValueLoss.forward (return 0.5 * loss)"),
    C("ppo.value_loss", "aggregation", ("token-mean",), f"{CRITIC} (critic_loss_fn = ValueLoss(value_clip): "
      "token_level_loss keeps its default True)"),
    C("reward.pairwise", "form", ("sigmoid", "log-exp"), f"{RM} (--model.loss_type 'sigmoid' (default): "
      f"PairWiseLoss, −logsigmoid(r_c − r_r − margin).mean(); otherwise LogExpLoss, log(1 + exp(r_r − r_c)).mean(), "
      f"margin ignored; {LOSS})"),
]

ARITHMETIC += [
    A("lm.token_logprobs", "native", f"{UTILS}:190-196 (log_probs_from_logits: bfloat16/float16 rows through "
      "F.log_softmax in their dtype, whose CPU kernel returns (z − max) − log Σ with the log-sum rounded to the dtype "
      "first: log q_y near 0 cancels); float32/float64: gather − logsumexp"),
    A("lm.entropy", "native", f"{UTILS}:216-219 (compute_entropy: logsumexp(z) − Σ softmax(z)·z in the logits' "
      "dtype: two rounded terms of similar size cancel)"),
    A("lm.cross_entropy", "native", f"{LOSS}:87-113 (SFTLoss on the log-probabilities of {UTILS}:190-196, "
      "F.log_softmax in the logits' dtype, as lm.token_logprobs)"),
    A("lm.cross_entropy[gpt-lm-loss]", "native", f"{LOSS}:79-82 (GPTLMLoss: nn.CrossEntropyLoss on the shifted "
      "logits in their own dtype, no upcast: bfloat16/float16 rows through F.cross_entropy, whose CPU log_softmax "
      "rounds log Σ to the dtype before (z − max) − log Σ, so log q_y near 0 cancels)"),
    A("ppo.value_loss", "native", f"{LOSS}:282-286 (ValueLoss: values_clipped = old_values + (values − "
      "old_values).clamp(±ε) in the dtype, two roundings that move an unclipped V_c off V, and V_c − R then cancels "
      "where R ≈ V)"),
    A("reward.pairwise", "careful", f"{LOSS}:306-326 (PairWiseLoss: F.logsigmoid per pair, mean; LogExpLoss: "
      "log(1 + exp(·)) per pair, mean)"),
]


def _margin_ignored_shows(case, dtype: str, tolerance) -> bool:
    """Whether dropping the margins (LogExpLoss) moves the loss or a gradient of a log-exp case beyond
    ``tolerance`` (refimpl/arrays/reward.py with and without them)."""
    from lossproof.refimpl.arrays import reward as exact_reward
    inputs, declared = decoded(case.test["inputs"]), arguments(case)
    if "margin" not in inputs or not np.any(inputs["margin"]):
        return False
    cotangent = decoded(case.test["cotangents"])["loss"]
    without = {k: v for k, v in inputs.items() if k != "margin"}
    exact, deviating = ({"loss": exact_reward.pairwise(**x, **declared),
                         **{f"grad:{n}": g for n, g in exact_reward.pairwise_vjp(cotangent, **x, **declared).items()}}
                        for x in (inputs, without))
    return deviation_shows(tolerance, exact, deviating)


_ENTROPY_NEG_INF = Finding(
    "openrlhf-entropy-neg-inf-nan", "bug",
    "compute_entropy forms Σ softmax(z)·z: at a logit of −∞ (an impossible token) that is 0·(−∞) = NaN, so the "
    "row's entropy and gradient are NaN where the exact entropy ignores the token",
    f"{UTILS} compute_entropy: torch.logsumexp(logits, dim=-1) - torch.sum(pd * logits, dim=-1)",
    where(objectives=("lm.entropy",), test=has_neg_inf_logits))
_LOGEXP_MARGIN = Finding(
    "openrlhf-logexp-ignores-margin", "bug",
    "LogExpLoss.forward takes margin and never reads it: with --model.loss_type logexp and "
    "--model.margin_loss_enable the reward model trains on log(1 + exp(r_r − r_c)) without the margins. Repro: "
    "lossproof check --target openrlhf --uid reward.pairwise:d967cfbc7ca94147",
    f"{LOSS} LogExpLoss.forward: loss = torch.log(1 + torch.exp(reject_reward - chosen_reward)).mean()",
    where(objectives=("reward.pairwise",), conventions={"form": "log-exp"}, shows=_margin_ignored_shows))
def _logexp_literal_shows(case, dtype: str, tolerance) -> bool:
    """Whether the literal log(1 + exp(r_r − r_c)) in ``dtype`` (torch, as LogExpLoss writes it;
    no margin) is beyond ``tolerance`` of the exact loss: e^x overflows to inf, or 1 + e^x absorbs
    a small e^x (to 1, or to a few of its digits)."""
    import torch
    inputs = decoded(case.test["inputs"])
    dt = getattr(torch, dtype)
    x = torch.tensor(inputs["rejected_rewards"], dtype=dt) - torch.tensor(inputs["chosen_rewards"], dtype=dt)
    literal = float(torch.log(1 + torch.exp(x)).mean()) if x.numel() else 0.0
    exact = np.asarray(decode_exact(case.test["expected"]["loss"]), dtype=np.float64)
    return deviation_shows(tolerance, {"loss": exact}, {"loss": np.asarray(literal)})


_LOGEXP_LITERAL = Finding(
    "openrlhf-logexp-overflow-absorption", "numerics",
    "LogExpLoss evaluates log(1 + exp(r_r − r_c)) literally: exp overflows to inf (loss and gradients inf/NaN) once "
    "r_r − r_c exceeds 88.7 in float32 (11.1 in float16, 709.8 in float64), and 1 + e^x absorbs a small e^x, so a "
    "well-separated pair contributes 0 (or a few digits) where log1p(e^x) ≈ e^x; F.softplus or −F.logsigmoid(r_c − "
    "r_r) has neither problem",
    f"{LOSS} LogExpLoss.forward: torch.log(1 + torch.exp(reject_reward - chosen_reward))",
    where(objectives=("reward.pairwise",), conventions={"form": "log-exp"}, shows=_logexp_literal_shows))
FINDINGS += [_ENTROPY_NEG_INF, _LOGEXP_MARGIN, _LOGEXP_LITERAL]


def token_logprobs(logits, labels, temperature=1.0):
    """log_probs_from_logits(logits, labels, temperature), which divides its argument in place
    (logits.div_): it gets a copy, as the actor gives it a model output, not a leaf. The actor casts
    the logits to float32 first (models/actor.py); the function is checked in the inputs' dtype."""
    return _mod("models.utils").log_probs_from_logits(logits.clone(), labels, temperature)


def entropy(logits, temperature=1.0):
    """compute_entropy of logits divided in place by T (models/actor.py: output["logits"].div_(T)). It
    is @torch.compile'd; its uncompiled body is called (no C++ compiler on the CPU target)."""
    scaled = logits.clone()
    if temperature != 1.0:
        scaled.div_(temperature)
    return _mod("models.utils").compute_entropy._torchdynamo_orig_callable(scaled)


def cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                  reduction="mean", normalizer=None):
    """The SFT trainer's loss (trainer/sft_trainer.py): SFTLoss()(log_probs_from_logits(...), loss_mask,
    **loss_batch_info), batch_num_tokens = the normalizer (the accumulation window's token count)
    or the local count."""
    if label_smoothing or z_loss or softcap is not None:
        raise NotImplementedError("OpenRLHF 0.11.2 SFTLoss has no label smoothing, z-loss or soft-capping")
    counted, targets = loss_mask_labels(logits, labels, ignore_index)
    logps = _mod("models.utils").log_probs_from_logits(logits.clone().unsqueeze(0), targets.unsqueeze(0))
    info = _mod("utils.loss_utils").get_loss_batch_info(SimpleNamespace(), counted.unsqueeze(0),
                                                        batch_num_tokens=normalizer)
    return _mod("models.loss").SFTLoss()(logps, counted.unsqueeze(0), dp_size=info["dp_size"],
                                         batch_num_tokens=info["batch_num_tokens"])


def gpt_lm_loss(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="mean",
                normalizer=None):
    """GPTLMLoss()(logits, labels) (models/loss.py:42-84, no ring attention): it shifts inside
    (logits[..., :-1, :] against labels[..., 1:]), so the vector's N rows are given as one sequence
    with one more row after them and its labels after one more label before them: row t is scored
    against label t, and the extra row, whose gradient is discarded, is scored against nothing."""
    import torch
    if label_smoothing or z_loss or softcap is not None:
        raise NotImplementedError("OpenRLHF 0.11.2 GPTLMLoss has no label smoothing, z-loss or soft-capping")
    if reduction != "mean" or normalizer is not None:
        raise NotImplementedError("OpenRLHF 0.11.2 GPTLMLoss is nn.CrossEntropyLoss's mean: no other reduction "
                                  "or normalizer")
    if ignore_index != -100:
        raise NotImplementedError("OpenRLHF 0.11.2 GPTLMLoss fixes IGNORE_INDEX = -100")
    rows = torch.cat([logits, logits[-1:].detach()]).unsqueeze(0)
    shifted = torch.cat([labels.new_full((1,), -100), labels.long()]).unsqueeze(0)
    return _mod("models.loss").GPTLMLoss()(rows, shifted)


def value_loss(values, old_values, returns, mask, clip_range_value=None, half=False, aggregation="token-mean"):
    """ValueLoss(value_clip) as the critic calls it (trainer/ray/ppo_critic.py: a boolean action mask,
    loss_batch_info); it always halves (half False is not declared)."""
    on = mask.to(bool)
    return _mod("models.loss").ValueLoss(clip_range_value)(values, old_values, returns, action_mask=on,
                                                           **_batch_info(on))


def pairwise(chosen_rewards, rejected_rewards, margin=None, center_rewards_coefficient=None, form="sigmoid"):
    """PairWiseLoss (form 'sigmoid') or LogExpLoss ('log-exp'), as the reward-model trainer picks them
    (trainer/rm_trainer.py); neither has a centring term."""
    if center_rewards_coefficient is not None:
        raise NotImplementedError("OpenRLHF 0.11.2's reward losses have no centring term")
    loss = _mod("models.loss")
    fn = loss.PairWiseLoss() if form == "sigmoid" else loss.LogExpLoss()
    return fn(chosen_rewards, rejected_rewards, margin)


_LM_PPO_REWARD_OBJECTIVES = {"lm.token_logprobs": token_logprobs, "lm.entropy": entropy,
                             "lm.cross_entropy": cross_entropy, "ppo.value_loss": value_loss,
                             "reward.pairwise": pairwise}


def _load():
    return [_mod(m) for m in ("models.loss", "models.utils", "utils.loss_utils", "trainer.ppo_utils.experience_maker")]


def target():
    version = require("openrlhf", "openrlhf", VERSION, INSTALL)
    load_or_explain(_load, "openrlhf", INSTALL)
    objectives = {"grpo.advantages": advantages, "gae.advantages": gae_advantages, "gae.kl_rewards": gae_kl_rewards,
                  "grpo.clip": clip, "grpo.aggregate": aggregate, "grpo.loss": grpo_loss, "kl.estimator": kl_estimator,
                  "ppo.entropy_bonus": entropy_bonus,
                  "dpo.loss": dpo_loss, "grpo.rollout_correction": rollout_correction, **_LM_PPO_REWARD_OBJECTIVES}
    objectives["lm.cross_entropy[gpt-lm-loss]"] = gpt_lm_loss
    return build("openrlhf", version, objectives, CONVENTIONS + CORRECTION, FINDINGS, ARITHMETIC,
                 alternatives=ALTERNATIVES)
