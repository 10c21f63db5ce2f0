"""``--target trl``: TRL 1.16.0 on CPU.

Calls TRL's own code, driven without a model:

- ``grpo.advantages``: ``GRPOTrainer._generate_and_score_completions`` (the leave-one-out baseline:
  ``RLOOTrainer._generate_and_score_completions``) with generation and the reward functions replaced by
  the vector's rewards (one reward function, weight 1);
- ``grpo.clip`` and ``grpo.loss``: ``GRPOTrainer._compute_loss`` with the policy forward pass
  replaced by the vector's per-token log-probabilities (``grpo.clip``: one token per call, β = 0,
  ``loss_type='bnpo'``);
- ``dpo.loss``: ``DPOTrainer._compute_loss`` with the model forward replaced by one-token
  completions whose log-probabilities are the sequence log-probabilities (precomputed reference
  log-probabilities), one pair per call;
- ``preference.cpo`` and ``preference.simpo``: ``CPOTrainer.cpo_loss`` (experimental/cpo, loss_type
  'sigmoid' / 'simpo', alpha 0; SimPO given the sums divided by the lengths, as
  ``get_batch_logps(average_log_prob=True)`` forms them); ``preference.orpo``:
  ``ORPOTrainer.odds_ratio_loss`` (experimental/orpo) plus the pair's chosen NLL, −chosen_logps;
  ``preference.kto``: ``KTOTrainer._compute_loss`` (trainer/kto_trainer.py) one example per call, the
  model forward replaced by one-token completions whose log-probabilities are the vector's (the
  main completion, and the M mismatched completions of the batch KL estimate, whose reference
  log-probabilities are precomputed): TRL's own z0 = clamp(mean(KL − ref KL), 0), detached;
- ``distill.token_kl`` and ``distill.generalized_jsd``: ``GKDTrainer.generalized_jsd_loss``
  (experimental/gkd), one row per call;
- ``distill.softmax``: ``trainer/utils.py selective_log_softmax`` over every index, exponentiated
  (float32 and float64 only: TRL has no probabilities, and in a low dtype its log-probabilities are
  rounded to that dtype before the exponential, which would measure this composition).
- ``lm.token_logprobs``: ``trainer/utils.py selective_log_softmax(logits, labels, temperature)``, which
  divides the logits by the temperature itself; ``lm.entropy``: the entropy of
  ``selective_log_softmax_and_entropy(logits, index, temperature=T)`` (it divides by T and calls
  ``entropy_from_logits``). Both are the CPU paths: the fused Triton kernel
  (``trl/kernels/logprob_entropy.py``) runs only for CUDA/XPU tensors. The trainers themselves get their
  log-probabilities and entropies from ``trl/kernels/chunked_logprob.py`` through the patched model
  forward (``trainer/utils.py``), which takes hidden states and the lm head, not logits: not called here.
- ``reward.pairwise``: ``RewardTrainer.compute_loss`` with a stand-in ``self`` (eval mode,
  RewardConfig's center_rewards_coefficient) and a stand-in model whose forward returns the 2B scalar
  rewards as logits [2B, 1], chosen first, as compute_loss splits them (``torch.chunk``); the vector's
  margins, when given, are the batch's ``margin`` column.
- ``ppo.value_loss``: not implemented; TRL 1.16.0 has no PPO trainer and no value loss (its PPO
  trainer was removed; ``grep -r vf_loss trl/`` finds nothing).

The trainers' ``__init__`` is never run: each call uses a stand-in ``self`` holding only the
attributes those methods read (the configuration they would get from ``GRPOConfig`` / ``DPOConfig``).
Install: ``pip install trl==1.16.0`` (brings transformers, accelerate, datasets; torch 2.13 CPU
satisfies it).

The findings below are the documented reasons why TRL fails some vectors; the target declares
each as a known failure (``xfail``), so that only a new failure fails ``lossproof check --target trl``.
"""
from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import numpy as np

from lossproof.conformance.compare import UNIT_ROUNDOFF
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
    label_smoothing_ignored_shows,
    load_or_explain,
    micro_batch_mean_shows,
    per_element,
    require,
    sapo_float32_tau_shows,
    trl_loss_type,
    where,
)
from lossproof.conformance.targets.steps import micro_batch_mean

VERSION = "1.16.0"
INSTALL = "pip install trl==1.16.0"
GRPO = "trl/trainer/grpo_trainer.py"
GRPO_CFG = "trl/trainer/grpo_config.py"
DPO = "trl/trainer/dpo_trainer.py"
GKD = "trl/experimental/gkd/gkd_trainer.py"
IWOPD = "trl/experimental/iw_opd/iw_opd_trainer.py"

