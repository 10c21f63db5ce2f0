"""Group Relative Policy Optimization over the array API: advantages, clipped surrogate,
aggregation, loss.

Sources: DeepSeekMath (Shao et al. 2024) §4.1.1 eq. 3–4 and §4.1.2; PPO (Schulman et al.
2017) eq. 7; DAPO (Yu et al. 2025) §3.1–3.3; Dr. GRPO (Liu et al. 2025) §3; dual clip
(Ye et al. 2020); [reading-math-3] §GRPO. Per token t of response i:

    ρ_t = exp(logp_t − old_logp_t),
    C_t = min(ρ_t·A_i, clip(ρ_t, 1 − ε_low, 1 + ε_high)·A_i)     (maximised)
    ℓ_t = −C_t + β·w_t·KL_t,   loss = aggregate(ℓ, mask)          (minimised)

Same names and contract as ``refimpl.exact.grpo``; ``loss`` is composed from the pieces of
``clip``, ``aggregate`` and ``refimpl.arrays.kl``.
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.arrays import _xp, kl
from lossproof.refimpl.arrays._rollout import rollout_correction

__all__ = ["advantages", "clip", "clip_vjp", "aggregate", "aggregate_vjp", "loss", "loss_vjp",
           "rollout_correction"]

SCALES = validate.SCALES
DEGENERATE = validate.DEGENERATE
MODES = validate.AGGREGATIONS


# ----------------------------------------------------------------------------- advantages

def _centred(xp, r, axis):
    """r − mean(r) with one refinement pass: the first mean's rounding error is removed by
    subtracting the mean of the (exactly or nearly exactly formed) deviations."""
    d = r - xp.mean(r, axis=axis, keepdims=True)
    return d - xp.mean(d, axis=axis, keepdims=True)


def _std(xp, d, axis, n, ddof):
    return xp.sqrt(xp.sum(d * d, axis=axis) / max(n - ddof, 1))


def _constant(xp, r, axis=None):
    # "std exactly 0" is decided on the rewards themselves: a rounded std of equal values
    # need not be 0 (their float mean need not equal them).
    return xp.max(r, axis=axis) == xp.min(r, axis=axis)


def advantages(rewards, scale: str = "group", std_ddof: int = 0, eps: float = 0.0,
               degenerate: str = "zero", baseline: str = "mean"):
    """Group-relative advantages A_ij = (r_ij − b_ij) / (std + eps); no gradient.

    Baselines: 'mean' (DeepSeekMath §4.1.2), 'leave-one-out' (RLOO, Kool et al. 2019;
    Ahmadian et al. 2024 §3: the mean of the other G − 1 rewards, formed as
    G/(G − 1)·(r − mean)), 'none' (REINFORCE++). Scales: 'group' (DeepSeekMath §4.1.2); TRL
    ``scale_rewards='batch'`` (std over all B·G rewards); Dr. GRPO §3 ('none'); 'whiten'
    (REINFORCE++ arXiv 2501.03262: c = r − b centred and scaled over the whole batch).
    Degenerate groups (G == 1 or all rewards equal; 'batch': B·G == 1 or all equal; 'whiten':
    B·G == 1 or all c equal; 'none': never; leave-one-out: also G == 1): 'zero' → A = 0,
    keep = 1 ([reading-math-3]); 'drop' → A = 0, keep = 0 (DAPO §3.2); 'raw' → singleton groups
    get baseline 0, then r/(1 + eps) ('none': r; 'whiten': the whitening of r), zero-std groups
    A = 0 (verl).
    Returns {"advantages"[B,G], "keep"[B] (1 or 0)}.
    """
    xp = _xp.namespace(rewards)
    dt = _xp.float_dtype(xp, rewards=rewards)
    r = _xp.array(xp, "rewards", rewards, dt)
    validate.rank("rewards", _xp.shape(r), 2)
    validate.nonempty("rewards", _xp.shape(r))
    validate.advantage_scale(scale)
    ddof = validate.std_ddof(std_ddof)
    e = validate.advantage_eps(eps)
    validate.degenerate(degenerate)
    validate.advantage_baseline(baseline)
    n_groups, g = _xp.shape(r)
    raw_singletons = degenerate == "raw" and g == 1

    if baseline == "none" or raw_singletons:
        centred = r
    elif baseline == "mean":
        centred = _centred(xp, r, axis=1)
    else:
        centred = _centred(xp, r, axis=1) * (g / max(g - 1, 1))
    if scale == "group":
        degen = _constant(xp, r, axis=1) | (g == 1)
        divisor = _std(xp, _centred(xp, r, axis=1), 1, g, ddof) + e
    elif scale in ("batch", "whiten"):
        if scale == "batch":
            constant = bool(_constant(xp, r))
        elif baseline == "none" or raw_singletons:
            constant = bool(_constant(xp, centred))
        else:
            # c = r − b is constant exactly when every group is (then c = 0)
            constant = bool(xp.all(_constant(xp, r, axis=1)))
        batch_degen = _xp.size(r) == 1 or constant
        if scale == "whiten" and (baseline == "none" or raw_singletons):
            # a group baseline leaves every group summing to 0: the batch mean of c is exactly 0
            centred = _centred(xp, centred, axis=None)
        spread = _centred(xp, r, axis=None) if scale == "batch" else centred
        degen = xp.zeros((n_groups,), dtype=xp.bool) | batch_degen
        divisor = xp.zeros((n_groups,), dtype=dt) + _std(xp, spread, None, _xp.size(r), ddof) + e
    else:
        degen = xp.zeros((n_groups,), dtype=xp.bool)
        divisor = xp.ones((n_groups,), dtype=dt)
    if baseline == "leave-one-out" and g == 1 and not raw_singletons:
        degen = xp.ones((n_groups,), dtype=xp.bool)

    safe = xp.where(degen, xp.ones_like(divisor), divisor)
    adv = _xp.masked(xp, ~degen[:, None], centred / safe[:, None])
    keep = xp.ones((n_groups,), dtype=dt)
    if degenerate == "drop":
        keep = _xp.masked(xp, ~degen, keep)
    if raw_singletons and scale != "whiten":
        adv = r if scale == "none" else r / (1 + e)
    return {"advantages": adv, "keep": keep}


# ----------------------------------------------------------------------------- clipped surrogate

def _clip_params(eps_low, eps_high, dual_clip):
    """(1 − ε_low, 1 + ε_high, c) as Python floats."""
    lo, hi, c = validate.clip_band(eps_low, eps_high, dual_clip)
    return 1 - lo, 1 + hi, c


def surrogate(xp, rho, adv, lower, upper, dual):
    """The clipped objective C = min(ρA, clip(ρ, lower, upper)·A) (dual: max(C, c·A) where
    A < 0) and the mask of tokens on the active unclipped branch (ties included), where
    dC/dρ = A; elsewhere dC/dρ = 0. Shared with proximal_kl.loss."""
    unclipped = rho * adv
    clipped = xp.clip(rho, lower, upper) * adv
    active = unclipped <= clipped  # ties take the unclipped branch
    value = xp.where(active, unclipped, clipped)
    if dual is not None:
        # Ye et al. 2020: for A < 0 the objective is bounded below by c·A (flat there).
        floor = dual * adv
        dual_on = (adv < 0) & (floor > value)
        value = xp.where(dual_on, floor, value)
        active = active & ~dual_on
    return value, active


def _clip_inputs(logp, old_logp, advantages):
    xp = _xp.namespace(logp, old_logp, advantages)
    dt = _xp.float_dtype(xp, logp=logp, old_logp=old_logp, advantages=advantages)
    lp = _xp.array(xp, "logp", logp, dt)
    old = _xp.array(xp, "old_logp", old_logp, dt)
    adv = _xp.array(xp, "advantages", advantages, dt)
    validate.same_shape(logp=_xp.shape(lp), old_logp=_xp.shape(old), advantages=_xp.shape(adv))
    return xp, dt, lp, old, adv


def _clamped_log_ratio(xp, log_ratio, clamp):
    """log ρ clamped to [−c, c] (verl 0.9.1 compute_policy_loss_vanilla, OpenRLHF 0.11.2
    PolicyLoss: c = 20) and the mask of the closed band, where the clamp passes the gradient
    (None: no clamp)."""
    if clamp is None:
        return log_ratio, None
    return _xp.clamp(xp, log_ratio, -clamp, clamp), (log_ratio >= -clamp) & (log_ratio <= clamp)


def clip(logp, old_logp, advantages, eps_low: float = 0.2, eps_high: float | None = None,
         dual_clip: float | None = None, log_ratio_clamp: float | None = None):
    """PPO/GRPO clipped surrogate C = min(ρA, clip(ρ, 1 − ε_low, 1 + ε_high)·A), ρ = π/π_old.

    PPO eq. 7; DeepSeekMath §4.1.1 eq. 3; DAPO §3.1 clip-higher; dual clip (Ye et al. 2020);
    ``log_ratio_clamp`` c: ρ = exp(clamp(log ρ, −c, c)) (verl 0.9.1, OpenRLHF 0.11.2: c = 20).
    Returns objective (same shape as ``logp``), to be maximised.
    """
    xp, _, lp, old, adv = _clip_inputs(logp, old_logp, advantages)
    lower, upper, dual = _clip_params(eps_low, eps_high, dual_clip)
    log_ratio, _ = _clamped_log_ratio(xp, lp - old, validate.log_ratio_clamp(log_ratio_clamp, "token"))
    value, _ = surrogate(xp, xp.exp(log_ratio), adv, lower, upper, dual)
    return value


def clip_vjp(cotangent, logp, old_logp, advantages, eps_low: float = 0.2,
             eps_high: float | None = None, dual_clip: float | None = None,
             log_ratio_clamp: float | None = None):
    """Gradient of Σ cotangent·C with respect to ``logp`` (PPO eq. 7): ρA on the active
    unclipped branch (ties included) inside the band of ``log_ratio_clamp``, else 0."""
    xp, dt, lp, old, adv = _clip_inputs(logp, old_logp, advantages)
    lower, upper, dual = _clip_params(eps_low, eps_high, dual_clip)
    ct = _xp.array(xp, "cotangent", cotangent, dt)
    validate.same_shape(logp=_xp.shape(lp), cotangent=_xp.shape(ct))
    log_ratio, inside = _clamped_log_ratio(xp, lp - old, validate.log_ratio_clamp(log_ratio_clamp, "token"))
    rho = xp.exp(log_ratio)
    _, active = surrogate(xp, rho, adv, lower, upper, dual)
    if inside is not None:
        active = active & inside
    return {"logp": ct * _xp.masked(xp, active, rho * adv)}


# ----------------------------------------------------------------------------- aggregation

def aggregate_params(mode_name, mode, norm_length, length):
    """Checks the mode; returns the length normaliser L (``norm_length`` or the padded T)."""
    validate.aggregation(mode, mode_name)
    norm = validate.norm_length(norm_length)
    return float(length) if norm is None else norm


def _lengths(xp, m):
    lengths = xp.sum(m, axis=1)
    if not bool(xp.any(lengths > 0)):
        validate.fail("mask", "selects no token")
    return lengths


def aggregate_value(xp, values, m, mode, norm, eps=0.0, token_eps=0.0):
    """Masked reduction written as the papers write it; rows without tokens leave the
    sequence means. A select (not m·v) keeps padding values out of the sums. ``eps`` (the
    ``mean_eps`` convention) is added to each row's token count in a per-row token mean,
    ``token_eps`` (ε under mean_eps_scope 'every', else 0) to token-mean's count."""
    lengths = _lengths(xp, m)
    sums = xp.sum(_xp.masked(xp, m > 0, values), axis=1)
    if mode == "token-mean":  # DAPO §3.3
        return xp.sum(sums) / (xp.sum(lengths) + token_eps)
    rows = lengths > 0
    n_rows = xp.sum(xp.astype(rows, values.dtype))
    if mode == "seq-mean-token-mean":  # DeepSeekMath eq. 3: 1/G Σ_i 1/|o_i| Σ_t
        per_row = sums / (xp.where(rows, lengths, xp.ones_like(lengths)) + eps)
        return xp.sum(_xp.masked(xp, rows, per_row)) / n_rows
    seq_sum = xp.sum(sums) / n_rows
    return seq_sum if mode == "seq-mean-token-sum" else seq_sum / norm  # Dr. GRPO §3


