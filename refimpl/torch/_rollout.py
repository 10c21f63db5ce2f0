"""Rollout/training mismatch correction weights (grpo.rollout_correction) in PyTorch.

Yao et al. 2025 [tis-blog] (truncated IS), IcePop (arXiv 2510.18855, the IcePop objective, masked IS); the contract
and conventions of ``refimpl.exact._rollout``: d_t = old_logp_t − rollout_logp_t on the valid
tokens, the unit log-ratio d_t or a row's Σ d_t (or Σ d_t / n), clamped to ±c when asked,
w = exp(·); truncate clamps w to [lower, upper], mask keeps w / exp(d_t) / 1 inside the closed
band and 0 outside. The weights are constants (computed under no_grad: they change the sampling
measure, not the objective); bfloat16/float16 inputs are computed in float32 and rounded once.
"""
from __future__ import annotations

import torch

from lossproof.refimpl import validate
from lossproof.refimpl.torch import _common

__all__ = ["rollout_correction"]


@torch.no_grad()
def rollout_correction(old_logp, rollout_logp, mask, level: str = "token", correction: str = "truncate",
                       lower: float | None = None, upper: float | None = 2.0, seq_log_ratio: str = "sum",
                       kept_weight: str = "ratio", log_ratio_clamp: float | None = None):
    """Per-token correction weights[B,T] and keep[B,T] (0/1, in the input dtype) for the
    rollout/training mismatch; no gradient reaches either input."""
    old = _common.array("old_logp", old_logp)
    validate.rank("old_logp", tuple(old.shape), 2)
    validate.nonempty("old_logp", tuple(old.shape))
    roll = _common.array("rollout_logp", rollout_logp)
    validate.same_shape(old_logp=tuple(old.shape), rollout_logp=tuple(roll.shape))
    valid = _common.mask("mask", mask, tuple(old.shape))
    if not valid.any():
        validate.fail("mask", "selects no token")
    level, correction, lo, hi, seq, kept, c = validate.rollout_correction(
        level, correction, lower, upper, seq_log_ratio, kept_weight, log_ratio_clamp)
    out = _common.result_dtype(old, roll)
    work = _common.work_dtype(out)
    d = _common.constant(old, work) - _common.constant(roll, work)
    d = torch.where(valid, d, torch.zeros_like(d))   # padding may hold anything: select, never multiply

    def ratio(ell):
        return torch.exp(ell if c is None else torch.clamp(ell, -c, c))

    if level == "sequence":
        ell = d.sum(dim=1, keepdim=True)
        if seq == "mean":
            ell = ell / valid.sum(dim=1, keepdim=True).clamp(min=1).to(work)
        w = ratio(ell).expand_as(d)
    else:
        w = ratio(d)
    keep = valid
    if correction == "truncate":
        weights = torch.clamp(w, lo, hi)
    else:
        if lo is not None:
            keep = keep & (w >= lo)
        if hi is not None:
            keep = keep & (w <= hi)
        weights = {"ratio": w, "token-ratio": ratio(d), "one": torch.ones_like(w)}[kept]
    zero = torch.zeros_like(w)
    return {"weights": torch.where(keep, weights, zero).to(out), "keep": keep.to(out)}
