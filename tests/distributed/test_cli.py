"""`lossproof check --partition / --shard-vocab`: a bad split or a selection with nothing to run is a
one-line usage error (exit 2), before any rank process starts."""
import pytest

from lossproof.conformance import cli


@pytest.mark.parametrize("argv,words", [
    (["--partition", "2y2"], "--partition: expected RxM or RxM:KIND"),
    (["--partition", "9x1"], "--partition: at most 8 ranks"),
    (["--partition", "2x2:bogus"], "unknown partition kind 'bogus'"),
    (["--shard-vocab", "1"], "--shard-vocab: K must be between 2 and 8"),
    (["--partition", "2x2", "--shard-vocab", "2"], "give one of them"),
    (["--partition", "2x2", "--objective", "distill.*"], "--partition checks dpo.loss, grpo.aggregate, grpo.loss"),
    (["--shard-vocab", "2", "--objective", "grpo.loss"], "--shard-vocab checks distill.hinton, distill.token_kl"),
    (["--partition", "2x2", "--backend", "numpy"], "target numpy is a numpy target"),
    (["--partition", "4x4", "--uid", "dpo.loss:a9353e73841056c2"], "no partition over 4×4 slots"),
])
def test_usage_errors(argv, words, capsys):
    assert cli.main(["check", "--backend", "torch", "--quiet", *argv] if "--backend" not in argv
                    else ["check", "--quiet", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err and "Traceback" not in err


def test_a_target_without_sharded_functions_is_a_usage_error(tmp_path, capsys, monkeypatch):
    (tmp_path / "plain.py").write_text(
        "import torch\n\n"
        "def kl(student_logits, teacher_logits, direction='reverse', temperature=1.0):\n"
        "    q = torch.log_softmax(student_logits / temperature, -1)\n"
        "    return (q.exp() * (q - torch.log_softmax(teacher_logits / temperature, -1))).sum(-1)\n\n"
        "TARGET = {'name': 'plain', 'framework': 'torch', 'objectives': {'distill.token_kl': kl}}\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["check", "--quiet", "--shard-vocab", "2", "--target", "plain.py:TARGET"]) == 2
    err = capsys.readouterr().err.strip()
    assert "target plain declares no sharded functions" in err and "\n" not in err and "Traceback" not in err


def test_the_reports_carry_the_partition(tmp_path, capsys):
    import json
    from pathlib import Path

    import jsonschema
    report, junit = tmp_path / "r.json", tmp_path / "j.xml"
    assert cli.main(["check", "--backend", "torch", "--partition", "2x2", "--uid", "grpo.loss:a8892cbb841111e8",
                     "--dtype", "float64", "--report-json", str(report), "--junit", str(junit)]) == 0
    doc = json.loads(report.read_text())
    jsonschema.validate(doc, json.loads((Path(cli.__file__).parent / "schema" / "report-3.json").read_text()))
    assert [c["partition"] for c in doc["cases"]] == ["2x2:even", "2x2:uneven", "2x2:short-rank"]
    assert all(c["repro"].endswith(f"--partition {c['partition']}") for c in doc["cases"])
    assert "float64-cpu-2x2:uneven" in junit.read_text()
    assert "3 passed" in capsys.readouterr().out
