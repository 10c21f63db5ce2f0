"""One run orchestration (conformance.run) below the three front ends: `lossproof check`, the
Python API (conformance.testing) and the pytest plugin refuse the same bad selection with the
same message, and none of them reads a vector file before the selection is known to be good."""
from __future__ import annotations

import pytest

from lossproof.conformance import cli, run, testing
from lossproof.conformance.errors import LossproofError

pytest_plugins = ["pytester"]

# (what is wrong, target, objective, dtypes, the message all three give)
BAD = [
    ("an unknown dtype", "numpy", "kl.estimator", ["float8"], "--dtype 'float8': choose from"),
    ("a dtype the target lacks", "numpy", "kl.estimator", ["bfloat16"],
     "--dtype bfloat16: target numpy runs in float64, float32 only"),
    ("no such objective", "numpy", "kl.nothing", [], "no vector matched the selection"),
    ("a target that does not load", "no_such_module_xyz:T", "kl.estimator", [], "no_such_module_xyz"),
]


def _cli(capsys, target, objective, dtypes) -> str:
    argv = ["check", "--target", target, "--objective", objective, "--quiet"]
    for d in dtypes:
        argv += ["--dtype", d]
    assert cli.main(argv) == 2
    return capsys.readouterr().err


def _api(target, objective, dtypes) -> str:
    with pytest.raises(LossproofError) as err:
        testing.cases(target, objective=objective, dtypes=dtypes)
    return str(err.value)


@pytest.mark.parametrize("why, target, objective, dtypes, message", BAD, ids=[b[0] for b in BAD])
def test_the_cli_and_the_api_refuse_alike(capsys, why, target, objective, dtypes, message):
    api = _api(target, objective, dtypes)
    assert message in api
    assert api in _cli(capsys, target, objective, dtypes)


def test_the_plugin_refuses_alike(pytester):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_inprocess("--lossproof-target=numpy",
                                          "--lossproof-objective=kl.estimator", "--lossproof-dtype=bfloat16")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "lossproof: --dtype bfloat16: target numpy runs in float64, float32 only" in result.stderr.str()


def test_a_bad_selection_reads_no_vector_file(monkeypatch):
    """prepare() validates and loads the targets only: the vector set is never built."""
    def refuse(*args, **kwargs):
        raise AssertionError("a vector file was read before the selection was validated")
    monkeypatch.setattr(testing, "VectorSet", refuse)
    with pytest.raises(LossproofError, match="float8"):
        testing.cases("numpy", objective="kl.estimator", dtypes=["float8"])
    plan = run.prepare(run.Selection(backends=["numpy"], objectives=["kl.*"]))
    assert [t.name for t in plan.targets] == ["numpy"] and plan.split is None


def test_comma_separated_dtypes_mean_the_same_everywhere():
    assert run.dtype_list(["float64,float32", "bfloat16"]) == ["float64", "float32", "bfloat16"]
    tcs = testing.cases("numpy", objective="kl.estimator", dtypes=["float64,float32"])
    assert tcs and all(tc.dtypes == ("float64", "float32") for tc in tcs)
