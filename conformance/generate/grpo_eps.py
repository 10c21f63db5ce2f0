"""Vectors of ``mean_eps_scope='every'`` (vector set 1.7.0): ``mean_eps`` in every masked mean's count,
Σ m·x / (Σ m + ε), token-mean's batch count included — torchtune's masked_mean, for grpo.aggregate and
grpo.loss (``ppo_entropy`` has ppo.entropy_bonus's). ``grpo`` appends them after every earlier case of
the family, so that the earlier test ids stay.

ε is 1e−8 (torchtune's) or 1e−3 (a step with a larger ε): 1e−8 moves a token mean by a relative
1e−8/N, which only float64 resolves; 1e−3 shows in every dtype the objective is judged in.
"""
from __future__ import annotations

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated
from lossproof.conformance.generate.grpo_inputs import AGG, LOSS, dtype_of, loss_away

GROUP = "every-mean-eps"
GROUPS = {GROUP: "mean_eps in every masked mean's count, Σ m·x / (Σ m + ε) — token-mean's batch count as well as "
                 "each row's (mean_eps_scope='every'): torchtune torchtune/rlhf/rewards.py masked_mean "
                 "((x * mask).sum(dim) / (mask.sum(dim) + 1e-8)); ε = 1e−8 and 1e−3"}
MODES = ("token-mean", "seq-mean-token-mean")
EPSILONS = (1e-3, 1e-8)


def _conv(mode_name, mode, eps):
    return {mode_name: mode, "mean_eps": eps, "mean_eps_scope": "every"}


def _draw(i, seed, low):
    """Values [B,T] (float64, float32, or on the bfloat16 / float16 grid when ``low``) and a ragged mask."""
    r = S.rng(seed)
    b, t = (4, 8) if low else (int(r.integers(1, 9)), int(r.choice([1, 3, 8, 16])))
    dtype = ("bfloat16", "float16")[i % 2] if low else dtype_of(i)
    values = r.normal(0, 1, (b, t)).tolist()
    values = S.in_dtype(values, dtype) if low else S.rounded(values, dtype)
    return b, t, dtype, values, S.mask(r, b, t)


def aggregate_cases() -> list[Case]:
    out = []
    for i in range(20):
        low, seed = i >= 14, 35000 + i
        mode, eps = MODES[i % 2], EPSILONS[(i // 2) % 2]
        b, t, dtype, values, mask = _draw(i, seed, low)
        out.append(Case(AGG, {"values": values, "mask": mask}, params={"norm_length": None},
                        conventions=_conv("mode", mode, eps), group=GROUP,
                        flags=("LowPrecision",) if low else ("Random",), low_precision=low,
                        comment=f"{mode}, ε={eps:g}, B={b}, T={t}" + (f", values exact in {dtype}" if dtype else ""),
                        provenance=generated(seed, "normal values, ragged mask")))
    bad = ((_conv("mode", "seq-mean-token-sum", 1e-3), "mean_eps_scope 'every' with a mode that takes no token mean"),
           ({"mode": "token-mean", "mean_eps": 1e-3, "mean_eps_scope": "all"}, "unknown mean_eps_scope"))
    out += [Case(AGG, {"values": [[1.0, 2.0], [3.0, 4.0]], "mask": [[1, 1], [1, 0]]}, params={"norm_length": None},
                 conventions=conv, group="invalid", result="invalid", flags=("InvalidInput",), comment=why,
                 provenance=generated(0, "fixed")) for conv, why in bad]
    return out


def loss_cases() -> list[Case]:
    """grpo.loss with PPO's clip and a k3 KL, the policy and KL terms both token means (or both means
    of per-row token means)."""
    out = []
    for i in range(16):
        low, seed = i >= 12, 35100 + i
        mode, eps = MODES[i % 2], EPSILONS[(i // 2) % 2]
        conv = {"dual_clip": None, "kl_kind": "k3", "kl_clamp": None, "kl_ratio_weight": False,
                **_conv("aggregation", mode, eps)}
        r = S.rng(seed)
        b, t = (4, 8) if low else (int(r.integers(1, 9)), int(r.choice([1, 3, 8, 16])))
        dtype = ("bfloat16", "float16")[i % 2] if low else dtype_of(i)
        cast = (lambda x: S.in_dtype(x, dtype)) if low else (lambda x: S.rounded(x, dtype))
        lp = cast(S.logprobs(r, (b, t)))
        old, ref = cast(S.logprobs_near(r, lp, 0.1)), cast(S.logprobs_near(r, lp, 0.3))
        adv, mask = cast(r.normal(0, 1, b).tolist()), S.mask(r, b, t)
        params = {"eps_low": 0.2, "eps_high": None, "beta": 0.04, "norm_length": None}
        lp = loss_away(lp, old, ref, params, conv, dtype)
        out.append(Case(LOSS, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": adv, "mask": mask},
                        params=params, conventions=conv, group=GROUP,
                        flags=("LowPrecision",) if low else ("Random",), low_precision=low,
                        comment=f"{mode}, ε={eps:g}, B={b}, T={t}" + (f", inputs exact in {dtype}" if dtype else ""),
                        provenance=generated(seed, "logprobs; old/ref = logp + normal offsets; ragged mask")))
    return out
