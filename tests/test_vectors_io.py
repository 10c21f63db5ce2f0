"""Loading, linting and rejecting vector directories; the CLI's exit statuses."""
import json
import shutil

import pytest

from lossproof.conformance import cli, generate
from lossproof.conformance._io import write_tree
from lossproof.conformance.vectors import versions
from lossproof.conformance.vectors.format import MANIFEST, manifest_bytes, serialize
from lossproof.conformance.vectors.lint import lint
from lossproof.conformance.vectors.load import VectorError, VectorSet, default_dir


@pytest.fixture(scope="module")
def kl_files():
    return generate.generate(["kl"], workers=1)


@pytest.fixture
def vdir(tmp_path, kl_files):
    write_tree(tmp_path, kl_files, last=MANIFEST)
    return tmp_path


def _rewrite(vdir, rel, data: bytes, fix_manifest=True):
    (vdir / rel).write_bytes(data)
    if fix_manifest:
        files = {p.relative_to(vdir).as_posix(): p.read_bytes() for p in vdir.rglob("*.json")}
        (vdir / MANIFEST).write_bytes(manifest_bytes(files))


def test_generation_is_deterministic(kl_files):
    assert generate.generate(["kl"], workers=1) == kl_files


def test_clean_directory_loads_and_lints(vdir):
    vs = VectorSet(vdir)
    assert lint(vs) == []
    counts = vs.counts()["kl.estimator"]
    assert counts["valid"] >= 50 and counts["invalid"] >= 5


def _error(vdir) -> VectorError:
    with pytest.raises(VectorError) as info:
        VectorSet(vdir)
    return info.value


def test_not_json(vdir):
    _rewrite(vdir, "kl/estimator.json", b"{ not json")
    err = _error(vdir)
    assert err.file.endswith("kl/estimator.json") and "not valid JSON" in err.problem


