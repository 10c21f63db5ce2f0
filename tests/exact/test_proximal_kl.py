"""Exact reference for proximal_kl.future_cost and proximal_kl.loss: values against an
independent loop, gradients against numerical derivatives (every convention), bad input."""
from __future__ import annotations

import itertools
import math
import random

import mpmath
import numpy as np
import pytest
from gradcheck import assert_vjp_matches

from lossproof.refimpl.exact import mp, proximal_kl
from lossproof.refimpl.validate import InputError

DIGITS: list[float] = []


@pytest.fixture(scope="module", autouse=True)
def _gradcheck_summary():
    yield
    if DIGITS:
        print(f"\n[proximal_kl] {len(DIGITS)} gradient checks, worst agreement {min(DIGITS):.1f} digits")


MASK = [[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]]   # ragged lengths and a fully masked row


def _case(seed, B=3, T=4, spread=1.5):
    rng = random.Random(seed)
    logp = [[rng.uniform(-3, -0.05) for _ in range(T)] for _ in range(B)]
    behavior = [[x + rng.uniform(-spread, spread) * 0.3 for x in row] for row in logp]
    ref = [[x + rng.uniform(-spread, spread) for x in row] for row in logp]
    adv = [rng.uniform(-1.5, 1.5) for _ in range(B)]
    return logp, behavior, ref, adv


# --------------------------------------------------------------------------- independent loops

def _future_loop(logp, ref, mask, clip=None, window=None):
    out = []
    for lp_row, rp_row, m_row in zip(logp, ref, mask):
        T = len(lp_row)
        row = []
        for t in range(T):
            last = T - 1 if window is None else min(T - 1, t + window)
            f = mpmath.fsum(m_row[u] * (mpmath.mpf(lp_row[u]) - mpmath.mpf(rp_row[u]))
                            for u in range(t + 1, last + 1))
            if clip is not None:
                f = min(max(f, -mpmath.mpf(clip)), mpmath.mpf(clip))
            row.append(f)
        out.append(row)
    return out


def _loss_loop(logp, behavior, ref, adv, mask, beta=0.04, ratio_clip=None, ratio_cap=None,
               future_clip=None, future_window=None, aggregation="token-mean"):
    """The per-token loss written out token by token, then the four aggregations."""
    F = _future_loop(logp, ref, mask, future_clip, future_window)
    rows = []
    for b, (lp_row, bp_row, rp_row) in enumerate(zip(logp, behavior, ref)):
        row = []
        for t, (lp, bp, rp) in enumerate(zip(lp_row, bp_row, rp_row)):
            x = mpmath.mpf(adv[b]) - mpmath.mpf(beta) * (mpmath.mpf(lp) - mpmath.mpf(rp) + F[b][t])
            rho = mpmath.exp(mpmath.mpf(lp) - mpmath.mpf(bp))
            if ratio_cap is not None:
                rho = min(rho, mpmath.mpf(ratio_cap))
            if ratio_clip is None:
                row.append(-rho * x)
            else:
                e = mpmath.mpf(ratio_clip)
                row.append(-min(rho * x, min(max(rho, 1 - e), 1 + e) * x))
        rows.append(row)
    n = [sum(r) for r in mask]
    sums = [mpmath.fsum(m * v for m, v in zip(mr, vr)) for mr, vr in zip(mask, rows)]
    live = [i for i in range(len(n)) if n[i] > 0]
    if aggregation == "token-mean":
        return mpmath.fsum(sums) / sum(n)
    if aggregation == "seq-mean-token-mean":
        return mpmath.fsum(sums[i] / n[i] for i in live) / len(live)
    seq = mpmath.fsum(sums[i] for i in live) / len(live)
    return seq if aggregation == "seq-mean-token-sum" else seq / len(mask[0])


def test_future_cost_matches_the_loop():
    logp, _, ref, _ = _case(1)
    for clip, window in [(None, None), (0.3, None), (None, 1), (None, 2), (0.5, 2), (None, 10)]:
        got = proximal_kl.future_cost(logp, ref, MASK, clip=clip, window=window)
        with mpmath.workdps(50):
            want = _future_loop(logp, ref, MASK, clip, window)
        for g_row, w_row in zip(got, want):
            for g, w in zip(g_row, w_row):
                assert abs(g - w) <= mpmath.mpf(10) ** -45


