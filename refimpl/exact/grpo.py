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

from lossproof.refimpl import validate
from lossproof.refimpl.exact import kl, mp
from lossproof.refimpl.exact._rollout import rollout_correction

__all__ = ["advantages", "clip", "clip_vjp", "aggregate", "aggregate_vjp", "loss", "loss_vjp",
           "rollout_correction"]

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
               degenerate: str = "zero", baseline: str = "mean"):
    """Group-relative advantages A_ij = (r_ij − b_ij) / (std + eps); no gradient.

    Baseline b_ij (``baseline``): 'mean' — the group mean (DeepSeekMath §4.1.2);
    'leave-one-out' — the mean of the other G − 1 rewards of the group, b_ij = (Σ_k r_ik − r_ij)
    /(G − 1) (RLOO: Kool et al. 2019, "Buy 4 REINFORCE samples, get a baseline for
    free!"; Ahmadian et al. 2024, arXiv 2402.14740 §3); 'none' — b = 0 (REINFORCE++, arXiv
    2501.03262, whose only normalisation is the batch whitening below; section numbers of this
    paper not verified here).

    Scale (``scale``): 'group' — ÷ (std of the group's G rewards + eps) (DeepSeekMath §4.1.2);
    'batch' — ÷ (std of all B·G rewards + eps) (TRL ``scale_rewards='batch'``); 'none' — no
    division (Dr. GRPO §3); 'whiten' — c = r − b is whitened over the whole batch,
    A = (c − mean(c)) / (std(c) + eps), mean and std over all B·G values (REINFORCE++'s
    "global advantage normalization"; with baseline 'mean' this is "REINFORCE++ w/ baseline"). ``std_ddof`` 0 is the population std of [reading-math-3]
    ((0,1,1,0) → mean 0.5, std 0.5 → (−1,1,1,−1)).

    A group is degenerate when G == 1 or its rewards are all equal (for 'batch': B·G == 1 or
    all B·G rewards equal; 'whiten': B·G == 1 or all c equal; 'none': never), and, with the
    leave-one-out baseline, whenever G == 1 (no other reward). ``degenerate``:
    'zero' ([reading-math-3]: "producing zero advantages") → A = 0, keep = 1;
    'drop' (DAPO §3.2 dynamic sampling) → A = 0, keep = 0;
    'raw' (verl 0.9.1 compute_grpo_outcome_advantage, compute_rloo_outcome_advantage and
    compute_reinforce_plus_plus_baseline_outcome_advantage: a singleton group gets baseline 0
    and std 1) → singleton groups get A = r/(1 + eps) ('group', 'batch'), A = r ('none') or the
    whitening of c = r ('whiten'); a zero-std group with G > 1 gets A = 0.
    Returns {"advantages"[B,G], "keep"[B] (1 or 0)}.
    """
    r = mp.array("rewards", rewards)
    validate.rank("rewards", r.shape, 2)
    validate.nonempty("rewards", r.shape)
    validate.advantage_scale(scale)
    ddof = validate.std_ddof(std_ddof)
    e = mp.mpf(validate.advantage_eps(eps))
    validate.degenerate(degenerate)
    validate.advantage_baseline(baseline)
    n_groups, g = r.shape
    raw_singletons = degenerate == "raw" and g == 1

    if baseline == "none" or raw_singletons:
        base = mp.zeros(r.shape)
    elif baseline == "mean":
        base = np.array([[mpmath.fsum(row) / g] * g for row in r], dtype=object)
    else:
        # G = 1 leaves no other reward: those groups are degenerate (below), b is never read
        base = np.array([[(mpmath.fsum(row) - x) / max(g - 1, 1) for x in row] for row in r], dtype=object)
    centred = r - base
    if scale == "whiten" and (baseline == "none" or raw_singletons):
        # a group baseline leaves every group summing to 0: the batch mean of c is exactly 0
        whole = centred.reshape(-1)
        centred = centred - mpmath.fsum(whole) / len(whole)
    if scale == "group":
        degen = [g == 1 or _constant(row) for row in r]
        divisor = [None if d else _std(row, ddof) + e for row, d in zip(r, degen)]
    elif scale in ("batch", "whiten"):
        spread = r if scale == "batch" else r - base
        # c = r − b is constant exactly when every group is (then c = 0), unless b = 0
        exact_c = scale == "batch" or baseline == "none" or raw_singletons
        batch_degen = r.size == 1 or (_constant(spread) if exact_c else all(_constant(row) for row in r))
        degen = [batch_degen] * n_groups
        divisor = [None if batch_degen else _std(spread, ddof) + e] * n_groups
    else:
        degen = [False] * n_groups
        divisor = [mp.ONE] * n_groups
    if baseline == "leave-one-out" and g == 1 and not raw_singletons:
        degen = [True] * n_groups

    adv = mp.zeros(r.shape)
    keep = mp.full((n_groups,), 1)
    for i in range(n_groups):
        if degen[i]:
            if degenerate == "drop":
                keep[i] = mp.ZERO
        else:
            adv[i] = centred[i] / divisor[i]
    if raw_singletons and scale != "whiten":
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


