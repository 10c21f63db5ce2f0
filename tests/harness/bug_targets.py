"""Small PyTorch targets written from the papers' formulas, each as a correct twin and as a
mutant carrying one real bug class. The harness must fail every mutant and pass every twin.

Only valid vectors are judged here (these sketches do not validate their input)."""
from __future__ import annotations

import torch


def _adv(rewards, std_ddof, eps):
    mean = rewards.mean(dim=1, keepdim=True)
    g = rewards.shape[1]
    std = rewards.std(dim=1, keepdim=True, correction=std_ddof) if g > std_ddof else torch.zeros_like(mean)
    degenerate = (rewards == rewards[:, :1]).all(dim=1, keepdim=True) | (g == 1)
    adv = torch.where(degenerate, torch.zeros_like(rewards), (rewards - mean) / (std + eps))
    return {"advantages": adv, "keep": torch.ones(rewards.shape[0], dtype=rewards.dtype)}


def advantages_twin(rewards, scale="group", std_ddof=0, eps=0.0, degenerate="zero"):
    return _adv(rewards, std_ddof, eps)


def advantages_sample_std(rewards, scale="group", std_ddof=0, eps=0.0, degenerate="zero"):
    """Bug: the sample std (torch.std's default correction=1) is used whatever was declared
    (the article's example needs the population std: (0,1,1,0) → std 0.5)."""
    return _adv(rewards, 1, eps)


ADVANTAGE_CONVENTIONS = {"grpo.advantages": {"std_ddof": [0, 1], "eps": "*"}}


def _kl(log_a, log_b):
    """Σ a·(log a − log b) over the last axis, with 0·log 0 = 0."""
    a = log_a.exp()
    return torch.where(a > 0, a * (log_a - log_b), torch.zeros_like(a)).sum(-1)


def _hinton(student_logits, teacher_logits, labels, temperature, alpha, t2_scale, apply_t2):
    ce = -torch.log_softmax(student_logits, -1).gather(-1, labels[:, None]).squeeze(-1)
    log_q = torch.log_softmax(student_logits / temperature, -1)
    log_p = torch.log_softmax(teacher_logits / temperature, -1)
    s = temperature**2 if (t2_scale and apply_t2) else 1.0
    return ((1 - alpha) * ce + alpha * s * _kl(log_p, log_q)).mean()


def hinton_twin(student_logits, teacher_logits, labels, temperature=1.0, alpha=0.5, t2_scale=True):
    return _hinton(student_logits, teacher_logits, labels, temperature, alpha, t2_scale, True)


def hinton_no_t2(student_logits, teacher_logits, labels, temperature=1.0, alpha=0.5, t2_scale=True):
    """Bug: the soft term is not multiplied by T² (Hinton et al. §2 ask for it)."""
    return _hinton(student_logits, teacher_logits, labels, temperature, alpha, t2_scale, False)


HINTON_CONVENTIONS = {"distill.hinton": {"t2_scale": [True, False]}}


def _token_kl(student_logits, teacher_logits, direction, temperature):
    log_q = torch.log_softmax(student_logits / temperature, -1)
    log_p = torch.log_softmax(teacher_logits / temperature, -1)
    return _kl(log_q, log_p) if direction == "reverse" else _kl(log_p, log_q)


def token_kl_twin(student_logits, teacher_logits, direction="reverse", temperature=1.0):
    return _token_kl(student_logits, teacher_logits, direction, temperature)


def token_kl_swapped(student_logits, teacher_logits, direction="reverse", temperature=1.0):
    """Bug: KL(p‖q) computed where KL(q‖p) (student first, MiniLLM §2.1) was asked, and back."""
    return _token_kl(student_logits, teacher_logits, "forward" if direction == "reverse" else "reverse",
                     temperature)


def token_kl_float32_accumulation(student_logits, teacher_logits, direction="reverse", temperature=1.0):
    """Bug: a float64 function that computes in float32 internally and casts the result back."""
    out = _token_kl(student_logits.float(), teacher_logits.float(), direction, temperature)
    return out.to(student_logits.dtype)