def aggregate_weights(xp, m, mode, norm, eps=0.0, token_eps=0.0):
    """W with aggregate(values) = Σ W·values (every mode is linear), i.e. its gradient."""
    lengths = _lengths(xp, m)
    if mode == "token-mean":
        return m / (xp.sum(lengths) + token_eps)
    rows = lengths > 0
    n_rows = xp.sum(xp.astype(rows, m.dtype))
    if mode == "seq-mean-token-mean":
        per_row = _xp.masked(xp, rows, 1.0 / ((xp.where(rows, lengths, xp.ones_like(lengths)) + eps) * n_rows))
        return m * per_row[:, None]
    return m / (n_rows if mode == "seq-mean-token-sum" else n_rows * norm)


def scalar_cotangent(xp, cotangent, dt):
    ct = _xp.array(xp, "cotangent", cotangent, dt)
    if _xp.size(ct) != 1:
        validate.fail("cotangent", f"expected a scalar for a scalar output, got shape {_xp.shape(ct)}")
    return xp.reshape(ct, ())


def _aggregate_inputs(values, mask):
    xp = _xp.namespace(values, mask)
    dt = _xp.float_dtype(xp, values=values)
    v = _xp.array(xp, "values", values, dt)
    validate.rank("values", _xp.shape(v), 2)
    return xp, dt, v, _xp.mask(xp, "mask", mask, _xp.shape(v), dt)


