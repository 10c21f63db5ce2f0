"""Proximal KL in ball arithmetic: the future KL cost and the per-token loss.

Source: Proximal KL (H. Bai, J. Yao, T. Zhang) as summarised in [proximal-kl-summary], and FRPO
(arXiv 2601.10201); the catalog's definitions (conformance/catalog.py) and conventions:

    k_u = logp_u − ref_logp_u,   F_t = Σ_{u>t, mask_u=1} k_u   (u ≤ t + window when windowed;
    clipped to the closed band [−clip, clip] when clipped; F is detached)
    ρ_t = exp(logp_t − behavior_logp_t);  ratio_cap C: ρ_t → C where ρ_t > C (zero gradient there)
    X_t = sg(A − β·(k_t + F_t));  ℓ_t = −ρ_t·X_t, or with ratio_clip ε PPO's pessimistic
    ℓ_t = −min(ρ_t·X_t, clip(ρ_t, 1−ε, 1+ε)·X_t) (a tie takes the unclipped branch)
    loss = aggregate(ℓ, mask) with grpo.aggregate's modes (norm: the padded length T).
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.certified import _ball
from lossproof.refimpl.certified.grpo import aggregate_rows, mask_rows

__all__ = ["future_cost", "loss", "loss_vjp"]


def _tokens(logp, ref_logp, mask):
    lp = _ball.balls("logp", logp)
    shape = _ball.shape(lp)
    validate.rank("logp", shape, 2)
    validate.nonempty("logp", shape)
    rp = _ball.balls("ref_logp", ref_logp)
    validate.same_shape(logp=shape, ref_logp=_ball.shape(rp))
    m = mask_rows("mask", mask, shape)
    if not any(v for row in m for v in row):
        validate.fail("mask", "selects no token")
    return lp, rp, m, shape


def _future(k, m, clip, window):
    """F_t for every position (a constant: the future cost carries no gradient)."""
    out = []
    for krow, mrow in zip(k, m):
        T = len(krow)
        row = []
        for t in range(T):
            stop = T if window is None else min(T, t + 1 + window)
            f = _ball.fsum(_ball.detach(krow[u]) for u in range(t + 1, stop) if mrow[u])
            row.append(f if clip is None else _ball.clip(f, -clip, clip))
        out.append(row)
    return out


def _future_cost(diff, logp, ref_logp, mask, clip=None, window=None):
    lp, rp, m, _ = _tokens(logp, ref_logp, mask)
    c = validate.cost_clip(clip, "clip")
    w = validate.future_window(window, "window")
    k = [[a - b for a, b in zip(x, y)] for x, y in zip(lp, rp)]
    return {"cost": _future(k, m, None if c is None else _ball.ball(c), w)}


def _loss(diff, logp, behavior_logp, ref_logp, advantages, mask, beta=0.04, ratio_clip=None, ratio_cap=None,
          future_clip=None, future_window=None, aggregation="token-mean"):
    lp, rp, m, shape = _tokens(logp, ref_logp, mask)
    bp = _ball.balls("behavior_logp", behavior_logp)
    validate.same_shape(logp=shape, behavior_logp=_ball.shape(bp))
    adv = _ball.balls("advantages", advantages)
    validate.per_sequence("advantages", _ball.shape(adv), shape)
    b = _ball.ball(validate.regularization_beta(beta))
    eps = validate.ratio_clip(ratio_clip)
    cap = validate.ratio_cap(ratio_cap)
    cap = None if cap is None else _ball.ball(cap)
    fclip = validate.cost_clip(future_clip)
    window = validate.future_window(future_window)
    validate.aggregation(aggregation)
    lp = diff("logp", lp)
    k = [[x - r for x, r in zip(xrow, rrow)] for xrow, rrow in zip(lp, rp)]
    future = _future(k, m, None if fclip is None else _ball.ball(fclip), window)
    lo = hi = None
    if eps is not None:
        lo, hi = 1 - _ball.ball(eps), 1 + _ball.ball(eps)
    per_token = []
    for xrow, brow, krow, frow, a, mrow in zip(lp, bp, k, future, adv, m):
        row = []
        for x, bt, kt, ft, on in zip(xrow, brow, krow, frow, mrow):
            if not on:
                row.append(None)
                continue
            coef = a - b * (_ball.detach(kt) + ft)
            rho = _ball.exp(x - bt)
            if cap is not None:
                rho = _ball.clip(rho, None, cap)
            if lo is not None:
                side = _ball.band(rho, lo, hi)
                s = _ball.sign(coef)
                # ρX − bound·X = (ρ − bound)·X: the unclipped branch is the smaller one (or a
                # tie) when the band side and the sign of X say so
                if not (side == 0 or s == 0 or (side > 0) == (s < 0)):
                    rho = hi if side > 0 else lo
            row.append(-rho * coef)
        per_token.append(row)
    return {"loss": aggregate_rows(per_token, m, aggregation, _ball.ball(shape[1]))}


future_cost, _ = _ball.pair(_future_cost, ("cost",), ())
future_cost.__doc__ = "Future KL cost F_t (Proximal KL summary; FRPO arXiv 2601.10201), as balls."
loss, loss_vjp = _ball.pair(_loss, ("loss",), ("logp",))
loss.__doc__ = "Proximal KL loss: aggregate of −ρ_t·sg(A − β·(k_t + F_t)) (Proximal KL summary; FRPO), as balls."
