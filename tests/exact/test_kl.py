"""The exact KL estimators: gradients against numerical derivatives, properties, the
article's sampled log-ratio, extreme inputs and bad input."""
import math

import mpmath
import numpy as np
import pytest
from gradcheck import assert_vjp_matches
from hypothesis import given, settings
from hypothesis import strategies as st

from lossproof.refimpl.exact import kl, mp

KINDS = ("k1", "k2", "k3", "abs")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("clamp", [None, 0.5, 10.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_gradient_matches_numerical_derivative(kind, clamp, seed):
    r = np.random.default_rng(seed)
    logp = (-r.exponential(1.5, 5)).tolist()
    ref = (np.array(logp) + r.normal(0, 0.8, 5)).tolist()
    ct = r.normal(size=5).tolist()
    values = kl.estimator(logp, ref, kind=kind)
    if clamp is not None:  # keep away from the clamp's kinks, where the derivative jumps
        assert all(abs(abs(v) - clamp) > 1e-3 for v in values)
    assert_vjp_matches(kl.estimator, kl.estimator_vjp,
                       {"logp": logp, "ref_logp": ref, "kind": kind, "clamp": clamp}, ["logp"], ct)


@settings(max_examples=40)
@given(st.lists(st.tuples(st.floats(-30, 0), st.floats(-30, 0)), min_size=1, max_size=6))
def test_k3_is_nonnegative_and_zero_only_at_equal_inputs(pairs):
    logp, ref = zip(*pairs)
    values = kl.estimator(list(logp), list(ref), kind="k3")
    for v, a, b in zip(values, logp, ref):
        assert v >= 0
        assert (v == 0) == (a == b)


def test_abs_is_the_absolute_log_ratio_with_gradient_zero_at_its_kink():
    # verl 0.9.1 kl_penalty "abs": |logp − ref_logp|. At log r = 0 the derivative jumps from −1 to
    # 1; the catalog defines it as 0 there (torch.abs's and numpy.sign's subgradient).
    logp, ref = [-1.0, -2.0, -3.0, -0.5], [-1.0, -1.5, -3.5, -0.5 + 2.0 ** -54]
    assert list(kl.estimator(logp, ref, kind="abs")) == [0, mpmath.mpf(0.5), mpmath.mpf(0.5), mpmath.mpf(2) ** -54]
    grad = kl.estimator_vjp([2.0, 2.0, 2.0, 2.0], logp, ref, kind="abs")["logp"]
    assert list(grad) == [0, -2, 2, -2]
    # on either side of the kink the one-sided derivatives are ∓1, and mpmath.diff's central
    # difference at the kink itself is the defined 0
    one = lambda x: kl.estimator([x], [-1.0], kind="abs")[0]  # noqa: E731
    assert mpmath.diff(one, mpmath.mpf(-1.0)) == 0


def test_estimators_agree_on_the_sign_structure():
    # k1 = −log r, k2 = (log r)²/2: with log r = 0.5 − 0.25 = 0.25
    v1 = kl.estimator([-0.5], [-0.25], kind="k1")[0]
    v2 = kl.estimator([-0.5], [-0.25], kind="k2")[0]
    assert v1 == mpmath.mpf(-0.25) and v2 == mpmath.mpf(0.25) ** 2 / 2


def test_article_sampled_log_ratio():
    # [reading-math-3], "Un token muestreado o todo el vocabulario": «El logaritmo del cociente de
    # «cat» muestreado por sí solo es aproximadamente −0.182» (student 0.5, teacher 0.6).
    v = kl.estimator([math.log(0.5)], [math.log(0.6)], kind="k1")[0]
    assert round(float(v), 3) == -0.182


def test_k3_near_zero_keeps_its_relative_accuracy():
    # log r = 1e-12: k3 = (log r)²/2 + O((log r)³) ≈ 5e-25, which r − 1 − log r would lose entirely
    with mp.precision(100):
        high = kl.estimator([-1.0], [-1.0 + 1e-12], kind="k3")[0]
    low = kl.estimator([-1.0], [-1.0 + 1e-12], kind="k3")[0]
    assert abs(low - high) / high < mpmath.mpf(10) ** -40


def test_extreme_ratios():
    values = kl.estimator([-50.0, 0.0, -690.0], [0.0, -50.0, -689.0], kind="k3")
    with mpmath.workdps(60):
        assert mpmath.almosteq(values[0], mpmath.exp(50) - 51, rel_eps=mpmath.mpf(10) ** -45)
        assert mpmath.almosteq(values[1], mpmath.exp(-50) + 49, rel_eps=mpmath.mpf(10) ** -45)


@pytest.mark.parametrize("kwargs, name", [
    ({"logp": [float("nan")], "ref_logp": [0.0]}, "logp"),
    ({"logp": [0.0], "ref_logp": [float("inf")]}, "ref_logp"),
    ({"logp": [0.0], "ref_logp": [float("-inf")]}, "ref_logp"),
    ({"logp": [0.0, 1.0], "ref_logp": [0.0]}, "ref_logp"),
    ({"logp": [0.0], "ref_logp": [0.0], "kind": "k4"}, "kind"),
    ({"logp": [0.0], "ref_logp": [0.0], "clamp": 0}, "clamp"),
    ({"logp": [0.0], "ref_logp": [0.0], "clamp": float("nan")}, "clamp"),
])
def test_bad_input_names_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name}: "):
        kl.estimator(**kwargs)


def test_bad_cotangent_shape_names_the_cotangent():
    with pytest.raises(ValueError, match="^cotangent: "):
        kl.estimator_vjp([1.0, 2.0], [0.0], [0.0])
