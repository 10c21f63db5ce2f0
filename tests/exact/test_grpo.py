"""Exact reference for grpo.advantages, grpo.clip, grpo.aggregate and grpo.loss: gradients,
properties, the article's numbers, extremes, bad input."""
from __future__ import annotations

import itertools
import math
import random

import mpmath
import numpy as np
import pytest
from gradcheck import AGREE_DIGITS, agreement_digits, assert_vjp_matches, numerical_vjp
from hypothesis import given, settings
from hypothesis import strategies as st

from lossproof.refimpl.exact import grpo, kl, mp
from lossproof.refimpl.validate import InputError

DIGITS: list[float] = []  # worst agreement of every gradient check, summarised at module end
TINY = mpmath.mpf(10) ** -40


@pytest.fixture(scope="module", autouse=True)
def _gradcheck_summary():
    yield
    if DIGITS:
        print(f"\n[grpo] {len(DIGITS)} gradient checks, worst agreement {min(DIGITS):.1f} digits")


def _check(fn, vjp, kwargs, wrt, cotangents):
    DIGITS.append(assert_vjp_matches(fn, vjp, kwargs, wrt, cotangents))


def _away(x, kinks, margin=1e-3):
    return all(abs(float(x) - k) > margin for k in kinks)


# --------------------------------------------------------------------------- clip: gradients

RATIOS = [0.5, 0.95, 1.1, 1.6, 2.5, 4.0]     # below / inside / above the band, past dual clips
ADVANTAGES = [0.7, -1.3]
CLIP_CONVENTIONS = [(0.2, None, None), (0.2, 0.28, None), (0.1, 0.3, 3.0), (0.2, None, 2.0)]


def _clip_case(seed):
    rng = random.Random(seed)
    pairs = list(itertools.product(RATIOS, ADVANTAGES))
    old = [rng.uniform(-4, -0.1) for _ in pairs]
    logp = [o + math.log(r) for o, (r, _) in zip(old, pairs)]
    adv = [a for _, a in pairs]
    ct = [rng.uniform(-2, 2) for _ in pairs]
    return logp, old, adv, ct


@pytest.mark.parametrize("eps_low,eps_high,dual_clip", CLIP_CONVENTIONS)
def test_clip_vjp_matches_numerical_derivative(eps_low, eps_high, dual_clip):
    logp, old, adv, ct = _clip_case(3)
    hi = eps_low if eps_high is None else eps_high
    kinks = [1 - eps_low, 1 + hi] + ([dual_clip] if dual_clip else [])
    assert all(_away(math.exp(lp - o), kinks) for lp, o in zip(logp, old))
    kw = dict(logp=logp, old_logp=old, advantages=adv, eps_low=eps_low, eps_high=eps_high,
              dual_clip=dual_clip)
    grad = grpo.clip_vjp(ct, **kw)["logp"]
    # Every branch occurs: unclipped (ρA), clipped (0) and, with a dual clip, the floor c·A.
    assert any(g != 0 for g in grad) and any(g == 0 for g in grad)
    if dual_clip:
        value = grpo.clip(**kw)
        with mpmath.workdps(50):
            assert any(v == mpmath.mpf(dual_clip) * a for v, a in zip(value, adv))
    _check(grpo.clip, grpo.clip_vjp, kw, ["logp"], ct)


def test_clip_ties_take_the_unclipped_branch():
    # ρ = 1 exactly inside; A = 0: both branches tie everywhere and the gradient is ρA = 0.
    g = grpo.clip_vjp([1.0, 1.0], [-1.0, -2.0], [-1.0, -2.0], [2.0, 0.0])["logp"]
    assert g[0] == 2 and g[1] == 0


# --------------------------------------------------------------------------- aggregate: gradients

AGG_MASK = [[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]]   # ragged lengths and a fully-masked row


@pytest.mark.parametrize("mode", grpo.MODES)
@pytest.mark.parametrize("norm_length", [None, 7.0])
def test_aggregate_vjp_matches_numerical_derivative(mode, norm_length):
    rng = random.Random(5)
    values = [[rng.uniform(-3, 3) for _ in range(4)] for _ in range(3)]
    kw = dict(values=values, mask=AGG_MASK, mode=mode, norm_length=norm_length)
    _check(grpo.aggregate, grpo.aggregate_vjp, kw, ["values"], 1.0)
    grad = grpo.aggregate_vjp(0.75, **kw)["values"]
    assert all(grad[i, j] == 0 for i in range(3) for j in range(4) if AGG_MASK[i][j] == 0)


def test_aggregate_excludes_fully_masked_rows():
    # verl 0.9.1 agg_loss: fully masked rows leave the sequence means.
    values = [[1.0, 3.0, 9.0], [100.0, 100.0, 100.0], [4.0, 0.0, 0.0]]
    mask = [[1, 1, 0], [0, 0, 0], [1, 0, 0]]
    with mpmath.workdps(50):
        assert grpo.aggregate(values, mask, "seq-mean-token-mean") == 3          # (2 + 4)/2
        assert grpo.aggregate(values, mask, "token-mean") == mpmath.mpf(8) / 3
        assert grpo.aggregate(values, mask, "seq-mean-token-sum") == 4           # (4 + 4)/2
        assert grpo.aggregate(values, mask, "seq-mean-token-sum-norm") == mpmath.mpf(4) / 3
        assert grpo.aggregate(values, mask, "seq-mean-token-sum-norm", norm_length=8) == 0.5


# --------------------------------------------------------------------------- loss: gradients

# Rows: full, ragged, a single token, fully masked (its entries are arbitrary).
LOSS_MASK = [[1, 1, 1], [1, 1, 0], [1, 0, 0], [0, 0, 0]]
LOG_RATIO = [[0.05, 0.4, -0.6], [-0.1, 0.9, 1.2], [0.2, -0.3, 0.0], [0.3, 0.3, 0.3]]
LOG_REF = [[-2.0, 0.3, 1.5], [0.7, -0.5, 2.2], [-1.4, 0.1, 1.0], [0.5, 0.5, 0.5]]  # ref − logp
LOSS_ADV = [0.8, -1.1, 0.5, 1.0]
KL_CLAMP = 0.9


def _loss_case(seed):
    rng = random.Random(seed)
    logp = [[rng.uniform(-3, -0.1) for _ in range(3)] for _ in range(4)]
    old = [[lp - d for lp, d in zip(r1, r2)] for r1, r2 in zip(logp, LOG_RATIO)]
    ref = [[lp + d for lp, d in zip(r1, r2)] for r1, r2 in zip(logp, LOG_REF)]
    return dict(logp=logp, old_logp=old, ref_logp=ref, advantages=LOSS_ADV, mask=LOSS_MASK)


def _assert_away_from_kinks(case, eps_low=0.2, eps_high=None, dual_clip=None, kl_clamp=None,
                            kl_kind="k3", **_):
    hi = eps_low if eps_high is None else eps_high
    ratio_kinks = [1 - eps_low, 1 + hi] + ([dual_clip] if dual_clip else [])
    on = np.array(LOSS_MASK, dtype=bool)
    lr = np.array(case["logp"], dtype=object) - np.array(case["old_logp"], dtype=object)
    log_r = mp.array("x", case["ref_logp"]) - mp.array("y", case["logp"])
    kl_values = kl.unclamped(log_r, kl_kind)
    for idx in zip(*np.nonzero(on)):
        assert _away(math.exp(lr[idx]), ratio_kinks)
        if kl_clamp is not None:
            assert _away(abs(kl_values[idx]), [kl_clamp])


@pytest.mark.parametrize("kl_kind", kl.KINDS)
@pytest.mark.parametrize("kl_clamp", [None, KL_CLAMP])
@pytest.mark.parametrize("kl_ratio_weight", [False, True])
@pytest.mark.parametrize("beta", [0.0, 0.3])
def test_loss_vjp_matches_numerical_derivative_kl(kl_kind, kl_clamp, kl_ratio_weight, beta):
    case = _loss_case(17)
    params = dict(kl_kind=kl_kind, kl_clamp=kl_clamp, kl_ratio_weight=kl_ratio_weight, beta=beta)
    _assert_away_from_kinks(case, **params)
    if kl_clamp is not None:  # the clamp must actually bite somewhere
        log_r = mp.array("x", case["ref_logp"]) - mp.array("y", case["logp"])
        vals = kl.unclamped(log_r, kl_kind)
        assert any(abs(vals[i]) > kl_clamp for i in zip(*np.nonzero(np.array(LOSS_MASK))))
    _check(grpo.loss, grpo.loss_vjp, {**case, **params}, ["logp"], 1.0)


