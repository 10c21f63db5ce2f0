"""Token cross-entropy and entropy as libraries without an adapter wrote them, each defect
transcribed from a public report (the table in ``transcribed.table`` links it), beside the
corrected function. The twin is the documented formula (refimpl.exact.lm): per counted token
(1−ε)(lse − z'_y) + ε(lse − mean_v z') + ζ·lse², z' = s·tanh(z/s) under a soft cap."""
from __future__ import annotations

import math

import torch


def _parts(logits, labels, ignore_index, softcap):
    z = logits if softcap is None else softcap * torch.tanh(logits / softcap)
    counted = labels != ignore_index
    y = torch.where(counted, labels, torch.zeros_like(labels)).long()
    lse = torch.logsumexp(z, dim=-1)
    nll = lse - z.gather(-1, y[:, None])[:, 0]
    return z, counted, lse, nll


def _reduce(per, counted, reduction, normalizer):
    per = torch.where(counted, per, torch.zeros_like(per))
    if reduction == "none":
        return per
    total = per.sum()
    if reduction == "sum":
        return total
    return total / (normalizer if normalizer is not None else counted.sum())


def cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                  reduction="mean", normalizer=None):
    z, counted, lse, nll = _parts(logits, labels, ignore_index, softcap)
    per = (1 - label_smoothing) * nll
    if label_smoothing:
        per = per + label_smoothing * (lse - z.mean(-1))
    if z_loss:
        per = per + z_loss * lse ** 2
    return _reduce(per, counted, reduction, normalizer)


def ce_microbatch_count(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                        reduction="mean", normalizer=None):
    """torchtune before PR #1875: each micro-batch's loss is divided by its own non-padding
    tokens, whatever the count of the whole accumulated batch (normalizer) is."""
    return cross_entropy(logits, labels, ignore_index, label_smoothing, z_loss, softcap, reduction, None)


def ce_zloss_square_of_mean(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                            reduction="mean", normalizer=None):
    """open_lm before PR #92: the z-loss is ζ·(mean lse)², the square of the mean instead of the
    mean of the squares."""
    if reduction != "mean" or not z_loss:
        return cross_entropy(logits, labels, ignore_index, label_smoothing, z_loss, softcap, reduction, normalizer)
    _, counted, lse, _ = _parts(logits, labels, ignore_index, softcap)
    ce = cross_entropy(logits, labels, ignore_index, label_smoothing, 0.0, softcap, reduction, normalizer)
    mean_lse = _reduce(lse, counted, "mean", normalizer)
    return ce + z_loss * mean_lse ** 2


def ce_smoothing_counts_ignored(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                                reduction="mean", normalizer=None):
    """PyTorch issue #73205: the uniform (smoothing) part of the loss is summed over every
    token, ignored ones included; the one-hot part leaves them out."""
    z, counted, lse, nll = _parts(logits, labels, ignore_index, softcap)
    per = torch.where(counted, (1 - label_smoothing) * nll + z_loss * lse ** 2, torch.zeros_like(nll))
    if label_smoothing:
        per = per + label_smoothing * (lse - z.mean(-1))
    if reduction == "none":
        return per
    total = per.sum()
    return total if reduction == "sum" else total / (normalizer if normalizer is not None else counted.sum())


def ce_denominator_counts_padding(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0,
                                  softcap=None, reduction="mean", normalizer=None):
    """eladhoffer/utils.pytorch issue #4: the smoothed cross-entropy is averaged over
    logits.size(0), padding tokens included, instead of the tokens that count."""
    return cross_entropy(logits, labels, ignore_index, label_smoothing, z_loss, softcap, reduction,
                         normalizer if normalizer is not None else float(labels.shape[0]))


