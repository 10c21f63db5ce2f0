"""What the GRPO vectors are built from: the objective ids, each objective's convention groups,
the parameter grids, random inputs kept away from kinks, cotangents, and the case constructors
that the family's case modules share (``grpo``, ``grpo_loss``, ``grpo_gated``, ``grpo_low``); the
tolerance scales are in ``grpo_scales``."""
from __future__ import annotations

import math

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated, rows_without_tokens

ADV, CLIP, AGG, LOSS = "grpo.advantages", "grpo.clip", "grpo.aggregate", "grpo.loss"
ROLLOUT = "grpo.rollout_correction"
GRPO_SECTION = "GRPO: el objetivo de PPO con una referencia de grupo"
PPO_SECTION = "Qué cambia respecto a PPO"
NEAR = 1e-4  # random tokens keep this relative distance from every kink (clip band, dual clip, KL clamp)

ADV_GROUPS = {
    "paper": {"scale": "group", "std_ddof": 0, "eps": 0.0, "degenerate": "zero"},
    "dapo-drop": {"scale": "group", "std_ddof": 0, "eps": 0.0, "degenerate": "drop"},
    "dr-grpo": {"scale": "none", "std_ddof": 0, "eps": 0.0, "degenerate": "zero"},
    "trl-1.16": {"scale": "group", "std_ddof": 1, "eps": 1e-4, "degenerate": "zero"},
    "trl-1.16-batch": {"scale": "batch", "std_ddof": 1, "eps": 1e-4, "degenerate": "zero"},
    "verl-0.9.1": {"scale": "group", "std_ddof": 1, "eps": 1e-6, "degenerate": "raw"},
    "verl-0.9.1-no-std": {"scale": "none", "std_ddof": 0, "eps": 0.0, "degenerate": "raw"},
    "openrlhf-0.11.2": {"scale": "group", "std_ddof": 1, "eps": 1e-9, "degenerate": "zero"},
}

# Baselines other than the group mean and the batch whitening (vector set 1.3.0): their own
# groups, generated after every older case so that those keep their places.
ADV_BASELINE_GROUPS = {
    "rloo": {"scale": "none", "std_ddof": 0, "eps": 0.0, "degenerate": "zero", "baseline": "leave-one-out"},
    "verl-0.9.1-rloo": {"scale": "none", "std_ddof": 0, "eps": 0.0, "degenerate": "raw",
                        "baseline": "leave-one-out"},
    "trl-1.16-rloo-normalized": {"scale": "whiten", "std_ddof": 1, "eps": 1e-4, "degenerate": "zero",
                                 "baseline": "leave-one-out"},
    "reinforce++": {"scale": "whiten", "std_ddof": 0, "eps": 0.0, "degenerate": "zero", "baseline": "none"},
    "reinforce++-baseline": {"scale": "whiten", "std_ddof": 0, "eps": 0.0, "degenerate": "zero", "baseline": "mean"},
    "verl-0.9.1-reinforce++": {"scale": "whiten", "std_ddof": 1, "eps": 0.0, "degenerate": "zero",
                               "baseline": "none"},
    "verl-0.9.1-reinforce++-baseline": {"scale": "whiten", "std_ddof": 1, "eps": 0.0, "degenerate": "raw",
                                        "baseline": "mean"},
}


CLIP_GROUPS = {"paper": {"dual_clip": None}, "dual-clip-3": {"dual_clip": 3.0}}


AGG_GROUPS = {"paper": "seq-mean-token-mean", "token-mean": "token-mean",
              "seq-mean-token-sum": "seq-mean-token-sum", "seq-mean-token-sum-norm": "seq-mean-token-sum-norm"}


def _lg(dual, kind, clamp, weight, agg):
    return {"dual_clip": dual, "kl_kind": kind, "kl_clamp": clamp, "kl_ratio_weight": weight, "aggregation": agg}


