"""Generate the vector files from the exact reference.

Each family module (``conformance.generate.<family>``) provides ``cases()`` (a list of
:class:`Case`), ``NOTES`` (the definition of every flag it uses), ``GROUPS`` (the source of
each convention set) and optionally ``SCALES`` (objective id -> scale function for the
tolerance policy). Generation is deterministic: same code, same bytes.
"""
from __future__ import annotations

import importlib
from collections import defaultdict
from pathlib import Path

import mpmath
import numpy as np

from lossproof import conformance
from lossproof.conformance import catalog
from lossproof.conformance._host import pool_context, usable_cores
from lossproof.conformance._io import write_tree
from lossproof.conformance.generate.build import build_test
from lossproof.conformance.generate.case import with_effect
from lossproof.conformance.vectors import certificates, versions
from lossproof.conformance.vectors.format import (LARGE_SUFFIX, MANIFEST, SCHEMA_ID, content, large_path_for, manifest_bytes,
                                        serialize, split_large, stored)
from lossproof.refimpl.exact import mp

# The generator modules, one per family, in catalog order (``catalog.Objective.generator_module``).
FAMILY_MODULES = tuple(dict.fromkeys(o.generator_module.rpartition(".")[2] for o in catalog.OBJECTIVES))


def family_module(family: str):
    return importlib.import_module(f"lossproof.conformance.generate.{family}")


def available_families() -> list[str]:
    out = []
    for family in FAMILY_MODULES:
        try:
            family_module(family)
        except ModuleNotFoundError as err:
            if err.name not in (f"lossproof.conformance.generate.{family}", f"lossproof.refimpl.exact.{family}"):
                raise
            continue
        out.append(family)
    return out


def _build(args):
    family, index = args
    module = family_module(family)
    case = _CASES[family][index]
    return build_test(case, getattr(module, "SCALES", {}).get(case.objective))


_CASES: dict = {}


def _load_cases(families):
    for family in families:
        _CASES[family] = family_module(family).cases()


def _init_worker(families):
    _load_cases(families)


def generate(families=None, progress=None, workers: int | None = None) -> dict[str, bytes]:
    """Return {relative path: content} for every vector file of the given families (a
    ``.large.json.gz`` part as its decompressed text: :func:`write` compresses it)."""
    families = list(families or available_families())
    _load_cases(families)
    jobs = [(f, i) for f in families for i in range(len(_CASES[f]))]
    workers = workers or min(usable_cores(), 8)
    if progress:
        progress(0, len(jobs))
    results = []
    if workers > 1 and len(jobs) > 50:
        with pool_context().Pool(workers, initializer=_init_worker, initargs=(families,)) as pool:
            for done, test in enumerate(pool.imap(_build, jobs, chunksize=4), 1):
                results.append(test)
                if progress:
                    progress(done, len(jobs))
    else:
        for done, job in enumerate(jobs, 1):
            results.append(_build(job))
            if progress:
                progress(done, len(jobs))
    by_objective = defaultdict(list)
    for (family, index), test in zip(jobs, results):
        by_objective[_CASES[family][index].objective].append((_CASES[family][index], test))
    files = {}
    for objective_id, items in by_objective.items():
        spec = catalog.get(objective_id)
        module = family_module(spec.family)
        main, large = split_large(_vector_file(spec, items, module.NOTES, module.GROUPS))
        files[spec.vector_file] = serialize(main)
        if large is not None:
            files[large_path_for(spec.vector_file)] = serialize(large)
    files[MANIFEST] = manifest_bytes(files)
    return files


def with_other_families(directory: Path, files: dict[str, bytes], families) -> dict[str, bytes]:
    """``files`` (generated for ``families`` only) completed by the vector files of every other
    family as they are on disk, so that the manifest still lists the whole set: what
    ``vectors generate --family`` writes or checks."""
    kept = dict(files)
    for spec in catalog.OBJECTIVES:
        if spec.family in families:
            continue
        for rel in (spec.vector_file, large_path_for(spec.vector_file)):
            data = _content_on_disk(directory / rel, rel)
            if data is not None:
                kept[rel] = data
    kept[MANIFEST] = manifest_bytes(kept)
    return kept


def _keeping_certificates(directory: Path, files: dict[str, bytes]) -> dict[str, bytes]:
    """The generated files with MANIFEST.json also listing the certificate files on disk
    (``vectors certify`` writes them; a regenerated vector file makes its certificate stale,
    which ``vectors certify --check`` reports)."""
    kept = certificates.on_disk(directory) if directory.is_dir() else {}
    return {**files, MANIFEST: manifest_bytes({**files, **kept})}


def write(directory: Path, files: dict[str, bytes]) -> None:
    files = _keeping_certificates(directory, files)
    write_tree(directory, {rel: stored(rel, data) for rel, data in files.items()}, last=MANIFEST)


def _content_on_disk(path: Path, rel: str) -> bytes | None:
    try:
        return content(rel, path.read_bytes())
    except (OSError, EOFError):     # missing, or a damaged gzip stream
        return None


def first_difference(directory: Path, files: dict[str, bytes]) -> str | None:
    """Why the directory does not hold exactly ``files`` (``generate --check``), or None. A
    compressed file is compared by its content, which is what the manifest lists."""
    files = _keeping_certificates(directory, files)
    for rel, data in sorted(files.items()):
        path = directory / rel
        if _content_on_disk(path, rel) != data:
            return f"{path}: differs from what the generator produces (run 'lossproof vectors generate')"
    stale = sorted(p for p in directory.rglob("*.json*") if p.relative_to(directory).as_posix() not in files
                   and p.name.endswith((".json", LARGE_SUFFIX)) and not certificates.is_certificate(p.name))
    if stale:
        return f"{stale[0]}: not produced by the generator"
    return None


def _vector_file(spec, items, notes, group_sources) -> dict:
    groups: dict = {}
    for case, test in items:
        conventions = {n: case.conventions.get(n, spec.defaults[n]) for n in spec.conventions}
        key = (case.group, tuple(sorted((k, repr(v)) for k, v in conventions.items())))
        groups.setdefault(key, {"group": case.group, "conventions": conventions,
                                "source": group_sources[case.group], "tests": []})["tests"].append(test)
    tc = 0
    for group in groups.values():
        for test in group["tests"]:
            tc += 1
            test["tcId"] = tc
    used = sorted({f for _, t in items for f in t["flags"]})
    return {
        "schema": SCHEMA_ID,
        "objective": spec.id,
        "vectorSetVersion": versions.CURRENT,
        "generator": {"name": "lossproof", "version": conformance.__version__,
                      "mpmath": mpmath.__version__, "numpy": np.__version__, "dps": mp.get_dps(), "digits": 32},
        "numberOfTests": tc,
        "notes": {flag: with_effect(notes[flag]) for flag in used},
        "testGroups": list(groups.values()),
    }
