"""``--target liger``: Liger-Kernel 0.8.5, the pure-PyTorch ``chunked_loss`` modules on CPU with
compilation off (``compiled=False``), and its Triton cross-entropy where Triton can run.

- ``grpo.loss`` and ``grpo.clip``: ``LigerFusedLinearPPOBase._compute_loss_from_logps`` with
  ``LigerFusedLinearGRPOFunction.ppo_loss_fn`` — the per-chunk loss the fused module runs once it
  has the per-token log-probabilities (which it computes from hidden states; the vectors give
  log-probabilities directly). ``grpo.clip``: one token per call, β = 0, ``loss_type='bnpo'``.
- ``dpo.loss``: ``LigerFusedLinearDPOFunction.preference_loss_fn`` on sequence log-probabilities,
  one pair per call (it returns the mean over pairs).
- ``preference.cpo``, ``preference.simpo``, ``preference.orpo``: the ``preference_loss_fn`` of
  ``LigerFusedLinearCPOFunction`` / ``SimPOFunction`` / ``ORPOFunction``, one pair per call (SimPO
  given the sums divided by the lengths, the module's average; ORPO plus the pair's chosen NLL,
  −chosen_logps); ``preference.kto``: ``LigerFusedLinearKTOFunction.preference_loss_fn`` one example
  per call, with z0 computed by the adapter as TRL does (Liger takes it from the caller) and class
  weights 1 only.
- ``kl.estimator`` (k3): ``chunked_loss/grpo_loss.py k3_loss_fn``.
- ``distill.*``: the module ``LigerFusedLinearJSDLoss(compiled=False)`` with identity lm-head
  weights, so that ``hidden @ weight.T`` reproduces the vector's logits exactly (rows selected one
  at a time through ``ignore_index`` labels for the per-row divergences). Infinite logits cannot
  come out of a linear layer: such vectors are outside this interface (``unsupported``).

- ``lm.cross_entropy``: ``LigerCrossEntropyLoss``, the Triton kernel of ``liger_kernel/ops/cross_entropy.py``.
  It runs on a CUDA device (``--device cuda``), or on CPU only through Triton's interpreter
  (``TRITON_INTERPRET=1`` in the environment); otherwise its cases are unsupported, with that reason.

The fused modules compute log-probabilities in float32 whatever the model's dtype
(``fused_linear_ppo.py`` _selective_logprob_forward, ``fused_linear_preference.py`` chunk_forward):
the adapter hands bfloat16/float16 log-probabilities to the GRPO, DPO, preference and k3 loss code as float32,
as the modules do; float64 ones stay float64, so that the loss code itself is checked in float64.

Install: ``pip install --no-deps liger-kernel==0.8.5`` (needs only torch for these modules).
"""
from __future__ import annotations

import numpy as np

from lossproof.conformance import catalog
from lossproof.conformance.targets.peers._common import Arithmetic as A
from lossproof.conformance.targets.peers._common import Convention as C
from lossproof.conformance.targets.peers._common import (
    Finding,
    as_array,
    build,
    decoded,
    deviation_shows,
    label_smoothing_ignored_shows,
    load_or_explain,
    per_element,
    representable_logits,
    require,
    trl_loss_type,
    where,
)

VERSION = "0.8.5"
INSTALL = "pip install --no-deps liger-kernel==0.8.5"
CL = "liger_kernel/chunked_loss"

