"""``--target transformers``: Hugging Face transformers 5.25.0 on CPU (the release pip resolves for
trl 1.16.0 next to torch 2.13; scripts/install-peers.sh pins it).

Calls the library's own loss code:

- ``lm.cross_entropy``: ``loss/loss_utils.py ForCausalLMLoss``, the loss every ``*ForCausalLM``
  model's ``loss_function`` is, on the vector's logits as one sequence (``[1, N, V]``). Its labels
  are shifted inside (``labels[..., 1:]`` padded with ``ignore_index``: position t predicts label
  t + 1); the adapter passes the vector's labels as ``shift_labels``, the argument through which
  the padding-free collators hand over labels that are already shifted, so position t is scored
  against label t and nothing is shifted or padded. Without a ``normalizer`` it is called without
  ``num_items_in_batch`` (``fixed_cross_entropy``: ``reduction='mean'`` over the non-ignored tokens);
  with one, ``num_items_in_batch`` = normalizer (``reduction='sum'`` divided by it, what the Trainer
  passes under gradient accumulation, transformers PR #34191). ``reduction='sum'`` is the same code
  with ``num_items_in_batch = 1``. There is no ``reduction='none'``, label smoothing, z-loss or
  soft-capping in it: those cases are unsupported.
- ``moe.router_z_loss``: ``models/switch_transformers/modeling_switch_transformers.py
  router_z_loss_func`` on ``[1, N, E]`` router logits. It takes no mask: it averages over every
  token it is given, which is what ``SwitchTransformersForConditionalGeneration.forward`` passes it
  (the router logits of all positions, padding included). The adapter gives it all N tokens, so a
  masked vector fails by the declared finding ``transformers-router-z-loss-no-mask``.

- ``moe.load_balancing``: ``models/mixtral/modeling_mixtral.py load_balancing_loss_func``, as
  ``MixtralForCausalLM.forward`` calls it: the router logits as a tuple of per-layer ``[N, E]``
  tensors (one layer for an ``[N, E]`` vector) and the attention mask as ``[1, N]``. The layers'
  counts and probabilities are pooled before the product (form ``concatenated``; one layer is
  ``switch``); per-layer sums and DeepSeek-V3's sequence-wise form are not what it computes.
  The variant ``moe.load_balancing[no-mask]`` (reported as ``transformers[no-mask]``) is the same
  call without the attention mask, what ``MixtralForCausalLM.forward`` passes when its caller
  gives none: padding counts in f and P (finding ``transformers-load-balancing-no-mask``, of that
  variant only).

In low precision ``ForCausalLMLoss`` upcasts the logits (``logits.float()``, loss_utils.py:52) and
returns a float32 loss; ``router_z_loss_func`` works in the logits' dtype (logsumexp, the square,
the sum over tokens and the division).

Install: ``pip install transformers==5.25.0`` (``pip install trl==1.16.0`` brings it).
"""
from __future__ import annotations

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
from lossproof.refimpl.arrays import moe

VERSION = "5.25.0"
INSTALL = "pip install transformers==5.25.0"
LOSS = "transformers/loss/loss_utils.py"
SWITCH = "transformers/models/switch_transformers/modeling_switch_transformers.py"
TRAINER = "transformers/trainer.py"
MIXTRAL = "transformers/models/mixtral/modeling_mixtral.py"