def _clip_ratio(lp, old, log_ratio_clamp):
    """ρ = exp(clamp(log ρ, −c, c)) and dlog ρ_clamped/dlogp (see :func:`_clamped_log_ratio`)."""
    c = validate.log_ratio_clamp(log_ratio_clamp, "token")
    log_ratio, dlog_ratio = _clamped_log_ratio(lp - old, None if c is None else mp.mpf(c))
    return mp.exp(log_ratio), dlog_ratio


@mp.exact
def clip(logp, old_logp, advantages, eps_low: float = 0.2, eps_high: float | None = None,
         dual_clip: float | None = None, log_ratio_clamp: float | None = None):
    """PPO/GRPO clipped surrogate C = min(ρA, clip(ρ, 1 − ε_low, 1 + ε_high)·A), ρ = π/π_old.

    PPO (Schulman et al. 2017) eq. 7; DeepSeekMath §4.1.1 eq. 3; DAPO §3.1 clip-higher
    (``eps_high`` ≠ ``eps_low``; None means symmetric); dual clip (Ye et al. 2020, as verl's
    clip_ratio_c): where A < 0, C = max(C, c·A). [reading-math-3]: A = 1, ρ = 1.5 → 1.2;
    A = −1, ρ = 0.5 → −0.8. ``log_ratio_clamp`` c (a library convention, none in the papers):
    ρ = exp(clamp(log ρ, −c, c)) (verl 0.9.1 compute_policy_loss_vanilla, OpenRLHF 0.11.2
    PolicyLoss: c = 20). Returns objective (same shape as ``logp``), to be maximised.
    """
    lp, old, adv = _clip_inputs(logp, old_logp, advantages)
    lower, upper, dual = _clip_params(eps_low, eps_high, dual_clip)
    rho, _ = _clip_ratio(lp, old, log_ratio_clamp)
    value, _ = _surrogate(rho, adv, lower, upper, dual)
    return value


@mp.exact
def clip_vjp(cotangent, logp, old_logp, advantages, eps_low: float = 0.2,
             eps_high: float | None = None, dual_clip: float | None = None,
             log_ratio_clamp: float | None = None):
    """Gradient of Σ cotangent·C with respect to ``logp`` (PPO eq. 7): ρA where the unclipped
    branch is active (ties included), 0 where the clipped branch is strictly smaller, the
    dual clip is active or ``log_ratio_clamp`` holds log ρ at a bound (ρ is constant there)."""
    lp, old, adv = _clip_inputs(logp, old_logp, advantages)
    lower, upper, dual = _clip_params(eps_low, eps_high, dual_clip)
    ct = mp.array("cotangent", cotangent)
    validate.same_shape(logp=lp.shape, cotangent=ct.shape)
    rho, dlog_ratio = _clip_ratio(lp, old, log_ratio_clamp)
    _, dlogp = _surrogate(rho, adv, lower, upper, dual)
    return {"logp": ct * dlogp * dlog_ratio}


# ----------------------------------------------------------------------------- aggregation

def _aggregate_params(mode_name, mode, norm_length, length):
    validate.aggregation(mode, mode_name)
    norm = validate.norm_length(norm_length)
    return mp.mpf(length if norm is None else norm)


def _mean_eps(mean_eps):
    return mp.mpf(validate.mean_eps(mean_eps))


def _lengths(m):
    lengths = np.array([mpmath.fsum(row) for row in m], dtype=object)
    if all(n == 0 for n in lengths):
        validate.fail("mask", "selects no token")
    return lengths


