"""Diagnoses: the defects behind the failures of a check, named once each (issue 25).

A check judges case by case; a reader wants to know which few defects those failures come
from. For every failing (target, objective), the failing case-runs are explained by a short
list of :class:`Diagnosis` records, each with its count, the evidence, the fix or the
declaration to make, and the repro line of its smallest failing vector.

Every diagnosis is decided by a test on the numbers the harness recorded (``CaseResult.got``,
``CaseResult.probes``), and claims only the case-runs that test holds on; the harness's own
messages are read only for what it reports no other way (a time-out, an input changed in place).
What none explains is reported ``unexplained``. The failures go through three stages:

1. what no formula causes, on every failure: ``timeout`` (lossproof's per-case limit, never
   ``raises``), ``raises`` (grouped by exception type), ``in-place`` (an input overwritten),
   ``leak`` and ``narrow-dtype`` (the harness's probes);
2. then per dtype stratum (float64, float32, the low dtypes; float64 first), so that a cause seen
   in float64 is named whatever bfloat16 does: ``float32-inside`` (a float64 case returns bit for
   bit what the function returns in float32), ``cancellation`` (most of the stratum's failures
   carry a flag that marks cancellation; ranked before ``native``, whose fix would hide it),
   ``native`` (bfloat16/float16 cases pass the native model and their float64/float32 runs pass),
   ``degenerate-group``, ``non-finite`` (NaN or ±inf confined to marked rows or a few edge flags),
   ``convention`` (the exact reference under another value of one or two conventions or
   parameters matches every failing case);
3. then per symptom cluster of the stratum (the values fail, the gradients only, both, a
   non-finite value): ``convention`` again, and as a parameter computed as a function of its
   value (1/T for T, 1 − α for α, ε·V/(V−1), 0, −β), ``factor`` (got = c·exact, c a named constant or the
   case's own count or parameter — T², 1/K, 1/V, V/(V−1), the share of ignored labels — matched within
   each dtype's precision), ``clamp`` (the failing elements are exactly those where |log ratio|
   exceeds some c, located between two bounds), ``input-ignored`` (the exact reference with an
   input set to 0, or to another input's values, matches), ``known-form`` (a wrong formula real code
   has shipped, ``conformance.bugforms``, matches), ``condition`` (the failures are
   confined to elements, rows or cases with padding, ignored labels, an advantage sign, −inf
   logits, a row without tokens, a group of equal rewards, a large vocabulary, a parameter away
   from its neutral value, and passing cases lack it); and, for a symptom shared by at least half of the stratum's failures,
   ``non-finite`` / ``gradient-rounded`` / ``no-gradient`` / ``gradient-only`` (the values pass,
   the gradients do not), ``value-only`` (the gradients pass, a value does not: the loss reported
   is not the loss trained), ``float32-inside`` (float64 runs within the float32 bound).

Lines that name the same cause in several strata or clusters become one, with the summed count;
its evidence and repro are those of the part whose repro is the smallest case.
"""
from __future__ import annotations

import dataclasses
import importlib
import itertools
import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import mpmath
import numpy as np

from lossproof.conformance import bugforms, catalog, compare, diagnose_inputs, harness, verdict
from lossproof.conformance.numbers import decode_input
from lossproof.conformance.results import MISSING_MODULE, NOT_CALLED, CaseResult
from lossproof.refimpl.exact import mp
from lossproof.refimpl.validate import InputError

# The exact reference re-evaluated at modest precision: a candidate convention is accepted or
# refused by differences many orders above 1e-20.
DPS = 20
# Cases larger than this (input elements) are not re-evaluated under candidate conventions; the
# count of those left out is reported with the match.
MAX_ELEMENTS = 20000
# Passing cases a convention candidate is also tried on: one that contradicts it refutes it.
PASSING_SAMPLE = 8
# The searches' budget, per (target, objective) and per convention search: input elements the
# exact reference evaluates (about 60 µs each at 50 digits, so about 25 s of CPU on the machine
# that measured it). Counted in work, not in seconds, so that a diagnosis does not depend on the
# machine's speed or load.
SEARCH_ELEMENTS = 400_000
# The smallest |log ratio| a passing element must reach for a separation to be read as a clamp
# of the log ratio (a ratio beyond e^±½ ≈ 0.61 to 1.65; clamps in use are at 5 to 20).
MIN_CLAMP = 0.5
# The harness's probes: defects beside the values, named even where the values fail too.
PROBES = ("leak", "narrow-dtype")
# The kinds found by fitting the failures: named again in float32 or bfloat16, where float64 ran,
# only as the same cause.
SEARCHED = ("convention", "factor", "clamp", "condition")
# Failing case-runs below which a condition they share may be chance.
MIN_CONDITION = 3
# How far beyond the float32 bound a run's error must be to count as another defect than a float32
# step (float32_intermediate): a float32 step's error is within its bound, a wrong formula's orders above.
FLOAT32_APART = 100.0
# The constant factors a formula gains or loses: a missing ½ or an extra 2, a sign.
FACTORS = {2.0: "2", 0.5: "1/2", -1.0: "−1 (the sign)", -2.0: "−2", -0.5: "−1/2", 4.0: "4", 0.25: "1/4"}
EDGE_CATEGORIES = ("edge", "numerics")
NOT_A_CLASS = ("LowPrecision", "Random", "Large")
CANCELLATION = ("TinyStd", "TinyKL", "NearCertain")


@dataclass
class Diagnosis:
    kind: str
    target: str
    objective: str
    count: int                    # the failing case-runs it explains
    defect: str                   # one line: what is wrong
    evidence: str
    fix: str
    repro: str                    # the command that reruns its smallest failing vector
    declare: dict | None = None   # the conventions to declare, when that is the fix
    uids: list = field(default_factory=list)
    cause: str = field(default="", repr=False)   # what makes two lines one cause (default: kind + defect)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "target": self.target, "objective": self.objective, "count": self.count,
                "defect": self.defect, "evidence": self.evidence, "fix": self.fix, "repro": self.repro,
                "declare": self.declare, "uids": self.uids}


def diagnose(results: list[CaseResult], vs, targets, tolerances: compare.Tolerances | None = None,
             derived: dict | None = None) -> list[Diagnosis]:
    """The diagnoses of every failing (target, objective) of a run. ``targets``: the Targets
    that ran (by name); ``vs``: the VectorSet the results come from; ``derived``: {uid: case}
    of the cases derived at run time (``conformance.derive``), which the set does not hold."""
    tolerances = tolerances or compare.Tolerances({})
    by_name = {t.name: t for t in targets}
    groups = defaultdict(list)
    for r in results:
        # in-process runs only: a distributed case's values come from ranks the tests cannot rerun
        # a case not called (its signature) or stopped by a missing module has its own section
        if (r.axis == "conformance" and r.dtype != "-" and not r.partition
                and not r.message.startswith((NOT_CALLED, MISSING_MODULE))):
            groups[(r.target, r.objective)].append(r)
    out = []
    for (name, objective), runs in groups.items():
        bad = [r for r in runs if r.status in ("fail", "error")]
        if bad and name in by_name:
            cases = {c.uid: c for c in vs.cases(objective)}
            cases.update((u, c) for u, c in (derived or {}).items() if c.objective == objective)
            out += _Objective(by_name[name], objective, runs, cases, tolerances, vs).explain(bad)
    return out


