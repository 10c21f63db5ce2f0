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
# Forward KD the way a recipe writes it with Hinton's cross-entropy soft term: no T² unless asked.
KD = '''
import torch
import torch.nn.functional as F


def kd(student_logits, teacher_logits, labels, temperature=1.0, alpha=0.5, t2_scale=True,
       soft_term="kl"):
    z = student_logits.float() if student_logits.dtype in (torch.bfloat16, torch.float16) else student_logits
    t = teacher_logits.to(z.dtype)
    hard = F.cross_entropy(z, labels)
    p = F.softmax(t / temperature, dim=-1)
    logq = F.log_softmax(z / temperature, dim=-1)
    soft = -(p * logq.masked_fill(p == 0, 0.0)).sum(-1).mean()
    scale = temperature ** 2 if t2_scale else 1.0
    return ((1 - alpha) * hard + alpha * SCALE_BUG * scale * soft).to(student_logits.dtype)


SCALE_BUG = 1.0
DECLARED = {"name": "kd", "framework": "torch", "objectives": {"distill.hinton": kd},
            "dtypes": ["float64", "float32", "bfloat16", "float16"],
            "conventions": {"distill.hinton": {"t2_scale": False, "soft_term": "cross_entropy"}}}
'''


@pytest.fixture
def kd_file(tmp_path):
    path = tmp_path / "kd.py"
    path.write_text(KD)
    return path


def _check(capsys, *argv):
    code = cli.main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_combination_is_uncovered_in_the_golden_set():
    vs = VectorSet(objectives=[HINTON], validate=False)
    groups = {(c.conventions["t2_scale"], c.conventions["soft_term"]) for c in vs.cases(HINTON)}
    assert (False, "cross_entropy") not in groups      # else this file tests nothing derived
    target = Target("kd", "torch", {HINTON: None}, {HINTON: {"t2_scale": False, "soft_term": "cross_entropy"}})
    assert derive.uncovered(target, vs, HINTON) == [{"t2_scale": False, "soft_term": "cross_entropy"}]


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


def test_a_correct_implementation_passes_the_derived_cases(kd_file, tmp_path, capsys):
    report = tmp_path / "report.json"
    code, out, err = _check(capsys, "--target", f"{kd_file}:DECLARED", "--objective", HINTON,
                            "--report-json", str(report))
    assert code == 0, out + err
    assert (f"{HINTON} declares t2_scale=false, soft_term=\"cross_entropy\", which no committed vector group "
            "holds: 12 exact case(s) derived at run time and checked") in err
    derived = [c for c in json.loads(report.read_text())["cases"] if c["group"] == derive.GROUP]
    assert derived and all(c["status"] == "pass" and derive.FLAG in c["flags"] for c in derived)
    assert {c["dtype"] for c in derived} == {"float64", "float32", "bfloat16", "float16"}


def test_a_wrong_implementation_fails_them(kd_file, capsys):
    kd_file.write_text(KD.replace("SCALE_BUG = 1.0", "SCALE_BUG = 2.0"))
    code, out, err = _check(capsys, "--target", f"{kd_file}:DECLARED", "--objective", HINTON, "--quiet", "--cases")
    assert code == 1 and f"[{derive.GROUP}]" in out


def test_with_a_uid_selection_the_combination_is_named_not_derived(kd_file, capsys):
    vs = VectorSet(objectives=[HINTON], validate=False)
    uid = next(c.uid for c in vs.cases(HINTON) if c.conventions["soft_term"] == "cross_entropy")
    code, out, err = _check(capsys, "--target", f"{kd_file}:DECLARED", "--uid", uid, "--quiet")
    assert "not checked (cases are derived for it only when no --uid is given)" in err
