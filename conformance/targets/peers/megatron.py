"""``--target megatron``: Megatron-core 0.16.1 on CPU, tensor-parallel size 1 and under ``--shard-vocab``.

Calls the library's own loss code:

- ``lm.cross_entropy``: ``megatron/core/tensor_parallel/cross_entropy.py
  vocab_parallel_cross_entropy`` (with its label smoothing) on the vector's logits as ``[N, 1, V]``
  (sequence × micro-batch × vocabulary). It returns one loss per token and has no ignore index:
  Megatron's training loop multiplies the per-token losses by the loss mask and divides the sum by
  the number of tokens (``pretrain_gpt.py loss_func``, outside the megatron-core wheel); the adapter
  does the same with the tokens whose label is not ``ignore_index`` (an ignored token is passed
  the lowest token id whose logit is finite, a real token as Megatron's data gives it, and masked
  out). ``reduction='sum'`` is the masked sum, ``'none'`` the masked per-token
  losses, a ``normalizer`` divides the sum. There is no z-loss or soft-capping in it (unsupported).
  The variant ``lm.cross_entropy[fused]`` (reported as ``megatron[fused]``) is
  ``megatron/core/fusions/fused_cross_entropy.py fused_vocab_parallel_cross_entropy``, what
  ``cross_entropy_loss_fusion=True`` selects (no label smoothing). Its helpers are wrapped in
  ``jit_fuser`` (``torch.compile``); they run with torch.compile's stance ``force_eager``, the same
  Python code without a compiler, which a CPU run does not need.
- At tensor-parallel size 1 the process group is a stand-in of size 1 and rank 0 (``size()``,
  ``rank()``) and ``torch.distributed.all_reduce`` the identity, what an all-reduce over one rank
  is; ``parallel_state``'s getters, which ``cross_entropy.py`` imports by name, are rebound for the
  call to that group. Under ``--shard-vocab`` they answer with the shard context's group, rank and
  size and the all-reduces are the real ones. Megatron derives a shard's first token id from its
  width (``VocabUtility.vocab_range_from_per_partition_vocab_size``: ``rank · V_r``; it pads the
  vocabulary to a multiple of the tensor-parallel size), so a split with shards of unequal width is
  outside its contract (unsupported).
- ``moe.router_z_loss``: ``megatron/core/transformer/moe/moe_utils.py z_loss_func`` with coefficient
  1, its ``padding_mask`` the complement of the vector's mask (True marks padding, as its code reads
  it: ``valid_mask = ~padding_mask``).
- ``moe.load_balancing``: the router's own ``TopKRouter._apply_aux_loss`` (form ``switch``) or
  ``_apply_seq_aux_loss`` (form ``sequence``, ``moe_router_score_function='sigmoid'``, DeepSeek-V3)
  on a stand-in router (``topk``, ``config.num_moe_experts``, a size-1 ``tp_cp_group``, coefficient
  1) whose ``attach_and_log_load_balancing_loss`` hands back the loss it is given; the scores and
  routing map come from ``compute_routing_scores_for_aux_loss`` (softmax or normalised sigmoid,
  top-k). The sequence-wise loss takes ``[S, B, E]`` (sequence-major) logits: the vector's
  ``B`` sequences of ``seq_len`` tokens are transposed into it. Form ``per-layer-sum`` is the
  switch loss of each layer summed, as every MoE layer attaches its own to the gradient.

Conventions: the label smoothing spreads α over the V − 1 classes other than the label
(``smoothing_classes='others'``); the switch loss divides f by top_k (``fraction_norm='top_k'``).

Arithmetic: ``calculate_logits_max`` upcasts the logits (``.float()``), so the cross-entropy is
computed in float32 for every input dtype (``computes_in``); ``z_loss_func`` computes in the
logits' dtype; ``compute_routing_scores_for_aux_loss`` takes the softmax in float32 (finding
``megatron-aux-scores-float32``: the sequence-wise loss computes in float64 for float64 logits, so
the declaration is per form) and the normalised sigmoid in the logits' dtype.

Install: ``pip install --no-deps megatron-core==0.16.1`` (or ``scripts/install-peers.sh``).
"""
from __future__ import annotations

import warnings
from contextlib import ExitStack
from types import SimpleNamespace
from unittest import mock

import numpy as np

