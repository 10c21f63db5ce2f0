"""Verdicts on targets written the way library authors write losses (DESIGN §8, §9).

A correct implementation without input validation, returning a bare tensor, upcasting
bfloat16/float16 inputs to float32 and zeroing padded positions passes with exit status 0;
its missing validation is reported on the validation axis, informational unless --strict.
Buggy variants still fail, known failures are declared, and a run that checks nothing is a
usage error."""
import json

import pytest

torch = pytest.importorskip("torch", reason="the targets under test are torch functions")

from lossproof.conformance import cli  # noqa: E402


def _flat(x):
    return [v for item in x for v in _flat(item)] if isinstance(x, list) else [x]

AUTHOR = '''
import torch
import torch.nn.functional as F


def up(x):   # compute in at least float32, as careful libraries do
    return x.float() if x.dtype in (torch.bfloat16, torch.float16) else x


def dpo(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
        beta=0.1, loss_type="sigmoid", label_smoothing=0.0):
    chosen = up(policy_chosen_logps) - up(reference_chosen_logps)
    rejected = up(policy_rejected_logps) - up(reference_rejected_logps)
    return -F.logsigmoid(beta * (chosen - rejected))


def reverse_kl(student_logits, teacher_logits, direction="reverse", temperature=1.0):
    s = F.log_softmax(up(student_logits) / temperature, dim=-1)
    t = F.log_softmax(up(teacher_logits) / temperature, dim=-1)
    p = s.exp()
    zero = p == 0      # 0·log 0 = 0, and no NaN through the gradient of the masked terms
    return (p * (s.masked_fill(zero, 0.0) - t.masked_fill(zero, 0.0))).sum(-1)


def future_cost(logp, ref_logp, mask, clip=None, window=None):
    k = (logp - ref_logp).detach() * mask
    later = torch.flip(torch.cumsum(torch.flip(k, [-1]), -1), [-1]) - k
    return later * mask          # padding is zeroed, as most trainers do


def advantages(rewards, scale="group", std_ddof=0, eps=0.0, degenerate="zero"):
    with torch.no_grad():
        r = up(rewards)
        mean = r.mean(-1, keepdim=True)
        std = r.std(-1, keepdim=True, unbiased=False)
        return torch.where(std > 0, (r - mean) / std.clamp_min(1e-300), torch.zeros_like(r))


TARGET = {"name": "author", "framework": "torch",
          "objectives": {"dpo.loss": dpo, "distill.token_kl": reverse_kl,
                         "proximal_kl.future_cost": future_cost, "grpo.advantages": advantages},
          "conventions": {"distill.token_kl": {"direction": "reverse"}},
          "params": {"dpo.loss": {"label_smoothing": [0.0]}}}
'''


@pytest.fixture
def author(tmp_path):
    path = tmp_path / "author.py"
    path.write_text(AUTHOR)
    return path


