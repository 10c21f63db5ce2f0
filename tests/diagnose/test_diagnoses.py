"""The diagnoses judged from the outside: targets written here with one known defect each must
be told that defect in one line, and correct targets must be told nothing."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch", reason="the targets under diagnosis are torch functions")

from lossproof.conformance import cli, diagnose, harness
from lossproof.conformance.targets import from_mapping
from lossproof.conformance.vectors.load import VectorSet
from diagnose import targets


def _diagnoses(spec: dict, objective: str, dtypes=("float64",)):
    target = from_mapping(spec, spec["name"])
    vs = VectorSet(None, [objective], validate=False)
    results = harness.run(target, vs, objective=objective, dtypes=list(dtypes))
    return results, diagnose.diagnose(results, vs, [target])


def test_forward_kd_with_the_cross_entropy_and_no_t2_is_told_what_to_declare():
    results, found = _diagnoses(targets.KD_CE_NO_T2, "distill.hinton")
    failing = [r for r in results if r.status == "fail"]
    assert failing, "the paper's conventions must fail this target"
    assert [d.kind for d in found] == ["convention"]
    (d,) = found
    assert d.count == len(failing)
    assert d.declare == {"t2_scale": False, "soft_term": "cross_entropy"}
    assert "t2_scale=False + soft_term='cross_entropy'" in d.defect
    assert d.repro.startswith("lossproof check --target kd-ce-no-t2 --uid distill.hinton:")


def test_forward_kd_passes_once_it_declares_what_it_was_told():
    results, found = _diagnoses(targets.KD_CE_NO_T2_DECLARED, "distill.hinton")
    assert any(r.status == "pass" for r in results)
    assert not [r for r in results if r.status in ("fail", "error")] and not found


def test_the_declared_convention_is_what_the_function_computes():
    """Evaluating the exact reference under the declaration on every case the paper's group
    failed: the target matches it (what 'passes once declared' will check on committed vectors)."""
    results, found = _diagnoses(targets.KD_CE_NO_T2, "distill.hinton")
    (d,) = found
    vs = VectorSet(None, ["distill.hinton"], validate=False)
    target = from_mapping(targets.KD_CE_NO_T2, "kd")
    obj = diagnose._Objective(target, "distill.hinton", results, {c.uid: c for c in vs.cases("distill.hinton")},
                              diagnose.compare.Tolerances({}), vs)
    judged = [r for r in results if r.status in ("pass", "fail") and obj.size(r) <= diagnose.MAX_ELEMENTS]
    assert len(judged) > 50
    assert all(obj.fits(r, obj.exact(r, d.declare)) for r in judged)


def test_float32_inside_with_float64_inputs_is_told_in_one_line():
    results, found = _diagnoses(targets.KL_FLOAT32, "kl.estimator", dtypes=("float64", "float32"))
    failing = [r for r in results if r.status == "fail"]
    assert failing and all(r.dtype == "float64" for r in failing)
    assert [d.kind for d in found] == ["float32-inside"]
    assert found[0].defect == "computed in float32 although the inputs are float64"
    assert found[0].count == len(failing)
    assert 'computes_in: "float32"' in found[0].fix


def test_a_correct_target_gets_no_diagnosis():
    spec = {"name": "torch-kl", "framework": "torch", "dtypes": ["float64", "float32"],
            "objectives": {"kl.estimator": __import__("lossproof.refimpl.torch.kl", fromlist=["estimator"]).estimator},
            "conventions": {"kl.estimator": {"kind": ["k3", "k1", "k2", "abs"], "clamp": "*"}}}
    results, found = _diagnoses(spec, "kl.estimator", dtypes=("float64", "float32"))
    assert any(r.status == "pass" for r in results) and found == []


def _bfloat16_k3(logp, ref_logp, kind="k3", clamp=None):
    """k3 computed in the inputs' dtype: every operation rounds to bfloat16."""
    x = ref_logp - logp
    k = {"k1": -x, "k2": x * x / 2, "k3": torch.expm1(x) - x, "abs": x.abs()}[kind]
    return k if clamp is None else k.clamp(-clamp, clamp)


