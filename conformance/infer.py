"""``lossproof infer``: the conventions declaration that fits a function (issue 25, issue 36).

The function is run over every convention group of the vectors as if it declared ``"*"`` (each
vector with its own group's conventions). A group *fits* when at least one of its cases passes
and none fails; a group the function does not compute (every case unsupported or skipped)
neither fits nor rules anything out, and the text gives the reason the harness gave (the wrapper
does not take the convention: the call is refused, which is no evidence against the group; or
it raises NotImplementedError for the value). A target's declared
known failures still excuse failing cases, but an excused case (xfail) is no evidence *for* a
group: a known failure is stated for the conventions the target declares, and a rule such as
"float64 inputs give a float32 result" excuses any wrong value of every group alike (Liger's
distillation in float64, verl's whitened advantages, whose ddof = 0 and ddof = 1 groups both
failed only as known failures). A group whose judged cases are all excused is *undecided*: it
neither fits nor is ruled out, and the text says so (another --dtype may decide it).

When no committed group fits, the search goes on beyond them, as ``check`` does for a declared
combination no group holds (``conformance.derive``): the combinations one convention away from a
committed group (the convention set to another value some committed group or the catalog's
choices hold: an eps of 1e-6 with the sample std and zeroed degenerate groups, although no
group holds that combination), then theirs, and so on, are given exact cases derived at run
time, and the target runs on them declaring that combination, the neighbours of the
combinations the function comes nearest to first (the smallest errors relative to the bounds,
then the most passing cases). A derived combination whose cases all pass fits like a group.

A group is evidence only for the conventions its passing cases observe: those whose change
changes one of the cases' exact values (re-evaluated with the exact reference). At β = 0 no KL
convention changes a value of ``grpo.loss``, so a function pinned to one KL combination passes
the β = 0 group of its policy loss whatever KL conventions that group holds. A fitting group
that a ruled-out committed group cannot be told from on its passing cases, where the function's
values on a failing case of that other group are not the fitting group's either, is *no
evidence*: it does not count as fitting, and where no other group fits the search below goes
on as if none had. A combination the search judges on cases that cannot tell
it from another fitting one, whose cases can, is set aside the same way (cases derived from β = 0
vectors fit every KL convention alike). Where nothing fits after all, the groups set aside are
proposed, and a note says their values of those conventions were not observed.

A convention no fitting committed group's passing cases observe (the KL conventions of
``grpo.loss`` where only β = 0 groups hold the policy loss and aggregation, as for CISPO with a
sequence aggregation) is judged on cases that do: cases derived with the group's conventions
from the committed tests nearest it whose exact values change with it. Where the function passes
them the group stands; where it does not, the group is no evidence (and is not proposed after
all), and the combinations that differ from it only in the conventions those tests observe are
searched on the same tests, as below. A convention no such test observes under the group's
other conventions (``std_ddof`` without whitening: the reference reads it only when it whitens)
is named in a note and left open ("*") in the declaration where that still accepts exactly the
fitting groups: the function's value of it is not shown, and a declaration does not pin it.

When float64 rules out a group only because the function returns a narrower dtype (every
failing float64 run narrowed), the groups are judged again in float32, and the text says so:
a function that computes in float32 on purpose declares the dtypes it serves.

The declaration proposed is the smallest one that accepts exactly the groups that fit, among
the groups judged: one value or a list per convention when the fitting groups form such a
product, otherwise a list of combinations (docs/targets.md). A group it leaves out is never
dropped silently: a group with passing cases whose failures the diagnosis names as a defect
(any kind but ``convention`` and ``unexplained``) is listed first, as left out by that defect,
not by a convention, so that the bug is fixed rather than declared away. When no group fits,
each group is named with the first case that rules it out.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import heapq
import inspect
import itertools
import json
import math
from dataclasses import dataclass, field

import numpy as np

from lossproof.conformance import catalog, compare, derive, diagnose, harness, plan
from lossproof.conformance.results import NOT_CALLED
from lossproof.conformance.targets.target import ANY, Target
from lossproof.conformance.vectors.format import LARGE_FLAG

# Combinations beyond the committed groups screened on derived cases, per objective. A screening
# derives SCREEN cases and most stop at the first, so 200 cost about what 30 full judgements
# (PER_COMBINATION cases each) do: one inference stays within about a minute.
MAX_DERIVED = 200
SCREEN = 2
MAX_EXCESS = 30.0     # decades: an error beyond 1e30 bounds (or a NaN) is as far as any
# Committed tests looked at for ones that observe a convention no fitting group's cases observe
# (_observing): one or two exact evaluations each, a few seconds in all for grpo.loss.
LOOK = 60


@dataclass
class Group:
    name: str
    conventions: dict
    counts: dict = field(default_factory=dict)   # status -> case-runs
    against: str = ""                            # the first case that rules it out: uid and message
    excused: str = ""                            # the first declared known failure: uid and reason
    why_not: str = ""                            # the first reason a case was not computed
    derived: bool = False                        # judged on cases derived at run time
    defect: str = ""                             # the defect that rules it out, when not a convention
    narrowed: bool = False                       # every failing run returned a narrower dtype
    not_called: bool = False                     # every failure: the function's signature refused the call
    outputs: int = 0                             # output arrays compared, over every judged case-run
    log_excess: float = 0.0                      # Σ log10(error / bound) over those out of tolerance (capped)
    passed: set = field(default_factory=set)     # uids of its passing cases: what it observes
    cases: dict = field(default_factory=dict)    # uid -> the cases derived for it (a derived group)
    hidden: str = ""                             # why its passing cases are no evidence (_hide, _aside, _observe)
    refuted: bool = False                        # hidden by _observe: cases that observe what its own do not fail it

    @property
    def closeness(self) -> tuple:
        """How near the function came to the group, to order a search: the mean excess of the
        output arrays' error over their bound, in decades (0 for an array within tolerance,
        MAX_EXCESS for a non-finite one or a case-run that raised), negated; then the share of judged case-runs that pass.
        The error, not the passing cases, leads: a term weighted by a small coefficient (β·KL)
        computed under another convention misses by little on every case, while a few cases
        pass under any convention that does not touch them (β = 0, equal inputs)."""
        judged = sum(self.counts.get(s, 0) for s in ("pass", "xpass", "fail", "error")) or 1
        return (-self.log_excess / (self.outputs or 1), self.counts.get("pass", 0) / judged)

    @property
    def fits(self) -> bool:
        return any(self.counts.get(s, 0) for s in ("pass", "xpass")) and not self.ruled_out and not self.hidden

    @property
    def ruled_out(self) -> bool:
        return bool(self.counts.get("fail", 0) or self.counts.get("error", 0))

    @property
    def undecided(self) -> bool:
        """Judged, but every judged case-run a declared known failure (module docstring)."""
        return bool(self.counts.get("xfail", 0)) and not self.fits and not self.ruled_out and not self.hidden


@dataclass
class Inference:
    objective: str
    groups: list[Group]
    declaration: dict | list | None     # None: no group fits
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The declaration to paste into a target file, or why none is proposed."""
        if self.declaration is None:
            lines = [f"{self.objective}: no convention group of the vectors fits", *self.notes]
            lines += [f"  {g.name} ({_assign(g.conventions)}): ruled out by {g.against}"
                      for g in self.groups if g.ruled_out and not g.derived]
            tried = [g for g in self.groups if g.derived and not g.fits]
            if tried:
                lines.append(f"  {len(tried)} combination(s) beyond the committed groups, judged on cases derived at "
                             f"run time, are ruled out too, e.g. {tried[0].name}: {tried[0].against}")
            lines += [_undecided(g) for g in self.groups if g.undecided]
            lines += [f"  {g.name}: not computed ({g.why_not or 'every case unsupported or skipped'})"
                      for g in self.groups if not g.ruled_out and not g.fits and not g.undecided and not g.hidden]
            return "\n".join(lines)
        defects = [f"  left out by a defect, not a convention: {g.name} ({_assign(g.conventions)}): {g.defect}; "
                   "fix it (or declare the failure a known one) rather than declare the group away"
                   for g in self.groups if g.defect]
        fitting = ", ".join(_label(g) for g in self.groups if g.fits)
        excused = ", ".join(f"{g.name} {g.counts['xfail']}" for g in self.groups if g.fits and g.counts.get("xfail"))
        out = [f"{self.objective}: fits the groups {fitting}"
               + (f" (case-runs excused as declared known failures, no evidence either way: {excused})" if excused else ""),
               f'    "conventions": {{"{self.objective}": {_python(self.declaration)}}},', *self.notes, *defects]
        for g in self.groups:
            if g.ruled_out and not g.derived and not g.defect:
                out.append(f"  not {g.name} ({_assign(g.conventions)}): ruled out by {g.against}")
        out += [_undecided(g) for g in self.groups if g.undecided]
        out += [_hidden(g) for g in self.groups if g.hidden]
        out += [f"  {g.name}: not computed ({g.why_not})" for g in self.groups
                if g.why_not and not g.ruled_out and not g.fits and not g.undecided and not g.hidden]
        return "\n".join(out)