CONVENTIONS = [
    C("distill.sparse_kl", "renormalize", ("both", "tail"), f"{IWOPD} _compute_server_forward_kl_loss: "
      "loss_add_tail=False 'both' (teacher and student log-probabilities logsumexp-renormalised over the valid "
      "teacher ids; padding = −inf log-probability), loss_add_tail=True (the default, "
      f"trl/experimental/iw_opd/iw_opd_config.py:296) 'tail' ({IWOPD}:99 _add_tail_bucket appends log(1 − Σ p) and "
      "log(1 − Σ q) to both, the same function as "
      "trl/experimental/server_distillation/server_distillation_trainer.py:72)"),
    C("grpo.advantages", "scale", ("group", "batch", "none"), f"{GRPO} _generate_and_score_completions "
      f"(scale_rewards, default 'group' in {GRPO_CFG})"),
    C("grpo.advantages", "std_ddof", (1,), "trl/trainer/utils.py nanstd (Bessel's correction)"),
    C("grpo.advantages", "eps", (1e-4,), f"{GRPO} _generate_and_score_completions (std_rewards + 1e-4)"),
    C("grpo.advantages", "degenerate", ("zero",), f"{GRPO} (all-equal group: 0/(0 + 1e-4))"),
    C("grpo.advantages", "baseline", ("mean", "leave-one-out"), f"{GRPO} (group mean); trl/trainer/rloo_trainer.py "
      "RLOOTrainer._generate_and_score_completions (leave-one-out; normalize_advantages=True whitens the batch "
      "with nanstd + 1e-4: scale 'whiten')"),
    C("grpo.clip", "dual_clip", (None,), f"{GRPO} _compute_loss (delta clamps ρ from above on both signs of A "
      "(INTELLECT-2), not the dual clip; default None)"),
    C("grpo.loss", "dual_clip", (None,), f"{GRPO} _compute_loss"),
    C("grpo.loss", "kl_kind", ("k3",), f"{GRPO} _compute_loss (exp(ref − logp) − (ref − logp) − 1)"),
    C("grpo.loss", "kl_clamp", (None,), f"{GRPO} _compute_loss (no clamp)"),
    C("grpo.loss", "kl_ratio_weight", (True, False), f"{GRPO} _compute_loss (use_bias_correction_kl, default True "
      f"in {GRPO_CFG}: per_token_kl * coef_1)"),
    C("grpo.loss", "aggregation", ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"),
      f"{GRPO} _compute_loss (loss_type, default 'dapo' in {GRPO_CFG}: token mean; 'grpo': per-sequence means "
      "over B rows, fully masked rows included; 'dr_grpo': Σ/(B·max_completion_length))"),
    C("grpo.loss", "ratio_level", ("token", "sequence"), f"{GRPO} _compute_loss (importance_sampling_level, "
      f"default 'token' in {GRPO_CFG}; 'sequence': log w = Σ_t Δ·m / max(Σ m, 1), GSPO; no GSPO-token)"),
    C("dpo.loss", "nll_aggregation", (None, "token-mean"), f"{DPO} _compute_loss (loss_type 'sft', weighted by "
      "loss_weights: −mean of the chosen tokens' log-probabilities over the batch; TRL 1.16 has no rpo_alpha)"),
    C("grpo.loss", "policy_loss", ("ppo-clip", "cispo", "sapo"), f"{GRPO} _compute_loss (loss_type 'cispo': "
      "-clamp(coef_1, max=epsilon_high).detach()·A·logp, normalised as 'dapo' (token mean); 'sapo': "
      "-sigmoid(τ(coef_1 − 1))·4/τ·A, τ = sapo_temperature_pos if A > 0 else sapo_temperature_neg, per-sequence "
      "means as 'grpo'; every other loss_type: the PPO clip)"),
    C("grpo.loss", "cispo_clip", ("raw-upper", "upper"), f"{GRPO} _compute_loss (loss_type='cispo' caps the weight "
      "at the raw epsilon_high, unset → epsilon; no lower bound. 'upper' is the same code with epsilon_high = "
      "1 + ε_high, as this adapter passes it)"),
    C("dpo.loss", "loss_type", ("sigmoid", "hinge", "ipo", "robust", "exo_pair", "nca_pair", "bco_pair", "sppo_hard",
                                "apo_zero", "apo_down", "discopop"),
      f"{DPO} _compute_loss (loss_type, default 'sigmoid'; label_smoothing is read by 'robust', 'exo_pair', 'aot' "
      "only; 'ipo' divides each gain by the completion length — one token here; 'aot' and 'aot_unpaired' sort "
      "over the batch, which the per-pair calls of this adapter cannot observe: not declared)"),
    C("reward.pairwise", "form", ("sigmoid",), "trl/trainer/reward_trainer.py RewardTrainer.compute_loss "
      "(-nn.functional.logsigmoid(rewards_chosen - rewards_rejected - inputs['margin']).mean(), the margin only when "
      "the batch has one; plus center_rewards_coefficient·torch.mean((rewards_chosen + rewards_rejected) ** 2))"),
    C("distill.token_kl", "direction", ("reverse", "forward"), f"{GKD} GKDTrainer.generalized_jsd_loss "
      "(beta=1: KL(q‖p); beta=0: KL(p‖q))"),
    C("distill.generalized_jsd", "endpoints", ("kl",), f"{GKD} GKDTrainer.generalized_jsd_loss (`if beta == 0` / "
      "`elif beta == 1` branches)"),
]
# loss_type values combine the aggregation with nothing else; the advantage settings come together.
ALTERNATIVES = {"grpo.advantages": [{"scale": "group", "std_ddof": 1, "eps": 1e-4, "degenerate": "zero"},
                                    {"scale": "batch", "std_ddof": 1, "eps": 1e-4, "degenerate": "zero"},
                                    {"scale": "none", "std_ddof": 0, "eps": 0.0, "degenerate": "zero"},
                                    # RLOOTrainer: normalize_advantages False (default) / True
                                    {"scale": "none", "std_ddof": 0, "eps": 0.0, "degenerate": "zero",
                                     "baseline": "leave-one-out"},
                                    {"scale": "whiten", "std_ddof": 1, "eps": 1e-4, "degenerate": "zero",
                                     "baseline": "leave-one-out"}]}
PARAM_DEFAULTS = [
    C("grpo.loss", "beta", (0.0,), f"{GRPO_CFG} beta: 0.0 (no KL term by default)"),
    C("grpo.loss", "eps_high", (None,), f"{GRPO_CFG} epsilon_high: None (= epsilon 0.2)"),
    C("dpo.loss", "beta", (0.1,), "trl/trainer/dpo_config.py beta: 0.1"),
    C("distill.generalized_jsd", "beta", (0.5,), "trl/experimental/gkd/gkd_config.py beta: 0.5"),
    C("reward.pairwise", "center_rewards_coefficient", (None,), "trl/trainer/reward_config.py "
      "center_rewards_coefficient: None (no centring term)"),
]


# TRL computes its losses in the dtype of the log-probabilities and logits it is given (the model's:
# selective_log_softmax returns bfloat16 log-probabilities for bfloat16 logits, trl/trainer/utils.py:591),
# its advantages in float32.
ARITHMETIC = [
    A("distill.sparse_kl", "native", f"{IWOPD}:1585 (F.log_softmax of the student in the logits' dtype) and "
      "1516-1558 (gather, logsumexp renormalisation of both sides and p·(log p − log q) in that dtype)"),
    A("distill.token_kl", "native", f"{GKD}:275-281 (F.log_softmax and F.kl_div in the logits' dtype: the "
      "vocabulary sum of p·(log p − log q) over rounded log-probabilities)"),
    A("distill.generalized_jsd", "native", f"{GKD}:275-297 (log-softmax, the mixture's logsumexp and F.kl_div in "
      "the logits' dtype)"),
    A("dpo.loss", "native", f"{DPO}:1350-1383 (chosen_logps − ref_chosen_logps, rejected likewise, and their "
      "difference delta_score, each rounded to the inputs' dtype; 'ipo' squares at 1404, 'robust' subtracts two "
      "rounded log-sigmoids at 1429-1431)"),
    A("preference.kto", "native", "trl/trainer/kto_trainer.py:1443-1470 (z0 = clamp(mean(KL − ref KL), 0), the "
      "log-ratios and 1 − σ(β(ρ − z0)) in the log-probabilities' dtype)"),
    A("preference.cpo", "native", "trl/experimental/cpo/cpo_trainer.py:709-728 (chosen − rejected, β·logits and "
      "the log-sigmoids in the log-probabilities' dtype)"),
    A("preference.simpo", "native", "trl/experimental/cpo/cpo_trainer.py:709-722 (the margin of average "
      "log-probabilities minus γ/β, times β, in their dtype; the averages are formed in that dtype too)"),
    A("grpo.loss", "native", f"{GRPO}:3083-3105 (log ratio, exp and k3 = exp(ref − logp) − (ref − logp) − 1 in the "
      "log-probabilities' dtype; autograd sums the partial gradients of logp in that dtype)"),
    A("grpo.clip", "careful", f"{GRPO}:3083-3095 (one token, β = 0: the log ratio and the ratio rounded to the "
      "dtype, then the clipped term: the roundings of a term the careful model grants, no cancellation)"),
    A("lm.token_logprobs", "native", "trl/trainer/utils.py:576-577 (logits / temperature in the logits' dtype) and "
      "588-593 (bfloat16/float16: F.log_softmax of the row in that dtype, then gather: log q_y = x_y − lse formed "
      "from the rounded x = z/T, which cancels where |x| ≫ |log q_y|)"),
    A("lm.entropy", "native", "trl/trainer/utils.py:702-703 (logits / temperature in the logits' dtype) and 637-639 "
      "(entropy_from_logits: F.log_softmax in that dtype, then the vocabulary sum of exp(logp)·logp over the rounded "
      "log-probabilities)"),
    A("reward.pairwise", "native", "trl/trainer/reward_trainer.py:790-795 (rewards_chosen − rewards_rejected − "
      "margin rounded to the rewards' dtype before logsigmoid, a difference that cancels; the mean and the centring "
      "term in that dtype)"),
    A("grpo.advantages", "careful", f"{GRPO}:576 (reward_weights are float32) and 2763 (the weighted sum promotes "
      "the rewards to float32 before the group mean, std and division)"),
]


