"""The fused, vocabulary-tiled path of refimpl.torch.distill against its plain path.

``distill.FUSED = False`` makes every call take the plain path (``_careful.VocabRows`` with
the careful per-row kernels), which tests/torch_backend/test_torch_vs_exact.py checks against the exact
reference; here the fused path must give the same values and gradients: within a few units of
float64/float32 rounding (relative to the output's largest element), and within one unit of
the output's rounding in float16/bfloat16 (both paths compute in float32 and round once).
Covered: every kernel and convention, several tile geometries (whole rows, rows split into
vocabulary tiles, tiles that do not divide V, a last partial block), −inf logits and near-equal
or saturated rows (recomputed by the careful kernel), cotangents other than 1, a second
backward through a retained graph, no-grad evaluation, one or several worker threads, and the
plain path's error messages for bad input. Speed is never asserted (benchmarks/ measures it).
"""
from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="tests of the torch backend")

import math
import threading
import zlib

import numpy as np
import torch

from lossproof.refimpl.torch import _fused, distill
from lossproof.refimpl.validate import InputError

NEG_INF = -math.inf
DTYPES = {"float64": torch.float64, "float32": torch.float32,
          "bfloat16": torch.bfloat16, "float16": torch.float16}

KERNELS = {
    "reverse": lambda z, t, y: distill.token_kl(z, t, "reverse", 1.0),
    "reverse-T0.7": lambda z, t, y: distill.token_kl(z, t, "reverse", 0.7),
    "forward": lambda z, t, y: distill.token_kl(z, t, "forward", 1.0),
    "forward-T2": lambda z, t, y: distill.token_kl(z, t, "forward", 2.0),
    "jsd-0.5": lambda z, t, y: distill.generalized_jsd(z, t, 0.5),
    "jsd-0.1-T1.5": lambda z, t, y: distill.generalized_jsd(z, t, 0.1, 1.5),
    "jsd-0.9": lambda z, t, y: distill.generalized_jsd(z, t, 0.9),
    "jsd-kl0": lambda z, t, y: distill.generalized_jsd(z, t, 0.0, 1.0, "kl"),
    "jsd-kl1": lambda z, t, y: distill.generalized_jsd(z, t, 1.0, 0.5, "kl"),
    "hinton": lambda z, t, y: distill.hinton(z, t, y, 1.0, 0.5),
    "hinton-T2": lambda z, t, y: distill.hinton(z, t, y, 2.0, 0.3, False),
    "hinton-a1": lambda z, t, y: distill.hinton(z, t, y, 3.0, 1.0),
    "forward-ce-T2": lambda z, t, y: distill.token_kl(z, t, "forward", 2.0, "cross_entropy"),
    "hinton-ce-T2": lambda z, t, y: distill.hinton(z, t, y, 2.0, 0.7, True, "cross_entropy"),
    "symmetric-0.5": lambda z, t, y: distill.symmetric_kl(z, t, 0.5),
    "symmetric-0.1-T1.5": lambda z, t, y: distill.symmetric_kl(z, t, 0.1, 1.5),
}


def _inputs(seed, shape, dtype, spread=2.0, noise=1.0):
    rng = np.random.default_rng(seed)
    z = rng.normal(0, spread, shape)
    t = z + rng.normal(0, noise, shape)
    y = rng.integers(0, shape[-1], int(np.prod(shape[:-1])))
    return (torch.tensor(z).to(dtype), torch.tensor(t).to(dtype), torch.tensor(y))


def _evaluate(fn, z, t, y, fused, cot_seed=1):
    """(value, gradient) for the cotangent drawn from ``cot_seed`` (None: all ones)."""
    distill.FUSED = fused
    try:
        x = z.clone().requires_grad_(True)
        out = fn(x, t, y)
        if cot_seed is None:
            c = torch.ones_like(out)
        else:
            c = torch.tensor(np.random.default_rng(cot_seed).normal(0, 1, tuple(out.shape))).to(out.dtype)
        (g,) = torch.autograd.grad(out, x, c)
        return out.detach(), g
    finally:
        distill.FUSED = True


