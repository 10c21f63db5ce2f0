"""Mutants of the ``lm`` family: ``lm.cross_entropy`` (torch.nn.functional.cross_entropy with label
smoothing, z-loss, soft-capping and transformers' num_items_in_batch), ``lm.token_logprobs`` and
``lm.entropy``; ``lm.linear_cross_entropy`` (F.linear, then the cross-entropy); gradients by autograd."""
from __future__ import annotations

import torch

from mutants import Pair, checked, export

CE, LP, ENT, LCE = "lm.cross_entropy", "lm.token_logprobs", "lm.entropy", "lm.linear_cross_entropy"
CE_CONVENTIONS = {"reduction": "*"}


def log_softmax(z):
    """z − logsumexp(z): torch.logsumexp is within 1 ulp of log Z on the V = 128256 rows of the lm Large
    vectors, where the CPU log_softmax kernel is thousands of ulps off (within the bound's vocabulary
    term, docs/vectors.md#tolerance-policy)."""
    return z - torch.logsumexp(z, dim=-1, keepdim=True)


def cross_entropy(logits, labels, ignore_index, label_smoothing, z_loss, softcap, reduction, normalizer, *,
                  ignore_normalizer=False, mean_over_all=False, smoothing_v_minus_1=False,
                  smoothing_on_ignored=False, z_loss_on_ignored=False, float32=False, z_loss_on_ignored_per_token=False,
                  smoothing_from_probabilities=False):
    """The loss as PyTorch documents it plus the z-loss and the cap; every keyword after ``*`` switches
    one bug on."""
    z = logits.float() if float32 else logits
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    y = torch.as_tensor(labels, device=z.device)
    counted = y != ignore_index
    logq = log_softmax(z)
    nll = -logq.gather(-1, torch.where(counted, y, 0)[:, None])[:, 0]
    v = z.shape[-1]
    per = torch.where(counted, nll, 0.0)
    if label_smoothing:
        finite = torch.where(torch.isfinite(logq), logq, 0.0)
        smooth = -(torch.log(torch.softmax(z, dim=-1)) if smoothing_from_probabilities else finite).sum(dim=-1)
        if not smoothing_on_ignored:
            smooth = torch.where(counted, smooth, 0.0)
        if smoothing_v_minus_1:
            eps_i = label_smoothing / (v - 1) if v > 1 else 0.0
            per = (1 - label_smoothing - eps_i) * per + eps_i * smooth
        else:
            per = (1 - label_smoothing) * per + label_smoothing / v * smooth
    if z_loss:
        lse2 = torch.logsumexp(z, dim=-1) ** 2
        kept = z_loss_on_ignored or (z_loss_on_ignored_per_token and reduction == "none")
        per = per + z_loss * (lse2 if kept else torch.where(counted, lse2, 0.0))
    if reduction == "none":
        out = per
    elif reduction == "sum":
        out = per.sum()
    else:
        count = counted.sum()
        if mean_over_all:
            count = torch.tensor(y.shape[0])
        out = per.sum() / (normalizer if normalizer is not None and not ignore_normalizer else count)
    return out.to(logits.dtype)


def _ce(**bugs):
    def fn(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="mean",
           normalizer=None):
        return cross_entropy(logits, labels, ignore_index, label_smoothing, z_loss, softcap, reduction, normalizer,
                             **bugs)
    return fn


@checked(CE)
def ce_twin(**kw):
    """torch.nn.functional.cross_entropy's loss with PaLM's z-loss and Gemma 2's cap."""
    return _ce()(**kw)


@checked(CE)
def ce_normalizer_ignored(**kw):
    """The micro-batch mean where the caller passed the accumulated batch's token count.

    Seen: huggingface/transformers PR #34191 (gradient accumulation: each micro-batch's mean divided by
    the steps is not the batch mean when micro-batches hold different token counts; the fix sums and
    divides by num_items_in_batch) and issue #35203 (models whose loss still ignored num_items_in_batch)."""
    return _ce(ignore_normalizer=True)(**kw)


@checked(CE)
def ce_mean_over_all_tokens(**kw):
    """'mean' divided by every token, ignored (padding) tokens included.

    Seen: the per-token loss taken with reduction='none' and averaged with .mean() over a padded batch,
    which torch.nn.functional.cross_entropy's own 'mean' avoids (it averages over the non-ignored
    targets); Dr. GRPO (arXiv 2503.20783) §3 on the bias of normalising by padded lengths."""
    return _ce(mean_over_all=True)(**kw)


@checked(CE)
def ce_smoothing_over_v_minus_1(**kw):
    """Label smoothing that spreads ε over the V − 1 wrong classes instead of all V.

    Seen: facebookresearch/fairseq criterions/label_smoothed_cross_entropy.py label_smoothed_nll_loss
    (eps_i = epsilon / (V − 1)), against PyTorch's and Szegedy et al. 2016 §7's ε/V: an undeclared
    switch of convention."""
    return _ce(smoothing_v_minus_1=True)(**kw)