def _bessel_error_visible(case) -> bool:
    """Whether float32 rounding of nanstd's Bessel factor n/(n − 1) shows in float64 advantages
    A = (r − group mean)/(std + 1e-4): the std is taken over n rewards (a group, or the batch for
    scale 'batch') with n/(n − 1) not a float32 number, and A·std/(std + 1e-4), which the
    rounding perturbs by ~3e-8 relative, is not negligible (TinyStd groups, where 1e-4
    dominates, and all-equal groups, where A = 0, pass)."""
    rewards = as_array(case.test["inputs"]["rewards"])
    centred = rewards - rewards.mean(axis=1, keepdims=True)
    if case.conventions.get("scale") == "whiten":
        # RLOOTrainer normalize_advantages: nanstd of the leave-one-out advantages over the batch
        g = rewards.shape[1]
        loo = centred * (g / (g - 1)) if g > 1 else np.zeros_like(rewards)
        samples = [(loo.ravel(), loo - loo.mean())]
    elif case.conventions.get("scale") == "batch":
        samples = [(rewards.ravel(), centred)]
    else:
        samples = list(zip(rewards, centred))
    for r, a in samples:
        n = r.size
        if n < 2 or float(np.float32(n / (n - 1))) == n / (n - 1):
            continue
        std = float(np.std(r, ddof=1))
        if np.abs(a).max() * std / (std + 1e-4) ** 2 > 1e-6:
            return True
    return False


def _one_dimensional_logits(case) -> bool:
    logits = case.test["inputs"]["logits"]
    return len(logits) > 0 and not isinstance(logits[0], list)


_CDPO = Finding(
    "trl-sigmoid-label-smoothing", "deviation",
    "loss_type='sigmoid' ignores label_smoothing (read only by 'robust', 'exo_pair' and 'aot'; there is no "
    "'cdpo'): with ε > 0 the loss is plain DPO, not the conservative cDPO loss",
    f"{DPO} _compute_loss: per_sequence_loss = -F.logsigmoid(self.beta * delta_score)",
    where(objectives=("dpo.loss",), conventions={"loss_type": "sigmoid"},
          shows=label_smoothing_ignored_shows))
_ZERO_STD = Finding(
    "trl-zero-std-rounding", "numerics",
    "an all-equal group whose floating-point mean is inexact gets (r − mean)/(std + 1e-4) with std of order one "
    "ulp: advantages of order 1e-12 (float64) or 1e-3 (float32) instead of 0",
    f"{GRPO} _generate_and_score_completions: advantages / (std_rewards + 1e-4)",
    lambda c, dtype: c.objective == "grpo.advantages" and c.conventions.get("scale") == "group"
    and equal_group_mean_inexact(c, dtype))
_NANSTD = Finding(
    "trl-nanstd-float32-bessel", "bug",
    "nanstd computes Bessel's factor count/(count − 1) from integer counts, which torch divides in the default "
    "dtype (float32): where n/(n − 1) is not a float32 number (n = 4: 4/3, n = 8: 8/7) the std of float64 "
    "rewards is off by up to ~3e-8 relative, so float64 advantages are only float32-accurate (GRPOTrainer's "
    "group and batch std; RLOOTrainer's normalize_advantages, over the batch of B·G)",
    "trl/trainer/utils.py nanstd: correction = count / (count - 1)",
    where(objectives=("grpo.advantages",), dtypes=("float64",), conventions={"scale": ("group", "batch", "whiten")},
          test=_bessel_error_visible))
_KL_DIV_NEG_INF = Finding(
    "trl-jsd-neginf-nan", "bug",
    "generalized_jsd_loss returns NaN (value and gradient) when a logit is −inf (an impossible token, e.g. a "
    "masked vocabulary entry), where the divergence is finite: F.kl_div(..., log_target=True) forms "
    "exp(t)·(t − s) = 0·(−inf) on that token. Repro: GKDTrainer.generalized_jsd_loss(torch.tensor([[[0., 1., 2.]]]), "
    "torch.tensor([[[0.5, float('-inf'), 1.]]]), beta=0.0, reduction='sum') → nan (exact: 0.2684)",
    f"{GKD} GKDTrainer.generalized_jsd_loss (F.kl_div with log_target=True)",
    where(objectives=("distill.token_kl", "distill.generalized_jsd"), flags=("NegInfLogits",)))
_SELECTIVE_1D = Finding(
    "trl-selective-log-softmax-1d", "bug",
    "selective_log_softmax documents logits of shape (..., num_classes) but on 1-D logits its float32/float64 "
    "path iterates over the elements instead of the rows (torch.logsumexp of each scalar) and broadcasts: "
    "selective_log_softmax(torch.tensor([2., 0.], dtype=torch.float64), torch.arange(2)) has shape (2, 2) "
    "instead of (2,) (2-D and larger inputs are right)",
    "trl/trainer/utils.py selective_log_softmax: torch.stack([torch.logsumexp(lg, dim=-1) for lg in logits])",
    where(objectives=("distill.softmax",), dtypes=("float64", "float32"), test=_one_dimensional_logits))
_EXO_FLOAT32_EPS = Finding(
    "trl-exo-float32-epsilon", "numerics",
    "loss_type='exo_pair' turns label_smoothing into torch.tensor(ε), a float32 tensor whatever the inputs' dtype, "
    "so log(1 − ε) and log ε are float32-accurate and float64 losses and gradients are off by ~1e-8 relative. "
    "Repro: torch.log1p(-torch.tensor(0.1)).double() − math.log1p(-0.1) = 2.4e-10",
    f"{DPO} _compute_loss: epsilon = torch.tensor(self.label_smoothing, device=device)",
    where(objectives=("dpo.loss",), dtypes=("float64",), conventions={"loss_type": "exo_pair"}))
_DISCOPOP_OVERFLOW = Finding(
    "trl-discopop-exp-overflow", "bug",
    "loss_type='discopop' forms exp(−βΔ) and multiplies it by σ(βΔ/τ): for βΔ ≪ 0 (below −88 in float32, −709 in "
    "float64, −11 in float16) exp overflows to inf while σ(βΔ/τ) underflows to 0, and inf·0 = NaN (value and "
    "gradient) where the exact loss is ≈ −βΔ. Repro: logits = torch.tensor(-1e4); torch.sigmoid(logits / 0.05) * "
    "torch.exp(-logits) → nan",
    f"{DPO} _compute_loss: exp_component = torch.exp(-logits)",
    where(objectives=("dpo.loss",), conventions={"loss_type": "discopop"}, flags=("HugeMargin",)))
_ORPO_FLOAT32 = Finding(
    "trl-orpo-float32", "numerics",
    "odds_ratio_loss casts the log-probabilities to float32 (.float()) before the log-odds, so float64 inputs "
    "give float32-accurate losses and rewards (relative error ~1e-8)",
    "trl/experimental/orpo/orpo_trainer.py odds_ratio_loss: policy_chosen_logps = policy_chosen_logps.float()",
    where(objectives=("preference.orpo",), dtypes=("float64",)))
_SAPO_FLOAT32_TAU = Finding(
    "trl-sapo-float32-temperature", "numerics",
    "loss_type='sapo' builds the temperatures with torch.where(advantages > 0, sapo_temperature_pos, "
    "sapo_temperature_neg) from two Python floats, i.e. in the default dtype (float32): the default τ_neg = 1.05 "
    "becomes 1.0499999523, so float64 losses and gradients are off by ~2e-8 relative wherever A ≤ 0 (τ that are "
    "float32 numbers, e.g. 1.0, 0.5, 2.0, are exact). Repro: torch.where(torch.tensor([False]), 1.0, 1.05).dtype "
    "→ torch.float32",
    f"{GRPO} _compute_loss: temperatures = torch.where(advantages > 0, self.args.sapo_temperature_pos, "
    "self.args.sapo_temperature_neg)",
    where(objectives=("grpo.loss",), dtypes=("float64",), conventions={"policy_loss": "sapo"},
          shows=sapo_float32_tau_shows))


