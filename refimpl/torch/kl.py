"""Sampled per-token KL estimators k1, k2, k3 (PyTorch, autograd).

Source: J. Schulman, "Approximating KL Divergence" (2020); DeepSeekMath (Shao et al. 2024)
§4.1.1 eq. 4 (k3 as GRPO's per-token penalty). With log r = ref_logp − logp:

    k1 = −log r,        k2 = (log r)²/2,        k3 = r − log r − 1 = expm1(log r) − log r.
"""
from __future__ import annotations

import torch

from refimpl import validate
from refimpl.torch import _common

KINDS = ("k1", "k2", "k3")


class _K3(torch.autograd.Function):
    """expm1(x) − x with derivative expm1(x).

    Autograd would differentiate expm1 as (expm1(x) + 1) and subtract 1, which keeps only an
    absolute accuracy of one ulp of 1; near the reference (x → 0) the gradient ≈ x then has
    no correct digits left. Elementwise, so it costs no memory beyond x itself."""

    @staticmethod
    def forward(ctx, x):
        e = torch.expm1(x)
        ctx.save_for_backward(e)
        return e - x

    @staticmethod
    def backward(ctx, g):
        (e,) = ctx.saved_tensors
        return g * e


def unclamped(log_r: torch.Tensor, kind: str) -> torch.Tensor:
    """k1/k2/k3 of ``log_r`` (elementwise, differentiable); d log_r / d logp = −1."""
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return log_r * log_r / 2
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
    validate.choice("kind", kind, KINDS)
    c = validate.optional_positive("clamp", clamp)
    out = _common.result_dtype(lp, rp)
    work = _common.work_dtype(out)
    value = clamped(_common.constant(rp, work) - _common.upcast(lp, work), kind, c)
    return value.to(out)
