"""``--target verl``: verl 0.9.1 (``verl/trainer/ppo/core_algos.py``) on CPU.

Calls verl's own functions: ``compute_grpo_outcome_advantage``, ``compute_policy_loss_vanilla``,
``agg_loss`` and ``kl_penalty``; ``grpo.loss`` joins them the way the actor loss does
(``verl/workers/utils/losses.py`` ppo_loss: ``policy_loss = pg_loss + kl_loss * kl_loss_coef``,
both aggregated with ``loss_agg_mode``); ``ppo.entropy_bonus`` is that function's entropy term
(``policy_loss -= entropy_coeff * agg_loss(entropy, response_mask, loss_agg_mode)``). verl's package ``__init__`` imports Ray; it is skipped
(Ray stands as a placeholder while core_algos imports) so that Ray need not be installed.
Install: ``pip install --no-deps verl==0.9.1 tensordict==0.10.0 pyvers==0.1.0 cloudpickle orjson``
then ``pip install omegaconf codetiming`` (or ``scripts/install-peers.sh``).

``lm.token_logprobs`` and ``lm.entropy`` call ``verl/utils/torch_functional.py``
``logprobs_from_logits`` and ``entropy_from_logits`` on the logits divided by the temperature as
the FSDP engine does it; ``lm.cross_entropy`` is the SFT trainer's ``sft_loss``
(``verl/workers/utils/losses.py``) on those log-probabilities; ``ppo.value_loss`` is
``compute_value_loss``. ``sft_loss`` reaches ``verl/utils/dataset``, which imports Pillow.

A convention value verl has no setting for (e.g. ``dual_clip=None``: verl always applies the
dual clip) is computed with verl's fixed behaviour: under ``--as-paper`` that is where the
deviations show.

``grpo.loss`` with ``policy_loss`` 'clip-cov' / 'kl-cov' runs verl's own
compute_policy_loss_clip_cov / compute_policy_loss_kl_cov; their token selection (a torch.randperm
draw, a torch.topk) is made the vector's ``selected`` by rebinding core_algos' ``torch`` name, for
the one call, to a stand-in whose randperm/topk answer with it (``_cov_policy``); KL-Cov without
``selected`` runs verl's own top-k. 'reinforce' is compute_policy_loss_gpg (−log_prob·A).
"""
from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace
from unittest import mock

import numpy as np

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
    global_test,
    has_empty_row,
    has_neg_inf_logits,
    load_or_explain,
    log_ratio_clamp_changes,
    loss_mask_labels,
    per_element,
    require,
    where,
)

VERSION = "0.9.1"
INSTALL = ("pip install --no-deps verl==0.9.1 tensordict==0.10.0 pyvers==0.1.0 cloudpickle orjson && "
           "pip install omegaconf codetiming")
CORE = "verl/trainer/ppo/core_algos.py"
RC = "verl/trainer/ppo/rollout_corr_helper.py"
ACTOR_YAML = "verl/trainer/config/actor/actor.yaml"

