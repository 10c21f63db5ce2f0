"""Exact reference for dpo.loss: gradients, properties, the article's numbers, extremes, bad input."""
from __future__ import annotations

import random

import mpmath
import pytest
from gradcheck import assert_vjp_matches
from hypothesis import given, settings
from hypothesis import strategies as st

from lossproof.refimpl.exact import dpo, mp
from lossproof.refimpl.validate import InputError

WRT = ["policy_chosen_logps", "policy_rejected_logps"]
DIGITS: list[float] = []  # worst agreement of every gradient check, summarised at module end


@pytest.fixture(scope="module", autouse=True)
def _gradcheck_summary():
    yield
    if DIGITS:
        print(f"\n[dpo] {len(DIGITS)} gradient checks, worst agreement {min(DIGITS):.1f} digits")


def _pairs(seed: int, n: int = 3, spread: float = 6.0) -> dict:
    rng = random.Random(seed)
    names = ("policy_chosen_logps", "policy_rejected_logps",
             "reference_chosen_logps", "reference_rejected_logps")
    return {k: [rng.uniform(-spread, -0.05) for _ in range(n)] for k in names}


def _margins(kw) -> list[float]:
    return [(pc - rc) - (pr - rr) for pc, pr, rc, rr in zip(
        kw["policy_chosen_logps"], kw["policy_rejected_logps"],
        kw["reference_chosen_logps"], kw["reference_rejected_logps"])]


def _cotangents(seed: int, n: int = 3, keys=dpo.OUTPUTS) -> dict:
    rng = random.Random(seed + 1000)
    return {k: [rng.uniform(-2, 2) for _ in range(n)] for k in keys}


# --------------------------------------------------------------------------- gradients

CONVENTIONS = [("sigmoid", 0.0), ("sigmoid", 0.1), ("cdpo", 0.0), ("cdpo", 0.25),
               ("hinge", 0.0), ("ipo", 0.0), ("robust", 0.0), ("robust", 0.3),
               ("exo_pair", 1e-3), ("exo_pair", 0.3), ("nca_pair", 0.0), ("bco_pair", 0.0),
               ("sppo_hard", 0.0), ("aot", 0.0), ("aot", 0.2), ("aot_unpaired", 0.0),
               ("aot_unpaired", 0.1), ("apo_zero", 0.0), ("apo_down", 0.0), ("discopop", 0.0)]


@pytest.mark.parametrize("loss_type,label_smoothing", CONVENTIONS)
@pytest.mark.parametrize("beta", [0.1, 0.7])
def test_vjp_matches_numerical_derivative(loss_type, label_smoothing, beta):
    seed = sum(map(ord, f"{loss_type}{label_smoothing}{beta}"))  # fixed (str hash() is salted)
    kw = _pairs(seed)
    if loss_type == "hinge":
        # Stay away from the kink βΔ = 1 (checked below); both branches appear across β.
        assert all(abs(1 - beta * d) > 1e-3 for d in _margins(kw))
    kw.update(beta=beta, loss_type=loss_type, label_smoothing=label_smoothing)
    DIGITS.append(assert_vjp_matches(dpo.loss, dpo.loss_vjp, kw, WRT, _cotangents(seed)))


@pytest.mark.parametrize("loss_type,params", [
    ("bco_pair", {"reward_shift": 0.37}), ("bco_pair", {"reward_shift": -1.5}),
    ("discopop", {"discopop_tau": 1.0}), ("discopop", {"discopop_tau": 0.01}),
    ("aot", {"label_smoothing": 0.1}), ("aot_unpaired", {"label_smoothing": 0.4})])
def test_vjp_with_the_extra_parameters(loss_type, params):
    # A batch of 6 so that AOT's sorts permute (its gradient follows the permutation).
    seed = sum(map(ord, f"{loss_type}{params}"))
    kw = {**_pairs(seed, n=6), "beta": 0.4, "loss_type": loss_type, **params}
    DIGITS.append(assert_vjp_matches(dpo.loss, dpo.loss_vjp, kw, WRT, _cotangents(seed, n=6)))


NLL_AGGREGATIONS = ("seq-mean-token-mean", "seq-mean-token-sum", "token-mean")


