"""benchmarks/gpu_parity.py, the device script, run end to end in its no-device mode (tiny sizes,
one objective's vectors, two bench methods): every stage completes on a CPU, the GPU parts are
recorded as "no CUDA device", and the JSON and Markdown outputs have their structure. The
parity arithmetic (|GPU − CPU| in ulps) is checked on constructed values. No speed is asserted.
"""
from __future__ import annotations

import collections
import importlib.util
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="the script's CPU parts run torch")

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_parity.py"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_parity", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu")
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--no-device", "--quick",
                           "--cpu-sizes", "16x1024", "--objective", "distill.token_kl",
                           "--bench-method", "lossproof", "--bench-method", "naive"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return out, json.loads((out / "gpu_parity.json").read_text()), (out / "gpu_parity.md").read_text()


def test_every_stage_runs_and_the_gpu_parts_say_why_not(run):
    _, doc, _ = run
    assert doc["format"] == "lossproof-gpu-parity/1" and doc["mode"] == "quick"
    assert doc["gpu"] == {"available": False, "reason": "no CUDA device (--no-device)"}
    assert list(doc["stages"]) == ["environment", "tests", "check", "bench"]
    assert all(s["status"] == "ok" and s["seconds"] >= 0 for s in doc["stages"].values())
    assert doc["seconds"] < doc["budget_s"] == 170


def test_environment_and_tests(run):
    _, doc, _ = run
    env, t = doc["stages"]["environment"], doc["stages"]["tests"]
    assert env["cuda_available"] is False and "compiled_cpu_kernel" in env
    assert "tests/torch_backend/test_torch_cuda.py" in t["files"]
    assert t["counts"]["skipped"] > 0 and t["counts"]["passed"] == t["counts"]["failed"] == 0
    # without a GPU every CUDA test skips for that reason; the Triton modules skip whole when Triton
    # is not installed (the README's install leaves it out), with their importorskip reasons
    missing_triton = importlib.util.find_spec("triton") is None
    assert set(t["skip_reasons"]) - {"no CUDA device"} == ({"lossproof.refimpl.triton needs Triton",
                                                            "lossproof.refimpl.triton needs Triton (pip install triton)"}
                                                           if missing_triton else set())


def test_check_and_parity_table(run):
    _, doc, _ = run
    chk = doc["stages"]["check"]
    cpu = chk["backends"]["torch-cpu"]
    assert cpu["status"] == "ok" and cpu["vectors"] > 0 and not cpu["failures"]
    for name in ("torch-cuda", "cupy-cuda", "triton-cuda"):
        assert chk["backends"][name] == {"status": "skipped", "reason": "no CUDA device (--no-device)"}
    rows = chk["parity"]
    assert {(r["objective"], r["dtype"]) for r in rows} == {
        ("distill.token_kl", d) for d in ("float64", "float32", "bfloat16", "float16")}
    for r in rows:
        assert r["vectors"] > 0 and 0 <= r["cpu_err_over_tol"] <= 1 and r["cpu_failed"] == 0 and r["gpu"] == {}


def test_bench_on_the_cpu(run):
    out, doc, _ = run
    b = doc["stages"]["bench"]
    assert b["gpu"] == {"status": "skipped", "reason": "no CUDA device (--no-device)"}
    (entry,) = b["runs"]
    assert entry["status"] == "ok" and entry["device"] == "cpu" and entry["sizes"] == [[16, 1024]]
    assert (out / "bench-cpu-float32-16x1024.json").is_file()
    measured = {(r["kernel"], r["method"]) for r in entry["rows"] if r.get("available")}
    assert {("token_kl.reverse", "lossproof"), ("token_kl.reverse", "naive")} <= measured
    for r in entry["rows"]:
        if r.get("available"):
            assert r["median_s"] > 0 and r["bandwidth_fraction"] > 0 and r["copy_bandwidth_gbs"] > 0


def test_markdown_has_every_section(run):
    _, _, md = run
    for heading in ("# GPU parity and benchmarks", "## Stages", "## Environment", "## Test modules (pytest -m cuda)",
                    "## lossproof check", "## CPU/GPU parity", "## lossproof bench"):
        assert heading + "\n" in md
    assert "| objective | dtype | vectors | CPU worst err/tol |" in md
    assert "No GPU column: no CUDA device (--no-device)." in md
    assert "GPU bench: no CUDA device (--no-device)." in md