def _label(g: Group) -> str:
    return f"{g.name} (cases derived at run time: no committed group holds it)" if g.derived else g.name


def _undecided(g: Group) -> str:
    return (f"  undecided {g.name} ({_assign(g.conventions)}): every judged case-run ({g.counts['xfail']}) "
            f"is a declared known failure, e.g. {g.excused}; another --dtype may decide it")


def _hidden(g: Group) -> str:
    return f"  no evidence: {g.name} ({_assign(g.conventions)}) passes, but {g.hidden}"


def infer(target: Target, vs, objectives=("*",), dtypes=("float64",), progress=None,
          time_limit: float = 30.0) -> list[Inference]:
    """One Inference per objective the target implements among the globs ``objectives``."""
    stripped = dataclasses.replace(target, conventions=ANY)
    out = []
    for oid in target.objectives:
        if not any(fnmatch.fnmatchcase(oid, g) for g in objectives):
            continue
        notes = []
        results = harness.run(stripped, vs, objective=oid, dtypes=list(dtypes), progress=progress,
                              time_limit=time_limit)
        groups = _groups(results)
        if _only_narrowing(groups) and "float32" not in dtypes and "float32" in target.dtypes:
            narrowed = ", ".join(g.name for g in groups if g.narrowed)
            notes.append(f"  in {', '.join(dtypes)} the groups {narrowed} are ruled out only because the function "
                         "returns a narrower dtype than its inputs; judged in float32 instead. A function that "
                         "computes in float32 on purpose declares the dtypes it serves (\"dtypes\" without "
                         "float64); to serve float64, return float64")
            results = harness.run(stripped, vs, objective=oid, dtypes=["float32"], progress=progress,
                                  time_limit=time_limit)
            groups = _groups(results)
            dtypes_now = ["float32"]
        else:
            dtypes_now = list(dtypes)
        unobserved = []
        if any(g.fits for g in groups):
            _hide(stripped, groups, vs, oid, results, time_limit)
            found, unobserved = _observe(target, vs, oid, groups, dtypes_now, time_limit, notes)
            groups += found
        if not any(g.fits for g in groups) and not all(g.not_called for g in groups):
            groups += _search(target, vs, oid, groups, dtypes_now, time_limit, notes)
        _aside(groups, vs, oid)
        if not any(g.fits for g in groups):
            notes += _unhide(groups)
        decl = declaration(target, oid, groups, unobserved)
        if decl is not None:
            _name_defects(stripped, vs, groups, results)
        out.append(Inference(oid, groups, decl, notes))
    return out


