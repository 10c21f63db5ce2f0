"""A pool of R rank processes joined by ``torch.distributed``, started once per run and fed one
task at a time (the same task to every rank).

gloo on CPU; NCCL when the run's device is CUDA and there is a device per rank. The processes
are forked where the platform allows it (they inherit the loaded target, no re-import of torch),
else spawned. Each rank runs a task under lossproof's per-case limit of CPU time
(``conformance.timelimit``); the pool waits WALL_FACTOR times the limit (and 30 s for the
ranks' own wall clocks to act first) for a rank stuck where no signal reaches Python, such as
a collective whose peer is gone. A task that a rank fails (raises, overruns the limit, or dies) leaves the
others in an unknown state — possibly blocked in a collective that will never complete — so
the whole pool is killed and a fresh one starts for the next task. ``close`` (also on any
exception of the caller, as a context manager) stops every process: none outlives the run.
"""
from __future__ import annotations

import os
import queue
import tempfile
import time
import traceback
from datetime import timedelta

from lossproof.conformance import timelimit
from lossproof.conformance._host import pool_context
from lossproof.conformance.results import not_implemented

READY_TIMEOUT = 120.0   # starting R processes on a loaded 2-core machine
GRACE = 30.0            # seconds past a rank's own wall clock before the pool gives up on it


class RankFailure(Exception):
    """One task could not be completed by every rank: ``ranks`` {rank: why}; ``timeout``: the
    per-case limit (s) where a rank ran out of it, else None."""

    def __init__(self, ranks: dict, timeout: float | None = None):
        self.ranks, self.timeout = ranks, timeout
        super().__init__("; ".join(f"rank {r}: {why}" for r, why in sorted(ranks.items())))


def _backend(device: str, world: int) -> str:
    if device.startswith("cuda"):
        import torch
        if torch.cuda.device_count() >= world:
            return "nccl"
    return "gloo"


def _worker(rank: int, world: int, init_file: str, device: str, limit: float, run_task, tasks, replies):
    """Join the group, then run tasks until ``None``, each under the per-case ``limit``; every
    reply is (rank, task id, result)."""
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    try:
        backend = _backend(device, world)
        # NCCL needs a device per rank; gloo also reduces CUDA tensors, which then share one device
        dev = f"cuda:{rank}" if backend == "nccl" else ("cuda:0" if device.startswith("cuda") else "cpu")
        dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world,
                                # a collective outwaits the ranks' own limits (a slow peer on a busy machine)
                                timeout=timedelta(seconds=limit * timelimit.WALL_FACTOR + 2 * GRACE))
        replies.put((rank, "ready", None))
    except Exception as err:
        replies.put((rank, "ready", f"{type(err).__name__}: {err}"))
        return
    while True:
        task = tasks.get()
        if task is None:
            break
        try:
            with timelimit.limit(limit):
                out = run_task(task, rank, world, dist.group.WORLD, dev)
        except timelimit.Timeout as err:
            out = {"status": "error", "message": err.describe(), "timeout": err.limit}
        except NotImplementedError as err:
            out = {"status": "unsupported", "message": not_implemented(err)}
        except Exception as err:
            frame = traceback.extract_tb(err.__traceback__)[-1]
            out = {"status": "error", "message": f"raised {type(err).__name__}: {str(err)[:300]} "
                                                  f"({os.path.basename(frame.filename)}:{frame.lineno})"}
        replies.put((rank, task["id"], out))
    dist.destroy_process_group()


class RankPool:
    """``run(task)`` -> [result of rank 0, ..., rank R−1]; raises RankFailure."""

    def __init__(self, world: int, run_task, device: str = "cpu", time_limit: float = 30.0):
        self.world, self.run_task, self.device, self.time_limit = world, run_task, device, time_limit
        self.procs: list = []
        self.starts = 0
        self._dir = tempfile.TemporaryDirectory(prefix="lossproof-ranks-")

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()

    def _start(self) -> None:
        ctx = pool_context()
        self.starts += 1
        init_file = os.path.join(self._dir.name, f"init-{self.starts}")
        self.replies = ctx.Queue()
        self.tasks = [ctx.Queue() for _ in range(self.world)]
        self.procs = [ctx.Process(target=_worker, daemon=True,
                                  args=(r, self.world, init_file, self.device, self.time_limit,
                                        self.run_task, self.tasks[r], self.replies))
                      for r in range(self.world)]
        for p in self.procs:
            p.start()
        got = self._collect("ready", READY_TIMEOUT)
        bad = {r: why for r, why in got.items() if why}
        if bad or len(got) < self.world:
            missing = {r: "did not join the process group" for r in range(self.world) if r not in got}
            self.close(keep_dir=True)   # the next task tries a fresh pool
            raise RankFailure({**missing, **bad})

    def _collect(self, task_id, limit: float) -> dict:
        deadline = time.monotonic() + limit
        got = {}
        while len(got) < self.world:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                rank, tid, out = self.replies.get(timeout=min(left, 0.5))
            except queue.Empty:
                if any(not p.is_alive() for p in self.procs):
                    dead = [r for r, p in enumerate(self.procs) if not p.is_alive() and r not in got]
                    if dead:   # a rank died without replying: the others may wait for it forever
                        break
                continue
            if tid == task_id:
                got[rank] = out
            if (out.get("status") != "ok") if isinstance(out, dict) else bool(out):
                # one rank failed: the others may be blocked in a collective; wait briefly
                deadline = min(deadline, time.monotonic() + 2.0)
        return got

    def run(self, task: dict) -> list:
        if not self.procs:
            self._start()
        for q in self.tasks:
            q.put(task)
        wall = self.time_limit * timelimit.WALL_FACTOR + GRACE
        got = self._collect(task["id"], wall)
        if len(got) == self.world and all(o["status"] == "ok" for o in got.values()):
            return [got[r] for r in range(self.world)]
        if len(got) == self.world and all(o["status"] == "unsupported" for o in got.values()):
            return [got[r] for r in range(self.world)]
        why, timeout = {}, None
        for r in range(self.world):
            if r in got and got[r]["status"] != "ok":
                why[r] = got[r]["message"]
                timeout = got[r].get("timeout", timeout)
            elif r not in got and not self.procs[r].is_alive():
                why[r] = "exited without a reply"
            elif r not in got and any(o["status"] != "ok" for o in got.values()):
                why[r] = "no reply after another rank failed"
            elif r not in got:
                why[r] = f"did not finish within lossproof's backstop of {wall:g} s wall time"
                timeout = self.time_limit
        self.close(keep_dir=True)
        raise RankFailure(why, timeout)

    def close(self, keep_dir: bool = False) -> None:
        procs, self.procs = self.procs, []
        for r, p in enumerate(procs):
            if p.is_alive():
                try:
                    self.tasks[r].put(None)
                except (OSError, ValueError):
                    pass
        deadline = time.monotonic() + 2.0
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5.0)
        for q in getattr(self, "tasks", []) + [getattr(self, "replies", None)]:
            if q is not None:
                q.close()
                q.cancel_join_thread()
        if not keep_dir:
            self._dir.cleanup()
