"""Mutants of the distillation family: ``distill.softmax``, ``distill.hinton``,
``distill.token_kl``, ``distill.generalized_jsd`` (Hinton et al. 2015 §2; MiniLLM §2.1;
GKD, Agarwal et al. 2024 §3).

q = softmax(z/T) (student), p = softmax(t/T) (teacher); a logit of −inf is an impossible
token (probability 0, and 0·log 0 = 0)."""
from __future__ import annotations

import torch

from mutants import Pair, checked, export

SOFTMAX, HINTON, TOKEN_KL, JSD = "distill.softmax", "distill.hinton", "distill.token_kl", "distill.generalized_jsd"


def kl_rows(log_a, log_b, *, nan_at_impossible=False):
    """Σ a·(log a − log b) over the last axis; a = 0 contributes 0 (not 0·(−inf) = NaN)."""
    a = log_a.exp()
    if nan_at_impossible:
        return (a * (log_a - log_b)).sum(-1)
    live = a > 0
    # double where: the dead branch must not see −inf either, or its gradient is 0·inf = NaN
    diff = torch.where(live, log_a, torch.zeros_like(log_a)) - torch.where(live, log_b, torch.zeros_like(log_b))
    return torch.where(live, a * diff, torch.zeros_like(a)).sum(-1)


# ----------------------------------------------------------------------------------- softmax

def softmax(logits, temperature, *, shift=True, multiply=False):
    z = logits * temperature if multiply else logits / temperature
    if shift:
        return torch.softmax(z, dim=-1)
    e = torch.exp(z)
    return e / e.sum(-1, keepdim=True)


@checked(SOFTMAX)
def softmax_twin(logits, temperature=1.0):
    """softmax(z/T) with the maximum shifted out (torch.softmax)."""
    return softmax(logits, temperature)


@checked(SOFTMAX)
def softmax_without_max_shift(logits, temperature=1.0):
    """Softmax without the max shift: exp(z/T) overflows to inf, inf/inf = NaN.

    Seen: pytorch/pytorch issue #1835 and FederatedAI/FATE issue #65 (overflow in the
    exponential without the log-sum-exp shift); the HugeLogits vectors (logits ±1e4)."""
    return softmax(logits, temperature, shift=False)


@checked(SOFTMAX)
def softmax_temperature_multiplied(logits, temperature=1.0):
    """Temperature multiplied instead of divided: softmax(z·T).

    Seen: bowang-lab/BLEEP issue #5 ("logits are divided by [the temperature], targets are
    multiplied by this value ... a mathematical mistake")."""
    return softmax(logits, temperature, multiply=True)


# ----------------------------------------------------------------------------------- hinton

def hinton(z, t, labels, temperature, alpha, t2_scale, *, apply_t2=True, ce_at_t=False, swap_alpha=False):
    ce_logits = z / temperature if ce_at_t else z
    ce = -torch.log_softmax(ce_logits, -1).gather(-1, labels[:, None]).squeeze(-1)
    log_q = torch.log_softmax(z / temperature, -1)
    log_p = torch.log_softmax(t.detach() / temperature, -1)
    s = temperature ** 2 if (t2_scale and apply_t2) else 1.0
    a = 1 - alpha if swap_alpha else alpha
    return ((1 - a) * ce + a * s * kl_rows(log_p, log_q)).mean()


def _hinton(kw, **bug):
    return hinton(kw["student_logits"], kw["teacher_logits"], kw["labels"], kw.get("temperature", 1.0),
                  kw.get("alpha", 0.5), kw.get("t2_scale", True), **bug)


HINTON_CONVENTIONS = {"t2_scale": [True, False]}


@checked(HINTON)
def hinton_twin(**kw):
    """(1−α)·CE(softmax(z), y) + α·T²·KL(p^(T)‖q^(T)), Hinton et al. 2015 §2."""
    return _hinton(kw)


