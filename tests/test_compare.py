"""The tolerance policy's building blocks, checked against NumPy's own float formats."""
import numpy as np
import pytest

from conformance import catalog, compare


@pytest.mark.parametrize("dtype, np_dtype", [("float64", np.float64), ("float32", np.float32),
                                             ("float16", np.float16)])
def test_ulp_matches_numpy_spacing(dtype, np_dtype):
    values = np.array([1.0, 0.75, 3.0, 1e-3, 1000.0, 0.0, -2.5], dtype=np_dtype)
    want = np.abs(np.spacing(np.abs(values))).astype(np.float64)
    assert np.array_equal(compare.ulp(values.astype(np.float64), dtype), want)


def test_bfloat16_ulp_has_8_bit_mantissa():
    assert compare.ulp(np.array([1.0, 3.0]), "bfloat16").tolist() == [2.0**-7, 2.0**-6]


def test_measure_passes_within_and_fails_beyond_the_bound():
    want = np.array([1.0, -2.0])
    k, scale = 4.0, 2.0
    bound = k * compare.UNIT_ROUNDOFF["float32"] * scale
    inside = compare.measure(want + 0.9 * bound, want, scale, "float32", k)
    outside = compare.measure(want + [0.0, 3 * bound], want, scale, "float32", k)
    assert inside.passed and not outside.passed
    assert outside.worst_index == (1,)


def test_nan_never_passes_and_matching_infinities_do():
    assert not compare.measure(np.array([np.nan]), np.array([0.0]), 1.0, "float64", 8).passed
    assert compare.measure(np.array([-np.inf]), np.array([-np.inf]), 1.0, "float64", 8).passed


def test_tolerance_grows_with_the_log_of_the_reduction_length():
    spec = catalog.get("distill.token_kl")
    t = compare.Tolerances({})
    assert t.k(spec, "float32", 1024, None) == compare.K_BASE[spec.id] * 11
    assert t.k(spec, "float32", 1024, 3.0) == 3.0


def test_target_override_file(tmp_path):
    path = tmp_path / "tol.json"
    path.write_text('{"grpo.*": {"bfloat16": 100}}')
    t = compare.Tolerances.from_file(path)
    assert t.k(catalog.get("grpo.loss"), "bfloat16", 10, None) == 100
    path.write_text('{"grpo.*": {"bfloat16": -1}}')
    with pytest.raises(ValueError, match="--tolerances"):
        compare.Tolerances.from_file(path)