def token_eps(mean_eps, scope, *modes) -> tuple:
    """(ε of the per-row means, ε of token-mean's one mean) of ``mean_eps`` under ``scope``."""
    eps = validate.mean_eps(mean_eps)
    return eps, validate.mean_eps_scope(scope, eps, modes)


def aggregate(values, mask, mode: str = "seq-mean-token-mean", norm_length: float | None = None,
              mean_eps: float = 0.0, mean_eps_scope: str = "per-row"):
    """Masked reduction of per-token values [B,T] to a scalar.

    ``seq-mean-token-mean``: DeepSeekMath §4.1.1 eq. 3; ``token-mean``: DAPO §3.3;
    ``seq-mean-token-sum``: mean over rows of Σ_t m·v; ``seq-mean-token-sum-norm``: Dr. GRPO
    §3, that mean over L = ``norm_length`` (default T). Fully masked rows are left out of the
    sequence means (verl 0.9.1 agg_loss); a mask with no token is rejected. ``mean_eps``: each
    row's token count |o_i| + ε in 'seq-mean-token-mean' (verl 0.9.1, OpenRLHF 0.11.2: 1e−8), and
    token-mean's Σ m + ε as well under ``mean_eps_scope`` 'every' (torchtune's masked_mean).
    """
    xp, _, v, m = _aggregate_inputs(values, mask)
    norm = aggregate_params("mode", mode, norm_length, v.shape[1])
    return aggregate_value(xp, v, m, mode, norm, *token_eps(mean_eps, mean_eps_scope, mode))


