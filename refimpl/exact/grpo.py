"""Group Relative Policy Optimization: advantages, clipped surrogate, aggregation, loss.

Sources: DeepSeekMath (Shao et al. 2024) §4.1.1 eq. 3–4 (objective with the k3 KL penalty)
and §4.1.2 (outcome-supervised group advantages); PPO (Schulman et al. 2017) eq. 7 (clipped
surrogate); DAPO (Yu et al. 2025) §3.1 clip-higher, §3.2 dynamic sampling, §3.3 token-level
loss; Dr. GRPO (Liu et al. 2025) §3 (no std scaling, constant length normaliser); dual clip
(Ye et al. 2020); [reading-math-3] §GRPO (worked numbers).

Per token t of response i, with advantage A_i of its response:

    ρ_t = exp(logp_t − old_logp_t),
    C_t = min(ρ_t·A_i, clip(ρ_t, 1 − ε_low, 1 + ε_high)·A_i)     (maximised)
    ℓ_t = −C_t + β·w_t·KL_t,   loss = aggregate(ℓ, mask)          (minimised)
"""
from __future__ import annotations

import mpmath
import numpy as np

from refimpl import validate
from refimpl.exact import kl, mp

__all__ = ["advantages", "clip", "clip_vjp", "aggregate", "aggregate_vjp", "loss", "loss_vjp"]

SCALES = validate.SCALES
DEGENERATE = validate.DEGENERATE
MODES = validate.AGGREGATIONS


def _bool(a) -> np.ndarray:
    return np.asarray(a, dtype=object).astype(bool)


# ----------------------------------------------------------------------------- advantages

def _std(rewards, ddof: int):
    """Standard deviation of all entries (ddof 0: population, 1: sample)."""
    flat = list(rewards.flat)
    mean = mpmath.fsum(flat) / len(flat)
    return mpmath.sqrt(mpmath.fsum((x - mean) ** 2 for x in flat) / (len(flat) - ddof))


def _constant(rewards) -> bool:
    # "std exactly 0" decided on the rewards themselves, not on a rounded std.
    flat = list(rewards.flat)
    return all(x == flat[0] for x in flat)


@mp.exact
def advantages(rewards, scale: str = "group", std_ddof: int = 0, eps: float = 0.0,
               degenerate: str = "zero"):
    """Group-relative advantages A_ij = (r_ij − mean_j r_ij) / (std + eps); no gradient.

    DeepSeekMath §4.1.2 (``scale='group'``, std over the group's G rewards); TRL
    ``scale_rewards='batch'`` (std over all B·G rewards, mean still per group); Dr. GRPO §3
    (``scale='none'``: A = r − mean). ``std_ddof`` 0 is the population std of [reading-math-3]
    ((0,1,1,0) → mean 0.5, std 0.5 → (−1,1,1,−1)).

    A group is degenerate when G == 1 or its rewards are all equal (for 'batch': B·G == 1
    or all B·G rewards equal; for 'none': never). ``degenerate``:
    'zero' ([reading-math-3]: "producing zero advantages") → A = 0, keep = 1;
    'drop' (DAPO §3.2 dynamic sampling) → A = 0, keep = 0;
    'raw' (verl compute_grpo_outcome_advantage: a singleton group gets mean 0 and std 1)
    → a singleton group gets A = r/(1 + eps) ('group', 'batch') or A = r ('none'), a
    zero-std group with G > 1 gets A = 0.
    Returns {"advantages"[B,G], "keep"[B] (1 or 0)}.
    """
    r = mp.array("rewards", rewards)
    validate.rank("rewards", r.shape, 2)
    validate.nonempty("rewards", r.shape)
    validate.advantage_scale(scale)
    ddof = validate.std_ddof(std_ddof)
    e = mp.mpf(validate.advantage_eps(eps))
    validate.degenerate(degenerate)
    n_groups, g = r.shape

    centred = r - np.array([mpmath.fsum(row) / g for row in r], dtype=object)[:, None]
    if scale == "group":
        degen = [g == 1 or _constant(row) for row in r]
        divisor = [None if d else _std(row, ddof) + e for row, d in zip(r, degen)]
    elif scale == "batch":
        batch_degen = r.size == 1 or _constant(r)
        degen = [batch_degen] * n_groups
        divisor = [None if batch_degen else _std(r, ddof) + e] * n_groups
    else:
        degen = [False] * n_groups
        divisor = [mp.ONE] * n_groups

    adv = mp.zeros(r.shape)
    keep = mp.full((n_groups,), 1)
    for i in range(n_groups):
        if degen[i]:
            if degenerate == "drop":
                keep[i] = mp.ZERO
        else:
            adv[i] = centred[i] / divisor[i]
    if degenerate == "raw" and g == 1:
        adv = r.copy() if scale == "none" else r / (1 + e)
    return {"advantages": adv, "keep": keep}


