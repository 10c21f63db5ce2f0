"""``--target olmo``: OLMo-core 3.0.0 (``ai2-olmo-core``) on CPU.

Calls the library's own loss code:

- ``lm.cross_entropy``: ``olmo_core/nn/functional/cross_entropy_loss.py cross_entropy_loss`` with
  ``compute_z_loss`` (``z_loss_multiplier`` = the vector's z-loss), the two terms added as
  ``LMHead.forward`` adds them (``olmo_core/nn/lm_head.py``: ``loss = ce_loss + z_loss``); a
  ``normalizer`` is ``LMHead``'s ``loss_div_factor`` on the ``'sum'`` reduction (the global token
  count the train module passes). There is no label smoothing or soft-capping (unsupported).
- ``moe.load_balancing`` and ``moe.router_z_loss``: the router's own ``MoERouter.forward``
  (``olmo_core/nn/moe/router.py``) on a stand-in router whose ``get_expert_logits`` returns the
  vector's router logits (``[1, N, E]``: one instance of N tokens), softmax gating, granularity
  ``local_batch``, no jitter, expert bias or TP/CP mesh, and either ``lb_loss_weight = 1`` or
  ``z_loss_weight = 1`` (the other ``None``): the auxiliary loss it returns is the one objective. It
  runs the library's scores (``logits.float().softmax``), top-k (``get_top_k``), histogram
  (``ops.batched_histc``) and ``load_balancing_loss`` / ``router_z_loss``. ``[L, N, E]`` logits
  are L routers, their losses summed (``per-layer-sum``, every MoE block adds its own). The router
  takes no padding mask: every token it is given is routed and counted, so a vector that masks
  tokens out is unsupported.

One finding (``olmo-z-loss-unmasked-per-token``, below): with ``reduction='none'`` the z-loss is not
masked at ignored labels; the vector group ``z-loss-none`` (vector set 1.7.0) reaches it.

Arithmetic: the cross-entropy (``logits.float()``) and the router (``get_expert_logits(x).float()``)
compute in float32 by design (``computes_in``).

The package ``olmo_core`` imports ``cached_path`` and ``dataclass_extensions`` (configuration and
remote files), which the loss code never calls: they stand as placeholders.

Install: ``pip install --no-deps ai2-olmo-core==3.0.0`` (or ``scripts/install-peers.sh``).
"""
from __future__ import annotations

import functools
from types import SimpleNamespace

from lossproof.conformance.targets.imports import import_bare
from lossproof.conformance.targets.peers._common import Arithmetic as A
from lossproof.conformance.targets.peers._common import Convention as C
from lossproof.conformance.targets.peers._common import Finding, build, load_or_explain, require, where

VERSION = "3.0.0"
INSTALL = "pip install --no-deps ai2-olmo-core==3.0.0"
CE = "olmo_core/nn/functional/cross_entropy_loss.py"
HEAD = "olmo_core/nn/lm_head.py"
ROUTER = "olmo_core/nn/moe/router.py"
LOSS = "olmo_core/nn/moe/loss.py"
_ABSENT = ("cached_path", "dataclass_extensions")

CONVENTIONS = [
    C("lm.cross_entropy", "reduction", ("mean", "sum", "none"), f"{CE} cross_entropy_loss (reduction, default "
      f"'mean'); {HEAD} _finalize_loss divides by loss_div_factor"),
    C("moe.load_balancing", "form", ("switch", "per-layer-sum"), f"{LOSS} load_balancing_loss (granularity "
      "'local_batch': one router's batch); each MoE block's router adds its own loss"),
    C("moe.load_balancing", "fraction_norm", ("top_k", "none"), f"{LOSS} load_balancing_loss (scale = num_experts / "
      "top_k: f/k; 'none' at top_k = 1 only, where f/k is f)"),
]
PARAM_DEFAULTS = [
    C("lm.cross_entropy", "ignore_index", (-100,), f"{CE} cross_entropy_loss (ignore_index: int = -100)"),
    C("lm.cross_entropy", "z_loss", (0.0,), f"{CE} cross_entropy_loss (compute_z_loss=False; z_loss_multiplier 1e-4 "
      "when on)"),
]
ARITHMETIC = [
    A("lm.cross_entropy", "careful", f"{CE}:35 cross_entropy_loss (logits = logits.float())"),
    A("moe.load_balancing", "careful", f"{ROUTER}:440 MoERouter.forward (self.get_expert_logits(x).float())"),
    A("moe.router_z_loss", "careful", f"{ROUTER}:440 MoERouter.forward (self.get_expert_logits(x).float())"),
]




def _ignored_with_z_loss(case) -> bool:
    labels = case.test["inputs"]["labels"]
    flat = labels if isinstance(labels[0], (int, float)) else [x for row in labels for x in row]
    return bool(case.test["params"].get("z_loss")) and case.test["params"].get("ignore_index", -100) in flat


