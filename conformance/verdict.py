"""The one pass/fail decision, shared by every way of running a target (DESIGN §6–§9).

The in-process harness, the distributed checks and the out-of-process ``validate`` each gather
a target's outputs their own way; the verdict on them is made here, once:

- :class:`Judgement` collects the failures of one case. :meth:`Judgement.output` compares one
  output (or gradient, label ``grad:NAME``) with the exact values: shape, the elements that are
  compared, a NaN or an infinity where the exact value is finite, the tolerance, the worst
  element. :meth:`Judgement.decide` turns the failures into the case's status and message.
- Two kinds of failure: ordinary ones (out of tolerance, a second call that differs), which an
  ``acceptable`` vector excuses (it passes, "acceptable difference: ..."), and *hard* ones (a
  non-finite value, a narrowing dtype, a gradient leak, a missing output), which no
  implementation-defined latitude covers: they fail on every vector.
- :func:`judge_invalid`: the validation verdict on an invalid input, from whether the target
  raised (or reported an error) and whether what it returned is finite.

A leaf module: it imports numpy and the lowest conformance modules only.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lossproof.conformance import compare
from lossproof.conformance.results import CaseResult

ACCEPTABLE_PREFIX = "acceptable difference: "


def expected(values) -> np.ndarray:
    """The exact values (nested 32-digit strings) as float64."""
    return np.asarray(_floats(values), dtype=np.float64)


def _floats(x):
    if isinstance(x, list):
        return [_floats(v) for v in x]
    return float(x)


class Judgement:
    """The failures of one conformance case (a valid or acceptable vector), judged into
    ``res``. ``observe(res, label, got)``, when given, sees every array compared (float64
    numpy), e.g. to record the outputs of a run."""

    def __init__(self, res: CaseResult, tolerance: compare.CaseTolerance | None,
                 observe: Callable[[CaseResult, str, np.ndarray], None] | None = None):
        self.res, self.tolerance, self.observe = res, tolerance, observe
        self.failures: list[str] = []   # excused on an acceptable vector
        self.hard: list[str] = []       # excused on no vector

    def fail(self, message: str) -> None:
        self.failures.append(message)

    def fail_hard(self, message: str) -> None:
        self.hard.append(message)

    def missing(self, label: str) -> None:
        """An output (or gradient) that was asked for and not given: nothing to compare, and
        no 'acceptable' latitude covers it."""
        self.hard.append(f"{label}: missing")

    def output(self, label: str, got: np.ndarray, want_strings, selected: np.ndarray | None = None) -> bool:
        """Judge one output (or gradient) against the exact values; records its metrics in
        ``res`` and a failure when it is out of tolerance. ``selected``: the elements that are
        compared (the others are unspecified, e.g. masked tokens; gradients are compared
        everywhere). Whether it passed."""
        if self.observe is not None:
            self.observe(self.res, label, got)
        self.res.got[label] = got
        w = expected(want_strings)
        if got.shape != w.shape:
            self.failures.append(f"{label}: shape {got.shape}, expected {w.shape}")
            return False
        if selected is not None and not label.startswith("grad:"):
            got = np.where(selected, got, w)
        ok = True
        if np.isnan(got).any() or (np.isinf(got) & ~np.isinf(w)).any():
            self.hard.append(f"{label}: non-finite value where the exact value is finite")
            ok = False
        m = self.tolerance.measure(label, got, w)
        self.res.outputs[label] = m.as_dict()
        if not m.passed and self.res.worst is None:
            self.res.worst = {"output": label, "index": list(m.worst_index), "got": m.got, "want": m.want,
                              "tol": m.tol, "ulps": m.max_ulp}
        if not m.passed:
            self.failures.append(f"{label}: error {abs(m.got - m.want):.3g} > tolerance {m.tol:.3g} at "
                                 f"{list(m.worst_index)} (got {m.got!r}, want {m.want!r}; "
                                 f"{m.max_err_over_tol:.3g}× the bound)")
        return ok and m.passed

    def decide(self, result_kind: str, where: str = "") -> CaseResult:
        return decide(self.res, result_kind, self.failures, self.hard, where)


def decide(res: CaseResult, result_kind: str, failures: list, hard: list = (), where: str = "") -> CaseResult:
    """The status and message of a conformance case from its failures. ``result_kind``: the
    vector's result, 'valid' or 'acceptable'. An ordinary failure fails a valid vector and is
    an 'acceptable difference' (a pass) on an acceptable one; a hard failure fails either.
    ``where`` (e.g. the partition of a distributed check) ends the message. A case without
    failures keeps its status and message."""
    suffix = f" {where}" if where else ""
    if hard:
        res.status, res.message = "fail", "; ".join([*hard, *failures]) + suffix
    elif failures:
        res.status = "pass" if result_kind == "acceptable" else "fail"
        res.message = (ACCEPTABLE_PREFIX if res.status == "pass" else "") + "; ".join(failures) + suffix
    return res


def judge_invalid(res: CaseResult, raised: dict | None, finite: bool, test: dict) -> CaseResult:
    """The validation verdict on an invalid input. ``raised``: {"type", "message"} of the
    rejection (an exception, or an error the implementation reported), None when it returned
    values; ``finite``: whether those values are all finite. Rejected, accepted (finite
    numbers) or non-finite (NaN or inf)."""
    if raised is not None:
        res.status = "rejected"
        res.raised = {"type": str(raised["type"]), "message": str(raised["message"])[:300]}
        res.message = f"rejected with {res.raised['type']}: {res.raised['message'][:200]}"
        return res
    res.status = "accepted" if finite else "non-finite"
    res.message = (f"{'returned finite numbers for' if finite else 'returned NaN or inf for'} an invalid "
                   f"input ({test['comment']}); a careful implementation raises: {test['error']}")
    return res
