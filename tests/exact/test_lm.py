"""The exact lm objectives: gradients against mpmath.diff, closed forms (log V, V = 1, one-hot rows),
the definitions of label smoothing, z-loss, soft-capping and the reductions, and bad input."""
import mpmath
import numpy as np
import pytest
from gradcheck import assert_vjp_matches

from lossproof.refimpl import validate
from lossproof.refimpl.exact import lm, mp

NEG_INF = float("-inf")


@pytest.fixture(autouse=True)
def _digits():
    """The comparisons below at the reference's 50 digits (mpmath's default is 15)."""
    with mpmath.workdps(50):
        yield


def _logits(seed, n=3, v=5, spread=2.5):
    return np.random.default_rng(seed).normal(0, spread, (n, v)).tolist()


CE_SETTINGS = [
    {},
    {"reduction": "sum"},
    {"reduction": "none"},
    {"normalizer": 7.5},
    {"label_smoothing": 0.2},
    {"label_smoothing": 1.0, "reduction": "none"},
    {"z_loss": 0.05},
    {"softcap": 2.0},
    {"label_smoothing": 0.1, "z_loss": 1e-2, "softcap": 3.0, "reduction": "sum"},
    {"ignore_index": 4},
]


@pytest.mark.parametrize("kwargs", CE_SETTINGS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()) or "mean")
def test_cross_entropy_gradient_matches_numerical_derivative(kwargs):
    z = _logits(0)
    z[1][0] = NEG_INF if not kwargs.get("label_smoothing") or kwargs.get("softcap") else z[1][0]
    labels = [1, kwargs.get("ignore_index", -100), 4 if "ignore_index" not in kwargs else 0]
    ct = [0.5, -1.25, 2.0] if kwargs.get("reduction") == "none" else 1.5
    assert_vjp_matches(lm.cross_entropy, lm.cross_entropy_vjp, {"logits": z, "labels": labels, **kwargs},
                       ["logits"], ct)


@pytest.mark.parametrize("temperature", [1.0, 0.4, 3.0])
def test_token_logprobs_and_entropy_gradients_match_numerical_derivatives(temperature):
    z = _logits(1, 3, 6)
    z[2][5] = NEG_INF
    ct = [0.75, -2.0, 1.25]
    assert_vjp_matches(lm.token_logprobs, lm.token_logprobs_vjp,
                       {"logits": z, "labels": [0, 3, 2], "temperature": temperature}, ["logits"], ct)
    assert_vjp_matches(lm.entropy, lm.entropy_vjp, {"logits": z, "temperature": temperature}, ["logits"], ct)


def test_closed_forms():
    # equal logits: −log q_y = H = log V; entropy gradient exactly 0
    z = [[1.5] * 7, [-2.0] * 7]
    assert lm.cross_entropy(z, [3, 6]) == mpmath.log(7)
    assert all(mpmath.almosteq(h, mpmath.log(7), rel_eps=mpmath.mpf(10) ** -45) for h in lm.entropy(z))
    assert all(g == 0 for g in lm.entropy_vjp([1.0, -2.0], z)["logits"].flat)
    # V = 1: everything is 0, with smoothing too; the z-loss leaves ζ·z²
    one = [[0.5], [-3.0]]
    assert lm.cross_entropy(one, [0, 0]) == 0
    assert lm.cross_entropy(one, [0, 0], label_smoothing=0.3) == 0
    assert lm.cross_entropy(one, [0, 0], z_loss=0.5, reduction="sum") == mpmath.mpf(0.5) * (0.25 + 9)
    assert list(lm.token_logprobs(one, [0, 0])) == [0, 0] and list(lm.entropy(one)) == [0, 0]
    # a row with one possible token is one-hot: no loss, no entropy
    assert lm.cross_entropy([[NEG_INF, 4.0, NEG_INF]], [1]) == 0
    assert lm.entropy([[NEG_INF, 4.0, NEG_INF]])[0] == 0


def test_label_smoothing_is_pytorchs_definition():
    # (1−ε)·(−log q_y) + ε·mean_v(−log q_v) (torch.nn.functional.cross_entropy's documented target)
    z, eps = _logits(2, 1, 4)[0], mpmath.mpf(0.3)
    logq = [mpmath.mpf(v) - mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(u)) for u in z)) for v in z]
    want = (1 - eps) * -logq[2] + eps * mpmath.fsum(-lq for lq in logq) / 4
    assert abs(lm.cross_entropy([z], [2], label_smoothing=0.3) - want) < mpmath.mpf(10) ** -45


