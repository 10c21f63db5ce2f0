"""The exact PPO value loss: gradients against numerical derivatives away from the kinks, the
closed forms of PPO eq. 9 and of the clipped branch, the band edge and the tie, the shared
aggregation, and bad input."""
import math

import mpmath
import numpy as np
import pytest
from gradcheck import assert_vjp_matches

from lossproof.refimpl.exact import grpo, ppo
from lossproof.refimpl.validate import InputError

MODES = grpo.MODES


def _inputs(seed, eps):
    """Random tokens kept a relative 1e-3 away from both kinks (band edge, tie of the squares)."""
    r = np.random.default_rng(seed)
    v = r.normal(0, 1, (3, 4))
    old = v - r.normal(0, 1.5 * (eps or 0.5), (3, 4))
    ret = v + r.normal(0, 1, (3, 4))
    if eps:
        for idx in np.ndindex(v.shape):
            step = abs(v[idx] - old[idx])
            vc = old[idx] + math.copysign(eps, v[idx] - old[idx])
            u, w = (v[idx] - ret[idx]) ** 2, (vc - ret[idx]) ** 2
            assert abs(step - eps) > 1e-3 * eps and (step < eps or abs(u - w) > 1e-3 * max(u, w)), idx
    mask = [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]]
    return {"values": v.tolist(), "old_values": old.tolist(), "returns": ret.tolist(), "mask": mask}


