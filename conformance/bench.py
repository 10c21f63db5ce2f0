"""Side-by-side benchmarks of the distillation objectives, and timings of the exact side.

``lossproof bench [--quick] [--json PATH]`` (and ``benchmarks/bench_distill.py``). For each
kernel and size [N,V], in one process and one run, forward + backward of:

- ``lossproof``: ``refimpl.torch.distill`` (the fused, vocabulary-tiled path);
- ``lossproof-plain``: the same objectives on the plain path (``distill.FUSED = False``);
- ``naive``: two ``log_softmax``, ``exp``, multiply, sum, then autograd (the textbook form);
- ``trl``: TRL 1.16's ``ChunkedDivergenceFunction`` (online log-sum-exp over [4096, 32768]
  tiles; the torch path, as on a CPU), fed logits: its projection ``_project`` is replaced by
  a copy of the logits' columns and its gradient accumulation ``_addmm_fp32`` by an addition
  into those columns, so the rest of its forward and backward runs as shipped;
- ``liger``: Liger-Kernel 0.8.5's chunked JSD (``LigerFusedLinearJSDFunction``, β = 0 / 1 for
  the forward / reverse KL): its per-chunk loss ``distillation_loss_fn`` differentiated with
  ``torch.func.grad_and_value`` over 1024-row chunks and the chunk gradients concatenated, as
  ``LigerFusedLinearDistillationBase.forward`` does without the projection (compiled=False).

A library that cannot be imported is reported as unavailable (reason in the JSON), never
fatal; Hinton's loss exists in neither library.

Measured per method: the median (and the minimum) of ``reps`` timed runs after one warm-up,
and the peak additional memory: the process's peak resident set (``VmHWM``, reset before each
run by writing 5 to ``/proc/self/clear_refs``; where that is refused, ``/proc/self/statm``
sampled every millisecond by a thread) minus the resident set before the run, minus the
gradient tensor itself (an output every method must produce). glibc's mmap threshold is set
to 64 KiB so that every freed buffer leaves the resident set at once (else a method could
reuse pages another one left behind, unseen). ``peak_extra_fraction`` is that over the bytes
of one logits tensor.

Bandwidth: a forward + backward must read both logits and write the gradient, 3·B bytes
(B = one logits tensor). ``bandwidth_fraction`` is 3·B / time over the bandwidth of a copy of
one logits tensor into a preallocated one in the same run (2·B / its time): the fraction of
the memory-bandwidth limit reached.

A method whose estimated peak memory would not fit in the machine's available memory is run
on fewer rows and its time and memory scaled up linearly (rows are independent), marked
``scaled_from_rows``.

The exact side (``exact`` in the JSON): the time to build each family's vectors with the exact
reference (all of them, or with --quick a sample of cases per family and the total
extrapolated), and of a ``lossproof check`` of the torch backend over growing fractions of the
vector set (seconds per vector: how the check grows with the number of vectors).
"""
from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import math
import os
import platform
import re
import statistics
import sys
import threading
import time
from pathlib import Path

KERNELS = ("token_kl.reverse", "token_kl.forward", "generalized_jsd", "hinton")
METHODS = ("lossproof", "lossproof-plain", "naive", "trl", "liger")
DEFAULT_METHODS = ("lossproof", "naive", "trl", "liger")  # the plain path only on request
# β of the JSD rows; Hinton at T = 2, α = 0.5 (the soft term times T²).
JSD_BETA = 0.5
HINTON = {"temperature": 2.0, "alpha": 0.5}

QUICK = {"sizes": [(128, 32768), (128, 131072)], "reps": 2}
FULL = {"sizes": [(4096, 32768), (4096, 65536), (4096, 131072), (4096, 152064)], "reps": 3}
# Peak additional memory over one logits tensor, by method (and kernel), as measured here at
# small sizes (it grows linearly with N·V): only used to decide whether a size fits in memory.
_PEAK_GUESS = {"lossproof": 0.1, "lossproof-plain": 2.0, "naive": 5.5, "naive/generalized_jsd": 10.5,
               "trl": 3.5, "liger": 6.5, "liger/generalized_jsd": 14.5}


