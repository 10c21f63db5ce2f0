"""Shared plumbing of the third-party adapters (``--target trl|verl|openrlhf|liger``).

An adapter calls the library's own loss code, never a re-implementation of it. This module
holds what the four adapters share: the convention table each one declares (one row per
convention, with the library file it comes from), the lazy import of a pinned library with
a one-line install hint, importing a library module without running its package
``__init__`` (OpenRLHF and verl import GPU-only or cluster packages there), and the
documented findings (library bugs and deviations) that explain the cases a library fails.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field

from conformance import catalog
from conformance.targets.imports import import_bare  # noqa: F401  (the adapters import it from here)
from conformance.targets.target import Target, TargetError, from_mapping

# One command installs every pinned library next to the core install (see docs/conventions.md).
INSTALL_ALL = "scripts/install-peers.sh"


@dataclass(frozen=True)
class Convention:
    """One convention of a library: the value(s) it can be configured to (the first is its
    default), where that comes from, and a note when it needs one."""
    objective: str
    param: str
    values: tuple            # accepted values, library default first
    source: str              # library file (and function) the behaviour comes from
    note: str = ""

    @property
    def default(self):
        return self.values[0]

    @property
    def paper(self):
        return catalog.get(self.objective).defaults[self.param]


@dataclass(frozen=True)
class Finding:
    """A documented reason why a library fails some vectors under its declared conventions:
    ``bug`` (the library computes something other than what it declares), ``deviation`` (a
    behaviour the catalog cannot express, e.g. a clamp), ``precision`` (a narrower internal
    dtype than the inputs'), ``validation`` (an invalid input accepted), or ``n/a`` (an input
    the library's interface cannot receive)."""
    id: str
    kind: str
    summary: str
    source: str
    match: Callable = field(compare=False, repr=False)   # (CaseResult, VectorCase) -> bool
    as_paper_only: bool = False


def declaration(conventions: list[Convention], alternatives: dict | None = None) -> dict:
    """The harness declaration {objective: {param: value | [values]}} of a convention table.
    ``alternatives`` replaces an objective's declaration by a list of admissible combinations
    (a library whose conventions do not vary independently)."""
    out: dict = {}
    for c in conventions:
        out.setdefault(c.objective, {})[c.param] = c.values[0] if len(c.values) == 1 else list(c.values)
    for objective, combos in (alternatives or {}).items():
        out[objective] = [dict(combo) for combo in combos]
    return out


def require(module: str, distribution: str, version: str, install: str) -> str:
    """Check that the pinned library is importable without importing it; returns its version.
    A missing or differently versioned library is a usage error (exit status 2)."""
    if importlib.util.find_spec(module) is None:
        raise TargetError(f"{distribution} is not installed: {install} (or {INSTALL_ALL} for all four peers)")
    try:
        installed = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        installed = ""
    if installed and installed != version:
        raise TargetError(f"{distribution} {installed} is installed but the adapter is pinned to {version} "
                          f"(its declared conventions were read from that release): {install}")
    return installed or version


def load_or_explain(loader, distribution: str, install: str):
    """Run ``loader`` (the adapter's lazy import); a missing runtime import is a usage error."""
    try:
        return loader()
    except ImportError as err:
        raise TargetError(f"{distribution}: cannot import its loss code ({err}): {install} "
                          f"(or {INSTALL_ALL})") from None


def build(name: str, version: str, objectives: dict, conventions: list[Convention], *,
          alternatives: dict | None = None, dtypes=("float64", "float32", "bfloat16", "float16")) -> Target:
    spec = {"name": name, "framework": "torch", "version": version, "objectives": objectives,
            "conventions": declaration(conventions, alternatives), "dtypes": list(dtypes), "devices": ["cpu"]}
    return from_mapping(spec, name)


# --- small shared helpers -------------------------------------------------------------------------

def per_element(fn, *tensors):
    """Call ``fn`` on each element (as a (1, 1) tensor) of same-shaped 1-D tensors and stack the
    scalar results: for library functions that only return a reduced loss."""
    import torch
    outs = [fn(*(t[i].reshape(1, 1) for t in tensors)) for i in range(tensors[0].shape[0])]
    return torch.stack([o.reshape(()) for o in outs]) if outs else tensors[0][:0].clone()


def finite_logits(*tensors, why: str) -> None:
    import torch
    for t in tensors:
        if torch.isinf(t).any():
            raise ValueError(why)


def has_flag(*flags):
    return lambda r, c=None: any(f in r.flags for f in flags)