# _add_tail_bucket: log_sum = torch.clamp(logsumexp(log_probs), max=-1e-7), tail = log(-expm1(log_sum))
_TAIL_CLAMP = -1e-7


def _tail_buckets(case, tolerance, clamp: bool) -> bool:
    """Whether TRL's tail buckets move the KL or its gradient beyond ``tolerance``: the exact
    objective (refimpl/arrays, float64) against the K+1-bucket KL with TRL's tails, in float64:
    ``clamp``: log Σ p and log Σ q clamped at −1e-7 (no gradient through a clamped student tail);
    else q_tail = 1 − Σ_k q_{i_k} (log(−expm1(logsumexp)) of the gathered log q) with the relative
    error 4u·Σq/q_tail of that cancellation in the case's dtype. The gradient is TRL's chain:
    g_k = −p_k + p_tail·q_{i_k}/q_tail wrt the gathered log q, then through log_softmax."""
    declared = arguments(case)
    inputs = decoded(case.test["inputs"])
    z, ids, lp = inputs["student_logits"], inputs["teacher_ids"].astype(np.int64), inputs["teacher_logps"]
    T = float(declared["temperature"])
    zt = z / T
    m = np.max(zt, axis=-1, keepdims=True)
    logq = zt - m - np.log(np.sum(np.exp(zt - m), axis=-1, keepdims=True))
    qv = np.exp(logq)
    live = lp > -np.inf
    p = np.where(live, np.exp(np.where(live, lp, 0.0)), 0.0)
    lq = np.take_along_axis(logq, ids, axis=-1)
    q_ids = np.where(live, np.exp(lq), 0.0)
    s, q = p.sum(axis=-1), q_ids.sum(axis=-1)
    held = np.zeros(z.shape, dtype=bool)
    np.put_along_axis(held, ids, live, axis=-1)
    q_off = np.where(held, 0.0, qv).sum(axis=-1)   # the student's tail without cancellation
    if clamp:
        if not ((s > np.exp(_TAIL_CLAMP)) | (q > np.exp(_TAIL_CLAMP))).any():
            return False
        p_t = -np.expm1(np.minimum(np.log(s), _TAIL_CLAMP))
        q_t = -np.expm1(np.minimum(np.log(q), _TAIL_CLAMP))
        through = np.log(q) <= _TAIL_CLAMP
    else:
        p_t = np.maximum(1 - s, 0.0)
        q_t = q_off * (1 + 4 * UNIT_ROUNDOFF[tolerance.dtype] * q / np.maximum(q_off, np.finfo(float).tiny))
        through = np.ones_like(s, dtype=bool)
    from lossproof.refimpl.arrays import distill
    c = decoded(case.test["cotangents"])["kl"]
    kw = {"renormalize": "tail", "temperature": T}
    exact = {"kl": distill.sparse_kl(z, ids, lp, **kw),
             "grad:student_logits": distill.sparse_kl_vjp(c, z, ids, lp, **kw)["student_logits"]}
    pos = p_t > 0
    tail = np.where(pos, p_t * (np.log(np.where(pos, p_t, 1.0)) - np.log(np.where(pos, q_t, 1.0))), 0.0)
    kl = np.where(live, p * (np.where(live, lp, 0.0) - np.where(live, lq, 0.0)), 0.0).sum(axis=-1) + tail
    g = -p + np.where(through & pos, p_t / np.where(pos, q_t, 1.0), 0.0)[:, None] * q_ids
    scattered = np.zeros(z.shape)
    np.put_along_axis(scattered, ids, np.where(live, g, 0.0), axis=-1)
    grad = scattered - qv * np.where(live, g, 0.0).sum(axis=-1, keepdims=True)
    deviating = {"kl": kl, "grad:student_logits": c[:, None] * grad / T}
    return deviation_shows(tolerance, exact, deviating)


def _tail_clamp_shows(case, dtype: str, tolerance) -> bool:
    return _tail_buckets(case, tolerance, clamp=True)


def _tail_cancellation_shows(case, dtype: str, tolerance) -> bool:
    return _tail_buckets(case, tolerance, clamp=False)


_TAIL_FLOOR = Finding(
    "trl-tail-bucket-clamp", "deviation",
    "loss_add_tail=True (the default) clamps log Σ p and log Σ q at −1e-7 before log(1 − e^x), so neither tail "
    "bucket is ever below 1 − e^{−1e-7} ≈ 1e-7: a teacher whose top-k holds more than 1 − 1e-7 of its mass (a "
    "near-deterministic teacher, a tail of 1e-9, a one-hot teacher whose tail is exactly 0) gets p_tail ≈ 1e-7, and a "
    "student with less than 1e-7 off the ids gets q_tail ≈ 1e-7 and no gradient through its tail (torch.clamp's "
    "gradient is 0 above max): the KL is off by about p_tail·log(p_tail/q_tail) of the floor (≈1e-6 for a one-hot "
    "teacher; ≈ p_tail·|log q_tail| when the student's tail is e^{−2e4}). Repro: from "
    "trl.experimental.iw_opd.iw_opd_trainer import _add_tail_bucket; _add_tail_bucket(torch.tensor([[0.0, "
    "float('-inf')]]), torch.tensor([[True, False]]))[0].exp() → tail 1e-7 (exact: 0)",
    f"{IWOPD}:99-110 _add_tail_bucket (torch.clamp(log_sum, max=-1e-7)); also "
    "trl/experimental/server_distillation/server_distillation_trainer.py:72-83",
    where(objectives=("distill.sparse_kl",), conventions={"renormalize": "tail"}, shows=_tail_clamp_shows))
_TAIL_CANCELLATION = Finding(
    "trl-tail-bucket-cancellation", "numerics",
    "_add_tail_bucket forms the student's tail as 1 − Σ_k q_{i_k} (log(−expm1(logsumexp(log q at the ids)))), which "
    "cancels when the ids hold nearly all of the student's mass: q_tail carries a relative error of about "
    "u·Σq/q_tail, so with q_tail = 3.3e-6 the float32 KL and its gradient lose about five digits (float64 about "
    "ten), where Σ_{j off the ids} q_j keeps them. Repro: a student whose top-4 of V = 8 hold 1 − 3.3e-6 of its "
    "mass at T = 0.5, e.g. lossproof check --target trl --uid distill.sparse_kl:c78707657d021f7e --dtype float32",
    f"{IWOPD}:99-110 _add_tail_bucket (tail = torch.log(-torch.expm1(log_sum)))",
    where(objectives=("distill.sparse_kl",), conventions={"renormalize": "tail"}, shows=_tail_cancellation_shows))
_ENTROPY_NEG_INF = Finding(
    "trl-entropy-neginf-nan", "bug",
    "entropy_from_logits computes −Σ exp(logp)·logp, which is 0·(−inf) = NaN (value and gradient) at a −inf logit "
    "(an impossible token), where the entropy is finite (0·log 0 = 0). Repro: "
    "trl.trainer.utils.entropy_from_logits(torch.tensor([[0., float('-inf')]])) → nan (exact: 0)",
    "trl/trainer/utils.py entropy_from_logits: chunk_entropy = -(torch.exp(logps) * logps).sum(-1)",
    where(objectives=("lm.entropy",), flags=("NegInf",)))


FINDINGS = [_ORPO_FLOAT32, _CDPO, _ZERO_STD, _NANSTD, _KL_DIV_NEG_INF, _SELECTIVE_1D, _EXO_FLOAT32_EPS, _DISCOPOP_OVERFLOW,
            _SAPO_FLOAT32_TAU, _TAIL_FLOOR, _TAIL_CANCELLATION, _ENTROPY_NEG_INF]