# ----------------------------------------------------------------------------- memory

_HWM = re.compile(r"VmHWM:\s+(\d+) kB")
_RSS = re.compile(r"VmRSS:\s+(\d+) kB")


def _status(pattern) -> int:
    with open("/proc/self/status") as f:
        return int(pattern.search(f.read()).group(1)) * 1024


def _can_reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakMeter:
    """Peak resident set of this process during a ``with`` block, in bytes above its start."""

    def __init__(self):
        self.hwm = os.path.exists("/proc/self/status") and _can_reset_hwm()
        self.method = ("VmHWM reset through /proc/self/clear_refs" if self.hwm
                       else "/proc/self/statm sampled every 1 ms")

    @contextlib.contextmanager
    def measure(self):
        result = {}
        gc.collect()
        _trim()  # else freeing during the run could trim pages counted in the baseline
        start = _rss_bytes()
        if self.hwm:
            _can_reset_hwm()
            yield result
            result["peak"] = max(0, _status(_HWM) - start)
            return
        peak = [start]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], _rss_bytes())
                time.sleep(0.001)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        try:
            yield result
        finally:
            stop.set()
            th.join()
            result["peak"] = max(0, max(peak[0], _rss_bytes()) - start)


def _trim() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _mmap_threshold(nbytes: int = 1 << 16) -> bool:
    """glibc: serve every allocation of ≥ nbytes with mmap (returned to the system on free)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-3, nbytes)) and bool(libc.mallopt(-1, nbytes))  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        return False


DEVICE = "cpu"  # where run() puts the logits ("cuda": CUDA events of the caching allocator for memory)


def _cuda() -> bool:
    return DEVICE.startswith("cuda")


def _sync() -> None:
    if _cuda():
        import torch
        torch.cuda.synchronize()


def _available_bytes() -> int:
    if _cuda():
        import torch
        return torch.cuda.mem_get_info()[0]
    try:
        with open("/proc/meminfo") as f:
            return int(re.search(r"MemAvailable:\s+(\d+) kB", f.read()).group(1)) * 1024
    except (OSError, AttributeError):
        return 8 << 30


# ----------------------------------------------------------------------------- methods

def _peers(methods=("trl", "liger")):
    """{name: (available, reason or version)} for the peer libraries among ``methods`` (TRL's
    import brings transformers: seconds)."""
    out = {"trl": (False, "not requested"), "liger": (False, "not requested")}
    if "trl" in methods:
        out.update(_import_trl())
    if "liger" in methods:
        out.update(_import_liger())
    return out


def _import_trl():
    out = {}
    try:
        import trl  # noqa: F401
        import trl.kernels.chunked_divergence  # noqa: F401
        out["trl"] = (True, trl.__version__)
    except Exception as err:  # any import failure means "not measurable here"
        out["trl"] = (False, f"{type(err).__name__}: {err}")
    return out


def _import_liger():
    out = {}
    try:
        import liger_kernel.chunked_loss.jsd_loss  # noqa: F401
        from importlib.metadata import version
        out["liger"] = (True, version("liger-kernel"))
    except Exception as err:
        out["liger"] = (False, f"{type(err).__name__}: {err}")
    return out


class _TRL:
    """TRL's ChunkedDivergenceFunction on logits: the projection of a [rows, cols] tile becomes
    a copy of the logits' columns, the gradient's matmul-accumulate an addition into them."""

    def __init__(self):
        import trl.kernels.chunked_divergence as cd
        self.cd = cd
        self.cols = (0, 0)

    def _project(self, tile, hidden, weight, bias, start, end, dtype):
        self.cols = (start, end)
        tile.copy_(hidden[:, start:end])

    def _addmm(self, acc, a, b):
        start, end = self.cols
        acc[:, start:end] += a

    def __call__(self, beta, z, t, temperature=1.0):
        import torch
        cd = self.cd
        saved = cd._project, cd._addmm_fp32
        cd._project, cd._addmm_fp32 = self._project, self._addmm
        try:
            w = torch.empty(z.shape[1], 0, dtype=z.dtype, device=z.device)
            div, _ = cd.ChunkedDivergenceFunction.apply(z, w, None, t, w, None, beta, temperature)
            div.sum().backward()
        finally:
            cd._project, cd._addmm_fp32 = saved


def _liger(beta, z, t, temperature=1.0, chunk=1024):
    import torch
    from liger_kernel.chunked_loss.jsd_loss import LigerFusedLinearJSDFunction as F

    def loss(a, b):
        return F.distillation_loss_fn(a / temperature, b / temperature, beta=beta)

    grads = []
    for zs, ts in zip(z.detach().split(chunk), t.split(chunk)):
        g, _ = torch.func.grad_and_value(loss)(zs, ts)
        grads.append(g)
    z.grad = torch.cat(grads)


def _naive(kernel, z, t, y):
    """The textbook form: log_softmax of both models, exp, multiply, sum, autograd."""
    import torch
    if kernel == "hinton":
        T, a = HINTON["temperature"], HINTON["alpha"]
        lq, lp = torch.log_softmax(z / T, -1), torch.log_softmax(t / T, -1)
        kl = (lp.exp() * (lp - lq)).sum(-1)
        loss = ((1 - a) * torch.nn.functional.cross_entropy(z, y, reduction="none") + a * T * T * kl).mean()
    else:
        lq, lp = torch.log_softmax(z, -1), torch.log_softmax(t, -1)
        if kernel == "token_kl.reverse":
            loss = (lq.exp() * (lq - lp)).sum(-1).sum()
        elif kernel == "token_kl.forward":
            loss = (lp.exp() * (lp - lq)).sum(-1).sum()
        else:
            b = JSD_BETA
            lm = torch.logaddexp(lp + math.log(b), lq + math.log1p(-b))
            loss = (b * (lp.exp() * (lp - lm)).sum(-1) + (1 - b) * (lq.exp() * (lq - lm)).sum(-1)).sum()
    loss.backward()


def _ours(kernel, z, t, y):
    from refimpl.torch import distill
    if kernel == "token_kl.reverse":
        loss = distill.token_kl(z, t).sum()
    elif kernel == "token_kl.forward":
        loss = distill.token_kl(z, t, "forward").sum()
    elif kernel == "generalized_jsd":
        loss = distill.generalized_jsd(z, t, JSD_BETA).sum()
    else:
        loss = distill.hinton(z, t, y, HINTON["temperature"], HINTON["alpha"])
    loss.backward()


def _plain(kernel, z, t, y):
    from refimpl.torch import distill
    saved, distill.FUSED = distill.FUSED, False
    try:
        _ours(kernel, z, t, y)
    finally:
        distill.FUSED = saved


_BETA = {"token_kl.reverse": 1.0, "token_kl.forward": 0.0, "generalized_jsd": JSD_BETA}


def _runner(method, kernel, peers, trl_state):
    """A callable (z, t, y) running one forward + backward, or the reason it cannot run."""
    if method == "lossproof":
        return lambda z, t, y: _ours(kernel, z, t, y)
    if method == "lossproof-plain":
        return lambda z, t, y: _plain(kernel, z, t, y)
    if method == "naive":
        return lambda z, t, y: _naive(kernel, z, t, y)
    ok, why = peers[method]
    if not ok:
        return f"not installed or not importable: {why}"
    if kernel == "hinton":
        return "no Hinton loss on logits in this library"
    beta = _BETA[kernel]
    if method == "trl":
        if "fn" not in trl_state:
            trl_state["fn"] = _TRL()
        return lambda z, t, y: trl_state["fn"](beta, z, t)
    return lambda z, t, y: _liger(beta, z, t)


# ----------------------------------------------------------------------------- measuring

def _inputs(n, v, dtype, seed=0):
    """Student logits N(0, 2²), teacher = student + N(0, 1) (a distillation in progress)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    z = torch.empty(n, v, dtype=torch.float32)
    t = torch.empty(n, v, dtype=torch.float32)
    for s in range(0, n, 256):  # in slices: no [N,V] temporary
        zs = torch.randn(min(256, n - s), v, generator=g) * 2
        z[s:s + 256] = zs
        t[s:s + 256] = zs + torch.randn(zs.shape, generator=g)
    y = torch.randint(0, v, (n,), generator=g)
    if dtype != torch.float32:
        z, t = z.to(dtype), t.to(dtype)
    if DEVICE != "cpu":
        z, t, y = z.to(DEVICE), t.to(DEVICE), y.to(DEVICE)
    return z.requires_grad_(True), t, y


