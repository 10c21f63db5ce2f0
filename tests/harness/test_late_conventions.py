"""A convention added to the catalog after an objective shipped (``Param.added``) reaches a target
function at its default only if the target names it or the function takes it; a value other than
the default is always passed, and a function that does not take it makes the case unsupported, not
an error: targets written before the convention keep working on the cases they were written for.
A ``**kwargs`` function counts as not taking it (most are wrappers that forward to one that does
not); only the TypeError of the forwarded call shows it."""
from __future__ import annotations

from lossproof.conformance import catalog, plan
from lossproof.conformance.targets.target import ANY, Target

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
    return plan.call_kwargs(target, SPEC.id, conventions, {})


def test_a_late_convention_at_its_default_is_left_out_for_an_older_function():
    assert SPEC.param("baseline").added == "1.3.0"
    assert _passed(old, {**GROUP, "baseline": "mean"}) == GROUP


def test_a_function_that_takes_it_by_name_gets_it():
    assert _passed(new, {**GROUP, "baseline": "mean"}) == {**GROUP, "baseline": "mean"}


def test_a_kwargs_wrapper_does_not_get_it_at_its_default():
    assert _passed(anything, {**GROUP, "baseline": "mean"}) == GROUP


def test_a_target_that_names_it_gets_it():
    assert _passed(old, {**GROUP, "baseline": "mean"}, {"baseline": ["mean", "leave-one-out"]}) == \
        {**GROUP, "baseline": "mean"}


def test_a_value_other_than_the_default_is_always_passed():
    conv = {**GROUP, "baseline": "leave-one-out"}
    assert _passed(old, conv) == conv


def test_a_function_that_cannot_take_it_makes_the_case_unsupported():
    kwargs = {"rewards": None, **GROUP, "baseline": "leave-one-out"}
    reason = plan.untaken(Target("t", "numpy", {SPEC.id: old}, ANY), SPEC.id, kwargs)
    assert "'baseline' (added to the catalog in 1.3.0)" in reason
    assert plan.untaken(Target("t", "numpy", {SPEC.id: new}, ANY), SPEC.id, kwargs) is None
    wrapper = Target("t", "numpy", {SPEC.id: anything}, ANY)
    assert plan.untaken(wrapper, SPEC.id, kwargs) is None   # only the call can tell
    forwarded = TypeError("old() got an unexpected keyword argument 'baseline'")
    assert "'baseline'" in plan.untaken(wrapper, SPEC.id, kwargs, forwarded)
    assert plan.untaken(wrapper, SPEC.id, kwargs, TypeError("unsupported operand type(s)")) is None
    declared = Target("t", "numpy", {SPEC.id: old}, {SPEC.id: {"baseline": ["mean", "leave-one-out"]}})
    assert plan.untaken(declared, SPEC.id, kwargs) is None   # declared: a TypeError is the target's own error


def test_an_optional_input_the_function_does_not_take_makes_the_case_unsupported():
    spec = catalog.get("dpo.loss")

    def dpo(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
            beta=0.1, loss_type="sigmoid", label_smoothing=0.0, rpo_alpha=0.0, nll_aggregation=None):
        return policy_chosen_logps

    kwargs = dict.fromkeys(("policy_chosen_logps", "policy_rejected_logps", "reference_chosen_logps",
                            "reference_rejected_logps", "chosen_lengths"))
    reason = plan.untaken(Target("t", "torch", {spec.id: dpo}, ANY), spec.id, kwargs)
    assert "'chosen_lengths' (an optional input)" in reason


def test_conventions_from_the_start_are_always_passed():
    assert _passed(old, {**GROUP, "scale": "batch"}) == {**GROUP, "scale": "batch"}
