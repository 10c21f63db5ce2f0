"""``lossproof bench --kernel linear_cross_entropy``: the fused linear cross-entropy
(``refimpl.torch._fused_linear``) against its floor, naive torch and the libraries.

Every method runs one forward + backward of mean token cross-entropy of logits = h·Wᵀ at
hidden [N,H], weight [V,H], labels [N] (float32 by default), with gradients wrt h and W:

- ``gemms``: the floor, the three GEMMs any such loss performs and nothing else: logits = h·Wᵀ,
  dh = G·W, dW = Gᵀ·h (G: a [N,V] tensor made before the timing);
- ``lossproof``: ``refimpl.torch._fused_linear.linear_cross_entropy`` as it runs by default
  (row chunks; on a CPU the compiled row kernel of ``refimpl.torch._compiled``);
- ``lossproof-tiles``: the same with the compiled kernel switched off (the torch row chunks);
- ``naive``: ``F.linear`` then ``F.cross_entropy``, then autograd;
- ``torch-chunked``: PyTorch's own ``F.linear_cross_entropy`` with
  ``options=LinearCrossEntropyOptions()`` (torch/nn/modules/linear_cross_entropy.py: row chunks,
  gradients precomputed in forward; new in the installed torch, CPU included);
- ``liger``: Liger-Kernel 0.8.5's ``LigerFusedLinearCrossEntropyFunction``
  (liger_kernel/ops/fused_linear_cross_entropy.py), Triton kernels;
- ``verl``: verl 0.9.1's ``linear_cross_entropy`` (verl/utils/kernel/linear_cross_entropy.py,
  kernels.efficient_entropy_forward), Triton kernels behind ``assert hidden.is_cuda``.

A library method is tried on a tiny input first; where it cannot run (no GPU for its Triton
kernels, not installed) the row says so with the library's own error, never fatal.

Figures (ratios in the same run, never thresholds in seconds): ``time_vs_gemms``, the median
time over the ``gemms`` row's; ``peak_extra_fraction``, the peak resident memory above the
start less the gradients dh and dW (outputs every method must produce), over the bytes of one
[N,V] float32 logits tensor. ``targets`` reports the goals (≤ 1.3× the GEMMs, ≤ 10 % of one
logits tensor) without asserting them.

torch and the libraries are optional dependencies, imported inside the functions that need them.
"""
from __future__ import annotations

import contextlib
import gc
import statistics
import time

from lossproof.conformance.bench import memory

METHODS = ("gemms", "lossproof", "lossproof-tiles", "naive", "torch-chunked", "liger", "verl")
DEFAULT_SIZE = (2048, 1024, 32768)
QUICK_SIZE = (256, 256, 4096)
TARGETS = {"time_vs_gemms": 1.3, "peak_extra_fraction": 0.10}


def parse_size(text: str) -> tuple[int, int, int]:
    """``"2048x1024x32768"`` -> (N, H, V); ValueError otherwise."""
    n, h, v = (int(x) for x in text.lower().split("x"))
    if min(n, h, v) < 1:
        raise ValueError(f"{text}: N, H and V must be positive")
    return n, h, v


def inputs(n: int, h: int, v: int, dtype, seed: int = 0):
    """hidden ~ N(0, 1), weight ~ N(0, 1/H) (logits of unit scale), labels uniform; hidden and
    weight require their gradients."""
    import torch  # optional dependency
    g = torch.Generator().manual_seed(seed)
    hid = torch.randn(n, h, generator=g).to(dtype)
    w = (torch.randn(v, h, generator=g) / h ** 0.5).to(dtype)
    y = torch.randint(0, v, (n,), generator=g)
    return hid.requires_grad_(True), w.requires_grad_(True), y


def _gemms(G):
    def run(hid, w, y):
        import torch  # optional dependency
        with torch.no_grad():
            torch.mm(hid, w.t())
            hid.grad = torch.mm(G, w)
            w.grad = torch.mm(G.t(), hid)
    return run


def _lossproof(compiled: bool):
    def run(hid, w, y):
        from lossproof.refimpl.torch import _compiled, _fused_linear
        saved = _compiled.ENABLED
        _compiled.ENABLED = compiled and saved
        try:
            _fused_linear.linear_cross_entropy(hid, w, y).backward()
        finally:
            _compiled.ENABLED = saved
    return run


def _naive(hid, w, y):
    import torch.nn.functional as F  # optional dependency
    F.cross_entropy(F.linear(hid, w), y).backward()


def _torch_chunked(hid, w, y):
    import torch.nn.functional as F  # optional dependency
    from torch.nn import LinearCrossEntropyOptions
    F.linear_cross_entropy(hid, w, y, options=LinearCrossEntropyOptions()).backward()


def _liger(hid, w, y):
    from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction
    LigerFusedLinearCrossEntropyFunction.apply(hid, w, y)[0].backward()


def _verl(hid, w, y):
    from verl.utils.kernel.linear_cross_entropy import linear_cross_entropy
    logprobs, _ = linear_cross_entropy(hid, w, y, 1.0, "mean")
    (-logprobs).backward()


def runner(method: str, G=None):
    """The method's forward + backward ``fn(hidden, weight, labels)``."""
    return {"gemms": lambda: _gemms(G), "lossproof": lambda: _lossproof(True),
            "lossproof-tiles": lambda: _lossproof(False), "naive": lambda: _naive,
            "torch-chunked": lambda: _torch_chunked, "liger": lambda: _liger,
            "verl": lambda: _verl}[method]()


