"""The catalog is the only registry (issue 24): everything the harness, the tolerance model, the
backends, the generator, the certifier and the docs builder need to know about an objective is on
its ``catalog.Objective`` or derived from it. This test walks the catalog and names, for each
objective, the piece a contributor has not yet written — the checklist of docs/contributing.md.
"""
from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from lossproof.conformance import catalog
from lossproof.conformance.generate import FAMILY_MODULES
from lossproof.conformance.vectors import certificates
from lossproof.conformance.vectors.format import is_large
from lossproof.conformance.vectors.load import default_dir, objective_of, read_manifest

ROOT = Path(__file__).resolve().parent.parent
IDS = [o.id for o in catalog.OBJECTIVES]


def _function(package: str, spec: catalog.Objective):
    try:
        module = importlib.import_module(f"{package}.{spec.family}")
    except ModuleNotFoundError as err:
        if err.name != f"{package}.{spec.family}":
            raise
        return None
    return getattr(module, spec.name, None)


def _missing(spec: catalog.Objective) -> list[str]:
    """What the objective lacks, one phrase each, in the order a contributor adds them."""
    out = []
    if not callable(_function("lossproof.refimpl.exact", spec)):
        out.append(f"an exact reference lossproof.refimpl.exact.{spec.id}")
    exact = importlib.import_module(f"lossproof.refimpl.exact.{spec.family}") if _function("lossproof.refimpl.exact", spec) else None
    if exact and spec.grads and not callable(getattr(exact, f"{spec.name}_vjp", None)):
        out.append(f"an analytic gradient lossproof.refimpl.exact.{spec.id}_vjp")
    if not callable(_function("lossproof.refimpl.certified", spec)):
        out.append(f"a certified reference lossproof.refimpl.certified.{spec.id}")
    for backend in spec.backends:
        if not callable(_function(f"lossproof.refimpl.{backend}", spec)):
            out.append(f"a lossproof.refimpl.{backend}.{spec.id} (the catalog entry claims backend {backend!r})")
    if spec.step and not callable(_function("lossproof.refimpl.torch", spec)):
        out.append(f"a lossproof.refimpl.torch.{spec.id} (the built-in --partition step is made of it: step={spec.step!r})")
    if spec.vocab_sharded and not callable(getattr(importlib.import_module("lossproof.refimpl.torch.vocab_parallel"),
                                                   spec.name, None)):
        out.append(f"a lossproof.refimpl.torch.vocab_parallel.{spec.name} (the catalog entry marks it vocab_sharded)")
    module = spec.generator_module
    try:
        generator = importlib.import_module(module)
    except ModuleNotFoundError:
        out.append(f"a generator module {module}")
    else:
        if not callable(getattr(generator, "cases", None)):
            out.append(f"a cases() function in {module}")
        elif module.rpartition(".")[2] not in FAMILY_MODULES:
            out.append(f"{module} among lossproof.conformance.generate.FAMILY_MODULES")
    manifest = read_manifest(default_dir())
    if spec.vector_file not in manifest:
        out.append(f"vectors {spec.vector_file} (lossproof vectors generate)")
    if certificates.path_for(spec.vector_file) not in manifest:
        out.append(f"certificates {certificates.path_for(spec.vector_file)} (lossproof vectors certify)")
    page = ROOT / spec.page
    if not page.is_file():
        out.append(f"a docs page {spec.page}")
    elif f"`{spec.id}`" not in page.read_text(encoding="utf-8"):
        out.append(f"a section of {spec.page} that names `{spec.id}`")
    return out


@pytest.mark.parametrize("oid", IDS)
def test_every_objective_has_every_piece(oid):
    missing = _missing(catalog.get(oid))
    assert not missing, f"{oid} lacks: " + "; ".join(missing)


def test_the_vector_files_are_the_catalog():
    """A vector file whose objective the catalog lacks is a registry of its own: none exists."""
    manifest = read_manifest(default_dir())
    vector_files = {rel for rel in manifest if not certificates.is_certificate(rel) and not is_large(rel)}
    assert vector_files == {o.vector_file for o in catalog.OBJECTIVES}
    assert {objective_of(rel) for rel in manifest if is_large(rel)} <= set(catalog.BY_ID)


def test_a_vector_file_names_its_objective():
    for spec in catalog.OBJECTIVES:
        with open(default_dir() / spec.vector_file, encoding="utf-8") as f:
            head = f.read(4096)
        assert re.search(r'"objective": ' + re.escape(json.dumps(spec.id)), head), spec.vector_file


def test_a_missing_piece_is_named():
    """The walk is not vacuous: an entry with nothing behind it is reported piece by piece."""
    toy = catalog.Objective("toy.square", "x²", (catalog.Input("x", "N"),), (), ("value",), ("x",), "none",
                            k_base=2.0)
    missing = _missing(toy)
    assert missing[0] == "an exact reference lossproof.refimpl.exact.toy.square"
    assert any(m.startswith("a certified reference") for m in missing)
    assert any("claims backend 'torch'" in m for m in missing)
    assert any(m.startswith("a generator module lossproof.conformance.generate.toy") for m in missing)
    assert any(m.startswith("vectors toy/square.json") for m in missing)
    assert any(m.startswith("a docs page docs/toy.md") for m in missing)
    split = catalog.Objective("toy.square", "x²", (catalog.Input("x", "N"),), (), ("value",), ("x",), "none",
                              k_base=2.0, step="count", step_loss="value", vocab_sharded=True)
    missing = _missing(split)
    assert "a lossproof.refimpl.torch.toy.square (the built-in --partition step is made of it: step='count')" in missing
    assert "a lossproof.refimpl.torch.vocab_parallel.square (the catalog entry marks it vocab_sharded)" in missing


def test_a_step_objective_states_its_mean_and_its_loss():
    with pytest.raises(ValueError, match="toy.square: a step objective states step"):
        catalog.Objective("toy.square", "", (), (), ("value",), (), "", k_base=1.0, step="count")
    with pytest.raises(ValueError, match="toy.square: a step objective states step"):
        catalog.Objective("toy.square", "", (), (), ("value",), (), "", k_base=1.0, step="tokens", step_loss="value")
    with pytest.raises(ValueError, match="toy.square: a step objective states step"):
        catalog.Objective("toy.square", "", (), (), ("value",), (), "", k_base=1.0, step="count", step_loss="value",
                          not_step="why")


def test_an_entry_states_its_tolerance_base_and_known_backends():
    with pytest.raises(ValueError, match="toy.square: k_base must be a positive"):
        catalog.Objective("toy.square", "", (), (), ("value",), (), "")
    with pytest.raises(ValueError, match="unknown backend"):
        catalog.Objective("toy.square", "", (), (), ("value",), (), "", k_base=1.0, backends=("jax",))
