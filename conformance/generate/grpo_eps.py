"""Vectors of ``mean_eps_scope='every'`` (vector set 1.7.0): ``mean_eps`` in every masked mean's count,
Σ m·x / (Σ m + ε), token-mean's batch count included — torchtune's masked_mean, for grpo.aggregate and
grpo.loss (``ppo_entropy`` has ppo.entropy_bonus's). ``grpo`` appends them after every earlier case of
the family, so that the earlier test ids stay.

ε is 1e−8 (torchtune's) or 1e−3 (a step with a larger ε): 1e−8 moves a token mean by a relative
1e−8/N, which only float64 resolves; 1e−3 shows in every dtype the objective is judged in.

``per_row_cases``: the released cases of the per-row scope (vector sets up to 1.6.0), here beside them.
"""
from __future__ import annotations

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated
from lossproof.conformance.generate.grpo_inputs import AGG, LOSS, dtype_of, loss_away

MODES = ("token-mean", "seq-mean-token-mean")
EPSILONS = (1e-3, 1e-8)


def _group(mode, eps) -> str:
    """One group per convention set (mode and ε)."""
    return f"every-mean-eps-{mode}-{eps:g}"


GROUPS = {_group(mode, eps): f"mean_eps = {eps:g} in every masked mean's count under {mode}, Σ m·x / (Σ m + ε) — "
                             "token-mean's batch count as well as each row's (mean_eps_scope='every'): torchtune "
                             "torchtune/rlhf/rewards.py masked_mean ((x * mask).sum(dim) / (mask.sum(dim) + 1e-8))"
          for mode in MODES for eps in EPSILONS}


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
                        conventions=_conv("mode", mode, eps), group=_group(mode, eps),
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
                        params=params, conventions=conv, group=_group(mode, eps),
                        flags=("LowPrecision",) if low else ("Random",), low_precision=low,
                        comment=f"{mode}, ε={eps:g}, B={b}, T={t}" + (f", inputs exact in {dtype}" if dtype else ""),
                        provenance=generated(seed, "logprobs; old/ref = logp + normal offsets; ragged mask")))
    return out


def per_row_cases(mode: str = "seq-mean-token-mean", seeds: int = 33000) -> list[Case]:
    """grpo.aggregate with each row's token count + 1e−8 (verl 0.9.1 agg_loss, OpenRLHF 0.11.2
    aggregate_loss): random ragged masks, low precision, rows without tokens, and bad ε. With
    ``mode`` 'token-mean' (the batch's token count + 1e−8) and other ``seeds``: its random, low-
    precision and ragged cases, in the group of that mode (where ε changes nothing: see GROUPS)."""
    group, conv = f"{mode}-eps", {"mode": mode, "mean_eps": 1e-8}
    out = []

    def case(values, mask, flags, comment, seed, recipe, result="valid", low=False):
        return Case(AGG, {"values": values, "mask": mask}, params={"norm_length": None}, conventions=conv,
                    group=group, flags=flags, comment=comment, result=result, low_precision=low,
                    provenance=generated(seed, recipe))

    for i in range(12):
        seed = seeds + i
        r = S.rng(seed)
        b, t = int(r.integers(1, 17)), int(r.choice([1, 2, 5, 8, 16, 32, 64]))
        dtype = dtype_of(i)
        out.append(case(S.rounded(r.normal(0, 1, (b, t)).tolist(), dtype), S.mask(r, b, t), ("Random",),
                        f"random B={b}, T={t}" + (", float32" if dtype else ""), seed, "normal values, ragged mask"))
    for k, dtype in enumerate(("bfloat16", "float16")):
        seed = seeds + 100 + k
        r = S.rng(seed)
        out.append(case(S.in_dtype(r.normal(0, 1, (4, 16)).tolist(), dtype), S.mask(r, 4, 16), ("LowPrecision",),
                        f"values exact in {dtype}", seed, f"normal values rounded to {dtype}", low=True))
    r = S.rng(seeds + 200)
    if mode == "token-mean":    # empty rows carry no weight in a batch token mean: valid
        out.append(case(r.normal(0, 1, (6, 12)).tolist(), S.with_empty_rows(S.mask(r, 6, 12), [1, 4]),
                        ("Random",), "rows without tokens among ragged rows", seeds + 200,
                        "normal values, ragged mask, emptied rows"))
        return out
    out.append(case(r.normal(0, 1, (6, 12)).tolist(), S.with_empty_rows(S.mask(r, 6, 12), [1, 4]),
                    ("FullyMaskedRowSeqMean",), "rows without tokens among ragged rows", 33200,
                    "normal values, ragged mask, emptied rows", result="acceptable"))
    # the same in float16, where the libraries' 1e−8 rounds to 0 and an empty row is 0/0
    r = S.rng(33201)
    out.append(case(S.in_dtype(r.normal(0, 1, (6, 12)).tolist(), "float16"),
                    S.with_empty_rows(S.mask(r, 6, 12), [0, 3]),
                    ("FullyMaskedRowSeqMean", "LowPrecision"), "rows without tokens among ragged rows, values exact "
                    "in float16", 33201, "normal values rounded to float16, ragged mask, emptied rows",
                    result="acceptable", low=True))
    for eps, why in ((-1e-8, "negative mean_eps"), ("1e-8", "mean_eps given as a string")):
        out.append(Case(AGG, {"values": [[1.0, 2.0], [3.0, 4.0]], "mask": [[1, 1], [1, 0]]},
                        params={"norm_length": None}, conventions={"mode": "seq-mean-token-mean", "mean_eps": eps},
                        group="invalid", result="invalid", flags=("InvalidInput",), comment=why,
                        provenance=generated(0, "fixed")))
    return out