@checked(CE)
def ce_smoothing_on_ignored_tokens(**kw):
    """The label-smoothing term counted at ignored (padding) tokens.

    Seen: facebookresearch/fairseq label_smoothed_nll_loss masks both terms with pad_mask
    (nll_loss and smooth_loss), and PyTorch 2.x cross_entropy zeroes the smoothing at ignore_index;
    a smoothed loss that masks only the NLL term keeps ε·mean(−log q) of every padding token."""
    return _ce(smoothing_on_ignored=True)(**kw)


@checked(CE)
def ce_z_loss_on_ignored_tokens(**kw):
    """The z-loss ζ·lse² added at ignored tokens too.

    Seen: Liger 0.8.5 liger_kernel/ops/cross_entropy.py, whose kernel returns before the z-loss for a row
    whose label is ignore_index (the behaviour this mutant drops); PaLM (arXiv 2204.02311) §5 defines the
    z-loss as an auxiliary of the trained tokens."""
    return _ce(z_loss_on_ignored=True)(**kw)


@checked(CE)
def ce_z_loss_on_ignored_per_token(**kw):
    """The z-loss ζ·lse² kept at ignored tokens when the loss is returned per token.

    Seen: OLMo-core 3.0.0 olmo_core/nn/functional/cross_entropy_loss.py cross_entropy_loss (lines 40–48),
    which multiplies z² = logsumexp² by the label mask under reduction 'mean' and 'sum' only: with
    'none' every ignored (padding) token carries ζ·lse²; PaLM (arXiv 2204.02311) §5 defines the z-loss
    as an auxiliary of the trained tokens."""
    return _ce(z_loss_on_ignored_per_token=True)(**kw)


@checked(CE)
def ce_smoothing_from_probabilities(**kw):
    """The smoothing term formed as −Σ_v log(softmax(z)_v) from the probabilities.

    Seen: harvardnlp/annotated-transformer issue #109 (LabelSmoothing fed log of probabilities: log 0 =
    −inf, the loss inf) and deeplearning4j/deeplearning4j issue #785 (log of an underflowed softmax);
    PyTorch's cross_entropy forms the term from log_softmax, which stays finite where a probability
    underflows."""
    return _ce(smoothing_from_probabilities=True)(**kw)


@checked(CE)
def ce_float32_inside_float64(**kw):
    """float32 computation inside a float64 call (the result cast back to float64).

    Seen: huggingface/transformers 5.25 loss/loss_utils.py ForCausalLMLoss (`logits = logits.float()`,
    which downcasts float64 logits)."""
    return _ce(float32=True)(**kw)


def _lce(*, bias_detached=False, bfloat16_logits=False, normalizer_twice=False):
    def fn(hidden, weight, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
           reduction="mean", normalizer=None, bias=None):
        h, w, b = hidden, weight, bias
        if bias_detached and b is not None:
            b = b.detach()
        if bfloat16_logits:
            z = torch.nn.functional.linear(h.bfloat16(), w.bfloat16(), None if b is None else b.bfloat16())
            z = z.to(hidden.dtype)
        else:
            z = torch.nn.functional.linear(h, w, b)
        loss = cross_entropy(z, labels, ignore_index, label_smoothing, z_loss, softcap, reduction, normalizer)
        if normalizer_twice and normalizer is not None:
            loss = loss / normalizer
        return loss
    return fn


@checked(LCE)
def lce_twin(**kw):
    """F.linear(hidden, weight, bias), then the cross-entropy above (Liger's unfused reference path)."""
    return _lce()(**kw)


@checked(LCE)
def lce_bias_not_trained(**kw):
    """The output bias added to the logits but left out of the backward: no gradient reaches it.

    Seen: Liger 0.8.5 liger_kernel/ops/fused_linear_cross_entropy.py fused_linear_cross_entropy_forward
    sums grad_bias only under `if bias is not None and input_requires_grad`, so a call whose hidden
    states need no gradient (a frozen trunk, a probe of the head) leaves the bias gradient at 0."""
    return _lce(bias_detached=True)(**kw)


@checked(LCE)
def lce_bfloat16_logits(**kw):
    """The lm-head matmul run in bfloat16 whatever the inputs' dtype (logits rounded to 8 bits, then
    upcast for the loss).

    Seen: torch.autocast (PyTorch 2.x, "CUDA Ops that can autocast to float16/bfloat16": linear, matmul)
    around a float32 model; transformers' ForCausalLMLoss upcasts logits that are already rounded."""
    return _lce(bfloat16_logits=True)(**kw)


@checked(LCE)
def lce_normalizer_twice(**kw):
    """The summed loss divided by num_items_in_batch, then by it once more.

    Seen: transformers 5.25 trainer.py Trainer.training_step divides the loss by the accumulation steps
    unless `loss_is_scaled_for_ga` (the model or compute_loss_func took num_items_in_batch): a loss
    already divided by the accumulated count that the trainer does not recognise is normalised twice
    (the gradient-accumulation bug class of PR #34191)."""
    return _lce(normalizer_twice=True)(**kw)


