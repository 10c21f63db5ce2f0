"""Tests of refimpl/exact/distill.py's ``skew_kl`` and ``tvd``: analytic gradients against
mpmath.diff, properties that tie them to the other divergences, the subgradient at ties, and
bad inputs."""
from __future__ import annotations

import gradcheck
import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lossproof.refimpl.exact import distill
from lossproof.refimpl.validate import InputError

NINF = float("-inf")


@pytest.fixture(autouse=True)
def _fifty_digits():
    """The hand-written formulas below are evaluated at the exact reference's 50 digits."""
    with mpmath.workdps(50):
        yield


def _rand(rng, shape, scale=2.0):
    return (rng.standard_normal(shape) * scale).tolist()


def _check(case, fn, vjp, kwargs, cotangents, wrt=("student_logits",)):
    return gradcheck.assert_vjp_matches(fn, vjp, kwargs, list(wrt), cotangents, case)


def _finite_student(fn, vjp, template):
    """fn/vjp differentiated at the finite student logits only; the analytic gradient at a −inf
    student logit must be exactly 0."""
    template = np.array(template, dtype=object)
    finite = [i for i in np.ndindex(template.shape) if template[i] != NINF]
    dead = [i for i in np.ndindex(template.shape) if template[i] == NINF]

    def embed(values):
        x = template.copy()
        for i, v in zip(finite, values):
            x[i] = v
        return x

    def fn_w(**kw):
        return fn(student_logits=embed(kw.pop("finite")), **kw)

    def vjp_w(ct, **kw):
        g = vjp(ct, student_logits=embed(kw.pop("finite")), **kw)["student_logits"]
        assert all(g[i] == 0 for i in dead)
        return {"finite": np.array([g[i] for i in finite], dtype=object)}

    return fn_w, vjp_w, [template[i] for i in finite]


# ---------------------------------------------------------------------------------------------
# Gradients (analytic VJP vs mpmath.diff, 30 digits)
# ---------------------------------------------------------------------------------------------

SKEW = [(d, a, T) for d in ("forward", "reverse") for a, T in
        ((0.1, 1.0), (0.5, 0.5), (0.9, 3.0), (1.0, 1.0), (0.01, 2.0))]


@pytest.mark.parametrize("direction,alpha,temperature", SKEW)
def test_grad_skew_kl(direction, alpha, temperature):
    rng = np.random.default_rng(31 + int(alpha * 100))
    kw = {"student_logits": _rand(rng, (2, 4)), "teacher_logits": _rand(rng, (2, 4)), "alpha": alpha,
          "direction": direction, "temperature": temperature}
    _check(f"skew {direction} a={alpha} T={temperature}", distill.skew_kl, distill.skew_kl_vjp, kw,
           _rand(rng, (2,), 1.0))


@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_grad_skew_kl_one_sided_rows(direction):
    """Rows where one model dominates the mixture at the student's top token (q ≫ p, and p ≫ q):
    both branches of the forward gradient's weights (x or x − 1/α) and the k3 form of the
    reverse one."""
    kw = {"student_logits": [[6.0, 0.5, -1.0, 0.0], [-2.0, 0.3, 5.0, 1.0]],
          "teacher_logits": [[-3.0, 1.0, 0.5, 2.0], [0.0, 0.2, 9.0, -1.0]], "alpha": 0.1,
          "direction": direction, "temperature": 1.0}
    _check(f"skew {direction} one-sided", distill.skew_kl, distill.skew_kl_vjp, kw, [0.75, -1.25])


@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_grad_skew_kl_neg_inf(direction):
    s = [[0.3, NINF, 1.2, -0.4], [-0.5, 0.4, 2.0, NINF]]
    t = [[0.1, -0.7, NINF, 0.9], [NINF, 0.4, 1.0, NINF]]   # every support pattern: finite for α > 0
    fn, vjp, x0 = _finite_student(distill.skew_kl, distill.skew_kl_vjp, s)
    _check(f"skew {direction} -inf", fn, vjp, {"finite": x0, "teacher_logits": t, "alpha": 0.25,
                                               "direction": direction, "temperature": 2.0},
           [0.6, -1.1], wrt=("finite",))


@pytest.mark.parametrize("temperature", [0.5, 1.0, 3.0])
def test_grad_tvd(temperature):
    rng = np.random.default_rng(47)
    kw = {"student_logits": _rand(rng, (3, 5)), "teacher_logits": _rand(rng, (3, 5)),
          "temperature": temperature}
    _check(f"tvd T={temperature}", distill.tvd, distill.tvd_vjp, kw, _rand(rng, (3,), 1.0))


def test_grad_tvd_neg_inf():
    s = [[0.3, NINF, 1.2, -0.4], [-0.5, 0.4, 2.0, NINF]]
    t = [[0.1, -0.7, NINF, 0.9], [NINF, 0.4, 1.0, NINF]]
    fn, vjp, x0 = _finite_student(distill.tvd, distill.tvd_vjp, s)
    _check("tvd -inf", fn, vjp, {"finite": x0, "teacher_logits": t, "temperature": 1.0}, [0.6, -1.1],
           wrt=("finite",))


