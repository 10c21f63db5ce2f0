"""Proximal KL over the array API: the future KL cost and the importance-corrected loss.

Source: the Proximal KL paper (H. Bai, J. Yao, T. Zhang) is not public in our sources; the
update is reconstructed, as in ``refimpl.exact.proximal_kl``, from the summary [proximal-kl-summary]
and FRPO (arXiv 2601.10201). For tokens sampled by a behaviour policy μ:

    ρ_t = π(y_t|s_t) / μ(y_t|s_t),   k_u = log π(y_u|s_u) − log π_ref(y_u|s_u),
    F_t = Σ_{u>t} k_u,               ℓ_t = −ρ_t · sg(A − β·(k_t + F_t)),

aggregated over the minibatch's tokens with ``grpo.aggregate``'s modes (its weights are
reused from ``refimpl.arrays.grpo``, as is the PPO clip of ``ratio_clip``).
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.arrays import _xp, grpo

__all__ = ["future_cost", "loss", "loss_vjp"]

AGGREGATIONS = validate.AGGREGATIONS


def _tokens(xp, dt, logp, ref_logp, mask):
    lp = _xp.array(xp, "logp", logp, dt)
    validate.rank("logp", _xp.shape(lp), 2)
    validate.nonempty("logp", _xp.shape(lp))
    rp = _xp.array(xp, "ref_logp", ref_logp, dt)
    validate.same_shape(logp=_xp.shape(lp), ref_logp=_xp.shape(rp))
    m = _xp.mask(xp, "mask", mask, _xp.shape(lp), dt)
    if not bool(xp.any(m == 1)):
        validate.fail("mask", "selects no token")
    return lp, rp, m


def _shift_left(xp, a, j):
    """a[:, t + j] at position t, zero past the end."""
    n_rows, n = a.shape
    if j >= n:
        return xp.zeros_like(a)
    return xp.concat([a[:, j:], xp.zeros((n_rows, j), dtype=a.dtype)], axis=1)


def _future(xp, k, m, clip, window):
    """F_t = Σ_{u>t, m_u=1} k_u (u ≤ t + window when windowed), clipped to [−clip, clip]."""
    mk = _xp.masked(xp, m == 1, k)
    n = k.shape[1]
    if window is None or window >= n - 1:
        # Exclusive suffix sum: the inclusive suffix sum shifted one left (no subtraction,
        # so no cancellation between two large partial sums).
        suffix = xp.flip(xp.cumulative_sum(xp.flip(mk, axis=1), axis=1), axis=1)
        cost = _shift_left(xp, suffix, 1)
    else:
        # Summed directly over the window rather than as a difference of suffix sums,
        # which would carry the rounding error of the whole tail into short windows.
        cost = xp.zeros_like(mk)
        for j in range(1, window + 1):
            cost = cost + _shift_left(xp, mk, j)
    return cost if clip is None else xp.clip(cost, -clip, clip)


def future_cost(logp, ref_logp, mask, clip: float | None = None, window: int | None = None):
    """Future KL cost F_t = Σ_{u>t, mask_u=1} (logp_u − ref_logp_u), detached (no gradient).

    Reconstructed from the summary [proximal-kl-summary] of Proximal KL and FRPO (arXiv 2601.10201).
    ``clip=c`` clips F_t to [−c, c]; ``window=W`` sums only u in (t, t+W]. F_t is defined at
    every position t, masked or not. Returns cost[B,T].
    """
    xp = _xp.namespace(logp, ref_logp, mask)
    dt = _xp.float_dtype(xp, logp=logp, ref_logp=ref_logp)
    lp, rp, m = _tokens(xp, dt, logp, ref_logp, mask)
    c = validate.cost_clip(clip, "clip")
    w = validate.future_window(window, "window")
    return _future(xp, lp - rp, m, c, w)


def _prepare(logp, behavior_logp, ref_logp, advantages, mask, beta, ratio_clip, ratio_cap,
             future_clip, future_window, aggregation):
    xp = _xp.namespace(logp, behavior_logp, ref_logp, advantages, mask)
    dt = _xp.float_dtype(xp, logp=logp, behavior_logp=behavior_logp, ref_logp=ref_logp,
                         advantages=advantages)
    lp, rp, m = _tokens(xp, dt, logp, ref_logp, mask)
    bp = _xp.array(xp, "behavior_logp", behavior_logp, dt)
    validate.same_shape(logp=_xp.shape(lp), behavior_logp=_xp.shape(bp))
    adv = _xp.array(xp, "advantages", advantages, dt)
    validate.per_sequence("advantages", _xp.shape(adv), _xp.shape(lp))
    p = {
        "beta": validate.regularization_beta(beta),
        "ratio_clip": validate.ratio_clip(ratio_clip),
        "ratio_cap": validate.ratio_cap(ratio_cap),
        "future_clip": validate.cost_clip(future_clip),
        "future_window": validate.future_window(future_window),
        "aggregation": validate.aggregation(aggregation),
    }
    return xp, dt, lp, bp, rp, adv, m, p


def _per_token(xp, lp, bp, rp, adv, m, p):
    """Per-token loss ℓ_t and ∂ℓ_t/∂logp_t (the coefficient X_t is detached)."""
    k = lp - rp
    coef = _xp.constant(adv[:, None] - p["beta"] * (k + _future(xp, k, m, p["future_clip"], p["future_window"])))
    # Padding may hold any finite numbers: exp() of their difference is not formed.
    rho = xp.exp(_xp.masked(xp, m == 1, lp - bp))
    drho = rho                                  # dρ/dlogp = ρ
    if p["ratio_cap"] is not None:
        cap = p["ratio_cap"]
        capped = rho > cap  # ρ == cap passes the gradient (closed band, as torch.clamp)
        rho = xp.where(capped, xp.zeros_like(rho) + cap, rho)
        drho = _xp.masked(xp, ~capped, drho)
    if p["ratio_clip"] is None:
        return -rho * coef, -drho * coef
    eps = p["ratio_clip"]
    # PPO's pessimistic min with the advantage replaced by X_t: grpo's surrogate, whose
    # active-branch mask carries dC/dρ = X_t.
    value, active = grpo.surrogate(xp, rho, coef, 1 - eps, 1 + eps, None)
    return -value, -_xp.masked(xp, active, drho * coef)


def loss(logp, behavior_logp, ref_logp, advantages, mask, beta: float = 0.04,
         ratio_clip: float | None = None, ratio_cap: float | None = None,
         future_clip: float | None = None, future_window: int | None = None,
         aggregation: str = "token-mean"):
    """Proximal KL loss: aggregate over tokens of ℓ_t = −ρ_t·sg(A − β·(k_t + F_t)).

    Reconstructed from the summary [proximal-kl-summary] of Proximal KL (Bai, Yao, Zhang) and FRPO
    (arXiv 2601.10201). ``ratio_cap=c``: ρ_t → min(ρ_t, c) (zero gradient where capped);
    ``ratio_clip=ε`` ∈ (0,1): ℓ_t = −min(ρ_t·X_t, clip(ρ_t, 1−ε, 1+ε)·X_t) after the cap.
    ``aggregation`` has grpo.aggregate's modes with L = T; paper default 'token-mean'.
    Returns the scalar loss.
    """
    xp, _, lp, bp, rp, adv, m, p = _prepare(logp, behavior_logp, ref_logp, advantages, mask, beta,
                                            ratio_clip, ratio_cap, future_clip, future_window,
                                            aggregation)
    value, _ = _per_token(xp, lp, bp, rp, adv, m, p)
    return grpo.aggregate_value(xp, value, m, p["aggregation"], float(lp.shape[1]))


def loss_vjp(cotangent, logp, behavior_logp, ref_logp, advantages, mask, beta: float = 0.04,
             ratio_clip: float | None = None, ratio_cap: float | None = None,
             future_clip: float | None = None, future_window: int | None = None,
             aggregation: str = "token-mean"):
    """Gradient of cotangent·loss with respect to ``logp``: w_t·(−ρ_t·X_t) on tokens whose
    ratio is neither capped nor clipped, X_t held constant (stop-gradient), w_t the
    aggregation weight. Source as for :func:`loss`."""
    xp, dt, lp, bp, rp, adv, m, p = _prepare(logp, behavior_logp, ref_logp, advantages, mask, beta,
                                             ratio_clip, ratio_cap, future_clip, future_window,
                                             aggregation)
    ct = _xp.array(xp, "cotangent", cotangent, dt)
    validate.same_shape(loss=(), cotangent=_xp.shape(ct))  # the message names the cotangent
    _, grad = _per_token(xp, lp, bp, rp, adv, m, p)
    return {"logp": ct * grpo.aggregate_weights(xp, m, p["aggregation"], float(lp.shape[1])) * grad}