from lossproof.conformance.numbers import decode_exact
from lossproof.conformance.targets.peers._common import Arithmetic as A
from lossproof.conformance.targets.peers._common import Convention as C
from lossproof.conformance.targets.peers._common import (
    Finding,
    arguments,
    build,
    decoded,
    deviation_shows,
    load_or_explain,
    require,
    where,
)

VERSION = "0.16.1"
INSTALL = "pip install --no-deps megatron-core==0.16.1"
CE = "megatron/core/tensor_parallel/cross_entropy.py"
FUSED = "megatron/core/fusions/fused_cross_entropy.py"
MOE = "megatron/core/transformer/moe/moe_utils.py"
ROUTER = "megatron/core/transformer/moe/router.py"

CONVENTIONS = [
    C("lm.cross_entropy", "reduction", ("mean", "sum", "none"), f"{CE} vocab_parallel_cross_entropy (per-token "
      "losses; Megatron's loss_func sums them times the loss mask and divides by the token count)"),
    C("moe.load_balancing", "form", ("switch", "sequence", "per-layer-sum"), f"{ROUTER} TopKRouter._apply_aux_loss "
      "(moe_router_load_balancing_type 'aux_loss'), _apply_seq_aux_loss ('seq_aux_loss', DeepSeek-V3); every MoE "
      "layer attaches its own loss (a sum over layers)"),
    C("moe.load_balancing", "fraction_norm", ("top_k", "none"), f"{MOE}:127-131 switch_load_balancing_loss_func "
      "(num_experts * moe_aux_loss_coeff / (topk * total_num_tokens * total_num_tokens): f/k); 'none' with form "
      "'sequence', whose DeepSeek-V3 f carries the 1/k already, and at top_k = 1"),
    C("lm.cross_entropy", "smoothing_classes", ("others", "all"), f"{CE}:165-182 (smoothing = label_smoothing * "
      "vocab_size / (vocab_size - 1); loss = (1.0 - smoothing) * loss - smoothing * mean_log_probs: α/(V − 1) to each "
      "class but the label, NeMo's form); 'all' only without smoothing, where the two are one loss"),
]
# form and fraction_norm do not vary independently: f/k in the switch loss, DeepSeek-V3's own 1/k in the sequence one
# ('none' with the switch forms only at top_k = 1, where f/k is f: the wrapper refuses it elsewhere)
ALTERNATIVES = {"moe.load_balancing": [{"form": ["switch", "per-layer-sum"], "fraction_norm": ["top_k", "none"]},
                                       {"form": "sequence", "fraction_norm": "none"}]}
PARAM_DEFAULTS = [
    C("lm.cross_entropy", "label_smoothing", (0.0,), f"{CE} vocab_parallel_cross_entropy (label_smoothing=0.0)"),
]
ARITHMETIC = [
    A("lm.cross_entropy", "careful", f"{CE}:28 calculate_logits_max (vocab_parallel_logits.float())"),
    A("moe.router_z_loss", "native", f"{MOE}:150-163 z_loss_func (logsumexp, its square and the mean in the "
      "logits' dtype)"),
    A("moe.load_balancing", "native", f"{MOE}:783-784 compute_routing_scores_for_aux_loss (score function "
      "'sigmoid', the sequence-wise loss: torch.sigmoid and the normalisation in the logits' dtype; 'softmax' is "
      "taken in float32, :781)"),
]


# --- findings -------------------------------------------------------------------------------------

def _exact(value) -> np.ndarray:
    return np.asarray(decode_exact(value), dtype=np.float64)


def _bfloat16_grad_shows(case, dtype: str, tolerance) -> bool:
    """Whether the exact gradient rounded to bfloat16 is beyond ``tolerance``."""
    import torch
    grad = _exact(case.test["grads"]["logits"])
    rounded = torch.tensor(grad).to(torch.bfloat16).double().numpy()
    return deviation_shows(tolerance, {"grad:logits": grad}, {"grad:logits": rounded})


