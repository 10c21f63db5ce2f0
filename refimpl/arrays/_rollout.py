"""Rollout/training mismatch correction weights (grpo.rollout_correction) over the array API.

Yao et al. 2025 [tis-blog] (truncated IS), IcePop (arXiv 2510.18855, the IcePop objective, masked IS); the contract
and conventions of ``refimpl.exact._rollout``: d_t = old_logp_t − rollout_logp_t on the valid
tokens, the unit log-ratio d_t or a row's Σ d_t (or Σ d_t / n), clamped to ±c when asked,
w = exp(·); truncate clamps w to [lower, upper], mask keeps w / exp(d_t) / 1 inside the closed
band and 0 outside. No gradient.
"""
from __future__ import annotations

import math

from lossproof.refimpl import validate
from lossproof.refimpl.arrays import _xp

__all__ = ["rollout_correction"]


def rollout_correction(old_logp, rollout_logp, mask, level: str = "token", correction: str = "truncate",
                       lower: float | None = None, upper: float | None = 2.0, seq_log_ratio: str = "sum",
                       kept_weight: str = "ratio", log_ratio_clamp: float | None = None):
    """Per-token correction weights[B,T] and keep[B,T] (0/1) for the rollout/training mismatch."""
    xp = _xp.namespace(old_logp, rollout_logp)
    dt = _xp.float_dtype(xp, old_logp=old_logp, rollout_logp=rollout_logp)
    old = _xp.array(xp, "old_logp", old_logp, dt)
    validate.rank("old_logp", _xp.shape(old), 2)
    validate.nonempty("old_logp", _xp.shape(old))
    roll = _xp.array(xp, "rollout_logp", rollout_logp, dt)
    validate.same_shape(old_logp=_xp.shape(old), rollout_logp=_xp.shape(roll))
    m = _xp.mask(xp, "mask", mask, _xp.shape(old), dt)
    if not bool(xp.any(m == 1)):
        validate.fail("mask", "selects no token")
    level, correction, lo, hi, seq, kept, c = validate.rollout_correction(
        level, correction, lower, upper, seq_log_ratio, kept_weight, log_ratio_clamp)

    # e^ℓ beyond the largest finite value is +inf, which the bounds then truncate or reject; it is
    # selected, not computed, so that NumPy does not warn of an overflow that is the right answer
    overflow = math.log(float(xp.finfo(dt).max))

    def ratio(ell):
        ell = ell if c is None else xp.clip(ell, min=-c, max=c)
        big = ell > overflow
        return xp.where(big, xp.full_like(ell, xp.inf), xp.exp(xp.where(big, xp.zeros_like(ell), ell)))

    valid = m == 1
    d = _xp.masked(xp, valid, old - roll)     # padding may hold anything: select, never multiply
    if level == "sequence":
        ell = xp.sum(d, axis=1, keepdims=True)
        if seq == "mean":
            ell = ell / xp.clip(xp.sum(m, axis=1, keepdims=True), min=1)
        w = xp.broadcast_to(ratio(ell), d.shape)
    else:
        w = ratio(d)
    if correction == "truncate":
        weights, keep = xp.clip(w, min=lo, max=hi), valid
    else:
        keep = valid
        if lo is not None:
            keep = keep & (w >= lo)
        if hi is not None:
            keep = keep & (w <= hi)
        weights = {"ratio": w, "token-ratio": ratio(d), "one": xp.ones_like(w)}[kept]
    zero = xp.zeros_like(w)
    return {"weights": xp.where(keep, weights, zero), "keep": xp.where(keep, xp.ones_like(w), zero)}
