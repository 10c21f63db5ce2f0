"""Twins of the libraries behind the conventions of vector set 1.7.0, each written the way that
library writes the computation (``tests/diagnose/test_convention_twins.py``): undeclared, the
console must name the convention; declared, they pass. Each twin computes its library's convention
whatever it is called with, as the library does, and refuses (NotImplementedError: unsupported)
what its library's function cannot be asked for.

    PYTHONPATH=tests lossproof check --target diagnose.convention_twins:MEGATRON_CE --objective lm.cross_entropy
"""
from __future__ import annotations

import torch

from lossproof.refimpl.torch import gae as torch_gae


def megatron_cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                           reduction="mean", normalizer=None, smoothing_classes="others"):
    """Megatron-core 0.16.1 megatron/core/tensor_parallel/cross_entropy.py _VocabParallelCrossEntropy
    on one rank (its per-token loss, averaged over the counted tokens as a trainer's loss mask does):
    loss = log Σ e^{z − max} − (z_y − max); with smoothing, smoothing = ε·V/(V − 1) and
    loss = (1 − smoothing)·loss − smoothing·mean(log_probs). One change: the log-probabilities are
    z − max − log Σ (Megatron takes log(exp_logits / Σ), which underflows to −inf)."""
    if z_loss or softcap is not None or normalizer is not None or reduction != "mean":
        raise NotImplementedError("the vocab-parallel cross-entropy has no z-loss, cap or normalizer")
    counted = labels != ignore_index
    target = torch.where(counted, labels, 0).long()
    shifted = logits - logits.max(dim=-1, keepdim=True).values
    sum_exp = shifted.exp().sum(dim=-1)
    predicted = shifted.gather(-1, target[:, None])[:, 0]
    loss = torch.log(sum_exp) - predicted
    vocab_size = logits.shape[-1]
    if label_smoothing > 0:
        smoothing = label_smoothing * vocab_size / (vocab_size - 1)
        log_probs = shifted - torch.log(sum_exp)[:, None]
        loss = (1.0 - smoothing) * loss - smoothing * log_probs.mean(dim=-1)
    loss = torch.where(counted, loss, torch.zeros_like(loss))
    return loss.sum() / counted.sum()


MEGATRON_CE = {"name": "megatron-ce", "framework": "torch", "dtypes": ["float64"],
               "objectives": {"lm.cross_entropy": megatron_cross_entropy},
               "conventions": {"lm.cross_entropy": {"reduction": ["mean"]}}}
MEGATRON_CE_DECLARED = {**MEGATRON_CE, "name": "megatron-ce-declared",
                        "conventions": {"lm.cross_entropy": {"reduction": ["mean"], "smoothing_classes": ["others"]}}}


def megatron_load_balancing(router_logits, top_k=1, form="switch", seq_len=None, fraction_norm="top_k", mask=None):
    """Megatron-core 0.16.1 megatron/core/transformer/moe/moe_utils.py switch_load_balancing_loss_func
    (fused=False, no padding mask) with the router's top-k routing map, Σ_e (Σ_t probs_te)·tokens_e ·
    E/(topk·T²) without its coefficient, once per layer and the layers' losses summed."""
    if form not in ("switch", "per-layer-sum") or mask is not None:
        raise NotImplementedError("each layer's loss over every token")
    layers = router_logits if router_logits.dim() == 3 else router_logits[None]
    total = 0.0
    for logits in layers:
        probs = torch.softmax(logits, dim=-1)
        num_tokens, num_experts = probs.shape
        routing_map = torch.zeros_like(probs).scatter(-1, torch.topk(logits, top_k, dim=-1).indices, 1.0)
        tokens_per_expert = routing_map.sum(dim=0)
        aggregated_probs_per_expert = probs.sum(dim=0)
        total = total + torch.sum(aggregated_probs_per_expert * tokens_per_expert) * (
            num_experts / (top_k * num_tokens * num_tokens))
    return total


MEGATRON_BALANCE = {"name": "megatron-balance", "framework": "torch", "dtypes": ["float64"],
                    "objectives": {"moe.load_balancing": megatron_load_balancing},
                    "conventions": {"moe.load_balancing": {"form": ["switch", "per-layer-sum"]}}}
MEGATRON_BALANCE_DECLARED = {**MEGATRON_BALANCE, "name": "megatron-balance-declared",
                             "conventions": {"moe.load_balancing": {"form": ["switch", "per-layer-sum"],
                                                                    "fraction_norm": ["top_k"]}}}


