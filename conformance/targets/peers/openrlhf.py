"""``--target openrlhf``: OpenRLHF 0.11.2 on CPU.

Calls OpenRLHF's own code: ``models/loss.py`` (``PolicyLoss``, ``DPOLoss``, ``aggregate_loss``),
``models/utils.py`` (``compute_approx_kl``), ``utils/loss_utils.py`` (``get_loss_batch_info``)
and ``trainer/ppo_utils/experience_maker.py`` (``RemoteExperienceMaker.compute_advantages_and_returns``
driven without a model or Ray: the group-norm advantages). ``grpo.loss`` joins the pieces as the
actor does (``trainer/ray/ppo_actor.py`` training step: ``loss = actor_loss + kl_loss * kl_ctl``).

OpenRLHF's modules import DeepSpeed, vLLM, flash-attn and Ray at import time (GPU-only or cluster
packages). They are loaded with the package ``__init__`` files skipped and those packages replaced
by placeholders while importing (never called by the loss code). Install:
``pip install --no-deps openrlhf==0.11.2`` next to ``transformers`` (``pip install trl==1.16.0``
brings it), or ``scripts/install-peers.sh``.
"""
from __future__ import annotations

from types import SimpleNamespace

from conformance.targets.imports import import_bare
from conformance.targets.peers._common import Arithmetic as A
from conformance.targets.peers._common import Convention as C
from conformance.targets.peers._common import (
    Finding,
    arguments,
    build,
    decoded,
    deviation_shows,
    equal_group_mean_inexact,
    has_empty_row,
    load_or_explain,
    log_ratio_clamp_changes,
    per_element,
    require,
    where,
)
from refimpl.arrays import grpo as exact_grpo
from refimpl.arrays import kl as exact_kl

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
    C("grpo.clip", "dual_clip", (None, 3.0), f"{LOSS} PolicyLoss(dual_clip=None; --actor.dual_clip in {CLI}); "
      "log ρ clamped to ±20 before exp"),
    C("grpo.aggregate", "mode", ("token-mean", "seq-mean-token-mean"),
      f"{LOSS} aggregate_loss (token_level_loss=True; False: per-sequence means, each row divided by "
      f"(|o_i| + 1e-8), fully masked rows excluded; --actor.loss_agg_mode in {CLI})"),
    C("grpo.loss", "dual_clip", (None, 3.0), f"{LOSS} PolicyLoss(dual_clip)"),
    C("grpo.loss", "kl_kind", ("k1", "k2", "k3"), f"{UTILS} compute_approx_kl (--algo.kl.estimator, default "
      f"'k1' in {CLI})"),
    C("grpo.loss", "kl_clamp", (10.0,), f"{UTILS} compute_approx_kl (value.clamp(min=-10, max=10), every estimator)"),
    C("grpo.loss", "kl_ratio_weight", (False,), f"{ACTOR} (kl_loss = aggregate_loss(kl, action_mask))"),
    C("grpo.loss", "ratio_level", ("token", "sequence"), f"{LOSS} PolicyLoss(policy_loss_type='gspo'): ratio = "
      "exp(Σ_t Δ·m / max(Σ m, 1)), no clamp (--actor.policy_loss_type, default 'ppo')"),
    C("grpo.loss", "aggregation", ("token-mean", "seq-mean-token-mean"),
      f"{ACTOR} (PolicyLoss token_level_loss = loss_agg_mode == 'token-mean'; the KL term is always a token "
      "mean: aggregate_loss(kl, ...) without token_level_loss)"),
    C("kl.estimator", "kind", ("k1", "k2", "k3"), f"{UTILS} compute_approx_kl (kl_estimator, default 'k1')"),
    C("kl.estimator", "clamp", (10.0,), f"{UTILS} compute_approx_kl (value.clamp(min=-10, max=10))"),
    C("dpo.loss", "loss_type", ("sigmoid", "cdpo", "ipo"), f"{LOSS} DPOLoss (ipo=False: sigmoid, with "
      "label_smoothing ε the cDPO form; ipo=True: IPO eq. 17, label_smoothing ignored)"),
]
# group_norm divides by (std + 1e-9) with ddof 1; dr_grpo does neither.
ALTERNATIVES = {"grpo.advantages": [{"scale": "group", "std_ddof": 1, "eps": 1e-9, "degenerate": "zero"},
                                    {"scale": "none", "std_ddof": 0, "eps": 0.0, "degenerate": "zero"}]}
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


