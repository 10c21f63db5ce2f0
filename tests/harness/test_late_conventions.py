"""A convention added to the catalog after an objective shipped (``Param.added``) reaches a target
function at its default only if the target names it or the function takes it; a value other than
the default is always passed: targets written before the convention keep working on the cases they
were written for."""
from __future__ import annotations

from conformance import catalog
from conformance.targets.target import ANY, Target

SPEC = catalog.get("grpo.advantages")   # 'baseline' was added in vector set 1.3.0
GROUP = {"scale": "group", "std_ddof": 0, "eps": 0.0, "degenerate": "zero"}


def old(rewards, scale="group", std_ddof=0, eps=0.0, degenerate="zero"):
    return rewards


def new(rewards, scale="group", std_ddof=0, eps=0.0, degenerate="zero", baseline="mean"):
    return rewards


def anything(rewards, **conventions):
    return rewards


def _passed(fn, conventions, declared=ANY):
    target = Target("t", "numpy", {SPEC.id: fn}, ANY if declared is ANY else {SPEC.id: declared})
    return target.call_kwargs(SPEC.id, conventions, {})


def test_a_late_convention_at_its_default_is_left_out_for_an_older_function():
    assert SPEC.param("baseline").added == "1.3.0"
    assert _passed(old, {**GROUP, "baseline": "mean"}) == GROUP


def test_a_function_that_takes_it_or_kwargs_gets_it():
    for fn in (new, anything):
        assert _passed(fn, {**GROUP, "baseline": "mean"}) == {**GROUP, "baseline": "mean"}


def test_a_target_that_names_it_gets_it():
    assert _passed(old, {**GROUP, "baseline": "mean"}, {"baseline": ["mean", "leave-one-out"]}) == \
        {**GROUP, "baseline": "mean"}


def test_a_value_other_than_the_default_is_always_passed():
    # the older function then fails with a TypeError: it cannot compute what the case asks
    conv = {**GROUP, "baseline": "leave-one-out"}
    assert _passed(old, conv) == conv


def test_conventions_from_the_start_are_always_passed():
    assert _passed(old, {**GROUP, "scale": "batch"}) == {**GROUP, "scale": "batch"}