def rows_differ(split) -> bool:
    """Whether the micro-batches of a row partition hold different numbers of rows."""
    return len({len(mb) for rank in split for mb in rank}) > 1


# Found by `lossproof check --target trl --partition 2x2` (docs/distributed.md).
SPLIT_FINDINGS = [
    Finding("trl-grpo-micro-batch-rows", "bug",
            "loss_type 'grpo' and 'dr_grpo' average each micro-batch over its own rows and divide by the "
            "accumulation steps: when micro-batches hold different numbers of rows, the rows of the smaller ones "
            "weigh more than 1/B (the global mean of 'dapo' is exact)",
            f"{GRPO}:3153-3157, 3163-3167 (loss.mean() / current_gradient_accumulation_steps; ÷ per_token_loss.size(0))",
            lambda c, dtype, split, tolerance: c.objective == "grpo.loss" and rows_differ(split)
            and c.conventions.get("aggregation") in ("seq-mean-token-mean", "seq-mean-token-sum-norm")
            and micro_batch_mean_shows(c, split, tolerance)),
    Finding("trl-dpo-micro-batch-pairs", "bug",
            "DPO averages the pairs of each micro-batch and the Trainer divides by the accumulation steps: when "
            "micro-batches hold different numbers of pairs, the pairs of the smaller ones weigh more than 1/B",
            f"{DPO}:1528 (per_sequence_loss.mean()) and :494 (loss_is_scaled_for_ga = False → "
            "transformers/trainer.py:2118-2119 divides by the accumulation steps)",
            lambda c, dtype, split, tolerance: c.objective == "dpo.loss" and rows_differ(split)
            and micro_batch_mean_shows(c, split, tolerance)),
]


def _mods():
    import os
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # GKDTrainer lives in trl.experimental
    from trl.experimental.cpo.cpo_trainer import CPOTrainer
    from trl.experimental.gkd.gkd_trainer import GKDTrainer
    from trl.experimental.orpo.orpo_trainer import ORPOTrainer
    from trl.trainer import utils
    from trl.trainer.dpo_trainer import DPOTrainer
    from trl.trainer.grpo_trainer import GRPOTrainer
    from trl.trainer.kto_trainer import KTOTrainer
    return SimpleNamespace(GRPOTrainer=GRPOTrainer, DPOTrainer=DPOTrainer, GKDTrainer=GKDTrainer, utils=utils,
                           CPOTrainer=CPOTrainer, ORPOTrainer=ORPOTrainer, KTOTrainer=KTOTrainer)


def _accelerator():
    import torch
    return SimpleNamespace(device=torch.device("cpu"), process_index=0, num_processes=1, sync_gradients=True,
                           gather=lambda t: t, gather_for_metrics=lambda t: t, reduce=lambda t, reduction="sum": t,
                           unwrap_model=lambda m: m)


def _model(training: bool):
    return SimpleNamespace(training=training, is_gradient_checkpointing=False)


# --- GRPO ---------------------------------------------------------------------------------

def advantages(rewards, scale="group", std_ddof=0, eps=0.0, degenerate="zero", baseline="mean"):
    if baseline == "leave-one-out":
        return _rloo_advantages(rewards, normalize=scale == "whiten")
    import torch
    trainer = _mods().GRPOTrainer
    b, g = rewards.shape
    n = b * g
    fake = SimpleNamespace(
        accelerator=_accelerator(), model=_model(True), environment_factories=None, environments=None, tools=None,
        _tokenizer=SimpleNamespace(pad_token_id=0), pad_to_multiple_of=None, mask_truncated_completions=False,
        args=SimpleNamespace(per_device_train_batch_size=n, per_device_eval_batch_size=n, steps_per_generation=1,
                             gradient_accumulation_steps=1, gradient_checkpointing_kwargs=None),
        num_iterations=1, use_vllm=False, vllm_importance_sampling_correction=False, beta=0.0, ref_model=None,
        multi_objective_aggregation="sum_then_normalize", reward_weights=torch.ones(1, dtype=torch.float32),
        scale_rewards=scale, num_generations=g, num_generations_eval=g, reward_func_names=["vector"],
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _logs={"prompt": [], "completion": [], "rewards": defaultdict(list), "advantages": [],
               "extra": defaultdict(list), "images": []},
        _pending_extra_logs={}, _pending_metrics={}, log_multimodal=False)
    # Generation: one-token prompts and completions; the reward functions: the vector's rewards.
    fake._generate = lambda prompts: ([[1]] * n, [[1]] * n, None, ["c"] * n, None, {}, None, None)
    # (reward functions return Python floats: the rewards carry no gradient). TRL stores them in float32
    # (grpo_trainer.py:1581); the stand-in keeps the vector's dtype, so that float64 rewards are checked in
    # float64, and TRL's float32 reward_weights (grpo_trainer.py:576) promote bfloat16/float16 ones to float32.
    fake._calculate_rewards = lambda inputs, prompts, completions, ids: rewards.detach().reshape(n, 1).clone()
    out = trainer._generate_and_score_completions(fake, [{"prompt": "p"} for _ in range(n)])
    return {"advantages": out["advantages"].reshape(b, g), "keep": torch.ones_like(rewards[:, 0])}


def _rloo_advantages(rewards, normalize: bool):
    """``RLOOTrainer._generate_and_score_completions`` (trainer/rloo_trainer.py) with generation, the
    policy forward pass and the reward functions replaced: one-token completions, the vector's rewards
    (one reward function, weight 1), β = 0 (no KL in the reward)."""
    import torch
    from trl.trainer.rloo_trainer import RLOOTrainer
    b, g = rewards.shape
    n = b * g
    fake = SimpleNamespace(
        accelerator=_accelerator(), model=_model(True), _tokenizer=SimpleNamespace(pad_token_id=0),
        pad_to_multiple_of=None, mask_truncated_completions=False, eos_token_ids=[2],
        args=SimpleNamespace(gradient_checkpointing_kwargs=None, per_device_train_batch_size=n,
                             per_device_eval_batch_size=n), beta=0.0, ref_model=None,
        reward_weights=torch.ones(1, dtype=torch.float32), reward_clip_range=None, normalize_advantages=normalize,
        num_generations=g, num_generations_eval=g, reward_func_names=["vector"],
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _logs={"prompt": [], "completion": [], "rewards": defaultdict(list), "advantages": [],
               "extra": defaultdict(list), "images": []},
        _pending_extra_logs={}, _pending_metrics={}, log_multimodal=False)
    fake._generate = lambda prompts: ([[1]] * n, [[1]] * n, ["c"] * n)
    fake._get_per_token_logps_and_entropies = lambda model, ids, *a, **k: (torch.zeros(n, 1), None, None)
    # the stand-in keeps the vector's dtype (see ``advantages``)
    fake._calculate_rewards = lambda inputs, prompts, completions, ids: rewards.detach().reshape(n, 1).clone()
    out = RLOOTrainer._generate_and_score_completions(fake, [{"prompt": "p"} for _ in range(n)])
    return {"advantages": out["advantages"].reshape(b, g), "keep": torch.ones_like(rewards[:, 0])}