def test_future_cost_small_example():
    # k = (0.5, −0.25, 1, 2); F_t = Σ_{u>t} k_u; the last token has no future.
    logp = [[-1.0, -1.25, -2.0, -1.0]]
    ref = [[-1.5, -1.0, -3.0, -3.0]]
    F = proximal_kl.future_cost(logp, ref, [[1, 1, 1, 1]])
    assert [float(x) for x in F[0]] == [2.75, 3.0, 2.0, 0.0]
    F = proximal_kl.future_cost(logp, ref, [[1, 1, 0, 1]])
    assert [float(x) for x in F[0]] == [1.75, 2.0, 2.0, 0.0]     # masked u = 2 adds nothing
    F = proximal_kl.future_cost(logp, ref, [[1, 1, 1, 1]], clip=1.0, window=1)
    assert [float(x) for x in F[0]] == [-0.25, 1.0, 1.0, 0.0]


CONVENTIONS = [
    {},
    {"aggregation": "seq-mean-token-mean"},
    {"aggregation": "seq-mean-token-sum"},
    {"aggregation": "seq-mean-token-sum-norm"},
    {"beta": 0.5, "future_clip": 0.4},
    {"beta": 0.5, "future_window": 1},
    {"beta": 0.5, "future_window": 2, "future_clip": 0.8},
    {"ratio_cap": 1.1},
    {"ratio_clip": 0.2},
    {"ratio_clip": 0.1, "ratio_cap": 1.05, "beta": 0.3, "aggregation": "seq-mean-token-mean"},
]


@pytest.mark.parametrize("conv", CONVENTIONS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "paper")
def test_loss_value_matches_the_loop(conv):
    logp, behavior, ref, adv = _case(2)
    got = proximal_kl.loss(logp, behavior, ref, adv, MASK, **conv)
    with mpmath.workdps(50):
        want = _loss_loop(logp, behavior, ref, adv, MASK, **conv)
    assert abs(got - want) <= mpmath.mpf(10) ** -45 * max(1, abs(want))


@pytest.mark.parametrize("conv", CONVENTIONS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "paper")
def test_loss_vjp_matches_numerical_derivative(conv):
    """The coefficient X_t is detached: the numerical derivative is taken with ref_logp moved
    along with logp (k_t, F_t and so X_t stay put), which is exactly sg(X_t)."""
    logp0, behavior, ref0, adv = _case(3)
    lp0 = mp.array("logp", logp0)
    rp0 = mp.array("ref_logp", ref0)

    def fn(logp, **kw):
        return proximal_kl.loss(logp=logp, ref_logp=rp0 + (np.asarray(logp, dtype=object) - lp0), **kw)

    def vjp(ct, logp, **kw):
        return proximal_kl.loss_vjp(ct, logp=logp, ref_logp=ref0, **kw)

    kw = dict(logp=logp0, behavior_logp=behavior, advantages=adv, mask=MASK, **conv)
    rho = [math.exp(a - b) for ra, rb in zip(logp0, behavior) for a, b in zip(ra, rb)]
    kinks = [conv.get("ratio_cap", -9)] + ([1 - conv["ratio_clip"], 1 + conv["ratio_clip"]]
                                          if "ratio_clip" in conv else [])
    assert all(abs(r - k) > 1e-3 for r in rho for k in kinks)
    grad = vjp(mpmath.mpf(1), **kw)["logp"]
    if "ratio_cap" in conv or "ratio_clip" in conv:   # both branches occur on live tokens
        live = [g for g, m in zip(grad.flat, np.array(MASK).flat) if m]
        assert any(g == 0 for g in live) and any(g != 0 for g in live)
    DIGITS.append(assert_vjp_matches(fn, vjp, kw, ["logp"], mpmath.mpf("0.7")))


