"""Exact cases derived at run time for a declared convention combination that no committed
vector group holds.

A target that declares, say, ``t2_scale=False`` together with ``soft_term='cross_entropy'``
would otherwise see the objective vanish from its run: no group of the golden set has that
combination, so no case is selected. Here each such combination gets cases of its own: the
inputs and parameters of the objective's smallest committed valid tests (some of them
low-precision ones, so every dtype is exercised), re-evaluated under the declared conventions
by the same exact reference and ``build_test`` that wrote the golden set, with the family's
tolerance-scale model, and certified on the fly by the ball-arithmetic reference where it
covers the objective. A derived case carries the flag ``Derived``, the group ``derived`` and a
provenance naming the committed uid it was derived from: it is never mistaken for a golden
vector, and its uid is the one the same case would have in a vector file.
"""
from __future__ import annotations

import importlib
import json

from lossproof.conformance import catalog, compare, numbers, report
from lossproof.conformance.generate.build import GenerationError, build_test
from lossproof.conformance.generate.case import ROWS_WITHOUT_TOKENS, Case, rows_without_tokens
from lossproof.conformance.targets.target import ANY, Target
from lossproof.conformance.vectors import certify
from lossproof.conformance.vectors.format import LARGE_FLAG
from lossproof.conformance.vectors.load import VectorCase
from lossproof.refimpl import validate

FLAG = "Derived"
NOTE = ("Derived at run time for a declared convention combination that no committed group holds, from the "
        "committed test its provenance names (conformance/derive.py): not a golden vector.")
GROUP = report.DERIVED_GROUP
PER_COMBINATION = 12          # cases derived for one combination: enough to see a defect, cheap enough to build
LOW_PRECISION_SHARE = 6       # of which taken from low-precision tests, so bfloat16/float16 are judged too
MAX_COMBINATIONS = 16         # per objective; the rest are named in a note, not derived


def _committed_groups(vs, objective_id: str) -> list[dict]:
    """The convention sets of the objective's valid committed groups, each once."""
    seen = {json.dumps(c.conventions, sort_keys=True): c.conventions
            for c in vs.cases(objective_id) if c.result != "invalid"}
    return list(seen.values())


def _assignments(spec: catalog.Objective, combo: dict):
    """The concrete convention assignments a declared combination names: its first value of
    every convention (an undeclared one is the paper default, a ``"*"`` stays open: ANY), then
    each other listed value of one convention with the rest at their first. Not the whole
    product of the lists: a declaration lists what each option can be set to, and the product of
    a dozen options is not what a reader of the declaration sees."""
    first = {}
    for name in spec.conventions:
        value = combo.get(name, spec.defaults[name])
        first[name] = value[0] if isinstance(value, (list, tuple)) else value
    yield first
    for name in spec.conventions:
        value = combo.get(name)
        for other in (value[1:] if isinstance(value, (list, tuple)) else ()):
            yield {**first, name: other}


def _holds(group: dict, assignment: dict) -> bool:
    return all(v == ANY or group.get(k) == v for k, v in assignment.items())


def uncovered(target: Target, vs, objective_id: str) -> list[dict]:
    """The concrete combinations the target declares for the objective that no committed valid
    group holds (open ``"*"`` values left as ANY), in declaration order."""
    if target.conventions == ANY or objective_id not in target.objectives:
        return []
    spec = catalog.get(objective_id)
    declared = target.declared(objective_id)
    if declared == ANY:
        return []
    groups = _committed_groups(vs, objective_id)
    if not groups:
        return []
    out = []
    for combo in declared if isinstance(declared, list) else [declared]:
        for assignment in _assignments(spec, combo):
            if not any(_holds(g, assignment) for g in groups) and assignment not in out:
                out.append(assignment)
    return out


def _size(case: VectorCase) -> int:
    return sum(1 for v in case.test["inputs"].values() for _ in numbers.flat_floats(v))


def _low_precision(case: VectorCase) -> bool:
    return any(d in compare.LOW_PRECISION for d in case.test["dtypes"])


