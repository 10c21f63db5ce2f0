"""Trainer semantics for the distributed checks (DESIGN §11): a *step* is what one data-parallel
rank does with its micro-batches before the optimizer step, a *sharded* function is a
vocabulary-parallel divergence. The helpers here compose a step from a catalog objective
function in one line::

    TARGET = {..., "steps": {"grpo.loss": micro_batch_mean(my_grpo_loss)}}          # HF Trainer
    TARGET = {..., "steps": {"grpo.loss": global_mean(my_grpo_loss, tokens)}}       # verl, OpenRLHF

The protocol. ``step(micro_batches, ctx)`` runs on every rank: ``micro_batches`` is a list of
dicts, each holding the catalog inputs of its rows as tensors (the differentiated ones are leaf
tensors with ``requires_grad``) and the conventions and parameters of the case; ``ctx`` is a
:class:`StepContext`. The step computes its losses, scales them as its trainer does, calls
``backward()`` (gradients accumulate in the leaves) and may return the loss it would log. The
harness then reduces every row's gradient across ranks as DDP reduces a parameter's: the
gradient a row contributes to any shared parameter is its owning rank's leaf gradient times
1/R (``grad_reduction="mean"``, DDP's average) or 1 (``"sum"``), and it must equal the gradient
of the global objective with respect to that row. The logged losses are reduced the same way.
"""
from __future__ import annotations

import importlib
import math
from dataclasses import dataclass

import mpmath

from lossproof.conformance import catalog, compare
from lossproof.conformance.numbers import decode_input, encode_exact
from lossproof.refimpl import validate
from lossproof.refimpl.exact import dpo as exact_dpo
from lossproof.refimpl.exact import mp

__all__ = ["ShardContext", "StepContext", "builtin_torch", "global_kl_cov_selection", "global_mean",
           "global_mean_terms", "global_test", "global_token_normalizer", "labelled", "micro_batch_mean",
           "normaliser_of", "rows", "sequences", "tokens", "vocab_parallel"]


@dataclass(frozen=True)
class StepContext:
    rank: int
    world_size: int
    group: object                 # the torch.distributed process group of the data-parallel ranks
    accumulation_steps: int       # micro-batches per rank (the same on every rank)
    device: str = "cpu"


@dataclass(frozen=True)
class ShardContext:
    rank: int
    world_size: int
    group: object
    vocab_start: int              # global id of this rank's first token
    vocab_end: int                # one past its last token
    vocab_size: int               # V of the whole vocabulary


# --- what a normaliser counts in one micro-batch ------------------------------------------

def tokens(mb: dict) -> int:
    """Unmasked tokens (the token-mean normaliser; a 1-D mask selects rows that are tokens)."""
    return int(mb["mask"].detach().ne(0).sum())


def labelled(mb: dict) -> int:
    """Tokens whose label is not ``ignore_index`` (lm.cross_entropy's count; transformers 5.25.0
    trainer.py _get_num_items_in_batch counts ``labels.ne(-100)``)."""
    ignore = mb.get("ignore_index", catalog.get("lm.cross_entropy").param("ignore_index").default)
    return int(mb["labels"].detach().ne(ignore).sum())


def sequences(mb: dict) -> int:
    """Rows with at least one unmasked token (the sequence-mean normaliser; rows without tokens
    leave the mean, as in verl 0.9.1 agg_loss and refimpl)."""
    return int(mb["mask"].detach().ne(0).any(dim=1).sum())


def rows(mb: dict) -> int:
    """Rows, masked or not (DPO's pairs)."""
    return int(next(v for v in mb.values() if hasattr(v, "shape") and v.ndim >= 1).shape[0])


def normaliser_of(mb: dict) -> int:
    """The count the catalog objective of ``mb`` divides by: tokens for ``token-mean``,
    sequences for the ``seq-mean-*`` modes (``aggregation`` of grpo.loss and proximal_kl.loss,
    ``mode`` of grpo.aggregate), rows where there is no mask (dpo.loss)."""
    if "mask" not in mb:
        return rows(mb)
    if mb["mask"].ndim == 1:   # moe.router_z_loss: a row is a token
        return tokens(mb)
    return tokens(mb) if mb.get("aggregation", mb.get("mode")) == "token-mean" else sequences(mb)


