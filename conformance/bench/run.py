"""One ``lossproof bench`` run: every kernel × size × method in one process, then the exact side.

For each size [N,V] and kernel, each method (``methods``) runs forward + backward: first the
timings of every method (median and minimum of ``reps`` runs after a warm-up, ``timing``),
then, in a second phase, one more run of each for its peak additional memory (``memory``):
the peak above the start, less the gradient tensor itself (an output every method must
produce). ``peak_extra_fraction`` is that over the bytes of one logits tensor. Before the
memory phase glibc's mmap threshold is lowered to 64 KiB, so that every freed buffer leaves
the resident set at once (the timings run with the allocator's defaults).

Every figure is a ratio against a baseline measured in the same run: ``speedup_vs_naive`` and
``speedup_vs_best_library`` against the other methods at the same size, ``bandwidth_fraction``
against a copy of the same tensor. ``targets`` reports the project's CPU goals on them; none
is asserted.

A method whose estimated peak memory would not fit in the memory available is run on fewer
rows and its time and memory scaled up linearly (rows are independent), marked
``scaled_from_rows``.

torch is an optional dependency, imported inside the functions that need it.
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import platform
import re
import statistics
import time

from lossproof.conformance._host import usable_cores
from lossproof.conformance._io import write_atomically
from lossproof.conformance.bench import memory, timing
from lossproof.conformance.bench.exact import bench_exact
from lossproof.conformance.bench.methods import (
    COMPILED_KERNELS,
    DEFAULT_METHODS,
    HINTON,
    JSD_BETA,
    KERNELS,
    LIBRARIES,
    Runners,
    inputs,
)
from lossproof.conformance.errors import LossproofError, UsageError

QUICK = {"sizes": [(128, 32768), (128, 131072)], "reps": 2}
FULL = {"sizes": [(4096, 32768), (4096, 65536), (4096, 131072), (4096, 152064)], "reps": 3}
# Peak additional memory over one logits tensor, by method (and kernel), as measured here at
# small sizes (it grows linearly with N·V): only used to decide whether a size fits in memory,
# and replaced by each measurement as the run goes.
_PEAK_GUESS = {"lossproof": 0.1, "lossproof-tiles": 0.1, "lossproof-plain": 2.0, "naive": 5.5,
               "naive/generalized_jsd": 10.5, "trl": 3.5, "liger": 6.5, "liger/generalized_jsd": 14.5}


def _rows_that_fit(method, kernel, n, v, elem, guess, device) -> int:
    """Rows to run: all, unless the method's estimated peak would not fit in the available
    memory (inputs are already resident; it needs about guess·B more plus its gradient)."""
    budget = 0.7 * memory.available_bytes(device)
    g = guess.get(f"{method}/{kernel}", guess.get(method, 4.0))
    rows = n
    while rows > 64 and (g + 1.2) * rows * v * elem > budget:
        rows //= 2
    return rows


def _subset(z, t, y, rows):
    if rows == z.shape[0]:
        return z, t, y
    return z[:rows].detach().clone().requires_grad_(True), t[:rows].clone(), y[:rows].clone()


def _peak(fn, z, t, y, meter) -> int:
    """Peak additional memory of one forward + backward, less its gradient."""
    z.grad = None
    gc.collect()
    with meter.measure() as m:
        fn(z, t, y)
    grad_bytes = z.grad.numel() * z.grad.element_size() if z.grad is not None else 0
    z.grad = None
    return max(0, m["peak"] - grad_bytes)


def bench_size(kernel, n, v, methods, reps, runners, log, dtype_name="float32", copy=None, guess=None,
               device="cpu"):
    """Phase 1 at one size: the time of every method, and the copy's (``copy``: a copy timing
    already taken at this size, reused across kernels)."""
    import torch  # optional dependency
    dtype = getattr(torch, dtype_name)
    guess = dict(_PEAK_GUESS) if guess is None else guess
    elem = torch.finfo(dtype).bits // 8
    logits_bytes = n * v * elem
    rows = []
    z, t, y = inputs(n, v, dtype, device)
    copy_median, copy_min = copy if copy is not None else timing.time_copy(z, reps)
    copy_bw = timing.copy_bandwidth(logits_bytes, copy_median)
    for method in methods:
        row = {"kernel": kernel, "method": method, "n": n, "v": v, "dtype": dtype_name,
               "logits_bytes": logits_bytes}
        fn = runners.get(method, kernel, device)
        if isinstance(fn, str):
            row.update(available=False, reason=fn)
            rows.append(row)
            log(f"  {kernel:17s} {method:16s} N={n} V={v}: skipped ({fn})")
            continue
        rows_run = _rows_that_fit(method, kernel, n, v, elem, guess, device)
        zr, tr, yr = _subset(z, t, y, rows_run)
        try:
            times = timing.time_runs(fn, zr, tr, yr, reps)
        except Exception as err:  # a peer that breaks on this input is reported, not fatal
            row.update(available=False, reason=f"failed: {type(err).__name__}: {err}")
            rows.append(row)
            log(f"  {kernel:17s} {method:16s} N={n} V={v}: failed ({err})")
            continue
        finally:
            del zr, tr, yr
        scale = n / rows_run
        times = [x * scale for x in times]
        row.update(available=True, version=runners.version(method), rows_run=rows_run,
                   median_s=statistics.median(times), min_s=min(times), times_s=times)
        if rows_run < n:
            row["scaled_from_rows"] = rows_run
        row["bandwidth_gbs"] = 3 * logits_bytes / row["median_s"] / 1e9
        row["bandwidth_fraction"] = timing.bandwidth_fraction(logits_bytes, row["median_s"], copy_bw)
        rows.append(row)
        log(f"  {kernel:17s} {method:10s} N={n} V={v}: {row['median_s'] * 1e3:9.1f} ms (min {row['min_s'] * 1e3:.1f})  "
            f"{row['bandwidth_fraction']:.2f} of copy bandwidth" + (f"  [from {rows_run} rows]" if rows_run < n else ""))
    for r in rows:
        r["copy_median_s"], r["copy_min_s"], r["copy_bandwidth_gbs"] = copy_median, copy_min, copy_bw / 1e9
    naive = next((r for r in rows if r["method"] == "naive" and r.get("available")), None)
    libs = [r for r in rows if r["method"] in LIBRARIES and r.get("available")]
    for r in rows:
        if r.get("available") and naive:
            r["speedup_vs_naive"] = naive["median_s"] / r["median_s"]
        if r.get("available") and libs:
            r["speedup_vs_best_library"] = min(x["median_s"] for x in libs) / r["median_s"]
    del z, t, y
    gc.collect()
    return rows


def measure_memory(rows, runners, meter, log, guess, device="cpu"):
    """Phase 2: one more run of every measured row, for its peak additional memory (after the
    timings; the caller lowers glibc's mmap threshold first)."""
    import torch  # optional dependency
    measured = [r for r in rows if r.get("available")]
    if not meter.available:
        for r in measured:
            r["peak_extra_bytes"] = r["peak_extra_fraction"] = None
        log(f"  {meter.method}")
        return
    by_size = {}
    for r in measured:
        by_size.setdefault((r["n"], r["v"], r["dtype"]), []).append(r)
    for (n, v, dtype_name), rs in by_size.items():
        dtype = getattr(torch, dtype_name)
        elem = torch.finfo(dtype).bits // 8
        z, t, y = inputs(n, v, dtype, device)
        for r in rs:
            fn = runners.get(r["method"], r["kernel"], device)
            rows_run = r["rows_run"]
            zr, tr, yr = _subset(z, t, y, rows_run)
            try:
                peak = _peak(fn, zr, tr, yr, meter) * (n / rows_run)
            finally:
                del zr, tr, yr
            r["peak_extra_bytes"] = int(peak)
            r["peak_extra_fraction"] = peak / (n * v * elem)
            guess[f"{r['method']}/{r['kernel']}"] = max(r["peak_extra_fraction"] * 1.2, 0.05)
            log(f"  {r['kernel']:17s} {r['method']:10s} N={n} V={v}: peak +{peak / 2**20:9.1f} MiB "
                f"({r['peak_extra_fraction']:.3f} of one logits tensor)")
        del z, t, y
        gc.collect()


def machine() -> dict:
    import numpy as np
    import torch  # optional dependency
    cpu = platform.processor()
    with contextlib.suppress(OSError, AttributeError), open("/proc/cpuinfo") as f:  # Linux only
        cpu = re.search(r"model name\s*:\s*(.*)", f.read()).group(1)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cpu": cpu, "cores": usable_cores(), "memory_bytes": memory.total_bytes(),
            "torch_threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
            "platform": platform.platform(), "load_average": load,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def summarize(rows) -> dict:
    """The headline numbers: each kernel's fused row at the largest size measured, against
    the naive form and the libraries (reverse token KL's keys are ``token_kl_*``)."""
    s = {}
    for kernel in KERNELS:
        mine = [r for r in rows if r["kernel"] == kernel and r["method"] == "lossproof" and r.get("available")]
        if not mine:
            continue
        top = max(mine, key=lambda r: (r["n"] * r["v"], r["v"]))
        key = kernel.replace(".", "_").replace("token_kl_reverse", "token_kl")
        s[f"{key}_size"] = [top["n"], top["v"]]
        s[f"{key}_speedup_vs_naive"] = top.get("speedup_vs_naive")
        s[f"{key}_peak_extra_fraction"] = top.get("peak_extra_fraction")
        s[f"{key}_bandwidth_fraction"] = top["bandwidth_fraction"]
        s[f"{key}_speedup_vs_best_library"] = top.get("speedup_vs_best_library")
        tiles = next((r for r in rows if r["kernel"] == kernel and r["method"] == "lossproof-tiles"
                      and r.get("available") and (r["n"], r["v"]) == (top["n"], top["v"])), None)
        if tiles is not None:
            s[f"{key}_tiles_bandwidth_fraction"] = tiles["bandwidth_fraction"]
    return s


def compiled_kernel(device: str, log) -> dict:
    """The compiled CPU kernel's record (``refimpl.torch._compiled.status``, and ``kernels``: the
    kernels it runs), built or loaded here, before any timing: its first call's cost is
    reported, never part of a timed run."""
    if device != "cpu":
        return {"available": False, "reason": "the compiled kernel is for CPUs"}
    from lossproof.refimpl.torch import _compiled  # optional dependency: imports torch
    st = _compiled.status()
    if st["available"]:
        st["kernels"] = list(COMPILED_KERNELS)
        log(f"  compiled CPU kernel: {'loaded from the cache' if st['cached'] else 'built'} in {st['seconds']:.2f} s "
            f"({st.get('compiler', '')})")
    else:
        log(f"  compiled CPU kernel unavailable: {st['reason']}")
    return st


def targets(summary: dict) -> dict:
    """The project's CPU goals for reverse token KL (2× naive, ≤ 5 % extra memory, half the copy
    bandwidth), reported, never asserted."""
    sp, mem, bw = (summary.get("token_kl_speedup_vs_naive"), summary.get("token_kl_peak_extra_fraction"),
                   summary.get("token_kl_bandwidth_fraction"))
    return {"speedup_vs_naive>=2": None if sp is None else sp >= 2,
            "peak_extra_fraction<=0.05": None if mem is None else mem <= 0.05,
            "bandwidth_fraction>=0.5": None if bw is None else bw >= 0.5}


def run(quick: bool = False, sizes=None, kernels=None, methods=None, reps=None, exact: bool = True,
        dtype: str = "float32", log=print, lower_mmap_threshold: bool = True, device: str = "cpu") -> dict:
    """One benchmark run (see the module docstring). ``lower_mmap_threshold=False`` leaves the
    process's allocator alone (memory then less exact: for tests). ``device='cuda'``: the
    logits on the GPU, times synchronised, memory from the caching allocator's peak."""
    try:
        import torch  # optional dependency: every method measured is torch code
    except ModuleNotFoundError as err:
        raise LossproofError("lossproof bench measures torch code: install torch "
                             "(pip install 'lossproof[torch]')") from err
    if device != "cpu" and not device.startswith("cuda"):
        raise UsageError(f"--device {device}: cpu or cuda (the timings synchronise only with CUDA)")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {device}: no CUDA device on this machine (torch.cuda.is_available() is False)")
    if reps is not None and reps < 1:
        raise UsageError(f"--reps {reps}: at least one timed run per method")
    cfg = QUICK if quick else FULL
    sizes = sizes or cfg["sizes"]
    kernels = kernels or KERNELS
    methods = methods or DEFAULT_METHODS
    reps = reps or cfg["reps"]
    meter = memory.meter_for(device)
    runners = Runners(methods)
    log(f"lossproof bench ({'quick' if quick else 'full'}): {len(kernels)} kernels × {len(sizes)} sizes × "
        f"{len(methods)} methods, {dtype}, {device}, median of {reps} after a warm-up; memory: {meter.method}")
    for name, (ok, why) in runners.libraries.items():
        if name in methods:
            log(f"  {name}: {'version ' + why if ok else 'unavailable (' + why + ')'}")
    compiled = compiled_kernel(device, log)
    rows, guess = [], dict(_PEAK_GUESS)
    started = time.perf_counter()
    log("time (forward + backward):")
    for n, v in sizes:
        copy = None
        for kernel in kernels:
            rs = bench_size(kernel, n, v, methods, reps, runners, log, dtype, copy, guess, device)
            copy = (rs[0]["copy_median_s"], rs[0]["copy_min_s"]) if rs else None
            rows += rs
    log("peak additional memory:")
    mmap = memory.lower_mmap_threshold() if lower_mmap_threshold and not device.startswith("cuda") else False
    measure_memory(rows, runners, meter, log, guess, device)
    doc = {"machine": machine(), "command": "lossproof bench" + (" --quick" if quick else ""),
           "settings": {"quick": quick, "reps": reps, "dtype": dtype, "sizes": [list(s) for s in sizes],
                        "kernels": list(kernels), "methods": list(methods), "memory": meter.method,
                        "malloc_mmap_threshold_64k": mmap, "jsd_beta": JSD_BETA, "hinton": HINTON},
           "libraries": {k: {"available": ok, ("version" if ok else "reason"): why}
                         for k, (ok, why) in runners.libraries.items()},
           "device": device,
           "compiled": compiled,
           "gpu": (f"measured on {torch.cuda.get_device_name(device)}" if device.startswith("cuda")
                   else "not measured: no CUDA device" if not torch.cuda.is_available()
                   else "not measured by this run (--device cuda measures it)"),
           "rows": rows}
    doc["summary"] = summarize(rows)
    doc["summary"]["targets_cpu"] = targets(doc["summary"])
    if exact:
        log("exact side:")
        ex = bench_exact(quick, log)
        doc["exact"] = ex
        doc["summary"]["generate_seconds"] = ex.get("generate_seconds")
        doc["summary"]["generate_estimated"] = ex.get("generate_estimated")
        doc["summary"]["check_seconds_per_vector"] = ex["check"].get("seconds_per_vector")
        doc["summary"]["check_estimated_full_seconds"] = ex["check"].get("estimated_full_seconds")
    doc["seconds"] = time.perf_counter() - started
    return doc


def write_json(path, doc) -> None:
    write_atomically(path, (json.dumps(doc, indent=1, default=float) + "\n").encode())


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """``"4096x131072,1024x32768"`` -> [(4096, 131072), (1024, 32768)]; ValueError otherwise."""
    out = []
    for part in text.split(","):
        n, v = (int(x) for x in part.lower().split("x"))
        if n < 1 or v < 1:
            raise ValueError(f"{part}: N and V must be positive")
        out.append((n, v))
    return out
