"""Mutants of ``distill.skew_kl`` (DistiLLM §3), ``distill.tvd`` (total variation) and
``distill.sparse_kl`` with its tail bucket.

q = softmax(z/T) (student), p = softmax(t/T) (teacher); a logit of −inf is an impossible token."""
from __future__ import annotations

import math

import torch

from mutants import Pair, checked, export
from mutants.distill import kl_rows

SKEW, TVD, SPARSE = "distill.skew_kl", "distill.tvd", "distill.sparse_kl"


# ----------------------------------------------------------------------------------- skew KL

def skew_kl(z, t, alpha, direction, temperature, *, swap_alpha=False, soft_ce=False):
    log_q = torch.log_softmax(z / temperature, -1)
    log_p = torch.log_softmax(t.detach() / temperature, -1)
    first, other = (log_p, log_q) if direction == "forward" else (log_q, log_p)
    if alpha == 1.0 and not swap_alpha:
        return (torch.where(torch.isinf(z), torch.zeros_like(z), z) * 0).sum(-1)
    w = 1 - alpha if swap_alpha else alpha
    dead = torch.isinf(first) & torch.isinf(other)
    f = torch.where(dead, torch.zeros_like(first), first)
    o = torch.where(dead, torch.zeros_like(other), other)
    parts = [math.log(w) + f] if w > 0 else []
    parts += [math.log1p(-w) + o] if w < 1 else []
    log_m = torch.logsumexp(torch.stack(parts), 0) if len(parts) > 1 else parts[0]
    log_m = torch.where(dead, first, log_m)
    if soft_ce:   # −Σ a·log m: the cross-entropy against the mixture, KL + H(first)
        live = first.exp() > 0
        return torch.where(live, -first.exp() * torch.where(live, log_m, torch.zeros_like(log_m)),
                           torch.zeros_like(log_m)).sum(-1)
    return kl_rows(first, log_m)


def _skew(kw, **bug):
    return skew_kl(kw["student_logits"], kw["teacher_logits"], kw.get("alpha", 0.1), kw.get("direction", "forward"),
                   kw.get("temperature", 1.0), **bug)


SKEW_CONVENTIONS = {"direction": ["forward", "reverse"]}


@checked(SKEW)
def skew_kl_twin(**kw):
    """KL(p‖αp + (1−α)q) or KL(q‖αq + (1−α)p), the mixture formed in log space (DistiLLM §3)."""
    return _skew(kw)


@checked(SKEW)
def skew_kl_soft_cross_entropy(**kw):
    """Skew cross-entropy −Σ p·log(αp + (1−α)q) reported as the skew KL (the entropy H(p) left out).

    Seen: jongwooko/distillm distillm/losses.py skewed_forward_kl (returns −Σ teacher_probs·log
    mixed_probs); the same class as jongwooko/distillm issue #7 for the plain forward KL."""
    return _skew(kw, soft_ce=True)


@checked(SKEW)
def skew_kl_mixture_weights_swapped(**kw):
    """Mixture weights swapped: m = (1−α)·first + α·other instead of α·first + (1−α)·other.

    Seen: huggingface/trl PR #3043 (the JSD mixture beta*student + (1-beta)*teacher where the
    definition has beta*teacher); DistiLLM's two skew directions put α on different models
    (distillm/losses.py: lam*teacher in skewed_forward_kl, lam*student in skewed_reverse_kl)."""
    return _skew(kw, swap_alpha=True)


# ----------------------------------------------------------------------------------- TVD

def tvd(z, t, temperature, *, teacher_at_t1=False, no_half=False):
    q = torch.softmax(z / temperature, -1)
    p = torch.softmax(t.detach() / (1.0 if teacher_at_t1 else temperature), -1)
    return (q - p).abs().sum(-1) * (1.0 if no_half else 0.5)


def _tvd(kw, **bug):
    return tvd(kw["student_logits"], kw["teacher_logits"], kw.get("temperature", 1.0), **bug)


@checked(TVD)
def tvd_twin(**kw):
    """½·Σ|q − p| with torch.abs (its backward takes sign(0) = 0)."""
    return _tvd(kw)


