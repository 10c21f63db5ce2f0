"""Exact reference, vector set 1.5.0 of the GRPO family: grpo.clip's log_ratio_clamp and
grpo.loss's policy losses Clip-Cov, KL-Cov (Cui et al., arXiv 2505.22617 §4, as verl 0.9.1
compute_policy_loss_clip_cov / _kl_cov) and REINFORCE (Williams 1992; verl 0.9.1
compute_policy_loss_gpg): gradients against mpmath.diff, each form against its definition written
out here, the top-k selection, bad input."""
from __future__ import annotations

import itertools
import math
import random

import mpmath
import numpy as np
import pytest
from gradcheck import assert_vjp_matches

from lossproof.refimpl.exact import grpo
from lossproof.refimpl.validate import InputError

TINY = mpmath.mpf(10) ** -40
MASK = [[1, 1, 1], [1, 1, 0], [1, 0, 0], [0, 0, 0]]
# log ρ per token: inside ε = 0.2's band, beyond it on both sides, never at 0 on a valid token
# (KL-Cov's |Δ| kink) nor at a band edge
LOG_RATIO = [[0.05, 0.4, -0.6], [-0.1, 0.9, 1.2], [0.15, -0.3, 0.0], [0.3, 0.3, 0.3]]
LOG_REF = [[-2.0, 0.3, 1.5], [0.7, -0.5, 2.2], [-1.4, 0.1, 1.0], [0.5, 0.5, 0.5]]
ADV = [0.8, -1.1, 0.5, 1.0]
SELECTED = [[0, 1, 1], [1, 0, 0], [0, 0, 0], [0, 0, 0]]


def _case(seed):
    rng = random.Random(seed)
    logp = [[rng.uniform(-3, -0.1) for _ in range(3)] for _ in range(4)]
    old = [[lp - d for lp, d in zip(r1, r2)] for r1, r2 in zip(logp, LOG_RATIO)]
    ref = [[lp + d for lp, d in zip(r1, r2)] for r1, r2 in zip(logp, LOG_REF)]
    return dict(logp=logp, old_logp=old, ref_logp=ref, advantages=ADV, mask=MASK)


def _valid():
    return [(i, t) for i, row in enumerate(MASK) for t, on in enumerate(row) if on]


# --------------------------------------------------------------------------- grpo.clip: log_ratio_clamp

@pytest.mark.parametrize("clamp,scale", [(0.5, 1.0), (20.0, 30.0)])
@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_clip_log_ratio_clamp_vjp_matches_numerical_derivative(clamp, scale, dual_clip):
    # log ρ from −1.2·scale to 1.4·scale: inside and beyond ±c, off the band's edges and off ±c;
    # a wide band (ε = 0.9) leaves the unclipped branch active beyond the clamp for A > 0 below it
    # and A < 0 above it, where the clamp alone makes the gradient 0
    deltas = [x * scale / 30 if scale > 1 else x for x in (-1.2, -0.7, -0.3, 0.2, 0.45, 0.8, 1.4)]
    if scale > 1:
        deltas = [-36.0, -21.0, -19.0, 0.3, 19.5, 22.0, 42.0]
    pairs = list(itertools.product(deltas, (0.7, -1.3)))
    rng = random.Random(5)
    old = [rng.uniform(-4, -0.1) for _ in pairs]
    logp = [o + d for o, (d, _) in zip(old, pairs)]
    adv = [a for _, a in pairs]
    ct = [rng.uniform(-2, 2) for _ in pairs]
    assert all(abs(abs(d) - clamp) > 1e-3 for d in deltas) and any(abs(d) > clamp for d in deltas)
    kw = dict(logp=logp, old_logp=old, advantages=adv, eps_low=0.9, eps_high=0.9, dual_clip=dual_clip,
              log_ratio_clamp=clamp)
    grad = grpo.clip_vjp(ct, **kw)["logp"]
    held = [abs(d) > clamp for d, _ in pairs]
    assert all(g == 0 for g, h in zip(grad, held) if h)
    assert_vjp_matches(grpo.clip, grpo.clip_vjp, kw, ["logp"], ct)


