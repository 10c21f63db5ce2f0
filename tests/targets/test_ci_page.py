"""docs/ci.md ("Adopting lossproof in your library's CI") stays true to the code it shows.

The page's example (docs/examples/ci/: a small loss module, its target file, its known-failures
file) is shown as it is on disk, and every console session on the page is what the command prints
today, run here in a copy of that folder. After a change to the example, the vectors or the
console output, rewrite the generated blocks with ``python tests/targets/test_ci_page.py``.
"""
from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the page's example is a torch target")

from test_doc_examples import (
    _run,  # tests/targets is on sys.path: docs/targets.md's session runner
)

from lossproof.conformance.docs.blocks import read_blocks, replace_blocks
from lossproof.conformance.docs.sessions import equivalent

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "ci.md"
EXAMPLE = ROOT / "docs" / "examples" / "ci"
FILES = ("preference_losses.py", "lossproof_target.py", "known.json")

# The bug of the example and its fix: the known failures of known.json go stale once it is fixed.
BUG = "        losses = -F.logsigmoid(margin)\n"
FIX = ("        losses = -(1 - label_smoothing) * F.logsigmoid(margin) - label_smoothing * F.logsigmoid(-margin)\n")

TARGET = "lossproof check --target lossproof_target.py:TARGET"
REPORTS = "--junit lossproof-junit.xml --report-json lossproof.json"
PYTEST = "python -m pytest -q -p no:cacheprovider --lossproof-target lossproof_target.py:WITH_KNOWN"
SESSIONS = {   # name: ((command as shown, exit status), ...), whether it runs on the fixed module
    "ci-first-run": (((f"{TARGET} --quiet | head -n 5", 1), (f"{TARGET} --quiet | tail -n 2", 1)), False),
    "ci-known": (((f"{TARGET} --known known.json --quiet", 0),), False),
    "ci-strict": (((f"{TARGET} --known known.json --strict --quiet | tail -n 2", 1),), False),
    "ci-reports": (((f"{TARGET} --known known.json {REPORTS} --quiet | tail -n 2", 0),), False),
    "ci-stale": (((f"{TARGET} --known known.json --quiet | head -n 3", 0),
                  (f"{TARGET} --known known.json --strict --quiet | tail -n 2", 1)), True),
    "ci-pytest": (((f"{PYTEST} --lossproof-objective dpo.loss | tail -n 1", 0),), False),
}


@contextlib.contextmanager
def _isolated_imports():
    """A target file puts its folder on sys.path and its siblings in sys.modules: each session
    imports the example afresh (the fixed module of one session must not serve the next)."""
    path, modules = list(sys.path), set(sys.modules)
    try:
        yield
    finally:
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            del sys.modules[name]


def render_session(name: str) -> str:
    commands, fixed = SESSIONS[name]
    with tempfile.TemporaryDirectory(prefix="lossproof-ci-page-") as tmp, _isolated_imports():
        work = Path(tmp) / "work"
        shutil.copytree(EXAMPLE, work, ignore=shutil.ignore_patterns("__pycache__"))
        if fixed:
            module = work / "preference_losses.py"
            module.write_text(module.read_text(encoding="utf-8").replace(BUG, FIX), encoding="utf-8")
        shown = [_run(line, status, work) for line, status in commands]
    return "```console\n" + "\n".join(shown) + "\n```"


def render_example(name: str) -> str:
    text = (EXAMPLE / name).read_text(encoding="utf-8").rstrip()
    if name.endswith(".json"):
        return f"```json\n{text}\n```"
    return f"```python\n# {name}\n{text}\n```"


def render_fix() -> str:
    return f"```diff\n-{BUG.rstrip()}\n+{FIX.rstrip()}\n```"


def blocks() -> dict:
    """{block name: a function producing its fresh content}"""
    return {**{name: (lambda n=name: render_session(n)) for name in SESSIONS},
            **{f"example-{Path(f).stem.replace('_', '-')}": (lambda f=f: render_example(f)) for f in FILES},
            "example-fix": render_fix}


@pytest.fixture(scope="module")
def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def test_the_page_has_exactly_the_generated_blocks(page):
    assert set(read_blocks(page)) == set(blocks())
    replace_blocks(page, {name: "" for name in blocks()}, str(PAGE))


@pytest.mark.parametrize("name", FILES)
def test_an_example_shown_is_the_file(page, name):
    block = f"example-{Path(name).stem.replace('_', '-')}"
    assert read_blocks(page)[block] == render_example(name), f"run python {Path(__file__).relative_to(ROOT)}"


def test_the_fix_shown_is_the_fix_applied(page):
    assert BUG in (EXAMPLE / "preference_losses.py").read_text(encoding="utf-8")
    assert read_blocks(page)["example-fix"] == render_fix()


@pytest.mark.parametrize("name", sorted(SESSIONS))
def test_a_session_shows_what_the_command_prints(page, name):
    shown, fresh = read_blocks(page)[name], render_session(name)
    assert equivalent(shown, fresh), f"{name} prints now:\n{fresh}"


def test_every_known_failure_has_a_reason_with_a_link():
    known = json.loads((EXAMPLE / "known.json").read_text(encoding="utf-8"))
    assert known and all("https://" in reason for reason in known.values())


if __name__ == "__main__":
    fresh = {name: produce() for name, produce in blocks().items()}
    PAGE.write_text(replace_blocks(PAGE.read_text(encoding="utf-8"), fresh, str(PAGE)), encoding="utf-8")
    print(f"rewrote the {len(fresh)} generated blocks of {PAGE.relative_to(ROOT)}")