def _groups(results) -> list[Group]:
    groups: dict = {}
    bad: dict = {}
    for r in results:
        if r.axis != "conformance":
            continue
        key = json.dumps(r.conventions, sort_keys=True)
        _count(groups.setdefault(key, Group(r.group, r.conventions)), r)
        if r.status in ("fail", "error"):
            bad.setdefault(key, []).append(r)
    for key, runs in bad.items():
        g = groups[key]
        g.narrowed = all(r.probes.get("narrowed") for r in runs)
        g.not_called = all(r.message.startswith(NOT_CALLED) for r in runs)
        if g.not_called:    # the signature refused the call: no evidence against the conventions
            g.counts["unsupported"] = g.counts.get("unsupported", 0) + g.counts.pop("fail", 0) + g.counts.pop("error", 0)
            g.why_not, g.against = runs[0].message[:200], ""
    return list(groups.values())


def _count(g: Group, r) -> None:
    g.counts[r.status] = g.counts.get(r.status, 0) + 1
    if r.status in ("fail", "error") and not r.outputs:    # raised, or returned nothing to compare
        g.outputs += 1
        g.log_excess += MAX_EXCESS
    for metrics in r.outputs.values():
        g.outputs += 1
        excess = metrics.get("err_over_tol")
        if excess is None or not math.isfinite(excess):
            g.log_excess += MAX_EXCESS
        elif excess > 1:
            g.log_excess += min(MAX_EXCESS, math.log10(excess))
    if r.status in ("fail", "error") and not g.against:
        g.against = f"{r.uid} [{r.dtype}]: {r.message[:160]}"
    if r.status == "xfail" and not g.excused:
        g.excused = f"{r.uid} [{r.dtype}]: {(r.known or r.message)[:100]}"
    if r.status == "unsupported" and not g.why_not:
        g.why_not = r.message[:200]
    if r.status in ("pass", "xpass"):
        g.passed.add(r.uid)