@pytest.mark.parametrize("aggregation", NLL_AGGREGATIONS)
@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "nca_pair", "aot"])
def test_vjp_with_the_rpo_nll_term(aggregation, loss_type):
    seed = sum(map(ord, f"rpo{aggregation}{loss_type}"))
    kw = {**_pairs(seed, n=5), "beta": 0.3, "loss_type": loss_type, "rpo_alpha": 0.7,
          "nll_aggregation": aggregation, "chosen_lengths": [3, 1, 12, 7, 40]}
    DIGITS.append(assert_vjp_matches(dpo.loss, dpo.loss_vjp, kw, WRT, _cotangents(seed, n=5)))


def test_rpo_nll_term_by_aggregation():
    # RPO (arXiv 2404.19733) §2: loss = DPO + α·NLL of the chosen; the three normalisations of the NLL.
    kw = dict(policy_chosen_logps=[-6.0, -2.0], policy_rejected_logps=[-7.0, -1.0],
              reference_chosen_logps=[-5.0, -3.0], reference_rejected_logps=[-6.5, -1.5], beta=0.5)
    base = dpo.loss(**kw)["losses"]
    want = {"seq-mean-token-mean": [6 / 3, 2 / 1], "seq-mean-token-sum": [6, 2],
            "token-mean": [6 * 2 / 4, 2 * 2 / 4]}
    for aggregation, nll in want.items():
        got = dpo.loss(**kw, rpo_alpha=0.25, nll_aggregation=aggregation, chosen_lengths=[3, 1])["losses"]
        assert [g - b for g, b in zip(got, base)] == [0.25 * v for v in nll]
    # The batch mean of the 'token-mean' shares is the batch token mean −Σc/Σn.
    got = dpo.loss(**kw, rpo_alpha=1.0, nll_aggregation="token-mean", chosen_lengths=[3, 1])["losses"]
    assert sum(g - b for g, b in zip(got, base)) / 2 == mpmath.mpf(8) / 4
    # α = 0 leaves the loss as it was, lengths or not; the sum form needs no lengths.
    assert dpo.loss(**kw, rpo_alpha=0.0, chosen_lengths=[3, 1])["losses"].tolist() == base.tolist()
    dpo.loss(**kw, rpo_alpha=1.0, nll_aggregation="seq-mean-token-sum")


def test_aot_sorts_each_side_over_the_batch():
    # AOT §3: Δ_i = sort(π_c − π_r)_i − sort(ref_c − ref_r)_i; pair 0 has the larger policy
    # log-ratio (2 > −1) and the smaller reference one (−3 < 4), so sorting pairs them crosswise.
    kw = dict(policy_chosen_logps=[-1.0, -4.0], policy_rejected_logps=[-3.0, -3.0],
              reference_chosen_logps=[-5.0, -2.0], reference_rejected_logps=[-2.0, -6.0], beta=1.0)
    aot = dpo.loss(**kw, loss_type="aot")["losses"]
    sig = dpo.loss(**kw, loss_type="sigmoid")["losses"]
    with mpmath.workdps(50):
        want = [mpmath.log1p(mpmath.exp(-(-1 - -3))), mpmath.log1p(mpmath.exp(-(2 - 4)))]
        assert all(abs(a - w) < mpmath.mpf(10) ** -45 for a, w in zip(aot, want))
        assert abs(sig[0] - mpmath.log1p(mpmath.exp(-5))) < mpmath.mpf(10) ** -45


def test_hinge_gradcheck_covers_both_branches():
    kw = _pairs(7, n=4, spread=8.0)
    kw.update(beta=1.0, loss_type="hinge")
    margins = _margins(kw)
    assert any(1 - d > 1e-3 for d in margins) and any(1 - d < -1e-3 for d in margins)
    DIGITS.append(assert_vjp_matches(dpo.loss, dpo.loss_vjp, kw, WRT, _cotangents(7, 4)))


