"""Whether a target's function can be called the way the harness calls it, decided from its
signature before any case runs.

The harness passes every argument by keyword under the catalog's names: the inputs a vector
holds, the conventions (a late one at its default may be left out, docs/design.md "Uids, and
conventions added later") and the parameters the vector sets. A function that does not take one
of them, requires one the harness does not pass, or takes one positionally only would raise a
TypeError on every such call, and that TypeError says nothing about the case. :func:`unfit`
names the mismatch instead, in words a library author can act on, once per distinct mismatch;
:func:`call_error` tells a TypeError of a call whose arguments do not fit the callee (a
``**kwargs`` wrapper forwarding to the wrong function) from one a function raises itself.
"""
from __future__ import annotations

import inspect
import json
import re
import typing

from lossproof.conformance import catalog

# What CPython says when the arguments of a call do not fit the parameters of the callee. These
# are raised before the callee runs, so they reject the call, never the values passed.
_BINDING = re.compile(r"(got an unexpected keyword argument|missing \d+ required (positional|keyword-only) "
                      r"argument|takes \d+ positional argument|got multiple values for argument|"
                      r"got some positional-only arguments passed as keyword arguments)")


def call_error(err: BaseException) -> bool:
    """Whether ``err`` is Python's TypeError for a call whose arguments do not fit the
    function called (not a rejection of the values passed)."""
    return isinstance(err, TypeError) and bool(_BINDING.search(str(err)))


def _parameters(fn):
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):   # a builtin or an extension function without an introspectable signature
        return None


def _label(fn) -> str:
    return f"{getattr(fn, '__qualname__', None) or getattr(fn, '__name__', None) or type(fn).__name__}()"


def _describe(spec: catalog.Objective, name: str) -> str:
    """What the catalog's argument ``name`` is, and when the harness passes it."""
    for i in spec.inputs:
        if i.name == name:
            return ("an optional input of {0}, passed when a vector holds it" if i.optional
                    else "an input of {0}, passed on every call").format(spec.id)
    for p in spec.params:
        if p.name == name:
            kind = "a convention" if p.convention else "a parameter"
            when = "passed on every call" if p.convention else "passed when a vector sets it"
            return f"{kind} of {spec.id}, {when}, paper default {json.dumps(p.default)}"
    return f"not an argument of {spec.id}"


def unfit(fn, spec: catalog.Objective, names) -> list[str]:
    """The mismatches between ``fn``'s signature and a call by keyword with ``names`` (the
    catalog arguments of one case), each a sentence naming the argument; [] when the call
    binds, or when the signature cannot be inspected (the call then decides)."""
    params = _parameters(fn)
    if params is None:
        return []
    names = set(names)
    out = []
    positional_only = [p.name for p in params.values() if p.kind is inspect.Parameter.POSITIONAL_ONLY]
    if positional_only:
        out.append(f"takes {', '.join(map(repr, positional_only))} positionally only: lossproof passes every "
                   f"argument by keyword under the catalog's names")
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        for name in sorted(names - set(params), key=_catalog_order(spec)):
            hint = ("take it, and raise NotImplementedError for the values the function does not compute"
                    if any(p.name == name and p.convention for p in spec.params) else "take it by this name")
            out.append(f"does not take {name!r} ({_describe(spec, name)}): {hint}")
    for p in params.values():
        required = p.default is inspect.Parameter.empty and p.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        if required and p.name not in names:
            known = _describe(spec, p.name)
            out.append(f"requires {p.name!r}, which this call does not pass ({known}): "
                       + ("give it its paper default" if known.startswith(("a parameter", "an optional"))
                          else "rename it to the catalog's name or give it a default"))
    return out


def _catalog_order(spec: catalog.Objective):
    order = [i.name for i in spec.inputs] + [p.name for p in spec.params]
    return lambda name: (order.index(name) if name in order else len(order), name)


def return_form(fn, spec: catalog.Objective) -> list[str]:
    """Mismatches of the return form that the function's annotation makes known: None, or a
    tuple longer than the objective's outputs (a tuple is read in catalog order)."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:   # an annotation naming what this process cannot resolve: nothing is known
        return []
    returned = hints.get("return", inspect.Parameter.empty)
    if returned is type(None):
        return ["is annotated to return None: it must return the outputs "
                f"({', '.join(spec.outputs)}; a bare array is the first)"]
    args = typing.get_args(returned)
    if typing.get_origin(returned) is tuple and args and Ellipsis not in args and len(args) > len(spec.outputs):
        return [f"is annotated to return a tuple of {len(args)}; {spec.id} has {len(spec.outputs)} output(s) "
                f"({', '.join(spec.outputs)}), read in this order"]
    return []


def mismatches(fn, spec: catalog.Objective, names) -> str | None:
    """One line for a call that cannot be made (``unfit``) or a return form that cannot be read:
    the function's name, then each mismatch, joined by "; " (the report lists them one by one);
    None when neither is known to fail."""
    problems = unfit(fn, spec, names) + return_form(fn, spec)
    return f"{_label(fn)} {'; '.join(problems)}" if problems else None
