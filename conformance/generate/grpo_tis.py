"""``grpo.loss`` vectors with a rollout correction applied to the policy term (vector set 1.7.0): the
optional input ``is_weight`` c_t, a detached per-token weight, multiplies each token's policy term
−C_t before the aggregation, and not the KL term. It is the weight ``grpo.rollout_correction``
computes, multiplied into the loss as

* TRL 1.16.0 trainer/grpo_trainer.py _compute_loss: ``per_token_loss = per_token_loss *
  inputs["importance_sampling_ratio"]`` (line 3147), before ``+ beta * per_token_kl``; the ratio is
  exp(old − rollout) clamped to [clip_min, clip_max] (clip_max 3.0) per token ('token_truncate') or
  per sequence ('sequence_truncate', broadcast over the row);
* verl 0.9.1 trainer/ppo/core_algos.py compute_policy_loss_vanilla: ``pg_losses = pg_losses *
  rollout_is_weights`` (line 1365, and in each policy loss), the KL loss apart; token TIS with
  threshold 2, or IcePop's mask (the token's ratio inside [0.5, 5], else 0);
* ART (OpenPipe/ART src/art/loss.py loss_fn): ``policy_loss *= torch.clamp(prob_ratio,
  max=upper_bound).detach()`` after its CISPO-style term (clip(ρ, 1 − 1, 1 + 4)·A·logπ), the KL
  term apart.

The weights are drawn as the libraries form them, from a rollout log-probability offset per token,
and rounded to the case's dtype (an input: its rounding is the case's own). Groups: one per library
mode, on that library's grpo.loss conventions (``grpo_inputs.TIS_LOSS_GROUPS``).
"""
from __future__ import annotations

import math

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated
from lossproof.conformance.generate.grpo_inputs import (
    LOSS,
    TIS_LOSS_GROUPS,
    loss_away,
    sequence_away,
)

GROUPS = {
    "trl-1.16-is-token_truncate": "grpo.loss with is_weight: TRL 1.16.0 trainer/grpo_trainer.py _compute_loss "
                                  "(loss_type 'dapo': token-mean, k3 weighted by ρ) times "
                                  "importance_sampling_ratio, exp(old − rollout) clamped to clip_max 3.0 per token",
    "trl-1.16-is-sequence_truncate": "grpo.loss with is_weight: TRL 1.16.0 loss_type 'grpo' (seq-mean-token-mean) "
                                     "times importance_sampling_ratio 'sequence_truncate': exp(Σ_t (old − rollout)) "
                                     "per row, clamped to 3.0, broadcast over the row's tokens",
    "verl-0.9.1-tis": "grpo.loss with is_weight: verl 0.9.1 compute_policy_loss_vanilla as it runs (dual clip 3, "
                      "log ρ clamped to ±20, low_var_kl clamped to ±10, token-mean) with pg_losses * "
                      "rollout_is_weights, token TIS min(exp(old − rollout), 2)",
    "verl-0.9.1-icepop": "grpo.loss with is_weight: verl 0.9.1 compute_policy_loss_vanilla with IcePop's masked "
                         "weights (exp(old − rollout) inside [0.5, 5], else 0; rollout_corr_helper.py)",
    "verl-0.9.1-gspo-tis": "grpo.loss with is_weight: verl 0.9.1 compute_policy_loss_gspo (GSPO-token, low_var_kl "
                           "clamped) with pg_losses * rollout_is_weights, token TIS min(exp(old − rollout), 2)",
    "art-tis": "grpo.loss with is_weight: ART src/art/loss.py loss_fn defaults (CISPO-style clip(ρ, 0, 5)·A·logπ, "
               "a token mean) with truncated_importance_sampling: the term times clamp(exp(old − original), "
               "max=upper_bound), upper bound 2 or 5",
}

NOTES = {
    "RolloutCorrection": {
        "category": "convention",
        "description": "A detached per-token weight c_t (is_weight: a truncated or masked IS ratio of the trainer's "
                       "to the rollout engine's probabilities) multiplies each token's policy term before the "
                       "aggregation; the KL term and the aggregation's denominators are not weighted.",
        "bugType": "formula",
        "effect": "The rollout correction applied to the KL term as well, to the aggregated loss, or with a "
                  "gradient through the weight: the policy update is mis-weighted.",
        "links": ["https://github.com/rlcode/per/issues/3"],
    },
    "IsWeightZero": {
        "category": "edge",
        "description": "Tokens whose correction weight is exactly 0 (IcePop or masked IS rejects them) beside "
                       "tokens with weights above 1, with β > 0: those tokens keep their KL term and lose their "
                       "policy term and its gradient, and still count in every denominator.",
        "bugType": "masking",
        "effect": "A zero weight taken as a mask (the token's KL term or its count dropped), or a policy gradient "
                  "left at a rejected token.",
    },
}

SEED = 62000


def _weights(r, conv_mode, shape, mask, dtype, fit):
    """Correction weights as the mode forms them from rollout offsets d = old − rollout."""
    b, t = shape
    spread = float(r.choice([0.1, 0.5, 1.5]))
    d = r.normal(0.0, spread, size=(b, t)).tolist()
    kind, lower, upper = conv_mode
    if kind == "sequence":
        rows = [math.exp(min(math.fsum(x for x, m in zip(drow, mrow) if m), 50.0)) for drow, mrow in zip(d, mask)]
        w = [[min(max(v, lower or 0.0), upper)] * t for v in rows]
    elif kind == "mask":
        w = [[math.exp(x) if lower <= math.exp(x) <= upper else 0.0 for x in drow] for drow in d]
    else:
        w = [[min(max(math.exp(x), lower or 0.0), upper) for x in drow] for drow in d]
    return fit(w, dtype)


