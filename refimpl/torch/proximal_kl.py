"""Proximal KL: a per-token importance-corrected update with the future KL cost (PyTorch,
autograd).

Source: the Proximal KL paper (H. Bai, J. Yao, T. Zhang) is not public in our sources; as in
``refimpl.exact.proximal_kl`` this is reconstructed from the summary [proximal-kl-summary] and the
companion paper FRPO (arXiv 2601.10201). For tokens y_t sampled by a behaviour policy μ:

    ρ_t = π(y_t|s_t) / μ(y_t|s_t)                       (gradient through π)
    k_u = log π(y_u|s_u) − log π_ref(y_u|s_u)
    F_t = Σ_{u>t} k_u                                     (future KL cost; optionally bounded)
    ℓ_t = −ρ_t · sg(A − β·(k_t + F_t))                    (sg = .detach())

aggregated over the minibatch's tokens (token mean by default).
"""
from __future__ import annotations

import torch

from lossproof.refimpl import validate
from lossproof.refimpl.torch import _common, grpo

__all__ = ["future_cost", "loss"]

AGGREGATIONS = validate.AGGREGATIONS


def _tokens(logp, ref_logp, mask):
    lp = _common.array("logp", logp)
    validate.rank("logp", tuple(lp.shape), 2)
    validate.nonempty("logp", tuple(lp.shape))
    rp = _common.array("ref_logp", ref_logp)
    validate.same_shape(logp=tuple(lp.shape), ref_logp=tuple(rp.shape))
    m = _common.mask("mask", mask, tuple(lp.shape))
    if not m.any():
        validate.fail("mask", "selects no token")
    return lp, rp, m


@torch.no_grad()
def _future(k: torch.Tensor, m: torch.Tensor, clip, window) -> torch.Tensor:
    """F_t = Σ_{u>t, m_u} k_u (u ≤ t + window when windowed), clipped to [−clip, clip], float64.

    The suffix sums run in float64 for every input dtype: a [B,T] scan is cheap, and a
    float32 scan over T tokens would lose up to T ulps; a window is the difference of two
    suffix sums, so it loses only u64·Σ|k|."""
    mk = torch.where(m, k, torch.zeros_like(k)).to(torch.float64)
    n_rows, n = mk.shape
    # suffix[:, t] = Σ_{u ≥ t} mk_u, with suffix[:, T] = 0
    suffix = torch.cat([mk.flip(1).cumsum(1).flip(1), torch.zeros_like(mk[:, :1])], dim=1)
    cost = suffix[:, 1:]
    if window is not None:
        stop = torch.clamp(torch.arange(n, device=mk.device) + 1 + window, max=n)
        cost = cost - suffix[:, stop]
    if clip is not None:
        cost = torch.clamp(cost, -clip, clip)
    return cost  # float64: the callers round once, to the dtype they need


def future_cost(logp, ref_logp, mask, clip: float | None = None, window: int | None = None):
    """Future KL cost F_t = Σ_{u>t, mask_u=1} (logp_u − ref_logp_u), detached (no gradient).

    Reconstructed from the summary [proximal-kl-summary] of Proximal KL ("un costo limitado que depende
    de palabras posteriores y de un modelo de referencia fijo") and FRPO (arXiv 2601.10201).
    ``clip=c`` (c > 0) clips F_t to [−c, c]; ``window=W`` (W ≥ 1) sums only u in (t, t+W].
    F_t is defined at every position, masked or not (only later tokens are masked out).
    ``logp``, ``ref_logp``, ``mask`` are [B,T]; returns cost[B,T] in the input dtype.
    """
    lp, rp, m = _tokens(logp, ref_logp, mask)
    c = validate.cost_clip(clip, "clip")
    w = validate.future_window(window, "window")
    out = _common.result_dtype(lp, rp)
    work = _common.work_dtype(out)
    k = _common.constant(lp, work) - _common.constant(rp, work)
    return _future(k, m, c, w).to(out)


def loss(logp, behavior_logp, ref_logp, advantages, mask, beta: float = 0.04,
         ratio_clip: float | None = None, ratio_cap: float | None = None,
         future_clip: float | None = None, future_window: int | None = None,
         aggregation: str = "token-mean"):
    """Proximal KL loss: aggregate over tokens of ℓ_t = −ρ_t·sg(A − β·(k_t + F_t)).

    Reconstructed from the summary [proximal-kl-summary] of Proximal KL (Bai, Yao, Zhang) and FRPO
    (arXiv 2601.10201): ρ_t = exp(logp_t − behavior_logp_t) is the ratio to the policy μ that
    sampled the token, k_t = logp_t − ref_logp_t, F_t = future_cost(..., future_clip,
    future_window), A the row's advantage. ``ratio_cap=c``: ρ_t → min(ρ_t, c), zero gradient
    where capped (ρ_t = c passes it); ``ratio_clip=ε`` ∈ (0,1): ℓ_t = −min(ρ_t·X_t,
    clip(ρ_t, 1−ε, 1+ε)·X_t), after the cap. ``aggregation`` has grpo.aggregate's modes
    ('seq-mean-token-sum-norm' divides by the padded T); the paper default is 'token-mean'.
    ``logp``, ``behavior_logp``, ``ref_logp``, ``mask`` are [B,T], ``advantages`` [B].
    Returns the scalar loss; gradient wrt ``logp`` (exactly 0 at masked positions).
    """
    lp, rp, m = _tokens(logp, ref_logp, mask)
    bp = _common.array("behavior_logp", behavior_logp)
    validate.same_shape(logp=tuple(lp.shape), behavior_logp=tuple(bp.shape))
    adv = _common.array("advantages", advantages)
    validate.per_sequence("advantages", tuple(adv.shape), tuple(lp.shape))
    b = validate.regularization_beta(beta)
    eps = validate.ratio_clip(ratio_clip)
    cap = validate.ratio_cap(ratio_cap)
    f_clip = validate.cost_clip(future_clip)
    f_window = validate.future_window(future_window)
    validate.aggregation(aggregation)

    out = _common.result_dtype(lp, bp, rp, adv)
    work = _common.work_dtype(out)
    lp_w = _common.upcast(lp, work)
    k = lp_w.detach() - _common.constant(rp, work)
    future = _future(k, m, f_clip, f_window).to(work)
    x = _common.constant(adv, work)[:, None] - b * (k + future)  # sg(·): built from detached k
    log_ratio = torch.where(m, lp_w - _common.constant(bp, work), torch.zeros_like(lp_w))
    lower, upper = (None, None) if eps is None else (1 - eps, 1 + eps)
    per_token = -grpo._surrogate(log_ratio, x, lower, upper, cap=cap)
    return grpo._aggregate(per_token, m, aggregation, float(lp.shape[1])).to(out)
