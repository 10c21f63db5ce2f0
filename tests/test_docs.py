"""`lossproof docs build [--check]` (conformance/docs/): every generated page, table, figure and
console session of docs/ and README.md is up to date and byte-stable, the check names every
stale file, and an artifact whose inputs are missing is reported as skipped, with the reason.

The slow artifacts (the 50-digit theorem, the console sessions, the kill table, the adapters'
runs) are left to `lossproof docs build --check` in .ci/run; everything else is rebuilt here."""
from __future__ import annotations

import io
import re
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib", reason="the docs build draws its figures with matplotlib (in the [test] extra)")

from lossproof.conformance import catalog, cli  # noqa: E402
from lossproof.conformance.docs import DocsError, blocks, build, families, figures, sessions  # noqa: E402
from lossproof.conformance.docs.context import Context  # noqa: E402
from lossproof.conformance.targets import PEERS  # noqa: E402

ROOT = build.ROOT
FAST_FIGURES = [a for a in build.ARTIFACTS if a.kind == "figure" and not a.slow]
GENERATED = {a.path for a in build.ARTIFACTS if a.kind == "generated"}   # written whole from runs
# What a fast build reads from the checkout besides docs/.
CHECKOUT = ("README.md", "benchmarks/results")


def _copy_checkout(root: Path, *, without=()) -> Path:
    shutil.copytree(ROOT / "docs", root / "docs")
    for rel in CHECKOUT:
        if rel not in without:
            (shutil.copytree if (ROOT / rel).is_dir() else shutil.copy)(ROOT / rel, root / rel)
    return root


def _prose(text: str) -> str:
    """A page without its generated blocks: what is written by hand."""
    return re.sub(r"^<!-- generated:([\w.-]+) -->\n.*?^<!-- /generated:\1 -->", "", text, flags=re.S | re.M)


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory):
    """A copy of the checkout's docs with the fast figures deleted, rebuilt from scratch (fast artifacts)."""
    root = _copy_checkout(tmp_path_factory.mktemp("root"))
    for art in FAST_FIGURES:
        (root / art.path).unlink(missing_ok=True)
    return root, build.run(root, include_slow=False)


def test_a_build_into_a_temp_dir_equals_the_committed_files(rebuilt):
    root, outcomes = rebuilt
    assert [o.path for o in outcomes] == [a.path for a in build.ARTIFACTS]
    assert {o.path for o in outcomes if o.status == "left out"} == {a.path for a in build.ARTIFACTS if a.slow}
    assert not [o for o in outcomes if o.status == "skipped" or o.skipped], "a fast artifact lacked its inputs"
    for art in build.ARTIFACTS:
        if art.slow:
            continue
        fresh, committed = (root / art.path).read_bytes(), (ROOT / art.path).read_bytes()
        # a figure drawn by another matplotlib/zlib may differ in bytes but not in content
        assert build.same(art, committed, fresh), f"{art.path} is out of date: run 'lossproof docs build'"


def test_a_second_build_rewrites_nothing(rebuilt):
    root, _ = rebuilt
    again = build.run(root, include_slow=False)
    assert {o.status for o in again} == {"unchanged", "left out"}


def test_worker_processes_build_what_one_process_builds(rebuilt):
    root, _ = rebuilt
    page = root / "docs" / "kl.md"
    page.write_text(page.read_text(encoding="utf-8").replace("0.18232155679395456449", "0.1823"), encoding="utf-8")
    outcomes = build.run(root, check=True, include_slow=False, workers=2)
    assert [o.path for o in outcomes] == [a.path for a in build.ARTIFACTS]      # the registry's order
    assert {o.path: o.status for o in outcomes if o.status != "unchanged"} == {
        **{a.path: "left out" for a in build.ARTIFACTS if a.slow}, "docs/kl.md": "stale"}
    assert build.run(root, include_slow=False, workers=2)[[a.path for a in build.ARTIFACTS].index("docs/kl.md")].status \
        == "written"
    assert "0.18232155679395456449" in page.read_text(encoding="utf-8")


def test_figures_are_byte_stable_and_carry_only_a_content_digest(rebuilt):
    root, _ = rebuilt
    ctx = Context(ROOT)
    for art in FAST_FIGURES[:2]:
        again = art.produce(ctx, None, art.path).data
        assert again == (root / art.path).read_bytes(), f"{art.path}: two builds differ"
    for art in FAST_FIGURES:
        data = (root / art.path).read_bytes()
        chunks = _chunk_types(data)
        assert b"tIME" not in chunks and b"iTXt" not in chunks and b"zTXt" not in chunks
        assert _text_keys(data) == [figures.CONTENT_KEY]
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", figures.png_content(data))