@checked(HINTON)
def hinton_missing_t2(**kw):
    """Missing T²: the soft term not multiplied by T² although t2_scale was declared.

    Seen: IntelLabs/distiller issue #122 ("no T*T in distillation loss", confirmed a bug);
    huggingface/transformers issue #12299 (T ** 2 in the distiller); Hinton et al. 2015 §2."""
    return _hinton(kw, apply_t2=False)


@checked(HINTON)
def hinton_ce_at_temperature(**kw):
    """CE computed at temperature T: the hard-label term uses softmax(z/T) instead of T = 1.

    Seen: Hinton et al. 2015 §2 ("computed using exactly the same logits ... but at a
    temperature of 1"); Liger-Kernel computes the hard loss before `student_logits_chunk /=
    temperature` (chunked_loss/fused_linear_distillation.py) to keep it at T = 1."""
    return _hinton(kw, ce_at_t=True)


@checked(HINTON)
def hinton_alpha_swapped(**kw):
    """α on the wrong term: α·CE + (1−α)·T²·KL instead of (1−α)·CE + α·T²·KL.

    Seen: ooples/AiDotNet PR #437 (review: hard and soft weights against the documented
    convention); the article's λ weighs the soft term."""
    return _hinton(kw, swap_alpha=True)


# ----------------------------------------------------------------------------------- token KL

def token_kl(z, t, direction, temperature, *, swap=False, soft_ce=False, nan_at_impossible=False,
             teacher_at_t1=False, float32=False):
    dtype = z.dtype
    if float32:
        z, t = z.float(), t.float()
    log_q = torch.log_softmax(z / temperature, -1)
    log_p = torch.log_softmax(t.detach() / (1.0 if teacher_at_t1 else temperature), -1)
    reverse = (direction == "reverse") != swap
    a, b = (log_q, log_p) if reverse else (log_p, log_q)
    if soft_ce:   # −Σ a·log b: the cross-entropy, KL(a‖b) + H(a)
        live = a.exp() > 0
        value = torch.where(live, -a.exp() * torch.where(live, b, torch.zeros_like(b)), torch.zeros_like(b)).sum(-1)
    else:
        value = kl_rows(a, b, nan_at_impossible=nan_at_impossible)
    return value.to(dtype)


def _token_kl(kw, **bug):
    return token_kl(kw["student_logits"], kw["teacher_logits"], kw.get("direction", "reverse"),
                    kw.get("temperature", 1.0), **bug)


TOKEN_KL_CONVENTIONS = {"direction": ["reverse", "forward"]}


@checked(TOKEN_KL)
def token_kl_twin(**kw):
    """Full-vocabulary KL, reverse Σ q log(q/p) (MiniLLM §2.1 eq. 1) or forward Σ p log(p/q)."""
    return _token_kl(kw)


@checked(TOKEN_KL)
def token_kl_direction_swapped(**kw):
    """KL direction swapped: KL(p‖q) computed where KL(q‖p) was declared, and back.

    Seen: huggingface/trl PR #4935 review ("KL divergence direction swapped for forward and
    reverse": F.kl_div(input, target) computes KL(target‖input)); paiml/aprender PR #2153."""
    return _token_kl(kw, swap=True)


@checked(TOKEN_KL)
def token_kl_soft_cross_entropy(**kw):
    """Soft cross-entropy reported as KL: −Σ a·log b, missing the entropy term Σ a·log a.

    Seen: jongwooko/distillm issue #7 ("the value of teacher_probs * log(teacher_probs) is not
    considered"); microsoft/LMOps issue #38 (the same soft-CE distillation loss). The gradient
    of the forward direction is unchanged; the value is off by H(a)."""
    return _token_kl(kw, soft_ce=True)