def _bases(vs, objective_id: str, assignment: dict, count: int = PER_COMBINATION) -> list[VectorCase]:
    """The ``count`` committed valid tests to derive from: from the group closest to the
    assignment (most conventions equal), the smallest ones, some of them low-precision."""
    valid = [c for c in vs.cases(objective_id) if c.result == "valid" and LARGE_FLAG not in c.flags]

    def closeness(c):
        return sum(c.conventions.get(k) == v for k, v in assignment.items())
    def derived_as(c):   # bases that differ only in what the assignment overrides give one case
        kept = {k: c.conventions.get(k) for k, v in assignment.items() if v == ANY}
        return json.dumps([c.test["inputs"], c.test["params"], kept], sort_keys=True, default=str)
    best = max((closeness(c) for c in valid), default=0)
    near = list({derived_as(c): c for c in sorted((c for c in valid if closeness(c) == best),
                                                   key=lambda c: (_size(c), c.test["tcId"]), reverse=True)}.values())
    near.sort(key=lambda c: (_size(c), c.test["tcId"]))
    low = [c for c in near if _low_precision(c)][:max(1, LOW_PRECISION_SHARE * count // PER_COMBINATION)]
    rest = [c for c in near if c not in low][:count - len(low)]
    return low + rest


def _convention_flags(vs, spec: catalog.Objective) -> dict[str, dict]:
    """For each flag that names a convention (category ``convention`` in the file's notes): the
    conventions every committed group carrying it shares, paper defaults left out."""
    notes = vs.files[spec.vector_file]["notes"]
    shared: dict[str, dict] = {}
    for case in vs.cases(spec.id):
        for flag in case.flags:
            if notes.get(flag, {}).get("category") == "convention":
                mine = {k: v for k, v in case.conventions.items() if v != spec.defaults.get(k)}
                shared[flag] = {k: v for k, v in shared.get(flag, mine).items() if mine.get(k) == v}
    return shared


def _flags(base: VectorCase, conventions: dict, convention_flags: dict, notes: dict) -> tuple:
    """The base test's flags that still describe the derived one: not its article provenance
    (the printed number was computed under other conventions) nor the convention flags of its
    group, but those of the new conventions."""
    keep = {f for f in base.flags if notes.get(f, {}).get("category") not in ("convention", "article")}
    keep |= {f for f, needs in convention_flags.items()
             if needs and all(conventions.get(k) == v for k, v in needs.items())}
    return tuple(sorted(keep | {FLAG}))


def _result(flags: tuple, conventions: dict) -> tuple[tuple, str]:
    """The flags and result of the derived case: where the base empties rows, the generators' own
    rule (``rows_without_tokens``) under the derived conventions, so that such a case is acceptable
    under a sequence mean here exactly as in the committed groups; else valid, as its base."""
    for flag in flags:
        plain = flag.removesuffix("SeqMean")
        if plain in ROWS_WITHOUT_TOKENS:
            now, result = rows_without_tokens(conventions, plain)
            return tuple(sorted(set(flags) - {flag} | {now})), result
    return flags, "valid"


def _scale_function(spec: catalog.Objective):
    return getattr(importlib.import_module(spec.generator_module), "SCALES", {}).get(spec.id)


def derive(vs, objective_id: str, assignment: dict, count: int = PER_COMBINATION,
           bases: list[VectorCase] | None = None) -> tuple[list[VectorCase], list[str]]:
    """Cases for one uncovered combination (from ``count`` bases; fewer screen a combination in
    ``lossproof infer``), and a line for each base the exact reference could not carry over
    (inputs invalid under these conventions, digits not stable). ``bases``: the committed tests
    to derive from, in order, instead of those of the nearest group (``lossproof infer`` picks
    tests that observe a convention the nearest group's tests do not)."""
    spec = catalog.get(objective_id)
    scale = _scale_function(spec)
    notes = vs.files[spec.vector_file]["notes"]
    convention_flags = _convention_flags(vs, spec)
    cases, dropped = [], []
    for base in (_bases(vs, objective_id, assignment, count) if bases is None else bases[:count]):
        conventions = {k: (base.conventions[k] if v == ANY else v) for k, v in assignment.items()}
        flags, result = _result(_flags(base, conventions, convention_flags, notes), conventions)
        case = Case(objective_id, {k: numbers.decode_input(v) for k, v in base.test["inputs"].items()},
                    params=dict(base.test["params"]), conventions=conventions, flags=flags, result=result,
                    comment=f"derived from {base.uid} ({base.test['comment']})",
                    provenance={"kind": "derived", "from": base.uid}, low_precision=_low_precision(base), group=GROUP,
                    # the base's own cotangents (exact in its dtypes), so that the derived case
                    # is the base rebuilt wherever the conventions do not change the outputs' shapes
                    cotangents={k: numbers.decode_input(v) for k, v in base.test.get("cotangents", {}).items()}
                    or None)
        try:
            test = build_test(case, scale)
        except (validate.InputError, GenerationError) as err:
            dropped.append(f"{base.uid}: {err}")
            continue
        derived = VectorCase(objective_id, GROUP, conventions, {**test, "tcId": 0}, "(derived)")
        try:
            proof = certify.certify_case(derived)
        except certify.Wrong as err:         # the two references disagree: no case, and say so
            dropped.append(f"{test['uid']}: the certified reference disagrees: {err}")
            continue
        test["provenance"]["certified"] = "notCertified" not in proof
        cases.append(derived)
    return cases, dropped


def not_a_choice(spec: catalog.Objective, assignment: dict) -> str | None:
    """Why a declared value cannot be derived: it is not among the convention's values."""
    for param in spec.params:
        value = assignment.get(param.name, ANY)
        if (param.convention and param.choices and value != ANY and value not in param.choices
                and value != param.default):     # a default outside the choices (None: "as aggregation")
            return (f"{value!r} is not a value of {param.name} (the catalog's values: "
                    f"{', '.join(json.dumps(c) for c in param.choices)})")
    return None


def describe(assignment: dict, spec: catalog.Objective) -> str:
    """The combination as a reader declares it: the conventions that differ from the paper."""
    parts = [f"{k}={json.dumps(v)}" for k, v in assignment.items() if v != spec.defaults.get(k) and v != ANY]
    return ", ".join(parts) or "the paper defaults"