CONVENTIONS = [
    C("grpo.clip", "dual_clip", (None,), f"{CL}/grpo_loss.py ppo_loss_fn (delta: an upper clamp of ρ, not the "
      "dual clip; default None)"),
    C("grpo.loss", "dual_clip", (None,), f"{CL}/grpo_loss.py ppo_loss_fn"),
    C("grpo.loss", "kl_kind", ("k3",), f"{CL}/grpo_loss.py k3_loss_fn"),
    C("grpo.loss", "kl_clamp", (None,), f"{CL}/grpo_loss.py k3_loss_fn (no clamp)"),
    C("grpo.loss", "kl_ratio_weight", (False, True), f"{CL}/grpo_loss.py LigerFusedLinearGRPOLoss "
      "(use_bias_correction_kl=False)"),
    C("grpo.loss", "ratio_level", ("token", "sequence"), f"{CL}/grpo_loss.py ppo_loss_fn (importance_sampling_level, "
      "default 'token'; 'sequence': log w = Σ_t Δ·m / max(Σ m, 1), GSPO as in TRL)"),
    C("grpo.loss", "aggregation", ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"),
      f"{CL}/grpo_loss.py ppo_loss_fn (loss_type, default 'dapo': token mean; 'grpo': per-sequence means over B "
      "rows, fully masked rows included; 'dr_grpo': Σ/(B·max_completion_length))"),
    C("grpo.loss", "policy_loss", ("ppo-clip", "cispo", "sapo"), f"{CL}/grpo_loss.py ppo_loss_fn (loss_type 'cispo': "
      "-clamp(coef_1, max=epsilon_high).detach()·A·logp, normalised as 'dapo'; 'sapo': -sapo_loss_fn(coef_1, τ)·A "
      "with τ = sapo_temperature_pos where A > 0, else sapo_temperature_neg, normalised as 'grpo'; sequence-level "
      "importance sampling is refused for both)"),
    C("grpo.loss", "cispo_clip", ("raw-upper", "upper"), f"{CL}/grpo_loss.py clip_coef_fn (loss_type='cispo': upper "
      "bound epsilon_high itself, lower bound None; 'upper' is the same code with epsilon_high = 1 + ε_high, as this "
      "adapter passes it)"),
    C("kl.estimator", "kind", ("k3",), f"{CL}/grpo_loss.py k3_loss_fn"),
    C("kl.estimator", "clamp", (None,), f"{CL}/grpo_loss.py k3_loss_fn (no clamp)"),
    C("dpo.loss", "loss_type", ("sigmoid", "hinge", "robust", "exo_pair", "nca_pair", "bco_pair", "sppo_hard",
                                "apo_zero", "apo_down", "discopop"),
      f"{CL}/dpo_loss.py preference_loss_fn (loss_type, default 'sigmoid'; 'ipo' raises NotImplementedError; "
      "label_smoothing is read by 'robust' and 'exo_pair' only; no 'aot')"),
    C("distill.hinton", "t2_scale", (False,), f"{CL}/fused_linear_distillation.py _compute_loss (weight_hard_loss·CE "
      "+ weight_soft_loss·divergence of logits/T, no T²)"),
    C("distill.token_kl", "direction", ("reverse", "forward"), f"{CL}/jsd_loss.py distillation_loss_fn (beta=1: "
      "KL(q‖p); beta=0: KL(p‖q))"),
    C("distill.generalized_jsd", "endpoints", ("kl",), f"{CL}/jsd_loss.py distillation_loss_fn (`if beta == 0` / "
      "`elif beta == 1` branches)"),
]
PARAM_DEFAULTS = [
    C("grpo.loss", "beta", (0.04,), f"{CL}/grpo_loss.py LigerFusedLinearGRPOLoss beta=0.04"),
    C("dpo.loss", "beta", (0.1,), f"{CL}/dpo_loss.py LigerFusedLinearDPOLoss beta=0.1"),
    C("distill.hinton", "alpha", (0.5,), f"{CL}/jsd_loss.py LigerFusedLinearJSDLoss weight_soft_loss=0.5"),
]


ARITHMETIC = [
    A("distill.token_kl", "native", f"{CL}/jsd_loss.py:30-36 (distillation_loss_fn: F.log_softmax and F.kl_div in "
      f"the dtype of the logits, which {CL}/fused_linear_distillation.py:44-50 forms in the inputs' dtype)"),
    A("distill.generalized_jsd", "native", f"{CL}/jsd_loss.py:30-46 (log-softmax, the mixture's logsumexp and "
      "F.kl_div in the logits' dtype)"),
    A("distill.hinton", "native", f"{CL}/jsd_loss.py:30-34 (the soft term in the logits' dtype; only the hard "
      f"term's log-softmax is float32, {CL}/fused_linear_distillation.py:57)"),
    A("grpo.loss", "careful", f"{CL}/fused_linear_ppo.py:32 (per-token log-probabilities are float32) and 530-531 "
      "(old and reference log-probabilities cast with .float())"),
    A("grpo.clip", "careful", f"{CL}/fused_linear_ppo.py:32 and 531 (the ratio of float32 log-probabilities)"),
    A("kl.estimator", "careful", f"{CL}/grpo_loss.py:13 (k3_loss_fn, which ppo_loss_fn calls on the float32 "
      f"log-probabilities of {CL}/fused_linear_ppo.py:32 and 530)"),
    A("dpo.loss", "careful", f"{CL}/fused_linear_preference.py:333 (sequence log-probabilities from a float32 "
      "log-softmax, the reference ones too: 441-457)"),
]

