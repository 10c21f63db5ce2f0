"""Knowledge distillation (distill.hinton) and MoE load balancing (moe.load_balancing) as
libraries without an adapter wrote them, each defect transcribed from a public report
(``transcribed.table`` links it), beside the corrected function."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _soft_kl(student_logits, teacher_logits, temperature):
    """KL(p_T ‖ q_T) per row; 0·log 0 = 0 where the teacher gives a token probability 0."""
    log_p = torch.log_softmax(teacher_logits / temperature, dim=-1)
    log_q = torch.log_softmax(student_logits / temperature, dim=-1)
    p = log_p.exp()
    live = p > 0
    zero = torch.zeros_like(p)
    return (p * (torch.where(live, log_p, zero) - torch.where(live, log_q, zero))).sum(-1)


def hinton(student_logits, teacher_logits, labels, temperature=1.0, alpha=0.5, t2_scale=True, soft_term="kl"):
    hard = F.cross_entropy(student_logits, labels.long(), reduction="none")
    soft = _soft_kl(student_logits, teacher_logits, temperature) * (temperature ** 2 if t2_scale else 1.0)
    return ((1 - alpha) * hard + alpha * soft).mean()


def hinton_no_t2(student_logits, teacher_logits, labels, temperature=1.0, alpha=0.5, t2_scale=True,
                 soft_term="kl"):
    """IntelLabs/distiller issue #122: the soft term is not multiplied by T²."""
    return hinton(student_logits, teacher_logits, labels, temperature, alpha, False, soft_term)


def hinton_kldiv_elementwise_mean(student_logits, teacher_logits, labels, temperature=1.0, alpha=0.5,
                                  t2_scale=True, soft_term="kl"):
    """knowledge-distillation-pytorch (issue #2): nn.KLDivLoss() with its default elementwise mean
    divides the summed KL by N·V, the number of elements, instead of the N rows."""
    hard = F.cross_entropy(student_logits, labels.long(), reduction="none").mean()
    kl = _soft_kl(student_logits, teacher_logits, temperature).sum() / student_logits.numel()
    return (1 - alpha) * hard + alpha * kl * (temperature ** 2 if t2_scale else 1.0)


def _switch(router_logits, top_k, mask, probability_of_chosen_only=False):
    n, e = router_logits.shape
    m = torch.ones(n, dtype=torch.bool) if mask is None else mask.bool()
    q = torch.softmax(router_logits, dim=-1)
    chosen = torch.zeros_like(q).scatter(-1, router_logits.detach().topk(top_k, dim=-1).indices, 1.0)
    chosen = chosen * m[:, None]
    n_tok = m.sum()
    f = chosen.sum(0) / n_tok
    weights = q * chosen if probability_of_chosen_only else torch.where(m[:, None], q, torch.zeros_like(q))
    return e * (f * weights.sum(0) / n_tok).sum()


def load_balancing(router_logits, top_k=1, form="switch", seq_len=None, mask=None):
    """Switch Transformer eq. 4: E·Σ_e f_e·P_e over the selected tokens."""
    return _switch(router_logits, top_k, mask)


def load_balancing_chosen_probability(router_logits, top_k=1, form="switch", seq_len=None, mask=None):
    """aprender before PR #2162: P_e accumulates the router probability only where expert e is
    in the token's top-k, not the full softmax over every token."""
    return _switch(router_logits, top_k, mask, probability_of_chosen_only=True)