def _close(got, want, dtype, what, units=16.0):
    g, w = got.double(), want.double()
    assert g.shape == w.shape and g.dtype == w.dtype
    scale = float(w.abs().max()) or 1.0
    if dtype in (torch.float64, torch.float32):
        tol = units * torch.finfo(dtype).eps * scale
    else:  # one rounding to the output dtype on each side: at most one spacing apart
        tol = 1.01 * torch.finfo(dtype).eps * scale
    err = float((g - w).abs().max())
    assert err <= tol, f"{what}: |fused − plain| = {err:.3e} > {tol:.3e} (scale {scale:.3e})"


def _compare(fn, z, t, y, dtype, what, cot_seed=1):
    v1, g1 = _evaluate(fn, z, t, y, True, cot_seed)
    v0, g0 = _evaluate(fn, z, t, y, False, cot_seed)
    _close(v1, v0, dtype, f"{what} value")
    _close(g1, g0, dtype, f"{what} grad")


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_fused_matches_plain(kernel, dtype):
    # a seed fixed by the kernel's name (str hashes are salted per process: PYTHONHASHSEED)
    z, t, y = _inputs(zlib.crc32(kernel.encode()) % 1000, (6, 37), DTYPES[dtype])
    _compare(KERNELS[kernel], z, t, y, DTYPES[dtype], f"{kernel} {dtype}")


@pytest.mark.parametrize("tile", [5, 16, 36, 37, 38, 100, 1000])
@pytest.mark.parametrize("kernel", ["reverse-T0.7", "forward-T2", "jsd-0.1-T1.5", "jsd-0.9", "hinton-T2"])
def test_tile_boundaries(monkeypatch, kernel, tile):
    """Rows split into vocabulary tiles (tile < V = 37, the last one partial), whole rows with a
    partial last block of rows (tile ≥ V): the same result as one tile per call."""
    z, t, y = _inputs(7, (5, 37), torch.float64)
    monkeypatch.setattr(_fused, "TILE_ELEMENTS", 1 << 20)
    want = _evaluate(KERNELS[kernel], z, t, y, True)
    monkeypatch.setattr(_fused, "TILE_ELEMENTS", tile)
    got = _evaluate(KERNELS[kernel], z, t, y, True)
    _close(got[0], want[0], torch.float64, f"{kernel} tile {tile} value", units=64)
    _close(got[1], want[1], torch.float64, f"{kernel} tile {tile} grad", units=64)


def test_top_token_in_a_later_tile(monkeypatch):
    """The maximum of each model sits in the last vocabulary tile (first occurrence on ties)."""
    z, t, y = _inputs(11, (3, 40), torch.float64)
    z[:, 37] = z.max() + 3
    t[:, 39] = t.max() + 1
    t[:, 38] = t[:, 39]  # a tie: the first one is the top
    monkeypatch.setattr(_fused, "TILE_ELEMENTS", 8)
    for kernel in ("reverse", "forward", "jsd-0.5", "hinton"):
        _compare(KERNELS[kernel], z, t, y, torch.float64, kernel)


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_neg_inf_logits(kernel, monkeypatch):
    """Impossible tokens (−inf where the divergence stays finite): careful rows, the plain
    path's values, exactly zero gradient at the −inf logits."""
    z, t, y = _inputs(3, (4, 9), torch.float32)
    y[:] = 0
    both = [(1, 3), (2, 5)]
    for i, j in both:
        z[i, j] = t[i, j] = NEG_INF
    if kernel.startswith(("reverse", "jsd-kl1")):
        z[0, 2] = NEG_INF  # student impossible, teacher possible: KL(q‖p) finite
    elif kernel.startswith(("forward", "jsd-kl0", "hinton")):
        t[0, 2] = NEG_INF
    elif kernel.startswith("symmetric"):
        z[0, 2] = t[0, 2] = NEG_INF   # both directions finite only with −inf on both sides
    else:
        z[0, 2] = NEG_INF
        t[3, 4] = NEG_INF
    for tile in (None, 4):
        monkeypatch.setattr(_fused, "TILE_ELEMENTS", tile)
        _compare(KERNELS[kernel], z, t, y, torch.float32, f"{kernel} -inf tile {tile}")
        _, g = _evaluate(KERNELS[kernel], z, t, y, True)
        assert (g[torch.isneginf(z)] == 0).all()