def _aggregate_value(values, m, mode, norm, eps=mp.ZERO, token_eps=mp.ZERO):
    """Masked reduction, written as the papers write it; rows without tokens leave the seq means.
    ``eps`` (the ``mean_eps`` convention) is added to each row's token count in a per-row token mean,
    ``token_eps`` (ε under mean_eps_scope 'every', else 0) to the batch's token count in token-mean."""
    lengths = _lengths(m)
    sums = [mpmath.fsum(row) for row in m * values]
    if mode == "token-mean":  # DAPO §3.3
        return mpmath.fsum(sums) / (mpmath.fsum(lengths) + token_eps)
    rows = [i for i, n in enumerate(lengths) if n > 0]
    if mode == "seq-mean-token-mean":  # DeepSeekMath eq. 3: 1/G Σ_i 1/|o_i| Σ_t
        return mpmath.fsum(sums[i] / (lengths[i] + eps) for i in rows) / len(rows)
    seq_sum = mpmath.fsum(sums[i] for i in rows) / len(rows)
    return seq_sum if mode == "seq-mean-token-sum" else seq_sum / norm  # Dr. GRPO §3


def _aggregate_weights(m, mode, norm, eps=mp.ZERO, token_eps=mp.ZERO):
    """W with aggregate(values) = Σ W·values, i.e. the gradient of the aggregate."""
    lengths = _lengths(m)
    if mode == "token-mean":
        return m / (mpmath.fsum(lengths) + token_eps)
    n_rows = sum(1 for n in lengths if n > 0)
    if mode == "seq-mean-token-mean":
        per_row = np.array([1 / ((n + eps) * n_rows) if n > 0 else mp.ZERO for n in lengths], dtype=object)
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


def _token_eps(mean_eps, scope, *modes):
    return mp.mpf(validate.mean_eps_scope(scope, validate.mean_eps(mean_eps), modes))


@mp.exact
def aggregate(values, mask, mode: str = "seq-mean-token-mean", norm_length: float | None = None,
              mean_eps: float = 0.0, mean_eps_scope: str = "per-row"):
    """Masked reduction of per-token values [B,T] to a scalar.

    ``seq-mean-token-mean``: DeepSeekMath §4.1.1 eq. 3 (1/G Σ_i 1/|o_i| Σ_t), each row's token
    count |o_i| + ``mean_eps`` (verl 0.9.1 agg_loss and OpenRLHF 0.11.2 aggregate_loss: 1e−8);
    ``token-mean``: DAPO §3.3 token-level loss (Σ m·v / Σ m); ``seq-mean-token-sum``: mean over
    rows of Σ_t m·v; ``seq-mean-token-sum-norm``: Dr. GRPO §3, that mean divided by a constant
    L = ``norm_length`` (default: the padded length T). Rows without tokens are left out of the
    sequence means (as verl 0.9.1 agg_loss does). A mask with no token is rejected.
    ``mean_eps_scope`` 'every' adds ``mean_eps`` to token-mean's count too, Σ m·v / (Σ m + ε)
    (torchtune's masked_mean); 'per-row' (verl, OpenRLHF) only to the per-row counts.
    """
    v, m = _aggregate_inputs(values, mask)
    norm = _aggregate_params("mode", mode, norm_length, v.shape[1])
    return _aggregate_value(v, m, mode, norm, _mean_eps(mean_eps), _token_eps(mean_eps, mean_eps_scope, mode))


@mp.exact
def aggregate_vjp(cotangent, values, mask, mode: str = "seq-mean-token-mean",
                  norm_length: float | None = None, mean_eps: float = 0.0, mean_eps_scope: str = "per-row"):
    """Gradient of cotangent·aggregate with respect to ``values`` (the aggregate is linear in
    them: DeepSeekMath eq. 3, DAPO §3.3, Dr. GRPO §3 weights); zero at masked positions."""
    v, m = _aggregate_inputs(values, mask)
    norm = _aggregate_params("mode", mode, norm_length, v.shape[1])
    ct = _scalar_cotangent(cotangent)
    return {"values": ct * _aggregate_weights(m, mode, norm, _mean_eps(mean_eps),
                                              _token_eps(mean_eps, mean_eps_scope, mode))}


# ----------------------------------------------------------------------------- loss