def _time_copy(z, reps):
    import torch
    dst = torch.empty_like(z)
    dst.copy_(z)  # first touch
    ts = []
    for _ in range(reps + 2):
        _sync()
        start = time.perf_counter()
        dst.copy_(z.detach())
        _sync()
        ts.append(time.perf_counter() - start)
    del dst
    return statistics.median(ts), min(ts)


def _time(fn, z, t, y, reps):
    """Wall times of ``reps`` forward + backward runs after one warm-up."""
    times = []
    for i in range(reps + 1):
        z.grad = None
        gc.collect()
        _sync()
        start = time.perf_counter()
        fn(z, t, y)
        _sync()
        elapsed = time.perf_counter() - start
        if i:
            times.append(elapsed)
    z.grad = None
    return times


def _peak(fn, z, t, y, meter):
    """Peak additional resident memory of one forward + backward, less its gradient."""
    z.grad = None
    gc.collect()
    if _cuda():
        import torch
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        fn(z, t, y)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - start
    else:
        with meter.measure() as m:
            fn(z, t, y)
        peak = m["peak"]
    grad_bytes = z.grad.numel() * z.grad.element_size() if z.grad is not None else 0
    z.grad = None
    return max(0, peak - grad_bytes)


def _rows_that_fit(method, kernel, n, v, elem, guess) -> int:
    """Rows to run: all, unless the method's estimated peak would not fit in the available
    memory (inputs are already resident; it needs about guess·B more plus its gradient)."""
    budget = 0.7 * _available_bytes()
    g = guess.get(f"{method}/{kernel}", guess.get(method, 4.0))
    rows = n
    while rows > 64 and (g + 1.2) * rows * v * elem > budget:
        rows //= 2
    return rows


