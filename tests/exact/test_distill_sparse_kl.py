"""Tests of refimpl/exact/distill.py's ``sparse_kl`` (a top-k teacher): the analytic gradient of
every ``renormalize`` convention against mpmath.diff, the properties that tie it to the full
forward KL, the tail bucket's edges, and bad inputs."""
from __future__ import annotations

import math

import gradcheck
import mpmath
import numpy as np
import pytest

from lossproof.refimpl.exact import distill
from lossproof.refimpl.validate import InputError

NINF = float("-inf")
CONVENTIONS = ("none", "teacher", "both", "tail")


@pytest.fixture(autouse=True)
def _fifty_digits():
    with mpmath.workdps(50):
        yield


def _teacher(rng, n, v, k, mass):
    """Distinct ids per row and log-probabilities of a top-k summing to ``mass``."""
    ids = [rng.permutation(v)[:k].tolist() for _ in range(n)]
    w = rng.dirichlet(np.ones(k), size=n) * mass
    return ids, np.log(w).tolist()


@pytest.mark.parametrize("renormalize", CONVENTIONS)
@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.5])
def test_grad_sparse_kl(renormalize, temperature):
    rng = np.random.default_rng(61 + CONVENTIONS.index(renormalize))
    ids, lps = _teacher(rng, 3, 6, 3, 0.8)
    kw = {"student_logits": (rng.standard_normal((3, 6)) * 2).tolist(), "teacher_ids": ids,
          "teacher_logps": lps, "renormalize": renormalize, "temperature": temperature}
    gradcheck.assert_vjp_matches(distill.sparse_kl, distill.sparse_kl_vjp, kw, ["student_logits"],
                                 rng.standard_normal(3).tolist(), f"sparse {renormalize} T={temperature}")


@pytest.mark.parametrize("renormalize", CONVENTIONS)
def test_grad_sparse_kl_padding(renormalize):
    """A teacher id with log-probability −inf is padding (no term; 'both' leaves it out of Σ q)."""
    kw = {"student_logits": [[0.3, -1.0, 2.0, 0.5], [1.0, 1.0, -2.0, 0.0]], "teacher_ids": [[2, 0, 3], [1, 3, 0]],
          "teacher_logps": [[math.log(0.6), math.log(0.3), NINF], [math.log(0.5), NINF, math.log(0.25)]],
          "renormalize": renormalize, "temperature": 1.5}
    gradcheck.assert_vjp_matches(distill.sparse_kl, distill.sparse_kl_vjp, kw, ["student_logits"], [0.7, -1.3],
                                 f"sparse padding {renormalize}")


def _full_forward_kl(z, t, T):
    return [float(x) for x in distill.token_kl(z, t, "forward", T)]


@pytest.mark.parametrize("renormalize", CONVENTIONS[:3])
def test_full_support_is_the_forward_kl(renormalize):
    """K = V with the teacher's whole softmax: every convention is KL(p‖q), also its gradient."""
    rng = np.random.default_rng(5)
    z, t = rng.standard_normal((2, 5)).tolist(), rng.standard_normal((2, 5)).tolist()
    lp = [[float(mpmath.log(x)) for x in row] for row in np.array(distill.softmax(t), dtype=object)]
    ids = [list(range(5))] * 2
    got = distill.sparse_kl(z, ids, lp, renormalize, 1.0)
    want = distill.token_kl(z, t, "forward", 1.0)
    assert all(abs(a - b) < 1e-15 for a, b in zip(got, want))
    g = distill.sparse_kl_vjp([1.0, 1.0], z, ids, lp, renormalize, 1.0)["student_logits"]
    h = distill.token_kl_vjp([1.0, 1.0], z, t, "forward", 1.0)["student_logits"]
    assert max(abs(a - b) for a, b in zip(g.flat, h.flat)) < 1e-15


def test_conventions_relate():
    """'teacher' = ('none' with p̃) and 'both' ≤ 'teacher' (the student's mass off the ids only adds
    −log Σ q ≥ 0); 'none' is negative when the student puts more on the ids than the teacher."""
    z, ids, lp = [[3.0, 2.5, -1.0, -2.0]], [[0, 1]], [[math.log(0.3), math.log(0.2)]]
    none = distill.sparse_kl(z, ids, lp, "none")[0]
    teacher = distill.sparse_kl(z, ids, lp, "teacher")[0]
    both = distill.sparse_kl(z, ids, lp, "both")[0]
    assert none < 0 < both < teacher
    s = mpmath.fsum(mpmath.exp(mpmath.mpf(x)) for x in lp[0])   # 0.5 up to the binary64 log-probabilities
    p = [mpmath.exp(mpmath.mpf(x)) / s for x in lp[0]]
    q = distill.softmax(z)[0]
    assert abs(teacher - mpmath.fsum(pk * mpmath.log(pk / q[i]) for pk, i in zip(p, ids[0]))) < 1e-45
    qs = q[0] + q[1]
    assert abs(both - mpmath.fsum(pk * mpmath.log(pk * qs / q[i]) for pk, i in zip(p, ids[0]))) < 1e-45


