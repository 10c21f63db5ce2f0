"""``grpo.loss`` vectors without a KL term (β = 0), vector set 1.7.0: each policy loss of the catalog
(PPO's clip with and without the dual clip, GSPO, GSPO-token, GMPO, CISPO in its three clips, SAPO,
Clip-Cov, KL-Cov, REINFORCE) in each aggregation, in float64, float32 and bfloat16/float16. Most
DAPO-style recipes train without a KL loss (TRL 1.16.0 GRPOConfig.beta = 0.0 by default; DAPO
arXiv 2503.14476, "Removing KL Divergence", drops it; verl 0.9.1 actor.use_kl_loss is False by default), so a library
without the term declares β = 0 and is judged on these cases. The reference log-probabilities sit
far from the policy's in some cases, where a KL estimate that is still formed (and multiplied by 0)
would be large. Policy losses: ``grpo_inputs.BETA_ZERO_FORMS``; a group is one of them in one
aggregation (``beta-0-cispo-token-mean``)."""
from __future__ import annotations

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated
from lossproof.conformance.generate.grpo_cov import selection
from lossproof.conformance.generate.grpo_gated import CISPO_BANDS, SAPO_TAUS
from lossproof.conformance.generate.grpo_inputs import (
    BETA_ZERO_AGGREGATIONS,
    BETA_ZERO_FORMS,
    CLIP_PARAMS,
    LOSS,
    loss_away,
    sequence_away,
)
from lossproof.conformance.generate.grpo_loss import GMPO_BANDS, SEQUENCE_BANDS

_SOURCES = {   # per policy loss; its groups add the aggregation
    "beta-0-ppo-clip": "grpo.loss with β = 0: PPO eq. 7's clip, no KL term — TRL 1.16.0 trainer/grpo_trainer.py "
                       "_compute_loss with beta 0.0 (its default) and loss_type 'dapo'/'grpo'/'bnpo'/'dr_grpo'; "
                       "DAPO arXiv 2503.14476 (\"Removing KL Divergence\")",
    "beta-0-ppo-dual-clip": "grpo.loss with β = 0 and the dual clip c = 3: verl 0.9.1 compute_policy_loss_vanilla "
                            "with actor.use_kl_loss False (its default)",
    "beta-0-gspo": "grpo.loss with β = 0 and GSPO's sequence ratio (arXiv 2507.18071 §4.1 eq. 5; TRL 1.16.0 "
                   "importance_sampling_level 'sequence' with beta 0.0)",
    "beta-0-gspo-token": "grpo.loss with β = 0 and GSPO-token's ratio (arXiv 2507.18071 §4.3; verl 0.9.1 "
                         "compute_policy_loss_gspo without a KL loss)",
    "beta-0-gmpo": "grpo.loss with β = 0 and GMPO's geometric-mean ratio (arXiv 2507.20673 §3; verl 0.9.1 "
                   "compute_policy_loss_geo_mean without a KL loss)",
    "beta-0-cispo": "grpo.loss with β = 0 and CISPO's upper-clipped IS weight (MiniMax-M1 arXiv 2506.13585 §3.1, "
                    "no KL term)",
    "beta-0-cispo-both": "grpo.loss with β = 0 and CISPO's weight clipped on both sides (verl 0.9.1 "
                         "compute_policy_loss_cispo without a KL loss)",
    "beta-0-cispo-raw-upper": "grpo.loss with β = 0 and CISPO's raw cap ε_high (TRL 1.16.0 loss_type 'cispo' with "
                              "beta 0.0; Liger 0.8.5)",
    "beta-0-sapo": "grpo.loss with β = 0 and SAPO's soft gate (arXiv 2511.20347 §3; TRL 1.16.0 loss_type 'sapo' "
                   "with beta 0.0)",
    "beta-0-clip-cov": "grpo.loss with β = 0 and Clip-Cov (arXiv 2505.22617 §4; verl 0.9.1 "
                       "compute_policy_loss_clip_cov without a KL loss); the selection is an input",
    "beta-0-kl-cov": "grpo.loss with β = 0 and KL-Cov (arXiv 2505.22617 §4; verl 0.9.1 "
                     "compute_policy_loss_kl_cov without a KL loss); the selection is an input",
    "beta-0-reinforce": "grpo.loss with β = 0 and REINFORCE's −A·log π (Williams 1992; verl 0.9.1 "
                        "compute_policy_loss_gpg, GPG arXiv 2504.02546 has no KL term)",
}
GROUPS = {f"{form}-{aggregation}": f"{source}; aggregation '{aggregation}'"
          for form, source in _SOURCES.items() for aggregation in BETA_ZERO_AGGREGATIONS}

