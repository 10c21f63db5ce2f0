"""Reports of a check run: console, JSON (``lossproof-report/1``, DESIGN §9) and JUnit XML."""
from __future__ import annotations

import json
import platform
import sys
from collections import Counter, defaultdict
from xml.etree import ElementTree as ET

from conformance._io import write_atomically
from conformance.results import CHECKED, CaseResult, failed, summary

REPORT_SCHEMA = "lossproof-report/2"
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


def to_json(results: list[CaseResult], suite: dict, environment: dict) -> dict:
    return {
        "schema": REPORT_SCHEMA,
        "suite": suite,
        "environment": environment,
        "summary": summary(results),
        "cases": [{
            "uid": r.uid, "objective": r.objective, "group": r.group, "conventions": r.conventions,
            "target": r.target, "dtype": r.dtype, "device": r.device, "axis": r.axis, "status": r.status,
            "outputs": r.outputs, "flags": r.flags, "message": r.message, "known": r.known, "raised": r.raised,
            "repro": r.repro, **({"partition": r.partition} if r.partition else {}),
        } for r in results],
    }


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
            strict: bool = False) -> None:
    out = out or sys.stdout
    s = summary(results)
    bad = failed(results, strict)
    checked = [r for r in results if r.status in CHECKED or r.axis == "validation"]
    if bad:
        groups = defaultdict(list)
        for r in bad:
            groups[distinctive_flag(r, bad, checked)].append(r)
        print("failures by their most distinctive flag: "
              + ", ".join(f"{flag} {len(rs)}" for flag, rs in sorted(groups.items(), key=lambda kv: -len(kv[1]))),
              file=out)
        shown = 0
        for flag, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            print(f"  [{flag}]", file=out)
            for r in rs[:max(1, max_failures - shown)]:
                _print_case(r, out)
                shown += 1
        if len(bad) > shown:
            print(f"  … and {len(bad) - shown} more (use --report-json for all)", file=out)
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
    c, v = s["conformance"], s["validation"]
    print(f"\nconformance: {c['pass']} passed, {c['fail']} failed, {c['error']} errors, {c['xfail']} known failures, "
          f"{c['xpass']} stale known, {c['unsupported']} unsupported, {c['skip']} skipped", file=out)
    print(f"validation:  {v['rejected']} rejected, {v['non-finite']} returned non-finite values, "
          f"{v['accepted']} accepted silently, {v['error']} errors, {v['unsupported']} unsupported, "
          f"{v['skip']} skipped{'' if strict else ' (informational; --strict fails on anything but rejected)'}",
          file=out)


def _print_case(r: CaseResult, out) -> None:
    where = f"{r.target}/{r.dtype}/{r.device}" + (f"/{r.partition}" if r.partition else "")
    print(f"    {r.status.upper():5} {where} {r.uid} [{r.group}]: {r.message}", file=out)
    if r.worst:
        w = r.worst
        print(f"          {w['output']}[{','.join(map(str, w['index']))}]: got {w['got']!r} want "
              f"{w['want']!r} ({w['ulps']:.3g} ulp, tolerance {w['tol']:.3g})", file=out)
    print(f"          repro: {r.repro}", file=out)


def _table(results: list[CaseResult], out) -> None:
    """Per target, the objectives that were checked (at least one case reached a verdict)."""
    table = worst_table(results)
    counts = defaultdict(Counter)
    for r in results:
        counts[(r.target, r.objective)][r.status] += 1
    for target in sorted({r.target for r in results}):
        rows = [o for o in sorted({r.objective for r in results if r.target == target})
                if any(counts[(target, o)][st] for st in CHECKED)]
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
            derived = sum(r.group == DERIVED_GROUP and r.status in CHECKED for r in conf)
            if derived:   # checked on cases that are not golden vectors: say how many
                committed = sum(r.group != DERIVED_GROUP and r.status in CHECKED for r in conf)
                worst += f"   ({committed} committed + {derived} derived)"
            print(f"{'':{len(target) + 2}}{objective:24} {c['pass']:5} {c['fail']:5} {c['error'] - sum(r.status == 'error' for r in val):5} "
                  f"{c['xfail']:5} {unsup:5} {skip:5} │ {c['rejected']:4} {c['non-finite']:4} {c['accepted']:4}   {worst}",
                  file=out)
