"""Exact reference for the preference family: gradients against mpmath.diff, the papers'
identities, the reference point z0, extremes and bad input."""
from __future__ import annotations

import random

import mpmath
import pytest
from gradcheck import assert_vjp_matches

from lossproof.refimpl.exact import preference as P
from lossproof.refimpl.validate import InputError


def _logps(rng, n, low=-40.0, high=-0.5):
    return [rng.uniform(low, high) for _ in range(n)]


def _ct(rng, names, n):
    return {k: [rng.uniform(-2, 2) for _ in range(n)] for k in names}


# --------------------------------------------------------------------------- gradients

@pytest.mark.parametrize("beta,gamma,eps", [(2.0, 1.0, 0.0), (2.5, 0.0, 0.1), (10.0, 1.6, 0.3)])
def test_simpo_vjp(beta, gamma, eps):
    rng = random.Random(int(beta * 10 + gamma * 100 + eps * 1000))
    kw = dict(chosen_logps=_logps(rng, 4), rejected_logps=_logps(rng, 4), chosen_lengths=[3, 17, 1, 40],
              rejected_lengths=[9, 2, 5, 40], beta=beta, gamma=gamma, label_smoothing=eps)
    assert_vjp_matches(P.simpo, P.simpo_vjp, kw, ["chosen_logps", "rejected_logps"], _ct(rng, P.PAIR_OUTPUTS, 4))


@pytest.mark.parametrize("beta,eps", [(0.1, 0.0), (0.5, 0.25)])
def test_cpo_vjp(beta, eps):
    rng = random.Random(int(beta * 10 + eps * 1000))
    kw = dict(chosen_logps=_logps(rng, 4), rejected_logps=_logps(rng, 4), beta=beta, label_smoothing=eps)
    assert_vjp_matches(P.cpo, P.cpo_vjp, kw, ["chosen_logps", "rejected_logps"], _ct(rng, P.PAIR_OUTPUTS, 4))


@pytest.mark.parametrize("aggregation", ["seq-mean-token-mean", "seq-mean-token-sum", "token-mean"])
def test_cpo_vjp_with_the_nll_term(aggregation):
    rng = random.Random(sum(map(ord, aggregation)))
    kw = dict(chosen_logps=_logps(rng, 4), rejected_logps=_logps(rng, 4), beta=0.2, label_smoothing=0.1,
              cpo_alpha=1.0, nll_aggregation=aggregation, chosen_lengths=[5, 1, 30, 8])
    assert_vjp_matches(P.cpo, P.cpo_vjp, kw, ["chosen_logps", "rejected_logps"], _ct(rng, P.PAIR_OUTPUTS, 4))


def test_cpo_nll_term_is_the_chosen_sequence_nll():
    # CPO §3: L_prefer + L_NLL with L_NLL = −log π(y_w|x); TRL's cpo_alpha weighs it.
    base = P.cpo([-4.0, -9.0], [-5.0, -2.0], beta=0.1)["losses"]
    got = P.cpo([-4.0, -9.0], [-5.0, -2.0], beta=0.1, cpo_alpha=2.0, nll_aggregation="seq-mean-token-sum")["losses"]
    assert [g - b for g, b in zip(got, base)] == [8, 18]
    got = P.cpo([-4.0, -9.0], [-5.0, -2.0], beta=0.1, cpo_alpha=1.0, nll_aggregation="token-mean",
                chosen_lengths=[1, 3])["losses"]
    assert sum(g - b for g, b in zip(got, base)) / 2 == mpmath.mpf(13) / 4


@pytest.mark.parametrize("beta", [0.1, 1.0])
def test_orpo_vjp(beta):
    rng = random.Random(int(beta * 10))
    kw = dict(chosen_logps=_logps(rng, 4, -5.0, -1e-3) + [-1e-6], rejected_logps=_logps(rng, 4, -5.0, -1e-3) + [-3.0],
              beta=beta)
    assert_vjp_matches(P.orpo, P.orpo_vjp, kw, ["chosen_logps", "rejected_logps"], _ct(rng, P.PAIR_OUTPUTS, 5))