@pytest.mark.parametrize("keys", [("losses",), ("chosen_rewards",), ("rejected_rewards", "losses")])
def test_missing_cotangent_is_zero(keys):
    kw = _pairs(11)
    kw.update(beta=0.3, loss_type="robust", label_smoothing=0.2)
    DIGITS.append(assert_vjp_matches(dpo.loss, dpo.loss_vjp, kw, WRT, _cotangents(11, keys=keys)))
    full = {k: mp.zeros((3,)) for k in dpo.OUTPUTS}
    full.update(_cotangents(11, keys=keys))
    a, b = dpo.loss_vjp(_cotangents(11, keys=keys), **kw), dpo.loss_vjp(full, **kw)
    for name in WRT:
        assert all(x == y for x, y in zip(a[name], b[name]))


def test_hinge_kink_takes_the_active_branch():
    # βΔ = 1 exactly: 1 − βΔ = 0 is the (closed) active branch, slope −β wrt Δ.
    g = dpo.loss_vjp({"losses": [1.0]}, [1.0], [0.0], [0.0], [0.0], beta=1.0, loss_type="hinge")
    assert g["policy_chosen_logps"][0] == -1 and g["policy_rejected_logps"][0] == 1


# --------------------------------------------------------------------------- properties

@settings(max_examples=60)
@given(pc=st.floats(-60, 0), pr=st.floats(-60, 0), rc=st.floats(-60, 0), rr=st.floats(-60, 0),
       beta=st.floats(0.01, 10))
def test_sigmoid_loss_difference_under_swapped_margin(pc, pr, rc, rr, beta):
    # −log σ(z) + log σ(−z) = −z: swapping chosen and rejected negates Δ.
    with mpmath.workdps(60):
        fwd = dpo.loss([pc], [pr], [rc], [rr], beta=beta)["losses"][0]
        bwd = dpo.loss([pr], [pc], [rr], [rc], beta=beta)["losses"][0]
        delta = (mpmath.mpf(pc) - rc) - (mpmath.mpf(pr) - rr)
        want = -mpmath.mpf(beta) * delta
        assert abs((fwd - bwd) - want) <= mpmath.mpf(10) ** -40 * max(1, abs(want))


MARGIN_ONLY = ("sigmoid", "hinge", "ipo", "cdpo", "robust", "exo_pair", "aot", "aot_unpaired", "discopop")


@settings(max_examples=40)
@given(pc=st.floats(-30, 0), pr=st.floats(-30, 0), shift=st.floats(-30, 30),
       loss_type=st.sampled_from(MARGIN_ONLY))
def test_loss_depends_on_the_margin_only(pc, pr, shift, loss_type):
    # Adding the same amount to both gains (or to a policy and its reference) leaves Δ.
    eps = 0.1 if loss_type == "exo_pair" else 0.0
    a = dpo.loss([pc], [pr], [0.0], [0.0], loss_type=loss_type, label_smoothing=eps)["losses"][0]
    b = dpo.loss([pc], [pr], [-shift], [-shift], loss_type=loss_type, label_smoothing=eps)["losses"][0]
    delta_a, delta_b = mpmath.mpf(pc) - pr, (mpmath.mpf(pc) + shift) - (mpmath.mpf(pr) + shift)
    if delta_a == delta_b:
        assert a == b


# --------------------------------------------------------------------------- [reading-math-3]

def test_article_equal_margins_give_equal_loss():
    # [reading-math-3] §DPO: «si la respuesta preferida gana 2 en logaritmo de probabilidad y la
    # rechazada pierde 1, entonces Δ=2−(−1)=3» and «Preferida menos 1 y rechazada menos 4
    # también dan 3» — «Los dos casos siguientes dan el mismo Δ=3 y, por tanto, la misma
    # pérdida del par con un β fijo».
    ref_c, ref_r = [-5.0, -5.0], [-7.0, -7.0]
    pol_c = [ref_c[0] + 2, ref_c[1] - 1]
    pol_r = [ref_r[0] - 1, ref_r[1] - 4]
    out = dpo.loss(pol_c, pol_r, ref_c, ref_r, beta=0.1)
    for i in range(2):  # β·Δ with Δ = 3 (β is the binary64 0.1; the gains are exact)
        assert out["chosen_rewards"][i] - out["rejected_rewards"][i] == mpmath.mpf(0.1) * 3
    assert out["losses"][0] == out["losses"][1]
    with mpmath.workdps(50):
        # DPO eq. 7 at Δ = 3: −log σ(3β), β the binary64 0.1.
        want = mpmath.log1p(mpmath.exp(-3 * mpmath.mpf(0.1)))
        assert abs(out["losses"][0] - want) < mpmath.mpf(10) ** -45
    # Only the first case made the preferred answer more likely than the reference.
    assert out["chosen_rewards"][0] > 0 > out["chosen_rewards"][1]


