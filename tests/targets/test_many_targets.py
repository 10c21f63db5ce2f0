"""Many targets and many variants in one run: each target is judged and reported on its own (one
that checks nothing is a line, and the run is a usage error only when none checks anything);
NotImplementedError is unsupported everywhere; dtypes per objective; several variants of one
objective, each with its own declaration and its own name in the report."""
import json
import re
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="the targets here are torch functions")

from lossproof.conformance import cli, run  # noqa: E402
from lossproof.conformance.targets import TargetError, load, split_variants  # noqa: E402

LIBRARY = textwrap.dedent('''
    import torch


    def masked_mean(values, mask, mode="seq-mean-token-mean", norm_length=None, mean_eps=None):
        """One mean over every unmasked token of the batch."""
        if mode != "token-mean":
            raise NotImplementedError(f"mode={mode!r}")
        work = torch.promote_types(values.dtype, torch.float32)
        return (values.to(work) * mask.to(work)).sum() / mask.to(work).sum()


    def row_means(values, mask, mode="seq-mean-token-mean", norm_length=None, mean_eps=None):
        """The mean of each row's token mean (a row without tokens counts as 0)."""
        if mode != "seq-mean-token-mean":
            raise NotImplementedError(f"mode={mode!r}")
        work = torch.promote_types(values.dtype, torch.float32)
        v, m = values.to(work), mask.to(work)
        return ((v * m).sum(-1) / m.sum(-1).clamp(min=1)).mean()


    def k3(logp, ref_logp, kind="k3", clamp=None):
        if kind != "k3" or clamp is not None:
            raise NotImplementedError
        r = ref_logp - logp
        return torch.expm1(r) - r


    def declines(logp, ref_logp, kind="k3", clamp=None):
        raise NotImplementedError


    MEANS = {
        "name": "lib",
        "framework": "torch",
        "objectives": {"grpo.aggregate[token]": masked_mean, "grpo.aggregate[row]": row_means,
                       "kl.estimator": k3},
        "conventions": {"grpo.aggregate[token]": {"mode": "token-mean"}},
        "dtypes": {"grpo.aggregate[row]": ["float64"], "*": ["float64", "float32"]},
    }
    NOTHING = {"name": "nothing", "framework": "torch", "objectives": {"kl.estimator": declines}}
    FLOAT64 = {"name": "only64", "framework": "torch", "objectives": {"kl.estimator": k3}, "dtypes": ["float64"]}
''')


@pytest.fixture
def library(tmp_path):
    path = tmp_path / "library.py"
    path.write_text(LIBRARY)
    return path


def _run(tmp_path, capsys, *argv):
    report = tmp_path / "report.json"
    code = cli.main(["check", *argv, "--report-json", str(report)])
    out = capsys.readouterr()
    return code, out.out, out.err, (json.loads(report.read_text()) if report.exists() else None)


def test_a_target_that_checks_nothing_is_a_line_and_the_others_are_reported(library, tmp_path, capsys):
    code, out, err, doc = _run(tmp_path, capsys, "--target", f"{library}:NOTHING", "--target", f"{library}:FLOAT64",
                               "--objective", "kl.estimator", "--quiet")
    assert code == 0, err
    assert "nothing: checks nothing (" in out and "raised NotImplementedError (the function does not" in out
    assert {c["target"] for c in doc["cases"]} == {"nothing", "only64"}
    assert doc["summary"]["conformance"]["pass"] > 30


def test_a_target_that_cannot_run_the_selection_is_a_note(library, tmp_path, capsys):
    code, out, err, doc = _run(tmp_path, capsys, "--target", f"{library}:FLOAT64", "--target", f"{library}:NOTHING",
                               "--target", "torch", "--objective", "kl.estimator", "--dtype", "float32", "--quiet")
    assert code == 0
    assert "note: --dtype float32: target only64 runs in float64 only" in err
    assert {c["target"] for c in doc["cases"]} == {"nothing", "torch"}


def test_exit_2_only_when_no_target_checks_anything(library, tmp_path, capsys):
    code, _, err, doc = _run(tmp_path, capsys, "--target", f"{library}:NOTHING", "--target", f"{library}:FLOAT64",
                             "--objective", "kl.estimator", "--dtype", "float32")
    assert code == 2 and doc is None
    assert err.count("lossproof: error:") == 1
    assert "target only64 runs in float64 only" in err and "target nothing: the selection checks nothing" in err


