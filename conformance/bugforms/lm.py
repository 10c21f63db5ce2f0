"""Known wrong formulas of the lm.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

import numpy as np

from lossproof.conformance import numbers
from lossproof.conformance.bugforms import RUN_DTYPE, Form, call
from lossproof.refimpl.arrays import lm


def _zloss_square_of_mean(kw):
    # the square of a mean needs a mean: per token ('none') or summed the z-loss is the catalog's
    if kw["reduction"] != "mean" or not kw["z_loss"]:
        return {"loss": call(lm.cross_entropy, kw)}
    xp, _, zc, _, _, counted, _, zeta, _, denominator = call(lm._ce_prepare, kw)
    lse = lm._Soft(xp, zc, 1.0).lse[:, 0]
    mean_lse = np.sum(np.where(counted, lse, 0.0)) / denominator
    return {"loss": call(lm.cross_entropy, kw, z_loss=0.0) + zeta * mean_lse * mean_lse}


def _log_of_softmax(kw):
    _, _, _, _, onehot, d = call(lm._logprob_prepare, kw)
    # the probability itself, held in the run's dtype, then its log: 0 (and log 0 = −inf) once
    # q_y underflows there (float32 below about 1.4e-45, float64 below 4.9e-324)
    q = np.sum(np.where(onehot, d.p, 0.0), axis=-1)
    if kw[RUN_DTYPE] != "float64":
        q = np.asarray(numbers.round_to(q.tolist(), kw[RUN_DTYPE]), dtype=np.float64)
    with np.errstate(divide="ignore"):
        return {"logp": np.log(q)}


def _bfloat16(x):
    return np.asarray(numbers.round_to(np.asarray(x).tolist(), "bfloat16"), dtype=np.float64)


def _bfloat16_logits(kw):
    h, w, b = _bfloat16(kw["hidden"]), _bfloat16(kw["weight"]), kw.get("bias")
    z = h @ w.T if b is None else h @ w.T + _bfloat16(b)
    # the kernel sums exact products of bfloat16 values in float32 and rounds the logits to bfloat16 once;
    # the float64 sum rounds to the same bfloat16 but within float32's rounding of a bfloat16 tie
    return {"loss": call(lm.cross_entropy, kw, logits=_bfloat16(z))}


FORMS = (
    Form("lm.cross_entropy", "z-loss of the mean",
         "the z-loss is ζ·(mean lse)², the square of the batch's mean log-partition, where PaLM §5 adds "
         "ζ·lse² at every token (the mean of the squares)",
         "square each token's logsumexp before the mean: ζ·mean(lse²), not ζ·mean(lse)²",
         ("mlfoundations/open_lm#92",), _zloss_square_of_mean),
    Form("lm.token_logprobs", "log of the softmax",
         "the log-probability is log(softmax(z/T)_y), the log of a probability that underflows to 0 (log 0 = −inf, "
         "and a NaN gradient) once log q_y is below the dtype's smallest number, where log_softmax keeps it finite",
         "take log_softmax(z/T) (z/T − logsumexp(z/T)), not the log of the softmax",
         ("https://pytorch.org/docs/stable/generated/torch.nn.Softmax.html",), _log_of_softmax),
    Form("lm.linear_cross_entropy", "bfloat16 logits",
         "the lm-head matmul runs in bfloat16 whatever the inputs' dtype: hidden, weight (and bias) rounded to "
         "bfloat16 and the logits rounded to bfloat16 (8 significant bits), then upcast for the loss",
         "compute the logits in the inputs' dtype (no autocast around the lm head, or a float32/float64 matmul) "
         "before the cross-entropy",
         ("https://pytorch.org/docs/stable/amp.html",), _bfloat16_logits),
)