class _Objective:
    """The runs of one target on one objective, and the tests that explain its failures."""

    def __init__(self, target, objective, runs, cases, tolerances, vs):
        self.target, self.spec, self.runs, self.cases = target, catalog.get(objective), runs, cases
        self.tolerances, self.vs = tolerances, vs
        self._exact: dict = {}
        self.work = 0   # input elements evaluated by the exact reference (SEARCH_ELEMENTS)
        self.computes_in_float32 = False   # float32_inside proved it on some float64 run
        try:
            self.notes = vs.notes(objective)
        except StopIteration:
            self.notes = {}

    # --- helpers -----------------------------------------------------------------------------

    def case(self, r):
        return self.cases[r.uid]

    def size(self, r) -> int:
        return sum(int(np.size(decode_input(v))) for v in self.case(r).test["inputs"].values())

    def want(self, r, label: str) -> np.ndarray:
        test = self.case(r).test
        kind, _, name = label.rpartition(":")
        return verdict.expected(test["grads"][name] if kind == "grad" else test["expected"][name])

    def tolerance(self, r, dtype=None, model=None):
        """The bound ``r`` is judged by; once float32_inside has proven that the function computes
        in float32, its other float64 runs are judged at float32's bound, so that a second defect
        among them (a convention, a factor) is named as in its float32 runs."""
        if dtype is None:
            dtype = "float32" if r.dtype == "float64" and self.computes_in_float32 else r.dtype
        tol = compare.Tolerances(self.tolerances.overrides, model or self.tolerances.model)
        return tol.for_case(self.spec, self.case(r).test, dtype, self.target.tolerance_model_for(self.spec.id))

    def fits(self, r, values: dict, dtype=None, model=None, rescale: bool = False) -> bool:
        """Whether every array ``r`` returned is within its bound of ``values`` (by label).
        ``rescale``: the values are another formula's, whose terms may be larger than the
        vector's stored scale (a JSD of 0 whose alternative is a KL of 1): the scale of each
        array is at least the largest of those values and of the inputs (the terms' size)."""
        if not r.got or any(label not in values for label in r.got):
            return False
        tol = self.tolerance(r, dtype, model)
        if rescale:
            test = dict(tol.test)
            inputs = [np.abs(np.asarray(decode_input(v), dtype=np.float64)) for v in test["inputs"].values()]
            terms = max((float(x[np.isfinite(x)].max()) for x in inputs if np.isfinite(x).any()), default=0.0)
            scale = {kind: dict(test["scale"][kind]) for kind in ("outputs", "grads") if kind in test["scale"]}
            for label, want in values.items():
                kind, _, name = label.rpartition(":")
                group = scale.get("grads" if kind == "grad" else "outputs")
                finite = np.abs(want[np.isfinite(want)])
                if group is not None and name in group:
                    group[name] = max(float(group[name]), float(finite.max(initial=0.0)), terms)
            test["scale"] = {**test["scale"], **scale}
            tol = dataclasses.replace(tol, test=test)
        selected = harness._selection(self.spec, self.case(r).test)
        for label, got in r.got.items():
            want = values[label]
            if np.shape(got) != np.shape(want):
                return False
            if not label.startswith("grad:") and label.rpartition(":")[2] in selected:
                got = np.where(selected[label.rpartition(":")[2]], got, want)
            if (np.isnan(got).any() or (np.isinf(got) & ~np.isinf(want)).any()
                    or not tol.measure(label, got, want).passed):
                return False
        return True

    def exact(self, r, override: dict, inputs: dict | None = None) -> dict | None:
        """The exact outputs and gradients of ``r``'s vector with ``override`` applied to its
        conventions and parameters, and ``inputs`` ({name: 0, or the name of the input it takes
        the values of}) to its inputs (None when the reference refuses them)."""
        case = self.case(r)
        key = json.dumps([r.uid, override, r.conventions, inputs], sort_keys=True, default=str)
        if key not in self._exact:
            self.work += self.size(r)
            self._exact[key] = _evaluate(self.spec, case, {**r.conventions, **override}, inputs)
        return self._exact[key]

    def exhausted(self, since: int) -> bool:
        """Whether a search begun when ``work`` was ``since`` has spent its budget."""
        return self.work - since > SEARCH_ELEMENTS

    def repro(self, rs) -> str:
        return min(rs, key=lambda r: (self.size(r), r.uid, r.dtype)).repro

    def make(self, kind, rs, defect, evidence, fix, declare=None, cause="") -> Diagnosis:
        return Diagnosis(kind, self.target.name, self.spec.id, len(rs), defect, evidence, fix, self.repro(rs),
                         declare, sorted({r.uid for r in rs}), cause or f"{kind}: {defect}")

    def passing(self) -> list:
        return [r for r in self.runs if r.status == "pass" and r.got]

    # --- the rules, in order -----------------------------------------------------------------

    def explain(self, bad: list) -> list[Diagnosis]:
        """The failures are first sorted by what no formula can cause (a time-out, an exception,
        an input changed in place, the probes' findings); the rest are split into clusters by
        dtype and symptom, each explained on its own, so that a second defect on a few cases
        does not hide the first, and a cause seen in float64 is named whatever bfloat16 does.
        Lines that name the same cause in several clusters become one."""
        self.bad = bad
        self.since = self.work
        self.explained = []   # (names, values) a convention search accepted
        self.authority = None  # the causes float64 named, once its stratum is explained
        found, left = [], list(bad)
        for rule in (self.timeout, self.raises, self.in_place, self.leak, self.narrow):
            left = self._apply(rule, left, found)
        ran_float64 = any(r.dtype == "float64" for r in self.runs)
        for stratum in self._strata(left):
            if stratum[0].dtype != "float64" and ran_float64 and self.authority is None:
                self.authority = set()   # float64 ran and passed: the other dtypes add no cause
            self.stratum = stratum
            rest = stratum
            for rule in self.STRATUM_RULES:
                rest = self._apply(getattr(self, rule), rest, found) if rest else rest
            clusters = []
            for cluster in self._clusters(rest):
                for rule in self.CLUSTER_RULES:
                    cluster = self._apply(getattr(self, rule), cluster, found) if cluster else cluster
                clusters.append(cluster)
            # a symptom named as the cause (the gradient alone, the value alone) only where most of
            # the dtype's failures show it: a wrong formula also fails a few gradients alone
            rest = []
            for cluster in clusters:
                if 2 * len(cluster) >= len(stratum):
                    for rule in self.SYMPTOM_RULES:
                        cluster = self._apply(getattr(self, rule), cluster, found) if cluster else cluster
                rest += self._apply(self.condition, cluster, found) if cluster else cluster
            if rest:
                found.append((self.make("unexplained", rest, "failing case-runs that no test explains",
                                        _first_message(rest), "read the per-case lines (--cases) of the repro"),
                              rest))
            if stratum[0].dtype == "float64":
                # float64 tells causes apart best: where it ran, the wider bounds of the other dtypes
                # may confirm its causes but not add their own (a convention that happens to fit two
                # bfloat16 runs), so that the same causes are named whichever dtypes ran
                self.authority = {d.cause for d, _ in found} | {d.kind for d, _ in found}
        return _merge(found, lambda r: (self.size(r), r.uid, r.dtype))

    STRATUM_RULES = ("float32_inside", "cancellation", "native", "degenerate_group", "non_finite", "convention")
    CLUSTER_RULES = ("convention", "factor", "parameter", "clamp", "input_ignored", "known_form")
    SYMPTOM_RULES = ("gradient", "value_only", "float32_intermediate")

    def _strata(self, left) -> list[list]:
        """float64 first: its causes are the least blurred by rounding."""
        out = defaultdict(list)
        for r in left:
            out[("float64", "float32").index(r.dtype) if r.dtype in ("float64", "float32") else 2].append(r)
        return [out[k] for k in sorted(out)]

    def _apply(self, rule, left, found) -> list:
        for diagnosis, claimed in rule(left):
            if self.authority is not None and not self._confirmed(diagnosis):
                continue
            if claimed or diagnosis.kind in PROBES:
                # a probe's finding stands beside what the values show: its line counts only the
                # case-runs it alone explains, so that the counts partition the failures
                found.append((dataclasses.replace(diagnosis, count=len(claimed)), claimed))
                ids = {id(c) for c in claimed}
                left = [r for r in left if id(r) not in ids]
        return left

    def _confirmed(self, d) -> bool:
        """Whether float64 named this cause (its kind, for the kinds whose line differs only in
        what the dtype shows), or it is one only a low dtype can show (``native``)."""
        if d.kind in ("native", "raises", "timeout", "in-place", "leak", "narrow-dtype"):
            return True
        return d.cause in self.authority or (d.kind not in SEARCHED and d.kind in self.authority)

    def _clusters(self, left) -> list[list]:
        """The failures of one dtype split by symptom: which arrays fail (the values, the
        gradients only, or both), and whether a value is NaN or ±inf where the exact one is finite."""
        out = defaultdict(list)
        for r in left:
            out[self._symptom(r)].append(r)
        return [out[k] for k in sorted(out)]

    def _symptom(self, r) -> str:
        if not r.got:
            return "none"
        if any(_non_finite(got, self.want(r, label)) for label, got in r.got.items()):
            return "non-finite"
        values = self._values_pass(r, {label: self.want(r, label) for label in r.got})
        grads = [label for label in r.got if label.startswith("grad:")]
        if values:
            return "gradient"
        if grads and all(self._passes(r, g) for g in grads):
            return "value"
        return "both"

    def _passes(self, r, label) -> bool:
        got, want = r.got[label], self.want(r, label)
        return (np.shape(got) == np.shape(want) and not _non_finite(got, want)
                and self.tolerance(r).measure(label, got, want).passed)

    def timeout(self, left):
        """lossproof's own per-case limit, not the function's failure: its own kind."""
        rs = [r for r in left if r.status == "error" and (r.probes.get("timeout") or _TIME_LIMIT.search(r.message))]
        if rs:
            limits = sorted({float(r.probes.get("timeout") or _TIME_LIMIT.search(r.message).group(1)) for r in rs})
            yield self.make("timeout", rs, f"exceeded lossproof's per-case time limit ({', '.join(f'{t:g}' for t in limits)}"
                            f" s) on {len(rs)} case-run(s)",
                            f"the call (or its gradient) did not return within {limits[-1]:g} s; a first call that "
                            "compiles (torch.compile, Triton autotuning) counts",
                            "raise the limit (--time-limit SECONDS), or warm the function up before the check"), rs

    def in_place(self, left):
        rs = [r for r in left if r.status == "fail" and not r.got and _IN_PLACE.match(r.message)]
        if rs:
            names = sorted({_IN_PLACE.match(r.message).group(1) for r in rs})
            yield self.make("in-place", rs, f"overwrites its input {', '.join(names)} in place",
                            f"after the call, {', '.join(names)} differ(s) from what was passed, on {len(rs)} "
                            "case-run(s)",
                            "work on a copy (x = x.clone(), out-of-place operations: x = x - m, not x -= m, "
                            "x.sub_(m), x[...] = ...): the caller's tensor is data the training step reuses"), rs

    def raises(self, left):
        errors = defaultdict(list)
        for r in left:
            if r.status == "error":
                errors[r.message.split(":", 1)[0]].append(r)
        for head, rs in errors.items():
            yield self.make("raises", rs, f"{head} on {len(rs)} case-run(s)", rs[0].message[:200],
                            "make the function compute these cases (the message says why it did not)"), rs

    def leak(self, left):
        """The probe's finding is a defect of its own, beside what the values show: it claims
        only the case-runs whose values and gradients pass."""
        rs = [r for r in left if r.probes.get("leak")]
        if rs:
            outputs = sorted({o for r in rs for o in r.probes["leak"]})
            yield self.make("leak", rs, f"output(s) {', '.join(outputs)} carry a gradient",
                            f"{self.spec.id} declares its outputs constant; on {len(rs)} case-run(s) the probe "
                            f"found a nonzero gradient through them", "detach the outputs (stop-gradient)"), \
                [r for r in rs if self._arrays_pass(r)]

    def narrow(self, left):
        """Claims the case-runs whose errors the narrower dtype accounts for (within its bound)."""
        rs = [r for r in left if r.probes.get("narrowed")]
        if rs:
            pairs = sorted({f"{d} for {r.dtype} inputs" for r in rs for d in r.probes["narrowed"].values()})
            yield self.make("narrow-dtype", rs, f"returns {', '.join(pairs)}",
                            f"{len(rs)} case-run(s) return a narrower floating dtype than their inputs",
                            "return the inputs' dtype (and compute in it); a library that computes in float32 on "
                            "purpose declares it: computes_in: \"float32\" (docs/targets.md#computes_in)"), \
                [r for r in rs if self.fits(r, {label: self.want(r, label) for label in r.got},
                                            dtype=min(r.probes["narrowed"].values(), key=_precision))]

    def _arrays_pass(self, r) -> bool:
        return bool(r.got) and self.fits(r, {label: self.want(r, label) for label in r.got})

    def non_finite(self, left):
        """NaN or ±inf where the exact value is finite, confined to one class of inputs: rows
        the data marks (−inf logits, an empty mask row, an all-equal group of rewards), or else
        up to three edge/numerics flags; no passing case is judged non-finite."""
        rs = [r for r in left if any(_non_finite(got, self.want(r, label)) for label, got in r.got.items())]
        if not rs:
            return
        bad = {label for r in rs for label, got in r.got.items() if _non_finite(got, self.want(r, label))}
        # only a gradient non-finite: the value is computed with the class masked out, the backward
        # is not (a product with −inf or 0·log 0 masked after it is formed still propagates NaN)
        gradient = all(label.startswith("grad:") for label in bad)
        what = "NaN or inf in the gradient (the values are finite)" if gradient else "NaN or inf"
        backward = (" — the gradient only: a product with ±inf (p·log p at p = 0, a −inf logit) masked after it is "
                    "formed (torch.where, masked_fill) still back-propagates 0·inf = NaN; mask the inputs before the "
                    "product (or use xlogy)") if gradient else ""
        for name, where, rows in _ROW_CLASSES:
            if all(self._confined(r, rows) for r in rs):
                yield self.make("non-finite", rs, f"{what} on {name} only",
                                f"on {len(rs)} case-run(s) every non-finite value (where the exact one is finite) lies "
                                f"in {where}; the other rows are finite",
                                f"handle {name} as the catalog defines it (docs of {self.spec.id}){backward}"), rs
                return
        classes = {f for f, note in self.notes.items() if note.get("category") in EDGE_CATEGORIES
                   and f not in NOT_A_CLASS}
        cover, rest = [], list(rs)
        while rest:
            counts = Counter(f for r in rest for f in r.flags if f in classes)
            if not counts or len(cover) == 3:
                return   # not confined to a few edge classes: left to the later tests
            flag = min(counts, key=lambda f: (-counts[f], f))
            cover.append(flag)
            rest = [r for r in rest if flag not in r.flags]
        described = "; ".join(f"{f}: {_sentence(self.notes[f].get('description', ''))}" for f in cover)
        yield self.make("non-finite", rs, f"{what} on {' / '.join(cover)} cases only",
                        f"{len(rs)} case-run(s) return a non-finite value where the exact one is finite, every one "
                        f"flagged {' or '.join(cover)} ({described})",
                        f"handle the {' / '.join(cover)} class as the catalog defines it{backward}"), rs

    def _confined(self, r, rows) -> bool:
        """Whether every non-finite element of ``r`` (where the exact value is finite) lies in a
        row that ``rows(inputs)`` marks; False when the outputs have no rows to tell."""
        inputs = {k: np.asarray(decode_input(v), dtype=np.float64) for k, v in self.case(r).test["inputs"].items()}
        marked = rows(inputs)
        if marked is None or not marked.any():
            return False
        for label, got in r.got.items():
            want = self.want(r, label)
            bad = np.isnan(got) | (np.isinf(got) & ~np.isinf(want))
            if not bad.any():
                continue
            if bad.ndim == 0 or bad.shape[0] != marked.shape[0]:
                return False
            if bad.reshape(bad.shape[0], -1).any(axis=1)[~marked].any():
                return False
        return True

    def gradient(self, left):
        """Every failing case of the cluster passes its values and fails a gradient: a
        non-finite gradient, a gradient rounded to a narrower dtype, no gradient at all, or a
        stop-gradient placed differently from the formula. On a whole cluster only: a wrong
        formula also fails some gradients alone, where it happens not to move the value."""
        grads = {id(r): [label for label in r.got if label.startswith("grad:")] for r in left}
        if not all(grads[id(r)] and self._values_pass(r, {label: self.want(r, label) for label in r.got})
                   for r in left):
            return
        bad = [r for r in left if any(_non_finite(r.got[g], self.want(r, g)) for g in grads[id(r)])]
        if bad:
            yield self.make("non-finite", bad, "NaN or inf in the gradient where the exact one is finite (the values "
                            "are right)",
                            f"on {len(bad)} case-run(s) the values pass and a gradient is not finite",
                            "the derivative of the form computed overflows or divides by zero where the loss is "
                            "finite (log1p(−exp(c)) near c = 0, sqrt or log at 0, exp of a large argument): use a "
                            "form whose derivative is finite there, or mask it with torch.where on the input side"), bad
            left = [r for r in left if r not in bad]
            if not left:
                return
        narrower = self._rounded_gradient(left)
        if narrower:
            dtype, rs = narrower
            yield self.make("gradient-rounded", rs, f"the gradient is rounded to {dtype}",
                            f"on {len(rs)} case-run(s) every gradient element is a {dtype} number (the exact ones "
                            f"are not) while the inputs are {'/'.join(sorted({r.dtype for r in rs}))}; the values pass",
                            f"compute the backward in the inputs' dtype (a custom autograd Function or kernel that "
                            f"stores or returns {dtype} gradients: cast them back before rounding, not after)"), rs
            left = [r for r in left if r not in rs]
            if not left:
                return
        if all(not np.any(r.got[g]) and np.any(self.want(r, g)) for r in left for g in grads[id(r)]):
            yield self.make("no-gradient", left, "no gradient: the gradient is zero where the exact one is not",
                            f"on all {len(left)} failing case-run(s) the values pass and every gradient is exactly 0",
                            "compute the output on the autograd graph (no torch.no_grad(), no .detach(), no "
                            "gradient-cancelling term such as a live copy of the inputs)"), left
            return
        yield self.make("gradient-only", left, "the values are right and the gradients are not",
                        f"on all {len(left)} failing case-run(s) every output passes and a gradient fails",
                        "check which factors are detached: the value is the formula's, its derivative is not "
                        "(a stop-gradient missing or extra, a term computed under torch.no_grad(), or a "
                        "score-function gradient in place of the pathwise one)"), left

    def _rounded_gradient(self, left):
        """(dtype, runs) when every gradient of every run is a number of one dtype narrower than
        the run's (bfloat16, float16 or float32) and some exact gradient element is not."""
        for dtype in ("bfloat16", "float16", "float32"):
            rs = [r for r in left if _precision(dtype) < _precision(r.dtype) and any(
                np.any(r.got[g]) for g in r.got if g.startswith("grad:")) and all(
                _numbers_of(r.got[g], dtype) for g in r.got if g.startswith("grad:"))
                and any(not _numbers_of(self.want(r, g), dtype) for g in r.got if g.startswith("grad:"))]
            if rs and len(rs) == len(left):
                return dtype, rs
        return None

    def value_only(self, left):
        """The values fail and every gradient passes, on the whole cluster: the loss reported is
        not the loss differentiated."""
        if not all(r.got and any(g.startswith("grad:") for g in r.got) and self._symptom(r) == "value" for r in left):
            return
        yield self.make("value-only", left, "the value is wrong and the gradient is right: the loss reported is not "
                        "the loss trained",
                        f"on all {len(left)} failing case-run(s) every gradient passes and a value fails",
                        "find the term or factor applied to the returned value only (a scaling added after the "
                        "backward's graph, a detached term added for logging, a value computed by a second path)"), left

    def _values_pass(self, r, values) -> bool:
        tol = self.tolerance(r)
        selected = harness._selection(self.spec, self.case(r).test)
        for label, got in r.got.items():
            if label.startswith("grad:"):
                continue
            want = values[label]
            name = label.rpartition(":")[2]
            if name in selected:
                got = np.where(selected[name], got, want)
            if np.shape(got) != np.shape(want) or _non_finite(got, want) or not tol.measure(label, got, want).passed:
                return False
        return True

    def float32_inside(self, left):
        wide = [r for r in left if r.dtype == "float64" and r.got
                and self.fits(r, {label: self.want(r, label) for label in r.got}, dtype="float32")]
        rs = [r for r in wide if self._rounding_shows(r) and self._same_in_float32(r)]
        if rs:
            # Proven on these; the other float64 failures within the float32 bound join: they cannot
            # prove it themselves (no float32 form of the vector, exact values that float32 holds,
            # float32 steps whose results are combined in float64, as two casts' gradients are).
            proven = {id(r) for r in rs}
            joined = [r for r in wide if id(r) not in proven]
            more = f", and {len(joined)} more are within the float32 bound" if joined else ""
            rs += joined
            worst = max(m["err_over_tol"] for r in rs for m in r.outputs.values())
            self.computes_in_float32 = True
            yield self.make("float32-inside", rs, "computed in float32 although the inputs are float64",
                            f"on {len(proven)} float64 case-run(s) it returns, bit for bit, what it returns for the "
                            f"same inputs in float32{more}: up to {worst:.3g}× the float64 bound",
                            _FLOAT32_FIX), rs

    def _rounding_shows(self, r) -> bool:
        """Whether some element out of the float64 bound has an exact value that float32 cannot
        hold: where the exact values are float32 numbers (0, 10, ½), a float64 and a float32
        computation of a wrong formula can agree bit for bit."""
        tol = self.tolerance(r, r.dtype)
        for label, got in r.got.items():
            want = self.want(r, label)
            kind, _, name = label.rpartition(":")
            scale = float(tol.test["scale"]["grads" if kind == "grad" else "outputs"][name])
            with np.errstate(invalid="ignore", over="ignore"):
                off = np.abs(got - want) > compare.bound(want, "float64", tol.k, scale)
                inexact = want.astype(np.float32).astype(np.float64) != want
            if (off & inexact & np.isfinite(want)).any():
                return True
        return False

    def _same_in_float32(self, r) -> bool:
        """Whether the target, called on the same vector in float32, returns exactly the values
        it returned in float64 (a float64 computation differs in the last float32 bits)."""
        case = self.case(r)
        if "float32" not in case.test["dtypes"]:
            return False
        probe = dataclasses.replace(self.target, dtypes=("float64", "float32"), known={}, known_rules=())
        again = harness.run_case(probe, case, dtypes=["float32"], device=r.device, tolerances=self.tolerances)
        if len(again) != 1 or again[0].conventions != r.conventions or set(again[0].got) != set(r.got):
            return False
        return all(np.array_equal(again[0].got[label], got, equal_nan=True) for label, got in r.got.items())

    def native(self, left):
        low = [r for r in left if r.dtype in compare.LOW_PRECISION and r.got]
        if not low or self.tolerances.model == "native" or self.target.tolerance_model_for(self.spec.id) == "native":
            return
        # a vector whose float64/float32 run fails too has a formula off: the low dtype is not the
        # explanation there (a wide failure another rule explained, float32 inside, does not count)
        wide_bad = {r.uid for r in self.bad if r.dtype not in compare.LOW_PRECISION}
        rs = [r for r in low if r.uid not in wide_bad and self.fits(r, {label: self.want(r, label) for label in r.got}, model="native")]
        if rs:
            yield self.make("native", rs, "computes in the low dtype itself",
                            f"{len(rs)} {'/'.join(sorted({r.dtype for r in rs}))} case-run(s) fail the careful "
                            "model (float32 inside) and pass the native one, and their float64/float32 runs pass",
                            f"declare tolerance_model: native for {self.spec.id} (or accumulate in float32)"), rs

    def degenerate_group(self, left):
        """grpo.advantages: finite advantages off only in groups whose rewards are all equal and
        whose mean is not exact in the case's dtype, where the exact advantage is 0."""
        if self.spec.id != "grpo.advantages":
            return
        rs, largest = [], 0.0
        for r in left:
            rewards = np.asarray(decode_input(self.case(r).test["inputs"]["rewards"]), dtype=np.float64)
            got, want = r.got.get("advantages"), self.want(r, "advantages")
            if (got is None or rewards.shape[1] < 2 or r.dtype not in ("float64", "float32")
                    or not np.isfinite(got).all()):
                continue
            typed = rewards.astype(r.dtype)
            equal = typed.max(axis=1) == typed.min(axis=1)
            inexact = equal & (typed.mean(axis=1, dtype=r.dtype) != typed[:, 0])
            off = self._off(r, "advantages", got, want)
            if off.any() and not off[~inexact].any() and not np.any(want[inexact]):
                rs.append(r)
                largest = max(largest, float(np.abs(got[inexact]).max()))
        if rs:
            yield self.make("degenerate-group", rs, "a degenerate group (all rewards equal) is not detected",
                            f"on {len(rs)} case-run(s) the groups whose rewards are all equal, and whose mean is not "
                            f"exact in the dtype, get advantages up to {largest:.3g} where the exact ones are 0; "
                            "every other group passes",
                            "decide the degenerate case on the rewards (max == min), not on a rounded std: "
                            "(r − mean)/(std + ε) divides the mean's rounding residue by a tiny std"), rs

    def _off(self, r, label, got, want) -> np.ndarray:
        """Per row: whether some element is outside the case's bound."""
        tol = self.tolerance(r)
        kind, _, name = label.rpartition(":")
        scale = float(tol.test["scale"]["grads" if kind == "grad" else "outputs"][name])
        bound = compare.bound(want, r.dtype, tol.k, scale)
        with np.errstate(invalid="ignore"):
            bad = ~(np.abs(got - want) <= bound)
        return bad.reshape(bad.shape[0], -1).any(axis=1)

    def convention(self, left):
        """Per combination of conventions the target was called with, the values of one or two
        conventions or parameters under which the exact reference matches every failing case
        of that combination; the combinations explained by the same names make one diagnosis."""
        search = _Search(self, left)
        found = defaultdict(list)   # names -> [(called, computed, runs, skipped)]
        for runs in _partition(left, lambda r: json.dumps(r.conventions, sort_keys=True, default=str)):
            hit = search.run(runs)
            if hit:
                names, called, computed, explained, skipped = hit
                found[names].append((called, computed, explained, skipped))
        for names, parts in found.items():
            rs = [r for *_, runs, _ in parts for r in runs]
            skipped = sum(p[3] for p in parts)
            checked = len(rs) - skipped
            evidence = (f"the exact reference re-evaluated under it matches {checked}/{checked} failing case-runs"
                        + (f" ({skipped} larger ones not re-evaluated)" if skipped else "")
                        + " and the passing cases of the same conventions it was tried on")
            changes = {}
            for called, computed, runs, _ in parts:
                alt = {n: v for n, v in computed.items() if v != called[n]}
                key = json.dumps([called, alt], sort_keys=True, default=str)
                entry = changes.setdefault(key, [called, alt, 0, set()])
                entry[2] += len(runs)
                entry[3].update(r.group for r in runs)
            every = sum(r.status in ("fail", "error") for r in self.runs)
            varies = [n for n in names if len({_key(search.called(r, n)) for r in self.runs}) > 1]
            if len(changes) == 1 and not varies:
                called, alt, _, groups = next(iter(changes.values()))
                declarable = {n: v for n, v in alt.items() if n in self.spec.conventions}
                ignored = [n for n in alt if n not in self.spec.conventions]
                fix = (f"declare it: {_assign(declarable)}" if not ignored else
                       f"the function ignores {', '.join(ignored)}: honour it, or declare the only value it takes: "
                       f"params: {{{self.spec.id!r}: {{{', '.join(f'{n!r}: [{_value(alt[n])}]' for n in ignored)}}}}}")
                where = "" if len(rs) == every else f" of group {', '.join(sorted(groups))}"
                yield self.make("convention", rs, f"matches {' + '.join(f'{n}={_value(v)}' for n, v in alt.items())} "
                                f"on {checked}/{checked} failing cases{where} (declared {_assign(called)})", evidence,
                                fix, declarable or None, cause=f"convention: {_assign(alt)} for {_assign(called)}"), rs
                continue
            lines = "; ".join(f"called with {_assign(c)}, it computes {_assign(a)} ({n} case-runs, group "
                              f"{', '.join(sorted(g))})" for c, a, n, g in changes.values())
            yield self.make("convention", rs, f"computes another {' and '.join(names)} than it is called with: "
                            f"{lines}", evidence, f"make the function honour {' and '.join(names)} as called",
                            cause=f"convention: {' and '.join(names)} as called"), rs

    def factor(self, left):
        """got = c·exact on every array of a case: c one named constant (2, ½, −1, ...) on at least
        half the cluster's cases, or c the case's own count or parameter (T², 1/K, V/(V−1), the
        share of ignored tokens) on all of them. c is matched within the precision of each
        run's dtype, so that bfloat16 and float32 runs count as float64 ones do."""
        ratios = {id(r): q for r in left if (q := self._ratio(r)) is not None}
        if not ratios:
            return
        tracked = {id(r): diagnose_inputs.factors(self.spec, self.case(r).test) for r in left}
        names = set.intersection(*(set(tracked[id(r)]) for r in left))
        for name in sorted(names):
            if all(id(r) in ratios and _close(ratios[id(r)], tracked[id(r)][name], r.dtype) for r in left):
                yield self.make("factor", left, f"off by a factor that tracks {name}",
                                f"got = c × exact on every element of all {len(left)} failing case-run(s), with c the "
                                f"case's {name} (it varies from case to case)",
                                f"the formula gains or loses {name}: find the normaliser or scaling that applies it",
                                cause=f"factor: {name}"), left
                return
        counts = Counter(c for r in left if id(r) in ratios for c in FACTORS if _close(ratios[id(r)], c, r.dtype))
        if not counts:
            return
        c, n = counts.most_common(1)[0]
        if 2 * n < len(left):
            return   # a factor on a few cases is a coincidence of their values, not the defect
        rs = [r for r in left if id(r) in ratios and _close(ratios[id(r)], c, r.dtype)]
        what = FACTORS[c]
        groups = sorted({r.group for r in rs})
        yield self.make("factor", rs, f"off by a constant factor {what}",
                        f"got = {c:.6g} × exact on every element of {len(rs)} failing case-run(s) "
                        f"(group{'s' if len(groups) > 1 else ''} {', '.join(groups)})",
                        "find the factor in the formula (a missing or extra ½, 2, sign or normaliser)"), rs

    def parameter(self, left):
        """A numeric parameter computed as another function of its value than the identity (1/T
        for T, 1 − α for α, ε·V/(V−1) for ε, 0, a square), or as one constant whatever it is
        called with (found by solving for it on the smallest case): the exact reference
        re-evaluated so matches every failing case of the cluster and the passing cases tried."""
        small = sorted((r for r in left if self.size(r) <= MAX_ELEMENTS and r.got), key=lambda r: (self.size(r), r.uid))
        since = self.work   # its own budget: the convention search before it may have spent its
        if len(small) < MIN_CONDITION:
            return
        search = _Search(self, left)
        for p in self.spec.params:
            if p.convention or isinstance(p.default, (str, bool)) or p.default is None and not p.choices:
                continue
            if any(not isinstance(search.called(r, p.name), (int, float)) or isinstance(search.called(r, p.name), bool)
                   for r in small):
                continue
            for what, f in _TRANSFORMS:
                if self.exhausted(since):
                    return
                if all(self._fits_value(r, p.name, f(search.called(r, p.name), self._classes(r))) for r in small):
                    # not a vector whose value is only acceptable (ratios within ulps of a clip's edge,
                    # where a transformed parameter moves the kink across the ratio)
                    passing = [r for r in self.passing() if r.dtype in {x.dtype for x in left}
                               and self.size(r) <= MAX_ELEMENTS and self.case(r).result != "acceptable"
                               ][:PASSING_SAMPLE]
                    # where the transform is the identity (α = ½ for 1 − α) the passing case shows nothing
                    if all(self._fits_value(r, p.name, _or(f(search.called(r, p.name), self._classes(r)),
                                                           search.called(r, p.name))) for r in passing):
                        rs = small + [r for r in left if r not in small]
                        yield self.make("convention", rs, f"computes {p.name} as {what.format(p.name)} of the value it is "
                                        "called with",
                                        f"the exact reference with {p.name} replaced by {what.format(p.name)} matches "
                                        f"{len(small)}/{len(small)} failing case-runs re-evaluated and the passing "
                                        "case-runs tried",
                                        f"use {p.name} as the catalog defines it ({self.spec.id}), not "
                                        f"{what.format(p.name)}", cause=f"parameter: {p.name} as {what}"), rs
                        return

    def input_ignored(self, left):
        """An input the function does not read (or reads as another input's values): the exact
        reference with that input set to 0 (one input, or every input of one prefix, as the
        reference log-probabilities of DPO), or to the values of another input of its shape (a
        ratio to it dropped), matches every failing case of the cluster and the passing cases
        tried. Only inputs the objective takes no gradient of: their gradient tells nothing."""
        small = sorted((r for r in left if self.size(r) <= MAX_ELEMENTS and r.got), key=lambda r: (self.size(r), r.uid))
        since = self.work   # its own budget, as parameter's
        if len(small) < MIN_CONDITION:
            return
        floats = [i.name for i in self.spec.inputs if i.kind == "float"]
        constant = [n for n in floats if not any(label == f"grad:{n}" for r in small for label in r.got)]
        candidates = [{n: 0} for n in constant]
        prefixes = defaultdict(list)
        for n in constant:
            prefixes[n.split("_")[0]].append(n)
        candidates += [dict.fromkeys(names, 0) for names in prefixes.values() if len(names) > 1]
        candidates += [{n: other} for n in constant for other in floats if other != n]
        passing = [r for r in self.passing() if r.dtype in {x.dtype for x in left}
                   and self.size(r) <= MAX_ELEMENTS][:PASSING_SAMPLE]
        for inputs in candidates:
            if self.exhausted(since):
                return
            if all(self._fits_inputs(r, inputs) for r in small) and all(
                    self._fits_inputs(r, inputs, unchanged=True) for r in passing):
                what = ", ".join(f"{n} as {'0' if v == 0 else v}" for n, v in inputs.items())
                rs = small + [r for r in left if r not in small]
                yield self.make("input-ignored", rs, f"reads {what}: the input{'s' if len(inputs) > 1 else ''} "
                                f"{', '.join(inputs)} {'are' if len(inputs) > 1 else 'is'} not used as passed",
                                f"the exact reference with {what} matches {len(small)}/{len(small)} failing case-runs "
                                "re-evaluated and the passing case-runs tried",
                                f"use {', '.join(inputs)} as the catalog's {self.spec.id} does (an argument accepted and "
                                "never read, or a term dropped)", cause=f"input-ignored: {what}"), rs
                return

    def known_form(self, left):
        """A wrong formula real code has shipped (``conformance.bugforms``): the form's outputs
        match the values of every failing case-run of the cluster re-evaluated and of the passing
        case-runs tried (on a passing case the form must give the exact values, or it is not what
        the function computes), and differ from the exact values somewhere."""
        forms = bugforms.forms_of(self.spec.id)
        small = sorted((r for r in left if self.size(r) <= MAX_ELEMENTS and r.got), key=lambda r: (self.size(r), r.uid))
        if not forms or len(small) < MIN_CONDITION or any(self._symptom(r) == "gradient" for r in small):
            return
        passing = [r for r in self.passing() if r.dtype in {x.dtype for x in left}
                   and self.size(r) <= MAX_ELEMENTS][:PASSING_SAMPLE]
        for form in forms:
            if all(self._fits_form(r, form) for r in small + passing):
                rs = small + [r for r in left if r not in small]
                links = f" (reported: {', '.join(form.links)})" if form.links else ""
                yield self.make("known-form", rs, f"{form.name}: {form.defect}",
                                f"the values of the known form '{form.name}' match {len(small)}/{len(small)} failing "
                                f"case-runs re-evaluated and the {len(passing)} passing case-runs tried{links}",
                                form.fix, cause=f"known-form: {form.name}"), rs
                return

    def _fits_form(self, r, form) -> bool:
        case = self.case(r)
        kw = {**self.spec.defaults, **case.test["params"], **r.conventions,
              **{k: v.astype(np.float64) if v.dtype.kind == "f" else v
                 for k, v in diagnose_inputs.arrays(case.test).items()}, bugforms.RUN_DTYPE: r.dtype}
        try:
            with np.errstate(all="ignore"):
                got = form.outputs(kw)
        except (ValueError, ZeroDivisionError, OverflowError, FloatingPointError):
            return False
        if not got or any(name not in got for name in self.spec.outputs if name in r.got):
            return False
        # the values judged at the scale of the form's own terms (rescale, as for a parameter): where the
        # exact value is 0 (a JSD at β = 0) the vector's bound is 0 and a form exact to 1e-16 would fail;
        # the gradients are not the form's to say (a NaN one included)
        values = {name: np.asarray(v, dtype=np.float64) for name, v in got.items()}
        outputs = dataclasses.replace(r, got={label: g for label, g in r.got.items() if not label.startswith("grad:")})
        return self.fits(outputs, values, rescale=True)

    def _fits_inputs(self, r, inputs, unchanged=False) -> bool:
        """Whether ``r`` fits the exact reference with ``inputs`` replaced; ``unchanged``: a
        case where the replacement changes nothing fits too (it shows nothing)."""
        given = diagnose_inputs.arrays(self.case(r).test)
        if any(n not in given for n in inputs):
            return unchanged   # an optional input the case leaves out
        if any(v != 0 and (v not in given or np.shape(given[v]) != np.shape(given[n])) for n, v in inputs.items()):
            return False
        if all(np.array_equal(given[n], np.zeros_like(given[n]) if v == 0 else given[v]) for n, v in inputs.items()):
            return unchanged
        ex = self.exact(r, {}, inputs)
        return ex is not None and self.fits(r, ex, rescale=True)

    def _classes(self, r) -> int | None:
        inputs = diagnose_inputs.arrays(self.case(r).test)
        return next((v.shape[-1] for k, v in inputs.items() if "logits" in k and v.ndim >= 2), None)

    def _fits_value(self, r, name, value) -> bool:
        if value is None or not math.isfinite(value):
            return False
        ex = self.exact(r, {name: value})
        if ex is None and value < 0:
            ex = self._negative(r, name, -value)
        return ex is not None and self.fits(r, ex, rescale=True)

    def _negative(self, r, name, u) -> dict | None:
        """The exact values at ``name`` = −u where the reference refuses a negative value (a KL
        coefficient ≥ 0) and every output is linear in it: 2·f(0) − f(u), linearity checked
        on f(0), f(u), f(2u)."""
        e0, e1, e2 = (self.exact(r, {name: v}) for v in (0.0, u, 2 * u))
        if e0 is None or e1 is None or e2 is None or set(e0) != set(e1) or set(e1) != set(e2):
            return None
        for label in e0:
            a, b, c = e0[label], e1[label], e2[label]
            if not (np.isfinite(a).all() and np.isfinite(b).all() and np.isfinite(c).all()):
                return None
            if not np.allclose(c - b, b - a, rtol=1e-12, atol=1e-15 * (1 + float(np.abs(c).max(initial=0.0)))):
                return None
        return {label: 2 * e0[label] - e1[label] for label in e0}

    def condition(self, left):
        """A predicate over the inputs that every failure of the cluster is confined to and
        that most passing case-runs of the same dtypes lack: padding or ignored labels present,
        the sign of an advantage, −inf logits; at the finest grain the arrays allow (the
        elements of a gradient or per-token output, the rows, else the case)."""
        dtypes = {r.dtype for r in left}
        passing = [r for r in self.passing() if r.dtype in dtypes]
        names = None
        for r in left:
            here = {c.name for c in diagnose_inputs.conditions(self.spec, self.case(r).test)}
            names = here if names is None else names & here
        for cond in (c for c in diagnose_inputs.conditions(self.spec, self.case(left[0]).test) if c.name in names):
            grains = [self._confined_to(r, cond) for r in left]
            if not all(grains):
                continue
            holds = [r for r in passing if self._holds(r, cond)]
            lacks = len(passing) - len(holds)
            grain = max(grains)
            # confined to the marked rows or elements, the failures point at the condition even where
            # it holds on passing cases too (a bug that needs a parameter to show); confined only to
            # the cases, the passing cases must mostly lack it and most of the dtype's failures show it
            if len(left) < MIN_CONDITION or not lacks or (grain == 3 and (2 * len(holds) > len(left)
                                                                           or 2 * len(left) < len(self.stratum))):
                continue
            where = ("on the elements" if grain == 1 else "on the rows" if grain == 2 else "on the cases")
            yield self.make("condition", left, f"fails only {where} with {cond.name}",
                            f"every out-of-bound element of the {len(left)} failing case-run(s) lies {where} with "
                            f"{cond.name}; {lacks} of the {len(passing)} passing case-run(s) have none, "
                            f"{len(holds)} have some", cond.fix, cause=f"condition: {cond.name}"), left
            return

    def _holds(self, r, cond) -> bool:
        test = self.case(r).test
        try:
            return bool(np.any(cond.mask(diagnose_inputs.arrays(test), test["params"])))
        except KeyError:
            return False

    def _confined_to(self, r, cond) -> int:
        """0 when some out-of-bound element of ``r`` lies outside ``cond``; else the grain that
        shows it: 1 elements, 2 rows, 3 the whole case."""
        test = self.case(r).test
        try:
            m = np.asarray(cond.mask(diagnose_inputs.arrays(test), test["params"]), dtype=bool)
        except KeyError:
            return 0
        if not r.got or not m.any():
            return 0
        grain, coarse = 3, False
        for label in r.got:
            off = self._off_elements(r, label)
            if not off.any():
                continue
            if off.shape == m.shape and off.ndim and not off[~m].any():
                grain = min(grain, 1)
            elif (off.ndim and m.ndim and off.shape[0] == m.shape[0]
                  and not off.reshape(off.shape[0], -1).any(axis=1)[~m.reshape(m.shape[0], -1).any(axis=1)].any()):
                grain = min(grain, 2)
            elif off.ndim:
                coarse = True   # this array shows the failure only case by case
        return 3 if coarse else grain   # a scalar output locates nothing: the other arrays decide

    def _off_elements(self, r, label, relative: bool = False) -> np.ndarray:
        """Per element of ``label``: whether it is out of its bound (or not finite where the exact
        value is). ``relative``: also where the error exceeds 2^-20 of the element's own exact
        value (a bound scaled to the array's largest element hides a wrong small one)."""
        got, want = np.asarray(r.got[label], dtype=np.float64), self.want(r, label)
        if got.shape != want.shape:
            return np.ones(got.shape, dtype=bool)
        name = label.rpartition(":")[2]
        selected = harness._selection(self.spec, self.case(r).test)
        if not label.startswith("grad:") and name in selected:
            got = np.where(selected[name], got, want)
        tol = self.tolerance(r)
        kind = "grads" if label.startswith("grad:") else "outputs"
        scale = float(tol.test["scale"][kind][name])
        elements = None
        if tol.careful:
            stored = tol.test["scale"].get("elements", {}).get(label if kind == "grads" else name)
            elements = np.abs(want) if stored is None else np.asarray(stored, dtype=np.float64)
        bound = compare.bound(want, r.dtype, tol.k, scale, elements)
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.where(np.isinf(want) & (got == want), 0.0, np.abs(got - want))
            off = ~(err <= bound)
            if relative:
                off |= ~(err <= 2.0**-20 * np.abs(want) + compare.ulp(want, r.dtype))
        return off

    def clamp(self, left):
        """Every out-of-bound element of the cluster lies where |log ratio| exceeds some c, and
        every element within bound (failing and passing case-runs alike) where it does not: a
        clamp or cut-off of the log ratio at c, which the bounds of c locate."""
        dtypes = {r.dtype for r in left}
        # passing runs called as the failing ones were (a declared clamp of the value hides the other)
        called = {json.dumps(r.conventions, sort_keys=True, default=str) for r in left}
        lo, hi, seen = 0.0, math.inf, False
        for r in left + [r for r in self.passing() if r.dtype in dtypes
                         and json.dumps(r.conventions, sort_keys=True, default=str) in called]:
            inputs = diagnose_inputs.arrays(self.case(r).test)
            pair = diagnose_inputs.log_ratio(self.spec, inputs)
            if pair is None:
                return
            num, den, lr = pair
            failing = r in left
            # an element whose exact gradient with respect to the log ratio's numerator is 0 (a clipped
            # branch, a masked token) does not depend on the ratio: passing there says nothing of a clamp
            grad = f"grad:{num}"
            depends = np.ones(lr.shape, dtype=bool)
            if grad in r.got and np.shape(self.want(r, grad)) == lr.shape:
                depends = self.want(r, grad) != 0
            for label in r.got:
                # the relative test finds a wrong small element of a failing run; on a passing run it
                # would count a kink's acceptable value (ρ exactly at 1 + ε) as a failure
                off = self._off_elements(r, label, relative=failing)
                if off.shape != lr.shape:
                    if off.any() and failing:
                        return   # an array that cannot show where it fails
                    continue
                seen = seen or bool(off.any())
                if off.any():
                    hi = min(hi, float(lr[off].min()))
                if (~off & depends).any():
                    lo = max(lo, float(lr[~off & depends].max()))
        # A formula wrong at second order (a k3 of the reversed ratio) also fails only beyond some
        # |log ratio|, but passes only near 0: a clamp is located where a ratio is already far
        # from 1 (MIN_CLAMP), not between 0 and a tiny bound.
        if not seen or not lo < hi or lo < MIN_CLAMP:
            return
        yield self.make("clamp", left, f"fails only where |{num} − {den}| > c, c between {lo:.4g} and {hi:.4g}: "
                        "a clamp of the log ratio",
                        f"every out-of-bound element of the {len(left)} failing case-run(s) has |{num} − {den}| ≥ "
                        f"{hi:.4g}, every element within bound (passing case-runs too) ≤ {lo:.4g}",
                        f"find the clamp (or cut-off) of {num} − {den} near that value: remove it, or declare it "
                        f"(log_ratio_clamp) where the catalog has one", cause="clamp: log ratio"), left

    def float32_intermediate(self, left):
        """float64 runs that fail the float64 bound and meet the float32 one: a float32 step inside
        a float64 computation (float32_inside proves the whole computation is float32 where it can;
        this is the weaker mark). On the whole cluster; or on most of it (at least MIN_CONDITION
        runs) when every other run misses the float32 bound by orders (FLOAT32_APART): two
        populations, the second a defect of its own, which the later tests may name."""
        within, beyond = [], []
        for r in left:
            if not (r.dtype == "float64" and r.got):
                return
            if self._rounding_shows(r) and self.fits(r, {label: self.want(r, label) for label in r.got},
                                                     dtype="float32"):
                within.append(r)
            else:
                beyond.append(r)
        if not within or beyond and (len(within) < MIN_CONDITION or 2 * len(within) < len(left) or not all(
                self._beyond_float32(r) for r in beyond)):
            return
        whole = f"on all {len(left)}" if not beyond else f"on {len(within)} of the {len(left)}"
        yield self.make("float32-inside", within, "a float32 intermediate inside the float64 computation",
                        f"{whole} failing float64 case-run(s) the error is within the float32 bound "
                        "(about 2^-24 of the scale), orders above the float64 one",
                        _FLOAT32_FIX), within

    def _beyond_float32(self, r) -> bool:
        """Whether some array of ``r`` misses even the float32 bound by FLOAT32_APART or more."""
        tol = self.tolerance(r, "float32")
        for label, got in r.got.items():
            want = self.want(r, label)
            if np.shape(got) != np.shape(want) or _non_finite(got, want):
                return True
            m = tol.measure(label, got, want)
            if m.max_err_over_tol >= FLOAT32_APART:
                return True
        return False

    def _ratio(self, r) -> float | None:
        """The constant c with got = c·exact within the case's bound on every array, if any."""
        if not r.got:
            return None
        q = None
        for label, got in r.got.items():
            want = self.want(r, label)
            if np.shape(got) != np.shape(want) or not np.isfinite(got).all():
                return None
            big = np.abs(want) > 0
            if q is None and big.any():
                q = float(np.median(got[big] / want[big]))
        if q is None or q == 1.0 or q == 0.0:
            return None
        scaled = {label: q * self.want(r, label) for label in r.got}
        return q if self.fits(r, scaled) and not _close(q, 1.0, r.dtype) else None

    def cancellation(self, left):
        """The remaining failures that carry a flag marking cancellation, when they are most of
        the objective's failures (a few flagged cases among many are the other defect's)."""
        flags = [f for f, note in self.notes.items() if note.get("category") == "numerics"
                 and ("Cancellation" in f or f in CANCELLATION)]
        for f in flags:
            rs = [r for r in left if f in r.flags]
            if rs and 2 * len(rs) >= len(self.stratum):
                yield self.make("cancellation", rs, f"digits lost to cancellation on the {f} cases",
                                f"{len(rs)} of the {len(self.stratum)} failing case-run(s) carry {f}, the vectors' mark of a "
                                "value formed from terms that cancel",
                                f"use the cancellation-free form the vectors describe: "
                                f"{self.notes[f].get('description', '')}"), rs
                return


