"""One check run, below every front end: ``lossproof check``, the Python API
(``conformance.testing``) and the pytest plugin refuse the same bad selections with the same
messages, because all three go through :func:`prepare`.

A run is prepared first — the selection validated and every target loaded and checked against
it (device, dtypes, distributed split) — before a single vector file is read; then
:func:`execute` judges the selected vectors on each target, in one process
(``harness.run``) or on rank processes (``distributed``), and returns the results with the
notes a reader needs (declared conventions that no vector group holds).
"""
from __future__ import annotations

import fnmatch
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field

from lossproof.conformance import catalog, compare, derive, harness, report
from lossproof.conformance.distributed import check as distributed
from lossproof.conformance.distributed import partitions
from lossproof.conformance.errors import UsageError
from lossproof.conformance.results import CHECKED, CaseResult
from lossproof.conformance.targets import Target, builtin, load, split_variants
from lossproof.conformance.vectors.load import VectorSet


@dataclass
class Selection:
    """What a check asks for, as the command line or an API caller gives it."""
    targets: list = field(default_factory=list)   # target specs (str) or loaded Targets; [] = the built-ins
    backends: list = field(default_factory=list)  # built-in backend names (--backend)
    objectives: list = field(default_factory=lambda: ["*"])
    uids: list = field(default_factory=list)
    dtypes: list = field(default_factory=list)
    device: str | None = None
    partition: str | None = None
    shard_vocab: str | None = None
    known: dict = field(default_factory=dict)     # known-failure declarations joining every target's own
    tolerances: compare.Tolerances | None = None
    time_limit: float = 30.0
    as_paper: bool = False
    options: tuple = ()                           # the options that change a verdict, for repro lines


@dataclass
class Plan:
    """A validated selection with its loaded targets; nothing has read a vector yet."""
    selection: Selection
    targets: list[Target]
    split: tuple | None        # (option, text, parsed) of --partition / --shard-vocab
    idle: list[str] = field(default_factory=list)   # why each target left out of the run cannot run
    derived: dict = field(default_factory=dict)      # {uid: VectorCase} derived at run time (conformance.derive)


def dtype_list(given) -> list[str]:
    """Dtypes as the options give them: repeated, or comma-separated ("float64,float32")."""
    return [d for arg in (given or []) for d in arg.split(",") if d]


def _split(sel: Selection):
    if sel.partition and sel.shard_vocab:
        raise UsageError("--partition and --shard-vocab check different objectives: give one of them")
    try:
        if sel.partition:
            return "--partition", sel.partition, partitions.parse_partition(sel.partition)
        if sel.shard_vocab:
            return "--shard-vocab", sel.shard_vocab, partitions.parse_shards(sel.shard_vocab)
    except ValueError as err:
        raise UsageError(f"--{'partition' if sel.partition else 'shard-vocab'}: {err}") from None
    return None


def prepare(sel: Selection) -> Plan:
    """Validate the selection and load its targets, or raise UsageError / TargetError naming the
    first problem. Reads no vector file."""
    unknown = [b for b in sel.backends if b not in builtin.BUILTINS]
    if unknown:
        raise UsageError(f"--backend {unknown[0]!r}: built-in backends are {', '.join(builtin.BUILTINS)}")
    bad = [d for d in sel.dtypes if d not in compare.UNIT_ROUNDOFF]
    if bad:
        raise UsageError(f"--dtype {bad[0]!r}: choose from {', '.join(compare.UNIT_ROUNDOFF)}")
    split = _split(sel)
    specs = list(sel.backends) + list(sel.targets) or builtin.available()
    targets = [t for spec in specs for t in split_variants(spec if isinstance(spec, Target) else load(spec))]
    runnable, idle = [], []
    for target in targets:
        why = _cannot_run(target, sel, split)
        if why:
            idle.append(why)
            continue
        target.known = {**target.known, **sel.known}
        runnable.append(target)
    if not runnable:   # each target on its own: the run ends only when none of them can run
        raise UsageError("; ".join(idle))
    return Plan(sel, runnable, split, idle)


def _cannot_run(target: Target, sel: Selection, split) -> str | None:
    """Why ``target`` cannot run the selection at all (device, dtypes, a distributed split), or None."""
    if sel.device and sel.device not in target.devices:
        return f"--device {sel.device!r}: target {target.name} runs on {', '.join(target.devices)}"
    device = sel.device or target.devices[0]
    if device.startswith("cuda") and not builtin.cuda_available():
        return (f"target {target.name} runs on {device}, and this machine has no CUDA device "
                f"(torch.cuda.is_available() is False)")
    runs_in = target.all_dtypes()
    if sel.dtypes and not any(d in runs_in for d in sel.dtypes):
        return f"--dtype {', '.join(sel.dtypes)}: target {target.name} runs in {', '.join(runs_in)} only"
    if split and target.framework != "torch":
        return (f"{split[0]}: target {target.name} is a {target.framework} target; distributed checks "
                f"run torch steps and sharded functions")
    return None


def cases(plan: Plan, vs: VectorSet) -> list:
    """The selected vectors (objective globs and uids), or UsageError when none matches."""
    sel = plan.selection
    chosen = [c for g in sel.objectives for c in vs.cases(g) if not sel.uids or c.uid in sel.uids]
    if not chosen:
        raise UsageError("no vector matched the selection (check --objective / --uid)")
    return chosen