CONVENTIONS = [
    # compute_grpo_outcome_advantage: torch.std (Bessel, ddof 1) of each group, + epsilon=1e-6;
    # a singleton group gets mean 0 and std 1 (so A = r/(1+eps)): 'raw'.
    C("grpo.advantages", "scale", ("group", "none"), f"{CORE} compute_grpo_outcome_advantage "
      "(norm_adv_by_std_in_grpo=True → 'group'; False → 'none', Dr. GRPO)"),
    C("grpo.advantages", "std_ddof", (1,), f"{CORE} compute_grpo_outcome_advantage (torch.std: ddof 1)"),
    C("grpo.advantages", "eps", (1e-6,), f"{CORE} compute_grpo_outcome_advantage (epsilon=1e-6)"),
    C("grpo.advantages", "degenerate", ("raw",), f"{CORE} compute_grpo_outcome_advantage (singleton group: "
      "mean 0, std 1; all-equal group: 0/(0+eps))"),
    C("grpo.advantages", "baseline", ("mean", "leave-one-out", "none"), f"{CORE} algorithm.adv_estimator: grpo / "
      "reinforce_plus_plus_baseline ('mean'), rloo / rloo_vectorized ('leave-one-out', n/(n − 1)·(s − mean); a "
      "singleton keeps s in rloo ('raw'), gets 0 in rloo_vectorized ('zero')), reinforce_plus_plus ('none')"),
    # compute_policy_loss_vanilla: dual clip always on, clip_ratio_c (default 3.0, must be > 1).
    C("grpo.clip", "dual_clip", (3.0,), f"{CORE} compute_policy_loss_vanilla (clip_ratio_c, default 3.0 in "
      f"{ACTOR_YAML}); log ρ clamped to ±20 before exp"),
    # always on in verl; None keeps the cases without it running, where verl-log-ratio-clamp shows
    C("grpo.clip", "log_ratio_clamp", (20.0, None), f"{CORE} compute_policy_loss_vanilla "
      "(torch.clamp(negative_approx_kl, min=-20.0, max=20.0) before exp)"),
    C("grpo.aggregate", "mode", ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                 "seq-mean-token-sum-norm"),
      f"{CORE} agg_loss (loss_agg_mode, default token-mean in {ACTOR_YAML}); seq-mean-token-mean divides "
      "each row by (|o_i| + 1e-8); fully masked rows are left out of every sequence mean"),
    C("grpo.aggregate", "mean_eps", (1e-8, 0.0), f"{CORE} agg_loss ('seq-mean-token-mean': torch.sum(loss_mat * "
      "loss_mask, dim=-1) / (seq_mask + 1e-8); the other modes have no per-row count, so any ε holds there)"),
    C("ppo.entropy_bonus", "aggregation", ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                           "seq-mean-token-sum-norm"),
      "verl/workers/utils/losses.py ppo_loss (entropy_loss = agg_loss(loss_mat=entropy, loss_mask=response_mask, "
      "loss_agg_mode=loss_agg_mode): the policy term's mode)"),
    C("ppo.entropy_bonus", "mean_eps", (1e-8, 0.0), f"{CORE} agg_loss (as grpo.aggregate)"),
    C("grpo.loss", "dual_clip", (3.0,), f"{CORE} compute_policy_loss_vanilla (clip_ratio_c=3.0)"),
    C("grpo.loss", "log_ratio_clamp", (20.0, None), f"{CORE} compute_policy_loss_vanilla, compute_policy_loss_cispo "
      "and compute_policy_loss_sapo (torch.clamp(negative_approx_kl, min=-20.0, max=20.0) before exp); "
      "compute_policy_loss_gspo and compute_policy_loss_geo_mean form sequence ratios without it"),
    C("grpo.loss", "mean_eps", (0.0,), "verl/workers/utils/losses.py ppo_loss (response_mask.to(bool): agg_loss's "
      "int64 token count + 1e-8 is formed in float32, where the ε is lost)"),
    C("grpo.loss", "kl_kind", ("k3", "abs"), f"{CORE} kl_penalty (kl_loss_type=low_var_kl in {ACTOR_YAML}; 'abs': "
      "(logprob − ref_logprob).abs())"),
    C("grpo.loss", "kl_clamp", (10.0, None), f"{CORE} kl_penalty_forward ('low_var_kl': clamp(kld, -10, 10); 'abs' "
      "is not clamped)"),
    C("grpo.loss", "policy_loss", ("ppo-clip", "gmpo", "cispo", "sapo", "clip-cov", "kl-cov", "reinforce"),
      f"{CORE} policy loss registry (policy_loss.loss_mode 'vanilla', 'geo_mean', 'cispo' = "
      "compute_policy_loss_cispo, 'sapo' = compute_policy_loss_sapo with actor.tau_pos / tau_neg, 'clip_cov' = "
      "compute_policy_loss_clip_cov, 'kl_cov' = compute_policy_loss_kl_cov, 'gpg' = compute_policy_loss_gpg: "
      "−log_prob·A, REINFORCE)"),
    C("grpo.loss", "cispo_clip", ("both", "upper"), f"{CORE} compute_policy_loss_cispo (clamp(ratio, 1 − "
      "clip_ratio_low, 1 + clip_ratio_high); 'upper' is the same code with clip_ratio_low = 1, as this adapter "
      "passes it: a lower bound of 0)"),
    C("grpo.loss", "kl_ratio_weight", (False,), "verl/workers/utils/losses.py ppo_loss (kl_loss = agg_loss(kld))"),
    C("grpo.loss", "aggregation", ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                   "seq-mean-token-sum-norm"),
      f"verl/workers/utils/losses.py ppo_loss (policy and KL terms both use config.loss_agg_mode, default "
      f"token-mean in {ACTOR_YAML})"),
    C("gae.advantages", "whiten", ("centred",), f"{CORE} compute_gae_advantage_return (masked_whiten, "
      "shift_mean=True)"),
    C("gae.advantages", "std_ddof", (1,), "verl/utils/torch_functional.py masked_var (unbiased=True)"),
    C("gae.advantages", "whiten_eps", (1e-8,), "verl/utils/torch_functional.py masked_mean (mask.sum(axis) + 1e-8, "
      "in the mean and the variance) and masked_whiten (torch.rsqrt(var + 1e-8))"),
    C("gae.advantages", "masked_tokens", ("skip",), f"{CORE} compute_gae_advantage_return (values and TD errors "
      "skip observation tokens)"),
    C("gae.kl_rewards", "kind", ("k1", "k2", "k3"), f"{CORE} kl_penalty (algorithm.kl_penalty 'kl' (default), "
      "'mse', 'low_var_kl') in verl/trainer/ppo/ray_trainer.py apply_kl_penalty"),
    C("gae.kl_rewards", "clamp", (None, 10.0), f"{CORE} kl_penalty_forward (only 'low_var_kl' is clamped to ±10)"),
    C("kl.estimator", "kind", ("k3", "k1", "k2", "abs"), f"{CORE} kl_penalty_forward ('low_var_kl'/'k3', 'kl'/'k1', "
      "'mse'/'k2', 'abs')"),
    C("kl.estimator", "clamp", (10.0, None), f"{CORE} kl_penalty_forward (only 'low_var_kl' is clamped to ±10)"),
]
# Conventions that do not vary independently: the std settings only with scale 'group', the
# clamp only on k3.
_LOSS_MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
_VERL_KL = {"kl_kind": "k3", "kl_clamp": 10.0, "kl_ratio_weight": False}
# The estimators whiten with verl.utils.torch_functional.masked_whiten (unbiased variance, shift_mean=True).
ALTERNATIVES = {"grpo.advantages": [{"scale": "group", "std_ddof": 1, "eps": 1e-6, "degenerate": "raw"},
                                    {"scale": "none", "std_ddof": 0, "eps": 0.0, "degenerate": "raw"},
                                    {"scale": "none", "std_ddof": 0, "eps": 0.0, "degenerate": ["raw", "zero"],
                                     "baseline": "leave-one-out"},
                                    {"scale": "whiten", "std_ddof": 1, "eps": 0.0, "degenerate": "raw",
                                     "baseline": "mean"},
                                    {"scale": "whiten", "std_ddof": 1, "eps": 0.0, "degenerate": "zero",
                                     "baseline": "none"}],
                # policy_loss.loss_mode: 'vanilla' (the dual clip always on), 'gspo' (GSPO-token, no dual
                # clip), 'geo_mean' (GMPO: a plain mean over sequences, whatever loss_agg_mode says)
                # the ±20 clamp of log ρ is on the token ratios of 'vanilla' only; kl_aggregation stays None
                # (losses.py ppo_loss: kl_loss = agg_loss(..., loss_agg_mode=config.loss_agg_mode))
                "grpo.loss": [{"dual_clip": 3.0, **_VERL_KL, "aggregation": _LOSS_MODES, "ratio_level": "token",
                               "policy_loss": "ppo-clip", "log_ratio_clamp": 20.0},
                              {"dual_clip": None, **_VERL_KL, "aggregation": _LOSS_MODES,
                               "ratio_level": "sequence-token", "policy_loss": "ppo-clip"},
                              {"dual_clip": None, **_VERL_KL, "aggregation": "seq-mean-token-mean",
                               "ratio_level": "sequence", "policy_loss": "gmpo"},
                              # kl_loss_type='abs' (no clamp) under the vanilla loss
                              {"dual_clip": 3.0, **_VERL_KL, "kl_kind": "abs", "kl_clamp": None,
                               "aggregation": _LOSS_MODES, "ratio_level": "token", "policy_loss": "ppo-clip",
                               "log_ratio_clamp": 20.0},
                              # 'cispo' (no dual clip, loss_agg_mode as configured); 'sapo' (always
                              # seq-mean-token-mean, whatever loss_agg_mode says); both clamp log ρ as 'vanilla'
                              {"dual_clip": None, **_VERL_KL, "aggregation": _LOSS_MODES, "ratio_level": "token",
                               "policy_loss": "cispo", "cispo_clip": ["both", "upper"], "log_ratio_clamp": 20.0},
                              {"dual_clip": None, **_VERL_KL, "aggregation": "seq-mean-token-mean",
                               "ratio_level": "token", "policy_loss": "sapo", "log_ratio_clamp": 20.0},
                              # 'clip_cov', 'kl_cov', 'gpg': no dual clip and no clamp of log ρ
                              {"dual_clip": None, **_VERL_KL, "aggregation": _LOSS_MODES, "ratio_level": "token",
                               "policy_loss": ["clip-cov", "kl-cov", "reinforce"]}],
                # agg_loss's + 1e-8 is in the per-row token means only
                "grpo.aggregate": [{"mode": "seq-mean-token-mean", "mean_eps": 1e-8},
                                   {"mode": [m for m in _LOSS_MODES if m != "seq-mean-token-mean"],
                                    "mean_eps": [0.0, 1e-8]}],
                # ppo_loss reduces the entropy with the same agg_loss and the policy term's mode
                "ppo.entropy_bonus": [{"aggregation": "seq-mean-token-mean", "mean_eps": 1e-8},
                                      {"aggregation": [m for m in _LOSS_MODES if m != "seq-mean-token-mean"],
                                       "mean_eps": [0.0, 1e-8]}],
                "gae.kl_rewards": [{"kind": "k1", "clamp": None}, {"kind": "k2", "clamp": None},
                                   {"kind": "k3", "clamp": 10.0}],
                "kl.estimator": [{"kind": "k3", "clamp": 10.0}, {"kind": "k1", "clamp": None},
                                 {"kind": "k2", "clamp": None}, {"kind": "abs", "clamp": None}]}
CONVENTIONS += [
    C("grpo.rollout_correction", "level", ("sequence", "token"), f"{RC} compute_rollout_correction_weights "
      "(algorithm.rollout_correction.rollout_is: the dataclass default 'sequence', null in the YAML = off) and "
      "compute_rollout_rejection_mask (rollout_rs 'token_k1' / 'seq_sum_k1' / 'seq_mean_k1')"),
    C("grpo.rollout_correction", "correction", ("truncate", "mask"), f"{RC} _parse_rollout_is_threshold (a float "
      "threshold: TIS, clamp(max); 'lower_upper': IcePop, 0 outside the band)"),
    C("grpo.rollout_correction", "seq_log_ratio", ("sum", "mean"), f"{RC} (IS: masked_sum of the log ratios; "
      "rejection 'seq_mean_k1': masked_mean)"),
    C("grpo.rollout_correction", "kept_weight", ("ratio", "one"), f"{RC} (IS weights keep the ratio; the "
      "rejection mask keeps 1)"),
    C("grpo.rollout_correction", "log_ratio_clamp", (20.0,), f"{RC} SAFETY_BOUND = 20.0 (token log ratios, the "
      "sequence sum, and the k1 statistic are clamped to ±20 before exp)"),
]
ALTERNATIVES["grpo.rollout_correction"] = [
    {"level": ["sequence", "token"], "correction": ["truncate", "mask"], "seq_log_ratio": "sum",
     "kept_weight": "ratio", "log_ratio_clamp": 20.0},
    {"level": ["token", "sequence"], "correction": "mask", "seq_log_ratio": ["sum", "mean"], "kept_weight": "one",
     "log_ratio_clamp": 20.0}]
