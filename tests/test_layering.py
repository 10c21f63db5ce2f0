"""Imports run one way, downward, with no circles (DESIGN §3).

An AST walk of every module of the one installed package ``lossproof`` (the face in
``lossproof/``, ``lossproof.conformance`` in ``conformance/``, ``lossproof.refimpl`` in
``refimpl/``) collects every import edge, function-local ones included, and checks it against
the rank table below: an edge must go to a strictly lower rank, or stay inside one subpackage
(``lossproof.conformance.vectors.lint`` may import ``lossproof.conformance.vectors.load``). The module graph must also be free of cycles, inside
subpackages too.
"""
from __future__ import annotations

import ast
from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# each folder and the package name it is installed as (setup.py)
PACKAGES = {"lossproof": "lossproof", "conformance": "lossproof.conformance", "refimpl": "lossproof.refimpl"}

# (glob over dotted module names, rank): the first matching glob wins.
RANKS = (
    ("lossproof.refimpl", 0), ("lossproof.refimpl.validate", 0), ("lossproof.refimpl.cache", 0),
    ("lossproof.refimpl.exact.mp", 1),
    ("lossproof.refimpl.*", 2),
    ("lossproof.conformance", 0),
    ("lossproof.conformance.errors", 1), ("lossproof.conformance._io", 1), ("lossproof.conformance._host", 1), ("lossproof.conformance.numbers", 1),
    ("lossproof.conformance.catalog", 1), ("lossproof.conformance.results", 1), ("lossproof.conformance.progress", 1), ("lossproof.conformance.timelimit", 1),
    ("lossproof.conformance.compare", 2), ("lossproof.conformance.report", 2), ("lossproof.conformance.vectors", 2),
    ("lossproof.conformance.vectors.certify", 3), ("lossproof.conformance.vectors.*", 2),
    ("lossproof.conformance.generate", 3), ("lossproof.conformance.generate.*", 3), ("lossproof.conformance.targets", 3), ("lossproof.conformance.targets.*", 3),
    ("lossproof.conformance.verdict", 3), ("lossproof.conformance.distributed.partitions", 3),
    ("lossproof.conformance.plan", 3.5),   # the case plan: between the targets and the runners
    ("lossproof.conformance.harness", 4), ("lossproof.conformance.derive", 4),
    ("lossproof.conformance.theorem", 5), ("lossproof.conformance.theorem.*", 5), ("lossproof.conformance.distributed", 5),
    ("lossproof.conformance.distributed.*", 5), ("lossproof.conformance.exchange", 5), ("lossproof.conformance.diagnose", 5),
    ("lossproof.conformance.diagnose_inputs", 2), ("lossproof.conformance.bugforms", 3), ("lossproof.conformance.bugforms.*", 3),
    ("lossproof.conformance.infer", 6),
    ("lossproof.conformance.run", 6),
    ("lossproof.conformance.testing", 7), ("lossproof.conformance.docs", 7), ("lossproof.conformance.docs.*", 7), ("lossproof.conformance.bench", 7),
    ("lossproof.conformance.bench.*", 7),
    ("lossproof.conformance.pytest_plugin", 8),
    ("lossproof.conformance.cli", 9),
    ("lossproof", 10), ("lossproof.__main__", 11),
)


def _modules() -> dict[str, Path]:
    out = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join((package, *parts))] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str:
    """The longest project module that ``name`` designates (``a.b.func`` -> ``a.b``)."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _edges(module: str, path: Path) -> list[tuple[str, int, bool]]:
    """(imported project module, line, function-local) for every import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    local = {id(node) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
             for node in ast.walk(fn) if isinstance(node, (ast.Import, ast.ImportFrom))}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] == "lossproof":
                target = _resolve(name)
                if target != module:
                    out.append((target, node.lineno, id(node) in local))
    return out


EDGES = {module: _edges(module, path) for module, path in MODULES.items()}


def rank(module: str) -> int:
    for pattern, r in RANKS:
        if fnmatch(module, pattern):
            return r
    raise AssertionError(f"{module}: no rank in tests/test_layering.py RANKS (add it where it belongs)")


def _subpackage(module: str) -> str:
    """The unit inside which same-rank imports are allowed: the first three name parts
    (``lossproof.conformance.vectors``, ``lossproof.refimpl.exact``); a module directly in
    ``lossproof.conformance`` is a unit of its own."""
    return ".".join(module.split(".")[:3])


def test_every_module_has_a_rank():
    for module in MODULES:
        rank(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_run_downward(module):
    bad = []
    for target, line, local in EDGES[module]:
        if rank(target) < rank(module):
            continue
        if _subpackage(target) == _subpackage(module) and rank(target) == rank(module):
            continue
        bad.append(f"{MODULES[module].relative_to(ROOT)}:{line}: imports {target} "
                   f"(rank {rank(target)} from rank {rank(module)}{', function-local' if local else ''})")
    assert not bad, "\n".join(bad)


def test_refimpl_imports_nothing_from_conformance():
    bad = [f"{m} -> {t}" for m, edges in EDGES.items() if m.startswith("lossproof.refimpl")
           for t, _, _ in edges if t.startswith("lossproof.conformance")]
    assert not bad


SHARED = ("lossproof.refimpl.validate", "lossproof.refimpl.cache")


def test_backends_are_independent_of_each_other():
    """The exact, certified, array, torch and triton backends share only refimpl.validate, the cache
    directory (refimpl.cache) and the exact precision helper: the certified reference in particular
    must not borrow from exact."""
    bad = []
    for module, edges in EDGES.items():
        unit = _subpackage(module)
        if not unit.startswith("lossproof.refimpl.") or unit in SHARED:
            continue
        for target, line, _ in edges:
            other = _subpackage(target)
            if other not in (unit, *SHARED) and not (target == "lossproof.refimpl.exact.mp" and unit != "lossproof.refimpl.certified"):
                bad.append(f"{module}:{line} -> {target}")
    assert not bad, "\n".join(bad)


def test_the_certified_reference_never_imports_the_exact_one():
    """refimpl.certified is a second, independent derivation: no import of refimpl.exact at all
    (not even its precision helper), function-local imports included."""
    bad = [f"{MODULES[m].relative_to(ROOT)}:{line}: imports {t}" for m, edges in EDGES.items()
           if m.startswith("lossproof.refimpl.certified") for t, line, _ in edges if t.startswith("lossproof.refimpl.exact")]
    assert not bad, "\n".join(bad)
    assert any(m.startswith("lossproof.refimpl.certified.") for m in MODULES)


def test_no_import_cycles():
    graph = {m: sorted({t for t, _, _ in edges if t in MODULES}) for m, edges in EDGES.items()}
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for t in graph[m]:
            if state.get(t) == "open":
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not cycles, "\n".join(cycles)
