"""Generalized advantage estimation and KL-shaped token rewards over the array API (no
gradients). Formulas, papers and conventions: ``refimpl.exact.gae``; GAE (Schulman et al. 2016,
arXiv 1506.02438) eqs. 10 and 16, computed backwards over the tokens, all rows at once.
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.arrays import _xp, kl

__all__ = ["advantages", "kl_rewards"]


def _rows(xp, name, x, dt, shape=None):
    a = _xp.array(xp, name, x, dt)
    validate.rank(name, _xp.shape(a), 2)
    validate.nonempty(name, _xp.shape(a))
    if shape is not None:
        validate.same_shape(**{"rewards": shape, name: _xp.shape(a)})
    return a


def _gae(xp, r, v, on, gamma, lam, masked_tokens):
    """Â_t = δ_t + γλ·Â_{t+1} backwards (0 at masked tokens)."""
    n_rows, n = _xp.shape(r)
    following = xp.zeros((n_rows,), dtype=r.dtype)
    next_value = xp.zeros((n_rows,), dtype=r.dtype)
    columns = [None] * n
    for t in range(n - 1, -1, -1):
        here = on[:, t]
        rt, vt = _xp.masked(xp, here, r[:, t]), _xp.masked(xp, here, v[:, t])
        step = rt + gamma * next_value - vt + gamma * lam * following
        if masked_tokens == "skip":
            # a masked token is not a time step: the next valid token's value and Â carry over it
            following = xp.where(here, step, following)
            next_value = xp.where(here, vt, next_value)
        else:
            following, next_value = step, vt
        columns[t] = _xp.masked(xp, here, following)
    return xp.stack(columns, axis=1)


def _whiten(xp, adv, on, ddof, keep_mean, eps=0.0):
    n = int(xp.sum(xp.astype(on, xp.int64)))
    if eps:   # TRL's whiten (refimpl.exact.gae): μ and σ² over N + ε, the scale rsqrt(σ² + ε)
        mean = xp.sum(_xp.masked(xp, on, adv)) / (n + eps)
        d = _xp.masked(xp, on, adv - mean)
        if n == ddof:
            d = xp.zeros_like(d)
        else:
            d = d / xp.sqrt(xp.sum(d * d) / (n + eps) * (n / (n - ddof)) + eps)
        return _xp.masked(xp, on, d + mean) if keep_mean else d
    mean = xp.sum(_xp.masked(xp, on, adv)) / n
    d = _xp.masked(xp, on, adv - mean)
    # a second pass removes the first mean's rounding error from the deviations
    d = _xp.masked(xp, on, d - xp.sum(d) / n)
    square = xp.sum(d * d)
    if n == 1 or float(square) == 0.0:
        d = xp.zeros_like(d)
    else:
        d = d / xp.sqrt(square / (n - ddof))
    return _xp.masked(xp, on, d + mean) if keep_mean else d


def advantages(rewards, values, mask, gamma: float = 1.0, lam: float = 1.0, whiten: str = "none",
               std_ddof: int = 0, masked_tokens: str = "skip", whiten_eps: float = 0.0):
    """GAE advantages and returns (arXiv 1506.02438 eqs. 10, 16); see ``refimpl.exact.gae``.
    Returns {"advantages"[B,T], "returns"[B,T]} (0 at masked tokens)."""
    xp = _xp.namespace(rewards, values, mask)
    dt = _xp.float_dtype(xp, rewards=rewards, values=values)
    r = _rows(xp, "rewards", rewards, dt)
    v = _rows(xp, "values", values, dt, _xp.shape(r))
    m = _xp.mask(xp, "mask", mask, _xp.shape(r), dt)
    g = validate.discount("gamma", gamma)
    lm = validate.discount("lam", lam)
    validate.whitening(whiten)
    ddof = validate.std_ddof(std_ddof)
    validate.masked_tokens(masked_tokens)
    eps = validate.whiten_eps(whiten_eps, whiten)
    on = m == 1
    if not bool(xp.any(on)):
        validate.fail("mask", "selects no token")
    adv = _gae(xp, r, v, on, g, lm, masked_tokens)
    returns = _xp.masked(xp, on, adv + v)
    if whiten != "none":
        adv = _whiten(xp, adv, on, ddof, whiten == "keep-mean", eps)
    return {"advantages": adv, "returns": returns}


def kl_rewards(scores, logp, ref_logp, mask, beta: float | None = None, kind: str = "k1",
               clamp: float | None = None):
    """r_t = score·[t = last valid token] − β·k_t, 0 at masked tokens (verl 0.9.1
    apply_kl_penalty; OpenRLHF 0.11.2 compute_reward); see ``refimpl.exact.gae``."""
    xp = _xp.namespace(scores, logp, ref_logp, mask)
    dt = _xp.float_dtype(xp, scores=scores, logp=logp, ref_logp=ref_logp)
    s = _xp.array(xp, "scores", scores, dt)
    validate.rank("scores", _xp.shape(s), 1)
    lp = _rows(xp, "logp", logp, dt)
    rp = _xp.array(xp, "ref_logp", ref_logp, dt)
    validate.same_shape(logp=_xp.shape(lp), ref_logp=_xp.shape(rp))
    validate.per_sequence("scores", _xp.shape(s), _xp.shape(lp))
    m = _xp.mask(xp, "mask", mask, _xp.shape(lp), dt)
    b = validate.kl_penalty_beta(beta)
    validate.reward_kl_kind(kind)
    c = validate.kl_clamp(clamp)
    on = m == 1
    validate.every_row_has_a_token("mask", [[bool(x)] for x in xp.any(on, axis=1)])
    n = _xp.shape(lp)[1]
    positions = xp.arange(n)
    last = n - 1 - xp.argmax(xp.astype(xp.flip(on, axis=1), xp.int64), axis=1)
    at_last = positions[None, :] == last[:, None]
    score = xp.where(at_last, s[:, None] * xp.ones_like(lp), xp.zeros_like(lp))
    return {"rewards": _xp.masked(xp, on, score - b * kl.clamped(xp, rp - lp, kind, c))}