_FLOAT32_DISTILL = Finding(
    "liger-distill-float32", "precision",
    "the distillation modules accumulate the loss in torch.zeros(()) (float32) and take the cross-entropy of "
    ".float() logits: float64 inputs give a float32 result",
    f"{CL}/fused_linear_distillation.py forward (loss_acc = torch.zeros(()))",
    where(objectives=("distill.hinton", "distill.token_kl", "distill.generalized_jsd"), dtypes=("float64",)),
    results=("valid", "acceptable"))


def _float32_rounding_reaches_loss(case) -> bool:
    """Whether rounding old_logp (and ref_logp, when β ≠ 0) to float32 changes a term of the
    loss: a rounded old log-probability of a selected token whose ratio is not clipped (a
    clipped token's policy term is the constant (1 ± ε)·A; CISPO's weight at its cap is constant;
    SAPO's gate is never flat) or whose KL term the ratio weights, or a rounded reference
    log-probability of a selected token."""
    def values(name):
        return as_array(case.test["inputs"][name])

    def rounded(x):
        return x.astype(np.float32).astype(np.float64) != x

    params = case.test["params"]
    eps_low = params.get("eps_low", 0.2)
    eps_high = eps_low if params.get("eps_high") is None else params["eps_high"]
    logp, old = values("logp"), values("old_logp")
    adv = values("advantages")
    adv = adv[:, None] if logp.ndim == 2 else adv
    selected = values("mask") != 0 if "mask" in case.test["inputs"] else np.ones(logp.shape, bool)
    with np.errstate(over="ignore"):
        ratio = np.exp(logp - old)
    with_kl = bool(params.get("beta"))
    weighted = with_kl and case.conventions.get("kl_ratio_weight", False)
    policy = case.conventions.get("policy_loss", "ppo-clip")
    if policy == "cispo":  # the weight min(ρ, cap) follows ρ below the cap only
        cap = eps_high if case.conventions.get("cispo_clip") == "raw-upper" else 1 + eps_high
        unclipped = np.broadcast_to(ratio <= cap, ratio.shape)
    elif policy == "sapo":  # the soft gate follows ρ everywhere
        unclipped = np.ones(ratio.shape, bool)
    else:
        unclipped = np.where(adv > 0, ratio <= 1 + eps_high, ratio >= 1 - eps_low)
    if (rounded(old) & (unclipped | weighted) & selected).any():
        return True
    return with_kl and bool((rounded(values("ref_logp")) & selected).any())


_FLOAT32_PPO = Finding(
    "liger-ppo-float32", "precision",
    "_compute_loss_from_logps casts old and reference log-probabilities with .float(): in float64 the ratio "
    "and the KL term are those of float32-rounded inputs",
    f"{CL}/fused_linear_ppo.py _compute_loss_from_logps: old_per_token_logps_chunk.float()",
    where(objectives=("grpo.loss", "grpo.clip"), dtypes=("float64",), test=_float32_rounding_reaches_loss))
_CDPO = Finding(
    "liger-sigmoid-label-smoothing", "deviation",
    "loss_type='sigmoid' ignores label_smoothing (no cDPO): with ε > 0 the loss is plain DPO",
    f"{CL}/dpo_loss.py preference_loss_fn: loss = -F.logsigmoid(logits_diff).sum() / n_pairs",
    where(objectives=("dpo.loss",), conventions={"loss_type": "sigmoid"},
          shows=label_smoothing_ignored_shows))
_EXO_FLOAT32_EPS = Finding(
    "liger-exo-float32-epsilon", "numerics",
    "loss_type='exo_pair' turns label_smoothing into torch.tensor(ε), a float32 tensor whatever the inputs' dtype, "
    "so log(1 − ε) and log ε are float32-accurate and float64 losses and gradients are off by ~1e-8 relative. "
    "Repro: torch.log1p(-torch.tensor(0.1)).double() − math.log1p(-0.1) = 2.4e-10",
    f"{CL}/dpo_loss.py preference_loss_fn: epsilon = torch.tensor(label_smoothing, device=chosen_logps.device)",
    where(objectives=("dpo.loss",), dtypes=("float64",), conventions={"loss_type": "exo_pair"}))
_DISCOPOP_OVERFLOW = Finding(
    "liger-discopop-exp-overflow", "bug",
    "loss_type='discopop' multiplies torch.exp(-logits_diff) by σ(logits_diff/τ): for βΔ ≪ 0 exp overflows to inf while "
    "the sigmoid underflows to 0, and inf·0 = NaN (value and gradient) where the exact loss is ≈ −βΔ. Repro: "
    "logits = torch.tensor(-1e4); torch.sigmoid(logits / 0.05) * torch.exp(-logits) → nan",
    f"{CL}/dpo_loss.py preference_loss_fn: exp_component = torch.exp(-logits_diff)",
    where(objectives=("dpo.loss",), conventions={"loss_type": "discopop"}, flags=("HugeMargin",)))