@pytest.mark.parametrize("aggregation", grpo.MODES)
@pytest.mark.parametrize("eps_low,eps_high,dual_clip,norm_length",
                         [(0.2, None, None, None), (0.1, 0.28, 3.0, 5.0)])
def test_loss_vjp_matches_numerical_derivative_aggregation(aggregation, eps_low, eps_high,
                                                           dual_clip, norm_length):
    case = _loss_case(23)
    params = dict(aggregation=aggregation, eps_low=eps_low, eps_high=eps_high,
                  dual_clip=dual_clip, norm_length=norm_length, kl_kind="k2", beta=0.04)
    _assert_away_from_kinks(case, **params)
    _check(grpo.loss, grpo.loss_vjp, {**case, **params}, ["logp"], -1.5)


def test_loss_composes_clip_kl_and_aggregate():
    case = _loss_case(29)
    params = dict(eps_low=0.2, eps_high=0.28, dual_clip=3.0)
    for beta, kind, weight in [(0.0, "k3", False), (0.3, "k1", True), (0.1, "k3", False)]:
        with mpmath.workdps(50):
            per_token = -grpo.clip(case["logp"], case["old_logp"],
                                   np.repeat(np.array(LOSS_ADV)[:, None], 3, axis=1), **params)
            klv = kl.estimator(np.array(case["logp"]).ravel(), np.array(case["ref_logp"]).ravel(),
                               kind=kind).reshape(4, 3)
            w = mp.exp(mp.array("x", case["logp"]) - mp.array("y", case["old_logp"])) if weight else 1
            total = per_token + mpmath.mpf(beta) * w * klv
            want = grpo.aggregate(total, LOSS_MASK, "token-mean")
            got = grpo.loss(**case, **params, beta=beta, kl_kind=kind, kl_ratio_weight=weight,
                            aggregation="token-mean")
            assert abs(got - want) < TINY


# --------------------------------------------------------------------------- loss: sequence ratios

SEQUENCE_CONVENTIONS = [  # (ratio_level, policy_loss, eps_low, eps_high, dual_clip)
    ("sequence", "ppo-clip", 3e-4, 4e-4, None),      # GSPO's own band (arXiv 2507.18071 §5.1)
    ("sequence", "ppo-clip", 0.2, 0.28, 1.3),        # rows above, inside and past the dual clip
    ("sequence-token", "ppo-clip", 3e-4, 4e-4, None),
    ("sequence-token", "ppo-clip", 0.2, 0.28, 1.3),
    ("sequence", "gmpo", 0.35, 0.35, None),          # tokens clipped on both sides of the band
]


def _row_log_ratios(case):
    on = np.array(LOSS_MASK, dtype=bool)
    lr = np.array(case["logp"], dtype=float) - np.array(case["old_logp"], dtype=float)
    return [lr[i][on[i]] for i in range(len(LOSS_MASK)) if on[i].any()]


@pytest.mark.parametrize("level,policy,eps_low,eps_high,dual_clip,kl_ratio_weight", [
    (*c, w) for c in SEQUENCE_CONVENTIONS for w in (False, True) if not (c[1] == "gmpo" and w)])
@pytest.mark.parametrize("aggregation", grpo.MODES)
def test_sequence_loss_vjp_matches_numerical_derivative(level, policy, eps_low, eps_high, dual_clip,
                                                        kl_ratio_weight, aggregation):
    case = _loss_case(37)
    rows = _row_log_ratios(case)
    if policy == "gmpo":
        assert all(_away(x, [-eps_low, eps_high]) for row in rows for x in row)
    else:
        kinks = [1 - eps_low, 1 + eps_high] + ([dual_clip] if dual_clip else [])
        assert all(_away(math.exp(row.mean()), kinks) for row in rows)
    params = dict(policy_loss=policy, eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip,
                  aggregation=aggregation, kl_kind="k3", beta=0.3, kl_ratio_weight=kl_ratio_weight)
    if level == "sequence":
        _check(grpo.loss, grpo.loss_vjp, {**case, **params, "ratio_level": level}, ["logp"], -1.5)
        return
    # GSPO-token's gradient is not the derivative of its value (that is GSPO's): it is the
    # derivative of a token-ratio loss whose ratio is s_i,t = sg[s_i]·π_t/sg[π_t] (§4.3), i.e. the
    # token-level loss against old'_t = logp_t − log s_i, held fixed.
    with mpmath.workdps(60):
        lp, old = mp.array("logp", case["logp"]), mp.array("old", case["old_logp"])
        shifted = lp.copy()
        for i, row in enumerate(LOSS_MASK):
            n = sum(row)
            log_s = mpmath.fsum(lp[i][t] - old[i][t] for t in range(3) if row[t]) / max(n, 1)
            shifted[i] = lp[i] - log_s

    def sequence_token_vjp(ct, **kw):
        return grpo.loss_vjp(ct, **{**kw, "old_logp": case["old_logp"], "ratio_level": level})

    _check(grpo.loss, sequence_token_vjp, {**case, **params, "old_logp": shifted}, ["logp"], -1.5)


def test_gspo_matches_its_definition():
    """GSPO by hand (arXiv 2507.18071 eq. 5): s_i = exp(mean Δ), 1/G Σ_i min(s_i A_i, clip(s_i) A_i)."""
    case = _loss_case(41)
    rows = [i for i, r in enumerate(LOSS_MASK) if any(r)]
    with mpmath.workdps(50):
        want = 0
        for i in rows:
            d = [mpmath.mpf(case["logp"][i][t]) - mpmath.mpf(case["old_logp"][i][t])
                 for t in range(3) if LOSS_MASK[i][t]]
            s = mpmath.exp(mpmath.fsum(d) / len(d))
            a = mpmath.mpf(LOSS_ADV[i])
            want += min(s * a, min(max(s, 1 - mpmath.mpf(0.2)), 1 + mpmath.mpf(0.28)) * a)
        want = -want / len(rows)
        for level in ("sequence", "sequence-token"):
            got = grpo.loss(**case, beta=0.0, eps_low=0.2, eps_high=0.28, ratio_level=level)
            assert abs(got - want) < TINY


def test_gmpo_matches_its_definition():
    """GMPO by hand (arXiv 2507.20673 §3): A_i·exp(mean of the sign-aware log-clipped Δ)."""
    case = _loss_case(43)
    rows = [i for i, r in enumerate(LOSS_MASK) if any(r)]
    eps = mpmath.mpf(0.35)
    with mpmath.workdps(50):
        want = 0
        for i in rows:
            a = mpmath.mpf(LOSS_ADV[i])
            clipped = []
            for t in range(3):
                if LOSS_MASK[i][t]:
                    d = mpmath.mpf(case["logp"][i][t]) - mpmath.mpf(case["old_logp"][i][t])
                    bound = min(max(d, -eps), eps)
                    clipped.append(min(d, bound) if a > 0 else max(d, bound))
            want += a * mpmath.exp(mpmath.fsum(clipped) / len(clipped))
        want = -want / len(rows)
        got = grpo.loss(**case, beta=0.0, eps_low=0.35, ratio_level="sequence", policy_loss="gmpo")
        assert abs(got - want) < TINY


def test_sequence_token_gradient_equals_gspo_without_a_ratio_weighted_kl():
    """GSPO-token has GSPO's value; with per-sequence advantages its gradient is GSPO's (arXiv
    2507.18071 §4.3: every aggregation weighs a row's tokens equally), except through a KL
    weighted by the ratio, whose per-token terms differ along the row."""
    case = _loss_case(47)
    for aggregation in grpo.MODES:
        for beta, weighted, same in ((0.3, False, True), (0.3, True, False)):
            kw = dict(beta=beta, kl_ratio_weight=weighted, eps_low=0.2, eps_high=0.28,
                      aggregation=aggregation)
            a = grpo.loss_vjp(1.0, **case, **kw, ratio_level="sequence")["logp"]
            b = grpo.loss_vjp(1.0, **case, **kw, ratio_level="sequence-token")["logp"]
            assert all(abs(x - y) < TINY for x, y in zip(a.flat, b.flat)) == same
            assert (grpo.loss(**case, **kw, ratio_level="sequence")
                    == grpo.loss(**case, **kw, ratio_level="sequence-token"))