def objectives_of(plan: Plan) -> list[str]:
    """The catalog ids a plan's objective globs can select, for loading only their vector files."""
    return [o.id for o in catalog.OBJECTIVES if any(fnmatch.fnmatchcase(o.id, g) for g in plan.selection.objectives)]


def _asked_of(target: Target, plan: Plan) -> list[str]:
    """The objective globs to run ``target`` with. An objective named outright that the target
    lacks is reported unsupported, except where a variant of the same declaration implements it
    (the variants of one target file are one implementation, split for the report)."""
    siblings = [t for t in plan.targets if t is not target and t.spec and t.spec == target.spec]
    return [g for g in plan.selection.objectives
            if g in target.objectives or not any(g in s.objectives for s in siblings)]


def _derived(target: Target, vs: VectorSet, sel: Selection, into: dict) -> tuple[list[CaseResult], list[str]]:
    """Judge the target on exact cases derived for each convention combination it declares that
    no committed vector group holds (``conformance.derive``), with a note for each: an objective
    never drops out of a run silently because its declared setting has no golden vectors. The
    cases go ``into`` {uid: case}, for the diagnoses."""
    if sel.as_paper:
        return [], []
    results, lines = [], []
    for oid in [o for o in target.objectives if any(fnmatch.fnmatchcase(o, g) for g in sel.objectives)]:
        spec = catalog.get(oid)
        for n, assignment in enumerate(derive.uncovered(target, vs, oid)):
            what = f"{target.name}: {oid} declares {derive.describe(assignment, spec)}, which no committed vector group holds"
            bad = derive.not_a_choice(spec, assignment)
            if bad:
                lines.append(f"{what}; {bad}: not checked")
            elif sel.uids:
                lines.append(f"{what}: not checked (cases are derived for it only when no --uid is given)")
            elif n >= derive.MAX_COMBINATIONS:
                lines.append(f"{what}: not checked (cases are derived for the first {derive.MAX_COMBINATIONS} "
                             "such combinations of an objective)")
            else:
                cases, dropped = derive.derive(vs, oid, assignment)
                into.update((case.uid, case) for case in cases)
                with harness.single_threaded(target.framework):
                    for case in cases:
                        results += harness.run_case(target, case, dtypes=sel.dtypes or None, device=sel.device,
                                                    tolerances=sel.tolerances, time_limit=sel.time_limit,
                                                    options=sel.options)
                lines.append(f"{what}: {len(cases)} exact case(s) derived at run time and checked "
                             f"(group '{derive.GROUP}', flag {derive.FLAG}: not in the golden set)"
                             + (f"; {len(dropped)} not derivable, e.g. {dropped[0]}" if dropped else ""))
    return results, lines


def execute(plan: Plan, vs: VectorSet, *, progress: Callable | None = None,
            announce: Callable[[Target], None] | None = None,
            note: Callable[[str], None] | None = None) -> list[CaseResult]:
    """Judge the selection on every target of the plan. ``progress(label)``: a context manager
    yielding a progress callback (the CLI's bar); ``announce(target)`` runs before a target is
    checked; ``note(line)`` receives the declared conventions that no vector group holds, and why
    each target that ran no case could not run (when another target checked something; when none
    did, the run is a UsageError naming every reason)."""
    sel, split = plan.selection, plan.split
    cases(plan, vs)
    common = {"objective": sel.objectives, "dtypes": sel.dtypes or None, "uids": set(sel.uids),
              "tolerances": sel.tolerances, "time_limit": sel.time_limit, "as_paper": sel.as_paper,
              "options": sel.options}
    results, idle, nothing = [], list(plan.idle), []
    for target in plan.targets:
        if announce:
            announce(target)
        device = sel.device or target.devices[0]
        label = f"checking {target.name}" + (f" ({split[0]} {split[1]})" if split else "")
        with (progress(label) if progress else nullcontext(None)) as tick:
            if split and split[0] == "--partition":
                ran = distributed.partitioned(target, vs, *split[2], progress=tick, device=device, **common)
            elif split:
                ran = distributed.sharded(target, vs, *split[2], progress=tick, device=device, **common)
            else:
                ran = harness.run(target, vs, device=sel.device, progress=tick,
                                  **{**common, "objective": _asked_of(target, plan)})
        if not split:
            derived, lines = _derived(target, vs, sel, plan.derived)
            ran += derived
            for line in lines:
                if note:
                    note(line)
        results += ran
        if split and not ran:
            declared = target.steps if split[0] == "--partition" else target.sharded
            refused = [f"{o.id} is not eligible: {o.not_step}" for o in catalog.OBJECTIVES
                       if o.not_step and split[0] == "--partition" and o.id in objectives_of(plan)]
            idle.append(f"{split[0]} checks {', '.join(distributed.ELIGIBLE[split[0]])}: " + (
                "; ".join(refused) if declared and refused else "the selection holds none of them" if declared else
                f"target {target.name} declares no {'steps' if split[0] == '--partition' else 'sharded'} "
                f"functions (docs/distributed.md)"))
        elif not any(r.status in CHECKED for r in ran):
            nothing.append(f"target {target.name}: the selection checks nothing ({report.why_nothing(ran)})")
    # each target is judged on its own: one that checks nothing is a line (of the console report,
    # for one whose cases were reported; a note for one that ran none), and the run is a usage
    # error only when no target checks anything
    if not any(r.status in CHECKED for r in results):
        raise UsageError("; ".join(dict.fromkeys(idle + nothing)))
    for line in idle:
        if note:
            note(line)
    return results
