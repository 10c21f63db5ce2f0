"""A convention added to the catalog after an objective shipped (``Param.added``) reaches a target
function only if the function takes it, or if the case asks for a value other than its default:
targets written before the convention keep working on the cases they were written for."""
from __future__ import annotations

from conformance import catalog
from conformance.harness import passed_conventions

SPEC = catalog.get("grpo.advantages")   # 'baseline' was added in vector set 1.3.0
GROUP = {"scale": "group", "std_ddof": 0, "eps": 0.0, "degenerate": "zero"}


def old(rewards, scale="group", std_ddof=0, eps=0.0, degenerate="zero"):
    return rewards


def new(rewards, scale="group", std_ddof=0, eps=0.0, degenerate="zero", baseline="mean"):
    return rewards


def anything(rewards, **conventions):
    return rewards


def test_a_late_convention_at_its_default_is_left_out_for_an_older_function():
    assert SPEC.param("baseline").added == "1.3.0"
    assert passed_conventions(old, SPEC, {**GROUP, "baseline": "mean"}) == GROUP


def test_a_function_that_takes_it_or_kwargs_gets_it():
    for fn in (new, anything):
        assert passed_conventions(fn, SPEC, {**GROUP, "baseline": "mean"}) == {**GROUP, "baseline": "mean"}


def test_a_value_other_than_the_default_is_always_passed():
    # the older function then fails with a TypeError: it cannot compute what the case asks
    conv = {**GROUP, "baseline": "leave-one-out"}
    assert passed_conventions(old, SPEC, conv) == conv


def test_conventions_from_the_start_are_always_passed():
    assert passed_conventions(old, SPEC, {**GROUP, "scale": "batch"}) == {**GROUP, "scale": "batch"}