def test_single_token_rows_make_sequence_ratios_token_ratios():
    case = _loss_case(53)
    one = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0]]
    kw = dict(beta=0.2, kl_ratio_weight=True, eps_low=0.2, aggregation="token-mean")
    token = grpo.loss_vjp(1.0, **{**case, "mask": one}, **kw)["logp"]
    for level in ("sequence", "sequence-token"):
        got = grpo.loss_vjp(1.0, **{**case, "mask": one}, **kw, ratio_level=level)["logp"]
        assert all(abs(x - y) < TINY for x, y in zip(token.flat, got.flat))


# --------------------------------------------------------------------------- CISPO, SAPO

GATED = [dict(policy_loss="sapo"), dict(policy_loss="sapo", sapo_tau_pos=2.0, sapo_tau_neg=0.5),
         dict(policy_loss="cispo"), dict(policy_loss="cispo", cispo_clip="both", eps_low=0.3, eps_high=0.5),
         dict(policy_loss="cispo", cispo_clip="raw-upper", eps_high=2.0)]


@pytest.mark.parametrize("conv", GATED)
@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("kl_kind,kl_ratio_weight", [("k3", False), ("abs", True), ("k2", True)])
def test_gated_losses_vjp(conv, aggregation, kl_kind, kl_ratio_weight):
    """SAPO is smooth: its gradient is mpmath.diff of the value. CISPO's IS weight is a
    stop-gradient, so its gradient is the derivative with ρ held fixed (logp and old_logp moved
    together) plus, with a ratio-weighted KL, the KL's derivative through ρ, taken from the value
    with A = 0."""
    case = _loss_case(29)
    params = dict(conv, aggregation=aggregation, kl_kind=kl_kind, kl_ratio_weight=kl_ratio_weight, beta=0.3)
    if conv["policy_loss"] == "sapo":
        _check(grpo.loss, grpo.loss_vjp, {**case, **params}, ["logp"], 1.0)
        return
    lo, hi = params.get("eps_low", 0.2), params.get("eps_high") or params.get("eps_low", 0.2)
    kinks = [hi] if conv.get("cispo_clip") == "raw-upper" else [1 - lo, 1 + hi]
    assert all(_away(math.exp(LOG_RATIO[i][t]), kinks) for i, t in zip(*np.nonzero(np.array(LOSS_MASK))))
    lp0 = np.array(case["logp"], dtype=object)
    old0 = np.array(case["old_logp"], dtype=object)

    def fixed_ratio(logp, old_logp, **kw):  # old_logp moves with logp: every ρ_t stays put
        return grpo.loss(logp=logp, old_logp=old0 + (np.array(logp, dtype=object) - lp0), **kw)

    numeric = numerical_vjp(fixed_ratio, {**case, **params}, "logp", 1.0)
    if kl_ratio_weight:  # plus ρ's own share in β·ρ·KL (A = 0 leaves that term alone): dρ/dlogp = −dρ/dold
        through_ratio = numerical_vjp(grpo.loss, {**case, **params, "advantages": [0.0] * 4}, "old_logp", 1.0)
        with mpmath.workdps(50):  # the difference at the derivatives' own precision
            numeric = numeric - through_ratio
    digits = agreement_digits(grpo.loss_vjp(1.0, **case, **params)["logp"], numeric)
    DIGITS.append(digits)
    assert digits >= AGREE_DIGITS


def test_sapo_gate_at_ratio_one_is_the_policy_gradient():
    # SAPO §3: f(1) = σ(0)·4/τ = 2/τ and f'(1) = τ·σ(0)σ(0)·4/τ = 1 whatever τ: on policy the
    # gradient is the plain −A per token.
    case = dict(logp=[[-1.0, -2.0]], old_logp=[[-1.0, -2.0]], ref_logp=[[-1.0, -2.0]], advantages=[0.75],
                mask=[[1, 1]])
    for tau in (0.5, 1.0, 3.0):
        kw = dict(policy_loss="sapo", sapo_tau_pos=tau, aggregation="token-mean", beta=0.0)
        assert grpo.loss(**case, **kw) == -mpmath.mpf(0.75) * 2 / mpmath.mpf(tau)
        assert list(grpo.loss_vjp(1.0, **case, **kw)["logp"].flat) == [-mpmath.mpf(0.375)] * 2


def test_cispo_weights_match_their_bounds():
    # ρ = e^{0.5} ≈ 1.65 and e^{−0.5} ≈ 0.61, A = 1, one token per row, token mean, β = 0:
    # the gradient per token is −ŵ·A/2.
    case = dict(logp=[[-1.0], [-2.0]], old_logp=[[-1.5], [-1.5]], ref_logp=[[-1.0], [-2.0]],
                advantages=[1.0, 1.0], mask=[[1], [1]])
    kw = dict(policy_loss="cispo", aggregation="token-mean", beta=0.0, eps_low=0.2, eps_high=0.28)
    for conv in ("upper", "both", "raw-upper"):
        grad = grpo.loss_vjp(1.0, **case, **kw, cispo_clip=conv)["logp"]
        value = grpo.loss(**case, **kw, cispo_clip=conv)
        with mpmath.workdps(50):
            high, low = 1 + mpmath.mpf(0.28), 1 - mpmath.mpf(0.2)
            w = {"upper": [high, mpmath.exp(mpmath.mpf(-0.5))], "both": [high, low],
                 "raw-upper": [mpmath.mpf(0.28), mpmath.mpf(0.28)]}[conv]
            assert all(abs(g + x / 2) < TINY for g, x in zip(grad.flat, w))
            assert abs(value + (w[0] * -1 + w[1] * -2) / 2) < TINY


@pytest.mark.parametrize("override,name", [
    (dict(policy_loss="cispo", ratio_level="sequence"), "policy_loss"),
    (dict(policy_loss="sapo", ratio_level="sequence-token"), "policy_loss"),
    (dict(policy_loss="cispo", dual_clip=3.0), "dual_clip"),
    (dict(policy_loss="sapo", dual_clip=3.0), "dual_clip"),
    (dict(cispo_clip="both"), "cispo_clip"), (dict(policy_loss="sapo", cispo_clip="raw-upper"), "cispo_clip"),
    (dict(policy_loss="cispo", cispo_clip="lower"), "cispo_clip"),
    (dict(policy_loss="cispo", cispo_clip="raw-upper", eps_high=0.0), "eps_high"),
    (dict(policy_loss="sapo", sapo_tau_pos=0.0), "sapo_tau_pos"),
    (dict(policy_loss="sapo", sapo_tau_neg=-1.0), "sapo_tau_neg"),
    (dict(policy_loss="sapo", sapo_tau_neg=float("inf")), "sapo_tau_neg"),
])
def test_gated_loss_bad_input(override, name):
    _raises(name, grpo.loss, **{**LOSS_GOOD, **override})
    _raises(name, grpo.loss_vjp, 1.0, **{**LOSS_GOOD, **override})


@pytest.mark.parametrize("override,name", [
    (dict(ratio_level="seq"), "ratio_level"), (dict(policy_loss="gspo"), "policy_loss"),
    (dict(policy_loss="gmpo"), "policy_loss"),
    (dict(policy_loss="gmpo", ratio_level="sequence-token"), "policy_loss"),
    (dict(policy_loss="gmpo", ratio_level="sequence", dual_clip=3.0), "dual_clip"),
    (dict(policy_loss="gmpo", ratio_level="sequence", kl_ratio_weight=True), "kl_ratio_weight"),
    (dict(ratio_level="sequence", eps_low=1.0), "eps_low"),
])
def test_sequence_loss_bad_input(override, name):
    _raises(name, grpo.loss, **{**LOSS_GOOD, **override})
    _raises(name, grpo.loss_vjp, 1.0, **{**LOSS_GOOD, **override})