# ----------------------------------------------------------------------------- clipped surrogate

def _clip_params(eps_low, eps_high, dual_clip):
    """(1 − ε_low, 1 + ε_high, c) as mpf, formed exactly from the binary64 arguments."""
    lo, hi, c = validate.clip_band(eps_low, eps_high, dual_clip)
    return 1 - mp.mpf(lo), 1 + mp.mpf(hi), None if c is None else mp.mpf(c)


def _surrogate(rho, adv, lower, upper, dual):
    """The clipped objective C and its derivative dC/dlogp (= ρA on the active unclipped
    branch, else 0), elementwise with ``adv`` broadcast against ``rho``."""
    unclipped = rho * adv
    clipped = mp.clip(rho, lower, upper) * adv
    active = _bool(unclipped <= clipped)  # ties take the unclipped branch
    value = np.where(active, unclipped, clipped)
    if dual is not None:
        # Ye et al. 2020: for A < 0 the objective is bounded below by c·A (flat there).
        floor = dual * adv
        dual_on = _bool((adv < 0) & (floor > value))
        value = np.where(dual_on, floor, value)
        active = active & ~dual_on
    return value, np.where(active, unclipped, mp.ZERO)


def _clip_inputs(logp, old_logp, advantages):
    lp = mp.array("logp", logp)
    old = mp.array("old_logp", old_logp)
    adv = mp.array("advantages", advantages)
    validate.same_shape(logp=lp.shape, old_logp=old.shape, advantages=adv.shape)
    return lp, old, adv


@mp.exact
def clip(logp, old_logp, advantages, eps_low: float = 0.2, eps_high: float | None = None,
         dual_clip: float | None = None):
    """PPO/GRPO clipped surrogate C = min(ρA, clip(ρ, 1 − ε_low, 1 + ε_high)·A), ρ = π/π_old.

    PPO (Schulman et al. 2017) eq. 7; DeepSeekMath §4.1.1 eq. 3; DAPO §3.1 clip-higher
    (``eps_high`` ≠ ``eps_low``; None means symmetric); dual clip (Ye et al. 2020, as verl's
    clip_ratio_c): where A < 0, C = max(C, c·A). [reading-math-3]: A = 1, ρ = 1.5 → 1.2;
    A = −1, ρ = 0.5 → −0.8. Returns objective (same shape as ``logp``), to be maximised.
    """
    lp, old, adv = _clip_inputs(logp, old_logp, advantages)
    lower, upper, dual = _clip_params(eps_low, eps_high, dual_clip)
    value, _ = _surrogate(mp.exp(lp - old), adv, lower, upper, dual)
    return value


@mp.exact
def clip_vjp(cotangent, logp, old_logp, advantages, eps_low: float = 0.2,
             eps_high: float | None = None, dual_clip: float | None = None):
    """Gradient of Σ cotangent·C with respect to ``logp`` (PPO eq. 7): ρA where the unclipped
    branch is active (ties included), 0 where the clipped branch is strictly smaller or the
    dual clip is active."""
    lp, old, adv = _clip_inputs(logp, old_logp, advantages)
    lower, upper, dual = _clip_params(eps_low, eps_high, dual_clip)
    ct = mp.array("cotangent", cotangent)
    validate.same_shape(logp=lp.shape, cotangent=ct.shape)
    _, dlogp = _surrogate(mp.exp(lp - old), adv, lower, upper, dual)
    return {"logp": ct * dlogp}


# ----------------------------------------------------------------------------- aggregation

def _aggregate_params(mode_name, mode, norm_length, length):
    validate.aggregation(mode, mode_name)
    norm = validate.norm_length(norm_length)
    return mp.mpf(length if norm is None else norm)


def _lengths(m):
    lengths = np.array([mpmath.fsum(row) for row in m], dtype=object)
    if all(n == 0 for n in lengths):
        validate.fail("mask", "selects no token")
    return lengths