def test_gradient_is_minus_rho_times_the_full_coefficient():
    # The update as DESIGN §4 states it: the gradient is −ρ_t·(A − β·Σ_{u≥t} k_u)·∇log π(y_t|s_t) / N.
    logp, behavior, ref, adv = _case(4, B=2, T=3)
    mask = [[1, 1, 1], [1, 1, 1]]
    grad = proximal_kl.loss_vjp(1.0, logp, behavior, ref, adv, mask, beta=0.7)["logp"]
    with mpmath.workdps(50):
        for b, t in itertools.product(range(2), range(3)):
            k = [mpmath.mpf(logp[b][u]) - mpmath.mpf(ref[b][u]) for u in range(t, 3)]
            rho = mpmath.exp(mpmath.mpf(logp[b][t]) - mpmath.mpf(behavior[b][t]))
            want = -rho * (mpmath.mpf(adv[b]) - mpmath.mpf(0.7) * mpmath.fsum(k)) / 6
            assert abs(grad[b, t] - want) < mpmath.mpf(10) ** -45


def test_extremes_stay_exact():
    # ratios e^±50 and large KL gaps keep every digit (no overflow, no cancellation to 0).
    logp = [[-0.5, -60.0]]
    behavior = [[-50.5, -10.0]]
    ref = [[-0.5, -1e4 * 0 - 60.0 + 1e-8]]
    value = proximal_kl.loss(logp, behavior, ref, [1.0], [[1, 1]], beta=0.04)
    with mpmath.workdps(60):
        k = [mpmath.mpf(0), mpmath.mpf(-60.0) - mpmath.mpf(ref[0][1])]
        want = -(mpmath.exp(50) * (1 - mpmath.mpf(0.04) * (k[0] + k[1]))
                 + mpmath.exp(-50) * (1 - mpmath.mpf(0.04) * k[1])) / 2
    assert abs(value - want) <= abs(want) * mpmath.mpf(10) ** -45


def test_mpf_parameters_keep_their_digits():
    # The tabular theorem passes 50-digit β; it must not be rounded to binary64.
    logp, behavior, ref, adv = _case(5, B=1, T=2)
    with mpmath.workdps(50):
        beta = mpmath.mpf(1) / 3
    a = proximal_kl.loss(logp, behavior, ref, adv, [[1, 1]], beta=beta)
    b = proximal_kl.loss(logp, behavior, ref, adv, [[1, 1]], beta=1 / 3)
    assert a != b and abs(a - b) < 1e-15


# --------------------------------------------------------------------------- bad input

GOOD = dict(logp=[[-1.0, -2.0]], behavior_logp=[[-1.1, -2.1]], ref_logp=[[-1.2, -1.9]],
            advantages=[0.5], mask=[[1, 1]])


@pytest.mark.parametrize("name,value", [
    ("logp", [-1.0, -2.0]),                      # rank 1
    ("logp", [[float("nan"), -2.0]]),
    ("logp", [[float("-inf"), -2.0]]),
    ("behavior_logp", [[-1.1]]),
    ("ref_logp", [[-1.2, -1.9, -3.0]]),
    ("ref_logp", [[float("inf"), -1.9]]),
    ("advantages", [0.5, 0.1]),
    ("advantages", [float("nan")]),
    ("mask", [[1, 2]]),
    ("mask", [[0, 0]]),
    ("mask", [[1]]),
    ("beta", 0.0),
    ("beta", -0.1),
    ("ratio_clip", 0.0),
    ("ratio_clip", 1.0),
    ("ratio_cap", 0.0),
    ("future_clip", -1.0),
    ("future_window", 0),
    ("future_window", 1.5),
    ("future_window", True),
    ("aggregation", "sum"),
])
def test_bad_input_names_the_argument(name, value):
    for fn in (proximal_kl.loss, lambda **kw: proximal_kl.loss_vjp(1.0, **kw)):
        with pytest.raises(InputError, match=f"^{name}"):
            fn(**{**GOOD, name: value})


@pytest.mark.parametrize("name,value", [
    ("logp", [[-1.0]]), ("mask", [[0, 0]]), ("clip", 0.0), ("window", 0), ("window", "2"),
    ("ref_logp", [[float("nan"), 0.0]]),
])
def test_future_cost_bad_input(name, value):
    kw = dict(logp=[[-1.0, -2.0]], ref_logp=[[-1.2, -1.9]], mask=[[1, 1]])
    with pytest.raises(InputError, match=f"^{'ref_logp' if name == 'logp' else name}"):
        proximal_kl.future_cost(**{**kw, name: value})