PARAM_DEFAULTS = [
    C("grpo.loss", "beta", (0.001,), f"{ACTOR_YAML} kl_loss_coef: 0.001 (use_kl_loss: false by default)"),
    # compute_policy_loss_kl_cov falls back to 1.0 only when the config holds None; the config has 0.1
    C("grpo.loss", "kl_cov_coef", (0.1,), f"{ACTOR_YAML} policy_loss.ppo_kl_coef: 0.1 (verl/workers/config/"
      "actor.py PolicyLossConfig alike)"),
    C("grpo.loss", "kl_cov_ratio", (0.0002,), f"{ACTOR_YAML} policy_loss.kl_cov_ratio (and clip_cov_ratio): 0.0002"),
]

# verl's core_algos functions compute in the dtype of the tensors they are given.
DISTILL = "verl/trainer/distillation/fsdp/losses.py"
CONVENTIONS.append(C("distill.sparse_kl", "renormalize", ("none",), f"{DISTILL} compute_forward_kl_topk "
                     "(loss_mode=forward_kl_topk: log_softmax of the student gathered at the teacher's ids, the "
                     "stored teacher log-probabilities, no renormalisation, no tail; log_prob_min_clamp None as "
                     "in the YAML; the clamp_min(0) of verl/trainer/distillation/losses.py, applied to the model "
                     "output afterwards, is not exercised)"))

ARITHMETIC = [
    A("distill.sparse_kl", "native", f"{DISTILL}:122-130 and 66-72 (F.log_softmax of the student in the "
      "logits' dtype, gathered, then upcast to float32 for p·(log p − log q))"),
    A("grpo.advantages", "native", f"{CORE}:304-326 (compute_grpo_outcome_advantage: the group's torch.mean and "
      "torch.std rounded to the rewards' dtype, then (score − mean)/(std + epsilon) in it)"),
    A("kl.estimator", "native", f"{CORE}:2228-2245 (kl_penalty_forward: k1, k2 and k3 = exp(ref − logp) − "
      "(ref − logp) − 1 in the inputs' dtype)"),
    A("grpo.loss", "native", f"{CORE}:1336-1361 (compute_policy_loss_vanilla: ratio and clipped terms) and "
      "2240-2245 (low_var_kl) in the log-probabilities' dtype; autograd sums the two partial gradients of logp in "
      "that dtype"),
    A("grpo.clip", "careful", f"{CORE}:1336-1361 (one token: the log ratio, the ratio and the clipped term rounded "
      "to the dtype, the roundings of a term the careful model grants; no cancellation)"),
    A("grpo.aggregate", "careful", f"{CORE}:1170-1203 (agg_loss: torch sums, which accumulate bfloat16/float16 in "
      "float32, and divisions by counts: the roundings of partial sums and weights the careful model grants)"),
]

_LOG_RATIO_CLAMP = Finding(
    "verl-log-ratio-clamp", "deviation",
    "log ρ = logp − old_logp is clamped to ±20 before exp, always: grpo.clip cases without log_ratio_clamp = 20 "
    "differ where |log ρ| > 20 and the clip does not make the term constant (the log-ratio-clamp-20 groups hold it)",
    f"{CORE} compute_policy_loss_vanilla: torch.clamp(negative_approx_kl, min=-20.0, max=20.0)",
    where(objectives=("grpo.clip",), test=log_ratio_clamp_changes))
_ZERO_STD = Finding(
    "verl-zero-std-rounding", "numerics",
    "an all-equal group whose floating-point mean is not exactly the common value gets (r − mean)/(std + 1e-6) "
    "with std of order one ulp: advantages of order 1e-10 instead of 0",
    f"{CORE} compute_grpo_outcome_advantage: (scores[i] - mean) / (std + epsilon)",
    lambda c, dtype: c.objective == "grpo.advantages" and c.conventions.get("scale") == "group"
    and equal_group_mean_inexact(c, dtype))
_SINGLETON_F32 = Finding(
    "verl-singleton-float32", "precision",
    "a singleton group gets id2std = torch.tensor(1.0), a float32 tensor, so std + epsilon = 1 + 1e-6 is rounded "
    "to float32 before the float64 division: A = r/1.00000095 instead of r/1.000001 (relative error 5e-8)",
    f"{CORE} compute_grpo_outcome_advantage: id2mean[idx] = torch.tensor(0.0); id2std[idx] = torch.tensor(1.0)",
    where(objectives=("grpo.advantages",), dtypes=("float64",), flags=("SingletonGroup",),
          conventions={"scale": "group"}))
_EMPTY_ROW_FLOAT16 = Finding(
    "verl-empty-row-float16-nan", "bug",
    "agg_loss 'seq-mean-token-mean' divides a fully masked row's sum 0 by (0 + 1e-8), and 1e-8 is 0 in float16: the "
    "row's mean is 0/0 = NaN; masked_sum keeps it out of the loss, but not out of the gradient, which is NaN",
    f"{CORE} agg_loss: seq_losses = torch.sum(loss_mat * loss_mask, dim=-1) / (seq_mask + 1e-8)",
    where(objectives=("grpo.aggregate",), dtypes=("float16",), conventions={"mode": "seq-mean-token-mean"},
          test=has_empty_row), results=("valid", "acceptable"))


def _masked_whiten(c: np.ndarray) -> np.ndarray:
    """verl.utils.torch_functional.masked_whiten of the B·G values c (one token each), in float64:
    masked_mean divides by Σm + 1e-8, masked_var multiplies by the Bessel factor N/(N − 1), and the
    scale is rsqrt(var + 1e-8)."""
    n = c.size
    mean = c.sum() / (n + 1e-8)
    var = ((c - mean) ** 2).sum() / (n + 1e-8) * (n / (n - 1))
    return (c - mean) / np.sqrt(var + 1e-8)


def _masked_whiten_shows(case, dtype, tolerance) -> bool:
    """Whether masked_whiten's two 1e-8 terms move an advantage of ``case`` beyond ``tolerance``."""
    r = as_array(case.test["inputs"]["rewards"]).astype(np.float64)
    if r.size < 2:
        return False
    singletons = case.conventions.get("degenerate") == "raw" and r.shape[1] == 1
    c = r if case.conventions.get("baseline") == "none" or singletons else r - r.mean(axis=1, keepdims=True)
    want = np.asarray(case.test["expected"]["advantages"], dtype=np.float64)
    return deviation_shows(tolerance, {"advantages": want}, {"advantages": _masked_whiten(c)})


_WHITEN_EPS = Finding(
    "verl-masked-whiten-eps", "deviation",
    "masked_whiten (REINFORCE++ and REINFORCE++-baseline) divides the masked sums by Σm + 1e-8 and scales by "
    "rsqrt(var + 1e-8): a relative error of about 1e-8/var, visible in float64, and, for batches whose variance is "
    "not far above 1e-8 (rewards differing by 2^−40), advantages far below ±1",
    "verl/utils/torch_functional.py masked_mean (mask.sum() + 1e-8) and masked_whiten (torch.rsqrt(var + 1e-8))",
    where(objectives=("grpo.advantages",), conventions={"scale": "whiten"}, shows=_masked_whiten_shows))