def _near_certain(case) -> bool:
    """An average log-probability within 1e-5 of 0, where 1 − exp(p) keeps few correct digits."""
    return any(abs(v) < 1e-5 for name in ("chosen_logps", "rejected_logps") for v in as_array(case.test["inputs"][name]))


_ORPO_LOG1P_EXP = Finding(
    "liger-orpo-log1p-exp", "numerics",
    "the log-odds use torch.log1p(-torch.exp(p)): near p = 0 exp(p) rounds to within one ulp of 1 and "
    "1 − e^p keeps only log10(|p|/u) correct digits (p = −1e-7 in float64: 9 digits; the gradient's "
    "1/(1 − e^p) likewise), where log(−expm1(p)) is accurate. Repro: torch.log1p(-torch.exp(torch.tensor(-1e-12, "
    "dtype=torch.float64))) = −27.631043237893 where log(−expm1(−1e-12)) = −27.631021115929",
    f"{CL}/orpo_loss.py preference_loss_fn: torch.log1p(-torch.exp(chosen_logps))",
    where(objectives=("preference.orpo",), dtypes=("float64",), test=_near_certain))
FINDINGS = [_CDPO, _FLOAT32_DISTILL, _FLOAT32_PPO, _EXO_FLOAT32_EPS, _DISCOPOP_OVERFLOW, _ORPO_LOG1P_EXP]


def _mods():
    from liger_kernel.chunked_loss import (
        dpo_loss,
        fused_linear_ppo,
        grpo_loss,
        jsd_loss,
    )
    return dpo_loss, fused_linear_ppo, grpo_loss, jsd_loss


def _as_liger_logps(*logps):
    """Log-probabilities as the fused modules compute them: float32 at least (see the module docstring)."""
    import torch
    return tuple(lp.to(torch.promote_types(lp.dtype, torch.float32)) for lp in logps)


def _ppo(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, beta, loss_type, max_len, bias_kl,
         importance_sampling_level="token", sapo_taus=(1.0, 1.05)):
    _, ppo, grpo, _ = _mods()
    loss, _metrics = ppo.LigerFusedLinearPPOBase._compute_loss_from_logps(
        per_token_logps=_as_liger_logps(logp)[0], attention_mask_chunk=mask, advantages_chunk=advantages,
        ref_per_token_logps_chunk=ref_logp, old_per_token_logps_chunk=old_logp, full_attention_mask=mask,
        epsilon_low=eps_low, epsilon_high=eps_low if eps_high is None else eps_high, beta=beta, loss_type=loss_type,
        max_completion_length=max_len, ppo_loss_fn=grpo.LigerFusedLinearGRPOFunction.ppo_loss_fn,
        use_bias_correction_kl=bias_kl, importance_sampling_level=importance_sampling_level,
        sapo_temperature_pos=sapo_taus[0], sapo_temperature_neg=sapo_taus[1])
    return loss


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, eps_low=0.2, eps_high=None, dual_clip=None, beta=0.04,
              kl_kind="k3", kl_clamp=None, kl_ratio_weight=False, aggregation="seq-mean-token-mean",
              norm_length=None, ratio_level="token", policy_loss="ppo-clip", cispo_clip="upper", sapo_tau_pos=1.0,
              sapo_tau_neg=1.05):
    # Liger has no dual clip, KL clamp or other estimator: those conventions keep its fixed behaviour.
    # ratio_level is importance_sampling_level, passed through (Liger rejects what it does not know).
    # 'cispo' and 'sapo' are loss types with their own normaliser (token mean; per-sequence means).
    loss_type, eps_high = trl_loss_type("Liger 0.8.5", aggregation, policy_loss, cispo_clip, eps_low, eps_high)
    return _ppo(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, beta, loss_type,
                logp.shape[1] if norm_length is None else norm_length, kl_ratio_weight, ratio_level,
                (sapo_tau_pos, sapo_tau_neg))


def clip(logp, old_logp, advantages, eps_low=0.2, eps_high=None, dual_clip=None):
    import torch

    def one(lp, olp, a):
        mask = torch.ones_like(lp)
        return -_ppo(lp, olp, None, a.reshape(1), mask, eps_low, eps_high, 0.0, "bnpo", 1, False)

    return per_element(one, logp, old_logp, advantages)