def _subset(z, t, y, rows):
    if rows == z.shape[0]:
        return z, t, y
    return z[:rows].detach().clone().requires_grad_(True), t[:rows].clone(), y[:rows].clone()


def bench_size(kernel, n, v, methods, reps, peers, log, dtype_name="float32", trl_state=None,
               copy=None, guess=None):
    """Timing of every method at one size (phase 1; memory is ``measure_memory``, phase 2)."""
    import torch
    dtype = getattr(torch, dtype_name)
    trl_state = {} if trl_state is None else trl_state
    guess = dict(_PEAK_GUESS) if guess is None else guess
    elem = torch.finfo(dtype).bits // 8
    logits_bytes = n * v * elem
    rows = []
    z, t, y = _inputs(n, v, dtype)
    copy_median, copy_min = copy if copy is not None else _time_copy(z, reps)
    copy_bw = 2 * logits_bytes / copy_median
    for method in methods:
        row = {"kernel": kernel, "method": method, "n": n, "v": v, "dtype": dtype_name,
               "logits_bytes": logits_bytes}
        fn = _runner(method, kernel, peers, trl_state)
        if isinstance(fn, str):
            row.update(available=False, reason=fn)
            rows.append(row)
            log(f"  {kernel:17s} {method:16s} N={n} V={v}: skipped ({fn})")
            continue
        rows_run = _rows_that_fit(method, kernel, n, v, elem, guess)
        zr, tr, yr = _subset(z, t, y, rows_run)
        try:
            times = _time(fn, zr, tr, yr, reps)
        except Exception as err:  # a peer that breaks on this input is reported, not fatal
            row.update(available=False, reason=f"failed: {type(err).__name__}: {err}")
            rows.append(row)
            log(f"  {kernel:17s} {method:16s} N={n} V={v}: failed ({err})")
            continue
        finally:
            del zr, tr, yr
        scale = n / rows_run
        times = [x * scale for x in times]
        row.update(available=True, version=_version(method, peers), rows_run=rows_run,
                   median_s=statistics.median(times), min_s=min(times), times_s=times)
        if rows_run < n:
            row["scaled_from_rows"] = rows_run
        moved = 3 * logits_bytes
        row["bandwidth_gbs"] = moved / row["median_s"] / 1e9
        row["bandwidth_fraction"] = (moved / row["median_s"]) / copy_bw
        rows.append(row)
        log(f"  {kernel:17s} {method:10s} N={n} V={v}: {row['median_s'] * 1e3:9.1f} ms (min {row['min_s'] * 1e3:.1f})  "
            f"{row['bandwidth_fraction']:.2f} of copy bandwidth" + (f"  [from {rows_run} rows]" if rows_run < n else ""))
    for r in rows:
        r["copy_median_s"], r["copy_min_s"], r["copy_bandwidth_gbs"] = copy_median, copy_min, copy_bw / 1e9
    naive = next((r for r in rows if r["method"] == "naive" and r.get("available")), None)
    libs = [r for r in rows if r["method"] in ("trl", "liger") and r.get("available")]
    for r in rows:
        if r.get("available") and naive:
            r["speedup_vs_naive"] = naive["median_s"] / r["median_s"]
        if r.get("available") and libs:
            r["speedup_vs_best_library"] = min(x["median_s"] for x in libs) / r["median_s"]
    del z, t, y
    gc.collect()
    return rows


