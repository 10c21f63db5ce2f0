"""Certify the printed digits of the vectors with the ball-arithmetic reference (refimpl.certified).

For every vector that carries expected numbers, the certified reference evaluates the outputs
and the cotangent-weighted gradients at a working precision from ``PRECISIONS``; an element is
proven when its enclosure lies inside the rounding interval of its printed string
[s − u/2, s + u/2] (u: one unit in the last printed digit), so the string is the exact value
correctly rounded to its digits (an exact "0" needs a zero-radius ball). When an enclosure is
too wide, or a branch cannot be decided (``_ball.Straddle``), the next precision is tried. An
enclosure that lies wholly outside the rounding interval is a wrong printed digit (a finding);
a vector that no precision proves is "not certified" with the reason.

The comparison itself is done in ball arithmetic (the printed decimal read into a ball that
contains it), so a verdict is never the product of a rounding: undecided means "try a higher
precision".
"""
from __future__ import annotations

import importlib
import math
from decimal import Decimal
from fractions import Fraction

import flint
import mpmath

from lossproof.conformance import catalog, numbers
from lossproof.conformance._host import pool_context, usable_cores
from lossproof.conformance._io import write_tree
from lossproof.conformance.vectors import certificates
from lossproof.conformance.vectors.format import MANIFEST, manifest_bytes
from lossproof.refimpl import validate
from lossproof.refimpl.certified import _ball

# Working precisions in bits: 32 digits need ~107 bits; sums of 10^4 terms, cancellation and
# logits of ±1e4 (probabilities e^−10^4 next to 1: ~14,500 bits) need more.
PRECISIONS = (192, 384, 1024, 4096, 16384, 40000)
METHOD = {"library": f"python-flint {flint.__version__} (arb ball arithmetic)",
          "precisions": list(PRECISIONS), "reference": "refimpl.certified"}


class Wrong(Exception):
    """A printed string lies outside its enclosure: the vector's digit is wrong."""


def functions(objective_id: str):
    family, name = objective_id.split(".")
    return getattr(importlib.import_module(f"lossproof.refimpl.certified.{family}"), name)


def arguments(case) -> dict:
    """The certified reference's arguments for a vector, as generation called the exact one:
    paper defaults, then the group's conventions, then the test's parameters and inputs."""
    spec = catalog.get(case.objective)
    kwargs = {**spec.defaults, **case.conventions, **case.test["params"]}
    for name, value in case.test["inputs"].items():
        kwargs[name] = numbers.decode_input(value)
    return kwargs


def verdict(printed: str, enclosure) -> str:
    """'ok' when the enclosure is provably inside the printed string's rounding interval,
    'wrong' when it provably misses it, else 'wide' (a higher precision may decide). Decided in
    ball arithmetic: arb reads a decimal string into a ball that contains it."""
    if printed == "0":
        if enclosure.is_zero():
            return "ok"
        return "wide" if enclosure.contains(0) else "wrong"
    if printed in numbers.NONFINITE:
        return "wrong"
    exponent = Decimal(printed).as_tuple().exponent
    distance = enclosure - flint.arb(printed)
    half = flint.arb(f"5e{exponent - 1}")
    if distance.abs_upper() <= half.lower():
        return "ok"
    if distance.abs_lower() > half.upper():
        return "wrong"
    if enclosure.rad().is_zero():
        # an exact dyadic value half a unit from the printed string (a rounding tie, e.g. a
        # k2 of binary64 inputs): decided in exact rationals
        man, exp = (int(v) for v in enclosure.mid().man_exp())
        exact = Fraction(man) * Fraction(2) ** exp
        return "ok" if abs(exact - Fraction(Decimal(printed))) <= Fraction(Decimal(f"5e{exponent - 1}")) else "wrong"
    return "wide"


def significant_digits(printed: str) -> int:
    return len(Decimal(printed).as_tuple().digits)


