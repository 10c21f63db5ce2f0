"""Reports of a check run: console, JSON (``lossproof-report/3``, DESIGN §9) and JUnit XML."""
from __future__ import annotations

import json
import platform
import sys
from collections import Counter, defaultdict
from xml.etree import ElementTree as ET

from lossproof.conformance._io import write_atomically
from lossproof.conformance.results import CHECKED, MISSING_MODULE, NOT_CALLED, CaseResult, failed, summary

REPORT_SCHEMA = "lossproof-report/3"
DERIVED_GROUP = "derived"   # the group of cases derived at run time (conformance.derive, which imports this)


def worst_table(results: list[CaseResult]) -> dict:
    """{(target, objective): {dtype: worst err/tolerance and worst ulps}}"""
    table: dict = defaultdict(dict)
    for r in results:
        if r.result == "acceptable":
            continue  # implementation-defined cases may legitimately sit far outside the bound
        for metrics in r.outputs.values():
            cell = table[(r.target, r.objective)].setdefault(r.dtype, {"ulp": 0.0, "err_over_tol": 0.0})
            cell["ulp"] = max(cell["ulp"], metrics["max_ulp"])
            cell["err_over_tol"] = max(cell["err_over_tol"], metrics["err_over_tol"])
    return table


def to_json(results: list[CaseResult], suite: dict, environment: dict, diagnoses=()) -> dict:
    """``diagnoses``: the conformance.diagnose.Diagnosis records of the run."""
    return {
        "schema": REPORT_SCHEMA,
        "suite": suite,
        "environment": environment,
        "summary": summary(results),
        "diagnoses": [d.as_dict() for d in diagnoses],
        "cases": [{
            "uid": r.uid, "objective": r.objective, "group": r.group, "conventions": r.conventions,
            "target": r.target, "dtype": r.dtype, "device": r.device, "axis": r.axis, "status": r.status,
            "outputs": r.outputs, "flags": r.flags, "message": r.message, "known": r.known, "raised": r.raised,
            "repro": r.repro, **({"partition": r.partition} if r.partition else {}),
        } for r in results],
    }


def known_failures(results: list[CaseResult], diagnoses=()) -> dict:
    """A known-failures file (``--known``) from a run: ``uid@dtype`` of every failing case, with
    the diagnosis that explains it as the reason (the case's own message where none does)."""
    why = {}
    for d in diagnoses:
        for uid in d.uids:
            why.setdefault((d.target, uid), f"[{d.kind}] {d.defect}; fix: {d.fix}")
    known: dict = {}
    for r in results:
        if r.axis == "conformance" and r.status in ("fail", "error"):
            reason = why.get((r.target, r.uid), r.message)
            key = f"{r.uid}@{r.dtype}"
            known[key] = reason if known.get(key, reason) == reason else f"{known[key]} | {reason}"
    return dict(sorted(known.items()))


def environment(targets) -> dict:
    return {"python": platform.python_version(), "platform": platform.platform(),
            "backends": {t.name: t.version for t in targets},
            "devices": sorted({d for t in targets for d in t.devices})}


def write_json(path: str, doc: dict) -> None:
    write_atomically(path, (json.dumps(doc, indent=1, sort_keys=False) + "\n").encode())


def junit(results: list[CaseResult], strict: bool = False) -> bytes:
    """One testsuite per target, one testcase per case and dtype. A known failure (xfail) is
    reported skipped with its reason; validation outcomes are failures only with ``strict``."""
    bad = {id(r) for r in failed(results, strict)}
    suites = ET.Element("testsuites", name="lossproof")
    by_target = defaultdict(list)
    for r in results:
        by_target[r.target].append(r)
    for target, rs in by_target.items():
        n_bad = [r for r in rs if id(r) in bad]
        suite = ET.SubElement(suites, "testsuite", name=target, tests=str(len(rs)),
                              failures=str(sum(r.status != "error" for r in n_bad)),
                              errors=str(sum(r.status == "error" for r in n_bad)),
                              skipped=str(sum(r.status in ("skip", "unsupported", "xfail") for r in rs)))
        for r in rs:
            case = ET.SubElement(suite, "testcase", classname=f"{target}.{r.objective}",
                                 name=f"{r.uid}[{r.dtype}-{r.device}{'-' + r.partition if r.partition else ''}]",
                                 time=f"{r.seconds:.4f}")
            if id(r) in bad:
                tag = "error" if r.status == "error" else "failure"
                ET.SubElement(case, tag, message=f"{r.status}: {r.message}"[:500]).text = r.repro
            elif r.status in ("skip", "unsupported"):
                ET.SubElement(case, "skipped", message=r.message[:500])
            elif r.status == "xfail":
                ET.SubElement(case, "skipped", message=f"known failure: {r.known}"[:500])
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)