_WHITEN_ONE = Finding(
    "verl-masked-var-one-token", "deviation",
    "masked_var raises 'The sum of the mask is one' for a batch of a single response (B = G = 1), whose whitened "
    "advantage the catalog defines as 0 (a degenerate batch)",
    "verl/utils/torch_functional.py masked_var: if mask_sum == 1: raise ValueError",
    where(objectives=("grpo.advantages",), conventions={"scale": "whiten"},
          test=lambda c: as_array(c.test["inputs"]["rewards"]).size == 1))


_GAE_WHITEN_ONE = Finding(
    "verl-gae-masked-var-one-token", "deviation",
    "masked_var raises 'The sum of the mask is one' for a batch with a single valid token, whose whitened advantage "
    "the catalog defines as 0",
    "verl/utils/torch_functional.py masked_var: if mask_sum == 1: raise ValueError",
    where(objectives=("gae.advantages",), flags=("SingleToken",)))


_ICEPOP_ALL_REJECTED = Finding(
    "verl-icepop-all-rejected", "bug",
    "IcePop ('lower_upper' threshold) that rejects every valid token of the batch raises ZeroDivisionError: the "
    "effective-sample-size metric divides 1.0 by the mean square of the (all-zero) applied weights; a training step "
    "whose batch is all outside the band (likely at the sequence level, where the product ratio of long responses "
    "leaves [0.5, 5] easily) crashes instead of contributing no update",
    f"{RC} compute_is_metrics: metrics['rollout_is_eff_sample_size'] = 1.0 / "
    "verl_F.masked_mean(is_weights_normalized.square(), response_mask).item()",
    # in float16 the metric's 0/(0 + 1e-8) is 0/0 (1e-8 rounds to 0): NaN, and 1.0/NaN raises nothing
    where(objectives=("grpo.rollout_correction",), dtypes=("float64", "float32", "bfloat16"),
          conventions={"correction": "mask", "kept_weight": "ratio"},
          test=lambda c: not any(float(k) for row in c.test["expected"]["keep"] for k in row)))


def _token_clamp_moves_rejection(case) -> bool:
    """Whether clamping each token's log-ratio to ±20 before a row's k1 sum or mean (verl's rejection
    mask) keeps a different set of rows than clamping the row's statistic (the catalog)."""
    inputs, args = decoded(case.test["inputs"]), arguments(case)
    valid = inputs["mask"] != 0
    d = np.where(valid, np.clip(inputs["old_logp"] - inputs["rollout_logp"], -20.0, 20.0), 0.0)
    stat = d.sum(axis=1) / (np.maximum(valid.sum(axis=1), 1) if args["seq_log_ratio"] == "mean" else 1)
    keep = (np.log(args["lower"]) <= stat) & (stat <= np.log(args["upper"]))
    want = np.array([[float(k) for k in row] for row in case.test["expected"]["keep"]]).any(axis=1)
    return bool((keep != want)[valid.any(axis=1)].any())


_RS_TOKEN_CLAMP = Finding(
    "verl-rejection-token-clamp", "deviation",
    "the k1 rejection mask clamps every token's log-ratio to ±20 before the sequence sum or mean (the IS weights "
    "clamp the sequence sum itself): a row whose huge token log-ratios cancel in the mean is judged on the clamped "
    "tokens — ±800 and ∓800 become ±20 and ∓20 — which the catalog's log_ratio_clamp (on the unit's log-ratio) "
    "does not express",
    f"{RC} compute_rollout_rejection_mask: log_ratio_safe = torch.clamp(log_ratio, min=-SAFETY_BOUND, "
    "max=SAFETY_BOUND) before _sequence_sum / _sequence_mean",
    where(objectives=("grpo.rollout_correction",), conventions={"level": "sequence", "kept_weight": "one"},
          test=_token_clamp_moves_rejection))
_SPARSE_KL_FLOAT32 = Finding(
    "verl-topk-kl-float32", "precision",
    "forward_kl_topk sums p·(log p − log q) in float32 (kl_divergence upcasts with .float()) whatever the logits' "
    "dtype: float64 inputs get a float32 value (relative error ~1e-7)",
    f"{DISTILL} kl_divergence: log_p = log_p.float(); log_q = log_q.float()",
    where(objectives=("distill.sparse_kl",), dtypes=("float64",)))

FINDINGS = [_SPARSE_KL_FLOAT32, _LOG_RATIO_CLAMP, _SINGLETON_F32, _ZERO_STD, _EMPTY_ROW_FLOAT16,
            _WHITEN_EPS, _WHITEN_ONE, _GAE_WHITEN_ONE, _ICEPOP_ALL_REJECTED, _RS_TOKEN_CLAMP]


def _geo_mean_micro_batch_mean_shows(case, split, tolerance) -> bool:
    """Whether geo_mean's plain torch.mean over each micro-batch moves a row gradient beyond
    ``tolerance``: micro-batch losses are summed and DDP averages the R ranks, so row i weighs
    1/(R·B_mb(i)) instead of 1/B — its policy gradient is B/(R·B_mb(i)) times the exact one. The
    whole row gradient is scaled here (the KL term, weighted right, is small beside it at the
    vectors' β)."""
    test = global_test(case, arguments(case))
    mask = as_array(test["inputs"]["mask"]) != 0
    counted = int(mask.any(axis=1).sum())
    weight = np.ones(mask.shape[0])
    for rank in split:
        for mb in rank:
            weight[list(mb)] = counted / (len(split) * len(mb))
    exact = {f"grad:{n}": np.asarray(g, dtype=np.float64) for n, g in test["grads"].items()}
    deviating = {label: g * weight[:, None] for label, g in exact.items()}
    return deviation_shows(tolerance, exact, deviating)


def _cov_selection_moves_with_micro_batches(case, split) -> bool:
    """Whether verl's per-micro-batch Cov selection differs from the case's global one: each
    micro-batch selects max(1, int(N_mb·ratio)) tokens of its own (compute_policy_loss_clip_cov /
    _kl_cov see one micro-batch), so under Clip-Cov a micro-batch without a selected token still
    draws one (which matters where its A ≠ 0), and KL-Cov's own top-k (no ``selected``) is taken
    per micro-batch, with the micro-batch's means. A given KL-Cov selection is what the adapter
    answers torch.topk with, in every micro-batch: it holds."""
    test = global_test(case, arguments(case))
    inputs, args = decoded(test["inputs"]), arguments(case)
    valid = as_array(inputs["mask"]) != 0
    micro_batches = [list(mb) for rank in split for mb in rank if valid[list(mb)].any()]
    logp, adv = as_array(inputs["logp"]), as_array(inputs["advantages"])
    if "selected" in inputs:
        chosen = as_array(inputs["selected"]) != 0
        return case.conventions.get("policy_loss") == "clip-cov" and any(
            not chosen[mb].any() and (adv[mb] != 0).any() for mb in micro_batches)
    ratio = args.get("kl_cov_ratio", 0.0002)

    def top_k(rows):
        cells = [(i, t) for i in rows for t in np.nonzero(valid[i])[0]]
        a = np.array([adv[i] for i, _ in cells])
        lp = np.array([logp[i, t] for i, t in cells])
        cov = (a - a.mean()) * (lp - lp.mean())
        k = max(1, int(len(cells) * ratio))
        return {cells[j] for j in np.argsort(-cov, kind="stable")[:k]}

    every = [i for i in range(valid.shape[0]) if valid[i].any()]
    return set().union(*(top_k(mb) for mb in micro_batches)) != top_k(every)


