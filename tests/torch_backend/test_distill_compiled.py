"""The compiled CPU path of the fused distillation kernels (``refimpl.torch._compiled``: token
KL, generalized JSD, Hinton KD): every distillation vector through it, its agreement with the
plain path, and the fallback where no compiler is present (the torch fused path: the same
vectors pass, and the same numbers as with the compiled path switched off).

tests/torch_backend/test_distill_tiled.py runs its fused-against-plain checks through the
compiled path whenever it is available (the default); here the tests say so explicitly, and
skip with the reason when this machine cannot build it. Speed is never asserted
(``lossproof bench`` measures it).
"""
from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="tests of the torch backend")

import collections
import logging

import numpy as np
import torch
from test_distill_tiled import DTYPES, KERNELS, _close, _evaluate, _inputs

from lossproof.refimpl.torch import _compiled, _fused, distill

# Every kernel of the tiled tests, and the JSD's interior β under endpoints='kl' (the same
# formula as 'limit' there: the conventions differ only at β = 0 and 1).
FNS = {**KERNELS,
       "jsd-0.3-T2-kl": lambda z, t, y: distill.generalized_jsd(z, t, 0.3, 2.0, "kl"),
       "jsd-0.7-kl": lambda z, t, y: distill.generalized_jsd(z, t, 0.7, 1.0, "kl")}
COMPILED = list(FNS)
OBJECTIVES = ("distill.token_kl", "distill.generalized_jsd", "distill.hinton", "distill.symmetric_kl")


@pytest.fixture
def compiled():
    """The compiled kernels, or a skip with the reason they cannot be built here."""
    if _compiled.library() is None:
        pytest.skip(f"compiled CPU path unavailable: {_compiled.status()['reason']}")
    return _compiled


@pytest.fixture
def spies(monkeypatch):
    """Counts of calls into the compiled kernel (by dtype, and by kernel and dtype) and into the
    torch tiles (by kernel)."""
    seen = {"compiled": collections.Counter(), "kinds": collections.Counter(), "tiles": collections.Counter()}
    real_rows, real_block = _compiled.rows, _fused._block

    def rows(kind, T, zs, *a, **k):
        dtype = str(zs.dtype).removeprefix("torch.")
        seen["compiled"][dtype] += 1
        seen["kinds"][kind, dtype] += 1
        return real_rows(kind, T, zs, *a, **k)

    def block(k, *a, **kw):
        seen["tiles"][type(k).__name__] += 1
        return real_block(k, *a, **kw)

    monkeypatch.setattr(_compiled, "rows", rows)
    monkeypatch.setattr(_fused, "_block", block)
    return seen


def _distill_vectors(objectives=OBJECTIVES):
    from lossproof.conformance import harness
    from lossproof.conformance.targets import builtin
    from lossproof.conformance.vectors.load import VectorSet
    return harness.run(builtin.load("torch"), VectorSet(None, list(objectives), validate=False),
                       objective=list(objectives))


def _verdicts(results):
    bad = [f"{r.uid} {r.dtype}: {r.status} {r.message}" for r in results
           if r.status not in ("pass", "rejected")]
    assert not bad, "\n".join(bad[:20])


def _zero_by_definition(case, result) -> bool:
    """The generalized JSD at β = 0 or 1 with endpoints='limit': zero, computed by no kernel."""
    return (case.objective == "distill.generalized_jsd" and case.test["params"].get("beta") in (0, 1)
            and result.conventions.get("endpoints") == "limit")


def test_every_distill_vector_passes_through_the_compiled_path(compiled, spies):
    """Every token KL, generalized JSD, Hinton and symmetric KL vector (the cross-entropy soft
    term too: the compiled kernel computes its KL, the teacher's entropy is added to it), one
    dtype at a time in every dtype the torch backend claims: each passes (or is rejected as its
    vector says), and each that passes was computed by the compiled kernel, never by the torch
    tiles — all but the JSD's β = 0, 1 under endpoints='limit' (zero by definition: no kernel
    runs)."""
    from lossproof.conformance import harness
    from lossproof.conformance.targets import builtin
    from lossproof.conformance.vectors.load import VectorSet
    target = builtin.load("torch")
    served = collections.Counter()
    results = []
    for case in VectorSet(None, list(OBJECTIVES), validate=False).cases():
        for dtype in [d for d in case.test["dtypes"] if d in target.dtypes]:
            spies["compiled"].clear()
            spies["tiles"].clear()
            for r in harness.run_case(target, case, dtypes=[dtype]):
                results.append(r)
                assert not spies["tiles"], f"{r.uid} {dtype}: torch tiles ran {dict(spies['tiles'])}"
                if r.status == "pass" and not _zero_by_definition(case, r):
                    assert spies["compiled"][dtype], f"{r.uid} {dtype}: not computed by the compiled kernel"
                    served[r.objective, dtype] += 1
    _verdicts(results)
    for objective in OBJECTIVES:
        assert {d for (o, d) in served if o == objective} == set(DTYPES), (objective, served)
    assert {kind for kind, _ in spies["kinds"]} == set(_compiled.KINDS)


