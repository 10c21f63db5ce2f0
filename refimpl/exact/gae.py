"""Generalized advantage estimation and KL-shaped token rewards (no gradients: both feed the
policy loss as detached data).

Sources: Schulman et al. 2016, *High-Dimensional Continuous Control Using Generalized Advantage
Estimation* (arXiv 1506.02438) §3 eqs. 11–16 — δ_t = r_t + γ·V(s_{t+1}) − V(s_t) (eq. 10) and
Â_t = Σ_l (γλ)^l δ_{t+l} (eq. 16), computed backwards as Â_t = δ_t + γλ·Â_{t+1}; the return
target V̂_t = Â_t + V(s_t) (the λ-return). (Equation numbers as the libraries and the brief cite
them; the PDF was not re-read here. The formulas are checked against the explicit sum in
tests/independent/test_gae_values.py and the λ = 0 / λ = 1 identities in tests/exact/test_gae.py.) KL in the reward: Ziegler et al. 2019 (arXiv
1909.08593) §2 and Stiennon et al. 2020 (arXiv 2009.01325) §3.4, R = r − β·log(π/π_ref), spread
per token as in verl 0.9.1 ``apply_kl_penalty`` and OpenRLHF 0.11.2 ``compute_reward``:
r_t = score·[t = last valid token] − β·k_t. (Section numbers of the two RLHF papers are cited
from memory, not re-read here.)
"""
from __future__ import annotations

import mpmath
import numpy as np

from lossproof.refimpl import validate
from lossproof.refimpl.exact import kl, mp

__all__ = ["advantages", "kl_rewards"]


def _tokens(name, x, shape=None):
    a = mp.array(name, x)
    validate.rank(name, a.shape, 2)
    validate.nonempty(name, a.shape)
    if shape is not None:
        validate.same_shape(**{"rewards": shape, name: a.shape})
    return a


def _gae_row(rewards, values, on, gamma, lam, masked_tokens):
    """Â_t (eq. 16, backwards) for one row; 0 at masked tokens."""
    n = len(rewards)
    adv = [mp.ZERO] * n
    if masked_tokens == "skip":
        # a masked token is not a time step: V(s_{t+1}) is the value of the next valid token
        steps = [t for t in range(n) if on[t]]
        following, next_value = mp.ZERO, mp.ZERO
        for t in reversed(steps):
            delta = rewards[t] + gamma * next_value - values[t]
            following = delta + gamma * lam * following
            adv[t], next_value = following, values[t]
        return adv
    # a masked token is a step with reward 0 and value 0 (OpenRLHF)
    following, next_value = mp.ZERO, mp.ZERO
    for t in reversed(range(n)):
        r, v = (rewards[t], values[t]) if on[t] else (mp.ZERO, mp.ZERO)
        following = r + gamma * next_value - v + gamma * lam * following
        adv[t], next_value = (following if on[t] else mp.ZERO), v
    return adv


def _whiten(adv, on_rows, ddof, keep_mean, eps=mp.ZERO):
    """(A − μ)/σ over the valid tokens of the whole batch (μ restored with ``keep_mean``); a
    batch with one valid token, or whose valid advantages are all equal, has σ = 0: its
    centred part is 0. With ``eps`` (whiten_eps) ε > 0, TRL's whiten: μ = Σ A/(N + ε),
    σ² = Σ (A − μ)²/(N + ε)·N/(N − ddof), (A − μ)/√(σ² + ε); only N = ddof is degenerate."""
    valid = [a for row, on in zip(adv, on_rows) for a, o in zip(row, on) if o]
    n = len(valid)
    mean = mpmath.fsum(valid) / (n + eps)
    square = mpmath.fsum((a - mean) ** 2 for a in valid)
    if eps:
        degenerate = n == ddof
        std = None if degenerate else mpmath.sqrt(square / (n + eps) * n / (n - ddof) + eps)
    else:
        degenerate = n == 1 or square == 0
        std = None if degenerate else mpmath.sqrt(square / (n - ddof))
    out = []
    for row, on in zip(adv, on_rows):
        centred = [mp.ZERO if degenerate else (a - mean) / std for a in row]
        out.append([(c + mean if keep_mean else c) if o else mp.ZERO for c, o in zip(centred, on)])
    return out


