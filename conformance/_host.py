"""What this host offers to parallel work, without Linux-only calls on a user's path."""
from __future__ import annotations

import multiprocessing
import os


def usable_cores() -> int:
    """Cores this process may run on: the affinity mask where the OS has one (Linux), else the
    machine's count (macOS and Windows have no ``sched_getaffinity``)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def pool_context():
    """``fork`` where the platform offers it (workers inherit the loaded state), else ``spawn``
    (workers rebuild it through their initializer)."""
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    return multiprocessing.get_context(method)