def _case(gi, group, i, low=False) -> Case:
    conv, mode, params = TIS_LOSS_GROUPS[group]
    seed = SEED + 100 * gi + i
    r = S.rng(seed)
    dtype = ("bfloat16", "float16")[i % 2] if low else ("float32" if i % 2 == 0 else None)
    fit = S.in_dtype if low else S.rounded
    b, t = (int(r.integers(2, 5)), 8) if low else (int(r.integers(1, 9)), int(r.choice([1, 3, 8, 16, 32])))
    params = {**params, "beta": float(r.choice(params.get("betas", (0.04, 0.0))))}
    params.pop("betas", None)
    lp = fit(S.logprobs(r, (b, t)), dtype)
    old = fit(S.logprobs_near(r, lp, 0.2), dtype)
    ref = fit(S.logprobs_near(r, lp, 0.3), dtype)
    adv = fit((r.uniform(-2, 2, b) if low else r.normal(0, 1, b)).tolist(), dtype)
    mask = S.mask(r, b, t)
    if conv.get("ratio_level", "token") == "token":
        lp = loss_away(lp, old, ref, params, conv, dtype)
    else:
        lp = sequence_away(lp, old, ref, mask, adv, params, conv, dtype)
    w = _weights(r, mode, (b, t), mask, dtype, fit)
    flags = ("Random", "RolloutCorrection") + (("LowPrecision",) if low else ()) \
        + (("BetaZero",) if params["beta"] == 0 else ())
    comment = (f"random B={b}, T={t}, β={params['beta']:g}, {mode[0]} weights in "
               f"[{mode[1] or 0:g}, {mode[2]:g}]" + (f", inputs exact in {dtype}" if low else
                                                     (", float32" if dtype else "")))
    return Case(LOSS, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": adv, "mask": mask,
                       "is_weight": w},
                params={"eps_low": 0.2, "eps_high": None, "norm_length": None, **params}, conventions=conv,
                group=group, flags=flags, comment=comment, low_precision=low,
                provenance=generated(seed, "logprobs; old/ref = logp + normal offsets; ragged mask; weights from "
                                     "normal rollout offsets" + (f"; rounded to {dtype}" if low else "")))


def _zero_weights(gi, group) -> Case:
    """Every other token's weight 0, the others 2.5 or 0.25, with β = 0.1 and a reference away
    from the policy: the KL term of a rejected token stays, its policy term goes."""
    conv, _, params = TIS_LOSS_GROUPS[group]
    seed = SEED + 100 * gi + 90
    r = S.rng(seed)
    b, t = 3, 6
    params = {k: v for k, v in params.items() if k != "betas"}
    params["beta"] = 0.1
    lp = S.logprobs(r, (b, t))
    old = S.logprobs_near(r, lp, 0.2)
    ref = S.logprobs_near(r, lp, 1.0)
    adv = [1.0, -0.5, 2.0]
    mask = S.mask(r, b, t, min_len=3)
    if conv.get("ratio_level", "token") == "token":
        lp = loss_away(lp, old, ref, params, conv, None)
    else:
        lp = sequence_away(lp, old, ref, mask, adv, params, conv, None)
    w = [[0.0 if (k + j) % 2 else (2.5 if k % 2 else 0.25) for j in range(t)] for k in range(b)]
    return Case(LOSS, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": adv, "mask": mask,
                       "is_weight": w},
                params={"eps_low": 0.2, "eps_high": None, "norm_length": None, **params}, conventions=conv,
                group=group, flags=("RolloutCorrection", "IsWeightZero"),
                comment="weights 0 at every other token, 2.5 or 0.25 elsewhere, β = 0.1",
                provenance=generated(seed, "logprobs; reference 1.0 away; alternating weights"))


def cases() -> list[Case]:
    out = []
    for gi, group in enumerate(TIS_LOSS_GROUPS):
        out += [_case(gi, group, i) for i in range(6)]
        out += [_case(gi, group, 10 + i, low=True) for i in range(2)]
        out.append(_zero_weights(gi, group))
    ok = {"logp": [[-1.0, -2.0]], "old_logp": [[-1.1, -2.1]], "ref_logp": [[-1.2, -1.9]], "advantages": [1.0],
          "mask": [[1, 1]]}
    bad = [({**ok, "is_weight": [[1.0, -0.5]]}, "a negative correction weight"),
           ({**ok, "is_weight": [[1.0, math.inf]]}, "an infinite correction weight"),
           ({**ok, "is_weight": [[1.0, math.nan]]}, "a NaN correction weight"),
           ({**ok, "is_weight": [1.0, 1.0]}, "a correction weight per row ([B]) instead of per token")]
    for inputs, why in bad:
        out.append(Case(LOSS, inputs, params={"eps_low": 0.2, "eps_high": None, "beta": 0.04, "norm_length": None},
                        group="invalid", result="invalid", flags=("InvalidInput",), comment=why,
                        provenance=generated(0, "fixed")))
    return out