class _Search:
    """The values of one or two conventions or parameters under which the exact reference
    matches every failing case of a group of runs (all called with the same conventions).
    Cases are tried smallest first, so most candidates die on the first one; a candidate that
    survives is also tried on passing cases called the same way, any of which refutes it."""

    def __init__(self, obj: _Objective, left):
        self.obj = obj
        self.since = obj.work
        spec = obj.spec
        seen = defaultdict(set)
        for c in obj.cases.values():
            if c.result != "invalid":
                for n in spec.conventions:
                    seen[n].add(_key(c.conventions.get(n)))
        self.values = {}
        for p in spec.params:
            if p.convention:
                self.values[p.name] = list(dict.fromkeys([*map(_key, p.choices), _key(p.default),
                                                          *sorted(seen[p.name], key=str)]))
            elif not isinstance(p.default, str):
                self.values[p.name] = list(dict.fromkeys([*map(_key, p.choices), _key(p.default)]))

    def called(self, r, name):
        return r.conventions.get(name, self.obj.case(r).test["params"].get(name, self.obj.spec.defaults.get(name)))

    def run(self, runs):
        """(names, {name: called value}, {name: computed value}, the runs explained, how many
        of them were not re-evaluated), or None."""
        runs = sorted(runs, key=lambda r: (self.obj.size(r), r.uid))
        small = [r for r in runs if self.obj.size(r) <= MAX_ELEMENTS]
        if not small or not all(r.got for r in runs):
            return None
        large = [r for r in runs if self.obj.size(r) > MAX_ELEMENTS]
        partial = set()
        # what explained another stratum or cluster first: one cause, one line
        for names, chosen in self.obj.explained:
            found = self.explains(names, small, set(), only=[chosen])
            if found:
                return names, found[0], found[1], found[2] + large, len(large)
        for name in self.values:
            found = self.explains((name,), small, partial)
            if found:
                return (name,), found[0], found[1], found[2] + large, len(large)
        # pairs of conventions before those with a parameter, those with a name that matched
        # some case alone first; the search stops at its budget (SEARCH_ELEMENTS)
        conventions = set(self.obj.spec.conventions)
        pairs = sorted(itertools.combinations(self.values, 2),
                       key=lambda p: (-(p[0] in conventions) - (p[1] in conventions),
                                      -(p[0] in partial) - (p[1] in partial)))
        for names in pairs:
            if self.obj.exhausted(self.since):
                return None
            found = self.explains(names, small, set())
            if found:
                return names, found[0], found[1], found[2] + large, len(large)
        return None

    def explains(self, names, small, partial: set, only=None):
        """({name: called value, or the list of them}, {name: computed value}, the runs it
        explains) when one assignment of ``names`` matches every run of ``small`` that carries
        no edge or numerics flag (every run, when all carry one); the flagged runs it does not
        match are left to the later tests. Adds to ``partial`` the single names that matched
        some run."""
        def called(r):
            return tuple(_key(self.called(r, n)) for n in names)

        classes = {f for f, note in self.obj.notes.items() if note.get("category") in EDGE_CATEGORIES
                   and f not in NOT_A_CLASS}
        core = [r for r in small if not classes & set(r.flags)] or small
        # a pair must change both names: one that keeps a value is a single, tried before
        options = only or [a for a in itertools.product(*[self.values[n] for n in names])]
        for r in core:
            c = called(r)
            options = [a for a in options if all(x != y for x, y in zip(a, c)) and self._fits(r, names, a)]
            if options and len(names) == 1:
                partial.add(names[0])
            if not options:
                return None
        calls = {called(r) for r in core}
        dtypes = {r.dtype for r in small}
        same = [r for r in self.obj.passing() if r.conventions == small[0].conventions and called(r) in calls
                and r.dtype in dtypes]
        for r in sorted(same, key=self.obj.size)[:PASSING_SAMPLE]:
            options = [a for a in options if self._fits(r, names, a)]
        if not options:
            return None
        chosen = options[0]
        if (names, chosen) not in self.obj.explained:
            self.obj.explained.append((names, chosen))
        explained = core + [r for r in small if r not in core and called(r) in calls and self._fits(r, names, chosen)]
        was = {n: [_unkey(v) for v in sorted({c[i] for c in calls}, key=str)] for i, n in enumerate(names)}
        return ({n: v[0] if len(v) == 1 else v for n, v in was.items()},
                {n: _unkey(v) for n, v in zip(names, chosen)}, explained)

    def _fits(self, r, names, alt) -> bool:
        ex = self.obj.exact(r, {n: _unkey(v) for n, v in zip(names, alt)})
        return ex is not None and self.obj.fits(r, ex, rescale=True)