@mp.exact
def advantages(rewards, values, mask, gamma: float = 1.0, lam: float = 1.0, whiten: str = "none",
               std_ddof: int = 0, masked_tokens: str = "skip", whiten_eps: float = 0.0):
    """GAE advantages Â_t = Σ_l (γλ)^l δ_{t+l}, δ_t = r_t + γ·V_{t+1} − V_t (arXiv 1506.02438
    eqs. 10, 16; V after the last step is 0) and returns V̂_t = Â_t + V_t, per row of token
    rewards and values; no gradient.

    ``masked_tokens`` (mask 0): 'skip' — not a time step: δ and Â skip it and V_{t+1} is the
    value of the next valid token (verl 0.9.1 compute_gae_advantage_return, for observation
    tokens of multi-turn rollouts); 'zero' — a step with reward 0 and value 0 (OpenRLHF 0.11.2
    get_advantages_and_returns masks values and rewards). Both agree when the masked tokens all
    trail the valid ones. Outputs are 0 at masked tokens.

    ``whiten`` (after the returns are formed, so they stay unwhitened): 'none' (the paper);
    'centred' — (Â − μ)/σ with μ and σ over the valid tokens of the whole batch (verl
    masked_whiten shift_mean=True, ddof 1; OpenRLHF, ddof 0); 'keep-mean' — (Â − μ)/σ + μ (verl
    masked_whiten shift_mean=False). ``std_ddof`` 0: σ² = Σ(Â − μ)²/N; 1: /(N − 1). ``whiten_eps``
    ε: the whitening of TRL's core.py whiten, which verl 0.9.1 masked_whiten and torchtune's whiten
    copy with ε = 1e-8 — μ = ΣÂ/(N + ε), σ² = Σ(Â − μ)²/(N + ε)·N/(N − ddof), (Â − μ)/√(σ² + ε).
    Returns {"advantages"[B,T], "returns"[B,T]}.
    """
    r = _tokens("rewards", rewards)
    v = _tokens("values", values, r.shape)
    m = mp.mask("mask", mask, r.shape)
    g = mp.mpf(validate.discount("gamma", gamma))
    lm = mp.mpf(validate.discount("lam", lam))
    validate.whitening(whiten)
    ddof = validate.std_ddof(std_ddof)
    validate.masked_tokens(masked_tokens)
    eps = mp.mpf(validate.whiten_eps(whiten_eps, whiten))
    on_rows = [[x == 1 for x in row] for row in m]
    if not any(any(row) for row in on_rows):
        validate.fail("mask", "selects no token")
    adv = [_gae_row(list(rr), list(vv), on, g, lm, masked_tokens) for rr, vv, on in zip(r, v, on_rows)]
    returns = [[a + x if o else mp.ZERO for a, x, o in zip(row, vv, on)] for row, vv, on in zip(adv, v, on_rows)]
    if whiten != "none":
        adv = _whiten(adv, on_rows, ddof, whiten == "keep-mean", eps)
    return {"advantages": np.array(adv, dtype=object), "returns": np.array(returns, dtype=object)}


@mp.exact
def kl_rewards(scores, logp, ref_logp, mask, beta: float | None = None, kind: str = "k1",
               clamp: float | None = None):
    """Per-token rewards r_t = score·[t = last valid token] − β·k_t·m_t, k_t the KL estimator
    ``kind`` of log r_t = ref_logp_t − logp_t (kl.estimator: k1 = −log r, the classic RLHF penalty
    log π/π_ref; k2; k3), clipped to [−clamp, clamp] if ``clamp``; 0 at masked tokens. ``logp``
    are the log-probabilities of the policy that sampled (verl: old_log_probs). No gradient.
    Returns {"rewards"[B,T]}.
    """
    s = mp.array("scores", scores)
    validate.rank("scores", s.shape, 1)
    lp = _tokens("logp", logp)
    rp = mp.array("ref_logp", ref_logp)
    validate.same_shape(logp=lp.shape, ref_logp=rp.shape)
    validate.per_sequence("scores", s.shape, lp.shape)
    m = mp.mask("mask", mask, lp.shape)
    b = mp.mpf(validate.kl_penalty_beta(beta))
    validate.reward_kl_kind(kind)
    c = validate.kl_clamp(clamp)
    on_rows = [[x == 1 for x in row] for row in m]
    validate.every_row_has_a_token("mask", on_rows)
    k = kl.clamped(rp - lp, kind, None if c is None else mp.mpf(c))
    out = mp.zeros(lp.shape)
    for i, on in enumerate(on_rows):
        last = max(t for t, o in enumerate(on) if o)
        for t, o in enumerate(on):
            if o:
                out[i, t] = (s[i] if t == last else mp.ZERO) - b * k[i, t]
    return {"rewards": out}