def test_temperature_divides_the_student_only():
    z, ids, lp = [[1.0, 0.0, -1.0]], [[0, 2]], [[math.log(0.7), math.log(0.2)]]
    q = distill.softmax(z, 2.0)[0]
    want = mpmath.fsum(mpmath.exp(mpmath.mpf(a)) * (mpmath.mpf(a) - mpmath.log(q[i])) for a, i in zip(lp[0], ids[0]))
    assert abs(distill.sparse_kl(z, ids, lp, "none", 2.0)[0] - want) < 1e-45


def _buckets(z, ids, lp, T=1.0):
    """The forward KL over the K+1 buckets written out: p_tail = 1 − Σp, q_tail = 1 − Σq at the ids."""
    out = []
    for zr, ir, lr in zip(z, ids, lp):
        q = distill.softmax([zr], T)[0]
        p = [mpmath.exp(mpmath.mpf(a)) for a in lr]
        q_tail = 1 - mpmath.fsum(q[i] for pk, i in zip(p, ir) if pk)
        pq = [(pk, q[i]) for pk, i in zip(p, ir) if pk] + [(1 - mpmath.fsum(p), q_tail)]
        out.append(mpmath.fsum(a * mpmath.log(a / b) for a, b in pq if a))
    return out


def test_tail_is_the_kl_over_the_buckets():
    """'tail' is KL(p‖q) over the K ids plus one bucket each for the rest; with a padding id its
    student mass belongs to the tail."""
    z = [[0.3, -1.0, 2.0, 0.5, 1.5], [1.0, 1.0, -2.0, 0.0, NINF]]
    ids, lp = [[2, 0, 3], [1, 3, 0]], [[math.log(0.6), math.log(0.1), NINF], [math.log(0.5), math.log(0.25), -3.0]]
    got = distill.sparse_kl(z, ids, lp, "tail", 0.7)
    assert all(abs(a - b) < 1e-45 for a, b in zip(got, _buckets(z, ids, lp, 0.7)))


def test_tail_is_below_the_full_forward_kl():
    """Lumping tokens into one bucket can only lose information: 0 ≤ 'tail' ≤ KL(p‖q) when the
    teacher's top-k comes from its whole softmax (K < V); at K = V − 1 the bucket is one token and
    the two agree (up to the binary64 log-probabilities)."""
    rng = np.random.default_rng(9)
    z, t = rng.standard_normal((3, 7)).tolist(), rng.standard_normal((3, 7)).tolist()
    lp_full = [[float(mpmath.log(x)) for x in row] for row in np.array(distill.softmax(t), dtype=object)]
    full = distill.token_kl(z, t, "forward")
    for k in (1, 3, 6):
        ids = [[int(i) for i in np.argsort(row)[::-1][:k]] for row in t]
        lp = [[row[i] for i in r] for row, r in zip(lp_full, ids)]
        got = distill.sparse_kl(z, ids, lp, "tail")
        if k < 6:
            assert all(0 < a < b - 1e-3 for a, b in zip(got, full))
        else:
            assert all(abs(a - b) < 1e-15 for a, b in zip(got, full))


def test_tail_zero_when_the_teacher_is_one_hot():
    """p_tail = 0 (the single live log-probability is 0): the tail term is 0, kl = −log q_i, and the
    gradient is q − onehot (the ratio p_tail/q_tail is 0), also with K = V and padding."""
    z = [[0.5, -0.25, 1.0, 2.0]]
    ids, lp = [[2, 0, 1, 3]], [[0.0, NINF, NINF, NINF]]
    q = distill.softmax(z)[0]
    assert abs(distill.sparse_kl(z, ids, lp, "tail")[0] + mpmath.log(q[2])) < 1e-45
    g = distill.sparse_kl_vjp([1.0], z, ids, lp, "tail")["student_logits"][0]
    assert max(abs(g[j] - (q[j] - (j == 2))) for j in range(4)) < 1e-45
    gradcheck.assert_vjp_matches(distill.sparse_kl, distill.sparse_kl_vjp,
                                 {"student_logits": z, "teacher_ids": ids, "teacher_logps": lp, "renormalize": "tail",
                                  "temperature": 1.0}, ["student_logits"], [1.3], "sparse tail one-hot")


def test_grad_tail_tiny_tail_and_impossible_tokens():
    """A tail of 1e-9 in the teacher, a student −inf off the ids (gradient 0 there) and a padding id."""
    lp = [[math.log(0.6), math.log1p(-0.6 - 1e-9 - 0.1), math.log(0.1)], [math.log(0.5), NINF, -2.0]]
    kw = {"student_logits": [[0.3, NINF, 2.0, 0.5, 9.0], [1.0, 1.0, -2.0, NINF, 0.0]],
          "teacher_ids": [[2, 0, 3], [1, 3, 0]], "teacher_logps": lp, "renormalize": "tail", "temperature": 0.8}
    gradcheck.assert_vjp_matches(distill.sparse_kl, distill.sparse_kl_vjp, kw, ["student_logits"], [0.7, -1.3],
                                 "sparse tail tiny")
    assert distill.sparse_kl_vjp([1.0, 1.0], **kw)["student_logits"][0][1] == 0


