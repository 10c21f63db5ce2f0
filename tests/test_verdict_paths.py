"""One verdict (issue 24): the same responses judged in process (``lossproof check``), out of
process (``lossproof validate``) and by the distributed checks get the same status.

The harness path runs a tiny NumPy target whose function and VJP return given arrays; the
exchange path reads the same arrays from a responses file; the distributed path is the
vocabulary-sharded judge fed by a stand-in rank pool that hands back the same arrays as a
one-rank run (spawning rank processes adds nothing to the verdict). Distributed checks run no
invalid vectors: the validation verdicts are compared on the other two paths.
"""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from lossproof.conformance import catalog, exchange, harness, plan, verdict
from lossproof.conformance.distributed import check
from lossproof.conformance.distributed.pool import RankFailure
from lossproof.conformance.numbers import encode_input
from lossproof.conformance.results import CaseResult
from lossproof.conformance.targets.target import ANY, Target

OBJECTIVE = "distill.token_kl"


@pytest.fixture(scope="module")
def cases(bundled_vectors):
    all_cases = list(bundled_vectors.cases(OBJECTIVE))
    valid = next(c for c in all_cases if c.result == "valid" and "float64" in c.test["dtypes"]
                 and np.ndim(c.test["inputs"]["student_logits"]) == 2
                 and all(float(v) != 0 for v in c.test["expected"]["kl"]))
    acceptable = replace(valid, test={**valid.test, "result": "acceptable"})
    invalid = next(c for c in all_cases if c.result == "invalid" and "InvalidInput" in c.flags)
    return {"valid": valid, "acceptable": acceptable, "invalid": invalid}


def _exact(case):
    out = {"kl": verdict.expected(case.test["expected"]["kl"])}
    grad = {"student_logits": verdict.expected(case.test["grads"]["student_logits"])}
    return out, grad


# A response: ("values", outputs, grads) | ("raise", message) | ("missing",)
def _respond(case, how):
    if how == "raise":
        return ("raise", "temperature: must be > 0")
    if case.result == "invalid":
        shape = np.shape(case.test["inputs"]["student_logits"])[:-1]
        value = np.full(shape, np.nan if how == "nan" else 0.5)
        return ("values", {"kl": value}, {})
    out, grad = _exact(case)
    if how == "missing":
        return ("missing",)
    if how == "off":
        out = {"kl": out["kl"] * 1.5 + 1.0}
    elif how == "nan":
        out = {"kl": np.full_like(out["kl"], np.nan)}
    return ("values", out, grad)


def _harness_status(case, response) -> CaseResult:
    def fn(**kwargs):
        if response[0] == "raise":
            raise ValueError(response[1])
        if response[0] == "missing":
            return {}
        return dict(response[1])

    def vjp(cotangent, **kwargs):
        return dict(response[2])

    target = Target("t", "numpy", {OBJECTIVE: fn}, ANY, vjps={OBJECTIVE: vjp}, dtypes=("float64",))
    [res] = harness.run_case(target, case, dtypes=["float64"])
    return res


def _exchange_status(case, response, tmp_path) -> CaseResult:
    if response[0] == "raise":
        body = {"error": response[1]}
    elif response[0] == "missing":
        body = {"outputs": {}}
    else:
        body = {"outputs": {k: encode_input(v.tolist()) for k, v in response[1].items()},
                "grads": {k: encode_input(v.tolist()) for k, v in response[2].items()}}
    path = tmp_path / "responses.json"
    path.write_text(json.dumps({"schema": exchange.RESPONSES_SCHEMA, "target": "t", "dtype": "float64",
                                "responses": {case.uid: body}}))

    class OneCase:
        def cases(self, objective="*"):
            return [case]

    [res] = exchange.validate(OneCase(), path)
    return res


