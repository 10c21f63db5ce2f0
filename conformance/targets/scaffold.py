"""``lossproof scaffold MODULE:FUNCTION --objective ID``: a target file for a library's function,
written from its signature.

The skeleton is a wrapper with the catalog's signature that calls the library's function. Each
catalog argument is passed to the parameter whose name means the same (``log_probs`` for
``logp``, ``ref_per_token_logps`` for ``ref_logp``, ``attention_mask`` for ``mask``); every
guess that is not an exact match says so, and everything the skeleton cannot decide is a line
marked ``TODO`` for the user: a library parameter no catalog argument fills, a convention the
library does not take (the wrapper refuses other values than the one it computes, with
``NotImplementedError``, until the user says which one that is), a parameter it does not take
(declared ``fixed`` at the catalog's default: the user confirms the value it computes with), the
form of the return.
"""
from __future__ import annotations

import difflib
import importlib
import inspect
import re

from lossproof.conformance import catalog
from lossproof.conformance.targets.imports import missing_module
from lossproof.conformance.targets.target import TargetError

# Names libraries give the catalog's arguments, beyond the spellings _normal makes equal.
ALIASES = {
    "logp": ("log_probs", "logprobs", "per_token_logps", "action_log_probs", "log_prob", "curr_log_probs"),
    "ref_logp": ("ref_log_probs", "ref_per_token_logps", "ref_logprob", "base_log_probs", "reference_logps"),
    "old_logp": ("old_log_probs", "old_per_token_logps", "old_log_prob", "old_action_log_probs"),
    "mask": ("attention_mask", "response_mask", "completion_mask", "loss_mask", "action_mask", "eos_mask"),
    "advantages": ("advantage", "adv", "advs"),
    "rewards": ("reward", "scores", "token_level_rewards", "token_level_scores"),
    "student_logits": ("logits", "s_logits", "student_logit", "input"),
    "teacher_logits": ("t_logits", "teacher_logit", "target_logits"),
    "labels": ("label", "target", "targets", "true_labels"),
    "temperature": ("T", "tau", "temp"),
    "policy_chosen_logps": ("chosen_logps", "chosen_logprobs", "pi_chosen_logps"),
    "policy_rejected_logps": ("rejected_logps", "rejected_logprobs", "pi_rejected_logps"),
    "reference_chosen_logps": ("ref_chosen_logps", "ref_chosen_logprobs"),
    "reference_rejected_logps": ("ref_rejected_logps", "ref_rejected_logprobs"),
    "eps_low": ("clip_ratio_low", "cliprange_low", "epsilon_low", "clip_eps_low", "epsilon", "clip_ratio", "eps"),
    "eps_high": ("clip_ratio_high", "cliprange_high", "epsilon_high", "clip_eps_high"),
    "values": ("loss_mat", "losses", "per_token_loss"),
}
_SPELLINGS = (("log_probs", "logp"), ("logprobs", "logp"), ("log_prob", "logp"), ("logps", "logp"),
              ("per_token_", ""), ("reference", "ref"), ("_", ""))


def _normal(name: str) -> str:
    out = name.lower()
    for old, new in _SPELLINGS:
        out = out.replace(old, new)
    return out.removesuffix("s")


def match(arguments: list[str], parameters: list[str]) -> dict[str, tuple[str, str]]:
    """{catalog argument: (library parameter, how it was matched)}: by name, by an alias, by the
    same spelling, else by a close name; each library parameter fills one argument at most."""
    out, taken = {}, set()

    def claim(arg, param, how):
        if arg not in out and param not in taken:
            out[arg] = (param, how)
            taken.add(param)

    for arg in arguments:
        if arg in parameters:
            claim(arg, arg, "same name")
    for arg in arguments:
        for param in parameters:
            if param in ALIASES.get(arg, ()):
                claim(arg, param, "alias")
    for arg in arguments:
        for param in parameters:
            if _normal(param) == _normal(arg):
                claim(arg, param, "spelled otherwise")
    for arg in arguments:
        free = [p for p in parameters if p not in taken]
        close = difflib.get_close_matches(_normal(arg), [_normal(p) for p in free], n=1, cutoff=0.8)
        if close:
            claim(arg, free[[_normal(p) for p in free].index(close[0])], "close name: check it")
    return out


def _load(target: str):
    module_name, _, function_name = target.partition(":")
    if not module_name or not function_name or module_name.endswith(".py") or "/" in module_name:
        raise TargetError(f"scaffold {target!r}: expected MODULE:FUNCTION with an importable module "
                          f"(package.module:function)")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:
        hint = missing_module(err)
        raise TargetError(f"scaffold {target!r}: cannot import {module_name}: {type(err).__name__}: {err}"
                          + (f" — {hint}" if hint else "")) from None
    function = module
    for part in function_name.split("."):
        function = getattr(function, part, None)
        if function is None:
            raise TargetError(f"scaffold {target!r}: {module_name} has no {function_name!r}")
    if not callable(function):
        raise TargetError(f"scaffold {target!r}: {function_name} is not callable")
    return module, module_name, function_name, function


