"""Everything that needs a GPU, in one run that a short device session can start as it is:

    python benchmarks/gpu_parity.py --out DIR            # under 8 minutes on one H200
    python benchmarks/gpu_parity.py --out DIR --quick    # under 3 minutes
    python benchmarks/gpu_parity.py --out DIR --no-device --quick --cpu-sizes 64x4096   # CPU only

Stages, in order, each isolated (an error or a crash is recorded in the results and the next
stage runs), each in its own process with a time limit cut from the run's budget (a stage that
no longer fits is skipped with the reason):

1. ``environment``: Python, torch, CUDA, the device, CuPy, Triton, lossproof, the compiled CPU
   kernel's build.
2. ``tests``: pytest on the test modules marked ``cuda`` (the torch-CUDA tests, the fused path
   on CUDA, the Triton and CuPy tests where they exist): counts, failures, skip reasons.
3. ``check``: every vector on torch-CPU (the reference of the parity table), torch-CUDA, CuPy
   and Triton (``--backend triton``, when that backend is available), and Liger's Triton
   cross-entropy kernels (``--target liger --device cuda``, its lm objectives): each backend's verdicts
   against the exact values, and, per objective and dtype, the worst error/tolerance on each
   device and the largest |GPU − CPU| of any output or gradient in units in the last place of
   the dtype (at the CPU value).
4. ``bench``: ``lossproof bench --device cuda`` of the four kernels at N ∈ {4096, 16384},
   V ∈ {32768, 131072, 152064}, float32 and bfloat16, against naive torch, Liger and TRL where
   installed, each size with the same-run device copy bandwidth; the target size (N = 16384,
   V = 152064, bfloat16) first.

Writes DIR/gpu_parity.json (everything) and DIR/gpu_parity.md (the same as tables), and keeps
the stages' own outputs in DIR (pytest.xml, bench-*.json, check/*.pkl). Exit status 0 when
every stage that ran completed and no vector failed, else 1.

Without a CUDA device (or with ``--no-device``) the GPU parts are recorded as "no CUDA
device" and the CPU parts still run: the environment, the test modules (they skip, with that
reason), the torch-CPU check and a CPU bench at ``--cpu-sizes``: the whole script runs end to
end on any machine (tests/test_gpu_parity_script.py runs it so).
"""
from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import math
import os
import pickle
import platform
import signal
import subprocess
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from collections import defaultdict
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the checkout's lossproof, installed or not

BENCH_METHODS = ("lossproof", "naive", "trl", "liger")
TARGET_SIZE, TARGET_DTYPE = (16384, 152064), "bfloat16"  # the GPU target of the kernel work
FULL = {"budget": 450.0, "reps": 3, "dtypes": ("bfloat16", "float32"),
        "sizes": [TARGET_SIZE, (4096, 32768), (4096, 131072), (4096, 152064), (16384, 32768), (16384, 131072)]}
QUICK = {"budget": 170.0, "reps": 2, "dtypes": ("bfloat16", "float32"),
         "sizes": [TARGET_SIZE, (4096, 131072)]}
# Each stage's share of the budget at most (what is left over goes to the later stages).
SHARES = {"environment": 0.05, "tests": 0.25, "check": 0.35, "bench": 1.0}
NO_DEVICE = "no CUDA device"
# Units in the last place: significand bits and the smallest normal exponent of each dtype.
PRECISION = {"float64": (53, -1022), "float32": (24, -126), "bfloat16": (8, -126), "float16": (11, -14)}


# --------------------------------------------------------------------------------------------
# Running stages within the budget
# --------------------------------------------------------------------------------------------

class Budget:
    def __init__(self, seconds: float):
        self.seconds, self.start = seconds, time.perf_counter()

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.start)