def test_masked_positions_may_hold_any_finite_numbers():
    case = _loss_case(31)
    garbage = {k: [row[:] for row in case[k]] for k in ("logp", "old_logp", "ref_logp")}
    garbage["logp"][3] = [1e300, -1e300, 700.0]
    garbage["old_logp"][3] = [-1e300, 1e300, -700.0]
    garbage["ref_logp"][1][2] = 1e308
    garbage["logp"][2][1] = -1e300
    kw = dict(beta=0.5, kl_ratio_weight=True)
    a = grpo.loss(**{**case, **garbage}, **kw)
    b = grpo.loss(**case, **kw)
    assert a == b
    g = grpo.loss_vjp(1.0, **{**case, **garbage}, **kw)["logp"]
    assert all(g[i, j] == 0 for i in range(4) for j in range(3) if LOSS_MASK[i][j] == 0)
    assert all(mpmath.isfinite(x) for x in g.flat)


# --------------------------------------------------------------------------- advantages

def test_degenerate_conventions():
    rewards = [[1.0, 1.0, 1.0], [0.0, 1.0, 2.0]]
    for degenerate, keep0 in [("zero", 1), ("drop", 0), ("raw", 1)]:
        out = grpo.advantages(rewards, degenerate=degenerate)
        assert all(a == 0 for a in out["advantages"][0]) and out["keep"][0] == keep0
        assert out["keep"][1] == 1
        with mpmath.workdps(50):
            s = mpmath.sqrt(mpmath.mpf(2) / 3)
            assert abs(out["advantages"][1][0] + 1 / s) < TINY
    # 'none' (Dr. GRPO): no group is degenerate.
    out = grpo.advantages(rewards, scale="none", degenerate="drop")
    assert list(out["keep"]) == [1, 1] and list(out["advantages"][1]) == [-1, 0, 1]


@pytest.mark.parametrize("std_ddof", [0, 1])
@pytest.mark.parametrize("scale", grpo.SCALES)
def test_singleton_groups_never_give_nan(std_ddof, scale):
    rewards = [[0.5], [2.0], [-1.0]]
    for degenerate in grpo.DEGENERATE:
        out = grpo.advantages(rewards, scale=scale, std_ddof=std_ddof, eps=0.25, degenerate=degenerate)
        adv = out["advantages"]
        assert all(mpmath.isfinite(a) for a in adv.flat)
        if degenerate == "raw" and scale == "whiten":  # baseline 0, then the batch whitening of r
            with mpmath.workdps(50):
                r = [mpmath.mpf(x) for x in (0.5, 2.0, -1.0)]
                m = sum(r) / 3
                sd = mpmath.sqrt(sum((x - m) ** 2 for x in r) / (3 - std_ddof)) + mpmath.mpf(0.25)
                assert all(abs(a - (x - m) / sd) < TINY for a, x in zip(adv.flat, r))
        elif degenerate == "raw":  # verl: a singleton group has mean 0 and std 1
            want = [0.5, 2.0, -1.0] if scale == "none" else [0.5 / 1.25, 2.0 / 1.25, -1.0 / 1.25]
            assert all(abs(a - w) < 1e-15 for a, w in zip(adv.flat, want))
        else:
            assert all(a == 0 for a in adv.flat)
        if degenerate == "drop":
            want_keep = 1 if scale in ("none", "batch") else 0  # 'batch': its std is defined
            assert all(k == want_keep for k in out["keep"])


def test_batch_scale_and_eps():
    rewards = [[0.0, 1.0], [0.0, 3.0]]
    out = grpo.advantages(rewards, scale="batch", std_ddof=1, eps=0.5)["advantages"]
    with mpmath.workdps(50):
        flat = [mpmath.mpf(x) for row in rewards for x in row]
        m = sum(flat) / 4
        std = mpmath.sqrt(sum((x - m) ** 2 for x in flat) / 3)
        want = [[-0.5, 0.5], [-1.5, 1.5]]
        for i, j in itertools.product(range(2), range(2)):
            assert abs(out[i][j] - want[i][j] / (std + mpmath.mpf(0.5))) < TINY
    # A batch whose rewards are all equal is degenerate (B·G > 1).
    drop = grpo.advantages([[2.0, 2.0], [2.0, 2.0]], scale="batch", degenerate="drop")
    assert list(drop["keep"]) == [0, 0]
    single = grpo.advantages([[3.0]], scale="batch", std_ddof=1, degenerate="drop")
    assert single["keep"][0] == 0 and single["advantages"][0][0] == 0


def test_leave_one_out_is_the_mean_of_the_others():
    # Kool et al. 2019; Ahmadian et al. 2024 §3: b_i = (Σ_j r_j − r_i)/(G − 1), written here as a
    # loop over the other rewards (not the reference's formula)
    rewards = [[0.5, 1.0, 0.0, 0.25, 3.0], [2.0, -1.0, 0.75, 3.5, 3.5]]
    out = grpo.advantages(rewards, scale="none", baseline="leave-one-out")["advantages"]
    with mpmath.workdps(50):
        for row, adv in zip(rewards, out):
            for i, a in enumerate(adv):
                others = [mpmath.mpf(x) for j, x in enumerate(row) if j != i]
                assert abs(a - (row[i] - sum(others) / len(others))) < TINY
                # verl's form: n/(n − 1)·(r − mean)
                assert abs(a - mpmath.mpf(5) / 4 * (row[i] - mpmath.fsum(row) / 5)) < TINY


@pytest.mark.parametrize("degenerate", grpo.DEGENERATE)
@pytest.mark.parametrize("scale", grpo.SCALES)
def test_leave_one_out_singletons(scale, degenerate):
    # one reward has no other to average: 0 (or dropped), except verl's 'raw' (baseline 0)
    out = grpo.advantages([[0.5], [2.0]], scale=scale, baseline="leave-one-out", degenerate=degenerate)
    assert all(mpmath.isfinite(a) for a in out["advantages"].flat)
    if degenerate != "raw":
        assert all(a == 0 for a in out["advantages"].flat)
        assert list(out["keep"]) == ([0, 0] if degenerate == "drop" else [1, 1])
    elif scale == "none":
        assert list(out["advantages"].flat) == [0.5, 2.0]


@pytest.mark.parametrize("std_ddof", [0, 1])
@pytest.mark.parametrize("baseline", ["mean", "leave-one-out", "none"])
def test_whitened_advantages_have_batch_mean_0_and_std_1(baseline, std_ddof):
    # REINFORCE++ (arXiv 2501.03262): the batch of advantages is standardised as a whole
    rewards = [[0.5, 1.0, 0.0, 0.25], [2.0, -1.0, 0.75, 3.5], [1.0, 1.0, 1.0, 1.0]]
    adv = list(grpo.advantages(rewards, scale="whiten", std_ddof=std_ddof, baseline=baseline)["advantages"].flat)
    with mpmath.workdps(50):
        mean = mpmath.fsum(adv) / len(adv)
        var = mpmath.fsum((a - mean) ** 2 for a in adv) / (len(adv) - std_ddof)
        assert abs(mean) < TINY and abs(var - 1) < TINY
    if baseline != "none":  # the all-equal group is centred to 0 before the whitening
        assert adv[-4:] == [0, 0, 0, 0]


def test_whitening_of_an_all_equal_batch_is_zero():
    for baseline in ("mean", "leave-one-out"):
        out = grpo.advantages([[1.0, 1.0], [3.0, 3.0]], scale="whiten", baseline=baseline, degenerate="drop")
        assert all(a == 0 for a in out["advantages"].flat) and list(out["keep"]) == [0, 0]
    out = grpo.advantages([[2.0, 2.0], [2.0, 2.0]], scale="whiten", baseline="none")
    assert all(a == 0 for a in out["advantages"].flat)


# --------------------------------------------------------------------------- properties

@settings(max_examples=60)
@given(st.lists(st.lists(st.floats(-1e3, 1e3), min_size=4, max_size=4), min_size=1, max_size=3))
def test_population_std_advantages_are_standardised(rewards):
    out = grpo.advantages(rewards)
    for row, adv in zip(rewards, out["advantages"]):
        if len(set(row)) == 1:
            assert all(a == 0 for a in adv)
            continue
        with mpmath.workdps(50):
            mean = mpmath.fsum(adv) / len(adv)
            var = mpmath.fsum((a - mean) ** 2 for a in adv) / len(adv)
            assert abs(mean) < TINY and abs(var - 1) < TINY


