"""The case plan (DESIGN §8, §11): how one vector runs on one target, resolved once.

``plan(target, case, asked)`` answers every question a runner has about a case — whether it
runs and, if not, why; the conventions it runs under; the conventions and parameters the
target's function is called with; the bound it is judged by; the declared known failure; and,
for a distributed run, the splits it is eligible for — as one ``CasePlan`` per case-run (dtype,
and split). The in-process harness, the distributed runner and ``exchange.validate`` execute
that answer; none of them asks the target anything else. ``Target`` holds the declarations, the
catalog the facts of an objective; the questions that join them to a case are here.
"""
from __future__ import annotations

import fnmatch
import functools
import inspect
from dataclasses import dataclass, field

import numpy as np

from lossproof.conformance import catalog, compare
from lossproof.conformance.distributed import partitions
from lossproof.conformance.numbers import decode_input
from lossproof.conformance.results import NOT_CALLED
from lossproof.conformance.targets import signature
from lossproof.conformance.targets.steps import global_test
from lossproof.conformance.targets.target import ANY, Target, conventions_admit
from lossproof.conformance.vectors.load import VectorCase

NO_DTYPE = "no dtype shared by the vector, the target and --dtype"
NOT_A_MATRIX = "not a [N,V] vector"


@dataclass(frozen=True)
class Asked:
    """What the run asks of every case: the dtypes (none: all), the tolerance overrides and model,
    ``--as-paper``, and the distributed split — ``("--partition", ranks, micro, kind)`` or
    ``("--shard-vocab", shards, kind)`` — or None for the in-process run."""
    dtypes: tuple = ()
    tolerances: compare.Tolerances = field(default_factory=lambda: compare.Tolerances({}))
    as_paper: bool = False
    split: tuple | None = None


@dataclass
class CasePlan:
    """One case-run: the dtype (and split) a case runs in, or (dtype "-") why it does not run.
    ``status`` is "run", or the verdict of a case the runner does not call: "skip",
    "unsupported", or "error" (a call whose arguments cannot fit the function); a per-dtype plan
    that is not "run" is reported after the inputs are built, as any call would be."""
    case: VectorCase
    dtype: str = "-"
    status: str = "run"
    why: str = ""
    conventions: dict | None = None   # None: the vector group's (the case was not matched to the target)
    kwargs: dict = field(default_factory=dict)   # conventions and parameters of the call
    test: dict | None = None          # what is judged: the vector, or the global objective of a step
    tolerance: compare.CaseTolerance | None = None   # the bound of ``test`` (None for an invalid vector)
    known: str | None = None          # the declared reason it is expected to fail
    known_alone: str | None = None    # a split's: the in-process declaration, by the vector's own bound
    split: tuple = ()                 # rows per rank and micro-batch, or vocabulary ranges
    label: str = ""                   # the split as --partition / --shard-vocab write it ("2x2:even")
    where: str = ""                   # the split as a failure message shows it
    inputs: dict | None = None        # a split's decoded inputs


def plan(target: Target, case: VectorCase, asked: Asked) -> list[CasePlan]:
    """The case-runs of ``case`` on ``target``: one per dtype (and split), or one saying why the
    case does not run; [] for a case a distributed run does not report (an invalid vector, an
    objective no split of its kind is for)."""
    if asked.split:
        return _split_plan(target, case, asked)
    if case.objective not in target.objectives:
        return [CasePlan(case, status="unsupported", why="the target does not implement this objective")]
    conventions, why = _conventions(target, case, asked.as_paper)
    if conventions is None:
        return [CasePlan(case, status="skip", why=why, conventions=case.conventions)]
    refused = _refused_params(target, case.objective, {**conventions, **case.test["params"]})
    if refused:
        return [CasePlan(case, status="unsupported", why=refused, conventions=conventions)]
    dtypes = _dtypes(target, case, asked.dtypes)
    if not dtypes:
        return [CasePlan(case, status="skip", why=_no_dtype(target, case, asked.dtypes), conventions=conventions)]
    kwargs = call_kwargs(target, case.objective, conventions, case.test["params"])
    names = list(dict.fromkeys([*case.test["inputs"], *kwargs]))   # in the order of the call
    status, why = "run", ""
    if refusal := untaken(target, case.objective, names):
        status, why = "unsupported", refusal
    elif unfit := _unfit(target.objectives[case.objective], case.objective, frozenset(names)):
        status, why = "error", NOT_CALLED + unfit
    spec, model = catalog.get(case.objective), target.tolerance_model_for(case.objective)
    out = []
    for dt in dtypes:
        bound = None if case.result == "invalid" else asked.tolerances.for_case(spec, case.test, dt, model)
        out.append(CasePlan(case, dt, status, why, conventions, kwargs, case.test, bound,
                            _known_failure(target, case, dt, bound)))
    return out