def _only_narrowing(groups: list[Group]) -> bool:
    """No group fits, and some group is ruled out only by returning a narrower dtype."""
    return not any(g.fits for g in groups) and any(g.narrowed for g in groups)


def _search(target: Target, vs, oid: str, groups: list[Group], dtypes, time_limit, notes, *,
            names=None, bases=None, avoid=None, committed_values=None) -> list[Group]:
    """Combinations beyond the committed groups, judged on derived cases (module docstring),
    best first: the neighbours of a combination (one convention changed) are queued by how
    near the function came to it (``Group.closeness``), starting from the ruled-out ``groups``, so
    that a function several conventions away from every group is reached through the
    combinations it comes nearer to. Each is screened on SCREEN derived cases, where one failing
    case-run rules it out; one that passes them is judged on the full set. Once one fits, only
    the neighbours of the fitting combinations are judged (a function may compute several, or
    some that give the same values); the search ends when none is left, or after MAX_DERIVED.
    ``names``: the conventions changed (all by default); ``bases``: the committed tests the cases
    are derived from (``derive.derive``); ``avoid``: combinations not judged (by default those
    of ``groups``, the committed groups, whose own cases judged them); ``committed_values``: the
    conventions of the committed groups where ``groups`` are not they (``_values``)."""
    spec = catalog.get(oid)
    committed = [g.conventions for g in groups] if avoid is None else avoid
    values = _values(spec, committed_values or committed)
    queued: set[str] = set()      # in the frontier now
    judged: set[str] = set()
    frontier: list = []
    order = itertools.count()      # ties: first queued, first judged

    def queue(source: Group, distance: int):
        base = _full(source.conventions, spec)
        for n in names or spec.conventions:
            for v in values[n]:
                assignment = {**base, n: json.loads(v)}
                key = json.dumps(assignment, sort_keys=True)
                if (key not in queued and key not in judged and derive.not_a_choice(spec, assignment) is None
                        and not any(_same(assignment, c, spec) for c in committed)):
                    queued.add(key)
                    heapq.heappush(frontier, (_negated(source.closeness), distance, next(order), assignment))

    for g in groups:
        if g.ruled_out:
            queue(g, 1)
    found: list[Group] = []
    fitted = False
    while frontier and len(found) < MAX_DERIVED:
        _, distance, _, assignment = heapq.heappop(frontier)
        key = json.dumps(assignment, sort_keys=True)
        queued.discard(key)
        judged.add(key)
        g = _judge(target, vs, oid, assignment, dtypes, time_limit, SCREEN, bases)
        if g is None:
            continue
        if not g.ruled_out:
            g = _judge(target, vs, oid, assignment, dtypes, time_limit, bases=bases) or g
        found.append(g)
        if g.fits and not fitted:      # from now on only the fitting combinations' neighbours
            fitted = True
            frontier.clear()
            queued.clear()
        if g.fits or (g.ruled_out and not fitted):
            queue(g, distance + 1)
    if not fitted and frontier:
        notes.append(f"  the search beyond the committed groups stopped after {MAX_DERIVED} combinations screened "
                     f"on derived cases ({len(frontier)} more queued, up to {max(e[1] for e in frontier)} "
                     "convention(s) from a committed group)")
    return found


