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
