"""Conventions of a library's function that a target declares instead of wrapping it
(docs/targets.md, "The keys"; DESIGN §8):

- ``value_only``: an output computed under ``torch.no_grad()`` on purpose (a logged entropy) is
  judged on its values in every dtype, and the gradient it would carry is not asked;
- ``fixed``: a parameter the function takes no argument for and computes with one value (a
  hardcoded DiscoPOP τ); ``temperature_free`` is the temperature's case and holds for
  ``lm.entropy`` and ``lm.token_logprobs`` as for distillation;
- ``computes_in: "float32"``: a function that computes in float32 whatever its inputs is not run
  in float64, and no verdict in another dtype changes (the bound is the vector's own).
"""
from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from lossproof.conformance import catalog, harness, plan, targets, verdict  # noqa: E402
from lossproof.conformance.numbers import decode_input  # noqa: E402
from lossproof.conformance.targets.target import TargetError  # noqa: E402
from lossproof.refimpl.torch import dpo, lm  # noqa: E402

DTYPES = {"float64", "float32", "bfloat16", "float16"}


@pytest.fixture(scope="module")
def vs(bundled_vectors):
    return bundled_vectors


def _target(**declaration):
    return targets.from_mapping({"name": "t", "framework": "torch", **declaration}, "t")


def _by_dtype(results) -> Counter:
    return Counter((r.dtype, r.status) for r in results)


# --------------------------------------------------------------------------- value_only

def logged_entropy(logits):
    """A token entropy logged as a metric: computed without a graph, on purpose."""
    with torch.no_grad():
        return lm.entropy(logits)


def test_a_value_only_output_of_a_torch_target_is_judged_in_all_four_dtypes(vs):
    target = _target(objectives={"lm.entropy": logged_entropy}, temperature_free=["lm.entropy"],
                     value_only={"lm.entropy": "*"})
    results = harness.run(target, vs, objective="lm.entropy")
    valid = [r for r in results if r.axis == "conformance" and r.status != "unsupported"]
    assert {r.dtype for r in valid if r.status == "pass"} == DTYPES
    assert {r.status for r in valid} == {"pass"}, [(r.uid, r.dtype, r.message) for r in valid if r.status != "pass"]
    assert all(r.outputs.keys() == {"entropy"} and "declares value-only" in r.message for r in valid)
    # the invalid inputs are still asked to be rejected (those at T ≠ 1 are unsupported: temperature-free)
    invalid = [r for r in results if r.axis == "validation" and r.status != "unsupported"]
    assert invalid and {r.status for r in invalid} == {"rejected"}


def test_undeclared_the_missing_gradient_fails(vs):
    results = harness.run(_target(objectives={"lm.entropy": logged_entropy}, temperature_free=["lm.entropy"]), vs,
                          objective="lm.entropy", dtypes=["float64"])
    valid = [r for r in results if r.axis == "conformance" and r.status != "unsupported"]
    cases = {c.uid: c for c in vs.cases("lm.entropy")}
    moved = [r for r in valid if np.any(verdict.expected(cases[r.uid].test["grads"]["logits"]))]
    assert moved and all(r.status == "fail" and "carry no gradient" in r.message for r in moved)


def test_a_value_only_output_that_carries_a_gradient_is_not_judged_on_it_and_says_so(vs):
    wrong_gradient = lm.entropy   # stands for a metric whose graph is not meant to be used
    target = _target(objectives={"lm.entropy": lambda logits: 2 * wrong_gradient(logits) - wrong_gradient(logits)
                                 .detach()}, temperature_free=["lm.entropy"], value_only={"lm.entropy": ["entropy"]})
    results = [r for r in harness.run(target, vs, objective="lm.entropy", dtypes=["float64"])
               if r.axis == "conformance" and r.status != "unsupported"]
    assert results and all(r.status == "pass" and "entropy carries a gradient" in r.message for r in results)