def test_z_loss_and_softcap_definitions():
    z = _logits(3, 1, 5)[0]
    lse = mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(u)) for u in z))
    base = lm.cross_entropy([z], [1])
    assert abs(lm.cross_entropy([z], [1], z_loss=1e-4) - base - mpmath.mpf(1e-4) * lse ** 2) < mpmath.mpf(10) ** -45
    capped = [30 * mpmath.tanh(mpmath.mpf(u) / 30) for u in [1e4, -1e4, 3.0]]
    lse = mpmath.log(mpmath.fsum(mpmath.exp(c) for c in capped))
    assert abs(lm.cross_entropy([[1e4, -1e4, 3.0]], [2], softcap=30.0) - (lse - capped[2])) < mpmath.mpf(10) ** -45


def test_z_loss_is_zero_at_ignored_tokens_per_token():
    """PaLM (arXiv 2204.02311) §5: ζ·log²Z is an auxiliary of the trained tokens. Under reduction
    'none' an ignored token's loss is exactly 0 and so is its gradient row; a counted token's is its
    NLL plus ζ·lse² (OLMo-core 3.0.0 cross_entropy_loss keeps ζ·lse² at ignored tokens here)."""
    z, y = [[8.0, 9.5, 7.25], [10.0, 6.0, 9.0], [7.5, 8.5, 12.0]], [1, -100, -100]
    per = lm.cross_entropy(z, y, z_loss=0.1, label_smoothing=0.2, reduction="none")
    assert per[1] == 0 and per[2] == 0
    lse = mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(u)) for u in z[0]))
    nll = [lse - mpmath.mpf(u) for u in z[0]]
    eps = mpmath.mpf(0.2)
    want = (1 - eps) * nll[1] + eps * mpmath.fsum(nll) / 3 + mpmath.mpf(0.1) * lse ** 2
    assert abs(per[0] - want) < mpmath.mpf(10) ** -45
    grad = lm.cross_entropy_vjp([1.0, 2.0, -1.5], z, y, z_loss=0.1, reduction="none")["logits"]
    assert all(g == 0 for g in grad[1]) and all(g == 0 for g in grad[2])


def test_reductions_and_normalizer():
    z, y = _logits(4, 4, 3), [0, -100, 2, 1]
    per = lm.cross_entropy(z, y, reduction="none")
    assert per[1] == 0
    assert lm.cross_entropy(z, y, reduction="sum") == mpmath.fsum(per)
    assert lm.cross_entropy(z, y) == mpmath.fsum(per) / 3
    assert lm.cross_entropy(z, y, normalizer=12) == mpmath.fsum(per) / 12
    # gradient accumulation: the micro-batches' sums over the global count add up to the global mean
    # (transformers PR #34191), which the mean of the micro-batch means does not
    z2, y2 = _logits(5, 2, 3), [1, -100]
    whole = lm.cross_entropy(z + z2, y + y2)
    assert abs(lm.cross_entropy(z, y, normalizer=4) + lm.cross_entropy(z2, y2, normalizer=4) - whole) < 1e-45
    assert abs((lm.cross_entropy(z, y) + lm.cross_entropy(z2, y2)) / 2 - whole) > 1e-3


def test_saturated_rows_keep_their_digits():
    # q_y − 1 ≈ −e^{−2e4}: formed by expm1, not 1 − 1
    z = [[1e4, -1e4, -1e4]]
    value = lm.cross_entropy(z, [0])
    assert mpmath.almosteq(value, 2 * mpmath.exp(-2e4), rel_eps=mpmath.mpf(10) ** -40)
    g = lm.cross_entropy_vjp(1.0, z, [0])["logits"]
    assert mpmath.almosteq(g[0, 0], -2 * mpmath.exp(-2e4), rel_eps=mpmath.mpf(10) ** -40)
    assert lm.token_logprobs(z, [0])[0] < 0