SEED = 60000
DTYPES = (None, "float32", "low")   # per aggregation: binary64, float32, then bfloat16 or float16


def _params(conv, r, k: int) -> dict:
    """The k-th band (or SAPO's temperatures, KL-Cov's coefficient) of a policy loss, with β = 0."""
    policy = conv["policy_loss"]
    if policy == "sapo":
        tau_pos, tau_neg = SAPO_TAUS[k % len(SAPO_TAUS)]
        return {"beta": 0.0, "sapo_tau_pos": tau_pos, "sapo_tau_neg": tau_neg}
    if policy == "cispo":
        bands = CISPO_BANDS[conv["cispo_clip"]]
    elif policy == "gmpo":
        bands = GMPO_BANDS
    elif conv["ratio_level"] != "token":
        bands = SEQUENCE_BANDS[1:]   # GSPO's 3e−4 band needs its own spreads (grpo_loss); the others here
    else:
        bands = CLIP_PARAMS
    eps_low, eps_high = bands[k % len(bands)]
    params = {"eps_low": eps_low, "eps_high": eps_high, "beta": 0.0}
    if policy == "kl-cov":
        params["kl_cov_coef"] = float(r.choice([1.0, 0.5, 2.0]))
    return params


def _case(gi: int, form: str, ai: int, di: int) -> Case:
    aggregation = BETA_ZERO_AGGREGATIONS[ai]
    conv = {**BETA_ZERO_FORMS[form], "aggregation": aggregation}
    policy = conv["policy_loss"]
    seed = SEED + 100 * gi + 10 * ai + di
    r = S.rng(seed)
    kind = DTYPES[di]
    low = kind == "low"
    dtype = ("bfloat16", "float16")[(gi + ai) % 2] if low else kind
    if low:
        b, t = int(r.integers(2, 5)), int(r.choice([4, 8]))
    else:
        b, t = int(r.integers(1, 9)), int(r.choice([1, 3, 8, 16, 24, 32]))
    params = _params(conv, r, ai + di)
    if aggregation == "seq-mean-token-sum-norm":
        params["norm_length"] = None if di % 2 else float(r.choice([64, 256]))
    fit = S.in_dtype if low else S.rounded
    spread = 0.2 if low else float(r.choice([0.05, 0.3] if policy != "gmpo" else [0.1, 0.3]))
    lp = fit(S.logprobs(r, (b, t)), dtype)
    old = fit(S.logprobs_near(r, lp, spread), dtype)
    # a reference far from the policy in some cases: a KL estimate still formed would be large
    ref = fit(S.logprobs_near(r, lp, 0.3 if low else float(r.choice([0.3, 1.0, 5.0]))), dtype)
    adv = fit((r.uniform(-2, 2, b) if low else r.normal(0, 1, b)).tolist(), dtype)
    mask = S.mask(r, b, t)
    if conv["ratio_level"] == "token":
        lp = loss_away(lp, old, ref, params, conv, dtype)
    else:
        lp = sequence_away(lp, old, ref, mask, adv, params, conv, dtype)
    inputs = {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": adv, "mask": mask}
    flags = ("Random", "BetaZero") + (("LowPrecision",) if low else ())
    if policy in ("clip-cov", "kl-cov"):
        inputs["selected"], how = selection(r, policy, lp, old, adv, mask, params, False)
        flags += (how,)
    comment = (f"β = 0, {aggregation}, random B={b}, T={t}, "
               + ", ".join(f"{k}={v}" for k, v in params.items() if k != "beta")
               + (f", inputs exact in {dtype}" if low else (", float32" if dtype else "")))
    return Case(LOSS, inputs, params={"eps_low": 0.2, "eps_high": None, "norm_length": None, **params},
                conventions=conv, group=f"{form}-{aggregation}", flags=flags, comment=comment, low_precision=low,
                provenance=generated(seed, "logprobs; old/ref = logp + normal offsets; ragged mask"
                                     + (f"; rounded to {dtype}" if low else "")))


def cases() -> list[Case]:
    return [_case(gi, form, ai, di) for gi, form in enumerate(BETA_ZERO_FORMS)
            for ai in range(len(BETA_ZERO_AGGREGATIONS)) for di in range(len(DTYPES))]