TOKEN_KL_CONVENTIONS = {"distill.token_kl": {"direction": ["reverse", "forward"]}}


def _clip(logp, old_logp, advantages, eps_low, eps_high, pick):
    eps_high = eps_low if eps_high is None else eps_high
    ratio = torch.exp(logp - old_logp)
    return pick(ratio * advantages, ratio.clamp(1 - eps_low, 1 + eps_high) * advantages)


def clip_twin(logp, old_logp, advantages, eps_low=0.2, eps_high=None, dual_clip=None):
    return _clip(logp, old_logp, advantages, eps_low, eps_high, torch.minimum)


def clip_max(logp, old_logp, advantages, eps_low=0.2, eps_high=None, dual_clip=None):
    """Bug: max instead of min in the clipped surrogate (the optimistic bound)."""
    return _clip(logp, old_logp, advantages, eps_low, eps_high, torch.maximum)


def clip_attached_old(logp, old_logp, advantages, eps_low=0.2, eps_high=None, dual_clip=None):
    """Bug: the old log-probs are attached to the current graph (TRL-style on-policy shortcut
    without .detach()): the value is right, the ratio's gradient vanishes."""
    attached_old = logp + (old_logp - logp).detach()
    return _clip(logp, attached_old, advantages, eps_low, eps_high, torch.minimum)


def _future(logp, ref_logp, mask, include_current):
    k = (logp - ref_logp) * mask
    suffix = k.flip(-1).cumsum(-1).flip(-1)
    return suffix if include_current else suffix - k


def future_cost_twin(logp, ref_logp, mask, clip=None, window=None):
    return _future(logp, ref_logp, mask, False).detach()


def future_cost_with_current(logp, ref_logp, mask, clip=None, window=None):
    """Bug: the future KL cost F_t includes the current token's own k_t (Σ_{u≥t} not Σ_{u>t})."""
    return _future(logp, ref_logp, mask, True).detach()


def _token_mean(values, mask, denominator):
    return (values * mask).sum() / denominator


def aggregate_twin(values, mask, mode="token-mean", norm_length=None):
    return _token_mean(values, mask, mask.sum())


def aggregate_padded_denominator(values, mask, mode="token-mean", norm_length=None):
    """Bug: token-mean divides by the padded size B·T instead of the number of real tokens."""
    return _token_mean(values, mask, mask.numel())


AGGREGATE_CONVENTIONS = {"grpo.aggregate": {"mode": "token-mean"}}


def target(name, objective, fn, conventions=None, dtypes=("float64", "float32")):
    return {"name": name, "framework": "torch", "objectives": {objective: fn},
            "conventions": conventions or {}, "dtypes": list(dtypes)}


PAIRS = [
    # (bug class, objective, twin, mutant, conventions, dtypes)
    ("sample std used silently", "grpo.advantages", advantages_twin, advantages_sample_std,
     ADVANTAGE_CONVENTIONS, ("float64",)),
    ("T² missing", "distill.hinton", hinton_twin, hinton_no_t2, HINTON_CONVENTIONS, ("float64",)),
    ("KL direction swapped", "distill.token_kl", token_kl_twin, token_kl_swapped, TOKEN_KL_CONVENTIONS,
     ("float64",)),
    ("min/max swapped in the clipped objective", "grpo.clip", clip_twin, clip_max, {}, ("float64",)),
    ("gradient through the old log-probs", "grpo.clip", clip_twin, clip_attached_old, {}, ("float64",)),
    ("future KL cost includes the current token", "proximal_kl.future_cost", future_cost_twin,
     future_cost_with_current, {}, ("float64",)),
    ("wrong aggregation denominator", "grpo.aggregate", aggregate_twin, aggregate_padded_denominator,
     AGGREGATE_CONVENTIONS, ("float64",)),
    ("float32 accumulation inside a float64 function", "distill.token_kl", token_kl_twin,
     token_kl_float32_accumulation, TOKEN_KL_CONVENTIONS, ("float64",)),
]
