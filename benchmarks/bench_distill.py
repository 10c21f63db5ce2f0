"""pytest-benchmark: forward + backward of the distillation kernels, side by side.

    python -m pytest benchmarks/bench_distill.py --benchmark-group-by=param:kernel
    LOSSPROOF_BENCH_SIZE=1024x131072 python -m pytest benchmarks/bench_distill.py

Methods as ``conformance.bench.methods`` (``lossproof bench`` is the one-run comparison with
memory and bandwidth; this file gives pytest-benchmark's statistics and history). A library
that is not installed is skipped with the reason. Not part of the test suite (testpaths =
tests): speed is never asserted.
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytest_benchmark")

from lossproof.conformance.bench import methods  # noqa: E402

N, V = (int(x) for x in os.environ.get("LOSSPROOF_BENCH_SIZE", "256x32768").lower().split("x"))
RUNNERS = methods.Runners(methods.DEFAULT_METHODS)


@pytest.fixture(scope="module")
def inputs():
    return methods.inputs(N, V, torch.float32)


@pytest.mark.parametrize("method", methods.DEFAULT_METHODS)
@pytest.mark.parametrize("kernel", methods.KERNELS)
def test_forward_backward(benchmark, inputs, kernel, method):
    fn = RUNNERS.get(method, kernel)
    if isinstance(fn, str):
        pytest.skip(fn)
    z, t, y = inputs
    benchmark.extra_info.update({"n": N, "v": V, "dtype": "float32", "bytes_moved": 3 * N * V * 4})

    def run():
        z.grad = None
        fn(z, t, y)

    benchmark.pedantic(run, rounds=3, warmup_rounds=1)


def test_copy(benchmark, inputs):
    """The bandwidth reference: one logits tensor copied into a preallocated one."""
    z, _, _ = inputs
    dst = torch.empty_like(z)
    benchmark.extra_info.update({"n": N, "v": V, "bytes_moved": 2 * N * V * 4})
    benchmark.pedantic(lambda: dst.copy_(z.detach()), rounds=5, warmup_rounds=1)