def _judge(target: Target, vs, oid: str, assignment: dict, dtypes, time_limit, count=derive.PER_COMBINATION,
           bases=None):
    """The combination judged on ``count`` cases derived for it (from ``bases`` when given; None:
    none could be derived); a screening (few cases) stops at the first failing case-run."""
    spec = catalog.get(oid)
    cases, _ = derive.derive(vs, oid, assignment, count, bases)
    if not cases:
        return None
    probe = dataclasses.replace(target, conventions={oid: assignment})
    g = Group(derive.describe(assignment, spec), assignment, derived=True)
    with harness.single_threaded(target.framework):
        for case in cases:
            for r in harness.run_case(probe, case, dtypes=list(dtypes), time_limit=time_limit):
                if r.axis == "conformance":
                    _count(g, r)
            if count < derive.PER_COMBINATION and g.ruled_out:
                break
    g.cases = {c.uid: c for c in cases}
    return g


def _values(spec, committed: list[dict]) -> dict[str, list[str]]:
    """Per convention, the values (as JSON) a combination beyond the committed groups may take:
    the paper default, those some committed group holds, the catalog's choices."""
    return {n: list(dict.fromkeys([json.dumps(spec.defaults[n])]
                                  + [json.dumps(c.get(n, spec.defaults[n])) for c in committed]
                                  + [json.dumps(v) for p in spec.params if p.name == n for v in p.choices]))
            for n in spec.conventions}


class _Exact:
    """The exact values of cases (committed or derived) under conventions other than their own
    (the reference ``diagnose`` re-evaluates them with), each computed once."""

    def __init__(self, spec):
        self.spec, self._values = spec, {}

    def _of(self, case, conventions: dict):
        key = (case.uid, json.dumps(conventions, sort_keys=True))
        if key not in self._values:
            self._values[key] = diagnose._evaluate(self.spec, case, conventions)
        return self._values[key]

    @staticmethod
    def _equal(x: dict, y: dict) -> bool:
        return x.keys() == y.keys() and all(np.array_equal(x[k], y[k], equal_nan=True) for k in x)

    def same(self, cases, a: dict, b: dict) -> bool:
        """Whether every case has the same exact values under conventions ``a`` and ``b`` (a
        combination the reference refuses counts as different), stopping at the first that differs."""
        for case in cases:
            x, y = self._of(case, a), self._of(case, b)
            if x is None or y is None or not self._equal(x, y):
                return False
        return True

    def differ(self, case, a: dict, b: dict) -> bool:
        """Whether the case's exact values under conventions ``a`` and ``b`` differ, both computed
        (a combination the reference refuses observes nothing)."""
        x, y = self._of(case, a), self._of(case, b)
        return x is not None and y is not None and not self._equal(x, y)