def test_every_figure_is_shown_on_its_page_and_every_article_example_is_tabled():
    pages = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md")}
    for art in build.ARTIFACTS:
        if art.kind == "figure":
            rel = art.path.removeprefix("docs/")
            assert f"]({rel})" in pages[art.shown_on], f"{rel} is not shown on {art.shown_on}"
    for page in pages.values():
        for target in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page):
            assert (ROOT / "docs" / target).is_file(), target
    tabled = "\n".join(pages.values())
    for case in Context(ROOT).vs.cases():
        if case.test["provenance"]["kind"] == "article":
            assert f"`{case.uid}`" in tabled, f"{case.uid} (article example) is in no page"
    for spec in catalog.OBJECTIVES:
        for uid in spec.docs_examples:
            assert f"`{uid}`" in pages[spec.page.removeprefix("docs/")], f"{uid} (an example of {spec.id})"


def test_every_console_session_is_generated():
    """A `$ lossproof` (or `$ python`) line outside a generated block would be pasted by hand
    and drift; every session of the registry is shown exactly once."""
    shown = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        hand = re.findall(r"^\$ .*", _prose(text), re.M)
        assert not hand, f"{path.relative_to(ROOT)}: console session pasted by hand: {hand[0]}"
        shown += [n for n in blocks.read_blocks(text) if n in sessions.SESSIONS]
    assert sorted(shown) == sorted(sessions.SESSIONS)


def test_the_prose_cites_references_by_key():
    text = (ROOT / "docs" / "references.md").read_text(encoding="utf-8")
    anchors = set(re.findall(r'<a id="([\w-]+)"></a>', text))
    assert set(families.SOURCE_ARTICLES.values()) <= anchors
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        page = path.read_text(encoding="utf-8")
        for key in re.findall(r"references\.md#([\w-]+)", page):
            assert key in anchors, f"{path.name} cites {key!r}, which docs/references.md does not hold"
        if path.name == "references.md" or str(path.relative_to(ROOT)) in GENERATED:
            continue
        for stale in (r"\barticle[ -]00\d", r"\d{3}_[0-9a-f]{16}\.txt", r"\bthe issue's\b"):
            assert not re.search(stale, _prose(page), re.I), f"{path.name}: {stale!r} in the prose"


def test_a_stale_block_fails_the_check_naming_the_file(tmp_path, monkeypatch, capsys):
    _copy_checkout(tmp_path)
    page = tmp_path / "docs" / "kl.md"
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace("0.18232155679395456449", "0.18232155679395456450"), encoding="utf-8")
    monkeypatch.setattr(build, "ROOT", tmp_path)
    assert cli.main(["docs", "build", "--check", "--fast", "--quiet"]) == 1
    assert "docs/kl.md: out of date" in capsys.readouterr().err
    assert page.read_text(encoding="utf-8") != text          # --check writes nothing
    assert cli.main(["docs", "build", "--fast", "--quiet"]) == 0
    assert page.read_text(encoding="utf-8") == text           # the build restores the digits
    assert cli.main(["docs", "build", "--check", "--fast", "--quiet"]) == 0


def test_missing_inputs_are_reported_as_skipped_with_the_reason(tmp_path, monkeypatch, capsys):
    _copy_checkout(tmp_path, without=("benchmarks/results",))
    monkeypatch.setattr(build, "ROOT", tmp_path)
    assert cli.main(["docs", "build", "--check", "--fast", "--quiet"]) == 0
    captured = capsys.readouterr()
    for path in ("docs/performance.md", "docs/figures/performance_time.png", "docs/figures/performance_memory.png"):
        assert re.search(rf"{re.escape(path)}: skipped.*benchmarks/results/\S+\.json not found", captured.err), path
    assert "3 skipped (inputs missing)" in captured.out
    # the kill table is rendered from its record, docs/mutation.json, without tests/mutants (which
    # this copy lacks); without the record it is skipped
    art = next(a for a in build.ARTIFACTS if a.path == "docs/mutation.md")
    assert art.produce(Context(tmp_path), None, art.path).data == (ROOT / art.path).read_bytes()
    (tmp_path / "docs" / "mutation.json").unlink()
    produced = art.produce(Context(tmp_path), None, art.path)
    assert produced.data is None and "docs/mutation.json not found" in produced.skipped[0]