@pytest.mark.parametrize("eps", [None, 0.2, 0.5])
@pytest.mark.parametrize("half", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_gradient_matches_numerical_derivative(eps, half, mode):
    kwargs = {**_inputs(3, eps), "clip_range_value": eps, "half": half, "aggregation": mode}
    assert_vjp_matches(ppo.value_loss, ppo.value_loss_vjp, kwargs, ["values"], 0.75)


def test_unclipped_loss_is_ppo_eq_9():
    # L^VF = Ê_t (V − V^targ)²: errors −1, 2 and 0.5 over three time steps
    got = ppo.value_loss([[0.5, 3.0], [1.5, 9.0]], [[0.0, 0.0], [0.0, 0.0]], [[1.5, 1.0], [1.0, 0.0]],
                         [[1, 1], [1, 0]])
    assert got == mpmath.mpf(1 + 4 + 0.25) / 3
    assert ppo.value_loss([[0.5, 3.0], [1.5, 9.0]], [[0.0, 0.0], [0.0, 0.0]], [[1.5, 1.0], [1.0, 0.0]],
                          [[1, 1], [1, 0]], half=True) == got / 2


def test_clipped_branch_is_the_larger_square_and_has_no_gradient():
    # V_old = 0, ε = 0.5: V = 2 → V_c = 0.5; towards R = 3 the clipped square 6.25 beats 1
    kwargs = {"values": [[2.0]], "old_values": [[0.0]], "returns": [[3.0]], "mask": [[1]], "clip_range_value": 0.5}
    assert ppo.value_loss(**kwargs) == mpmath.mpf(6.25)
    assert ppo.value_loss_vjp(1.0, **kwargs)["values"][0][0] == 0
    # away from R = 0 the unclipped square 4 beats 0.25, gradient 2·(V − R)
    kwargs["returns"] = [[0.0]]
    assert ppo.value_loss(**kwargs) == 4
    assert ppo.value_loss_vjp(1.0, **kwargs)["values"][0][0] == 4


def test_band_edge_passes_the_gradient_and_the_tie_takes_the_unclipped_branch():
    edge = {"values": [[0.5]], "old_values": [[0.0]], "returns": [[-1.0]], "mask": [[1]], "clip_range_value": 0.5}
    assert ppo.value_loss_vjp(1.0, **edge)["values"][0][0] == 3           # 2·(0.5 − (−1)), closed band
    tie = {"values": [[2.0]], "old_values": [[0.0]], "returns": [[1.25]], "mask": [[1]], "clip_range_value": 0.5}
    assert ppo.value_loss(**tie) == mpmath.mpf(0.5625)                     # 0.75² both ways
    assert ppo.value_loss_vjp(1.0, **tie)["values"][0][0] == mpmath.mpf(1.5)  # the unclipped branch's 2·0.75


def test_a_wide_band_is_the_unclipped_loss():
    kwargs = _inputs(5, 0.5)
    wide = ppo.value_loss(**kwargs, clip_range_value=1e6)
    assert wide == ppo.value_loss(**kwargs)


@pytest.mark.parametrize("mode", MODES)
def test_aggregation_is_grpo_aggregate_of_the_per_token_loss(mode):
    kwargs = _inputs(9, None)
    with mpmath.workdps(60):
        per_token = [[(mpmath.mpf(v) - r) ** 2 for v, r in zip(vr, rr)]
                     for vr, rr in zip(kwargs["values"], kwargs["returns"])]
        want = grpo.aggregate(per_token, kwargs["mask"], mode=mode)
    assert abs(ppo.value_loss(**kwargs, aggregation=mode) - want) <= mpmath.mpf(10) ** -45 * abs(want)


def test_padding_never_reaches_the_loss_or_its_gradient():
    kwargs = _inputs(11, 0.5)
    junk = {k: [row[:] for row in kwargs[k]] for k in ("values", "old_values", "returns")}
    for i, row in enumerate(kwargs["mask"]):
        for j, on in enumerate(row):
            if not on:
                junk["values"][i][j], junk["old_values"][i][j], junk["returns"][i][j] = 1e30, -1e30, 3.0
    assert ppo.value_loss(**{**kwargs, **junk}, clip_range_value=0.5) == ppo.value_loss(**kwargs, clip_range_value=0.5)
    grad = ppo.value_loss_vjp(1.0, **{**kwargs, **junk}, clip_range_value=0.5)["values"]
    assert all(grad[i][j] == 0 for i, row in enumerate(kwargs["mask"]) for j, on in enumerate(row) if not on)


OK = {"values": [[1.0, 2.0]], "old_values": [[1.0, 2.0]], "returns": [[0.0, 0.0]], "mask": [[1, 1]]}


@pytest.mark.parametrize("kwargs,name", [
    ({**OK, "values": [[1.0, math.nan]]}, "values"),
    ({**OK, "returns": [[math.inf, 0.0]]}, "returns"),
    ({**OK, "old_values": [[1.0]]}, "old_values"),
    ({**OK, "mask": [[0, 0]]}, "mask"),
    ({**OK, "mask": [[1, 2]]}, "mask"),
    ({"values": [1.0], "old_values": [1.0], "returns": [0.0], "mask": [1]}, "values"),
    ({"values": [[]], "old_values": [[]], "returns": [[]], "mask": [[]]}, "values"),
    ({**OK, "clip_range_value": 0.0}, "clip_range_value"),
    ({**OK, "half": 0.5}, "half"),
    ({**OK, "aggregation": "mean"}, "aggregation"),
])
def test_bad_input_is_rejected_naming_the_argument(kwargs, name):
    with pytest.raises(InputError, match=f"^{name}:"):
        ppo.value_loss(**kwargs)


# ----------------------------------------------------------------------------- entropy bonus

def _entropy_inputs(seed):
    r = np.random.default_rng(seed)
    return {"entropy": r.uniform(0.0, 4.0, (3, 4)).tolist(), "mask": [[1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 0, 0]]}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mean_eps", [0.0, 1e-8])
def test_entropy_bonus_gradient_matches_numerical_derivative(mode, mean_eps):
    kwargs = {**_entropy_inputs(7), "coef": 0.03, "aggregation": mode, "mean_eps": mean_eps,
              "norm_length": 16.0 if mode == "seq-mean-token-sum-norm" else None}
    assert_vjp_matches(ppo.entropy_bonus, ppo.entropy_bonus_vjp, kwargs, ["entropy"], 0.75)


def test_entropy_bonus_is_minus_c_times_the_token_mean_of_eq_9():
    # PPO eq. 9: Ê_t[c₂·S]; three tokens with H = 0.5, 1.5, 2 and c₂ = 0.01 (Table 5)
    got = ppo.entropy_bonus([[0.5, 1.5], [2.0, 0.0]], [[1, 1], [1, 0]])
    g = ppo.entropy_bonus_vjp(1.0, [[0.5, 1.5], [2.0, 0.0]], [[1, 1], [1, 0]])["entropy"]
    with mpmath.workdps(60):
        assert abs(got - mpmath.mpf(-0.01) * 4 / 3) < mpmath.mpf(10) ** -45
        assert all(abs(g[i][j] - mpmath.mpf(-0.01) / 3) < mpmath.mpf(10) ** -45 for i, j in [(0, 0), (0, 1), (1, 0)])
    assert g[1][1] == 0


@pytest.mark.parametrize("mode", MODES)
def test_entropy_bonus_is_grpo_aggregate_times_minus_c(mode):
    kwargs = _entropy_inputs(3)
    want = grpo.aggregate(kwargs["entropy"], kwargs["mask"], mode=mode)
    got = ppo.entropy_bonus(**kwargs, coef=2.5, aggregation=mode)
    with mpmath.workdps(60):
        assert abs(got + mpmath.mpf(2.5) * want) < mpmath.mpf(10) ** -45 * max(1, abs(want))


def test_entropy_bonus_chained_with_lm_entropy_is_the_logit_gradient():
    # d(−c·mean H)/dz = −c/n·∂H/∂z with ∂H/∂z_v = −p_v(log p_v + H): the two VJPs compose
    from lossproof.refimpl.exact import lm
    z = [[0.5, -1.0, 2.0], [0.0, 0.25, -0.75]]
    h = lm.entropy(z)
    dh = ppo.entropy_bonus_vjp(1.0, [list(h)], [[1, 1]], coef=0.2)["entropy"][0]
    dz = lm.entropy_vjp(np.array(dh, dtype=object), z)["logits"]
    with mpmath.workdps(60):
        for t, row in enumerate(z):
            p = [mpmath.exp(v) / mpmath.fsum(mpmath.exp(u) for u in row) for v in row]
            for v, pv in enumerate(p):
                want = mpmath.mpf(0.2) / 2 * pv * (mpmath.log(pv) + h[t])
                assert abs(dz[t][v] - want) < mpmath.mpf(10) ** -40


@pytest.mark.parametrize("kwargs,name", [
    ({"entropy": [[1.0, math.nan]], "mask": [[1, 1]]}, "entropy"),
    ({"entropy": [[1.0, math.inf]], "mask": [[1, 1]]}, "entropy"),
    ({"entropy": [1.0, 2.0], "mask": [1, 1]}, "entropy"),
    ({"entropy": [[1.0, 2.0]], "mask": [[0, 0]]}, "mask"),
    ({"entropy": [[1.0, 2.0]], "mask": [[1]]}, "mask"),
    ({"entropy": [[1.0, 2.0]], "mask": [[1, 1]], "coef": True}, "coef"),
    ({"entropy": [[1.0, 2.0]], "mask": [[1, 1]], "aggregation": "sum"}, "aggregation"),
    ({"entropy": [[1.0, 2.0]], "mask": [[1, 1]], "mean_eps": -1.0}, "mean_eps"),
    ({"entropy": [[1.0, 2.0]], "mask": [[1, 1]], "norm_length": 0.0}, "norm_length"),
])
def test_entropy_bonus_bad_input_is_rejected_naming_the_argument(kwargs, name):
    with pytest.raises(InputError, match=f"^{name}:"):
        ppo.entropy_bonus(**kwargs)