@pytest.mark.parametrize("kernel", ["reverse", "forward", "jsd-0.5", "jsd-0.1-T1.5", "hinton-a1"])
def test_near_equal_and_saturated_rows(kernel):
    """Student ≈ teacher (divergence ≪ its terms, where the careful kernel's k3 form keeps the
    relative accuracy) and one-hot rows at T = 1e-3 with logits ±1e4. The fused forms' error is
    about u·M (module notes); a row is kept only if that is at most √u of its value
    (``_fused.GUARD``), else the careful kernel redoes it: every row within a few √u of the
    plain path, never negative; the centred gradients (reverse, JSD) as accurate as the plain
    path's, (q − p)/T (forward, Hinton) to u·(q + p)/T."""
    rng = np.random.default_rng(5)
    z = rng.normal(0, 2, (4, 12))
    t = z.copy()
    t[0] += rng.normal(0, 1e-6, 12)      # divergence ~1e-13
    t[1] += rng.normal(0, 1e-3, 12)      # ~1e-7
    t[2] = np.round(rng.normal(0, 1, 12), 1) * 1e4
    z[2] = t[2] + rng.normal(0, 1, 12)
    y = torch.tensor([0, 3, 5, 7])
    fns = {"reverse": lambda a, b, c, T: distill.token_kl(a, b, "reverse", T),
           "forward": lambda a, b, c, T: distill.token_kl(a, b, "forward", T),
           "jsd-0.5": lambda a, b, c, T: distill.generalized_jsd(a, b, 0.5, T),
           "jsd-0.1-T1.5": lambda a, b, c, T: distill.generalized_jsd(a, b, 0.1, T),
           "hinton-a1": lambda a, b, c, T: distill.hinton(a, b, c, T, 1.0)}
    for dtype in (torch.float64, torch.float32):
        zt, tt = torch.tensor(z).to(dtype), torch.tensor(t).to(dtype)
        rel = 4 * torch.finfo(dtype).eps ** _fused.GUARD
        for T in (1.0, 1e-3):
            fn = lambda a, b, c, T=T: fns[kernel](a, b, c, T)  # noqa: E731
            v1, g1 = _evaluate(fn, zt, tt, y, True)
            v0, g0 = _evaluate(fn, zt, tt, y, False)
            assert (v1 >= 0).all(), f"{kernel} T={T}: negative divergence {v1}"
            err = (v1.double() - v0.double()).abs()
            assert (err <= rel * v0.double().abs() + 1e-300).all(), f"{kernel} {dtype} T={T}: {v1} vs {v0}"
            if kernel in ("forward", "hinton-a1"):
                # (q − p)/T as a difference: absolute error u·(q + p)/T per unit cotangent (the
                # plain path's p·expm1(r) is relatively accurate where q ≈ p).
                cot = np.abs(np.random.default_rng(1).normal(0, 1, 4)).max()
                tol = 8 * torch.finfo(dtype).eps * cot * 2 / T
                assert float((g1.double() - g0.double()).abs().max()) <= tol, f"{kernel} T={T} grad"
            else:
                _close(g1, g0, dtype, f"{kernel} T={T} grad")


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_unit_cotangent_and_retained_graph(dtype):
    """Cotangent 1 (the gradient computed in forward is returned as it is), a mean's 1/N, and a
    second backward through a retained graph: the plain path's gradients, accumulated."""
    z, t, y = _inputs(13, (5, 21), DTYPES[dtype])
    for kernel in ("reverse", "jsd-0.9", "hinton-T2"):
        _compare(KERNELS[kernel], z, t, y, DTYPES[dtype], kernel, cot_seed=None)
        grads = []
        for fused in (True, False):
            distill.FUSED = fused
            try:
                x = z.clone().requires_grad_(True)
                out = KERNELS[kernel](x, t, y)
                loss = out.sum() if out.ndim else out
                loss.backward(retain_graph=True)
                first = x.grad.clone()
                (out.mean() * 3 if out.ndim else out * 3).backward()
                grads.append((first, x.grad))
            finally:
                distill.FUSED = True
        _close(grads[0][0], grads[1][0], DTYPES[dtype], f"{kernel} first backward")
        _close(grads[0][1], grads[1][1], DTYPES[dtype], f"{kernel} accumulated")


