"""``--target torchtitan``: torchtitan 0.3.0 on CPU, one process and under ``--shard-vocab``.

Calls the library's own loss code (``torchtitan/components/loss.py``):

- ``lm.cross_entropy``: ``CrossEntropyLoss`` (the trainer's ``loss_fn``) on the vector's logits as
  one sequence (``[1, N, V]``): ``cross_entropy_loss`` sums ``F.cross_entropy`` over the tokens
  (``ignore_index=-100``, fixed) and ``__call__`` divides by ``global_valid_tokens``, which the
  trainer passes as the count of labels that are not ignored (``trainer.py`` forward_backward_step);
  a ``normalizer`` is passed as that count, ``reduction='sum'`` passes none. There is no
  per-token reduction, label smoothing, z-loss or soft-capping (unsupported), and no other ignore
  index.
- ``--shard-vocab``: ``_LossParallelCrossEntropy``, the vocabulary-parallel cross-entropy that
  ``cross_entropy_loss`` calls when the logits are sharded over the tensor-parallel group
  (loss.py:43-56), with the shard context's group and the global V: ``reduction='sum'`` for
  ``lm.cross_entropy`` (then divided as above) and ``'none'`` for ``lm.token_logprobs`` (the
  per-token NLL that torchtitan's GRPO negates into log-probabilities, loss.py:118-121; no
  temperature). It places shard r at ``min(V, r·⌈V/K⌉)``: a split with other boundaries is outside
  its contract (unsupported).
- No MoE auxiliary loss: torchtitan balances its experts without one (``models/common/moe.py``:
  ``load_balance_coeff`` is the speed of the auxiliary-loss-free expert-bias update).

Arithmetic: both compute in float32 (``pred.flatten(0, 1).float()``, loss.py:59 and :127); the
loss is returned in float32, the gradient cast back to the logits' dtype.

The package ``torchtitan.config`` imports ``tyro`` (the command line), which the loss code never
calls: it stands as a placeholder. ``spmd_types`` (torchtitan's type checker for SPMD code, a
runtime import of loss.py) must be installed.

Install: ``pip install --no-deps torchtitan==0.3.0 spmd_types==0.2.3`` (or ``scripts/install-peers.sh``).
"""
from __future__ import annotations

from lossproof.conformance.targets.imports import import_bare
from lossproof.conformance.targets.peers._common import Arithmetic as A
from lossproof.conformance.targets.peers._common import Convention as C
from lossproof.conformance.targets.peers._common import build, load_or_explain, require

VERSION = "0.3.0"
INSTALL = "pip install --no-deps torchtitan==0.3.0 spmd_types==0.2.3"
LOSS = "torchtitan/components/loss.py"
TRAINER = "torchtitan/trainer.py"

CONVENTIONS = [
    C("lm.cross_entropy", "reduction", ("mean", "sum"), f"{LOSS} CrossEntropyLoss.__call__ (the sum of "
      f"cross_entropy_loss divided by global_valid_tokens, the non-ignored labels, {TRAINER} "
      "forward_backward_step; 'sum' without it; no per-token reduction)"),
]
PARAM_DEFAULTS = [
    C("lm.cross_entropy", "ignore_index", (-100,), f"{LOSS} IGNORE_INDEX = -100 (fixed)"),
]
ARITHMETIC = [
    A("lm.cross_entropy", "careful", f"{LOSS}:59 cross_entropy_loss (pred.flatten(0, 1).float()) and :127 "
      "_LossParallelCrossEntropy.forward (logits.flatten(0, -2).float())"),
]

FINDINGS: list = []


def _loss_module():
    return import_bare("torchtitan.components.loss", packages=("torchtitan", "torchtitan.components"),
                       absent=("tyro",))


def _unsupported(ignore_index, label_smoothing, z_loss, softcap):
    if label_smoothing or z_loss or softcap is not None:
        raise NotImplementedError("torchtitan 0.3.0's cross-entropy has no label smoothing, z-loss or soft-capping")
    if ignore_index != -100:
        raise NotImplementedError("torchtitan 0.3.0 ignores the labels -100 only (IGNORE_INDEX)")


def _valid_tokens(labels, reduction, normalizer):
    """What the trainer passes as global_valid_tokens: the count of labels that are not ignored."""
    import torch
    if reduction == "sum":
        return None
    return torch.tensor(normalizer) if normalizer is not None else (labels != -100).sum()


def cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                  reduction="mean", normalizer=None):
    _unsupported(ignore_index, label_smoothing, z_loss, softcap)
    if reduction == "none":
        raise NotImplementedError("torchtitan 0.3.0's cross_entropy_loss sums over the tokens: no reduction 'none'")
    loss_fn = _loss_module().CrossEntropyLoss(_loss_module().CrossEntropyLoss.Config())
    n, v = logits.shape
    loss, _ = loss_fn(logits.reshape(1, n, v), labels.reshape(1, n), _valid_tokens(labels, reduction, normalizer))
    return loss


def _parallel(logits, labels, ctx, reduction):
    """_LossParallelCrossEntropy on this rank's shard; a split other than torchtitan's ⌈V/K⌉ chunks
    is outside its contract."""
    chunk = -(-ctx.vocab_size // ctx.world_size)
    start = min(ctx.vocab_size, chunk * ctx.rank)
    if ctx.vocab_start != start or ctx.vocab_end != min(ctx.vocab_size, start + chunk):
        raise NotImplementedError(f"torchtitan shards the vocabulary in chunks of ⌈V/K⌉ = {chunk} tokens: "
                                  f"this split puts [{ctx.vocab_start}, {ctx.vocab_end}) on rank {ctx.rank}")
    return _loss_module()._LossParallelCrossEntropy.apply(logits, labels, ctx.group, ctx.vocab_size, reduction)


def sharded_cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                          reduction="mean", normalizer=None, *, ctx):
    _unsupported(ignore_index, label_smoothing, z_loss, softcap)
    if reduction == "none":
        return _parallel(logits, labels, ctx, "none")
    total = _parallel(logits, labels, ctx, "sum")
    count = _valid_tokens(labels, reduction, normalizer)
    return total if count is None else total / count


def sharded_token_logprobs(logits, labels, temperature=1.0, *, ctx):
    """log q_y: the negated per-token NLL of reduction 'none' (GRPO's use of it)."""
    return -_parallel(logits, labels, ctx, "none")


def target():
    version = require("torchtitan", "torchtitan", VERSION, INSTALL)
    load_or_explain(_loss_module, "torchtitan", INSTALL)
    return build("torchtitan", version, {"lm.cross_entropy": cross_entropy}, CONVENTIONS, FINDINGS, ARITHMETIC,
                 sharded={"lm.cross_entropy": sharded_cross_entropy, "lm.token_logprobs": sharded_token_logprobs},
                 temperature_free=("lm.token_logprobs",),
                 computes_in={"lm.cross_entropy": "float32", "lm.token_logprobs": "float32"})