LOSS_GROUPS = {
    "paper": _lg(None, "k3", None, False, "seq-mean-token-mean"),
    "token-mean": _lg(None, "k3", None, False, "token-mean"),
    "trl-1.16": _lg(None, "k3", None, True, "token-mean"),
    "trl-1.16-grpo": _lg(None, "k3", None, True, "seq-mean-token-mean"),
    "trl-1.16-dr_grpo": _lg(None, "k3", None, True, "seq-mean-token-sum-norm"),
    "verl-0.9.1": _lg(3.0, "k3", 10.0, False, "token-mean"),
    "verl-0.9.1-seq-mean-token-mean": _lg(3.0, "k3", 10.0, False, "seq-mean-token-mean"),
    "verl-0.9.1-seq-mean-token-sum": _lg(3.0, "k3", 10.0, False, "seq-mean-token-sum"),
    "verl-0.9.1-seq-mean-token-sum-norm": _lg(3.0, "k3", 10.0, False, "seq-mean-token-sum-norm"),
    "openrlhf-0.11.2": _lg(None, "k3", 10.0, False, "token-mean"),
    "openrlhf-0.11.2-seq-mean": _lg(None, "k3", 10.0, False, "seq-mean-token-mean"),
    "openrlhf-0.11.2-k2": _lg(None, "k2", 10.0, False, "token-mean"),
}


def _seq(conventions, level="sequence", policy="ppo-clip"):
    return {**conventions, "ratio_level": level, "policy_loss": policy}


# Sequence-level ratios (GSPO, GSPO-token, GMPO), kept apart from LOSS_GROUPS: the low-precision
# random cases cycle through LOSS_GROUPS, and the vector set keeps the cases it already had.
SEQUENCE_LOSS_GROUPS = {
    "gspo": _seq(_lg(None, "k3", None, False, "seq-mean-token-mean")),
    "gspo-token": _seq(_lg(None, "k3", None, False, "seq-mean-token-mean"), "sequence-token"),
    "gmpo": _seq(_lg(None, "k3", None, False, "seq-mean-token-mean"), policy="gmpo"),
    "trl-1.16-gspo": _seq(_lg(None, "k3", None, True, "seq-mean-token-mean")),
    "trl-1.16-gspo-dapo": _seq(_lg(None, "k3", None, True, "token-mean")),
    "verl-0.9.1-gspo": _seq(_lg(None, "k3", 10.0, False, "seq-mean-token-mean"), "sequence-token"),
    "verl-0.9.1-gspo-token-mean": _seq(_lg(None, "k3", 10.0, False, "token-mean"), "sequence-token"),
    "openrlhf-0.11.2-gspo": _seq(_lg(None, "k3", 10.0, False, "seq-mean-token-mean")),
    "verl-0.9.1-gmpo": _seq(_lg(None, "k3", 10.0, False, "seq-mean-token-mean"), policy="gmpo"),
}


def _lib(conventions, clamp=20.0, kl_aggregation=None, mean_eps=0.0):
    return {**conventions, "log_ratio_clamp": clamp, "kl_aggregation": kl_aggregation, "mean_eps": mean_eps}


# The library conventions of vector set 1.3.0 (log_ratio_clamp, kl_aggregation, mean_eps), kept apart
# as well: the groups above keep their cases.
_OPENRLHF = {"kl_aggregation": "token-mean", "mean_eps": 1e-8}
LIBRARY_LOSS_GROUPS = {
    "verl-0.9.1-clamp": _lib(_seq(_lg(3.0, "k3", 10.0, False, "token-mean"), "token")),
    "verl-0.9.1-clamp-seq-mean-token-mean": _lib(_seq(_lg(3.0, "k3", 10.0, False, "seq-mean-token-mean"), "token")),
    "verl-0.9.1-clamp-seq-mean-token-sum": _lib(_seq(_lg(3.0, "k3", 10.0, False, "seq-mean-token-sum"), "token")),
    "verl-0.9.1-clamp-seq-mean-token-sum-norm": _lib(_seq(_lg(3.0, "k3", 10.0, False, "seq-mean-token-sum-norm"),
                                                          "token")),
    "openrlhf-0.11.2-clamp": _lib(_seq(_lg(None, "k3", 10.0, False, "token-mean"), "token"), **_OPENRLHF),
    "openrlhf-0.11.2-clamp-seq-mean": _lib(_seq(_lg(None, "k3", 10.0, False, "seq-mean-token-mean"), "token"),
                                           **_OPENRLHF),
    "openrlhf-0.11.2-clamp-k2": _lib(_seq(_lg(None, "k2", 10.0, False, "token-mean"), "token"), **_OPENRLHF),
    "openrlhf-0.11.2-gspo-kl-token-mean": _lib(_seq(_lg(None, "k3", 10.0, False, "seq-mean-token-mean")), None,
                                               **_OPENRLHF),
    "kl-seq-mean": _lib(_seq(_lg(None, "k3", None, False, "token-mean"), "token"), None, "seq-mean-token-mean"),
    "kl-seq-sum": _lib(_seq(_lg(None, "k3", None, False, "token-mean"), "token"), None, "seq-mean-token-sum"),
    "kl-seq-sum-norm": _lib(_seq(_lg(None, "k3", None, False, "token-mean"), "token"), None,
                            "seq-mean-token-sum-norm"),
}


