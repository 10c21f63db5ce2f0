"""Every reference backend matches the catalog (DESIGN §3, §4).

For refimpl.exact, refimpl.arrays, refimpl.torch and refimpl.triton: a family module exists for every family
the backend implements (the exact backend: every family; the others: every family but
``tabular``, whose trees only the exact reference enumerates; refimpl.triton: ``distill``); the catalog id ``family.name``
is the function ``refimpl.<backend>.<family>.<name>``; its parameters are the catalog's inputs
(required, in order) followed by the catalog's parameters (in order, each defaulting to the
catalog's default, the same value of the same type), then its optional inputs (default None); the module's ``__all__`` lists exactly
those functions (a partial backend may decline an objective of its family with a reason, ``DECLINED``) and their VJPs ``<name>_vjp(cotangent, <the same parameters>)`` — the one
documented extra, which the exact and arrays backends give for every objective with
gradients (the torch backend differentiates by autograd instead).
"""
from __future__ import annotations

import importlib
import inspect

import pytest

from lossproof.conformance import catalog

FAMILIES = tuple(dict.fromkeys(o.family for o in catalog.OBJECTIVES))


def _claimed(backend: str) -> tuple[str, ...]:
    """The families with an objective whose catalog entry claims the fast backend."""
    return tuple(dict.fromkeys(o.family for o in catalog.OBJECTIVES if backend in o.backends))


BACKENDS = {
    "exact": {"families": FAMILIES, "vjps": True},
    "arrays": {"families": _claimed("arrays"), "vjps": True},
    "torch": {"families": _claimed("torch"), "vjps": False},
    # Fused kernels for the objectives that read whole vocabulary rows only.
    "triton": {"families": ("distill", "lm"), "vjps": False, "partial": True, "needs": "triton"},
}
PAIRS = [(b, f) for b, spec in BACKENDS.items() for f in spec["families"]]
EMPTY = inspect.Parameter.empty


def _module(backend: str, family: str):
    if "needs" in BACKENDS[backend]:
        pytest.importorskip(BACKENDS[backend]["needs"], reason=f"lossproof.refimpl.{backend} needs {BACKENDS[backend]['needs']}")
    return importlib.import_module(f"lossproof.refimpl.{backend}.{family}")


def _objectives(family: str, module=None, backend: str = "exact"):
    """The family's catalog objectives that the backend claims (``Objective.backends``; the exact
    reference has them all), less those a partial backend's module declines (``DECLINED``: catalog
    id → the reason, see ``test_declined_objectives_say_why``)."""
    declined = getattr(module, "DECLINED", {})
    return [o for o in catalog.OBJECTIVES if o.family == family and o.id not in declined
            and (backend not in catalog.FAST_BACKENDS or backend in o.backends)]


def _expected(spec: catalog.Objective, vjp: bool) -> list[tuple[str, object]]:
    """(name, default) of every parameter, in order; EMPTY for a required one."""
    head = [("cotangent", EMPTY)] if vjp else []
    return (head + [(i.name, EMPTY) for i in spec.inputs if not i.optional]
            + [(p.name, p.default) for p in spec.params] + [(i.name, None) for i in spec.inputs if i.optional])


def _actual(fn) -> list[tuple[str, object]]:
    out = []
    for p in inspect.signature(fn).parameters.values():
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, f"{fn.__qualname__}: {p.name} is {p.kind}"
        out.append((p.name, p.default))
    return out


def _same(actual, expected) -> bool:
    return len(actual) == len(expected) and all(
        a[0] == e[0] and type(a[1]) is type(e[1]) and (a[1] is e[1] or a[1] == e[1])
        for a, e in zip(actual, expected))


@pytest.mark.parametrize("backend, family", PAIRS, ids=[f"{b}.{f}" for b, f in PAIRS])
def test_all_lists_exactly_the_catalog_functions(backend, family):
    module = _module(backend, family)
    want = set()
    for spec in _objectives(family, module, backend):
        want.add(spec.name)
        if BACKENDS[backend]["vjps"] and spec.grads:
            want.add(f"{spec.name}_vjp")
    assert hasattr(module, "__all__"), f"lossproof.refimpl.{backend}.{family} has no __all__"
    assert sorted(module.__all__) == sorted(want)
    assert len(module.__all__) == len(set(module.__all__))
    for name in module.__all__:
        assert callable(getattr(module, name)), f"lossproof.refimpl.{backend}.{family}.{name}"


@pytest.mark.parametrize("backend, family", PAIRS, ids=[f"{b}.{f}" for b, f in PAIRS])
def test_signatures_match_the_catalog(backend, family):
    module = _module(backend, family)
    for spec in _objectives(family, module, backend):
        fn = getattr(module, spec.name)
        assert fn.__name__ == spec.name, f"lossproof.refimpl.{backend}.{spec.id} is {fn.__qualname__}"
        assert _same(_actual(fn), _expected(spec, False)), (
            f"lossproof.refimpl.{backend}.{spec.id}: {_actual(fn)} != catalog {_expected(spec, False)}")
        vjp = getattr(module, f"{spec.name}_vjp", None)
        if BACKENDS[backend]["vjps"] and spec.grads:
            assert vjp is not None, f"lossproof.refimpl.{backend}.{spec.id}: no {spec.name}_vjp"
        if vjp is not None:
            assert _same(_actual(vjp), _expected(spec, True)), (
                f"lossproof.refimpl.{backend}.{spec.id}_vjp: {_actual(vjp)} != catalog {_expected(spec, True)}")


@pytest.mark.parametrize("backend, family", PAIRS, ids=[f"{b}.{f}" for b, f in PAIRS])
def test_declined_objectives_say_why(backend, family):
    """Only a partial backend may decline an objective of its family, each with a stated reason,
    and then it must not also define it."""
    module = _module(backend, family)
    declined = getattr(module, "DECLINED", {})
    if declined:
        assert BACKENDS[backend].get("partial"), f"lossproof.refimpl.{backend}.{family} declines {sorted(declined)}"
    for oid, why in declined.items():
        spec = catalog.get(oid)
        assert spec.family == family and len(why) > 40, (oid, why)
        assert not hasattr(module, spec.name), f"lossproof.refimpl.{backend}.{family} declines and defines {oid}"


def test_every_catalog_objective_has_a_reference_backend():
    """No catalog id is left without an implementation: each one is in the exact backend, and in
    every fast backend its catalog entry claims (the partial triton backend aside)."""
    for spec in catalog.OBJECTIVES:
        holders = {b for b, s in BACKENDS.items() if spec.family in s["families"] and not s.get("partial")}
        assert "exact" in holders, spec.id
        assert set(spec.backends) <= holders, spec.id