def test_tail_full_support_is_refused():
    """K = V with the teacher's whole softmax: Σ p of the rounded log-probabilities is 1 ± 1e-16, so
    either the tail is negative or it is > 0 with no student mass left for it — never a valid row."""
    rng = np.random.default_rng(5)
    z, t = rng.standard_normal((4, 5)).tolist(), rng.standard_normal((4, 5)).tolist()
    lp = [[float(mpmath.log(x)) for x in row] for row in np.array(distill.softmax(t), dtype=object)]
    for i in range(4):
        with pytest.raises(InputError, match="teacher_logps|student_logits") as err:
            distill.sparse_kl([z[i]], [list(range(5))], [lp[i]], "tail")
        assert "tail" in str(err.value)


BAD = [
    ({"teacher_ids": [[0, 0]]}, "teacher_ids", "repeats"),
    ({"teacher_ids": [[0, 4]]}, "teacher_ids", "outside"),
    ({"teacher_ids": [[0, -1]]}, "teacher_ids", "outside"),
    ({"teacher_ids": [[0, 1.5]]}, "teacher_ids", "integers"),
    ({"teacher_logps": [[math.log(0.8), math.log(0.5)]]}, "teacher_logps", "sum to"),
    ({"teacher_logps": [[math.nan, -1.0]]}, "teacher_logps", "NaN"),
    ({"teacher_logps": [[math.inf, -1.0]]}, "teacher_logps", "inf"),
    ({"teacher_logps": [[NINF, NINF]]}, "teacher_logps", "-inf everywhere"),
    ({"teacher_ids": [[0, 1, 2, 3, 0]], "teacher_logps": [[-2.0] * 5]}, "teacher_ids", "K <= V"),
    ({"teacher_ids": [[0]], "teacher_logps": [[-1.0, -2.0]]}, "teacher_logps", "shape"),
    ({"teacher_ids": [[0, 1], [1, 2]], "teacher_logps": [[-1.0, -2.0], [-1.0, -2.0]]}, "teacher_ids", "rows"),
    ({"student_logits": [[NINF, 0.0, 1.0, 2.0]]}, "student_logits", "support mismatch"),
    ({"renormalize": "student"}, "renormalize", "student"),
    ({"renormalize": "tail", "teacher_logps": [[math.log(0.5), math.log(0.5)]]}, "teacher_logps", "Σ p ≤ 1"),
    ({"renormalize": "tail", "student_logits": [[0.0, NINF, 1.0, NINF]]}, "student_logits", "tail"),
    ({"temperature": 0.0}, "temperature", "0"),
]


@pytest.mark.parametrize("change,name,words", BAD, ids=[f"{b[1]}-{b[2]}" for b in BAD])
def test_bad_inputs(change, name, words):
    kw = {"student_logits": [[0.0, 1.0, 2.0, 3.0]], "teacher_ids": [[0, 2]], "teacher_logps": [[-1.0, -2.0]],
          "renormalize": "none", "temperature": 1.0, **change}
    with pytest.raises(InputError, match=name) as err:
        distill.sparse_kl(**kw)
    assert words in str(err.value)


@pytest.mark.parametrize("renormalize", CONVENTIONS)
@pytest.mark.parametrize("temperature", [0.5, 2.5])
def test_t2_scale_is_t_squared_times_the_kl_and_its_gradient(renormalize, temperature):
    """axolotl's top-k KD loss multiplies the summed KL by kd_temperature²: every row and every
    gradient entry exactly T² times the unscaled one, and the VJP still the derivative."""
    rng = np.random.default_rng(71 + CONVENTIONS.index(renormalize))
    ids, lps = _teacher(rng, 3, 6, 3, 0.8)
    kw = {"student_logits": (rng.standard_normal((3, 6)) * 2).tolist(), "teacher_ids": ids,
          "teacher_logps": lps, "renormalize": renormalize, "temperature": temperature}
    t2 = mpmath.mpf(temperature) ** 2
    plain, scaled = distill.sparse_kl(**kw), distill.sparse_kl(**kw, t2_scale=True)
    assert all(abs(s - t2 * p) <= mpmath.mpf(10) ** -45 * abs(s) for p, s in zip(plain, scaled))
    ct = rng.standard_normal(3).tolist()
    g, g2 = distill.sparse_kl_vjp(ct, **kw)["student_logits"], distill.sparse_kl_vjp(ct, **kw, t2_scale=True)["student_logits"]
    assert all(abs(b - t2 * a) <= mpmath.mpf(10) ** -45 * (abs(b) + 1) for a, b in zip(g.flat, g2.flat))
    gradcheck.assert_vjp_matches(distill.sparse_kl, distill.sparse_kl_vjp, {**kw, "t2_scale": True},
                                 ["student_logits"], ct, f"sparse {renormalize} T={temperature} t2")


def test_t2_scale_must_be_a_flag():
    with pytest.raises(InputError, match="t2_scale"):
        distill.sparse_kl([[0.0, 1.0]], [[0]], [[-0.5]], t2_scale="yes")