def kl_estimator(logp, ref_logp, kind="k3", clamp=None):
    # k3_loss_fn(log_p, log_q) estimates KL[q, p] with log_p the reference (as ppo_loss_fn calls it).
    return _mods()[2].k3_loss_fn(*_as_liger_logps(ref_logp, logp))


_NLL_FROM_LOGITS = ("Liger 0.8.5 computes the NLL term (compute_nll_loss, alpha) from the lm-head logits inside "
                    f"{CL}/fused_linear_preference.py chunk_forward: log-probabilities cannot reach it")


def dpo_loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
             beta=0.1, loss_type="sigmoid", label_smoothing=0.0, discopop_tau=0.05, reward_shift=0.0,
             rpo_alpha=0.0, nll_aggregation=None, chosen_lengths=None):
    import torch
    if reward_shift != 0.0:
        raise NotImplementedError("Liger 0.8.5 bco_pair has no reward shift (δ = 0)")
    if nll_aggregation is not None and rpo_alpha != 0.0:
        raise NotImplementedError(_NLL_FROM_LOGITS)
    fn = _mods()[0].LigerFusedLinearDPOFunction.preference_loss_fn
    policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps = _as_liger_logps(
        policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps)
    losses, chosen, rejected = [], [], []
    full_target = torch.zeros(2, 1, dtype=torch.long)  # one (chosen, rejected) pair: n_pairs = 1
    for i in range(policy_chosen_logps.shape[0]):
        pick = slice(i, i + 1)
        loss, c, r = fn(policy_chosen_logps[pick], policy_rejected_logps[pick], full_target,
                        reference_chosen_logps[pick], reference_rejected_logps[pick], beta=beta, loss_type=loss_type,
                        label_smoothing=label_smoothing, discopop_tau=discopop_tau)
        losses.append(loss.reshape(1))
        chosen.append(c.detach())
        rejected.append(r.detach())
    cat = (lambda xs: torch.cat(xs) if xs else policy_chosen_logps[:0].clone())
    return {"losses": cat(losses), "chosen_rewards": cat(chosen), "rejected_rewards": cat(rejected)}


# --- reference-free and unpaired preferences (the loss functions on log-probabilities) ---------------

def _per_pair(fn, chosen, rejected, **kw):
    """``fn(chosen[i:i+1], rejected[i:i+1], full_target, **kw)`` for every pair (one pair per call:
    the returned Σ/n_pairs is that pair's loss) → (losses, chosen rewards, rejected rewards)."""
    import torch
    full_target = torch.zeros(2, 1, dtype=torch.long)
    outs = [fn(chosen[i:i + 1], rejected[i:i + 1], full_target, **kw) for i in range(chosen.shape[0])]
    cat = (lambda xs: torch.cat(xs) if xs else chosen[:0].clone())
    return (cat([o[0].reshape(1) for o in outs]), cat([o[1].detach().reshape(1) for o in outs]),
            cat([o[2].detach().reshape(1) for o in outs]))


def cpo(chosen_logps, rejected_logps, beta=0.1, label_smoothing=0.0, cpo_alpha=0.0, nll_aggregation=None,
        chosen_lengths=None):
    if nll_aggregation is not None and cpo_alpha != 0.0:
        raise NotImplementedError(_NLL_FROM_LOGITS)
    from liger_kernel.chunked_loss.cpo_loss import LigerFusedLinearCPOFunction
    c, r = _as_liger_logps(chosen_logps, rejected_logps)
    losses, cr, rr = _per_pair(LigerFusedLinearCPOFunction.preference_loss_fn, c, r, beta=beta,
                               label_smoothing=label_smoothing)
    return {"losses": losses, "chosen_rewards": cr, "rejected_rewards": rr}


def simpo(chosen_logps, rejected_logps, chosen_lengths, rejected_lengths, beta=2.0, gamma=1.0, label_smoothing=0.0):
    from liger_kernel.chunked_loss.simpo_loss import LigerFusedLinearSimPOFunction
    c, r = _as_liger_logps(chosen_logps, rejected_logps)
    # The fused module averages the token log-probabilities (loss_type 'simpo': average_log_prob) in float32.
    c, r = c / chosen_lengths.to(c.dtype), r / rejected_lengths.to(r.dtype)
    losses, cr, rr = _per_pair(LigerFusedLinearSimPOFunction.preference_loss_fn, c, r, beta=beta, gamma=gamma,
                               label_smoothing=label_smoothing)
    return {"losses": losses, "chosen_rewards": cr, "rejected_rewards": rr}


