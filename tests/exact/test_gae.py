"""Exact reference for gae.advantages and gae.kl_rewards: properties of GAE (arXiv 1506.02438
eqs. 10, 16) and of the KL-shaped rewards, checked against forms written independently of the
recursion (the explicit sums of tests/independent/test_gae_values.py check the values)."""
from __future__ import annotations

import mpmath
import pytest

from lossproof.refimpl import validate
from lossproof.refimpl.exact import gae

TINY = mpmath.mpf("1e-40")
R = [[0.0, 0.125, 0.0, 1.0, 0.0], [0.0, -0.25, 0.5, 0.0, 0.0]]
V = [[0.5, 0.25, -0.75, 0.5, 3.0], [0.125, -0.25, 0.375, 1.5, -2.0]]
TRAIL = [[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]]


def test_lambda_zero_is_the_td_error():
    # λ = 0: Â_t = δ_t = r_t + γ·V_{t+1} − V_t (eq. 10), V = 0 after the last valid token
    adv = gae.advantages(R, V, TRAIL, gamma=0.9, lam=0.0)["advantages"]
    with mpmath.workdps(50):
        for r, v, m, a in zip(R, V, TRAIL, adv):
            n = sum(m)
            for t in range(n):
                nxt = mpmath.mpf(v[t + 1]) if t + 1 < n else 0
                assert abs(a[t] - (r[t] + mpmath.mpf(0.9) * nxt - v[t])) < TINY


def test_lambda_one_is_the_discounted_return_minus_the_value():
    # λ = 1: Â_t = Σ_l γ^l r_{t+l} − V_t (the values telescope), and the return is the discounted return
    out = gae.advantages(R, V, TRAIL, gamma=0.5, lam=1.0)
    with mpmath.workdps(50):
        for r, v, m, a, ret in zip(R, V, TRAIL, out["advantages"], out["returns"]):
            n = sum(m)
            for t in range(n):
                disc = mpmath.fsum(mpmath.mpf(0.5) ** (u - t) * r[u] for u in range(t, n))
                assert abs(a[t] - (disc - v[t])) < TINY and abs(ret[t] - disc) < TINY


@pytest.mark.parametrize("whiten", validate.WHITENINGS)
def test_skip_and_zero_agree_on_trailing_padding(whiten):
    a = gae.advantages(R, V, TRAIL, gamma=0.9, lam=0.8, whiten=whiten, masked_tokens="skip")
    b = gae.advantages(R, V, TRAIL, gamma=0.9, lam=0.8, whiten=whiten, masked_tokens="zero")
    for name in ("advantages", "returns"):
        assert all(abs(x - y) < TINY for x, y in zip(a[name].flat, b[name].flat))


def test_skip_ignores_what_masked_tokens_hold():
    inner = [[1, 0, 0, 1, 1], [1, 1, 0, 1, 0]]
    a = gae.advantages(R, V, inner, gamma=0.9, lam=0.8)
    junk_r = [[x + (0 if m else 7.5) for x, m in zip(r, mm)] for r, mm in zip(R, inner)]
    junk_v = [[x + (0 if m else -3.0) for x, m in zip(v, mm)] for v, mm in zip(V, inner)]
    b = gae.advantages(junk_r, junk_v, inner, gamma=0.9, lam=0.8)
    assert list(a["advantages"].flat) == list(b["advantages"].flat)
    assert all(x == 0 for x, m in zip(a["advantages"].flat, [m for row in inner for m in row]) if not m)


@pytest.mark.parametrize("std_ddof", [0, 1])
def test_whitening_standardises_the_valid_tokens(std_ddof):
    inner = [[1, 0, 1, 1, 0], [1, 1, 0, 1, 0]]
    raw = gae.advantages(R, V, inner, gamma=0.99, lam=0.95)["advantages"]
    on = [m == 1 for row in inner for m in row]
    for whiten in ("centred", "keep-mean"):
        adv = gae.advantages(R, V, inner, gamma=0.99, lam=0.95, whiten=whiten, std_ddof=std_ddof)["advantages"]
        valid = [a for a, o in zip(adv.flat, on) if o]
        with mpmath.workdps(50):
            raw_mean = mpmath.fsum(a for a, o in zip(raw.flat, on) if o) / len(valid)
            mean = mpmath.fsum(valid) / len(valid)
            var = mpmath.fsum((a - mean) ** 2 for a in valid) / (len(valid) - std_ddof)
            assert abs(var - 1) < TINY
            assert abs(mean - (raw_mean if whiten == "keep-mean" else 0)) < TINY