def test_the_gradient_is_still_judged_through_the_outputs_not_declared(vs):
    """dpo.loss with its rewards detached (as TRL returns them), declared value-only: the vectors
    weight the losses alone, so the gradient is asked through them and judged."""
    def rewards_detached(**kwargs):
        out = dpo.loss(**kwargs)
        return {**out, "chosen_rewards": out["chosen_rewards"].detach(),
                "rejected_rewards": out["rejected_rewards"].detach()}
    declared = _target(objectives={"dpo.loss": rewards_detached},
                       value_only={"dpo.loss": ["chosen_rewards", "rejected_rewards"]})
    cases = [c for c in vs.cases("dpo.loss") if c.result == "valid" and c.group == "paper"][:5]
    results = [r for c in cases for r in harness.run_case(declared, c, dtypes=["float64"])]
    assert results and all(r.status == "pass" and {"losses", "chosen_rewards", "grad:policy_chosen_logps"}
                           <= set(r.outputs) for r in results)


# --------------------------------------------------------------------------- fixed, temperature_free

def discopop_at(tau):
    """A DiscoPOP loss whose τ is a constant of the code, as a library writes it."""
    def loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
             beta=0.1, loss_type="discopop", label_smoothing=0.0, reward_shift=0.0, rpo_alpha=0.0,
             nll_aggregation=None, chosen_lengths=None):
        return dpo.loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
                        beta, loss_type, label_smoothing, tau, reward_shift, rpo_alpha, nll_aggregation, chosen_lengths)
    return loss


def _discopop_target(tau, declared=0.05):
    return _target(objectives={"dpo.loss": discopop_at(tau)}, conventions={"dpo.loss": {"loss_type": "discopop"}},
                   fixed={"dpo.loss": {"discopop_tau": declared}})


def test_a_fixed_parameter_judges_the_cases_at_its_value_and_refuses_the_others(vs):
    cases = {c.uid: c for c in vs.cases("dpo.loss")}
    results = harness.run(_discopop_target(0.05), vs, objective="dpo.loss", dtypes=["float64"])
    ran = [r for r in results if r.conventions.get("loss_type") == "discopop"]
    tau = {r.uid: cases[r.uid].test["params"].get("discopop_tau", 0.05) for r in ran}
    at, other = [r for r in ran if tau[r.uid] == 0.05], [r for r in ran if tau[r.uid] != 0.05]
    assert {tau[r.uid] for r in other} == {0.5, 1.0, 0.0, -0.05}   # the invalid τ ≤ 0 ones too
    assert all(r.status == "unsupported" and "discopop_tau fixed at 0.05 (its function takes no discopop_tau"
               in r.message for r in other)
    assert len(at) >= 10 and {r.status for r in at if r.axis == "conformance"} == {"pass"}


def test_a_function_that_computes_with_another_value_than_declared_fails(vs):
    results = harness.run(_discopop_target(0.1), vs, objective="dpo.loss", dtypes=["float64"])
    judged = [r for r in results if r.conventions.get("loss_type") == "discopop" and r.axis == "conformance"
              and r.status != "unsupported"]
    assert len([r for r in judged if r.status == "fail"]) >= 10
    cases = {c.uid: c for c in vs.cases("dpo.loss")}
    for r in (r for r in judged if r.status != "fail"):   # only where τ does not move the loss (saturated)
        test = cases[r.uid].test
        inputs = {k: torch.tensor(decode_input(v), dtype=torch.float64) for k, v in test["inputs"].items()}
        at = {tau: discopop_at(tau)(**inputs, beta=test["params"]["beta"])["losses"] for tau in (0.05, 0.1)}
        assert r.status == "pass" and torch.equal(at[0.05], at[0.1]), r.uid


def test_a_fixed_parameter_is_not_passed():
    target = _discopop_target(0.05)
    kwargs = plan.call_kwargs(target, "dpo.loss", {"loss_type": "discopop"}, {"beta": 0.1, "discopop_tau": 0.05})
    assert kwargs == {"loss_type": "discopop", "beta": 0.1}