def test_usage_errors_exit_2(tmp_path, monkeypatch, capsys):
    _copy_checkout(tmp_path)
    page = tmp_path / "docs" / "dpo.md"
    page.write_text(page.read_text(encoding="utf-8").replace("<!-- /generated:examples -->\n", ""),
                    encoding="utf-8")
    monkeypatch.setattr(build, "ROOT", tmp_path)
    assert cli.main(["docs", "build", "--check", "--fast"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "docs/dpo.md" in err and "examples" in err
    monkeypatch.setattr(build, "ROOT", tmp_path / "nowhere")
    assert cli.main(["docs", "build"]) == 2
    with pytest.raises(SystemExit) as exc:
        cli.main(["docs"])
    assert exc.value.code == 2


def test_docs_list_names_every_artifact_and_what_it_needs(capsys):
    assert cli.main(["docs", "list"]) == 0
    out = capsys.readouterr().out
    for art in build.ARTIFACTS:
        assert art.path in out
    assert f"{', '.join(PEERS)}, torch" in out and "tests/mutants" in out


def _session(tmp_path, *lines, status=0) -> str:
    code = "; ".join(f"print({line!r})" for line in lines)
    return sessions._run(sessions.Command(f'python -c "{code}"', status), tmp_path, "test")


def test_a_session_normalises_timings_and_keeps_what_it_is_told(tmp_path):
    out = _session(tmp_path, "a", "1 target(s), 12.5 s", "3 passed, 1 skipped in 6.39s")
    assert out.splitlines()[1:] == ["a", "1 target(s), … s", "3 passed, 1 skipped in …s"]
    code = "; ".join(f"print({n})" for n in range(5))
    first = sessions._run(sessions.Command(f'python -c "{code}" | head -n 2'), tmp_path, "test")
    last = sessions._run(sessions.Command(f'python -c "{code}" | tail -n 1'), tmp_path, "test")
    assert first.splitlines()[1:] == ["0", "1"] and last.splitlines()[1:] == ["4"]
    with pytest.raises(DocsError, match="exited with status 0, expected 1"):
        _session(tmp_path, "a", status=1)
    with pytest.raises(DocsError, match="only '| head -n K'"):
        sessions._run(sessions.Command('python -c "print(1)" | sort'), tmp_path, "test")
    with pytest.raises(DocsError, match="lossproof or python"):
        sessions._run(sessions.Command("ls"), tmp_path, "test")


def test_sessions_compare_loosely_only_where_machines_differ():
    old = "grpo.advantages   56   0 │ float32 0.044  float64 0.1\nconformance: 56 passed"
    assert sessions.equivalent(old, old.replace("0.044", "0.047").replace("0.1\n", "0.12\n"))
    assert not sessions.equivalent(old, old.replace("56 passed", "55 passed"))
    assert not sessions.equivalent(old, old.replace("float64 0.1", "bfloat16 0.1"))


def test_a_shown_session_is_what_the_command_prints_now():
    """One cheap session end to end (the build runs them all): the README's `lossproof show`."""
    shown = blocks.read_blocks((ROOT / "README.md").read_text(encoding="utf-8"))["show-softmax"]
    assert sessions.equivalent(shown, sessions.render(ROOT, "show-softmax"))


def test_example_targets_are_the_files_the_sessions_run():
    page = blocks.read_blocks((ROOT / "docs" / "validate-your-implementation.md").read_text(encoding="utf-8"))
    for block, session in (("first-target", "check-first-target"), ("fixed-target", "check-fixed-target")):
        workdir = ROOT / sessions.SESSIONS[session].workdir
        assert (workdir / "my_grpo.py").read_text(encoding="utf-8").rstrip() in page[block]


def test_replace_blocks_keeps_everything_outside_the_markers():
    text = ("# Title\nprose with `<!-- generated:NAME -->` in running text\n"
            "<!-- generated:a -->\nold\n<!-- /generated:a -->\nmiddle\n"
            "<!-- generated:b -->\n<!-- /generated:b -->\nend\n")
    out = blocks.replace_blocks(text, {"a": "new A", "b": "\nnew B\n"})
    assert out == ("# Title\nprose with `<!-- generated:NAME -->` in running text\n"
                   "<!-- generated:a -->\nnew A\n<!-- /generated:a -->\nmiddle\n"
                   "<!-- generated:b -->\nnew B\n<!-- /generated:b -->\nend\n")
    assert blocks.replace_blocks(out, {"a": "new A", "b": "new B"}) == out
    assert blocks.read_blocks(out) == {"a": "new A", "b": "new B"}


@pytest.mark.parametrize("text, producers, problem", [
    ("<!-- generated:a -->\nx\n", {"a": ""}, "no closing"),
    ("<!-- generated:a -->\n<!-- /generated:a -->\n", {}, "no producer"),
    ("<!-- generated:a -->\n<!-- /generated:a -->\n<!-- generated:a -->\n<!-- /generated:a -->\n", {"a": ""},
     "twice"),
    ("text\n", {"a": ""}, "is missing"),
    ("<!-- /generated:a -->\n", {"a": ""}, "not open"),
    ("<!-- generated:a -->\n<!-- generated:b -->\n", {"a": "", "b": ""}, "inside"),
])
def test_replace_blocks_rejects_malformed_pages(text, producers, problem):
    with pytest.raises(DocsError, match=problem):
        blocks.replace_blocks(text, producers, "page.md")


def test_a_figure_is_compared_by_content_when_its_bytes_differ():
    from PIL import Image, PngImagePlugin
    art = FAST_FIGURES[0]
    data = (ROOT / art.path).read_bytes()
    digest = figures.png_content(data)
    info = PngImagePlugin.PngInfo()
    info.add_text(figures.CONTENT_KEY, digest)
    buf = io.BytesIO()
    Image.open(io.BytesIO(data)).save(buf, format="png", pnginfo=info, compress_level=1)
    other_bytes = buf.getvalue()
    assert other_bytes != data and build.same(art, data, other_bytes)
    changed = io.BytesIO()
    info = PngImagePlugin.PngInfo()
    info.add_text(figures.CONTENT_KEY, "sha256:" + "0" * 64)
    Image.open(io.BytesIO(data)).save(changed, format="png", pnginfo=info)
    assert not build.same(art, data, changed.getvalue())
    assert not build.same(art, None, data)
    page = next(a for a in build.ARTIFACTS if a.kind == "page")
    assert not build.same(page, b"a", b"b")


def test_content_digest_sees_data_not_pixels():
    def draw(y, dpi):
        fig = figures.new_figure(3, 2)
        fig.set_dpi(dpi)
        fig.subplots().plot([0, 1, 2], y, color="#1f77b4", label="y")
        fig.canvas.draw()
        return figures.content_digest(fig)

    assert draw([0, 1, 4], 100) == draw([0, 1, 4], 100)
    assert draw([0, 1, 4], 100) != draw([0, 1, 5], 100)
    assert draw([0, 1, 4], 100) != draw([0, 1, 4], 50)


def test_digits_rounds_the_vector_strings_half_even():
    assert families.digits("0.55435524446852711172763269351724") == "0.55435524446852711173"
    assert families.digits("-1.0000000000000000000000000000000") == "-1.0000000000000000000"
    assert families.digits("0") == "0"
    assert families.digits("1.00000000000000000005", 20) == "1.0000000000000000000"


def test_the_package_imports_without_matplotlib(tmp_path):
    """matplotlib is the [docs] extra: the CLI (which imports the docs build) must load without
    it, and the build must say how to install it."""
    import subprocess
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from lossproof.conformance import cli\n"
            "from lossproof.conformance.docs import DocsError, figures\n"
            "try:\n    figures.require_matplotlib()\nexcept DocsError as err:\n    print(err)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'lossproof[docs]'" in out


def _chunk_types(data: bytes) -> list[bytes]:
    out, pos = [], 8
    while pos + 8 <= len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        out.append(data[pos + 4:pos + 8])
        pos += 12 + length
    return out


def _text_keys(data: bytes) -> list[str]:
    keys, pos = [], 8
    while pos + 8 <= len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        if data[pos + 4:pos + 8] == b"tEXt":
            keys.append(data[pos + 8:pos + 8 + length].split(b"\0", 1)[0].decode("latin-1"))
        pos += 12 + length
    return keys


def test_docs_pages_exist():
    for name in ("index.md", "distill.md", "kl.md", "dpo.md", "grpo.md", "proximal_kl.md", "vectors.md",
                 "validate-your-implementation.md", "references.md", "performance.md", "conventions.md",
                 "mutation.md", "distributed.md"):
        assert (ROOT / "docs" / name).is_file(), name
    assert Path(ROOT / "CITATION.cff").read_text().startswith("cff-version: 1.2.0")