def _aggregate_value(values, m, mode, norm):
    """Masked reduction, written as the papers write it; rows without tokens leave the seq means."""
    lengths = _lengths(m)
    sums = [mpmath.fsum(row) for row in m * values]
    if mode == "token-mean":  # DAPO §3.3
        return mpmath.fsum(sums) / mpmath.fsum(lengths)
    rows = [i for i, n in enumerate(lengths) if n > 0]
    if mode == "seq-mean-token-mean":  # DeepSeekMath eq. 3: 1/G Σ_i 1/|o_i| Σ_t
        return mpmath.fsum(sums[i] / lengths[i] for i in rows) / len(rows)
    seq_sum = mpmath.fsum(sums[i] for i in rows) / len(rows)
    return seq_sum if mode == "seq-mean-token-sum" else seq_sum / norm  # Dr. GRPO §3


def _aggregate_weights(m, mode, norm):
    """W with aggregate(values) = Σ W·values, i.e. the gradient of the aggregate."""
    lengths = _lengths(m)
    if mode == "token-mean":
        return m / mpmath.fsum(lengths)
    n_rows = sum(1 for n in lengths if n > 0)
    if mode == "seq-mean-token-mean":
        per_row = np.array([1 / (n * n_rows) if n > 0 else mp.ZERO for n in lengths], dtype=object)
        return m * per_row[:, None]
    return m / (n_rows if mode == "seq-mean-token-sum" else n_rows * norm)


def _scalar_cotangent(cotangent):
    # Kept as given (an mpf cotangent is not rounded to binary64).
    ct = mp.array("cotangent", cotangent)
    if ct.size != 1:
        validate.fail("cotangent", f"expected a scalar for a scalar output, got shape {ct.shape}")
    return ct.item()


def _aggregate_inputs(values, mask):
    v = mp.array("values", values)
    validate.rank("values", v.shape, 2)
    return v, mp.mask("mask", mask, v.shape)


@mp.exact
def aggregate(values, mask, mode: str = "seq-mean-token-mean", norm_length: float | None = None):
    """Masked reduction of per-token values [B,T] to a scalar.

    ``seq-mean-token-mean``: DeepSeekMath §4.1.1 eq. 3 (1/G Σ_i 1/|o_i| Σ_t);
    ``token-mean``: DAPO §3.3 token-level loss (Σ m·v / Σ m); ``seq-mean-token-sum``: mean over
    rows of Σ_t m·v; ``seq-mean-token-sum-norm``: Dr. GRPO §3, that mean divided by a constant
    L = ``norm_length`` (default: the padded length T). Rows without tokens are left out of the
    sequence means (as verl 0.9.1 agg_loss does). A mask with no token is rejected.
    """
    v, m = _aggregate_inputs(values, mask)
    norm = _aggregate_params("mode", mode, norm_length, v.shape[1])
    return _aggregate_value(v, m, mode, norm)


@mp.exact
def aggregate_vjp(cotangent, values, mask, mode: str = "seq-mean-token-mean",
                  norm_length: float | None = None):
    """Gradient of cotangent·aggregate with respect to ``values`` (the aggregate is linear in
    them: DeepSeekMath eq. 3, DAPO §3.3, Dr. GRPO §3 weights); zero at masked positions."""
    v, m = _aggregate_inputs(values, mask)
    norm = _aggregate_params("mode", mode, norm_length, v.shape[1])
    ct = _scalar_cotangent(cotangent)
    return {"values": ct * _aggregate_weights(m, mode, norm)}


# ----------------------------------------------------------------------------- loss

def _loss_inputs(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, dual_clip,
                 beta, kl_kind, kl_clamp, kl_ratio_weight, aggregation, norm_length,
                 ratio_level="token", policy_loss="ppo-clip", cispo_clip="upper", sapo_tau_pos=1.0,
                 sapo_tau_neg=1.05):
    lp = mp.array("logp", logp)
    validate.rank("logp", lp.shape, 2)
    old = mp.array("old_logp", old_logp)
    ref = mp.array("ref_logp", ref_logp)
    validate.same_shape(logp=lp.shape, old_logp=old.shape, ref_logp=ref.shape)
    adv = mp.array("advantages", advantages)
    validate.per_sequence("advantages", adv.shape, lp.shape)
    m = mp.mask("mask", mask, lp.shape)
    clip_params = _clip_params(eps_low, eps_high, dual_clip)
    b = mp.mpf(validate.kl_penalty_beta(beta))
    validate.kl_kind(kl_kind, "kl_kind")
    c = validate.kl_clamp(kl_clamp, "kl_clamp")
    validate.kl_ratio_weight(kl_ratio_weight)
    validate.policy_loss(policy_loss, validate.ratio_level(ratio_level), dual_clip, kl_ratio_weight)
    norm = _aggregate_params("aggregation", aggregation, norm_length, lp.shape[1])
    token_policy = _token_policy(policy_loss, clip_params, eps_low, eps_high, cispo_clip, sapo_tau_pos, sapo_tau_neg)
    return lp, old, ref, adv, m, clip_params, b, (None if c is None else mp.mpf(c)), norm, token_policy