def ce_smoothing_local_vocab(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                             reduction="mean", normalizer=None):
    """Megatron-LM issue #7464 (tensor parallel 2, seen from rank 0): the smoothing term's mean
    log-probability runs over the rank's own half of the vocabulary only."""
    z, counted, lse, nll = _parts(logits, labels, ignore_index, softcap)
    local = z[:, : max(1, z.shape[-1] // 2)]
    per = (1 - label_smoothing) * nll
    if label_smoothing:
        per = per + label_smoothing * (lse - local.mean(-1))
    if z_loss:
        per = per + z_loss * lse ** 2
    return _reduce(per, counted, reduction, normalizer)


def ce_plus_log_tp(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                   reduction="mean", normalizer=None):
    """Megatron-LM issue #7452, row 2 (tensor parallel 2, logits gathered before the
    vocab-parallel loss): every counted token's loss is log(TP) too large; the gradient is right."""
    counted = labels != ignore_index
    per = cross_entropy(logits, labels, ignore_index, label_smoothing, z_loss, softcap, "none")
    per = per + torch.where(counted, torch.full_like(per, math.log(2.0)), torch.zeros_like(per)).detach()
    return _reduce(per, counted, reduction, normalizer)


def ce_smoothing_over_other_classes(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0,
                                    softcap=None, reduction="mean", normalizer=None):
    """OpenNMT-py LabelSmoothingLoss (issue #1463): the smoothing mass ε is spread over the
    V − 1 classes other than the label (the label keeps 1 − ε), not over all V."""
    z, counted, lse, nll = _parts(logits, labels, ignore_index, softcap)
    v = z.shape[-1]
    per = (1 - label_smoothing) * nll
    if label_smoothing and v > 1:
        others = v * lse - z.sum(-1) - nll      # Σ_{v ≠ y} −log q_v
        per = per + label_smoothing / (v - 1) * others
    if z_loss:
        per = per + z_loss * lse ** 2
    return _reduce(per, counted, reduction, normalizer)


def ce_smoothing_adds_one_over_v(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0,
                                 softcap=None, reduction="mean", normalizer=None):
    """ConvE issue #55: the smoothed target is (1 − ε)·onehot + 1/V, not (1 − ε)·onehot + ε/V."""
    z, counted, lse, nll = _parts(logits, labels, ignore_index, softcap)
    per = (1 - label_smoothing) * nll
    if label_smoothing:
        per = per + (lse - z.mean(-1))
    if z_loss:
        per = per + z_loss * lse ** 2
    return _reduce(per, counted, reduction, normalizer)


def ce_softcap_times_logit(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                           reduction="mean", normalizer=None):
    """unsloth-zoo before PR #593: the soft cap is z·tanh(z/s) instead of s·tanh(z/s)."""
    if softcap is None:
        return cross_entropy(logits, labels, ignore_index, label_smoothing, z_loss, None, reduction, normalizer)
    capped = logits * torch.tanh(logits / softcap)
    return cross_entropy(capped, labels, ignore_index, label_smoothing, z_loss, None, reduction, normalizer)


def ce_softcap_never_applied(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                             reduction="mean", normalizer=None):
    """apple/ml-cross-entropy issue #48: the Gemma 2 patch never passes softcap to the loss."""
    return cross_entropy(logits, labels, ignore_index, label_smoothing, z_loss, None, reduction, normalizer)


def entropy(logits, temperature=1.0):
    """H = Σ q·(lse − z), z shifted by its row maximum: each term is −q·log q formed from the
    exact difference lse − z."""
    z = logits / temperature
    z = z - z.max(dim=-1, keepdim=True).values.detach()
    lse = torch.logsumexp(z, dim=-1, keepdim=True)
    q = torch.exp(z - lse)
    # 0·(−inf) = 0: an impossible token adds nothing, to the value or the gradient
    return (q * torch.where(q > 0, lse - z, torch.zeros_like(z))).sum(-1)


def entropy_zero_times_log_zero(logits, temperature=1.0):
    """pytorch-ood before PR #85: −Σ q·log q with log q = −inf where q = 0, so 0·(−inf) = NaN on
    rows with impossible tokens."""
    logq = torch.log_softmax(logits / temperature, dim=-1)
    return -(logq.exp() * logq).sum(-1)


def token_logprobs(logits, labels, temperature=1.0):
    """z_y − lse(z) with z = logits/T shifted by its row maximum (torch.log_softmax loses about
    four times the tolerance over Llama 3's 128256 logits in float64)."""
    z = logits / temperature
    z = z - z.max(dim=-1, keepdim=True).values.detach()
    return z.gather(-1, labels.long()[:, None])[:, 0] - torch.logsumexp(z, dim=-1)


def token_logprobs_no_temperature(logits, labels, temperature=1.0):
    """slime before PR #557: the trainer's log-probabilities ignore the sampling temperature."""
    return token_logprobs(logits, labels, 1.0)


def token_logprobs_temperature_twice(logits, labels, temperature=1.0):
    """RL-Kernel issue #81: the logits are divided by the temperature once for every backend
    and again inside one backend's branch: softmax(z/T²)."""
    return token_logprobs(logits / temperature, labels, temperature)


def token_logprobs_temperature_after_log_softmax(logits, labels, temperature=1.0):
    """Kimi-Audio PR #161: the temperature applied after log_softmax (log q / T), which is not
    log softmax(z / T): the result is not normalised."""
    return token_logprobs(logits, labels, 1.0) / temperature