def _subprocess(cmd: list[str], timeout: float, log_path: Path | None = None) -> dict:
    """Run ``cmd`` from the checkout's root with the checkout on PYTHONPATH; never raises. At the
    time limit the child is interrupted (SIGINT: pytest then still writes its report of the
    tests run so far), and killed if it has not stopped 15 s later."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    out = {}
    try:
        child = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as err:
        return {"returncode": None, "seconds": 0.0, "error": f"could not start: {err}"}
    try:
        text, _ = child.communicate(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        out["error"] = f"stopped at its time limit ({timeout:.0f} s)"
        child.send_signal(signal.SIGINT)
        try:
            text, _ = child.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            child.kill()
            text, _ = child.communicate()
    out.update(returncode=child.returncode, seconds=time.perf_counter() - start)
    if log_path is not None:
        log_path.write_text(text or "")
    out["tail"] = (text or "").strip().splitlines()[-5:]
    return out


def _why(run: dict) -> str:
    """Why a child process did not deliver: its time limit, or its exit status and last line."""
    if run.get("error"):
        return run["error"]
    last = run.get("tail") or [""]
    return f"exited {run['returncode']}: {last[-1][:200]}" if last[-1] else f"exited {run['returncode']}"


def _stage(name: str, fn, budget: Budget, log) -> dict:
    """Run one stage with its share of what is left; record its outcome, never raise."""
    left = budget.left()
    limit = SHARES[name] * budget.seconds if name != "bench" else left
    limit = min(limit, left)
    if limit < 5:
        log(f"[{name}] skipped: time budget exhausted ({left:.0f} s left)")
        return {"status": "skipped", "reason": f"time budget exhausted ({left:.0f} s left of {budget.seconds:.0f} s)"}
    log(f"[{name}] up to {limit:.0f} s")
    start = time.perf_counter()
    try:
        out = fn(limit)
        out.setdefault("status", "ok")
    except Exception as err:  # a stage's failure is a result, not the end of the run
        out = {"status": "error", "error": f"{type(err).__name__}: {err}",
               "traceback": traceback.format_exc().splitlines()[-6:]}
    out["seconds"] = time.perf_counter() - start
    log(f"[{name}] {out['status']} in {out['seconds']:.1f} s" + (f": {out.get('error') or out.get('reason')}"
                                                                  if out["status"] != "ok" else ""))
    return out


# --------------------------------------------------------------------------------------------
# Stage 1: environment
# --------------------------------------------------------------------------------------------

def _version(module: str, distribution: str | None = None) -> str:
    """The installed version, or why the module does not import."""
    try:
        mod = __import__(module)
    except Exception as err:  # any import failure: not available here
        return f"not available ({type(err).__name__}: {str(err)[:120]})"
    try:
        return metadata.version(distribution or module)
    except metadata.PackageNotFoundError:
        return getattr(mod, "__version__", "?")


def cuda_device(no_device: bool) -> tuple[bool, str]:
    """(whether the GPU parts run, the reason when they do not)."""
    if no_device:
        return False, f"{NO_DEVICE} (--no-device)"
    try:
        import torch
    except ImportError:
        return False, f"{NO_DEVICE} (torch is not installed)"
    if not torch.cuda.is_available():
        return False, f"{NO_DEVICE} (torch.cuda.is_available() is False)"
    return True, ""


def environment(limit: float, gpu: bool) -> dict:
    from lossproof import conformance
    env = {"python": platform.python_version(), "platform": platform.platform(), "lossproof": conformance.__version__,
           "torch": _version("torch"), "numpy": _version("numpy"), "cupy": _version("cupy"),
           "triton": _version("triton"), "trl": _version("trl"), "liger_kernel": _version("liger_kernel", "liger-kernel"),
           "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    try:
        import torch
        env["torch_cuda_build"] = torch.version.cuda
        env["cuda_available"] = torch.cuda.is_available()
        if gpu:
            props = torch.cuda.get_device_properties(0)
            env["device"] = {"name": props.name, "capability": f"{props.major}.{props.minor}",
                             "memory_bytes": props.total_memory, "multiprocessors": props.multi_processor_count,
                             "count": torch.cuda.device_count()}
        from lossproof.refimpl.torch import _compiled
        env["compiled_cpu_kernel"] = _compiled.status()
    except Exception as err:  # recorded: the other stages say what they can do without it
        env["torch_error"] = f"{type(err).__name__}: {err}"
    try:
        env["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                            "--format=csv,noheader"], capture_output=True, text=True,
                                           timeout=min(20, limit), check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError) as err:
        env["nvidia_smi"] = f"not available ({type(err).__name__})"
    return env


# --------------------------------------------------------------------------------------------
# Stage 2: the CUDA and CuPy test modules
# --------------------------------------------------------------------------------------------

def cuda_test_files() -> list[str]:
    """Test modules that hold tests marked ``cuda`` or that exercise CuPy or Triton."""
    files = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "mark.cuda" in text or "import cupy" in text or "lossproof.refimpl.triton" in text:
            files.append(str(path.relative_to(ROOT)))
    return files


def _collection_skip_reason(text: str) -> str:
    """The reason of a module skipped at collection, from the JUnit text pytest writes for it:
    the repr of ('file', line, 'Skipped: why')."""
    try:
        where = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return ""
    if isinstance(where, tuple) and len(where) == 3 and isinstance(where[2], str):
        return where[2].removeprefix("Skipped: ").strip()
    return ""


def junit_counts(path: Path) -> dict:
    """Counts, failures and skip reasons from a pytest JUnit XML file."""
    root = ET.parse(path).getroot()
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    failures, skips = [], defaultdict(int)
    for case in root.iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        if "failure" in kinds or "error" in kinds:
            counts["failed" if "failure" in kinds else "error"] += 1
            bad = case.find("failure") if "failure" in kinds else case.find("error")
            failures.append(f"{name}: {(bad.get('message') or '')[:200]}")
        elif "skipped" in kinds:
            counts["skipped"] += 1
            skipped = case.find("skipped")
            reason = skipped.get("message") or ""
            if reason == "collection skipped":   # a module-level skip: its reason is in the text,
                reason = _collection_skip_reason(skipped.text or "") or reason   # ('file', line, 'Skipped: why')
            skips[reason[:160]] += 1
        else:
            counts["passed"] += 1
    return {"counts": counts, "failures": failures[:50], "skip_reasons": dict(skips)}


def tests(limit: float, out: Path, gpu: bool) -> dict:
    files = cuda_test_files()
    xml = out / "pytest.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider", f"--junitxml={xml}", *files]
    run = _subprocess(cmd, limit - 2, out / "pytest.log")
    result = {"files": files, "command": " ".join(cmd[1:]), **run}
    if xml.is_file():
        result.update(junit_counts(xml))
    if run.get("error"):
        result["status"] = "error"
    elif result.get("counts", {}).get("failed") or result.get("counts", {}).get("error"):
        result["status"] = "failed"
    elif run["returncode"] not in (0, 5):  # 5: nothing collected
        result["status"] = "error"
        result["error"] = f"pytest exited {run['returncode']}"
    if not gpu:
        result["note"] = f"{NO_DEVICE}: the CUDA tests skip, with that reason"
    return result


# --------------------------------------------------------------------------------------------
# Stage 3: every vector on each backend, and the CPU/GPU parity table
# --------------------------------------------------------------------------------------------

def check_worker(backend: str, device: str, objective: str, path: Path) -> int:
    """In a child process: every selected vector (``objective``: globs joined by commas) on one
    backend or third-party adapter and device; writes the verdicts
    and every output and gradient the harness compared (numpy, float64) to ``path``."""
    from lossproof.conformance import harness
    from lossproof.conformance.targets import builtin, load
    from lossproof.conformance.vectors.load import VectorSet

    outputs = {}

    def record(res, label, got):
        # The harness shows every output and gradient it compares, as a numpy array: kept
        # here, keyed by vector, dtype and output, for the CPU/GPU differences.
        outputs[(res.uid, res.dtype, label)] = (str(res.objective), got.astype("float64", copy=True))

    target = builtin.load(backend) if backend in builtin.BUILTINS else load(backend)  # a built-in, or a peer
    start = time.perf_counter()
    results = harness.run(target, VectorSet(), objective=objective.split(","), device=device, observe=record)
    seconds = time.perf_counter() - start
    verdicts = [{"uid": r.uid, "objective": r.objective, "dtype": r.dtype, "status": r.status, "axis": r.axis,
                 "message": r.message[:300], "err_over_tol": max((m["err_over_tol"] for m in r.outputs.values()),
                                                                 default=None)} for r in results]
    with open(path, "wb") as f:
        pickle.dump({"backend": backend, "device": device, "seconds": seconds, "verdicts": verdicts,
                     "outputs": outputs}, f)
    return 0


def _available(backend: str) -> tuple[bool, str]:
    """Whether a built-in backend loads here, and why not."""
    try:
        from lossproof.conformance.targets import builtin
        if backend not in builtin.BUILTINS:
            return False, f"not available: no built-in backend {backend!r} in this version"
        builtin.load(backend)
    except Exception as err:  # TargetError with the reason, or an import failure
        return False, f"not available: {err}"
    return True, ""


def _peer_available(name: str) -> tuple[bool, str]:
    """Whether a third-party adapter (``--target NAME``) loads here, and why not."""
    try:
        from lossproof.conformance.targets import load
        load(name)
    except Exception as err:  # TargetError with the install line, or an import failure
        return False, f"not available: {err}"
    return True, ""


def ulps(gpu, cpu, dtype: str) -> float:
    """Largest |gpu − cpu| in units in the last place of ``dtype`` at the CPU value (inf where
    one is finite and the other not, or the shapes differ)."""
    import numpy as np
    g, c = np.asarray(gpu, dtype=np.float64), np.asarray(cpu, dtype=np.float64)
    if g.shape != c.shape:
        return math.inf
    same = (g == c) | (np.isnan(g) & np.isnan(c))
    if same.all():
        return 0.0
    if not (np.isfinite(g[~same]).all() and np.isfinite(c[~same]).all()):
        return math.inf
    p, emin = PRECISION[dtype]
    with np.errstate(divide="ignore"):
        e = np.maximum(np.floor(np.log2(np.abs(c[~same]))), emin)
    return float(np.max(np.abs(g[~same] - c[~same]) / np.exp2(e - (p - 1))))


def parity_table(reference: dict, runs: dict[str, dict]) -> list[dict]:
    """Per objective and dtype: vectors, the worst error/tolerance on the CPU and on each GPU
    backend, and each GPU backend's largest |GPU − CPU| in ulps over every output and gradient
    of the vectors both judged."""
    cells: dict = {}

    def cell(objective, dtype):
        return cells.setdefault((objective, dtype), {"objective": objective, "dtype": dtype, "vectors": 0,
                                                     "cpu_err_over_tol": 0.0, "cpu_failed": 0, "gpu": {}})

    for v in reference["verdicts"]:
        if v["dtype"] == "-":
            continue
        c = cell(v["objective"], v["dtype"])
        c["vectors"] += 1
        c["cpu_err_over_tol"] = max(c["cpu_err_over_tol"], v["err_over_tol"] or 0.0)
        c["cpu_failed"] += v["status"] in ("fail", "error")
    for name, run in runs.items():
        for v in run["verdicts"]:
            if v["dtype"] == "-":
                continue
            g = cell(v["objective"], v["dtype"])["gpu"].setdefault(name, {"err_over_tol": 0.0, "failed": 0,
                                                                          "max_ulps_vs_cpu": 0.0, "compared": 0})
            g["err_over_tol"] = max(g["err_over_tol"], v["err_over_tol"] or 0.0)
            g["failed"] += v["status"] in ("fail", "error")
        for key, (objective, got) in run["outputs"].items():
            ref = reference["outputs"].get(key)
            if ref is None:
                continue
            g = cell(objective, key[1])["gpu"].setdefault(name, {"err_over_tol": 0.0, "failed": 0,
                                                                 "max_ulps_vs_cpu": 0.0, "compared": 0})
            g["max_ulps_vs_cpu"] = max(g["max_ulps_vs_cpu"], ulps(got, ref[1], key[1]))
            g["compared"] += 1
    return [cells[k] for k in sorted(cells)]


def _verdict_counts(run: dict) -> dict:
    counts = defaultdict(int)
    for v in run["verdicts"]:
        counts[f"{v['axis']}:{v['status']}"] += 1
    return dict(counts)


def check(limit: float, out: Path, gpu: bool, why_not: str, objective: str, log) -> dict:
    budget = Budget(limit)
    folder = out / "check"
    folder.mkdir(exist_ok=True)
    plan = [("torch", "cpu", "torch-cpu", objective)]
    backends = {}
    for backend, name in (("torch", "torch-cuda"), ("cupy", "cupy-cuda"), ("triton", "triton-cuda")):
        if not gpu:
            backends[name] = {"status": "skipped", "reason": why_not}
            continue
        ok, why = _available(backend)
        if ok:
            plan.append((backend, "cuda", name, objective))
        else:
            backends[name] = {"status": "skipped", "reason": why}
    # Liger's Triton cross-entropy kernels through the liger adapter (on CPU they run only under Triton's
    # interpreter): its lm objectives, against their findings, and in the parity table.
    if not gpu:
        backends["liger-cuda"] = {"status": "skipped", "reason": why_not}
    else:
        from lossproof.conformance.targets.peers import liger as liger_adapter
        kernels = [o for o in liger_adapter.TRITON_ONLY if fnmatch.fnmatchcase(o, objective)]
        ok, why = _peer_available("liger") if kernels else (False, "no Liger Triton-kernel objective selected")
        if ok:
            plan.append(("liger", "cuda", "liger-cuda", ",".join(kernels)))
        else:
            backends["liger-cuda"] = {"status": "skipped", "reason": why}
    runs = {}
    for i, (backend, device, name, selected) in enumerate(plan):
        left = budget.left()
        share = left / (len(plan) - i)  # what is left, shared by the backends still to run
        if share < 5:
            backends[name] = {"status": "skipped", "reason": f"time budget exhausted ({left:.0f} s left)"}
            continue
        path = folder / f"{name}.pkl"
        log(f"  check {name} (up to {share:.0f} s)")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker-check", backend, "--device", device,
               "--objective", selected, "--out", str(path)]
        run = _subprocess(cmd, share, folder / f"{name}.log")
        if run.get("error") or run["returncode"] != 0 or not path.is_file():
            backends[name] = {"status": "error", "error": _why(run), "tail": run.get("tail"), "seconds": run["seconds"]}
            continue
        with open(path, "rb") as f:
            runs[name] = pickle.load(f)
        counts = _verdict_counts(runs[name])
        failed = counts.get("conformance:fail", 0) + counts.get("conformance:error", 0)
        backends[name] = {"status": "failed" if failed else "ok", "seconds": runs[name]["seconds"],
                          "verdicts": counts, "vectors": len(runs[name]["verdicts"]),
                          "failures": [f"{v['uid']} {v['dtype']}: {v['status']} {v['message']}"
                                       for v in runs[name]["verdicts"]
                                       if v["axis"] == "conformance" and v["status"] in ("fail", "error")][:30]}
    result = {"objective": objective, "backends": backends}
    if "torch-cpu" in runs:
        result["parity"] = parity_table(runs["torch-cpu"], {k: v for k, v in runs.items() if k != "torch-cpu"})
    bad = [n for n, b in backends.items() if b["status"] in ("error", "failed")]
    if bad:
        result["status"], result["error"] = "failed", f"not clean on {', '.join(bad)}"
    return result


# --------------------------------------------------------------------------------------------
# Stage 4: the benchmarks
# --------------------------------------------------------------------------------------------

def _bench_plan(sizes, dtypes, gpu: bool, cpu_sizes) -> list[tuple[str, str, list]]:
    """(device, dtype, sizes) of each ``lossproof bench`` process: on a GPU the target size alone
    first, then one process per dtype for the other sizes (each process pays for importing
    torch, TRL and Liger: a few per run, not one per size)."""
    if not gpu:
        return [("cpu", "float32", list(cpu_sizes))]
    plan = []
    if TARGET_SIZE in sizes and TARGET_DTYPE in dtypes:
        plan.append(("cuda", TARGET_DTYPE, [TARGET_SIZE]))
    for d in dtypes:
        rest = [s for s in sizes if (s, d) != (TARGET_SIZE, TARGET_DTYPE)]
        if rest:
            plan.append(("cuda", d, rest))
    return plan


def bench(limit: float, out: Path, gpu: bool, why_not: str, cfg: dict, cpu_sizes, log) -> dict:
    budget = Budget(limit)
    runs = []
    for i, (device, dtype, sizes) in enumerate(plan := _bench_plan(cfg["sizes"], cfg["dtypes"], gpu, cpu_sizes)):
        left = budget.left()
        if left < 10:
            runs += [{"device": d, "dtype": t, "sizes": [list(x) for x in ss], "status": "skipped",
                      "reason": f"time budget exhausted ({left:.0f} s left)"} for d, t, ss in plan[i:]]
            break
        label = ",".join(f"{n}x{v}" for n, v in sizes)
        path = out / f"bench-{device}-{dtype}-{label.replace(',', '_')}.json"
        cmd = [sys.executable, "-m", "lossproof", "bench", "--device", device, "--dtype", dtype,
               "--sizes", label, "--reps", str(cfg["reps"]), "--no-exact", "--json", str(path)]
        for m in cfg["methods"] + (["lossproof-tiles"] if device == "cpu" else []):
            cmd += ["--method", m]
        log(f"  bench {device} {dtype} {label} (up to {left:.0f} s)")
        run = _subprocess(cmd, left, path.with_suffix(".log"))
        entry = {"device": device, "dtype": dtype, "sizes": [list(x) for x in sizes],
                 "command": "lossproof " + " ".join(cmd[3:]), "seconds": run["seconds"]}
        if run.get("error") or run["returncode"] != 0 or not path.is_file():
            entry.update(status="error", error=_why(run), tail=run.get("tail"))
        else:
            doc = json.loads(path.read_text())
            entry.update(status="ok", rows=doc["rows"], summary=doc["summary"], compiled=doc.get("compiled"),
                         gpu=doc.get("gpu"))
        runs.append(entry)
    result = {"runs": runs, "methods": list(cfg["methods"])}
    if not gpu:
        result["gpu"] = {"status": "skipped", "reason": why_not}
    bad = [r for r in runs if r["status"] == "error"]
    if bad:
        result["status"], result["error"] = "failed", f"{len(bad)} of {len(runs)} bench runs failed"
    return result


# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------

def _num(x, fmt=".3g") -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return format(x, fmt)


def markdown(doc: dict) -> str:
    lines = ["# GPU parity and benchmarks", "",
             f"Run of `{doc['command']}` ({doc['mode']}), {doc['seconds']:.0f} s of a {doc['budget_s']:.0f} s budget.",
             ""]
    gpu = doc["gpu"]
    lines.append(f"GPU: {gpu['name'] if gpu['available'] else gpu['reason']}.")
    lines += ["", "## Stages", "", "| stage | status | seconds | note |", "|---|---|---:|---|"]
    for name, st in doc["stages"].items():
        note = st.get("error") or st.get("reason") or st.get("note") or ""
        lines.append(f"| {name} | {st['status']} | {_num(st.get('seconds'), '.1f')} | {str(note)[:160]} |")
    env = doc["stages"].get("environment", {})
    if env.get("status") == "ok":
        keys = ("python", "torch", "torch_cuda_build", "cupy", "triton", "trl", "liger_kernel", "lossproof")
        lines += ["", "## Environment", ""] + [f"- {k}: {env.get(k)}" for k in keys if k in env]
        if env.get("device"):
            d = env["device"]
            lines.append(f"- device: {d['name']} (compute capability {d['capability']}, "
                         f"{d['memory_bytes'] / 2**30:.0f} GiB, {d['multiprocessors']} SMs)")
    t = doc["stages"].get("tests", {})
    if t.get("counts"):
        c = t["counts"]
        lines += ["", "## Test modules (pytest -m cuda)", "",
                  (f"{c['passed']} passed, {c['failed']} failed, {c['error']} errors, {c['skipped']} skipped "
                   f"({', '.join(t['files'])}).")]
        lines += [f"- skipped {n}×: {reason}" for reason, n in t.get("skip_reasons", {}).items()]
        lines += [f"- FAILED {f}" for f in t.get("failures", [])]
    chk = doc["stages"].get("check", {})
    if chk.get("backends"):
        lines += ["", "## lossproof check", "", "| backend | status | vectors | seconds | verdicts / reason |",
                  "|---|---|---:|---:|---|"]
        for name, b in chk["backends"].items():
            what = (", ".join(f"{k} {v}" for k, v in sorted(b.get("verdicts", {}).items()))
                    or b.get("reason") or b.get("error") or "")
            lines.append(f"| {name} | {b['status']} | {b.get('vectors', '—')} | {_num(b.get('seconds'), '.1f')} | "
                         f"{what} |")
    if chk.get("parity"):
        gpus = sorted({g for row in chk["parity"] for g in row["gpu"]})
        head = "| objective | dtype | vectors | CPU worst err/tol |"
        rule = "|---|---|---:|---:|"
        for g in gpus:
            head += f" {g} worst err/tol | {g} max \\|GPU − CPU\\| (ulp) |"
            rule += "---:|---:|"
        lines += ["", "## CPU/GPU parity", "",
                  ("Worst error/tolerance against the exact values on each device (≤ 1 passes), and the largest "
                   "difference between the GPU's and the CPU's output or gradient, in units in the last place of "
                   "the dtype at the CPU value."), "", head, rule]
        for row in chk["parity"]:
            line = f"| {row['objective']} | {row['dtype']} | {row['vectors']} | {_num(row['cpu_err_over_tol'])} |"
            for g in gpus:
                cell = row["gpu"].get(g)
                line += (f" {_num(cell['err_over_tol'])} | {_num(cell['max_ulps_vs_cpu'])} |" if cell else " — | — |")
            lines.append(line)
        if not gpus:
            lines += ["", f"No GPU column: {doc['gpu'].get('reason') or 'no GPU backend ran'}."]
    b = doc["stages"].get("bench", {})
    if b.get("runs"):
        lines += ["", "## lossproof bench", "", ("Forward + backward, median; \"of copy\" is 3·B/time over the "
                                                 "bandwidth of a same-run copy of one logits tensor (B bytes) on "
                                                 "the same device."), "",
                  "| device | dtype | N × V | kernel | method | median | of copy | vs best library | copy GB/s |",
                  "|---|---|---|---|---|---:|---:|---:|---:|"]
        for run in b["runs"]:
            if run["status"] != "ok":
                sizes = ", ".join(f"{n} × {v}" for n, v in run["sizes"])
                lines.append(f"| {run['device']} | {run['dtype']} | {sizes} | | | {run['status']}: "
                             f"{run.get('reason') or run.get('error')} | | | |")
                continue
            for r in run["rows"]:
                n, v = r["n"], r["v"]
                if not r.get("available"):
                    lines.append(f"| {run['device']} | {r['dtype']} | {n} × {v} | {r['kernel']} | {r['method']} | "
                                 f"n/a: {r.get('reason', '')[:80]} | | | |")
                    continue
                lines.append(f"| {run['device']} | {r['dtype']} | {n} × {v} | {r['kernel']} | {r['method']} | "
                             f"{r['median_s'] * 1e3:.2f} ms | {r['bandwidth_fraction']:.2f} | "
                             f"{_num(r.get('speedup_vs_best_library'), '.2f')} | {r['copy_bandwidth_gbs']:.3g} |")
        if b.get("gpu"):
            lines += ["", f"GPU bench: {b['gpu']['reason']}."]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------

def _sizes(text: str) -> list[tuple[int, int]]:
    from lossproof.conformance.bench.run import parse_sizes
    return parse_sizes(text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="benchmarks/results/gpu", help="output folder (default benchmarks/results/gpu)")
    p.add_argument("--quick", action="store_true", help="fewer sizes, a 170 s budget (under 3 minutes)")
    p.add_argument("--budget", type=float, help="seconds for the whole run (default 450; 170 with --quick)")
    p.add_argument("--no-device", action="store_true", help="run as if no CUDA device were present (CPU parts only)")
    p.add_argument("--sizes", help="GPU bench sizes NxV,... (default by --quick)")
    p.add_argument("--cpu-sizes", default="1024x32768", help="CPU bench sizes when no GPU runs (default 1024x32768)")
    p.add_argument("--objective", default="*", help="vectors checked: an objective glob (default every vector)")
    p.add_argument("--bench-method", action="append", choices=BENCH_METHODS,
                   help=f"methods benchmarked (repeatable; default {', '.join(BENCH_METHODS)})")
    p.add_argument("--stage", action="append", choices=list(SHARES), help="only this stage (repeatable)")
    p.add_argument("--worker-check", metavar="BACKEND", help=argparse.SUPPRESS)
    p.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker_check:
        return check_worker(args.worker_check, args.device, args.objective, Path(args.out))

    cfg = dict(QUICK if args.quick else FULL)
    cfg["methods"] = list(args.bench_method or BENCH_METHODS)
    try:
        if args.sizes:
            cfg["sizes"] = _sizes(args.sizes)
        cpu_sizes = _sizes(args.cpu_sizes)
    except ValueError as err:
        print(f"gpu_parity: --sizes/--cpu-sizes: {err} (expected NxV[,NxV...])", file=sys.stderr)
        return 2
    budget = Budget(args.budget or cfg["budget"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def log(msg):
        print(msg, flush=True)

    gpu, why_not = cuda_device(args.no_device)
    log(f"gpu_parity: {'GPU' if gpu else why_not}; budget {budget.seconds:.0f} s; writing to {out}")
    chosen = args.stage or list(SHARES)
    runners = {"environment": lambda limit: environment(limit, gpu),
               "tests": lambda limit: tests(limit, out, gpu),
               "check": lambda limit: check(limit, out, gpu, why_not, args.objective, log),
               "bench": lambda limit: bench(limit, out, gpu, why_not, cfg, cpu_sizes, log)}
    stages = {}
    for name in SHARES:
        stages[name] = (_stage(name, runners[name], budget, log) if name in chosen
                        else {"status": "skipped", "reason": "not selected (--stage)"})
    gpu_info = {"available": gpu, "reason": why_not}
    if gpu:
        gpu_info["name"] = stages["environment"].get("device", {}).get("name", "?")
    doc = {"format": "lossproof-gpu-parity/1", "command": "python benchmarks/gpu_parity.py " + " ".join(argv or sys.argv[1:]),
           "mode": "quick" if args.quick else "full", "budget_s": budget.seconds,
           "seconds": budget.seconds - budget.left(), "gpu": gpu_info,
           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - (budget.seconds - budget.left()))),
           "stages": stages}
    (out / "gpu_parity.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    (out / "gpu_parity.md").write_text(markdown(doc))
    log(f"gpu_parity: wrote {out / 'gpu_parity.json'} and {out / 'gpu_parity.md'} in {doc['seconds']:.0f} s")
    bad = [n for n, s in stages.items() if s["status"] in ("error", "failed")]
    if bad:
        log(f"gpu_parity: {', '.join(bad)} did not complete cleanly (see the files)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