def test_variants_are_checked_and_reported_each_under_its_own_name(library, tmp_path, capsys):
    code, out, err, doc = _run(tmp_path, capsys, "--target", f"{library}:MEANS", "--objective", "grpo.aggregate",
                               "--objective", "kl.estimator")
    assert code == 0, out
    by_target = {}
    for c in doc["cases"]:
        by_target.setdefault(c["target"], []).append(c)
    assert set(by_target) == {"lib", "lib[token]", "lib[row]"}
    assert {c["objective"] for c in by_target["lib"]} == {"kl.estimator"}
    assert {c["conventions"]["mode"] for c in by_target["lib[token]"] if c["status"] == "pass"} == {"token-mean"}
    assert {c["conventions"]["mode"] for c in by_target["lib[row]"] if c["status"] == "pass"} == \
        {"seq-mean-token-mean"}
    # dtypes per objective: the row variant runs in float64 only, the rest in float64 and float32
    assert {c["dtype"] for c in by_target["lib[row]"] if c["status"] == "pass"} == {"float64"}
    assert {c["dtype"] for c in by_target["lib[token]"] if c["status"] == "pass"} == {"float64", "float32"}
    assert "\nlib[token]: objective" in out and "\nlib[row]: objective" in out


def test_split_variants_keeps_each_declaration_with_its_variant(library):
    parts = {t.name: t for t in split_variants(load(f"{library}:MEANS"))}
    assert set(parts) == {"lib", "lib[token]", "lib[row]"}
    assert set(parts["lib"].objectives) == {"kl.estimator"}
    assert parts["lib[token]"].declared("grpo.aggregate") == {"mode": "token-mean"}
    assert parts["lib[row]"].declared("grpo.aggregate") == {}
    assert parts["lib[row]"].objective_dtypes["grpo.aggregate"] == ("float64",)
    assert "grpo.aggregate" not in parts["lib[token]"].objective_dtypes
    assert parts["lib[token]"].dtypes == ("float64", "float32")


@pytest.mark.parametrize("rules, parts_or_error", [
    ("[('every', yes), ('row only', yes, 'row')]", {"lib": ["every"], "lib[token]": ["every"],
                                                    "lib[row]": ["every", "row only"]}),
    ("[('x', yes, 'rows')]", "known rule 'x' is for variant 'rows', which no 'objective[variant]' key declares"),
    ("[('x',)]", "each known rule must be (reason, predicate) or (reason, predicate, variant)"),
])
def test_a_known_rule_of_one_variant_holds_for_that_variant_only(library, tmp_path, rules, parts_or_error):
    """``known_rules`` entries ``(reason, predicate)`` hold for the plain objectives and every
    variant; ``(reason, predicate, variant)`` for that variant's target alone (its plain
    sibling's cases are not its failures: marked known there, they would pass as stale)."""
    path = tmp_path / "ruled.py"
    path.write_text(f"from library import MEANS\nyes = lambda case, dtype: True\nT = {{**MEANS, 'known_rules': {rules}}}\n")
    if isinstance(parts_or_error, str):
        with pytest.raises(TargetError, match=re.escape(parts_or_error)):
            load(f"{path}:T")
        return
    parts = {t.name: [reason for reason, _ in t.known_rules] for t in split_variants(load(f"{path}:T"))}
    assert parts == parts_or_error


@pytest.mark.parametrize("extra, message", [
    ({"objectives": {"grpo.nothing[a]": len}}, "unknown objective 'grpo.nothing[a]'"),
    ({"dtypes": {"grpo.clip": ["float64"]}}, "dtypes for 'grpo.clip', which the target does not implement"),
    ({"dtypes": {"kl.estimator": "float64"}}, "dtypes['kl.estimator'] must be a non-empty list"),
    ({"dtypes": "float64"}, "'dtypes' must be a list of dtypes or {objective: [dtypes]}"),
    ({"conventions": {"kl.estimator[a]": {"nope": 1}}}, "kl.estimator has no convention 'nope'"),
])
def test_bad_declarations_are_one_line_errors(library, tmp_path, extra, message):
    path = tmp_path / "bad.py"
    path.write_text(f"from library import k3\nT = dict({{'name': 'b', 'framework': 'torch', "
                    f"'objectives': {{'kl.estimator': k3}}}}, **{extra!r})\n".replace("<built-in function len>", "len"))
    with pytest.raises(TargetError, match=message.replace("[", r"\[").replace("(", r"\(").replace("{", r"\{")):
        load(f"{path}:T")


def test_the_api_runs_every_variant(library):
    from lossproof.conformance import testing
    cases = testing.cases(f"{library}:MEANS", objective="grpo.aggregate")
    assert {tc.target.name for tc in cases} == {"lib[token]", "lib[row]"}
    assert run.prepare(run.Selection(targets=[f"{library}:MEANS"])).targets[0].name == "lib"


def test_notimplementederror_is_unsupported_in_the_probe_too(tmp_path, capsys):
    path = tmp_path / "declines.py"
    path.write_text("def loss(**arguments):\n    raise NotImplementedError\n"
                    "T = {'name': 'nie', 'framework': 'torch', 'objectives': {'proximal_kl.loss': loss}}\n")
    assert cli.main(["probe", "--target", f"{path}:T", "--quiet"]) == 2
    out = capsys.readouterr()
    assert "not probed: nie proximal_kl.loss: raised NotImplementedError (the function does not implement" in out.out
    assert out.err.startswith("lossproof: error: nothing was probed") and "Traceback" not in out.err