def test_a_target_that_computes_in_the_low_dtype_is_told_to_declare_native():
    spec = {"name": "k3-native", "framework": "torch", "dtypes": ["float64", "float32", "bfloat16"],
            "objectives": {"kl.estimator": _bfloat16_k3},
            "conventions": {"kl.estimator": {"kind": ["k3", "k1", "k2", "abs"], "clamp": "*"}}}
    results, found = _diagnoses(spec, "kl.estimator", dtypes=("float64", "float32", "bfloat16"))
    failing = [r for r in results if r.status == "fail"]
    assert failing and {r.dtype for r in failing} == {"bfloat16"}
    native = [d for d in found if d.kind == "native"]
    assert native and "tolerance_model: native" in native[0].fix
    assert sum(d.count for d in native) == len(failing)


def test_the_console_shows_the_diagnoses_first_and_the_cases_on_request(tmp_path, capsys):
    report = tmp_path / "r.json"
    argv = ["check", "--target", "diagnose.targets:KL_FLOAT32", "--objective", "kl.estimator", "--dtype", "float64",
            "--quiet", "--report-json", str(report)]
    assert cli.main(argv) == 1
    out = capsys.readouterr().out
    assert out.startswith("diagnoses: 1 defect(s)")
    assert "[float32-inside] computed in float32 although the inputs are float64" in out
    assert "repro: lossproof check --target diagnose.targets:KL_FLOAT32 --uid kl.estimator:" in out
    assert "failures by their most distinctive flag" not in out
    doc = json.loads(report.read_text())
    assert doc["schema"] == "lossproof-report/3"
    assert [d["kind"] for d in doc["diagnoses"]] == ["float32-inside"]
    assert cli.main(argv + ["--cases"]) == 1
    assert "failures by their most distinctive flag" in capsys.readouterr().out


def test_digits_lost_where_the_vectors_flag_cancellation_name_the_stable_form():
    results, found = _diagnoses(targets.ORPO_LOG1P_EXP, "preference.orpo", dtypes=("float64", "float32"))
    cancellation = [d for d in found if d.kind == "cancellation"]
    assert len(cancellation) == 1 and "NearCertain" in cancellation[0].defect
    assert "log(−expm1(p))" in cancellation[0].fix
    flagged = [r for r in results if r.status == "fail" and "NearCertain" in r.flags]
    assert cancellation[0].count == len(flagged)


def _kl_returns_float32(logp, ref_logp, kind="k3", clamp=None):
    """k3 computed in float32 and returned so: half the digits of float64 inputs, in the dtype too."""
    x = ref_logp.float() - logp.float()
    return torch.expm1(x) - x


def test_an_output_narrower_than_the_inputs_is_named_with_both_dtypes():
    spec = {"name": "k3-narrow", "framework": "torch", "dtypes": ["float64"],
            "objectives": {"kl.estimator": _kl_returns_float32}}
    results, found = _diagnoses(spec, "kl.estimator")
    failing = [r for r in results if r.status == "fail"]
    assert failing and [d.kind for d in found] == ["narrow-dtype"]
    assert found[0].defect == "returns float32 for float64 inputs" and found[0].count == len(failing)
    # a library that computes in float32 on purpose is told how to declare it, not only to widen
    assert 'computes_in: "float32"' in found[0].fix and "docs/targets.md#computes_in" in found[0].fix


def test_write_known_turns_a_run_into_a_known_failures_file_with_the_diagnoses(tmp_path, capsys):
    """--write-known FILE lists every failing case (uid@dtype) with the diagnosis that explains it;
    the same check with --known FILE then passes, every failure declared."""
    spec = f"{targets.__file__}:KD_CE_NO_T2"
    known = tmp_path / "known.json"
    argv = ["check", "--target", spec, "--objective", "distill.hinton", "--dtype", "float64", "--quiet"]
    assert cli.main([*argv, "--write-known", str(known)]) == 1
    entries = json.loads(known.read_text())
    assert entries and all(key.endswith("@float64") for key in entries)
    assert all(reason.startswith("[convention] matches t2_scale=False + soft_term='cross_entropy'")
               for reason in entries.values())
    capsys.readouterr()
    report = tmp_path / "report.json"
    assert cli.main([*argv, "--known", str(known), "--report-json", str(report)]) == 0
    statuses = [c["status"] for c in json.loads(report.read_text())["cases"]]
    assert statuses.count("xfail") == len(entries) and "fail" not in statuses