_FUSED_BFLOAT16_GRAD = Finding(
    "megatron-fused-bfloat16-grad", "precision",
    "the fused cross-entropy casts the logits' gradient to bfloat16 whatever the logits' dtype (autograd casts it "
    "back): float64, float32 and float16 gradients carry bfloat16's rounding (8 significant bits). Repro: "
    "lossproof check --target megatron --objective lm.cross_entropy --dtype float32 (megatron[fused])",
    f"{FUSED}:82 calculate_gradients (grad_input = grad_input.to(torch.bfloat16))",
    where(objectives=("lm.cross_entropy",), dtypes=("float64", "float32", "float16"), shows=_bfloat16_grad_shows),
    variant="fused")
_IN_PLACE = Finding(
    "megatron-in-place-logits", "deviation",
    "the cross-entropy overwrites its float32 logits in place (minus the row maximum, then their exponentials, then "
    "the softmax: 'In-place subtraction reduces memory pressure'): a caller that reads the logits after the loss "
    "(for an entropy, a metric, a second loss) reads the softmax. For bfloat16/float16 and float64 logits .float() "
    "makes a copy first. Repro: lossproof check --target megatron --uid lm.cross_entropy:208261df75f3e681 "
    "--dtype float32",
    f"{CE}:28 (.float() is the same tensor for float32), :45 (vocab_parallel_logits -= logits_max), :65 "
    "(torch.exp(..., out=exp_logits)), :80 (exp_logits.div_)",
    where(objectives=("lm.cross_entropy",), dtypes=("float32",)))
_SCORES_FLOAT32 = Finding(
    "megatron-aux-scores-float32", "precision",
    "compute_routing_scores_for_aux_loss takes the softmax with dtype=torch.float32, so float64 router logits give "
    "float32 scores and a float32 load-balancing loss (1.1178966760635376 for the exact 1.11789679496128 of "
    "moe.load_balancing:4c3c24a336a67d4f). Repro: lossproof check --target megatron "
    "--objective moe.load_balancing --dtype float64",
    f"{MOE}:782 compute_routing_scores_for_aux_loss (torch.softmax(logits, dim=-1, dtype=torch.float32))",
    where(objectives=("moe.load_balancing",), dtypes=("float64",), conventions={"form": ("switch", "per-layer-sum")}),
    results=("valid", "acceptable"))


def _sequence_aux(case, float32_count: bool) -> dict:
    """Megatron's sequence-wise loss in float64 (torch autograd for the gradient): each sequence's
    Σ_e count_e·Σ_t s_te times E/(k·T̄²), T̄ the batch's valid tokens over its B sequences (every
    sequence alike), summed over the sequences and divided by B, summed over the layers
    (router.py:331-357, moe_utils.py:224-232 and :130-131); ``float32_count``: T̄ and the factor
    formed in float32, as the int64 count divided by an int is."""
    import torch
    inputs, args = decoded(case.test["inputs"]), arguments(case)
    z = torch.tensor(inputs["router_logits"], dtype=torch.float64, requires_grad=True)
    layers = z if z.dim() == 3 else z[None]
    n, experts = layers.shape[1:]
    k, t = args["top_k"], args["seq_len"] or layers.shape[1]
    valid = torch.ones(n, dtype=torch.float64) if "mask" not in inputs else torch.tensor(inputs["mask"])
    b = n // t
    mean_count = valid.sum() / b if "mask" in inputs else torch.tensor(float(t), dtype=torch.float64)
    if float32_count:
        c = mean_count.float()
        factor = (experts / ((k * c) * c)).double()
    else:
        factor = experts / (k * mean_count * mean_count)
    loss = 0
    for layer in layers:
        s = torch.sigmoid(layer)
        s = s / s.sum(dim=-1, keepdim=True)
        chosen = torch.zeros_like(s).scatter(1, torch.topk(s.detach(), k, dim=1).indices, 1.0) * valid[:, None]
        counts = chosen.reshape(b, t, experts).sum(dim=1)
        mass = (s * valid[:, None]).reshape(b, t, experts).sum(dim=1)
        loss = loss + (counts * mass).sum() * factor / b
    cotangent = float(decoded(case.test["cotangents"])["loss"])
    (grad,) = torch.autograd.grad(loss * cotangent, z)
    return {"loss": loss.detach().numpy(), "grad:router_logits": grad.numpy()}


def _exact_balance(case) -> dict:
    return {"loss": _exact(case.test["expected"]["loss"]),
            "grad:router_logits": _exact(case.test["grads"]["router_logits"])}


