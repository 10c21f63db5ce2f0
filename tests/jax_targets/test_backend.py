"""The built-in ``jax`` backend (conformance/targets/builtin.py): ``refimpl.arrays`` on ``jax.numpy``,
differentiated by ``jax.vjp`` through the framework's own path, passes the vectors it claims in
the dtypes it claims.

Every vector, every objective, takes about half an hour of CPU (the array-API code checks its
inputs' values, so it runs eagerly, each operation compiled per shape): the suite runs a sample
of every objective — the first valid vectors in both dtypes and the first invalid ones — and
``LOSSPROOF_JAX_FULL=1`` runs the whole claim (``lossproof check --backend jax``, exit 0).
"""
from __future__ import annotations

import collections
import fnmatch
import os
from functools import cache

import pytest

pytest.importorskip("jax", reason="the jax backend needs JAX (pip install 'lossproof[jax]')")

from lossproof.conformance import catalog, cli, harness  # noqa: E402
from lossproof.conformance.targets import builtin, load  # noqa: E402
from lossproof.conformance.vectors.load import VectorSet  # noqa: E402

SAMPLE = 2   # valid vectors (and as many invalid ones) per objective


@cache
def _vectors() -> VectorSet:
    return VectorSet(validate=False)


def test_the_backend_claims_the_array_api_code_but_the_objectives_it_leaves_out():
    target = load("jax")
    assert target.framework == "jax" and target.dtypes == ("float64", "float32") and not target.vjps
    numpy = load("numpy")
    assert set(target.objectives) == {o for o in numpy.objectives
                                      if not any(fnmatch.fnmatchcase(o, g) for g in builtin.JAX_UNCLAIMED)}


@pytest.mark.parametrize("objective", sorted(load("jax").objectives))
def test_a_sample_of_each_objective_passes(objective):
    cases = list(_vectors().cases(objective))
    valid = [c for c in cases if c.result != "invalid"]
    valid.sort(key=lambda c: -len(set(c.test["dtypes"]) & {"float64", "float32"}))
    sample = {c.uid for c in valid[:SAMPLE]} | {c.uid for c in [c for c in cases if c.result == "invalid"][:SAMPLE]}
    results = harness.run(load("jax"), _vectors(), objective=objective, uids=sample)
    bad = [f"{r.status} {r.uid} {r.dtype}: {r.message[:200]}" for r in results if r.status in ("fail", "error")]
    assert not bad, "\n".join(bad)
    statuses = collections.Counter(r.status for r in results if r.axis == "conformance")
    assert statuses["pass"] > 0, statuses
    if catalog.get(objective).grads:   # gradients by jax.vjp were compared
        assert any(o.startswith("grad:") for r in results if r.status == "pass" for o in r.outputs)


# Vectors beyond the sample on which jax.vjp of the array-API code once differed from the exact
# reference's gradient (each failed before its fix, in both dtypes): where JAX's derivative of a
# kink or a tie is not the reference's, or where a formula's sg(·) was differentiated.
KINKS = {
    "lm.cross_entropy:50b0ad65fab0f6fd": "tied row maxima: max's derivative split between them",
    "preference.orpo:fe7ddab6ea370f16": "log σ at 0: d|x|/dx = 1 there made d log σ/dx = 1",
    "grpo.loss:9ea1352122801442": "CISPO's sg(ŵ) differentiated through the clip",
}


@pytest.mark.parametrize("uid", sorted(KINKS))
def test_the_vectors_at_a_kink_pass(uid):
    objective = uid.split(":")[0]
    results = harness.run(load("jax"), _vectors(), objective=objective, uids={uid})
    assert {r.dtype for r in results if r.status == "pass"} == {"float64", "float32"}, (
        KINKS[uid], [f"{r.status} {r.dtype}: {r.message[:200]}" for r in results])


@pytest.mark.skipif(os.environ.get("LOSSPROOF_JAX_FULL") != "1",
                    reason="every vector on the jax backend takes about half an hour of CPU: LOSSPROOF_JAX_FULL=1 runs it")
def test_every_claimed_vector_passes(capsys):
    assert cli.main(["check", "--backend", "jax", "--quiet"]) == 0, capsys.readouterr().out[-3000:]
