"""Known wrong formulas of the distill.* objectives (``conformance.bugforms``).

q = softmax(z/T) (student), p = softmax(t/T) (teacher), as in ``refimpl.arrays.distill``."""
from __future__ import annotations

import math

import numpy as np

from lossproof.conformance.bugforms import Form, call
from lossproof.refimpl.arrays import distill, lm


def _entropy(logits, temperature):
    """H(softmax(logits/T)) per row over the leading axes (``lm.entropy`` takes [N, V])."""
    flat = np.reshape(logits, (-1, logits.shape[-1]))
    if flat.shape[0] == 0:
        return np.zeros(logits.shape[:-1])
    return np.reshape(lm.entropy(flat, temperature), logits.shape[:-1])


def _first(kw, direction):
    """The logits of the distribution a divergence weighs by: p forward, q reverse."""
    return kw["teacher_logits"] if direction == "forward" else kw["student_logits"]


# ------------------------------------------------------------------------------------- hinton

def _hinton_terms(kw, **override):
    """(the hard-label mean, the soft term's mean with its T² factor), as ``distill.hinton`` weighs
    them with α: the loss is linear in α, so its ends give the two terms."""
    return call(distill.hinton, kw, alpha=0.0, **override), call(distill.hinton, kw, alpha=1.0)


def _hinton_kldiv_mean(kw):
    ce, soft = _hinton_terms(kw)
    a = kw["alpha"]
    return {"loss": (1 - a) * ce + a * soft / kw["student_logits"].shape[-1]}


def _hinton_ce_at_temperature(kw):
    T = kw["temperature"]
    ce, soft = _hinton_terms(kw, student_logits=kw["student_logits"] / T, teacher_logits=kw["teacher_logits"] / T,
                             temperature=1.0)
    a = kw["alpha"]
    return {"loss": (1 - a) * ce + a * soft}


# ----------------------------------------------------------------------------------- token KL

def _token_kl_soft_cross_entropy(kw):
    # −Σ a·log b = KL(a‖b) + H(a), a the distribution the direction weighs by
    kl = call(distill.token_kl, kw, soft_term="kl")
    return {"kl": kl + _entropy(_first(kw, kw["direction"]), kw["temperature"])}


def _teacher_at_t1(kw):
    """The teacher's logits that give softmax(t) at temperature T."""
    return kw["teacher_logits"] * kw["temperature"]


def _token_kl_teacher_not_tempered(kw):
    return {"kl": call(distill.token_kl, kw, teacher_logits=_teacher_at_t1(kw))}


# ---------------------------------------------------------------------------------------- JSD

def _log_softmax(z, T):
    zs = z / T
    top = np.max(zs, axis=-1, keepdims=True)
    return zs - top - np.log(np.sum(np.exp(zs - top), axis=-1, keepdims=True))


def _kl_rows(log_a, log_b):
    """Σ a·(log a − log b) over the last axis, 0 where a = 0."""
    live = log_a > -np.inf
    diff = np.where(live, log_a, 0.0) - np.where(live, log_b, 0.0)
    return np.sum(np.where(live, np.exp(log_a) * diff, 0.0), axis=-1)


def _jsd_mixture_weights_swapped(kw):
    b, endpoints = kw["beta"], kw["endpoints"]
    if b in (0.0, 1.0):
        if endpoints == "kl":
            return {"jsd": call(distill.generalized_jsd, kw)}
        # the formula at the ends: m is q at β = 1 and p at β = 0, so the weighed KL is no longer 0
        return {"jsd": call(distill.token_kl, kw, direction="forward" if b == 1.0 else "reverse", soft_term="kl")}
    T = kw["temperature"]
    log_q, log_p = _log_softmax(kw["student_logits"], T), _log_softmax(kw["teacher_logits"], T)
    w = 1 - b   # the teacher's weight, the student's 1 − w
    dead = np.isinf(log_p) & np.isinf(log_q)
    log_m = np.where(dead, -np.inf, np.logaddexp(math.log(w) + np.where(dead, 0.0, log_p),
                                                 math.log1p(-w) + np.where(dead, 0.0, log_q)))
    return {"jsd": b * _kl_rows(log_p, log_m) + (1 - b) * _kl_rows(log_q, log_m)}