def _or(value, default):
    return default if value is None else value


def _safe(f):
    def g(x, v):
        try:
            return float(f(x, v))
        except (ZeroDivisionError, TypeError, OverflowError, ValueError):
            return None
    return g


# What a parameter x is computed as instead of itself ({} stands for its name); V: the classes.
_TRANSFORMS = tuple((what, _safe(f)) for what, f in (
    ("1/{}", lambda x, v: 1 / x if x != 1 else None),
    ("1 − {}", lambda x, v: 1 - x if x != 0.5 else None),
    ("{}·V/(V−1) (spread over V−1 classes)", lambda x, v: x * v / (v - 1) if x else None),
    ("{}²", lambda x, v: x * x if x not in (0, 1) else None),
    ("√{}", lambda x, v: math.sqrt(x) if x > 0 and x != 1 else None),
    ("0 (the parameter ignored)", lambda x, v: 0.0 if x else None),
    ("−{} (the sign)", lambda x, v: -x if x else None),
))


def _merge(found, order) -> list[Diagnosis]:
    """One line per cause: the clusters' lines of one cause joined, counts summed; the line
    keeps the defect, evidence and repro of the part whose repro is the smallest case, so that
    evidence and repro speak of the same case."""
    parts = defaultdict(list)
    for d, claimed in found:
        parts[d.cause].append((d, claimed))
    out = []
    for group in parts.values():
        if len(group) == 1:
            out.append(group[0][0])
            continue
        rs = [r for _, claimed in group for r in claimed]
        first = min(group, key=lambda p: min((order(r) for r in p[1]), default=(math.inf,)))[0]
        dtypes = sorted({r.dtype for r in rs})
        out.append(dataclasses.replace(first, count=len(rs), uids=sorted({r.uid for r in rs}),
                                       evidence=f"{first.evidence} (the same cause on {len(rs)} case-run(s) in all, "
                                                f"{'/'.join(dtypes)})"))
    return out