@pytest.mark.parametrize("objective, inputs", [("lm.entropy", ("logits",)), ("lm.token_logprobs", ("logits", "labels"))])
def test_temperature_free_language_model_objectives(vs, objective, inputs):
    function = {"lm.entropy": lambda logits: lm.entropy(logits),
                "lm.token_logprobs": lambda logits, labels: lm.token_logprobs(logits, labels)}[objective]
    results = harness.run(_target(objectives={objective: function}, temperature_free=[objective]), vs,
                          objective=objective)
    cases = {c.uid: c for c in vs.cases(objective)}
    temperature = {r.uid: cases[r.uid].test["params"].get("temperature", 1.0) for r in results}
    other = [r for r in results if temperature[r.uid] != 1.0]
    assert other and all(r.status == "unsupported" and f"declares {objective} temperature-free" in r.message
                         for r in other)
    at_one = [r for r in results if temperature[r.uid] == 1.0 and r.axis == "conformance"]
    assert {r.dtype for r in at_one} == DTYPES and {r.status for r in at_one} == {"pass"}


@pytest.mark.parametrize("fixed, message", [
    ({"dpo.nope": {"beta": 0.1}}, "fixed names unknown objective 'dpo.nope'"),
    ({"dpo.loss": {"tau": 0.05}}, "dpo.loss has no parameter 'tau'"),
    ({"dpo.loss": {"loss_type": "discopop"}}, "loss_type is a convention of dpo.loss: declare it under 'conventions'"),
    ({"dpo.loss": {"discopop_tau": "0.05"}}, r"fixed\['dpo.loss'\]\['discopop_tau'\] must be a finite number"),
    ({"dpo.loss": {"discopop_tau": float("nan")}}, "must be a finite number"),
    ({"dpo.loss": {}}, "must be a non-empty dict"),
    ({"kl.estimator": {"clamp": 1.0}}, "fixed names kl.estimator, which the target does not implement"),
    (["dpo.loss"], "'fixed' must be a dict"),
])
def test_bad_fixed_declarations_are_one_line_errors(fixed, message):
    with pytest.raises(TargetError, match=message) as err:
        _target(objectives={"dpo.loss": discopop_at(0.05)}, fixed=fixed)
    assert "\n" not in str(err.value)


def test_a_fixed_value_outside_the_catalogs_choices_is_refused(monkeypatch):
    """No parameter that is not a convention has choices today; the check holds for one that does."""
    spec = catalog.get("dpo.loss")
    params = tuple(dataclasses.replace(p, choices=(0.1, 0.2)) if p.name == "beta" else p for p in spec.params)
    monkeypatch.setitem(catalog.BY_ID, "dpo.loss", dataclasses.replace(spec, params=params))
    with pytest.raises(TargetError, match=r"fixed\['dpo.loss'\]\['beta'\] = 0.3 is not one of 0.1, 0.2"):
        _target(objectives={"dpo.loss": discopop_at(0.05)}, fixed={"dpo.loss": {"beta": 0.3}})


@pytest.mark.parametrize("extra, message", [
    ({"params": {"dpo.loss": {"discopop_tau": [0.05]}}}, "both fixed and listed under 'params'"),
])
def test_a_parameter_is_fixed_or_listed_not_both(extra, message):
    with pytest.raises(TargetError, match=message):
        _target(objectives={"dpo.loss": discopop_at(0.05)}, fixed={"dpo.loss": {"discopop_tau": 0.05}}, **extra)


def test_temperature_fixed_and_temperature_free_together_is_refused():
    with pytest.raises(TargetError, match="lm.entropy's temperature is both fixed and temperature_free"):
        _target(objectives={"lm.entropy": logged_entropy}, temperature_free=["lm.entropy"],
                fixed={"lm.entropy": {"temperature": 1.0}})


def test_temperature_fixed_at_one_is_temperature_free_but_for_the_reason():
    free = _target(objectives={"lm.entropy": logged_entropy}, temperature_free=["lm.entropy"])
    fixed = _target(objectives={"lm.entropy": logged_entropy}, fixed={"lm.entropy": {"temperature": 1.0}})
    assert plan.fixed(free, "lm.entropy") == plan.fixed(fixed, "lm.entropy") == {"temperature": 1.0}


@pytest.mark.parametrize("value_only, message", [
    ({"lm.nope": "*"}, "value_only names unknown objective 'lm.nope'"),
    ({"lm.entropy": ["logp"]}, "lm.entropy has no output 'logp'"),
    ({"lm.entropy": "entropy"}, "must be a non-empty list of outputs"),
    ({"lm.token_logprobs": "*"}, "which the target's objectives do not implement"),
])
def test_bad_value_only_declarations_are_one_line_errors(value_only, message):
    with pytest.raises(TargetError, match=message):
        _target(objectives={"lm.entropy": logged_entropy}, value_only=value_only)


