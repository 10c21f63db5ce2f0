"""Loading a vector directory: the manifest's hashes, the schema, every leaf number.

Every problem is reported as a :class:`VectorError` naming the file and the JSON path, so
the CLI can print one line and exit 2.
"""
from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterator

import jsonschema

from conformance import numbers
from conformance.errors import LossproofError
from conformance.vectors import certificates
from conformance.vectors.format import MANIFEST, MANIFEST_SCHEMA, json_path, sha256

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schema"
# Installed (wheel): the files are copied into the package at build time (setup.py). Source
# checkout, editable install included: the top-level vectors/ of the tree.
_BUNDLED = Path(__file__).resolve().parent / "files"
_SOURCE = Path(__file__).resolve().parent.parent.parent / "vectors"


def default_dir() -> Path:
    """The vector directory that ships with this installation."""
    return _BUNDLED if (_BUNDLED / MANIFEST).is_file() else _SOURCE


class VectorError(LossproofError):
    def __init__(self, file, where: str, problem: str):
        self.file, self.where, self.problem = str(file), where, problem
        super().__init__(f"{file}: {where}: {problem}")


@lru_cache(maxsize=None)
def _validator(schema_file: str):
    """The published schema, with the element-wise number/decimal definitions replaced by a
    shallow type check: the elements are checked by :func:`_check_leaves`, which is two
    orders of magnitude faster than recursive JSON Schema on arrays of thousands of numbers."""
    schema = json.loads((SCHEMA_DIR / schema_file).read_text())
    shallow = {"type": ["array", "number", "string"]}
    schema["$defs"]["numbers"] = shallow
    schema["$defs"]["decimals"] = shallow
    return jsonschema.Draft202012Validator(schema)


def _leaf_error(value, decimal: bool):
    """None when every leaf of a nested list is a JSON number (decimal=False; or one of
    ±Infinity / NaN strings) or a decimal string (decimal=True)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(v)
        elif decimal:
            if not (isinstance(v, str) and _decimal_re().match(v)):
                return v
        elif isinstance(v, bool) or not (isinstance(v, (int, float)) or v in numbers.NONFINITE):
            return v
    return None


@lru_cache(maxsize=None)
def _decimal_re():
    schema = json.loads((SCHEMA_DIR / "vectors-1.json").read_text())
    return re.compile(schema["$defs"]["decimal"]["pattern"])


def _check_leaves(path, doc: dict) -> None:
    for gi, group in enumerate(doc["testGroups"]):
        for ti, test in enumerate(group["tests"]):
            for section, decimal in (("inputs", False), ("cotangents", False), ("expected", True), ("grads", True)):
                for name, value in test.get(section, {}).items():
                    bad = _leaf_error(value, decimal)
                    if bad is not None:
                        kind = "a decimal string" if decimal else "a number"
                        raise VectorError(path, json_path(["testGroups", gi, "tests", ti, section, name]),
                                          f"schema: {bad!r} is not {kind}")


def parse(path: Path, data: bytes) -> dict:
    try:
        doc = json.loads(data)
    except UnicodeDecodeError as err:
        raise VectorError(path, "$", f"not UTF-8 text ({err.reason})") from None
    except json.JSONDecodeError as err:
        raise VectorError(path, f"line {err.lineno} column {err.colno}", f"not valid JSON: {err.msg}") from None
    errors = sorted(_validator("vectors-1.json").iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        err = jsonschema.exceptions.best_match(errors)
        raise VectorError(path, json_path(err.absolute_path), f"schema: {err.message[:200]}")
    _check_leaves(path, doc)
    for gi, group in enumerate(doc["testGroups"]):
        for ti, test in enumerate(group["tests"]):
            for flag in test["flags"]:
                if flag not in doc["notes"]:
                    raise VectorError(path, json_path(["testGroups", gi, "tests", ti, "flags"]),
                                      f"flag {flag!r} is not defined in notes")
    return doc


def read_manifest(directory: Path) -> dict[str, str]:
    path = directory / MANIFEST
    if not path.is_file():
        raise VectorError(path, "$", "missing (every vector directory has a MANIFEST.json)")
    try:
        doc = json.loads(path.read_bytes())
        files = doc["files"]
        if doc.get("schema") != MANIFEST_SCHEMA or not isinstance(files, dict):
            raise KeyError
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
        raise VectorError(path, "$", f"not a {MANIFEST_SCHEMA} file") from None
    return files


@dataclass(frozen=True)
class VectorCase:
    """One test with the context a runner needs."""
    objective: str
    group: str
    conventions: dict
    test: dict
    file: str

    @property
    def uid(self) -> str:
        return self.test["uid"]

    @property
    def result(self) -> str:
        return self.test["result"]

    @property
    def flags(self) -> list:
        return self.test["flags"]


class VectorSet:
    """A loaded, validated vector directory."""

    def __init__(self, directory: Path | str | None = None):
        self.directory = Path(directory) if directory else default_dir()
        if not self.directory.is_dir():
            raise VectorError(self.directory, "$", "vector directory not found" + (
                "" if directory else " (this installation ships no vectors: reinstall lossproof, or pass --vectors DIR)"))
        manifest = read_manifest(self.directory)
        self.manifest_sha256 = sha256((self.directory / MANIFEST).read_bytes())
        self.files: dict[str, dict] = {}
        self.raw: dict[str, bytes] = {}
        self.certificates: dict[str, bytes] = {}   # rel -> bytes, read by conformance.vectors.certificates
        for rel, digest in sorted(manifest.items()):
            path = self.directory / rel
            if not path.is_file():
                raise VectorError(path, "$", "listed in MANIFEST.json but missing")
            data = path.read_bytes()
            if sha256(data) != digest:
                raise VectorError(path, "$", "sha256 does not match MANIFEST.json (file modified or truncated)")
            if certificates.is_certificate(rel):
                self.certificates[rel] = data
                continue
            self.raw[rel] = data
            self.files[rel] = parse(path, data)
        listed = set(manifest)
        for path in sorted(self.directory.rglob("*.json")):
            rel = path.relative_to(self.directory).as_posix()
            if rel != MANIFEST and rel not in listed:
                raise VectorError(path, "$", "not listed in MANIFEST.json")

    def cases(self, objective_glob: str = "*", flags=None) -> Iterator[VectorCase]:
        for rel, doc in self.files.items():
            if not fnmatch.fnmatch(doc["objective"], objective_glob):
                continue
            for group in doc["testGroups"]:
                for test in group["tests"]:
                    if flags and not set(flags) & set(test["flags"]):
                        continue
                    yield VectorCase(doc["objective"], group["group"], group["conventions"], test, rel)

    def by_uid(self, uid: str) -> VectorCase:
        for case in self.cases():
            if case.uid == uid:
                return case
        raise KeyError(uid)

    def counts(self) -> dict[str, dict[str, int]]:
        out: dict = {}
        for case in self.cases():
            c = out.setdefault(case.objective, {"valid": 0, "invalid": 0, "acceptable": 0})
            c[case.result] += 1
        return out

    def notes(self, objective: str) -> dict:
        return next(doc["notes"] for doc in self.files.values() if doc["objective"] == objective)