def distinctive_flag(r: CaseResult, failures: list[CaseResult], checked: list[CaseResult]) -> str:
    """The flag of ``r`` that best separates failures from passes: the highest ratio of its
    frequency among failures to its frequency among all checked cases (a flag carried by
    most vectors, such as DPO's DetachedRewards, explains nothing)."""
    if not r.flags:
        return "(no flag)"
    in_failures = Counter(f for x in failures for f in x.flags)
    in_checked = Counter(f for x in checked for f in x.flags)
    return max(r.flags, key=lambda f: (in_failures[f] / len(failures)) / (in_checked[f] / len(checked)))


def console(results: list[CaseResult], out=None, max_failures: int = 25, quiet: bool = False,
            strict: bool = False, notes=None, diagnoses=None, cases: bool = True) -> None:
    """``notes``: {objective: {flag: {"description", ...}}}, the notes of the vector files, to
    say what each flag a failing vector carries means; ``diagnoses``: printed first when given;
    ``cases``: whether the per-case lines follow."""
    out = out or sys.stdout
    s = summary(results)
    _not_called(results, out)
    _missing_modules(results, out)
    bad = [r for r in failed(results, strict) if not r.message.startswith((NOT_CALLED, MISSING_MODULE))]
    checked = [r for r in results if r.status in CHECKED or r.axis == "validation"]
    # the diagnoses explain the conformance failures; without --cases only the invalid inputs
    # not rejected (--strict) are listed case by case
    listed = bad if cases or not diagnoses else [r for r in bad if r.axis == "validation"]
    if diagnoses:
        print_diagnoses(diagnoses, out, results, notes)
        hidden = sum(r.axis == "conformance" and r.status in ("fail", "error") for r in bad) if not cases else 0
        if hidden:
            print(f"  ({hidden} failing case-run(s): --cases prints them one by one)", file=out)
    if listed:
        groups = defaultdict(list)
        for r in listed:
            groups[distinctive_flag(r, listed, checked)].append(r)
        print("failures by their most distinctive flag: "
              + ", ".join(f"{flag} {len(rs)}" for flag, rs in sorted(groups.items(), key=lambda kv: -len(kv[1]))),
              file=out)
        shown = 0
        for flag, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            print(f"  [{flag}]{_flag_note(notes, rs[0].objective, flag)}", file=out)
            for r in rs[:max(1, max_failures - shown)]:
                _print_case(r, out)
                shown += 1
        if len(listed) > shown:
            print(f"  … and {len(listed) - shown} more (use --report-json for all)", file=out)
    xfails = [r for r in results if r.status == "xfail"]
    if xfails:
        reasons = Counter((r.target, r.known) for r in xfails)
        print(f"known failures ({len(xfails)} case(s), declared; not counted as failures):", file=out)
        for (target, reason), n in reasons.most_common():
            print(f"  {target}: {n:4} × {reason}", file=out)
    xpasses = [r for r in results if r.status == "xpass"]
    if xpasses:
        print(f"stale known failures ({len(xpasses)} case(s) now pass: remove their declarations):", file=out)
        for r in xpasses[:max_failures]:
            print(f"  {r.target}/{r.dtype} {r.uid}: {r.known}", file=out)
    if not quiet:
        _table(results, out)
    _checked_nothing(results, out)
    c, v = s["conformance"], s["validation"]
    print(f"\nconformance: {c['pass']} passed, {c['fail']} failed, {c['error']} errors, {c['xfail']} known failures, "
          f"{c['xpass']} stale known, {c['unsupported']} unsupported, {c['skip']} skipped", file=out)
    print(f"validation:  {v['rejected']} rejected, {v['non-finite']} returned non-finite values, "
          f"{v['accepted']} accepted silently, {v['error']} errors, {v['unsupported']} unsupported, "
          f"{v['skip']} skipped{'' if strict else ' (informational; --strict fails on anything but rejected)'}",
          file=out)


