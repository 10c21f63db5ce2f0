"""lossproof's per-case time limit, in CPU time: what a case costs, whatever else the machine
runs (docs/performance.md#time-limit-and-load).

The limit counts the CPU time of this process, all its threads (``ITIMER_PROF``). A function
that waits without computing (a sleep, a lock, a child process, a peer rank) uses no CPU time:
a wall clock looks at it every WALL_FACTOR times the limit and stops it if it used less than
WAITING of that time on the CPU (a computing process gets far more, even beside ten busy
processes per core); otherwise it goes on. Signals reach the main thread only: elsewhere the
limit is not applied.
"""
from __future__ import annotations

import contextlib
import signal
import threading
import time

WALL_FACTOR = 10
WAITING = 0.01


class Timeout(BaseException):
    """The per-case time limit ran out. A BaseException, like KeyboardInterrupt: a target's own
    ``except Exception`` (or a compiler's, which wraps what it catches) must not turn it into
    the function raising."""

    def __init__(self, limit: float, clock: str):
        super().__init__(limit, clock)
        self.limit, self.clock = limit, clock

    def describe(self) -> str:
        if self.clock == "cpu":
            return f"exceeded lossproof's per-case limit of {self.limit:g} s CPU time"
        return (f"waited {self.limit * WALL_FACTOR:g} s without computing (lossproof's per-case limit: "
                f"{self.limit:g} s CPU time, and {WALL_FACTOR:g}× that of wall time spent waiting)")


@contextlib.contextmanager
def limit(seconds: float):
    """Raise Timeout in the block once it has used ``seconds`` of CPU time, or waited (above)."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return
    period = seconds * WALL_FACTOR
    used = [time.process_time()]

    def handler(signum, frame):
        if signum == signal.SIGPROF:
            raise Timeout(seconds, "cpu")
        now = time.process_time()
        if now - used[0] < WAITING * period:
            raise Timeout(seconds, "wall")
        used[0] = now
        signal.setitimer(signal.ITIMER_REAL, period)   # computing, on a busy machine: look again later
    previous = signal.signal(signal.SIGPROF, handler), signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.setitimer(signal.ITIMER_REAL, period)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGPROF, previous[0])
        signal.signal(signal.SIGALRM, previous[1])