def aggregate_vjp(cotangent, values, mask, mode: str = "seq-mean-token-mean",
                  norm_length: float | None = None, mean_eps: float = 0.0, mean_eps_scope: str = "per-row"):
    """Gradient of cotangent·aggregate with respect to ``values`` (the aggregate is linear:
    DeepSeekMath eq. 3, DAPO §3.3, Dr. GRPO §3 weights); zero at masked positions."""
    xp, dt, v, m = _aggregate_inputs(values, mask)
    norm = aggregate_params("mode", mode, norm_length, v.shape[1])
    eps = token_eps(mean_eps, mean_eps_scope, mode)
    ct = scalar_cotangent(xp, cotangent, dt)
    return {"values": ct * aggregate_weights(xp, m, mode, norm, *eps)}


# ----------------------------------------------------------------------------- loss

def _loss_inputs(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, dual_clip,
                 beta, kl_kind, kl_clamp, kl_ratio_weight, aggregation, norm_length,
                 ratio_level, policy_loss, log_ratio_clamp, kl_aggregation, mean_eps, cispo_clip,
                 sapo_tau_pos, sapo_tau_neg, kl_cov_ratio, kl_cov_coef, mean_eps_scope, selected):
    xp = _xp.namespace(logp, old_logp, ref_logp, advantages, mask)
    dt = _xp.float_dtype(xp, logp=logp, old_logp=old_logp, ref_logp=ref_logp, advantages=advantages)
    lp = _xp.array(xp, "logp", logp, dt)
    validate.rank("logp", _xp.shape(lp), 2)
    old = _xp.array(xp, "old_logp", old_logp, dt)
    ref = _xp.array(xp, "ref_logp", ref_logp, dt)
    validate.same_shape(logp=_xp.shape(lp), old_logp=_xp.shape(old), ref_logp=_xp.shape(ref))
    adv = _xp.array(xp, "advantages", advantages, dt)
    validate.per_sequence("advantages", _xp.shape(adv), _xp.shape(lp))
    m = _xp.mask(xp, "mask", mask, _xp.shape(lp), dt)
    clip_params = _clip_params(eps_low, eps_high, dual_clip)
    b = validate.kl_penalty_beta(beta)
    validate.kl_kind(kl_kind, "kl_kind")
    c = validate.kl_clamp(kl_clamp, "kl_clamp")
    validate.kl_ratio_weight(kl_ratio_weight)
    level = validate.ratio_level(ratio_level)
    validate.policy_loss(policy_loss, level, dual_clip, kl_ratio_weight)
    clamp = validate.log_ratio_clamp(log_ratio_clamp, level)
    validate.cov_log_ratio_clamp(clamp, policy_loss)
    norm = aggregate_params("aggregation", aggregation, norm_length, lp.shape[1])
    kl_mode = validate.kl_aggregation(kl_aggregation) or aggregation
    modes = (aggregation, kl_mode, norm, *token_eps(mean_eps, mean_eps_scope, aggregation, kl_mode))
    token_policy = _token_policy(policy_loss, clip_params, eps_low, eps_high, cispo_clip, sapo_tau_pos, sapo_tau_neg,
                                 kl_cov_ratio, kl_cov_coef)
    if policy_loss in validate.COV_POLICY_LOSSES:
        token_policy = token_policy + (_selection(xp, dt, policy_loss, selected, lp, adv, m, token_policy[2]),)
    else:
        validate.selection(policy_loss, selected is not None)
    return xp, dt, lp, old, ref, adv, m, clip_params, b, c, clamp, modes, token_policy