def _grpo_fake(logp, beta, eps_low, eps_high, loss_type, kl_ratio_weight, max_completion_length,
               importance_sampling_level="token", sapo_taus=(1.0, 1.05)):
    import torch
    fake = SimpleNamespace(
        accelerator=_accelerator(), model=_model(True), aux_loss_enabled=False, top_entropy_quantile=1.0,
        off_policy_mask_threshold=None, importance_sampling_level=importance_sampling_level, beta=beta,
        epsilon_low=eps_low,
        epsilon_high=eps_low if eps_high is None else eps_high, loss_type=loss_type, use_vllm=False,
        vllm_importance_sampling_correction=False, current_gradient_accumulation_steps=1,
        max_completion_length=max_completion_length, _entropy_bonus_enabled=False,
        args=SimpleNamespace(use_bias_correction_kl=kl_ratio_weight, delta=None, steps_per_generation=1,
                             sapo_temperature_pos=sapo_taus[0], sapo_temperature_neg=sapo_taus[1]),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)})
    # The policy forward pass: the vector's log-probabilities (entropies only feed a logged metric).
    fake._get_per_token_logps_and_entropies = lambda *a, **k: (logp, torch.zeros_like(logp), None)
    return fake


def _grpo_inputs(logp, old_logp, ref_logp, advantages, mask):
    import torch
    b, t = logp.shape
    return {"prompt_ids": torch.ones(b, 1, dtype=torch.long), "prompt_mask": torch.ones(b, 1, dtype=torch.long),
            "completion_ids": torch.ones(b, t, dtype=torch.long), "completion_mask": mask,
            "old_per_token_logps": old_logp, "ref_per_token_logps": ref_logp, "advantages": advantages,
            # _generate_and_score_completions: num_items_in_batch = gather(loss_mask.sum()).sum()
            "num_items_in_batch": mask.sum()}


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, eps_low=0.2, eps_high=None, dual_clip=None, beta=0.04,
              kl_kind="k3", kl_clamp=None, kl_ratio_weight=False, aggregation="seq-mean-token-mean",
              norm_length=None, ratio_level="token", policy_loss="ppo-clip", cispo_clip="upper", sapo_tau_pos=1.0,
              sapo_tau_neg=1.05, *, trainer_state=None):
    """``trainer_state`` (the distributed step): {"accumulation_steps", "world_size", "num_items_in_batch"}.
    ``ratio_level`` is importance_sampling_level, passed through unchanged (TRL rejects what it does not
    know). ``policy_loss`` 'cispo' and 'sapo' are TRL's loss types of those names, each with its own
    normaliser (token mean; per-sequence means): another aggregation with them is unsupported. CISPO's
    cap is TRL's raw epsilon_high ('raw-upper'), or 1 + ε_high for the paper's 'upper'; TRL has no
    lower bound ('both' is unsupported). GMPO lives in an experimental trainer."""
    trainer = _mods().GRPOTrainer
    # TRL has no dual clip, KL clamp or other estimator: those conventions keep TRL's fixed behaviour.
    loss_type, eps_high = trl_loss_type("TRL 1.16.0", aggregation, policy_loss, cispo_clip, eps_low, eps_high)
    fake = _grpo_fake(logp, beta, eps_low, eps_high, loss_type, kl_ratio_weight,
                      logp.shape[1] if norm_length is None else norm_length, ratio_level,
                      (sapo_tau_pos, sapo_tau_neg))
    inputs = _grpo_inputs(logp, old_logp, ref_logp, advantages, mask)
    if trainer_state:
        fake.current_gradient_accumulation_steps = trainer_state["accumulation_steps"]
        fake.accelerator.num_processes = trainer_state["world_size"]
        # steps_per_generation defaults to gradient_accumulation_steps (grpo_config.py:1098-1099)
        fake.args.steps_per_generation = trainer_state["accumulation_steps"]
        inputs["num_items_in_batch"] = trainer_state["num_items_in_batch"]
    return trainer._compute_loss(fake, None, inputs)


_GRPO_ARGS = ("logp", "old_logp", "ref_logp", "advantages", "mask", "eps_low", "eps_high", "dual_clip", "beta",
              "kl_kind", "kl_clamp", "kl_ratio_weight", "aggregation", "norm_length", "ratio_level", "policy_loss",
              "cispo_clip", "sapo_tau_pos", "sapo_tau_neg")


def grpo_step(micro_batches, ctx):
    """One rank's share of GRPOTrainer's optimizer step (``--partition``). The generation batch is
    the M micro-batches of every rank, and ``num_items_in_batch`` its unmasked tokens gathered over
    the processes (grpo_trainer.py:2498); each micro-batch's loss is ``_compute_loss`` as it stands,
    because ``loss_is_scaled_for_ga = True`` (grpo_trainer.py:285) stops the Trainer from dividing it
    again (transformers/trainer.py:2111-2119); DDP averages the gradients over the ranks. So 'dapo'
    divides by num_items_in_batch/num_processes (exact); 'grpo' and 'dr_grpo' divide each
    micro-batch's mean over its own rows by the accumulation steps (grpo_trainer.py:3153-3157, 3163-3167)."""
    import torch
    import torch.distributed as dist
    items = torch.tensor(sum(int(mb["mask"].ne(0).sum()) for mb in micro_batches))
    dist.all_reduce(items, group=ctx.group)
    state = {"accumulation_steps": ctx.accumulation_steps, "world_size": ctx.world_size, "num_items_in_batch": items}
    logged = 0.0
    for mb in micro_batches:
        loss = grpo_loss(**{k: mb[k] for k in _GRPO_ARGS if k in mb}, trainer_state=state)
        loss.backward()
        logged += float(loss.detach())
    return logged


def clip(logp, old_logp, advantages, eps_low=0.2, eps_high=None, dual_clip=None):
    import torch
    trainer = _mods().GRPOTrainer

    def one(lp, olp, a):
        fake = _grpo_fake(lp, 0.0, eps_low, eps_high, "bnpo", False, 1)
        mask = torch.ones_like(lp, dtype=torch.long)
        return -trainer._compute_loss(fake, None, _grpo_inputs(lp, olp, olp, a.reshape(1), mask))

    return per_element(one, logp, old_logp, advantages)


# --- DPO ----------------------------------------------------------------------------------

def _dpo_fake(loss_types, loss_weights, beta, label_smoothing, discopop_tau):
    return SimpleNamespace(
        model=_model(False), accelerator=_accelerator(), aux_loss_enabled=False, ld_alpha=None,
        precompute_ref_logps=True, f_divergence_type="reverse_kl", loss_types=loss_types, loss_weights=loss_weights,
        beta=beta, label_smoothing=label_smoothing, use_weighting=False, _total_train_tokens=0, _tp_size=1,
        args=SimpleNamespace(discopop_tau=discopop_tau),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)})


def _dpo_outputs(log_probs):
    import torch
    shape = log_probs.shape
    return SimpleNamespace(log_probs=log_probs, entropy=torch.zeros(shape), mean_logits=torch.zeros(shape),
                           is_top1=torch.zeros(shape, dtype=torch.bool), aux_loss=None)


def _sft_shares(policy_chosen_logps, chosen_lengths):
    """TRL's 'sft' loss type (the chosen tokens' batch mean NLL, dpo_trainer.py:1487-1494) split
    into each pair's share: for pair i, one call on the whole batch — every chosen completion with
    its n_j tokens, pair i's first token carrying its sequence log-probability and every other
    token log-probability 0 — gives −c_i/Σn; times B it is the share whose mean over the pairs
    is TRL's loss (the adapter's only composition)."""
    import torch
    trainer = _mods().DPOTrainer
    b = policy_chosen_logps.shape[0]
    n = [int(v) for v in chosen_lengths.tolist()]
    width = max(n)
    mask = torch.zeros(2 * b, width + 1, dtype=torch.long)
    for j, k in enumerate(n):
        mask[j, 1:k + 1] = 1
    mask[b:, 1] = 1  # one-token rejected completions (the 'sft' loss reads only the chosen half)
    zeros = torch.zeros(b, dtype=policy_chosen_logps.dtype)
    shares = []
    for i in range(b):
        first = torch.where(torch.arange(b) == i, policy_chosen_logps, zeros)
        log_probs = torch.zeros(2 * b, width, dtype=policy_chosen_logps.dtype)
        log_probs = torch.cat([torch.cat([first, zeros]).reshape(2 * b, 1), log_probs[:, 1:]], dim=1)
        inputs = {"input_ids": torch.ones(2 * b, width + 1, dtype=torch.long),
                  "attention_mask": torch.ones(2 * b, width + 1, dtype=torch.long), "completion_mask": mask,
                  "ref_chosen_logps": zeros, "ref_rejected_logps": zeros}
        fake = _dpo_fake(["sft"], [1.0], 0.1, 0.0, 0.05)
        outputs = _dpo_outputs(log_probs)
        shares.append(trainer._compute_loss(fake, lambda outputs=outputs, **kw: outputs, inputs, False).reshape(1) * b)
    return torch.cat(shares)