def _hide(stripped: Target, groups: list[Group], vs, oid: str, results, time_limit) -> None:
    """Marks each fitting committed group that is no evidence for its conventions (module
    docstring): a ruled-out committed group differs from it only in conventions that change none
    of its passing cases' exact values, so that its cases cannot tell the two combinations apart,
    and the function, called with the group's conventions on a failing case of the other, does not
    return that case's exact values under them: it computes something those cases do not observe
    (at β = 0 no KL convention changes a value of grpo.loss) otherwise than the group. A function
    that only mishandles the other group's value (a clamp it ignores) computes the group's
    combination there, and the group stays evidence."""
    spec = catalog.get(oid)
    cases = {c.uid: c for c in vs.cases(oid)}
    runs = [r for r in results if r.axis == "conformance"]
    judge = diagnose._Objective(stripped, oid, runs, cases, compare.Tolerances({}), vs)   # its exact values and bounds
    bad: dict = {}
    for r in runs:
        if r.status in ("fail", "error") and r.got:
            bad.setdefault(json.dumps(r.conventions, sort_keys=True), []).append(r)
    values = _values(spec, [g.conventions for g in groups])
    exact = _Exact(spec)
    ruled_out = [r for r in groups if r.ruled_out and not r.derived]
    for g in groups:
        if not g.fits or g.derived:
            continue
        mine = [cases[u] for u in sorted(g.passed) if u in cases]
        conv = _full(g.conventions, spec)
        seen: dict = {}      # (convention, value) -> whether its cases change with it

        def unseen(n, v):
            key = (n, json.dumps(v))
            if key not in seen:
                seen[key] = not exact.same(mine, conv, {**conv, n: v})
            return not seen[key]
        for r in ruled_out:
            other = _full(r.conventions, spec)
            # one convention at a time, those known to change a case first: most groups differ
            # from it in a convention its cases observe, and that decides it without a new evaluation
            diff = sorted((n for n in spec.conventions if other[n] != conv[n]),
                          key=lambda n: not seen.get((n, json.dumps(other[n])), False))
            if not (all(unseen(n, other[n]) for n in diff) and exact.same(mine, conv, other)):
                continue
            failing = bad.get(json.dumps(r.conventions, sort_keys=True), [])
            against = next((run for run in failing if _not_the_group(stripped, judge, cases[run.uid], run.dtype,
                                                                     g.conventions, time_limit)), None)
            if against is None:
                continue
            blind = [n for n in spec.conventions if all(unseen(n, json.loads(v)) for v in values[n])]
            g.hidden = (f"no case of it changes its exact values with {', '.join(blind)}; {r.name} differs from it "
                        f"only there, and on {against.uid} [{against.dtype}] of {r.name}, called with {g.name}'s "
                        f"conventions, the function does not return {g.name}'s values")
            break


def _not_the_group(stripped: Target, judge, case, dtype: str, conventions: dict, time_limit) -> bool:
    """Whether the function, called with ``conventions`` on ``case``'s inputs, returns values
    other than the exact ones under those conventions (False where it returns nothing to compare
    or the reference refuses them: no evidence either way)."""
    probe = dataclasses.replace(case, conventions=conventions)
    with harness.single_threaded(stripped.framework):
        runs = [r for r in harness.run_case(stripped, probe, dtypes=[dtype], time_limit=time_limit)
                if r.axis == "conformance" and r.got]
    want = judge.exact(runs[0], {}) if runs else None
    return want is not None and not judge.fits(runs[0], want)


def _observe(target: Target, vs, oid: str, groups: list[Group], dtypes, time_limit, notes) -> tuple[list, list]:
    """The conventions no fitting committed group's passing cases observe, judged on cases that
    do (module docstring): the combinations found, and the conventions no test observes."""
    spec = catalog.get(oid)
    fitting = [g for g in groups if g.fits and not g.derived]
    committed = {c.uid: c for c in vs.cases(oid)}
    values = _values(spec, [g.conventions for g in groups])
    exact = _Exact(spec)

    def observes(g, n):
        mine, conv = [committed[u] for u in sorted(g.passed) if u in committed], _full(g.conventions, spec)
        return any(not exact.same(mine, conv, {**conv, n: json.loads(v)}) for v in values[n]
                   if json.loads(v) != conv[n])
    blind = [n for n in spec.conventions if not any(observes(g, n) for g in fitting)]
    found, unobserved = [], []
    for g in fitting if blind else ():
        conv = _full(g.conventions, spec)
        bases = _observing(vs, oid, conv, blind, values, exact)
        # the conventions the tests found observe, one at a time: only these are searched
        seen = [n for n in blind if any(exact.differ(b, conv, {**conv, n: json.loads(v)})
                                        for v in values[n] if json.loads(v) != conv[n] for b in bases)]
        unobserved += [n for n in blind if n not in seen and n not in unobserved]
        if not seen:
            continue
        start = _judge(target, vs, oid, conv, dtypes, time_limit, SCREEN, bases)
        if start is not None and not start.ruled_out:
            start = _judge(target, vs, oid, conv, dtypes, time_limit, bases=bases) or start
        if start is None or not start.ruled_out:
            continue
        g.hidden = (f"no case of it changes its exact values with {', '.join(seen)}, and on a case derived with "
                    f"its conventions from a committed test that observes them, {start.against}")
        g.refuted = True
        found += _search(target, vs, oid, [start], dtypes, time_limit, notes, names=seen, bases=bases,
                         avoid=[conv], committed_values=[x.conventions for x in groups])
    # a convention the function does not take is not passed to it (plan.call_kwargs) and stays
    # the default the declaration leaves it at: opened, every call would be refused
    takes = plan._accepted_keywords(target.objectives[oid])
    unobserved = [n for n in unobserved if takes is ANY or n in takes]
    if unobserved:
        notes.append(f"  not observed: {', '.join(unobserved)} (under the other conventions of the fitting groups, no "
                     f"case of theirs changes its exact values with it, nor does any committed test among the {LOOK} "
                     "nearest them: the function's value of it is not shown, and the declaration leaves it open where that "
                     "accepts no group ruled out)")
    return found, unobserved


