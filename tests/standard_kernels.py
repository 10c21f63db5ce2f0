"""Correct targets written on the frameworks' standard kernels, as a user writes them (issue 38):
``torch.nn.functional.cross_entropy``, ``log_softmax`` and ``softmax`` on CPU, and the NumPy textbook
``np.exp``/``np.log``/``np.sum``. The tolerance policy must accept their rounding at every vocabulary
size the vectors hold (V = 128256 included) without a known-failure declaration:
tests/test_standard_kernels.py runs them.

Both work in float32 for bfloat16/float16 inputs (the careful model's assumption) and in the
inputs' dtype otherwise."""
from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F
from mutants import distill, distill_divergences

# ----------------------------------------------------------------------------------- torch


def _work(x):
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _xlogy_rows(p, logp):
    """Σ_v p·log p with 0·log 0 = 0 at impossible tokens (a −∞ logit: p = 0, log p = −∞)."""
    live = p > 0
    return torch.where(live, p * torch.where(live, logp, torch.zeros_like(logp)), torch.zeros_like(p)).sum(-1)


def cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.0, reduction="mean", normalizer=None):
    z = _work(logits)
    if reduction == "mean" and normalizer is not None:
        loss = F.cross_entropy(z, labels, ignore_index=ignore_index, label_smoothing=label_smoothing,
                               reduction="sum") / normalizer
    elif reduction == "mean" and not bool((labels != ignore_index).any()):
        loss = z.sum() * 0.0   # no counted token: 0 (F.cross_entropy's mean is 0/0 = NaN)
    else:
        loss = F.cross_entropy(z, labels, ignore_index=ignore_index, label_smoothing=label_smoothing,
                               reduction=reduction)
    return loss.to(logits.dtype)


def token_logprobs(logits, labels, temperature=1.0):
    logq = F.log_softmax(_work(logits) / temperature, dim=-1)
    return logq.gather(-1, labels[:, None])[:, 0].to(logits.dtype)


def entropy(logits, temperature=1.0):
    """−Σ softmax·log_softmax, the textbook form."""
    z = _work(logits) / temperature
    return (-_xlogy_rows(F.softmax(z, dim=-1), F.log_softmax(z, dim=-1))).to(logits.dtype)


def _in_float32(fn):
    """fn on float32 copies of bfloat16/float16 tensors, its result in the inputs' dtype."""
    @functools.wraps(fn)
    def run(**kw):
        dtype = next(v.dtype for v in kw.values() if isinstance(v, torch.Tensor) and v.is_floating_point())
        out = fn(**{k: _work(v) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in kw.items()})
        return out.to(dtype)
    return run


def symmetric_kl(student_logits, teacher_logits, forward_weight=0.5, temperature=1.0):
    log_q = F.log_softmax(_work(student_logits) / temperature, dim=-1)
    log_p = F.log_softmax(_work(teacher_logits).detach() / temperature, dim=-1)
    value = forward_weight * distill.kl_rows(log_p, log_q) + (1 - forward_weight) * distill.kl_rows(log_q, log_p)
    return value.to(student_logits.dtype)


def sparse_kl(student_logits, teacher_ids, teacher_logps, renormalize="none", temperature=1.0):
    """Σ_k p_k·(log p_k − log q_{i_k}) with log q = F.log_softmax(z/T); 'teacher' renormalizes p over its
    top-k, 'both' p and q over the ids, 'tail' is the kill table's twin (a (K+1)-th bucket)."""
    z, lp = _work(student_logits), _work(teacher_logps)
    if renormalize == "tail":
        return distill_divergences.sparse_tail_kl(z, teacher_ids, lp, temperature).to(student_logits.dtype)
    live = lp > -torch.inf
    lq = F.log_softmax(z / temperature, dim=-1).gather(-1, teacher_ids)
    if renormalize in ("teacher", "both"):
        lp = lp - torch.logsumexp(lp, dim=-1, keepdim=True)
    if renormalize == "both":
        lq = lq - torch.logsumexp(torch.where(live, lq, -torch.inf), dim=-1, keepdim=True)
    zero = torch.zeros_like(lp)
    kl = torch.where(live, lp.exp() * (torch.where(live, lp, zero) - torch.where(live, lq, zero)), zero).sum(-1)
    return kl.to(student_logits.dtype)


# The other distillation objectives: the kill table's twins (tests/mutants), each a torch.log_softmax
# or torch.softmax of the logits over the vocabulary, with the conventions they implement.
_TWINS = {p.objective: p for p in distill.PAIRS + distill_divergences.PAIRS if p.objective != "distill.sparse_kl"}

TORCH = {
    "name": "torch-standard-kernels", "framework": "torch",
    "objectives": {"lm.cross_entropy": cross_entropy, "lm.token_logprobs": token_logprobs, "lm.entropy": entropy,
                   "distill.symmetric_kl": symmetric_kl, "distill.sparse_kl": sparse_kl,
                   **{objective: _in_float32(p.twin) for objective, p in _TWINS.items()}},
    "conventions": {"lm.cross_entropy": {"reduction": "*"}, "distill.sparse_kl": {"renormalize": "*"},
                    **{objective: p.conventions for objective, p in _TWINS.items()}},
    # F.cross_entropy has neither a z-loss nor a soft cap
    "params": {"lm.cross_entropy": {"z_loss": [0.0], "softcap": [None]}},
}