def _with_kl(case) -> bool:
    return case.test["params"].get("beta", 0.0) != 0.0


def _kl_token_mean_shows(case, dtype: str, tolerance) -> bool:
    """Whether taking the KL term's token mean where the case asks for a mean of per-sequence
    means shows in ``dtype``: the loss moves by β·(token mean − sequence mean) of the KL values,
    the gradient by β·KL′ times the difference of the two aggregations' weights (both evaluated by
    refimpl/arrays); nothing moves where β = 0 or every sequence with tokens has as many."""
    inputs, declared = decoded(case.test["inputs"]), arguments(case)
    cotangent = decoded(case.test["cotangents"])["loss"]
    logp, ref, mask = inputs["logp"], inputs["ref_logp"], inputs["mask"]
    kind, clamp = declared["kl_kind"], declared["kl_clamp"]
    kl = exact_kl.estimator(logp, ref, kind, clamp)

    def kl_term(mode):
        weights = exact_grpo.aggregate_vjp(cotangent, kl, mask, mode)["values"]
        return (exact_grpo.aggregate(kl, mask, mode),
                exact_kl.estimator_vjp(weights, logp, ref, kind, clamp)["logp"])

    (token_value, token_grad), (seq_value, seq_grad) = kl_term("token-mean"), kl_term("seq-mean-token-mean")
    loss = exact_grpo.loss(**inputs, **declared)
    grad = exact_grpo.loss_vjp(cotangent, **inputs, **declared)["logp"]
    beta = declared["beta"]
    return deviation_shows(tolerance, {"loss": loss, "grad:logp": grad},
                           {"loss": loss + beta * (token_value - seq_value),
                            "grad:logp": grad + beta * (token_grad - seq_grad)})


_LOG_RATIO_CLAMP = Finding(
    "openrlhf-log-ratio-clamp", "deviation",
    "PolicyLoss clamps log ρ to ±20 before exp (policy_loss_type 'ppo'), which the catalog does not express: "
    "results differ where |log ρ| > 20 and the clip does not make the term constant",
    f"{LOSS} PolicyLoss.forward: raw_policy_log_ratio.clamp(-20, 20)",
    where(objectives=("grpo.clip", "grpo.loss"), test=log_ratio_clamp_changes))
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
    where(objectives=("grpo.loss",), dtypes=("float64",), test=_with_kl))
_KL_TOKEN_MEAN = Finding(
    "openrlhf-kl-token-mean", "deviation",
    "with loss_agg_mode 'seq-mean-token-mean' only the policy term is a per-sequence mean: the actor aggregates "
    "the KL term with aggregate_loss's default token_level_loss=True, which the catalog (one aggregation for both "
    "terms) does not express", f"{ACTOR}: kl_loss = aggregate_loss(kl, experience.action_mask, **loss_batch_info)",
    where(objectives=("grpo.loss",), conventions={"aggregation": "seq-mean-token-mean"},
          shows=_kl_token_mean_shows))
