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
from pathlib import Path

from conformance.targets import builtin
from conformance.targets.target import ANY, Target, TargetError, from_mapping, known_file

__all__ = ["ANY", "PEERS", "Target", "TargetError", "from_mapping", "known_file", "load"]

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


PEERS = ("trl", "verl", "openrlhf", "liger")   # third-party adapters, conformance/targets/peers/<name>.py


def load(spec: str) -> Target:
    if spec in builtin.BUILTINS:
        return builtin.load(spec)
    if spec in PEERS:
        return importlib.import_module(f"conformance.targets.peers.{spec}").target()
    return from_mapping(_import_object(spec), spec)
