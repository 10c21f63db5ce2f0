"""``framework: "jax"`` (conformance/targets/jaxcall.py): a JAX target written like the docs'
example is checked in all four dtypes with gradients by ``jax.vjp``; its mutants fail; float64
runs in float64; the low-precision bound is chosen as for torch; and what cannot apply to JAX
(mutation, the distributed checks, ``vjps``) is said, not skipped silently."""
from __future__ import annotations

import collections
from functools import cache
from pathlib import Path

import pytest

jax = pytest.importorskip("jax", reason="framework 'jax' needs JAX (pip install 'lossproof[jax]')")
import jax.numpy as jnp  # noqa: E402

from lossproof.conformance import cli, harness  # noqa: E402
from lossproof.conformance.targets import TargetError, from_mapping, jaxcall, load  # noqa: E402
from lossproof.conformance.vectors.load import VectorSet  # noqa: E402
from lossproof.refimpl.arrays import grpo as arrays_grpo  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "targets" / "jax_target.py"
DTYPES = ("float64", "float32", "bfloat16", "float16")


@cache
def _vectors() -> VectorSet:
    return VectorSet(validate=False)


def _uids(objective: str, n: int, chosen=lambda conventions: True) -> tuple:
    """``n`` valid vectors of the objective whose conventions are ``chosen``, the vectors that
    run in all four dtypes first."""
    cases = [c for c in _vectors().cases(objective) if c.result == "valid" and chosen(c.conventions)]
    cases.sort(key=lambda c: -len(c.test["dtypes"]))
    return tuple(c.uid for c in cases[:n])


def _k3(conventions: dict) -> bool:
    return conventions.get("kind", "k3") == "k3" and conventions.get("clamp") is None


def _run(target: dict, objective: str, uids, **options) -> list:
    return harness.run(from_mapping(target, target["name"]), _vectors(), objective=objective, uids=set(uids),
                       **options)


def _statuses(results) -> collections.Counter:
    return collections.Counter(r.status for r in results if r.axis == "conformance")


def _kl(log_ratio_of):
    def kl(logp, ref_logp, kind="k3", clamp=None):
        work = jnp.promote_types(logp.dtype, jnp.float32)
        log_ratio = log_ratio_of(logp.astype(work), ref_logp.astype(work))
        return jnp.expm1(log_ratio) - log_ratio
    return kl


def _target(name: str, fn, objective: str = "kl.estimator", **more) -> dict:
    return {"name": name, "framework": "jax", "objectives": {objective: fn}, **more}


KL_UIDS = _uids("kl.estimator", 12, _k3)


def test_the_docs_example_passes_in_all_four_dtypes_with_its_gradients():
    results = harness.run(load(f"{EXAMPLE}:TARGET"), _vectors(), objective="kl.estimator", uids=set(KL_UIDS))
    assert _statuses(results) == {"pass": len(results)}
    assert {r.dtype for r in results} == set(DTYPES)
    assert all("grad:logp" in r.outputs for r in results)


@pytest.mark.parametrize("mutant, log_ratio_of", [
    ("wrong sign", lambda logp, ref: logp - ref),
    ("stop_gradient on logp", lambda logp, ref: ref - jax.lax.stop_gradient(logp)),
])
def test_a_mutant_fails(mutant, log_ratio_of):
    results = _run(_target(mutant, _kl(log_ratio_of)), "kl.estimator", KL_UIDS, dtypes=["float64", "float32"])
    failed = [r for r in results if r.status == "fail"]
    assert failed, mutant
    if mutant.startswith("stop_gradient"):   # the values are right: only the gradient tells
        assert all("grad:logp" in r.message and not r.message.startswith("value") for r in failed)


def test_float64_runs_in_float64_and_a_float32_result_fails():
    assert jaxcall.x64_refusal() is None and jax.config.jax_enable_x64
    narrowing = _kl(lambda logp, ref: ref.astype(jnp.float32) - logp.astype(jnp.float32))
    results = _run(_target("narrowing", narrowing), "kl.estimator", KL_UIDS, dtypes=["float64"])
    assert _statuses(results) == {"fail": len(results)}
    assert all("dtype float32, narrower than the inputs' float64" in r.message for r in results)


def test_a_target_that_cannot_enable_x64_is_refused_in_one_line(monkeypatch):
    def refuse(name, value):
        raise RuntimeError("x64 is locked")
    monkeypatch.setattr(jax.config, "update", refuse)
    with pytest.raises(TargetError) as err:
        from_mapping(_target("locked", _kl(lambda logp, ref: ref - logp)), "locked.py:T")
    assert "\n" not in str(err.value) and "cannot enable jax_enable_x64" in str(err.value)