def _partition(runs, key) -> list[list]:
    out = defaultdict(list)
    for r in runs:
        out[key(r)].append(r)
    return list(out.values())


_TIME_LIMIT = re.compile(r"exceeded the ([0-9.e+]+) s time limit")
_IN_PLACE = re.compile(r"mutated its input '?([^' ]+)'? in place")


_FLOAT32_FIX = ("compute in the inputs' dtype (a .float(), a float32 constant or buffer, dtype=torch.float32 inside, "
                "or an integer or boolean mask's sum plus a Python float, which torch makes float32); "
                "a library that computes in float32 on purpose declares it: computes_in: \"float32\" "
                "(docs/targets.md#computes_in)")


def _key(value):
    """A hashable stand-in for a convention value (lists become tuples)."""
    return ("__list__", tuple(value)) if isinstance(value, list) else value


def _unkey(value):
    return list(value[1]) if isinstance(value, tuple) and len(value) == 2 and value[0] == "__list__" else value


def _evaluate(spec, case, conventions: dict, inputs: dict | None = None) -> dict | None:
    module = importlib.import_module(f"lossproof.refimpl.exact.{spec.family}")
    fn, vjp = getattr(module, spec.name), getattr(module, f"{spec.name}_vjp", None)
    test = case.test
    # ``conventions`` carries the override, which may name a parameter the case sets
    kwargs = {**spec.defaults, **test["params"], **conventions}
    given = {name: decode_input(value) for name, value in test["inputs"].items()}
    kwargs.update(given)
    for name, source in (inputs or {}).items():
        kwargs[name] = np.zeros_like(np.asarray(given[name], dtype=np.float64)) if source == 0 else given[source]
    try:
        with mp.precision(DPS), mpmath.workdps(DPS):
            out = fn(**kwargs)
            out = out if isinstance(out, dict) else {spec.outputs[0]: out}
            values = {name: _floats(out[name]) for name in spec.outputs if name in out}
            if vjp is not None and spec.grads and test.get("cotangents"):
                ct = {k: decode_input(v) for k, v in test["cotangents"].items()}
                grads = vjp(ct if len(spec.outputs) > 1 else ct[spec.outputs[0]], **kwargs)
                values.update({f"grad:{name}": _floats(grads[name]) for name in spec.grads_of(kwargs)})
    except (InputError, ValueError, TypeError, ZeroDivisionError, OverflowError):
        return None
    return values


