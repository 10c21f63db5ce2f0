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

from conformance import catalog, compare, harness, verdict
from conformance.distributed import partitions
from conformance.distributed.pool import RankFailure, RankPool
from conformance.numbers import decode_input
from conformance.results import CaseResult
from conformance.targets.steps import (
    ShardContext,
    StepContext,
    batch_coupling,
    global_test,
)
from conformance.targets.target import SHARDED_OBJECTIVES, STEP_OBJECTIVES, Target
from conformance.vectors.load import VectorSet

# the objectives each distributed check runs
ELIGIBLE = {"--partition": STEP_OBJECTIVES, "--shard-vocab": SHARDED_OBJECTIVES}
# the output a step's logged loss is judged against
LOSS_OUTPUT = {"grpo.loss": "loss", "grpo.aggregate": "value", "proximal_kl.loss": "loss", "dpo.loss": "loss",
               "lm.cross_entropy": "loss", "ppo.value_loss": "loss", "ppo.entropy_bonus": "loss",
               "reward.pairwise": "loss",
               "moe.router_z_loss": "loss"}


# --- the global objective ---------------------------------------------------------------------

def row_counts(test: dict) -> np.ndarray:
    """Unmasked tokens per row (a 1-D mask: whether the row, a token, is selected; lm.cross_entropy:
    whether its label is not ``ignore_index``; 1 per row for objectives without either)."""
    inputs = test["inputs"]
    if "mask" in inputs:
        mask = np.asarray(decode_input(inputs["mask"]), dtype=np.float64) != 0
        return (mask if mask.ndim == 1 else mask.sum(axis=1)).astype(int)
    if "labels" in inputs and "logits" in inputs:
        ignore = test["params"].get("ignore_index", catalog.get("lm.cross_entropy").param("ignore_index").default)
        return (np.asarray(decode_input(inputs["labels"]), dtype=np.int64) != ignore).astype(int)
    first = next(iter(inputs.values()))
    return np.ones(len(first), dtype=int)


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

def _select(target: Target, vs: VectorSet, eligible: tuple, declared: dict, globs, uids, as_paper):
    """(case, conventions or None, why) for every selected valid vector of an eligible objective."""
    globs = [globs] if isinstance(globs, str) else list(globs)
    out = []
    for case in vs.cases():
        if case.result == "invalid" or case.objective not in eligible or (uids and case.uid not in uids):
            continue
        named = case.objective in globs
        if not (named or (case.objective in declared and any(fnmatch.fnmatchcase(case.objective, g) for g in globs))):
            continue
        if case.objective not in declared:
            out.append((case, None, "the target declares no distributed function for this objective"))
            continue
        conventions, why = harness.conventions_for(target, case, as_paper)
        if conventions is not None:
            why = target.refused_params(case.objective, {**conventions, **case.test["params"]}) or ""
            conventions = None if why else conventions
        out.append((case, conventions, why))
    return out


class _Run:
    def __init__(self, target, tolerances, time_limit, options, label, weight, device):
        self.target, self.tolerances, self.time_limit, self.options = target, tolerances, time_limit, options
        self.device = device
        self.label, self.weight = label, weight
        self.results: list[CaseResult] = []
        self.next_id = 0

    def result(self, case, dtype, status, message, conventions, partition="", seconds=0.0) -> CaseResult:
        repro = ""
        if partition:
            head = f"lossproof check --target {self.target.spec or self.target.name} --uid {case.uid} --dtype {dtype}"
            device = [f"--device {self.device}"] if self.device != "cpu" else []
            split = f"{self.label} {partition.removeprefix('vocab')}"
            repro = " ".join([head, *device, split, *self.options])
        r = CaseResult(case.uid, case.objective, self.target.name, dtype, self.device, status, case.flags, message=message,
                       repro=repro, result=case.result, group=case.group, conventions=conventions or case.conventions,
                       partition=partition, seconds=seconds)
        self.results.append(r)
        return r

    def dispatch(self, pool: RankPool, task: dict):
        self.next_id += 1
        task["id"] = self.next_id
        return pool.run(task)


def _dtypes(target, case, dtypes):
    return [d for d in case.test["dtypes"] if d in target.dtypes_for(case.objective) and (not dtypes or d in dtypes)]


