"""The target model: what a target declares (objectives, conventions, dtypes, devices) and the
checks of a declaration (DESIGN §8)."""
from __future__ import annotations

from dataclasses import dataclass, field

from conformance import catalog
from conformance.errors import LossproofError

FRAMEWORKS = ("torch", "numpy", "cupy")
ANY = "*"


class TargetError(LossproofError):
    """The target cannot be loaded or is malformed (a usage error: exit status 2)."""


@dataclass
class Target:
    name: str
    framework: str
    objectives: dict
    conventions: dict | str = field(default_factory=dict)
    vjps: dict = field(default_factory=dict)
    dtypes: tuple = ("float64", "float32")
    devices: tuple = ("cpu",)
    version: str = ""
    spec: str = ""

    def declared(self, objective_id: str) -> dict:
        if self.conventions == ANY:
            return {}
        return self.conventions.get(objective_id, {})

    def accepts(self, objective_id: str, conventions: dict) -> bool:
        """Whether a vector group's conventions are ones this target declares
        (an undeclared convention means the paper default)."""
        if self.conventions == ANY:
            return True
        spec = catalog.get(objective_id)
        declared = self.declared(objective_id)
        if isinstance(declared, list):  # alternative combinations (conventions that do not vary independently)
            return any(Target(self.name, self.framework, self.objectives, {objective_id: d}).accepts(
                objective_id, conventions) for d in declared)
        for name, value in conventions.items():
            allowed = declared.get(name, spec.defaults.get(name))
            if allowed == ANY:
                continue
            if isinstance(allowed, (list, tuple)):
                if value not in allowed:
                    return False
            elif value != allowed:
                return False
        return True

    def deviations(self) -> list[tuple[str, str, object, object]]:
        """(objective, convention, declared, paper default) for every declared convention whose
        value — the first one of a list, the target's default — differs from the paper default."""
        if self.conventions == ANY:
            return []
        out = []
        for oid, declared in self.conventions.items():
            first = declared[0] if isinstance(declared, list) and declared else declared
            defaults = catalog.get(oid).defaults
            for name, value in (first or {}).items():
                default_value = value[0] if isinstance(value, (list, tuple)) and value else value
                if value != ANY and default_value != defaults.get(name):
                    out.append((oid, name, value, defaults.get(name)))
        return out


def from_mapping(obj, spec: str) -> Target:
    get = obj.get if isinstance(obj, dict) else (lambda k, d=None: getattr(obj, k, d))
    name, framework, objectives = get("name"), get("framework"), get("objectives")
    if not isinstance(name, str) or not name:
        raise TargetError(f"{spec}: target needs a non-empty 'name'")
    if framework not in FRAMEWORKS:
        raise TargetError(f"{spec}: 'framework' must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")
    if not isinstance(objectives, dict) or not objectives:
        raise TargetError(f"{spec}: 'objectives' must be a non-empty dict of objective id -> callable")
    for oid, fn in objectives.items():
        if oid not in catalog.BY_ID:
            raise TargetError(f"{spec}: unknown objective {oid!r} (see 'lossproof list')")
        if not callable(fn):
            raise TargetError(f"{spec}: objectives[{oid!r}] is not callable")
    conventions = get("conventions", {}) or {}
    if conventions != ANY:
        if not isinstance(conventions, dict):
            raise TargetError(f"{spec}: 'conventions' must be a dict")
        for oid, conv in conventions.items():
            if oid not in catalog.BY_ID:
                raise TargetError(f"{spec}: conventions for unknown objective {oid!r}")
            known = set(p.name for p in catalog.get(oid).params)
            for key in (k for c in (conv if isinstance(conv, list) else [conv]) for k in c):
                if key not in known:
                    raise TargetError(f"{spec}: {oid} has no convention {key!r} (known: {', '.join(sorted(known))})")
    dtypes = tuple(get("dtypes", None) or (("float64", "float32") if framework != "torch"
                                            else ("float64", "float32", "bfloat16", "float16")))
    return Target(name, framework, dict(objectives), conventions, dict(get("vjps", {}) or {}), dtypes,
                  tuple(get("devices", None) or ("cpu",)), str(get("version", "") or ""), spec)