def _floats(x) -> np.ndarray:
    arr = np.array(x, dtype=object)
    return np.vectorize(float, otypes=[np.float64])(arr) if arr.size else arr.astype(np.float64)


def _precision(dtype: str) -> float:
    return -compare.UNIT_ROUNDOFF[dtype]


def _rows_equal_rewards(inputs):
    r = inputs.get("rewards")
    return None if r is None or r.ndim != 2 else r.max(axis=1) == r.min(axis=1)


def _rows_neg_inf(inputs):
    rows = [np.isneginf(v).reshape(v.shape[0], -1).any(axis=1) for v in inputs.values() if v.ndim >= 1 and v.size]
    rows = [m for m in rows if m.shape == rows[0].shape] if rows else []
    return np.any(rows, axis=0) if rows else None


def _rows_empty(inputs):
    m = inputs.get("mask")
    return None if m is None or m.ndim != 2 else m.sum(axis=1) == 0


# Classes of rows the inputs themselves mark, for the non-finite test.
_ROW_CLASSES = (("groups whose rewards are all equal (or single)", "a group whose rewards are all equal (or a single "
                 "reward)", _rows_equal_rewards),
                ("−inf logits", "a row with a −inf logit", _rows_neg_inf),
                ("empty mask rows", "a row whose mask selects no token", _rows_empty))