def test_ulps_is_the_largest_difference_not_a_difference_of_maxima():
    """The old script compared the largest errors of the two devices; here the elementwise
    difference: two outputs with the same maximum but different elements differ."""
    m = _module()
    cpu = np.array([1.0, 3.0, 0.5])
    one = 2.0 ** -23  # float32 ulp at 1
    gpu = np.array([1.0 + 3 * one, 3.0, 0.5])
    assert m.ulps(gpu, cpu, "float32") == 3.0
    assert m.ulps(cpu[::-1].copy(), cpu, "float32") > 1e6      # same maximum, other elements
    assert m.ulps(np.array([0.5 - 2.0 ** -25]), np.array([0.5]), "float32") == 0.5  # ulp at the CPU value
    assert m.ulps(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]), "bfloat16") == 0.0
    assert m.ulps(np.array([np.inf]), np.array([1.0]), "float16") == math.inf
    assert m.ulps(np.array([1.0, 2.0]), np.array([1.0]), "float64") == math.inf
    assert m.ulps(np.array([1.0 + 2.0 ** -7]), np.array([1.0]), "bfloat16") == 1.0


def test_parity_table_joins_by_vector_dtype_and_output():
    m = _module()
    ref = {"verdicts": [{"uid": "a", "objective": "o", "dtype": "float32", "status": "pass", "err_over_tol": 0.2}],
           "outputs": {("a", "float32", "kl"): ("o", np.array([1.0, 2.0])),
                       ("a", "float32", "grad:z"): ("o", np.array([0.25]))}}
    gpu = {"verdicts": [{"uid": "a", "objective": "o", "dtype": "float32", "status": "pass", "err_over_tol": 0.5}],
           "outputs": {("a", "float32", "kl"): ("o", np.array([1.0, 2.0 + 2 * 2.0 ** -22])),
                       ("a", "float32", "grad:z"): ("o", np.array([0.25]))}}
    (row,) = m.parity_table(ref, {"torch-cuda": gpu})
    assert row["vectors"] == 1 and row["cpu_err_over_tol"] == 0.2
    assert row["gpu"]["torch-cuda"] == {"err_over_tol": 0.5, "failed": 0, "max_ulps_vs_cpu": 2.0, "compared": 2}