def axolotl_topk_kl(student_logits, teacher_ids, teacher_logps, renormalize="none", temperature=1.0, t2_scale=True):
    """axolotl src/axolotl/integrations/kd/topk_logprob/forward_kl.py ``loss`` per row (before its
    division by the token count): the student's logits over kd_temperature, log-softmax over the
    full vocabulary gathered at the teacher's ids, Σ p·(log p − log q), times kd_temperature² when
    it is not 1. Padding ids (log-probability −inf) are its target_mask's zeros."""
    if renormalize != "none":
        raise NotImplementedError("axolotl takes the teacher's log-probabilities as stored")
    student_logits_for_kd = student_logits / temperature
    student_lse = torch.logsumexp(student_logits_for_kd, dim=-1, keepdim=True)
    student_logprobs_topk = torch.gather(student_logits_for_kd, -1, teacher_ids.long()) - student_lse
    valid_mask = teacher_logps > float("-inf")
    target = torch.where(valid_mask, teacher_logps, torch.zeros_like(teacher_logps))
    kd_loss = torch.where(valid_mask, target.exp() * (target - student_logprobs_topk), torch.zeros_like(target))
    kd_loss = kd_loss.sum(dim=-1)
    if temperature != 1.0:
        kd_loss = kd_loss * (temperature ** 2)
    return kd_loss


AXOLOTL_KD = {"name": "axolotl-kd", "framework": "torch", "dtypes": ["float64"],
              "objectives": {"distill.sparse_kl": axolotl_topk_kl},
              "conventions": {"distill.sparse_kl": {"renormalize": ["none"]}}}
AXOLOTL_KD_DECLARED = {**AXOLOTL_KD, "name": "axolotl-kd-declared",
                       "conventions": {"distill.sparse_kl": {"renormalize": ["none"], "t2_scale": [True]}}}


def torchtune_token_mean(values, mask, mode="token-mean", norm_length=None, mean_eps=1e-8, mean_eps_scope="every"):
    """torchtune torchtune/rlhf/rewards.py masked_mean over the whole batch (its PPO loss's token
    mean): (x * mask).sum() / (mask.sum() + 1e-8)."""
    if mode != "token-mean":
        raise NotImplementedError("masked_mean over the whole batch only")
    return (values * mask).sum() / (mask.sum() + 1e-8)


TORCHTUNE_MEAN = {"name": "torchtune-mean", "framework": "torch", "dtypes": ["float64"],
                  "objectives": {"grpo.aggregate": torchtune_token_mean},
                  "conventions": {"grpo.aggregate": {"mode": ["token-mean"], "mean_eps": [1e-8]}}}
TORCHTUNE_MEAN_DECLARED = {**TORCHTUNE_MEAN, "name": "torchtune-mean-declared",
                           "conventions": {"grpo.aggregate": {"mode": ["token-mean"], "mean_eps": [1e-8],
                                                              "mean_eps_scope": ["every"]}}}


def _verl_masked_whiten(values, mask):
    """verl 0.9.1 verl/utils/torch_functional.py masked_whiten(values, mask, shift_mean=True) with its
    masked_mean and masked_var (unbiased) as written there."""
    def masked_mean(v, m):
        return (v * m).sum() / (m.sum() + 1e-8)
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    mask_sum = mask.sum()
    if mask_sum == 1:
        raise NotImplementedError("masked_var: the sum of the mask is one")
    var = variance * (mask_sum / (mask_sum - 1))
    return (values - mean) * torch.rsqrt(var + 1e-8)


def verl_gae(rewards, values, mask, gamma=1.0, lam=1.0, whiten="centred", std_ddof=1, masked_tokens="skip",
             whiten_eps=1e-8):
    """The GAE recursion of the built-in torch backend (observation tokens skipped), then verl's
    masked_whiten, as compute_gae_advantage_return applies it."""
    if whiten != "centred" or std_ddof != 1 or masked_tokens != "skip":
        raise NotImplementedError("verl's compute_gae_advantage_return")
    raw = torch_gae.advantages(rewards, values, mask, gamma=gamma, lam=lam, masked_tokens="skip")
    on = mask != 0
    advantages = _verl_masked_whiten(raw["advantages"], mask)
    return {"advantages": torch.where(on, advantages, 0.0), "returns": raw["returns"]}


VERL_GAE = {"name": "verl-gae", "framework": "torch", "dtypes": ["float64"],
            "objectives": {"gae.advantages": verl_gae},
            "conventions": {"gae.advantages": {"whiten": ["centred"], "std_ddof": [1], "masked_tokens": ["skip"]}}}
VERL_GAE_DECLARED = {**VERL_GAE, "name": "verl-gae-declared",
                     "conventions": {"gae.advantages": {"whiten": ["centred"], "std_ddof": [1], "masked_tokens": ["skip"],
                                                        "whiten_eps": [1e-8]}}}