# Found by `lossproof check --target verl --partition 2x2 --objective grpo.loss`.
SPLIT_FINDINGS = [
    Finding("verl-geo-mean-micro-batch-mean", "bug",
            "loss_mode 'geo_mean' (GMPO) takes a plain torch.mean over the micro-batch's sequences and ignores "
            "the global normalisers agg_loss uses: the micro-batch losses are summed over gradient accumulation "
            "and the policy term is not multiplied by dp_size, so each sequence weighs 1/(R·B_mb) instead of 1/B "
            "(M times too much for M equal micro-batches)",
            f"{CORE} compute_policy_loss_geo_mean: pg_loss = torch.mean(pg_losses); "
            "verl/workers/engine/fsdp/transformer_impl.py forward_backward_batch (unscaled micro-batch losses)",
            lambda c, dtype, split, tolerance: c.objective == "grpo.loss"
            and c.conventions.get("policy_loss") == "gmpo" and _geo_mean_micro_batch_mean_shows(c, split, tolerance)),
    Finding("verl-cov-micro-batch-selection", "deviation",
            "Clip-Cov and KL-Cov select their tokens per micro-batch: max(1, int(N_mb·ratio)) of each "
            "micro-batch's N_mb valid tokens (KL-Cov's covariance means and top-k over the micro-batch too), so "
            "every micro-batch gets at least one selected token, and the share and choice of tokens depend on "
            "how the batch is split (at the default ratio 2e−4, one token per micro-batch of fewer than 5000 "
            "tokens instead of 2e−4 of the batch)",
            f"{CORE} compute_policy_loss_clip_cov: clip_num = max(int(clip_cov_ratio * response_mask.sum().item()), "
            "1); compute_policy_loss_kl_cov: k_percent_nums = max(1, int(len(cov_lst_all) * kl_cov_ratio)); both "
            "called once per micro-batch (verl/workers/utils/losses.py ppo_loss)",
            lambda c, dtype, split, tolerance: c.objective == "grpo.loss"
            and c.conventions.get("policy_loss") in ("clip-cov", "kl-cov")
            and _cov_selection_moves_with_micro_batches(c, split)),
]

_GRPO_ARGS = ("logp", "old_logp", "ref_logp", "advantages", "mask", "eps_low", "eps_high", "dual_clip", "beta",
              "kl_kind", "kl_clamp", "kl_ratio_weight", "aggregation", "norm_length", "ratio_level", "policy_loss",
              "log_ratio_clamp", "kl_aggregation", "mean_eps", "cispo_clip", "sapo_tau_pos", "sapo_tau_neg",
              "kl_cov_ratio", "kl_cov_coef", "selected")
_AGGREGATE_ARGS = ("values", "mask", "mode", "norm_length", "mean_eps")

_KL_NAMES = {"k1": "k1", "k2": "k2", "k3": "low_var_kl"}


def _core():
    return import_bare("verl.trainer.ppo.core_algos", packages=("verl",), absent=("ray",))


def _actor_config(eps_low, eps_high, dual_clip, aggregation="token-mean", beta=0.0, kl_kind="k3",
                  norm_length=None, sapo_taus=(1.0, 1.05), policy_loss=None):
    from verl.workers.config import ActorConfig
    extra = {} if policy_loss is None else {"policy_loss": policy_loss}
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, **extra,
                       tau_pos=sapo_taus[0], tau_neg=sapo_taus[1],
                       clip_ratio=eps_low, clip_ratio_low=eps_low,
                       clip_ratio_high=eps_low if eps_high is None else eps_high,
                       # verl has no "off" for the dual clip: None keeps its default (see module docstring).
                       clip_ratio_c=3.0 if dual_clip is None else dual_clip,
                       loss_agg_mode=aggregation, use_kl_loss=beta != 0, kl_loss_coef=beta,
                       kl_loss_type=_KL_NAMES.get(kl_kind, kl_kind), loss_scale_factor=norm_length)


def advantages(rewards, scale="group", std_ddof=0, eps=0.0, degenerate="zero", baseline="mean"):
    """One token per response (the outcome reward on it), grouped by ``index``; the estimator is
    chosen by the baseline and scale the case declares (see ALTERNATIVES)."""
    import numpy as np
    import torch
    b, g = rewards.shape
    token_level = rewards.reshape(b * g, 1)
    mask = torch.ones_like(token_level)
    index = np.repeat(np.arange(b), g)
    core = _core()
    if baseline == "leave-one-out":
        estimator = (core.compute_rloo_outcome_advantage if degenerate == "raw"
                     else core.compute_rloo_vectorized_outcome_advantage)
        adv, _ = estimator(token_level_rewards=token_level, response_mask=mask, index=index)
    elif scale == "whiten" and baseline == "mean":
        adv, _ = core.compute_reinforce_plus_plus_baseline_outcome_advantage(
            token_level_rewards=token_level, response_mask=mask, index=index)
    elif scale == "whiten":
        adv, _ = core.compute_reinforce_plus_plus_outcome_advantage(
            token_level_rewards=token_level, response_mask=mask, config=SimpleNamespace(gamma=1.0))
    else:
        adv, _ = core.compute_grpo_outcome_advantage(
            token_level_rewards=token_level, response_mask=mask, index=index,
            epsilon=eps, norm_adv_by_std_in_grpo=scale != "none")
    # verl keeps every group (no dynamic-sampling drop): keep = 1 everywhere.
    return {"advantages": adv.reshape(b, g), "keep": torch.ones_like(rewards[:, 0])}


def clip(logp, old_logp, advantages, eps_low=0.2, eps_high=None, dual_clip=None, log_ratio_clamp=None):
    """``log_ratio_clamp``: verl's fixed ±20 (declared), not a setting."""
    import torch
    core = _core()
    config = _actor_config(eps_low, eps_high, dual_clip)

    def one(lp, olp, a):
        pg_loss, _ = core.compute_policy_loss_vanilla(
            old_log_prob=olp, log_prob=lp, advantages=a, response_mask=torch.ones_like(lp, dtype=torch.bool),
            loss_agg_mode="token-mean", config=config)
        return -pg_loss  # verl returns the loss −C of the single token

    return per_element(one, logp, old_logp, advantages)


def aggregate(values, mask, mode="seq-mean-token-mean", norm_length=None, mean_eps=0.0, *, batch_info=None):
    """``batch_info`` (the distributed step): agg_loss's dp_size, batch_num_tokens, global_batch_size.
    ``mean_eps``: agg_loss's own + 1e-8 (declared)."""
    return _core().agg_loss(loss_mat=values, loss_mask=mask, loss_agg_mode=mode, loss_scale_factor=norm_length,
                            **(batch_info or {}))


def entropy_bonus(entropy, mask, coef=0.01, aggregation="token-mean", norm_length=None, mean_eps=0.0):
    """The entropy term of verl/workers/utils/losses.py ppo_loss: ``entropy_loss = agg_loss(loss_mat=entropy,
    loss_mask=response_mask, loss_agg_mode=loss_agg_mode)``, then ``policy_loss -= entropy_coeff *
    entropy_loss`` (lines 124-128); agg_loss is verl's, the subtraction is that line's."""
    return -coef * aggregate(entropy, mask, aggregation, norm_length)


class _DrawnAs:
    """Stands for ``torch`` inside core_algos while one Cov loss runs: every attribute is torch's,
    except ``randperm`` (Clip-Cov's draw) and ``topk`` (KL-Cov's top-k), which return the vector's
    selection. Only the module's own name is rebound (``_cov_policy``): torch itself is untouched."""

    def __init__(self, torch, randperm=None, topk=None):
        self._torch, self.randperm, self.topk = torch, randperm or torch.randperm, topk or torch.topk

    def __getattr__(self, name):
        return getattr(self._torch, name)