CONVENTIONS = [
    C("moe.load_balancing", "form", ("concatenated", "switch"), f"{MIXTRAL} load_balancing_loss_func (the "
      "assignment counts and router probabilities of every layer pooled, then E·Σ f·P; one layer is Switch eq. 4)"),
    C("lm.cross_entropy", "reduction", ("mean", "sum"), f"{LOSS} fixed_cross_entropy (reduction 'mean' without "
      "num_items_in_batch; 'sum' divided by num_items_in_batch when the Trainer passes it, so 'sum' is "
      "num_items_in_batch = 1; no 'none')"),
]
PARAM_DEFAULTS = [
    C("lm.cross_entropy", "ignore_index", (-100,), f"{LOSS} ForCausalLMLoss (ignore_index: int = -100)"),
    C("lm.cross_entropy", "normalizer", (None,), f"{LOSS} ForCausalLMLoss (num_items_in_batch=None: the mean over "
      f"the non-ignored tokens); {TRAINER} _get_num_items_in_batch (the non-ignored labels of all micro-batches "
      "of the optimizer step)"),
]
ARITHMETIC = [
    A("moe.load_balancing", "native", f"{MIXTRAL}:522 load_balancing_loss_func (softmax in the router logits' "
      f"dtype; the float32 sums, {MIXTRAL}:514, start from those rounded probabilities)"),
    A("lm.cross_entropy", "careful", f"{LOSS}:52 (logits.float(): the log-softmax, the sum and the division in "
      "float32 for bfloat16/float16 logits)"),
    A("moe.router_z_loss", "native", f"{SWITCH}:899-901 (logsumexp, its square, the token sum and the division in "
      "the logits' dtype; autograd's logsumexp backward forms softmax = exp(x − lse) from the lse rounded to that "
      "dtype, a subtraction that cancels, so the gradient carries an error of u·|lse| relative)"),
]


def _no_mask_shows(case, dtype: str, tolerance) -> bool:
    """Whether averaging lse² over every token, the masked ones too, moves the loss or its
    gradient beyond ``tolerance`` (refimpl/arrays with the vector's mask against without it)."""
    inputs = decoded(case.test["inputs"])
    if "mask" not in inputs or not (inputs["mask"] == 0).any():
        return False
    z, ct = inputs["router_logits"], decoded(case.test["cotangents"])["loss"]
    exact, deviating = ({"loss": moe.router_z_loss(z, m), "grad:router_logits": moe.router_z_loss_vjp(ct, z, m)["router_logits"]}
                        for m in (inputs["mask"], None))
    return deviation_shows(tolerance, exact, deviating)


_CAUSAL_LM_FLOAT32 = Finding(
    "transformers-causal-lm-float32", "precision",
    "ForCausalLMLoss upcasts the logits with logits.float() 'to avoid potential precision issues', which for "
    "float64 logits is a downcast: the float64 loss and gradient are float32-accurate (relative error ~1e-8). "
    "Repro: ForCausalLMLoss(torch.tensor([[[0.1, 0.2]]], dtype=torch.float64), None, 2, "
    "shift_labels=torch.tensor([[0]])).dtype → torch.float32",
    f"{LOSS} ForCausalLMLoss: logits = logits.float()",
    where(objectives=("lm.cross_entropy",), dtypes=("float64",)))
_ROUTER_Z_NO_MASK = Finding(
    "transformers-router-z-loss-no-mask", "deviation",
    "router_z_loss_func takes no mask and divides the sum of lse² over every token by num_groups·tokens_per_group: "
    "SwitchTransformers passes it the router logits of all positions, so padding tokens count in both the sum and "
    "the count (ST-MoE eq. 5 averages over the real tokens). Repro: lossproof check --target transformers "
    "--uid moe.router_z_loss:f601ef1f9e93d335",
    f"{SWITCH} router_z_loss_func: torch.sum(z_loss) / (num_groups * tokens_per_group)",
    where(objectives=("moe.router_z_loss",), shows=_no_mask_shows))
_LOAD_BALANCING_FLOAT32 = Finding(
    "transformers-load-balancing-float32", "precision",
    "load_balancing_loss_func sums the assignment counts and router probabilities into float32 accumulators "
    "(tokens_per_expert_sum, router_prob_sum = torch.zeros(..., dtype=torch.float32)), so float64 router logits "
    "give a float32 loss. Repro: lossproof check --target transformers --uid moe.load_balancing:a8c1ab5eafa1a3cd "
    "--dtype float64",
    f"{MIXTRAL} load_balancing_loss_func: router_prob_sum = torch.zeros(num_experts, dtype=torch.float32)",
    where(objectives=("moe.load_balancing",), dtypes=("float64",)), results=("valid", "acceptable"))