def _mean_count_shows(case, dtype: str, tolerance) -> bool:
    return deviation_shows(tolerance, _exact_balance(case), _sequence_aux(case, False))


def _float32_count_shows(case, dtype: str, tolerance) -> bool:
    return "mask" in case.test["inputs"] and deviation_shows(tolerance, _sequence_aux(case, False),
                                                             _sequence_aux(case, True))


_SEQ_MEAN_COUNT = Finding(
    "megatron-seq-aux-mean-count", "deviation",
    "with a padding mask the sequence-wise loss normalises every sequence by the batch's mean number of valid tokens "
    "(the valid tokens over the B sequences) instead of its own T_b (DeepSeek-V3 eq. 17–20: f and P of a sequence are "
    "over its own tokens), and divides the sum over sequences by B, sequences without a valid token included: "
    "sequences of unequal valid length get the wrong weight. Repro: lossproof check --target megatron --uid "
    "moe.load_balancing:2f7d02674f190c3f --dtype float64",
    f"{MOE}:224-229 get_tokens_per_expert_and_token_count (with_padding_mask: global_tokens_per_expert.sum() / topk, "
    f"topk = self.topk * bsz from {ROUTER}:339-344) and {ROUTER}:346-357 (switch_load_balancing_loss_func(...) / bsz)",
    where(objectives=("moe.load_balancing",), conventions={"form": "sequence"}, shows=_mean_count_shows),
    results=("valid", "acceptable"))
_COUNT_FLOAT32 = Finding(
    "megatron-aux-count-float32", "precision",
    "with a padding mask the token count is an int64 tensor divided by an int, a float32 tensor, so E/(k·T²) is "
    "formed in float32 and float64 losses carry its rounding (relative ~1e-8). Repro: lossproof check --target "
    "megatron --uid moe.load_balancing:4b838e8c7b008b60 --dtype float64",
    f"{MOE}:228-229 (local_tokens_per_expert.sum() / topk) and :130-131 (num_experts * moe_aux_loss_coeff / (topk * "
    "total_num_tokens * total_num_tokens))",
    where(objectives=("moe.load_balancing",), dtypes=("float64",), conventions={"form": "sequence"},
          shows=_float32_count_shows), results=("valid", "acceptable"))


def _shard_smoothing(case, dtype, split, tolerance) -> bool:
    return bool(arguments(case)["label_smoothing"])


_SHARD_SMOOTHING = Finding(
    "megatron-shard-smoothing-local", "bug",
    "under tensor parallelism the label-smoothing term uses the shard: vocab_size is the shard's width and "
    "mean_log_probs the mean of the shard's log-probabilities, neither all-reduced, so each rank returns a "
    "different loss and none is the global one (the gradient's −s/V is the shard's 1/V_r too). Repro: lossproof "
    "check --target megatron --uid lm.cross_entropy:168fa869c28012e7 --dtype float32 --shard-vocab 2:even",
    f"{CE}:164 (vocab_size = exp_logits.size(-1)), :176-182 (smoothing, log_probs.mean(dim=-1)) and :204-207",
    _shard_smoothing)
FINDINGS = [_IN_PLACE, _FUSED_BFLOAT16_GRAD, _SCORES_FLOAT32, _SEQ_MEAN_COUNT, _COUNT_FLOAT32]
SPLIT_FINDINGS = [_SHARD_SMOOTHING]


# --- calling the library --------------------------------------------------------------------------

def _mods():
    # megatron.core's package import warns four times that Transformer Engine and Apex are missing
    # (its optimizers' fallbacks); the loss code uses neither, so a check's console stays quiet.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed")
        from megatron.core.fusions import fused_cross_entropy
        from megatron.core.tensor_parallel import cross_entropy
        from megatron.core.transformer.moe import moe_utils, router
    return cross_entropy, fused_cross_entropy, moe_utils, router


class _OneRank:
    """The tensor-parallel group of size 1 (what ``ProcessGroup.size()``/``rank()`` answer)."""

    @staticmethod
    def size():
        return 1

    @staticmethod
    def rank():
        return 0


def _identity(tensor, *args, **kwargs):
    return None


