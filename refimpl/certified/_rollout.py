"""Rollout/training mismatch correction weights (grpo.rollout_correction) in ball arithmetic.

Yao et al. 2025 [tis-blog] (truncated IS), IcePop (arXiv 2510.18855, the IcePop objective, masked IS); the catalog's
definition (conformance/catalog.py): with d_t = old_logp_t − rollout_logp_t on the valid tokens,
the unit log-ratio ℓ is d_t, Σ_t d_t or Σ_t d_t / n over a row, clamped to [−c, c] when
log_ratio_clamp = c; w = exp(ℓ); truncate: clamp(w, lower, upper); mask: the closed band
[lower, upper] keeps w, the token's exp(d_t) (clamped likewise) or 1, and zeroes the rest.
Outside the mask weight = keep = 0. The band decisions are proven (a ratio on a bound, e.g.
exp(0) = 1, is exact), or the certificate reports a straddle.
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.certified import _ball

__all__ = ["rollout_correction"]


def _body(diff, old_logp, rollout_logp, mask, level="token", correction="truncate", lower=None, upper=2.0,
          seq_log_ratio="sum", kept_weight="ratio", log_ratio_clamp=None):
    old = _ball.balls("old_logp", old_logp)
    shape = _ball.shape(old)
    validate.rank("old_logp", shape, 2)
    validate.nonempty("old_logp", shape)
    roll = _ball.balls("rollout_logp", rollout_logp)
    validate.same_shape(old_logp=shape, rollout_logp=_ball.shape(roll))
    m = _ball.mask_rows("mask", mask, shape)
    if not any(v for row in m for v in row):
        validate.fail("mask", "selects no token")
    level, correction, lo, hi, seq, kept, c = validate.rollout_correction(
        level, correction, lower, upper, seq_log_ratio, kept_weight, log_ratio_clamp)
    lo = None if lo is None else _ball.ball(lo)
    hi = None if hi is None else _ball.ball(hi)
    c = None if c is None else _ball.ball(c)

    def ratio(ell):
        return _ball.exp(ell if c is None else _ball.clip(ell, -c, c))

    weights, keep = [], []
    for orow, rrow, mrow in zip(old, roll, m):
        d = [o - r if on else None for o, r, on in zip(orow, rrow, mrow)]
        valid = [x for x in d if x is not None]
        row_ratio = None
        if level == "sequence" and valid:
            total = _ball.fsum(valid)
            row_ratio = ratio(total if seq == "sum" else total / len(valid))
        wrow, krow = [], []
        for dt in d:
            if dt is None:
                wrow.append(_ball.ZERO)
                krow.append(_ball.ZERO)
                continue
            w = row_ratio if level == "sequence" else ratio(dt)
            if correction == "truncate":
                wrow.append(_ball.clip(w, lo, hi))
                krow.append(_ball.ONE)
            elif (lo is None or _ball.compare(w, lo) >= 0) and (hi is None or _ball.compare(w, hi) <= 0):
                wrow.append({"ratio": w, "token-ratio": ratio(dt), "one": _ball.ONE}[kept])
                krow.append(_ball.ONE)
            else:
                wrow.append(_ball.ZERO)
                krow.append(_ball.ZERO)
        weights.append(wrow)
        keep.append(krow)
    return {"weights": weights, "keep": keep}


rollout_correction, _ = _ball.pair(_body, ("weights", "keep"), ())
rollout_correction.__doc__ = ("Rollout/training mismatch correction weights and keep mask (TIS [tis-blog]; "
                              "IcePop arXiv 2510.18855, the IcePop objective), as balls.")