def _balance_no_mask_shows(case, dtype: str, tolerance) -> bool:
    """Whether counting the masked tokens in f and P (the loss without the mask) moves the loss or
    its gradient beyond ``tolerance`` (refimpl/arrays with the vector's mask against without it)."""
    inputs = decoded(case.test["inputs"])
    if "mask" not in inputs or not (inputs["mask"] == 0).any():
        return False
    z, ct = inputs["router_logits"], decoded(case.test["cotangents"])["loss"]
    kw = {k: v for k, v in arguments(case).items() if k in ("top_k", "form", "seq_len")}
    exact, deviating = ({"loss": moe.load_balancing(z, mask=m, **kw),
                         "grad:router_logits": moe.load_balancing_vjp(ct, z, mask=m, **kw)["router_logits"]}
                        for m in (inputs["mask"], None))
    return deviation_shows(tolerance, exact, deviating)


_LOAD_BALANCING_NO_MASK = Finding(
    "transformers-load-balancing-no-mask", "deviation",
    "load_balancing_loss_func without attention_mask (MixtralForCausalLM.forward passes its own, None when the "
    "caller gives none, as padding-free and packed batches do) counts every row it is given: padding tokens count in "
    "the assignment fractions f, the mean router probabilities P and the token count, and get a gradient (Switch "
    "eq. 4–6 average over the real tokens). Repro: lossproof check --target transformers --uid "
    "moe.load_balancing:4863e0d7fe2e0067 --dtype float32",
    f"{MIXTRAL}:524-531 load_balancing_loss_func (if attention_mask is None: router_prob_sum + "
    "routing_weights.float().sum(dim=0); total_rows + routing_weights.shape[0]), called from "
    f"MixtralForCausalLM.forward with its attention_mask ({MIXTRAL}:626-631)",
    where(objectives=("moe.load_balancing",), shows=_balance_no_mask_shows), variant="no-mask")
FINDINGS = [_CAUSAL_LM_FLOAT32, _ROUTER_Z_NO_MASK, _LOAD_BALANCING_FLOAT32,
            _LOAD_BALANCING_NO_MASK]


def _mods():
    from transformers.loss import loss_utils
    from transformers.models.mixtral import modeling_mixtral
    from transformers.models.switch_transformers import modeling_switch_transformers
    return loss_utils, modeling_switch_transformers, modeling_mixtral


def _causal_lm_loss(logits, labels, ignore_index, num_items_in_batch=None):
    """ForCausalLMLoss on the rows of ``logits`` as one sequence, ``labels`` already shifted."""
    loss_utils, _, _ = _mods()
    n, v = logits.shape
    return loss_utils.ForCausalLMLoss(logits.reshape(1, n, v), None, v, num_items_in_batch=num_items_in_batch,
                                      ignore_index=ignore_index, shift_labels=labels.reshape(1, n).long())


def cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="mean",
                  normalizer=None):
    import torch
    if label_smoothing or z_loss or softcap is not None:
        raise NotImplementedError("transformers 5.25.0 ForCausalLMLoss has no label smoothing, z-loss or soft-capping")
    if reduction not in ("mean", "sum"):
        # it has no reduction argument: 'mean' and 'sum' are num_items_in_batch None / 1
        raise NotImplementedError(f"transformers 5.25.0 ForCausalLMLoss has no reduction {reduction!r}")
    if reduction == "sum" and normalizer is not None:
        raise NotImplementedError("reduction 'sum' is num_items_in_batch = 1: no other normalizer")
    items = 1 if reduction == "sum" else normalizer
    # The Trainer passes num_items_in_batch as an integer tensor (a count of labels); an integer normalizer is
    # passed the same way, another as the float it is.
    if items is not None and float(items).is_integer():
        items = torch.tensor(int(items))
    return _causal_lm_loss(logits, labels, ignore_index, items)


