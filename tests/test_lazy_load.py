"""Lazy vector sets: a selection reads (sha256, JSON) only the files of its objectives; the
whole-set checks (``vectors lint``, ``VectorSet()``) still read and schema-validate every file."""
import json
import shutil

import pytest

from lossproof.conformance import cli
from lossproof.conformance.vectors.format import MANIFEST, manifest_bytes, serialize
from lossproof.conformance.vectors.load import VectorError, VectorSet, default_dir

OBJECTIVES = ("kl/estimator", "dpo/loss")


@pytest.fixture
def vdir(tmp_path):
    """A copy of two objectives of the bundled vectors (vector and certificate files) with
    their own manifest."""
    for stem in OBJECTIVES:
        for suffix in (".json", ".cert.json"):
            (tmp_path / stem).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(default_dir() / f"{stem}{suffix}", tmp_path / f"{stem}{suffix}")
    _refresh_manifest(tmp_path)
    return tmp_path


def _refresh_manifest(vdir):
    files = {p.relative_to(vdir).as_posix(): p.read_bytes() for p in vdir.rglob("*.json")}
    (vdir / MANIFEST).write_bytes(manifest_bytes(files))


def _corrupt(vdir, rel):
    """Garbage bytes the manifest does not list: the sha256 check fails (not valid JSON either)."""
    (vdir / rel).write_bytes(b"{ corrupt")


def _kl_uid(vdir):
    return json.loads((vdir / "kl/estimator.json").read_bytes())["testGroups"][0]["tests"][0]["uid"]


def test_a_selection_reads_only_its_objectives_file(vdir):
    _corrupt(vdir, "dpo/loss.json")
    _corrupt(vdir, "dpo/loss.cert.json")
    vs = VectorSet(vdir, ["kl.*"], validate=False)
    assert vs.objective_ids() == ["kl.estimator"]
    assert list(vs.files) == ["kl/estimator.json"] and list(vs.certificates) == ["kl/estimator.cert.json"]
    assert sum(1 for _ in vs.cases()) == vs.files["kl/estimator.json"]["numberOfTests"]
    assert vs.by_uid(_kl_uid(vdir)).objective == "kl.estimator"


def test_an_unrestricted_lazy_set_reports_the_corrupt_file_when_it_is_selected(vdir):
    _corrupt(vdir, "dpo/loss.json")
    vs = VectorSet(vdir, validate=False)                  # the manifest only: no vector file read
    assert sorted(vs.files) == ["dpo/loss.json", "kl/estimator.json"]   # keys, without loading
    assert vs.objective_ids() == ["dpo.loss", "kl.estimator"]
    assert sum(1 for _ in vs.cases("kl.estimator")) > 0   # the other file is never read
    assert vs.by_uid(_kl_uid(vdir)).file == "kl/estimator.json"
    with pytest.raises(KeyError):
        vs.by_uid("nothing.here:0000000000000000")
    for access in (lambda: list(vs.cases("dpo.*")), lambda: vs.files["dpo/loss.json"], vs.counts,
                   lambda: vs.by_uid("dpo.loss:0000000000000000")):
        with pytest.raises(VectorError) as info:
            access()
        assert info.value.file.endswith("dpo/loss.json") and "sha256" in info.value.problem
    with pytest.raises(VectorError, match="sha256"):    # the whole set, eagerly: as before
        VectorSet(vdir)


def test_sha256_mismatch_is_caught_lazily(vdir):
    path = vdir / "kl/estimator.json"
    path.write_bytes(path.read_bytes().replace(b'"comment":"random', b'"comment":"Random', 1))   # valid JSON
    cert = vdir / "dpo/loss.cert.json"
    cert.write_bytes(cert.read_bytes() + b"\n")
    vs = VectorSet(vdir, validate=False)
    for access in (lambda: list(vs.cases("kl.*")),
                   lambda: vs.raw["kl/estimator.json"], lambda: vs.by_uid(_kl_uid(vdir))):
        with pytest.raises(VectorError) as info:
            access()
        assert info.value.file.endswith("kl/estimator.json") and "sha256" in info.value.problem
    with pytest.raises(VectorError, match="sha256") as info:
        vs.certificates["dpo/loss.cert.json"]
    assert info.value.file.endswith("dpo/loss.cert.json")
    assert vs.files["dpo/loss.json"]["objective"] == "dpo.loss"