@pytest.mark.parametrize("shift", [1.5, -1.5])  # a positive KL estimate, and a clamped one
@pytest.mark.parametrize("weights", [(1.0, 1.0), (1.33, 0.75)])
def test_kto_vjp(shift, weights):
    rng = random.Random(int(shift * 10 + weights[0] * 100))
    p = _logps(rng, 5)
    kp = _logps(rng, 3)
    kw = dict(policy_logps=p, reference_logps=[v + rng.uniform(-3, 3) for v in p], desirable=[1, 0, 1, 1, 0],
              kl_policy_logps=kp, kl_reference_logps=[v - shift for v in kp], beta=0.3,
              desirable_weight=weights[0], undesirable_weight=weights[1])
    ct = {"losses": [rng.uniform(-2, 2) for _ in range(5)], "kl": 1.0}
    assert_vjp_matches(P.kto, P.kto_vjp, kw, ["policy_logps"], ct)


# --------------------------------------------------------------------------- the papers' identities

def test_simpo_at_gamma_zero_is_dpo_on_average_logps_without_reference():
    # SimPO eq. 6 with γ = 0 and single-token responses is CPO eq. 3 (Δ of sums = Δ of averages).
    kw = dict(chosen_logps=[-3.0, -0.5], rejected_logps=[-1.0, -4.0])
    s = P.simpo(**kw, chosen_lengths=[1, 1], rejected_lengths=[1, 1], beta=0.7, gamma=0.0)["losses"]
    c = P.cpo(**kw, beta=0.7)["losses"]
    assert all(abs(a - b) < mpmath.mpf(10) ** -45 for a, b in zip(s, c))


def test_simpo_normalises_by_length():
    # −60 over 60 tokens beats −40 over 10 tokens per token: z = 2·(−1 − (−4)) − 1 = 5.
    out = P.simpo([-60.0], [-40.0], [60], [10], beta=2.0, gamma=1.0)["losses"][0]
    with mpmath.workdps(50):
        assert abs(out - mpmath.log1p(mpmath.exp(-5))) < mpmath.mpf(10) ** -45


def test_orpo_log_odds():
    # p̄ = log 0.5: odds 1, log odds 0; p̄ = log 0.2: odds 1/4. L_OR = −log σ(log 4) = log(5/4).
    out = P.orpo([float(mpmath.log(0.5))], [float(mpmath.log(0.2))], beta=1.0)["losses"][0]
    with mpmath.workdps(50):
        c, r = mpmath.mpf(float(mpmath.log(0.5))), mpmath.mpf(float(mpmath.log(0.2)))
        pc, pr = mpmath.exp(c), mpmath.exp(r)
        want = -c - mpmath.log(1 / (1 + (pr / (1 - pr)) / (pc / (1 - pc))))
        assert abs(out - want) < mpmath.mpf(10) ** -45
        assert abs(out - (-c + mpmath.log(mpmath.mpf(5) / 4))) < 1e-15  # the rounded log 0.5, log 0.2


def test_kto_reference_point_is_the_clamped_mean_and_detached():
    kw = dict(policy_logps=[-3.0, -9.0], reference_logps=[-4.0, -8.0], desirable=[1, 0])
    assert P.kto(**kw, kl_policy_logps=[-1.0, -6.0], kl_reference_logps=[-2.0, -7.0])["kl"] == 1
    assert P.kto(**kw, kl_policy_logps=[-2.0, -7.0], kl_reference_logps=[-1.0, -6.0])["kl"] == 0
    # z0 = 1, β = 0.1: desirable ρ = 1 → 1 − σ(0) = 1/2; undesirable ρ = −1 → 1 − σ(0.2).
    out = P.kto(**kw, kl_policy_logps=[-1.0, -6.0], kl_reference_logps=[-2.0, -7.0])["losses"]
    assert out[0] == mpmath.mpf(1) / 2
    with mpmath.workdps(50):
        assert abs(out[1] - (1 - 1 / (1 + mpmath.exp(-2 * mpmath.mpf(0.1))))) < mpmath.mpf(10) ** -45