def response(case: VectorCase, dtype: str, tolerances: compare.Tolerances) -> CasePlan:
    """The plan of a vector answered out of process (``exchange.validate``): the implementation
    declares nothing but the one dtype of its responses file, and computed the vector as given.
    A valid vector runs where ``dtype`` is one of its own; an invalid one is judged in any."""
    if case.result == "invalid":
        return CasePlan(case, dtype, conventions=case.conventions, test=case.test)
    if dtype not in case.test["dtypes"]:
        return CasePlan(case, dtype, "skip", f"inputs are not exactly representable in {dtype}", case.conventions)
    return CasePlan(case, dtype, conventions=case.conventions, test=case.test,
                    tolerance=tolerances.for_case(catalog.get(case.objective), case.test, dtype))


# --- a distributed run -----------------------------------------------------------------------

def _split_plan(target: Target, case: VectorCase, asked: Asked) -> list[CasePlan]:
    option = asked.split[0]
    spec = catalog.get(case.objective)
    if case.result == "invalid" or not (spec.step if option == "--partition" else spec.vocab_sharded):
        return []
    if case.objective not in (target.steps if option == "--partition" else target.sharded):
        return [CasePlan(case, status="unsupported",
                         why="the target declares no distributed function for this objective")]
    conventions, why = _conventions(target, case, asked.as_paper)
    if conventions is not None:
        why = _refused_params(target, case.objective, {**conventions, **case.test["params"]}) or ""
    if conventions is None or why:
        return [CasePlan(case, status="skip", why=why)]
    if option == "--partition" and (coupled := _coupled(spec, case, conventions)):
        return [CasePlan(case, status="skip", why=coupled, conventions=conventions)]
    test = global_test(case, conventions) if option == "--partition" else case.test
    inputs = {k: decode_input(v) for k, v in case.test["inputs"].items()}
    splits, why = (_partitions(test, *asked.split[1:]) if option == "--partition"
                   else _shards(spec, inputs, *asked.split[1:]))
    dtypes = _dtypes(target, case, asked.dtypes)
    if not dtypes and (splits or (option == "--shard-vocab" and why != NOT_A_MATRIX)):
        # a [N,V] vector in no dtype of the run: that, before how its vocabulary splits
        why = _no_dtype(target, case, asked.dtypes)
    if not splits or not dtypes:
        return [CasePlan(case, status="skip", why=why, conventions=conventions)]
    kwargs = call_kwargs(target, case.objective, conventions, case.test["params"])
    model = target.tolerance_model_for(case.objective)
    bounds = {dt: asked.tolerances.for_case(spec, test, dt, model) for dt in dtypes}
    # the in-process declarations judge by the vector's own bound (dpo.loss: not the global mean's)
    alone = {dt: _known_failure(target, case, dt, bounds[dt] if test is case.test
                               else asked.tolerances.for_case(spec, case.test, dt, model)) for dt in dtypes}
    return [CasePlan(case, dt, "run", "", conventions, kwargs, test, bounds[dt],
                     _known_split(target, case, dt, label, split, bounds[dt]), alone[dt], split, label, where, inputs)
            for label, (split, where) in splits.items() for dt in dtypes]