def skeleton(target: str, objective_id: str, filename: str = "target.py") -> str:
    """The text of a target file for ``target`` (``MODULE:FUNCTION``) implementing ``objective_id``."""
    if objective_id not in catalog.BY_ID:
        raise TargetError(f"--objective {objective_id!r}: not an objective of the catalog (see 'lossproof list')")
    spec = catalog.get(objective_id)
    module, module_name, function_name, function = _load(target)
    try:
        params = inspect.signature(function).parameters
    except (TypeError, ValueError):
        raise TargetError(f"scaffold {target!r}: {function_name} has no signature to read") from None
    named = [p for p in params.values() if p.kind not in (inspect.Parameter.VAR_POSITIONAL,
                                                          inspect.Parameter.VAR_KEYWORD)]
    required = [i.name for i in spec.inputs if not i.optional]
    optional = [i.name for i in spec.inputs if i.optional]
    arguments = required + [p.name for p in spec.params] + optional
    matched = match(arguments, [p.name for p in named])
    names = {*vars(module), *getattr(function, "__globals__", {})}
    framework = "torch" if "torch" in names else "jax" if {"jax", "jnp"} & names else "numpy"
    wrapper = re.sub(r"[^0-9A-Za-z_]", "_", function_name.split(".")[-1]) + "_target"
    # a parameter (not a convention) the library takes no argument for: declared ``fixed`` at the
    # catalog's default, which the user confirms, instead of a wrapper argument it would ignore
    fixed = [p for p in spec.params if p.name not in matched and not p.convention]
    signature = (required + [f"{p.name}={p.default!r}" for p in spec.params if p not in fixed]
                 + [f"{n}=None" for n in optional])
    lines = _wrap(", ".join(signature), " " * len(f"def {wrapper}("))
    head = [f"def {wrapper}({lines[0].lstrip()}"] + lines[1:]
    head[-1] += "):"

    body = []
    for p in spec.params:
        if p.name in matched or p in fixed:
            continue
        test = f"{p.name} is not None" if p.default is None else f"{p.name} != {p.default!r}"
        body += [f"    if {test}:   # TODO: {function_name} takes no {p.name} (convention): is {p.default!r} what it "
                 f"computes?",
                 f"        raise NotImplementedError(f\"{p.name}={{{p.name}!r}}\")"]
    for name in optional:
        if name not in matched:
            body += [f"    if {name} is not None:   # TODO: {function_name} takes no {name} (an optional input)",
                     f"        raise NotImplementedError(\"{name}\")"]
    call = [f"    returned = {function_name}("]
    for p in named:
        arg = next((a for a, (q, _) in matched.items() if q == p.name), None)
        keyword = p.kind is not inspect.Parameter.POSITIONAL_ONLY
        lead = f"{p.name}=" if keyword else ""
        if arg is not None:
            how = matched[arg][1]
            note = "" if how == "same name" else f"   # {arg}: {how}"
            call.append(f"        {lead}{arg},{note}")
        elif p.default is inspect.Parameter.empty:
            call.append(f"        {lead}...,   # TODO: lossproof passes nothing for {p.name}: give the value it needs")
    call.append("    )")
    outputs = ", ".join(spec.outputs)
    ret = [f"    return returned   # TODO: the outputs of {objective_id}: {outputs} (a tuple in this order, "
           f"a dict by name, or the first alone)"]
    left = [f"{p.name}={p.default!r}" for p in named
            if p.default is not inspect.Parameter.empty and not any(q == p.name for q, _ in matched.values())]
    conventions = ", ".join(p.name for p in spec.params if p.convention and p.name not in matched)
    defaults = ([f"    # TODO: left at {function_name}'s defaults: {', '.join(left)}"]
                + ([f"    #       (is one of them {conventions} of {objective_id} under another name?)"]
                   if conventions else []) if left else [])

    doc = [f'"""A lossproof target for {module_name}:{function_name} ({objective_id}), written by',
           "`lossproof scaffold`. Resolve every TODO, then check it:",
           "",
           f"    lossproof check --target {filename}:TARGET --objective {objective_id}",
           '"""']
    imports = [f"from {module_name} import {function_name.split('.')[0]}"]
    target = ["TARGET = {",
              f"    \"name\": \"{module_name.split('.')[0]}-{function_name.split('.')[-1]}\",",
              f"    \"framework\": \"{framework}\",",
              f"    \"objectives\": {{\"{objective_id}\": {wrapper}}},"]
    if fixed:
        values = ", ".join(f"\"{p.name}\": {p.default!r}" for p in fixed)
        target += [f"    # TODO: {function_name} takes no {', '.join(p.name for p in fixed)}: are these the values it "
                   "computes with?",
                   f"    \"fixed\": {{\"{objective_id}\": {{{values}}}}},"]
    target += ["}"]
    return "\n".join(doc + imports + ["", ""] + head + body + defaults + call + ret
                     + ["", ""] + target) + "\n"


def _wrap(text: str, indent: str, width: int = 100) -> list[str]:
    """``text`` (a comma-separated list) in lines of at most ``width`` characters."""
    lines, line = [], ""
    for piece in text.split(", "):
        candidate = f"{line}, {piece}" if line else piece
        if len(indent) + len(candidate) + 1 > width and line:
            lines.append(indent + line + ",")
            line = piece
        else:
            line = candidate
    return lines + [indent + line]
