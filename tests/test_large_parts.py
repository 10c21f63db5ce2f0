"""The bulky tests of an objective (flagged ``Large``, or a long line) live in ``<name>.large.json.gz`` (conformance/vectors/format.py):
the split is lossless, canonical and checked; a selection reads the compressed part only when it
needs one of its tests; certificates cover both parts; and the set keeps DESIGN §5's size budget."""
import gzip
import json
import shutil

import pytest

from lossproof.conformance import catalog, cli
from lossproof.conformance.generate import first_difference
from lossproof.conformance.vectors import certificates
from lossproof.conformance.vectors.format import (LARGE_FLAG, MANIFEST, is_bulky, content, is_large, large_path_for, manifest_bytes,
                                        merge_large, serialize, split_large, stored)
from lossproof.conformance.vectors.lint import lint
from lossproof.conformance.vectors.load import VectorError, VectorSet, default_dir

STEM = "distill/hinton"
BUDGET_BYTES = 40_000_000     # DESIGN §5: vectors/, certificates included


@pytest.fixture
def vdir(tmp_path):
    """A copy of one split objective (main part, Large part, certificate) with its own manifest."""
    (tmp_path / "distill").mkdir()
    for suffix in (".json", ".large.json.gz", ".cert.json"):
        shutil.copy(default_dir() / f"{STEM}{suffix}", tmp_path / f"{STEM}{suffix}")
    _refresh_manifest(tmp_path)
    return tmp_path


def _refresh_manifest(vdir):
    files = {p.relative_to(vdir).as_posix(): content(p.name, p.read_bytes())
             for p in vdir.rglob("*.json*") if p.name != MANIFEST}
    (vdir / MANIFEST).write_bytes(manifest_bytes(files))


def _uids(vdir, suffix):
    doc = json.loads(content(suffix, (vdir / f"{STEM}{suffix}").read_bytes()))
    return [t["uid"] for g in doc["testGroups"] for t in g["tests"]]


def test_the_bundled_set_is_within_its_size_budget():
    total = sum(p.stat().st_size for p in default_dir().rglob("*") if p.is_file())
    assert total < BUDGET_BYTES, f"vectors/ holds {total:,} bytes, over DESIGN §5's {BUDGET_BYTES:,}"


def test_every_large_test_is_in_a_large_part_and_the_split_is_lossless():
    vs = VectorSet(validate=False)
    split = [rel for rel in vs.files if vs.large_part(rel)]
    assert len(split) >= 12          # distillation, GRPO aggregation and loss, Proximal KL
    for rel in vs.files:
        parts = dict(vs.parts(rel))
        main, large = parts[rel], parts.get(vs.large_part(rel))
        assert not any(is_bulky(t) or LARGE_FLAG in t["flags"] for g in main["testGroups"] for t in g["tests"]), rel
        if large is not None:
            assert all(is_bulky(t) for g in large["testGroups"] for t in g["tests"]), rel
            # merging restores the one file the generator builds: the same tcIds, groups and bytes
            assert split_large(merge_large(main, large)) == (main, large)
            assert serialize(merge_large(main, large)) == serialize(vs.files[rel])
        tcids = [t["tcId"] for g in vs.files[rel]["testGroups"] for t in g["tests"]]
        assert tcids == list(range(1, len(tcids) + 1)) == list(range(1, vs.files[rel]["numberOfTests"] + 1))


def test_a_compressed_part_is_listed_by_the_sha256_of_its_content(vdir):
    rel = large_path_for(f"{STEM}.json")
    manifest = json.loads((vdir / MANIFEST).read_bytes())["files"]
    data = (vdir / rel).read_bytes()
    assert is_large(rel) and data[:2] == b"\x1f\x8b" and gzip.decompress(data) != data
    assert manifest[rel] == VectorSet(vdir).sha256(rel) != VectorSet(vdir).sha256(f"{STEM}.json")
    # another compressor's bytes of the same content: same manifest, same generate --check verdict
    (vdir / rel).write_bytes(gzip.compress(gzip.decompress(data), compresslevel=1))
    assert lint(VectorSet(vdir)) == []


