"""Timings of the exact side: building each family's vectors with the exact reference, and a
``lossproof check`` of the torch backend over growing fractions of the vector set (seconds per
vector: how the check grows with the number of vectors).

With ``quick``, generation times a sample of cases per family and extrapolates the total to
the worker count; otherwise it generates every family in full.
"""
from __future__ import annotations

import time

from lossproof.conformance import generate, harness
from lossproof.conformance._host import usable_cores
from lossproof.conformance.generate.build import build_test
from lossproof.conformance.results import summary
from lossproof.conformance.targets import builtin
from lossproof.conformance.vectors.load import VectorSet


def _time_family_sample(family, cases, scales, sample: int, workers: int, log) -> dict:
    step = max(1, len(cases) // sample)
    picked = cases[::step][:sample]
    rejected = 0
    start = time.perf_counter()
    for case in picked:
        try:
            build_test(case, scales.get(case.objective))
        except Exception:  # a case the generator rejects still cost its time; counted below
            rejected += 1
    per = (time.perf_counter() - start) / max(1, len(picked))
    est = per * len(cases) / workers
    log(f"  generate {family:12s} {len(cases):5d} vectors: {per:.3f} s each (sample of {len(picked)}), "
        f"~{est:.0f} s on {workers} workers")
    entry = {"vectors": len(cases), "sampled": len(picked), "seconds_per_vector": per, "estimated_seconds": est}
    if rejected:
        entry["rejected"] = rejected
    return entry


def _time_family(family, cases, workers: int, log) -> dict:
    start = time.perf_counter()
    err = None
    try:
        generate.generate([family], workers=workers)
    except Exception as e:  # reported in the JSON; the other families still run
        err = f"{type(e).__name__}: {e}"
    sec = time.perf_counter() - start
    log(f"  generate {family:12s} {len(cases):5d} vectors: {sec:.1f} s" + (f" ({err})" if err else ""))
    entry = {"vectors": len(cases), "seconds": sec, "seconds_per_vector": sec * workers / max(1, len(cases))}
    if err:
        entry["error"] = err
    return entry


def time_generation(quick: bool, log, sample: int = 12, workers: int | None = None) -> dict:
    """Per family: the time to build its vectors (estimated from a sample with ``quick``)."""
    workers = workers or min(usable_cores(), 8)
    families = {}
    for family in generate.available_families():
        module = generate.family_module(family)
        cases = module.cases()
        if quick:
            families[family] = _time_family_sample(family, cases, getattr(module, "SCALES", {}), sample, workers, log)
        else:
            families[family] = _time_family(family, cases, workers, log)
    total = sum(f["estimated_seconds" if quick else "seconds"] for f in families.values())
    return {"families": families, "generate_seconds": total, "generate_estimated": quick, "workers": workers,
            "vectors_total": sum(f["vectors"] for f in families.values())}


def time_check(quick: bool, log) -> dict:
    """The torch backend over 1/4, 1/2 and all of the bundled vectors (quick: 1/8 and 1/4)."""
    try:
        vs = VectorSet()
        target = builtin.load("torch")
        cases = list(vs.cases("*"))
        fractions = (0.125, 0.25) if quick else (0.25, 0.5, 1.0)
        points = []
        for frac in fractions:
            uids = {c.uid for c in cases[::max(1, round(1 / frac))]}
            start = time.perf_counter()
            results = harness.run(target, vs, uids=uids, device="cpu")
            sec = time.perf_counter() - start
            points.append({"vectors": len(uids), "seconds": sec, "summary": summary(results)})
            log(f"  check torch {len(uids):5d} vectors: {sec:.1f} s")
    except Exception as err:  # no torch, or no vectors here: reported in the JSON, not fatal
        return {"error": f"{type(err).__name__}: {err}"}
    per = [p["seconds"] / p["vectors"] for p in points if p["vectors"]]
    return {"backend": "torch", "points": points, "vectors_total": len(cases),
            "seconds_per_vector": per[-1] if per else None,
            "estimated_full_seconds": (per[-1] * len(cases)) if per else None}


def bench_exact(quick: bool, log, sample: int = 12, workers: int | None = None) -> dict:
    out = time_generation(quick, log, sample, workers)
    out["check"] = time_check(quick, log)
    return out