@checked(TOKEN_KL)
def token_kl_nan_at_impossible_tokens(**kw):
    """0·(−inf) = NaN at impossible tokens (a −inf logit) instead of 0·log 0 = 0.

    Seen: huggingface/trl PR #7263 (entropy_from_logits NaN for zero-probability tokens);
    NovaSky-AI/SkyRL PR #2259 (masked vocabulary entries: 0 * -inf); microsoft/LMOps
    issue #38 (the masked_fill that avoids it)."""
    return _token_kl(kw, nan_at_impossible=True)


@checked(TOKEN_KL)
def token_kl_teacher_not_tempered(**kw):
    """Temperature applied to the student only (the teacher's softmax at T = 1).

    Seen: huggingface/trl PR #5731 (two code paths scaling the logits by different
    temperatures: "the two paths were scaling logits differently before computing JSD");
    bowang-lab/BLEEP issue #5."""
    return _token_kl(kw, teacher_at_t1=True)


@checked(TOKEN_KL)
def token_kl_float32_inside_float64(**kw):
    """float32 accumulation inside a float64 function (the result cast back).

    Seen: Liger-Kernel and TRL compute distillation losses in float32 (`dtype=torch.float32`
    in the softmaxes of microsoft/LMOps issue #38 and jongwooko/distillm issue #7); for float64
    inputs that is a silent downcast."""
    return _token_kl(kw, float32=True)


# ----------------------------------------------------------------------------------- JSD

def jsd(z, t, beta, temperature, endpoints, *, swap_beta=False, log_space_mixture=False,
        prob_space_mixture=False, endpoints_as_kl=False):
    log_q = torch.log_softmax(z / temperature, -1)
    log_p = torch.log_softmax(t.detach() / temperature, -1)
    if (endpoints == "kl" or endpoints_as_kl) and beta in (0, 1):
        return kl_rows(log_p, log_q) if beta == 0 else kl_rows(log_q, log_p)
    w_p = 1 - beta if swap_beta else beta
    if log_space_mixture:        # mixture of log-probabilities (not a distribution)
        log_m = w_p * log_p + (1 - w_p) * log_q
    elif prob_space_mixture:     # log of a probability-space sum: log 0 where both underflow
        log_m = torch.log(w_p * log_p.exp() + (1 - w_p) * log_q.exp())
    else:
        lw_p = torch.log(torch.tensor(w_p, dtype=z.dtype)) if w_p > 0 else None
        lw_q = torch.log(torch.tensor(1 - w_p, dtype=z.dtype)) if w_p < 1 else None
        if lw_p is None:
            log_m = log_q
        elif lw_q is None:
            log_m = log_p
        else:
            dead = torch.isinf(log_p) & torch.isinf(log_q)   # impossible under both: m = 0
            lp = torch.where(dead, torch.zeros_like(log_p), log_p)
            lq = torch.where(dead, torch.zeros_like(log_q), log_q)
            log_m = torch.where(dead, log_p, torch.logaddexp(lw_p + lp, lw_q + lq))
    return beta * kl_rows(log_p, log_m) + (1 - beta) * kl_rows(log_q, log_m)


def _jsd(kw, **bug):
    return jsd(kw["student_logits"], kw["teacher_logits"], kw.get("beta", 0.5), kw.get("temperature", 1.0),
               kw.get("endpoints", "limit"), **bug)


JSD_CONVENTIONS = {"endpoints": ["limit", "kl"]}


@checked(JSD)
def jsd_twin(**kw):
    """β·KL(p‖m) + (1−β)·KL(q‖m), m = β·p + (1−β)·q formed in log space (GKD §3 eq. 2);
    endpoints='kl' replaces β = 0, 1 by KL(p‖q), KL(q‖p) as TRL and Liger do."""
    return _jsd(kw)


@checked(JSD)
def jsd_mixture_weights_swapped(**kw):
    """Mixture weights swapped: m = β·q + (1−β)·p (student weighted by β).

    Seen: huggingface/trl PR #3043 ("computes the mixture distribution as per
    beta*student + (1-beta)*teacher; however, the definition is beta*teacher +
    (1-beta)*student")."""
    return _jsd(kw, swap_beta=True)