def _mean_value(objective, mb: dict):
    """The objective's primary output on one micro-batch, reduced by its mean where it is per
    row (dpo.loss's losses[B]): the micro-batch's own mean."""
    out = objective(**mb)
    if isinstance(out, dict):
        out = next(iter(out.values()))
    elif isinstance(out, tuple):
        out = out[0]
    return out.mean() if out.ndim else out


def _empty(mb: dict) -> bool:
    if "labels" in mb and "reduction" in mb:   # lm.cross_entropy: every label ignored
        return labelled(mb) == 0
    return "mask" in mb and not bool(mb["mask"].detach().ne(0).any())


# --- the global objective a step is judged against ----------------------------------------

def global_test(case, conventions: dict) -> dict:
    """The vector as a test of the global objective: itself for the scalar losses; for dpo.loss
    the mean of the per-pair losses and its exact gradient (refimpl.exact, the vector's
    precision), with the per-pair losses' scales."""
    t = case.test
    if case.objective != "dpo.loss":
        return t
    kwargs = {**{k: decode_input(v) for k, v in t["inputs"].items()}, **conventions, **t["params"]}
    b = len(kwargs["policy_chosen_logps"])
    with mpmath.workdps(mp.get_dps()):
        losses = exact_dpo.loss(**kwargs)["losses"]
        weight = [mpmath.mpf(1) / b] * b
        grads = exact_dpo.loss_vjp({"losses": weight}, **kwargs)
        mean = mpmath.fsum(losses) / b
        # The vector's gradient scale bounds the per-pair rounding for a cotangent of at most 2
        # (generate/dpo.py: exactly so for the loss types of issue 15, from the case's own smaller
        # cotangents for the older ones); the mean's cotangent is 1/B: that bound divided by 2B,
        # never above the derived one, and at least the gradient's own size.
        grad_scale = {k: max(max(abs(v) for v in g), mpmath.mpf(t["scale"]["grads"][k]) / (2 * b))
                      for k, g in grads.items()}
    scale = {"outputs": {"loss": t["scale"]["outputs"]["losses"]},
             "grads": {k: encode_exact(v, 6) for k, v in grad_scale.items()}}
    if "elements" in t["scale"] or set(t["dtypes"]) & set(compare.LOW_PRECISION):
        scale["elements"] = {"loss": t["scale"]["outputs"]["losses"]}
    # the mean reduces B pairs: the tolerance grows with log2 B as for every reduction (compare.py)
    k_case = t.get("tolerance", {}).get("k", catalog.get(case.objective).k_base * (1 + math.log2(b)))
    return {**t, "expected": {"loss": encode_exact(mean)}, "tolerance": {**t.get("tolerance", {}), "k": k_case},
            "grads": {k: encode_exact(g) for k, g in grads.items()}, "scale": scale}


# --- steps ----------------------------------------------------------------------------------

def micro_batch_mean(objective):
    """The Hugging Face Trainer's gradient accumulation: each micro-batch's loss is the
    objective on that micro-batch alone (a mean over its own tokens or rows), divided by the
    accumulation steps (transformers Trainer.training_step); DDP averages over the ranks. Exact
    only when every micro-batch holds the same count; a micro-batch without tokens adds
    nothing (TRL clamps its normaliser to 1)."""
    def step(micro_batches, ctx):
        logged = 0.0
        for mb in micro_batches:
            if _empty(mb):
                continue
            loss = _mean_value(objective, mb) / ctx.accumulation_steps
            loss.backward()
            logged += float(loss.detach())
        return logged
    return step