@pytest.mark.parametrize("sign", [1, -1])
def test_extreme_margins_are_finite(sign):
    big = -sign * 1e5
    assert all(mpmath.isfinite(v) for v in P.cpo([-1.0], [big - 1], beta=0.1)["losses"])
    assert all(mpmath.isfinite(v) for v in P.simpo([-1.0], [big], [1], [1])["losses"])
    g = P.orpo_vjp({"losses": [1.0]}, [-1e-12 if sign > 0 else -40.0], [-40.0 if sign > 0 else -1e-12], beta=1.0)
    assert all(mpmath.isfinite(v[0]) for v in g.values())


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("fn,kw,name", [
    (P.simpo, dict(chosen_logps=[-1.0], rejected_logps=[-2.0], chosen_lengths=[0], rejected_lengths=[1]),
     "chosen_lengths"),
    (P.simpo, dict(chosen_logps=[-1.0], rejected_logps=[-2.0], chosen_lengths=[1], rejected_lengths=[1.5]),
     "rejected_lengths"),
    (P.simpo, dict(chosen_logps=[-1.0], rejected_logps=[-2.0], chosen_lengths=[1], rejected_lengths=[1], gamma=-1.0),
     "gamma"),
    (P.cpo, dict(chosen_logps=[-1.0, -2.0], rejected_logps=[-2.0]), "rejected_logps"),
    (P.cpo, dict(chosen_logps=[-1.0], rejected_logps=[-2.0], cpo_alpha=-0.5), "cpo_alpha"),
    (P.cpo, dict(chosen_logps=[-1.0], rejected_logps=[-2.0], cpo_alpha=1.0, nll_aggregation="token-mean"),
     "chosen_lengths"),
    (P.cpo, dict(chosen_logps=[-1.0], rejected_logps=[-2.0], cpo_alpha=1.0, nll_aggregation="mean"),
     "nll_aggregation"),
    (P.cpo, dict(chosen_logps=[-1.0], rejected_logps=[-2.0], cpo_alpha=1.0), "nll_aggregation"),
    (P.cpo, dict(chosen_logps=[-1.0], rejected_logps=[-2.0], cpo_alpha=1.0, nll_aggregation="seq-mean-token-mean",
                 chosen_lengths=[0]), "chosen_lengths"),
    (P.cpo, dict(chosen_logps=[-1.0], rejected_logps=[-2.0], cpo_alpha=1.0, nll_aggregation="token-mean",
                 chosen_lengths=[1, 2]), "chosen_lengths"),
    (P.orpo, dict(chosen_logps=[0.0], rejected_logps=[-2.0]), "chosen_logps"),
    (P.orpo, dict(chosen_logps=[-1.0], rejected_logps=[float("nan")]), "rejected_logps"),
    (P.kto, dict(policy_logps=[-1.0], reference_logps=[-2.0], desirable=[2], kl_policy_logps=[-1.0],
                 kl_reference_logps=[-1.0]), "desirable"),
    (P.kto, dict(policy_logps=[-1.0], reference_logps=[-2.0], desirable=[1], kl_policy_logps=[],
                 kl_reference_logps=[]), "kl_policy_logps"),
    (P.kto, dict(policy_logps=[-1.0], reference_logps=[-2.0], desirable=[1], kl_policy_logps=[-1.0],
                 kl_reference_logps=[-1.0], desirable_weight=0.0), "desirable_weight"),
])
def test_bad_input_is_rejected_naming_the_argument(fn, kw, name):
    with pytest.raises(InputError, match=rf"^{name}"):
        fn(**kw)
