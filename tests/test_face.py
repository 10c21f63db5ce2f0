"""One installed package, ``lossproof``, with a small documented face (docs/targets.md "The
lossproof module"), whose names are imported when first used; and a command pays only for the
modules it runs."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import lossproof

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "targets.md"
EXAMPLES = ROOT / "docs" / "examples" / "targets"
UID = "kl.estimator:6dcdd064ba965dc5"   # a generated case: citing it needs no certified value


def _imported(*argv: str) -> tuple[int, list[str]]:
    """The exit status of ``python -X importtime ARGV`` from outside the checkout, and the modules
    of lossproof and of python-flint it imported."""
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True,
                          cwd=ROOT.parent, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    modules = re.findall(r"^import time:.*\|\s+(\S+)$", done.stderr, re.M)
    return done.returncode, [m for m in modules if m.split(".")[0] in ("lossproof", "flint")]


def test_the_face_is_the_documented_table():
    page = PAGE.read_text(encoding="utf-8")
    table = page.split("## The `lossproof` module", 1)[1].split("\n\n")[2]
    documented = set(re.findall(r"`lossproof\.(\w+)", table))
    assert documented == set(lossproof.__all__) | {"__version__"}
    for name in documented:
        assert getattr(lossproof, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'harness'"):
        lossproof.harness   # noqa: B018 (internal: not a name of the face)


def test_the_examples_import_the_face_only():
    """Every example of the page and every example file uses ``lossproof``'s names, never an
    internal module path."""
    texts = [PAGE.read_text(encoding="utf-8")] + [p.read_text(encoding="utf-8") for p in EXAMPLES.glob("*.py")]
    internal = [line for text in texts for line in text.splitlines()
                if re.search(r"\b(from|import) lossproof\.(conformance|refimpl)", line)]
    assert internal == []


def test_the_test_suite_example_runs():
    page = PAGE.read_text(encoding="utf-8")
    code = re.search(r"<!-- test-suite-example -->\n```python\n(.*?)```", page, re.DOTALL).group(1)
    cwd = os.getcwd()
    os.chdir(EXAMPLES)
    try:
        namespace = {}
        exec(compile(code, "docs/targets.md", "exec"), namespace)   # noqa: S102 (the page's own snippet)
        assert len(namespace["CASES"]) > 40
        for case in namespace["CASES"]:
            namespace["test_vector"](case)
    finally:
        os.chdir(cwd)


def test_import_lossproof_imports_nothing_else():
    status, modules = _imported("-c", "import lossproof")
    assert status == 0 and modules == ["lossproof"]


def test_version_imports_at_most_ten_modules_of_the_project():
    status, modules = _imported("-m", "lossproof", "--version")
    assert status == 0 and len(modules) <= 10, modules


@pytest.mark.parametrize("argv", [["list"], ["show", UID], ["cite", UID], ["cite", "--bibtex", UID]])
def test_reading_commands_load_neither_harness_generator_nor_certifier(argv):
    status, modules = _imported("-m", "lossproof", *argv)
    assert status == 0
    loaded = set(modules)
    assert not loaded & {"lossproof.conformance.harness", "lossproof.conformance.generate",
                         "lossproof.conformance.vectors.certify", "lossproof.refimpl.certified", "flint"}
