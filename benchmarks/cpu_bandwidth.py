"""The fraction of the copy bandwidth that lossproof's reverse token KL (forward + backward)
reaches on a CPU, measured on a shared machine: each timing of a method is taken between two
timings of the copy, and its fraction is computed against the mean of those two, so that load
from other processes shifts both sides of every ratio together; medians over the rounds.

    python benchmarks/cpu_bandwidth.py                     # N = 4096, V = 131072, float32, 7 rounds
    python benchmarks/cpu_bandwidth.py --rounds 5 --json benchmarks/results/cpu_bandwidth.json

Methods: ``lossproof`` (the default path: the compiled kernel where a C++ compiler is present)
and ``lossproof-tiles`` (the torch tiles), as ``lossproof bench`` defines them; the copy, the
bandwidth fraction (3·B/time over the copy's 2·B/time) and the inputs are those of
``conformance.bench``. Speed is reported, never asserted.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lossproof.conformance.bench import methods, run, timing  # noqa: E402


def measure(n: int, v: int, rounds: int, kernel: str, names, log=print) -> dict:
    import torch
    z, t, y = methods.inputs(n, v, torch.float32)
    runners = methods.Runners([])
    fns = {m: runners.get(m, kernel) for m in names}
    compiled = run.compiled_kernel("cpu", log)
    logits_bytes = n * v * 4
    for fn in fns.values():  # warm-up: first-call costs are not part of a round
        timing.time_runs(fn, z, t, y, 1)
    per = {m: {"times_s": [], "copy_s": [], "fractions": []} for m in fns}
    for i in range(rounds):
        for m, fn in fns.items():
            before = timing.time_copy(z, 1)[0]
            seconds = timing.time_runs(fn, z, t, y, 1)[0]
            after = timing.time_copy(z, 1)[0]
            copy = (before + after) / 2
            frac = timing.bandwidth_fraction(logits_bytes, seconds, timing.copy_bandwidth(logits_bytes, copy))
            per[m]["times_s"].append(seconds)
            per[m]["copy_s"].append(copy)
            per[m]["fractions"].append(frac)
            log(f"  round {i + 1}: {m:16s} {seconds * 1e3:8.1f} ms, copy {copy * 1e3:6.1f} ms: {frac:.2f} of copy")
    out = {}
    for m, p in per.items():
        out[m] = {**p, "median_s": statistics.median(p["times_s"]), "median_copy_s": statistics.median(p["copy_s"]),
                  "median_fraction": statistics.median(p["fractions"]),
                  "ns_per_logit": statistics.median(p["times_s"]) / (n * v) * 1e9}
    return {"machine": run.machine(), "n": n, "v": v, "dtype": "float32", "kernel": kernel, "rounds": rounds,
            "compiled": compiled, "methods": out}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="4096x131072", help="NxV (default 4096x131072)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--json", help="write the rounds and medians here")
    args = p.parse_args(argv)
    (n, v), = run.parse_sizes(args.size)
    start = time.perf_counter()
    doc = measure(n, v, args.rounds, "token_kl.reverse", ("lossproof", "lossproof-tiles"))
    doc["seconds"] = time.perf_counter() - start
    for m, r in doc["methods"].items():
        print(f"{m:16s} median {r['median_s'] * 1e3:.1f} ms ({r['ns_per_logit']:.2f} ns/logit), copy "
              f"{r['median_copy_s'] * 1e3:.1f} ms: {r['median_fraction']:.2f} of copy bandwidth (median of "
              f"{args.rounds} rounds)")
    if args.json:
        run.write_json(args.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
