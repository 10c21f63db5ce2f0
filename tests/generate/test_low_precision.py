"""Low-precision vectors: how many there are, the grids their inputs lie on, and the rules that
decide which dtypes a test is judged in (exact inputs and cotangents, results inside the range)."""
from __future__ import annotations

from collections import Counter

import pytest

from lossproof.conformance import catalog, numbers
from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.build import build_test
from lossproof.conformance.generate.case import Case, generated
from lossproof.refimpl import torch as rtorch

LOW = ("bfloat16", "float16")


def test_every_low_precision_objective_has_40_valid_vectors_per_dtype(bundled_vectors):
    """Every objective a built-in backend claims in bfloat16 and float16 (refimpl.torch claims
    all four dtypes) and whose catalog entry has low-precision vectors."""
    counts = Counter()
    for case in bundled_vectors.cases():
        if case.result == "valid":
            counts.update((case.objective, d) for d in case.test["dtypes"] if d in LOW)
    claimed = [o.id for o in catalog.OBJECTIVES if o.low_precision and "torch" in o.backends]
    assert len(claimed) >= 11 and all(d in rtorch.SUPPORTED_DTYPES for d in LOW)
    short = {(o, d): counts[(o, d)] for o in claimed for d in LOW if counts[(o, d)] < 40}
    assert not short, short


@pytest.mark.parametrize("grid, dtypes", [(S.BOTH, LOW), (S.FP16, ("float16",))])
def test_grids_hold_their_values_exactly(grid, dtypes):
    r = S.rng(0)
    x = (r.normal(0, 1, 4000) * 10.0 ** r.uniform(-9, 6, 4000)).tolist() + [70000.0, -1e-30, 0.0]
    for v in S.in_low(x, grid):
        assert all(numbers.representable(v, d) for d in dtypes), v
        assert abs(v) <= S.LOW_MAX


def _kl_case(logp, ref, cotangents=None):
    return Case("kl.estimator", {"logp": logp, "ref_logp": ref}, conventions={"kind": "k3"}, low_precision=True,
                cotangents=cotangents, provenance=generated(0, "fixed"))


def test_a_dtype_whose_range_the_exact_values_exceed_is_not_judged():
    # k3 at log r = 12 is e^12 − 13 ≈ 1.6e5: beyond float16 (65504), inside bfloat16
    assert build_test(_kl_case([-12.5, -1.0], [-0.5, -1.5]))["dtypes"] == ["float64", "float32", "bfloat16"]
    assert build_test(_kl_case([-10.5, -1.0], [-0.5, -1.5]))["dtypes"] == ["float64", "float32", "bfloat16",
                                                                            "float16"]


def test_low_precision_cotangents_are_exact_in_both_dtypes():
    test = build_test(_kl_case([-2.0, -1.0, -0.25], [-0.5, -1.5, -3.0]))
    for v in numbers.flat_floats(test["cotangents"]["value"]):
        assert v != 0 and abs(v) <= 2 and (v * 64).is_integer()
    # a cotangent that bfloat16 does not hold (0.1) keeps the case out of both low dtypes
    inexact = build_test(_kl_case([-2.0, -1.0], [-0.5, -1.5], cotangents={"value": [0.1, 1.0]}))
    assert inexact["dtypes"] == ["float64", "float32"]