def _observing(vs, oid: str, conv: dict, blind: list, values: dict, exact) -> list:
    """Up to PER_COMBINATION committed valid tests, the nearest ``conv`` first (most conventions
    equal, then the smallest), among the LOOK nearest, whose exact values under ``conv`` change
    with the ``blind`` conventions all changed at once (each alone where the reference refuses
    them together): a test they leave unchanged, such as a β = 0 test of grpo.loss, is taken to
    observe none of them, for one evaluation. One test per inputs and parameters, since only
    those carry over into a derived case."""
    others = {n: [json.loads(v) for v in values[n] if json.loads(v) != conv[n]] for n in blind}
    together = {**conv, **{n: vs_[0] for n, vs_ in others.items() if vs_}}
    alone = [{**conv, n: v} for n in blind for v in others[n]]
    valid = [c for c in vs.cases(oid) if c.result == "valid" and LARGE_FLAG not in c.flags]
    valid.sort(key=lambda c: (-sum(c.conventions.get(n) == conv[n] for n in conv), derive._size(c), c.test["tcId"]))
    out, seen = [], set()
    for case in valid[:LOOK]:
        key = json.dumps([case.test["inputs"], case.test["params"]], sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            if exact._of(case, conv) is None:
                continue
            if (exact.differ(case, conv, together) if exact._of(case, together) is not None
                    else any(exact.differ(case, conv, other) for other in alone)):
                out.append(case)
        if len(out) == derive.PER_COMBINATION:
            break
    return out


def _aside(groups: list[Group], vs, oid: str) -> None:
    """Sets aside each fitting derived combination whose cases cannot tell it from another fitting
    group whose cases can (module docstring): cases derived from β = 0 vectors fit every KL
    convention alike, and a combination that fits only on them adds nothing to one judged on
    cases that observe its KL term."""
    fitting = [g for g in groups if g.fits]
    if not any(g.derived for g in fitting):
        return
    spec = catalog.get(oid)
    committed = {c.uid: c for c in vs.cases(oid)}
    exact = _Exact(spec)

    def cases(g):
        return [g.cases.get(u) or committed[u] for u in sorted(g.passed)]
    for h in fitting:
        if not h.derived:
            continue
        mine, conv = cases(h), _full(h.conventions, spec)
        for g in fitting:
            other = _full(g.conventions, spec)
            if g is not h and not g.hidden and exact.same(mine, conv, other) \
                    and not exact.same(cases(g), other, conv):
                h.hidden = (f"its cases cannot tell it from {g.name}, whose cases can (no case of it changes its "
                            "exact values with the conventions where the two differ)")
                break


def _unhide(groups: list[Group]) -> list[str]:
    """Where the search decides nothing, the groups ``_hide`` set aside are proposed after all,
    with their values of the conventions their cases do not observe, and the note says so."""
    notes = []
    for g in groups:
        if g.hidden and not g.refuted:
            notes.append(f"  {g.name}: its values of the conventions its cases do not observe are proposed, not "
                         f"observed: {g.hidden}; no combination beyond the committed groups judged fits")
            g.hidden = ""
    return notes


def _full(conventions: dict, spec) -> dict:
    return {n: conventions.get(n, spec.defaults[n]) for n in spec.conventions}


def _negated(closeness: tuple) -> tuple:
    return tuple(-x for x in closeness)


def _same(assignment: dict, conventions: dict, spec) -> bool:
    return all(conventions.get(n, spec.defaults[n]) == assignment[n] for n in spec.conventions)


def _name_defects(stripped: Target, vs, groups: list[Group], results) -> None:
    """Marks each committed group left out of a declaration by a defect (module docstring):
    ruled out, with passing cases, and failures the diagnosis names as a defect."""
    suspects = [g for g in groups if g.ruled_out and not g.derived and g.counts.get("pass", 0)]
    if not suspects:
        return
    found = diagnose.diagnose([r for r in results if r.axis == "conformance"], vs, [stripped])
    key = {r.uid: json.dumps(r.conventions, sort_keys=True) for r in results if r.status in ("fail", "error")}
    for g in suspects:
        mine = json.dumps(g.conventions, sort_keys=True)
        named = [d for d in found if any(key.get(u) == mine for u in d.uids)]
        if named and all(d.kind == "convention" for d in named):
            continue
        causes = [d for d in named if d.kind not in ("convention", "unexplained")]
        if causes:
            g.defect = "; ".join(f"[{d.kind}] {d.defect}" for d in causes)[:300]


def declaration(target: Target, oid: str, groups: list[Group], unobserved=()) -> dict | list | None:
    """The declaration accepting exactly the fitting groups among those judged; None if none fits.
    A convention ``unobserved`` (``_observe``) is left open ("*") where that still accepts exactly
    those groups: no value of it is shown."""
    fitting = [g.conventions for g in groups if g.fits]
    if not fitting:
        return None
    judged = [g.conventions for g in groups if g.fits or g.ruled_out]
    spec = catalog.get(oid)
    defaults = _function_defaults(target.objectives[oid])
    names = [n for n in spec.conventions
             if any(c.get(n, spec.defaults[n]) != spec.defaults[n] for c in fitting)
             or len({json.dumps(c.get(n)) for c in fitting}) > 1]

    def values(n, combos):
        vals = list(dict.fromkeys(json.dumps(c.get(n, spec.defaults[n])) for c in combos))
        vals.sort(key=lambda v: v != json.dumps(defaults.get(n, spec.defaults[n])))   # the function's default first
        return [json.loads(v) for v in vals]

    product = {n: (vs[0] if len(vs := values(n, fitting)) == 1 else vs) for n in names}
    opened = {**product, **{n: ANY for n in unobserved}}
    for decl in (opened, product):
        if _accepts_exactly(target, oid, decl, judged, fitting):
            return decl
    combos = []
    for c in sorted(fitting, key=lambda c: _function_first(c, defaults, spec)):
        combos.append({n: c.get(n, spec.defaults[n]) for n in names})
    return combos


def _accepts_exactly(target, oid, declared, judged, fitting) -> bool:
    probe = Target(target.name, target.framework, target.objectives, {oid: declared})
    return all(probe.accepts(oid, c) == (c in fitting) for c in judged)


def _function_first(combo, defaults, spec):
    """Sort key: the combination of the function's own defaults first (a target's first
    combination is its default)."""
    return sum(combo.get(n) != defaults.get(n, spec.defaults[n]) for n in spec.conventions)


def _function_defaults(fn) -> dict:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    return {n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}


def _python(value) -> str:
    """A declaration as Python source (target files are Python)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_python(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_python(v) for v in value) + "]"
    return repr(value)


def _assign(conventions: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in conventions.items())


def checked_anything(inferences: list[Inference]) -> bool:
    """Whether there is anything to report: a group judged, or the reason one was not computed."""
    return any(g.fits or g.ruled_out or g.undecided or g.why_not for i in inferences for g in i.groups)

