"""The vector file format (``lossproof-vectors/1``): canonical bytes, content-addressed uids,
the manifest, and the split of an objective's ``Large`` tests into a compressed file of their
own. Pure functions of the data; nothing here reads or writes files.

An objective with bulky tests is stored as two files of the same format: ``<name>.json`` with
every other test, and ``<name>.large.json.gz``, gzip of the canonical text of a vector file
holding only the bulky ones, each in a group with its own group's header. A test is bulky when it
is flagged ``Large`` (realistic vocabularies) or its canonical line is longer than
``BULKY_BYTES`` (hundreds of elements of 32-digit values and gradients): together 6% of the
tests and half of the bytes, which compress about 2.4 to 1. tcIds and uids are those of the whole
file, which :func:`merge_large` restores byte for byte
(``serialize(merge_large(*split_large(doc))) == serialize(doc)``), so a cited uid, a released
digest and a certificate mean what they meant before the split. The manifest lists a
compressed file by the sha256 of its decompressed content: the digest then depends on the
data only, not on the zlib that compressed it.
"""
from __future__ import annotations

import gzip
import hashlib
import json

from lossproof.conformance import numbers

SCHEMA_ID = "lossproof-vectors/1"
MANIFEST = "MANIFEST.json"
MANIFEST_SCHEMA = "lossproof-manifest/1"
LARGE_FLAG = "Large"
BULKY_BYTES = 32_000    # a test line longer than this is stored in the compressed part
LARGE_SUFFIX = ".large.json.gz"
# A flag's note, after Project Wycheproof's notes: what the flag exercises (category,
# description) and the bug it guards against (bugType, effect, links to public reports of it).
NOTE_KEYS = ("category", "description", "bugType", "effect", "links")
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
        note = {k: note[k] for k in NOTE_KEYS if k in note}
        lines.append(f"  {json.dumps(flag)}: {_compact(note)}{',' if i < len(notes) - 1 else ''}")
    lines.append(" },")
    lines.append(' "testGroups": [')
    groups = doc.get("testGroups", [])
    for gi, group in enumerate(groups):
        head = {k: v for k, v in group.items() if k != "tests"}
        lines.append("  {" + _compact(head)[1:-1] + ', "tests": [')
        tests = group["tests"]
        for ti, test in enumerate(tests):
            lines.append("   " + _test_line(test) + ("," if ti < len(tests) - 1 else ""))
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


def large_path_for(vector_rel: str) -> str:
    """``distill/hinton.json`` -> ``distill/hinton.large.json.gz``."""
    return vector_rel[: -len(".json")] + LARGE_SUFFIX


def is_large(rel: str) -> bool:
    return rel.endswith(LARGE_SUFFIX)


def stored(rel: str, content: bytes) -> bytes:
    """The bytes written to disk for a file of this content (``mtime=0``: same data, same bytes
    under one zlib)."""
    return gzip.compress(content, compresslevel=9, mtime=0) if rel.endswith(".gz") else content


def content(rel: str, data: bytes) -> bytes:
    """The content of a file as stored on disk (decompressed where it is gzip); raises
    ``OSError``/``EOFError`` for a damaged gzip stream."""
    return gzip.decompress(data) if rel.endswith(".gz") else data


def _test_line(test: dict) -> str:
    return _compact({k: test[k] for k in TEST_KEYS if k in test})


def is_bulky(test: dict) -> bool:
    """Whether a test is stored in the compressed part: flagged ``Large``, or a long line."""
    return LARGE_FLAG in test["flags"] or len(_test_line(test)) > BULKY_BYTES


def _with_tests(doc: dict, keep) -> dict:
    groups = [{**g, "tests": [t for t in g["tests"] if keep(t)]} for g in doc["testGroups"]]
    groups = [g for g in groups if g["tests"]]
    used = {f for g in groups for t in g["tests"] for f in t["flags"]}
    return {**doc, "numberOfTests": sum(len(g["tests"]) for g in groups),
            "notes": {flag: note for flag, note in doc["notes"].items() if flag in used},
            "testGroups": groups}


def split_large(doc: dict) -> tuple[dict, dict | None]:
    """(the file without its bulky tests, the file of only those; None when there are none)."""
    # decided once per test: each decision serialises the test's line
    bulky = {id(t) for g in doc["testGroups"] for t in g["tests"] if is_bulky(t)}
    if not bulky:
        return doc, None
    return (_with_tests(doc, lambda t: id(t) not in bulky), _with_tests(doc, lambda t: id(t) in bulky))


def merge_large(doc: dict, large: dict | None) -> dict:
    """The whole vector file from its two parts: groups (same group name and conventions) and
    tests back in tcId order, the notes of both in the generator's (sorted) order."""
    if large is None:
        return doc
    groups: dict = {}
    for group in doc["testGroups"] + large["testGroups"]:
        key = json.dumps({k: v for k, v in group.items() if k != "tests"}, sort_keys=True)
        groups.setdefault(key, {**group, "tests": []})["tests"].extend(group["tests"])
    for group in groups.values():
        group["tests"].sort(key=lambda t: t["tcId"])
    notes = {**doc["notes"], **large["notes"]}
    return {**doc, "numberOfTests": doc["numberOfTests"] + large["numberOfTests"],
            "notes": {flag: notes[flag] for flag in sorted(notes)},
            "testGroups": sorted(groups.values(), key=lambda g: g["tests"][0]["tcId"])}