@settings(max_examples=80)
@given(log_ratio=st.floats(-3, 3), adv=st.floats(0.01, 10), sign=st.sampled_from([1, -1]),
       eps=st.floats(0.01, 0.9))
def test_clipped_objective_shape(log_ratio, adv, sign, eps):
    # [reading-math-3]: «Con anchura de recorte 0.2 y ventaja más 1, el objetivo recortado aumenta
    # con el cociente hasta 1.2 y luego permanece plano. Con ventaja menos 1, permanece plano
    # por debajo de 0.8 y disminuye cuando el cociente supera 0.8.»
    a = sign * adv
    value = grpo.clip([log_ratio], [0.0], [a], eps_low=eps)[0]
    with mpmath.workdps(50):
        rho, e = mpmath.exp(log_ratio), mpmath.mpf(eps)
        if 1 - e <= rho <= 1 + e:
            assert abs(value - rho * a) <= TINY * abs(a) * rho
        elif a > 0 and rho > 1 + e:
            assert value == (1 + e) * mpmath.mpf(a)              # flat above 1 + ε
        elif a < 0 and rho < 1 - e:
            assert value == (1 - e) * mpmath.mpf(a)              # flat below 1 − ε
        else:
            assert abs(value - rho * a) <= TINY * abs(a) * rho  # the side that keeps moving


@settings(max_examples=60)
@given(st.lists(st.tuples(st.floats(-40, 0), st.floats(-40, 0)), min_size=1, max_size=4))
def test_k3_is_nonnegative(pairs):
    logp, ref = [p for p, _ in pairs], [r for _, r in pairs]
    assert all(v >= 0 for v in kl.estimator(logp, ref, kind="k3"))
    # With zero advantages grpo.loss is the aggregated k3 penalty alone.
    loss = grpo.loss([logp], [logp], [ref], [0.0], [[1] * len(logp)], beta=0.04)
    assert loss >= 0


@settings(max_examples=40)
@given(st.integers(1, 4).flatmap(lambda t: st.lists(
    st.lists(st.floats(-100, 100), min_size=t, max_size=t), min_size=1, max_size=3)))
def test_aggregation_modes_agree_on_equal_length_rows(values):
    mask = [[1] * len(values[0]) for _ in values]
    token = grpo.aggregate(values, mask, "token-mean")
    scale = TINY * max(1, max(abs(v) for row in values for v in row))
    assert abs(grpo.aggregate(values, mask, "seq-mean-token-mean") - token) <= scale
    assert abs(grpo.aggregate(values, mask, "seq-mean-token-sum-norm") - token) <= scale


# --------------------------------------------------------------------------- [reading-math-3]

def test_article_group_advantages():
    # [reading-math-3] §GRPO: «GRPO muestrea 3, 4, 4 y 5 para la pregunta 2 más 2. Un verificador
    # asigna recompensas 0, 1, 1 y 0.» and «En el grupo ilustrado (0,1,1,0), la media es 0.5 y
    # la desviación típica poblacional es 0.5, lo que da ventajas (−1,1,1,−1)».
    answers = [3, 4, 4, 5]
    rewards = [[1.0 if a == 2 + 2 else 0.0 for a in answers]]
    assert rewards == [[0.0, 1.0, 1.0, 0.0]]
    adv = grpo.advantages(rewards)["advantages"][0]
    assert list(adv) == [-1, 1, 1, -1]
    # mean 0.5 and population std 0.5: r = 0.5 + 0.5·A exactly.
    assert all(r == 0.5 + 0.5 * a for r, a in zip(rewards[0], adv))
    # The sample std (ddof 1) would give ±√3/2 instead.
    sample = grpo.advantages(rewards, std_ddof=1)["advantages"][0]
    with mpmath.workdps(50):
        assert abs(sample[1] - mpmath.sqrt(3) / 2) < TINY


def test_article_ratio():
    # [reading-math-3]: «Si un token muestreado tenía probabilidad 0.20 y el modelo actual le asigna
    # ahora 0.24 en el mismo prefijo, el cociente es 0.24/0.20=1.2». The ratio sits at the band
    # edge 1 + ε up to binary64 rounding of the logs, so either branch gives 1.2.
    value = grpo.clip([math.log(0.24)], [math.log(0.20)], [1.0], eps_low=0.2)[0]
    assert abs(value - 1.2) < 1e-15


def test_article_clipped_values():
    # [reading-math-3]: «Con A=1, ε=0.2 y ρt=1.5, los dos términos son 1.5 y 1.2, por lo que Ct=1.2.
    # Con A=−1 y ρt=0.5, son −0.5 y −0.8, por lo que Ct=−0.8.»
    value = grpo.clip([math.log(1.5), math.log(0.5)], [0.0, 0.0], [1.0, -1.0], eps_low=0.2)
    assert abs(value[0] - 1.2) < 1e-15 and abs(value[1] + 0.8) < 1e-15
    grad = grpo.clip_vjp([1.0, 1.0], [math.log(1.5), math.log(0.5)], [0.0, 0.0], [1.0, -1.0])
    assert list(grad["logp"]) == [0, 0]  # «Son los dos tramos planos del gráfico.»


# --------------------------------------------------------------------------- extremes

@pytest.mark.parametrize("log_ratio", [50.0, -50.0])
@pytest.mark.parametrize("adv", [1.0, -1.0])
@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_ratios_e_pm50(log_ratio, adv, dual_clip):
    kw = dict(logp=[log_ratio - 1.0], old_logp=[-1.0], advantages=[adv], dual_clip=dual_clip)
    value = grpo.clip(**kw)[0]
    grad = grpo.clip_vjp([1.0], **kw)["logp"][0]
    with mpmath.workdps(50):
        rho = mpmath.exp(mpmath.mpf(log_ratio))
        unclipped = rho * adv
        if (adv > 0) == (log_ratio > 0):  # the flat side of the article's graph
            want = (1 + mpmath.mpf(0.2)) * adv if adv > 0 else (1 - mpmath.mpf(0.2)) * adv
            want_grad = 0
        else:
            want, want_grad = unclipped, unclipped
        if dual_clip and adv < 0 and mpmath.mpf(dual_clip) * adv > want:
            want, want_grad = mpmath.mpf(dual_clip) * adv, 0
        assert abs(value - want) <= TINY * abs(want)
        assert abs(grad - want_grad) <= TINY * abs(want_grad)
    assert mpmath.isfinite(value) and mpmath.isfinite(grad)


@pytest.mark.parametrize("kl_kind", kl.KINDS)
def test_loss_with_extreme_ratios_is_finite(kl_kind):
    kw = dict(logp=[[-1.0, -60.0]], old_logp=[[-51.0, -10.0]], ref_logp=[[-51.0, -10.0]],
              advantages=[-0.5], mask=[[1, 1]], kl_kind=kl_kind, kl_ratio_weight=True, beta=0.04)
    value = grpo.loss(**kw)
    grad = grpo.loss_vjp(1.0, **kw)["logp"]
    assert mpmath.isfinite(value) and all(mpmath.isfinite(g) for g in grad.flat)


# --------------------------------------------------------------------------- loss: library conventions

CLAMP_LOG_RATIO = [[0.05, 0.4, -0.6], [-0.1, 0.9, 1.2], [0.2, -0.3, 0.0], [0.3, 0.3, 0.3]]
CLAMP = 0.5   # binds at 0.9, 1.2 (A < 0: the unclipped branch) and −0.6 (A > 0)


@pytest.mark.parametrize("kl_ratio_weight", [False, True])
@pytest.mark.parametrize("dual_clip", [None, 1.5])
@pytest.mark.parametrize("aggregation", grpo.MODES)
def test_log_ratio_clamp_vjp_matches_numerical_derivative(kl_ratio_weight, dual_clip, aggregation):
    # wide clip band (ε = 0.9): the unclipped branch is active at the clamped tokens, so the
    # clamp is what makes their gradient 0 there
    case = _loss_case(41)
    params = dict(eps_low=0.9, eps_high=0.9, dual_clip=dual_clip, log_ratio_clamp=CLAMP, beta=0.3,
                  kl_ratio_weight=kl_ratio_weight, aggregation=aggregation)
    lr = np.array(CLAMP_LOG_RATIO)[np.array(LOSS_MASK, dtype=bool)]
    assert all(_away(x, [-CLAMP, CLAMP]) for x in lr) and (abs(lr) > CLAMP).any()
    _check(grpo.loss, grpo.loss_vjp, {**case, **params}, ["logp"], 0.7)


