"""The tolerance policy: its building blocks checked against NumPy's own float formats, and the
low-precision models checked on the real vectors — a careful implementation of the right formula
passes every bfloat16 and float16 case, a careful implementation of a wrong formula fails every
case where it moves the value by more than a few ulps of the dtype."""
import numpy as np
import pytest
import scipy.special
import torch

from lossproof.conformance import catalog, compare, numbers
from lossproof.refimpl.torch import distill as tdistill


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
    assert compare.measure(np.array([-np.inf]), np.array([-np.inf]), 1.0, "bfloat16", 8, elements=1.0).passed
    assert not compare.measure(np.array([-1e30]), np.array([-np.inf]), 1.0, "bfloat16", 8, elements=1.0).passed


def test_tolerance_grows_with_the_log_of_the_reduction_length():
    spec = catalog.get("distill.token_kl")
    t = compare.Tolerances({})
    assert t.k(spec, "float32", 1024, None) == spec.k_base * 11
    assert t.k(spec, "float32", 1024, 3.0) == 3.0


def test_vocabulary_sums_get_the_lane_chain_and_small_vocabularies_keep_their_bound():
    """k = max(k_base·(1 + log2 n), k_base + ⌈V/L⌉ + L − 2), L = 2 in float64 and 4 in float32 and the
    low dtypes: a lane-wise vocabulary sum in 128-bit registers (docs/vectors.md)."""
    t = compare.Tolerances({})
    ce, tkl = catalog.get("lm.cross_entropy"), catalog.get("distill.token_kl")
    assert compare.lane_chain(128256, "float32") == 32064 + 2 and compare.lane_chain(1, "float32") == 0
    assert compare.lane_chain(128256, "float64") == 64128 and compare.lane_chain(128256, "bfloat16") == 32066
    assert t.k(ce, "float64", 2 * 128256, None, 128256) == ce.k_base + 64128
    assert t.k(ce, "float32", 2 * 128256, None, 128256) == ce.k_base + 32066
    assert t.k(ce, "float64", 4 * 16, None, 16) == ce.k_base * 7          # the pairwise model is larger
    assert t.k(tkl, "float32", 256, None, 256) == tkl.k_base + 66         # 72 vs 74: barely
    assert t.k(tkl, "float32", 128, None, 128) == tkl.k_base * 8
    assert t.k(ce, "float64", 2 * 128256, 5.0, 128256) == 5.0             # a case's k still wins


@pytest.mark.parametrize("objective, inputs, v", [
    ("lm.cross_entropy", {"logits": np.zeros((3, 7)), "labels": np.zeros(3)}, 7),
    ("lm.linear_cross_entropy", {"hidden": np.zeros((2, 5)), "weight": np.zeros((11, 5)), "labels": np.zeros(2)}, 11),
    ("distill.softmax", {"logits": np.zeros((2, 3, 9))}, 9),
    ("distill.softmax", {"logits": np.zeros(())}, 1),                  # malformed: no vocabulary axis
    ("grpo.loss", {"logp": np.zeros((2, 5))}, 1),
    ("kl.estimator", {"logp": np.zeros(4)}, 1),
])
def test_vocabulary_length_is_the_axis_named_v(objective, inputs, v):
    assert compare.vocabulary_length(catalog.get(objective), inputs) == v


def test_target_override_file(tmp_path):
    path = tmp_path / "tol.json"
    path.write_text('{"grpo.*": {"bfloat16": 100}}')
    t = compare.Tolerances.from_file(path)
    assert t.k(catalog.get("grpo.loss"), "bfloat16", 10, None) == 100
    path.write_text('{"grpo.*": {"bfloat16": -1}}')
    with pytest.raises(ValueError, match="--tolerances"):
        compare.Tolerances.from_file(path)


def test_unknown_model_is_refused():
    with pytest.raises(ValueError, match="careful, native"):
        compare.Tolerances({}, model="loose")


# ------------------------------------------------------------------------------ the two models

