"""pytest-benchmark: forward + backward of the fused linear cross-entropy, side by side with
its floor (the three GEMMs), naive torch and the libraries.

    python -m pytest benchmarks/bench_linear_ce.py
    LOSSPROOF_BENCH_LINEAR=2048x1024x32768 python -m pytest benchmarks/bench_linear_ce.py

Methods as ``conformance.bench.linear`` (``lossproof bench --kernel linear_cross_entropy`` is the
one-run comparison with the ratios to the GEMMs and the memory; this file gives
pytest-benchmark's statistics and history). A method that cannot run here (Liger's and verl's
Triton kernels without a GPU) is skipped with its reason. Not part of the test suite
(testpaths = tests): speed is never asserted.
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytest_benchmark")

from lossproof.conformance.bench import linear  # noqa: E402

SIZE = linear.parse_size(os.environ.get("LOSSPROOF_BENCH_LINEAR", "512x512x16384"))


@pytest.fixture(scope="module")
def inputs():
    n, h, v = SIZE
    hid, w, y = linear.inputs(n, h, v, torch.float32)
    return hid, w, y, torch.randn(n, v) / n


@pytest.mark.parametrize("method", linear.METHODS)
def test_forward_backward(benchmark, inputs, method):
    hid, w, y, G = inputs
    why = linear.why_not_runnable(method, torch.float32)
    if why:
        pytest.skip(why)
    fn = linear.runner(method, G)
    n, h, v = SIZE
    benchmark.extra_info.update({"n": n, "h": h, "v": v, "dtype": "float32", "gemm_flops": 6 * n * h * v})

    def run():
        hid.grad = w.grad = None
        fn(hid, w, y)

    benchmark.pedantic(run, rounds=3, warmup_rounds=1)