def test_a_selection_reads_the_large_part_only_for_its_tests(vdir):
    small, large = _uids(vdir, ".json")[0], _uids(vdir, ".large.json.gz")[0]
    (vdir / f"{STEM}.large.json.gz").write_bytes(gzip.compress(b"{}"))     # content no longer matches the manifest
    vs = VectorSet(vdir, validate=False)
    assert vs.by_uid(small).uid == small and vs.version(f"{STEM}.json") == vs.version()
    for access in (lambda: vs.by_uid(large), lambda: list(vs.cases()), lambda: vs.files[f"{STEM}.json"]):
        with pytest.raises(VectorError) as info:
            access()
        assert info.value.file.endswith(".large.json.gz") and "sha256" in info.value.problem


def test_a_damaged_gzip_stream_is_one_error_naming_the_file(vdir, capsys):
    rel = f"{STEM}.large.json.gz"
    (vdir / rel).write_bytes((vdir / rel).read_bytes()[:100])
    with pytest.raises(VectorError) as info:
        VectorSet(vdir)
    assert info.value.file.endswith(rel) and "gzip" in info.value.problem
    assert cli.main(["vectors", "lint", "--vectors", str(vdir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and rel in err[0]


def test_lint_refuses_a_large_test_in_the_main_part(vdir):
    main = json.loads((vdir / f"{STEM}.json").read_bytes())
    large = json.loads(gzip.decompress((vdir / f"{STEM}.large.json.gz").read_bytes()))
    merged = merge_large(main, large)
    (vdir / f"{STEM}.json").write_bytes(serialize(merged))                 # everything in the main part
    (vdir / f"{STEM}.large.json.gz").write_bytes(stored(".gz", serialize(large)))
    _refresh_manifest(vdir)
    problems = lint(VectorSet(vdir))
    assert any("hinton.json: $: not in canonical formatting or split" in p for p in problems), problems


def test_a_large_part_without_its_vector_file_is_refused(vdir):
    (vdir / f"{STEM}.json").unlink()
    (vdir / f"{STEM}.cert.json").unlink()
    _refresh_manifest(vdir)
    with pytest.raises(VectorError, match="a Large part without its vector file"):
        VectorSet(vdir)


def test_one_certificate_covers_both_parts(vdir):
    vs = VectorSet(vdir)
    cert = json.loads(vs.certificates[f"{STEM}.cert.json"])
    assert cert["largeVectors"] == f"{STEM}.large.json.gz"
    assert cert["largeVectorsSha256"] == vs.sha256(f"{STEM}.large.json.gz")
    assert cert["numberOfVectors"] == sum(1 for c in vs.cases() if "expected" in c.test)
    large = vs.by_uid(_uids(vdir, ".large.json.gz")[0])
    assert certificates.summary(vs, large).startswith("certified")
    # the same certificate with the Large part's binding changed is stale for every uid
    stale = {**cert, "largeVectorsSha256": "0" * 64}
    (vdir / f"{STEM}.cert.json").write_text(json.dumps(stale))
    _refresh_manifest(vdir)
    vs = VectorSet(vdir)
    assert certificates.summary(vs, vs.by_uid(_uids(vdir, ".json")[0])).startswith("no certificate")


def test_generate_check_compares_content_and_finds_a_stale_part(tmp_path):
    spec = catalog.get("distill.hinton")
    files = {rel: content(rel, (default_dir() / rel).read_bytes())
             for rel in (spec.vector_file, large_path_for(spec.vector_file))}
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(gzip.compress(data, compresslevel=1) if is_large(rel) else data)
    (tmp_path / MANIFEST).write_bytes(manifest_bytes(files))
    assert first_difference(tmp_path, files) is None
    (tmp_path / "distill/extra.large.json.gz").write_bytes(b"")
    assert "extra.large.json.gz: not produced by the generator" in first_difference(tmp_path, files)
