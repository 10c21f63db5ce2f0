"""The harness's own probes: a wrong output dtype and a gradient leak are failures, on
'acceptable' vectors too; inputs outside a catalog objective's grads are not probed."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the probed targets are torch functions")

from lossproof.conformance import catalog, harness, targets
from mutants import proximal_kl as pkl
from lossproof.refimpl.arrays import kl as np_kl
from lossproof.refimpl.torch import grpo, kl


@pytest.fixture(scope="module")
def vs(bundled_vectors):
    return bundled_vectors


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with harness.single_threaded("torch"):
        yield


def _run(vs, objective, fn, framework="torch", conventions="*", dtypes=("float64",), vjps=None):
    spec = {"name": "probe", "framework": framework, "objectives": {objective: fn}, "conventions": conventions,
            "dtypes": list(dtypes), "vjps": vjps or {}}
    results = harness.run(targets.from_mapping(spec, "probe"), vs, objective=objective)
    return [r for r in results if r.result != "invalid" and r.status not in ("skip", "unsupported")]


def test_float32_for_float64_inputs_fails_even_on_acceptable_vectors(vs):
    rs = _run(vs, "grpo.clip", lambda **kw: grpo.clip(**kw).float())
    assert rs and all(r.status == "fail" and "dtype float32, narrower than the inputs' float64" in r.message
                      for r in rs if r.axis == "conformance")
    assert any(r.result == "acceptable" for r in rs)


def test_a_wider_output_is_judged_at_the_inputs_dtype_and_passes(vs):
    rs = _run(vs, "kl.estimator", lambda **kw: kl.estimator(**kw).double(), dtypes=("float32",))
    conformance = [r for r in rs if r.axis == "conformance"]
    assert conformance and all(r.status == "pass" for r in conformance)


def test_numpy_target_dtype_is_checked(vs):
    rs = _run(vs, "kl.estimator", lambda **kw: np_kl.estimator(**kw).astype(np.float32), framework="numpy")
    assert rs and all(r.status == "fail" and "dtype float32" in r.message for r in rs)


def test_integer_or_boolean_outputs_are_not_dtype_errors(vs):
    def bool_keep(**kw):
        out = grpo.advantages(**kw)
        return {"advantages": out["advantages"], "keep": out["keep"] != 0}
    rs = _run(vs, "grpo.advantages", bool_keep)
    assert rs and all(r.status == "pass" for r in rs)


def test_advantages_with_a_graph_leak_gradient(vs):
    def attached(rewards, **kw):
        out = grpo.advantages(rewards, **kw)
        return {"advantages": out["advantages"] + 0 * rewards + (rewards - rewards.detach()), "keep": out["keep"]}
    rs = _run(vs, "grpo.advantages", attached)
    assert rs and all(r.status == "fail" and "leaks gradient to input 'rewards'" in r.message for r in rs)


def test_detached_advantages_and_targets_that_refuse_grad_inputs_pass(vs):
    def numpy_inside(rewards, **kw):   # cannot run on inputs requiring grad: not judged by the probe
        r = torch.from_numpy(rewards.numpy().copy())
        return grpo.advantages(r, **kw)
    for fn in (grpo.advantages, numpy_inside):
        rs = _run(vs, "grpo.advantages", fn)
        assert rs and all(r.status == "pass" for r in rs), rs[0].message


def test_old_logp_is_not_probed(vs):
    """The documented decision: a target that leaves old_logp on its graph is correct."""
    def undetached(logp, old_logp, advantages, eps_low=0.2, eps_high=None, dual_clip=None):
        rho = torch.exp(logp - old_logp)
        hi = eps_low if eps_high is None else eps_high
        c = torch.minimum(rho * advantages, rho.clamp(1 - eps_low, 1 + hi) * advantages)
        return c if dual_clip is None else torch.where(advantages < 0, torch.maximum(c, dual_clip * advantages), c)
    rs = _run(vs, "grpo.clip", undetached, conventions={"grpo.clip": {"dual_clip": [None, 3.0]}})
    assert rs and not [r for r in rs if r.status == "fail" and "leak" in r.message]


def test_future_cost_leak_probe_directly():
    """No proximal_kl vectors yet: the probe itself on a hand-made case."""
    spec = catalog.get("proximal_kl.future_cost")
    fw = harness._Framework("torch", "cpu")
    logp = -torch.rand(2, 5, dtype=torch.float64)
    inputs = {"logp": logp, "ref_logp": logp + 0.25, "mask": torch.ones(2, 5, dtype=torch.float64)}
    kwargs = {**inputs, "clip": None, "window": None}

    def call(fn):
        return harness._Call(None, spec, fn, fw, inputs, kwargs, 5.0)
    assert harness._leaks(call(pkl.future_twin)) == []
    leaks = harness._leaks(call(pkl.future_leaks_gradient))
    assert leaks and leaks[0][0] == "cost" and "leaks gradient to input 'logp'" in leaks[0][1]
    assert catalog.get("grpo.advantages").detached and catalog.get("proximal_kl.future_cost").detached
