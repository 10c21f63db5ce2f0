"""The case plan (conformance/plan.py): each runner asks it once per case-run and takes the bound,
the call's arguments and the known-failure excuse from its answer; a setting that couples a
vector's rows through the batch is refused for --partition with the catalog's reason."""
from __future__ import annotations

from collections import Counter

import pytest

from lossproof.conformance import compare, harness, plan
from lossproof.conformance.targets import load
from lossproof.conformance.targets.target import ANY, Target
from lossproof.conformance.vectors.load import VectorSet

VS = VectorSet(None, ["kl.estimator", "dpo.loss"])


def _case(objective: str, result: str = "valid", **conventions):
    return next(c for c in VS.cases(objective) if c.result == result
                and all(c.conventions.get(k) == v for k, v in conventions.items()) and len(c.test["dtypes"]) > 1)


@pytest.fixture
def counted(monkeypatch):
    """How often the plan is asked, and the bound computed, while a runner runs."""
    calls = Counter()
    ask, bound = plan.plan, compare.Tolerances.for_case

    def counting_plan(*args, **kwargs):
        calls["plan"] += 1
        return ask(*args, **kwargs)

    def counting_bound(self, *args, **kwargs):
        calls["bound"] += 1
        return bound(self, *args, **kwargs)
    monkeypatch.setattr(plan, "plan", counting_plan)
    monkeypatch.setattr(compare.Tolerances, "for_case", counting_bound)
    return calls


def test_the_harness_plans_a_case_once_and_bounds_each_case_run_once(counted):
    case = _case("kl.estimator")
    results = harness.run_case(load("numpy"), case)
    assert len(results) == len(case.test["dtypes"]) > 1 and {r.status for r in results} == {"pass"}
    assert counted == {"plan": 1, "bound": len(results)}


def test_the_plan_answers_what_the_harness_used_to_ask():
    case = _case("kl.estimator", kind="k3")
    declared = Target("t", "numpy", {"kl.estimator": lambda logp, ref_logp, kind="k3", clamp=None: logp},
                      {"kl.estimator": {"kind": "k3"}}, dtypes=("float64",),
                      known={case.uid + "@float64": "a reason"})
    [p] = plan.plan(declared, case, plan.Asked())
    assert (p.status, p.dtype, p.known) == ("run", "float64", "a reason")
    assert p.kwargs == {**case.conventions, **case.test["params"]}
    assert p.tolerance.k > 0 and p.test is case.test
    [p] = plan.plan(declared, case, plan.Asked(as_paper=True, dtypes=("float32",)))
    assert (p.status, p.why) == ("skip", "no dtype shared by the vector, the target and --dtype")
    other = _case("kl.estimator", kind="k1")
    [p] = plan.plan(declared, other, plan.Asked())
    assert (p.dtype, p.status, p.why) == ("-", "skip", "conventions differ from the target's declaration")


def test_an_invalid_vector_has_no_bound():
    case = _case("kl.estimator", result="invalid")
    assert all(p.tolerance is None for p in plan.plan(Target("t", "numpy", {"kl.estimator": abs}, ANY), case,
                                                     plan.Asked()))


@pytest.mark.parametrize("loss_type", ["aot", "aot_unpaired"])
def test_a_coupled_setting_is_refused_for_a_partition_with_the_catalogs_reason(loss_type):
    case = next(c for c in VS.cases("dpo.loss") if c.result != "invalid" and c.conventions["loss_type"] == loss_type)
    [p] = plan.plan(load("torch"), case, plan.Asked(split=("--partition", 2, 2, None)))
    assert (p.dtype, p.status) == ("-", "skip")
    assert p.why == f"loss_type {loss_type!r} sorts over the whole batch: no row partition preserves it"


def test_an_objective_no_split_is_for_is_not_planned():
    assert plan.plan(load("torch"), _case("kl.estimator"), plan.Asked(split=("--partition", 2, 2, None))) == []
    assert plan.plan(load("torch"), _case("kl.estimator"), plan.Asked(split=("--shard-vocab", 2, None))) == []
