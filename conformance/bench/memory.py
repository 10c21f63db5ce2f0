"""Peak additional memory of one call, and how much memory there is to spend.

On a CPU the meter reads the process's resident set from ``/proc/self`` (Linux): the peak
(``VmHWM``) reset before each call by writing 5 to ``/proc/self/clear_refs``, or, where that
is refused, ``/proc/self/statm`` sampled every millisecond by a thread. Where there is no
``/proc`` (macOS, Windows) the meter says the measurement is unavailable and reports no peak
rather than a guess. On a CUDA device it is the caching allocator's peak
(``torch.cuda.max_memory_allocated``).

glibc keeps freed pages and reuses them; ``trim`` and ``lower_mmap_threshold`` make freed
buffers leave the resident set, so that one method cannot run in pages another left behind,
unseen. Both do nothing where the C library is not glibc.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import os
import re
import threading
import time

_STATUS = "/proc/self/status"
_STATM = "/proc/self/statm"
_CLEAR_REFS = "/proc/self/clear_refs"
_HWM = re.compile(r"VmHWM:\s+(\d+) kB")
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters, glibc's malloc.h


@functools.cache
def _glibc():
    """glibc, or None where the C library is another one (no malloc_trim, no mallopt)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


def trim() -> None:
    """Give freed heap pages back to the system now."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def lower_mmap_threshold(nbytes: int = 1 << 16) -> bool:
    """Serve every allocation of at least ``nbytes`` with mmap, returned to the system on
    free. Process-wide and permanent. False where the C library is not glibc."""
    libc = _glibc()
    return (libc is not None and bool(libc.mallopt(_M_MMAP_THRESHOLD, nbytes))
            and bool(libc.mallopt(_M_TRIM_THRESHOLD, nbytes)))


def _rss_bytes() -> int:
    with open(_STATM) as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _hwm_bytes() -> int:
    with open(_STATUS) as f:
        return int(_HWM.search(f.read()).group(1)) * 1024


def _reset_hwm() -> bool:
    try:
        with open(_CLEAR_REFS, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class PeakMeter:
    """Peak resident set of this process during ``with meter.measure() as m:``, in bytes above
    its start, as ``m["peak"]`` (None where ``available`` is False)."""

    def __init__(self):
        if not (os.path.exists(_STATM) and os.path.exists(_STATUS)):
            self.mode = None
            self.method = "not measured: the resident set is read from /proc/self (Linux only)"
        elif _reset_hwm():
            self.mode = "hwm"
            self.method = "VmHWM reset through /proc/self/clear_refs"
        else:
            self.mode = "sampled"
            self.method = "/proc/self/statm sampled every 1 ms"

    @property
    def available(self) -> bool:
        return self.mode is not None

    @contextlib.contextmanager
    def measure(self):
        result = {"peak": None}
        if self.mode is None:
            yield result
            return
        gc.collect()
        trim()  # else freeing during the call could trim pages counted in the starting point
        start = _rss_bytes()
        if self.mode == "hwm":
            _reset_hwm()
            yield result
            result["peak"] = max(0, _hwm_bytes() - start)
            return
        peak = start
        stop = threading.Event()

        def sample():
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, _rss_bytes())
                time.sleep(0.001)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            yield result
        finally:
            stop.set()
            sampler.join()
            result["peak"] = max(0, max(peak, _rss_bytes()) - start)


class CudaPeakMeter:
    """Peak of the CUDA caching allocator on ``device`` during ``with meter.measure() as m:``,
    in bytes above its start, as ``m["peak"]``."""

    available = True
    method = "torch.cuda.max_memory_allocated"

    def __init__(self, device: str):
        self.device = device

    @contextlib.contextmanager
    def measure(self):
        import torch  # optional dependency: only a CUDA run gets here
        result = {"peak": None}
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        start = torch.cuda.memory_allocated(self.device)
        yield result
        torch.cuda.synchronize(self.device)
        result["peak"] = torch.cuda.max_memory_allocated(self.device) - start


def meter_for(device: str):
    return CudaPeakMeter(device) if device.startswith("cuda") else PeakMeter()


def total_bytes() -> int | None:
    """Physical memory (sysconf: Linux and macOS), or None where it is not known."""
    with contextlib.suppress(ValueError, OSError, AttributeError):
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return None


def available_bytes(device: str) -> int:
    """Memory a run may still take on ``device``: free device memory on CUDA; on a CPU,
    ``MemAvailable`` (Linux), else half the physical memory (no portable figure exists; this
    only decides whether a size is run on fewer rows), else 8 GiB."""
    if device.startswith("cuda"):
        import torch  # optional dependency: only a CUDA run gets here
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            return int(re.search(r"MemAvailable:\s+(\d+) kB", f.read()).group(1)) * 1024
    except (OSError, AttributeError):
        total = total_bytes()
        return total // 2 if total else 8 << 30