@checked(TVD)
def tvd_teacher_not_tempered(**kw):
    """Temperature applied to the student only (the teacher's softmax at T = 1).

    Seen: huggingface/trl PR #5731 (two code paths scaling the logits by different
    temperatures before the divergence); the same class as TOKEN_KL_TEACHER_NOT_TEMPERED."""
    return _tvd(kw, teacher_at_t1=True)


@checked(TVD)
def tvd_l1_distance(**kw):
    """The ℓ1 distance Σ|q − p| reported as the total variation (the factor ½ left out).

    Seen: the two conventions of the name — Liger-Kernel ops/tvd.py and DistiLLM's tv_distance
    take ½·Σ|p − q|, while the ℓ1 norm of the difference is also called the variation distance
    (e.g. the Csiszár f-divergence with f(t) = |t − 1|)."""
    return _tvd(kw, no_half=True)


# ----------------------------------------------------------------------------- sparse, tail

def sparse_tail_kl(z, ids, lp, temperature, *, one_minus_sum=False):
    """KL over the K teacher buckets plus the tail (1 − Σp, the student's mass off the ids)."""
    log_q = torch.log_softmax(z / temperature, -1)
    live = lp > -math.inf
    zero = torch.zeros_like(lp)
    lq = log_q.gather(-1, ids)
    kl = torch.where(live, lp.exp() * (torch.where(live, lp, zero) - torch.where(live, lq, zero)), zero).sum(-1)
    p_tail = -torch.expm1(torch.logsumexp(lp, -1))
    if one_minus_sum:
        log_q_tail = torch.log(1 - torch.where(live, lq.exp(), zero).sum(-1))
    else:
        held = torch.zeros_like(log_q, dtype=torch.bool).scatter(-1, ids, live)
        log_q_tail = torch.logsumexp(torch.where(held, torch.full_like(log_q, -math.inf), log_q), -1)
    has = p_tail > 0
    safe_p = torch.where(has, p_tail, torch.ones_like(p_tail))
    safe_q = torch.where(has, log_q_tail, torch.zeros_like(log_q_tail))
    return kl + torch.where(has, safe_p * (torch.log(safe_p) - safe_q), torch.zeros_like(kl))


def _sparse(kw, **bug):
    return sparse_tail_kl(kw["student_logits"], kw["teacher_ids"], kw["teacher_logps"], kw.get("temperature", 1.0),
                          **bug)


@checked(SPARSE)
def sparse_twin(**kw):
    """The top-k forward KL with TRL's tail bucket, the student's tail summed directly."""
    return _sparse(kw)


@checked(SPARSE)
def sparse_tail_one_minus_sum(**kw):
    """The student's tail bucket formed as 1 − Σ q over the ids: cancellation when it is small.

    Seen: TRL 1.16.0 trl/experimental/iw_opd/iw_opd_trainer.py:99 and
    server_distillation/server_distillation_trainer.py:72 (_add_tail_bucket: log(1 − exp(logsumexp of
    the top-k))), declared known as trl-tail-bucket-cancellation in its adapter."""
    return _sparse(kw, one_minus_sum=True)


PAIRS = [
    Pair("SKEW_KL_SOFT_CROSS_ENTROPY", SKEW, skew_kl_soft_cross_entropy, skew_kl_twin, SKEW_CONVENTIONS),
    Pair("SKEW_KL_MIXTURE_WEIGHTS_SWAPPED", SKEW, skew_kl_mixture_weights_swapped, skew_kl_twin, SKEW_CONVENTIONS),
    Pair("TVD_TEACHER_NOT_TEMPERED", TVD, tvd_teacher_not_tempered, tvd_twin, {}),
    Pair("TVD_L1_DISTANCE", TVD, tvd_l1_distance, tvd_twin, {}),
    Pair("SPARSE_TAIL_ONE_MINUS_SUM", SPARSE, sparse_tail_one_minus_sum, sparse_twin, {"renormalize": ["tail"]}),
]
export(globals(), PAIRS)
