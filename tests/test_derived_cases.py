"""Cases derived at run time for a declared convention combination that no committed group holds
(conformance/derive.py): they reproduce the golden set where it exists, they pass a correct
implementation of the combination, they fail a wrong one, and the run says that they are
derived."""
import json

import pytest

from conformance import cli, derive
from conformance.targets.target import Target
from conformance.vectors.load import VectorSet

torch = pytest.importorskip("torch", reason="the targets under test are torch functions")

HINTON = "distill.hinton"
AGG = "grpo.aggregate"
# A masked mean over sequences of per-sequence sums, the way a trainer writes it; its declaration
# adds the ε the library puts in its per-row means (the token sums do not divide by it).
AGGREGATE = '''
import torch


def aggregate(values, mask, mode="seq-mean-token-mean", norm_length=None, mean_eps=0.0):
    v = values.float() if values.dtype in (torch.bfloat16, torch.float16) else values
    m = mask.to(v.dtype)
    rows = (m.sum(-1) > 0).to(v.dtype)
    return (SCALE_BUG * (v * m).sum(-1).sum() / rows.sum()).to(values.dtype)


SCALE_BUG = 1.0
DECLARED = {"name": "agg", "framework": "torch", "objectives": {"grpo.aggregate": aggregate},
            "dtypes": ["float64", "float32", "bfloat16", "float16"],
            "conventions": {"grpo.aggregate": {"mode": "seq-mean-token-sum", "mean_eps": 1e-8}}}
'''
COMBINATION = {"mode": "seq-mean-token-sum", "mean_eps": 1e-8}


@pytest.fixture
def agg_file(tmp_path):
    path = tmp_path / "agg.py"
    path.write_text(AGGREGATE)
    return path


def _check(capsys, *argv):
    code = cli.main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_combination_is_uncovered_in_the_golden_set():
    vs = VectorSet(objectives=[AGG], validate=False)
    groups = {(c.conventions["mode"], c.conventions["mean_eps"]) for c in vs.cases(AGG)}
    assert tuple(COMBINATION.values()) not in groups      # else this file tests nothing derived
    target = Target("agg", "torch", {AGG: None}, {AGG: COMBINATION})
    assert derive.uncovered(target, vs, AGG) == [COMBINATION]


def test_derivation_reproduces_a_committed_group_exactly():
    """Derived under the conventions of a group the golden set holds, the cases are that group's
    own tests rebuilt: same uid, expected values, cotangents, gradients, dtypes and scales."""
    vs = VectorSet(objectives=[HINTON], validate=False)
    committed = {c.uid: c for c in vs.cases(HINTON)}
    group = next(c.conventions for c in vs.cases(HINTON) if c.conventions["t2_scale"] is False)
    cases, dropped = derive.derive(vs, HINTON, dict(group))
    assert len(cases) == derive.PER_COMBINATION and not dropped
    for case in cases:
        golden = committed[case.uid].test
        for key in ("inputs", "params", "expected", "cotangents", "grads", "dtypes", "scale"):
            assert case.test.get(key) == golden.get(key), (case.uid, key)
        assert derive.FLAG in case.flags and case.test["provenance"]["certified"] is True


def test_a_correct_implementation_passes_the_derived_cases(agg_file, tmp_path, capsys):
    report = tmp_path / "report.json"
    code, out, err = _check(capsys, "--target", f"{agg_file}:DECLARED", "--objective", AGG,
                            "--report-json", str(report))
    assert code == 0, out + err
    assert (f'{AGG} declares mode="seq-mean-token-sum", mean_eps=1e-08, which no committed vector group '
            "holds: 12 exact case(s) derived at run time and checked") in err
    derived = [c for c in json.loads(report.read_text())["cases"] if c["group"] == derive.GROUP]
    assert derived and all(c["status"] == "pass" and derive.FLAG in c["flags"] for c in derived)
    assert {c["dtype"] for c in derived} == {"float64", "float32", "bfloat16", "float16"}
    assert "committed + " in out and " derived)" in out


def test_a_wrong_implementation_fails_them(agg_file, capsys):
    agg_file.write_text(AGGREGATE.replace("SCALE_BUG = 1.0", "SCALE_BUG = 2.0"))
    code, out, err = _check(capsys, "--target", f"{agg_file}:DECLARED", "--objective", AGG, "--quiet", "--cases")
    assert code == 1 and f"[{derive.GROUP}]" in out
    assert "[factor]" in out          # the diagnosis sees the derived cases too


def test_with_a_uid_selection_the_combination_is_named_not_derived(agg_file, capsys):
    vs = VectorSet(objectives=[AGG], validate=False)
    uid = next(c.uid for c in vs.cases(AGG) if c.conventions["mode"] == "seq-mean-token-sum" and c.result == "valid")
    code, out, err = _check(capsys, "--target", f"{agg_file}:DECLARED", "--uid", uid, "--quiet")
    assert "not checked (cases are derived for it only when no --uid is given)" in err
