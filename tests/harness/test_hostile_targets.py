"""A target that misbehaves is classified with a message, and the run goes on."""
import time

import pytest

torch = pytest.importorskip("torch", reason="the hostile targets are torch functions")

from conformance import harness, targets
from conformance.vectors.load import VectorSet
from refimpl.torch import kl


@pytest.fixture(scope="module")
def vs():
    return VectorSet()


def _run(vs, fn, **extra):
    spec = {"name": "hostile", "framework": "torch", "objectives": {"kl.estimator": fn},
            "conventions": {"kl.estimator": {"kind": "*", "clamp": "*"}},
            "dtypes": ["float64"], **extra}
    return harness.run(targets.from_mapping(spec, "hostile"), vs, objective="kl.estimator", time_limit=2.0)


def _valid(results):
    return [r for r in results if r.result != "invalid"]


def test_correct_target_passes(vs):
    results = _run(vs, kl.estimator)
    assert _valid(results) and all(r.status == "pass" for r in _valid(results) if r.status != "skip")
    invalid = [r for r in results if r.result == "invalid"]
    assert invalid and all(r.status == "rejected" and r.raised["type"] == "InputError" for r in invalid)


def test_raising_target_is_an_error(vs):
    def boom(**kw):
        raise RuntimeError("kaboom")
    rs = _valid(_run(vs, boom))
    assert rs and all(r.status == "error" and "kaboom" in r.message for r in rs)


def test_nan_is_a_failure(vs):
    def nan(**kw):
        out = kl.estimator(**kw)
        return out + float("nan")
    rs = _valid(_run(vs, nan))
    assert all(r.status == "fail" and "non-finite" in r.message for r in rs)


def test_wrong_shape_is_a_failure(vs):
    rs = _valid(_run(vs, lambda **kw: kl.estimator(**kw)[None]))
    assert all(r.status == "fail" and "shape" in r.message for r in rs)


def test_non_tensor_is_a_failure(vs):
    rs = _valid(_run(vs, lambda **kw: "hello"))
    assert all(r.status == "fail" for r in rs)


def test_input_mutation_is_a_failure(vs):
    def mutates(logp, **kw):
        out = kl.estimator(logp, **kw)
        with torch.no_grad():
            logp.add_(1.0)
        return out
    rs = _valid(_run(vs, mutates))
    assert all(r.status == "fail" and "mutated" in r.message for r in rs)


def test_nondeterminism_is_a_failure(vs):
    calls = {"n": 0}

    def flaky(**kw):
        calls["n"] += 1
        return kl.estimator(**kw) * (1 + 1e-3 * calls["n"])
    rs = _valid(_run(vs, flaky))
    flagged = [r for r in rs if r.status == "fail" and "second call" in r.message]
    assert len(flagged) > len(rs) // 2  # every case whose value is not exactly 0


def test_slow_target_hits_the_time_limit_and_the_run_goes_on(vs):
    seen = {"n": 0}

    def slow(**kw):
        seen["n"] += 1
        if seen["n"] == 1:
            time.sleep(5)
        return kl.estimator(**kw)
    rs = _run(vs, slow)
    assert rs[0].status == "error" and "time limit" in rs[0].message
    assert sum(r.status == "pass" for r in rs) > 50


def test_accepting_invalid_input_is_reported_on_the_validation_axis(vs):
    def lenient(logp, ref_logp, kind="k3", clamp=None):
        return torch.nan_to_num(kl.estimator(logp.nan_to_num(0.0).clamp(-1e3, 0), ref_logp.clamp(-1e3, 0), kind))
    rs = [r for r in _run(vs, lenient) if r.result == "invalid"]
    assert any(r.status == "accepted" and "returned finite numbers" in r.message for r in rs)
    assert all(r.axis == "validation" for r in rs)


def test_returning_nan_for_invalid_input_is_non_finite(vs):
    def unchecked(logp, ref_logp, kind="k3", clamp=None):
        return kl.estimator(logp.nan_to_num(0.0).clamp(-1e3, 0), ref_logp.clamp(-1e3, 0), kind) + logp.sum() * 0
    rs = [r for r in _run(vs, unchecked) if r.result == "invalid" and "NaN" in r.message]
    assert rs and all(r.status == "non-finite" for r in rs)


def test_not_implemented_is_never_a_rejection(vs):
    def refuses(**kw):
        raise NotImplementedError("this library has no clamp")
    rs = _run(vs, refuses)
    assert rs and all(r.status == "unsupported" for r in rs if r.status != "skip")


def test_a_stub_that_always_raises_fails_conformance_although_it_rejects_everything(vs):
    def stub(**kw):
        raise ValueError("not written yet")
    rs = _run(vs, stub)
    assert all(r.status == "rejected" for r in rs if r.result == "invalid")
    assert all(r.status == "error" for r in _valid(rs))


def test_unsupported_objective_is_reported(vs):
    spec = {"name": "partial", "framework": "torch", "objectives": {"grpo.clip": lambda **kw: None}}
    rs = harness.run(targets.from_mapping(spec, "partial"), vs, objective="kl.estimator")
    assert rs and all(r.status == "unsupported" for r in rs)
