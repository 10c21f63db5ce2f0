"""The ball-arithmetic tape of the certified reference (refimpl/certified/_ball.py): enclosures
of values and gradients against independent high-precision mpmath values, branch decisions,
a straddled kink, exact zeros."""
from __future__ import annotations

import mpmath
import pytest
from flint import arb

from lossproof.refimpl.certified import _ball, distill


def _contains(ball, exact: mpmath.mpf) -> bool:
    """The exact value (100 digits, far inside any radius here) lies in the ball."""
    with _ball.precision(512):
        return ball.contains(arb(mpmath.nstr(exact, 100)))


def _value_and_grad(fn, x: float):
    with _ball.precision(256), _ball.recording() as tape:
        v = tape.var(x)
        out = fn(v)
        tape.backward([(out, _ball.ONE)])
        return _ball.value(out), v.gradient()


@pytest.mark.parametrize("x", [-30.0, -1.5, 0.0, 1e-12, 2.75, 40.0])
def test_composite_value_and_gradient_enclose_the_closed_form(x):
    """f(x) = x·log σ(x) + k3(x)·expm1(x)/(1 + x²); f' from the product and quotient rules by
    hand, evaluated by mpmath at 100 digits."""
    def f(v):
        return v * _ball.log_sigmoid(v) + _ball.k3(v) * _ball.expm1(v) / (1 + _ball.square(v))

    value, grad = _value_and_grad(f, x)
    with mpmath.workdps(100):
        X = mpmath.mpf(x)
        ls = -mpmath.log1p(mpmath.exp(-X))
        sig_neg = 1 / (1 + mpmath.exp(X))                     # d log σ(x)/dx = σ(−x)
        k3 = X + mpmath.expm1(-X)
        dk3 = -mpmath.expm1(-X)
        q = mpmath.expm1(X) / (1 + X * X)
        dq = (mpmath.exp(X) * (1 + X * X) - mpmath.expm1(X) * 2 * X) / (1 + X * X) ** 2
        exact_value = X * ls + k3 * q
        exact_grad = ls + X * sig_neg + dk3 * q + k3 * dq
    assert _contains(value, exact_value)
    assert _contains(grad, exact_grad)
    with _ball.precision(512):
        assert value.rad() < arb("1e-60") * (1 + abs(value).upper())


def test_an_exact_zero_stays_exact():
    """k3(0) = 0 and d k3/dℓ(0) = 0 are exact balls (radius 0), which is what lets a printed '0'
    be certified; x − x is the constant 0 for a recorded x."""
    value, grad = _value_and_grad(_ball.k3, 0.0)
    assert value.is_zero() and grad.is_zero()
    value, grad = _value_and_grad(lambda v: _ball.exp(v) * (v - v), 1.25)
    assert value.is_zero() and grad.is_zero()


def test_softmax_vjp_equal_cotangents_give_an_exact_zero_gradient():
    out = distill.softmax_vjp([[0.75, 0.75, 0.75]], [[1.5, -2.0, 0.25]])
    assert all(g.is_zero() for g in out["logits"][0])


def test_branches_decide_only_what_the_balls_prove():
    with _ball.precision(128):
        assert _ball.sign(arb(-3)) == -1 and _ball.sign(arb(0)) == 0 and _ball.sign(arb(1) / 3) == 1
        x = _ball.ONE + _ball.ball(2.0 ** -300)     # rounds at 128 bits: a ball around 1 that contains 1
        assert not x.is_exact() and x.contains(1)
        with pytest.raises(_ball.Straddle):
            _ball.clip(x, None, _ball.ONE)
    with _ball.precision(512):                        # exact at 512 bits: strictly above the bound
        x = _ball.ONE + _ball.ball(2.0 ** -300)
        assert _ball.clip(x, None, _ball.ONE) is _ball.ONE


def test_a_clip_on_its_bound_passes_the_gradient_and_beyond_it_blocks_it():
    """The closed band (torch.clamp): exactly on the bound the entry is x itself (gradient 1);
    strictly beyond, the constant bound (gradient 0)."""
    def clipped(v):
        return _ball.clip(v, _ball.ball(-0.5), _ball.ball(0.5)) * 3

    assert _value_and_grad(clipped, 0.5)[1] == 3
    assert _value_and_grad(clipped, 0.75)[1].is_zero()
    assert _value_and_grad(clipped, -0.75)[1].is_zero()


def test_absolute_has_gradient_sign_and_zero_at_an_exact_zero():
    """|x| (kl.estimator kind 'abs'): gradient ±1 off the kink, exactly 0 at an exact 0 (the
    catalog's subgradient, torch.abs's); a ball straddling 0 is undecided, not guessed."""
    assert _value_and_grad(_ball.absolute, -0.75) == (arb(0.75), -1)
    assert _value_and_grad(_ball.absolute, 2.0 ** -60) == (arb(2.0 ** -60), 1)
    value, grad = _value_and_grad(_ball.absolute, 0.0)
    assert value.is_zero() and grad.is_zero()
    with _ball.precision(128):
        x = _ball.ball(2.0 ** -300) + _ball.ONE - _ball.ONE  # contains 0 without being 0
        with pytest.raises(_ball.Straddle):
            _ball.absolute(x)


def test_a_vjp_is_the_sum_over_outputs():
    """softmax VJP against its closed form q_j(c_j − Σ c_i q_i) at 100 digits."""
    z, c = [0.5, -1.25, 3.0], [1.0, -2.0, 0.5]
    with _ball.precision(256):
        g = distill.softmax_vjp(c, z)["logits"]
    with mpmath.workdps(100):
        e = [mpmath.exp(mpmath.mpf(v)) for v in z]
        q = [v / mpmath.fsum(e) for v in e]
        mean = mpmath.fsum(ci * qi for ci, qi in zip(c, q))
        for gj, qj, cj in zip(g, q, c):
            assert _contains(gj, qj * (cj - mean))