def orpo(chosen_logps, rejected_logps, beta=0.1):
    from liger_kernel.chunked_loss.orpo_loss import LigerFusedLinearORPOFunction
    c, r = _as_liger_logps(chosen_logps, rejected_logps)
    # preference_loss_fn returns −β·Σ log σ(log-odds ratio)/n_pairs; the fused module adds the chosen NLL,
    # which for average log-probabilities is −chosen_logps (the adapter's only composition).
    ratio_term, cr, rr = _per_pair(lambda *a, **k: LigerFusedLinearORPOFunction.preference_loss_fn(*a, **k)[:3],
                                   c, r, beta=beta)
    return {"losses": -c + ratio_term, "chosen_rewards": cr, "rejected_rewards": rr}


def kto(policy_logps, reference_logps, desirable, kl_policy_logps, kl_reference_logps, beta=0.1,
        desirable_weight=1.0, undesirable_weight=1.0):
    import torch
    from liger_kernel.chunked_loss.kto_loss import LigerFusedLinearKTOFunction
    if desirable_weight != 1.0 or undesirable_weight != 1.0:
        raise NotImplementedError("Liger 0.8.5 KTO has no class weights (λ_D = λ_U = 1)")
    p, q, kp, kq = _as_liger_logps(policy_logps, reference_logps, kl_policy_logps, kl_reference_logps)
    # The caller computes z0 (Liger takes it as `kl`): TRL's estimate, clamped at 0 and detached.
    z0 = (kp - kq).mean().clamp(min=0).detach()
    labels = desirable.to(torch.bool)
    one = torch.zeros(1, 1, dtype=torch.long)  # full_target of one example: the returned sum is that loss
    losses = [LigerFusedLinearKTOFunction.preference_loss_fn(p[i:i + 1], labels[i:i + 1], one, q[i:i + 1],
                                                              beta=beta, kl=z0)[0].reshape(1)
              for i in range(p.shape[0])]
    return {"losses": torch.cat(losses) if losses else p[:0].clone(), "kl": z0}


# --- distillation through the fused module ------------------------------------------------------

_NEG_INF_MSG = ("infinite logits cannot come out of Liger's fused lm-head (hidden @ weight.T): the "
                "distillation modules take hidden states")


def _jsd(student_logits, teacher_logits, labels, beta, temperature, weight_hard, weight_soft):
    import torch
    jsd = _mods()[3]
    v = student_logits.shape[-1]
    eye = torch.eye(v, dtype=student_logits.dtype)
    module = jsd.LigerFusedLinearJSDLoss(weight_hard_loss=weight_hard, weight_soft_loss=weight_soft, beta=beta,
                                         temperature=temperature, compiled=False)
    return module(student_logits, eye, teacher_logits, eye.clone(), labels)


def _per_row(student_logits, teacher_logits, beta, temperature):
    import torch
    representable_logits(student_logits, teacher_logits, why=_NEG_INF_MSG)
    n = student_logits.shape[0]
    out = []
    for i in range(n):
        labels = torch.full((n,), -100, dtype=torch.long)
        labels[i] = 0  # only row i counts: the loss is that row's divergence (divided by 1 valid token)
        out.append(_jsd(student_logits, teacher_logits, labels, beta, temperature, 0.0, 1.0).reshape(1))
    return torch.cat(out) if out else student_logits[:, 0].clone()


def generalized_jsd(student_logits, teacher_logits, beta=0.5, temperature=1.0, endpoints="limit"):
    return _per_row(student_logits, teacher_logits, beta, temperature)


def token_kl(student_logits, teacher_logits, direction="reverse", temperature=1.0):
    return _per_row(student_logits, teacher_logits, 1.0 if direction == "reverse" else 0.0, temperature)


def hinton(student_logits, teacher_logits, labels, temperature=1.0, alpha=0.5, t2_scale=True):
    representable_logits(student_logits, teacher_logits, why=_NEG_INF_MSG)
    # beta=0: the soft term is KL(p‖q) of logits/T; no T² factor exists in Liger (t2_scale=False).
    return _jsd(student_logits, teacher_logits, labels, 0.0, temperature, 1.0 - alpha, alpha)



# --- lm.cross_entropy: the Triton cross-entropy kernel ---------------------------------------------

CE = "liger_kernel/ops/cross_entropy.py"
CE_MODULE = "liger_kernel/transformers/cross_entropy.py"

