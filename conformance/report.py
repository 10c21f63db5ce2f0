"""Reports of a check run: console, JSON (``lossproof-report/1``, DESIGN §9) and JUnit XML."""
from __future__ import annotations

import json
import platform
import sys
from collections import Counter, defaultdict
from xml.etree import ElementTree as ET

from conformance._io import write_atomically
from conformance.results import CaseResult, summary

REPORT_SCHEMA = "lossproof-report/1"


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
            "uid": r.uid, "objective": r.objective, "target": r.target, "dtype": r.dtype, "device": r.device,
            "status": r.status, "outputs": r.outputs, "flags": r.flags, "message": r.message, "repro": r.repro,
        } for r in results],
    }


def environment(targets) -> dict:
    return {"python": platform.python_version(), "platform": platform.platform(),
            "backends": {t.name: t.version for t in targets},
            "devices": sorted({d for t in targets for d in t.devices})}


def write_json(path: str, doc: dict) -> None:
    write_atomically(path, (json.dumps(doc, indent=1, sort_keys=False) + "\n").encode())


def junit(results: list[CaseResult]) -> bytes:
    suites = ET.Element("testsuites", name="lossproof")
    by_target = defaultdict(list)
    for r in results:
        by_target[r.target].append(r)
    for target, rs in by_target.items():
        s = summary(rs)
        suite = ET.SubElement(suites, "testsuite", name=target, tests=str(len(rs)), failures=str(s["fail"]),
                              errors=str(s["error"]), skipped=str(s["skip"] + s["unsupported"]))
        for r in rs:
            case = ET.SubElement(suite, "testcase", classname=f"{target}.{r.objective}",
                                 name=f"{r.uid}[{r.dtype}-{r.device}]", time=f"{r.seconds:.4f}")
            if r.status == "fail":
                ET.SubElement(case, "failure", message=r.message[:500]).text = r.repro
            elif r.status == "error":
                ET.SubElement(case, "error", message=r.message[:500]).text = r.repro
            elif r.status in ("skip", "unsupported"):
                ET.SubElement(case, "skipped", message=r.message[:500])
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)


def console(results: list[CaseResult], out=None, max_failures: int = 25, quiet: bool = False) -> None:
    out = out or sys.stdout
    s = summary(results)
    bad = [r for r in results if r.status in ("fail", "error")]
    if bad:
        by_flag = Counter(f for r in bad for f in (r.flags or ["(no flag)"]))
        print("failures by flag: " + ", ".join(f"{flag} {n}" for flag, n in by_flag.most_common()), file=out)
        for r in bad[:max_failures]:
            print(f"  {r.status.upper():5} {r.target}/{r.dtype}/{r.device} {r.uid}: {r.message}", file=out)
            if r.worst:
                w = r.worst
                print(f"        {w['output']}[{','.join(map(str, w['index']))}]: got {w['got']!r} want "
                      f"{w['want']!r} ({w['ulps']:.3g} ulp, tolerance {w['tol']:.3g})", file=out)
            print(f"        repro: {r.repro}", file=out)
        if len(bad) > max_failures:
            print(f"  … and {len(bad) - max_failures} more (use --report-json for all)", file=out)
    if not quiet:
        table = worst_table(results)
        counts = defaultdict(Counter)
        for r in results:
            counts[(r.target, r.objective)][r.status] += 1
        targets = sorted({r.target for r in results})
        for target in targets:
            print(f"\n{target}: {'objective':26} {'pass':>6} {'fail':>5} {'error':>5} {'skip':>5}   "
                  f"worst error/tolerance by dtype", file=out)
            for objective in sorted({r.objective for r in results if r.target == target}):
                c = counts[(target, objective)]
                worst = "  ".join(f"{dt} {v['err_over_tol']:.2g}"
                                  for dt, v in sorted(table.get((target, objective), {}).items()))
                print(f"{'':{len(target) + 2}}{objective:26} {c['pass']:6} {c['fail']:5} {c['error']:5} "
                      f"{c['skip'] + c['unsupported']:5}   {worst}", file=out)
    print(f"\n{s['pass']} passed, {s['fail']} failed, {s['error']} errors, {s['unsupported']} unsupported, "
          f"{s['skip']} skipped", file=out)