def _token_policy(policy_loss, clip_params, eps_low, eps_high, cispo_clip, tau_pos, tau_neg):
    """The per-token policy term's kind and constants: ('ppo-clip', clip params),
    ('cispo', (lower or None, upper)) or ('sapo', (τ_pos, τ_neg)), all exact mpf."""
    validate.cispo_clip(cispo_clip, policy_loss, eps_low, eps_high)
    taus = (mp.mpf(validate.sapo_temperature("sapo_tau_pos", tau_pos)),
            mp.mpf(validate.sapo_temperature("sapo_tau_neg", tau_neg)))
    if policy_loss == "cispo":
        lo, hi, _ = validate.clip_band(eps_low, eps_high, None)
        if cispo_clip == "raw-upper":
            return "cispo", (None, mp.mpf(hi))
        return "cispo", (1 - mp.mpf(lo) if cispo_clip == "both" else None, 1 + mp.mpf(hi))
    if policy_loss == "sapo":
        return "sapo", taus
    return "ppo-clip", clip_params


def _cispo(lp, rho, adv, lower, upper):
    """CISPO (MiniMax-M1, arXiv 2506.13585, §3.1 eq. 4–5): the objective sg(ŵ_t)·A_i·logπ_t with
    ŵ_t = clip(ρ_t, lower, upper) (lower None: no lower bound), and its derivative ŵ_t·A_i in
    logπ_t (the weight is detached, so the clip passes no gradient of its own)."""
    weight = np.minimum(rho, upper) if lower is None else mp.clip(rho, lower, upper)
    return weight * adv * lp, weight * adv


def _sapo(rho, adv, tau_pos, tau_neg):
    """SAPO (Gao et al. 2025, arXiv 2511.20347, §3): the objective f_t·A_i with the soft gate
    f_t = σ(τ(ρ_t − 1))·4/τ, τ = τ_pos where A_i > 0, else τ_neg; df/dlogπ_t =
    4·ρ_t·σ(x)·σ(−x) at x = τ(ρ_t − 1) (= 1 at ρ = 1: the on-policy gradient is the plain
    policy gradient)."""
    tau = np.where(_bool(adv > 0), tau_pos, tau_neg)
    x = tau * (rho - 1)
    gate = mp.sigmoid(x)
    return gate * 4 / tau * adv, 4 * rho * gate * mp.sigmoid(-x) * adv


def _per_token_loss(lp, old, ref, adv, m, clip_params, beta, kl_kind, kl_clamp, kl_ratio_weight,
                    token_policy=("ppo-clip", None)):
    """ℓ_t = −C_t + β·w_t·KL_t and dℓ_t/dlogp_t, from the pieces of ``clip`` and ``kl.estimator``;
    C_t is PPO's clipped surrogate, CISPO's or SAPO's term (``token_policy``)."""
    # Masked-out positions may hold any finite numbers; a neutral 0 there keeps exp() of an
    # arbitrary difference from being formed. Their aggregate weight is 0 either way.
    on = _bool(m == 1)
    log_ratio = np.where(on, lp - old, mp.ZERO)
    log_r = np.where(on, ref - lp, mp.ZERO)
    rho = mp.exp(log_ratio)
    kind, constants = token_policy
    if kind == "cispo":
        objective, dobjective = _cispo(np.where(on, lp, mp.ZERO), rho, adv[:, None], *constants)
    elif kind == "sapo":
        objective, dobjective = _sapo(rho, adv[:, None], *constants)
    else:
        objective, dobjective = _surrogate(rho, adv[:, None], *clip_params)
    penalty = kl.clamped(log_r, kl_kind, kl_clamp)
    dpenalty = kl.clamped_dlogp(log_r, kl_kind, kl_clamp)
    if kl_ratio_weight:
        # w = ρ stays differentiable (TRL use_bias_correction_kl): d(ρ·KL) = ρ·KL + ρ·dKL.
        penalty, dpenalty = rho * penalty, rho * (penalty + dpenalty)
    return -objective + beta * penalty, -dobjective + beta * dpenalty


