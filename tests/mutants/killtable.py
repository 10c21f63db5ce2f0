"""Run every mutant and twin through ``lossproof check --target`` and record the kill table,
docs/mutation.json (``record``; ``main`` writes it), from which ``lossproof docs build`` renders
docs/mutation.md.

One ``lossproof check`` per objective, all of that objective's targets at once (float64,
--report-json); pairs that share a twin (same function, same declared conventions) share one
twin run. The record is deterministic: rows sorted by family, objective and slug, flags by count."""
from __future__ import annotations

import contextlib
import importlib
import json
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from lossproof.conformance import cli, harness
from lossproof.conformance.vectors.load import VectorError, VectorSet, default_dir, read_manifest
from mutants import Pair, all_pairs, export, module_of

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "mutation.md"
DATA = ROOT / "docs" / "mutation.json"
# What `lossproof check --strict` fails on: a conformance failure or error, or an invalid input
# that was not rejected (the validation axis, informational without --strict).
FLAGGED = ("fail", "error", "non-finite", "accepted")
CLEAN = ("pass", "skip", "unsupported", "rejected")


def objectives_with_vectors(directory=None) -> set[str]:
    """Objective ids that have a vector file (read from the manifest, without loading)."""
    try:
        files = read_manifest(Path(directory) if directory else default_dir())
    except VectorError:
        return set()
    return {rel[: -len(".json")].replace("/", ".") for rel in files}


def twin_name(pair: Pair, pairs: list[Pair]) -> str:
    """The twin target that stands for this pair: the first pair with the same twin function
    and conventions."""
    first = next(p for p in pairs if p.twin is pair.twin and p.conventions == pair.conventions
                 and p.framework == pair.framework)
    return f"{first.slug}__TWIN"


@contextlib.contextmanager
def declared(pairs: list[Pair], dtypes):
    """Every mutant and twin module attribute declared for ``dtypes`` while inside."""
    modules = {importlib.import_module(module_of(p)) for p in pairs}
    for m in modules:
        export(vars(m), m.PAIRS, dtypes)
    try:
        yield
    finally:
        for m in modules:
            export(vars(m), m.PAIRS)


def run(pairs: list[Pair], vector_set: VectorSet | None = None, dtypes=("float64",)) -> dict:
    """{"cases": {target name: [report cases]}, "diagnoses": {target name: [report diagnoses]},
    "exit": {objective: exit status}}. ``dtypes``: declared by every mutant and twin, all checked
    (the kill table's own run is float64)."""
    vs = vector_set or VectorSet(validate=False)
    by_objective = defaultdict(list)
    for p in pairs:
        by_objective[p.objective].append(p)
    cases, diagnoses, exits = defaultdict(list), defaultdict(list), {}
    original = cli._vector_set
    cli._vector_set = lambda args: vs   # load the vectors once, not once per objective
    try:
        with harness.single_threaded("torch"), tempfile.TemporaryDirectory() as tmp, declared(pairs, dtypes):
            for objective, group in sorted(by_objective.items()):
                specs = []
                for p in group:
                    for name in (p.slug, twin_name(p, pairs)):
                        spec = f"{module_of(p)}:{name}"
                        if spec not in specs:
                            specs.append(spec)
                report = Path(tmp) / f"{objective}.json"
                argv = ["check", "--objective", objective, "--dtype", ",".join(dtypes), "--strict", "--quiet",
                        "--report-json", str(report)]
                for spec in specs:
                    argv += ["--target", spec]
                with contextlib.redirect_stdout(None):
                    exits[objective] = cli.main(argv)
                doc = json.loads(report.read_text())
                for case in doc["cases"]:
                    cases[case["target"]].append(case)
                for diagnosis in doc["diagnoses"]:
                    diagnoses[diagnosis["target"]].append(diagnosis)
    finally:
        cli._vector_set = original
    return {"cases": dict(cases), "diagnoses": dict(diagnoses), "exit": exits}


def verdict(pair: Pair, result: dict, pairs: list[Pair]) -> dict:
    mutant = result["cases"].get(pair.slug, [])
    twin = result["cases"].get(twin_name(pair, pairs), [])
    flagged = [c for c in mutant if c["status"] in FLAGGED]
    return {
        "judged": len([c for c in mutant if c["status"] not in ("skip", "unsupported")]),  # both axes
        "killed": len(flagged),
        "flags": Counter(f for c in flagged for f in c["flags"]),
        "twin_judged": len([c for c in twin if c["status"] not in ("skip", "unsupported")]),
        "twin_bad": [c for c in twin if c["status"] not in CLEAN],
        "example": flagged[0]["message"][:160] if flagged else "",
    }


def record(pairs: list[Pair], result: dict, have: set[str]) -> dict:
    """The kill table as data (DATA): per mutant its class, where it was seen and the public reports
    it cites, and what the float64 run gave it (flagged/judged, the flags of the flagged cases, the
    diagnoses). ``lossproof docs build`` renders docs/mutation.md from it
    (``lossproof.conformance.docs.mutation``) without importing the mutants."""
    rows = []
    for p in sorted(pairs, key=lambda p: (p.family, p.objective, p.slug)):
        row = {"slug": p.slug, "objective": p.objective, "family": p.family, "framework": p.framework,
               "class": p.bug, "seen": p.seen, "links": p.links, "flagged": None, "judged": None,
               "flags": [], "diagnoses": []}
        if p.objective in have:
            v = verdict(p, result, pairs)
            row.update(flagged=v["killed"], judged=v["judged"],
                       flags=[[f, n] for f, n in sorted(v["flags"].items(), key=lambda kv: (-kv[1], kv[0]))],
                       diagnoses=[[d["kind"], d["count"]] for d in result["diagnoses"].get(p.slug, [])])
        rows.append(row)
    return {"about": "The kill table of docs/mutation.md, recorded by `PYTHONPATH=tests python -m mutants.killtable` "
                     "from a float64 run of tests/mutants; tests/mutants/test_kill_table.py checks that it is "
                     "what the mutants give.",
            "mutants": rows}


def serialize(doc: dict) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def main() -> None:
    pairs = all_pairs()
    vs = VectorSet(validate=False)
    have = objectives_with_vectors(vs.directory)
    DATA.write_text(serialize(record(pairs, run([p for p in pairs if p.objective in have], vs), have)),
                    encoding="utf-8")
    print(f"wrote {DATA}")


if __name__ == "__main__":
    main()