def token_logprobs(logits, labels, temperature, *, no_temperature=False, log_of_softmax=False):
    z = logits if no_temperature else logits / temperature
    logq = torch.log(torch.softmax(z, dim=-1)) if log_of_softmax else log_softmax(z)
    return logq.gather(-1, torch.as_tensor(labels, device=z.device)[:, None])[:, 0]


@checked(LP)
def logprobs_twin(logits, labels, temperature=1.0):
    """log_softmax(z/T) at the sampled token (TRL selective_log_softmax)."""
    return token_logprobs(logits, labels, temperature)


@checked(LP)
def logprobs_without_temperature(logits, labels, temperature=1.0):
    """Log-probabilities of a rollout sampled at T ≠ 1 taken at T = 1.

    Seen: huggingface/trl GRPOTrainer._get_per_token_logps, which gained the division of the logits by
    the sampling temperature in 2025 (TRL 1.16.0 selective_log_softmax takes ``temperature``); verl 0.9.1
    and OpenRLHF 0.11.2 log_probs_from_logits divide before the log-softmax."""
    return token_logprobs(logits, labels, temperature, no_temperature=True)


@checked(LP)
def logprobs_log_of_softmax(logits, labels, temperature=1.0):
    """log(softmax(z)) instead of log_softmax(z): −inf once a probability underflows.

    Seen: the PyTorch documentation of torch.nn.Softmax ("Use LogSoftmax instead (it's faster and has
    better numerical properties)"); the underflow shows at logits ±1e4."""
    return token_logprobs(logits, labels, temperature, log_of_softmax=True)


def entropy(logits, temperature, *, verl_form=False):
    z = logits / temperature
    if verl_form:
        # verl 0.9.1 entropy_from_logits: logsumexp(z) − Σ softmax(z)·z
        return torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(dim=-1)
    logq = log_softmax(z)
    live = torch.where(torch.isfinite(logq), logq, 0.0)   # 0·log 0 = 0 at impossible tokens
    return -(logq.exp() * live).sum(dim=-1)


@checked(ENT)
def entropy_twin(logits, temperature=1.0):
    """−Σ q log q of softmax(z/T), 0·log 0 = 0."""
    return entropy(logits, temperature)


@checked(ENT)
def entropy_nan_at_neg_inf(logits, temperature=1.0):
    """Entropy as lse − Σ q·z: NaN at a −inf logit (0·(−inf)).

    Seen: verl 0.9.1 verl/utils/torch_functional.py entropy_from_logits (`torch.logsumexp(logits) -
    torch.sum(pd * logits)`), also its gradient; TRL 1.16.0 trl/trainer/utils.py entropy_from_logits off its
    Triton path (`-(torch.exp(logps) * logps).sum(-1)`, the same 0·(−inf)); masked vocabularies carry −inf
    logits."""
    return entropy(logits, temperature, verl_form=True)


PAIRS = [
    Pair("LM_CE_NORMALIZER_IGNORED", CE, ce_normalizer_ignored, ce_twin, CE_CONVENTIONS),
    Pair("LM_CE_MEAN_OVER_ALL_TOKENS", CE, ce_mean_over_all_tokens, ce_twin, CE_CONVENTIONS),
    Pair("LM_CE_SMOOTHING_OVER_V_MINUS_1", CE, ce_smoothing_over_v_minus_1, ce_twin, CE_CONVENTIONS),
    Pair("LM_CE_SMOOTHING_ON_IGNORED", CE, ce_smoothing_on_ignored_tokens, ce_twin, CE_CONVENTIONS),
    Pair("LM_CE_Z_LOSS_ON_IGNORED", CE, ce_z_loss_on_ignored_tokens, ce_twin, CE_CONVENTIONS),
    Pair("LM_CE_FLOAT32_INSIDE_FLOAT64", CE, ce_float32_inside_float64, ce_twin, CE_CONVENTIONS),
    Pair("LM_CE_Z_LOSS_ON_IGNORED_PER_TOKEN", CE, ce_z_loss_on_ignored_per_token, ce_twin, CE_CONVENTIONS),
    Pair("LM_CE_SMOOTHING_FROM_PROBABILITIES", CE, ce_smoothing_from_probabilities, ce_twin, CE_CONVENTIONS),
    Pair("LM_LCE_BIAS_NOT_TRAINED", LCE, lce_bias_not_trained, lce_twin, CE_CONVENTIONS),
    Pair("LM_LCE_BFLOAT16_LOGITS", LCE, lce_bfloat16_logits, lce_twin, CE_CONVENTIONS),
    Pair("LM_LCE_NORMALIZER_TWICE", LCE, lce_normalizer_twice, lce_twin, CE_CONVENTIONS),
    Pair("LM_LOGPROBS_NO_TEMPERATURE", LP, logprobs_without_temperature, logprobs_twin),
    Pair("LM_LOGPROBS_LOG_OF_SOFTMAX", LP, logprobs_log_of_softmax, logprobs_twin),
    Pair("LM_ENTROPY_NAN_AT_NEG_INF", ENT, entropy_nan_at_neg_inf, entropy_twin),
]
export(globals(), PAIRS)