def global_mean(objective, count=normaliser_of, grad_reduction: str = "mean"):
    """Sum over the rank's micro-batches divided by the *global* count: ``count`` of every
    micro-batch of every rank, all-reduced once before the first backward (verl 0.9.1
    batch_num_tokens, fsdp/transformer_impl.py:724; OpenRLHF 0.11.2 loss_utils.py:80). Each
    micro-batch's sum is the objective's mean times its own count; the world size cancels
    DDP's averaging (verl's ×dp_size), so declare ``grad_reduction="sum"`` on a target whose
    wrapper sums. Exact for every partition."""
    def step(micro_batches, ctx):
        import torch
        import torch.distributed as dist

        counts = [count(mb) for mb in micro_batches]
        total = torch.tensor(float(sum(counts)), dtype=torch.float64)
        dist.all_reduce(total, group=ctx.group)
        factor = (ctx.world_size if grad_reduction == "mean" else 1) / float(total)
        logged = 0.0
        for mb, n in zip(micro_batches, counts):
            if n == 0:
                continue
            value = _mean_value(objective, mb)
            # the weight n·R/N in the working precision (float32 for bfloat16 and float16)
            work = torch.float64 if value.dtype == torch.float64 else torch.float32
            loss = value.to(work) * (n * factor)
            loss.backward()
            logged += float(loss.detach())
        return logged
    return step


def global_token_normalizer(objective, grad_reduction: str = "mean"):
    """lm.cross_entropy accumulated as transformers 5.25.0 accumulates it: the Trainer counts the
    non-ignored labels of every micro-batch of the accumulation window on every rank
    (trainer.py _get_num_items_in_batch, gathered when average_tokens_across_devices), the model's
    loss divides the micro-batch's sum by that count (loss/loss_utils.py fixed_cross_entropy) and
    compute_loss multiplies by the world size against DDP's averaging; no division by the
    accumulation steps (loss_is_scaled_for_ga). Here the count is the ``normalizer`` of the catalog
    function; a vector that gives its own normalizer, or reduction 'sum', is a sum already, and each
    micro-batch's share is the same function on its rows. Exact for every partition."""
    def step(micro_batches, ctx):
        import torch
        import torch.distributed as dist

        first = micro_batches[0]
        extra = {}
        if first.get("reduction", "mean") == "mean" and first.get("normalizer") is None:
            total = torch.tensor(float(sum(labelled(mb) for mb in micro_batches)), dtype=torch.float64)
            dist.all_reduce(total, group=ctx.group)
            extra = {"normalizer": float(total)}
        scale = ctx.world_size if grad_reduction == "mean" else 1
        logged = 0.0
        for mb in micro_batches:
            value = objective(**{**mb, **extra})
            work = torch.float64 if value.dtype == torch.float64 else torch.float32
            loss = value.to(work) * scale
            loss.backward()
            logged += float(loss.detach())
        return logged
    return step


def global_mean_terms(objective):
    """``global_mean`` for grpo.loss whose KL term has its own ``kl_aggregation``: the policy term and
    the KL term are two global means, each divided by its own count (OpenRLHF 0.11.2 ppo_actor.py
    aggregates the KL loss with the global token count whatever loss_agg_mode is). The policy term
    alone is the loss at β = 0; the KL term alone is the loss at A = 0, where the policy term is
    exactly 0 with a zero gradient, reduced by the KL term's mode. KL-Cov without ``selected``
    selects over the whole batch first (``global_kl_cov_selection``)."""
    whole = global_mean(objective)
    policy = global_mean(lambda **mb: objective(**{**mb, "beta": 0.0}))

    def penalty_alone(**mb):
        import torch
        return objective(**{**mb, "advantages": torch.zeros_like(mb["advantages"]),
                            "aggregation": mb["kl_aggregation"], "kl_aggregation": None})

    penalty = global_mean(penalty_alone, count=lambda mb: normaliser_of({**mb, "aggregation": mb["kl_aggregation"]}))

    def step(micro_batches, ctx):
        micro_batches = global_kl_cov_selection(micro_batches, ctx)
        first = micro_batches[0]
        if first.get("kl_aggregation") in (None, first.get("aggregation")) or first.get("beta") == 0:
            return whole(micro_batches, ctx)
        return policy(micro_batches, ctx) + penalty(micro_batches, ctx)
    return step


