"""Vector files: canonical serialisation, loading with validation, lint, iteration, manifest.

Every problem is reported as a :class:`VectorError` naming the file and the JSON path, so
the CLI can print one line and exit 2.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterator

import jsonschema

from conformance import numbers

SCHEMA_ID = "lossproof-vectors/1"
MANIFEST = "MANIFEST.json"
MANIFEST_SCHEMA = "lossproof-manifest/1"
DEFAULT_DIR = Path(__file__).resolve().parent.parent / "vectors"
TEST_KEYS = ("tcId", "uid", "comment", "flags", "result", "dtypes", "inputs", "params", "expected",
             "cotangents", "grads", "scale", "tolerance", "error", "provenance")


class VectorError(Exception):
    def __init__(self, file, where: str, problem: str):
        self.file, self.where, self.problem = str(file), where, problem
        super().__init__(f"{file}: {where}: {problem}")


def _compact(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def serialize(doc: dict) -> bytes:
    """Canonical text: header fields one per line, one test per line (diff-friendly)."""
    lines = ["{"]
    for key, value in doc.items():
        if key in ("testGroups", "notes"):
            continue
        lines.append(f" {json.dumps(key)}: {_compact(value)},")
    lines.append(' "notes": {')
    notes = list(doc.get("notes", {}).items())
    for i, (flag, note) in enumerate(notes):
        lines.append(f"  {json.dumps(flag)}: {_compact(note)}{',' if i < len(notes) - 1 else ''}")
    lines.append(" },")
    lines.append(' "testGroups": [')
    groups = doc.get("testGroups", [])
    for gi, group in enumerate(groups):
        head = {k: v for k, v in group.items() if k != "tests"}
        lines.append("  {" + _compact(head)[1:-1] + ', "tests": [')
        tests = group["tests"]
        for ti, test in enumerate(tests):
            ordered = {k: test[k] for k in TEST_KEYS if k in test}
            lines.append("   " + _compact(ordered) + ("," if ti < len(tests) - 1 else ""))
        lines.append("  ]}" + ("," if gi < len(groups) - 1 else ""))
    lines.append(" ]")
    lines.append("}")
    return ("\n".join(lines) + "\n").encode()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_bytes(files: dict[str, bytes]) -> bytes:
    entries = {path: sha256(data) for path, data in sorted(files.items()) if path != MANIFEST}
    return (json.dumps({"schema": MANIFEST_SCHEMA, "files": entries}, indent=1) + "\n").encode()


def _staged(path: Path, data: bytes) -> str:
    """Write ``data`` to a temporary file beside ``path`` (readable like a normal file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 would make shared files unreadable to others
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def _commit(tmp: str, path: Path) -> None:
    try:
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_atomically(path: Path, data: bytes) -> None:
    _commit(_staged(path, data), path)


def write_tree(directory: Path, files: dict[str, bytes]) -> None:
    """Stage every file first, then rename them into place with the manifest last: a failure
    while staging leaves the previous set untouched, and a crash during the renames leaves a
    manifest mismatch that the loader reports, never a silently mixed set."""
    staged = {}
    try:
        for rel, data in sorted(files.items()):
            staged[rel] = _staged(directory / rel, data)
    except BaseException:
        for tmp in staged.values():
            os.unlink(tmp)
        raise
    order = sorted(staged, key=lambda r: r == MANIFEST)
    for i, rel in enumerate(order):
        try:
            _commit(staged[rel], directory / rel)
        except BaseException:
            for later in order[i + 1:]:
                os.unlink(staged[later])
            raise


@lru_cache(maxsize=None)
def _validator(schema_file: str):
    """The published schema, with the element-wise number/decimal definitions replaced by a
    shallow type check: the elements are checked by :func:`_check_leaves`, which is two
    orders of magnitude faster than recursive JSON Schema on arrays of thousands of numbers."""
    schema = json.loads((Path(__file__).parent / "schema" / schema_file).read_text())
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
    schema = json.loads((Path(__file__).parent / "schema" / "vectors-1.json").read_text())
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


def json_path(parts) -> str:
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


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
        self.directory = Path(directory) if directory else DEFAULT_DIR
        if not self.directory.is_dir():
            raise VectorError(self.directory, "$", "vector directory not found")
        manifest = read_manifest(self.directory)
        self.manifest_sha256 = sha256((self.directory / MANIFEST).read_bytes())
        self.files: dict[str, dict] = {}
        self.raw: dict[str, bytes] = {}
        for rel, digest in sorted(manifest.items()):
            path = self.directory / rel
            if not path.is_file():
                raise VectorError(path, "$", "listed in MANIFEST.json but missing")
            data = path.read_bytes()
            if sha256(data) != digest:
                raise VectorError(path, "$", "sha256 does not match MANIFEST.json (file modified or truncated)")
            self.raw[rel] = data
            self.files[rel] = parse(path, data)
        listed = set(manifest)
        for path in sorted(self.directory.rglob("*.json")):
            rel = path.relative_to(self.directory).as_posix()
            if rel != MANIFEST and rel not in listed:
                raise VectorError(path, "$", "not listed in MANIFEST.json")

    def cases(self, objective_glob: str = "*", flags=None) -> Iterator[VectorCase]:
        import fnmatch
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


def lint(vs: VectorSet) -> list[str]:
    """Problems beyond the schema: an empty list means the directory is clean."""
    from conformance.generate.build import uid_of
    from conformance.generate.case import Case
    from conformance import catalog

    problems = []
    seen_uids: dict[str, str] = {}
    for rel, doc in vs.files.items():
        where = vs.directory / rel
        if serialize(doc) != vs.raw[rel]:
            problems.append(f"{where}: $: not in canonical formatting (regenerate the file)")
        if doc["objective"] not in catalog.BY_ID:
            problems.append(f"{where}: $.objective: unknown objective {doc['objective']!r}")
            continue
        spec = catalog.get(doc["objective"])
        expected_rel = f"{spec.family}/{spec.name}.json"
        if rel != expected_rel:
            problems.append(f"{where}: $: objective {spec.id} belongs in {expected_rel}")
        tcids = []
        for gi, group in enumerate(doc["testGroups"]):
            if set(group["conventions"]) != set(spec.conventions):
                problems.append(f"{where}: {json_path(['testGroups', gi, 'conventions'])}: "
                                f"must name exactly the conventions {sorted(spec.conventions)}")
            for ti, test in enumerate(group["tests"]):
                jp = json_path(["testGroups", gi, "tests", ti])
                tcids.append(test["tcId"])
                if test["uid"] in seen_uids:
                    problems.append(f"{where}: {jp}.uid: duplicate of {seen_uids[test['uid']]}")
                seen_uids[test["uid"]] = f"{rel} {jp}"
                case = Case(spec.id, {k: numbers.decode_input(v) for k, v in test["inputs"].items()},
                            test["params"], group["conventions"])
                if uid_of(spec, case) != test["uid"]:
                    problems.append(f"{where}: {jp}.uid: does not match the content hash")
                if test["result"] == "acceptable" and not test["flags"]:
                    problems.append(f"{where}: {jp}.flags: an acceptable case must carry a flag")
                for dtype in test["dtypes"]:
                    for name, value in test["inputs"].items():
                        kind = next((i.kind for i in spec.inputs if i.name == name), None)
                        if kind is None:
                            problems.append(f"{where}: {jp}.inputs.{name}: not an input of {spec.id}")
                            break
                        if kind == "float" and not all(
                                numbers.representable(v, dtype)
                                for v in numbers.flat_floats(numbers.decode_input(value))):
                            problems.append(f"{where}: {jp}.inputs.{name}: not exactly representable in {dtype}")
                for section in ("expected", "grads"):
                    for name, value in test.get(section, {}).items():
                        for s in _flat(value):
                            if s not in ("0", "Infinity", "-Infinity") and _significant(s) < 30:
                                problems.append(f"{where}: {jp}.{section}.{name}: fewer than 30 digits ({s})")
                                break
        if sorted(tcids) != list(range(1, len(tcids) + 1)) or tcids != sorted(tcids):
            problems.append(f"{where}: $.testGroups: tcIds must run 1..n in order")
        if doc["numberOfTests"] != len(tcids):
            problems.append(f"{where}: $.numberOfTests: says {doc['numberOfTests']}, file holds {len(tcids)}")
    return problems


def _flat(x):
    if isinstance(x, list):
        for v in x:
            yield from _flat(v)
    else:
        yield x


def _significant(s: str) -> int:
    mantissa = s.lstrip("-").split("e")[0].replace(".", "").lstrip("0")
    return len(mantissa)