def test_truncated_file_fails_the_hash(vdir):
    data = (vdir / "kl/estimator.json").read_bytes()
    (vdir / "kl/estimator.json").write_bytes(data[: len(data) // 2])
    err = _error(vdir)
    assert "sha256" in err.problem


def test_schema_violation_names_the_json_path(vdir):
    doc = json.loads((vdir / "kl/estimator.json").read_bytes())
    doc["testGroups"][0]["tests"][0]["result"] = "maybe"
    _rewrite(vdir, "kl/estimator.json", serialize(doc))
    err = _error(vdir)
    assert err.where == "$.testGroups[0].tests[0].result"


def test_unknown_flag(vdir):
    doc = json.loads((vdir / "kl/estimator.json").read_bytes())
    doc["testGroups"][0]["tests"][0]["flags"] = ["NoSuchFlag"]
    _rewrite(vdir, "kl/estimator.json", serialize(doc))
    err = _error(vdir)
    assert "NoSuchFlag" in err.problem and err.where.endswith(".flags")


def test_missing_and_unlisted_files(vdir):
    shutil.copy(vdir / "kl/estimator.json", vdir / "kl/extra.json")
    assert "not listed" in _error(vdir).problem
    (vdir / "kl/extra.json").unlink()
    (vdir / "kl/estimator.json").unlink()
    assert "missing" in _error(vdir).problem


def test_missing_manifest(vdir):
    (vdir / MANIFEST).unlink()
    assert "MANIFEST" in str(_error(vdir))


def test_lint_finds_duplicate_uid_and_count(vdir):
    doc = json.loads((vdir / "kl/estimator.json").read_bytes())
    tests = doc["testGroups"][0]["tests"]
    tests[1]["uid"] = tests[0]["uid"]
    doc["numberOfTests"] += 1
    _rewrite(vdir, "kl/estimator.json", serialize(doc))
    problems = "\n".join(lint(VectorSet(vdir)))
    assert "duplicate" in problems and "numberOfTests" in problems and "content hash" in problems


def test_lint_finds_non_canonical_formatting(vdir):
    doc = json.loads((vdir / "kl/estimator.json").read_bytes())
    _rewrite(vdir, "kl/estimator.json", json.dumps(doc).encode())
    assert any("canonical" in p for p in lint(VectorSet(vdir)))


def test_lint_finds_non_representable_low_precision_input(vdir):
    doc = json.loads((vdir / "kl/estimator.json").read_bytes())
    test = next(t for g in doc["testGroups"] for t in g["tests"] if "bfloat16" in t["dtypes"])
    test["dtypes"] = ["float64", "float32", "bfloat16"]
    test["inputs"]["logp"][0] = 0.1
    _rewrite(vdir, "kl/estimator.json", serialize(doc))
    problems = "\n".join(lint(VectorSet(vdir)))
    assert "not exactly representable in float32" in problems


@pytest.mark.parametrize("argv", [
    ["vectors", "lint"], ["show", "kl.estimator:0000000000000000"], ["check", "--backend", "nope"],
    ["check", "--target", "no/such/file.py:T"], ["check", "--dtype", "float8"],
])
def test_cli_usage_and_input_errors_exit_2_with_one_line(vdir, argv, capsys):
    if argv == ["vectors", "lint"]:
        (vdir / "kl/estimator.json").write_bytes(b"[")
    code = cli.main(argv + ["--vectors", str(vdir)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("lossproof: error:") and "Traceback" not in err[0]


def test_generate_check_detects_a_changed_byte(tmp_path, kl_files, monkeypatch, capsys):
    monkeypatch.setattr(generate, "available_families", lambda: ["kl"])
    write_tree(tmp_path, kl_files, last=MANIFEST)
    assert cli.main(["vectors", "generate", "--check", "--quiet", "--workers", "1", "--vectors", str(tmp_path)]) == 0
    p = tmp_path / "kl/estimator.json"
    p.write_bytes(p.read_bytes().replace(b'"comment":"random', b'"comment":"Random', 1))
    assert cli.main(["vectors", "generate", "--check", "--quiet", "--workers", "1", "--vectors", str(tmp_path)]) == 1
    assert "kl/estimator.json" in capsys.readouterr().err


def test_show_and_cite(vdir, capsys):
    uid = next(VectorSet(vdir).cases()).uid
    assert cli.main(["show", uid, "--vectors", str(vdir)]) == 0
    assert cli.main(["cite", uid, "--bibtex", "--vectors", str(vdir)]) == 0
    out = capsys.readouterr().out
    assert uid in out and "@misc{" in out


def test_a_non_decimal_expected_value_is_a_schema_error(vdir):
    doc = json.loads((vdir / "kl/estimator.json").read_bytes())
    test = doc["testGroups"][0]["tests"][0]
    test["expected"]["value"][0] = "1/3"
    _rewrite(vdir, "kl/estimator.json", serialize(doc))
    err = _error(vdir)
    assert err.where == "$.testGroups[0].tests[0].expected.value" and "decimal" in err.problem


def test_lint_refuses_a_changed_case_under_a_released_version(vdir):
    """A case whose expected digits change keeps its uid (same inputs), so only the version
    rule notices: the vector set must not claim the version whose cases it no longer holds."""
    doc = json.loads((vdir / "kl/estimator.json").read_bytes())
    test = next(t for g in doc["testGroups"] for t in g["tests"] if t["result"] == "valid")
    name = next(iter(test["expected"]))
    value = test["expected"][name]
    while isinstance(value, list):
        value = value[0]
    flipped = value[:-1] + ("1" if value[-1] != "1" else "2")
    test["expected"][name] = json.loads(json.dumps(test["expected"][name]).replace(value, flipped, 1))
    _rewrite(vdir, "kl/estimator.json", serialize(doc))
    problems = lint(VectorSet(vdir))
    assert len(problems) == 1 and f"differ from those released as vector set {versions.CURRENT}" in problems[0]


def test_generate_one_family_keeps_the_others_and_the_whole_manifest(tmp_path):
    """``vectors generate --family kl`` rewrites kl's files only; the manifest still lists the
    other families' files as they are on disk, so the set stays what a full run writes."""
    shutil.copytree(default_dir(), tmp_path / "v")
    other = tmp_path / "v/reward/pairwise.json"
    other.write_bytes(other.read_bytes().replace(b'"comment":"', b'"comment":"x', 1))
    (tmp_path / "v/kl/estimator.json").unlink()
    argv = ["vectors", "generate", "--quiet", "--family", "kl", "--workers", "1", "--vectors", str(tmp_path / "v")]
    assert cli.main(argv) == 0
    assert (tmp_path / "v/kl/estimator.json").read_bytes() == (default_dir() / "kl/estimator.json").read_bytes()
    assert b'"comment":"x' in other.read_bytes()
    manifest = json.loads((tmp_path / "v" / MANIFEST).read_text())["files"]
    assert manifest.keys() == json.loads((default_dir() / MANIFEST).read_text())["files"].keys()
    assert cli.main(argv[:2] + ["--check"] + argv[2:]) == 0