@pytest.mark.parametrize("call, match", [
    (lambda: lm.cross_entropy([[1.0, 2.0]], [2]), "outside \\[0, 2\\) and is not ignore_index"),
    (lambda: lm.cross_entropy([[1.0, 2.0]], [-100]), "mean over zero tokens"),
    (lambda: lm.cross_entropy([[1.0, NEG_INF]], [1]), "-inf at the label"),
    (lambda: lm.cross_entropy([[1.0, NEG_INF]], [0], label_smoothing=0.1), "label_smoothing > 0"),
    (lambda: lm.cross_entropy([[NEG_INF, NEG_INF], [1.0, 2.0]], [-100, 0]), "no possible token"),
    (lambda: lm.cross_entropy([[1.0, 2.0]], [0], normalizer=2.0, reduction="sum"), "normalizer"),
    (lambda: lm.cross_entropy([[1.0, 2.0]], [0], label_smoothing=1.5), "label_smoothing"),
    (lambda: lm.cross_entropy([[1.0, 2.0]], [0], reduction="avg"), "reduction"),
    (lambda: lm.cross_entropy([[1.0, 2.0]], [0], ignore_index=1.5), "ignore_index"),
    (lambda: lm.token_logprobs([[1.0, 2.0]], [-100]), "outside \\[0, 2\\)"),
    (lambda: lm.token_logprobs([[1.0, 2.0]], [0], temperature=0.0), "temperature"),
    (lambda: lm.entropy([[NEG_INF, NEG_INF]]), "no possible token"),
    (lambda: lm.entropy([1.0, 2.0]), "expected 2 dimensions"),
])
def test_bad_input_is_rejected(call, match):
    with pytest.raises(validate.InputError, match=match):
        call()


def test_the_capped_cross_entropy_accepts_neg_inf_everywhere():
    # soft-capping maps −inf to −s: the loss at such a label is finite
    value = lm.cross_entropy([[NEG_INF, 1.0]], [0], softcap=2.0, label_smoothing=0.5)
    assert mpmath.isfinite(value) and value > 0
    assert mp.to_float(lm.cross_entropy_vjp(1.0, [[NEG_INF, 1.0]], [0], softcap=2.0)["logits"])[0, 0] == 0


LCE_SETTINGS = [{}, {"reduction": "none"}, {"label_smoothing": 0.3, "z_loss": 0.01, "softcap": 2.0},
                {"reduction": "sum", "ignore_index": 0}]


@pytest.mark.parametrize("kwargs", LCE_SETTINGS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()) or "mean")
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_cross_entropy_gradients_match_numerical_derivatives(kwargs, with_bias):
    r = np.random.default_rng(3)
    inputs = {"hidden": r.normal(0, 1.5, (3, 2)).tolist(), "weight": r.normal(0, 1, (4, 2)).tolist(),
              "labels": [1, 0, 3], **kwargs}
    if with_bias:
        inputs["bias"] = r.normal(0, 1, 4).tolist()
    ct = [0.5, -1.25, 2.0] if kwargs.get("reduction") == "none" else 1.5
    grads = ["hidden", "weight"] + (["bias"] if with_bias else [])
    assert_vjp_matches(lm.linear_cross_entropy, lm.linear_cross_entropy_vjp, inputs, grads, ct)
    assert set(lm.linear_cross_entropy_vjp(ct, **inputs)) == set(grads)


@pytest.mark.parametrize("kwargs", [{}, {"label_smoothing": 0.1}, {"z_loss": 1e-4, "softcap": 300.0}])
def test_linear_hidden_gradient_of_a_saturated_row_keeps_its_digits(kwargs):
    """Logits (50, −150, 450, 50), label 3: the hidden gradient's last component is
    Σ_v G_v·w_v2 = q_0·(w_02 − w_22) + q_1·(w_12 − w_22) ≈ e^−400 (uncapped, unsmoothed), which G·w
    formed from G loses under q_2's rounding; the certified enclosure holds the exact value."""
    from lossproof.refimpl.certified import lm as certified
    inputs = {"hidden": [[100.0, -100.0, 50.0], [-80.0, 120.0, 10.0]],
              "weight": [[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0], [2.0, -2.0, 1.0], [0.0, 0.0, 1.0]],
              "labels": [3, 1], **kwargs}
    got = lm.linear_cross_entropy_vjp(1.0, **inputs)["hidden"]
    balls = certified.linear_cross_entropy_vjp(1.0, **inputs)["hidden"]
    for i in range(2):
        for k in range(3):
            assert mpmath.mpf(balls[i][k].mid()) - balls[i][k].rad() <= got[i, k] <= \
                mpmath.mpf(balls[i][k].mid()) + balls[i][k].rad(), (i, k, got[i, k], balls[i][k])
    if not kwargs:
        assert mpmath.almosteq(got[0, 2], mpmath.exp(-400), rel_eps=1e-10)


