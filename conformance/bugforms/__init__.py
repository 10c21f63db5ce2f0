"""Known bug forms: wrong formulas that real code has shipped, one record each (issue 36).

A diagnosis test reads a class of defect off the numbers (a factor, a clamp, a condition); some
defects are no such class but a formula written another way — a ratio inverted, ``max`` where the
paper takes ``min``, the current token counted in a future sum. Each :class:`Form` is one such
formula, as the reports it cites describe it, computed in float64 NumPy from a case's inputs and
parameters (most as ``refimpl.arrays``, the checked NumPy backend, called on changed inputs or
parameters). ``conformance.diagnose`` names a form when it matches the values of every failing
case-run of a cluster re-evaluated and of the passing case-runs tried (where the form and the
exact reference agree), so a form is a hypothesis checked against the function's numbers, never a
reference: the truth stays ``refimpl.exact``.

The forms of a family live in the module of that name (``bugforms.grpo``: grpo.*), each listing
its forms in ``FORMS``; :func:`forms_of` gathers those of one objective.
"""
from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

# The key of ``kw`` that holds the dtype of the run a form is matched against.
RUN_DTYPE = "run_dtype"
# The families with forms (a module each).
FAMILIES = ("distill", "dpo", "gae", "grpo", "kl", "lm", "moe", "ppo", "preference", "proximal_kl", "reward")


@dataclass(frozen=True)
class Form:
    """One wrong formula of one objective.

    ``outputs(kw)``: the outputs the wrong formula gives, {output name: float64 array}, from
    ``kw`` — the objective's parameters and conventions as the case calls it, its inputs as
    float64 arrays (an optional input the case leaves out is absent) and, under ``RUN_DTYPE``, the
    dtype the function ran in (for a form whose error is the dtype's: an underflow); None where
    the form does not apply to the case. Only outputs are compared: a form says what the function returns, and
    its gradient follows from it."""
    objective: str
    name: str                 # a short name for the defect line: "ratio inverted"
    defect: str               # what the code computes instead, one sentence
    fix: str                  # the concrete change that makes it the catalog's objective
    links: tuple[str, ...]    # public reports of this bug (issues, PRs), "owner/repo#N" or a URL
    outputs: Callable[[dict], dict | None]


def call(fn: Callable, kw: dict, **override):
    """``fn`` (a ``refimpl.arrays`` function, or a form's own) called with the entries of ``kw``
    and ``override`` its signature takes: most forms are the catalog's formula with one part
    changed, written as the checked NumPy backend called on changed inputs or parameters."""
    merged = {**kw, **override}
    names = inspect.signature(fn).parameters
    return fn(**{k: v for k, v in merged.items() if k in names})


def forms_of(objective: str) -> tuple[Form, ...]:
    family = objective.split(".")[0]
    if family not in FAMILIES:
        return ()
    module = importlib.import_module(f"{__name__}.{family}")
    return tuple(f for f in module.FORMS if f.objective == objective)
