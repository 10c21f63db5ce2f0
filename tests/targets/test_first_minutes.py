"""The first minutes with a target written the way a library author writes one: a signature that
does not fit the catalog is named once, before any case is called; a TypeError of a call is never
a rejection; a bare NotImplementedError reads as unsupported; flags are explained; --version."""
import json
import textwrap

import pytest

import lossproof

torch = pytest.importorskip("torch", reason="the targets here are torch functions")

from lossproof.conformance import catalog, cli  # noqa: E402
from lossproof.conformance.targets import signature  # noqa: E402
from lossproof.conformance.vectors.load import default_dir  # noqa: E402

AUTHOR = textwrap.dedent('''
    import torch
    import torch.nn.functional as F


    def dpo(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
            beta, label_smoothing):
        chosen = beta * (policy_chosen_logps - reference_chosen_logps)
        rejected = beta * (policy_rejected_logps - reference_rejected_logps)
        margin = chosen - rejected
        return -(1 - label_smoothing) * F.logsigmoid(margin) - label_smoothing * F.logsigmoid(-margin)


    def dpo_fixed(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
                  beta, label_smoothing, loss_type="sigmoid"):
        if loss_type != "sigmoid":
            raise NotImplementedError
        return dpo(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
                   beta, label_smoothing)


    def k3(logp, ref_logp, kind):          # forgets the clamp
        r = ref_logp - logp
        return torch.expm1(r) - r


    def forwarding(**arguments):           # a wrapper that forwards everything to the wrong function
        return k3(**arguments)


    def picky(logp, ref_logp, kind="k3", clamp=None):
        if not torch.isfinite(logp).all():
            raise TypeError("logp: must hold finite numbers")   # a rejection, whatever its type
        r = ref_logp - logp
        return torch.expm1(r) - r


    def declines(logp, ref_logp, kind="k3", clamp=None):
        raise NotImplementedError


    WRONG = {"name": "wrong-dpo", "framework": "torch", "objectives": {"dpo.loss": dpo}}
    FIXED = {"name": "fixed-dpo", "framework": "torch", "objectives": {"dpo.loss": dpo_fixed}}
    FORWARDING = {"name": "forwarding", "framework": "torch", "objectives": {"kl.estimator": forwarding}}
    PICKY = {"name": "picky", "framework": "torch", "objectives": {"kl.estimator": picky}}
    DECLINES = {"name": "declines", "framework": "torch", "objectives": {"kl.estimator": declines},
                "dtypes": ["float64"]}
''')


@pytest.fixture
def author(tmp_path):
    path = tmp_path / "author.py"
    path.write_text(AUTHOR)
    return path


def _run(capsys, tmp_path, *argv):
    report = tmp_path / "report.json"
    code = cli.main(["check", *argv, "--report-json", str(report)])
    out = capsys.readouterr()
    return code, out.out, out.err, json.loads(report.read_text())


def test_a_wrong_signature_is_named_once_and_nothing_is_called(author, tmp_path, capsys):
    code, out, _, doc = _run(capsys, tmp_path, "--target", f"{author}:WRONG", "--objective", "dpo.loss",
                             "--dtype", "float64")
    assert code == 1
    assert out.count("does not take 'loss_type'") == 1, out
    assert "dpo() " in out and 'paper default "sigmoid"' in out and "NotImplementedError" in out
    assert "ERROR " not in out   # no line per case
    conformance, validation = doc["summary"]["conformance"], doc["summary"]["validation"]
    assert conformance["pass"] == 0 and conformance["error"] > 30
    assert validation["rejected"] == 0 and validation["error"] > 5   # never counted as rejections
    assert all(c["message"].startswith("not called: dpo() does not take 'loss_type'")
               for c in doc["cases"] if c["status"] == "error")


def test_the_fixed_signature_runs(author, tmp_path, capsys):
    code, out, _, doc = _run(capsys, tmp_path, "--target", f"{author}:FIXED", "--objective", "dpo.loss",
                             "--dtype", "float64", "--quiet")
    assert code == 0, out
    assert doc["summary"]["conformance"]["pass"] > 30 and "not called" not in out


def test_a_typeerror_of_a_forwarded_call_is_an_error_not_a_rejection(author, tmp_path, capsys):
    code, out, _, doc = _run(capsys, tmp_path, "--target", f"{author}:FORWARDING", "--objective", "kl.estimator",
                             "--dtype", "float64", "--quiet")
    assert code == 1
    validation = doc["summary"]["validation"]
    assert validation["rejected"] == 0 and validation["error"] > 0
    invalid = [c for c in doc["cases"] if c["axis"] == "validation" and c["status"] == "error"]
    assert invalid and all("not a rejection" in c["message"] and c["raised"] is None for c in invalid)


def test_a_typeerror_the_function_raises_itself_is_a_rejection(author, tmp_path, capsys):
    _, _, _, doc = _run(capsys, tmp_path, "--target", f"{author}:PICKY", "--objective", "kl.estimator",
                        "--dtype", "float64", "--quiet")
    rejected = [c for c in doc["cases"] if c["status"] == "rejected"]
    assert rejected and all(c["raised"]["type"] == "TypeError" for c in rejected)