def dpo_loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
             beta=0.1, loss_type="sigmoid", label_smoothing=0.0, discopop_tau=0.05, reward_shift=0.0,
             rpo_alpha=0.0, nll_aggregation=None, chosen_lengths=None):
    """``rpo_alpha`` with nll_aggregation 'token-mean': DPOConfig(loss_type=[loss_type, 'sft'],
    loss_weights=[1, rpo_alpha]), the loss type per pair as below plus α times each pair's share of
    the 'sft' loss (``_sft_shares``)."""
    import torch
    if reward_shift != 0.0:
        raise NotImplementedError("TRL 1.16.0 bco_pair has no reward shift (δ = 0)")
    if nll_aggregation not in (None, "token-mean"):
        raise NotImplementedError(f"TRL 1.16.0's NLL term (loss_type 'sft') is the chosen tokens' batch mean, not "
                                  f"{nll_aggregation!r}")
    trainer = _mods().DPOTrainer
    losses, chosen, rejected = [], [], []
    for i in range(policy_chosen_logps.shape[0]):
        logps = torch.stack([policy_chosen_logps[i], policy_rejected_logps[i]]).reshape(2, 1)
        outputs = _dpo_outputs(logps)
        fake = _dpo_fake([loss_type], [1.0], beta, label_smoothing, discopop_tau)
        # [prompt, completion] tokens: a one-token completion (completion length 1, so 'ipo' divides by 1).
        inputs = {"input_ids": torch.ones(2, 2, dtype=torch.long), "attention_mask": torch.ones(2, 2, dtype=torch.long),
                  "completion_mask": torch.tensor([[0, 1], [0, 1]]),
                  "ref_chosen_logps": reference_chosen_logps[i].reshape(1),
                  "ref_rejected_logps": reference_rejected_logps[i].reshape(1)}
        loss = trainer._compute_loss(fake, lambda outputs=outputs, **kw: outputs, inputs, False)
        losses.append(loss.reshape(1))
        # The implicit rewards are logged metrics in TRL (detached; per pair here, exact .item() values).
        metrics = fake._metrics["eval"]
        chosen.append(metrics["rewards/chosen"][-1])
        rejected.append(metrics["rewards/rejected"][-1])
    dtype = policy_chosen_logps.dtype
    cat = (lambda xs: torch.cat(xs) if xs else policy_chosen_logps[:0].clone())
    if rpo_alpha != 0.0 and nll_aggregation is not None:
        if chosen_lengths is None:
            raise ValueError("chosen_lengths: required for TRL's 'sft' term")
        losses = [cat(losses) + rpo_alpha * _sft_shares(policy_chosen_logps, chosen_lengths)]
    return {"losses": cat(losses), "chosen_rewards": torch.tensor(chosen, dtype=dtype),
            "rejected_rewards": torch.tensor(rejected, dtype=dtype)}


# --- reference-free preferences ----------------------------------------------------------------

def _cpo_losses(chosen, rejected, beta, label_smoothing, loss_type, simpo_gamma=0.5):
    trainer = _mods().CPOTrainer
    fake = SimpleNamespace(alpha=0.0, beta=beta, label_smoothing=label_smoothing, loss_type=loss_type,
                           simpo_gamma=simpo_gamma, accelerator=_accelerator())
    return trainer.cpo_loss(fake, chosen, rejected)


def cpo(chosen_logps, rejected_logps, beta=0.1, label_smoothing=0.0, cpo_alpha=0.0, nll_aggregation=None,
        chosen_lengths=None):
    if nll_aggregation is not None and cpo_alpha != 0.0:
        # CPOTrainer's NLL is nn.CrossEntropyLoss over the chosen logits inside concatenated_forward
        # (cpo_trainer.py:826-845), which needs a model's logits, not log-probabilities.
        raise NotImplementedError("TRL 1.16.0 CPOTrainer computes cpo_alpha's NLL from the model's logits")
    losses, chosen, rejected = _cpo_losses(chosen_logps, rejected_logps, beta, label_smoothing, "sigmoid")
    return {"losses": losses, "chosen_rewards": chosen, "rejected_rewards": rejected}


def simpo(chosen_logps, rejected_logps, chosen_lengths, rejected_lengths, beta=2.0, gamma=1.0, label_smoothing=0.0):
    # CPOTrainer's simpo takes average log-probabilities (get_batch_logps(average_log_prob=True) divides the
    # token sum by the number of completion tokens): the same division here.
    c = chosen_logps / chosen_lengths.to(chosen_logps.dtype)
    r = rejected_logps / rejected_lengths.to(rejected_logps.dtype)
    losses, chosen, rejected = _cpo_losses(c, r, beta, label_smoothing, "simpo", simpo_gamma=gamma)
    return {"losses": losses, "chosen_rewards": chosen, "rejected_rewards": rejected}


def orpo(chosen_logps, rejected_logps, beta=0.1):
    trainer = _mods().ORPOTrainer
    fake = SimpleNamespace(beta=beta, accelerator=_accelerator())
    ratio_term, chosen, rejected, _, _ = trainer.odds_ratio_loss(fake, chosen_logps, rejected_logps)
    # ORPOTrainer's loss is the chosen NLL minus the mean of β·log σ(log-odds ratio); with average
    # log-probabilities as inputs the NLL of one pair is −chosen_logps (the adapter's only composition).
    dtype = chosen_logps.dtype
    return {"losses": (-chosen_logps.to(ratio_term.dtype) - ratio_term).to(dtype), "chosen_rewards": chosen.to(dtype),
            "rejected_rewards": rejected.to(dtype)}


