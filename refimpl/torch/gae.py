"""Generalized advantage estimation and KL-shaped token rewards (PyTorch; detached, no
gradients). Formulas, papers and conventions: ``refimpl.exact.gae``; GAE (Schulman et al. 2016,
arXiv 1506.02438) eqs. 10 and 16, backwards over the tokens for all rows at once.
"""
from __future__ import annotations

import torch

from lossproof.refimpl import validate
from lossproof.refimpl.torch import _common, kl

__all__ = ["advantages", "kl_rewards"]


def _rows(name, x, shape=None):
    a = _common.array(name, x)
    validate.rank(name, tuple(a.shape), 2)
    validate.nonempty(name, tuple(a.shape))
    if shape is not None:
        validate.same_shape(**{"rewards": shape, name: tuple(a.shape)})
    return a


def _gae(r, v, on, gamma, lam, masked_tokens):
    following = torch.zeros_like(r[:, 0])
    next_value = torch.zeros_like(r[:, 0])
    adv = torch.zeros_like(r)
    for t in range(r.shape[1] - 1, -1, -1):
        here = on[:, t]
        rt = torch.where(here, r[:, t], 0.0)
        vt = torch.where(here, v[:, t], 0.0)
        step = rt + gamma * next_value - vt + gamma * lam * following
        if masked_tokens == "skip":
            # a masked token is not a time step: the next valid token's value and Â carry over it
            following = torch.where(here, step, following)
            next_value = torch.where(here, vt, next_value)
        else:
            following, next_value = step, vt
        adv[:, t] = torch.where(here, following, 0.0)
    return adv


def _whiten(adv, on, ddof, keep_mean, eps=0.0):
    n = int(on.sum())
    if eps:   # TRL's whiten (refimpl.exact.gae): μ and σ² over N + ε, the scale rsqrt(σ² + ε)
        mean = adv[on].sum() / (n + eps)
        d = torch.where(on, adv - mean, 0.0)
        d = torch.zeros_like(d) if n == ddof else d / torch.sqrt((d * d).sum() / (n + eps) * (n / (n - ddof)) + eps)
        return torch.where(on, d + mean, 0.0) if keep_mean else d
    mean = adv[on].sum() / n
    d = torch.where(on, adv - mean, 0.0)
    d = torch.where(on, d - d.sum() / n, 0.0)   # removes the first mean's rounding error
    square = (d * d).sum()
    if n == 1 or float(square) == 0.0:
        d = torch.zeros_like(d)
    else:
        d = d / torch.sqrt(square / (n - ddof))
    return torch.where(on, d + mean, 0.0) if keep_mean else d


@torch.no_grad()
def advantages(rewards, values, mask, gamma: float = 1.0, lam: float = 1.0, whiten: str = "none",
               std_ddof: int = 0, masked_tokens: str = "skip", whiten_eps: float = 0.0):
    """GAE advantages and returns (arXiv 1506.02438 eqs. 10, 16); see ``refimpl.exact.gae``.
    Returns {"advantages"[B,T], "returns"[B,T]} in the inputs' dtype (0 at masked tokens)."""
    r = _rows("rewards", rewards)
    v = _rows("values", values, tuple(r.shape))
    on = _common.mask("mask", mask, tuple(r.shape))
    g = validate.discount("gamma", gamma)
    lm = validate.discount("lam", lam)
    validate.whitening(whiten)
    ddof = validate.std_ddof(std_ddof)
    validate.masked_tokens(masked_tokens)
    eps = validate.whiten_eps(whiten_eps, whiten)
    if not bool(on.any()):
        validate.fail("mask", "selects no token")
    out = _common.result_dtype(r, v)
    work = _common.work_dtype(out)
    r, v = _common.constant(r, work), _common.constant(v, work)
    adv = _gae(r, v, on, g, lm, masked_tokens)
    returns = torch.where(on, adv + v, 0.0)
    if whiten != "none":
        adv = _whiten(adv, on, ddof, whiten == "keep-mean", eps)
    return {"advantages": adv.to(out), "returns": returns.to(out)}


@torch.no_grad()
def kl_rewards(scores, logp, ref_logp, mask, beta: float | None = None, kind: str = "k1",
               clamp: float | None = None):
    """r_t = score·[t = last valid token] − β·k_t, 0 at masked tokens (verl 0.9.1
    apply_kl_penalty; OpenRLHF 0.11.2 compute_reward); see ``refimpl.exact.gae``."""
    s = _common.array("scores", scores)
    validate.rank("scores", tuple(s.shape), 1)
    lp = _rows("logp", logp)
    rp = _common.array("ref_logp", ref_logp)
    validate.same_shape(logp=tuple(lp.shape), ref_logp=tuple(rp.shape))
    validate.per_sequence("scores", tuple(s.shape), tuple(lp.shape))
    on = _common.mask("mask", mask, tuple(lp.shape))
    b = validate.kl_penalty_beta(beta)
    validate.reward_kl_kind(kind)
    c = validate.kl_clamp(clamp)
    validate.every_row_has_a_token("mask", [[bool(x)] for x in on.any(dim=1)])
    out = _common.result_dtype(s, lp, rp)
    work = _common.work_dtype(out)
    s, lp, rp = (_common.constant(x, work) for x in (s, lp, rp))
    n = lp.shape[1]
    last = n - 1 - on.flip(1).to(torch.int64).argmax(dim=1)
    at_last = torch.arange(n, device=lp.device)[None, :] == last[:, None]
    score = torch.where(at_last, s[:, None].expand_as(lp), 0.0)
    return {"rewards": torch.where(on, score - b * kl.clamped(rp - lp, kind, c), 0.0).to(out)}