def test_linear_cross_entropy_bad_input():
    w = [[1.0, 0.5], [-1.0, 0.25], [0.0, 2.0]]
    with pytest.raises(validate.InputError, match="hidden size H"):
        lm.linear_cross_entropy([[1.0, 2.0, 3.0]], w, [0])
    with pytest.raises(validate.InputError, match="bias: length 2 does not match the vocabulary size V = 3"):
        lm.linear_cross_entropy([[1.0, 2.0]], w, [0], bias=[0.0, 1.0])
    with pytest.raises(validate.InputError, match="outside \\[0, 3\\)"):
        lm.linear_cross_entropy([[1.0, 2.0]], w, [3])


# ----------------------------------------------------------------------------- smoothing over the other classes

@pytest.mark.parametrize("kwargs", [{}, {"reduction": "none"}, {"z_loss": 0.05, "softcap": 3.0, "reduction": "sum"}],
                         ids=["mean", "none", "zloss-cap-sum"])
def test_smoothing_over_the_other_classes_gradient(kwargs):
    z = _logits(4)
    labels = [1, -100, 4]
    ct = [0.5, -1.25, 2.0] if kwargs.get("reduction") == "none" else 1.5
    assert_vjp_matches(lm.cross_entropy, lm.cross_entropy_vjp,
                       {"logits": z, "labels": labels, "label_smoothing": 0.2, "smoothing_classes": "others",
                        **kwargs}, ["logits"], ct)


def test_smoothing_over_the_other_classes_is_megatrons_definition():
    """The target (1−ε)·e_y + ε/(V−1) off y (NeMo's smoothed CE); Megatron-core 0.16.1
    _VocabParallelCrossEntropy writes the same loss as (1−ε')·nll_y + ε'·mean_v nll_v with
    ε' = ε·V/(V−1) — both forms agree with the reference to 45 digits."""
    z, eps, y = _logits(5, 1, 4)[0], mpmath.mpf(0.3), 2
    logq = [mpmath.mpf(v) - mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(u)) for u in z)) for v in z]
    target = (1 - eps) * -logq[y] + eps / 3 * mpmath.fsum(-lq for j, lq in enumerate(logq) if j != y)
    wide = eps * 4 / 3
    megatron = (1 - wide) * -logq[y] + wide * mpmath.fsum(-lq for lq in logq) / 4
    got = lm.cross_entropy([z], [y], label_smoothing=0.3, smoothing_classes="others")
    assert abs(got - target) < mpmath.mpf(10) ** -45 and abs(got - megatron) < mpmath.mpf(10) ** -45
    # and differs from PyTorch's all-V definition
    assert abs(got - lm.cross_entropy([z], [y], label_smoothing=0.3)) > mpmath.mpf(10) ** -3


def test_smoothing_over_the_other_classes_linear_gradient():
    rng = np.random.default_rng(9)
    kwargs = {"hidden": rng.normal(0, 1.5, (3, 2)).tolist(), "weight": rng.normal(0, 1, (4, 2)).tolist(),
              "labels": [0, 3, -100], "bias": rng.normal(0, 1, 4).tolist(), "label_smoothing": 0.2,
              "smoothing_classes": "others"}
    assert_vjp_matches(lm.linear_cross_entropy, lm.linear_cross_entropy_vjp, kwargs, ["hidden", "weight", "bias"],
                       1.5)


def test_smoothing_over_the_other_classes_needs_another_class():
    with pytest.raises(validate.InputError, match="^smoothing_classes:"):
        lm.cross_entropy([[0.5], [-3.0]], [0, 0], label_smoothing=0.1, smoothing_classes="others")
    with pytest.raises(validate.InputError, match="^smoothing_classes:"):
        lm.cross_entropy([[0.5, 1.0]], [0], label_smoothing=0.1, smoothing_classes="rest")
    # without smoothing V = 1 is fine (loss 0)
    assert lm.cross_entropy([[0.5], [-3.0]], [0, 0], smoothing_classes="others") == 0
