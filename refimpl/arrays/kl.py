"""Sampled per-token KL estimators k1, k2, k3 over the array API.

Source: J. Schulman, "Approximating KL Divergence" (2020); DeepSeekMath (Shao et al. 2024)
§4.1.1 eq. 4 (k3 as GRPO's per-token penalty). With log r = ref_logp − logp:

    k1 = −log r,        k2 = (log r)²/2,        k3 = r − log r − 1  (≥ 0),
    abs = |log r|  (verl 0.9.1 kl_penalty "abs"; gradient 0 at the kink log r = 0).

Same names and contract as ``refimpl.exact.kl``; computed in the inputs' dtype.
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.arrays import _xp

__all__ = ["estimator", "estimator_vjp"]

KINDS = validate.KL_KINDS


def _prepare(logp, ref_logp, kind, clamp):
    xp = _xp.namespace(logp, ref_logp)
    dt = _xp.float_dtype(xp, logp=logp, ref_logp=ref_logp)
    lp = _xp.array(xp, "logp", logp, dt)
    rp = _xp.array(xp, "ref_logp", ref_logp, dt)
    validate.same_shape(logp=_xp.shape(lp), ref_logp=_xp.shape(rp))
    validate.kl_kind(kind)
    c = validate.kl_clamp(clamp)
    return xp, dt, lp, rp, c


def unclamped(xp, log_r, kind):
    """The estimator k1/k2/k3 of ``log_r = ref_logp − logp`` (elementwise, no clamp)."""
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return log_r * log_r / 2
    if kind == "abs":
        # |log r| as sign·log r: the same number, and under autodiff (the jax backend) the
        # derivative sign(log r), 0 at the kink as the reference's; jnp.abs's is 1 there
        return xp.sign(log_r) * log_r
    # r − 1 − log r ≈ (log r)²/2 near 0: expm1(log r) − log r would cancel there.
    return _xp.expm1mx(xp, log_r)


def unclamped_dlogp(xp, log_r, kind):
    """d unclamped(log_r, kind) / d logp (elementwise); d(log r)/d logp = −1."""
    if kind == "k1":
        return xp.ones_like(log_r)
    if kind == "k2":
        return -log_r
    if kind == "abs":
        return -xp.sign(log_r)  # 0 at the kink, as torch.abs's gradient
    return -xp.expm1(log_r)  # 1 − r


def clamped(xp, log_r, kind, clamp):
    """The estimator clipped to [−c, c], or unclipped when ``clamp`` is None.
    Shared with grpo.loss, whose KL term is this value."""
    value = unclamped(xp, log_r, kind)
    return value if clamp is None else _xp.clamp(xp, value, -clamp, clamp)


def clamped_dlogp(xp, log_r, kind, clamp):
    """d clamped / d logp: zero where clamped; the closed band's bounds pass the gradient
    (as ``torch.clamp``)."""
    grad = unclamped_dlogp(xp, log_r, kind)
    if clamp is None:
        return grad
    value = unclamped(xp, log_r, kind)
    return _xp.masked(xp, (value >= -clamp) & (value <= clamp), grad)


def clamped_plus_dlogp(xp, log_r, kind, clamp):
    """clamped + clamped_dlogp, the factor in d(ρ·KL)/dlogp = ρ·(KL + dKL/dlogp) when the
    estimate is weighted by a differentiable ratio ρ (grpo.loss ``kl_ratio_weight``).
    For k3 the two terms (r − 1 − log r) + (1 − r) are each ~r while their sum is −log r:
    formed directly, since at r = e^{30} the sum of the two would keep no digit."""
    if kind == "k3":
        total = -log_r
    else:
        total = unclamped(xp, log_r, kind) + unclamped_dlogp(xp, log_r, kind)
    if clamp is None:
        return total
    value = unclamped(xp, log_r, kind)
    inside = (value >= -clamp) & (value <= clamp)
    return xp.where(inside, total, xp.clip(value, -clamp, clamp))


def estimator(logp, ref_logp, kind: str = "k3", clamp: float | None = None):
    """Per-token KL estimate of KL(π‖π_ref) from the sampled token's log-probabilities.

    Schulman (2020) k1/k2/k3; DeepSeekMath §4.1.1 eq. 4 (k3). ``clamp=c`` clips the value
    to [−c, c] (OpenRLHF and verl clamp at 10; the papers do not clamp).
    Returns value (same shape as ``logp``).
    """
    xp, _, lp, rp, c = _prepare(logp, ref_logp, kind, clamp)
    return clamped(xp, rp - lp, kind, c)


def estimator_vjp(cotangent, logp, ref_logp, kind: str = "k3", clamp: float | None = None):
    """Gradient of Σ cotangent·value with respect to ``logp`` (Schulman 2020; zero where
    clamped, the band being closed)."""
    xp, dt, lp, rp, c = _prepare(logp, ref_logp, kind, clamp)
    ct = _xp.array(xp, "cotangent", cotangent, dt)
    validate.same_shape(logp=_xp.shape(lp), cotangent=_xp.shape(ct))
    return {"logp": ct * clamped_dlogp(xp, rp - lp, kind, c)}
