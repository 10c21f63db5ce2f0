"""A target declares that a loss has no temperature (``temperature_free``): its function is
called without ``temperature``, the vectors at T = 1 are judged as usual, and those at T ≠ 1
are reported unsupported with the reason, never failed (DESIGN §8; docs/targets.md). And a
convention the catalog added later (``soft_term``, 1.3.0) is not passed at its default to a
target that does not declare it: functions written before it existed keep working."""
from __future__ import annotations

import pytest

from lossproof.conformance import harness, plan, targets
from lossproof.conformance.targets.target import ANY, Target, TargetError
from lossproof.refimpl.arrays import distill


@pytest.fixture(scope="module")
def vs(bundled_vectors):
    return bundled_vectors


def kl_without_temperature(student_logits, teacher_logits, direction="reverse"):
    """A token KL written without a temperature (the logits are used as they come)."""
    return distill.token_kl(student_logits, teacher_logits, direction)


def _spec(**extra):
    return {"name": "no-temperature", "framework": "numpy", "objectives": {"distill.token_kl": kl_without_temperature},
            "conventions": {"distill.token_kl": {"direction": ["reverse", "forward"]}}, **extra}


def test_cases_at_other_temperatures_are_unsupported_with_the_reason(vs):
    results = harness.run(targets.from_mapping(_spec(temperature_free=["distill.token_kl"]), "t"), vs,
                          objective="distill.token_kl")
    cases = {c.uid: c for c in vs.cases() if c.objective == "distill.token_kl"}
    # the groups of an undeclared setting (soft_term='cross_entropy') skip before any of this
    ran = [r for r in results if r.conventions.get("soft_term", "kl") == "kl"]
    assert all(r.status == "skip" for r in results if r not in ran)
    at_one = [r for r in ran if cases[r.uid].test["params"].get("temperature", 1.0) == 1.0]
    other = [r for r in ran if cases[r.uid].test["params"].get("temperature", 1.0) != 1.0]
    assert at_one and other
    # every vector at another temperature (the invalid T ≤ 0 ones too) is unsupported, never called
    assert all(r.status == "unsupported" and "declares distill.token_kl temperature-free (T = 1 only" in r.message
               for r in other)
    # at T = 1 the function (which has no temperature argument) is called and judged
    valid = [r for r in at_one if r.result != "invalid" and r.status != "skip"]
    assert valid and all(r.status == "pass" for r in valid), [(r.uid, r.status, r.message) for r in valid
                                                              if r.status != "pass"][:5]
    invalid = [r for r in at_one if r.result == "invalid" and r.status != "skip"]
    assert invalid and all(r.status == "rejected" for r in invalid)


def test_without_the_declaration_the_call_fails(vs):
    """The same function undeclared: the harness passes temperature, which it does not take."""
    results = harness.run(targets.from_mapping(_spec(), "t"), vs, objective="distill.token_kl")
    valid = [r for r in results if r.result != "invalid" and r.status != "skip"]
    assert valid and all(r.status == "error" and "temperature" in r.message for r in valid)


@pytest.mark.parametrize("declared, message", [
    ("distill.token_kl", "must be a list of objective ids"),
    (["distill.nope"], "unknown objective 'distill.nope'"),
    (["dpo.loss"], "dpo.loss, which has no temperature"),
    (["distill.generalized_jsd"], "which the target does not implement"),
])
def test_bad_declarations_are_refused(declared, message):
    with pytest.raises(TargetError, match=message):
        targets.from_mapping(_spec(temperature_free=declared), "t")


def test_a_late_convention_at_its_default_is_passed_only_to_targets_that_declare_it():
    undeclared = Target("t", "numpy", {"distill.token_kl": kl_without_temperature},
                        {"distill.token_kl": {"direction": ["reverse", "forward"]}})
    declared = Target("t", "numpy", {"distill.token_kl": kl_without_temperature},
                      {"distill.token_kl": {"direction": "forward", "soft_term": ["kl", "cross_entropy"]}})
    builtin = Target("t", "numpy", {"distill.token_kl": kl_without_temperature}, ANY)
    conventions, params = {"direction": "forward", "soft_term": "kl"}, {"temperature": 2.0}
    assert plan.call_kwargs(undeclared, "distill.token_kl", conventions, params) == {"direction": "forward",
                                                                               "temperature": 2.0}
    assert plan.call_kwargs(declared, "distill.token_kl", conventions, params) == {**conventions, **params}
    # "*" (the built-in backends, whose functions default to the paper) does not name it either
    assert plan.call_kwargs(builtin, "distill.token_kl", conventions, params) == {"direction": "forward",
                                                                            "temperature": 2.0}
    # a value other than the default is always passed (a target only runs it if it declares it)
    ce = {"direction": "forward", "soft_term": "cross_entropy"}
    assert plan.call_kwargs(undeclared, "distill.token_kl", ce, {}) == ce
