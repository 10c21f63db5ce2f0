"""Judge a target's distributed functions over the vectors (DESIGN §11) -> CaseResult list.

``partitioned``: every valid vector of a batch objective, split by each partition of
``partitions.row_partitions`` over R ranks × M micro-batches, runs the target's step on R
processes; the row gradients, reduced as the target's data-parallel wrapper reduces them, and
the logged loss are judged against the exact gradient and value of the *global* objective, the
vector's own (for dpo.loss, whose vectors hold per-pair losses, the mean over the pairs,
computed here by the exact reference).

``sharded``: every valid vector of a full-vocabulary divergence, its vocabulary split by each
kind of ``partitions.vocab_shards`` over K processes; every rank's values must be the global
ones, and the gradients of the ranks, put side by side, the global gradient.

One pool of rank processes serves the whole run; a case that a rank fails is an ``error``
naming the rank.
"""
from __future__ import annotations

import fnmatch
import time

import numpy as np

from lossproof.conformance import catalog, compare, harness, plan, verdict
from lossproof.conformance.distributed.pool import RankFailure, RankPool
from lossproof.conformance.numbers import decode_input
from lossproof.conformance.results import CaseResult
from lossproof.conformance.targets.steps import ShardContext, StepContext
from lossproof.conformance.targets.target import SHARDED_OBJECTIVES, STEP_OBJECTIVES, Target
from lossproof.conformance.vectors.load import VectorSet

# the objectives each distributed check runs (views of the catalog)
ELIGIBLE = {"--partition": STEP_OBJECTIVES, "--shard-vocab": SHARDED_OBJECTIVES}

# --- what a rank does (runs in the rank processes) ------------------------------------------

def _tensor(torch, value, kind: str, dtype: str, device: str, requires_grad: bool):
    if kind == "int":
        return torch.tensor(np.asarray(value, dtype=np.int64), device=device)
    t = torch.tensor(np.asarray(value, dtype=np.float64), dtype=getattr(torch, dtype), device=device)
    return t.requires_grad_(requires_grad)


def _logged(torch, returned):
    if isinstance(returned, dict):
        returned = returned.get("loss")
    if returned is None:
        return None
    if isinstance(returned, torch.Tensor):
        if returned.numel() != 1:
            raise TypeError(f"returned a loss of shape {tuple(returned.shape)}, expected a scalar")
        return float(returned.detach().double())
    return float(returned)


def run_task(target: Target, task: dict, rank: int, world: int, group, device: str) -> dict:
    import torch
    spec = catalog.get(task["objective"])
    kinds = {i.name: i.kind for i in spec.inputs}
    if task["kind"] == "step":
        mine = task["partition"][rank]
        micro_batches = [{**{name: _tensor(torch, np.asarray(value)[list(rows)], kinds[name], task["dtype"], device,
                                           name in spec.grads) for name, value in task["inputs"].items()},
                          **task["kwargs"]} for rows in mine]
        ctx = StepContext(rank, world, group, len(mine), device)
        logged = _logged(torch, target.steps[task["objective"]](micro_batches, ctx))
        grads = {}
        for m, mb in enumerate(micro_batches):
            for name in spec.grads:
                leaf = mb[name]
                g = leaf.grad
                if g is not None and tuple(g.shape) != tuple(leaf.shape):
                    return {"status": "error", "message": f"the gradient of {name} in micro-batch {m} has shape "
                                                          f"{tuple(g.shape)}, expected {tuple(leaf.shape)}"}
                grads[(m, name)] = (np.zeros(leaf.shape) if g is None
                                    else g.detach().to("cpu", torch.float64).numpy())
        return {"status": "ok", "grads": grads, "loss": logged}
    start, end = task["shards"][rank]
    inputs = {}
    for name, value in task["inputs"].items():
        arr = np.asarray(value)
        local = arr[:, start:end] if kinds[name] != "int" else arr
        inputs[name] = _tensor(torch, local, kinds[name], task["dtype"], device, name in spec.grads)
    ctx = ShardContext(rank, world, group, start, end, task["vocab"])
    out = target.sharded[task["objective"]](ctx=ctx, **inputs, **task["kwargs"])
    out = harness.outputs_by_name(spec, out)[spec.outputs[0]]
    student = inputs[spec.grads[0]]
    if isinstance(out, torch.Tensor) and out.requires_grad:
        ct = torch.tensor(np.asarray(task["cotangent"], dtype=np.float64), dtype=out.dtype,
                          device=out.device).reshape(out.shape)
        g = torch.autograd.grad(out, student, ct, allow_unused=True)[0]
    else:
        g = None
    if g is not None and tuple(g.shape) != tuple(student.shape):
        return {"status": "error", "message": f"the gradient of its shard has shape {tuple(g.shape)}, "
                                              f"expected {tuple(student.shape)}"}
    grad = np.zeros(student.shape) if g is None else g.detach().to("cpu", torch.float64).numpy()
    return {"status": "ok", "values": out.detach().to("cpu", torch.float64).numpy() if isinstance(out, torch.Tensor)
            else np.asarray(out, dtype=np.float64), "grad": grad, "detached": g is None}


