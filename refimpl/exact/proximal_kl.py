"""Proximal KL: a per-token importance-corrected update with the future KL cost.

Source. The Proximal KL paper (H. Bai, J. Yao, T. Zhang) is *not public in our sources*: this
module is reconstructed from the summary [proximal-kl-summary] ("corrige
cada palabra según cómo se muestreó y también resta un costo limitado que depende de palabras
posteriores y de un modelo de referencia fijo"; "promedios de tokens por minibatch") and from
the companion paper FRPO (arXiv 2601.10201), which derives the same per-token update. Where the
summary is silent we follow DESIGN §4 and say so in the docstring.

KL-regularised objective over whole responses, J(π) = E_{y~π}[r(y)] − β·KL(π‖π_ref). For tokens
y_t sampled by a behaviour policy μ at prefixes s_t:

    ρ_t = π(y_t|s_t) / μ(y_t|s_t)                       (per-token ratio, gradient through π)
    k_u = log π(y_u|s_u) − log π_ref(y_u|s_u)
    F_t = Σ_{u>t} k_u                                     (future KL cost; optionally bounded)
    ℓ_t = −ρ_t · sg(A − β·(k_t + F_t))                    (sg = stop-gradient)

averaged over the tokens of the minibatch. Its gradient is −ρ_t·(A − β·Σ_{u≥t} k_u)·∇log π(y_t|s_t);
with exact expectations and unbounded F its fixed point is π* ∝ π_ref·exp(r/β) for every μ with
full support (verified exactly on token trees: refimpl/exact/_tree.py, _fixed_point.py).
"""
from __future__ import annotations

import mpmath
import numpy as np

from lossproof.refimpl import validate
from lossproof.refimpl.exact import grpo, mp

__all__ = ["future_cost", "loss", "loss_vjp"]

AGGREGATIONS = validate.AGGREGATIONS


# --------------------------------------------------------------------------- validation

def _exact(raw, checked: float | None):
    """The validated parameter as an mpf (None stays None), keeping every digit of an mpf
    argument (the tabular theorem passes 50-digit values; binary64 arguments convert without
    rounding)."""
    if checked is None:
        return None
    return raw if isinstance(raw, mpmath.mpf) else mp.mpf(checked)


def _tokens(logp, ref_logp, mask):
    lp = mp.array("logp", logp)
    validate.rank("logp", lp.shape, 2)
    validate.nonempty("logp", lp.shape)
    rp = mp.array("ref_logp", ref_logp)
    validate.same_shape(logp=lp.shape, ref_logp=rp.shape)
    m = mp.mask("mask", mask, lp.shape)
    if not any(e == 1 for e in m.flat):
        validate.fail("mask", "selects no token")
    return lp, rp, m


def _future(k, m, clip, window):
    """F_t = Σ_{u>t, m_u=1} k_u (u ≤ t+window when windowed), clipped to [−clip, clip]."""
    B, T = k.shape
    mk = k * m
    cost = mp.zeros((B, T))
    for b in range(B):
        for t in range(T):
            stop = T if window is None else min(T, t + 1 + window)
            cost[b, t] = sum(mk[b, t + 1:stop], mp.ZERO)
    return cost if clip is None else mp.clip(cost, -clip, clip)


# --------------------------------------------------------------------------- future cost

@mp.exact
def future_cost(logp, ref_logp, mask, clip: float | None = None, window: int | None = None):
    """Future KL cost F_t = Σ_{u>t, mask_u=1} (logp_u − ref_logp_u), detached (no gradient).

    Reconstructed from the summary [proximal-kl-summary] of Proximal KL ("un costo limitado que depende de
    palabras posteriores y de un modelo de referencia fijo") and FRPO (arXiv 2601.10201), since the
    paper text is not public in our sources. ``clip=c`` (c > 0) clips F_t to [−c, c]; ``window=W``
    (W ≥ 1) sums only the positions u in (t, t+W]. F_t is defined at every position t, masked or
    not (only later tokens are masked out). Returns cost[B,T].
    """
    lp, rp, m = _tokens(logp, ref_logp, mask)
    c = _exact(clip, validate.cost_clip(clip, "clip"))
    w = validate.future_window(window, "window")
    return _future(lp - rp, m, c, w)


# --------------------------------------------------------------------------- loss

def _prepare(logp, behavior_logp, ref_logp, advantages, mask, beta, ratio_clip, ratio_cap,
             future_clip, future_window, aggregation):
    lp, rp, m = _tokens(logp, ref_logp, mask)
    bp = mp.array("behavior_logp", behavior_logp)
    validate.same_shape(logp=lp.shape, behavior_logp=bp.shape)
    adv = mp.array("advantages", advantages)
    validate.per_sequence("advantages", adv.shape, lp.shape)
    p = {
        "beta": _exact(beta, validate.regularization_beta(beta)),
        "ratio_clip": _exact(ratio_clip, validate.ratio_clip(ratio_clip)),
        "ratio_cap": _exact(ratio_cap, validate.ratio_cap(ratio_cap)),
        "future_clip": _exact(future_clip, validate.cost_clip(future_clip)),
        "future_window": validate.future_window(future_window),
        "aggregation": validate.aggregation(aggregation),
    }
    return lp, bp, rp, adv, m, p