def _aggregate_terms(xp, policy, penalty, m, modes):
    """The policy term reduced by ``aggregation``, the KL term by ``kl_aggregation``."""
    aggregation, kl_mode, norm, *eps = modes
    return (aggregate_value(xp, policy, m, aggregation, norm, *eps)
            + aggregate_value(xp, penalty, m, kl_mode, norm, *eps))


def _term_weights(xp, m, modes):
    aggregation, kl_mode, norm, *eps = modes
    return aggregate_weights(xp, m, aggregation, norm, *eps), aggregate_weights(xp, m, kl_mode, norm, *eps)


def _token_policy(policy_loss, clip_params, eps_low, eps_high, cispo_clip, tau_pos, tau_neg, kl_cov_ratio,
                  kl_cov_coef):
    """('ppo-clip', clip params), ('cispo', (lower or None, upper)), ('sapo', (τ_pos, τ_neg)),
    ('clip-cov', clip params, kl_cov_ratio), ('kl-cov', kl_cov_coef, kl_cov_ratio) or
    ('reinforce', None)."""
    validate.cispo_clip(cispo_clip, policy_loss, eps_low, eps_high)
    taus = (validate.sapo_temperature("sapo_tau_pos", tau_pos), validate.sapo_temperature("sapo_tau_neg", tau_neg))
    ratio = validate.kl_cov_ratio(kl_cov_ratio)
    coef = validate.kl_cov_coef(kl_cov_coef)
    if policy_loss == "clip-cov":
        return "clip-cov", clip_params, ratio
    if policy_loss == "kl-cov":
        return "kl-cov", coef, ratio
    if policy_loss == "reinforce":
        return "reinforce", None
    if policy_loss == "cispo":
        lo, hi, _ = validate.clip_band(eps_low, eps_high, None)
        if cispo_clip == "raw-upper":
            return "cispo", (None, hi)
        return "cispo", (1 - lo if cispo_clip == "both" else None, 1 + hi)
    if policy_loss == "sapo":
        return "sapo", taus
    return "ppo-clip", clip_params


def _selection(xp, dt, policy_loss, selected, lp, adv, m, ratio):
    """Clip-Cov's or KL-Cov's 0/1 selection (arXiv 2505.22617 §4): ``selected`` as given (valid
    tokens only), or KL-Cov's top-k = max(1, ⌊N·kl_cov_ratio⌋) valid tokens by cov_t = (A_t − Ā)·
    (logπ_t − mean logπ), means over the N valid tokens (verl 0.9.1 compute_policy_loss_kl_cov),
    formed in the working dtype; the order is taken on the host (N is a batch's token count)."""
    validate.selection(policy_loss, selected is not None)
    if selected is not None:
        s = _xp.mask(xp, "selected", selected, _xp.shape(lp), dt)
        validate.selected_within(bool(xp.any((s > 0) & ~(m > 0))))
        return s
    valid = m > 0
    n = int(xp.sum(xp.astype(valid, xp.int64)))
    if n == 0:
        validate.fail("mask", "selects no token")
    a_tok = adv[:, None] + xp.zeros_like(lp)
    a_mean = xp.sum(_xp.masked(xp, valid, a_tok)) / n
    l_mean = xp.sum(_xp.masked(xp, valid, lp)) / n
    cov = xp.reshape((a_tok - a_mean) * (lp - l_mean), (-1,))
    flat_valid = [bool(v) for v in xp.reshape(valid, (-1,)).tolist()]
    values = cov.tolist()
    index = [j for j, v in enumerate(flat_valid) if v]
    order = sorted(index, key=lambda j: values[j], reverse=True)
    k = validate.kl_cov_count(ratio, n)
    validate.top_k_untied(k < n and values[order[k - 1]] == values[order[k]], k)
    chosen = set(order[:k])
    picked = [1.0 if j in chosen else 0.0 for j in range(len(flat_valid))]
    return xp.reshape(xp.asarray(picked, dtype=dt), _xp.shape(lp))