# --------------------------------------------------------------------------- computes_in

def float32_logprobs(logits, labels, temperature=1.0):
    """Log-probabilities computed in float32 whatever the inputs, returned as float32."""
    return lm.token_logprobs(logits.float(), labels, temperature)


def off_by_a_thousandth(logits, labels, temperature=1.0):
    """A mutant: 2⁻¹⁰ relative, far beyond float32's accuracy but within bfloat16's."""
    return float32_logprobs(logits, labels, temperature) * (1 + 2.0**-10)


@pytest.mark.parametrize("function", [float32_logprobs, off_by_a_thousandth])
def test_computes_in_float32_leaves_float64_out_and_changes_no_other_verdict(vs, function):
    undeclared = harness.run(_target(objectives={"lm.token_logprobs": function}), vs, objective="lm.token_logprobs")
    declared = harness.run(_target(objectives={"lm.token_logprobs": function}, computes_in="float32"), vs,
                           objective="lm.token_logprobs")
    # undeclared, float64 fails on the dtype (float32 returned), whatever the values
    assert {r.status for r in undeclared if r.dtype == "float64" and r.axis == "conformance"} == {"fail"}
    assert "float64" not in {r.dtype for r in declared}
    # every other case-run has the verdict it had: the float32 bound is the vector's own
    key = lambda rs: sorted((r.uid, r.dtype, r.status, r.message) for r in rs if r.dtype not in ("float64", "-"))  # noqa: E731
    assert key(declared) == key(undeclared)
    statuses = _by_dtype(r for r in declared if r.axis == "conformance" and r.dtype != "-")
    if function is float32_logprobs:
        assert {s for (_, s) in statuses} == {"pass"} and {d for (d, _) in statuses} == DTYPES - {"float64"}
    else:
        assert statuses[("float32", "fail")] > 0
    # a vector whose inputs float32 cannot hold is left out with the reason
    only64 = [r for r in declared if r.dtype == "-" and "computes lm.token_logprobs in float32 by design" in r.message]
    assert only64 and all(r.status == "skip" for r in only64)


def test_computes_in_is_checked_and_refuses_a_target_left_without_a_dtype():
    fn = {"lm.token_logprobs": float32_logprobs}
    assert _target(objectives=fn, computes_in="float32").all_dtypes() == ("float32", "bfloat16", "float16")
    per_objective = _target(objectives={**fn, "lm.entropy": logged_entropy},
                            computes_in={"lm.token_logprobs": "float32"})
    assert per_objective.dtypes_of("lm.token_logprobs") == ("float32", "bfloat16", "float16")
    assert per_objective.dtypes_of("lm.entropy") == ("float64", "float32", "bfloat16", "float16")
    for declaration, message in ((dict(computes_in="float16"), "'computes_in' must be \"float32\""),
                                 (dict(computes_in={"lm.entropy": "float32"}), "which the target does not implement"),
                                 (dict(computes_in="float32", dtypes=["float64"]),
                                  "leaves lm.token_logprobs no dtype to run in")):
        with pytest.raises(TargetError, match=message):
            _target(objectives=fn, **declaration)


def test_variants_take_their_own_declarations():
    target = _target(objectives={"lm.entropy": lm.entropy, "lm.entropy[metric]": logged_entropy},
                     value_only={"lm.entropy[metric]": "*"}, computes_in={"lm.entropy[metric]": "float32"},
                     fixed={"lm.entropy[metric]": {"temperature": 1.0}})
    plain, metric = targets.split_variants(target)
    assert (plan.value_only(plain, "lm.entropy"), plan.value_only(metric, "lm.entropy")) == ((), ("entropy",))
    assert (plan.fixed(plain, "lm.entropy"), plan.fixed(metric, "lm.entropy")) == ({}, {"temperature": 1.0})
    assert "float64" in plain.dtypes_of("lm.entropy") and "float64" not in metric.dtypes_of("lm.entropy")
