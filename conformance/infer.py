"""``lossproof infer``: the conventions declaration that fits a function (issue 25).

The function is run over every convention group of the vectors as if it declared ``"*"`` (each
vector with its own group's conventions). A group *fits* when at least one of its cases passes
and none fails; a group the function does not compute (every case unsupported or skipped)
neither fits nor rules anything out. A target's declared known failures still excuse failing
cases, but an excused case (xfail) is no evidence *for* a group: a known failure is stated for
the conventions the target declares, and a rule such as "float64 inputs give a float32 result"
excuses any wrong value of every group alike (Liger's distillation in float64, verl's whitened
advantages, whose ddof = 0 and ddof = 1 groups both failed only as known failures). A group whose
judged cases are all excused is *undecided*: it neither fits nor is ruled out, and the text says
so (another --dtype may decide it). The declaration proposed is the smallest one
that accepts exactly the groups that fit, among the groups the vectors hold: one value or a
list per convention when the fitting groups form such a product, otherwise a list of
combinations (docs/targets.md). When no group fits, each group is named with the first case
that rules it out.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import inspect
import json
from dataclasses import dataclass, field

from conformance import catalog, harness
from conformance.targets.target import ANY, Target


@dataclass
class Group:
    name: str
    conventions: dict
    counts: dict = field(default_factory=dict)   # status -> case-runs
    against: str = ""                            # the first case that rules it out: uid and message
    excused: str = ""                            # the first declared known failure: uid and reason

    @property
    def fits(self) -> bool:
        return any(self.counts.get(s, 0) for s in ("pass", "xpass")) and not self.ruled_out

    @property
    def ruled_out(self) -> bool:
        return bool(self.counts.get("fail", 0) or self.counts.get("error", 0))

    @property
    def undecided(self) -> bool:
        """Judged, but every judged case-run a declared known failure (module docstring)."""
        return bool(self.counts.get("xfail", 0)) and not self.fits and not self.ruled_out


@dataclass
class Inference:
    objective: str
    groups: list[Group]
    declaration: dict | list | None     # None: no group fits

    def text(self) -> str:
        """The declaration to paste into a target file, or why none fits."""
        if self.declaration is None:
            lines = [f"{self.objective}: no convention group of the vectors fits"]
            lines += [f"  {g.name} ({_assign(g.conventions)}): ruled out by {g.against}"
                      for g in self.groups if g.ruled_out]
            lines += [_undecided(g) for g in self.groups if g.undecided]
            lines += [f"  {g.name}: not computed (every case unsupported or skipped)"
                      for g in self.groups if not g.ruled_out and not g.fits and not g.undecided]
            return "\n".join(lines)
        fitting = ", ".join(g.name for g in self.groups if g.fits)
        excused = ", ".join(f"{g.name} {g.counts['xfail']}" for g in self.groups if g.fits and g.counts.get("xfail"))
        out = [f"{self.objective}: fits the groups {fitting}"
               + (f" (case-runs excused as declared known failures, no evidence either way: {excused})" if excused else ""),
               f'    "conventions": {{"{self.objective}": {_python(self.declaration)}}},']
        for g in self.groups:
            if g.ruled_out:
                out.append(f"  not {g.name} ({_assign(g.conventions)}): ruled out by {g.against}")
        out += [_undecided(g) for g in self.groups if g.undecided]
        return "\n".join(out)


def _undecided(g: Group) -> str:
    return (f"  undecided {g.name} ({_assign(g.conventions)}): every judged case-run ({g.counts['xfail']}) "
            f"is a declared known failure, e.g. {g.excused}; another --dtype may decide it")


def infer(target: Target, vs, objectives=("*",), dtypes=("float64",), progress=None,
          time_limit: float = 30.0) -> list[Inference]:
    """One Inference per objective the target implements among the globs ``objectives``."""
    stripped = dataclasses.replace(target, conventions=ANY)
    out = []
    for oid in target.objectives:
        if not any(fnmatch.fnmatchcase(oid, g) for g in objectives):
            continue
        results = harness.run(stripped, vs, objective=oid, dtypes=list(dtypes), progress=progress,
                              time_limit=time_limit)
        groups: dict = {}
        for r in results:
            if r.axis != "conformance":
                continue
            key = json.dumps(r.conventions, sort_keys=True)
            g = groups.setdefault(key, Group(r.group, r.conventions))
            g.counts[r.status] = g.counts.get(r.status, 0) + 1
            if r.status in ("fail", "error") and not g.against:
                g.against = f"{r.uid} [{r.dtype}]: {r.message[:160]}"
            if r.status == "xfail" and not g.excused:
                g.excused = f"{r.uid} [{r.dtype}]: {(r.known or r.message)[:100]}"
        listed = list(groups.values())
        out.append(Inference(oid, listed, declaration(target, oid, listed)))
    return out


def declaration(target: Target, oid: str, groups: list[Group]) -> dict | list | None:
    """The declaration accepting exactly the fitting groups among those judged; None if none fits."""
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
    if _accepts_exactly(target, oid, product, judged, fitting):
        return product
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
    return any(g.fits or g.ruled_out or g.undecided for i in inferences for g in i.groups)

