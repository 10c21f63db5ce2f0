"""The record of one judged case, and counts by status: what reports and the CLI read.

Two verdicts are kept apart (DESIGN §9):
- **conformance** — valid and acceptable vectors: values, gradients, dtypes;
- **validation** — invalid vectors: did the target reject the bad input?
"""
from __future__ import annotations

from dataclasses import dataclass, field

CONFORMANCE = ("pass", "fail", "error", "xfail", "xpass", "unsupported", "skip")
VALIDATION = ("rejected", "non-finite", "accepted", "error", "unsupported", "skip")
# a conformance verdict: a selection in which no case reaches one checked nothing (validation
# alone says nothing about the values a target computes)
CHECKED = ("pass", "fail", "error", "xfail", "xpass")
# The message of a case whose function was not called because its signature does not fit the
# catalog's arguments: the report states each such mismatch once, not once per case.
NOT_CALLED = "not called: "
# The message of a case whose call needed a module that is not installed: one line per module.
MISSING_MODULE = "missing module: "


def not_implemented(err: BaseException) -> str:
    """The message of a case the target declined with ``NotImplementedError`` (``unsupported``
    wherever a target runs); a bare ``raise NotImplementedError`` has no text of its own."""
    text = str(err).strip()[:200]
    return (f"raised NotImplementedError: {text}" if text
            else "raised NotImplementedError (the function does not implement this case)")


@dataclass
class CaseResult:
    uid: str
    objective: str
    target: str
    dtype: str
    device: str
    status: str
    flags: list
    outputs: dict = field(default_factory=dict)   # name (grads as "grad:NAME") -> metrics dict
    message: str = ""
    repro: str = ""
    result: str = "valid"
    worst: dict | None = None                    # got / want / tol of the worst element
    seconds: float = 0.0
    group: str = ""
    conventions: dict = field(default_factory=dict)  # the conventions the target was called with
    known: str = ""                              # the declared reason of an expected failure
    raised: dict | None = None                   # validation: {"type", "message"} of the rejection
    partition: str = ""                          # distributed checks: "2x2:uneven", "vocab2:neg-inf"
    # What the diagnoses read (conformance.diagnose), not reported: every array compared, as
    # float64 numpy, by label (name or "grad:NAME"); and what the harness's probes found
    # ({"leak": [output names]}, {"narrowed": dtype returned}).
    got: dict = field(default_factory=dict, repr=False)
    probes: dict = field(default_factory=dict, repr=False)

    @property
    def axis(self) -> str:
        return "validation" if self.result == "invalid" else "conformance"


def summary(results: list[CaseResult]) -> dict:
    """{"conformance": {status: n}, "validation": {status: n}}"""
    out = {"conformance": {s: 0 for s in CONFORMANCE}, "validation": {s: 0 for s in VALIDATION}}
    for r in results:
        out[r.axis][r.status] += 1
    return out


def failed(results: list[CaseResult], strict: bool = False) -> list[CaseResult]:
    """The results that make a run exit 1: conformance failures and errors (not the declared
    known ones); with ``strict``, also stale known failures and every invalid input not rejected."""
    bad = [r for r in results if r.axis == "conformance" and r.status in ("fail", "error")]
    if strict:
        bad += [r for r in results if r.status == "xpass"
                or (r.axis == "validation" and r.status in ("non-finite", "accepted", "error"))]
    return bad