def causal_lm_step(micro_batches, ctx):
    """One rank's share of the Trainer's optimizer step for a causal LM (``--partition``, once
    ``lm.cross_entropy`` is a step objective): ``Trainer.compute_loss`` itself, with a stand-in
    ``self`` and a model whose forward is ``ForCausalLMLoss`` on the micro-batch's logits.
    ``num_items_in_batch`` is the non-ignored labels of every micro-batch of every rank
    (transformers/trainer.py:2343 _get_num_items_in_batch, average_tokens_across_devices=True, its
    default); compute_loss multiplies the loss by num_processes (trainer.py:2245-2253) and the Trainer
    does not divide it by the accumulation steps, since the model took num_items_in_batch
    (trainer.py:2148-2156); DDP averages the gradients over the ranks: the global token mean."""
    from functools import partial
    from types import SimpleNamespace

    import torch
    import torch.distributed as dist
    from transformers import Trainer

    first = micro_batches[0]
    if first.get("label_smoothing") or first.get("z_loss") or first.get("softcap") is not None:
        raise NotImplementedError("transformers 5.25.0 ForCausalLMLoss has no label smoothing, z-loss or soft-capping")
    if first.get("reduction", "mean") != "mean" or first.get("normalizer") is not None:
        raise NotImplementedError("the Trainer's step is the token mean over its own count (num_items_in_batch): "
                                  "no other reduction or normalizer")

    def model(logits, labels, ignore_index=-100, num_items_in_batch=None, **_):
        return {"loss": _causal_lm_loss(logits, labels, ignore_index, num_items_in_batch)}

    counted = (int(mb["labels"].ne(mb.get("ignore_index", -100)).sum()) for mb in micro_batches)
    items = torch.tensor(sum(counted))
    dist.all_reduce(items, group=ctx.group)
    fake = SimpleNamespace(
        accelerator=SimpleNamespace(num_processes=ctx.world_size, parallelism_config=None),
        model=SimpleNamespace(training=True), label_smoother=None, compute_loss_func=None,
        model_accepts_loss_kwargs=True, get_tp_size=lambda: 1,
        args=SimpleNamespace(average_tokens_across_devices=True, n_gpu=1))
    logged = 0.0
    for mb in micro_batches:
        inputs = {k: mb[k] for k in ("logits", "labels", "ignore_index") if k in mb}
        loss = Trainer.compute_loss(fake, partial(model, **inputs), {}, num_items_in_batch=items)
        loss.backward()
        logged += float(loss.detach())
    return logged


def router_z_loss(router_logits, mask=None):
    """``mask`` is not passed on: router_z_loss_func has none (finding transformers-router-z-loss-no-mask)."""
    _, switch, _ = _mods()
    n, e = router_logits.shape
    return switch.router_z_loss_func(router_logits.reshape(1, n, e))


def load_balancing(router_logits, top_k=1, form="switch", seq_len=None, mask=None):
    if form not in ("switch", "concatenated") or seq_len is not None:
        raise NotImplementedError(f"transformers 5.25.0 load_balancing_loss_func has no form {form!r}")
    _, _, mixtral = _mods()
    layers = tuple(router_logits) if router_logits.dim() == 3 else (router_logits,)
    attention = None if mask is None else mask.reshape(1, -1)
    return mixtral.load_balancing_loss_func(layers, num_experts=router_logits.shape[-1], top_k=top_k,
                                            attention_mask=attention)


def load_balancing_no_mask(router_logits, top_k=1, form="switch", seq_len=None, mask=None):
    """The variant ``moe.load_balancing[no-mask]``: load_balancing_loss_func as MixtralForCausalLM.forward
    calls it without an attention mask (``mask`` is not passed on: finding transformers-load-balancing-no-mask)."""
    return load_balancing(router_logits, top_k=top_k, form=form, seq_len=seq_len)


def target():
    version = require("transformers", "transformers", VERSION, INSTALL)
    load_or_explain(_mods, "transformers", INSTALL)
    objectives = {"lm.cross_entropy": cross_entropy, "moe.router_z_loss": router_z_loss,
                  "moe.load_balancing": load_balancing, "moe.load_balancing[no-mask]": load_balancing_no_mask}
    return build("transformers", version, objectives, CONVENTIONS, FINDINGS, ARITHMETIC,
                 steps={"lm.cross_entropy": causal_lm_step})