def test_one_valid_token_whitens_to_zero():
    out = gae.advantages([[0.0, 1.5]], [[0.5, 0.25]], [[0, 1]], whiten="centred", std_ddof=1)
    assert list(out["advantages"].flat) == [0, 0] and out["returns"][0][1] == 1.5


def test_kl_rewards_sum_to_score_minus_beta_total_kl():
    scores, lp = [2.0, -1.0], [[-0.5, -1.0, -2.0], [-0.25, -3.0, -1.0]]
    ref, mask = [[-0.75, -1.0, -3.5], [-0.5, -2.0, -1.0]], [[1, 1, 1], [1, 0, 1]]
    for kind in ("k1", "k2", "k3"):
        out = gae.kl_rewards(scores, lp, ref, mask, beta=0.25, kind=kind)["rewards"]
        with mpmath.workdps(50):
            for s, a, b, m, row in zip(scores, lp, ref, mask, out):
                x = [mpmath.mpf(q) - mpmath.mpf(p) for p, q in zip(a, b)]
                k = [{"k1": -y, "k2": y * y / 2, "k3": mpmath.expm1(y) - y}[kind] for y in x]
                total = s - mpmath.mpf(0.25) * mpmath.fsum(kk for kk, o in zip(k, m) if o)
                assert abs(mpmath.fsum(row) - total) < TINY
                assert row[1] == 0 or m[1]


def test_kl_rewards_need_a_token_per_row():
    with pytest.raises(validate.InputError, match="mask: selects no token in row 1"):
        gae.kl_rewards([1.0, 2.0], [[-1.0, -2.0]] * 2, [[-1.0, -2.0]] * 2, [[1, 0], [0, 0]], beta=0.1)


@pytest.mark.parametrize("std_ddof", [0, 1])
@pytest.mark.parametrize("whiten", ["centred", "keep-mean"])
def test_whiten_eps_is_trls_whiten(std_ddof, whiten):
    """TRL's core.py whiten as verl 0.9.1 masked_whiten writes it: μ = Σ m·A/(Σm + ε), σ² = Σ
    m·(A − μ)²/(Σm + ε)·N/(N − ddof), (A − μ)·rsqrt(σ² + ε) (+ μ when the mean is kept)."""
    inner = [[1, 0, 1, 1, 0], [1, 1, 0, 1, 0]]
    eps = 1e-3
    raw = gae.advantages(R, V, inner, gamma=0.99, lam=0.95)["advantages"]
    adv = gae.advantages(R, V, inner, gamma=0.99, lam=0.95, whiten=whiten, std_ddof=std_ddof,
                         whiten_eps=eps)["advantages"]
    on = [m == 1 for row in inner for m in row]
    with mpmath.workdps(50):
        valid = [a for a, o in zip(raw.flat, on) if o]
        n, e = len(valid), mpmath.mpf(eps)
        mean = mpmath.fsum(valid) / (n + e)
        var = mpmath.fsum((a - mean) ** 2 for a in valid) / (n + e) * n / (n - std_ddof)
        for got, a, o in zip(adv.flat, raw.flat, on):
            want = ((a - mean) / mpmath.sqrt(var + e) + (mean if whiten == "keep-mean" else 0)) if o else 0
            assert abs(got - want) < TINY


def test_whiten_eps_needs_whitening():
    with pytest.raises(validate.InputError, match="^whiten_eps:"):
        gae.advantages(R, V, [[1] * 5] * 2, whiten_eps=1e-8)
    with pytest.raises(validate.InputError, match="^whiten_eps:"):
        gae.advantages(R, V, [[1] * 5] * 2, whiten="centred", whiten_eps=-1e-8)
