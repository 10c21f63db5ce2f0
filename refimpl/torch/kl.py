"""Sampled per-token KL estimators k1, k2, k3, abs (PyTorch, autograd).

Source: J. Schulman, "Approximating KL Divergence" (2020); DeepSeekMath (Shao et al. 2024)
§4.1.1 eq. 4 (k3 as GRPO's per-token penalty). With log r = ref_logp − logp:

    k1 = −log r,        k2 = (log r)²/2,        k3 = r − log r − 1 = expm1(log r) − log r,
    abs = |log r|  (verl 0.9.1 kl_penalty "abs"; torch.abs's gradient is 0 at log r = 0, as the
    catalog defines it).
"""
from __future__ import annotations

import math

import torch

from lossproof.refimpl import validate
from lossproof.refimpl.torch import _common

__all__ = ["estimator"]

KINDS = validate.KL_KINDS


def k3(x: torch.Tensor) -> torch.Tensor:
    """expm1(x) − x (≥ 0) with a few ulps of relative error for every x (no graph).

    For |x| < 1/2 the two terms cancel to x²/2, so the Taylor series x²·Σ_{n≥2} x^{n−2}/n! is
    used (Horner, truncated where the remainder is below the dtype's epsilon); elsewhere the
    cancellation costs at most a factor 5. Shared with ``distill``, whose KL terms are
    a·k3(−ℓ) ≥ 0."""
    small = x.abs() < 0.5
    xs = torch.where(small, x, torch.zeros_like(x))
    last = 16 if x.dtype == torch.float64 else 10  # 2·0.5^(n−2)/n! < epsilon
    acc = torch.full_like(xs, 1 / math.factorial(last))
    for n in range(last - 1, 1, -1):
        acc.mul_(xs).add_(1 / math.factorial(n))  # in place: one buffer for the whole series
    return torch.where(small, acc.mul_(xs).mul_(xs), torch.expm1(x) - x)


class _K3(torch.autograd.Function):
    """k3(x) = expm1(x) − x with derivative expm1(x).

    Autograd of expm1(x) − x would form (expm1(x) + 1) − 1, accurate only to one ulp of 1:
    near the reference (x → 0) the gradient ≈ x would lose its relative accuracy, and the
    value x²/2 likewise. Elementwise, so it costs no memory beyond x itself."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return k3(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        # A zero cotangent (a clamped or masked entry) gives 0 even where expm1 overflows.
        return torch.where(g == 0, torch.zeros_like(g), g * torch.expm1(x))


def unclamped(log_r: torch.Tensor, kind: str) -> torch.Tensor:
    """k1/k2/k3 of ``log_r`` (elementwise, differentiable); d log_r / d logp = −1."""
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return log_r * log_r / 2
    if kind == "abs":
        return log_r.abs()
    return _K3.apply(log_r)


def clamped(log_r: torch.Tensor, kind: str, clamp: float | None) -> torch.Tensor:
    """The estimator clipped to [−c, c]; ``torch.clamp`` passes the gradient on the closed band
    and none outside it. Shared with ``grpo.loss``."""
    value = unclamped(log_r, kind)
    return value if clamp is None else torch.clamp(value, -clamp, clamp)


def estimator(logp, ref_logp, kind: str = "k3", clamp: float | None = None):
    """Per-token KL estimate of KL(π‖π_ref) from the sampled tokens' log-probabilities.

    Schulman (2020) k1/k2/k3; DeepSeekMath §4.1.1 eq. 4 (k3). ``clamp=c`` clips the value to
    [−c, c] (OpenRLHF and verl clamp at 10; the papers do not). ``logp`` and ``ref_logp`` have
    any common shape; returns value of that shape. Gradient wrt ``logp``; ``ref_logp`` is a
    constant.
    """
    lp = _common.array("logp", logp)
    rp = _common.array("ref_logp", ref_logp)
    validate.same_shape(logp=tuple(lp.shape), ref_logp=tuple(rp.shape))
    validate.kl_kind(kind)
    c = validate.kl_clamp(clamp)
    out = _common.result_dtype(lp, rp)
    work = _common.work_dtype(out)
    value = clamped(_common.constant(rp, work) - _common.upcast(lp, work), kind, c)
    return value.to(out)