# --- the run ----------------------------------------------------------------------------------

def _selected(target: Target, vs: VectorSet, declared: dict, globs, uids) -> list:
    """The vectors the run reports: an objective is named outright, or matched by a glob and declared."""
    globs = [globs] if isinstance(globs, str) else list(globs)
    return [case for case in vs.cases() if not (uids and case.uid not in uids)
            and (case.objective in globs or (case.objective in declared
                                              and any(fnmatch.fnmatchcase(case.objective, g) for g in globs)))]


class _Run:
    def __init__(self, target, time_limit, options, label, weight, device):
        self.target, self.time_limit, self.options = target, time_limit, options
        self.device = device
        self.label, self.weight = label, weight
        self.results: list[CaseResult] = []
        self.next_id = 0

    def result(self, p: plan.CasePlan, status, message, seconds=0.0) -> CaseResult:
        case, repro = p.case, ""
        if p.label:
            head = f"lossproof check --target {self.target.spec or self.target.name} --uid {case.uid} --dtype {p.dtype}"
            device = [f"--device {self.device}"] if self.device != "cpu" else []
            split = f"{self.label} {p.label.removeprefix('vocab')}"
            repro = " ".join([head, *device, split, *self.options])
        r = CaseResult(case.uid, case.objective, self.target.name, p.dtype, self.device, status, case.flags,
                       message=message, repro=repro, result=case.result, group=case.group,
                       conventions=p.conventions or case.conventions, partition=p.label, seconds=seconds)
        self.results.append(r)
        return r

    def dispatch(self, pool: RankPool, task: dict):
        self.next_id += 1
        task["id"] = self.next_id
        return pool.run(task)


def _execute(target: Target, vs: VectorSet, asked: plan.Asked, world: int, weight: float, judge, *, objective,
             uids, time_limit, progress, options, device) -> list[CaseResult]:
    """Plan every selected vector once and judge each of its case-runs on one pool of ``world`` ranks."""
    option = asked.split[0]
    run = _Run(target, time_limit, options, option, weight, device)
    selected = _selected(target, vs, target.steps if option == "--partition" else target.sharded, objective, uids)
    with RankPool(world, lambda task, *a: run_task(target, task, *a), device, time_limit) as pool:
        for i, case in enumerate(selected):
            if progress:
                progress(i, len(selected))
            for p in plan.plan(target, case, asked):
                if p.status != "run":
                    run.result(p, p.status, p.why)
                else:
                    judge(run, pool, p)
    if progress:
        progress(len(selected), len(selected))
    return run.results


def partitioned(target: Target, vs: VectorSet, ranks: int, micro: int, kind: str | None = None, *,
                objective="*", dtypes=None, uids=None, tolerances: compare.Tolerances | None = None,
                time_limit: float = 30.0, as_paper: bool = False, progress=None, options: tuple = (),
                device: str = "cpu") -> list[CaseResult]:
    asked = plan.Asked(tuple(dtypes or ()), tolerances or compare.Tolerances({}), as_paper,
                       ("--partition", ranks, micro, kind))
    weight = 1.0 / ranks if target.grad_reduction == "mean" else 1.0
    return _execute(target, vs, asked, ranks, weight, _judge_step, objective=objective, uids=uids,
                    time_limit=time_limit, progress=progress, options=options, device=device)


def _dispatch(run: _Run, pool, p: plan.CasePlan, task: dict, started: float):
    """Run one task on the ranks: (a passing result to judge, the ranks' outputs), or None when the
    case is already decided — a rank failed (an error, named) or the target refused the call
    (unsupported)."""
    try:
        outs = run.dispatch(pool, task)
    except RankFailure as err:
        r = run.result(p, "error", f"{err} {p.where}", time.perf_counter() - started)
        if err.timeout is not None:
            r.probes["timeout"] = err.timeout
        _known(r, p)
        return None
    r = run.result(p, "pass", "")
    if outs[0]["status"] == "unsupported":
        r.status, r.message = "unsupported", outs[0]["message"]
        return None
    return r, outs