def test_the_manifest_checks_stay_at_construction(vdir):
    shutil.copy(vdir / "kl/estimator.json", vdir / "kl/extra.json")
    with pytest.raises(VectorError, match="not listed"):
        VectorSet(vdir, ["dpo.*"], validate=False)
    (vdir / "kl/extra.json").unlink()
    (vdir / "kl/estimator.json").unlink()
    with pytest.raises(VectorError, match="missing"):
        VectorSet(vdir, ["dpo.*"], validate=False)


def _break_schema(vdir):
    doc = json.loads((vdir / "kl/estimator.json").read_bytes())
    doc["testGroups"][0]["tests"][0]["result"] = "maybe"
    (vdir / "kl/estimator.json").write_bytes(serialize(doc))
    _refresh_manifest(vdir)


def test_schema_validation_only_when_asked(vdir, capsys):
    _break_schema(vdir)
    assert sum(1 for _ in VectorSet(vdir, validate=False).cases("kl.*")) > 0   # lazy: sha256 and JSON only
    vs = VectorSet(vdir, validate=True, eager=False)                            # lazy, validated on access
    assert sum(1 for _ in vs.cases("dpo.*")) > 0
    with pytest.raises(VectorError) as info:
        list(vs.cases("kl.*"))
    assert info.value.where == "$.testGroups[0].tests[0].result"
    with pytest.raises(VectorError, match="schema"):
        VectorSet(vdir)                                                         # the default: every file at once
    assert cli.main(["vectors", "lint", "--vectors", str(vdir)]) == 2           # lint still validates everything
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "kl/estimator.json" in err[0] and "schema" in err[0]


def test_lint_validates_a_file_no_check_selects(vdir, capsys):
    _break_schema(vdir)
    argv = ["--vectors", str(vdir)]
    assert cli.main(["check", "--backend", "numpy", "--objective", "dpo.loss", "--quiet", *argv]) == 0
    assert cli.main(["vectors", "lint", *argv]) == 2
    assert "schema" in capsys.readouterr().err


def test_a_file_whose_objective_is_not_its_path_is_refused(vdir):
    doc = json.loads((vdir / "kl/estimator.json").read_bytes())
    doc["objective"] = "kl.other"
    (vdir / "kl/estimator.json").write_bytes(serialize(doc))
    _refresh_manifest(vdir)
    vs = VectorSet(vdir, validate=False)
    assert sum(1 for _ in vs.cases("dpo.*")) > 0
    with pytest.raises(VectorError) as info:
        list(vs.cases("kl.*"))
    assert info.value.where == "$.objective" and "kl.estimator" in info.value.problem


def test_the_cli_reads_only_the_selected_file(vdir, capsys):
    _corrupt(vdir, "dpo/loss.json")
    _corrupt(vdir, "dpo/loss.cert.json")
    argv, uid = ["--vectors", str(vdir)], _kl_uid(vdir)
    assert cli.main(["check", "--backend", "numpy", "--objective", "kl.estimator", "--quiet", *argv]) == 0
    assert cli.main(["check", "--backend", "numpy", "--uid", uid, "--quiet", *argv]) == 0
    assert cli.main(["show", uid, *argv]) == 0
    assert cli.main(["cite", uid, *argv]) == 0
    out = capsys.readouterr().out
    assert uid in out and "certified to" in out
    assert cli.main(["check", "--backend", "numpy", "--objective", "dpo.loss", "--quiet", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dpo/loss.json" in err[0] and "sha256" in err[0]


def test_a_bad_target_or_selection_is_reported_before_any_vector_file_is_read(vdir, capsys):
    for stem in OBJECTIVES:
        _corrupt(vdir, f"{stem}.json")
    argv = ["--vectors", str(vdir)]
    assert cli.main(["check", "--target", "no/such/file.py:T", *argv]) == 2
    err = capsys.readouterr().err
    assert "no/such/file.py" in err and "sha256" not in err
    assert cli.main(["check", "--backend", "numpy", "--objective", "nothing.*", *argv]) == 2
    assert capsys.readouterr().err.startswith("lossproof: error: no vector matched")
    assert cli.main(["check", "--backend", "numpy", "--objective", "dpo.*", "--uid", "kl.estimator:0", *argv]) == 2
    assert capsys.readouterr().err.startswith("lossproof: error: no vector matched")
    assert cli.main(["show", "nothing.here:0000000000000000", *argv]) == 2
    assert "no vector with uid" in capsys.readouterr().err