def global_kl_cov_selection(micro_batches: list, ctx) -> list:
    """The micro-batches of a grpo.loss step with KL-Cov's selection made over the whole batch. KL-Cov
    without ``selected`` takes the k = max(1, ⌊N·kl_cov_ratio⌋) valid tokens of largest covariance
    (A_t − Ā)·(log π_t − mean log π) over the batch's N valid tokens (Cui et al. 2025, arXiv
    2505.22617 §4; refimpl.torch.grpo): means and top-k are statistics of the batch, so a step that
    selects within its micro-batch computes another objective (verl's finding
    ``verl-cov-micro-batch-selection``). Every rank gathers every rank's valid tokens, makes the
    batch's selection in the working dtype, and passes each micro-batch its part as ``selected``.
    Any other case is returned as it is."""
    first = micro_batches[0]
    if first.get("policy_loss") != "kl-cov" or first.get("selected") is not None:
        return micro_batches
    import torch
    import torch.distributed as dist

    device = first["logp"].device
    masks = [mb["mask"].detach().ne(0) for mb in micro_batches]
    mine = torch.cat([torch.stack([mb["logp"].detach()[m], mb["advantages"].detach()[:, None].expand_as(m)[m]])
                      .to(torch.float64) for mb, m in zip(micro_batches, masks)], dim=1)   # [2, own tokens]
    counts = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(ctx.world_size)]
    dist.all_gather(counts, torch.tensor([mine.shape[1]], dtype=torch.int64, device=device), group=ctx.group)
    counts = [int(c) for c in counts]
    padded = torch.zeros(2, max(counts), dtype=torch.float64, device=device)
    padded[:, :mine.shape[1]] = mine
    gathered = [torch.empty_like(padded) for _ in counts]
    dist.all_gather(gathered, padded, group=ctx.group)
    work = torch.float64 if first["logp"].dtype == torch.float64 else torch.float32
    lp, a = torch.cat([g[:, :n] for g, n in zip(gathered, counts)], dim=1).to(work)
    cov = (a - a.mean()) * (lp - lp.mean())
    ratio = first.get("kl_cov_ratio", catalog.get("grpo.loss").param("kl_cov_ratio").default)
    k = validate.kl_cov_count(ratio, cov.numel())
    ordered, index = torch.sort(cov, descending=True, stable=True)
    validate.top_k_untied(k < cov.numel() and bool(ordered[k - 1] == ordered[k]), k)
    picked = torch.zeros(cov.numel(), dtype=torch.bool, device=device)
    picked[index[:k]] = True
    picked = picked[sum(counts[:ctx.rank]):][:mine.shape[1]]
    out, at = [], 0
    for mb, m in zip(micro_batches, masks):
        n = int(m.sum())
        selected = torch.zeros_like(m)
        selected[m] = picked[at:at + n]
        out.append({**mb, "selected": selected})
        at += n
    return out


def vocab_parallel(fn, needs_vocab_start: bool = False):
    """A sharded function from a vocabulary-parallel implementation that takes ``group=`` (and
    ``vocab_start=`` where it owns labels), as ``refimpl.torch.vocab_parallel``'s do."""
    def sharded(ctx, **kwargs):
        extra = {"vocab_start": ctx.vocab_start} if needs_vocab_start else {}
        return fn(**kwargs, group=ctx.group, **extra)
    return sharded


def builtin_torch() -> tuple[dict, dict]:
    """(steps, sharded) of the built-in torch backend, for the objectives the catalog marks
    (``Objective.step``, ``vocab_sharded``): the global normaliser of each step objective's mean,
    refimpl.torch.vocab_parallel for every full-vocabulary function (told its first token id where
    it takes labels)."""
    from lossproof.refimpl.torch import vocab_parallel as vp
    means = {"count": global_mean, "labels": global_token_normalizer, "terms": global_mean_terms}
    steps = {o.id: means[o.step](getattr(importlib.import_module(f"lossproof.refimpl.torch.{o.family}"), o.name))
             for o in catalog.OBJECTIVES if o.step}
    sharded = {o.id: vocab_parallel(getattr(vp, o.name), needs_vocab_start=any(i.kind == "int" for i in o.inputs))
               for o in catalog.OBJECTIVES if o.vocab_sharded}
    return steps, sharded
