"""lm.linear_cross_entropy's vectors: counts per convention and dtype, the optional differentiated
bias (a gradient exactly where a vector holds one), and the tolerance scales it stores: they must
cover the matrix product's rounding (a float32 logit error of γ_{H+1}·Σ|h·w| passes) and still fail
a logit rounded to bfloat16 inside a float64 or float32 computation."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from lossproof.conformance import catalog, compare, numbers
from lossproof.conformance.generate import lm
from lossproof.conformance.generate.build import build_test

LCE = "lm.linear_cross_entropy"
SPEC = catalog.get(LCE)


@pytest.fixture(scope="module")
def cases():
    return [c for c in lm.cases() if c.objective == LCE]


def test_counts(cases):
    valid = [c for c in cases if c.result == "valid"]
    assert len(valid) >= 50 and len(cases) - len(valid) >= 5
    reductions = Counter(c.conventions.get("reduction", "mean") for c in valid)
    assert min(reductions[r] for r in ("mean", "sum", "none")) >= 10, reductions
    low = [c for c in valid if c.low_precision]
    assert len(low) >= 60
    assert sum("bias" in c.inputs for c in valid) >= 20 and sum("bias" not in c.inputs for c in valid) >= 20


@pytest.mark.parametrize("with_bias", [False, True])
def test_bias_gradient_only_where_a_bias_is_given(cases, with_bias):
    case = next(c for c in cases if c.result == "valid" and ("bias" in c.inputs) == with_bias and c.low_precision)
    test = build_test(case, lm.SCALES[LCE])
    want = {"hidden", "weight"} | ({"bias"} if with_bias else set())
    assert set(test["grads"]) == set(test["scale"]["grads"]) == want == set(SPEC.grads_of(case.inputs))
    assert {k.removeprefix("grad:") for k in test["scale"].get("elements", {}) if k.startswith("grad:")} <= want


def _judged(cases):
    """The cancelling-products edge cases and a few random ones, with paper defaults."""
    out = [c for c in cases if c.result == "valid" and not c.params and not c.conventions
           and ("Cancellation" in c.flags or "Random" in c.flags) and not c.low_precision]
    return out[:6]


def test_scale_covers_a_float32_matrix_product_and_fails_bfloat16_logits(cases):
    """A logit error of (H+1)·u32·Σ|h·w| in the direction that moves the loss most stays within the
    float32 bound the vector stores; the logits rounded to bfloat16 do not (except where the products
    cancel so far that the float32 allowance (H+1)·u32·Σ|h·w| reaches bfloat16's u·|z|)."""
    from lossproof.refimpl.exact import lm as exact
    judged = _judged(cases)
    assert any("Cancellation" in c.flags for c in judged) and any("Random" in c.flags for c in judged)
    for case in judged:
        test = build_test(case, lm.SCALES[LCE])
        h, w = np.array(case.inputs["hidden"]), np.array(case.inputs["weight"])
        y, want = case.inputs["labels"], float(test["expected"]["loss"])
        b = np.array(case.inputs.get("bias", np.zeros(len(w))))
        z, m = h @ w.T + b, np.abs(h) @ np.abs(w).T + np.abs(b)
        tol = compare.Tolerances({}).for_case(SPEC, test, "float32")
        g = np.array(exact.cross_entropy_vjp(1.0, z.tolist(), y)["logits"], dtype=float)
        worst = z + (h.shape[1] + 1) * compare.UNIT_ROUNDOFF["float32"] * m * np.sign(g)
        assert tol.measure("loss", float(exact.cross_entropy(worst.tolist(), y)), want).passed, case.comment
        if "Cancellation" not in case.flags:
            rough = np.vectorize(lambda x: numbers.round_to(float(x), "bfloat16"))(z)
            assert not tol.measure("loss", float(exact.cross_entropy(rough.tolist(), y)), want).passed, case.comment


def test_gradient_elements_are_read_by_the_careful_model(cases):
    case = next(c for c in cases if c.low_precision and "bfloat16" in build_test(c, lm.SCALES[LCE])["dtypes"])
    test = build_test(case, lm.SCALES[LCE])
    stored = float(test["scale"]["elements"]["grad:hidden"])
    tol = compare.Tolerances({}).for_case(SPEC, test, "bfloat16")
    want = np.asarray(test["grads"]["hidden"], dtype=float)
    k = tol.k
    expected = (compare.K_ELEM * compare.UNIT_ROUNDOFF["bfloat16"] * stored
                + k * compare.UNIT_ROUNDOFF["float32"] * float(test["scale"]["grads"]["hidden"]))
    m = tol.measure("grad:hidden", want + expected * 0.99, want)
    assert m.passed and m.max_err_over_tol > 0.9