def partitioned(target: Target, vs: VectorSet, ranks: int, micro: int, kind: str | None = None, *,
                objective="*", dtypes=None, uids=None, tolerances: compare.Tolerances | None = None,
                time_limit: float = 30.0, as_paper: bool = False, progress=None, options: tuple = (),
                device: str = "cpu") -> list[CaseResult]:
    tolerances = tolerances or compare.Tolerances({})
    run = _Run(target, tolerances, time_limit, options, "--partition",
               1.0 / ranks if target.grad_reduction == "mean" else 1.0, device)
    selected = _select(target, vs, STEP_OBJECTIVES, target.steps, objective, uids, as_paper)
    with RankPool(ranks, lambda task, *a: run_task(target, task, *a), device, time_limit) as pool:
        for i, (case, conventions, why) in enumerate(selected):
            if progress:
                progress(i, len(selected))
            if conventions is None:
                run.result(case, "-", "unsupported" if case.objective not in target.steps else "skip", why, None)
                continue
            coupled = batch_coupling(case.objective, conventions)
            if coupled:
                run.result(case, "-", "skip", coupled, conventions)
                continue
            test = global_test(case, conventions)
            counts = row_counts(test)
            parts = partitions.row_partitions(counts, ranks, micro)
            if kind:
                parts = {k: v for k, v in parts.items() if k == kind}
            run_dtypes = _dtypes(target, case, dtypes)
            if not parts or not run_dtypes:
                why = (f"{len(counts)} row(s): no {kind or 'partition'} over {ranks}×{micro} slots" if not parts
                       else "no dtype shared by the vector, the target and --dtype")
                run.result(case, "-", "skip", why, conventions)
                continue
            for name, part in parts.items():
                for dt in run_dtypes:
                    _judge_step(run, pool, case, test, conventions, f"{ranks}x{micro}:{name}", part, counts, dt)
    if progress:
        progress(len(selected), len(selected))
    return run.results


def _dispatch(run: _Run, pool, case, test, task, conventions, label, split, dtype, where, started):
    """Run one task on the ranks: (a passing result to judge, the ranks' outputs, the bound of
    ``test``), or None when the case is already decided — a rank failed (an error, named) or the
    target refused the call (unsupported)."""
    spec = catalog.get(case.objective)
    tolerance = run.tolerances.for_case(spec, test, dtype, run.target.tolerance_model_for(case.objective))
    try:
        outs = run.dispatch(pool, task)
    except RankFailure as err:
        r = run.result(case, dtype, "error", f"{err} {where}", conventions, label, time.perf_counter() - started)
        if err.timeout is not None:
            r.probes["timeout"] = err.timeout
        _known(run, r, case, dtype, label, split, tolerance)
        return None
    r = run.result(case, dtype, "pass", "", conventions, label)
    if outs[0]["status"] == "unsupported":
        r.status, r.message = "unsupported", outs[0]["message"]
        return None
    return r, outs, tolerance


def _judge_step(run: _Run, pool, case, test, conventions, label, part, counts, dtype) -> None:
    spec = catalog.get(case.objective)
    started = time.perf_counter()
    inputs = {k: decode_input(v) for k, v in case.test["inputs"].items()}
    task = {"kind": "step", "objective": case.objective, "dtype": dtype, "inputs": inputs, "partition": part,
            "kwargs": run.target.call_kwargs(case.objective, conventions, case.test["params"])}
    layout = partitions.describe(part, counts)
    ran = _dispatch(run, pool, case, test, task, conventions, label, part, dtype, f"[{layout}]", started)
    if ran is None:
        return
    r, outs, tolerance = ran
    judged = verdict.Judgement(r, tolerance)
    for name in spec.grads:
        full = np.zeros(np.shape(inputs[name]), dtype=np.float64)
        for rank, out in enumerate(outs):
            for m, rows in enumerate(part[rank]):
                full[list(rows)] = out["grads"][(m, name)] * run.weight
        judged.output(f"grad:{name}", full, test["grads"][name])
    logged = [o["loss"] for o in outs]
    if all(v is not None for v in logged):
        output = LOSS_OUTPUT[case.objective]
        judged.output(output, np.asarray(sum(logged) * run.weight), test["expected"][output])
    judged.decide(case.result, f"[{layout}]")
    r.seconds = time.perf_counter() - started
    _known(run, r, case, dtype, label, part, tolerance)


