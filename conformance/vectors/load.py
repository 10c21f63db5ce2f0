"""Loading a vector directory: the manifest's hashes, the schema, every leaf number.

Every problem is reported as a :class:`VectorError` naming the file and the JSON path, so
the CLI can print one line and exit 2.
"""
from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jsonschema

from lossproof.conformance import numbers
from lossproof.conformance.errors import LossproofError
from lossproof.conformance.vectors import certificates
from lossproof.conformance.vectors.format import (LARGE_SUFFIX, MANIFEST, MANIFEST_SCHEMA, content, is_large, json_path,
                                        large_path_for, merge_large, sha256)

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


class _Lazy(Mapping):
    """A read-only mapping over a fixed, sorted set of keys whose values are produced on
    first access (``VectorSet.files``, ``raw``, ``certificates``)."""

    def __init__(self, keys, get):
        self._keys, self._get = tuple(keys), get

    def __getitem__(self, rel):
        if rel not in self._keys:
            raise KeyError(rel)
        return self._get(rel)

    def __contains__(self, rel):
        return rel in self._keys

    def __iter__(self):
        return iter(self._keys)

    def __len__(self):
        return len(self._keys)

    def __repr__(self):
        return f"<lazy mapping of {len(self._keys)} vector files>"


def objective_of(rel: str) -> str:
    """The objective a vector (or certificate) file holds, by its path: ``kl/estimator.json``,
    ``kl/estimator.cert.json`` and ``distill/hinton.large.json.gz`` -> ``kl.estimator``,
    ``kl.estimator``, ``distill.hinton``."""
    suffix = next(s for s in (certificates.SUFFIX, LARGE_SUFFIX, ".json") if rel.endswith(s))
    return rel[: -len(suffix)].replace("/", ".")