def test_clip_log_ratio_clamp_is_the_clamped_ratio():
    """C(logp, old) with the clamp = C(logp, logp − clamp(Δ)) without it (verl 0.9.1
    compute_policy_loss_vanilla: negative_approx_kl clamped to ±20 before exp)."""
    logp = [-0.5, -30.0, -0.5, -20.5, -2.0]
    old = [-25.5, -5.0, -20.0, -0.5, -2.1]
    adv = [-1.0, 1.0, 2.0, 1.5, -0.5]
    got = grpo.clip(logp, old, adv, log_ratio_clamp=20.0)
    with mpmath.workdps(60):
        moved = [lp - min(max(lp - o, -20), 20) for lp, o in zip(map(mpmath.mpf, logp), map(mpmath.mpf, old))]
    want = grpo.clip(logp, moved, adv)
    assert all(abs(g - w) < TINY for g, w in zip(got, want))
    # A = −1 with log ρ = 25: −e^20 instead of −e^25, the clamp decides the value
    with mpmath.workdps(60):
        assert abs(got[0] + mpmath.exp(20)) < TINY * mpmath.exp(20)
    assert abs(got[0] - grpo.clip(logp, old, adv)[0]) > 1e10
    # A = 1 with log ρ = −25: e^−20 (the unclipped branch), its gradient 0 under the clamp
    grad = grpo.clip_vjp([1.0] * 5, logp, old, adv, log_ratio_clamp=20.0)["logp"]
    assert grad[1] == 0 and grpo.clip_vjp([1.0] * 5, logp, old, adv)["logp"][1] != 0


def test_clip_default_is_no_clamp():
    logp, old, adv = [-0.5, -30.0], [-25.5, -5.0], [-1.0, 1.0]
    assert list(grpo.clip(logp, old, adv)) == list(grpo.clip(logp, old, adv, log_ratio_clamp=None))
    with mpmath.workdps(60):
        assert abs(grpo.clip(logp, old, adv)[0] + mpmath.exp(25)) < TINY * mpmath.exp(25)


# --------------------------------------------------------------------------- grpo.loss: gradients

COV = [dict(policy_loss="clip-cov", selected=SELECTED),
       dict(policy_loss="clip-cov", selected=SELECTED, eps_low=0.1, eps_high=0.28),
       dict(policy_loss="kl-cov", selected=SELECTED),
       dict(policy_loss="kl-cov", selected=SELECTED, kl_cov_coef=0.5),
       dict(policy_loss="kl-cov", kl_cov_ratio=0.4),
       dict(policy_loss="reinforce")]


@pytest.mark.parametrize("conv", COV)
@pytest.mark.parametrize("aggregation", grpo.MODES)
@pytest.mark.parametrize("kl_kind,kl_ratio_weight", [("k3", False), ("abs", False), ("k2", True)])
def test_cov_and_reinforce_vjp_matches_numerical_derivative(conv, aggregation, kl_kind, kl_ratio_weight):
    if conv["policy_loss"] == "reinforce" and kl_ratio_weight:
        kl_ratio_weight = False   # refused (no ratio): tested in test_bad_input
    case = _case(43)
    params = dict(conv, aggregation=aggregation, kl_kind=kl_kind, kl_ratio_weight=kl_ratio_weight, beta=0.3)
    hi = 1 + params.get("eps_high", params.get("eps_low", 0.2))
    lo = 1 - params.get("eps_low", 0.2)
    assert all(min(abs(math.exp(LOG_RATIO[i][t]) - k) for k in (lo, hi)) > 1e-3 and LOG_RATIO[i][t] != 0
               for i, t in _valid())
    assert_vjp_matches(grpo.loss, grpo.loss_vjp, {**case, **params}, ["logp"], 0.7)


# --------------------------------------------------------------------------- grpo.loss: definitions

def _token_mean(values):
    valid = _valid()
    return mpmath.fsum(values[i][t] for i, t in valid) / len(valid)


def _mp(case, name):
    return [[mpmath.mpf(x) for x in row] for row in case[name]]


def test_clip_cov_drops_the_selected_tokens():
    """Clip-Cov (verl 0.9.1 compute_policy_loss_clip_cov: max(−ρA, −clip(ρ)A)·corr, corr = 0 on the
    selected tokens): the token mean of −C_t over the unselected valid tokens, over all valid
    tokens' count; the selected tokens' gradient is 0."""
    case = _case(47)
    kw = dict(policy_loss="clip-cov", selected=SELECTED, beta=0.0, aggregation="token-mean")
    with mpmath.workdps(60):
        c = [list(grpo.clip(row_lp, row_old, [a] * 3)) for row_lp, row_old, a in
             zip(case["logp"], case["old_logp"], ADV)]
        want = _token_mean([[-v * (1 - s) for v, s in zip(cr, sr)] for cr, sr in zip(c, SELECTED)])
    assert abs(grpo.loss(**case, **kw) - want) < TINY
    grad = grpo.loss_vjp(1.0, **case, **kw)["logp"]
    assert all(grad[i][t] == 0 for i, t in _valid() if SELECTED[i][t])
    assert all(grad[i][t] != 0 for i, t in _valid() if not SELECTED[i][t] and 0.8 < math.exp(LOG_RATIO[i][t]) < 1.2)