def test_no_grad_and_constant_student():
    z, t, y = _inputs(17, (4, 30), torch.float32)
    for kernel, fn in KERNELS.items():
        with torch.no_grad():
            v1 = fn(z.clone().requires_grad_(True), t, y)
        v2 = fn(z, t, y)
        distill.FUSED = False
        try:
            v0 = fn(z, t, y)
        finally:
            distill.FUSED = True
        assert v1.grad_fn is None and v2.grad_fn is None
        _close(v1, v0, torch.float32, kernel)
        assert torch.equal(v1, v2)


def test_worker_threads_give_identical_results(monkeypatch):
    """Blocks are independent: one or several worker threads, bit for bit the same."""
    z, t, y = _inputs(19, (13, 50), torch.float32)
    monkeypatch.setattr(_fused, "TILE_ELEMENTS", 100)  # two rows per block, seven blocks
    out = {}
    for workers in (1, 3):
        monkeypatch.setattr(_fused, "_workers", lambda device, w=workers: w)
        out[workers] = [_evaluate(KERNELS[k], z, t, y, True) for k in ("reverse", "jsd-0.5", "hinton-T2")]
    for (v1, g1), (v3, g3) in zip(out[1], out[3]):
        assert torch.equal(v1, v3) and torch.equal(g1, g3)
    assert torch.get_num_threads() >= 1


def test_thread_settings_are_left_alone(monkeypatch):
    """Several worker threads, yet torch.set_num_threads (process-wide) is never called: the
    calling thread and the threads started afterwards keep torch's thread count."""
    def forbidden(n):
        raise AssertionError(f"torch.set_num_threads({n}) called by library code")

    def fresh_thread_count():
        seen = []
        thread = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
        thread.start()
        thread.join()
        return seen[0]

    before = (torch.get_num_threads(), fresh_thread_count())
    monkeypatch.setattr(torch, "set_num_threads", forbidden)
    monkeypatch.setattr(_fused, "TILE_ELEMENTS", 100)  # seven blocks
    monkeypatch.setattr(_fused, "_workers", lambda device: 3)
    z, t, y = _inputs(41, (13, 50), torch.float32)
    for kernel in ("reverse", "jsd-0.5", "hinton-T2"):
        _evaluate(KERNELS[kernel], z, t, y, True)
    assert (torch.get_num_threads(), fresh_thread_count()) == before


def test_worker_threads_run_single_threaded():
    """``_fused._single_threaded`` limits the thread it runs in, and that thread only."""
    if _fused._openmp() is None:
        pytest.skip("torch's CPU operations do not run on an OpenMP runtime found in this process")
    inside = []

    def worker():
        _fused._single_threaded()
        inside.append(torch.get_num_threads())

    before = torch.get_num_threads()
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert inside == [1] and torch.get_num_threads() == before


def test_batch_axes_and_mixed_dtypes():
    """Leading batch axes, a bfloat16 student with a float32 teacher (float32 result)."""
    z, t, y = _inputs(23, (2, 3, 17), torch.float32)
    _compare(KERNELS["reverse"], z, t, y, torch.float32, "batched reverse")
    _compare(KERNELS["jsd-0.5"], z.to(torch.bfloat16), t, y, torch.float32, "mixed jsd")


BAD = [
    ("NaN student", lambda z, t: z.__setitem__((1, 2), math.nan), "student_logits: contains NaN"),
    ("NaN teacher", lambda z, t: t.__setitem__((0, 0), math.nan), "teacher_logits: contains NaN"),
    ("+inf student", lambda z, t: z.__setitem__((2, 1), math.inf), "student_logits: contains +inf"),
    ("all -inf row", lambda z, t: z.__setitem__(1, NEG_INF), "student_logits: row (1,) is -inf everywhere"),
    ("support", lambda z, t: t.__setitem__((2, 3), NEG_INF), "teacher_logits: -inf at row (2,), token 3"),
]


