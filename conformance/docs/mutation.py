"""docs/mutation.md, the kill table, rendered from its recorded data, docs/mutation.json.

The data is what every mutant and twin of tests/mutants gave when run through ``lossproof check
--target`` (float64): ``PYTHONPATH=tests python -m mutants.killtable`` records it, and
tests/mutants/test_kill_table.py fails when a fresh run gives anything else, so the page follows
the mutants without the build importing them: the mutants are tests, not part of the installed
package, and need torch.
"""
from __future__ import annotations

import json

from lossproof.conformance.docs import DocsError, Unavailable
from lossproof.conformance.docs.context import Context

DATA = "docs/mutation.json"     # relative to the root of the checkout
# Families in the order of the rest of the documentation; a family not listed follows, by name.
ORDER = ("kl", "dpo", "grpo", "gae", "distill", "proximal_kl")

HEAD = """\
# Mutation testing: the kill table

Each row is a buggy implementation (a *mutant*) modelled on a bug class reported against a
real library or described in a paper, paired with its correct *twin* (the same code with the
bug switched off). `lossproof check --strict --target` must flag every mutant (a `fail` or
`error` on at least one vector, or an invalid input not rejected) and pass every twin;
`tests/mutants/test_kill_table.py` enforces it.
The mutants live in `tests/mutants/` (one module per family); their docstrings carry the
class and where it was seen. What their check gives is recorded in `docs/mutation.json`
(`PYTHONPATH=tests python -m mutants.killtable`; the test fails when a fresh run differs), and
`lossproof docs build` renders this page from it. The public reports a mutant cites are also
in the `links` of the note of a vector flag that catches it (the vector files' `notes`)."""

FOOT = """\
Run one yourself (exit status 1 for a mutant, 0 for its twin):

    PYTHONPATH=tests lossproof check --strict --target mutants.grpo:ADV_SAMPLE_STD --objective grpo.advantages
    PYTHONPATH=tests lossproof check --strict --target mutants.grpo:ADV_SAMPLE_STD__TWIN --objective grpo.advantages

Columns: *flagged* = cases failed or errored / cases judged (float64); *flags* = the vector
flags of the flagged cases, most frequent first; *diagnosis* = the kinds of defect the check
names (`conformance/diagnose.py`), with the case-runs each explains (`tests/mutants/diagnoses.py`
says which each mutant must get). Two classes are seen only by the harness's own probes: a
gradient leak (outputs of `grpo.advantages` / `proximal_kl.future_cost` must carry no
gradient) and a wrong output dtype; see `conformance/harness.py`.
"""


def page(ctx: Context) -> str:
    path = ctx.root / DATA
    if not path.is_file():
        raise Unavailable(f"{DATA} not found under {ctx.root}: record it with "
                          "`PYTHONPATH=tests python -m mutants.killtable` in a source checkout")
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))["mutants"]
    except (ValueError, KeyError) as err:
        raise DocsError(f"{path}: not a recorded kill table ({err})") from None
    return markdown(rows) + "\n"


def markdown(rows: list[dict]) -> str:
    judged = [r for r in rows if r["judged"] is not None]
    killed = [r for r in judged if r["flagged"]]
    lines = [HEAD, "",
             f"Mutation score on the vectors present: **{len(killed)}/{len(judged)}** killed "
             f"({len(rows)} mutants in all; {len(rows) - len(judged)} wait for their family's vectors and are "
             "xfail(strict) in the test until then).", "", FOOT]
    families = sorted({r["family"] for r in rows}, key=lambda f: (f not in ORDER, ORDER.index(f) if f in ORDER else 0, f))
    for family in families:
        lines += [f"## {family}", "", "| mutant | class | where seen | flagged | flags that catch it | diagnosis |",
                  "|---|---|---|---|---|---|"]
        for r in sorted((r for r in rows if r["family"] == family), key=lambda r: (r["objective"], r["slug"])):
            name = f"`{r['slug']}`<br>{r['objective']}" + (" (numpy)" if r["framework"] == "numpy" else "")
            if r["judged"] is None:
                flagged, caught, named = "—", f"no {family} vectors yet (xfail, strict)", "—"
            else:
                flagged = f"{r['flagged']}/{r['judged']}"
                caught = ", ".join(f"{flag} ({n})" for flag, n in r["flags"]) or "**survives**"
                named = ", ".join(f"{kind} ({n})" for kind, n in r["diagnoses"]) or "—"
            lines.append(f"| {name} | {_cell(r['class'])} | {_cell(r['seen'])} | {flagged} | {caught} | {named} |")
        lines.append("")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
