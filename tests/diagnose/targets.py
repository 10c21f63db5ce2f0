"""Targets with one known defect each, for judging the diagnoses from the outside
(``tests/diagnose/test_diagnoses.py``). Each is reachable from the command line:

    PYTHONPATH=tests lossproof check --target diagnose.targets:KD_CE_NO_T2 --objective distill.hinton
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def kd_ce_no_t2(student_logits, teacher_logits, labels, temperature=1.0, alpha=0.5, t2_scale=True,
                soft_term="kl"):
    """A common forward-KD recipe: the soft term is the cross-entropy −Σ p_T·log q_T against the
    tempered teacher, not the KL, and it is not multiplied by T² (whatever it is called with)."""
    hard = F.cross_entropy(student_logits, labels.long())
    p = torch.softmax(teacher_logits / temperature, dim=-1)
    log_q = torch.log_softmax(student_logits / temperature, dim=-1)
    soft = -(torch.where(p > 0, p * log_q, torch.zeros_like(p))).sum(-1).mean()
    return (1 - alpha) * hard + alpha * soft


KD_CE_NO_T2 = {"name": "kd-ce-no-t2", "framework": "torch", "objectives": {"distill.hinton": kd_ce_no_t2},
               "dtypes": ["float64"]}
KD_CE_NO_T2_DECLARED = {**KD_CE_NO_T2, "name": "kd-ce-no-t2-declared",
                        "conventions": {"distill.hinton": {"soft_term": "cross_entropy", "t2_scale": False}}}


def kl_float32_inside(logp, ref_logp, kind="k3", clamp=None):
    """k3 = e^x − x − 1 (x = ref_logp − logp) computed in float32 and returned in the inputs' dtype."""
    x = ref_logp.float() - logp.float()
    k = {"k1": -x, "k2": x * x / 2, "k3": torch.expm1(x) - x, "abs": x.abs()}[kind]
    if clamp is not None:
        k = k.clamp(-clamp, clamp)
    return k.to(logp.dtype)


KL_FLOAT32 = {"name": "kl-float32", "framework": "torch", "objectives": {"kl.estimator": kl_float32_inside},
              "dtypes": ["float64", "float32"]}


def orpo_log1p_exp(chosen_logps, rejected_logps, beta=0.1):
    """ORPO with log(1 − e^p) formed as log1p(−exp(p)): as p → 0, exp(p) rounds to 1 and every
    digit of 1 − e^p is lost (the stable form is log(−expm1(p)))."""
    def log_odds(p):
        return p - torch.log1p(-torch.exp(p))
    c, r = chosen_logps, rejected_logps
    losses = -c - beta * F.logsigmoid(log_odds(c) - log_odds(r))
    return {"losses": losses, "chosen_rewards": beta * c, "rejected_rewards": beta * r}


ORPO_LOG1P_EXP = {"name": "orpo-log1p-exp", "framework": "torch", "objectives": {"preference.orpo": orpo_log1p_exp},
                  "dtypes": ["float64", "float32"]}


def kl_in_place(logp, ref_logp, kind="k3", clamp=None):
    """k3 with the log ratio formed in the caller's tensor (``ref_logp.sub_(logp)``): right
    values, and the caller's reference log-probs overwritten."""
    with torch.no_grad():
        ref_logp.sub_(logp)
    x = ref_logp
    k = {"k1": -x, "k2": x * x / 2, "k3": torch.expm1(x) - x, "abs": x.abs()}[kind]
    return k if clamp is None else k.clamp(-clamp, clamp)


KL_IN_PLACE = {"name": "kl-in-place", "framework": "torch", "objectives": {"kl.estimator": kl_in_place},
               "dtypes": ["float64"]}


class _Bfloat16Backward(torch.autograd.Function):
    """The identity whose backward rounds the incoming gradient to bfloat16 (a fused kernel
    that stores its gradient buffer in bfloat16 whatever the inputs)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g.to(torch.bfloat16).to(g.dtype)


def kl_bfloat16_gradient(logp, ref_logp, kind="k3", clamp=None):
    x = ref_logp - _Bfloat16Backward.apply(logp)
    k = {"k1": -x, "k2": x * x / 2, "k3": torch.expm1(x) - x, "abs": x.abs()}[kind]
    return k if clamp is None else k.clamp(-clamp, clamp)


KL_BFLOAT16_GRADIENT = {"name": "kl-bf16-grad", "framework": "torch",
                        "objectives": {"kl.estimator": kl_bfloat16_gradient}, "dtypes": ["float64", "float32"]}


def ce_mean_over_all_positions(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                               reduction="mean", normalizer=None):
    """Cross-entropy whose mean divides by every position, ignored ones included (the sum is
    right: ignored positions contribute 0)."""
    kw = {"ignore_index": ignore_index, "label_smoothing": label_smoothing}
    if reduction != "mean":
        return F.cross_entropy(logits, labels.long(), reduction=reduction, **kw)
    valid = (labels != ignore_index).sum()
    return F.cross_entropy(logits, labels.long(), **kw) * valid / labels.numel()


CE_ALL_POSITIONS = {"name": "ce-all-positions", "framework": "torch",
                    "objectives": {"lm.cross_entropy": ce_mean_over_all_positions}, "dtypes": ["float64", "float32"],
                    "params": {"lm.cross_entropy": {"z_loss": [0.0], "softcap": [None], "normalizer": [None],
                                                  "label_smoothing": [0.0]}},
                    "conventions": {"lm.cross_entropy": {"reduction": "*"}}}


def pairwise_margin_ignored(chosen_rewards, rejected_rewards, center_rewards_coefficient=None, form="sigmoid",
                            margin=None):
    """The Bradley–Terry loss with the margin accepted and never read (OpenRLHF 0.11.2's LogExpLoss)."""
    from lossproof.refimpl.torch.reward import pairwise
    return pairwise(chosen_rewards, rejected_rewards, center_rewards_coefficient, form)


MARGIN_IGNORED = {"name": "margin-ignored", "framework": "torch", "dtypes": ["float64", "float32"],
                  "objectives": {"reward.pairwise": pairwise_margin_ignored}}
