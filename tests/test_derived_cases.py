"""Cases derived at run time for a declared convention combination that no committed group holds
(conformance/derive.py): they reproduce the golden set where it exists, they pass a correct
implementation of the combination, they fail a wrong one, and the run says that they are
derived."""
import json

import pytest

from lossproof.conformance import cli, derive
from lossproof.conformance.targets.target import Target
from lossproof.conformance.vectors.load import VectorSet

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
    # the combination as derived names every convention, the late mean_eps_scope at its default too
    assert derive.uncovered(target, vs, AGG) == [{**COMBINATION, "mean_eps_scope": "per-row"}]


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
    assert "committed + " in out and " derived cases)" in out


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


VALUE = "ppo.value_loss"
# The unclipped squared error under a per-sequence mean, written the way TRL and Liger reduce it: a
# row without tokens is a zero-loss sequence that the mean over rows counts (divide by B), where the
# exact reference leaves it out; the catalog accepts either (FullyMaskedRowSeqMean).
VALUE_LOSS = '''
import torch


def value_loss(values, old_values, returns, mask, clip_range_value=None, half=False, aggregation="token-mean"):
    v = values.float() if values.dtype in (torch.bfloat16, torch.float16) else values
    m = mask.to(v.dtype)
    per_row = ((v - returns.to(v.dtype)) ** 2 * m).sum(-1) / m.sum(-1).clamp(min=1)
    return per_row.mean().to(values.dtype)


DECLARED = {"name": "seqmean", "framework": "torch", "objectives": {"ppo.value_loss": value_loss},
            "dtypes": ["float64", "float32", "bfloat16", "float16"],
            "conventions": {"ppo.value_loss": {"aggregation": "seq-mean-token-mean", "clip_range_value": None,
                                               "half": False}}}
'''
SEQ_MEAN = {"clip_range_value": None, "half": False, "aggregation": "seq-mean-token-mean"}


@pytest.fixture
def value_file(tmp_path):
    path = tmp_path / "value.py"
    path.write_text(VALUE_LOSS)
    return path


def test_rows_without_tokens_follow_the_committed_rule():
    """A base that empties rows, derived under a sequence mean, is acceptable with the flag the
    committed sequence-mean groups carry; derived under a token mean it stays valid."""
    vs = VectorSet(objectives=[VALUE], validate=False)
    committed = {(c.conventions["aggregation"], f, c.result) for c in vs.cases(VALUE) for f in c.flags
                 if "FullyMaskedRow" in f}
    assert committed == {("token-mean", "FullyMaskedRow", "valid"),
                         *{(a, "FullyMaskedRowSeqMean", "acceptable") for a in
                           ("seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")}}
    assert SEQ_MEAN not in [c.conventions for c in vs.cases(VALUE)]
    cases, _ = derive.derive(vs, VALUE, SEQ_MEAN)
    empty = [c for c in cases if any("FullyMaskedRow" in f for f in c.flags)]
    assert empty and all(list(c.flags) == ["Derived", "FullyMaskedRowSeqMean"] and c.result == "acceptable"
                         for c in empty)
    assert all(c.result == "valid" for c in cases if c not in empty)
    token_mean, _ = derive.derive(vs, VALUE, {**SEQ_MEAN, "aggregation": "token-mean"})
    rows = [c for c in token_mean if any("FullyMaskedRow" in f for f in c.flags)]
    assert rows and all("FullyMaskedRow" in c.flags and c.result == "valid" for c in rows)


def test_a_library_that_counts_empty_rows_passes_the_derived_cases(value_file, tmp_path, capsys):
    report = tmp_path / "report.json"
    code, out, err = _check(capsys, "--target", f"{value_file}:DECLARED", "--objective", VALUE,
                            "--report-json", str(report))
    derived = [c for c in json.loads(report.read_text())["cases"] if c["group"] == derive.GROUP]
    assert code == 0, out + err
    assert derived and all(c["status"] == "pass" for c in derived)
    assert any("FullyMaskedRowSeqMean" in c["flags"] for c in derived)


def test_the_table_counts_each_derived_case_once(agg_file, tmp_path, capsys):
    """The pass/fail columns count case-runs (one per dtype); the committed/derived note counts
    cases, each once whatever the number of dtypes it ran in."""
    report = tmp_path / "report.json"
    code, out, err = _check(capsys, "--target", f"{agg_file}:DECLARED", "--objective", AGG,
                            "--report-json", str(report))
    runs = [c for c in json.loads(report.read_text())["cases"] if c["group"] == derive.GROUP]
    uids = {c["uid"] for c in runs}
    assert code == 0 and len(runs) > len(uids) == derive.PER_COMBINATION
    assert f"+ {len(uids)} derived cases)" in out


def test_show_opens_a_derived_uid(agg_file, tmp_path, capsys):
    report = tmp_path / "report.json"
    _check(capsys, "--target", f"{agg_file}:DECLARED", "--objective", AGG, "--report-json", str(report))
    run = next(c for c in json.loads(report.read_text())["cases"] if c["group"] == derive.GROUP)
    uid = run["repro"].split("--uid ")[1].split()[0]
    assert uid == run["uid"]
    assert cli.main(["show", uid, "--target", f"{agg_file}:DECLARED"]) == 0
    out = capsys.readouterr().out
    assert f"{uid}  ({AGG}, derived at run time: not in the golden set)" in out
    assert "Derived" in out and "certified when derived" in out
    assert cli.main(["show", uid]) == 2
    assert "opens with --target SPEC" in capsys.readouterr().err


def test_two_bases_that_differ_only_in_the_declared_conventions_give_one_case():
    """gae.advantages under TRL's whitening (keep-mean, ddof 1, ε = 1e-8): two committed bases with
    the same inputs that differ only in the conventions the declaration overrides become the same
    case, which is derived (and run, and counted) once."""
    vs = VectorSet()
    cases, _ = derive.derive(vs, "gae.advantages", {"whiten": "keep-mean", "std_ddof": 1, "whiten_eps": 1e-8})
    uids = [c.test["uid"] for c in cases]
    assert cases and len(uids) == len(set(uids)), uids