def _gated(conventions, policy, cispo_clip="upper", clamp=None):
    return {**conventions, "ratio_level": "token", "policy_loss": policy, "cispo_clip": cispo_clip,
            "log_ratio_clamp": clamp}


# CISPO and SAPO (token-level IS weights / soft gates) and PPO with verl's abs KL estimator, kept
# apart as the sequence-level groups are: the cases that were already there keep their places.
# verl 0.9.1 clamps log ρ to ±20 before exp in compute_policy_loss_vanilla, _cispo and _sapo alike.
GATED_LOSS_GROUPS = {
    "cispo": _gated(_lg(None, "k3", None, False, "token-mean"), "cispo"),
    "cispo-both": _gated(_lg(None, "k3", None, False, "token-mean"), "cispo", "both"),
    "trl-1.16-cispo": _gated(_lg(None, "k3", None, True, "token-mean"), "cispo", "raw-upper"),
    "liger-0.8.5-cispo": _gated(_lg(None, "k3", None, False, "token-mean"), "cispo", "raw-upper"),
    "verl-0.9.1-cispo": _gated(_lg(None, "k3", 10.0, False, "token-mean"), "cispo", "both", 20.0),
    "sapo": _gated(_lg(None, "k3", None, False, "seq-mean-token-mean"), "sapo"),
    "trl-1.16-sapo": _gated(_lg(None, "k3", None, True, "seq-mean-token-mean"), "sapo"),
    "verl-0.9.1-sapo": _gated(_lg(None, "k3", 10.0, False, "seq-mean-token-mean"), "sapo", clamp=20.0),
    "verl-0.9.1-abs": _gated(_lg(3.0, "abs", None, False, "token-mean"), "ppo-clip", clamp=20.0),
}


# Clip-Cov and KL-Cov (Cui et al., arXiv 2505.22617 §4) and REINFORCE (Williams 1992), vector set
# 1.5.0: the paper's form (token mean, k3 without clamp) and verl 0.9.1's (compute_policy_loss_clip_cov,
# _kl_cov and _gpg with kl_penalty 'low_var_kl'); none of the three clamps log ρ in verl.
COV_LOSS_GROUPS = {
    "clip-cov": _gated(_lg(None, "k3", None, False, "token-mean"), "clip-cov"),
    "verl-0.9.1-clip-cov": _gated(_lg(None, "k3", 10.0, False, "token-mean"), "clip-cov"),
    "kl-cov": _gated(_lg(None, "k3", None, False, "token-mean"), "kl-cov"),
    "verl-0.9.1-kl-cov": _gated(_lg(None, "k3", 10.0, False, "token-mean"), "kl-cov"),
    "reinforce": _gated(_lg(None, "k3", None, False, "seq-mean-token-mean"), "reinforce"),
    "verl-0.9.1-gpg": _gated(_lg(None, "k3", 10.0, False, "token-mean"), "reinforce"),
}

# grpo.clip with the ±20 clamp of log ρ (verl 0.9.1 compute_policy_loss_vanilla, OpenRLHF 0.11.2
# PolicyLoss), vector set 1.5.0; kept apart from CLIP_GROUPS, whose cases keep their places.
CLIP_CLAMP_GROUPS = {"log-ratio-clamp-20": {"dual_clip": None, "log_ratio_clamp": 20.0},
                     "dual-clip-3-clamp-20": {"dual_clip": 3.0, "log_ratio_clamp": 20.0}}

# (eps_low, eps_high): symmetric PPO, DAPO clip-higher, and narrower bands.
CLIP_PARAMS = [(0.2, None), (0.2, 0.28), (0.1, None), (0.2, 0.3), (0.3, None)]


def dtype_of(i: int) -> str | None:
    return "float32" if i % 2 == 0 else None


