"""Run the measurements behind docs/performance.md (CPU: about 40 minutes on 2 cores).

    python benchmarks/performance.py                # all three
    python benchmarks/performance.py --only exact.json

Each measurement is one ``lossproof bench`` run whose JSON lands under benchmarks/results/:
cpu_4096x131072.json (every kernel and method at the target size, N = 4096, V = 131072,
float32), cpu_vocab_sweep.json (reverse token KL and the JSD at N = 1024 for V = 32k…152k) and
exact.json (the exact side: full generation of every family and a check of the torch backend).
The runs are listed in ``conformance.docs.performance.RUNS``; ``lossproof docs build`` renders
the page and its figures from the JSON (deterministically: same JSON, same page).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from lossproof.conformance.docs.performance import RESULTS, RUNS, command

ROOT = Path(__file__).resolve().parent.parent


def run(names) -> int:
    (ROOT / RESULTS).mkdir(parents=True, exist_ok=True)
    for name in names:
        print("$", command(name), flush=True)
        rc = subprocess.call([sys.executable, "-m", "lossproof", "bench", *RUNS[name], "--json",
                              str(ROOT / RESULTS / name)], cwd=ROOT)
        if rc:
            return rc
    print("then: lossproof docs build   (renders docs/performance.md and its figures from the JSON)")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", action="append", choices=list(RUNS), help="only this measurement (repeatable)")
    args = p.parse_args(argv)
    return run(args.only or list(RUNS))


if __name__ == "__main__":
    sys.exit(main())