def _judge_step(run: _Run, pool, p: plan.CasePlan) -> None:
    case, test, part = p.case, p.test, p.split
    spec = catalog.get(case.objective)
    started = time.perf_counter()
    task = {"kind": "step", "objective": case.objective, "dtype": p.dtype, "inputs": p.inputs, "partition": part,
            "kwargs": p.kwargs}
    ran = _dispatch(run, pool, p, task, started)
    if ran is None:
        return
    r, outs = ran
    judged = verdict.Judgement(r, p.tolerance)
    for name in spec.grads:
        full = np.zeros(np.shape(p.inputs[name]), dtype=np.float64)
        for rank, out in enumerate(outs):
            for m, rows in enumerate(part[rank]):
                full[list(rows)] = out["grads"][(m, name)] * run.weight
        judged.output(f"grad:{name}", full, test["grads"][name])
    logged = [o["loss"] for o in outs]
    if all(v is not None for v in logged):
        judged.output(spec.step_loss, np.asarray(sum(logged) * run.weight), test["expected"][spec.step_loss])
    judged.decide(case.result, p.where)
    r.seconds = time.perf_counter() - started
    _known(r, p)


def _known(r: CaseResult, p: plan.CasePlan) -> None:
    """A declaration about the split turns a failure into xfail and a pass into xpass; its rules
    judge a deviation by the bound of the global objective. A single-process declaration (a uid
    pattern, a known rule) may explain a failure here too, judged by the bound of the vector
    itself, but its staleness is for the single-process run to judge: a deviation it names can
    sink below the bound of the global objective (a mean over pairs), so a pass stays a pass."""
    if p.known:
        harness.apply_known(r, p.known)
    elif r.status in ("fail", "error"):
        harness.apply_known(r, p.known_alone)


def sharded(target: Target, vs: VectorSet, shards: int, kind: str | None = None, *, objective="*", dtypes=None,
            uids=None, tolerances: compare.Tolerances | None = None, time_limit: float = 30.0,
            as_paper: bool = False, progress=None, options: tuple = (), device: str = "cpu") -> list[CaseResult]:
    asked = plan.Asked(tuple(dtypes or ()), tolerances or compare.Tolerances({}), as_paper,
                       ("--shard-vocab", shards, kind))
    return _execute(target, vs, asked, shards, 1.0, _judge_shard, objective=objective, uids=uids,
                    time_limit=time_limit, progress=progress, options=options, device=device)


def _judge_shard(run: _Run, pool, p: plan.CasePlan) -> None:
    case, test, inputs = p.case, p.test, p.inputs
    spec = catalog.get(case.objective)
    started = time.perf_counter()
    output = spec.outputs[0]
    task = {"kind": "shard", "objective": case.objective, "dtype": p.dtype, "inputs": inputs, "shards": p.split,
            "vocab": int(np.shape(inputs[spec.grads[0]])[1]), "kwargs": p.kwargs,
            "cotangent": decode_input(test["cotangents"][output])}
    ran = _dispatch(run, pool, p, task, started)
    if ran is None:
        return
    r, outs = ran
    judged = verdict.Judgement(r, p.tolerance)
    failures = judged.failures
    for rank, out in enumerate(outs):
        before = len(failures)
        judged.output(output, out["values"], test["expected"][output])
        if len(failures) > before:
            failures[-1] = f"rank {rank}: {failures[-1]}"
            break
    if output in plan.value_only(run.target, case.objective):   # a metric without a gradient, on purpose
        r.message = f"gradients not checked: the target declares {output} value-only"
    else:
        grad = np.concatenate([o["grad"] for o in outs], axis=1)
        judged.output(f"grad:{spec.grads[0]}", grad, test["grads"][spec.grads[0]])
        if any(o["detached"] for o in outs) and any(f.startswith("grad:") for f in failures):
            failures.insert(0, f"{output} carries no gradient on rank(s) "
                               f"{', '.join(str(i) for i, o in enumerate(outs) if o['detached'])}")
    judged.decide(case.result, p.where)
    r.seconds = time.perf_counter() - started
    _known(r, p)
