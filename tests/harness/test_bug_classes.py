"""The harness catches real bug classes: every mutant fails, every twin passes."""
import pytest

from conformance import harness, targets, vectors

from bug_targets import PAIRS, target


@pytest.fixture(scope="module")
def vs():
    return vectors.VectorSet()


def _judged(vs, spec, objective):
    t = targets._from_mapping(spec, spec["name"])
    results = harness.run(t, vs, objective=objective)
    return [r for r in results if r.result != "invalid" and r.status != "skip"]


@pytest.mark.parametrize("bug, objective, twin, mutant, conventions, dtypes", PAIRS, ids=[p[0] for p in PAIRS])
def test_mutant_fails_and_twin_passes(vs, bug, objective, twin, mutant, conventions, dtypes):
    twin_results = _judged(vs, target("twin", objective, twin, conventions, dtypes), objective)
    assert twin_results, f"no vector of {objective} under the declared conventions"
    bad = [r for r in twin_results if r.status != "pass"]
    assert not bad, f"twin failed {len(bad)} cases, e.g. {bad[0].uid}: {bad[0].message}"
    mutant_results = _judged(vs, target("mutant", objective, mutant, conventions, dtypes), objective)
    caught = [r for r in mutant_results if r.status == "fail"]
    assert caught, f"the harness did not catch: {bug}"