def _tensor_parallel(group, rank: int, world: int) -> ExitStack:
    """Megatron's parallel_state getters in cross_entropy.py answering with ``group``; at size 1
    the all-reduces are the identity."""
    import torch
    ce = _mods()[0]
    stack = ExitStack()
    stack.enter_context(mock.patch.object(ce, "get_tensor_model_parallel_group", lambda: group))
    stack.enter_context(mock.patch.object(ce, "get_tensor_model_parallel_rank", lambda: rank))
    stack.enter_context(mock.patch.object(ce, "get_tensor_model_parallel_world_size", lambda: world))
    if world == 1:
        stack.enter_context(mock.patch.object(torch.distributed, "all_reduce", _identity))
    return stack


def _unsupported(label_smoothing, z_loss, softcap, fused, vocab, smoothing_classes):
    if z_loss or softcap is not None:
        raise NotImplementedError("Megatron-core 0.16.1's cross-entropy has no z-loss or soft-capping")
    if fused and label_smoothing:
        raise NotImplementedError("fused_vocab_parallel_cross_entropy has no label smoothing")
    if label_smoothing and smoothing_classes != "others":
        raise NotImplementedError("Megatron-core spreads the smoothing over the V − 1 classes other than the label "
                                  "(smoothing_classes='others')")
    if label_smoothing and vocab == 1:
        # smoothing / (vocab_size - 1): there is no other class to spread the mass over
        raise NotImplementedError("Megatron-core's label smoothing is undefined for a vocabulary of one token")


def _reduce(per, labels, ignore_index, reduction, normalizer):
    """Megatron's loss_func: the per-token losses times the loss mask, summed, over the count."""
    mask = (labels != ignore_index).to(per.dtype)
    masked = per * mask
    if reduction == "none":
        return masked
    total = masked.sum()
    return total if reduction == "sum" else total / (normalizer if normalizer is not None else mask.sum())


def _stand_in_labels(logits, labels, ignore_index, group, start: int, world: int):
    """Megatron has no ignore index: its data gives every position a real next token and the loss mask
    drops the ignored ones. An ignored token is given the lowest token id whose logit is finite
    (over all shards: a MIN all-reduce), so that its masked-out loss is finite as a real token's is
    (times the mask 0 an infinite one would be NaN)."""
    import torch
    finite = logits.detach() > -torch.inf
    first = torch.where(finite.any(dim=-1), finite.int().argmax(dim=-1) + start, torch.iinfo(torch.int64).max)
    if world > 1:
        torch.distributed.all_reduce(first, op=torch.distributed.ReduceOp.MIN, group=group)
    return torch.where(labels != ignore_index, labels, first)


def _per_token(logits, labels, ignore_index, label_smoothing, fused, group, rank, world):
    import torch
    ce, fce, _, _ = _mods()
    start = rank * logits.shape[-1]
    target = _stand_in_labels(logits, labels, ignore_index, group, start, world).reshape(-1, 1)
    z = logits.reshape(logits.shape[0], 1, logits.shape[1])
    with _tensor_parallel(group, rank, world):
        if fused:
            with torch.compiler.set_stance("force_eager"):
                per = fce.fused_vocab_parallel_cross_entropy(z, target, group)
        else:
            per = ce.vocab_parallel_cross_entropy(z, target, label_smoothing)
    return per.reshape(-1)


def cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                  reduction="mean", normalizer=None, smoothing_classes="all", *, fused=False):
    _unsupported(label_smoothing, z_loss, softcap, fused, logits.shape[-1], smoothing_classes)
    per = _per_token(logits, labels, ignore_index, label_smoothing, fused, _OneRank(), 0, 1)
    return _reduce(per, labels, ignore_index, reduction, normalizer)


def cross_entropy_fused(logits, labels, **kwargs):
    """The variant ``lm.cross_entropy[fused]``: fused_vocab_parallel_cross_entropy."""
    return cross_entropy(logits, labels, **kwargs, fused=True)


def sharded_cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                          reduction="mean", normalizer=None, smoothing_classes="all", *, ctx):
    """vocab_parallel_cross_entropy on this rank's shard, the shard context standing in for the
    tensor-parallel group (``--shard-vocab``)."""
    _unsupported(label_smoothing, z_loss, softcap, False, ctx.vocab_size, smoothing_classes)
    if ctx.vocab_start != ctx.rank * logits.shape[-1] or ctx.vocab_size != ctx.world_size * logits.shape[-1]:
        raise NotImplementedError("Megatron-core shards the vocabulary in equal widths (rank · V_r, "
                                  "VocabUtility.vocab_range_from_per_partition_vocab_size): this split is uneven")
    per = _per_token(logits, labels, ignore_index, label_smoothing, False, ctx.group, ctx.rank, ctx.world_size)
    return _reduce(per, labels, ignore_index, reduction, normalizer)