def _loss_inputs(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, dual_clip,
                 beta, kl_kind, kl_clamp, kl_ratio_weight, aggregation, norm_length,
                 ratio_level, policy_loss, log_ratio_clamp, kl_aggregation, mean_eps, cispo_clip,
                 sapo_tau_pos, sapo_tau_neg, kl_cov_ratio, kl_cov_coef, mean_eps_scope, selected):
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
    level = validate.ratio_level(ratio_level)
    validate.policy_loss(policy_loss, level, dual_clip, kl_ratio_weight)
    clamp = validate.log_ratio_clamp(log_ratio_clamp, level)
    validate.cov_log_ratio_clamp(clamp, policy_loss)
    norm = _aggregate_params("aggregation", aggregation, norm_length, lp.shape[1])
    kl_mode = validate.kl_aggregation(kl_aggregation) or aggregation
    modes = (aggregation, kl_mode, norm, _mean_eps(mean_eps),
             _token_eps(mean_eps, mean_eps_scope, aggregation, kl_mode))
    token_policy = _token_policy(policy_loss, clip_params, eps_low, eps_high, cispo_clip, sapo_tau_pos, sapo_tau_neg,
                                 kl_cov_ratio, kl_cov_coef)
    if policy_loss in validate.COV_POLICY_LOSSES:
        token_policy = token_policy + (_selection(policy_loss, selected, lp, adv, m, token_policy[2]),)
    else:
        validate.selection(policy_loss, selected is not None)
    return (lp, old, ref, adv, m, clip_params, b, (None if c is None else mp.mpf(c)),
            None if clamp is None else mp.mpf(clamp), modes, token_policy)


def _term_weights(m, modes):
    """The aggregation weights of the policy term and of the KL term (``kl_aggregation``)."""
    aggregation, kl_mode, norm, eps, token_eps = modes
    return (_aggregate_weights(m, aggregation, norm, eps, token_eps),
            _aggregate_weights(m, kl_mode, norm, eps, token_eps))


def _aggregate_terms(policy, penalty, m, modes):
    aggregation, kl_mode, norm, eps, token_eps = modes
    return (_aggregate_value(policy, m, aggregation, norm, eps, token_eps)
            + _aggregate_value(penalty, m, kl_mode, norm, eps, token_eps))


def _clamped_log_ratio(log_ratio, clamp):
    """log ρ clamped to [−c, c] before the exponential (verl 0.9.1 compute_policy_loss_vanilla,
    _cispo and _sapo, OpenRLHF 0.11.2 PolicyLoss: c = 20) and its derivative in log ρ: 1 inside
    the closed band, 0 where the bound is taken (as torch.clamp)."""
    if clamp is None:
        return log_ratio, np.full(log_ratio.shape, mp.ONE, dtype=object)
    inside = _bool((log_ratio >= -clamp) & (log_ratio <= clamp))
    return mp.clip(log_ratio, -clamp, clamp), np.where(inside, mp.ONE, mp.ZERO)


def _token_policy(policy_loss, clip_params, eps_low, eps_high, cispo_clip, tau_pos, tau_neg, kl_cov_ratio,
                  kl_cov_coef):
    """The per-token policy term's kind and constants: ('ppo-clip', clip params),
    ('cispo', (lower or None, upper)), ('sapo', (τ_pos, τ_neg)), ('clip-cov', clip params,
    kl_cov_ratio), ('kl-cov', kl_cov_coef, kl_cov_ratio) or ('reinforce', None), all exact mpf
    (the ratio stays binary64: it only counts tokens)."""
    validate.cispo_clip(cispo_clip, policy_loss, eps_low, eps_high)
    taus = (mp.mpf(validate.sapo_temperature("sapo_tau_pos", tau_pos)),
            mp.mpf(validate.sapo_temperature("sapo_tau_neg", tau_neg)))
    ratio = validate.kl_cov_ratio(kl_cov_ratio)
    coef = mp.mpf(validate.kl_cov_coef(kl_cov_coef))
    if policy_loss == "clip-cov":
        return "clip-cov", clip_params, ratio
    if policy_loss == "kl-cov":
        return "kl-cov", coef, ratio
    if policy_loss == "reinforce":
        return "reinforce", None
    if policy_loss == "cispo":
        lo, hi, _ = validate.clip_band(eps_low, eps_high, None)
        if cispo_clip == "raw-upper":
            return "cispo", (None, mp.mpf(hi))
        return "cispo", (1 - mp.mpf(lo) if cispo_clip == "both" else None, 1 + mp.mpf(hi))
    if policy_loss == "sapo":
        return "sapo", taus
    return "ppo-clip", clip_params