@pytest.mark.parametrize("what,spoil,message", BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("tile", [None, 3])
def test_bad_input_raises_the_plain_message(monkeypatch, what, spoil, message, tile):
    monkeypatch.setattr(_fused, "TILE_ELEMENTS", tile)
    msgs = []
    for fused in (True, False):
        z, t, _ = _inputs(29, (3, 6), torch.float32)
        spoil(z, t)
        distill.FUSED = fused
        try:
            with pytest.raises(InputError) as err:
                distill.token_kl(z.requires_grad_(True), t)
            msgs.append(str(err.value))
        finally:
            distill.FUSED = True
    assert msgs[0] == msgs[1] and msgs[0].startswith(message), msgs


def test_bad_parameter_with_bad_data_reports_the_data_first():
    """The plain order: the logits' checks come before the direction's."""
    z, t, _ = _inputs(31, (2, 4), torch.float32)
    z[0, 0] = math.nan
    with pytest.raises(InputError, match="^student_logits: contains NaN"):
        distill.token_kl(z, t, direction="sideways")
    with pytest.raises(InputError, match="^direction:"):
        distill.token_kl(t, t, direction="sideways")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_on_cuda_matches_cpu(dtype):
    """The same fused path on a GPU (torch operations on 2^24-logit tiles, torch's argmax)."""
    z, t, y = _inputs(37, (9, 3000), DTYPES[dtype])
    for kernel, fn in KERNELS.items():
        v0, g0 = _evaluate(fn, z, t, y, True)
        v1, g1 = _evaluate(fn, z.cuda(), t.cuda(), y.cuda(), True)
        _close(v1.cpu(), v0, DTYPES[dtype], f"{kernel} cuda value", units=64)
        _close(g1.cpu(), g0, DTYPES[dtype], f"{kernel} cuda grad", units=64)


def test_bench_reports_every_row(tmp_path):
    """``lossproof bench``'s machinery on a tiny size (structure only: speed is not asserted)."""
    from lossproof.conformance.bench import memory, methods, run
    doc = run.run(sizes=[(8, 64)], methods=["lossproof", "naive"], reps=1, exact=False, log=lambda *a: None,
                  lower_mmap_threshold=False)
    rows = doc["rows"]
    assert {(r["kernel"], r["method"]) for r in rows} == {(k, m) for k in methods.KERNELS for m in ("lossproof", "naive")}
    measured = memory.PeakMeter().available  # False without /proc (macOS): see the next test
    for r in rows:
        assert r["available"] and r["median_s"] > 0
        assert r["peak_extra_bytes"] >= 0 if measured else r["peak_extra_bytes"] is None
        assert r["bandwidth_fraction"] > 0 and r["speedup_vs_naive"] > 0
    for key in ["token_kl_speedup_vs_naive", "token_kl_bandwidth_fraction"] + ["token_kl_peak_extra_fraction"] * measured:
        assert doc["summary"][key] is not None
    assert set(doc["summary"]["targets_cpu"]) == {"speedup_vs_naive>=2", "peak_extra_fraction<=0.05",
                                                  "bandwidth_fraction>=0.5"}
    assert doc["libraries"]["trl"]["available"] is False  # not requested: not imported
    run.write_json(tmp_path / "b.json", doc)
    assert json_roundtrip(tmp_path / "b.json")["rows"][0]["n"] == 8


@pytest.mark.parametrize("method", ["lossproof", "lossproof-tiles", "lossproof-plain", "naive", "trl", "liger"])
def test_bench_methods_compute_the_same_gradient(method):
    """The benchmark compares like with like: each method's gradient (float32) matches the
    analytic one of the NumPy backend in float64 (refimpl.arrays, checked against the exact
    vectors) within float32 rounding of a V-term log-sum-exp. The TRL and Liger rows run those
    libraries through adapters that could otherwise drift."""
    from lossproof.conformance.bench import methods
    from lossproof.refimpl.arrays import distill as np_distill
    runners = methods.Runners([method])
    z, t, y = methods.inputs(48, 3000, torch.float32)
    z64, t64, y64 = z.detach().double().numpy(), t.double().numpy(), y.numpy()
    ones = np.ones(z.shape[0])
    want = {"token_kl.reverse": np_distill.token_kl_vjp(ones, z64, t64, "reverse"),
            "token_kl.forward": np_distill.token_kl_vjp(ones, z64, t64, "forward"),
            "generalized_jsd": np_distill.generalized_jsd_vjp(ones, z64, t64, methods.JSD_BETA),
            "hinton": np_distill.hinton_vjp(1.0, z64, t64, y64, methods.HINTON["temperature"],
                                            methods.HINTON["alpha"])}
    for kernel in methods.KERNELS:
        fn = runners.get(method, kernel)
        if isinstance(fn, str):
            if method in methods.LIBRARIES and kernel == "hinton":
                continue  # neither library has Hinton's loss on logits
            if method == "lossproof-tiles" and fn.startswith("same code as lossproof"):
                continue  # the lossproof row measures that code
            pytest.skip(f"{method}: {fn}")
        z.grad = None
        fn(z, t, y)
        g = want[kernel]["student_logits"]
        err = np.abs(z.grad.double().numpy() - g).max()
        assert err <= 32 * np.finfo(np.float32).eps * np.abs(g).max(), (kernel, err)


def test_bench_without_proc_says_memory_is_not_measured(monkeypatch):
    """Where the resident set cannot be read (no /proc: macOS, Windows) and the C library is
    not glibc, the run completes: timings as usual, memory reported as not measured."""
    from lossproof.conformance.bench import memory, run
    monkeypatch.setattr(memory, "_STATM", "/nonexistent/statm")
    monkeypatch.setattr(memory, "_glibc", lambda: None)
    doc = run.run(sizes=[(8, 64)], kernels=["token_kl.reverse"], methods=["lossproof", "naive"], reps=1,
                  exact=False, log=lambda *a: None)
    assert doc["settings"]["memory"].startswith("not measured")
    assert doc["settings"]["malloc_mmap_threshold_64k"] is False
    assert all(r["median_s"] > 0 and r["peak_extra_bytes"] is None for r in doc["rows"])
    assert doc["summary"]["token_kl_peak_extra_fraction"] is None
    assert doc["summary"]["targets_cpu"]["peak_extra_fraction<=0.05"] is None


def json_roundtrip(path):
    import json
    return json.loads(path.read_text())


def test_bench_in_bfloat16_records_the_compiled_kernel(tmp_path, capsys):
    """``lossproof bench --dtype bfloat16``: every row in that dtype; the compiled kernel's
    build or load is recorded apart from the timings, and the torch tiles are measured only
    where they are not the same code as the default path (every kernel, where the compiled
    kernel is available)."""
    from lossproof.conformance import cli
    from lossproof.conformance.bench import methods
    from lossproof.refimpl.torch import _compiled
    out = tmp_path / "b.json"
    assert cli.main(["bench", "--sizes", "8x64", "--dtype", "bfloat16", "--method", "lossproof", "--method",
                     "lossproof-tiles", "--reps", "1", "--no-exact", "--quiet", "--json", str(out)]) == 0
    doc = json_roundtrip(out)
    assert doc["settings"]["dtype"] == "bfloat16" and {r["dtype"] for r in doc["rows"]} == {"bfloat16"}
    assert doc["compiled"]["available"] == (_compiled.library() is not None)
    tiles = {r["kernel"]: r for r in doc["rows"] if r["method"] == "lossproof-tiles"}
    assert {k: r["available"] for k, r in tiles.items()} == dict.fromkeys(methods.KERNELS, doc["compiled"]["available"])
    if doc["compiled"]["available"]:
        assert doc["compiled"]["kernels"] == list(methods.KERNELS)
    else:
        assert all(r["reason"].startswith("same code as lossproof") for r in tiles.values())
    with pytest.raises(SystemExit) as err:
        cli.main(["bench", "--dtype", "float8"])
    assert err.value.code == 2 and "invalid choice: 'float8'" in capsys.readouterr().err