# --------------------------------------------------------------------------- extremes

@pytest.mark.parametrize("sign", [1, -1])
def test_margin_1e4_sigmoid(sign):
    # Δ = ±1e5 with β = 0.1: βΔ = ±1e4.
    kw = dict(policy_chosen_logps=[0.0], policy_rejected_logps=[-sign * 5e4],
              reference_chosen_logps=[-sign * 5e4], reference_rejected_logps=[0.0], beta=0.1)
    out = dpo.loss(**kw)
    grad = dpo.loss_vjp({"losses": [1.0]}, **kw)["policy_chosen_logps"][0]
    loss = out["losses"][0]
    with mpmath.workdps(50):
        z = mpmath.mpf(0.1) * 1e5 * sign
        assert abs(z - sign * 1e4) < 1e-10
        tiny = mpmath.exp(-abs(z))
        if sign > 0:  # loss ≈ e^{−1e4} > 0, gradient ≈ −β·e^{−1e4}
            assert loss > 0 and abs(loss / tiny - 1) < 1e-40
            assert abs(grad / (-mpmath.mpf(0.1) * tiny) - 1) < 1e-40
        else:  # loss ≈ 1e4 = |βΔ|, gradient ≈ −β
            assert abs(loss - (abs(z) + tiny)) < mpmath.mpf(10) ** -40
            assert abs(grad + mpmath.mpf(0.1)) < 1e-40
    assert mpmath.isfinite(loss) and mpmath.isfinite(grad)


@pytest.mark.parametrize("loss_type,label_smoothing", CONVENTIONS)
@pytest.mark.parametrize("sign", [1, -1])
def test_margin_1e4_every_loss_type_is_finite(loss_type, label_smoothing, sign):
    kw = dict(policy_chosen_logps=[0.0], policy_rejected_logps=[-sign * 5e4],
              reference_chosen_logps=[-sign * 5e4], reference_rejected_logps=[0.0], beta=0.1,
              loss_type=loss_type, label_smoothing=label_smoothing)
    loss = dpo.loss(**kw)["losses"][0]
    grads = dpo.loss_vjp({k: [1.0] for k in dpo.OUTPUTS}, **kw)
    assert mpmath.isfinite(loss)
    assert all(mpmath.isfinite(g[0]) for g in grads.values())
    with mpmath.workdps(50):
        z, eps = mpmath.mpf(0.1) * 100000 * sign, mpmath.mpf(label_smoothing)
        if loss_type in ("sigmoid", "cdpo"):  # ≈ (1−ε)·softplus(−z) + ε·softplus(z)
            want = (1 - eps) * max(-z, 0) + eps * max(z, 0)
            assert abs(loss - want) < 1e-40 * max(1, abs(want))
        elif loss_type == "hinge":
            assert loss == max(1 - z, 0)
        elif loss_type == "ipo":
            d = mpmath.mpf(100000) * sign
            assert abs(loss - (d - 1 / (2 * mpmath.mpf(0.1))) ** 2) < 1e-40 * loss
        elif loss_type == "robust":  # ((1−ε)·softplus(−z) − ε·softplus(z))/(1−2ε)
            want = ((1 - eps) * max(-z, 0) - eps * max(z, 0)) / (1 - 2 * eps)
            assert abs(loss - want) < 1e-40 * max(1, abs(want))
        elif loss_type == "exo_pair":  # the KL tends to −log(1−ε) (z → +∞) or −log ε (z → −∞)
            want = -mpmath.log1p(-eps) if sign > 0 else -mpmath.log(eps)
            assert abs(loss - want) < 1e-40 * abs(want)
        elif loss_type == "apo_zero":  # 1 − σ(a) + σ(b) with a = −b = ±5000: 2σ(∓5000), not 1 − 1 + …
            want = 2 / (1 + mpmath.exp(sign * mpmath.mpf(0.1) * 50000))
            assert abs(loss - want) < 1e-40 * want
        elif loss_type == "discopop":  # z → +∞: e^{−z} → 0; z → −∞: σ(z/τ) → 0, −log σ(z) ≈ −z
            assert abs(loss - max(-z, 0)) < 1e-40 * max(1, abs(z))
        else:
            assert loss >= 0


