"""Sampled per-token KL estimators k1, k2, k3 and abs.

Source: J. Schulman, "Approximating KL Divergence" (2020), estimators k1, k2, k3 with
r = π_ref(y)/π(y) sampled from π; DeepSeekMath (Shao et al. 2024) §4.1.1 eq. 4 uses k3 as
GRPO's per-token KL penalty. With log r = ref_logp − logp:

    k1 = −log r,        k2 = (log r)²/2,        k3 = r − log r − 1  (≥ 0),
    abs = |log r|   (verl 0.9.1 core_algos.kl_penalty_forward, kl_penalty="abs"; no paper).

abs has a kink at log r = 0: its gradient there is defined as 0 (the subgradient torch.abs
and numpy.sign give; verl differentiates torch's abs).
"""
from __future__ import annotations

import mpmath
import numpy as np

from lossproof.refimpl import validate
from lossproof.refimpl.exact import mp

__all__ = ["estimator", "estimator_vjp"]

KINDS = validate.KL_KINDS


def _prepare(logp, ref_logp, kind, clamp):
    lp = mp.array("logp", logp)
    rp = mp.array("ref_logp", ref_logp)
    validate.same_shape(logp=lp.shape, ref_logp=rp.shape)
    validate.kl_kind(kind)
    c = validate.kl_clamp(clamp)
    return lp, rp, (None if c is None else mp.mpf(c))


def unclamped(log_r, kind):
    """The estimator k1/k2/k3 of ``log_r = ref_logp − logp`` (elementwise, no clamp)."""
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return log_r * log_r / 2
    if kind == "abs":
        return np.abs(log_r)
    return _k3(log_r)


def _k3_one(x):
    # e^x − 1 − x ≈ x²/2 cancels about |log2 x| bits: work with that many extra bits so the
    # result keeps the full working precision however close π is to π_ref.
    if x == 0:
        return mp.ZERO
    with mpmath.extraprec(max(0, -mpmath.mag(x)) + 16):
        value = mpmath.expm1(x) - x
    return +value


_k3 = np.frompyfunc(_k3_one, 1, 1)
_sign = np.frompyfunc(lambda x: mp.mpf(mpmath.sign(x)), 1, 1)


def unclamped_dlogp(log_r, kind):
    """d unclamped(log_r, kind) / d logp (elementwise)."""
    # d(log r)/d logp = −1
    if kind == "k1":
        return mp.full(log_r.shape, 1)
    if kind == "k2":
        return -log_r
    if kind == "abs":
        return -_sign(log_r)  # 0 at the kink log r = 0
    return -mp.expm1(log_r)  # 1 − r


def clamped(log_r, kind, clamp):
    """The estimator clipped to [−c, c] (``clamp=c``, an mpf), or unclipped when ``clamp`` is None.
    Shared with grpo.loss, whose KL term is this value."""
    value = unclamped(log_r, kind)
    return value if clamp is None else mp.clip(value, -clamp, clamp)


def clamped_dlogp(log_r, kind, clamp):
    """d clamped(log_r, kind, clamp) / d logp: a clamped entry has zero gradient; the clamp
    bounds themselves pass the gradient (the band is closed, as in ``torch.clamp``)."""
    grad = unclamped_dlogp(log_r, kind)
    if clamp is None:
        return grad
    value = unclamped(log_r, kind)
    inside = (value >= -clamp) & (value <= clamp)
    return np.where(inside.astype(bool), grad, mp.ZERO)


@mp.exact
def estimator(logp, ref_logp, kind: str = "k3", clamp: float | None = None):
    """Per-token KL estimate of KL(π‖π_ref) from the sampled token's log-probabilities.

    Schulman (2020) k1/k2/k3; DeepSeekMath §4.1.1 eq. 4 (k3); verl's abs = |log r| (its
    gradient at log r = 0 is 0). ``clamp=c`` clips the value
    to [−c, c] (OpenRLHF and verl clamp at 10; the papers do not clamp).
    Returns value[N] (same shape as ``logp``).
    """
    lp, rp, c = _prepare(logp, ref_logp, kind, clamp)
    return clamped(rp - lp, kind, c)


@mp.exact
def estimator_vjp(cotangent, logp, ref_logp, kind: str = "k3", clamp: float | None = None):
    """Gradient of Σ cotangent·value with respect to ``logp`` (the estimator used as a loss).

    A clamped entry has zero gradient; the clamp bounds themselves pass the gradient
    (the band is closed, as in ``torch.clamp``)."""
    lp, rp, c = _prepare(logp, ref_logp, kind, clamp)
    ct = mp.array("cotangent", cotangent)
    validate.same_shape(logp=lp.shape, cotangent=ct.shape)
    return {"logp": ct * clamped_dlogp(rp - lp, kind, c)}