def test_tvd_subgradient_at_ties():
    """At q = p the value 0 is a minimum and |·| has no derivative: the reference takes
    sign(0) = 0. Equal rows give gradient 0 (any constant sign would: the centring removes it);
    a tie at a token where both are 0 (−inf on both sides) does not enter; a tie at one token of
    a row that differs elsewhere uses σ = 0 there, which the one-sided derivatives bracket."""
    s = [[0.5, -1.0, 2.0], [0.0, NINF, 1.0]]
    g = distill.tvd_vjp([1.0, -1.5], s, s, temperature=1.0)["student_logits"]
    assert all(v == 0 for v in g.flat)
    assert all(v == 0 for v in distill.tvd(s, s).flat)
    # z = (a, b, c), t = (a, c, b): token 0 ties exactly (the same partition sum), the others do not.
    z, t = [[0.25, 1.0, -0.5]], [[0.25, -0.5, 1.0]]
    g = distill.tvd_vjp([1.0], z, t)["student_logits"][0]
    q = [mpmath.exp(x) / mpmath.fsum(mpmath.exp(y) for y in z[0]) for x in z[0]]
    sigma = [0, 1, -1]
    mean = mpmath.fsum(qi * si for qi, si in zip(q, sigma))
    want = [qj * (sj - mean) / 2 for qj, sj in zip(q, sigma)]
    assert all(abs(a - b) < mpmath.mpf(10) ** -40 for a, b in zip(g, want))
    # the one-sided derivatives in z_0 bracket the sign(0) choice
    def f(x):
        return distill.tvd([[x, 1.0, -0.5]], t)[0]
    h = mpmath.mpf(10) ** -20
    right, left = (f(0.25 + h) - f(0.25)) / h, (f(0.25) - f(0.25 - h)) / h
    assert min(left, right) - mpmath.mpf(10) ** -15 <= g[0] <= max(left, right) + mpmath.mpf(10) ** -15


# ---------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------

PROPS = settings(max_examples=30)
logit = st.floats(-6, 6, allow_nan=False, allow_infinity=False)
dyadic_alpha = st.sampled_from([0.125, 0.25, 0.5, 0.75, 1.0])  # 1 − α exact


@st.composite
def logit_pair(draw):
    n, v = draw(st.integers(1, 2)), draw(st.integers(2, 4))
    row = st.lists(logit, min_size=v, max_size=v)
    return draw(st.lists(row, min_size=n, max_size=n)), draw(st.lists(row, min_size=n, max_size=n))


def _close(a, b, digits=40):
    a, b = np.asarray(a, dtype=object).ravel(), np.asarray(b, dtype=object).ravel()
    return all(abs(x - y) <= mpmath.mpf(10) ** -digits * max(1, abs(y)) for x, y in zip(a, b))


def _probs(z, T):
    e = [mpmath.exp(mpmath.mpf(v) / T) for v in z]
    s = mpmath.fsum(e)
    return [x / s for x in e]


@PROPS
@given(logit_pair(), dyadic_alpha, st.sampled_from([0.5, 1.0, 2.0]))
def test_skew_kl_against_its_definition_and_bounds(pair, alpha, temperature):
    s, t = pair
    for direction in ("forward", "reverse"):
        kl = distill.skew_kl(s, t, alpha=alpha, direction=direction, temperature=temperature)
        for zs, zt, v in zip(s, t, kl.flat):
            q, p = _probs(zs, temperature), _probs(zt, temperature)
            a, b = (p, q) if direction == "forward" else (q, p)
            want = mpmath.fsum(ai * mpmath.log(ai / (alpha * ai + (1 - alpha) * bi)) for ai, bi in zip(a, b))
            assert abs(v - want) <= mpmath.mpf(10) ** -35 * max(1, abs(want))
            assert 0 <= v <= -mpmath.log(alpha) + mpmath.mpf(10) ** -40
        if alpha == 1.0:
            assert all(v == 0 for v in kl.flat)


@PROPS
@given(logit_pair(), st.sampled_from([0.125, 0.25, 0.5, 0.75]), st.sampled_from([0.5, 1.0, 2.0]))
def test_generalized_jsd_is_two_skew_kls(pair, beta, temperature):
    """JSD_β = β·KL(p‖βp + (1−β)q) + (1−β)·KL(q‖(1−β)q + βp): the forward skew KL at α = β and the
    reverse one at α = 1 − β (GKD eq. 2 and DistiLLM §3 share the mixture)."""
    s, t = pair
    fwd = distill.skew_kl(s, t, alpha=beta, direction="forward", temperature=temperature)
    rev = distill.skew_kl(s, t, alpha=1 - beta, direction="reverse", temperature=temperature)
    jsd = distill.generalized_jsd(s, t, beta=beta, temperature=temperature)
    assert _close(beta * fwd + (1 - beta) * rev, jsd, 38)


