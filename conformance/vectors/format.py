"""The vector file format (``lossproof-vectors/1``): canonical bytes, content-addressed uids,
the manifest. Pure functions of the data; nothing here reads or writes files."""
from __future__ import annotations

import hashlib
import json

from conformance import numbers

SCHEMA_ID = "lossproof-vectors/1"
MANIFEST = "MANIFEST.json"
MANIFEST_SCHEMA = "lossproof-manifest/1"
TEST_KEYS = ("tcId", "uid", "comment", "flags", "result", "dtypes", "inputs", "params", "expected",
             "cotangents", "grads", "scale", "tolerance", "error", "provenance")


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


def uid(objective_id: str, inputs: dict, params: dict, conventions: dict) -> str:
    """Content address: the objective plus a hash of the canonical inputs, parameters and the
    full set of conventions (paper defaults filled in; ``Objective.uid_conventions`` leaves out a
    convention added later while it holds its default)."""
    content = {
        "inputs": {k: numbers.encode_input(v) for k, v in sorted(inputs.items())},
        "params": dict(sorted(params.items())),
        "conventions": dict(sorted(conventions.items())),
    }
    digest = hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode())
    return f"{objective_id}:{digest.hexdigest()[:16]}"


def cases_digest(doc: dict) -> str:
    """sha256 of every case of one vector file, independent of test order (see
    ``conformance.vectors.versions``)."""
    cases = []
    for group in doc["testGroups"]:
        for test in group["tests"]:
            case = {k: v for k, v in test.items() if k not in ("tcId", "comment")}
            cases.append({"conventions": group["conventions"], "test": case})
    cases.sort(key=lambda c: c["test"]["uid"])
    return sha256(json.dumps(cases, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode())


def json_path(parts) -> str:
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out