def _check(capsys, *argv):
    code = cli.main(["check", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _report(tmp_path, capsys, *argv):
    path = tmp_path / "report.json"
    code, out, err = _check(capsys, *argv, "--report-json", str(path))
    return code, json.loads(path.read_text()), out, err


def test_a_correct_implementation_written_as_authors_write_it_passes(tmp_path, author, capsys):
    code, doc, out, err = _report(tmp_path, capsys, "--target", f"{author}:TARGET", "--quiet")
    assert code == 0, out
    conformance, validation = doc["summary"]["conformance"], doc["summary"]["validation"]
    assert conformance["fail"] == conformance["error"] == 0 and conformance["pass"] > 150
    # every dtype ran, the float32 result for bfloat16/float16 inputs included
    assert {c["dtype"] for c in doc["cases"] if c["status"] == "pass"} >= {"float64", "float32", "bfloat16", "float16"}
    # no validation: the bad inputs are accepted, reported, and do not fail the run
    assert validation["accepted"] + validation["non-finite"] > 10
    assert "informational" in out


def test_strict_fails_on_invalid_input_that_is_not_rejected(author, capsys):
    code, out, _ = _check(capsys, "--target", f"{author}:TARGET", "--objective", "dpo.*", "--strict", "--quiet")
    assert code == 1
    assert "--strict" in out.split("repro: ")[1].splitlines()[0]


def test_invalid_inputs_run_under_the_targets_own_conventions(tmp_path, author, capsys):
    """The invalid inputs live in a group with the paper conventions; a target declaring other
    conventions still receives them, under its own conventions."""
    code, doc, *_ = _report(tmp_path, capsys, "--target", f"{author}:TARGET", "--objective", "distill.token_kl",
                            "--quiet")
    # (an invalid value of a convention the target does not declare, soft_term here, is skipped)
    invalid = [c for c in doc["cases"] if c["axis"] == "validation" and "InvalidInput" in c["flags"]
               and c["conventions"].get("soft_term", "kl") == "kl"]
    assert invalid and all(c["status"] != "skip" for c in invalid)
    bad_input = [c for c in invalid if c["conventions"]["direction"] in ("reverse", "forward")]
    assert len(bad_input) > 10 and all(c["conventions"]["direction"] == "reverse" for c in bad_input)
    # an infinite divergence is invalid in its own direction only: it runs where that direction is declared
    infinite = [c for c in doc["cases"] if "InfiniteDivergence" in c["flags"]]
    assert infinite and all(c["status"] == "skip" or c["conventions"]["direction"] == "reverse" for c in infinite)


def test_wrong_formulas_fail(tmp_path, capsys):
    path = tmp_path / "wrong.py"
    path.write_text(AUTHOR.replace("(p * (s.masked_fill(zero, 0.0) - t.masked_fill(zero, 0.0)))",
                                  "(t.exp() * (t - s))")                                 # forward, not reverse
                    .replace("-F.logsigmoid(beta * (chosen - rejected))", "-F.logsigmoid(chosen - rejected)"))
    for objective in ("distill.token_kl", "dpo.loss"):
        code, out, _ = _check(capsys, "--target", f"{path}:TARGET", "--objective", objective, "--quiet", "--cases")
        assert code == 1, objective
        assert "FAIL" in out


def test_an_output_computed_under_no_grad_is_named_as_such(tmp_path, capsys):
    path = tmp_path / "nograd.py"
    path.write_text(AUTHOR.replace("    chosen = up(policy_chosen_logps)", "    torch.set_grad_enabled(False)\n"
                                   "    chosen = up(policy_chosen_logps)")
                    .replace("    return -F.logsigmoid(beta * (chosen - rejected))",
                             "    out = -F.logsigmoid(beta * (chosen - rejected))\n"
                             "    torch.set_grad_enabled(True)\n    return out"))
    code, out, _ = _check(capsys, "--target", f"{path}:TARGET", "--objective", "dpo.loss", "--quiet", "--cases")
    assert code == 1
    assert "carry no gradient (computed under torch.no_grad() or detached?)" in out
    assert "[no-gradient] no gradient: the gradient is zero where the exact one is not" in out


def test_a_gradient_leak_is_caught_on_every_case(tmp_path, capsys, bundled_vectors):
    """Without no_grad the advantages carry a gradient to the rewards. A cotangent of ones
    would not see it (normalised advantages sum to zero); the probe's random cotangent does.
    Groups of two are left out: (a, b) ↦ (±1, ∓1) is locally constant, no leak can show."""
    path = tmp_path / "leak.py"
    path.write_text(AUTHOR.replace("    with torch.no_grad():\n        r = up", "    if True:\n        r = up"))
    code, doc, *_ = _report(tmp_path, capsys, "--target", f"{path}:TARGET", "--objective", "grpo.advantages",
                            "--quiet")
    assert code == 1
    judged = [c for c in doc["cases"] if c["axis"] == "conformance" and c["status"] in ("pass", "fail")]
    vs = bundled_vectors
    moving = [c for c in judged if len(vs.by_uid(c["uid"]).test["inputs"]["rewards"][0]) > 2
              and any(float(a) != 0 for a in _flat(vs.by_uid(c["uid"]).test["expected"]["advantages"]))]
    assert len(moving) > 15 and all("leaks gradient to input 'rewards'" in c["message"] for c in moving)


def test_known_failures_are_xfail_and_stale_ones_xpass(tmp_path, author, capsys):
    wrong = tmp_path / "wrong.py"
    wrong.write_text(AUTHOR.replace("beta * (chosen - rejected)", "(chosen - rejected)"))
    known = tmp_path / "known.json"
    known.write_text(json.dumps({"dpo.loss:*": "beta not applied (https://example.org/issue/1)"}))
    code, out, _ = _check(capsys, "--target", f"{wrong}:TARGET", "--objective", "dpo.loss", "--known", str(known),
                          "--quiet")
    assert code == 0
    assert "known failures" in out and "beta not applied" in out
    code, out, _ = _check(capsys, "--target", f"{author}:TARGET", "--objective", "dpo.loss", "--known", str(known),
                          "--quiet")
    assert code == 0 and "stale known failures" in out
    assert _check(capsys, "--target", f"{author}:TARGET", "--objective", "dpo.loss", "--known", str(known),
                  "--strict", "--quiet")[0] == 1


def test_a_known_declaration_in_the_target(tmp_path, capsys):
    path = tmp_path / "declared.py"
    path.write_text(AUTHOR.replace("beta * (chosen - rejected)", "(chosen - rejected)")
                    + "TARGET['known'] = {'dpo.loss:*@float*': 'beta not applied'}\n")
    code, out, _ = _check(capsys, "--target", f"{path}:TARGET", "--objective", "dpo.loss", "--dtype", "float64",
                          "--quiet")
    assert code == 0 and "beta not applied" in out


@pytest.mark.parametrize("argv, why", [
    (["--backend", "numpy", "--dtype", "bfloat16"], "runs in float64, float32 only"),
    (["--target", "{author}:UNCOVERED", "--objective", "grpo.advantages"], "checks nothing"),
    (["--target", "{author}:TARGET", "--uid", "distill.token_kl:*"], "no vector matched"),
])
def test_a_selection_that_checks_nothing_exits_2(author, capsys, argv, why):
    (author.parent / "author.py").write_text(AUTHOR + "UNCOVERED = dict(TARGET, conventions={'grpo.advantages': "
                                             "{'std_ddof': 2}})\n")
    code, out, err = _check(capsys, *[a.format(author=author) for a in argv], "--quiet")
    assert code == 2 and why in err and "Traceback" not in err


def test_declared_values_without_vectors_are_named(author, capsys):
    (author.parent / "author.py").write_text(AUTHOR + "PARTLY = dict(TARGET, conventions={'distill.token_kl': "
                                             "{'direction': ['reverse', 'sideways']}})\n")
    code, out, err = _check(capsys, "--target", f"{author}:PARTLY", "--objective", "distill.token_kl", "--quiet")
    assert ('declares direction="sideways", which no committed vector group holds; \'sideways\' is not a value '
            'of direction' in err and err.rstrip().endswith("not checked"))


def test_params_declaration_makes_other_values_unsupported(tmp_path, author, capsys):
    (author.parent / "author.py").write_text(AUTHOR + "FIXED = dict(TARGET, params={'dpo.loss': {'beta': [0.1], "
                                             "'label_smoothing': [0.0]}})\n")
    code, doc, *_ = _report(tmp_path, capsys, "--target", f"{author}:FIXED", "--objective", "dpo.loss", "--quiet")
    assert code == 0
    unsupported = [c for c in doc["cases"] if c["status"] == "unsupported"]
    assert any("beta=" in c["message"] for c in unsupported)
    # the others: cases that set rpo_alpha, an argument added in 1.3.0 that this function does not take
    assert all("is not among the values the target takes" in c["message"]
               or "the function does not take 'rpo_alpha'" in c["message"] for c in unsupported)


def test_objective_is_repeatable_and_as_paper_is_in_the_repro(tmp_path, capsys):
    path = tmp_path / "wrong.py"
    path.write_text(AUTHOR.replace("beta * (chosen - rejected)", "(chosen - rejected)"))
    code, doc, out, _ = _report(tmp_path, capsys, "--target", f"{path}:TARGET", "--objective", "dpo.loss",
                                "--objective", "distill.token_kl", "--as-paper", "--quiet")
    assert {c["objective"] for c in doc["cases"]} == {"dpo.loss", "distill.token_kl"}
    failing = [c for c in doc["cases"] if c["status"] == "fail"]
    assert failing and all(c["repro"].endswith("--as-paper") for c in failing)


def test_as_paper_says_when_nothing_deviates(tmp_path, capsys):
    """A target that declares only paper defaults is told so before the run (nothing is re-judged)."""
    path = tmp_path / "paper_only.py"
    path.write_text("from lossproof.refimpl.torch import lm\n"
                    "TARGET = {'name': 'paper-only', 'framework': 'torch', 'objectives': {'lm.entropy': lm.entropy}}\n")
    assert cli.main(["check", "--target", f"{path}:TARGET", "--as-paper", "--uid", "lm.entropy:0a84d68906bcc33f",
                     "--quiet"]) == 0
    assert "paper-only: declares the paper defaults (nothing deviates)" in capsys.readouterr().out