def _test(scale=2.0, elements=None, n=4):
    test = {"inputs": {"values": [[1.0] * n], "mask": [[1] * n]}, "params": {},
            "scale": {"outputs": {"value": str(scale)}, "grads": {"values": str(scale)}}}
    if elements is not None:
        test["scale"]["elements"] = {"value": str(elements)}
    return test


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_careful_bound_is_elementwise_roundings_float32_reductions_and_the_final_rounding(dtype):
    spec = catalog.get("grpo.aggregate")
    want = np.array(-0.3)
    k = spec.k_base * (1 + np.log2(4))
    ulp = compare.ulp(want, dtype)
    u = compare.UNIT_ROUNDOFF
    # output: the stored elements; gradient: |want| element by element
    careful = compare.Tolerances({}).for_case(spec, _test(elements=1.5), dtype)
    assert careful.measure("value", want, want).tol == pytest.approx(
        compare.K_ELEM * u[dtype] * 1.5 + k * u["float32"] * 2.0 + ulp, rel=1e-12)
    g = np.array([0.25, -4.0, 0.0, 1e-3])
    tol = compare.bound(g, dtype, k, 2.0, np.abs(g))
    assert careful.measure("grad:values", g + 0.999 * tol, g).passed
    assert not careful.measure("grad:values", g + 1.01 * tol, g).passed
    # without stored elements the output's own magnitude is used
    plain = compare.Tolerances({}).for_case(spec, _test(), dtype)
    assert plain.measure("value", want, want).tol == pytest.approx(
        compare.K_ELEM * u[dtype] * 0.3 + k * u["float32"] * 2.0 + ulp, rel=1e-12)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_native_model_and_target_overrides_use_the_dtype_unit_roundoff(dtype):
    spec = catalog.get("grpo.aggregate")
    want = np.array(-0.3)
    k = spec.k_base * (1 + np.log2(4))
    native = compare.Tolerances({}, model="native").for_case(spec, _test(elements=1.5), dtype)
    assert native.measure("value", want, want).tol == pytest.approx(
        k * compare.UNIT_ROUNDOFF[dtype] * 2.0 + compare.ulp(want, dtype), rel=1e-12)
    override = compare.Tolerances({"grpo.*": {dtype: 50}}).for_case(spec, _test(elements=1.5), dtype)
    assert override.measure("value", want, want).tol == pytest.approx(
        50 * compare.UNIT_ROUNDOFF[dtype] * 2.0 + compare.ulp(want, dtype), rel=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_float64_and_float32_do_not_depend_on_the_model(dtype):
    spec = catalog.get("grpo.aggregate")
    want = np.array(-0.3)
    tols = {model: compare.Tolerances({}, model=model).for_case(spec, _test(elements=1.5), dtype)
            .measure("value", want, want).tol for model in compare.MODELS}
    assert tols["careful"] == tols["native"]


# ------------------------------------------------------------------------------ on the real vectors

@pytest.fixture(scope="module")
def vectors(bundled_vectors):
    return bundled_vectors


def _log_softmax(z, T):
    with np.errstate(invalid="ignore"):
        return scipy.special.log_softmax(np.asarray(z, dtype=np.float64) / T, axis=-1)


def _kl(log_a, log_b):
    """Σ a·(log a − log b) over the last axis, 0·log 0 = 0 (float64)."""
    a = np.exp(log_a)
    with np.errstate(invalid="ignore"):
        return np.where(a > 0, a * (log_a - log_b), 0.0).sum(-1)


def _token_kl(z, t, T, direction, teacher_t=None):
    lq, lp = _log_softmax(z, T), _log_softmax(t, T if teacher_t is None else teacher_t)
    return _kl(lq, lp) if direction == "reverse" else _kl(lp, lq)


def _cross_entropy(z, t, T, direction):
    lq, lp = _log_softmax(z, T), _log_softmax(t, T)
    a, log_b = (lq, lp) if direction == "reverse" else (lp, lq)
    with np.errstate(invalid="ignore"):
        return np.where(np.exp(a) > 0, -np.exp(a) * log_b, 0.0).sum(-1)


def _hinton_without_t2(z, t, labels, T, alpha):
    ce = -np.take_along_axis(_log_softmax(z, 1.0), np.asarray(labels)[:, None], -1)[:, 0]
    return np.mean((1 - alpha) * ce + alpha * _kl(_log_softmax(t, T), _log_softmax(z, T)))


def _inputs(test):
    return {k: numbers.decode_input(v) for k, v in test["inputs"].items()}


# objective -> (name, wrong formula in float64 or None where it is not wrong, output)
WRONG = {
    "distill.token_kl": [
        ("swapped direction", lambda x, p, c: _token_kl(x["student_logits"], x["teacher_logits"], p["temperature"],
                                                        "forward" if c["direction"] == "reverse" else "reverse")),
        ("cross-entropy for KL", lambda x, p, c: _cross_entropy(x["student_logits"], x["teacher_logits"],
                                                                p["temperature"], c["direction"])),
        ("untempered teacher", lambda x, p, c: None if p["temperature"] == 1 else _token_kl(
            x["student_logits"], x["teacher_logits"], p["temperature"], c["direction"], teacher_t=1.0)),
    ],
    "distill.hinton": [
        ("missing T²", lambda x, p, c: None if not c["t2_scale"] or p["temperature"] == 1 or p["alpha"] == 0
         else _hinton_without_t2(x["student_logits"], x["teacher_logits"], x["labels"], p["temperature"],
                                 p["alpha"])),
    ],
}
OUTPUT = {"distill.token_kl": "kl", "distill.hinton": "loss"}


def _careful(objective, inputs, params, conventions, dtype):
    """refimpl.torch in ``dtype``: float32 inside, rounded once (the careful implementation)."""
    fn = getattr(tdistill, objective.split(".")[1])
    kw = {k: torch.tensor(v, dtype=torch.int64 if k == "labels" else getattr(torch, dtype))
          for k, v in inputs.items()}
    return fn(**kw, **params, **conventions).to(torch.float64).numpy()


def _round(x, dtype):
    return np.asarray(torch.tensor(np.asarray(x, dtype=np.float64)).to(getattr(torch, dtype))
                      .to(torch.float64).numpy())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("objective", sorted(WRONG))
def test_careful_model_passes_the_right_formula_and_fails_wrong_ones(vectors, objective, dtype):
    """On every valid low-precision vector: refimpl.torch (float32 inside) passes; a wrong formula
    evaluated in float64 and rounded to the dtype (as careful as an implementation can be) fails
    wherever it differs from the exact value by more than 4 ulps plus the float32 term — the
    bound is below that (K_ELEM·u·|want| < 3 ulps). Under the native model most of them pass."""
    spec = catalog.get(objective)
    caught, judged, native_passed = {}, 0, 0
    for case in vectors.cases(objective):
        test = case.test
        if test["result"] != "valid" or dtype not in test["dtypes"]:
            continue
        judged += 1
        name = OUTPUT[objective]
        want = np.asarray(test["expected"][name], dtype=np.float64)
        x, conv = _inputs(test), case.conventions
        tol = compare.Tolerances({}).for_case(spec, test, dtype)
        right = _careful(objective, x, test["params"], conv, dtype)
        assert tol.measure(name, right, want).passed, (case.uid, dtype)
        f32_term = tol.k * compare.UNIT_ROUNDOFF["float32"] * float(test["scale"]["outputs"][name])
        for label, formula in WRONG[objective]:
            value = formula(x, test["params"], conv)
            if value is None:
                continue
            wrong = _round(value, dtype)
            m = tol.measure(name, wrong, want)
            far = np.abs(wrong - want) > 4 * compare.ulp(want, dtype) + f32_term
            if far.any():
                assert not m.passed, (label, case.uid, dtype)
                caught[label] = caught.get(label, 0) + 1
                native = compare.Tolerances({}, model="native").for_case(spec, test, dtype)
                native_passed += native.measure(name, wrong, want).passed
    assert judged >= 40
    assert all(n >= 10 for n in caught.values()) and len(caught) == len(WRONG[objective]), caught
    assert native_passed > 0, "the native model should be the loose one"


def test_stored_elements_bound_the_value_they_judge(vectors):
    """scale.elements (Σ of the terms' magnitudes) is stored for the outputs that reduce terms, in
    every low-precision test of those objectives, and is at least |value|."""
    reducing = {"distill.hinton": "loss", "grpo.aggregate": "value", "grpo.loss": "loss",
                "proximal_kl.loss": "loss", "proximal_kl.future_cost": "cost", "reward.pairwise": "loss",
                "ppo.value_loss": "loss", "moe.router_z_loss": "loss", "lm.cross_entropy": "loss",
                "lm.linear_cross_entropy": "loss", "ppo.entropy_bonus": "loss", "moe.load_balancing": "loss"}
    seen = set()
    for case in vectors.cases():
        test = case.test
        elements = test.get("scale", {}).get("elements")
        low = bool({"bfloat16", "float16"} & set(test["dtypes"])) and test["result"] != "invalid"
        # lm.cross_entropy reduces its token losses except under reduction='none' (one per token);
        # lm.linear_cross_entropy stores them always (each logit's rounding to the dtype, per token)
        reduces = case.objective in reducing and (case.conventions.get("reduction") != "none"
                                                  or case.objective == "lm.linear_cross_entropy")
        assert (elements is not None) == (low and reduces), case.uid
        if elements is None:
            continue
        name = reducing[case.objective]
        e = np.asarray(elements[name], dtype=np.float64)
        want = np.abs(np.asarray(test["expected"][name], dtype=np.float64))
        assert e.shape in ((), want.shape) and np.all(e >= want * (1 - 1e-5)), case.uid
        for grad in (k.removeprefix("grad:") for k in elements if k.startswith("grad:")):
            # a gradient's stored terms (lm.linear_cross_entropy) bound its largest |value|
            g = np.abs(np.asarray(test["grads"][grad], dtype=np.float64))
            assert float(elements[f"grad:{grad}"]) >= g.max() * (1 - 1e-5), (case.uid, grad)
        seen.add(case.objective)
    assert seen == set(reducing)
