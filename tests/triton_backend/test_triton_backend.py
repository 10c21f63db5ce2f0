"""The ``triton`` built-in backend (refimpl.triton) without a GPU.

- Every vector the backend claims, through ``python -m lossproof check --backend triton``
  under ``TRITON_INTERPRET=1`` (Triton's CPU interpreter), in a subprocess: the setting must
  be in the environment before Triton is imported, and it must not reach the other tests
  (the ``triton`` backend would join every default ``check`` run).
- The kernel tests of test_kernels.py, in the same kind of subprocess.
- The kernels compile for a GPU (sm_90, the H100/H200) without one: Triton's compiler and
  ptxas run on the CPU, so typing errors that the interpreter lets through are caught here.
- Without CUDA and without the interpreter, ``--backend triton`` is a one-line usage error.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="lossproof.refimpl.triton runs on torch tensors")
pytest.importorskip("triton", reason="lossproof.refimpl.triton needs Triton (pip install triton)")

ROOT = Path(__file__).resolve().parents[2]
OBJECTIVES = ("distill.softmax", "distill.hinton", "distill.token_kl", "distill.generalized_jsd",
              "distill.symmetric_kl", "distill.skew_kl", "distill.tvd", "lm.cross_entropy",
              "lm.linear_cross_entropy")
DTYPES = ("float64", "float32", "bfloat16", "float16")


def _run(args, interpret: bool, timeout: int):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run([sys.executable, *args], check=False, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_every_claimed_vector_passes_under_the_interpreter(tmp_path):
    report = tmp_path / "triton.json"
    done = _run(["-m", "lossproof", "check", "--backend", "triton", "--quiet", "--strict",
                 "--report-json", str(report)], interpret=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    results = json.loads(report.read_text())["cases"]
    checked = {(r["objective"], r["dtype"]) for r in results if r["status"] == "pass"}
    assert checked == {(o, d) for o in OBJECTIVES for d in DTYPES}
    assert all(r["status"] in ("pass", "rejected") for r in results), \
        sorted({(r["uid"], r["status"]) for r in results if r["status"] not in ("pass", "rejected")})[:5]


def test_kernel_edge_cases_under_the_interpreter():
    done = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider", str(Path(__file__).with_name("test_kernels.py"))],
                interpret=True, timeout=900)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
                    reason="TRITON_INTERPRET is set: the kernels are interpreted functions, not compilable")
def test_kernels_compile_for_a_gpu_without_one():
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from lossproof.refimpl.triton import _kernels

    target = GPUTarget("cuda", 90, 32)
    flags = {"token_kl_forward": {"FORWARD": True}, "token_kl_backward": {"FORWARD": False},
             "hinton_forward": {"SAME_T": False}, "skew_forward": {"FORWARD": True}, "skew_backward": {"FORWARD": False},
             "cross_entropy_forward": {"CAPPED": True}, "cross_entropy_backward": {"CAPPED": False}}
    for name in ("token_kl_forward", "token_kl_backward", "jsd_forward", "jsd_backward", "hinton_forward",
                 "hinton_backward", "softmax_forward", "softmax_backward", "selective_forward", "selective_backward",
                 "skew_forward", "skew_backward", "tvd_forward", "tvd_backward", "cross_entropy_forward",
                 "cross_entropy_backward"):
        kernel = getattr(_kernels, name)
        for io, acc, rows, block in (("bf16", tl.float32, 1, 4096), ("fp64", tl.float64, 4, 1024)):
            signature, constexprs = {}, {"ROWS": rows, "BLOCK": block, "ACC": acc, **flags.get(name, {})}
            # Per-row values, statistics, parameters and the per-row cotangent are in the
            # working dtype; logits, probabilities, gradients and softmax's cotangent in the inputs'.
            work = {"stats_ptr", "par_ptr", "value_ptr"} | (set() if name.startswith("softmax") else {"cot_ptr"})
            for arg in kernel.arg_names:
                if arg in constexprs:
                    signature[arg] = "constexpr"
                elif arg in ("N", "V"):
                    signature[arg] = "i32"
                elif arg == "y_ptr":
                    signature[arg] = "*i64"
                else:
                    signature[arg] = ("*fp64" if acc == tl.float64 else "*fp32") if arg in work else f"*{io}"
            compiled = triton.compile(ASTSource(kernel, signature=signature, constexprs=constexprs), target=target)
            assert "cubin" in compiled.asm, f"{name} ({io}) did not assemble"


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a CUDA device is present: the backend is available")
def test_unavailable_backend_is_a_one_line_usage_error():
    done = _run(["-m", "lossproof", "check", "--backend", "triton"], interpret=False, timeout=300)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = [line for line in (done.stderr + done.stdout).splitlines() if "triton" in line]
    assert len(lines) == 1 and "TRITON_INTERPRET=1" in lines[0] and "no CUDA device" in lines[0], done.stderr
