"""The third-party adapters (``--target trl|verl|openrlhf|liger``).

Without a library its tests skip with the reason and the install command (scripts/install-peers.sh
installs all four). With it, the adapter runs over every vector under its declared conventions and
each failure must be one of the adapter's documented findings (conformance/targets/<name>.py
FINDINGS, listed in docs/conventions.md): a new failure, or a finding that no longer explains any
case, means the library or the vectors changed and the docs must be regenerated
(``python -m conformance.conventions_doc``).
"""
import importlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from conformance import catalog, cli, conventions_doc, harness, targets
from conformance.results import summary
from conformance.targets import TargetError
from conformance.vectors.load import VectorSet

PEERS = {  # adapter: (import name, distribution, pinned version)
    "trl": ("trl", "trl", "1.16.0"),
    "verl": ("verl", "verl", "0.9.1"),
    "openrlhf": ("openrlhf", "openrlhf", "0.11.2"),
    "liger": ("liger_kernel", "liger-kernel", "0.8.5"),
}
DOC = Path(conventions_doc.DOC)


def _require(name):
    module, dist, version = PEERS[name]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{dist} is not installed (scripts/install-peers.sh, or pip install "
                    f"{'' if name == 'trl' else '--no-deps '}{dist}=={version})")
    try:
        return targets.load(name), importlib.import_module(f"conformance.targets.{name}")
    except TargetError as err:
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def vs():
    return VectorSet()


@pytest.mark.parametrize("name", PEERS)
def test_missing_library_is_a_usage_error(name, monkeypatch, capsys):
    module, dist, version = PEERS[name]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda n, *a, **k: None if n == module else real(n, *a, **k))
    with pytest.raises(TargetError, match=f"^{re.escape(dist)} is not installed: pip install .*{re.escape(version)}"):
        targets.load(name)
    assert cli.main(["check", "--target", name, "--objective", "kl.*", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{dist} is not installed: pip install" in err and "Traceback" not in err


def test_core_check_needs_no_peer():
    # Importing the adapters (as the CLI does) must not import any library.
    for name in PEERS:
        importlib.import_module(f"conformance.targets.{name}")
    assert cli.main(["check", "--backend", "numpy", "--objective", "kl.*", "--quiet"]) == 0


@pytest.mark.parametrize("name", PEERS)
def test_declaration_cites_real_library_files(name):
    target, module = _require(name)
    import_name, dist, version = PEERS[name]
    assert target.version == version
    root = Path(importlib.util.find_spec(import_name).submodule_search_locations[0]).parent
    for conv in module.CONVENTIONS + getattr(module, "PARAM_DEFAULTS", []):
        spec = catalog.get(conv.objective)
        assert conv.param in {p.name for p in spec.params}, conv
        for value in conv.values:
            choices = spec.param(conv.param).choices
            assert not choices or value in choices, (conv, value)
        files = re.findall(r"[\w/]+\.(?:py|yaml)", conv.source)
        assert files, conv
        for f in files:
            assert (root / f).is_file(), f"{name}: {conv.objective}.{conv.param} cites {f}, not in {dist} {version}"
    for finding in module.FINDINGS:
        for f in re.findall(r"[\w/]+\.(?:py|yaml)", finding.source):
            assert (root / f).is_file(), f"{finding.id} cites {f}"


@pytest.mark.slow
@pytest.mark.parametrize("name", PEERS)
def test_every_failure_is_a_documented_finding(name, vs):
    target, module = _require(name)
    results = harness.run(target, vs)
    by = conventions_doc.attribute(results, target, module, vs, as_paper=False)
    unexplained = [f"{r.uid} ({r.dtype}): {r.message[:160]}" for r in by.get("unexplained", [])]
    assert not unexplained, "\n".join(unexplained)
    counts = summary(results)
    assert counts["pass"] > 100
    # Every objective the adapter implements passes on some vector (where vectors exist).
    with_vectors = {c.objective for c in vs.cases("*")}
    passing = {r.objective for r in results if r.status == "pass"}
    assert set(target.objectives) & with_vectors <= passing


@pytest.mark.parametrize("name", PEERS)
def test_as_paper_lists_the_deviations(name, vs, capsys):
    target, _ = _require(name)
    devs = target.deviations()
    assert devs, f"{name} declares only paper defaults?"
    uid = next(c.uid for c in vs.cases("*") if c.objective == devs[0][0] and c.group == "paper")
    cli.main(["check", "--target", name, "--as-paper", "--uid", uid, "--quiet"])
    out = capsys.readouterr().out
    assert "differ from the paper" in out
    for objective, param, value, paper in devs:
        assert f"{objective}:" in out and param in out


def test_import_bare_removes_its_placeholders():
    _require("openrlhf")
    from conformance.targets.peers import openrlhf
    openrlhf._load()
    for name in ("deepspeed", "vllm", "flash_attn"):
        module = sys.modules.get(name)
        assert module is None or not type(module).__name__.startswith("_Absent")


@pytest.mark.parametrize("name", PEERS)
def test_conventions_doc_lists_every_declared_convention(name):
    _, module = _require(name)
    assert DOC.is_file(), "docs/conventions.md is missing: python -m conformance.conventions_doc"
    text = DOC.read_text()
    for conv in module.CONVENTIONS:
        assert conv.source in text, f"{name} {conv.objective}.{conv.param}: regenerate docs/conventions.md"
