"""The exact router z-loss: gradients against numerical derivatives, closed forms (E = 1, equal
logits), the mask, logits ±1e4 and bad input."""
import math

import mpmath
import numpy as np
import pytest
from gradcheck import assert_vjp_matches

from lossproof.refimpl.exact import moe
from lossproof.refimpl.validate import InputError


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


# ----------------------------------------------------------------------------- load balancing

def _balance_inputs(seed, shape):
    """Distinct logits per token (no tie at any top-k boundary)."""
    r = np.random.default_rng(seed)
    z = r.normal(0, 1.5, shape)
    assert all(len(set(row)) == len(row) for row in z.reshape(-1, shape[-1]).tolist())
    return z.tolist()


@pytest.mark.parametrize("form,shape,extra", [
    ("switch", (7, 4), {}), ("concatenated", (2, 7, 4), {}), ("per-layer-sum", (3, 5, 4), {}),
    ("sequence", (2, 6, 4), {"seq_len": 3}), ("sequence", (7, 5), {})])
@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("masked", [False, True])
def test_load_balancing_gradient_matches_numerical_derivative(form, shape, extra, k, masked):
    n = shape[-2]
    mask = ([1, 0, 1, 1, 1, 0] + [1] * n)[:n] if masked else None
    kwargs = {"router_logits": _balance_inputs(11 + n + k, shape), "top_k": k, "form": form, "mask": mask, **extra}
    assert_vjp_matches(moe.load_balancing, moe.load_balancing_vjp, kwargs, ["router_logits"], -1.25)


def test_switch_eq_4_closed_form():
    # N = 3, E = 2, k = 1: tokens 1 and 2 choose expert 0, token 3 expert 1: f = (2/3, 1/3)
    z = [[2.0, 0.0], [1.0, -1.0], [0.0, 1.0]]
    got = moe.load_balancing(z)
    with mpmath.workdps(60):
        p0 = [1 / (1 + mpmath.exp(-2)), 1 / (1 + mpmath.exp(-2)), 1 / (1 + mpmath.exp(1))]
        big_p0 = mpmath.fsum(p0) / 3
        want = 2 * (mpmath.mpf(2) / 3 * big_p0 + mpmath.mpf(1) / 3 * (1 - big_p0))
        assert abs(got - want) < mpmath.mpf(10) ** -45


def test_uniform_routing_gives_k_and_a_zero_gradient():
    # each of 4 experts is the top-1 of one token: f = 1/4, Σ P = 1, loss E·(1/4)·1 = 1
    z = [[1.0, 0.0, -1.0, -2.0], [-2.0, -1.0, 0.0, 1.0], [0.0, 1.0, -2.0, -1.0], [-1.0, -2.0, 1.0, 0.0]]
    with mpmath.workdps(60):
        assert abs(moe.load_balancing(z) - 1) < mpmath.mpf(10) ** -45
    g = moe.load_balancing_vjp(1.0, z)["router_logits"]
    assert all(v == 0 for v in np.asarray(g).flat)
    g = moe.load_balancing_vjp(1.0, [[0.5, -1.0, 2.0], [0.0, 0.3, 0.1]], top_k=3, form="sequence")["router_logits"]
    assert all(v == 0 for v in np.asarray(g).flat)


def test_concatenated_pools_the_layers_and_per_layer_sum_adds_them():
    z = _balance_inputs(5, (2, 6, 4))
    each = [moe.load_balancing(layer, top_k=2) for layer in z]
    summed = moe.load_balancing(z, top_k=2, form="per-layer-sum")
    pooled = moe.load_balancing(z, top_k=2, form="concatenated")
    one = moe.load_balancing(z[0] + z[1], top_k=2)  # the layers' tokens concatenated into one batch
    with mpmath.workdps(60):
        assert abs(summed - each[0] - each[1]) < mpmath.mpf(10) ** -45
        assert abs(pooled - one) < mpmath.mpf(10) ** -45
        assert abs(pooled - summed) > mpmath.mpf(10) ** -3


def test_sequence_form_is_deepseek_v3_eq_17_to_20():
    # one sequence, T = 2, E = 3, K = 1: s' = σ(x)/Σσ(x); f_i = E/(K·T)·count_i
    z = [[2.0, 0.0, -1.0], [1.0, -1.0, 0.5]]
    got = moe.load_balancing(z, form="sequence")
    with mpmath.workdps(60):
        s = [[1 / (1 + mpmath.exp(-mpmath.mpf(v))) for v in row] for row in z]
        sp = [[v / mpmath.fsum(row) for v in row] for row in s]
        f = [mpmath.mpf(3) / 2 * 2, 0, 0]        # expert 0 is both tokens' top-1
        big_p = [(sp[0][i] + sp[1][i]) / 2 for i in range(3)]
        assert abs(got - mpmath.fsum(a * b for a, b in zip(f, big_p))) < mpmath.mpf(10) ** -45


