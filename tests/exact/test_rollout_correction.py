"""Exact reference for grpo.rollout_correction: properties that follow from the definitions (TIS,
Yao et al. 2025; masked IS / IcePop, arXiv 2510.18855, the IcePop objective), the certified reference on random
inputs, and bad input. The objective has no gradient (grads = ()), so there is no VJP to check;
its 40-digit values are in tests/independent/test_rollout_correction_values.py."""
from __future__ import annotations

import itertools
import random

import mpmath
import pytest

from lossproof.refimpl.certified import grpo as certified
from lossproof.refimpl.exact import grpo, mp
from lossproof.refimpl.validate import InputError

MASK = [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 0, 0, 0, 0]]
CONVENTIONS = [dict(level=level, correction=correction, seq_log_ratio=seq, kept_weight=kept, log_ratio_clamp=clamp)
               for level, correction, seq, kept, clamp in itertools.product(
                   ("token", "sequence"), ("truncate", "mask"), ("sum", "mean"), ("ratio", "token-ratio", "one"),
                   (None, 1.5))
               if correction == "mask" or kept == "ratio"]


@pytest.fixture(autouse=True)
def _working_precision():
    """The written definitions evaluated at the reference's working precision."""
    with mpmath.workdps(mp.get_dps()):
        yield


def _case(seed, spread=0.8):
    r = random.Random(seed)
    old = [[-r.uniform(0.01, 4.0) for _ in range(5)] for _ in range(4)]
    roll = [[o + r.gauss(0.0, spread) for o in row] for row in old]
    return old, roll


def _floats(out):
    return {k: [[float(x) for x in row] for row in v] for k, v in out.items()}


def _ratio(old, roll, mask, b, t, level, seq, clamp):
    on = [u for u in range(len(mask[b])) if mask[b][u]]
    if level == "token":
        ell = mpmath.mpf(old[b][t]) - mpmath.mpf(roll[b][t])
    else:
        ell = mpmath.fsum(mpmath.mpf(old[b][u]) - mpmath.mpf(roll[b][u]) for u in on)
        ell = ell / len(on) if seq == "mean" else ell
    if clamp is not None:
        ell = min(max(ell, -clamp), clamp)
    return mpmath.exp(ell)


@pytest.mark.parametrize("conv", CONVENTIONS, ids=lambda c: "-".join(str(v) for v in c.values()))
@pytest.mark.parametrize("band", [(None, 2.0), (0.5, 3.0), (0.25, None)])
def test_weights_follow_the_definition(conv, band):
    lower, upper = band
    for seed in range(3):
        old, roll = _case(seed)
        out = grpo.rollout_correction(old, roll, MASK, lower=lower, upper=upper, **conv)
        for b, t in itertools.product(range(4), range(5)):
            w, k = out["weights"][b, t], out["keep"][b, t]
            if not MASK[b][t]:
                assert w == 0 and k == 0
                continue
            rho = _ratio(old, roll, MASK, b, t, conv["level"], conv["seq_log_ratio"], conv["log_ratio_clamp"])
            inside = (lower is None or rho >= lower) and (upper is None or rho <= upper)
            if conv["correction"] == "truncate":
                assert k == 1
                assert w == (rho if inside else (lower if lower is not None and rho < lower else upper))
            elif not inside:
                assert w == 0 and k == 0
            else:
                own = _ratio(old, roll, MASK, b, t, "token", "sum", conv["log_ratio_clamp"])
                assert k == 1 and w == {"ratio": rho, "token-ratio": own, "one": 1}[conv["kept_weight"]]


