"""Rollout/training mismatch correction weights (grpo.rollout_correction), exact.

The inference engine that samples a response (vLLM, SGLang) and the trainer that recomputes its
log-probabilities (FSDP, Megatron) disagree on the sampled tokens' probabilities, so "on-policy"
data is off-policy by the ratio π_old/π_rollout. Yao et al. 2025 [tis-blog] weight each token's
policy-gradient term by the truncated importance ratio min(π_old(y_t)/π_rollout(y_t), C) (TIS);
IcePop (Ring-1T, arXiv 2510.18855, the IcePop objective) multiplies it by M(k) = k for
k ∈ [α, β] and 0 otherwise (masked IS). The libraries apply either at the token or the sequence
level (TRL 1.16 vllm_importance_sampling_mode, verl 0.9.1 rollout_corr_helper.py, OpenRLHF 0.11.2
PolicyLoss is_correction_*). With d_t = old_logp_t − rollout_logp_t on the valid tokens:

    unit log-ratio ℓ = d_t (level 'token'), or Σ_t d_t ('sequence', seq_log_ratio 'sum': the
        sequence ratio Π_t ρ_t), or Σ_t d_t / n (seq_log_ratio 'mean': its geometric mean)
    ℓ ← clamp(ℓ, −c, c) when log_ratio_clamp = c (verl's ±20 before the exponential)
    w = exp(ℓ)
    truncate: weight = clamp(w, lower, upper) (TIS: lower None, upper C)
    mask:     keep = [lower ≤ w ≤ upper] (closed band); weight = keep·v with v = w ('ratio'), the
              token's own exp(d_t) ('token-ratio', OpenRLHF's sequence gate; clamped too when c is
              set) or 1 ('one': a rejection mask)

A sequence unit's ratio is broadcast to its tokens. Outside the mask (and on a row without valid
tokens) weight = keep = 0. Both outputs are constants (the weights change the sampling measure,
not the objective): no gradient.
"""
from __future__ import annotations

import mpmath

from lossproof.refimpl import validate
from lossproof.refimpl.exact import mp

__all__ = ["rollout_correction"]


def _inputs(old_logp, rollout_logp, mask):
    old = mp.array("old_logp", old_logp)
    validate.rank("old_logp", old.shape, 2)
    validate.nonempty("old_logp", old.shape)
    roll = mp.array("rollout_logp", rollout_logp)
    validate.same_shape(old_logp=old.shape, rollout_logp=roll.shape)
    m = mp.mask("mask", mask, old.shape)
    if not any(e == 1 for e in m.flat):
        validate.fail("mask", "selects no token")
    return old, roll, m


@mp.exact
def rollout_correction(old_logp, rollout_logp, mask, level: str = "token", correction: str = "truncate",
                       lower: float | None = None, upper: float | None = 2.0, seq_log_ratio: str = "sum",
                       kept_weight: str = "ratio", log_ratio_clamp: float | None = None):
    """Per-token correction weights[B,T] and keep[B,T] for the rollout/training mismatch (see the
    module docstring; Yao et al. 2025 [tis-blog]; IcePop, arXiv 2510.18855, the IcePop objective)."""
    old, roll, m = _inputs(old_logp, rollout_logp, mask)
    level, correction, lo, hi, seq, kept, c = validate.rollout_correction(
        level, correction, lower, upper, seq_log_ratio, kept_weight, log_ratio_clamp)
    lo = None if lo is None else mp.mpf(lo)
    hi = None if hi is None else mp.mpf(hi)

    def ratio(ell):
        return mpmath.exp(ell if c is None else min(max(ell, -mp.mpf(c)), mp.mpf(c)))

    B, T = old.shape
    weights, keep = mp.zeros((B, T)), mp.zeros((B, T))
    for b in range(B):
        valid = [t for t in range(T) if m[b, t] == 1]
        if not valid:
            continue
        d = {t: old[b, t] - roll[b, t] for t in valid}
        if level == "sequence":
            total = mpmath.fsum(d.values())
            row = ratio(total if seq == "sum" else total / len(valid))
        for t in valid:
            w = row if level == "sequence" else ratio(d[t])
            if correction == "truncate":
                weights[b, t] = w if hi is None else min(w, hi)
                weights[b, t] = weights[b, t] if lo is None else max(weights[b, t], lo)
                keep[b, t] = mp.ONE
            elif (lo is None or w >= lo) and (hi is None or w <= hi):
                keep[b, t] = mp.ONE
                weights[b, t] = {"ratio": w, "token-ratio": ratio(d[t]), "one": mp.ONE}[kept]
    return {"weights": weights, "keep": keep}