def _log_band(eps_low, eps_high):
    """GMPO's clip band in log space, (ε_low, ε_high) as mpf (already validated)."""
    lo, hi, _ = validate.clip_band(eps_low, eps_high, None)
    return mp.mpf(lo), mp.mpf(hi)


def _gmpo_log_ratio(log_ratio, adv, eps_low, eps_high):
    """GMPO's token log-ratio clip (Zhao et al. 2025, arXiv 2507.20673, §3, the clip in
    log space): min(Δ, clamp(Δ, −ε_low, ε_high)) where A > 0, else the max, i.e. PPO's
    pessimistic bound per token. Returns the clipped value and its derivative in Δ (1 on the
    unclipped branch, ties included; 0 where the bound is taken)."""
    bound = mp.clip(log_ratio, -eps_low, eps_high)
    positive = _bool(adv > 0)
    active = np.where(positive, _bool(log_ratio <= bound), _bool(log_ratio >= bound))
    return np.where(active, log_ratio, bound), np.where(active, mp.ONE, mp.ZERO)


def _sequence_loss(lp, old, ref, adv, m, clip_params, beta, kl_kind, kl_clamp, kl_ratio_weight,
                   policy_loss, log_band):
    """Per-token ℓ_t = −C_i + β·w_t·KL_t with a sequence ratio s_i, and its derivative pieces.

    GSPO (Zheng et al. 2025, arXiv 2507.18071, §4.1 eq. 5): s_i = exp(1/|y_i| Σ_t Δ_t),
    C_i = min(s_i·A_i, clip(s_i, 1 − ε_low, 1 + ε_high)·A_i), the dual clip as for tokens;
    w_t = s_i when ``kl_ratio_weight``. GMPO (arXiv 2507.20673 §3): s_i = exp of the mean
    of the log-space-clipped Δ_t, C_i = A_i·s_i. A row without tokens has s_i = 1 (TRL 1.16 and
    verl 0.9.1 divide by max(n_i, 1)); its terms are never aggregated.

    Returns (ℓ, through_ratio, direct, pooled): dℓ_t/dlog s_i, the rest of dℓ_t/dlogp_t (the
    KL's own derivative), and dlog s_i/dlogp_u (m_u/n_i, times GMPO's clip indicator).
    """
    on = _bool(m == 1)
    log_ratio = np.where(on, lp - old, mp.ZERO)
    log_r = np.where(on, ref - lp, mp.ZERO)
    counts = [max(mpmath.fsum(row), mp.ONE) for row in m]
    if policy_loss == "gmpo":
        token_log, indicator = _gmpo_log_ratio(log_ratio, adv[:, None], *log_band)
    else:
        token_log, indicator = log_ratio, np.full(log_ratio.shape, mp.ONE, dtype=object)
    s = np.array([mp.exp(mpmath.fsum(row) / n) for row, n in zip(m * token_log, counts)], dtype=object)
    pooled = m * indicator / np.array(counts, dtype=object)[:, None]
    if policy_loss == "gmpo":
        objective, dobjective = adv * s, adv * s
    else:
        objective, dobjective = _surrogate(s, adv, *clip_params)
    penalty = kl.clamped(log_r, kl_kind, kl_clamp)
    dpenalty = kl.clamped_dlogp(log_r, kl_kind, kl_clamp)
    through_ratio = np.broadcast_to(-dobjective[:, None], lp.shape).copy()
    weight = np.broadcast_to(s[:, None], lp.shape) if kl_ratio_weight else mp.ONE
    if kl_ratio_weight:
        through_ratio = through_ratio + beta * weight * penalty
    per_token = -objective[:, None] + beta * weight * penalty
    return per_token, through_ratio, beta * weight * dpenalty, pooled