@pytest.mark.parametrize("conv", CONVENTIONS, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_on_policy_weights_are_one(conv):
    """When the engines agree the correction vanishes: weight 1 on every valid token (the band
    [0.5, 2] contains 1)."""
    old, _ = _case(7)
    out = _floats(grpo.rollout_correction(old, old, MASK, lower=0.5, upper=2.0, **conv))
    assert out["weights"] == [[float(m) for m in row] for row in MASK] == out["keep"]


@pytest.mark.parametrize("conv", CONVENTIONS, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_padding_does_not_matter(conv):
    old, roll = _case(11)
    a = grpo.rollout_correction(old, roll, MASK, lower=0.5, upper=3.0, **conv)
    junk = [[r if m else -1000.0 * (t + 1) for t, (r, m) in enumerate(zip(row, mrow))] for row, mrow in zip(roll, MASK)]
    b = grpo.rollout_correction(old, junk, MASK, lower=0.5, upper=3.0, **conv)
    assert _floats(a) == _floats(b)


def test_sequence_of_one_token_is_the_token():
    old, roll = _case(3)
    mask = [[1, 0, 0, 0, 0]] * 4
    for correction in ("truncate", "mask"):
        token = grpo.rollout_correction(old, roll, mask, correction=correction, lower=0.5, upper=2.0)
        for seq in ("sum", "mean"):
            sequence = grpo.rollout_correction(old, roll, mask, level="sequence", correction=correction,
                                               lower=0.5, upper=2.0, seq_log_ratio=seq)
            assert _floats(sequence) == _floats(token)


def test_a_band_edge_is_kept():
    """The band is closed: a ratio exactly on a bound (exp(0) = 1, or a row whose log-ratios
    cancel exactly) is kept, in the exact and the certified reference."""
    old = [[-0.5, -1.25, -2.0], [-1.0, -0.5, -3.0]]
    roll = [[-0.5, -0.75, -2.5], [-1.0, -0.5, -3.0]]
    for level in ("token", "sequence"):
        for lower, upper in ((None, 1.0), (1.0, 3.0)):
            args = dict(level=level, correction="mask", lower=lower, upper=upper)
            out = grpo.rollout_correction(old, roll, [[1, 1, 1], [1, 1, 1]], **args)
            assert all(out["keep"][b, t] == 1 for b in range(2) for t in range(3) if old[b][t] == roll[b][t])
            if level == "sequence":
                assert out["keep"][0, 0] == out["keep"][1, 0] == 1 and out["weights"][0, 0] == 1
            cert = certified.rollout_correction(old, roll, [[1, 1, 1], [1, 1, 1]], **args)
            assert [[float(x.mid()) for x in row] for row in cert["keep"]] == _floats(out)["keep"]


@pytest.mark.parametrize("conv", CONVENTIONS, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_certified_contains_exact(conv):
    for seed in range(2):
        old, roll = _case(100 + seed)
        want = grpo.rollout_correction(old, roll, MASK, lower=0.5, upper=3.0, **conv)
        got = certified.rollout_correction(old, roll, MASK, lower=0.5, upper=3.0, **conv)
        for name in ("weights", "keep"):
            for b, t in itertools.product(range(4), range(5)):
                assert got[name][b][t].contains(mpmath.mpf(want[name][b, t])) or \
                    abs(float(got[name][b][t].mid()) - float(want[name][b, t])) <= 1e-30


@pytest.mark.parametrize("kwargs, culprit", [
    ({"lower": 3.0, "upper": 2.0}, "lower"),
    ({"lower": None, "upper": None}, "upper"),
    ({"upper": 0.0}, "upper"),
    ({"lower": -1.0}, "lower"),
    ({"log_ratio_clamp": -20.0}, "log_ratio_clamp"),
    ({"level": "batch"}, "level"),
    ({"correction": "clip"}, "correction"),
    ({"seq_log_ratio": "max"}, "seq_log_ratio"),
    ({"kept_weight": "zero"}, "kept_weight"),
    ({"mask": [[0, 0]]}, "mask"),
    ({"mask": [[1, 0.5]]}, "mask"),
    ({"rollout_logp": [[-float("inf"), -1.0]]}, "rollout_logp"),
    ({"old_logp": [[-0.5, float("nan")]]}, "old_logp"),
    ({"rollout_logp": [[-0.5]]}, "rollout_logp"),
])
def test_bad_input(kwargs, culprit):
    args = {"old_logp": [[-0.5, -1.0]], "rollout_logp": [[-0.75, -1.0]], "mask": [[1, 1]], **kwargs}
    with pytest.raises(InputError, match=f"^{culprit}: "):
        grpo.rollout_correction(**args)
