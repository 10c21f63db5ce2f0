"""GPU/CPU parity: every vector on torch CUDA and CuPy, against the exact values and against
torch CPU float64, with the time each backend took.

    python benchmarks/gpu_parity.py [--out DIR]

Writes DIR/gpu_parity.json and DIR/gpu_parity.md (max ulps and max error/tolerance per
objective and dtype, wall time per backend). Exits 0 with a message where no GPU is present.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

from conformance import harness
from conformance.results import summary
from conformance.targets import builtin
from conformance.vectors.load import VectorSet


def _run(name: str, device: str, vs) -> tuple[list, float]:
    target = builtin.load(name)
    start = time.perf_counter()
    results = harness.run(target, vs, device=device)
    return results, time.perf_counter() - start


def _table(results) -> dict:
    table = defaultdict(dict)
    for r in results:
        for m in r.outputs.values():
            cell = table[r.objective].setdefault(r.dtype, {"max_ulp": 0.0, "err_over_tol": 0.0, "fail": 0})
            cell["max_ulp"] = max(cell["max_ulp"], m["max_ulp"])
            cell["err_over_tol"] = max(cell["err_over_tol"], m["err_over_tol"])
        if r.status in ("fail", "error"):
            table[r.objective].setdefault(r.dtype, {"max_ulp": 0.0, "err_over_tol": 0.0, "fail": 0})["fail"] += 1
    return table


def _cpu_gap(gpu, cpu) -> float:
    """Largest |GPU − CPU| over outputs in units of the tolerance (float64 runs only)."""
    cpu_by = {(r.uid, r.dtype): r for r in cpu}
    worst = 0.0
    for r in gpu:
        ref = cpu_by.get((r.uid, r.dtype))
        if ref is None:
            continue
        for name, m in r.outputs.items():
            if name in ref.outputs:
                worst = max(worst, abs(m["max_abs"] - ref.outputs[name]["max_abs"]) / max(m["tol"], 1e-300))
    return worst


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results", help="output directory")
    args = parser.parse_args(argv)
    backends = []
    if builtin.cuda_available():
        backends.append(("torch", "cuda"))
    ok, why = builtin.cupy_available()
    if ok:
        backends.append(("cupy", "cuda"))
    if not backends:
        print(f"gpu_parity: no GPU backend available (torch CUDA: {builtin.cuda_available()}; CuPy: {why}); "
              "nothing to measure")
        return 0
    vs = VectorSet()
    cpu, cpu_seconds = _run("torch", "cpu", vs)
    doc = {"backends": {"torch-cpu": {"seconds": cpu_seconds, "table": _table(cpu)}}}
    for name, device in backends:
        results, seconds = _run(name, device, vs)
        doc["backends"][f"{name}-{device}"] = {
            "seconds": seconds, "table": _table(results), "summary": summary(results),
            "gap_to_cpu_in_tolerances": _cpu_gap(results, cpu) if name == "torch" else None}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_parity.json").write_text(json.dumps(doc, indent=1))
    lines = ["| backend | objective | dtype | max ulp | max err/tol | failures |", "|---|---|---|---|---|---|"]
    for backend, entry in doc["backends"].items():
        for objective, per_dtype in sorted(entry["table"].items()):
            for dtype, cell in sorted(per_dtype.items()):
                lines.append(f"| {backend} | {objective} | {dtype} | {cell['max_ulp']:.3g} | "
                             f"{cell['err_over_tol']:.3g} | {cell['fail']} |")
    lines.append("")
    lines += [f"- {b}: {e['seconds']:.1f} s" for b, e in doc["backends"].items()]
    (out / "gpu_parity.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    failed = any(e.get("summary", {}).get("fail", 0) or e.get("summary", {}).get("error", 0)
                 for e in doc["backends"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