def _partitions(test: dict, ranks: int, micro: int, kind: str | None) -> tuple[dict, str]:
    """{label: (partition, where)} of the kind asked (every kind: None), or ({}, why none)."""
    counts = row_counts(test)
    parts = {k: v for k, v in partitions.row_partitions(counts, ranks, micro).items() if not kind or k == kind}
    return ({f"{ranks}x{micro}:{k}": (part, f"[{partitions.describe(part, counts)}]") for k, part in parts.items()},
            f"{len(counts)} row(s): no {kind or 'partition'} over {ranks}×{micro} slots")


def _shards(spec: catalog.Objective, inputs: dict, shards: int, kind: str | None) -> tuple[dict, str]:
    """{label: (vocabulary ranges, where)} of the kind asked, or ({}, why none)."""
    logits = np.asarray(inputs[spec.grads[0]], dtype=np.float64)
    if logits.ndim != 2:
        return {}, NOT_A_MATRIX
    neg = [row for i in spec.inputs if i.kind != "int" and i.name in inputs
           for row in np.isneginf(np.asarray(inputs[i.name], dtype=np.float64))]
    splits = {k: v for k, v in partitions.vocab_shards(neg, logits.shape[1], shards).items() if not kind or k == kind}
    return ({f"vocab{shards}:{k}": (s, "[shards " + " ".join(f"{a}:{b}" for a, b in s) + "]")
             for k, s in splits.items()},
            f"vocabulary of {logits.shape[1]}: no {kind or 'split'} over {shards} shards")


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


def _coupled(spec: catalog.Objective, case: VectorCase, conventions: dict) -> str | None:
    """Why the vector's rows cannot be split over micro-batches at all (``Objective.split_coupled``):
    the global objective is then not a sum of per-row terms that a partition could reproduce."""
    values = {**conventions, **case.test["params"]}
    for c in spec.split_coupled:
        if values.get(c.param) in c.values:
            return f"{c.param} {values[c.param]!r} {c.why}"
    return None


# --- the declaration, asked about one case ---------------------------------------------------

def _declaration(target: Target, objective_id: str, as_paper: bool):
    """The conventions declared for an objective: ANY, a dict, or a list of combinations; under
    ``--as-paper`` none ({}: the paper defaults)."""
    if as_paper:
        return {}
    return ANY if target.conventions == ANY else target.declared(objective_id)


def _conventions(target: Target, case: VectorCase, as_paper: bool) -> tuple[dict | None, str]:
    """The conventions to call the target with, or (None, why the case does not run).

    Valid vectors run when their group's conventions are ones the target declares. An input
    that is invalid whatever the conventions (flag ``InvalidInput``: NaN, a wrong shape, a bad
    parameter) runs under the target's own conventions, so every target is asked to reject it;
    an invalid value of a convention runs only for targets that declare that convention; any
    other invalid case (an input invalid under its conventions only, e.g. an infinite
    divergence in one direction) runs for targets that accept its conventions."""
    spec = catalog.get(case.objective)
    declared = _declaration(target, case.objective, as_paper)
    culprit = case.test.get("error", "").partition(":")[0].strip()
    if case.result == "invalid" and culprit in spec.conventions:
        if not _declares(declared, culprit):
            return None, f"invalid value of convention {culprit}, which the target does not declare"
        return case.conventions, ""
    if case.result == "invalid" and "InvalidInput" in case.flags and declared != ANY:
        return {**case.conventions, **_default_conventions(declared, spec)}, ""
    if not conventions_admit(declared, spec, case.conventions):
        return None, "conventions differ from the target's declaration"
    return case.conventions, ""


def _declares(declared, name: str) -> bool:
    """Whether the declaration states convention ``name`` itself (the target can then be asked to
    reject an invalid value of it); an undeclared convention is fixed at the paper default."""
    if declared == ANY:
        return True
    return any(name in combo for combo in (declared if isinstance(declared, list) else [declared]))