def test_log_ratio_clamp_is_the_clamped_ratio():
    """ρ_t = exp(clamp(log ρ_t, −c, c)) (verl 0.9.1 compute_policy_loss_vanilla, OpenRLHF 0.11.2
    PolicyLoss: c = 20): the clamped loss is the loss of inputs whose log-ratio is clamped, with
    the gradient of the clamped tokens' ratio set to 0."""
    case = _loss_case(41)
    params = dict(eps_low=0.9, beta=0.0, aggregation="token-mean")
    with mpmath.workdps(50):
        lp = mp.array("logp", case["logp"])
        old = mp.array("old_logp", case["old_logp"])
        clamped_old = lp - mp.clip(lp - old, -mpmath.mpf(CLAMP), mpmath.mpf(CLAMP))
        got = grpo.loss(**case, **params, log_ratio_clamp=CLAMP)
        want = grpo.loss(**{**case, "old_logp": clamped_old}, **params)
        assert abs(got - want) < TINY
    assert abs(got - grpo.loss(**case, **params)) > 0.01
    grad = grpo.loss_vjp(1.0, **case, **params, log_ratio_clamp=CLAMP)["logp"]
    outside = (abs(np.array(CLAMP_LOG_RATIO)) > CLAMP) & np.array(LOSS_MASK, dtype=bool)
    assert all(grad[idx] == 0 for idx in zip(*np.nonzero(outside)))


@pytest.mark.parametrize("kl_aggregation", [None, "token-mean"])
@pytest.mark.parametrize("kl_ratio_weight", [False, True])
@pytest.mark.parametrize("conv", [c for c in GATED if c["policy_loss"] == "sapo"])
def test_sapo_log_ratio_clamp_vjp_matches_numerical_derivative(conv, kl_ratio_weight, kl_aggregation):
    # verl 0.9.1 compute_policy_loss_sapo clamps log ρ before the gate as the vanilla loss does;
    # the gate is smooth, so the gradient is mpmath.diff of the value (kinks of the clamp avoided)
    case = _loss_case(41)
    params = dict(conv, log_ratio_clamp=CLAMP, beta=0.3, kl_ratio_weight=kl_ratio_weight,
                  aggregation="seq-mean-token-mean", kl_aggregation=kl_aggregation)
    lr = np.array(CLAMP_LOG_RATIO)[np.array(LOSS_MASK, dtype=bool)]
    assert all(_away(x, [-CLAMP, CLAMP]) for x in lr) and (abs(lr) > CLAMP).any()
    _check(grpo.loss, grpo.loss_vjp, {**case, **params}, ["logp"], 0.7)


@pytest.mark.parametrize("conv", GATED)
def test_gated_log_ratio_clamp_is_the_clamped_ratio(conv):
    """CISPO's weight and SAPO's gate read the clamped ratio (verl 0.9.1 compute_policy_loss_cispo
    and _sapo clamp log ρ to ±20 before exp): the value is that of inputs whose log-ratio is
    clamped. CISPO's gradient ŵ·A is then that of the clamped inputs too (its weight is detached,
    so the clamp passes no gradient of its own); SAPO's is 0 where the clamp binds."""
    case = _loss_case(41)
    params = dict(conv, beta=0.0, aggregation="token-mean")
    with mpmath.workdps(50):
        lp = mp.array("logp", case["logp"])
        old = mp.array("old_logp", case["old_logp"])
        clamped = {**case, "old_logp": lp - mp.clip(lp - old, -mpmath.mpf(CLAMP), mpmath.mpf(CLAMP))}
        got = grpo.loss(**case, **params, log_ratio_clamp=CLAMP)
        assert abs(got - grpo.loss(**clamped, **params)) < TINY
        grad = grpo.loss_vjp(1.0, **case, **params, log_ratio_clamp=CLAMP)["logp"]
        want = grpo.loss_vjp(1.0, **clamped, **params)["logp"]
    on = np.array(LOSS_MASK, dtype=bool)
    outside = (abs(np.array(CLAMP_LOG_RATIO)) > CLAMP) & on
    if conv["policy_loss"] == "sapo":
        assert abs(got - grpo.loss(**case, **params)) > 1e-3
        want = np.where(outside, mpmath.mpf(0), want)
    assert all(abs(g - w) < TINY for g, w in zip(grad.flat, want.flat))


def test_log_ratio_clamp_changes_nothing_inside_its_band():
    case = _loss_case(43)
    for c in (1.3, 20.0):
        for kw in (dict(), dict(kl_ratio_weight=True, dual_clip=3.0)):
            assert grpo.loss(**case, **kw, log_ratio_clamp=c) == grpo.loss(**case, **kw)
            assert (grpo.loss_vjp(-1.0, **case, **kw, log_ratio_clamp=c)["logp"]
                    == grpo.loss_vjp(-1.0, **case, **kw)["logp"]).all()


def test_k3_log_clamps_are_absorbed_by_the_value_clamp():
    """verl 0.9.1 low_var_kl clamps log r to ±20 before exp and OpenRLHF 0.11.2 k3 clamps it to at most
    10; both then clamp the value to ±10. Wherever a log clamp binds, k3 of the clamped and of the
    unclamped log r both lie beyond 10, so the clamped value (10) and its gradient (0) are the same:
    grpo.loss needs no log clamp on k3 (docs/grpo.md)."""
    ten = mpmath.mpf(10)
    for x in ("-20.5", "-25", "-300", "10.25", "20.5", "60"):
        x = mpmath.mpf(x)
        log_clamped = min(max(x, -20), 20) if abs(x) > 20 else min(x, ten)
        for y in (x, log_clamped):
            assert kl.unclamped(np.array([y], dtype=object), "k3")[0] > ten
            assert kl.clamped_dlogp(np.array([y], dtype=object), "k3", ten)[0] == 0


@pytest.mark.parametrize("kl_aggregation", grpo.MODES)
@pytest.mark.parametrize("aggregation,level,policy,kl_ratio_weight", [
    (agg, level, policy, w) for agg, level, policy in [
        ("seq-mean-token-mean", "token", "ppo-clip"), ("token-mean", "token", "ppo-clip"),
        ("seq-mean-token-sum-norm", "sequence", "ppo-clip"), ("token-mean", "sequence", "gmpo")]
    for w in (False, True) if not (policy == "gmpo" and w)])
def test_kl_aggregation_vjp_matches_numerical_derivative(kl_aggregation, aggregation, level, policy,
                                                         kl_ratio_weight):
    case = _loss_case(47)
    eps = (0.35, 0.35) if policy == "gmpo" else (0.2, 0.28)
    params = dict(aggregation=aggregation, kl_aggregation=kl_aggregation, ratio_level=level, policy_loss=policy,
                  eps_low=eps[0], eps_high=eps[1], beta=0.3, kl_kind="k3", kl_ratio_weight=kl_ratio_weight,
                  norm_length=5.0)
    if level == "token":
        _assert_away_from_kinks(case, **params)
    _check(grpo.loss, grpo.loss_vjp, {**case, **params}, ["logp"], 1.25)


def test_kl_aggregation_reduces_the_kl_term_alone():
    """loss = aggregate(−C, aggregation) + β·aggregate(KL, kl_aggregation) (OpenRLHF 0.11.2 ppo_actor:
    the KL term is a token mean whatever the policy term's mode); None is the policy term's mode."""
    case = _loss_case(53)
    with mpmath.workdps(50):
        adv = np.repeat(np.array(LOSS_ADV)[:, None], 3, axis=1)
        policy = -grpo.clip(case["logp"], case["old_logp"], adv)
        klv = kl.estimator(np.array(case["logp"]).ravel(), np.array(case["ref_logp"]).ravel()).reshape(4, 3)
        beta = mpmath.mpf("0.25")
        for mode, kl_mode in itertools.product(grpo.MODES, (None,) + grpo.MODES):
            want = (grpo.aggregate(policy, LOSS_MASK, mode, 7.0)
                    + beta * grpo.aggregate(klv, LOSS_MASK, kl_mode or mode, 7.0))
            got = grpo.loss(**case, beta=0.25, aggregation=mode, kl_aggregation=kl_mode, norm_length=7.0)
            assert abs(got - want) < TINY
        assert grpo.loss(**case, kl_aggregation="token-mean", beta=0.0) == grpo.loss(**case, beta=0.0)