def _per_token(lp, bp, rp, adv, m, p):
    """Per-token loss ℓ_t and its derivative ∂ℓ_t/∂logp_t (X_t is detached)."""
    k = lp - rp
    coef = adv[:, None] - p["beta"] * (k + _future(k, m, p["future_clip"], p["future_window"]))
    rho = mp.exp(lp - bp)
    drho = rho.copy()                       # dρ/dlogp = ρ
    if p["ratio_cap"] is not None:
        cap = p["ratio_cap"]
        capped = np.frompyfunc(lambda r: r > cap, 1, 1)(rho).astype(bool)
        # closed band as in torch.clamp: ρ == cap still passes the gradient
        rho = np.where(capped, cap, rho)
        drho = np.where(capped, mp.ZERO, drho)
    if p["ratio_clip"] is None:
        return -rho * coef, -drho * coef
    eps = p["ratio_clip"]
    lo, hi = 1 - eps, 1 + eps
    rho_c = mp.clip(rho, lo, hi)
    inside = np.frompyfunc(lambda r: lo <= r <= hi, 1, 1)(rho).astype(bool)
    drho_c = np.where(inside, drho, mp.ZERO)
    plain, clipped = rho * coef, rho_c * coef
    value = np.empty(plain.shape, dtype=object)
    grad = np.empty(plain.shape, dtype=object)
    for idx in np.ndindex(plain.shape):
        # PPO's pessimistic min. On a tie both branches have the same gradient (inside the closed
        # band clip passes it; outside, a tie means X_t = 0), so the unclipped one is taken.
        g = drho[idx] if plain[idx] <= clipped[idx] else drho_c[idx]
        value[idx] = -min(plain[idx], clipped[idx])
        grad[idx] = -g * coef[idx]
    return value, grad


@mp.exact
def loss(logp, behavior_logp, ref_logp, advantages, mask, beta: float = 0.04,
         ratio_clip: float | None = None, ratio_cap: float | None = None,
         future_clip: float | None = None, future_window: int | None = None,
         aggregation: str = "token-mean"):
    """Proximal KL loss: aggregate over tokens of ℓ_t = −ρ_t·sg(A − β·(k_t + F_t)).

    Reconstructed from the summary [proximal-kl-summary] of Proximal KL (Bai, Yao, Zhang) and FRPO
    (arXiv 2601.10201), since the paper text is not public in our sources:
    ρ_t = exp(logp_t − behavior_logp_t) is the ratio to the policy μ that sampled the token,
    k_t = logp_t − ref_logp_t, F_t = future_cost(..., future_clip, future_window), A is the
    row's advantage (group-normalised by the caller). Conventions beyond the summary:
    ``ratio_cap=c`` replaces ρ_t by min(ρ_t, c) (zero gradient where capped; ρ_t = c passes it,
    as torch.clamp); ``ratio_clip=ε`` ∈ (0,1) applies PPO's pessimistic clip
    ℓ_t = −min(ρ_t·X_t, clip(ρ_t, 1−ε, 1+ε)·X_t) (after the cap, if both are given).
    ``aggregation`` is grpo.aggregate's mode (fully masked rows leave the sequence means;
    'seq-mean-token-sum-norm' divides by the padded length T, as the catalog gives this objective
    no norm_length); the paper default is 'token-mean' (the summary's per-minibatch token
    averages). Returns the scalar loss.
    """
    lp, bp, rp, adv, m, p = _prepare(logp, behavior_logp, ref_logp, advantages, mask, beta,
                                     ratio_clip, ratio_cap, future_clip, future_window, aggregation)
    value, _ = _per_token(lp, bp, rp, adv, m, p)
    return grpo.aggregate(value, m, mode=p["aggregation"])


@mp.exact
def loss_vjp(cotangent, logp, behavior_logp, ref_logp, advantages, mask, beta: float = 0.04,
             ratio_clip: float | None = None, ratio_cap: float | None = None,
             future_clip: float | None = None, future_window: int | None = None,
             aggregation: str = "token-mean"):
    """Gradient of cotangent·loss with respect to ``logp``: w_t·(−ρ_t·X_t) on the tokens whose
    ratio is neither capped nor clipped (0 on the others), X_t = A − β·(k_t + F_t) held constant
    (stop-gradient), w_t the aggregation weight; unbounded, this is −ρ_t·(A − β·Σ_{u≥t} k_u)·∇log π.

    Reconstructed, like :func:`loss`, from the summary [proximal-kl-summary] of Proximal KL and FRPO
    (arXiv 2601.10201), since the paper text is not public in our sources."""
    lp, bp, rp, adv, m, p = _prepare(logp, behavior_logp, ref_logp, advantages, mask, beta,
                                     ratio_clip, ratio_cap, future_clip, future_window, aggregation)
    ct = mp.array("cotangent", cotangent)
    validate.same_shape(loss=(), cotangent=ct.shape)  # the message names the cotangent
    ct = ct.item()
    value, grad = _per_token(lp, bp, rp, adv, m, p)
    # the aggregate is linear in the per-token values: its VJP is the aggregation weights
    w = grpo.aggregate_vjp(ct, value, m, mode=p["aggregation"])["values"]
    return {"logp": w * grad}