def _near(dtype) -> float:
    """How far (relative) random tokens keep from every kink."""
    return S.NEAR_LOW if dtype in S.LOW_GRIDS else NEAR


def _cotangent(r, shape) -> list:
    """Random cotangents, multiples of 1/64 in [−2, 2]: exact in every dtype."""
    return (r.integers(-128, 129, size=shape) / 64).tolist()


def random_rewards(r, kind: str, b: int, g: int) -> list:
    if kind == "binary":
        p = r.uniform(0.1, 0.9, size=(b, 1))
        return (r.uniform(size=(b, g)) < p).astype(float).tolist()
    if kind == "graded":
        return (r.integers(0, 5, size=(b, g)) / 4).tolist()
    if kind == "offset":
        return (r.normal(0, 3, size=(b, g)) + r.uniform(-50, 50)).tolist()
    return r.normal(0, 1, size=(b, g)).tolist()


def adv_case(group, rewards, flags, comment, seed, recipe, result="valid", low=False):
    conventions = ADV_GROUPS[group] if group in ADV_GROUPS else ADV_BASELINE_GROUPS[group]
    return Case(ADV, {"rewards": rewards}, conventions=conventions, group=group, flags=flags,
                comment=comment, result=result, low_precision=low, provenance=generated(seed, recipe))


def _near_kink(rho: float, bounds, near: float = NEAR) -> bool:
    return any(abs(rho / b - 1) < near for b in bounds)


def away_from_kinks(lp, old, bounds, dtype):
    """Move any token whose ratio lies near a kink (``_near``; nudging logp, re-rounding to dtype)."""
    lp = list(lp)
    for i in range(len(lp)):
        step = 0
        while _near_kink(math.exp(lp[i] - old[i]), bounds, _near(dtype)):
            step += 1
            lp[i] = S.rounded([min(lp[i] - 0.02 * step, -1e-6)], dtype)[0]
    return lp


def clip_bounds(eps_low, eps_high, dual):
    hi = eps_low if eps_high is None else eps_high
    return [1 - eps_low, 1 + hi] + ([dual] if dual else [])


def clip_case(group, inputs, params, flags, comment, seed, recipe, result="valid", low=False, cot_seed=None):
    n = len(inputs["logp"])
    r = S.rng(seed if cot_seed is None else cot_seed)
    conventions = CLIP_GROUPS[group] if group in CLIP_GROUPS else CLIP_CLAMP_GROUPS[group]
    return Case(CLIP, inputs, params=params, conventions=conventions, group=group, flags=flags,
                comment=comment, result=result, low_precision=low, cotangents={"objective": _cotangent(r, n)},
                provenance=generated(seed, recipe))


def agg_case(group, values, mask, flags, comment, seed, recipe, norm_length=None, result="valid", low=False):
    return Case(AGG, {"values": values, "mask": mask}, params={"norm_length": norm_length},
                conventions={"mode": AGG_GROUPS[group]}, group=group, flags=flags, comment=comment,
                result=result, low_precision=low, provenance=generated(seed, recipe))


def loss_conventions(group) -> dict:
    """A grpo.loss group's conventions, whichever table names it."""
    for table in (LOSS_GROUPS, SEQUENCE_LOSS_GROUPS, LIBRARY_LOSS_GROUPS, GATED_LOSS_GROUPS, COV_LOSS_GROUPS):
        if group in table:
            return table[group]
    raise KeyError(group)


def loss_case(group, inputs, params, flags, comment, seed, recipe, result="valid", low=False):
    conv = loss_conventions(group)
    full = {"eps_low": 0.2, "eps_high": None, "beta": 0.04, "norm_length": None, **params}
    return Case(LOSS, inputs, params=full, conventions=conv, group=group, flags=flags, comment=comment,
                result=result, low_precision=low, provenance=generated(seed, recipe))