@checked(JSD)
def jsd_mixture_of_log_probs(**kw):
    """Mixture formed from log-probabilities: log m = β·log p + (1−β)·log q.

    Seen: huggingface/trl issue #2202 ("we saw log prob mixture of teacher and student, while
    in the original paper it seems to mix the prob before applying log ... mixtures and logs
    are not commutative")."""
    return _jsd(kw, log_space_mixture=True)


@checked(JSD)
def jsd_probability_space_underflow(**kw):
    """Mixture formed in probability space: log(β·p + (1−β)·q) = log 0 where both underflow.

    Seen: linkedin/Liger-Kernel issue #1453 ("JSD kernel returns NaN for interior beta when a
    vocabulary entry underflows under both distributions") and PR #1397."""
    return _jsd(kw, prob_space_mixture=True)


@checked(JSD)
def jsd_endpoints_special_cased(**kw):
    """endpoints='limit' declared but β = 0, 1 special-cased to KL(p‖q), KL(q‖p).

    Seen: huggingface/trl PR #6781 (the generalized-JSD endpoint definition: the continuous
    formula gives 0 at β = 0 and 1, TRL returns the KLs); linkedin/Liger-Kernel issue #278."""
    return _jsd(kw, endpoints_as_kl=True)


PAIRS = [
    Pair("SOFTMAX_WITHOUT_MAX_SHIFT", SOFTMAX, softmax_without_max_shift, softmax_twin, {}),
    Pair("SOFTMAX_TEMPERATURE_MULTIPLIED", SOFTMAX, softmax_temperature_multiplied, softmax_twin, {}),
    Pair("HINTON_MISSING_T2", HINTON, hinton_missing_t2, hinton_twin, HINTON_CONVENTIONS),
    Pair("HINTON_CE_AT_TEMPERATURE", HINTON, hinton_ce_at_temperature, hinton_twin, HINTON_CONVENTIONS),
    Pair("HINTON_ALPHA_SWAPPED", HINTON, hinton_alpha_swapped, hinton_twin, HINTON_CONVENTIONS),
    Pair("TOKEN_KL_DIRECTION_SWAPPED", TOKEN_KL, token_kl_direction_swapped, token_kl_twin, TOKEN_KL_CONVENTIONS),
    Pair("TOKEN_KL_SOFT_CROSS_ENTROPY", TOKEN_KL, token_kl_soft_cross_entropy, token_kl_twin, TOKEN_KL_CONVENTIONS),
    Pair("TOKEN_KL_NAN_AT_IMPOSSIBLE", TOKEN_KL, token_kl_nan_at_impossible_tokens, token_kl_twin,
         TOKEN_KL_CONVENTIONS),
    Pair("TOKEN_KL_TEACHER_NOT_TEMPERED", TOKEN_KL, token_kl_teacher_not_tempered, token_kl_twin,
         TOKEN_KL_CONVENTIONS),
    Pair("TOKEN_KL_FLOAT32_INSIDE_FLOAT64", TOKEN_KL, token_kl_float32_inside_float64, token_kl_twin,
         TOKEN_KL_CONVENTIONS),
    Pair("JSD_MIXTURE_WEIGHTS_SWAPPED", JSD, jsd_mixture_weights_swapped, jsd_twin, JSD_CONVENTIONS),
    Pair("JSD_MIXTURE_OF_LOG_PROBS", JSD, jsd_mixture_of_log_probs, jsd_twin, JSD_CONVENTIONS),
    Pair("JSD_PROBABILITY_SPACE_UNDERFLOW", JSD, jsd_probability_space_underflow, jsd_twin, JSD_CONVENTIONS),
    Pair("JSD_ENDPOINTS_SPECIAL_CASED", JSD, jsd_endpoints_special_cased, jsd_twin, JSD_CONVENTIONS),
]
export(globals(), PAIRS)
