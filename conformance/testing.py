"""Use the vectors from your own test code.

    from lossproof.conformance import testing
    for case in testing.cases("my_pkg.losses:TARGET", objective="grpo.*"):
        results = testing.check(case)         # one CaseResult per dtype
        assert not testing.failed(results), results

The pytest plugin (``pytest --lossproof-target=SPEC``) is built on these two functions.
"""
from __future__ import annotations

from dataclasses import dataclass

from lossproof.conformance import compare, harness, run, targets
from lossproof.conformance.results import failed
from lossproof.conformance.vectors.load import VectorCase, VectorSet


@dataclass(frozen=True)
class TargetCase:
    target: targets.Target
    case: VectorCase
    dtypes: tuple | None = None

    @property
    def uid(self) -> str:
        return self.case.uid


def cases(target: str | targets.Target, vectors_dir=None, objective: str = "*", dtypes=None,
          known: str | None = None) -> list[TargetCase]:
    """One TargetCase per vector of ``objective``; ``known``: a known-failures JSON file whose
    declarations join the target's own."""
    # the same validation as ``lossproof check``, before a vector file is read
    plan = run.prepare(run.Selection(targets=[target], objectives=[objective], dtypes=run.dtype_list(dtypes),
                                     known=targets.known_file(known) if known else {}))
    vs = VectorSet(vectors_dir, [objective], validate=False)   # reads the files of ``objective`` only
    chosen = tuple(plan.selection.dtypes) or None
    # a target declaring variants stands for several: each variant gets the cases of its objectives
    return [TargetCase(t, c, chosen) for t in plan.targets for c in run.cases(plan, vs)
            if len(plan.targets) == 1 or c.objective in t.objectives]


__all__ = ["TargetCase", "cases", "check", "failed"]


def check(tc: TargetCase, tolerances: compare.Tolerances | None = None, time_limit: float = 30.0,
          options: tuple = ()):
    """Judge one vector on its target: a list of CaseResult (one per dtype run). ``options``:
    the ``lossproof check`` options that reproduce this verdict, for the repro lines."""
    return harness.run_case(tc.target, tc.case, dtypes=tc.dtypes, tolerances=tolerances, time_limit=time_limit,
                            options=options)