@mp.exact
def loss(logp, old_logp, ref_logp, advantages, mask, eps_low: float = 0.2,
         eps_high: float | None = None, dual_clip: float | None = None, beta: float = 0.04,
         kl_kind: str = "k3", kl_clamp: float | None = None, kl_ratio_weight: bool = False,
         aggregation: str = "seq-mean-token-mean", norm_length: float | None = None,
         ratio_level: str = "token", policy_loss: str = "ppo-clip", cispo_clip: str = "upper",
         sapo_tau_pos: float = 1.0, sapo_tau_neg: float = 1.05):
    """GRPO loss (to minimise): aggregate over tokens of −C_t + β·w_t·KL_t.

    DeepSeekMath §4.1.1 eq. 3–4 (clipped surrogate with per-response advantage broadcast over
    its tokens, k3 penalty, β = 0.04 in §4.2, 1/G Σ_i 1/|o_i| Σ_t aggregation); DAPO §3.1
    (``eps_high``) and §3.3 (``aggregation='token-mean'``); Dr. GRPO §3
    (``seq-mean-token-sum-norm``); dual clip (Ye et al. 2020); w_t = ρ_t when
    ``kl_ratio_weight`` (TRL 1.16 use_bias_correction_kl), else 1. ``beta`` may be 0.

    ``policy_loss='cispo'`` (MiniMax-M1 §3.1 eq. 4–5): C_t = sg(ŵ_t)·A_i·logπ_t, ŵ_t the IS
    weight ρ_t clipped as ``cispo_clip`` says ('upper': ≤ 1 + ε_high; 'both': also ≥ 1 − ε_low;
    'raw-upper': ≤ ε_high, TRL's and Liger's cap). ``policy_loss='sapo'`` (arXiv 2511.20347 §3):
    C_t = σ(τ(ρ_t − 1))·4/τ·A_i, τ = ``sapo_tau_pos`` where A_i > 0, else ``sapo_tau_neg``; ε_low
    and ε_high are not read. Both are token-level (ratio_level='token') without a dual clip.
    """
    lp, old, ref, adv, m, clip_params, b, c, norm, token_policy = _loss_inputs(
        logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, dual_clip, beta,
        kl_kind, kl_clamp, kl_ratio_weight, aggregation, norm_length, ratio_level, policy_loss,
        cispo_clip, sapo_tau_pos, sapo_tau_neg)
    if ratio_level == "token":
        per_token, _ = _per_token_loss(lp, old, ref, adv, m, clip_params, b, kl_kind, c, kl_ratio_weight,
                                       token_policy)
    else:
        per_token = _sequence_loss(lp, old, ref, adv, m, clip_params, b, kl_kind, c,
                                   kl_ratio_weight, policy_loss, _log_band(eps_low, eps_high))[0]
    return _aggregate_value(per_token, m, aggregation, norm)


@mp.exact
def loss_vjp(cotangent, logp, old_logp, ref_logp, advantages, mask, eps_low: float = 0.2,
             eps_high: float | None = None, dual_clip: float | None = None, beta: float = 0.04,
             kl_kind: str = "k3", kl_clamp: float | None = None, kl_ratio_weight: bool = False,
             aggregation: str = "seq-mean-token-mean", norm_length: float | None = None,
             ratio_level: str = "token", policy_loss: str = "ppo-clip", cispo_clip: str = "upper",
             sapo_tau_pos: float = 1.0, sapo_tau_neg: float = 1.05):
    """Gradient of cotangent·loss with respect to ``logp`` (DeepSeekMath §4.1.1 eq. 3–4): the
    aggregation weights times dℓ_t/dlogp_t; zero at masked positions."""
    lp, old, ref, adv, m, clip_params, b, c, norm, token_policy = _loss_inputs(
        logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, dual_clip, beta,
        kl_kind, kl_clamp, kl_ratio_weight, aggregation, norm_length, ratio_level, policy_loss,
        cispo_clip, sapo_tau_pos, sapo_tau_neg)
    ct = _scalar_cotangent(cotangent)
    weights = _aggregate_weights(m, aggregation, norm)
    if ratio_level == "token":
        _, dper_token = _per_token_loss(lp, old, ref, adv, m, clip_params, b, kl_kind, c, kl_ratio_weight,
                                        token_policy)
        return {"logp": ct * weights * dper_token}
    _, through_ratio, direct, pooled = _sequence_loss(
        lp, old, ref, adv, m, clip_params, b, kl_kind, c, kl_ratio_weight, policy_loss,
        _log_band(eps_low, eps_high))
    if ratio_level == "sequence-token":
        # the straight-through s_i,t = sg[s_i]·π_t/sg[π_t] moves with its own token only
        return {"logp": ct * weights * (through_ratio + direct)}
    # s_i depends on every unmasked token of row i: dlog s_i/dlogp_u = pooled_u (m_u/n_i,
    # times GMPO's clip indicator), shared by all the row's terms through the ratio
    row_sums = np.array([mpmath.fsum(row) for row in weights * through_ratio], dtype=object)
    return {"logp": ct * (pooled * row_sums[:, None] + weights * direct)}