def test_low_precision_is_judged_by_the_declared_tolerance_model():
    """A k3 computed in bfloat16/float16 itself fails the careful bound (float32 inside) on some
    vector and passes the native one, as a torch target does."""
    uids = _uids("kl.estimator", 40, _k3)

    def in_input_dtype(logp, ref_logp, kind="k3", clamp=None):
        return jnp.expm1(ref_logp - logp) - (ref_logp - logp)
    low = ["bfloat16", "float16"]
    careful = _run(_target("careful", in_input_dtype), "kl.estimator", uids, dtypes=low)
    declared = _run(_target("native", in_input_dtype, tolerance_model="native"), "kl.estimator", uids, dtypes=low)
    assert _statuses(careful)["fail"] > 0
    assert _statuses(declared)["pass"] > 0 and set(_statuses(declared)) <= {"pass", "skip"}


def test_branching_on_a_float_parameter_and_checking_values_both_run():
    """A function that branches in Python on a float parameter runs with it static; one that checks
    its inputs' values runs eagerly, and rejects the invalid vectors."""
    def branching(logp, ref_logp, kind="k3", clamp=None):
        value = jnp.expm1(ref_logp - logp) - (ref_logp - logp)
        if clamp is not None and clamp > 0:   # the estimator clipped to [−c, c]
            value = jnp.clip(value, -clamp, clamp)
        return value

    def checking(logp, ref_logp, kind="k3", clamp=None):
        if not bool(jnp.all(jnp.isfinite(logp)) & jnp.all(jnp.isfinite(ref_logp))):
            raise ValueError("logp: contains NaN or inf")
        return jnp.expm1(ref_logp - logp) - (ref_logp - logp)
    clamped = _uids("kl.estimator", 4, lambda c: c.get("kind", "k3") == "k3" and c.get("clamp") is not None)
    assert clamped
    decl = {"conventions": {"kl.estimator": {"kind": "k3", "clamp": "*"}}, "dtypes": ["float64"]}
    results = _run(_target("branching", branching, **decl), "kl.estimator", clamped + KL_UIDS[:4])
    assert set(_statuses(results)) == {"pass"}
    invalid = {c.uid for c in _vectors().cases("kl.estimator") if c.result == "invalid"}
    results = _run(_target("checking", checking, dtypes=["float64"]), "kl.estimator", set(KL_UIDS[:4]) | invalid)
    assert set(_statuses(results)) == {"pass"}
    assert "rejected" in {r.status for r in results if r.axis == "validation"}


ADV_UIDS = _uids("grpo.advantages", 2)


def test_an_output_that_must_be_constant_is_probed_for_a_leak():
    def constant(**kw):
        return jax.tree_util.tree_map(jax.lax.stop_gradient, arrays_grpo.advantages(**kw))
    leaks = _run(_target("leaks", arrays_grpo.advantages, "grpo.advantages"), "grpo.advantages", ADV_UIDS,
                 dtypes=["float64"])
    assert _statuses(leaks) == {"fail": len(leaks)}
    assert all("leaks gradient to input 'rewards'" in r.message for r in leaks)
    detached = _run(_target("detached", constant, "grpo.advantages"), "grpo.advantages", ADV_UIDS,
                    dtypes=["float64"])
    assert _statuses(detached) == {"pass": len(detached)}


def test_a_donated_input_fails_as_a_mutation_would():
    def donating(logp, ref_logp, kind="k3", clamp=None):
        value = jnp.expm1(ref_logp - logp) - (ref_logp - logp)
        if bool(jnp.all(jnp.isfinite(value))):   # a Python branch on values: runs eagerly
            logp.delete()
        return value
    results = _run(_target("donating", donating, dtypes=["float64"]), "kl.estimator", KL_UIDS[:2])
    assert all(r.status == "fail" and r.message.startswith("donated its input 'logp'") for r in results)


def test_what_a_jax_target_cannot_declare_or_run_is_refused_with_the_reason(capsys):
    with pytest.raises(TargetError, match="'vjps' is for numpy and cupy targets"):
        from_mapping(_target("vjps", _kl(lambda logp, ref: ref - logp), vjps={"kl.estimator": print}), "t")
    status = cli.main(["check", "--target", f"{EXAMPLE}:TARGET", "--partition", "2x1", "--objective", "kl.estimator"])
    assert status == 2
    assert "is a jax target; distributed checks run torch steps and sharded functions" in capsys.readouterr().err
