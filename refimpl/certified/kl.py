"""kl.estimator in ball arithmetic.

Schulman, "Approximating KL Divergence" (2020): with log r = log π_ref(y) − log π(y) for y ~ π,
k1 = −log r, k2 = (log r)²/2, k3 = r − 1 − log r; DeepSeekMath (Shao et al. 2024) §4.1.1
eq. 4 uses k3; verl 0.9.1's abs = |log r| (gradient 0 at log r = 0). ``clamp=c`` clips the value to the closed band [−c, c] (a clipped entry has
zero gradient; one on a bound passes it).
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.certified import _ball

__all__ = ["estimator", "estimator_vjp", "penalty"]


def penalty(log_r, kind: str, clamp):
    """One estimator of log r (a ball or Var), clipped to [−clamp, clamp] unless clamp is None.
    k3 = e^x − 1 − x is _ball.k3(−x) (ℓ + e^{−ℓ} − 1 at ℓ = −x)."""
    if kind == "k1":
        v = -log_r
    elif kind == "k2":
        v = _ball.square(log_r) / 2
    elif kind == "abs":
        v = _ball.absolute(log_r)
    else:
        v = _ball.k3(-log_r)
    return v if clamp is None else _ball.clip(v, -clamp, clamp)


def _estimator(diff, logp, ref_logp, kind="k3", clamp=None):
    lp = _ball.balls("logp", logp)
    rp = _ball.balls("ref_logp", ref_logp)
    validate.same_shape(logp=_ball.shape(lp), ref_logp=_ball.shape(rp))
    validate.kl_kind(kind)
    c = validate.kl_clamp(clamp)
    c = None if c is None else _ball.ball(c)
    lp = diff("logp", lp)

    def each(a, b):
        if isinstance(a, list):
            return [each(x, y) for x, y in zip(a, b)]
        return penalty(b - a, kind, c)

    return {"value": each(lp, rp)}


estimator, estimator_vjp = _ball.pair(_estimator, ("value",), ("logp",))
estimator.__doc__ = "Per-token KL estimate k1/k2/k3 (Schulman 2020; DeepSeekMath eq. 4), as balls."
