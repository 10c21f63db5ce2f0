"""`lossproof docs build [--check]` (conformance/docsgen.py): the generated tables and figures of
docs/ are up to date, byte-stable, and the check fails naming the first stale file.

The slow artifacts (the 50-digit theorem block of docs/proximal_kl.md and its figure) are left to
`lossproof docs build --check` in .ci/run; everything else is rebuilt here."""
from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from conformance import cli, docsgen  # noqa: E402

ROOT = docsgen.ROOT
FAST_FIGURES = [a for a in docsgen.ARTIFACTS if a.figure and not a.slow]


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory):
    """A copy of docs/ with the fast figures deleted, rebuilt from scratch (fast artifacts)."""
    root = tmp_path_factory.mktemp("root")
    shutil.copytree(ROOT / "docs", root / "docs")
    for art in FAST_FIGURES:
        (root / art.path).unlink(missing_ok=True)
    outcomes = docsgen.run(root, include_slow=False)
    return root, outcomes


def test_a_build_into_a_temp_dir_equals_the_committed_files(rebuilt):
    root, outcomes = rebuilt
    assert {o.path for o in outcomes} == {a.path for a in docsgen.selected(include_slow=False)}
    for art in docsgen.selected(include_slow=False):
        fresh, committed = (root / art.path).read_bytes(), (ROOT / art.path).read_bytes()
        # a figure drawn by another matplotlib/zlib may differ in bytes but not in content
        assert docsgen.same(art, committed, fresh), f"{art.path} is out of date: run 'lossproof docs build'"


def test_figures_are_byte_stable_and_carry_only_a_content_digest(rebuilt):
    root, _ = rebuilt
    ctx = docsgen.Context(ROOT)
    for art in FAST_FIGURES[:2]:
        again = art.produce(ctx, None, art.path)
        assert again == (root / art.path).read_bytes(), f"{art.path}: two builds differ"
    for art in FAST_FIGURES:
        data = (root / art.path).read_bytes()
        chunks = _chunk_types(data)
        assert b"tIME" not in chunks and b"iTXt" not in chunks and b"zTXt" not in chunks
        assert _text_keys(data) == [docsgen.CONTENT_KEY]
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", docsgen.png_content(data))


def test_every_figure_is_shown_on_its_page_and_every_article_example_is_tabled():
    pages = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md")}
    for art in docsgen.ARTIFACTS:
        if art.figure:
            rel = art.path.removeprefix("docs/")
            assert f"]({rel})" in pages[docsgen.FIGURE_PAGES[art.path]], f"{rel} is not shown"
    for page in pages.values():
        for target in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page):
            assert (ROOT / "docs" / target).is_file(), target
    ctx = docsgen.Context(ROOT)
    tabled = "\n".join(pages.values())
    for case in ctx.vs.cases():
        if case.test["provenance"]["kind"] == "article":
            assert f"`{case.uid}`" in tabled, f"{case.uid} (article example) is in no page"
    for uid in docsgen.PROXIMAL_KL_EXAMPLES:
        assert f"`{uid}`" in pages["proximal_kl.md"]


def test_a_stale_block_fails_the_check_naming_the_file(tmp_path, monkeypatch, capsys):
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    page = tmp_path / "docs" / "kl.md"
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace("0.18232155679395456449", "0.18232155679395456450"), encoding="utf-8")
    monkeypatch.setattr(docsgen, "ROOT", tmp_path)
    assert cli.main(["docs", "build", "--check", "--fast", "--quiet"]) == 1
    assert "docs/kl.md: out of date" in capsys.readouterr().err
    assert page.read_text(encoding="utf-8") != text          # --check writes nothing
    assert cli.main(["docs", "build", "--fast", "--quiet"]) == 0
    assert page.read_text(encoding="utf-8") == text           # the build restores the digits
    assert cli.main(["docs", "build", "--check", "--fast", "--quiet"]) == 0


