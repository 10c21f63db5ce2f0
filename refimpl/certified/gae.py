"""Generalized advantage estimation and KL-shaped token rewards in ball arithmetic.

GAE (Schulman et al. 2016, arXiv 1506.02438) §3 eqs. 10 and 16: δ_t = r_t + γ·V_{t+1} − V_t,
Â_t = δ_t + γλ·Â_{t+1}, returns Â_t + V_t; masked tokens skipped ('skip') or taken as steps of
reward and value 0 ('zero'); optional whitening over the valid tokens of the batch. KL in the
reward (verl 0.9.1 apply_kl_penalty, OpenRLHF 0.11.2 compute_reward): r_t = score·[t = last] −
β·k_t. No gradients.
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.certified import _ball
from lossproof.refimpl.certified._ball import mask_rows
from lossproof.refimpl.certified.kl import penalty

__all__ = ["advantages", "kl_rewards"]


def _rows(name, x, shape=None):
    a = _ball.balls(name, x)
    validate.rank(name, _ball.shape(a), 2)
    validate.nonempty(name, _ball.shape(a))
    if shape is not None:
        validate.same_shape(**{"rewards": shape, name: _ball.shape(a)})
    return a


def _gae_row(rewards, values, on, gamma, lam, masked_tokens):
    adv = [_ball.ZERO] * len(rewards)
    following, next_value = _ball.ZERO, _ball.ZERO
    for t in reversed(range(len(rewards))):
        if masked_tokens == "skip" and not on[t]:
            continue   # not a time step: the next valid token's value and Â carry over it
        r, v = (rewards[t], values[t]) if on[t] else (_ball.ZERO, _ball.ZERO)
        following = r + gamma * next_value - v + gamma * lam * following
        adv[t] = following if on[t] else _ball.ZERO
        next_value = v
    return adv


def _advantages(diff, rewards, values, mask, gamma=1.0, lam=1.0, whiten="none", std_ddof=0, masked_tokens="skip",
                whiten_eps=0.0):
    r = _rows("rewards", rewards)
    shape = _ball.shape(r)
    v = _rows("values", values, shape)
    on = mask_rows("mask", mask, shape)
    g = _ball.ball(validate.discount("gamma", gamma))
    lm = _ball.ball(validate.discount("lam", lam))
    validate.whitening(whiten)
    ddof = validate.std_ddof(std_ddof)
    validate.masked_tokens(masked_tokens)
    eps = validate.whiten_eps(whiten_eps, whiten)
    if not any(any(row) for row in on):
        validate.fail("mask", "selects no token")
    adv = [_gae_row(rr, vv, o, g, lm, masked_tokens) for rr, vv, o in zip(r, v, on)]
    returns = [[a + x if b else _ball.ZERO for a, x, b in zip(row, vv, o)] for row, vv, o in zip(adv, v, on)]
    if whiten != "none" and eps:
        # TRL's whiten (verl masked_whiten, torchtune whiten): Σ/(N + ε) for μ and σ², then √(σ² + ε) > 0
        valid = [a for row, o in zip(adv, on) for a, b in zip(row, o) if b]
        n, e = len(valid), _ball.ball(eps)
        mean = _ball.fsum(valid) / (n + e)
        degenerate = n == ddof
        std = None if degenerate else (_ball.fsum(_ball.square(a - mean) for a in valid) / (n + e)
                                       * _ball.ball(n) / _ball.ball(n - ddof) + e).sqrt()
    elif whiten != "none":
        valid = [a for row, o in zip(adv, on) for a, b in zip(row, o) if b]
        mean = _ball.fsum(valid) / len(valid)
        square = _ball.fsum(_ball.square(a - mean) for a in valid)
        degenerate = len(valid) == 1 or square.is_zero()
        if not degenerate and square.contains(0):
            raise _ball.Straddle("the whitening variance is not separated from 0")
        std = None if degenerate else (square / (len(valid) - ddof)).sqrt()
    if whiten != "none":
        keep = whiten == "keep-mean"
        adv = [[((_ball.ZERO if degenerate else (a - mean) / std) + (mean if keep else _ball.ZERO)) if b
                else _ball.ZERO for a, b in zip(row, o)] for row, o in zip(adv, on)]
    return {"advantages": adv, "returns": returns}


def _kl_rewards(diff, scores, logp, ref_logp, mask, beta=None, kind="k1", clamp=None):
    s = _ball.balls("scores", scores)
    validate.rank("scores", _ball.shape(s), 1)
    lp = _ball.balls("logp", logp)
    shape = _ball.shape(lp)
    validate.rank("logp", shape, 2)
    validate.nonempty("logp", shape)
    rp = _ball.balls("ref_logp", ref_logp)
    validate.same_shape(logp=shape, ref_logp=_ball.shape(rp))
    validate.per_sequence("scores", _ball.shape(s), shape)
    on = mask_rows("mask", mask, shape)
    b = _ball.ball(validate.kl_penalty_beta(beta))
    validate.reward_kl_kind(kind)
    c = validate.kl_clamp(clamp)
    c = None if c is None else _ball.ball(c)
    validate.every_row_has_a_token("mask", on)
    out = []
    for score, lrow, rrow, o in zip(s, lp, rp, on):
        last = max(t for t, x in enumerate(o) if x)
        out.append([((score if t == last else _ball.ZERO) - b * penalty(y - x, kind, c)) if o[t] else _ball.ZERO
                    for t, (x, y) in enumerate(zip(lrow, rrow))])
    return {"rewards": out}


advantages, _ = _ball.pair(_advantages, ("advantages", "returns"), ())
advantages.__doc__ = "GAE advantages and returns (arXiv 1506.02438 eqs. 10, 16), as balls."
kl_rewards, _ = _ball.pair(_kl_rewards, ("rewards",), ())
kl_rewards.__doc__ = "Per-token rewards score·[t = last] − β·k_t (verl apply_kl_penalty; OpenRLHF compute_reward), as balls."