@PROPS
@given(logit_pair(), st.sampled_from([0.5, 1.0, 2.0]))
def test_tvd_definition_symmetry_and_range(pair, temperature):
    s, t = pair
    v = distill.tvd(s, t, temperature=temperature)
    assert _close(v, distill.tvd(t, s, temperature=temperature))
    for zs, zt, x in zip(s, t, v.flat):
        q, p = _probs(zs, temperature), _probs(zt, temperature)
        want = mpmath.fsum(abs(a - b) for a, b in zip(q, p)) / 2
        assert abs(x - want) <= mpmath.mpf(10) ** -40
        assert 0 <= x <= 1


def test_equal_rows_and_shift_invariance():
    s = [[0.5, -1.0, 2.0, NINF], [3.0, 3.0, -2.0, 0.0]]
    shifted = [[v + 2.5 for v in row] for row in s]
    for d in ("forward", "reverse"):
        assert all(v == 0 for v in distill.skew_kl(s, s, direction=d).flat)
        g = distill.skew_kl_vjp([1.0, 2.0], s, s, direction=d)["student_logits"]
        assert all(v == 0 for v in g.flat)
        t = [[0.0, 1.0, -1.0, 0.5], [1.0, -1.0, 0.0, 2.0]]
        assert _close(distill.skew_kl(s, t, direction=d), distill.skew_kl(shifted, t, direction=d))
    t = [[0.0, 1.0, -1.0, NINF], [1.0, -1.0, 0.0, 2.0]]
    assert _close(distill.tvd(s, t), distill.tvd(shifted, t))


def test_article_pair_closed_forms():
    """Teacher (0.8, 0.2), student (0.4, 0.6) ([reading-math-3] §Destilación on-policy): the skew
    KLs at α = 0.1 and the TVD 0.4, written out by hand."""
    lq, lp = [mpmath.log(0.4), mpmath.log(0.6)], [mpmath.log(0.8), mpmath.log(0.2)]
    s, t = [[float(x) for x in lq]], [[float(x) for x in lp]]
    q, p = _probs(s[0], 1), _probs(t[0], 1)
    a = mpmath.mpf(0.1)
    fwd = mpmath.fsum(pi * mpmath.log(pi / (a * pi + (1 - a) * qi)) for pi, qi in zip(p, q))
    rev = mpmath.fsum(qi * mpmath.log(qi / (a * qi + (1 - a) * pi)) for pi, qi in zip(p, q))
    assert _close(distill.skew_kl(s, t), [fwd])
    assert _close(distill.skew_kl(s, t, direction="reverse"), [rev])
    assert abs(distill.tvd(s, t)[0] - mpmath.mpf("0.4")) < mpmath.mpf(10) ** -15  # binary64 logits


# ---------------------------------------------------------------------------------------------
# Bad inputs
# ---------------------------------------------------------------------------------------------

P = {"student_logits": [[1.0, 2.0, 3.0], [0.0, 1.0, 0.0]], "teacher_logits": [[0.0, 1.0, 2.0], [1.0, 1.0, 1.0]]}
BAD = [
    ("skew_kl", {**P, "alpha": 0.0}, [1, 1], "alpha"),
    ("skew_kl", {**P, "alpha": -0.1}, [1, 1], "alpha"),
    ("skew_kl", {**P, "alpha": 1.5}, [1, 1], "alpha"),
    ("skew_kl", {**P, "alpha": float("nan")}, [1, 1], "alpha"),
    ("skew_kl", {**P, "direction": "both"}, [1, 1], "direction"),
    ("skew_kl", {**P, "temperature": 0.0}, [1, 1], "temperature"),
    ("skew_kl", {**P, "teacher_logits": [[0.0, 1.0, 2.0]]}, [1, 1], "teacher_logits"),
    ("skew_kl", {**P, "student_logits": [[NINF] * 3, [0.0, 1.0, 0.0]]}, [1, 1], "student_logits"),
    ("skew_kl", P, [1, 1, 1], "cotangent"),
    ("tvd", {**P, "temperature": -1.0}, [1, 1], "temperature"),
    ("tvd", {**P, "teacher_logits": [[0.0, float("inf"), 2.0], [1.0, 1.0, 1.0]]}, [1, 1], "teacher_logits"),
    ("tvd", {**P, "student_logits": [[1.0, float("nan"), 3.0], [0.0, 1.0, 0.0]]}, [1, 1], "student_logits"),
    ("tvd", {**P, "teacher_logits": [[NINF] * 3, [1.0, 1.0, 1.0]]}, [1, 1], "teacher_logits"),
    ("tvd", {"student_logits": [[]], "teacher_logits": [[]]}, [1], "student_logits"),
    ("tvd", P, [[1, 1]], "cotangent"),
]


@pytest.mark.parametrize("objective,kwargs,cotangent,name", BAD,
                         ids=[f"{o}-{n}-{i}" for i, (o, _, _, n) in enumerate(BAD)])
def test_bad_input(objective, kwargs, cotangent, name):
    fn, vjp = getattr(distill, objective), getattr(distill, objective + "_vjp")
    if name != "cotangent":
        with pytest.raises(InputError, match=f"^{name}:"):
            fn(**kwargs)
    with pytest.raises(InputError, match=f"^{name}:"):
        vjp(cotangent, **kwargs)