def _known(run: _Run, r: CaseResult, case, dtype: str, label: str, split, tolerance) -> None:
    """A declaration about the split turns a failure into xfail and a pass into xpass; its rules
    judge a deviation by ``tolerance``, the bound of the global objective. A single-process
    declaration (a uid pattern, a known rule) may explain a failure here too, judged by the bound
    of the vector itself, but its staleness is for the single-process run to judge: a deviation it
    names can sink below the bound of the global objective (a mean over pairs), so a pass stays a
    pass."""
    target = run.target
    reason = target.known_split_failure(case, dtype, label, split, tolerance)
    if reason:
        harness.apply_known(r, reason)
    elif r.status in ("fail", "error"):
        own = run.tolerances.for_case(catalog.get(case.objective), case.test, dtype,
                                      target.tolerance_model_for(case.objective))
        harness.apply_known(r, target.known_failure(case, dtype, own))


def sharded(target: Target, vs: VectorSet, shards: int, kind: str | None = None, *, objective="*", dtypes=None,
            uids=None, tolerances: compare.Tolerances | None = None, time_limit: float = 30.0,
            as_paper: bool = False, progress=None, options: tuple = (), device: str = "cpu") -> list[CaseResult]:
    tolerances = tolerances or compare.Tolerances({})
    run = _Run(target, tolerances, time_limit, options, "--shard-vocab", 1.0, device)
    selected = _select(target, vs, SHARDED_OBJECTIVES, target.sharded, objective, uids, as_paper)
    with RankPool(shards, lambda task, *a: run_task(target, task, *a), device, time_limit) as pool:
        for i, (case, conventions, why) in enumerate(selected):
            if progress:
                progress(i, len(selected))
            if conventions is None:
                run.result(case, "-", "unsupported" if case.objective not in target.sharded else "skip", why, None)
                continue
            spec = catalog.get(case.objective)
            inputs = {k: decode_input(v) for k, v in case.test["inputs"].items()}
            logits = np.asarray(inputs[spec.grads[0]], dtype=np.float64)
            run_dtypes = _dtypes(target, case, dtypes)
            if logits.ndim != 2 or not run_dtypes:
                run.result(case, "-", "skip", "not a [N,V] vector" if logits.ndim != 2 else
                           "no dtype shared by the vector, the target and --dtype", conventions)
                continue
            neg = [row for i in spec.inputs if i.kind != "int" and i.name in inputs
                   for row in np.isneginf(np.asarray(inputs[i.name], dtype=np.float64))]
            splits = partitions.vocab_shards(neg, logits.shape[1], shards)
            if kind:
                splits = {k: v for k, v in splits.items() if k == kind}
            if not splits:
                run.result(case, "-", "skip", f"vocabulary of {logits.shape[1]}: no {kind or 'split'} over "
                           f"{shards} shards", conventions)
                continue
            for name, split in splits.items():
                for dt in run_dtypes:
                    _judge_shard(run, pool, case, inputs, conventions, f"vocab{shards}:{name}", split, dt)
    if progress:
        progress(len(selected), len(selected))
    return run.results


def _judge_shard(run: _Run, pool, case, inputs, conventions, label, split, dtype) -> None:
    spec = catalog.get(case.objective)
    test = case.test
    started = time.perf_counter()
    output = spec.outputs[0]
    task = {"kind": "shard", "objective": case.objective, "dtype": dtype, "inputs": inputs, "shards": split,
            "vocab": int(np.shape(inputs[spec.grads[0]])[1]), "kwargs": run.target.call_kwargs(case.objective, conventions, test["params"]),
            "cotangent": decode_input(test["cotangents"][output])}
    where = "[shards " + " ".join(f"{a}:{b}" for a, b in split) + "]"
    ran = _dispatch(run, pool, case, test, task, conventions, label, split, dtype, where, started)
    if ran is None:
        return
    r, outs, tolerance = ran
    judged = verdict.Judgement(r, tolerance)
    failures = judged.failures
    for rank, out in enumerate(outs):
        before = len(failures)
        judged.output(output, out["values"], test["expected"][output])
        if len(failures) > before:
            failures[-1] = f"rank {rank}: {failures[-1]}"
            break
    grad = np.concatenate([o["grad"] for o in outs], axis=1)
    judged.output(f"grad:{spec.grads[0]}", grad, test["grads"][spec.grads[0]])
    if any(o["detached"] for o in outs) and any(f.startswith("grad:") for f in failures):
        failures.insert(0, f"{output} carries no gradient on rank(s) "
                           f"{', '.join(str(i) for i, o in enumerate(outs) if o['detached'])}")
    judged.decide(case.result, where)
    r.seconds = time.perf_counter() - started
    _known(run, r, case, dtype, label, split, tolerance)