@pytest.mark.parametrize("mean_eps", [1e-8, 0.25])
@pytest.mark.parametrize("mode", grpo.MODES)
def test_aggregate_mean_eps_vjp_matches_numerical_derivative(mean_eps, mode):
    rng = random.Random(59)
    values = [[rng.uniform(-2, 2) for _ in range(3)] for _ in range(4)]
    _check(grpo.aggregate, grpo.aggregate_vjp, dict(values=values, mask=LOSS_MASK, mode=mode, norm_length=4.0,
                                                    mean_eps=mean_eps), ["values"], 1.0)


def test_mean_eps_divides_each_row_by_its_count_plus_eps():
    """verl 0.9.1 agg_loss and OpenRLHF 0.11.2 aggregate_loss: Σ_t m·v / (Σ_t m + 1e−8) per row;
    rows without tokens stay out of the mean; the other modes have no per-row count."""
    values = [[1.0, 2.0, 4.0], [3.0, -1.0, 5.0], [0.5, 9.0, 9.0], [7.0, 7.0, 7.0]]
    with mpmath.workdps(50):
        eps = mpmath.mpf(1e-8)
        want = (mpmath.mpf(7) / (3 + eps) + mpmath.mpf(2) / (2 + eps) + mpmath.mpf("0.5") / (1 + eps)) / 3
        assert abs(grpo.aggregate(values, LOSS_MASK, mean_eps=1e-8) - want) < TINY
    for mode in grpo.MODES[:1] + grpo.MODES[2:]:
        assert grpo.aggregate(values, LOSS_MASK, mode, mean_eps=0.5) == grpo.aggregate(values, LOSS_MASK, mode)


@pytest.mark.parametrize("aggregation,kl_aggregation", [("seq-mean-token-mean", None),
                                                        ("token-mean", "seq-mean-token-mean")])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_loss_mean_eps_vjp_matches_numerical_derivative(aggregation, kl_aggregation, level):
    case = _loss_case(61)
    params = dict(aggregation=aggregation, kl_aggregation=kl_aggregation, mean_eps=0.125, beta=0.3,
                  ratio_level=level, kl_ratio_weight=True)
    if level == "token":
        _assert_away_from_kinks(case, **params)
    _check(grpo.loss, grpo.loss_vjp, {**case, **params}, ["logp"], 0.9)
    got = grpo.loss(**case, **params)
    assert abs(got - grpo.loss(**case, **{**params, "mean_eps": 0.0})) > 1e-3


# --------------------------------------------------------------------------- bad input

def _raises(name, fn, *args, **kwargs):
    with pytest.raises(InputError, match=rf"^{name}: "):
        fn(*args, **kwargs)


@pytest.mark.parametrize("override,name", [
    (dict(scale="group-mean"), "scale"), (dict(degenerate="skip"), "degenerate"),
    (dict(std_ddof=2), "std_ddof"), (dict(std_ddof=True), "std_ddof"), (dict(std_ddof=0.5), "std_ddof"),
    (dict(eps=-1e-6), "eps"), (dict(eps=1.0), "eps"), (dict(eps=float("nan")), "eps"),
    (dict(rewards=[0.0, 1.0]), "rewards"), (dict(rewards=[[0.0, float("nan")]]), "rewards"),
    (dict(rewards=[[0.0, float("inf")]]), "rewards"), (dict(rewards=[[0.0, 1.0], [1.0]]), "rewards"),
    (dict(rewards=np.zeros((0, 3))), "rewards"),
])
def test_advantages_bad_input(override, name):
    _raises(name, grpo.advantages, **{"rewards": [[0.0, 1.0]], **override})


CLIP_GOOD = dict(logp=[-1.0, -2.0], old_logp=[-1.1, -1.9], advantages=[0.5, -0.5])


@pytest.mark.parametrize("override,name", [
    (dict(eps_low=1.0), "eps_low"), (dict(eps_low=-0.1), "eps_low"),
    (dict(eps_high=-0.1), "eps_high"), (dict(eps_high=float("inf")), "eps_high"),
    (dict(dual_clip=1.0), "dual_clip"), (dict(dual_clip=0.5), "dual_clip"),
    (dict(logp=[-1.0]), "old_logp"), (dict(advantages=[1.0, 2.0, 3.0]), "advantages"),
    (dict(logp=[float("nan"), -2.0]), "logp"), (dict(old_logp=[float("-inf"), -2.0]), "old_logp"),
    (dict(advantages=[float("inf"), 1.0]), "advantages"),
])
def test_clip_bad_input(override, name):
    _raises(name, grpo.clip, **{**CLIP_GOOD, **override})
    _raises(name, grpo.clip_vjp, [1.0, 1.0], **{**CLIP_GOOD, **override})


AGG_GOOD = dict(values=[[1.0, 2.0], [3.0, 4.0]], mask=[[1, 0], [1, 1]])


@pytest.mark.parametrize("override,name", [
    (dict(mode="sum"), "mode"), (dict(norm_length=0), "norm_length"),
    (dict(norm_length=-4.0), "norm_length"),
    (dict(mask=[[1, 0.5], [1, 1]]), "mask"), (dict(mask=[[1, 2], [1, 1]]), "mask"),
    (dict(mask=[[1, 1]]), "mask"), (dict(mask=[[0, 0], [0, 0]]), "mask"),
    (dict(values=[[1.0, float("nan")], [3.0, 4.0]]), "values"), (dict(values=[1.0, 2.0]), "values"),
    (dict(mean_eps=-0.5), "mean_eps"), (dict(mean_eps="1e-8"), "mean_eps"),
])
def test_aggregate_bad_input(override, name):
    _raises(name, grpo.aggregate, **{**AGG_GOOD, **override})
    _raises(name, grpo.aggregate_vjp, 1.0, **{**AGG_GOOD, **override})


def test_mask_with_no_token_message():
    with pytest.raises(InputError, match=r"^mask: selects no token$"):
        grpo.aggregate([[1.0]], [[0]])


LOSS_GOOD = dict(logp=[[-1.0, -2.0], [-0.5, -0.7]], old_logp=[[-1.1, -1.9], [-0.4, -0.8]],
                 ref_logp=[[-1.2, -2.1], [-0.6, -0.6]], advantages=[0.5, -0.5], mask=[[1, 1], [1, 0]])


@pytest.mark.parametrize("override,name", [
    (dict(beta=-0.1), "beta"), (dict(beta=float("nan")), "beta"),
    (dict(kl_kind="k4"), "kl_kind"), (dict(kl_clamp=0.0), "kl_clamp"), (dict(kl_clamp=-1.0), "kl_clamp"),
    (dict(kl_ratio_weight="yes"), "kl_ratio_weight"), (dict(aggregation="mean"), "aggregation"),
    (dict(norm_length=0.0), "norm_length"), (dict(eps_low=1.5), "eps_low"),
    (dict(eps_high=-1.0), "eps_high"), (dict(dual_clip=1.0), "dual_clip"),
    (dict(advantages=[0.5, -0.5, 1.0]), "advantages"), (dict(advantages=[[0.5, -0.5]]), "advantages"),
    (dict(ref_logp=[[-1.2, -2.1]]), "ref_logp"), (dict(old_logp=[[-1.1], [-0.4]]), "old_logp"),
    (dict(logp=[-1.0, -2.0]), "logp"),
    (dict(mask=[[1, 1], [1, -1]]), "mask"), (dict(mask=[[0, 0], [0, 0]]), "mask"),
    (dict(ref_logp=[[-1.2, float("inf")], [-0.6, -0.6]]), "ref_logp"),
    (dict(logp=[[-1.0, float("nan")], [-0.5, -0.7]]), "logp"),
    (dict(advantages=[float("nan"), 0.5]), "advantages"),
    (dict(log_ratio_clamp=0.0), "log_ratio_clamp"), (dict(log_ratio_clamp=float("inf")), "log_ratio_clamp"),
    (dict(log_ratio_clamp=True), "log_ratio_clamp"),
    (dict(log_ratio_clamp=20.0, ratio_level="sequence"), "log_ratio_clamp"),
    (dict(kl_aggregation="sum"), "kl_aggregation"), (dict(kl_aggregation=1), "kl_aggregation"),
    (dict(mean_eps=-1e-8), "mean_eps"), (dict(mean_eps=float("nan")), "mean_eps"), (dict(mean_eps=None), "mean_eps"),
])
def test_loss_bad_input(override, name):
    _raises(name, grpo.loss, **{**LOSS_GOOD, **override})
    _raises(name, grpo.loss_vjp, 1.0, **{**LOSS_GOOD, **override})


