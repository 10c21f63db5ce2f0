"""The transcribed defects (``transcribed.table``): each defect, as its library wrote it, fails
the check in the default run (every dtype it claims) and its corrected twin passes with no
failure and no diagnosis; the diagnosis never names a cause other than the table's
(``expected`` or ``also``), and names the table's cause for every defect but the few listed in
``NOT_NAMED_YET`` (strict xfail: one that gets named turns the marker into a failure)."""
from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch", reason="the transcribed functions are torch functions")

from lossproof.conformance import diagnose, harness
from lossproof.conformance.targets import from_mapping
from lossproof.conformance.vectors.load import VectorSet
from transcribed.table import DEFECTS

# Defects whose cause no test of conformance/diagnose.py reads yet (they are left unexplained,
# never given another cause): what evidence would name each.
NOT_NAMED_YET: dict[str, str] = {}

# A tracked factor is named by what it tracks; before the kind had its own name, a 'factor' line
# whose text names a parameter or count.
_TRACKED = re.compile(r"tracks", re.I)


def _norm(s: str) -> str:
    return re.sub(r"[-_ ]", "", s.lower())


def names(expected: str, d) -> bool:
    """Whether diagnosis ``d`` names the cause ``expected`` (the table's words)."""
    if expected == "factor-tracking":
        return d.kind == "factor" and bool(_TRACKED.search(d.defect))
    if expected == "sign":
        return "(the sign)" in d.defect
    return _norm(d.kind) == _norm(expected)


@pytest.fixture(scope="module")
def vector_set():
    return VectorSet(None, sorted({d.objective for d in DEFECTS}), validate=False)


@pytest.fixture(scope="module")
def check(vector_set):
    """check(defect, fixed): (the conformance results, the diagnoses) of the defect or its twin,
    computed once for the module's tests."""
    done = {}

    def run(defect, fixed):
        if (defect.id, fixed) not in done:
            spec = defect.target(fixed)
            target = from_mapping(spec, spec["name"])
            results = harness.run(target, vector_set, objective=defect.objective, dtypes=list(defect.dtypes))
            done[(defect.id, fixed)] = ([r for r in results if r.axis == "conformance"],
                                        diagnose.diagnose(results, vector_set, [target]))
        return done[(defect.id, fixed)]
    return run


def test_the_set_is_large_and_from_libraries_without_an_adapter():
    assert len(DEFECTS) >= 25
    assert len({d.id for d in DEFECTS}) == len(DEFECTS)
    assert set(NOT_NAMED_YET) <= {d.id for d in DEFECTS}
    adapted = ("trl", "verl", "openrlhf", "liger", "transformers")
    for d in DEFECTS:
        assert d.link.startswith("https://github.com/") and d.description and d.file
        assert not any(d.library.lower().startswith(a) for a in adapted), d.library


@pytest.mark.parametrize("defect", DEFECTS, ids=lambda d: d.id)
def test_the_defect_is_caught_and_its_twin_passes_with_no_diagnosis(defect, check):
    results, _ = check(defect, False)
    assert any(r.status in ("fail", "error") for r in results), f"{defect.id}: the defect passes every case"
    twin, told = check(defect, True)
    failing = [r for r in twin if r.status in ("fail", "error")]
    assert not failing, f"{defect.id} twin: {failing[0].uid} [{failing[0].dtype}]: {failing[0].message[:300]}"
    assert sum(r.status == "pass" for r in twin) >= 5
    assert told == [], f"{defect.id} twin got a diagnosis: {[(d.kind, d.defect) for d in told]}"


@pytest.mark.parametrize("defect", DEFECTS, ids=lambda d: d.id)
def test_no_cause_other_than_the_defect_s_is_named(defect, check):
    """Where the diagnosis names a cause, one of its lines is the table's: a defect is left
    unexplained rather than given a wrong cause ('formula': nothing names it)."""
    _, ds = check(defect, False)
    explained = [d for d in ds if d.kind != "unexplained"]
    if defect.expected == "formula":
        assert not explained, f"{defect.id}: {[(d.kind, d.defect) for d in explained]}"
    elif explained:
        assert any(names(e, d) for d in explained for e in (defect.expected, *defect.also)), \
            f"{defect.id} ({defect.expected}): {[(d.kind, d.defect[:120]) for d in explained]}"


def _named_param(d):
    reason = NOT_NAMED_YET.get(d.id)
    return pytest.param(d, id=d.id, marks=[pytest.mark.xfail(reason=reason, strict=True)] if reason else [])


@pytest.mark.parametrize("defect", [_named_param(d) for d in DEFECTS if d.expected != "formula"])
def test_the_defect_s_cause_is_named(defect, check):
    _, ds = check(defect, False)
    assert any(names(e, d) for d in ds if d.kind != "unexplained" for e in (defect.expected, *defect.also)), \
        f"{defect.id} ({defect.expected}): {[(d.kind, d.defect[:120]) for d in ds]}"