def _cov_terms(xp, kind, constants, lp, old, rho, inside, adv, on):
    """Clip-Cov's and KL-Cov's objective and its derivative in logπ_t (arXiv 2505.22617 §4;
    verl 0.9.1 compute_policy_loss_clip_cov / _kl_cov): Clip-Cov multiplies the PPO term by
    1 − s_t (value and gradient); KL-Cov is the unclipped ρA − s_t·k·|Δ_t|, derivative
    ρA − s_t·k·sign(Δ_t) (0 at Δ_t = 0, as torch.abs)."""
    if kind == "clip-cov":
        clip_params, _, s = constants
        objective, active = surrogate(xp, rho, adv, *clip_params)
        if inside is not None:
            active = active & inside
        keep = 1 - s
        return objective * keep, _xp.masked(xp, active, rho * adv) * keep
    coef, _, s = constants
    delta = _xp.masked(xp, on, lp - old)
    # |Δ| as sign(Δ)·Δ: the same number, and under JAX's differentiation (the jax backend) the
    # derivative sign(Δ), 0 at Δ = 0 as torch.abs's; jnp.abs's is 1 there
    return rho * adv - s * coef * (xp.sign(delta) * delta), rho * adv - s * coef * xp.sign(delta)


def _cispo(xp, lp, rho, adv, lower, upper):
    """CISPO (MiniMax-M1, arXiv 2506.13585, §3.1 eq. 4–5): sg(ŵ)·A·logπ with ŵ = ρ clipped to
    [lower, upper] (lower None: no lower bound), and its derivative ŵ·A."""
    weight = xp.clip(rho, lower, upper) if lower is not None else xp.minimum(rho, xp.asarray(upper, dtype=rho.dtype))
    weight = _xp.constant(weight)
    return weight * adv * lp, weight * adv


def _sapo(xp, rho, adv, tau_pos, tau_neg):
    """SAPO (arXiv 2511.20347 §3): f·A with f = σ(τ(ρ − 1))·4/τ (τ by the sign of A), and its
    derivative 4·ρ·σ(x)·σ(−x)·A at x = τ(ρ − 1)."""
    tau = xp.where(adv > 0, xp.asarray(tau_pos, dtype=rho.dtype), xp.asarray(tau_neg, dtype=rho.dtype))
    x = tau * (rho - 1)
    gate = _xp.sigmoid(xp, x)
    return gate * 4 / tau * adv, 4 * rho * gate * _xp.sigmoid(xp, -x) * adv


def _per_token_loss(xp, lp, old, ref, adv, m, clip_params, beta, kl_kind, kl_clamp, kl_ratio_weight, clamp,
                    token_policy):
    """The policy term −C_t and the KL term β·w_t·KL_t of ℓ_t and their derivatives in logp_t,
    from the pieces of ``clip`` and ``kl``; C_t is PPO's clipped surrogate, CISPO's or SAPO's term
    (``token_policy``). ``clamp`` c: log ρ clamped to [−c, c] before exp (verl 0.9.1, OpenRLHF
    0.11.2), ρ constant outside the closed band."""
    # Masked-out positions may hold any finite numbers; a neutral 0 there keeps exp() of an
    # arbitrary difference from overflowing. Their aggregate weight is 0 either way.
    on = m == 1
    log_ratio = _xp.masked(xp, on, lp - old)
    inside = None if clamp is None else (log_ratio >= -clamp) & (log_ratio <= clamp)
    if clamp is not None:
        log_ratio = _xp.clamp(xp, log_ratio, -clamp, clamp)
    log_r = _xp.masked(xp, on, ref - lp)
    rho = xp.exp(log_ratio)
    kind, *constants = token_policy
    if kind == "cispo":
        # ŵ_t is detached: the gradient runs through logπ_t alone, never through the clamp
        objective, dobjective = _cispo(xp, _xp.masked(xp, on, lp), rho, adv[:, None], *constants[0])
    elif kind == "reinforce":
        # REINFORCE (Williams 1992): the objective A_i·logπ_t, no ratio and no clip
        objective, dobjective = adv[:, None] * _xp.masked(xp, on, lp), adv[:, None] + xp.zeros_like(lp)
    elif kind in validate.COV_POLICY_LOSSES:
        objective, dobjective = _cov_terms(xp, kind, constants, lp, old, rho, inside, adv[:, None], on)
    elif kind == "sapo":
        objective, dobjective = _sapo(xp, rho, adv[:, None], *constants[0])
        if inside is not None:
            dobjective = _xp.masked(xp, inside, dobjective)
    else:
        objective, active = surrogate(xp, rho, adv[:, None], *clip_params)
        if inside is not None:
            active = active & inside
        dobjective = _xp.masked(xp, active, rho * adv[:, None])
    penalty = kl.clamped(xp, log_r, kl_kind, kl_clamp)
    dpenalty = kl.clamped_dlogp(xp, log_r, kl_kind, kl_clamp)
    if kl_ratio_weight:
        # w = ρ stays differentiable (TRL use_bias_correction_kl): d(ρ·KL) = ρ·(KL + dKL), or ρ·dKL
        # where the clamp holds ρ constant.
        weighted = rho * kl.clamped_plus_dlogp(xp, log_r, kl_kind, kl_clamp)
        dpenalty = weighted if inside is None else xp.where(inside, weighted, rho * dpenalty)
        penalty = rho * penalty
    return -objective, -dobjective, beta * penalty, beta * dpenalty


