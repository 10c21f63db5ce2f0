"""The record of one judged case, and counts by status: what reports and the CLI read."""
from __future__ import annotations

from dataclasses import dataclass, field

STATUSES = ("pass", "fail", "error", "unsupported", "skip")


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


def summary(results: list[CaseResult]) -> dict:
    out = {s: 0 for s in STATUSES}
    for r in results:
        out[r.status] += 1
    return out