# --------------------------------------------------------------------------- bad input

GOOD = dict(policy_chosen_logps=[-1.0, -2.0], policy_rejected_logps=[-1.5, -2.5],
            reference_chosen_logps=[-1.2, -2.2], reference_rejected_logps=[-1.4, -2.1])


@pytest.mark.parametrize("override,name", [
    (dict(beta=0.0), "beta"), (dict(beta=-0.1), "beta"), (dict(beta=float("nan")), "beta"),
    (dict(beta=float("inf")), "beta"),
    (dict(label_smoothing=-0.01), "label_smoothing"), (dict(label_smoothing=0.5), "label_smoothing"),
    (dict(label_smoothing=float("nan")), "label_smoothing"),
    (dict(loss_type="dpo"), "loss_type"), (dict(loss_type=None), "loss_type"),
    (dict(loss_type="exo_pair"), "label_smoothing"),
    (dict(loss_type="discopop", discopop_tau=0.0), "discopop_tau"), (dict(discopop_tau=-1.0), "discopop_tau"),
    (dict(reward_shift=float("nan")), "reward_shift"), (dict(reward_shift=float("inf")), "reward_shift"),
    (dict(policy_rejected_logps=[-1.0]), "policy_rejected_logps"),
    (dict(reference_rejected_logps=[-1.0, -2.0, -3.0]), "reference_rejected_logps"),
    (dict(policy_chosen_logps=[[-1.0, -2.0]]), "policy_chosen_logps"),
    (dict(policy_chosen_logps=[float("nan"), -2.0]), "policy_chosen_logps"),
    (dict(policy_rejected_logps=[float("-inf"), -2.0]), "policy_rejected_logps"),
    (dict(reference_chosen_logps=[float("inf"), -2.0]), "reference_chosen_logps"),
    (dict(reference_rejected_logps=[-1.0, float("nan")]), "reference_rejected_logps"),
    (dict(rpo_alpha=-1.0), "rpo_alpha"), (dict(rpo_alpha=float("nan")), "rpo_alpha"),
    (dict(rpo_alpha=1.0), "nll_aggregation"),
    (dict(rpo_alpha=1.0, nll_aggregation="seq-mean-token-mean"), "chosen_lengths"),
    (dict(rpo_alpha=1.0, nll_aggregation="token-mean"), "chosen_lengths"),
    (dict(nll_aggregation="sum"), "nll_aggregation"), (dict(chosen_lengths=[1, 0]), "chosen_lengths"),
    (dict(rpo_alpha=1.0, nll_aggregation="token-mean", chosen_lengths=[2]), "chosen_lengths"),
    (dict(rpo_alpha=1.0, nll_aggregation="seq-mean-token-mean", chosen_lengths=[2, 1.5]), "chosen_lengths"),
])
def test_bad_input_is_rejected_naming_the_argument(override, name):
    with pytest.raises(InputError, match=rf"^{name}: "):
        dpo.loss(**{**GOOD, **override})
    with pytest.raises(InputError, match=rf"^{name}: "):
        dpo.loss_vjp({"losses": [1.0, 1.0]}, **{**GOOD, **override})


@pytest.mark.parametrize("cotangent,name", [
    ([1.0, 1.0], "cotangent"), ({"loss": [1.0, 1.0]}, "cotangent"),
    ({"losses": [1.0]}, "cotangent"), ({"losses": [float("nan"), 1.0]}, "cotangent"),
])
def test_bad_cotangent_is_rejected(cotangent, name):
    with pytest.raises(InputError, match=rf"^{name}"):
        dpo.loss_vjp(cotangent, **GOOD)
