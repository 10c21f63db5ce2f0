"""The shape of conformance/generate: its modules talk to each other through public names only (a
private name is free to change inside its module), and none grows past the size one reader can
hold; a family that outgrows one module splits into ``<family>_inputs``, ``<family>_scales`` and
case modules (docs/contributing.md, step 5)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

GENERATE = Path(__file__).resolve().parents[2] / "conformance" / "generate"
MODULES = sorted(GENERATE.glob("*.py"))
MAX_LINES = 800


def _private_uses(path: Path) -> list[str]:
    """``from lossproof.conformance.generate.X import _name`` and ``X._name`` where X is a generator module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules, out = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lossproof.conformance.generate"):
            for alias in node.names:
                if alias.name.startswith("_"):
                    out.append(f"{path.name}:{node.lineno}: imports {node.module}.{alias.name}")
                if node.module == "lossproof.conformance.generate":
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules.update(a.asname or a.name for a in node.names if a.name.startswith("lossproof.conformance.generate"))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name) and node.value.id in modules):
            out.append(f"{path.name}:{node.lineno}: uses {node.value.id}.{node.attr}")
    return out


def test_the_generator_modules_are_found():
    assert {"__init__.py", "build.py", "case.py", "sampling.py"} <= {p.name for p in MODULES}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_private_name_crosses_a_module(path):
    assert not _private_uses(path)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_module_is_over_the_size_limit(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.name}: {lines} lines (split it by concern: inputs, scales, cases)"


def test_the_checks_see_a_private_import(tmp_path):
    module = tmp_path / "bad.py"
    module.write_text("from lossproof.conformance.generate import grpo_inputs\n"
                      "from lossproof.conformance.generate.grpo_inputs import _near\n"
                      "x = grpo_inputs._cotangent\n")
    assert len(_private_uses(module)) == 2