def _names(target: Target, objective_id: str, name: str) -> bool:
    """Whether the target's declaration states ``name`` by name: a ``"*"`` declaration names nothing."""
    declared = _declaration(target, objective_id, False)
    return declared != ANY and _declares(declared, name)


def _default_conventions(declared, spec: catalog.Objective) -> dict:
    """The conventions the target runs with by default: the first value of each declared
    convention (the first combination of a list), the paper default for the others. A
    convention declared ``"*"`` has no default: it is left out."""
    first = (declared[0] if declared else {}) if isinstance(declared, list) else declared
    out = {}
    for name in spec.conventions:
        value = first.get(name, spec.defaults[name])
        if isinstance(value, (list, tuple)):
            value = value[0]
        if value != ANY:
            out[name] = value
    return out


def fixed(target: Target, objective_id: str) -> dict:
    """{parameter: value} the target's function computes with and takes no argument for: its
    ``fixed`` declaration, and a temperature of 1 for a ``temperature_free`` objective."""
    free = {"temperature": 1.0} if objective_id in target.temperature_free else {}
    return {**free, **target.fixed.get(objective_id, {})}


def _refused_params(target: Target, objective_id: str, values: dict) -> str | None:
    """Why the target cannot be called with these parameter values (its ``params`` declaration
    lists the only values it takes; a ``fixed`` parameter, or the temperature of a
    ``temperature_free`` objective, takes none but the one it computes with), or None."""
    spec = catalog.get(objective_id)
    for name, value in fixed(target, objective_id).items():
        got = values.get(name, spec.param(name).default)
        if got == value:
            continue
        if name == "temperature" and objective_id in target.temperature_free:
            return (f"temperature={got!r}: the target declares {objective_id} temperature-free (T = 1 only; "
                    "its function has no temperature to divide the logits by)")
        return (f"{name}={got!r}: the target declares {objective_id}'s {name} fixed at {value!r} (its function "
                f"takes no {name} and computes with that value)")
    for name, allowed in target.params.get(objective_id, {}).items():
        if name in values and values[name] not in allowed:
            return f"{name}={values[name]!r} is not among the values the target takes ({allowed!r})"
    return None


def value_only(target: Target, objective_id: str) -> tuple:
    """The outputs of an objective that the target computes without a gradient on purpose
    (``value_only``): their values are judged, and a gradient the vector weights them in is not
    asked."""
    return target.value_only.get(objective_id, ())


def _dtypes(target: Target, case: VectorCase, asked: tuple) -> list[str]:
    """The vector's dtypes that the target declares for its objective and the run asks for."""
    declared = target.dtypes_of(case.objective)
    return [d for d in case.test["dtypes"] if d in declared and (not asked or d in asked)]


def _no_dtype(target: Target, case: VectorCase, asked: tuple) -> str:
    """Why a case runs in no dtype; a float64 case of an objective the target computes in float32
    by design says so (``computes_in``: such a function rounds float64 inputs to float32 first,
    so its float32 vectors are what judges it, by the float32 bound)."""
    if target.computes_in_float32(case.objective) and "float64" in case.test["dtypes"] \
            and (not asked or "float64" in asked):
        return f"{NO_DTYPE}: the target computes {case.objective} in float32 by design (computes_in), not in float64"
    return NO_DTYPE


def call_kwargs(target: Target, objective_id: str, conventions: dict, params: dict) -> dict:
    """The conventions and parameters the target's function is called with. Left out: a
    convention the catalog added later (``Param.added``) while it holds its paper default, when
    the target neither names it in its declaration (``"*"`` does not name it) nor has a function
    that takes it by name — functions written before it existed compute that default, and a
    ``**kwargs`` function is most often a wrapper that forwards to one — and the parameters the
    function computes with a ``fixed`` value (``_refused_params`` holds them at it; a
    temperature-free function's ``temperature``)."""
    spec = catalog.get(objective_id)
    late = {p.name: p.default for p in spec.params if p.convention and p.added}
    takes = _accepted_keywords(target.objectives.get(objective_id))
    out = {k: v for k, v in conventions.items()
           if not (k in late and v == late[k] and not _names(target, objective_id, k)
                   and not (takes is not ANY and k in takes))}
    held = fixed(target, objective_id)
    out.update({k: v for k, v in params.items() if k not in held})
    return out