def _gmpo_log_ratio(xp, log_ratio, adv, eps_low, eps_high):
    """GMPO's sign-aware log-space clip (arXiv 2507.20673 §3) and the mask of tokens on
    its unclipped branch (ties included)."""
    bound = xp.clip(log_ratio, -eps_low, eps_high)
    active = xp.where(adv > 0, log_ratio <= bound, log_ratio >= bound)
    return xp.where(active, log_ratio, bound), active


def _sequence_loss(xp, lp, old, ref, adv, m, clip_params, beta, kl_kind, kl_clamp, kl_ratio_weight,
                   policy_loss, log_band):
    """The two terms of ℓ_t = −C_i + β·w_t·KL_t with a sequence ratio s_i (GSPO arXiv 2507.18071
    §4.1 eq. 5; GMPO arXiv 2507.20673 §3) and their derivative pieces: (policy, penalty,
    through_policy, through_penalty, direct, pooled) — each term's derivative in log s_i, the
    KL's own dℓ_t/dlogp_t, and dlog s_i/dlogp_u (m_u/max(n_i, 1), times GMPO's clip mask)."""
    on = m == 1
    log_ratio = _xp.masked(xp, on, lp - old)
    log_r = _xp.masked(xp, on, ref - lp)
    counts = xp.maximum(xp.sum(m, axis=1), xp.ones_like(m[:, 0]))
    if policy_loss == "gmpo":
        token_log, active = _gmpo_log_ratio(xp, log_ratio, adv[:, None], *log_band)
        pooled = _xp.masked(xp, active, m) / counts[:, None]
    else:
        token_log, pooled = log_ratio, m / counts[:, None]
    s = xp.exp(xp.sum(_xp.masked(xp, on, token_log), axis=1) / counts)
    if policy_loss == "gmpo":
        objective = dobjective = adv * s
    else:
        objective, active_rows = surrogate(xp, s, adv, *clip_params)
        dobjective = _xp.masked(xp, active_rows, s * adv)
    penalty = kl.clamped(xp, log_r, kl_kind, kl_clamp)
    dpenalty = kl.clamped_dlogp(xp, log_r, kl_kind, kl_clamp)
    zero = xp.zeros_like(lp)
    if kl_ratio_weight:
        penalty, dpenalty = s[:, None] * penalty, s[:, None] * dpenalty
    through_penalty = beta * penalty if kl_ratio_weight else zero
    return (-objective[:, None] + zero, beta * penalty, -dobjective[:, None] + zero, through_penalty,
            beta * dpenalty, pooled)


def _sequence_gradient(xp, w_policy, w_penalty, level, pieces):
    """dloss/dlogp from the pieces: GSPO-token's straight-through ratio moves with its own token;
    GSPO's and GMPO's s_i with every token of the row (pooled)."""
    _, _, through_policy, through_penalty, direct, pooled = pieces
    through = w_policy * through_policy + w_penalty * through_penalty
    if level == "sequence-token":
        return through + w_penalty * direct
    return pooled * xp.sum(through, axis=1)[:, None] + w_penalty * direct


def _log_band(eps_low, eps_high):
    lo, hi, _ = validate.clip_band(eps_low, eps_high, None)
    return lo, hi


def _is_weight(xp, is_weight, lp):
    """The detached per-token weight of the policy term (TRL 1.16.0, verl 0.9.1, ART: the token loss
    times the rollout correction's weight), in the working dtype, or None."""
    if is_weight is None:
        return None
    w = _xp.array(xp, "is_weight", is_weight, lp.dtype)
    validate.same_shape(logp=_xp.shape(lp), is_weight=_xp.shape(w))
    validate.is_weights(bool(xp.any(w < 0)))
    return w