def test_sequences_and_the_mask():
    z = _balance_inputs(9, (6, 3))
    halves = [moe.load_balancing(z[:3], form="sequence"), moe.load_balancing(z[3:], form="sequence")]
    both = moe.load_balancing(z, form="sequence", seq_len=3)
    selected = moe.load_balancing([z[0], z[2]], form="sequence")
    masked = moe.load_balancing(z, form="sequence", seq_len=3, mask=[1, 0, 1, 0, 0, 0])
    with mpmath.workdps(60):
        assert abs(both - (halves[0] + halves[1]) / 2) < mpmath.mpf(10) ** -45
        assert abs(masked - selected) < mpmath.mpf(10) ** -45   # the empty second sequence leaves the mean


def test_a_tie_at_the_kth_place_counts_the_lower_index():
    assert moe.top_experts([1.0, 2.0, 2.0, 0.0], 2) == {1, 2}
    assert moe.top_experts([1.0, 2.0, 2.0, 0.0], 1) == {1}
    assert moe.top_experts([3.0, 3.0, 3.0], 2) == {0, 1}


@pytest.mark.parametrize("kwargs,name", [
    ({"router_logits": [[1.0, math.nan]]}, "router_logits"),
    ({"router_logits": [[1.0, -math.inf]]}, "router_logits"),
    ({"router_logits": [1.0, 2.0]}, "router_logits"),
    ({"router_logits": [[[1.0, 2.0]], [[0.0, 1.0]]]}, "router_logits"),
    ({"router_logits": [[1.0, 2.0]], "top_k": 3}, "top_k"),
    ({"router_logits": [[1.0, 2.0]], "top_k": 0}, "top_k"),
    ({"router_logits": [[1.0, 2.0]], "form": "mean"}, "form"),
    ({"router_logits": [[1.0, 2.0], [0.0, 1.0]], "form": "sequence", "seq_len": 3}, "seq_len"),
    ({"router_logits": [[1.0, 2.0], [0.0, 1.0]], "seq_len": 1}, "seq_len"),
    ({"router_logits": [[1.0, 2.0], [0.0, 1.0]], "mask": [0, 0]}, "mask"),
    ({"router_logits": [[1.0, 2.0], [0.0, 1.0]], "mask": [1]}, "mask"),
])
def test_load_balancing_bad_input_is_rejected_naming_the_argument(kwargs, name):
    with pytest.raises(InputError, match=f"^{name}:"):
        moe.load_balancing(**kwargs)


@pytest.mark.parametrize("form,shape", [("switch", (7, 4)), ("concatenated", (2, 7, 4)), ("per-layer-sum", (3, 5, 4))])
@pytest.mark.parametrize("k", [2, 3])
def test_fraction_norm_top_k_is_the_loss_over_k(form, shape, k):
    """Megatron-core's switch_load_balancing_loss_func (E/(topk·T²)·Σ_e probs_e·tokens_e) and
    OLMo-core's load_balancing_loss (scale num_experts/top_k) divide f by k: exactly 1/k of the
    default, with the gradient 1/k of it too and still the derivative."""
    kwargs = {"router_logits": _balance_inputs(31 + k, shape), "top_k": k, "form": form}
    plain, per_k = moe.load_balancing(**kwargs), moe.load_balancing(**kwargs, fraction_norm="top_k")
    g = moe.load_balancing_vjp(-1.25, **kwargs)["router_logits"]
    g_k = moe.load_balancing_vjp(-1.25, **kwargs, fraction_norm="top_k")["router_logits"]
    with mpmath.workdps(60):
        assert abs(per_k - plain / k) < mpmath.mpf(10) ** -45
        assert all(abs(b - a / k) < mpmath.mpf(10) ** -45 for a, b in zip(g.flat, g_k.flat))
    assert_vjp_matches(moe.load_balancing, moe.load_balancing_vjp, {**kwargs, "fraction_norm": "top_k"},
                       ["router_logits"], -1.25)


def test_fraction_norm_megatron_formula():
    """Megatron-core 0.16.1 moe_utils.py switch_load_balancing_loss_func written out: Σ_e
    (Σ_t probs_te)·tokens_e · E/(topk·T²)."""
    z = [[2.0, 0.0, -1.0], [1.0, -1.0, 0.5], [0.0, 1.0, 0.25], [-0.5, 0.75, 1.5]]
    k, e, n = 2, 3, 4
    with mpmath.workdps(60):
        probs = [[mpmath.exp(v) / mpmath.fsum(mpmath.exp(u) for u in row) for v in row] for row in z]
        chosen = [sorted(range(e), key=lambda j: -row[j])[:k] for row in z]
        tokens = [sum(j in c for c in chosen) for j in range(e)]
        want = mpmath.fsum(mpmath.fsum(p[j] for p in probs) * tokens[j] for j in range(e)) * e / (k * n * n)
    assert abs(moe.load_balancing(z, top_k=k, fraction_norm="top_k") - want) < mpmath.mpf(10) ** -45


@pytest.mark.parametrize("kwargs,match", [
    ({"form": "sequence", "fraction_norm": "top_k"}, "already divides"),
    ({"fraction_norm": "k"}, "fraction_norm")])
def test_fraction_norm_bad_values_are_rejected(kwargs, match):
    with pytest.raises(InputError, match=match):
        moe.load_balancing([[1.0, 2.0, 0.0], [0.5, -0.5, 1.0]], top_k=2, **kwargs)
