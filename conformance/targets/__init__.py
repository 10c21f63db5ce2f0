"""Targets: what ``lossproof check`` runs the vectors against (DESIGN §8).

A target is a built-in backend name (``numpy``, ``torch``, ``cupy``), ``package.module:NAME``
or ``path/to/file.py:NAME``, or a third-party adapter (``trl``, ``verl``, ``openrlhf``, ``liger``),
where NAME is a dict (or an object with the same attributes):

    {"name": ..., "framework": "torch" | "numpy" | "cupy", "conventions": {...},
     "objectives": {id: callable}, "vjps": {id: callable} (optional, non-autograd frameworks),
     "dtypes": [...] (optional), "devices": [...] (optional)}

A convention's declared value is a value, a list of values (the first is the target's default)
or "*"; an objective's declaration may also be a list of such dicts, alternatives for
conventions that do not vary independently (the first is the target's default).
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path

from conformance import catalog

FRAMEWORKS = ("torch", "numpy", "cupy")
ANY = "*"


class TargetError(Exception):
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


def _from_mapping(obj, spec: str) -> Target:
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


def _import_object(spec: str):
    module_part, _, attr = spec.rpartition(":")
    if not module_part or not attr:
        raise TargetError(f"--target {spec!r}: expected a built-in name, package.module:NAME or path/file.py:NAME")
    if module_part.endswith(".py"):
        path = Path(module_part)
        if not path.is_file():
            raise TargetError(f"--target {spec!r}: file {path} not found")
        mod_name = f"lossproof_target_{abs(hash(str(path.resolve())))}"
        loader = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(loader)
        sys.modules[mod_name] = module
        try:
            loader.loader.exec_module(module)
        except Exception as err:
            raise TargetError(f"--target {spec!r}: importing {path} failed: {type(err).__name__}: {err}") from None
    else:
        try:
            module = importlib.import_module(module_part)
        except Exception as err:
            raise TargetError(f"--target {spec!r}: cannot import {module_part}: {type(err).__name__}: {err}") from None
    if not hasattr(module, attr):
        raise TargetError(f"--target {spec!r}: {module_part} has no attribute {attr!r}")
    return getattr(module, attr)


PEERS = ("trl", "verl", "openrlhf", "liger")   # third-party adapters, conformance/targets/<name>.py


def load(spec: str) -> Target:
    from conformance.targets import builtin
    if spec in builtin.BUILTINS:
        return builtin.load(spec)
    if spec in PEERS:
        return importlib.import_module(f"conformance.targets.{spec}").target()
    return _from_mapping(_import_object(spec), spec)