def _non_finite(got, want) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    return got.shape == want.shape and bool((np.isnan(got) | (np.isinf(got) & ~np.isinf(want))).any())


def _close(q: float, c: float, dtype: str) -> bool:
    """q and c agree within what a ratio of two values of ``dtype`` can tell apart."""
    return math.isclose(q, c, rel_tol=max(1e-9, 16 * compare.UNIT_ROUNDOFF.get(dtype, 2.0**-53)))


def _numbers_of(got, dtype: str) -> bool:
    """Whether every finite element of ``got`` is a number of ``dtype``."""
    g = np.asarray(got, dtype=np.float64)
    finite = g[np.isfinite(g)]
    if dtype == "float32":
        return _float32_numbers(finite)
    f32 = finite.astype(np.float32)
    if not np.array_equal(f32.astype(np.float64), finite):
        return False
    bits = f32.view(np.uint32)
    if dtype == "bfloat16":
        return bool(np.all(bits & 0xFFFF == 0))
    with np.errstate(over="ignore"):
        return bool(np.array_equal(finite.astype(np.float16).astype(np.float64), finite))


def _float32_numbers(got) -> bool:
    g = np.asarray(got, dtype=np.float64)
    finite = g[np.isfinite(g)]
    with np.errstate(over="ignore"):
        return bool(np.array_equal(finite.astype(np.float32).astype(np.float64), finite))


def _value(v) -> str:
    return repr(v) if not isinstance(v, bool) else str(v)


def _assign(values: dict) -> str:
    return ", ".join(f"{n}={_value(v)}" for n, v in values.items())


def _sentence(text: str) -> str:
    return text.split(": ")[0].split(". ")[0][:160]


def _first_message(rs) -> str:
    return next((r.message[:200] for r in rs if r.message), "")
