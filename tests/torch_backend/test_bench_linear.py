"""``lossproof bench --kernel linear_cross_entropy`` (conformance/bench/linear.py): the rows and
the summary on a tiny size (structure only: speed and memory are reported, never asserted), the
command line, and that the methods compared compute the same gradients (the floor's GEMMs aside,
which compute no loss)."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch", reason="lossproof bench measures torch code")

import numpy as np  # noqa: E402

from lossproof.conformance.bench import linear, memory  # noqa: E402


def test_bench_linear_reports_every_row():
    doc = linear.run((16, 8, 128), ["lossproof", "lossproof-tiles", "naive", "torch-chunked", "liger", "verl"], reps=1,
                     log=lambda *a: None, lower_mmap_threshold=False)
    rows = {r["method"]: r for r in doc["rows"]}
    assert list(rows) == ["gemms", "lossproof", "lossproof-tiles", "naive", "torch-chunked", "liger", "verl"]
    assert rows["gemms"]["time_vs_gemms"] == 1.0
    measured = memory.PeakMeter().available
    for name in ("lossproof", "lossproof-tiles", "naive", "torch-chunked"):
        r = rows[name]
        assert r["available"] and r["median_s"] > 0 and r["time_vs_gemms"] > 0
        assert (r["peak_extra_fraction"] >= 0) if measured else r["peak_extra_fraction"] is None
    for name in ("liger", "verl"):   # Triton (CUDA) kernels: runnable only with a GPU
        r = rows[name]
        if not torch.cuda.is_available():
            assert r["available"] is False and r["reason"].startswith("not runnable on this device")
    s = doc["summary"]
    assert s["size"] == [16, 8, 128] and s["time_vs_gemms"] == rows["lossproof"]["time_vs_gemms"]
    assert set(s["targets_cpu"]) == {"time_vs_gemms<=1.3", "peak_extra_fraction<=0.1"}


def test_bench_linear_command_line(tmp_path, capsys):
    from lossproof.conformance import cli
    out = tmp_path / "l.json"
    assert cli.main(["bench", "--kernel", "linear_cross_entropy", "--sizes", "8x4x64", "--method", "lossproof",
                     "--reps", "1", "--quiet", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [r["method"] for r in doc["rows"]] == ["gemms", "lossproof"]
    assert "linear_cross_entropy 8x4x64 time_vs_gemms:" in capsys.readouterr().out
    for bad, says in ((["--sizes", "8x64"], "expected NxHxV"), (["--method", "trl"], "choose from gemms"),
                      (["--kernel", "hinton"], "runs alone")):
        assert cli.main(["bench", "--kernel", "linear_cross_entropy", *bad]) == 2
        assert says in capsys.readouterr().err


@pytest.mark.parametrize("method", ["lossproof", "lossproof-tiles", "torch-chunked"])
def test_bench_linear_methods_compute_the_same_gradients(method):
    """The fused rows against the naive row's autograd gradients in float64 (the same loss: mean
    token cross-entropy of h·Wᵀ): the benchmark compares like with like."""
    hid, w, y = linear.inputs(40, 12, 300, torch.float64)
    linear.runner("naive")(hid, w, y)
    want = hid.grad.clone(), w.grad.clone()
    hid.grad = w.grad = None
    linear.runner(method)(hid, w, y)
    for got, ref in zip((hid.grad, w.grad), want):
        assert np.abs((got - ref).numpy()).max() <= 1e-13 * np.abs(ref.numpy()).max()