def test_every_distill_vector_passes_without_a_compiler(monkeypatch, tmp_path, spies, caplog):
    """No compiler: one logged reason, ``status`` says why, and every vector passes on the
    torch fused path (every fused kernel's tiles ran)."""
    monkeypatch.setattr(_compiled, "_compiler", lambda: None)
    monkeypatch.setenv("LOSSPROOF_CACHE", str(tmp_path))
    _compiled.reset()
    try:
        with caplog.at_level(logging.INFO, logger="lossproof.refimpl.torch"):
            results = _distill_vectors()
        status = _compiled.status()
        assert not status["available"] and status["reason"].startswith("no C++ compiler found")
        logged = [r for r in caplog.records if "compiled CPU kernels unavailable" in r.getMessage()]
        assert len(logged) == 1
    finally:
        _compiled.reset()
    _verdicts(results)
    assert not spies["compiled"]
    assert set(spies["tiles"]) == {"FastReverse", "FastForward", "FastJSD", "FastHinton"}, spies["tiles"]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kernel", COMPILED)
def test_fallback_gives_the_fused_paths_numbers(monkeypatch, kernel, dtype):
    """Without a compiler the call takes the torch fused path: bit for bit what the fused path
    gives with the compiled kernel switched off."""
    z, t, y = _inputs(3, (7, 300), DTYPES[dtype])
    monkeypatch.setattr(_compiled, "ENABLED", False)
    want = _evaluate(FNS[kernel], z, t, y, True)
    monkeypatch.setattr(_compiled, "ENABLED", True)
    monkeypatch.setattr(_compiled, "_compiler", lambda: None)
    _compiled.reset()
    try:
        got = _evaluate(FNS[kernel], z, t, y, True)
        assert _compiled.library() is None
    finally:
        _compiled.reset()
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kernel", COMPILED)
def test_compiled_matches_plain(compiled, spies, kernel, dtype):
    """Values and gradients (random cotangent) against the plain path, at a vocabulary that is
    not a multiple of the vector width, with −inf logits in one row (recomputed by the careful
    kernel), a row whose maximum is tied in two blocks of the maximum search (512 logits: the
    first is the top), and a row whose maxima lie in the last, partial block (Hinton: one label
    at the student's top, one at a −inf logit's neighbour, one at the last logit)."""
    z, t, y = _inputs(5, (9, 1000), DTYPES[dtype])
    z[2, 7] = t[2, 7] = -float("inf")
    z[4, 600] = z[4, 900] = z[4].max() + 1
    z[5, 990], t[5, 999] = z[5].max() + 2, t[5].max() + 1
    y[4], y[2], y[5] = 600, 8, 999
    v1, g1 = _evaluate(FNS[kernel], z, t, y, True)
    v0, g0 = _evaluate(FNS[kernel], z, t, y, False)
    assert spies["compiled"][dtype] and not spies["tiles"]
    # The fused forms' error is about u·M per row (M = |ℓ_top| + log1p S_q + log1p S_p + log V
    # + 1, about 10 here; refimpl/torch/_fused.py): against the exact values the compiled and
    # the torch fused path alike reach about 20 spacings of the largest value at V = 1000.
    _close(v1, v0, DTYPES[dtype], f"{kernel} {dtype} value", units=64)
    _close(g1, g0, DTYPES[dtype], f"{kernel} {dtype} grad", units=64)
    assert (g1[torch.isneginf(z)] == 0).all()


def test_worker_threads_give_identical_results(compiled):
    """Rows are independent: one or several threads, bit for bit the same."""
    z, t, _ = _inputs(19, (37, 500), torch.float32)
    k = _fused.FastReverse(1.0, None, 500, torch.float32)
    cot = np.random.default_rng(0).normal(0, 1, 37)
    out = []
    for workers in (1, 2, 5):
        grad = torch.empty_like(z)
        values, flagged = compiled.rows("reverse", 1.0, z, t, None, True, cot, grad, workers, k.u ** _fused.GUARD)
        out.append((values, grad, flagged))
    for values, grad, flagged in out[1:]:
        assert np.array_equal(values, out[0][0]) and torch.equal(grad, out[0][1]) and flagged == out[0][2]


def test_built_once_then_loaded_from_the_cache(compiled, monkeypatch, tmp_path):
    """The first use builds into the cache directory (its time recorded); a later process (here:
    after ``reset``) loads the same file without building."""
    monkeypatch.setenv("LOSSPROOF_CACHE", str(tmp_path))
    _compiled.reset()
    try:
        first = _compiled.status()
        _compiled.reset()
        second = _compiled.status()
    finally:
        _compiled.reset()
    assert first["available"] and not first["cached"] and first["seconds"] > 0
    assert second["available"] and second["cached"] and second["path"] == first["path"]
    assert first["path"].startswith(str(tmp_path))


def test_disabled_by_the_environment(monkeypatch):
    monkeypatch.setattr(_compiled, "ENABLED", False)
    assert _compiled.library() is None
    assert _compiled.status()["reason"].startswith("disabled")


def test_strided_rows_and_strided_vocabulary(compiled, spies):
    """Every other row of a larger tensor (the teacher, row stride 2V, is read in place by the
    compiled kernel; the student is cloned contiguous by ``_evaluate``) and every other logit
    (vocabulary stride 2: the torch tiles): the plain path's results."""
    z, t, _ = _inputs(23, (12, 600), torch.float32)
    for zs, ts, path in ((z[::2], t[::2], "compiled"), (z[:, ::2], t[:, ::2], "tiles")):
        before = dict(spies["compiled"])
        v1, g1 = _evaluate(FNS["reverse-T0.7"], zs, ts, None, True)
        v0, g0 = _evaluate(FNS["reverse-T0.7"], zs, ts, None, False)
        assert (dict(spies["compiled"]) != before) == (path == "compiled")
        _close(v1, v0, torch.float32, f"{path} value", units=64)
        _close(g1, g0, torch.float32, f"{path} grad", units=64)