def router_z_loss(router_logits, mask=None):
    _, _, moe_utils, _ = _mods()
    padding = None if mask is None else mask == 0
    return moe_utils.z_loss_func(router_logits, 1.0, padding_mask=padding)


def _router(top_k: int, experts: int, seen: list):
    """A stand-in TopKRouter with the attributes its aux-loss methods read, coefficient 1 for every
    aux-loss type; attach_and_log_load_balancing_loss keeps the loss instead of attaching it."""
    def attach(activation, coeff, aux_loss, name, group, reduce_group_has_dp=False, valid_token_count=None):
        seen.append(aux_loss)
        return activation
    return SimpleNamespace(topk=top_k, tp_cp_group=_OneRank(), get_aux_loss_coeff=lambda kind: 1.0,
                           config=SimpleNamespace(num_moe_experts=experts, moe_router_fusion=False),
                           attach_and_log_load_balancing_loss=attach)


def _group_passed_through():
    """mappings.reduce_from_tensor_model_parallel_region asks utils.get_tensor_model_parallel_group_if_none,
    which answers None without an initialised torch.distributed: let it pass the group through, as it
    does when parallel_state is not initialised (megatron/core/utils.py:496-497)."""
    from megatron.core.tensor_parallel import mappings
    return mock.patch.object(mappings, "get_tensor_model_parallel_group_if_none", lambda group, **kw: group)


def load_balancing(router_logits, top_k=1, form="switch", seq_len=None, mask=None, fraction_norm="none"):
    import torch
    _, _, moe_utils, router = _mods()
    if form not in ("switch", "sequence", "per-layer-sum"):
        raise NotImplementedError(f"Megatron-core 0.16.1 has no load-balancing form {form!r}")
    if form != "sequence" and fraction_norm != "top_k" and top_k > 1:
        raise NotImplementedError("switch_load_balancing_loss_func divides f by top_k (fraction_norm='top_k')")
    experts = router_logits.shape[-1]
    seen: list = []
    fake = _router(top_k, experts, seen)
    padding = None if mask is None else mask == 0
    layers = router_logits if router_logits.dim() == 3 else router_logits[None]
    with _group_passed_through():
        for layer in layers:
            if form == "sequence":
                n = layer.shape[0]
                t = seq_len or n
                # [B·T, E] sequence by sequence -> Megatron's [S, B, E] flattened sequence-major
                logits = layer.reshape(n // t, t, experts).transpose(0, 1).reshape(n, experts)
                pad = None if padding is None else padding.reshape(n // t, t).transpose(0, 1).reshape(n)
                routing_map, scores = moe_utils.compute_routing_scores_for_aux_loss(logits, top_k, "sigmoid",
                                                                                   padding_mask=pad)
                router.TopKRouter._apply_seq_aux_loss(fake, scores, scores, routing_map, t, n // t,
                                                      with_padding_mask=pad is not None)
            else:
                routing_map, scores = moe_utils.compute_routing_scores_for_aux_loss(layer, top_k, "softmax",
                                                                                   padding_mask=padding)
                router.TopKRouter._apply_aux_loss(fake, scores, scores, routing_map,
                                                  with_padding_mask=padding is not None)
    return torch.stack(seen).sum()


def target():
    version = require("megatron", "megatron-core", VERSION, INSTALL)
    load_or_explain(_mods, "megatron-core", INSTALL)
    objectives = {"lm.cross_entropy": cross_entropy, "lm.cross_entropy[fused]": cross_entropy_fused,
                  "moe.router_z_loss": router_z_loss, "moe.load_balancing": load_balancing}
    return build("megatron", version, objectives, CONVENTIONS, FINDINGS, ARITHMETIC, alternatives=ALTERNATIVES,
                 split_findings=SPLIT_FINDINGS, sharded={"lm.cross_entropy": sharded_cross_entropy},
                 computes_in={"lm.cross_entropy": "float32"})
