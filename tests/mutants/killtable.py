"""Run every mutant and twin through ``lossproof check --target`` and render the kill table,
docs/mutation.md (``page``; ``lossproof docs build`` writes and checks it from a source checkout).

One ``lossproof check`` per objective, all of that objective's targets at once (float64,
--report-json); pairs that share a twin (same function, same declared conventions) share one
twin run. The output is deterministic: rows sorted by objective and slug, flags by count."""
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


def _flags(counter: Counter) -> str:
    return ", ".join(f"{flag} ({n})" for flag, n in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


def markdown(pairs: list[Pair], result: dict, have: set[str]) -> str:
    killed = [p for p in pairs if p.objective in have and verdict(p, result, pairs)["killed"]]
    judged = [p for p in pairs if p.objective in have]
    lines = [
        "# Mutation testing: the kill table",
        "",
        "Each row is a buggy implementation (a *mutant*) modelled on a bug class reported against a",
        "real library or described in a paper, paired with its correct *twin* (the same code with the",
        "bug switched off). `lossproof check --strict --target` must flag every mutant (a `fail` or",
        "`error` on at least one vector, or an invalid input not rejected) and pass every twin;",
        "`tests/mutants/test_kill_table.py` enforces it.",
        "The mutants live in `tests/mutants/` (one module per family); their docstrings carry the",
        "class and where it was seen. `lossproof docs build` regenerates this file from a source",
        "checkout (`tests/mutants/killtable.py`; deterministic).",
        "",
        f"Mutation score on the vectors present: **{len(killed)}/{len(judged)}** killed "
        f"({len(pairs)} mutants in all; {len(pairs) - len(judged)} wait for their family's vectors and are "
        "xfail(strict) in the test until then).",
        "",
        "Run one yourself (exit status 1 for a mutant, 0 for its twin):",
        "",
        "    PYTHONPATH=tests lossproof check --strict --target mutants.grpo:ADV_SAMPLE_STD --objective grpo.advantages",
        "    PYTHONPATH=tests lossproof check --strict --target mutants.grpo:ADV_SAMPLE_STD__TWIN --objective grpo.advantages",
        "",
        "Columns: *flagged* = cases failed or errored / cases judged (float64); *flags* = the vector",
        "flags of the flagged cases, most frequent first; *diagnosis* = the kinds of defect the check",
        "names (`conformance/diagnose.py`), with the case-runs each explains (`tests/mutants/diagnoses.py`",
        "says which each mutant must get). Two classes are seen only by the harness's own probes: a",
        "gradient leak (outputs of `grpo.advantages` / `proximal_kl.future_cost` must carry no",
        "gradient) and a wrong output dtype; see `conformance/harness.py`.",
        "",
    ]
    order = ("kl", "dpo", "grpo", "gae", "distill", "proximal_kl")
    for family in order + tuple(sorted({p.family for p in pairs} - set(order))):   # a new family is never left out
        rows = [p for p in pairs if p.family == family]
        if not rows:
            continue
        lines += [f"## {family}", "", "| mutant | class | where seen | flagged | flags that catch it | diagnosis |",
                  "|---|---|---|---|---|---|"]
        for p in sorted(rows, key=lambda p: (p.objective, p.slug)):
            name = f"`{p.slug}`<br>{p.objective}" + (" (numpy)" if p.framework == "numpy" else "")
            if p.objective not in have:
                caught = f"no {p.family} vectors yet (xfail, strict)"
                flagged = named = "—"
            else:
                v = verdict(p, result, pairs)
                flagged = f"{v['killed']}/{v['judged']}"
                caught = _flags(v["flags"]) or "**survives**"
                named = ", ".join(f"{d['kind']} ({d['count']})" for d in result["diagnoses"].get(p.slug, [])) or "—"
            lines.append(f"| {name} | {_cell(p.bug)} | {_cell(p.seen)} | {flagged} | {caught} | {named} |")
        lines.append("")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def page(vector_set: VectorSet | None = None) -> str:
    """docs/mutation.md: every mutant and twin whose objective has vectors, run over them."""
    vs = vector_set or VectorSet(validate=False)
    pairs = all_pairs()
    have = objectives_with_vectors(vs.directory)
    return markdown(pairs, run([p for p in pairs if p.objective in have], vs), have) + "\n"