def test_usage_errors_exit_2(tmp_path, monkeypatch, capsys):
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    page = tmp_path / "docs" / "dpo.md"
    page.write_text(page.read_text(encoding="utf-8").replace("<!-- /generated:examples -->\n", ""),
                    encoding="utf-8")
    monkeypatch.setattr(docsgen, "ROOT", tmp_path)
    assert cli.main(["docs", "build", "--check", "--fast"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "docs/dpo.md" in err and "examples" in err
    monkeypatch.setattr(docsgen, "ROOT", tmp_path / "nowhere")
    assert cli.main(["docs", "build"]) == 2
    with pytest.raises(SystemExit) as exc:
        cli.main(["docs"])
    assert exc.value.code == 2


def test_replace_blocks_keeps_everything_outside_the_markers():
    text = ("# Title\nprose with `<!-- generated:NAME -->` in running text\n"
            "<!-- generated:a -->\nold\n<!-- /generated:a -->\nmiddle\n"
            "<!-- generated:b -->\n<!-- /generated:b -->\nend\n")
    out = docsgen.replace_blocks(text, {"a": "new A", "b": "\nnew B\n"})
    assert out == ("# Title\nprose with `<!-- generated:NAME -->` in running text\n"
                   "<!-- generated:a -->\nnew A\n<!-- /generated:a -->\nmiddle\n"
                   "<!-- generated:b -->\nnew B\n<!-- /generated:b -->\nend\n")
    assert docsgen.replace_blocks(out, {"a": "new A", "b": "new B"}) == out
    assert docsgen.read_blocks(out) == {"a": "new A", "b": "new B"}


@pytest.mark.parametrize("text, blocks, problem", [
    ("<!-- generated:a -->\nx\n", {"a": ""}, "no closing"),
    ("<!-- generated:a -->\n<!-- /generated:a -->\n", {}, "no producer"),
    ("<!-- generated:a -->\n<!-- /generated:a -->\n<!-- generated:a -->\n<!-- /generated:a -->\n", {"a": ""},
     "twice"),
    ("text\n", {"a": ""}, "is missing"),
    ("<!-- /generated:a -->\n", {"a": ""}, "not open"),
    ("<!-- generated:a -->\n<!-- generated:b -->\n", {"a": "", "b": ""}, "inside"),
])
def test_replace_blocks_rejects_malformed_pages(text, blocks, problem):
    with pytest.raises(docsgen.DocsError, match=problem):
        docsgen.replace_blocks(text, blocks, "page.md")


def test_a_figure_is_compared_by_content_when_its_bytes_differ():
    from PIL import Image, PngImagePlugin
    art = FAST_FIGURES[0]
    data = (ROOT / art.path).read_bytes()
    digest = docsgen.png_content(data)
    info = PngImagePlugin.PngInfo()
    info.add_text(docsgen.CONTENT_KEY, digest)
    buf = io.BytesIO()
    Image.open(io.BytesIO(data)).save(buf, format="png", pnginfo=info, compress_level=1)
    other_bytes = buf.getvalue()
    assert other_bytes != data and docsgen.same(art, data, other_bytes)
    changed = io.BytesIO()
    info = PngImagePlugin.PngInfo()
    info.add_text(docsgen.CONTENT_KEY, "sha256:" + "0" * 64)
    Image.open(io.BytesIO(data)).save(changed, format="png", pnginfo=info)
    assert not docsgen.same(art, data, changed.getvalue())
    assert not docsgen.same(art, None, data)
    page = next(a for a in docsgen.ARTIFACTS if not a.figure)
    assert not docsgen.same(page, b"a", b"b")


def test_content_digest_sees_data_not_pixels():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    def draw(y, dpi):
        fig = Figure(figsize=(3, 2), dpi=dpi)
        FigureCanvasAgg(fig)
        fig.subplots().plot([0, 1, 2], y, color="#1f77b4", label="y")
        fig.canvas.draw()
        return docsgen.content_digest(fig)

    assert draw([0, 1, 4], 100) == draw([0, 1, 4], 100)
    assert draw([0, 1, 4], 100) != draw([0, 1, 5], 100)
    assert draw([0, 1, 4], 100) != draw([0, 1, 4], 50)


def test_digits_rounds_the_vector_strings_half_even():
    assert docsgen.digits("0.55435524446852711172763269351724") == "0.55435524446852711173"
    assert docsgen.digits("-1.0000000000000000000000000000000") == "-1.0000000000000000000"
    assert docsgen.digits("0") == "0"
    assert docsgen.digits("1.00000000000000000005", 20) == "1.0000000000000000000"


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
                 "validate-your-implementation.md"):
        assert (ROOT / "docs" / name).is_file(), name
    assert Path(ROOT / "CITATION.cff").read_text().startswith("cff-version: 1.2.0")
