"""Out-of-process mode: export the prompts, compute responses elsewhere, validate them."""
import json

from lossproof.conformance import cli
from lossproof.refimpl.exact import kl


def _responses(prompts, dtype="float64", swap=False):
    out = {}
    for case in prompts["cases"]:
        kw = {**case["inputs"], **case["conventions"], **case["params"]}
        if case["result"] == "invalid":
            out[case["uid"]] = {"error": "rejected"}
            continue
        if swap:
            kw["logp"], kw["ref_logp"] = kw["ref_logp"], kw["logp"]
        value = [float(v) for v in kl.estimator(**kw)]
        grad = [float(v) for v in kl.estimator_vjp(case["cotangents"]["value"], **kw)["logp"]]
        out[case["uid"]] = {"outputs": {"value": value}, "grads": {"logp": grad}}
    return {"schema": "lossproof-responses/1", "target": "other-language", "dtype": dtype, "responses": out}


def test_round_trip(tmp_path, capsys):
    assert cli.main(["export-prompt", str(tmp_path / "p"), "--objective", "kl.*"]) == 0
    prompts = json.loads((tmp_path / "p/kl/estimator.json").read_text())
    assert "expected" not in json.dumps(prompts)
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(_responses(prompts)))
    bad.write_text(json.dumps(_responses(prompts, swap=True)))
    assert cli.main(["validate", str(good), "--quiet"]) == 0
    assert cli.main(["validate", str(bad), "--quiet"]) == 1
    assert "failed" in capsys.readouterr().out


def test_malformed_responses_exit_2(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text('{"schema": "nope"}')
    assert cli.main(["validate", str(path)]) == 2
    assert capsys.readouterr().err.startswith("lossproof: error:")
