"""`lossproof check` end to end: exit statuses, the JSON report (validated against its
schema), JUnit XML, repro lines."""
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

torch = pytest.importorskip("torch", reason="the CLI is exercised with the torch backend and torch targets")

from lossproof.conformance import cli

BUGGY = '''
def clip(logp, old_logp, advantages, eps_low=0.2, eps_high=None, dual_clip=None):
    ratio = torch.exp(logp - old_logp)
    eps_high = eps_low if eps_high is None else eps_high
    return torch.maximum(ratio * advantages, ratio.clamp(1 - eps_low, 1 + eps_high) * advantages)
TARGET = {"name": "buggy", "framework": "torch", "objectives": {"grpo.clip": clip}}
'''

SCHEMA = json.loads((Path(cli.__file__).parent / "schema" / "report-3.json").read_text())


def test_check_passes_and_writes_valid_reports(tmp_path, capsys):
    report, junit = tmp_path / "r.json", tmp_path / "j.xml"
    code = cli.main(["check", "--backend", "torch", "--objective", "kl.*", "--quiet",
                     "--report-json", str(report), "--junit", str(junit)])
    assert code == 0
    doc = json.loads(report.read_text())
    jsonschema.validate(doc, SCHEMA)
    conformance, validation = doc["summary"]["conformance"], doc["summary"]["validation"]
    assert conformance["fail"] == 0 and conformance["pass"] > 100
    assert validation["rejected"] > 5 and validation["accepted"] == validation["non-finite"] == 0
    case = next(c for c in doc["cases"] if c["axis"] == "validation")
    assert case["raised"]["type"] == "InputError" and case["group"] and case["conventions"]
    assert ET.parse(junit).getroot().tag == "testsuites"
    assert "passed, 0 failed" in capsys.readouterr().out


def test_failing_target_exits_1_with_repro(tmp_path, capsys):
    path = tmp_path / "buggy.py"
    path.write_text(BUGGY)
    code = cli.main(["check", "--target", f"{path}:TARGET", "--objective", "grpo.clip", "--quiet"])
    out = capsys.readouterr().out
    assert code == 1
    assert f"repro: lossproof check --target {path}:TARGET --uid grpo.clip:" in out


def test_no_matching_vector_is_a_usage_error(capsys):
    assert cli.main(["check", "--backend", "torch", "--objective", "nothing.*"]) == 2
    assert capsys.readouterr().err.startswith("lossproof: error: no vector matched")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
@pytest.mark.parametrize("command", ["check", "probe"])
def test_a_cuda_only_target_on_a_machine_without_cuda_is_a_usage_error(tmp_path, capsys, command):
    path = tmp_path / "gpu.py"
    path.write_text("from lossproof.refimpl.torch import proximal_kl\n"
                    "T = {'name': 'gpu', 'framework': 'torch', 'devices': ['cuda'],\n"
                    "     'objectives': {'proximal_kl.loss': proximal_kl.loss}}\n")
    argv = [command, "--target", f"{path}:T", "--quiet"] + (["--device", "cuda"] if command == "probe" else [])
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA device" in err[0]