def _selection(policy_loss, selected, lp, adv, m, ratio):
    """The 0/1 token selection of Clip-Cov or KL-Cov (Cui et al., arXiv 2505.22617 §4): the
    ``selected`` mask as given (only valid tokens), or, for KL-Cov without one, verl 0.9.1
    compute_policy_loss_kl_cov's top-k: the k = max(1, ⌊N·kl_cov_ratio⌋) valid tokens of largest
    cov_t = (A_t − Ā)·(logπ_t − mean logπ), both means over the N valid tokens (A broadcast over
    each response's tokens); a tie at the k-th place is refused."""
    validate.selection(policy_loss, selected is not None)
    if selected is not None:
        s = mp.mask("selected", selected, lp.shape)
        validate.selected_within(bool(np.any(_bool(s) & ~_bool(m))))
        return s
    valid = [(i, t) for i, t in np.ndindex(*m.shape) if m[i, t] == 1]
    if not valid:
        validate.fail("mask", "selects no token")
    a_mean = mpmath.fsum(adv[i] for i, _ in valid) / len(valid)
    l_mean = mpmath.fsum(lp[i, t] for i, t in valid) / len(valid)
    cov = [(adv[i] - a_mean) * (lp[i, t] - l_mean) for i, t in valid]
    order = sorted(range(len(valid)), key=lambda j: cov[j], reverse=True)
    k = validate.kl_cov_count(ratio, len(valid))
    validate.top_k_untied(k < len(order) and cov[order[k - 1]] == cov[order[k]], k)
    s = mp.zeros(m.shape)
    for j in order[:k]:
        s[valid[j]] = mp.ONE
    return s


def _cov_terms(kind, constants, lp, old, rho, dlog_ratio, adv, on):
    """Clip-Cov's and KL-Cov's objective and its derivative in logπ_t (arXiv 2505.22617 §4, as
    verl 0.9.1 compute_policy_loss_clip_cov / _kl_cov write them). Clip-Cov: the PPO clipped
    surrogate times (1 − s_t) — a selected token loses its term, value and gradient. KL-Cov:
    the unclipped ρ_t·A_i − s_t·k·|logπ_t − logπ_old,t| (no clip band at all), derivative
    ρ_t·A_i − s_t·k·sign(Δ_t), 0 at Δ_t = 0 (torch.abs's subgradient)."""
    if kind == "clip-cov":
        clip_params, _, s = constants
        objective, dobjective = _surrogate(rho, adv, *clip_params)
        keep = 1 - s
        return objective * keep, dobjective * dlog_ratio * keep
    coef, _, s = constants
    delta = np.where(on, lp - old, mp.ZERO)
    sign = np.array([mpmath.sign(d) for d in delta.flat], dtype=object).reshape(delta.shape)
    return rho * adv - s * coef * np.abs(delta), rho * adv - s * coef * sign


def _cispo(lp, rho, adv, lower, upper):
    """CISPO (MiniMax-M1, arXiv 2506.13585, §3.1 eq. 4–5): the objective sg(ŵ_t)·A_i·logπ_t with
    ŵ_t = clip(ρ_t, lower, upper) (lower None: no lower bound), and its derivative ŵ_t·A_i in
    logπ_t (the weight is detached, so the clip passes no gradient of its own)."""
    weight = np.minimum(rho, upper) if lower is None else mp.clip(rho, lower, upper)
    return weight * adv * lp, weight * adv


def _sapo(rho, adv, tau_pos, tau_neg):
    """SAPO (Gao et al. 2025, arXiv 2511.20347, §3): the objective f_t·A_i with the soft gate
    f_t = σ(τ(ρ_t − 1))·4/τ, τ = τ_pos where A_i > 0, else τ_neg; df/dlog ρ_t =
    4·ρ_t·σ(x)·σ(−x) at x = τ(ρ_t − 1) (= 1 at ρ = 1: the on-policy gradient is the plain
    policy gradient)."""
    tau = np.where(_bool(adv > 0), tau_pos, tau_neg)
    x = tau * (rho - 1)
    gate = mp.sigmoid(x)
    return gate * 4 / tau * adv, 4 * rho * gate * mp.sigmoid(-x) * adv


