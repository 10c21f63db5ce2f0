"""Targets: what ``lossproof check`` runs the vectors against (DESIGN §8).

A target is a built-in backend name (``numpy``, ``torch``, ``cupy``), ``package.module:NAME``
or ``path/to/file.py:NAME`` (``path/to/file.py`` alone: its ``TARGET``), or a third-party adapter (``trl``, ``verl``, ``openrlhf``, ``liger``, ``transformers``),
where NAME is a dict (or an object with the same attributes):

    {"name": ..., "framework": "torch" | "numpy" | "cupy", "conventions": {...},
     "objectives": {id: callable}, "vjps": {id: callable} (optional, non-autograd frameworks),
     "dtypes": [...] (optional), "devices": [...] (optional)}

A convention's declared value is a value, a list of values (the first is the target's default)
or "*"; an objective's declaration may also be a list of such dicts, alternatives for
conventions that do not vary independently (the first is the target's default).
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
from pathlib import Path

from lossproof.conformance.targets import builtin
from lossproof.conformance.targets.imports import missing_module
from lossproof.conformance.targets.target import (
    ANY,
    Target,
    TargetError,
    from_mapping,
    known_file,
    split_variants,
)

__all__ = ["ANY", "PEERS", "Target", "TargetError", "from_mapping", "known_file", "load", "split_variants"]

# The name a target file's target takes when ``--target path/file.py`` names none (as every
# example in docs/targets.md and the scaffold's files call it).
DEFAULT_NAME = "TARGET"


def _import_object(spec: str):
    if spec.endswith(".py") and ":" not in spec:
        module = _import_file(Path(spec), spec)
        if not hasattr(module, DEFAULT_NAME):
            found = sorted(k for k, v in vars(module).items() if isinstance(v, dict) and "objectives" in v)
            raise TargetError(f"--target {spec!r}: the file defines no {DEFAULT_NAME}: name its target, "
                              + (", ".join(f"{spec}:{k}" for k in found) if found else f"{spec}:NAME"))
        return getattr(module, DEFAULT_NAME)
    module_part, _, attr = spec.rpartition(":")
    if not module_part or not attr:
        raise TargetError(f"--target {spec!r}: expected a built-in name, package.module:NAME, path/file.py or path/file.py:NAME")
    if module_part.endswith(".py"):
        module = _import_file(Path(module_part), spec)
    else:
        try:
            module = importlib.import_module(module_part)
        except Exception as err:
            raise TargetError(f"--target {spec!r}: cannot import {module_part}: {_why(err)}") from None
    if not hasattr(module, attr):
        raise TargetError(f"--target {spec!r}: {module_part} has no attribute {attr!r}")
    return getattr(module, attr)


def _import_file(path: Path, spec: str):
    """Import a target file with its folder importable (it stays on sys.path, so that the
    target can import its siblings, also lazily when it is called)."""
    if not path.is_file():
        raise TargetError(f"--target {spec!r}: file {path} not found")
    folder, stem = str(path.resolve().parent), path.stem
    source = path.read_text(encoding="utf-8", errors="replace")
    # however the file imports the library: a statement, or its name in the string that
    # import_bare / importlib.import_module / __import__ / find_spec are given, or among the
    # packages of import_bare (a string elsewhere, such as the target's "name", imports nothing)
    name = rf"""(['"]){re.escape(stem)}(\.[\w.]+)?['"]"""
    imports = (re.search(rf"^\s*(import|from)\s+{re.escape(stem)}\b", source, re.M)
               or re.search(rf"(import_bare|import_module|__import__|find_spec)\(\s*{name}", source)
               or re.search(rf"packages\s*=\s*[(\[][^)\]]*{name}", source))
    if imports and _installed_elsewhere(stem, folder):
        raise TargetError(f"--target {spec!r}: the file is named like the module {stem!r} it imports, so "
                          f"'import {stem}' would import the target file itself: rename it (e.g. {stem}_target.py)")
    mod_name = f"lossproof_target_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]}"
    loader = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(loader)
    sys.modules[mod_name] = module
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        loader.loader.exec_module(module)
    except Exception as err:
        raise TargetError(f"--target {spec!r}: importing {path} failed: {_why(err)}") from None
    return module


def _why(err: Exception) -> str:
    """An import failure in one line: what to install for a missing module (or where a module
    lossproof removed went), else the exception."""
    return f"{type(err).__name__}: {err}" + (f" — {hint}" if (hint := missing_module(err)) else "")


def _installed_elsewhere(name: str, folder: str) -> bool:
    """Whether ``name`` is importable from somewhere other than ``folder``."""
    path = [p for p in sys.path if os.path.abspath(p or ".") != folder]
    return importlib.machinery.PathFinder.find_spec(name, path) is not None or name in sys.builtin_module_names


# third-party adapters, conformance/targets/peers/<name>.py
PEERS = ("trl", "verl", "openrlhf", "liger", "transformers", "megatron", "torchtitan", "olmo", "optax", "tunix")


def load(spec: str) -> Target:
    if spec in builtin.BUILTINS:
        return builtin.load(spec)
    if spec in PEERS:
        return importlib.import_module(f"lossproof.conformance.targets.peers.{spec}").target()
    return from_mapping(_import_object(spec), spec)