def test_a_stage_past_its_time_limit_is_interrupted_and_recorded():
    m = _module()
    start = time.perf_counter()
    out = m._subprocess([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"], 3)
    assert out["error"] == "stopped at its time limit (3 s)" and out["returncode"] != 0
    assert out["tail"][:1] == ["started"] and time.perf_counter() - start < 30


def test_the_gpu_bench_plan_puts_the_target_first_and_covers_every_size_and_dtype():
    m = _module()
    plan = m._bench_plan(m.FULL["sizes"], m.FULL["dtypes"], True, [])
    assert plan[0] == ("cuda", "bfloat16", [(16384, 152064)])
    covered = sorted((d, s) for _, d, sizes in plan for s in sizes)
    assert covered == sorted((d, s) for d in ("float32", "bfloat16")
                             for s in [(n, v) for n in (4096, 16384) for v in (32768, 131072, 152064)])
    assert len(plan) == 3 and m._bench_plan([], [], False, [(8, 64)]) == [("cpu", "float32", [(8, 64)])]


def test_a_stage_that_raises_is_recorded_and_the_run_goes_on():
    m = _module()
    budget = m.Budget(100)

    def broken(limit):
        raise RuntimeError("device lost")

    out = m._stage("tests", broken, budget, lambda msg: None)
    assert out["status"] == "error" and out["error"] == "RuntimeError: device lost"
    assert m._stage("bench", lambda limit: {"limit": limit}, budget, lambda msg: None)["status"] == "ok"
    spent = m.Budget(10)
    spent.start -= 8
    assert m._stage("check", broken, spent, lambda msg: None)["status"] == "skipped"


def test_the_gpu_columns_of_the_parity_table(monkeypatch, tmp_path):
    """The GPU path of the check stage, simulated on a CPU: "torch-cuda" is torch on the CPU in
    a second process (so its outputs equal the reference's bit for bit: 0 ulps everywhere),
    CuPy and Triton unavailable with their reasons; both files get the GPU columns."""
    m = _module()
    real = m._subprocess

    def on_cpu(cmd, timeout, log_path=None):
        if "--worker-check" in cmd:
            cmd = [("cpu" if c == "cuda" and cmd[i - 1] == "--device" else c) for i, c in enumerate(cmd)]
        return real(cmd, timeout, log_path)

    monkeypatch.setattr(m, "cuda_device", lambda no_device: (True, ""))
    monkeypatch.setattr(m, "_subprocess", on_cpu)
    monkeypatch.setattr(m, "_available", lambda b: (True, "") if b == "torch" else (False, f"not available: {b} here"))
    assert m.main(["--out", str(tmp_path), "--objective", "distill.token_kl", "--stage", "check"]) == 0
    doc = json.loads((tmp_path / "gpu_parity.json").read_text())
    chk = doc["stages"]["check"]
    assert chk["backends"]["torch-cuda"]["status"] == "ok"
    assert chk["backends"]["triton-cuda"] == {"status": "skipped", "reason": "not available: triton here"}
    for row in chk["parity"]:
        cell = row["gpu"]["torch-cuda"]
        assert cell["compared"] > 0 and cell["max_ulps_vs_cpu"] == 0.0 and cell["err_over_tol"] == row["cpu_err_over_tol"]
    md = (tmp_path / "gpu_parity.md").read_text()
    assert "| torch-cuda worst err/tol | torch-cuda max \\|GPU − CPU\\| (ulp) |" in md


def test_liger_kernels_in_the_gpu_check(monkeypatch, tmp_path, bundled_vectors):
    """The check stage's GPU path also runs Liger's Triton cross-entropy through ``--target liger``
    (simulated on a CPU without Triton's interpreter: every case unsupported, with the adapter's
    reason, and the stage clean); a selection without a Liger kernel skips it with that reason."""
    pytest.importorskip("liger_kernel")
    m = _module()
    real = m._subprocess

    def on_cpu(cmd, timeout, log_path=None):
        if "--worker-check" in cmd:
            cmd = [("cpu" if c == "cuda" and cmd[i - 1] == "--device" else c) for i, c in enumerate(cmd)]
        return real(cmd, timeout, log_path)

    monkeypatch.setattr(m, "cuda_device", lambda no_device: (True, ""))
    monkeypatch.setattr(m, "_subprocess", on_cpu)
    monkeypatch.setattr(m, "_available", lambda b: (False, f"not available: {b} here"))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert m.main(["--out", str(tmp_path), "--objective", "lm.cross_entropy", "--stage", "check"]) == 0
    liger = json.loads((tmp_path / "gpu_parity.json").read_text())["stages"]["check"]["backends"]["liger-cuda"]
    assert liger["status"] == "ok" and liger["vectors"] > 0
    # Liger spreads label smoothing over every class and does not declare smoothing_classes:
    # the cases that ask for another convention are skipped by the harness before the adapter
    # is reached, once per case; every other case reaches the adapter and is unsupported.
    elsewhere = collections.Counter(
        f"{'conformance' if c.result == 'valid' else 'validation'}:skip"
        for c in bundled_vectors.cases("lm.cross_entropy") if c.conventions.get("smoothing_classes") != "all")
    assert elsewhere["conformance:skip"] > 0
    verdicts = collections.Counter(liger["verdicts"])
    assert {k: n for k, n in verdicts.items() if k.endswith(":skip")} == elsewhere
    assert set(verdicts) - set(elsewhere) == {"conformance:unsupported", "validation:unsupported"}
    assert m.main(["--out", str(tmp_path), "--objective", "kl.estimator", "--stage", "check"]) == 0
    liger = json.loads((tmp_path / "gpu_parity.json").read_text())["stages"]["check"]["backends"]["liger-cuda"]
    assert liger == {"status": "skipped", "reason": "no Liger Triton-kernel objective selected"}