def loss(logp, old_logp, ref_logp, advantages, mask, eps_low: float = 0.2,
         eps_high: float | None = None, dual_clip: float | None = None, beta: float = 0.04,
         kl_kind: str = "k3", kl_clamp: float | None = None, kl_ratio_weight: bool = False,
         aggregation: str = "seq-mean-token-mean", norm_length: float | None = None,
         ratio_level: str = "token", policy_loss: str = "ppo-clip", log_ratio_clamp: float | None = None,
         kl_aggregation: str | None = None, mean_eps: float = 0.0, cispo_clip: str = "upper",
         sapo_tau_pos: float = 1.0, sapo_tau_neg: float = 1.05, kl_cov_ratio: float = 0.0002,
         kl_cov_coef: float = 1.0, mean_eps_scope: str = "per-row", selected=None, is_weight=None):
    """GRPO loss (to minimise): aggregate over tokens of −C_t plus β·aggregate of w_t·KL_t.

    DeepSeekMath §4.1.1 eq. 3–4 (β = 0.04 in §4.2); DAPO §3.1 (``eps_high``) and §3.3
    (``token-mean``); Dr. GRPO §3 (``seq-mean-token-sum-norm``); dual clip (Ye et al. 2020);
    w_t = ρ_t when ``kl_ratio_weight`` (TRL 1.16 use_bias_correction_kl), else 1.
    ``ratio_level`` 'sequence' (GSPO, arXiv 2507.18071 eq. 5) or 'sequence-token' (GSPO-token,
    §4.3) replaces ρ_t by the row's s_i = exp(mean Δ); ``policy_loss='gmpo'`` (arXiv 2507.20673
    §3) is C_i = A_i·exp(mean of the log-space-clipped Δ); ``policy_loss='cispo'`` (MiniMax-M1
    §3.1) is sg(ŵ_t)·A_i·logπ_t with ŵ_t bounded as ``cispo_clip`` says; ``policy_loss='sapo'``
    (arXiv 2511.20347 §3) is σ(τ(ρ_t − 1))·4/τ·A_i, τ = ``sapo_tau_pos`` if A_i > 0 else ``sapo_tau_neg``.
    Library conventions: ``log_ratio_clamp`` (log ρ_t clamped before exp), ``kl_aggregation`` (the
    KL term's own reduction; None: ``aggregation``), ``mean_eps`` (|o_i| + ε in per-row token means;
    token-mean's count + ε too under ``mean_eps_scope`` 'every').
    ``is_weight`` [B,T] (optional): a detached weight of each token's policy term, the KL term untouched.
    """
    xp, _, lp, old, ref, adv, m, clip_params, b, c, clamp, modes, token_policy = _loss_inputs(
        logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, dual_clip, beta,
        kl_kind, kl_clamp, kl_ratio_weight, aggregation, norm_length, ratio_level, policy_loss,
        log_ratio_clamp, kl_aggregation, mean_eps, cispo_clip, sapo_tau_pos, sapo_tau_neg, kl_cov_ratio,
        kl_cov_coef, mean_eps_scope, selected)
    w = _is_weight(xp, is_weight, lp)
    if ratio_level == "token":
        policy, _, penalty, _ = _per_token_loss(xp, lp, old, ref, adv, m, clip_params, b, kl_kind, c,
                                                kl_ratio_weight, clamp, token_policy)
    else:
        policy, penalty = _sequence_loss(xp, lp, old, ref, adv, m, clip_params, b, kl_kind, c, kl_ratio_weight,
                                         policy_loss, _log_band(eps_low, eps_high))[:2]
    if w is not None:
        policy = policy * w
    return _aggregate_terms(xp, policy, penalty, m, modes)


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
    xp, dt, lp, old, ref, adv, m, clip_params, b, c, clamp, modes, token_policy = _loss_inputs(
        logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, dual_clip, beta,
        kl_kind, kl_clamp, kl_ratio_weight, aggregation, norm_length, ratio_level, policy_loss,
        log_ratio_clamp, kl_aggregation, mean_eps, cispo_clip, sapo_tau_pos, sapo_tau_neg, kl_cov_ratio,
        kl_cov_coef, mean_eps_scope, selected)
    ct = scalar_cotangent(xp, cotangent, dt)
    w_policy, w_penalty = _term_weights(xp, m, modes)
    w = _is_weight(xp, is_weight, lp)
    if w is not None:   # a constant factor of each token's policy term: it scales that term's weight
        w_policy = w_policy * w
    if ratio_level == "token":
        _, dpolicy, _, dpenalty = _per_token_loss(xp, lp, old, ref, adv, m, clip_params, b, kl_kind, c,
                                                  kl_ratio_weight, clamp, token_policy)
        return {"logp": ct * (w_policy * dpolicy + w_penalty * dpenalty)}
    pieces = _sequence_loss(xp, lp, old, ref, adv, m, clip_params, b, kl_kind, c, kl_ratio_weight, policy_loss,
                            _log_band(eps_low, eps_high))
    return {"logp": ct * _sequence_gradient(xp, w_policy, w_penalty, ratio_level, pieces)}