# ----------------------------------------------------------------------------------- NumPy
# The textbook log-softmax: np.exp, np.sum (NumPy's pairwise sum) and np.log, the maximum shifted
# out; the gradients written by hand (``vjps``).


def _np_log_softmax(z, temperature=1.0):
    with np.errstate(divide="ignore", invalid="ignore"):   # the invalid vectors' NaN, ±inf and T = 0
        x = z / temperature
        shifted = x - np.max(x, axis=-1, keepdims=True)
        return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


def _np_rows(labels):
    return np.arange(len(labels))


def np_token_logprobs(logits, labels, temperature=1.0):
    return _np_log_softmax(logits, temperature)[_np_rows(labels), labels]


def np_token_logprobs_vjp(cotangent, logits, labels, temperature=1.0):
    q = np.exp(_np_log_softmax(logits, temperature))
    onehot = np.zeros_like(q)
    onehot[_np_rows(labels), labels] = 1.0
    return {"logits": cotangent[:, None] * (onehot - q) / temperature}


def _np_q_logq(logits, temperature):
    logq = _np_log_softmax(logits, temperature)
    q = np.exp(logq)
    return q, np.where(q > 0, logq, 0.0)    # 0·log 0 = 0 at impossible tokens


def np_entropy(logits, temperature=1.0):
    q, logq = _np_q_logq(logits, temperature)
    return -np.sum(q * logq, axis=-1)


def np_entropy_vjp(cotangent, logits, temperature=1.0):
    """∂H/∂z_j = −q_j·(log q_j + H)/T."""
    q, logq = _np_q_logq(logits, temperature)
    h = -np.sum(q * logq, axis=-1, keepdims=True)
    return {"logits": -cotangent[:, None] * q * (logq + h) / temperature}


def _np_ce_weights(labels, ignore_index, reduction, normalizer, dtype):
    """Each token's weight in the reduction (0 at ignored tokens)."""
    counted = (labels != ignore_index).astype(dtype)
    if reduction == "mean":
        den = normalizer if normalizer is not None else counted.sum()
        return counted / den if den else counted   # no counted token: every weight is 0
    return counted


def np_cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.0, reduction="mean", normalizer=None):
    logq = _np_log_softmax(logits)
    safe = np.where(labels == ignore_index, 0, labels)
    per = -(1 - label_smoothing) * logq[_np_rows(labels), safe]
    if label_smoothing:
        per = per - label_smoothing * np.mean(logq, axis=-1)
    w = _np_ce_weights(labels, ignore_index, reduction, normalizer, logits.dtype)
    per = np.where(w > 0, per, 0.0)
    return per if reduction == "none" else np.sum(w * per) if reduction == "mean" else np.sum(per)


def np_cross_entropy_vjp(cotangent, logits, labels, ignore_index=-100, label_smoothing=0.0, reduction="mean",
                         normalizer=None):
    """∂ℓ/∂z = q − (1 − ε)·onehot − ε/V per token, times the token's weight and the cotangent."""
    q = np.exp(_np_log_softmax(logits))
    safe = np.where(labels == ignore_index, 0, labels)
    target = np.zeros_like(q)
    target[_np_rows(labels), safe] = 1 - label_smoothing
    w = _np_ce_weights(labels, ignore_index, reduction, normalizer, logits.dtype) * cotangent
    return {"logits": w[:, None] * (q - target - label_smoothing / q.shape[-1])}


NUMPY = {
    "name": "numpy-textbook", "framework": "numpy",
    "objectives": {"lm.cross_entropy": np_cross_entropy, "lm.token_logprobs": np_token_logprobs,
                   "lm.entropy": np_entropy},
    "vjps": {"lm.cross_entropy": np_cross_entropy_vjp, "lm.token_logprobs": np_token_logprobs_vjp,
             "lm.entropy": np_entropy_vjp},
    "conventions": {"lm.cross_entropy": {"reduction": "*"}},
    "params": {"lm.cross_entropy": {"z_loss": [0.0], "softcap": [None]}},
}


# ----------------------------------------------------------------------------------- low precision inside
# The same functions with their inputs rounded to a lower dtype first (float32 inside a float64
# function, bfloat16 inside a float32 one) and the result cast back: the low-precision mutants the
# vocabulary term of the bound must still catch.


def _rounded_inside(fn, low):
    @functools.wraps(fn)
    def run(**kw):
        dtype = next(v.dtype for v in kw.values() if isinstance(v, torch.Tensor) and v.is_floating_point())
        out = fn(**{k: v.to(low) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                    for k, v in kw.items()})
        return out.to(dtype)
    return run


def rounded_inside(low: torch.dtype, dtype: str) -> dict:
    name = str(low).removeprefix("torch.")
    return {**TORCH, "name": f"{name}-inside-{dtype}", "dtypes": [dtype],
            "objectives": {objective: _rounded_inside(fn, low) for objective, fn in TORCH["objectives"].items()}}


FLOAT32_INSIDE_FLOAT64 = rounded_inside(torch.float32, "float64")
BFLOAT16_INSIDE_FLOAT32 = rounded_inside(torch.bfloat16, "float32")