def test_an_input_overwritten_in_place_is_named_with_the_input():
    results, found = _diagnoses(targets.KL_IN_PLACE, "kl.estimator")
    failing = [r for r in results if r.status == "fail"]
    assert failing and [d.kind for d in found] == ["in-place"]
    assert "ref_logp" in found[0].defect and found[0].count == len(failing)
    assert "clone" in found[0].fix


def test_a_time_out_of_the_check_s_own_limit_is_its_own_kind_never_raises():
    """The harness marks a time-out by its message and (from issue 36 on) by probes["timeout"]."""
    spec = {"name": "torch-kl", "framework": "torch", "dtypes": ["float64"],
            "objectives": {"kl.estimator": __import__("lossproof.refimpl.torch.kl", fromlist=["estimator"]).estimator}}
    results, found = _diagnoses(spec, "kl.estimator")
    assert found == []
    by_message, by_probe = [r for r in results if r.axis == "conformance" and r.status == "pass"][:2]
    by_message.status, by_message.message = "error", "exceeded the 30 s time limit"
    by_probe.status, by_probe.message, by_probe.probes = "error", "gradient exceeded the 30 s time limit", {"timeout": 30}
    target = from_mapping(spec, spec["name"])
    found = diagnose.diagnose(results, VectorSet(None, ["kl.estimator"], validate=False), [target])
    assert [(d.kind, d.count) for d in found] == [("timeout", 2)]
    assert "30 s" in found[0].defect and "--time-limit" in found[0].fix


def test_a_gradient_rounded_to_bfloat16_is_named_not_a_stop_gradient():
    for dtypes in (("float64",), ("float64", "float32")):
        results, found = _diagnoses(targets.KL_BFLOAT16_GRADIENT, "kl.estimator", dtypes=dtypes)
        failing = [r for r in results if r.status == "fail"]
        assert failing and [d.kind for d in found] == ["gradient-rounded"], (dtypes, found)
        assert found[0].defect == "the gradient is rounded to bfloat16" and found[0].count == len(failing)


def test_a_mean_over_every_position_is_a_factor_that_tracks_the_ignored_labels():
    """loss·valid/all: the factor changes from case to case, and the line says what it tracks,
    in float32 runs as in float64 ones."""
    results, found = _diagnoses(targets.CE_ALL_POSITIONS, "lm.cross_entropy", dtypes=("float64", "float32"))
    # F.cross_entropy itself misses the bound at V = 128256 (the Large cases): that is torch's, not the bug's
    failing = [r for r in results if r.status == "fail" and "Large" not in r.flags]
    assert failing and {r.dtype for r in failing} == {"float64", "float32"}
    factor = found[0]
    assert factor.kind == "factor" and "the denominator counts ignored labels" in factor.defect
    assert set(factor.uids) == {r.uid for r in failing} and factor.count == len(failing)
    assert all(d.kind == "unexplained" for d in found[1:])


def test_an_input_accepted_and_never_read_is_named_with_the_input():
    """The exact reference with the margin set to 0 is what the function computes: the line names
    the input, in float32 runs as in float64 ones; the cases without a margin pass."""
    results, found = _diagnoses(targets.MARGIN_IGNORED, "reward.pairwise", dtypes=("float64", "float32"))
    failing = [r for r in results if r.status == "fail"]
    assert failing and {r.dtype for r in failing} == {"float64", "float32"}
    assert [d.kind for d in found] == ["input-ignored"], [(d.kind, d.defect) for d in found]
    assert "margin as 0" in found[0].defect and found[0].count == len(failing)
