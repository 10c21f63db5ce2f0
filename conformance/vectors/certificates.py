"""Certificate files (``lossproof-certificate/1``): what they hold, their canonical bytes, and
the one-line summary that ``list``, ``show`` and ``cite`` print. Reading needs no python-flint;
``conformance.vectors.certify`` computes them.

One file per objective, ``<family>/<objective>.cert.json`` beside the vector file, listed in
MANIFEST.json and bound to the vector file it certifies by that file's sha256 as the manifest
lists it (and, for an objective whose ``Large`` tests are stored apart, to that part by
``largeVectors``/``largeVectorsSha256``: one certificate covers every uid of the objective). Per vector
(uid) that carries expected numbers, either

    {"bits": working precision that proved it,
     "outputs": {name: {"digits": D, "radius": R}}, "grads": {input: {"digits": D, "radius": R}}}

where D is the fewest significant digits printed in any element of that output (every one of
them proven; "exact" when every element prints an exact 0, proven by a zero-radius ball) and
R bounds the largest enclosure radius of its elements; or {"notCertified": reason}.

Why per output and not per element: the claim is the same for every element (each printed
string is the correctly rounded value, i.e. the enclosure lies inside the string's rounding
interval); the elements' own radii are recomputed by ``vectors certify --check`` in about a
minute, while storing them would add ~1 MB per million elements to a set kept under 40 MB.
"""
from __future__ import annotations

import json
from decimal import Decimal


SCHEMA = "lossproof-certificate/1"
SUFFIX = ".cert.json"


def path_for(vector_rel: str) -> str:
    """``kl/estimator.json`` -> ``kl/estimator.cert.json``."""
    return vector_rel[: -len(".json")] + SUFFIX


def is_certificate(rel: str) -> bool:
    return rel.endswith(SUFFIX)


def on_disk(directory) -> dict[str, bytes]:
    """Every certificate file under a vector directory, by relative path."""
    return {p.relative_to(directory).as_posix(): p.read_bytes()
            for p in sorted(directory.rglob("*" + SUFFIX))}


def _bound(vs, rel: str) -> dict:
    """The files a certificate of this vector file is bound to, with their manifest sha256."""
    out = {"vectors": rel, "vectorsSha256": vs.sha256(rel)}
    large = vs.large_part(rel)
    if large:
        out.update(largeVectors=large, largeVectorsSha256=vs.sha256(large))
    return out


def serialize(vs, objective: str, vector_rel: str, method: dict, entries: dict) -> bytes:
    """Canonical bytes: sorted keys, one vector per line (diff-friendly, byte-stable)."""
    head = {"schema": SCHEMA, "objective": objective, **_bound(vs, vector_rel), "method": method,
            "numberOfVectors": len(entries),
            "certified": sum(1 for e in entries.values() if "notCertified" not in e)}
    lines = ["{"]
    for key in sorted(head):
        lines.append(f" {json.dumps(key)}: {json.dumps(head[key], sort_keys=True, separators=(',', ':'))},")
    lines.append(' "vectors_certified": {')
    uids = sorted(entries)
    for i, uid in enumerate(uids):
        sep = "," if i < len(uids) - 1 else ""
        lines.append(f"  {json.dumps(uid)}: {json.dumps(entries[uid], sort_keys=True, separators=(',', ':'))}{sep}")
    lines.append(" }")
    lines.append("}")
    return ("\n".join(lines) + "\n").encode()


def load(vs, objective: str) -> dict | None:
    """The certificate document of one objective in a loaded VectorSet, or None when it has
    none or it certifies other bytes than the vector file loaded (stale)."""
    rel = next((r for r, d in vs.files.items() if d["objective"] == objective), None)
    if rel is None or path_for(rel) not in vs.certificates:
        return None
    doc = json.loads(vs.certificates[path_for(rel)])
    binding = {k: doc[k] for k in ("vectors", "vectorsSha256", "largeVectors", "largeVectorsSha256") if k in doc}
    return doc if binding == _bound(vs, rel) else None


def entry(vs, case) -> dict | None:
    doc = load(vs, case.objective)
    return None if doc is None else doc["vectors_certified"].get(case.uid)


def _narrowest(entry_: dict):
    parts = [v for section in ("outputs", "grads") for v in entry_.get(section, {}).values()]
    digits = [p["digits"] for p in parts if p["digits"] != "exact"]
    radius = max((p["radius"] for p in parts), key=Decimal, default="0")
    return (min(digits) if digits else "exact"), radius


def summary(vs, case) -> str:
    """'certified to N digits (arb, radius r)', 'not certified: reason' or 'no certificate'."""
    if case.result == "invalid" or "expected" not in case.test:
        return "nothing to certify (no expected numbers)"
    e = entry(vs, case)
    if e is None:
        return "no certificate (run 'lossproof vectors certify')"
    if "notCertified" in e:
        return f"not certified: {e['notCertified']}"
    digits, radius = _narrowest(e)
    if digits == "exact":
        return f"certified exact (arb, radius {radius})"
    return f"certified to {digits} digits (arb, radius {radius})"


def counts(vs) -> dict[str, tuple[int, int] | None]:
    """objective -> (certified, total) from its certificate file, None without one."""
    out = {}
    for doc in vs.files.values():
        cert = load(vs, doc["objective"])
        out[doc["objective"]] = None if cert is None else (cert["certified"], cert["numberOfVectors"])
    return out
