"""The exact pairwise reward loss: gradients against numerical derivatives, closed forms (equal
rewards give log 2, a shift of both rewards changes nothing without centring), the two forms,
huge reward differences and bad input."""
import math

import mpmath
import numpy as np
import pytest
from gradcheck import assert_vjp_matches

from lossproof.refimpl.exact import reward
from lossproof.refimpl.validate import InputError


def close(got, want) -> bool:
    """Equal to the reference's 50-digit working precision (``want`` evaluated at 60 digits)."""
    with mpmath.workdps(60):
        return abs(got - want()) <= mpmath.mpf(10) ** -45 * max(1, abs(want()))


@pytest.mark.parametrize("form", ["sigmoid", "log-exp"])
@pytest.mark.parametrize("coef", [None, 0.01, 1.0])
@pytest.mark.parametrize("with_margin", [False, True])
def test_gradient_matches_numerical_derivative(form, coef, with_margin):
    r = np.random.default_rng(7)
    kwargs = {"chosen_rewards": r.normal(0, 2, 4).tolist(), "rejected_rewards": r.normal(0, 2, 4).tolist(),
              "center_rewards_coefficient": coef, "form": form,
              "margin": r.uniform(0, 1, 4).tolist() if with_margin else None}
    assert_vjp_matches(reward.pairwise, reward.pairwise_vjp, kwargs, ["chosen_rewards", "rejected_rewards"], 1.5)


def test_equal_rewards_give_log_two_per_pair():
    # σ(0) = 1/2: each pair contributes log 2 and pushes its rewards apart by ∓1/(2B)
    assert close(reward.pairwise([0.5, -3.0, 7.25], [0.5, -3.0, 7.25]), lambda: mpmath.log(2))
    g = reward.pairwise_vjp(1.0, [0.5, -3.0, 7.25], [0.5, -3.0, 7.25])
    assert all(close(x, lambda: -mpmath.mpf(1) / 6) for x in g["chosen_rewards"])
    assert all(close(x, lambda: mpmath.mpf(1) / 6) for x in g["rejected_rewards"])


def test_bradley_terry_is_shift_invariant_and_centring_is_not():
    c, r = [1.0, -2.0, 0.5], [0.25, -1.0, 3.0]
    shifted = ([x + 4.0 for x in c], [x + 4.0 for x in r])
    assert close(reward.pairwise(c, r), lambda: reward.pairwise(*shifted))
    # TRL's centring c·mean((r_c + r_r)²) (Eisenstein et al. eq. 2) does see the offset
    plain = reward.pairwise(c, r)
    centred = reward.pairwise(c, r, center_rewards_coefficient=0.5)
    assert close(centred, lambda: plain + mpmath.mpf(0.5) * sum((mpmath.mpf(a) + b) ** 2 for a, b in zip(c, r)) / 3)
    assert reward.pairwise(*shifted, center_rewards_coefficient=0.5) != centred


def test_margin_is_subtracted_from_the_difference():
    # TRL 1.16.0: −logsigmoid(r_c − r_r − margin); a margin equal to the difference gives log 2
    assert close(reward.pairwise([3.0, 1.0], [1.0, 0.5], margin=[2.0, 0.5]), lambda: mpmath.log(2))


def test_log_exp_form_is_the_same_function():
    c, r, m = [1.0, -2.0, 40.0, -700.0], [0.25, 3.0, 0.0, 100.0], [0.5, 0.0, 0.0, 1.0]
    assert reward.pairwise(c, r, margin=m, form="log-exp") == reward.pairwise(c, r, margin=m)


def test_huge_differences_do_not_overflow_and_keep_their_tails():
    # d = 2e4: the loss is log1p(e^{−2e4}) ≈ e^{−2e4}, far below binary64 but not zero
    tiny = reward.pairwise([1e4], [-1e4])
    assert 0 < tiny and abs(tiny / mpmath.exp(-20000) - 1) < mpmath.mpf(10) ** -40
    # d = −2e4: the loss is 2e4 + log1p(e^{−2e4})
    assert abs(reward.pairwise([-1e4], [1e4]) - 20000) < mpmath.mpf(10) ** -40
    g = reward.pairwise_vjp(1.0, [-1e4, 1e4], [1e4, -1e4])
    assert close(g["chosen_rewards"][0], lambda: -(1 - mpmath.exp(-20000)) / 2)
    assert 0 < -g["chosen_rewards"][1] < mpmath.exp(-19999)


def test_single_pair_is_its_own_mean():
    assert close(reward.pairwise([1.0], [0.0]), lambda: mpmath.log1p(mpmath.exp(-1)))


@pytest.mark.parametrize("kwargs,name", [
    ({"chosen_rewards": [1.0, math.nan], "rejected_rewards": [0.0, 0.0]}, "chosen_rewards"),
    ({"chosen_rewards": [1.0], "rejected_rewards": [math.inf]}, "rejected_rewards"),
    ({"chosen_rewards": [1.0, 2.0], "rejected_rewards": [0.0]}, "rejected_rewards"),
    ({"chosen_rewards": [1.0, 2.0], "rejected_rewards": [0.0, 0.0], "margin": [1.0]}, "margin"),
    ({"chosen_rewards": [1.0], "rejected_rewards": [0.0], "margin": [-math.inf]}, "margin"),
    ({"chosen_rewards": [[1.0]], "rejected_rewards": [[0.0]]}, "chosen_rewards"),
    ({"chosen_rewards": [], "rejected_rewards": []}, "chosen_rewards"),
    ({"chosen_rewards": [1.0], "rejected_rewards": [0.0], "center_rewards_coefficient": -1.0},
     "center_rewards_coefficient"),
    ({"chosen_rewards": [1.0], "rejected_rewards": [0.0], "form": "logexp"}, "form"),
])
def test_bad_input_is_rejected_naming_the_argument(kwargs, name):
    with pytest.raises(InputError, match=f"^{name}:"):
        reward.pairwise(**kwargs)