def _per_token_loss(lp, old, ref, adv, m, clip_params, beta, kl_kind, kl_clamp, kl_ratio_weight, log_ratio_clamp,
                    token_policy):
    """The policy term −C_t and the KL term β·w_t·KL_t of ℓ_t, and their derivatives in logp_t,
    from the pieces of ``clip`` and ``kl.estimator``; C_t is PPO's clipped surrogate, CISPO's or
    SAPO's term (``token_policy``), each on the (clamped) ratio ρ_t."""
    # Masked-out positions may hold any finite numbers; a neutral 0 there keeps exp() of an
    # arbitrary difference from being formed. Their aggregate weight is 0 either way.
    on = _bool(m == 1)
    log_ratio, dlog_ratio = _clamped_log_ratio(np.where(on, lp - old, mp.ZERO), log_ratio_clamp)
    log_r = np.where(on, ref - lp, mp.ZERO)
    rho = mp.exp(log_ratio)
    kind, *constants = token_policy
    if kind == "cispo":
        # ŵ_t is detached: the gradient runs through logπ_t alone, never through the clamp
        objective, dobjective = _cispo(np.where(on, lp, mp.ZERO), rho, adv[:, None], *constants[0])
    elif kind == "reinforce":
        # REINFORCE (Williams 1992): the objective A_i·logπ_t, no ratio and no clip
        objective, dobjective = adv[:, None] * np.where(on, lp, mp.ZERO), np.broadcast_to(adv[:, None], lp.shape)
    elif kind in validate.COV_POLICY_LOSSES:
        objective, dobjective = _cov_terms(kind, constants, lp, old, rho, dlog_ratio, adv[:, None], on)
    else:
        if kind == "sapo":
            objective, dobjective = _sapo(rho, adv[:, None], *constants[0])
        else:
            objective, dobjective = _surrogate(rho, adv[:, None], *clip_params)
        dobjective = dobjective * dlog_ratio
    penalty = kl.clamped(log_r, kl_kind, kl_clamp)
    dpenalty = kl.clamped_dlogp(log_r, kl_kind, kl_clamp)
    if kl_ratio_weight:
        # w = ρ stays differentiable (TRL use_bias_correction_kl): d(ρ·KL) = dρ·KL + ρ·dKL.
        penalty, dpenalty = rho * penalty, rho * (dlog_ratio * penalty + dpenalty)
    return -objective, -dobjective, beta * penalty, beta * dpenalty


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
    """The two terms of ℓ_t = −C_i + β·w_t·KL_t with a sequence ratio s_i, and their derivative pieces.

    GSPO (Zheng et al. 2025, arXiv 2507.18071, §4.1 eq. 5): s_i = exp(1/|y_i| Σ_t Δ_t),
    C_i = min(s_i·A_i, clip(s_i, 1 − ε_low, 1 + ε_high)·A_i), the dual clip as for tokens;
    w_t = s_i when ``kl_ratio_weight``. GMPO (arXiv 2507.20673 §3): s_i = exp of the mean
    of the log-space-clipped Δ_t, C_i = A_i·s_i. A row without tokens has s_i = 1 (TRL 1.16 and
    verl 0.9.1 divide by max(n_i, 1)); its terms are never aggregated.

    Returns (policy, penalty, through_policy, through_penalty, direct, pooled): the policy term
    −C_i and the KL term β·w_t·KL_t per token, their derivatives in log s_i, the rest of the KL
    term's derivative in logp_t (the KL's own), and dlog s_i/dlogp_u (m_u/n_i, times GMPO's clip
    indicator).
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
    shape = lp.shape
    weight = np.broadcast_to(s[:, None], shape) if kl_ratio_weight else mp.ONE
    through_penalty = beta * weight * penalty if kl_ratio_weight else mp.zeros(shape)
    return (np.broadcast_to(-objective[:, None], shape), beta * weight * penalty,
            np.broadcast_to(-dobjective[:, None], shape), through_penalty, beta * weight * dpenalty, pooled)


def _is_weight(is_weight, shape):
    """The detached per-token weight of the policy term (None: 1): the rollout correction's truncated
    or masked IS weight as TRL 1.16.0 (trainer/grpo_trainer.py _compute_loss: ``per_token_loss *
    importance_sampling_ratio``), verl 0.9.1 (trainer/ppo/core_algos.py compute_policy_loss_*:
    ``pg_losses * rollout_is_weights``) and ART (src/art/loss.py: ``policy_loss *= clamp(ratio,
    max=upper_bound).detach()``) apply it, before the aggregation and never to the KL term."""
    if is_weight is None:
        return None
    w = mp.array("is_weight", is_weight)
    validate.same_shape(logp=shape, is_weight=w.shape)
    validate.is_weights(any(x < 0 for x in w.flat))
    return w


@mp.exact
def loss(logp, old_logp, ref_logp, advantages, mask, eps_low: float = 0.2,
         eps_high: float | None = None, dual_clip: float | None = None, beta: float = 0.04,
         kl_kind: str = "k3", kl_clamp: float | None = None, kl_ratio_weight: bool = False,
         aggregation: str = "seq-mean-token-mean", norm_length: float | None = None,
         ratio_level: str = "token", policy_loss: str = "ppo-clip", log_ratio_clamp: float | None = None,
         kl_aggregation: str | None = None, mean_eps: float = 0.0, cispo_clip: str = "upper",
         sapo_tau_pos: float = 1.0, sapo_tau_neg: float = 1.05, kl_cov_ratio: float = 0.0002,
         kl_cov_coef: float = 1.0, mean_eps_scope: str = "per-row", selected=None, is_weight=None):
    """GRPO loss (to minimise): aggregate over tokens of −C_t plus β·aggregate of w_t·KL_t.

    DeepSeekMath §4.1.1 eq. 3–4 (clipped surrogate with per-response advantage broadcast over
    its tokens, k3 penalty, β = 0.04 in §4.2, 1/G Σ_i 1/|o_i| Σ_t aggregation); DAPO §3.1
    (``eps_high``) and §3.3 (``aggregation='token-mean'``); Dr. GRPO §3
    (``seq-mean-token-sum-norm``); dual clip (Ye et al. 2020); w_t = ρ_t when
    ``kl_ratio_weight`` (TRL 1.16 use_bias_correction_kl), else 1. ``beta`` may be 0.
    Library conventions (none in the papers): ``log_ratio_clamp`` c: ρ_t = exp(clamp(log ρ_t, −c, c))
    (verl 0.9.1 compute_policy_loss_vanilla/_cispo/_sapo, OpenRLHF 0.11.2 PolicyLoss: c = 20);
    ``kl_aggregation``: the KL term's own reduction (OpenRLHF 0.11.2 ppo_actor: always 'token-mean';
    None: the policy term's); ``mean_eps``: |o_i| + ε in per-row token means (verl agg_loss,
    OpenRLHF aggregate_loss: 1e−8), and in token-mean's count as well under ``mean_eps_scope``
    'every' (torchtune's masked_mean).

    ``policy_loss='cispo'`` (MiniMax-M1 §3.1 eq. 4–5): C_t = sg(ŵ_t)·A_i·logπ_t, ŵ_t the IS
    weight ρ_t clipped as ``cispo_clip`` says ('upper': ≤ 1 + ε_high; 'both': also ≥ 1 − ε_low;
    'raw-upper': ≤ ε_high, TRL's and Liger's cap). ``policy_loss='sapo'`` (arXiv 2511.20347 §3):
    C_t = σ(τ(ρ_t − 1))·4/τ·A_i, τ = ``sapo_tau_pos`` where A_i > 0, else ``sapo_tau_neg``; ε_low
    and ε_high are not read. Both are token-level (ratio_level='token') without a dual clip.

    ``policy_loss='clip-cov'`` / ``'kl-cov'`` (Cui et al., arXiv 2505.22617 §4, as verl 0.9.1
    compute_policy_loss_clip_cov / _kl_cov): on the tokens of ``selected`` (a [B,T] 0/1 mask of
    valid tokens) Clip-Cov drops the PPO term (C_t·(1 − s_t)); KL-Cov's C_t is the unclipped
    ρ_t·A_i minus s_t·``kl_cov_coef``·|logπ_t − logπ_old,t|. Clip-Cov's selection is random in
    verl and must be given; KL-Cov's defaults to the top-k covariance tokens (k = max(1,
    ⌊N·``kl_cov_ratio``⌋)). ``policy_loss='reinforce'`` (Williams 1992): C_t = A_i·logπ_t, no
    ratio, no clip (verl 0.9.1 compute_policy_loss_gpg). All three are token-level, without a
    dual clip; KL-Cov and REINFORCE refuse ``log_ratio_clamp``, REINFORCE ``kl_ratio_weight``.

    ``is_weight`` (optional, [B,T], finite and ≥ 0; vector set 1.7.0): a detached weight w_t of each
    token's policy term, −w_t·C_t, the KL term untouched — the truncated (TIS) or masked rollout
    correction as TRL 1.16.0, verl 0.9.1 and ART multiply it into the token loss (``_is_weight``).
    """
    lp, old, ref, adv, m, clip_params, b, c, clamp, modes, token_policy = _loss_inputs(
        logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, dual_clip, beta,
        kl_kind, kl_clamp, kl_ratio_weight, aggregation, norm_length, ratio_level, policy_loss,
        log_ratio_clamp, kl_aggregation, mean_eps, cispo_clip, sapo_tau_pos, sapo_tau_neg, kl_cov_ratio,
        kl_cov_coef, mean_eps_scope, selected)
    w = _is_weight(is_weight, lp.shape)
    if ratio_level == "token":
        policy, _, penalty, _ = _per_token_loss(lp, old, ref, adv, m, clip_params, b, kl_kind, c, kl_ratio_weight,
                                                clamp, token_policy)
    else:
        policy, penalty = _sequence_loss(lp, old, ref, adv, m, clip_params, b, kl_kind, c, kl_ratio_weight,
                                         policy_loss, _log_band(eps_low, eps_high))[:2]
    if w is not None:
        policy = policy * w
    return _aggregate_terms(policy, penalty, m, modes)


@mp.exact
def loss_vjp(cotangent, logp, old_logp, ref_logp, advantages, mask, eps_low: float = 0.2,
             eps_high: float | None = None, dual_clip: float | None = None, beta: float = 0.04,
             kl_kind: str = "k3", kl_clamp: float | None = None, kl_ratio_weight: bool = False,
             aggregation: str = "seq-mean-token-mean", norm_length: float | None = None,
             ratio_level: str = "token", policy_loss: str = "ppo-clip", log_ratio_clamp: float | None = None,
             kl_aggregation: str | None = None, mean_eps: float = 0.0, cispo_clip: str = "upper",
             sapo_tau_pos: float = 1.0, sapo_tau_neg: float = 1.05, kl_cov_ratio: float = 0.0002,
         kl_cov_coef: float = 1.0, mean_eps_scope: str = "per-row", selected=None, is_weight=None):
    """Gradient of cotangent·loss with respect to ``logp`` (DeepSeekMath §4.1.1 eq. 3–4): each
    term's aggregation weights times its dℓ_t/dlogp_t; zero at masked positions."""
    lp, old, ref, adv, m, clip_params, b, c, clamp, modes, token_policy = _loss_inputs(
        logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, dual_clip, beta,
        kl_kind, kl_clamp, kl_ratio_weight, aggregation, norm_length, ratio_level, policy_loss,
        log_ratio_clamp, kl_aggregation, mean_eps, cispo_clip, sapo_tau_pos, sapo_tau_neg, kl_cov_ratio,
        kl_cov_coef, mean_eps_scope, selected)
    ct = _scalar_cotangent(cotangent)
    w_policy, w_penalty = _term_weights(m, modes)
    w = _is_weight(is_weight, lp.shape)
    if w is not None:   # a constant factor of each token's policy term: it scales that term's weight
        w_policy = w_policy * w
    if ratio_level == "token":
        _, dpolicy, _, dpenalty = _per_token_loss(lp, old, ref, adv, m, clip_params, b, kl_kind, c,
                                                  kl_ratio_weight, clamp, token_policy)
        return {"logp": ct * (w_policy * dpolicy + w_penalty * dpenalty)}
    _, _, through_policy, through_penalty, direct, pooled = _sequence_loss(
        lp, old, ref, adv, m, clip_params, b, kl_kind, c, kl_ratio_weight, policy_loss,
        _log_band(eps_low, eps_high))
    through = w_policy * through_policy + w_penalty * through_penalty
    if ratio_level == "sequence-token":
        # the straight-through s_i,t = sg[s_i]·π_t/sg[π_t] moves with its own token only
        return {"logp": ct * (through + w_penalty * direct)}
    # s_i depends on every unmasked token of row i: dlog s_i/dlogp_u = pooled_u (m_u/n_i,
    # times GMPO's clip indicator), shared by all the row's terms through the ratio
    row_sums = np.array([mpmath.fsum(row) for row in through], dtype=object)
    return {"logp": ct * (pooled * row_sums[:, None] + w_penalty * direct)}
