"""The exact router z-loss: gradients against numerical derivatives, closed forms (E = 1, equal
logits), the mask, logits ±1e4 and bad input."""
import math

import mpmath
import numpy as np
import pytest
from gradcheck import assert_vjp_matches

from refimpl.exact import moe
from refimpl.validate import InputError


def close(got, want) -> bool:
    """Equal to the reference's 50-digit working precision (``want`` evaluated at 60 digits)."""
    with mpmath.workdps(60):
        return abs(got - want()) <= mpmath.mpf(10) ** -45 * max(1, abs(want()))


@pytest.mark.parametrize("mask", [None, [1, 0, 1, 1]])
@pytest.mark.parametrize("spread", [0.1, 3.0])
def test_gradient_matches_numerical_derivative(mask, spread):
    r = np.random.default_rng(4)
    kwargs = {"router_logits": r.normal(0, spread, (4, 5)).tolist(), "mask": mask}
    assert_vjp_matches(moe.router_z_loss, moe.router_z_loss_vjp, kwargs, ["router_logits"], -1.25)


def test_single_expert_is_the_mean_square_of_the_logits():
    assert close(moe.router_z_loss([[0.5], [-7.0], [3.0]]), lambda: (mpmath.mpf(0.25) + 49 + 9) / 3)
    g = moe.router_z_loss_vjp(1.0, [[0.5], [-7.0], [3.0]])["router_logits"]
    assert all(close(g[i][0], lambda x=x: 2 * mpmath.mpf(x) / 3) for i, x in enumerate([0.5, -7.0, 3.0]))


def test_equal_logits_give_c_plus_log_e():
    want = lambda: (2 + mpmath.log(4)) ** 2  # noqa: E731
    assert close(moe.router_z_loss([[2.0, 2.0, 2.0, 2.0]]), want)


def test_the_mean_runs_over_the_selected_tokens():
    z = [[1.0, 2.0], [1e4, -3.0], [0.5, -0.5]]
    both = moe.router_z_loss([z[0], z[2]])
    assert close(moe.router_z_loss(z, mask=[1, 0, 1]), lambda: both)
    g = moe.router_z_loss_vjp(1.0, z, mask=[1, 0, 1])["router_logits"]
    assert g[1][0] == 0 and g[1][1] == 0


def test_huge_logits_are_formed_around_the_maximum():
    # lse(1e4, −1e4, 0) = 1e4 + log1p(e^{−1e4} + e^{−2e4})
    got = moe.router_z_loss([[1e4, -1e4, 0.0]])
    assert close(got, lambda: (10000 + mpmath.log1p(mpmath.exp(-10000) + mpmath.exp(-20000))) ** 2)


@pytest.mark.parametrize("kwargs,name", [
    ({"router_logits": [[1.0, math.nan]]}, "router_logits"),
    ({"router_logits": [[1.0, -math.inf]]}, "router_logits"),
    ({"router_logits": [1.0, 2.0]}, "router_logits"),
    ({"router_logits": [[], []]}, "router_logits"),
    ({"router_logits": [[1.0], [2.0]], "mask": [1, 1, 0]}, "mask"),
    ({"router_logits": [[1.0], [2.0]], "mask": [1, 2]}, "mask"),
    ({"router_logits": [[1.0], [2.0]], "mask": [0, 0]}, "mask"),
])
def test_bad_input_is_rejected_naming_the_argument(kwargs, name):
    with pytest.raises(InputError, match=f"^{name}:"):
        moe.router_z_loss(**kwargs)