FINDINGS = [Finding(
    "olmo-z-loss-unmasked-per-token", "bug",
    "with reduction='none' the z-loss term is not masked: an ignored label's loss is z·lse² instead of 0 "
    "(cross_entropy(torch.tensor([[0.5, 1.0, -2.0], [3.0, 0.0, 1.0]]), torch.tensor([1, -100]), z_loss=1e-2, "
    "reduction='none') gives [0.5272, 0.1005]; the exact reference [0.52723502, 0], 0.1005 = 1e-2·lse(3, 0, 1)²). "
    "Repro: lossproof check --target olmo --uid lm.cross_entropy:9ea8fc21d7bc7e8f --dtype float32",
    f"{CE}:40-48 cross_entropy_loss (z_squared is multiplied by the mask under 'mean' and 'sum' only)",
    where(objectives=("lm.cross_entropy",), conventions={"reduction": "none"}, test=_ignored_with_z_loss))]


def _ce_module():
    return import_bare("olmo_core.nn.functional.cross_entropy_loss",
                       packages=("olmo_core", "olmo_core.nn", "olmo_core.nn.functional"), absent=_ABSENT)


def _router_module():
    return import_bare("olmo_core.nn.moe.router", packages=("olmo_core", "olmo_core.nn", "olmo_core.nn.moe",
                                                           "olmo_core.ops"), absent=_ABSENT)


def _mods():
    return _ce_module(), _router_module()


def cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                  reduction="mean", normalizer=None):
    if label_smoothing or softcap is not None:
        raise NotImplementedError("OLMo-core 3.0.0's cross_entropy_loss has no label smoothing or soft-capping")
    if normalizer is not None and reduction != "mean":
        raise NotImplementedError("a normalizer is LMHead's loss_div_factor on the 'sum' reduction")
    ce, zl = _ce_module().cross_entropy_loss(logits, labels, ignore_index=ignore_index,
                                             reduction="sum" if normalizer is not None else reduction,
                                             compute_z_loss=bool(z_loss), z_loss_multiplier=z_loss)
    loss = ce if zl is None else ce + zl
    return loss if normalizer is None else loss / normalizer


def _router_aux(router_logits, top_k: int, lb_weight, z_weight, mask):
    """MoERouter.forward's auxiliary loss on a stand-in router (module docstring), summed over layers."""
    import torch
    if mask is not None and not bool((mask != 0).all()):
        raise NotImplementedError("OLMo-core's router takes no padding mask: it routes and counts every token")
    router = _router_module()
    total = 0
    for layer in (router_logits if router_logits.dim() == 3 else router_logits[None]):
        experts = layer.shape[-1]
        fake = SimpleNamespace(
            jitter=lambda x: x, get_expert_logits=lambda x, z=layer: z[None],
            gating_function=router.MoERouterGatingFunction.softmax, random_expert_assignment=False,
            normalize_expert_weights=None, num_experts=experts, training=True, lb_loss_weight=lb_weight,
            load_balancing_loss=torch.zeros([]), lb_loss_granularity=router.MoELoadBalancingLossGranularity.local_batch,
            tp_mesh=None, cp_mesh=None, top_k=top_k, z_loss_weight=z_weight, z_loss=torch.zeros([]),
            batch_size_per_expert=torch.zeros(experts), bias_gamma=None, uniform_expert_assignment=False)
        fake.get_top_k = functools.partial(router.MoERouter.get_top_k, fake)
        with torch.enable_grad():
            aux = router.MoERouter.forward(fake, torch.zeros(1, layer.shape[0], 1))[3]
        total = total + aux
    return total


def load_balancing(router_logits, top_k=1, form="switch", seq_len=None, mask=None, fraction_norm="none"):
    if form not in ("switch", "per-layer-sum"):
        raise NotImplementedError(f"OLMo-core 3.0.0 has no load-balancing form {form!r}")
    if fraction_norm != "top_k" and top_k > 1:
        raise NotImplementedError("load_balancing_loss divides f by top_k (fraction_norm='top_k')")
    return _router_aux(router_logits, top_k, 1.0, None, mask)


def router_z_loss(router_logits, mask=None):
    return _router_aux(router_logits, 1, None, 1.0, mask)


def target():
    version = require("olmo_core", "ai2-olmo-core", VERSION, INSTALL)
    load_or_explain(_mods, "ai2-olmo-core", INSTALL)
    objectives = {"lm.cross_entropy": cross_entropy, "moe.load_balancing": load_balancing,
                  "moe.router_z_loss": router_z_loss}
    return build("olmo", version, objectives, CONVENTIONS, FINDINGS, ARITHMETIC,
                 computes_in={"lm.cross_entropy": "float32", "moe.load_balancing": "float32",
                              "moe.router_z_loss": "float32"})
