"""Shared plumbing of the third-party adapters (``--target trl|verl|openrlhf|liger``).

An adapter calls the library's own loss code, never a re-implementation of it. This module
holds what the four adapters share: the convention table each one declares (one row per
convention, with the library file it comes from), the lazy import of a pinned library with
a one-line install hint, and the documented findings (library bugs and deviations) that the
adapters declare as known failures, with the predicates that say which cases each explains.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from conformance import catalog
from conformance.numbers import decode_input
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
    """A documented, confirmed reason why a library fails some vectors under its declared
    conventions: ``bug`` (the library computes something other than what it declares),
    ``deviation`` (a behaviour the catalog cannot express, e.g. a clamp), ``precision`` (a
    narrower internal dtype than the inputs'), or ``numerics`` (a rounding the formula invites).

    The adapter declares each one as a known failure (DESIGN §8): a run lists its cases as
    ``xfail`` and only a new failure fails it. ``applies`` is as specific as the finding (by
    objective, conventions, parameters, flags, inputs and dtype), so that a case it names that
    passes shows up as a stale declaration (``xpass``). It is asked about the ``valid`` vectors
    only, unless ``results`` says otherwise: an ``acceptable`` vector passes whatever its values
    (only a narrower dtype or a gradient leak fails it there), and an ``invalid`` one is judged on
    the validation axis, which needs no declaration."""
    id: str
    kind: str
    summary: str
    source: str
    applies: Callable = field(compare=False, repr=False)   # (VectorCase, dtype) -> bool
    results: tuple = ("valid",)
    as_paper_only: bool = False

    @property
    def reason(self) -> str:
        """The known-failure reason: the finding's id, what it is and where in the library."""
        return f"{self.id} ({self.kind}): {self.summary} [{self.source}]"

    def covers(self, case, dtype: str) -> bool:
        return case.result in self.results and bool(self.applies(case, dtype))

    def match(self, result, case) -> bool:
        """Whether the finding explains ``result`` on ``case`` (docs/conventions.md attribution)."""
        return self.covers(case, result.dtype)


def known_rules(findings: list[Finding]) -> tuple:
    """A target's ``known_rules``: each finding's reason and predicate."""
    return tuple((f.reason, f.covers) for f in findings)


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


def build(name: str, version: str, objectives: dict, conventions: list[Convention], findings: list[Finding], *,
          alternatives: dict | None = None, dtypes=("float64", "float32", "bfloat16", "float16")) -> Target:
    spec = {"name": name, "framework": "torch", "version": version, "objectives": objectives,
            "conventions": declaration(conventions, alternatives), "known_rules": known_rules(findings),
            "dtypes": list(dtypes), "devices": ["cpu"]}
    return from_mapping(spec, name)


# --- small shared helpers -------------------------------------------------------------------------

def per_element(fn, *tensors):
    """Call ``fn`` on each element (as a (1, 1) tensor) of same-shaped 1-D tensors and stack the
    scalar results: for library functions that only return a reduced loss."""
    import torch
    outs = [fn(*(t[i].reshape(1, 1) for t in tensors)) for i in range(tensors[0].shape[0])]
    return torch.stack([o.reshape(()) for o in outs]) if outs else tensors[0][:0].clone()


def representable_logits(*tensors, why: str) -> None:
    """Refuse (NotImplementedError: the case is unsupported, not failed) logits that the
    adapter cannot pass through a library interface that takes hidden states, not logits."""
    import torch
    for t in tensors:
        if torch.isinf(t).any():
            raise NotImplementedError(why)


LOW_PRECISION = ("bfloat16", "float16")


def log_ratio_clamp_changes(case) -> bool:
    """Whether clamping log ρ = logp − old_logp to ±20 before exp (verl, OpenRLHF) changes the
    clipped objective of a selected token: ρ < e^−20 with A > 0 (the unclipped term ρ·A becomes
    e^−20·A and its gradient 0), or ρ > e^20 with A < 0 and no dual clip (the unclipped term is
    capped). Elsewhere the clip makes the term constant and the clamp changes nothing."""
    inputs = case.test["inputs"]
    logp, old = (np.asarray(decode_input(inputs[n]), dtype=np.float64) for n in ("logp", "old_logp"))
    adv = np.asarray(decode_input(inputs["advantages"]), dtype=np.float64)
    adv = adv[:, None] if logp.ndim == 2 else adv
    selected = (np.asarray(decode_input(inputs["mask"]), dtype=np.float64) != 0 if "mask" in inputs
                else np.ones(logp.shape, bool))
    log_ratio = logp - old
    tiny = (log_ratio < -20) & (adv > 0)
    huge = (log_ratio > 20) & (adv < 0) & (case.conventions.get("dual_clip") is None)
    return bool(((tiny | huge) & selected).any())


def equal_group_mean_inexact(case, dtype: str) -> bool:
    """Whether some group of the case's rewards is all-equal while torch's mean of it in
    ``dtype`` is not that value: the group-normalising libraries then divide a rounding error
    by a standard deviation of the same order (the ZeroStdRounding vectors). torch's own mean
    decides it, since the libraries call it."""
    import torch  # the adapters are torch targets: torch is loaded whenever this runs
    rewards = torch.tensor(np.asarray(decode_input(case.test["inputs"]["rewards"]), dtype=np.float64),
                           dtype=getattr(torch, dtype))
    equal = (rewards == rewards[:, :1]).all(dim=1)
    return bool((equal & (rewards.mean(dim=1) != rewards[:, 0])).any())


def where(objectives=(), dtypes=(), flags=(), conventions=None, test=None):
    """A finding's predicate ``(case, dtype) -> bool``: the case's objective is one of
    ``objectives``, ``dtype`` one of ``dtypes``, the case carries one of ``flags``, its group's
    conventions have the given values (a tuple: any of them) and ``test(case)`` holds. An empty
    condition holds for every case."""
    conventions = conventions or {}

    def applies(case, dtype) -> bool:
        return ((not objectives or case.objective in objectives) and (not dtypes or dtype in dtypes)
                and (not flags or any(f in case.flags for f in flags))
                and all(case.conventions.get(name) in (value if isinstance(value, tuple) else (value,))
                        for name, value in conventions.items())
                and (test is None or bool(test(case))))
    return applies