def low_loss_case(group, gi, seed, params=None, sequence=False) -> Case:
    """Random [4, 8] inputs exact in bfloat16 or float16 (alternating across the groups), kept off
    the kinks of the group's clip and KL (``sequence``: of its sequence-level ratio)."""
    conv = loss_conventions(group)
    dtype = ("bfloat16", "float16")[gi % 2]
    r = S.rng(seed)
    lp = S.in_dtype(S.logprobs(r, (4, 8)), dtype)
    old = S.in_dtype(S.logprobs_near(r, lp, 0.2), dtype)
    ref = S.in_dtype(S.logprobs_near(r, lp, 0.3), dtype)
    adv = S.in_dtype(r.uniform(-2, 2, 4).tolist(), dtype)
    mask = S.mask(r, 4, 8)
    params = params or {}
    lp = (sequence_away(lp, old, ref, mask, adv, params, conv, dtype) if sequence
          else loss_away(lp, old, ref, params, conv, dtype))
    return loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": adv, "mask": mask},
                     params, ("LowPrecision",), f"inputs exact in {dtype}", seed, f"logprobs rounded to {dtype}",
                     low=True)


def _kl_value(x: float, kind: str) -> float:
    return {"k1": -x, "k2": x * x / 2, "k3": math.expm1(x) - x, "abs": abs(x)}[kind]


def loss_away(lp, old, ref, params, conv, dtype):
    """Nudge tokens off every kink: clip band, dual clip, and the KL clamp. CISPO's weight bounds
    and SAPO's gate are not kinks (the weight ŵ·A, the gradient, is continuous in ρ), KL-Cov and
    REINFORCE have no clip band (KL-Cov's |Δ| kink is placed by ``grpo_cov``); abs's kink
    at log r = 0 is decided by the sign of ref_logp − logp, which every dtype forms exactly."""
    if conv.get("policy_loss") in ("cispo", "sapo", "kl-cov", "reinforce"):
        bounds = []
    else:
        bounds = clip_bounds(params.get("eps_low", 0.2), params.get("eps_high"), conv["dual_clip"])
    lp = [list(row) for row in lp]
    for i, row in enumerate(lp):
        for j in range(len(row)):
            step = 0
            while True:
                near = _near_kink(math.exp(row[j] - old[i][j]), bounds, _near(dtype))
                if conv["kl_clamp"]:
                    k = abs(_kl_value(ref[i][j] - row[j], conv["kl_kind"]))
                    near = near or abs(k / conv["kl_clamp"] - 1) < _near(dtype)
                if not near:
                    break
                step += 1
                row[j] = S.rounded([min(row[j] - 0.02 * step, -1e-6)], dtype)[0]
    return lp


def empty_rows_case(group, seed, params) -> Case:
    """Random [5, 6] inputs with rows 1 and 3 emptied, kept off the kinks: a token mean leaves those
    rows out, and under a per-sequence mean the papers' 0/0 is implementation-defined (acceptable)."""
    conv = loss_conventions(group)
    r = S.rng(seed)
    lp = S.logprobs(r, (5, 6))
    old = S.logprobs_near(r, lp, 0.1)
    ref = S.logprobs_near(r, lp, 0.3)
    lp = loss_away(lp, old, ref, params, conv, None)
    flag, result = rows_without_tokens(conv)
    return loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": r.normal(0, 1, 5).tolist(),
                             "mask": S.with_empty_rows(S.mask(r, 5, 6), [1, 3])}, params,
                     (flag,), "rows 1 and 3 without tokens", seed, "logprobs; ragged mask with emptied rows",
                     result=result)


def row_log_ratios(lp, old, mask, adv, params, conv):
    """Per row: the log-ratios its sequence ratio averages (GMPO: after its log-space clip)."""
    lo = params.get("eps_low", 0.2)
    hi = lo if params.get("eps_high") is None else params["eps_high"]
    rows = []
    for lrow, orow, mrow, a in zip(lp, old, mask, adv):
        d = [x - o for x, o, m in zip(lrow, orow, mrow) if m]
        if conv["policy_loss"] == "gmpo":
            d = [min(x, hi) if a > 0 else max(x, -lo) for x in d]
        rows.append(d)
    return rows