def _cov_policy(policy_loss, selected, logp, old_logp, token_adv, response_mask, eps, cov):
    """verl's Clip-Cov or KL-Cov made to select the vector's tokens (arXiv 2505.22617 §4;
    verl 0.9.1 compute_policy_loss_clip_cov / compute_policy_loss_kl_cov).

    Clip-Cov draws clip_num = max(int(clip_cov_ratio·N), 1) tokens with torch.randperm among the
    valid tokens its PPO clip leaves on the unclipped branch whose covariance lies in (clip_cov_lb,
    clip_cov_ub). The adapter opens that band to (−inf, inf), sets clip_cov_ratio = (|S| + ½)/N so
    that clip_num = |S|, and answers the randperm with a permutation that puts the selected tokens
    (in torch.nonzero's row-major order of the eligible ones, recomputed here with verl's own
    expressions) first. A selected token verl's clip already holds cannot be drawn: such a case
    is not one verl can run, and fails.

    KL-Cov penalises the top k = max(1, int(N·kl_cov_ratio)) valid tokens by covariance. Without
    ``selected`` verl computes them itself from ``kl_cov_ratio`` (the reference's own top-k);
    with it, kl_cov_ratio = (|S| + ½)/N and torch.topk answers with the selected tokens' places
    among the valid ones. Returns (PolicyLossConfig settings, the stand-in for torch or None)."""
    import torch
    eps_low, eps_high = eps
    kl_cov_ratio, kl_cov_coef = cov
    n = int(response_mask.sum())
    if policy_loss == "kl-cov":
        settings = {"loss_mode": "kl_cov", "kl_cov_ratio": kl_cov_ratio, "ppo_kl_coef": kl_cov_coef}
        if selected is None:
            return settings, None
        picked = selected.to(bool)[response_mask]
        places = torch.nonzero(picked).flatten()
        settings["kl_cov_ratio"] = (len(places) + 0.5) / n
        return settings, _DrawnAs(torch, topk=lambda values, k, largest=True: SimpleNamespace(indices=places))
    hi = eps_low if eps_high is None else eps_high
    with torch.no_grad():   # compute_policy_loss_clip_cov's clip_by_origin, same expressions and dtype
        ratio = torch.exp(logp - old_logp)
        clipped = -token_adv * torch.clamp(ratio, 1 - eps_low, 1 + hi) > -token_adv * ratio
        eligible = torch.nonzero(response_mask & ~clipped)
    chosen = selected.to(bool)[eligible[:, 0], eligible[:, 1]]
    order = torch.cat([torch.nonzero(chosen).flatten(), torch.nonzero(~chosen).flatten()])
    settings = {"loss_mode": "clip_cov", "clip_cov_lb": float("-inf"), "clip_cov_ub": float("inf"),
                "clip_cov_ratio": (int(selected.to(bool).sum()) + 0.5) / n}
    return settings, _DrawnAs(torch, randperm=lambda m, **_: order)


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, eps_low=0.2, eps_high=None, dual_clip=None, beta=0.04,
              kl_kind="k3", kl_clamp=None, kl_ratio_weight=False, aggregation="seq-mean-token-mean",
              norm_length=None, ratio_level="token", policy_loss="ppo-clip", log_ratio_clamp=None,
              kl_aggregation=None, mean_eps=0.0, cispo_clip="upper", sapo_tau_pos=1.0, sapo_tau_neg=1.05,
              kl_cov_ratio=0.0002, kl_cov_coef=1.0, selected=None, *, batch_info=None):
    """``batch_info`` (the distributed step): what ppo_loss puts in config.global_batch_info
    (verl/workers/utils/losses.py:64-67). ``log_ratio_clamp``, ``kl_aggregation`` and ``mean_eps``
    are verl's fixed behaviour (declared), not settings. CISPO's 'upper' (no lower bound) is verl's
    two-sided clamp with clip_ratio_low = 1 (a lower bound of 0 < ρ). Clip-Cov and KL-Cov run
    verl's own compute_policy_loss_clip_cov / _kl_cov, made to select ``selected`` (see
    ``_cov_policy``: the randperm and topk they draw with are answered with it); REINFORCE is
    compute_policy_loss_gpg (−log_prob·A)."""
    core = _core()
    if policy_loss == "cispo" and cispo_clip == "upper":
        eps_low, eps_high = 1.0, eps_low if eps_high is None else eps_high
    token_adv = advantages.unsqueeze(-1) * mask
    settings, drawn = None, None
    if policy_loss in ("clip-cov", "kl-cov"):
        settings, drawn = _cov_policy(policy_loss, selected, logp.detach(), old_logp, token_adv,
                                      mask.to(bool), (eps_low, eps_high), (kl_cov_ratio, kl_cov_coef))
    if settings is not None:
        from verl.workers.config.actor import PolicyLossConfig
        settings = PolicyLossConfig(**settings)
    config = _actor_config(eps_low, eps_high, dual_clip, aggregation, beta, kl_kind, norm_length,
                           (sapo_tau_pos, sapo_tau_neg), settings)
    response_mask = mask.to(bool)
    # compute_grpo_outcome_advantage broadcasts the outcome advantage over the response tokens
    # (token_adv above).
    batch_info = {"loss_scale_factor": config.loss_scale_factor, **(batch_info or {})}
    config.global_batch_info.update(batch_info)
    # the registry of ppo_loss (verl/workers/utils/losses.py): GSPO-token is 'gspo', GMPO 'geo_mean'
    loss_mode = {("token", "ppo-clip"): "vanilla", ("sequence-token", "ppo-clip"): "gspo",
                 ("sequence", "gmpo"): "geo_mean", ("token", "cispo"): "cispo",
                 ("token", "sapo"): "sapo", ("token", "clip-cov"): "clip_cov", ("token", "kl-cov"): "kl_cov",
                 ("token", "reinforce"): "gpg"}[(ratio_level, policy_loss)]
    with mock.patch.object(core, "torch", drawn) if drawn is not None else nullcontext():
        pg_loss, _ = core.get_policy_loss_fn(loss_mode)(old_log_prob=old_logp, log_prob=logp, advantages=token_adv,
                                                        response_mask=response_mask,
                                                        loss_agg_mode=config.loss_agg_mode, config=config)
    policy_loss = pg_loss
    if config.use_kl_loss:  # losses.py ppo_loss, lines 132–140
        kld = core.kl_penalty(logprob=logp, ref_logprob=ref_logp, kl_penalty=config.kl_loss_type)
        kl_loss = core.agg_loss(loss_mat=kld, loss_mask=response_mask, loss_agg_mode=config.loss_agg_mode,
                                **config.global_batch_info)
        policy_loss = policy_loss + kl_loss * config.kl_loss_coef
    return policy_loss


def _step(loss_fn, names):
    """One rank's share of the actor update (``--partition``), as the FSDP engine runs it
    (verl/workers/engine/fsdp/transformer_impl.py:724-733 forward_backward_batch): the mini-batch's
    loss-mask tokens all-reduced over the data-parallel group (batch_num_tokens), dp_size, and
    global_batch_size = the mini-batch's sequences on all ranks (ppo_mini_batch_size,
    verl/trainer/ppo/v1/trainer_base.py:1851); each micro-batch's agg_loss is backpropagated as it
    is (gradients accumulate), and agg_loss's ×dp_size cancels DDP's averaging."""
    def step(micro_batches, ctx):
        import torch
        import torch.distributed as dist
        counts = torch.tensor([float(sum(int(mb["mask"].ne(0).sum()) for mb in micro_batches)),
                               float(sum(mb["mask"].shape[0] for mb in micro_batches))], dtype=torch.float64)
        dist.all_reduce(counts, group=ctx.group)
        info = {"dp_size": ctx.world_size, "batch_num_tokens": int(counts[0]), "global_batch_size": int(counts[1])}
        logged = 0.0
        for mb in micro_batches:
            loss = loss_fn(**{k: mb[k] for k in names if k in mb}, batch_info=info)
            loss.backward()
            logged += float(loss.detach())
        return logged
    return step


def gae_advantages(rewards, values, mask, gamma=1.0, lam=1.0, whiten="none", std_ddof=0, masked_tokens="skip",
                   whiten_eps=1e-8):
    """compute_gae_advantage_return (masked_whiten included, its 1e-8: whiten_eps); the catalog's
    outputs are 0 at masked tokens, where verl leaves the carried Â and returns = Â + V: they are
    masked here."""
    import torch
    adv, returns = _core().compute_gae_advantage_return(token_level_rewards=rewards, values=values,
                                                        response_mask=mask, gamma=gamma, lam=lam)
    on = mask != 0
    return {"advantages": torch.where(on, adv, 0.0), "returns": torch.where(on, returns, 0.0)}