def measure_memory(rows, peers, meter, log, trl_state, guess):
    """Phase 2: one more run of every measured row, for its peak additional memory (glibc's
    mmap threshold lowered first, see the module docstring; after the timings, which run
    with the allocator's defaults)."""
    import torch
    by_size = {}
    for r in rows:
        if r.get("available"):
            by_size.setdefault((r["n"], r["v"], r["dtype"]), []).append(r)
    for (n, v, dtype_name), rs in by_size.items():
        dtype = getattr(torch, dtype_name)
        elem = torch.finfo(dtype).bits // 8
        z, t, y = _inputs(n, v, dtype)
        for r in rs:
            fn = _runner(r["method"], r["kernel"], peers, trl_state)
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


def _version(method, peers):
    if method in ("trl", "liger"):
        return peers[method][1]
    import conformance
    return conformance.__version__


# ----------------------------------------------------------------------------- exact side

def bench_exact(quick: bool, log, sample: int = 12, workers: int | None = None) -> dict:
    """Vector generation by the exact reference, per family, and a torch check over growing
    fractions of the vector set."""
    from conformance import generate, harness, vectors
    from conformance.generate.build import build_test
    from conformance.targets import builtin
    out = {"families": {}}
    workers = workers or min(len(os.sched_getaffinity(0)), 8)
    total_est = 0.0
    for family in generate.available_families():
        module = generate.family_module(family)
        cases = module.cases()
        scales = getattr(module, "SCALES", {})
        if quick:
            step = max(1, len(cases) // sample)
            picked = cases[::step][:sample]
            start = time.perf_counter()
            built = 0
            for case in picked:
                try:
                    build_test(case, scales.get(case.objective))
                    built += 1
                except Exception:  # a case the generator rejects still cost its time
                    pass
            per = (time.perf_counter() - start) / max(1, len(picked))
            est = per * len(cases) / workers
            out["families"][family] = {"vectors": len(cases), "sampled": len(picked),
                                       "seconds_per_vector": per, "estimated_seconds": est}
            total_est += est
            log(f"  generate {family:12s} {len(cases):5d} vectors: {per:.3f} s each (sample of {len(picked)}), "
                f"~{est:.0f} s on {workers} workers")
        else:
            start = time.perf_counter()
            try:
                generate.generate([family], workers=workers)
                err = None
            except Exception as e:  # report, keep going
                err = f"{type(e).__name__}: {e}"
            sec = time.perf_counter() - start
            out["families"][family] = {"vectors": len(cases), "seconds": sec,
                                       "seconds_per_vector": sec * workers / max(1, len(cases))}
            if err:
                out["families"][family]["error"] = err
            total_est += sec
            log(f"  generate {family:12s} {len(cases):5d} vectors: {sec:.1f} s" + (f" ({err})" if err else ""))
    out["generate_seconds"] = total_est
    out["generate_estimated"] = quick
    out["workers"] = workers
    out["vectors_total"] = sum(f["vectors"] for f in out["families"].values())
    # Check: torch backend over 1/4, 1/2 and all of the bundled vectors (quick: 1/8 and 1/4).
    try:
        vs = vectors.VectorSet()
        target = builtin.load("torch")
        cases = list(vs.cases("*"))
        fractions = (0.125, 0.25) if quick else (0.25, 0.5, 1.0)
        points = []
        for frac in fractions:
            uids = {c.uid for c in cases[::max(1, round(1 / frac))]}
            start = time.perf_counter()
            results = harness.run(target, vs, uids=uids, device="cpu")
            sec = time.perf_counter() - start
            points.append({"vectors": len(uids), "seconds": sec, "summary": harness.summary(results)})
            log(f"  check torch {len(uids):5d} vectors: {sec:.1f} s")
        per = [p["seconds"] / p["vectors"] for p in points if p["vectors"]]
        out["check"] = {"backend": "torch", "points": points, "vectors_total": len(cases),
                        "seconds_per_vector": per[-1] if per else None,
                        "estimated_full_seconds": (per[-1] * len(cases)) if per else None}
    except Exception as err:
        out["check"] = {"error": f"{type(err).__name__}: {err}"}
    return out


# ----------------------------------------------------------------------------- driver

def machine() -> dict:
    import numpy as np
    import torch
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = re.search(r"model name\s*:\s*(.*)", f.read()).group(1)
    except (OSError, AttributeError):
        pass
    mem = None
    with contextlib.suppress(OSError, AttributeError):
        with open("/proc/meminfo") as f:
            mem = int(re.search(r"MemTotal:\s+(\d+) kB", f.read()).group(1)) * 1024
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), "memory_bytes": mem,
            "torch_threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
            "platform": platform.platform(), "load_average": load,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def summarize(rows) -> dict:
    """The headline numbers: reverse token KL (float32, the largest size measured) against
    the naive form and the libraries, and the same ratios for every kernel."""
    s = {}
    for kernel in KERNELS:
        mine = [r for r in rows if r["kernel"] == kernel and r["method"] == "lossproof" and r.get("available")]
        if not mine:
            continue
        top = max(mine, key=lambda r: (r["n"] * r["v"], r["v"]))
        key = kernel.replace(".", "_").replace("token_kl_reverse", "token_kl")
        s[f"{key}_size"] = [top["n"], top["v"]]
        s[f"{key}_speedup_vs_naive"] = top.get("speedup_vs_naive")
        s[f"{key}_peak_extra_fraction"] = top["peak_extra_fraction"]
        s[f"{key}_bandwidth_fraction"] = top["bandwidth_fraction"]
        s[f"{key}_speedup_vs_best_library"] = top.get("speedup_vs_best_library")
    return s


