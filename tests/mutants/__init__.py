"""Mutation testing of the suite: buggy implementations, each paired with a correct twin.

Every mutant carries one bug class reported against a real library or described in a
paper; its twin is the same code with the bug switched off. ``lossproof check --target``
must flag every mutant (a ``fail`` or ``error`` on at least one vector) and pass every twin
(nothing but ``pass``, ``skip`` and ``unsupported``): ``test_kill_table.py`` enforces it and
``docs/mutation.md`` is the kill table (regenerate with ``PYTHONPATH=tests python -m
mutants.killtable``).

A mutant's docstring names its class on the first line and where it was seen on the line
that starts with ``Seen:`` (repository + issue/PR number, or paper + section).

Targets are module attributes, so the command line reaches each one directly::

    PYTHONPATH=tests lossproof check --target mutants.grpo:ADV_SAMPLE_STD --objective grpo.advantages
    PYTHONPATH=tests lossproof check --target mutants.grpo:ADV_SAMPLE_STD__TWIN --objective grpo.advantages

Mutants and twins validate their input through the reference backend first (``checked``),
so that ``invalid`` vectors are rejected by both and every kill comes from a valid vector:
the bug under test is in the formula, never in the input checks.
"""
from __future__ import annotations

import functools
import importlib
import inspect
from dataclasses import dataclass, field
from typing import Callable

from conformance import catalog

FAMILY_MODULES = ("kl", "dpo", "grpo", "distill", "proximal_kl", "numpy_targets")


@dataclass(frozen=True)
class Pair:
    slug: str                      # upper-case attribute name of the mutant target
    objective: str
    mutant: Callable
    twin: Callable
    conventions: dict = field(default_factory=dict)   # declared for both (see conformance.targets)
    framework: str = "torch"
    mutant_vjp: Callable | None = None                # numpy targets: the analytic VJP
    twin_vjp: Callable | None = None

    @property
    def family(self) -> str:
        return catalog.get(self.objective).family

    @property
    def bug(self) -> str:
        return _doc(self.mutant).strip().splitlines()[0].strip().rstrip(".")

    @property
    def seen(self) -> str:
        lines = [ln.strip() for ln in _doc(self.mutant).splitlines()]
        start = next(i for i, ln in enumerate(lines) if ln.startswith("Seen:"))
        out = []
        for ln in lines[start:]:
            if not ln or (out and ln.endswith(":") and " " not in ln):
                break
            out.append(ln)
        return " ".join(out)[len("Seen:"):].strip()

    def target(self, which: str) -> dict:
        """The target mapping of the mutant (``which='mutant'``) or of its twin."""
        mutant = which == "mutant"
        fn = self.mutant if mutant else self.twin
        spec = {"name": self.slug if mutant else f"{self.slug}__TWIN", "framework": self.framework,
                "objectives": {self.objective: fn}, "conventions": {self.objective: self.conventions},
                "dtypes": ["float64"], "version": "mutant" if mutant else "twin"}
        vjp = self.mutant_vjp if mutant else self.twin_vjp
        if vjp is not None:
            spec["vjps"] = {self.objective: vjp}
        return spec


def _doc(fn) -> str:
    return inspect.getdoc(fn) or ""


def checked(objective: str, framework: str = "torch"):
    """Decorator: reject what the reference backend rejects, then run the formula.

    The reference (``refimpl.torch`` or, for NumPy targets, ``refimpl.arrays``) is called on
    detached copies, without a graph; its result is discarded."""
    spec = catalog.get(objective)
    package = "refimpl.torch" if framework == "torch" else "refimpl.arrays"
    reference = getattr(importlib.import_module(f"{package}.{spec.family}"), spec.name)

    def wrap(fn):
        @functools.wraps(fn)
        def run(**kwargs):
            if framework == "torch":
                import torch
                with torch.no_grad():
                    reference(**{k: (v.detach().clone() if isinstance(v, torch.Tensor) else v)
                                 for k, v in kwargs.items()})
            else:
                reference(**{k: (v.copy() if hasattr(v, "copy") else v) for k, v in kwargs.items()})
            return fn(**kwargs)
        return run
    return wrap


def export(namespace: dict, pairs: list[Pair]) -> None:
    """Make every pair's mutant and twin a module attribute (for ``--target module:NAME``)."""
    for p in pairs:
        namespace[p.slug] = p.target("mutant")
        namespace[f"{p.slug}__TWIN"] = p.target("twin")


def all_pairs() -> list[Pair]:
    out = []
    for name in FAMILY_MODULES:
        out += importlib.import_module(f"{__name__}.{name}").PAIRS
    slugs = [p.slug for p in out]
    assert len(slugs) == len(set(slugs)), "duplicate mutant slug"
    return out


def module_of(pair: Pair) -> str:
    return pair.mutant.__module__
