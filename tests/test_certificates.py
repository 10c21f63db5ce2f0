"""Certified digits: the certificate files agree with a recomputation, tampered digits and too
wide enclosures are rejected naming the uid, list/show/cite read the certificates (and say so
when there is none), and the documented python-flint check runs."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from flint import arb

from lossproof.conformance import catalog, cli
from lossproof.conformance.vectors import certificates, certify
from lossproof.conformance.vectors.format import MANIFEST, manifest_bytes
from lossproof.conformance.vectors.load import VectorSet, default_dir
from lossproof.refimpl.certified import _ball

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = 4   # vectors per objective recomputed here; CI recomputes all (vectors certify --check)


@pytest.fixture(scope="module")
def bundled(bundled_vectors):
    return bundled_vectors


def _kl_dir(tmp_path: Path) -> Path:
    """A vector directory holding only kl.estimator and its certificate."""
    src = default_dir()
    files = {rel: (src / rel).read_bytes() for rel in ("kl/estimator.json", "kl/estimator.cert.json")}
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    (tmp_path / MANIFEST).write_bytes(manifest_bytes(files))
    return tmp_path


def _set_first_digit_string(path: Path, mutate) -> str:
    doc_text = path.read_text()
    lines = doc_text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("   {") and '"expected"' in line:
            test = json.loads(line.rstrip(","))
            values = test["expected"]["value"]
            j = next(k for k, v in enumerate(values) if v != "0")
            new = mutate(values[j])
            lines[i] = line.replace(json.dumps(values[j]), json.dumps(new), 1)
            path.write_text("\n".join(lines))
            return test["uid"]
    raise AssertionError("no expected value found")


def _refresh_manifest(vdir: Path):
    files = {p.relative_to(vdir).as_posix(): p.read_bytes() for p in vdir.rglob("*.json") if p.name != MANIFEST}
    (vdir / MANIFEST).write_bytes(manifest_bytes(files))


@pytest.mark.parametrize("objective", [o.id for o in catalog.OBJECTIVES])
def test_a_sample_of_every_objective_recomputes_to_its_stored_certificate(bundled, objective):
    """The certified reference (independent of refimpl.exact) proves the exact reference's
    printed digits of the first vectors of every objective, and the stored entries are what
    it computes now."""
    cases = [c for c in bundled.cases(objective) if "expected" in c.test][:SAMPLE]
    assert cases, f"{objective} has no vectors with expected numbers"
    stored = certificates.load(bundled, objective)
    assert stored is not None, f"{objective}: no current certificate (run 'lossproof vectors certify')"
    for case in cases:
        entry = certify.certify_case(case)
        assert "notCertified" not in entry, (case.uid, entry)
        assert entry == stored["vectors_certified"][case.uid]


def test_certify_check_passes_on_the_bundled_kl_vectors(tmp_path, capsys):
    vdir = _kl_dir(tmp_path)
    assert cli.main(["vectors", "certify", "--check", "--quiet", "--workers", "1", "--vectors", str(vdir)]) == 0
    assert "certificates up to date: 241/241" in capsys.readouterr().out


def test_a_tampered_digit_is_rejected_naming_the_uid(tmp_path, capsys):
    vdir = _kl_dir(tmp_path)
    last = {"9": "0"}

    def bump(s):   # change the last printed digit
        return s[:-1] + last.get(s[-1], str(int(s[-1]) + 1))

    uid = _set_first_digit_string(vdir / "kl/estimator.json", bump)
    _refresh_manifest(vdir)
    assert cli.main(["vectors", "certify", "--check", "--quiet", "--workers", "1", "--vectors", str(vdir)]) == 1
    err = capsys.readouterr().err
    assert uid in err and "outside its enclosure" in err


def test_a_too_wide_enclosure_is_not_a_certificate(bundled, monkeypatch):
    """At 64 bits no enclosure can prove 32 digits: the vector is reported not certified (the
    verdict is 'wide', never 'ok'), and --check then differs from the stored certificate."""
    case = next(c for c in bundled.cases("kl.estimator") if "expected" in c.test
                and c.conventions["kind"] == "k3" and any(v != "0" for v in c.test["expected"]["value"]))
    monkeypatch.setattr(certify, "PRECISIONS", (64,))
    entry = certify.certify_case(case)
    assert entry == {"notCertified": "enclosure wider than half a unit in the last printed digit at 64 bits"}
    with _ball.precision(53):
        assert certify.verdict("0.33333333333333333333333333333333", arb(1) / 3) == "wide"
    with _ball.precision(256):
        assert certify.verdict("0.33333333333333333333333333333333", arb(1) / 3) == "ok"
        assert certify.verdict("0.33333333333333333333333333333334", arb(1) / 3) == "wrong"


def test_a_rounding_tie_of_an_exact_value_is_decided_exactly():
    with _ball.precision(256):
        exact = arb(3) / 2                             # 1.5 printed to 1 digit: a tie
        assert certify.verdict("2", exact) == "ok" and certify.verdict("1", exact) == "ok"
        assert certify.verdict("3", exact) == "wrong"


def test_certificates_are_byte_stable_whatever_the_workers(bundled):
    one, _ = certify.certify(bundled, "kl.*", workers=1)
    two, _ = certify.certify(bundled, "kl.*", workers=2)
    assert one == two == {"kl/estimator.cert.json": bundled.certificates["kl/estimator.cert.json"]}


def test_list_show_and_cite_print_the_certificate(capsys):
    uid = "distill.softmax:b6309f9537961a6a"
    assert cli.main(["show", uid]) == 0
    assert cli.main(["cite", uid]) == 0
    assert cli.main(["cite", uid, "--bibtex"]) == 0
    assert cli.main(["cite", uid, "--latex"]) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r"certified to 32 digits \(arb, radius [0-9.e-]+\)", out)) == 4
    assert cli.main(["list"]) == 0
    assert re.search(r"distill\.softmax +\d+ +\d+ +\d+ +(\d+)/\1 ", capsys.readouterr().out)


def test_without_a_certificate_list_show_and_cite_say_so(tmp_path, capsys):
    vdir = _kl_dir(tmp_path)
    (vdir / "kl/estimator.cert.json").unlink()
    _refresh_manifest(vdir)
    uid = next(c.uid for c in VectorSet(vdir).cases() if "expected" in c.test)
    assert cli.main(["show", uid, "--vectors", str(vdir)]) == 0
    assert cli.main(["cite", uid, "--vectors", str(vdir)]) == 0
    assert cli.main(["list", "--vectors", str(vdir)]) == 0
    out = capsys.readouterr().out
    assert out.count("no certificate") == 2
    assert re.search(r"kl\.estimator +\d+ +\d+ +\d+ +- ", out)


def test_a_certificate_of_other_vector_bytes_is_not_shown(tmp_path, capsys):
    """A regenerated vector file makes its certificate stale: it is not printed as a proof."""
    vdir = _kl_dir(tmp_path)
    path = vdir / "kl/estimator.json"
    path.write_bytes(path.read_bytes().replace(b'"comment":"random', b'"comment":"Random', 1))
    _refresh_manifest(vdir)
    vs = VectorSet(vdir)
    assert certificates.load(vs, "kl.estimator") is None


def test_the_documented_python_flint_check_runs(monkeypatch, capsys):
    text = (ROOT / "docs/vectors.md").read_text()
    code = re.search(r"<!-- certificate-example -->\n```python\n(.*?)```", text, re.DOTALL).group(1)
    monkeypatch.chdir(ROOT)
    exec(compile(code, "docs/vectors.md", "exec"), {})  # noqa: S102 (the page's own snippet, run as a reader would)
    assert re.fullmatch(r"\d+ k3 values: every printed digit proven\n", capsys.readouterr().out)


def test_every_objective_has_a_listed_certificate(bundled):
    """setup.py copies vectors/ whole (hidden files aside) into the wheel, so a listed
    certificate file travels with its vector file."""
    assert sorted(bundled.certificates) == sorted(certificates.path_for(rel) for rel in bundled.files)
    assert not any(Path(rel).name.startswith(".") for rel in bundled.certificates)


def test_an_objective_glob_that_matches_nothing_is_a_usage_error(capsys):
    assert cli.main(["vectors", "certify", "--check", "--objective", "nope.*"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "matches no objective" in err[0]