def kto(policy_logps, reference_logps, desirable, kl_policy_logps, kl_reference_logps, beta=0.1,
        desirable_weight=1.0, undesirable_weight=1.0):
    """One example per call of KTOTrainer._compute_loss (loss_type 'kto', precomputed reference
    log-probabilities): its batch is that example plus the M mismatched completions y′ of the KL
    estimate (TRL's collator forms y′ by rotating the completions of the batch; here they are the
    vector's). The model stand-in returns one-token log-probabilities: the example's, or [kl_m, 0]
    for the KL completions (two tokens wide, so the two calls are told apart)."""
    import torch
    trainer = _mods().KTOTrainer
    m, dtype = kl_policy_logps.shape[0], policy_logps.dtype
    kl_log_probs = torch.cat([kl_policy_logps.reshape(m, 1), torch.zeros(m, 1, dtype=dtype)], dim=1)
    losses, z0 = [], None
    for i in range(policy_logps.shape[0]):
        main = policy_logps[i].reshape(1, 1)

        def model(outputs_for=(main, kl_log_probs), **kw):
            log_probs = outputs_for[0] if kw["input_ids"].shape[1] == 2 else outputs_for[1]
            return SimpleNamespace(log_probs=log_probs, entropy=torch.zeros(log_probs.shape),
                                   mean_logits=torch.zeros(log_probs.shape), aux_loss=None)
        fake = SimpleNamespace(
            model=_model(False), accelerator=_accelerator(), calculate_KL=True, precompute_ref_logps=True,
            aux_loss_enabled=False, loss_type="kto", beta=beta, desirable_weight=desirable_weight,
            undesirable_weight=undesirable_weight, _total_train_tokens=0, _tp_size=1,
            _metrics={"train": defaultdict(list), "eval": defaultdict(list)})
        fake._compute_kl_logps = lambda model, batch, fake=fake: trainer._compute_kl_logps(fake, model, batch)
        inputs = {"input_ids": torch.ones(1, 2, dtype=torch.long), "attention_mask": torch.ones(1, 2, dtype=torch.long),
                  "completion_mask": torch.tensor([[0, 1]]), "label": desirable[i:i + 1].to(torch.bool),
                  "ref_logps": reference_logps[i].reshape(1),
                  "KL_input_ids": torch.ones(m, 3, dtype=torch.long),
                  "KL_attention_mask": torch.ones(m, 3, dtype=torch.long),
                  "KL_completion_mask": torch.tensor([[0, 1, 0]] * m), "ref_KL_logps": kl_reference_logps}
        losses.append(trainer._compute_loss(fake, model, inputs, False).reshape(1))
        z0 = fake._metrics["eval"]["kl"][-1]  # TRL's logged z0 (kl.item(), detached)
    if z0 is None:
        z0 = max(0.0, float((kl_policy_logps - kl_reference_logps).mean()))
    return {"losses": torch.cat(losses) if losses else policy_logps[:0].clone(),
            "kl": torch.tensor(z0, dtype=dtype)}


# --- distillation ---------------------------------------------------------------------------

def _rows(fn, student_logits, teacher_logits):
    import torch
    rows = [fn(student_logits[i].reshape(1, 1, -1), teacher_logits[i].reshape(1, 1, -1)).reshape(1)
            for i in range(student_logits.shape[0])]
    return torch.cat(rows) if rows else student_logits[:, 0].clone()


def generalized_jsd(student_logits, teacher_logits, beta=0.5, temperature=1.0, endpoints="limit"):
    gkd = _mods().GKDTrainer
    return _rows(lambda s, t: gkd.generalized_jsd_loss(s, t, beta=beta, temperature=temperature, reduction="sum"),
                 student_logits, teacher_logits)


def token_kl(student_logits, teacher_logits, direction="reverse", temperature=1.0):
    gkd = _mods().GKDTrainer
    beta = 1.0 if direction == "reverse" else 0.0
    return _rows(lambda s, t: gkd.generalized_jsd_loss(s, t, beta=beta, temperature=temperature, reduction="sum"),
                 student_logits, teacher_logits)


def softmax(logits, temperature=1.0):
    import torch
    utils = _mods().utils
    if logits.dtype not in (torch.float32, torch.float64):
        # TRL has log-probabilities only; in a low dtype they are rounded to it (log_softmax per row),
        # so exp of them would measure this adapter's composition, not a probability TRL computes.
        raise NotImplementedError(f"TRL computes no probabilities; its {logits.dtype} log-probabilities are "
                                  "rounded to that dtype")
    v = logits.shape[-1]
    index = torch.arange(v).expand(logits.shape).contiguous()
    return torch.exp(utils.selective_log_softmax(logits, index, temperature=temperature))


def _iw_opd():
    import os
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl.experimental.iw_opd.iw_opd_trainer import IWOPDTrainer
    return IWOPDTrainer


def sparse_kl(student_logits, teacher_ids, teacher_logps, renormalize="tail", temperature=1.0):
    """IW-OPD's server forward-KL loss (beta = 0) per row: the student's log_softmax(z / temperature)
    as IW-OPDTrainer.compute_loss forms it, then ``_compute_server_forward_kl_loss`` on one token
    (its batchmean over one valid label is that row's KL), with loss_add_tail = (renormalize == 'tail')."""
    import torch
    trainer = _iw_opd()
    fake = SimpleNamespace(loss_add_tail=renormalize == "tail", _reduce_divergence_loss=trainer._reduce_divergence_loss)
    log_q = torch.log_softmax(student_logits / temperature, dim=-1)
    rows = [trainer._compute_server_forward_kl_loss(
        fake, {"topk_logprobs": teacher_logps[i].reshape(1, 1, -1), "topk_token_ids": teacher_ids[i].reshape(1, 1, -1)},
        log_q[i].reshape(1, 1, -1), torch.zeros(1, 1, dtype=torch.long)).reshape(1)
        for i in range(student_logits.shape[0])]
    return torch.cat(rows)


# --- token log-probabilities, entropy, reward model ---------------------------------------------

def token_logprobs(logits, labels, temperature=1.0):
    """``selective_log_softmax(logits, labels, temperature)``: TRL divides the logits by the
    temperature itself (trl/trainer/utils.py:576-577) before log_softmax at the label."""
    return _mods().utils.selective_log_softmax(logits, labels.long(), temperature=temperature)


def entropy(logits, temperature=1.0):
    """``selective_log_softmax_and_entropy(logits, index, temperature=T)``'s entropy, which divides the
    logits by T (trl/trainer/utils.py:702-703) and calls ``entropy_from_logits`` (the index, here 0, only
    selects the log-probability that is discarded)."""
    import torch
    index = torch.zeros(logits.shape[:-1], dtype=torch.long)
    return _mods().utils.selective_log_softmax_and_entropy(logits, index, temperature=temperature)[1]


def reward_pairwise(chosen_rewards, rejected_rewards, center_rewards_coefficient=None, form="sigmoid", margin=None):
    """``RewardTrainer.compute_loss`` (trainer/reward_trainer.py) on a stand-in ``self`` (eval mode, so
    no token count; RewardConfig's center_rewards_coefficient) and a stand-in model whose forward
    returns the 2B scalar rewards as ``logits`` [2B, 1], chosen first (the collator's order, which
    compute_loss splits with torch.chunk); the vector's margins, when given, are ``inputs['margin']``."""
    import torch
    from trl.trainer.reward_trainer import RewardTrainer
    logits = torch.cat([chosen_rewards, rejected_rewards]).reshape(-1, 1)
    fake = SimpleNamespace(model=_model(False), accelerator=_accelerator(),
                           args=SimpleNamespace(center_rewards_coefficient=center_rewards_coefficient),
                           _total_train_tokens=0, _tp_size=1,
                           _metrics={"train": defaultdict(list), "eval": defaultdict(list)})
    inputs = {} if margin is None else {"margin": margin}
    return RewardTrainer.compute_loss(fake, lambda **kw: SimpleNamespace(logits=logits), inputs)


def target():
    version = require("trl", "trl", VERSION, INSTALL)
    load_or_explain(_mods, "trl", INSTALL)
    objectives = {"grpo.advantages": advantages, "grpo.clip": clip, "grpo.loss": grpo_loss, "dpo.loss": dpo_loss,
                  "distill.token_kl": token_kl, "distill.generalized_jsd": generalized_jsd,
                  "distill.softmax": softmax, "preference.cpo": cpo, "preference.simpo": simpo, "preference.orpo": orpo,
                  "preference.kto": kto, "distill.sparse_kl": sparse_kl, "lm.token_logprobs": token_logprobs,
                  "lm.entropy": entropy, "reward.pairwise": reward_pairwise}
    steps = {"grpo.loss": grpo_step, "dpo.loss": micro_batch_mean(dpo_loss)}
    return build("trl", version, objectives, CONVENTIONS, FINDINGS, ARITHMETIC, alternatives=ALTERNATIVES,
                 steps=steps, split_findings=SPLIT_FINDINGS)