def gae_kl_rewards(scores, logp, ref_logp, mask, beta=None, kind="k1", clamp=None):
    """trainer/ppo/ray_trainer.py apply_kl_penalty (not importable without torchdata, a dataloader
    dependency of that module): token_level_scores − β·kl_penalty(old_log_probs, ref_log_prob)·mask,
    with verl's own kl_penalty; the score sits on the last valid token, as verl's reward managers
    place it. verl's batch tensors come from no-grad rollout and reference passes: detached here."""
    import torch
    scores, logp, ref_logp = scores.detach(), logp.detach(), ref_logp.detach()
    n = logp.shape[1]
    last = n - 1 - (mask != 0).flip(1).to(torch.int64).argmax(dim=1)
    at_last = torch.arange(n)[None, :] == last[:, None]
    token_level_scores = torch.where(at_last, scores[:, None].expand_as(logp), 0.0).to(logp.dtype)
    kld = _core().kl_penalty(logp, ref_logp, kl_penalty=_KL_NAMES.get(kind, kind)) * mask
    return {"rewards": torch.where(mask != 0, token_level_scores - beta * kld, 0.0)}


def rollout_correction(old_logp, rollout_logp, mask, level="token", correction="truncate", lower=None, upper=2.0,
                       seq_log_ratio="sum", kept_weight="ratio", log_ratio_clamp=None):
    """The IS weights of compute_rollout_correction_weights (kept_weight 'ratio'), or the rejection
    mask of compute_rollout_rejection_mask with a k1 option (kept_weight 'one'), on
    log_ratio = old_log_prob − rollout_log_prob (rc:964). verl's ±20 clamp is always on."""
    import torch
    helper = import_bare("verl.trainer.ppo.rollout_corr_helper", packages=("verl",), absent=("ray",))
    log_ratio = old_logp - rollout_logp
    if kept_weight == "one":
        if lower is None or upper is None or lower == 0:
            raise NotImplementedError("verl's k1 rejection band needs two positive bounds")
        option = "token_k1" if level == "token" else {"sum": "seq_sum_k1", "mean": "seq_mean_k1"}[seq_log_ratio]
        # the k1 statistic is −log_ratio = log(π_rollout/π_old): the band [lower, upper] on π_old/π_rollout is
        # [1/upper, 1/lower] on its inverse
        keep, _ = helper.compute_rollout_rejection_mask(log_ratio, mask, rollout_rs=option,
                                                        rollout_rs_threshold=f"{1 / upper!r}_{1 / lower!r}")
        return {"weights": keep, "keep": keep}
    if kept_weight != "ratio" or seq_log_ratio != "sum" and level == "sequence":
        raise NotImplementedError("verl's IS weights keep the ratio of the summed log ratios")
    if correction == "truncate":
        if lower is not None or upper is None:
            raise NotImplementedError("verl's TIS has an upper bound only")
        threshold = upper
    else:
        if lower is None or upper is None or lower == 0:
            raise NotImplementedError("verl's IcePop band needs two positive bounds")
        threshold = f"{lower!r}_{upper!r}"
    weights, _ = helper.compute_rollout_correction_weights(log_ratio, mask, rollout_is=level,
                                                           rollout_is_threshold=threshold)
    return {"weights": weights, "keep": torch.where(weights != 0, mask, torch.zeros_like(mask))
            if correction == "mask" else mask}


def kl_estimator(logp, ref_logp, kind="k3", clamp=None):
    return _core().kl_penalty(logprob=logp, ref_logprob=ref_logp, kl_penalty=_KL_NAMES.get(kind, kind))


def _distill():
    return import_bare("verl.trainer.distillation.fsdp.losses", packages=("verl",), absent=("ray",))


def sparse_kl(student_logits, teacher_ids, teacher_logps, renormalize="none"):
    """verl's compute_forward_kl_topk on one packed sequence of the N rows (teacher tensors nested,
    as the trainer passes them; log_prob_min_clamp None, the chunked path off); its per-token loss."""
    import torch
    config = SimpleNamespace(distillation_loss=SimpleNamespace(log_prob_min_clamp=None, use_chunked_topk=False))
    nested = [torch.nested.nested_tensor([x], layout=torch.jagged) for x in (teacher_logps, teacher_ids)]
    out = _distill().compute_forward_kl_topk(student_logits.unsqueeze(0), nested[0], nested[1], config, "thd")
    return out["distillation_losses"][0]



# --- lm.*, ppo.value_loss: token log-probabilities, entropy, the SFT loss and the critic loss -------

TF = "verl/utils/torch_functional.py"
LOSSES = "verl/workers/utils/losses.py"
ENGINE = "verl/workers/engine/fsdp/transformer_impl.py"
CRITIC_YAML = "verl/trainer/config/critic/critic.yaml"

CONVENTIONS += [
    C("lm.cross_entropy", "reduction", ("mean",), f"{LOSSES} sft_loss (-masked_sum(log_prob, mask) / "
      "batch_num_tokens * dp_size: the mean over the counted tokens, or over the normalizer given as the "
      "mini-batch's all-reduced token count; no 'sum' or 'none' setting)"),
    C("ppo.value_loss", "clip_range_value", (0.5, 0.2), f"{CORE} compute_value_loss (cliprange_value, 0.5 in "
      f"{CRITIC_YAML}; always clipped: clip_by_value(vpreds, values − ε, values + ε))"),
    C("ppo.value_loss", "half", (True,), f"{CORE} compute_value_loss (vf_loss = 0.5 * agg_loss(...))"),
    C("ppo.value_loss", "aggregation", ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                        "seq-mean-token-sum-norm"),
      f"{CORE} compute_value_loss → agg_loss (critic loss_agg_mode, the actor's, token-mean by default in "
      f"{CRITIC_YAML}; {LOSSES} value_loss passes response_mask.to(bool), so seq-mean-token-mean's int64 "
      "count + 1e-8 is formed in float32, where the ε is lost)"),
]

ARITHMETIC += [
    A("lm.token_logprobs", "native", f"{TF}:196-205 (logprobs_from_logits_v2: bfloat16/float16 rows through "
      "F.log_softmax in their dtype, whose CPU kernel returns (z − max) − log Σ with the log-sum rounded to the dtype "
      "first: log q_y near 0 cancels; measured up to 0.25 from the float32 result rounded once)"),
    A("lm.entropy", "native", f"{TF}:243-244 (entropy_from_logits: logsumexp(z) − Σ softmax(z)·z in the logits' "
      "dtype: two rounded terms of similar size cancel)"),
    A("lm.cross_entropy", "native", f"{LOSSES}:28-52 (sft_loss on the log-probabilities of {TF}:196-205, "
      "F.log_softmax in the logits' dtype, as lm.token_logprobs)"),
    A("ppo.value_loss", "careful", f"{CORE}:2171-2183 (compute_value_loss: clipped squares, then agg_loss's torch "
      "sums and divisions by counts: the roundings of terms and partial sums the careful model grants)"),
]


def _band_edge(case, dtype: str) -> bool:
    """Whether some selected token of a clipped ppo.value_loss case has V = V_old ± ε in ``dtype``:
    exactly, or because V_old ∓ ε rounded to the dtype (torch, as compute_value_loss forms the bounds)
    lands on V."""
    import torch
    inputs, eps = decoded(case.test["inputs"]), arguments(case)["clip_range_value"]
    if eps is None:
        return False
    values, old = (torch.tensor(inputs[n], dtype=getattr(torch, dtype)) for n in ("values", "old_values"))
    tie = (values == old - eps) | (values == old + eps)
    return bool((tie.numpy() & (inputs["mask"] != 0)).any())