def test_kl_cov_is_the_unclipped_ratio_plus_the_abs_penalty():
    """KL-Cov (verl 0.9.1 compute_policy_loss_kl_cov): −ρA on every token, no clip, plus
    k·|log π − log π_old| on the selected ones; gradient −ρA + k·sign(Δ) there."""
    case = _case(53)
    k = 0.75
    kw = dict(policy_loss="kl-cov", selected=SELECTED, beta=0.0, aggregation="token-mean", kl_cov_coef=k)
    lp, old = _mp(case, "logp"), _mp(case, "old_logp")
    with mpmath.workdps(60):
        terms = [[-mpmath.exp(lp[i][t] - old[i][t]) * ADV[i] + SELECTED[i][t] * k * abs(lp[i][t] - old[i][t])
                  for t in range(3)] for i in range(4)]
        dterms = [[-mpmath.exp(lp[i][t] - old[i][t]) * ADV[i] + SELECTED[i][t] * k * mpmath.sign(lp[i][t] - old[i][t])
                   for t in range(3)] for i in range(4)]
        want = _token_mean(terms)
        assert abs(grpo.loss(**case, **kw) - want) < TINY
        grad = grpo.loss_vjp(1.0, **case, **kw)["logp"]
        n = len(_valid())
        assert all(abs(grad[i][t] - dterms[i][t] / n) < TINY for i, t in _valid())


def test_kl_cov_abs_kink_has_gradient_zero():
    # Δ = 0 on a selected token: the penalty's derivative is 0 (torch.abs), only −ρA = −A is left
    case = dict(logp=[[-1.0, -2.0]], old_logp=[[-1.0, -1.5]], ref_logp=[[-1.0, -2.0]], advantages=[0.5],
                mask=[[1, 1]])
    grad = grpo.loss_vjp(1.0, **case, policy_loss="kl-cov", selected=[[1, 1]], beta=0.0,
                         aggregation="token-mean")["logp"]
    assert grad[0][0] == -mpmath.mpf(0.5) / 2


def test_kl_cov_top_k_is_the_largest_covariance():
    """Without ``selected``: the k = max(1, ⌊N·r⌋) valid tokens of largest (A − Ā)(log π − mean log π)
    (verl 0.9.1 compute_policy_loss_kl_cov, torch.topk over the valid tokens), computed here in
    binary64 (no near ties in this case)."""
    case = _case(59)
    valid = _valid()
    a_mean = sum(ADV[i] for i, _ in valid) / len(valid)
    l_mean = sum(case["logp"][i][t] for i, t in valid) / len(valid)
    cov = {(i, t): (ADV[i] - a_mean) * (case["logp"][i][t] - l_mean) for i, t in valid}
    ordered = sorted(cov.values(), reverse=True)
    for ratio in (0.0002, 0.2, 0.4, 0.7, 1.0):
        k = max(1, math.floor(ratio * len(valid)))
        assert k == len(valid) or ordered[k - 1] - ordered[k] > 1e-6
        chosen = sorted(cov, key=cov.get, reverse=True)[:k]
        selected = [[1 if (i, t) in chosen else 0 for t in range(3)] for i in range(4)]
        kw = dict(policy_loss="kl-cov", beta=0.1, aggregation="seq-mean-token-mean")
        assert grpo.loss(**case, **kw, kl_cov_ratio=ratio) == grpo.loss(**case, **kw, selected=selected)


def test_kl_cov_count_is_the_exact_floor():
    # 0.29 in binary64 is 0.28999999999999998…: ⌊100·0.29⌋ = 28 exactly, as int(100 * 0.29) in
    # Python; 0.57 · 100 rounds to 56.99999999999999 in binary64 and 0.57 is below 0.57 too
    from lossproof.refimpl.validate import kl_cov_count
    assert kl_cov_count(0.29, 100) == 28 and kl_cov_count(0.57, 100) == 56
    assert kl_cov_count(0.0002, 5) == 1 and kl_cov_count(1.0, 7) == 7


