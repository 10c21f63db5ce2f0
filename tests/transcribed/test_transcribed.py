"""The transcribed defects (``transcribed.table``): each defect, as its library wrote it, fails
the check in the default run (every dtype it claims); each corrected twin passes with no
failure. The causes the diagnosis names (``expected`` in the table) are not asserted here yet,
while the diagnosis engine changes."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the transcribed functions are torch functions")

from lossproof.conformance import harness
from lossproof.conformance.targets import from_mapping
from lossproof.conformance.vectors.load import VectorSet
from transcribed.table import DEFECTS


@pytest.fixture(scope="module")
def vector_set():
    return VectorSet(None, sorted({d.objective for d in DEFECTS}), validate=False)


def _run(defect, fixed, vs):
    spec = defect.target(fixed)
    results = harness.run(from_mapping(spec, spec["name"]), vs, objective=defect.objective,
                          dtypes=list(defect.dtypes))
    return [r for r in results if r.axis == "conformance"]


def test_the_set_is_large_and_from_libraries_without_an_adapter():
    assert len(DEFECTS) >= 25
    assert len({d.id for d in DEFECTS}) == len(DEFECTS)
    adapted = ("trl", "verl", "openrlhf", "liger", "transformers")
    for d in DEFECTS:
        assert d.link.startswith("https://github.com/") and d.description and d.file
        assert not any(d.library.lower().startswith(a) for a in adapted), d.library


@pytest.mark.parametrize("defect", DEFECTS, ids=lambda d: d.id)
def test_the_defect_is_caught_and_its_twin_passes(defect, vector_set):
    bad = [r for r in _run(defect, False, vector_set) if r.status in ("fail", "error")]
    assert bad, f"{defect.id}: the defect passes every case"
    twin = _run(defect, True, vector_set)
    failing = [r for r in twin if r.status in ("fail", "error")]
    assert not failing, f"{defect.id} twin: {failing[0].uid} [{failing[0].dtype}]: {failing[0].message[:300]}"
    assert sum(r.status == "pass" for r in twin) >= 5