def _flag_note(notes, objective: str, flag: str) -> str:
    description = ((notes or {}).get(objective) or {}).get(flag, {}).get("description", "")
    return f" {description}" if description else ""


def _not_called(results: list[CaseResult], out) -> None:
    """Each signature mismatch once, per target and objective, with the cases it kept from
    being called (they count as errors in the summary)."""
    by_objective: dict = defaultdict(list)
    for r in results:
        if r.message.startswith(NOT_CALLED):
            by_objective[(r.target, r.objective)].append(r)
    if not by_objective:
        return
    print("not called: the function's signature does not fit the arguments lossproof passes "
          "(counted as errors):", file=out)
    for (target, objective), rs in by_objective.items():
        invalid = sum(r.axis == "validation" for r in rs)
        label, _, _ = rs[0].message.removeprefix(NOT_CALLED).partition(" ")
        problems = dict.fromkeys(p for r in rs for p in r.message.removeprefix(NOT_CALLED).partition(" ")[2]
                                 .split("; "))
        print(f"  {target} {objective}: {label} ({len(rs)} case(s)"
              + (f", {invalid} of them invalid inputs" if invalid else "") + "):", file=out)
        for problem in problems:
            print(f"    {problem}", file=out)
        shown = next((r for r in rs if r.axis == "conformance"), rs[0])
        print(f"    repro: {shown.repro}", file=out)


def _missing_modules(results: list[CaseResult], out) -> None:
    """Each module a target's calls needed and this environment lacks, once per target, with
    the cases it stopped (they count as errors)."""
    by_module: dict = defaultdict(list)
    for r in results:
        if r.message.startswith(MISSING_MODULE):
            by_module[(r.target, r.message.removeprefix(MISSING_MODULE))].append(r)
    if not by_module:
        return
    print("missing modules (the cases that need them count as errors):", file=out)
    for (target, what), rs in by_module.items():
        objectives = ", ".join(dict.fromkeys(r.objective for r in rs))
        print(f"  {target}: {what} ({len(rs)} case(s) of {objectives})", file=out)

def print_diagnoses(diagnoses, out, results=(), notes=None) -> None:
    """The defects, one block each, grouped by target and objective; with the run's ``results``
    and the vector files' ``notes``, each names the note of the flag that marks its cases and
    the public reports of that bug class the note links to."""
    by_pair = defaultdict(list)
    for d in diagnoses:
        by_pair[(d.target, d.objective)].append(d)
    print(f"diagnoses: {len(diagnoses)} defect(s) in {len(by_pair)} failing target/objective pair(s)", file=out)
    for (target, objective), ds in by_pair.items():
        print(f"  {target} {objective}:", file=out)
        for d in ds:
            print(f"    [{d.kind}] {d.defect} ({d.count} case-run(s))", file=out)
            print(f"        evidence: {d.evidence}", file=out)
            print(f"        fix: {d.fix}", file=out)
            print(f"        repro: {d.repro}", file=out)
            for line in _flag_of(d, results, notes):
                print(f"        {line}", file=out)


def _flag_of(d, results, notes) -> list[str]:
    """The flag note behind a diagnosis (issue 36: the bug knowledge lives in the vectors): of the
    flags its failing case-runs carry, the one with the largest product of the share of the
    diagnosis's case-runs it marks and the share of its checked case-runs among them (a flag on
    one failing case, or on every case, says little), with its bug class and links."""
    mine = set(d.uids)
    ran = [r for r in results if r.target == d.target and r.objective == d.objective and r.status in CHECKED]
    failing = [r for r in ran if r.uid in mine and r.status in ("fail", "error")]
    flag_notes = (notes or {}).get(d.objective) or {}
    in_failing = Counter(f for r in failing for f in set(r.flags) if f in flag_notes)
    if not in_failing:
        return []
    in_ran = Counter(f for r in ran for f in set(r.flags))
    flag = max(sorted(in_failing), key=lambda f: in_failing[f] / len(failing) * in_failing[f] / in_ran[f])
    note = flag_notes[flag]
    out = [f"flag: [{flag}]" + (f" ({note['bugType']})" if note.get("bugType") else "")
           + f" {note.get('description', '')}".rstrip()]
    if note.get("links"):
        out.append(f"reported: {', '.join(note['links'])}")
    return out