def targets(summary: dict) -> dict:
    """The issue's CPU targets for reverse token KL, reported (never asserted)."""
    sp, mem, bw = (summary.get("token_kl_speedup_vs_naive"), summary.get("token_kl_peak_extra_fraction"),
                   summary.get("token_kl_bandwidth_fraction"))
    return {"speedup_vs_naive>=2": None if sp is None else sp >= 2,
            "peak_extra_fraction<=0.05": None if mem is None else mem <= 0.05,
            "bandwidth_fraction>=0.5": None if bw is None else bw >= 0.5}


def run(quick: bool = False, sizes=None, kernels=None, methods=None, reps=None, exact: bool = True,
        dtype: str = "float32", log=print, lower_mmap_threshold: bool = True, device: str = "cpu") -> dict:
    """One benchmark run (see the module docstring); ``lower_mmap_threshold=False`` leaves the
    process's allocator alone (memory then less exact: for tests). ``device='cuda'``: the
    logits on the GPU, times synchronised, memory from the caching allocator's peak
    (``torch.cuda.max_memory_allocated``)."""
    global DEVICE
    DEVICE = device
    import torch
    cfg = QUICK if quick else FULL
    sizes = sizes or cfg["sizes"]
    kernels = kernels or KERNELS
    methods = methods or DEFAULT_METHODS
    reps = reps or cfg["reps"]
    meter = PeakMeter()
    peers = _peers(methods)
    log(f"lossproof bench ({'quick' if quick else 'full'}): {len(kernels)} kernels × {len(sizes)} sizes × "
        f"{len(methods)} methods, {dtype}, {device}, median of {reps} after a warm-up; memory: "
        f"{'torch.cuda.max_memory_allocated' if device.startswith('cuda') else meter.method}")
    for name, (ok, why) in peers.items():
        if name in methods:
            log(f"  {name}: {'version ' + why if ok else 'unavailable (' + why + ')'}")
    rows, trl_state, guess = [], {}, dict(_PEAK_GUESS)
    started = time.perf_counter()
    log("time (forward + backward):")
    for n, v in sizes:
        copy = None
        for kernel in kernels:
            rs = bench_size(kernel, n, v, methods, reps, peers, log, dtype, trl_state, copy, guess)
            copy = (rs[0]["copy_median_s"], rs[0]["copy_min_s"]) if rs else None
            rows += rs
    log("peak additional memory:")
    mmap = _mmap_threshold() if lower_mmap_threshold else False
    measure_memory(rows, peers, meter, log, trl_state, guess)
    doc = {"machine": machine(), "command": "lossproof bench" + (" --quick" if quick else ""),
           "settings": {"quick": quick, "reps": reps, "dtype": dtype, "sizes": [list(s) for s in sizes],
                        "kernels": list(kernels), "methods": list(methods),
                        "memory": "torch.cuda.max_memory_allocated" if device.startswith("cuda") else meter.method,
                        "malloc_mmap_threshold_64k": mmap, "jsd_beta": JSD_BETA, "hinton": HINTON},
           "libraries": {k: {"available": ok, ("version" if ok else "reason"): why} for k, (ok, why) in peers.items()},
           "device": device,
           "gpu": (f"measured on {torch.cuda.get_device_name(0)}" if device.startswith("cuda")
                   else "not measured: no CUDA device" if not torch.cuda.is_available()
                   else "not measured by this run (--device cuda measures it)"),
           "rows": rows}
    doc["summary"] = summarize(rows)
    doc["summary"]["targets_cpu"] = targets(doc["summary"])
    doc["seconds"] = time.perf_counter() - started
    if exact:
        log("exact side:")
        ex = bench_exact(quick, log)
        doc["exact"] = ex
        doc["summary"]["generate_seconds"] = ex.get("generate_seconds")
        doc["summary"]["generate_estimated"] = ex.get("generate_estimated")
        doc["summary"]["check_seconds_per_vector"] = ex.get("check", {}).get("seconds_per_vector")
        doc["summary"]["check_estimated_full_seconds"] = ex.get("check", {}).get("estimated_full_seconds")
    doc["seconds"] = time.perf_counter() - started
    return doc


def write_json(path, doc) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, indent=1, default=float) + "\n")


def parse_sizes(text: str):
    out = []
    for part in text.split(","):
        n, v = part.lower().split("x")
        out.append((int(n), int(v)))
    return out


if __name__ == "__main__":  # python -m conformance.bench: same as lossproof bench
    from conformance import cli
    sys.exit(cli.main(["bench", *sys.argv[1:]]))