def untaken(target: Target, objective_id: str, names, error: Exception | None = None) -> str | None:
    """Why the target's function cannot compute a case that needs an argument the catalog
    gained after it was written (a convention or parameter with ``Param.added``, an optional
    input): the function does not take it by name and the target does not declare it — or,
    for a ``**kwargs`` wrapper, the call raised ``error``, the TypeError of a function that
    does not take it. None when neither holds (then any error is the target's own)."""
    spec = catalog.get(objective_id)
    later = {p.name: f"added to the catalog in {p.added}" for p in spec.params if p.added}
    later.update({i.name: "an optional input" for i in spec.inputs if i.optional})
    takes = _accepted_keywords(target.objectives.get(objective_id))
    if error is not None:
        if not isinstance(error, TypeError) or takes is not ANY:
            return None
        names = [k for k in names if f"unexpected keyword argument '{k}'" in str(error)]
    else:
        names = [] if takes is ANY else [k for k in names if k not in takes]
    for k in names:
        if k in later and not _names(target, objective_id, k):
            return (f"the function does not take {k!r} ({later[k]}), which this case sets; "
                    "declare it or take it as an argument to have these cases checked")
    return None


def _unfit(fn, objective_id: str, names: frozenset) -> str | None:
    """``signature.mismatches``, once per function and set of argument names."""
    try:
        return _unfit_cached(fn, objective_id, names)
    except TypeError:   # an unhashable callable: not cached
        return signature.mismatches(fn, catalog.get(objective_id), names)


@functools.lru_cache(maxsize=1024)
def _unfit_cached(fn, objective_id: str, names: frozenset) -> str | None:
    return signature.mismatches(fn, catalog.get(objective_id), names)


def _accepted_keywords(fn):
    """The keyword names ``fn`` takes, ANY if it takes ``**kwargs`` or has no inspectable
    signature, or an empty set when there is no function."""
    if fn is None:
        return frozenset()
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return ANY
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return ANY
    return frozenset(params)


# --- known failures ------------------------------------------------------------------------

def _known_failure(target: Target, case, dtype: str, tolerance) -> str | None:
    """The declared reason why this case is expected to fail in ``dtype``, or None.
    ``tolerance`` is the bound the case is judged by in this run (the run's tolerance model
    and overrides included; None for an invalid vector): a rule that predicts whether a
    deviation shows must measure it against that bound, not against one it assumes."""
    for pattern, reason in target.known.items():
        if fnmatch.fnmatchcase(case.uid, pattern) or fnmatch.fnmatchcase(f"{case.uid}@{dtype}", pattern):
            return reason
    for reason, predicate in target.known_rules:
        if predicate(case, dtype, tolerance):
            return reason
    return None


def _known_split(target: Target, case, dtype: str, label: str, split, tolerance) -> str | None:
    """The declared reason why a distributed case is expected to fail: a ``known`` pattern
    ``uid@dtype@partition`` (e.g. ``"*@*@2x2:uneven"``) or a ``known_splits`` rule, which sees
    the split itself (rows per rank and micro-batch, or vocabulary ranges) and ``tolerance``,
    the bound of the global objective the case is judged by."""
    for pattern, reason in target.known.items():
        if pattern.count("@") == 2 and fnmatch.fnmatchcase(f"{case.uid}@{dtype}@{label}", pattern):
            return reason
    for reason, predicate in target.known_splits:
        if predicate(case, dtype, split, tolerance):
            return reason
    return None