def _print_case(r: CaseResult, out) -> None:
    where = f"{r.target}/{r.dtype}/{r.device}" + (f"/{r.partition}" if r.partition else "")
    print(f"    {r.status.upper():5} {where} {r.uid} [{r.group}]: {r.message}", file=out)
    if r.worst:
        w = r.worst
        print(f"          {w['output']}[{','.join(map(str, w['index']))}]: got {w['got']!r} want "
              f"{w['want']!r} ({w['ulps']:.3g} ulp, tolerance {w['tol']:.3g})", file=out)
    print(f"          repro: {r.repro}", file=out)


def why_nothing(results: list[CaseResult]) -> str:
    """The most common reasons the cases of a run were not checked, for a one-line message."""
    if not results:
        return "the target implements none of the selected objectives"
    reasons = Counter(r.message for r in results)
    return "; ".join(f"{n} case(s): {msg}" for msg, n in reasons.most_common(3))


def _checked_nothing(results: list[CaseResult], out) -> None:
    """A line for each target none of whose cases reached a verdict: each target is judged on its
    own, so one that checks nothing is reported, not the end of the run."""
    for target in dict.fromkeys(r.target for r in results):
        mine = [r for r in results if r.target == target]
        if not any(r.status in CHECKED for r in mine):
            print(f"\n{target}: checks nothing ({why_nothing(mine)})", file=out)
            continue
        # an objective the target implements and the selection reached, none of whose cases was
        # checked, is named too: the table leaves it out, and a declaration that selects nothing
        # (a fixed value no case holds) must not pass unseen
        for objective in dict.fromkeys(r.objective for r in mine):
            theirs = [r for r in mine if r.objective == objective and r.axis == "conformance"]
            if theirs and not any(r.status in CHECKED for r in theirs):
                print(f"\n{target} {objective}: checks nothing ({why_nothing(theirs)})", file=out)


def _table(results: list[CaseResult], out) -> None:
    """Per target, the objectives that were checked (at least one case reached a verdict)."""
    table = worst_table(results)
    counts = defaultdict(Counter)
    for r in results:
        counts[(r.target, r.objective)][r.status] += 1
    for target in sorted({r.target for r in results}):
        rows = [o for o in sorted({r.objective for r in results if r.target == target})
                if any(counts[(target, o)][st] for st in CHECKED)]
        if not rows:   # a line of its own (_checked_nothing), also with --quiet
            continue
        print(f"\n{target}: {'objective':24} {'pass':>5} {'fail':>5} {'error':>5} {'xfail':>5} {'unsup':>5} "
              f"{'skip':>5} │ {'rej':>4} {'nonf':>4} {'acc':>4}   worst error/tolerance by dtype", file=out)
        for objective in rows:
            c = counts[(target, objective)]
            conf = [r for r in results if r.target == target and r.objective == objective and r.axis == "conformance"]
            val = [r for r in results if r.target == target and r.objective == objective and r.axis == "validation"]
            unsup = sum(r.status == "unsupported" for r in conf)
            skip = sum(r.status == "skip" for r in conf)
            worst = "  ".join(f"{dt} {v['err_over_tol']:.2g}"
                              for dt, v in sorted(table.get((target, objective), {}).items()))
            # checked on cases that are not golden vectors: say how many, each case once (the
            # columns count case-runs, one per dtype)
            derived = len({r.uid for r in conf if r.group == DERIVED_GROUP and r.status in CHECKED})
            if derived:
                committed = len({r.uid for r in conf if r.group != DERIVED_GROUP and r.status in CHECKED})
                worst += f"   ({committed} committed + {derived} derived cases)"
            print(f"{'':{len(target) + 2}}{objective:24} {c['pass']:5} {c['fail']:5} {c['error'] - sum(r.status == 'error' for r in val):5} "
                  f"{c['xfail']:5} {unsup:5} {skip:5} │ {c['rejected']:4} {c['non-finite']:4} {c['accepted']:4}   {worst}",
                  file=out)
