"""The compiled CPU path of the fused distillation kernels (reverse and forward token KL,
generalized JSD, Hinton KD) and of the token cross-entropy (``_fused_ce``): ``_kernels.cpp``, built with the system's C++ compiler on first
use and called through ctypes.

Why a compiled kernel. The fused path (``_fused``) runs about fifteen torch operations per
tile, each a pass through memory or cache with its own dispatch: compute-bound at about a
fifth of the copy bandwidth on a CPU. One loop per row does the same arithmetic (two
exponentials and a few multiply-adds per logit; the JSD adds two log1p/expm1) while the row
stays in cache, so the time is
close to one read of both logits tensors and one write of the gradient. Why this route. A
plain C++ file with no PyTorch headers builds in seconds (``torch.utils.cpp_extension``
compiles the torch headers: a minute), vectorises for the machine it runs on (-march=native),
links no OpenMP runtime (threads are Python threads: ctypes releases the GIL during the
call), and its numerics are written out line by line against ``_fused``'s (``torch.compile``
would choose them itself and recompile for each new shape).

Where it applies: CPU tensors of float64/float32/bfloat16/float16 whose rows are contiguous
(``usable``), every fused kernel of ``_fused`` (``KINDS``). Everything else (other devices,
vocabulary strides other than 1) takes the torch fused path.

Build and cache. The shared library is built once per source, compiler and machine into
``$LOSSPROOF_CACHE`` (default ``$XDG_CACHE_HOME/lossproof`` or ``~/.cache/lossproof``; a
temporary directory if that is not writable), keyed by a hash of the source, the flags, the
compiler's version and the CPU's flags, and loaded from there afterwards. Where no compiler
is found, the build fails or is interrupted, or ``LOSSPROOF_COMPILED=0`` is set, ``library()``
is None, the reason is logged once (logger ``refimpl.torch``) and kept in ``status()`` (no
second try in the same process), and every call takes the torch fused path: the same results
within its own rounding, and the same errors.

The build is one-time setup, not part of any computation: ``lossproof check`` and ``lossproof
setup`` build it before the first case, outside the per-case time limit. Processes that need
the same library take an exclusive lock on a file next to it (``fcntl.flock``) and build it
once between them: the others wait, then load it. The compiler runs in a session of its own,
and any exception while it runs (a time limit's signal, KeyboardInterrupt, the build's own
time-out) kills that whole process group: the driver and the ``cc1plus`` it started, so no
compiler outlives an interrupted build.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import os
import platform
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

from lossproof.refimpl import cache

try:
    import fcntl
except ImportError:   # Windows: no flock; concurrent builds of one key still write the same bytes
    fcntl = None

SOURCE = Path(__file__).with_name("_kernels.cpp")
# -fno-math-errno, -fno-trapping-math: no errno, no floating-point traps, so that the loops'
# selects and rint vectorise (neither changes a result: no value depends on errno or traps).
FLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math", "-std=c++17",
         "-shared", "-fPIC")
BUILD_TIMEOUT = 600.0   # seconds of wall time for one build (about 8 s of CPU, more on a loaded machine)
_DTYPES = {torch.float64: 0, torch.float32: 1, torch.bfloat16: 2, torch.float16: 3}
# The kernels of _kernels.cpp (its Kind): JSD for 0 < β < 1 (p1 = β), Hinton with p1 = α,
# p2 = the soft term's scale.
KINDS = {"reverse": 0, "forward": 1, "jsd": 2, "hinton": 3}
_LOG = logging.getLogger("lossproof.refimpl.torch")

# False: every call takes the torch fused path (LOSSPROOF_COMPILED=0 sets it at import).
ENABLED = os.environ.get("LOSSPROOF_COMPILED", "1") != "0"

_lock = threading.Lock()
_state: dict = {}  # "lib": ctypes.CDLL or None, "reason", "seconds", "cached", "path"


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _cpu_flags() -> str:
    """The CPU's feature flags (Linux), or the machine name: -march=native builds for them."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return platform.machine() + platform.processor()


def _private(folder: Path) -> bool:
    """A folder whose shared libraries this process may load: ours, and not writable by others
    (the temporary directory is shared: a library planted there must not be loaded)."""
    if not hasattr(os, "getuid"):
        return True
    st = folder.stat()
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def _run(args: list, timeout: float) -> tuple[int, str, str]:
    """(return code, stdout, stderr) of ``args`` run in a session of its own. On any exception
    while it runs — its time-out, a signal's exception, KeyboardInterrupt — the whole process
    group is killed and reaped before the exception goes on: ``subprocess.run`` kills only the
    process it started, and the compiler driver's ``cc1plus`` would be left running."""
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:   # the group has already ended
            pass
        proc.communicate()
        # The driver is reaped; its children die asynchronously (init reaps them): wait until
        # the group is empty, so that no compiler is seen running after this returns.
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.01)
        raise
    return proc.returncode, out, err