class VectorSet:
    """A vector directory: the manifest is read (and every vector file on disk checked to be
    listed in it) at construction; a vector file is read, sha256-checked against the manifest
    and parsed when first needed, and schema-validated (:func:`parse`) when ``validate``.

    ``files`` maps each objective's vector file (``kl/estimator.json``) to its whole document,
    its ``Large`` part (``*.large.json.gz``, see ``conformance.vectors.format``) merged in;
    ``raw`` maps every stored vector file, both parts, to its content (decompressed).

    ``objectives``: globs (or exact objective ids) restricting the set to the files of those
    objectives, by their paths; None: every objective. ``eager`` (default: ``validate``)
    loads every selected file at construction, so that a bad file raises there: the whole-set
    checks (``vectors lint``, ``vectors certify``, library callers of ``VectorSet()``) keep
    that behaviour; ``lossproof check``/``show``/``cite``/``list`` pass ``validate=False``
    and pay only for the files their selection reads."""

    def __init__(self, directory: Path | str | None = None, objectives=None, *, validate: bool = True,
                 eager: bool | None = None):
        self.directory = Path(directory) if directory else default_dir()
        if not self.directory.is_dir():
            raise VectorError(self.directory, "$", "vector directory not found" + (
                "" if directory else " (this installation ships no vectors: reinstall lossproof, or pass --vectors DIR)"))
        manifest = read_manifest(self.directory)
        self.manifest_sha256 = sha256((self.directory / MANIFEST).read_bytes())
        self.validate = validate
        self._manifest = dict(sorted(manifest.items()))
        for rel in self._manifest:
            path = self.directory / rel
            if not path.is_file():
                raise VectorError(path, "$", "listed in MANIFEST.json but missing")
        listed = set(manifest)
        for path in sorted(self.directory.rglob("*.json*")):
            rel = path.relative_to(self.directory).as_posix()
            if rel.endswith((".json", LARGE_SUFFIX)) and rel != MANIFEST and rel not in listed:
                raise VectorError(path, "$", "not listed in MANIFEST.json")
        globs = None if objectives is None else [objectives] if isinstance(objectives, str) else list(objectives)

        def selected(rel):
            return globs is None or any(fnmatch.fnmatch(objective_of(rel), g) for g in globs)
        vector_rels = [r for r in self._manifest if not certificates.is_certificate(r) and not is_large(r)
                       and selected(r)]
        self._large = {r: large_path_for(r) for r in vector_rels if large_path_for(r) in self._manifest}
        for rel in self._manifest:
            if is_large(rel) and selected(rel) and rel not in self._large.values():
                raise VectorError(self.directory / rel, "$", "a Large part without its vector file "
                                  f"{rel[: -len(LARGE_SUFFIX)]}.json")
        cert_rels = [r for r in self._manifest if certificates.is_certificate(r) and selected(r)]
        self._objective_rel = {objective_of(rel): rel for rel in vector_rels}
        self._docs: dict[str, dict] = {}
        self._parts: dict[str, dict] = {}
        self._bytes: dict[str, bytes] = {}
        self.files: Mapping[str, dict] = _Lazy(vector_rels, self._doc)
        self.raw: Mapping[str, bytes] = _Lazy(sorted(vector_rels + list(self._large.values())), self._raw)
        self.certificates: Mapping[str, bytes] = _Lazy(cert_rels, self._raw)   # read by conformance.vectors.certificates
        if validate if eager is None else eager:
            for rel in self._manifest:
                if rel in self.files:
                    self._doc(rel)
                elif rel in self.certificates:
                    self._raw(rel)

    def sha256(self, rel: str) -> str:
        """The sha256 that MANIFEST.json lists for a file (of its content: decompressed)."""
        return self._manifest[rel]

    def large_part(self, rel: str) -> str | None:
        """The ``Large`` part of an objective's vector file, if it has one."""
        return self._large.get(rel)

    def _raw(self, rel: str) -> bytes:
        data = self._bytes.get(rel)
        if data is None:
            path = self.directory / rel
            try:
                data = content(rel, path.read_bytes())
            except FileNotFoundError:
                raise VectorError(path, "$", "listed in MANIFEST.json but missing") from None
            except (OSError, EOFError) as err:
                raise VectorError(path, "$", f"not a readable gzip file ({err})") from None
            if sha256(data) != self._manifest[rel]:
                raise VectorError(path, "$", "sha256 does not match MANIFEST.json (file modified or truncated)")
            self._bytes[rel] = data
        return data

    def _part(self, rel: str) -> dict:
        """One stored vector file, parsed (and validated when ``validate``)."""
        doc = self._parts.get(rel)
        if doc is None:
            path, data = self.directory / rel, self._raw(rel)
            if self.validate:
                doc = parse(path, data)
            else:
                try:
                    doc = json.loads(data)
                except UnicodeDecodeError as err:
                    raise VectorError(path, "$", f"not UTF-8 text ({err.reason})") from None
                except json.JSONDecodeError as err:
                    raise VectorError(path, f"line {err.lineno} column {err.colno}",
                                      f"not valid JSON: {err.msg}") from None
                if not isinstance(doc, dict):
                    raise VectorError(path, "$", "schema: not a vector file (expected a JSON object)")
            expected = objective_of(rel)
            if doc.get("objective") != expected:
                raise VectorError(path, "$.objective", f"{doc.get('objective')!r} is not the objective of this "
                                  f"file's path ({expected!r})")
            self._parts[rel] = doc
        return doc

    def _doc(self, rel: str) -> dict:
        doc = self._docs.get(rel)
        if doc is None:
            large = self._large.get(rel)
            doc = self._docs[rel] = merge_large(self._part(rel), large and self._part(large))
        return doc

    def version(self, rel: str | None = None) -> str:
        """The ``vectorSetVersion`` of a vector file (default: the first of the set), read from
        its main part alone."""
        return self._part(rel or next(iter(self.files)))["vectorSetVersion"]

    def parts(self, rel: str) -> Iterator[tuple[str, dict]]:
        """The stored files of an objective's vector file, each parsed on its own when reached."""
        for part in (rel, self._large.get(rel)):
            if part:
                yield part, self._part(part)

    def objective_ids(self) -> list[str]:
        """The objectives of the set, from the file paths (reads no vector file)."""
        return list(self._objective_rel)

    def cases(self, objective_glob: str = "*", flags=None) -> Iterator[VectorCase]:
        for oid, rel in self._objective_rel.items():
            if not fnmatch.fnmatch(oid, objective_glob):
                continue
            doc = self._doc(rel)
            for group in doc["testGroups"]:
                for test in group["tests"]:
                    if flags and not set(flags) & set(test["flags"]):
                        continue
                    yield VectorCase(doc["objective"], group["group"], group["conventions"], test, rel)

    def by_uid(self, uid: str) -> VectorCase:
        """The vector of this uid: its ``family.name`` prefix names the file read (its ``Large``
        part only when the uid is not in the rest)."""
        rel = self._objective_rel.get(uid.split(":", 1)[0])
        for _, doc in self.parts(rel) if rel is not None else ():
            for group in doc["testGroups"]:
                for test in group["tests"]:
                    if test["uid"] == uid:
                        return VectorCase(doc["objective"], group["group"], group["conventions"], test, rel)
        raise KeyError(uid)

    def counts(self) -> dict[str, dict[str, int]]:
        out: dict = {}
        for case in self.cases():
            c = out.setdefault(case.objective, {"valid": 0, "invalid": 0, "acceptable": 0})
            c[case.result] += 1
        return out

    def notes(self, objective: str) -> dict:
        rel = self._objective_rel.get(objective)
        if rel is None:
            raise StopIteration(objective)
        return self._doc(rel)["notes"]

    def note(self, objective: str, flag: str) -> dict:
        """One flag's note with every field (format.NOTE_KEYS) present: ``bugType`` and ``effect``
        None and ``links`` empty where a file written before they existed lacks them."""
        found = self.notes(objective).get(flag)
        if found is None:
            raise KeyError(f"{objective} has no flag {flag!r}")
        return {"bugType": None, "effect": None, "links": [], **found}