def _radius_text(r) -> str:
    """An upper bound of the radius r (an exact ball) with two significant digits, e.g. '3.2e-61'."""
    if r.is_zero():
        return "0"
    e = math.floor(float((r.log() / flint.arb(10).log()).mid())) - 1
    m = int((r * flint.arb(10) ** -e).upper().ceil().unique_fmpz())   # about 10..100
    while m >= 100:
        m, e = -(-m // 10), e + 1
    while m < 10:
        m, e = m * 10, e - 1
    return f"{m // 10}.{m % 10}e{e + 1}" if m % 10 else f"{m // 10}e{e + 1}"


def _judge(expected: dict, computed: dict, uid: str, label: str):
    """{name: {"digits", "radius"}} when every element is proven; raises Wrong naming the first
    wrong element; returns None when some enclosure is still too wide."""
    out = {}
    wide = False
    for name, printed in expected.items():
        strings = list(_ball.flat(printed))
        balls = list(_ball.flat(computed[name]))
        if len(strings) != len(balls):
            raise Wrong(f"{uid}: {label} {name}: {len(strings)} printed elements, the reference computes {len(balls)}")
        digits, radius = [], flint.arb(0)
        for i, (s, b) in enumerate(zip(strings, balls)):
            v = verdict(s, b)
            if v == "wrong":
                raise Wrong(f"{uid}: {label} {name}[{i}] = {s} is outside its enclosure {b.str(40)}")
            if v == "wide":
                wide = True
                continue
            if s != "0":
                digits.append(significant_digits(s))
            radius = max(radius, b.rad())
        out[name] = {"digits": min(digits) if digits else "exact", "radius": _radius_text(radius)}
    return None if wide else out


def certify_case(case) -> dict:
    """The certificate entry of one vector (see conformance.vectors.certificates)."""
    try:
        both = functions(case.objective).both
    except (ImportError, AttributeError):
        return {"notCertified": f"refimpl.certified has no implementation of {case.objective}"}
    kwargs = arguments(case)
    test = case.test
    cotangent = test.get("cotangents") if test.get("grads") else None
    if cotangent is not None:
        spec = catalog.get(case.objective)
        cotangent = {k: numbers.decode_input(v) for k, v in cotangent.items()}
        if len(spec.outputs) == 1:
            cotangent = cotangent[spec.outputs[0]]
    reason = "enclosure wider than half a unit in the last printed digit"
    for bits in PRECISIONS:
        try:
            with _ball.precision(bits):
                outputs, grads = both(cotangent, **kwargs)
                judged = _judge(test["expected"], outputs, case.uid, "expected")
                judged_grads = _judge(test.get("grads", {}), grads, case.uid, "grad") if judged else None
        except _ball.Straddle as err:
            reason = f"kink: {err}"
            continue
        except validate.InputError as err:
            return {"notCertified": f"the certified reference rejects the inputs: {err}"}
        if judged is not None and judged_grads is not None:
            entry = {"bits": bits, "outputs": judged}
            if judged_grads:
                entry["grads"] = judged_grads
            return entry
    return {"notCertified": f"{reason} at {PRECISIONS[-1]} bits"}


def _stands_for(transform: str, decimal: str):
    return (lambda: flint.arb(decimal).log()) if transform == "log" else (lambda: flint.arb(decimal))


def at_printed(case, reals: dict) -> tuple[dict, int]:
    """({output: nested 32-digit strings}, bits): the outputs of a vector at the reals ``reals``
    (conformance.vectors.examples.printed_reals: {argument: (transform, nested decimal
    strings)}) in place of their binary64 roundings, each string proven to be the exact value
    correctly rounded (:func:`verdict`) — arb holds a decimal such as 0.8, and its logarithm, as
    a tight ball. Raises ValueError with the reason when no precision proves them (a printed
    example on a kink: the ratio 0.24/0.20 = 1.2 on the clip boundary 1 + ε of ε = 0.2, a branch
    balls around it cannot decide, although both branches have the value 1.2)."""
    kwargs = arguments(case)
    standing = {}
    for name, (transform, decimals) in reals.items():
        for x, decimal in zip(_ball.flat(numbers.decode_input(kwargs[name])), _ball.flat(decimals)):
            if standing.setdefault(float(x), (transform, decimal)) != (transform, decimal):
                raise ValueError(f"{case.uid}: {x!r} stands for both {standing[float(x)]} and {(transform, decimal)}")
    standing = {x: _stands_for(*real) for x, real in standing.items()}
    both = functions(case.objective).both
    reason = "enclosure wider than half a unit in the 32nd digit"
    for bits in PRECISIONS:
        try:
            with _ball.precision(bits), _ball.standing_for(standing):
                outputs, _ = both(None, **kwargs)
                printed = {name: _ball.nested(v, _digits) for name, v in outputs.items()}
                if all(verdict(s, b) == "ok" for name in outputs
                       for s, b in zip(_ball.flat(printed[name]), _ball.flat(outputs[name]))):
                    return printed, bits
        except _ball.Straddle:
            reason = "the printed reals sit on a kink of the objective, a branch that balls around them cannot decide"
            continue
    raise ValueError(f"{case.uid}: not proven at {PRECISIONS[-1]} bits: {reason}")


def _digits(b) -> str:
    """The midpoint of a ball to the vectors' 32 significant digits (``numbers.encode_exact``)."""
    if b.is_zero():
        return "0"
    with mpmath.workdps(numbers.DIGITS + 20):
        return numbers.encode_exact(mpmath.mpf(b.mid().str(numbers.DIGITS + 20, radius=False)))


def _job(case):
    try:
        return case.uid, certify_case(case), None
    except Wrong as err:
        return case.uid, None, str(err)


def certify(vs, objective_glob: str = "*", progress=None, workers: int | None = None):
    """({relative path: certificate bytes} for every vector file matched, [wrong-digit findings]).
    The certificate files are byte-identical whatever the number of workers."""
    cases = [c for c in vs.cases(objective_glob) if "expected" in c.test]
    workers = workers or min(usable_cores(), 8)
    if progress:
        progress(0, len(cases))
    results = []
    if workers > 1 and len(cases) > 50:
        with pool_context().Pool(workers) as pool:
            for done, r in enumerate(pool.imap_unordered(_job, cases, chunksize=2), 1):
                results.append(r)
                if progress:
                    progress(done, len(cases))
    else:
        for done, case in enumerate(cases, 1):
            results.append(_job(case))
            if progress:
                progress(done, len(cases))
    findings = sorted(err for _, _, err in results if err)
    by_uid = {uid: entry if entry is not None else {"notCertified": "wrong printed digit: " + err.split(": ", 1)[1]}
              for uid, entry, err in results}
    files = {}
    for rel, doc in vs.files.items():
        uids = [c.uid for c in cases if c.file == rel]
        if not uids:
            continue
        entries = {u: by_uid[u] for u in uids}
        files[certificates.path_for(rel)] = certificates.serialize(vs, doc["objective"], rel, METHOD, entries)
    return files, findings


def with_manifest(vs, files: dict[str, bytes]) -> dict[str, bytes]:
    """The certificate files plus the MANIFEST.json that lists them beside the vector files
    (and the certificates of objectives not recomputed this time)."""
    everything = {**vs.raw, **vs.certificates, **files}
    return {**files, MANIFEST: manifest_bytes(everything)}


def first_difference(vs, files: dict[str, bytes]) -> str | None:
    """Why the stored certificates differ from the recomputed ones (``certify --check``), or None."""
    for rel, data in sorted(files.items()):
        stored = vs.certificates.get(rel) if rel != MANIFEST else (vs.directory / MANIFEST).read_bytes()
        if stored != data:
            return f"{vs.directory / rel}: differs from the recomputed certificate (run 'lossproof vectors certify')"
    return None


def write(vs, files: dict[str, bytes]) -> None:
    write_tree(vs.directory, files, last=MANIFEST)