CONVENTIONS += [
    C("lm.cross_entropy", "reduction", ("mean", "sum", "none"), f"{CE_MODULE} LigerCrossEntropyLoss (reduction, "
      f"default 'mean': Σ/n_non_ignore; label_smoothing (PyTorch's definition), lse_square_scale (the z-loss) and "
      f"softcap in {CE} liger_cross_entropy_kernel)"),
]
ARITHMETIC += [
    A("lm.cross_entropy", "careful", f"{CE}:31-60 (liger_cross_entropy_kernel: the online max and sum of "
      "exponentials, the loss and the gradient of each row in float32 registers, rounded to the logits' dtype when "
      "stored)"),
]
def _ce_float32_shows(case, dtype: str, tolerance) -> bool:
    """Whether computing lm.cross_entropy in float32 (refimpl/arrays/lm.py on the logits rounded to
    float32) moves its loss or gradient beyond ``tolerance``, the float64 bound."""
    from lossproof.conformance.numbers import decode_exact
    from lossproof.refimpl.arrays import lm as exact_lm
    inputs, kw = decoded(case.test["inputs"]), dict(case.test["params"], **case.conventions)
    labels = inputs["labels"].astype(np.int64)
    cotangent = decoded(case.test["cotangents"])["loss"].astype(np.float32)
    logits = inputs["logits"].astype(np.float32)
    deviating = {"loss": exact_lm.cross_entropy(logits, labels, **kw),
                 "grad:logits": exact_lm.cross_entropy_vjp(cotangent, logits, labels, **kw)["logits"]}
    exact = {"loss": decode_exact(case.test["expected"]["loss"]), "grad:logits": decode_exact(case.test["grads"]["logits"])}
    return deviation_shows(tolerance, exact, deviating)


_CE_FLOAT32 = Finding(
    "liger-cross-entropy-float32", "precision",
    "liger_cross_entropy_kernel loads each row with .to(tl.float32) (online softmax, loss and gradient in float32) "
    "and stores the loss in a float64 tensor: float64 logits get float32-accurate losses and gradients",
    f"{CE} liger_cross_entropy_kernel: X_block = tl.load(...).to(tl.float32)",
    where(objectives=("lm.cross_entropy",), dtypes=("float64",), shows=_ce_float32_shows))
FINDINGS += [_CE_FLOAT32]

# Objectives computed by Triton kernels: they run on a CUDA device (lossproof check --target liger --device
# cuda), or on CPU through Triton's interpreter when TRITON_INTERPRET=1 is set before Liger is imported.
TRITON_ONLY = ("lm.cross_entropy",)
TRITON_FINDINGS = ("liger-cross-entropy-float32",)


def triton_runnable(device: str = "cpu") -> bool:
    """Whether Liger's Triton kernels can run here on ``device``: a CUDA device, or their interpreted
    form (Triton's interpreter, chosen when liger_kernel/ops was imported with TRITON_INTERPRET=1)."""
    if device.startswith("cuda"):
        return True
    from liger_kernel.ops import cross_entropy as ops
    from triton.runtime.interpreter import InterpretedFunction
    return isinstance(ops.liger_cross_entropy_kernel, InterpretedFunction)


_TRITON_CPU = ("Liger 0.8.5's cross-entropy is a Triton kernel (liger_kernel/ops/cross_entropy.py): run it on a "
               "CUDA device (lossproof check --target liger --device cuda), or on CPU through Triton's interpreter "
               "(TRITON_INTERPRET=1 lossproof check --target liger)")


def _triton_arguments(rows, labels, ignore_index, vocabulary, softcap, reduction, normalizer) -> None:
    """Refuse (unsupported, with the reason) what Liger's Triton cross-entropy cannot run here or
    cannot express: no CUDA device and no interpreter; a normalizer; softcap under the interpreter;
    labels the kernel would read out of bounds."""
    if not triton_runnable(rows.device.type):
        raise NotImplementedError(_TRITON_CPU)
    if normalizer is not None and reduction == "mean":
        raise NotImplementedError("Liger's cross-entropy divides by its own non-ignored count (no normalizer)")
    if softcap is not None and rows.device.type != "cuda":
        raise NotImplementedError("softcap under Triton's interpreter: the kernel's softcap.to(tl.float32) needs the "
                                  "scalar tensor the device launcher makes of a float argument; run on CUDA")
    # The kernel loads Y[i] for each of the N rows and X[i, y] without bounds checks: a shorter label
    # vector or a label outside [0, V) reads out of bounds (Triton's interpreter crashes the process; on
    # the device an illegal address or a garbage read). Such inputs are not run.
    counted = labels != ignore_index
    if labels.shape != rows.shape[:1] or bool(((labels[counted] < 0) | (labels[counted] >= vocabulary)).any()):
        raise NotImplementedError("labels not one per row in [0, V) or ignore_index: Liger's kernel reads them "
                                  "without a bounds check; not run")


def cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                  reduction="mean", normalizer=None):
    """LigerCrossEntropyLoss(ignore_index, lse_square_scale=z_loss, label_smoothing, reduction, softcap).
    The kernel writes the gradient into its input in place (liger_kernel/ops/cross_entropy.py: 'store
    X_ptr gradient in X_ptr'): it gets a copy, as it gets a model's output in training."""
    _triton_arguments(logits, labels, ignore_index, logits.shape[-1], softcap, reduction, normalizer)
    from liger_kernel.transformers.cross_entropy import LigerCrossEntropyLoss
    loss_fn = LigerCrossEntropyLoss(ignore_index=ignore_index, lse_square_scale=z_loss,
                                    label_smoothing=label_smoothing, reduction=reduction, softcap=softcap)
    return loss_fn(logits.clone(), labels)


# --- lm.linear_cross_entropy: the fused lm-head cross-entropy (declared where the catalog has it) --------

FLCE = "liger_kernel/ops/fused_linear_cross_entropy.py"
FLCE_MODULE = "liger_kernel/transformers/fused_linear_cross_entropy.py"
LINEAR = "lm.linear_cross_entropy"
_HAS_LINEAR = any(o.id == LINEAR for o in catalog.OBJECTIVES)


def linear_cross_entropy(hidden, weight, labels, bias=None, ignore_index=-100, label_smoothing=0.0, z_loss=0.0,
                         softcap=None, reduction="mean", normalizer=None):
    """LigerFusedLinearCrossEntropyLoss(ignore_index, lse_square_scale=z_loss, label_smoothing, reduction,
    softcap)(weight, hidden, labels, bias): per chunk of rows the logits hidden @ weight.T (+ bias) in the
    inputs' dtype, then the cross-entropy kernel of lm.cross_entropy (same Triton conditions)."""
    _triton_arguments(hidden, labels, ignore_index, weight.shape[0], softcap, reduction, normalizer)
    from liger_kernel.transformers.fused_linear_cross_entropy import (
        LigerFusedLinearCrossEntropyLoss,
    )
    loss_fn = LigerFusedLinearCrossEntropyLoss(ignore_index=ignore_index, lse_square_scale=z_loss,
                                               label_smoothing=label_smoothing, reduction=reduction, softcap=softcap)
    return loss_fn(weight, hidden, labels, bias)


if _HAS_LINEAR:
    CONVENTIONS.append(C(LINEAR, "reduction", ("mean", "sum", "none"), f"{FLCE_MODULE} "
                         "LigerFusedLinearCrossEntropyLoss (reduction, default 'mean': Σ/n_non_ignore; no normalizer)"))
    ARITHMETIC.append(A(LINEAR, "careful", f"{FLCE}:160-170 (the logits of a chunk by torch.mm in the inputs' "
                        "dtype, then liger_cross_entropy_kernel in float32 registers)"))
    FINDINGS.append(Finding(
        "liger-fused-linear-cross-entropy-float32", "precision",
        "fused_linear_cross_entropy_forward accumulates the per-token losses in torch.zeros(BT, dtype=torch.float32) "
        "and runs the float32 cross-entropy kernel: float64 inputs give a float32 loss (narrower dtype)",
        f"{FLCE} fused_linear_cross_entropy_forward: loss_1d = torch.zeros(BT, dtype=torch.float32)",
        where(objectives=(LINEAR,), dtypes=("float64",)), results=("valid", "acceptable")))
    TRITON_ONLY += (LINEAR,)
    TRITON_FINDINGS += ("liger-fused-linear-cross-entropy-float32",)


def target():
    version = require("liger_kernel", "liger-kernel", VERSION, INSTALL)
    load_or_explain(_mods, "liger-kernel", INSTALL)
    objectives = {"grpo.loss": grpo_loss, "grpo.clip": clip, "kl.estimator": kl_estimator, "dpo.loss": dpo_loss,
                  "distill.hinton": hinton, "distill.token_kl": token_kl, "distill.generalized_jsd": generalized_jsd,
                  "preference.cpo": cpo, "preference.simpo": simpo, "preference.orpo": orpo, "preference.kto": kto,
                  "lm.cross_entropy": cross_entropy, **({LINEAR: linear_cross_entropy} if _HAS_LINEAR else {})}
    return build("liger", version, objectives, CONVENTIONS, FINDINGS, ARITHMETIC)