def sequence_away(lp, old, ref, mask, adv, params, conv, dtype):
    """Nudge rows off every kink of a sequence ratio: s_i off the clip band (and dual clip) for
    GSPO, each token's log-ratio off ±ε for GMPO; then the KL clamp, as ``loss_away``."""
    # the token ratios have no kink here: bounds far beyond any ratio leave only the KL clamp's
    lp = loss_away(lp, old, ref, {"eps_low": -1e300, "eps_high": 1e300}, {**conv, "dual_clip": None}, dtype)
    lo = params.get("eps_low", 0.2)
    hi = lo if params.get("eps_high") is None else params["eps_high"]
    near = _near(dtype)
    for i, mrow in enumerate(mask):
        tokens = [j for j, m in enumerate(mrow) if m]
        step = 0
        while tokens:
            if conv["policy_loss"] == "gmpo":
                bad = any(abs((lp[i][j] - old[i][j]) / b - 1) < near for j in tokens for b in (-lo, hi) if b)
            else:
                d = row_log_ratios([lp[i]], [old[i]], [mrow], [adv[i]], params, conv)[0]
                bad = _near_kink(math.exp(math.fsum(d) / len(d)), clip_bounds(lo, hi, conv["dual_clip"]), near)
            if not bad:
                break
            step += 1
            j = tokens[step % len(tokens)]
            lp[i][j] = S.rounded([min(lp[i][j] - 0.02 * step, -1e-6)], dtype)[0]
    return lp


# grpo.loss without a KL term (β = 0: TRL 1.16.0 GRPOConfig.beta's default, DAPO's "Removing KL
# Divergence", verl 0.9.1 actor.use_kl_loss False), vector set 1.7.0: each policy loss (a form
# here) in each aggregation (BETA_ZERO_AGGREGATIONS), one group per pair, named
# form-aggregation; the KL conventions are the paper's and are never read.
BETA_ZERO_FORMS = {
    "beta-0-ppo-clip": _gated(_lg(None, "k3", None, False, "token-mean"), "ppo-clip"),
    "beta-0-ppo-dual-clip": _gated(_lg(3.0, "k3", None, False, "token-mean"), "ppo-clip"),
    "beta-0-gspo": _seq(_lg(None, "k3", None, False, "token-mean")),
    "beta-0-gspo-token": _seq(_lg(None, "k3", None, False, "token-mean"), "sequence-token"),
    "beta-0-gmpo": _seq(_lg(None, "k3", None, False, "token-mean"), policy="gmpo"),
    "beta-0-cispo": _gated(_lg(None, "k3", None, False, "token-mean"), "cispo"),
    "beta-0-cispo-both": _gated(_lg(None, "k3", None, False, "token-mean"), "cispo", "both"),
    "beta-0-cispo-raw-upper": _gated(_lg(None, "k3", None, False, "token-mean"), "cispo", "raw-upper"),
    "beta-0-sapo": _gated(_lg(None, "k3", None, False, "token-mean"), "sapo"),
    "beta-0-clip-cov": _gated(_lg(None, "k3", None, False, "token-mean"), "clip-cov"),
    "beta-0-kl-cov": _gated(_lg(None, "k3", None, False, "token-mean"), "kl-cov"),
    "beta-0-reinforce": _gated(_lg(None, "k3", None, False, "token-mean"), "reinforce"),
}
BETA_ZERO_AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")

# grpo.loss with the rollout correction's weight on the policy term (the optional input is_weight),
# vector set 1.7.0 (grpo_tis): group -> (the library's grpo.loss conventions, how its weights are
# formed: (per token 'truncate' / 'mask' or per row 'sequence', lower, upper), parameters; 'betas':
# the β drawn from).
TIS_LOSS_GROUPS = {
    "trl-1.16-is-token_truncate": (LOSS_GROUPS["trl-1.16"], ("truncate", None, 3.0), {"betas": (0.0, 0.04)}),
    "trl-1.16-is-sequence_truncate": (LOSS_GROUPS["trl-1.16-grpo"], ("sequence", None, 3.0), {"betas": (0.0, 0.04)}),
    "verl-0.9.1-tis": (LIBRARY_LOSS_GROUPS["verl-0.9.1-clamp"], ("truncate", None, 2.0), {"betas": (0.001, 0.0)}),
    "verl-0.9.1-icepop": (LIBRARY_LOSS_GROUPS["verl-0.9.1-clamp"], ("mask", 0.5, 5.0), {"betas": (0.001, 0.0)}),
    "verl-0.9.1-gspo-tis": (SEQUENCE_LOSS_GROUPS["verl-0.9.1-gspo-token-mean"], ("truncate", None, 2.0),
                            {"eps_low": 3e-4, "eps_high": 4e-4, "betas": (0.001, 0.0)}),
    "art-tis": (GATED_LOSS_GROUPS["cispo"], ("truncate", None, 5.0), {"eps_high": 4.0, "betas": (0.0,)}),
}