def test_a_bare_notimplementederror_is_unsupported_with_a_readable_message(author, capsys):
    code = cli.main(["check", "--target", f"{author}:DECLINES", "--objective", "kl.estimator"])
    err = capsys.readouterr().err
    assert code == 2
    assert "raised NotImplementedError (the function does not implement this case)" in err
    assert "NotImplementedError: ;" not in err and "NotImplementedError: )" not in err


DPO = catalog.get("dpo.loss")
KL = catalog.get("kl.estimator")
ALL_DPO = {"policy_chosen_logps", "policy_rejected_logps", "reference_chosen_logps", "reference_rejected_logps",
           "beta", "label_smoothing", "loss_type"}


def test_signature_mismatches_each_named():
    def takes_all(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
                  beta=0.1, loss_type="sigmoid", label_smoothing=0.0):
        pass

    def extra(logp, ref_logp, kind="k3", clamp=None, *, scale):
        pass

    def positional(logp, ref_logp, /, kind="k3", clamp=None):
        pass

    def anything(*args, **kwargs):
        pass

    assert signature.mismatches(takes_all, DPO, ALL_DPO) is None
    assert signature.mismatches(anything, KL, {"logp", "ref_logp", "kind", "clamp"}) is None
    # a parameter the case does not set: not passed, so the function's own default is used
    assert "requires 'beta'" in signature.mismatches(lambda policy_chosen_logps, beta: 0, DPO,
                                                     {"policy_chosen_logps"})
    assert "requires 'scale'" in signature.mismatches(extra, KL, {"logp", "ref_logp", "kind", "clamp"})
    assert "not an argument of kl.estimator" in signature.mismatches(extra, KL, {"logp", "ref_logp", "kind", "clamp"})
    assert "positionally only" in signature.mismatches(positional, KL, {"logp", "ref_logp", "kind", "clamp"})
    line = signature.mismatches(lambda logp: 0, KL, {"logp", "ref_logp", "kind", "clamp"})
    assert line.index("'ref_logp'") < line.index("'kind'") < line.index("'clamp'")   # in catalog order
    assert "an input of kl.estimator, passed on every call" in line


def test_return_form_from_the_annotation():
    def four(logp, ref_logp, kind="k3", clamp=None) -> tuple[int, int, int, int]:
        pass

    def nothing(logp, ref_logp, kind="k3", clamp=None) -> None:
        pass

    def fine(logp, ref_logp, kind="k3", clamp=None) -> "UnresolvableName":   # noqa: F821
        pass

    names = {"logp", "ref_logp", "kind", "clamp"}
    assert "tuple of 4" in signature.mismatches(four, KL, names)
    assert "return None" in signature.mismatches(nothing, KL, names)
    assert signature.mismatches(fine, KL, names) is None


@pytest.mark.parametrize("message, binds", [
    ("f() got an unexpected keyword argument 'clamp'", True),
    ("f() missing 1 required positional argument: 'x'", True),
    ("f() takes 2 positional arguments but 3 were given", True),
    ("logp: must hold finite numbers", False),
])
def test_call_errors_are_told_from_rejections(message, binds):
    assert signature.call_error(TypeError(message)) is binds
    assert not signature.call_error(ValueError(message))


def test_failures_are_grouped_under_their_flags_described(tmp_path, capsys):
    path = tmp_path / "halved.py"
    path.write_text("import torch\n"
                    "def kl(logp, ref_logp, kind='k3', clamp=None):\n"
                    "    r = ref_logp - logp\n"
                    "    return (torch.expm1(r) - r) / 2\n"
                    "T = {'name': 'halved', 'framework': 'torch', 'objectives': {'kl.estimator': kl}}\n")
    assert cli.main(["check", "--target", f"{path}:T", "--objective", "kl.estimator", "--dtype", "float64",
                     "--quiet", "--cases"]) == 1
    out = capsys.readouterr().out
    notes = json.loads((default_dir() / "kl" / "estimator.json").read_text())["notes"]
    headers = [line.strip() for line in out.splitlines() if line.startswith("  [")]
    assert headers and all(h.split("] ", 1)[1] == notes[h[1:h.index("]")]]["description"] for h in headers)


def test_show_describes_each_flag(capsys):
    uid = "grpo.advantages:714e91de9275a9d4"
    assert cli.main(["show", uid]) == 0
    out = capsys.readouterr().out
    notes = json.loads((default_dir() / "grpo" / "advantages.json").read_text())["notes"]
    assert f"flags:       ZeroStdRounding: {notes['ZeroStdRounding']['description']}" in out


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"lossproof {lossproof.__version__}"


def test_a_clean_run_of_the_numpy_backend_warns_of_nothing(capsys):
    """Every objective, so that a new one cannot bring a warning back. The places that once
    warned: e^ℓ overflowing to the +inf the bounds truncate, 0·(−inf) in the cross-entropy soft
    term at tokens the teacher excludes, cosh(z/s) overflowing in the soft cap's derivative."""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli.main(["check", "--backend", "numpy", "--quiet"]) == 0
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []
