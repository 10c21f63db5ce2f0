"""A target that misbehaves is classified with a message, and the run goes on."""
import time

import pytest

torch = pytest.importorskip("torch", reason="the hostile targets are torch functions")

from lossproof.conformance import harness, targets, timelimit
from lossproof.refimpl.torch import kl


@pytest.fixture(scope="module")
def vs(bundled_vectors):
    return bundled_vectors


def _run(vs, fn, time_limit=2.0, **extra):
    spec = {"name": "hostile", "framework": "torch", "objectives": {"kl.estimator": fn},
            "conventions": {"kl.estimator": {"kind": "*", "clamp": "*"}},
            "dtypes": ["float64"], **extra}
    return harness.run(targets.from_mapping(spec, "hostile"), vs, objective="kl.estimator", time_limit=time_limit)


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


def _burn(seconds: float) -> None:
    """Compute for ``seconds`` of this process's CPU time (a busy loop: what a slow function
    costs, whatever the machine's load)."""
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass


def test_a_slow_case_is_a_time_out_of_lossproofs_limit_and_the_run_goes_on(vs):
    """A case that computes past the CPU limit on both tries is an error of lossproof's limit,
    not the function raising; every other case is judged as usual."""
    first = {}

    def slow_first_case(**kw):
        key = tuple(v.detach().numpy().tobytes() if isinstance(v, torch.Tensor) else v for v in kw.values())
        if first.setdefault("key", key) == key:
            _burn(1.5)
        return kl.estimator(**kw)
    rs = _run(vs, slow_first_case, time_limit=1.0)
    timed_out = [r for r in rs if r.status == "error"]
    assert [r.uid for r in timed_out] == [rs[0].uid]
    assert timed_out[0].message == "exceeded lossproof's per-case limit of 1 s CPU time (twice)"
    assert timed_out[0].probes["timeout"] == 1.0
    assert sum(r.status == "pass" for r in rs) > 50


def test_a_one_time_warm_up_is_not_the_cases_cost(vs):
    """The first call of a function (a compilation, a lazy build) overruns the limit once: the
    case is run again at once, and judged on that run."""
    calls = {"n": 0}

    def warms_up(**kw):
        calls["n"] += 1
        if calls["n"] == 1:
            _burn(1.5)
        return kl.estimator(**kw)
    rs = _run(vs, warms_up, time_limit=1.0)
    assert rs[0].status in ("pass", "rejected") and "timeout" not in rs[0].probes
    assert not [r for r in rs if r.status == "error"]


def test_waiting_is_ended_by_the_wall_clock_backstop(vs, monkeypatch):
    """A function that waits without computing uses no CPU time: the backstop (WALL_FACTOR × the
    limit, wall clock) ends it. A sleep outlasts the backstop on any machine."""
    monkeypatch.setattr(timelimit, "WALL_FACTOR", 0.25)   # 0.5 s at the 2 s limit, instead of 20 s

    def waits(**kw):
        time.sleep(5)
        return kl.estimator(**kw)
    spec = {"name": "hostile", "framework": "torch", "objectives": {"kl.estimator": waits},
            "conventions": {"kl.estimator": {"kind": "*", "clamp": "*"}}, "dtypes": ["float64"]}
    case = next(iter(vs.cases("kl.estimator")))
    [r] = harness.run_case(targets.from_mapping(spec, "hostile"), case, time_limit=2.0)
    assert r.status == "error" and r.probes["timeout"] == 2.0
    assert r.message.startswith("waited 0.5 s without computing (lossproof's per-case limit: 2 s CPU time") \
        and r.message.endswith("(twice)")


def test_a_target_that_catches_exceptions_cannot_swallow_the_time_limit(vs):
    """The time-out is not an Exception: a function's ``except Exception`` (torch.compile wraps
    what it catches in InductorError) does not turn it into the function raising."""
    def catches(**kw):
        try:
            _burn(1.5)
        except Exception as err:
            raise RuntimeError("wrapped") from err
        return kl.estimator(**kw)
    case = next(iter(vs.cases("kl.estimator")))
    spec = {"name": "hostile", "framework": "torch", "objectives": {"kl.estimator": catches},
            "conventions": {"kl.estimator": {"kind": "*", "clamp": "*"}}, "dtypes": ["float64"]}
    [r] = harness.run_case(targets.from_mapping(spec, "hostile"), case, time_limit=1.0)
    assert r.status == "error" and r.probes["timeout"] == 1.0 and "raised" not in r.message


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