def test_reinforce_is_minus_advantage_times_logp():
    """REINFORCE: ℓ_t = −A_i·log π_t (no ratio, no clip) plus β·KL_t, each term aggregated; the
    policy term's gradient is −A_i times the aggregation weight."""
    case = _case(61)
    for aggregation in grpo.MODES:
        kw = dict(policy_loss="reinforce", aggregation=aggregation, beta=0.0)
        with mpmath.workdps(60):   # A·log π exactly (two binary64 factors)
            values = [[-mpmath.mpf(a) * lp for lp in row] for a, row in zip(ADV, _mp(case, "logp"))]
            assert abs(grpo.loss(**case, **kw) - grpo.aggregate(values, MASK, aggregation)) < TINY
            weights = grpo.aggregate_vjp(1.0, values, MASK, aggregation)["values"]
            grad = grpo.loss_vjp(1.0, **case, **kw)["logp"]
            assert all(abs(grad[i][t] + ADV[i] * weights[i][t]) < TINY for i in range(4) for t in range(3))
    # old_logp is not read at all
    kw = dict(policy_loss="reinforce", beta=0.04)
    assert grpo.loss(**case, **kw) == grpo.loss(**{**case, "old_logp": [[0.0] * 3] * 4}, **kw)


def test_cov_selection_of_nothing_is_ppo_and_the_unclipped_ratio():
    case = _case(67)
    nothing = [[0] * 3] * 4
    assert grpo.loss(**case, policy_loss="clip-cov", selected=nothing) == grpo.loss(**case)
    wide = dict(eps_low=0.99, eps_high=10.0)   # every ratio inside the band: PPO is the unclipped ρA
    assert abs(grpo.loss(**case, policy_loss="kl-cov", selected=nothing) - grpo.loss(**case, **wide)) < TINY


# --------------------------------------------------------------------------- bad input

GOOD = dict(logp=[[-1.0, -2.0], [-0.5, -0.7]], old_logp=[[-1.1, -1.9], [-0.4, -0.8]],
            ref_logp=[[-1.2, -2.1], [-0.6, -0.6]], advantages=[0.5, -0.5], mask=[[1, 1], [1, 0]])


@pytest.mark.parametrize("override,name", [
    (dict(policy_loss="clip-cov"), "selected"),
    (dict(policy_loss="clip-cov", selected=[[0, 0], [0, 1]]), "selected"),
    (dict(policy_loss="kl-cov", selected=[[1, 0], [0, 1]]), "selected"),
    (dict(policy_loss="kl-cov", selected=[[0.5, 0], [0, 0]]), "selected"),
    (dict(policy_loss="kl-cov", selected=[[1, 0]]), "selected"),
    (dict(selected=[[1, 0], [0, 0]]), "selected"),
    (dict(policy_loss="reinforce", selected=[[1, 0], [0, 0]]), "selected"),
    (dict(policy_loss="kl-cov", kl_cov_ratio=0.0), "kl_cov_ratio"),
    (dict(policy_loss="kl-cov", kl_cov_ratio=1.5), "kl_cov_ratio"),
    (dict(policy_loss="kl-cov", kl_cov_coef=-1.0), "kl_cov_coef"),
    (dict(policy_loss="kl-cov", log_ratio_clamp=20.0), "log_ratio_clamp"),
    (dict(policy_loss="reinforce", log_ratio_clamp=20.0), "log_ratio_clamp"),
    (dict(policy_loss="reinforce", kl_ratio_weight=True), "kl_ratio_weight"),
    (dict(policy_loss="clip-cov", selected=[[1, 0], [0, 0]], dual_clip=3.0), "dual_clip"),
    (dict(policy_loss="kl-cov", ratio_level="sequence"), "policy_loss"),
    (dict(policy_loss="reinforce", ratio_level="sequence-token"), "policy_loss"),
    # one row, one A: every covariance is 0, the top-1 is tied
    (dict(policy_loss="kl-cov", advantages=[0.5, 0.5], kl_cov_ratio=0.5), "selected"),
])
def test_bad_input(override, name):
    for fn, args in ((grpo.loss, ()), (grpo.loss_vjp, (1.0,))):
        with pytest.raises(InputError, match=rf"^{name}: "):
            fn(*args, **{**GOOD, **override})


def test_clip_log_ratio_clamp_bad_input():
    for bad in (0.0, -20.0, float("nan"), "20"):
        with pytest.raises(InputError, match=r"^log_ratio_clamp: "):
            grpo.clip([-1.0], [-1.1], [1.0], log_ratio_clamp=bad)


def test_selected_padding_is_checked_against_the_mask_only():
    # a selected row outside the valid tokens is refused even where the values there are finite garbage
    case = dict(GOOD, logp=[[-1.0, 500.0], [-0.5, 1e300]], mask=[[1, 0], [1, 0]])
    assert mpmath.isfinite(grpo.loss(**case, policy_loss="kl-cov", selected=[[1, 0], [0, 0]]))
    with pytest.raises(InputError, match=r"^selected: "):
        grpo.loss(**case, policy_loss="kl-cov", selected=[[1, 1], [0, 0]])
    assert np.isfinite(float(grpo.loss(**case, policy_loss="reinforce")))