def _temperature_float32_shows(case, dtype: str, tolerance) -> bool:
    """Whether dividing by float32(T) instead of T (the engine's temperature tensor) moves an output
    or gradient of an lm.token_logprobs / lm.entropy case beyond ``tolerance`` (refimpl/arrays/lm.py
    at both temperatures, in float64)."""
    from lossproof.refimpl.arrays import lm as exact_lm
    t = arguments(case)["temperature"]
    if t is None or float(np.float32(t)) == t:
        return False
    inputs, cotangents = decoded(case.test["inputs"]), decoded(case.test["cotangents"])
    name = case.objective.split(".")[1]
    fn, vjp = getattr(exact_lm, name), getattr(exact_lm, f"{name}_vjp")
    if "labels" in inputs:
        inputs["labels"] = inputs["labels"].astype(np.int64)
    label = "logp" if name == "token_logprobs" else "entropy"
    exact, deviating = ({label: fn(**inputs, temperature=temp),
                         "grad:logits": vjp(cotangents[label], **inputs, temperature=temp)["logits"]}
                        for temp in (t, float(np.float32(t))))
    return deviation_shows(tolerance, exact, deviating)


_ENTROPY_NEG_INF = Finding(
    "verl-entropy-neg-inf-nan", "bug",
    "entropy_from_logits forms Σ softmax(z)·z: at a logit of −∞ (an impossible token) that is 0·(−∞) = NaN, so "
    "the row's entropy and gradient are NaN where the exact entropy ignores the token. Repro: "
    "entropy_from_logits(torch.tensor([[0.0, -float('inf')]])) → nan",
    f"{TF} entropy_from_logits: torch.logsumexp(logits, dim=-1) - torch.sum(pd * logits, dim=-1)",
    where(objectives=("lm.entropy",), test=has_neg_inf_logits))
_VALUE_BAND_EDGE = Finding(
    "verl-value-band-edge-gradient", "bug",
    "at V − V_old = ±ε exactly, clip_by_value = torch.max(torch.min(x, hi), lo) splits the gradient of the tie "
    "x = hi (or lo) in halves, and torch.max of the two then equal squares splits it again: the gradient of V is "
    "(½ + ½·½) = ¾ of 2s(V − R) where the loss is differentiable. Repro: lossproof check --target verl --uid "
    "ppo.value_loss:9bf562d7fc462333",
    f"{TF} clip_by_value: torch.max(torch.min(x, tensor_max), tensor_min); {CORE} compute_value_loss",
    lambda c, dtype: c.objective == "ppo.value_loss" and _band_edge(c, dtype))
_TEMPERATURE_FLOAT32 = Finding(
    "verl-temperature-float32", "precision",
    "the FSDP engine builds the batch's temperature tensor in float32 (temperature.to(torch.float32)) and divides "
    "the logits by it cast to their dtype: float64 logits are divided by float32(T), e.g. 0.699999988 for T = 0.7, "
    "so log-probabilities and entropies at such a T are float32-accurate",
    f"{ENGINE} prepare_model_inputs and _scale_logits_by_temperature: temperature.to(torch.float32); "
    "logits / temperature.clamp(min=1e-8).to(logits.dtype)",
    where(objectives=("lm.token_logprobs", "lm.entropy"), dtypes=("float64",), shows=_temperature_float32_shows))
FINDINGS += [_ENTROPY_NEG_INF, _VALUE_BAND_EDGE, _TEMPERATURE_FLOAT32]


def _tf():
    return import_bare("verl.utils.torch_functional", packages=("verl",), absent=("ray",))


def _scaled(logits, temperature):
    """The logits as the FSDP engine hands them to logprobs_from_logits and entropy_from_logits
    (verl/workers/engine/fsdp/transformer_impl.py _scale_logits_by_temperature; that module needs
    peft, so it is not imported): unchanged at T = 1, else divided by the batch's temperature
    tensor, which prepare_model_inputs builds in float32, clamped at 1e-8 and cast to the logits'
    dtype."""
    import torch
    if temperature == 1.0:
        return logits
    t = torch.tensor(temperature, dtype=torch.float32, device=logits.device)
    return logits / t.clamp(min=1e-8).to(logits.dtype)


def token_logprobs(logits, labels, temperature=1.0):
    """logprobs_from_logits on the engine's temperature-scaled logits (flash-attn's Triton
    cross-entropy, its GPU path, is absent on CPU: logprobs_from_logits_v2)."""
    return _tf().logprobs_from_logits(_scaled(logits, temperature), labels)


def entropy(logits, temperature=1.0):
    return _tf().entropy_from_logits(_scaled(logits, temperature))


def cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                  reduction="mean", normalizer=None):
    """sft_loss (the SFT trainer's loss, verl/trainer/sft_trainer.py) on the log-probabilities of
    logprobs_from_logits, right-padded: the loss mask is the labels other than ignore_index
    (_common.loss_mask_labels); batch_num_tokens is the normalizer (the trainer's all-reduced token
    count of the mini-batch) or the local count."""
    import torch
    from tensordict import TensorDict
    if label_smoothing or z_loss or softcap is not None:
        raise NotImplementedError("verl 0.9.1 sft_loss has no label smoothing, z-loss or soft-capping")
    losses = import_bare("verl.workers.utils.losses", packages=("verl",), absent=("ray",))
    counted, targets = loss_mask_labels(logits, labels, ignore_index)
    log_prob = _tf().logprobs_from_logits(logits.unsqueeze(0), targets.unsqueeze(0))
    tokens = int(counted.sum()) if normalizer is None else normalizer
    if float(tokens) != int(tokens):
        raise NotImplementedError("verl's batch_num_tokens is a token count (an integer)")
    data = TensorDict({"dp_size": torch.tensor(1), "batch_num_tokens": torch.tensor(int(tokens)),
                       "response_mask": counted.unsqueeze(0)}, batch_size=[])
    data["pad_mode"] = losses.DatasetPadMode.RIGHT
    return losses.sft_loss(None, {"log_probs": log_prob}, data)[0]


def value_loss(values, old_values, returns, mask, clip_range_value=None, half=False, aggregation="token-mean"):
    """compute_value_loss as the critic's value_loss calls it (verl/workers/utils/losses.py:
    response_mask.to(bool)); verl always clips and halves (clip_range_value None and half False are
    not declared)."""
    vf_loss, _ = _core().compute_value_loss(vpreds=values, returns=returns, values=old_values,
                                            response_mask=mask.to(bool), cliprange_value=clip_range_value,
                                            loss_agg_mode=aggregation)
    return vf_loss


_LM_PPO_OBJECTIVES = {"lm.token_logprobs": token_logprobs, "lm.entropy": entropy, "lm.cross_entropy": cross_entropy,
                      "ppo.value_loss": value_loss}


def target():
    version = require("verl", "verl", VERSION, INSTALL)
    load_or_explain(_core, "verl", INSTALL)  # fail now (exit 2), not in every case
    objectives = {"grpo.advantages": advantages, "gae.advantages": gae_advantages, "gae.kl_rewards": gae_kl_rewards,
                  "grpo.clip": clip, "grpo.aggregate": aggregate, "ppo.entropy_bonus": entropy_bonus,
                  "grpo.loss": grpo_loss, "kl.estimator": kl_estimator,
                  "grpo.rollout_correction": rollout_correction, "distill.sparse_kl": sparse_kl, **_LM_PPO_OBJECTIVES}
    steps = {"grpo.loss": _step(grpo_loss, _GRPO_ARGS), "grpo.aggregate": _step(aggregate, _AGGREGATE_ARGS)}
    return build("verl", version, objectives, CONVENTIONS, FINDINGS, ARITHMETIC, alternatives=ALTERNATIVES,
                 steps=steps, split_findings=SPLIT_FINDINGS, temperature_free=("distill.sparse_kl",))