class _Pool:
    """A one-rank pool that hands back the response, or fails the rank as the real pool does
    when the target's function raises (a dict without the primary output)."""

    def __init__(self, response):
        self.response = response

    def run(self, task):
        if self.response[0] != "values":
            try:
                harness.outputs_by_name(catalog.get(OBJECTIVE), {})
            except TypeError as err:
                raise RankFailure({0: f"{type(err).__name__}: {err}"}) from None
        return [{"status": "ok", "values": self.response[1]["kl"], "grad": self.response[2]["student_logits"],
                 "detached": False}]


def _distributed_status(case, response) -> CaseResult:
    target = Target("t", "torch", {}, ANY, sharded={OBJECTIVE: None}, dtypes=("float64",))
    run = check._Run(target, 30.0, (), "--shard-vocab", 1.0, "cpu")
    [p] = plan.plan(target, case, plan.Asked(("float64",), split=("--shard-vocab", 1, "even")))
    check._judge_shard(run, _Pool(response), p)
    [res] = run.results
    return res


CONFORMANCE = [
    ("valid", "exact", "pass"),
    ("valid", "off", "fail"),
    ("acceptable", "off", "pass"),
    ("acceptable", "exact", "pass"),
    ("valid", "nan", "fail"),
    ("acceptable", "nan", "fail"),        # the divergence fixed: validate passed it
    ("valid", "missing", "error"),
    ("acceptable", "missing", "error"),
]


@pytest.mark.parametrize("kind,how,status", CONFORMANCE)
def test_conformance_verdicts_agree(cases, tmp_path, kind, how, status):
    case = cases[kind]
    response = _respond(case, how)
    got = {"harness": _harness_status(case, response), "exchange": _exchange_status(case, response, tmp_path),
           "distributed": _distributed_status(case, response)}
    assert {k: r.status for k, r in got.items()} == dict.fromkeys(got, status), {k: r.message for k, r in got.items()}
    if how == "off":
        for r in got.values():
            assert r.message.startswith(verdict.ACCEPTABLE_PREFIX) == (kind == "acceptable")
            assert r.worst is not None and r.worst["output"] == "kl"
    if how == "nan":
        for r in got.values():
            assert r.message.startswith("kl: non-finite value where the exact value is finite")


@pytest.mark.parametrize("how,status", [("raise", "rejected"), ("finite", "accepted"), ("nan", "non-finite")])
def test_validation_verdicts_agree(cases, tmp_path, how, status):
    case = cases["invalid"]
    response = _respond(case, how)
    a, b = _harness_status(case, response), _exchange_status(case, response, tmp_path)
    assert (a.status, b.status) == (status, status), (a.message, b.message)
    if how != "raise":
        assert a.message == b.message          # one wording
    else:
        assert a.raised["message"] == b.raised["message"] == response[1]


def test_decide_keeps_the_wording():
    def res(kind):
        return CaseResult("u", OBJECTIVE, "t", "float64", "cpu", "pass", [], result=kind)
    assert verdict.decide(res("acceptable"), "acceptable", ["a", "b"]).message == "acceptable difference: a; b"
    r = verdict.decide(res("valid"), "valid", ["a"], [], "[2x1]")
    assert (r.status, r.message) == ("fail", "a [2x1]")
    r = verdict.decide(res("acceptable"), "acceptable", ["a"], ["h"])
    assert (r.status, r.message) == ("fail", "h; a")
    r = res("valid")
    assert (verdict.decide(r, "valid", []).status, r.message) == ("pass", "")


def test_observe_sees_every_compared_array(cases):
    """The hook benchmarks/gpu_parity.py records the compared outputs with (no monkeypatching)."""
    case = cases["valid"]
    response = _respond(case, "exact")
    seen = []

    def fn(**kwargs):
        return dict(response[1])

    target = Target("t", "numpy", {OBJECTIVE: fn}, ANY, vjps={OBJECTIVE: lambda ct, **kw: dict(response[2])},
                    dtypes=("float64",))
    [res] = harness.run_case(target, case, dtypes=["float64"], observe=lambda r, label, got: seen.append(label))
    assert res.status == "pass" and seen == ["kl", "grad:student_logits"]