_ROW_EPS = Finding(
    "openrlhf-row-length-eps", "deviation",
    "aggregate_loss(token_level_loss=False) divides each row sum by (|o_i| + 1e-8): a relative error of "
    "1e-8/|o_i|, visible in float64", f"{LOSS} aggregate_loss: seq_loss = ... / (token_counts + 1e-8)",
    lambda c, dtype: dtype == "float64" and "seq-mean-token-mean" in (c.conventions.get("mode"),
                                                                        c.conventions.get("aggregation")))
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
FINDINGS = [_LOG_RATIO_CLAMP, _KL_FLOAT32, _KL_TERM_FLOAT32, _EMPTY_ROW_FLOAT16, _KL_TOKEN_MEAN, _ROW_EPS, _ZERO_STD]

_PACKAGES = ("openrlhf", "openrlhf.models", "openrlhf.utils", "openrlhf.trainer", "openrlhf.trainer.ppo_utils",
             "openrlhf.trainer.ray")
# Imported at module level by the files below, never used by the loss code.
_ABSENT = ("deepspeed", "vllm", "flash_attn", "ray", "openrlhf.trainer.ray.launcher")


def _mod(name):
    return import_bare(f"openrlhf.{name}", _PACKAGES, _ABSENT)


def _batch_info(mask):
    # The actor's loss_batch_info (single process: no DP group, dp_size 1).
    return _mod("utils.loss_utils").get_loss_batch_info(SimpleNamespace(), mask)


def advantages(rewards, scale="group", std_ddof=0, eps=0.0, degenerate="zero"):
    import torch
    maker = _mod("trainer.ppo_utils.experience_maker")
    b, g = rewards.shape
    estimator = "dr_grpo" if scale == "none" else "group_norm"
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


def clip(logp, old_logp, advantages, eps_low=0.2, eps_high=None, dual_clip=None):
    import torch
    loss_fn = _mod("models.loss").PolicyLoss(clip_eps_low=eps_low, clip_eps_high=eps_low if eps_high is None
                                             else eps_high, dual_clip=dual_clip)

    def one(lp, olp, a):
        mask = torch.ones_like(lp, dtype=torch.bool)
        return -loss_fn(lp, olp, a, action_mask=mask, **_batch_info(mask))[0]  # PolicyLoss returns −C

    return per_element(one, logp, old_logp, advantages)


def aggregate(values, mask, mode="seq-mean-token-mean", norm_length=None):
    return _mod("models.loss").aggregate_loss(values, mask, token_level_loss=mode == "token-mean",
                                              **_batch_info(mask))


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, eps_low=0.2, eps_high=None, dual_clip=None, beta=0.04,
              kl_kind="k3", kl_clamp=None, kl_ratio_weight=False, aggregation="seq-mean-token-mean",
              norm_length=None, ratio_level="token", policy_loss="ppo-clip", cispo_clip="upper", sapo_tau_pos=1.0,
              sapo_tau_neg=1.05):
    # OpenRLHF has no CISPO or SAPO: policy_loss stays undeclared (the paper's PPO clip), and the
    # arguments only those read are accepted and unused.
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


def kl_estimator(logp, ref_logp, kind="k3", clamp=None):
    return _mod("models.utils").compute_approx_kl(logp, ref_logp, kl_estimator=kind)


def dpo_loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
             beta=0.1, loss_type="sigmoid", label_smoothing=0.0):
    import torch
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
    return {"losses": cat(losses), "chosen_rewards": cat(chosen), "rejected_rewards": cat(rejected)}


def _load():
    return [_mod(m) for m in ("models.loss", "models.utils", "utils.loss_utils", "trainer.ppo_utils.experience_maker")]


def target():
    version = require("openrlhf", "openrlhf", VERSION, INSTALL)
    load_or_explain(_load, "openrlhf", INSTALL)
    objectives = {"grpo.advantages": advantages, "grpo.clip": clip, "grpo.aggregate": aggregate,
                  "grpo.loss": grpo_loss, "kl.estimator": kl_estimator, "dpo.loss": dpo_loss}
    return build("openrlhf", version, objectives, CONVENTIONS, FINDINGS, ARITHMETIC, alternatives=ALTERNATIVES)