def _jsd_mixture_of_log_probs(kw):
    # log m = β·log p + (1−β)·log q gives log p − log m = (1−β)(log p − log q) and log q − log m =
    # β(log q − log p): the divergence becomes β(1−β)·(KL(p‖q) + KL(q‖p))
    b = kw["beta"]
    if b in (0.0, 1.0):
        return {"jsd": call(distill.generalized_jsd, kw)}
    return {"jsd": 2 * b * (1 - b) * call(distill.symmetric_kl, kw, forward_weight=0.5)}


# ------------------------------------------------------------------------------------- skew KL

def _skew_mixture_weights_swapped(kw):
    a = kw["alpha"]
    if a == 1.0:   # m = the other distribution: the plain KL
        return {"kl": call(distill.token_kl, kw, soft_term="kl")}
    return {"kl": call(distill.skew_kl, kw, alpha=1.0 - a)}


# ----------------------------------------------------------------------------------------- TVD

def _tvd_teacher_not_tempered(kw):
    return {"tvd": call(distill.tvd, kw, teacher_logits=_teacher_at_t1(kw))}


MIXTURE_SWAP = ("huggingface/trl#3043",)
TEACHER_AT_T1 = ("huggingface/trl#5731", "bowang-lab/BLEEP#5")

FORMS = (
    Form("distill.hinton", "KLDivLoss elementwise mean",
         "the soft term is averaged over every element, rows × vocabulary (nn.KLDivLoss's reduction='mean'), "
         "so it is 1/V of the per-row KL mean Hinton §2 weighs",
         "reduce the KL with reduction='batchmean' (or sum over the vocabulary, then mean over the rows)",
         ("haitongli/knowledge-distillation-pytorch#2",), _hinton_kldiv_mean),
    Form("distill.hinton", "hard-label term at temperature T",
         "the hard-label cross-entropy is taken on softmax(z/T) where Hinton §2 takes it at temperature 1",
         "compute the cross-entropy on the untempered student logits, before dividing them by T",
         # Liger-Kernel computes the hard loss before it divides the student's logits by T, to keep it at T = 1
         ("https://arxiv.org/abs/1503.02531",
          "https://github.com/linkedin/Liger-Kernel/blob/main/src/liger_kernel/chunked_loss/fused_linear_distillation.py"),
         _hinton_ce_at_temperature),
    Form("distill.token_kl", "soft cross-entropy",
         "the cross-entropy −Σ a·log b is reported as KL(a‖b): the entropy H(a) of the distribution it "
         "weighs by (the teacher forward, the student reverse) is left out",
         "add Σ a·log a (0 at a = 0), or subtract H(a), so that the value is the KL",
         ("jongwooko/distillm#7", "microsoft/LMOps#38"), _token_kl_soft_cross_entropy),
    Form("distill.token_kl", "teacher not tempered",
         "the temperature divides the student's logits only: the teacher's softmax is taken at T = 1",
         "divide the teacher's logits by the same T before its softmax",
         TEACHER_AT_T1, _token_kl_teacher_not_tempered),
    Form("distill.generalized_jsd", "mixture weights swapped",
         "the mixture is m = β·q + (1−β)·p, the student weighted by β, where GKD eq. 2 takes m = β·p + (1−β)·q "
         "(the outer weights β, 1−β left as they are)",
         "weight the teacher by β in the mixture: m = β·p + (1−β)·q",
         MIXTURE_SWAP, _jsd_mixture_weights_swapped),
    Form("distill.generalized_jsd", "mixture of log-probabilities",
         "the mixture is formed from log-probabilities, log m = β·log p + (1−β)·log q, which is no distribution "
         "and makes the divergence β(1−β)·(KL(p‖q) + KL(q‖p))",
         "mix the probabilities and take the log after: log m = logsumexp(log β + log p, log(1−β) + log q)",
         ("huggingface/trl#2202",), _jsd_mixture_of_log_probs),
    Form("distill.skew_kl", "mixture weights swapped",
         "the mixture is (1−α)·a + α·b where DistiLLM §3 takes α·a + (1−α)·b, a the distribution the "
         "direction weighs by (the teacher forward, the student reverse)",
         "weight the first distribution of the KL by α in the mixture",
         MIXTURE_SWAP, _skew_mixture_weights_swapped),
    Form("distill.tvd", "teacher not tempered",
         "the temperature divides the student's logits only: the teacher's softmax is taken at T = 1",
         "divide the teacher's logits by the same T before its softmax",
         TEACHER_AT_T1, _tvd_teacher_not_tempered),
)
