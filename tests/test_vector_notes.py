"""Bug knowledge in the vector files' notes (issue 36): every flag a generator defines names the
bug class it guards against (``bugType``), its effect and, where one was found, public reports of
the bug (``links``); the fields are optional in the format, so a file written before them still
loads, and ``VectorSet.note`` gives every field either way."""
from __future__ import annotations

import io
import json

import jsonschema
import pytest

from lossproof.conformance import generate, report
from lossproof.conformance.diagnose import Diagnosis
from lossproof.conformance._io import write_tree
from lossproof.conformance.generate.case import with_effect
from lossproof.conformance.vectors.format import MANIFEST, NOTE_KEYS, manifest_bytes, serialize
from lossproof.conformance.vectors.lint import lint
from lossproof.conformance.results import CaseResult
from lossproof.conformance.vectors.load import SCHEMA_DIR, VectorError, VectorSet

NOTE_SCHEMA = json.loads((SCHEMA_DIR / "vectors-1.json").read_text())["properties"]["notes"]["additionalProperties"]


def _all_notes():
    for family in generate.available_families():
        for flag, note in generate.family_module(family).NOTES.items():
            yield family, flag, with_effect(note)   # as written in the vector file


@pytest.mark.parametrize("family, flag, note", list(_all_notes()), ids=lambda x: x if isinstance(x, str) else "")
def test_every_flag_names_the_bug_it_guards_against(family, flag, note):
    jsonschema.validate(note, NOTE_SCHEMA)
    assert note.get("bugType") and note.get("effect"), f"{family} {flag}: no bugType or effect"
    assert note["effect"] != note["description"]


def test_links_point_at_public_reports():
    links = [link for _, _, note in _all_notes() for link in note.get("links", [])]
    assert len(links) >= 20
    assert all(link.startswith("https://github.com/") and ("/issues/" in link or "/pull/" in link) for link in links)


@pytest.fixture(scope="module")
def kl_files():
    return generate.generate(["kl"], workers=1)


def _directory(tmp_path, files):
    write_tree(tmp_path, files, last=MANIFEST)
    return VectorSet(tmp_path)


def test_generated_notes_carry_the_fields_in_canonical_order(tmp_path, kl_files):
    vs = _directory(tmp_path, kl_files)
    assert lint(vs) == []
    notes = vs.notes("kl.estimator")
    assert all(list(note) == [k for k in NOTE_KEYS if k in note] for note in notes.values())
    clamped = vs.note("kl.estimator", "Clamped")
    assert clamped["bugType"] == "clamp" and clamped["effect"] and clamped["links"] == []
    assert vs.note("kl.estimator", "Random")["links"]
    with pytest.raises(KeyError, match="no flag 'Nope'"):
        vs.note("kl.estimator", "Nope")


def _rewritten(files, edit):
    doc = json.loads(files["kl/estimator.json"])
    edit(doc["notes"])
    out = {**files, "kl/estimator.json": serialize(doc)}
    return {**out, MANIFEST: manifest_bytes(out)}


def test_a_file_written_before_the_fields_still_loads(tmp_path, kl_files):
    def strip(notes):
        for note in notes.values():
            for key in ("bugType", "effect", "links"):
                note.pop(key, None)
    vs = _directory(tmp_path, _rewritten(kl_files, strip))
    assert lint(vs) == []
    assert vs.note("kl.estimator", "Clamped") == {
        "bugType": None, "effect": None, "links": [], "category": "convention",
        "description": "Values beyond the clamp bound: the value is clipped and its gradient is zero."}


def test_serialising_puts_the_note_fields_in_canonical_order(kl_files):
    doc = json.loads(kl_files["kl/estimator.json"])
    doc["notes"] = {flag: dict(reversed(list(note.items()))) for flag, note in doc["notes"].items()}
    assert serialize(doc) == kl_files["kl/estimator.json"]


@pytest.mark.parametrize("edit, where", [
    (lambda notes: notes["Clamped"].update(bugType="typo"), "bugType"),
    (lambda notes: notes["Clamped"].update(links=["http://example.com/x"]), "links"),
    (lambda notes: notes["Clamped"].update(effect=""), "effect"),
])
def test_a_malformed_field_is_a_schema_error(tmp_path, kl_files, edit, where):
    with pytest.raises(VectorError) as info:
        _directory(tmp_path, _rewritten(kl_files, edit))
    assert "$.notes.Clamped" in str(info.value) and where in str(info.value)


def _run(uid, status, flags):
    return CaseResult(uid, "kl.estimator", "mine", "float64", "cpu", status, flags)


def test_a_diagnosis_names_the_note_of_the_flag_that_marks_its_cases_and_its_links():
    """The console's diagnosis block ends with the flag that marks most of the case-runs it
    explains and the fewest others (here ExtremeRatio: on both failing runs and no passing one;
    Random is on two passing ones too, Article on one failing run only), its bug class and the
    public reports its note links to."""
    results = [_run("kl.estimator:1", "fail", ["Random", "ExtremeRatio", "Article"]),
               _run("kl.estimator:2", "fail", ["Random", "ExtremeRatio"]),
               _run("kl.estimator:3", "pass", ["Random"]), _run("kl.estimator:4", "pass", ["Random"])]
    notes = {"kl.estimator": {
        "Random": {"bugType": "formula", "description": "Random log-probabilities.", "links": []},
        "Article": {"bugType": "formula", "description": "A number printed in the source article."},
        "ExtremeRatio": {"bugType": "clamp", "description": "Log ratios beyond 20.",
                         "links": ["https://github.com/verl-project/verl/issues/2928"]}}}
    d = Diagnosis("clamp", "mine", "kl.estimator", 2, "fails only where |log r| > 20", "e", "f", "r",
                  uids=["kl.estimator:1", "kl.estimator:2"])
    out = io.StringIO()
    report.print_diagnoses([d], out, results, notes)
    assert out.getvalue().splitlines()[-2:] == [
        "        flag: [ExtremeRatio] (clamp) Log ratios beyond 20.",
        "        reported: https://github.com/verl-project/verl/issues/2928"]
    out = io.StringIO()
    report.print_diagnoses([d], out)          # without the notes: the block as before
    assert out.getvalue().splitlines()[-1].startswith("        repro: ")