@contextlib.contextmanager
def _locked(path: Path):
    """Exclusive use of ``path`` among processes: a lock on ``path.lock`` (POSIX ``flock``,
    released when the file is closed, also by a process that dies holding it)."""
    if fcntl is None:
        yield
        return
    with open(path.with_name(path.name + ".lock"), "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def _compile(cxx: str, path: Path) -> str:
    """Build ``path`` unless it exists (another process may have built it while this one waited
    for the lock); the reason it could not, or ""."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        code, _, err = _run([cxx, *FLAGS, str(SOURCE), "-o", str(tmp)], BUILD_TIMEOUT)
    except BaseException as error:
        tmp.unlink(missing_ok=True)   # what a killed compiler may have begun to write
        if isinstance(error, (OSError, subprocess.SubprocessError)):
            return f"{cxx} failed: {error}"
        raise
    if code != 0:
        tmp.unlink(missing_ok=True)
        first = (err.strip().splitlines() or ["no message"])[0]
        return f"{cxx} could not build {SOURCE.name}: {first}"
    os.replace(tmp, path)   # atomic: a process loading it sees the whole file or none
    return ""


def _build() -> dict:
    if not ENABLED:
        return {"lib": None, "reason": "disabled (LOSSPROOF_COMPILED=0 or _compiled.ENABLED = False)"}
    cxx = _compiler()
    if cxx is None:
        return {"lib": None, "reason": "no C++ compiler found (CXX, c++, g++, clang++)"}
    try:
        version = _run([cxx, "--version"], 30)[1]
    except (OSError, subprocess.SubprocessError) as err:
        return {"lib": None, "reason": f"{cxx} --version failed: {err}"}
    source = SOURCE.read_bytes()
    key = hashlib.sha256(b"\0".join([source, " ".join(FLAGS).encode(), version.encode(),
                                      _cpu_flags().encode()])).hexdigest()[:20]
    for folder in (cache.directory(), Path(tempfile.gettempdir()) / f"lossproof-{os.getuid() if hasattr(os, 'getuid') else 0}"):
        path = folder / f"lossproof_kernels_{key}.so"
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if not _private(folder):
            continue
        start = time.perf_counter()
        cached = path.is_file()
        if not cached:
            with _locked(path):
                cached = path.is_file()
                why = "" if cached else _compile(cxx, path)
            if why:
                return {"lib": None, "reason": why}
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as err:
            return {"lib": None, "reason": f"could not load {path}: {err}"}
        fn = lib.lossproof_distill
        fn.restype = ctypes.c_long
        fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_long,
                       ctypes.c_double, ctypes.c_double, ctypes.c_double, ctypes.c_double,
                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_long]
        ce = lib.lossproof_cross_entropy
        ce.restype = ctypes.c_long
        ce.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_double, ctypes.c_double, ctypes.c_double,
                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_long]
        return {"lib": lib, "reason": "", "seconds": time.perf_counter() - start, "cached": cached,
                "path": str(path), "compiler": version.splitlines()[0] if version else cxx}
    return {"lib": None, "reason": f"no private, writable cache directory ({cache.directory()} or the temporary "
                                   "directory)"}


def library():
    """The loaded kernels (ctypes.CDLL), built on first use; None where they cannot be."""
    if not ENABLED:
        return None
    if "lib" not in _state:
        with _lock:
            if "lib" not in _state:
                try:
                    _state.update(_build())
                except BaseException as err:   # remembered: the next case must not start the build again
                    _state.update(lib=None, reason=f"the build was interrupted ({type(err).__name__})")
                    _LOG.info("compiled CPU kernels unavailable, using the torch fused path: %s", _state["reason"])
                    raise
                if _state["lib"] is None:
                    _LOG.info("compiled CPU kernels unavailable, using the torch fused path: %s", _state["reason"])
                else:
                    _LOG.info("compiled CPU kernels %s in %.2f s: %s", "loaded" if _state["cached"] else "built",
                              _state["seconds"], _state["path"])
    return _state["lib"]


def status() -> dict:
    """Whether the compiled path is in use, and the build's record: ``available``, ``reason``
    (why not), ``seconds`` (the first call's build or load), ``cached`` (loaded from the cache)."""
    available = library() is not None
    out = {k: v for k, v in _state.items() if k != "lib"}
    out["available"] = available
    if not ENABLED:
        out["reason"] = "disabled (LOSSPROOF_COMPILED=0 or _compiled.ENABLED = False)"
    return out


def reset() -> None:
    """Forget the loaded library (the next call looks again: for tests of the fallback)."""
    with _lock:
        _state.clear()


def usable(zs: torch.Tensor, ts: torch.Tensor) -> bool:
    """True when the compiled kernel can take these logits (the library is loaded lazily)."""
    return (zs.device.type == "cpu" and zs.dtype in _DTYPES and ts.dtype == zs.dtype and zs.stride(-1) == 1
            and ts.stride(-1) == 1 and library() is not None)


def _spread(call, n: int, workers: int) -> None:
    """``call(r0, r1)`` over rows 0..n, on ``workers`` threads."""
    workers = max(1, min(workers, n))
    if workers == 1:
        call(0, n)
        return
    # Blocks of rows handed out as threads come free (on a busy machine one thread can
    # stall; equal shares would wait for it); ctypes releases the GIL during each call.
    step = max(1, min(16, n // (4 * workers)))
    starts = iter(range(0, n, step))
    lock = threading.Lock()

    def work():
        while True:
            with lock:
                r0 = next(starts, None)
            if r0 is None:
                return
            call(r0, min(n, r0 + step))

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def rows(kind: str, T: float, zs, ts, labels, need_grad: bool, cot: np.ndarray, grad, workers: int,
         guard: float, p1: float = 0.0, p2: float = 0.0):
    """Values (float64 [N]) and flagged rows of kernel ``kind`` (``KINDS``) for [N,V] CPU logits
    at temperature T (``labels``: int64 [N] for Hinton, else None; ``p1``, ``p2``: see
    ``KINDS``); the gradient of cot·value written into ``grad`` (student's dtype) for the
    unflagged rows. ``guard``: u^GUARD of the working dtype (``_fused``)."""
    lib = library()
    n, v = zs.shape
    ys = None if labels is None else labels.to(torch.int64).contiguous()
    yptr = None if ys is None else ys.data_ptr()
    values = np.empty(n)
    flags = np.zeros(n, dtype=np.uint8)
    cot = np.ascontiguousarray(cot, dtype=np.float64)
    gptr = grad.data_ptr() if need_grad else None
    gstride = grad.stride(0) if need_grad else 0

    def call(r0, r1):
        lib.lossproof_distill(KINDS[kind], _DTYPES[zs.dtype], zs.data_ptr(), ts.data_ptr(), gptr, yptr, n, v,
                              zs.stride(0), ts.stride(0), gstride, T, guard, p1, p2, cot.ctypes.data,
                              values.ctypes.data, flags.ctypes.data, r0, r1)

    _spread(call, n, workers)
    return values, np.flatnonzero(flags).tolist()


def cross_entropy_rows(z: torch.Tensor, labels: torch.Tensor, counted: torch.Tensor, eps: float, zeta: float,
                       cap: float | None, cot: np.ndarray | None, grad: torch.Tensor | None, workers: int):
    """Values (float64 [N]) and flagged rows of the token cross-entropy (``_fused_ce``) for [N,V]
    CPU logits ``z`` (``usable(z, z)``): ``labels`` int64 [N] in range (any where not counted),
    ``counted`` bool [N]; the gradient of cot·value written into ``grad`` (z's dtype, rows
    contiguous; may be ``z`` itself) for the unflagged rows when ``cot`` is given."""
    lib = library()
    n, v = z.shape
    ys = labels.to(torch.int64).contiguous()
    cs = counted.to(torch.uint8).contiguous()
    values = np.empty(n)
    flags = np.zeros(n, dtype=np.uint8)
    cot = None if cot is None else np.ascontiguousarray(cot, dtype=np.float64)
    gptr = None if cot is None else grad.data_ptr()
    gstride = 0 if cot is None else grad.stride(0)

    def call(r0, r1):
        lib.lossproof_cross_entropy(_DTYPES[z.dtype], z.data_ptr(), gptr, ys.data_ptr(), cs.data_ptr(), v,
                                    z.stride(0), gstride, eps, zeta, 0.0 if cap is None else cap,
                                    None if cot is None else cot.ctypes.data, values.ctypes.data,
                                    flags.ctypes.data, r0, r1)

    _spread(call, n, workers)
    return values, np.flatnonzero(flags).tolist()