def why_not_runnable(method: str, dtype) -> str | None:
    """None where ``method`` runs here, else the reason (its error on a tiny input)."""
    if method not in ("liger", "verl", "torch-chunked"):
        return None
    hid, w, y = inputs(4, 8, 16, dtype)
    try:
        with _quiet():
            runner(method)(hid, w, y)
    except BaseException as err:  # AssertionError, RuntimeError from Triton's driver, ImportError...
        if isinstance(err, KeyboardInterrupt):
            raise
        first = (str(err).strip().splitlines() or [""])[0][:200]
        where = "verl/utils/kernel/kernels.py: efficient_entropy_forward asserts hidden.is_cuda" \
            if method == "verl" and isinstance(err, AssertionError) else ""
        head = "not available in this torch" if method == "torch-chunked" else "not runnable on this device"
        return (f"{head}: {type(err).__name__}: {first or where}"
                + (f" ({where})" if where and first else "")
                + ("; its kernels are Triton (CUDA) only" if method in ("liger", "verl") else ""))
    return None


@contextlib.contextmanager
def _quiet():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _times(fn, hid, w, y, reps):
    out = []
    for i in range(reps + 1):
        hid.grad = w.grad = None
        gc.collect()
        start = time.perf_counter()
        fn(hid, w, y)
        if i:
            out.append(time.perf_counter() - start)
    hid.grad = w.grad = None
    return out


def _peak(fn, hid, w, y, meter):
    hid.grad = w.grad = None
    gc.collect()
    with meter.measure() as m:
        fn(hid, w, y)
    grads = sum(t.grad.numel() * t.grad.element_size() for t in (hid, w) if t.grad is not None)
    hid.grad = w.grad = None
    return None if m["peak"] is None else max(0, m["peak"] - grads)


def run(size=DEFAULT_SIZE, methods=None, reps: int = 3, dtype_name: str = "float32", log=print,
        lower_mmap_threshold: bool = True) -> dict:
    """One run (module docstring): the rows, the summary and the targets."""
    import torch  # optional dependency
    from lossproof.conformance.bench.run import machine
    n, h, v = size
    dtype = getattr(torch, dtype_name)
    methods = list(methods or METHODS)
    if "gemms" not in methods:
        methods.insert(0, "gemms")  # every ratio is against it
    logits_bytes = n * v * 4
    meter = memory.meter_for("cpu")
    log(f"lossproof bench linear_cross_entropy: N={n} H={h} V={v} {dtype_name}, cpu, {torch.get_num_threads()} "
        f"threads, median of {reps} after a warm-up; memory: {meter.method}")
    hid, w, y = inputs(n, h, v, dtype)
    G = torch.randn(n, v, generator=torch.Generator().manual_seed(1)).to(dtype).div_(n)
    rows = []
    for method in methods:
        row = {"kernel": "linear_cross_entropy", "method": method, "n": n, "h": h, "v": v, "dtype": dtype_name}
        reason = why_not_runnable(method, dtype)
        if reason:
            row.update(available=False, reason=reason)
            log(f"  {method:16s}: {reason}")
        else:
            times = _times(runner(method, G), hid, w, y, reps)
            row.update(available=True, median_s=statistics.median(times), min_s=min(times), times_s=times)
        rows.append(row)
    floor = rows[0]["median_s"]
    for r in rows:
        if r.get("available"):
            r["time_vs_gemms"] = r["median_s"] / floor
            log(f"  {r['method']:16s}: {r['median_s'] * 1e3:9.1f} ms (min {r['min_s'] * 1e3:.1f})  "
                f"{r['time_vs_gemms']:.2f}× the GEMMs")
    mmap = memory.lower_mmap_threshold() if lower_mmap_threshold else False
    for r in rows:
        if r.get("available"):
            peak = _peak(runner(r["method"], G), hid, w, y, meter)
            r["peak_extra_bytes"] = peak
            r["peak_extra_fraction"] = None if peak is None else peak / logits_bytes
            if peak is not None:
                log(f"  {r['method']:16s}: peak +{peak / 2**20:8.1f} MiB ({r['peak_extra_fraction']:.3f} of one "
                    "[N,V] float32 logits tensor)")
    mine = next((r for r in rows if r["method"] == "lossproof" and r.get("available")), None)
    summary = {"size": [n, h, v]}
    if mine is not None:
        summary["time_vs_gemms"] = mine["time_vs_gemms"]
        summary["peak_extra_fraction"] = mine.get("peak_extra_fraction")
        summary["targets_cpu"] = {
            f"time_vs_gemms<={TARGETS['time_vs_gemms']}": mine["time_vs_gemms"] <= TARGETS["time_vs_gemms"],
            f"peak_extra_fraction<={TARGETS['peak_extra_fraction']}":
                None if mine.get("peak_extra_fraction") is None
                else mine["peak_extra_fraction"] <= TARGETS["peak_extra_fraction"]}
    return {"machine": machine(), "command": f"lossproof bench --kernel linear_cross_entropy --sizes {n}x{h}x{v}",
            "settings": {"reps": reps, "dtype": dtype_name, "size": [n, h, v], "methods": methods,
                         "memory": meter.method, "malloc_mmap_threshold_64k": mmap},
            "rows": rows, "summary": summary}