def test_bad_cotangent():
    _raises("cotangent", grpo.loss_vjp, [1.0, 2.0], **LOSS_GOOD)
    _raises("cotangent", grpo.aggregate_vjp, float("nan"), **AGG_GOOD)
    _raises("cotangent", grpo.clip_vjp, [1.0], **CLIP_GOOD)


# --------------------------------------------------------------------------- loss: rollout correction (is_weight)

IS_WEIGHT = [[0.5, 2.0, 1.25], [0.0, 3.0, 7.5], [1.5, 0.0, 0.0], [2.0, 2.0, 2.0]]   # masked slots hold anything


@pytest.mark.parametrize("policy,level", [("ppo-clip", "token"), ("reinforce", "token"),
                                          ("sapo", "token"), ("ppo-clip", "sequence"), ("gmpo", "sequence")])
@pytest.mark.parametrize("aggregation", grpo.MODES)
def test_loss_is_weight_vjp_matches_numerical_derivative(policy, level, aggregation):
    """(CISPO's gradient is not its value's derivative: its weight is detached.)"""
    case = _loss_case(67)
    params = dict(policy_loss=policy, ratio_level=level, aggregation=aggregation, beta=0.3, kl_kind="k3",
                  eps_low=0.35, eps_high=0.35 if policy == "gmpo" else 0.28)
    if level == "token" and policy == "ppo-clip":
        _assert_away_from_kinks(case, **params)
    _check(grpo.loss, grpo.loss_vjp, {**case, **params, "is_weight": IS_WEIGHT}, ["logp"], -0.75)


@pytest.mark.parametrize("kl_ratio_weight", [False, True])
def test_is_weight_scales_the_policy_term_only(kl_ratio_weight):
    """TRL 1.16.0 _compute_loss: per_token_loss·importance_sampling_ratio, then + β·per_token_kl: the loss
    with weights c is aggregate(−c·C) + β·aggregate(w·KL), composed here from grpo.clip, kl.estimator and
    grpo.aggregate; with every weight 1 it is the loss without weights, with every weight 0 the KL term alone."""
    case = _loss_case(71)
    params = dict(eps_low=0.2, eps_high=0.28, dual_clip=3.0, beta=0.3, kl_ratio_weight=kl_ratio_weight,
                  aggregation="seq-mean-token-mean")
    with mpmath.workdps(50):
        clipped = grpo.clip(case["logp"], case["old_logp"], np.repeat(np.array(LOSS_ADV)[:, None], 3, axis=1),
                            eps_low=0.2, eps_high=0.28, dual_clip=3.0)
        klv = kl.estimator(np.array(case["logp"]).ravel(), np.array(case["ref_logp"]).ravel(), kind="k3").reshape(4, 3)
        w = mp.exp(mp.array("x", case["logp"]) - mp.array("y", case["old_logp"])) if kl_ratio_weight else 1
        c = mp.array("c", IS_WEIGHT)
        want = (grpo.aggregate(-c * clipped, LOSS_MASK) + mpmath.mpf(0.3) * grpo.aggregate(w * klv, LOSS_MASK))
        assert abs(grpo.loss(**case, **params, is_weight=IS_WEIGHT) - want) < TINY
        ones = [[1.0] * 3 for _ in range(4)]
        assert grpo.loss(**case, **params, is_weight=ones) == grpo.loss(**case, **params)
        zeros = [[0.0] * 3 for _ in range(4)]
        kl_only = mpmath.mpf(0.3) * grpo.aggregate(w * klv, LOSS_MASK)
        assert abs(grpo.loss(**case, **params, is_weight=zeros) - kl_only) < TINY
        ct = mpmath.mpf(1)
        # zero weights leave the KL term's gradient, as zero advantages do (the policy term is A·…)
        g_zero = grpo.loss_vjp(ct, **case, **params, is_weight=zeros)["logp"]
        g_kl = grpo.loss_vjp(ct, **{**case, "advantages": [0.0] * 4}, **params)["logp"]
        assert all(abs(a - b) < TINY for a, b in zip(g_zero.flat, g_kl.flat))
        assert any(abs(x) > 1e-3 for x in g_zero.flat)
        g_policy_none = grpo.loss_vjp(ct, **case, **{**params, "beta": 0.0}, is_weight=zeros)["logp"]
        assert all(x == 0 for x in g_policy_none.flat)


@pytest.mark.parametrize("weights,why", [
    ([[1.0, -0.5, 1.0]] * 4, "must be >= 0"), ([[1.0, float("nan"), 1.0]] * 4, ""),
    ([[1.0, float("inf"), 1.0]] * 4, ""), ([1.0, 1.0, 1.0, 1.0], ""), ([[1.0, 1.0]] * 4, "")])
def test_is_weight_bad_input(weights, why):
    with pytest.raises(InputError, match=rf"^is_weight: .*{why}"):
        grpo.loss(**_loss_case(73), is_weight=weights)


# ----------------------------------------------------------------------------- mean_eps_scope

def test_every_scope_adds_eps_to_the_batch_token_count():
    """torchtune rlhf/rewards.py masked_mean: (x·m).sum() / (m.sum() + ε); the per-row scope (verl,
    OpenRLHF) leaves token-mean's count alone; both add ε to each row's count."""
    v, m = [[1.0, 2.0, 4.0], [3.0, -1.0, 0.5]], [[1, 1, 0], [1, 1, 1]]
    with mpmath.workdps(60):
        eps = mpmath.mpf(0.25)
        want = mpmath.mpf(1 + 2 + 3 - 1 + 0.5) / (5 + eps)
        assert abs(grpo.aggregate(v, m, mode="token-mean", mean_eps=0.25, mean_eps_scope="every") - want) < 1e-45
        assert grpo.aggregate(v, m, mode="token-mean", mean_eps=0.25) == grpo.aggregate(v, m, mode="token-mean")
        rows = (mpmath.mpf(3) / (2 + eps) + mpmath.mpf(2.5) / (3 + eps)) / 2
        for scope in ("per-row", "every"):
            assert abs(grpo.aggregate(v, m, mean_eps=0.25, mean_eps_scope=scope) - rows) < 1e-45


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_every_scope_gradients(mode):
    rng = np.random.default_rng(5)
    v, m = rng.normal(0, 1, (3, 4)).tolist(), [[1, 1, 0, 0], [1, 1, 1, 1], [0, 1, 1, 0]]
    assert_vjp_matches(grpo.aggregate, grpo.aggregate_vjp,
                       {"values": v, "mask": m, "mode": mode, "mean_eps": 0.25, "mean_eps_scope": "every"},
                       ["values"], 1.5)
    lp = (-rng.exponential(1.0, (3, 4))).tolist()
    kwargs = {"logp": lp, "old_logp": (np.array(lp) + rng.normal(0, 0.1, (3, 4))).tolist(),
              "ref_logp": (np.array(lp) + rng.normal(0, 0.3, (3, 4))).tolist(), "advantages": [1.0, -0.5, 2.0],
              "mask": m, "aggregation": mode, "kl_aggregation": "token-mean", "mean_eps": 0.25,
              "mean_eps_scope": "every"}
    assert_vjp_matches(grpo.loss, grpo.loss_vjp, kwargs, ["logp"], 1.5)


def test_every_scope_refuses_an_eps_no_mode_divides_by():
    v, m = [[1.0, 2.0]], [[1, 1]]
    with pytest.raises(InputError, match="^mean_eps:"):
        grpo.aggregate(v, m, mode="seq-mean-token-sum", mean_eps=1e-3, mean_eps_scope="every")
    # ε = 0, or the per-row scope (released behaviour): accepted
    grpo.aggregate(v, m, mode="seq-mean-token-sum", mean_eps_scope="every")
    grpo.aggregate(v, m, mode="seq-mean-token-sum", mean_eps=1e-3)
