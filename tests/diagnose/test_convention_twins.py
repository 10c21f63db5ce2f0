"""The conventions of vector set 1.7.0 judged from the outside: a twin of each library
(``convention_twins``) computes its convention undeclared and must be told in one ``[convention]``
line what to declare; declared so, it passes every case it is given."""
from __future__ import annotations

import io

import pytest

pytest.importorskip("torch", reason="the twins are torch functions")

from diagnose import convention_twins as twins
from diagnose.test_diagnoses import _diagnoses
from lossproof.conformance import report

TWINS = [
    (twins.MEGATRON_CE, twins.MEGATRON_CE_DECLARED, "lm.cross_entropy", {"smoothing_classes": "others"}),
    (twins.MEGATRON_BALANCE, twins.MEGATRON_BALANCE_DECLARED, "moe.load_balancing", {"fraction_norm": "top_k"}),
    (twins.AXOLOTL_KD, twins.AXOLOTL_KD_DECLARED, "distill.sparse_kl", {"t2_scale": True}),
    (twins.TORCHTUNE_MEAN, twins.TORCHTUNE_MEAN_DECLARED, "grpo.aggregate", {"mean_eps_scope": "every"}),
    (twins.VERL_GAE, twins.VERL_GAE_DECLARED, "gae.advantages", {"whiten_eps": 1e-8}),
]


@pytest.mark.parametrize("undeclared,declared,objective,declare", TWINS, ids=[t[2] for t in TWINS])
def test_an_undeclared_convention_is_named_in_one_line(undeclared, declared, objective, declare):
    results, found = _diagnoses(undeclared, objective)
    failing = [r for r in results if r.status == "fail"]
    assert failing, f"{undeclared['name']} must fail the default convention"
    assert [d.kind for d in found] == ["convention"], [(d.kind, d.defect) for d in found]
    (d,) = found
    assert d.count == len(failing) and d.declare == declare
    console = io.StringIO()
    report.print_diagnoses(found, console)
    (name, value), = declare.items()
    assert f"[convention] matches {name}={value!r}" in console.getvalue(), console.getvalue()


@pytest.mark.parametrize("undeclared,declared,objective,declare", TWINS, ids=[t[2] for t in TWINS])
def test_the_twin_passes_once_it_declares_the_convention(undeclared, declared, objective, declare):
    results, found = _diagnoses(declared, objective)
    passed = [r for r in results if r.status == "pass"]
    # float64 cases of the declared combination only (torchtune's ε is 1e−8: 5 token-mean vectors)
    assert len(passed) >= 5, f"{declared['name']}: {len(passed)} passing cases"
    assert not [r for r in results if r.status in ("fail", "error")] and not found
