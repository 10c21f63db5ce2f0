"""Wall times of one forward + backward, and the copy that sets the bandwidth limit.

A forward + backward must read both logits tensors and write the gradient: 3·B bytes
(B = one logits tensor). Its ``bandwidth_fraction`` is 3·B / time over the bandwidth of a
copy of one logits tensor into a preallocated one in the same run (2·B / the copy's time):
the fraction of the memory-bandwidth limit reached, a ratio measured on the same machine at
the same moment, never a threshold in seconds.

torch is an optional dependency, imported inside the functions that need it.
"""
from __future__ import annotations

import gc
import statistics
import time


def _sync(x) -> None:
    """Wait for the device that holds ``x`` (a CUDA kernel returns before it finishes)."""
    if x.is_cuda:
        import torch  # optional dependency
        torch.cuda.synchronize(x.device)


def time_copy(z, reps: int) -> tuple[float, float]:
    """Median and minimum time of copying ``z`` into a preallocated tensor (``reps + 2`` runs
    after a first touch of the destination)."""
    import torch  # optional dependency
    dst = torch.empty_like(z)
    dst.copy_(z)  # first touch: page faults are not bandwidth
    times = []
    for _ in range(reps + 2):
        _sync(z)
        start = time.perf_counter()
        dst.copy_(z.detach())
        _sync(z)
        times.append(time.perf_counter() - start)
    del dst
    return statistics.median(times), min(times)


def copy_bandwidth(logits_bytes: int, copy_seconds: float) -> float:
    """Bytes per second of the reference copy: it reads and writes one logits tensor."""
    return 2 * logits_bytes / copy_seconds


def bandwidth_fraction(logits_bytes: int, seconds: float, copy_bw: float) -> float:
    """Fraction of the copy's bandwidth reached by a forward + backward taking ``seconds``."""
    return 3 * logits_bytes / seconds / copy_bw


def time_runs(fn, z, t, y, reps: int) -> list[float]:
    """Wall times of ``reps`` calls ``fn(z, t, y)`` after one warm-up, each from a clear
    gradient and a collected heap."""
    times = []
    for i in range(reps + 1):
        z.grad = None
        gc.collect()
        _sync(z)
        start = time.perf_counter()
        fn(z, t, y)
        _sync(z)
        if i:
            times.append(time.perf_counter() - start)
    z.grad = None
    return times
