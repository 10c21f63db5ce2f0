"""The ball primitives added for the lm family (refimpl/certified/_ball.py ``tanh``, ``entropy``):
enclosures of values and partials against 100-digit mpmath, and the exact zeros of a row of equal
logits."""
from __future__ import annotations

import mpmath
import pytest
from flint import arb

from lossproof.refimpl.certified import _ball


def _contains(ball, exact) -> bool:
    with _ball.precision(512):
        return ball.contains(arb(mpmath.nstr(exact, 100)))


@pytest.mark.parametrize("x", [-40.0, -1.5, 0.0, 0.3, 25.0])
def test_tanh_and_its_derivative_enclose_the_closed_form(x):
    with _ball.precision(256), _ball.recording() as tape:
        v = tape.var(x)
        out = _ball.tanh(v)
        tape.backward([(out, _ball.ONE)])
    with mpmath.workdps(100):
        assert _contains(_ball.value(out), mpmath.tanh(x))
        assert _contains(v.gradient(), mpmath.sech(x) ** 2)


@pytest.mark.parametrize("row", [[1.0, -0.5, 2.25, 0.0], [30.0, -30.0, 0.0], [3.0]])
def test_entropy_and_its_partials_enclose_the_closed_form(row):
    with _ball.precision(256), _ball.recording() as tape:
        xs = [tape.var(x) for x in row]
        h = _ball.entropy(xs, max(range(len(row)), key=lambda j: row[j]))
        tape.backward([(h, _ball.ONE)])
    with mpmath.workdps(100):
        x = [mpmath.mpf(v) for v in row]
        lse = mpmath.log(mpmath.fsum(mpmath.exp(v) for v in x))
        q = [mpmath.exp(v - lse) for v in x]
        want = -mpmath.fsum(qj * (v - lse) for qj, v in zip(q, x))
        assert _contains(_ball.value(h), want)
        for xj, qj, v in zip(xs, q, x):
            assert _contains(xj.gradient(), -qj * (v - lse + want))


def test_equal_logits_have_exactly_zero_entropy_partials():
    with _ball.precision(256), _ball.recording() as tape:
        xs = [tape.var(1.5) for _ in range(7)]
        h = _ball.entropy(xs, 0)
        tape.backward([(h, _ball.ONE)])
    assert all(x.gradient().is_zero() for x in xs)
    with mpmath.workdps(100):
        assert _contains(_ball.value(h), mpmath.log(7))
