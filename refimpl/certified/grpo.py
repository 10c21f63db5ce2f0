"""GRPO in ball arithmetic: group advantages, clipped surrogate, masked aggregation, loss.

DeepSeekMath (Shao et al. 2024) §4.1.1 eq. 3–4 and §4.1.2; PPO (Schulman et al. 2017) eq. 7;
DAPO (Yu et al. 2025) §3.1–3.3; Dr. GRPO (Liu et al. 2025) §3; dual clip (Ye et al. 2020).
Per token t of response i (advantage A_i):

    ρ_t = exp(logp_t − old_logp_t)
    C_t = min(ρ_t·A_i, clip(ρ_t, 1 − ε_low, 1 + ε_high)·A_i);  dual clip: max(C_t, c·A_i) if A_i < 0
    ℓ_t = −C_t + β·w_t·KL_t (w_t = ρ_t when kl_ratio_weight),  loss = aggregate(ℓ, mask)

Branches (catalog conventions): a tie of the two branches of the min takes the unclipped one;
the clip band is closed; the dual clip replaces C only where c·A is strictly larger. The min is
decided without comparing two products: with ρ inside the band the branches are the same
number; outside it, ρA − bound·A = (ρ − bound)·A has a sign known from the band side and the
sign of A (an exact binary64 input).
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.certified import _ball
from lossproof.refimpl.certified._ball import mask_rows
from lossproof.refimpl.certified._rollout import rollout_correction
from lossproof.refimpl.certified.kl import penalty

__all__ = ["advantages", "aggregate", "aggregate_vjp", "clip", "clip_vjp", "loss", "loss_vjp",
           "rollout_correction"]


# ----------------------------------------------------------------------------- advantages

def _mean(xs):
    return _ball.fsum(xs) / len(xs)


def _std(xs, ddof):
    m = _mean(xs)
    return (_ball.fsum(_ball.square(x - m) for x in xs) / (len(xs) - ddof)).sqrt()


def _constant(xs) -> bool:
    # decided on the binary64 rewards themselves (exact balls compare exactly)
    return all(x == xs[0] for x in xs)


def _advantages(diff, rewards, scale="group", std_ddof=0, eps=0.0, degenerate="zero", baseline="mean"):
    r = _ball.balls("rewards", rewards)
    shape = _ball.shape(r)
    validate.rank("rewards", shape, 2)
    validate.nonempty("rewards", shape)
    validate.advantage_scale(scale)
    ddof = validate.std_ddof(std_ddof)
    e = _ball.ball(validate.advantage_eps(eps))
    validate.degenerate(degenerate)
    validate.advantage_baseline(baseline)
    n_groups, g = shape
    # verl: a singleton group has mean 0 (and std 1)
    raw_singletons = degenerate == "raw" and g == 1
    if baseline == "none" or raw_singletons:
        c = [list(row) for row in r]
    elif baseline == "mean":
        c = [[x - _mean(row) for x in row] for row in r]
    else:
        # RLOO: the mean of the other G − 1 rewards; G = 1 is degenerate (below)
        c = [[x - (_ball.fsum(row) - x) / max(g - 1, 1) for x in row] for row in r]
    everything = [x for row in r for x in row]
    if scale == "group":
        degen = [g == 1 or _constant(row) for row in r]
        divisor = [None if d else _std(row, ddof) + e for row, d in zip(r, degen)]
    elif scale in ("batch", "whiten"):
        spread = everything if scale == "batch" else [x for row in c for x in row]
        # 'whiten' decides "all c equal" on balls: c is exact for baselines 'none' and raw
        # singletons; otherwise c is constant exactly when every group is constant (c = 0)
        if scale == "whiten" and baseline != "none" and not raw_singletons:
            constant = all(_constant(row) for row in r)
        else:
            constant = _constant(spread)
        batch = len(everything) == 1 or constant
        degen = [batch] * n_groups
        divisor = [None if batch else _std(spread, ddof) + e] * n_groups
        if scale == "whiten" and not batch and (baseline == "none" or raw_singletons):
            # a group baseline leaves every group summing to 0: the batch mean of c is exactly 0
            shift = _mean(spread)
            c = [[x - shift for x in row] for row in c]
    else:
        degen = [False] * n_groups
        divisor = [_ball.ONE] * n_groups
    if baseline == "leave-one-out" and g == 1 and not raw_singletons:
        degen = [True] * n_groups
    adv, keep = [], []
    for row, d, div in zip(c, degen, divisor):
        keep.append(_ball.ZERO if d and degenerate == "drop" else _ball.ONE)
        adv.append([_ball.ZERO] * g if d else [x / div for x in row])
    if raw_singletons and scale != "whiten":
        adv = [[x if scale == "none" else x / (1 + e) for x in row] for row in r]
    return {"advantages": adv, "keep": keep}


# ----------------------------------------------------------------------------- clipped surrogate

def _band(eps_low, eps_high, dual_clip):
    lo, hi, c = validate.clip_band(eps_low, eps_high, dual_clip)
    return 1 - _ball.ball(lo), 1 + _ball.ball(hi), None if c is None else _ball.ball(c)


def surrogate(rho, adv, lower, upper, dual):
    """C = min(ρA, clip(ρ, lower, upper)·A), then the dual clip; ``adv`` an exact ball."""
    a = _ball.sign(adv)
    side = _ball.band(rho, lower, upper)
    if side == 0 or a == 0 or (side > 0) == (a < 0):
        value = rho * adv                  # unclipped branch smaller, or a tie
    else:
        value = (upper if side > 0 else lower) * adv
    if dual is not None and a < 0 and _ball.compare(dual * adv, value) > 0:
        value = dual * adv
    return value


def _clamped_exp(log_ratio, clamp):
    """exp of log ρ clamped to [−c, c] (verl 0.9.1 / OpenRLHF 0.11.2: c = 20; constant outside
    the closed band), or of log ρ itself when ``clamp`` is None."""
    return _ball.exp(log_ratio if clamp is None else _ball.clip(log_ratio, -clamp, clamp))


def _clip(diff, logp, old_logp, advantages, eps_low=0.2, eps_high=None, dual_clip=None, log_ratio_clamp=None):
    lp = _ball.balls("logp", logp)
    old = _ball.balls("old_logp", old_logp)
    adv = _ball.balls("advantages", advantages)
    validate.same_shape(logp=_ball.shape(lp), old_logp=_ball.shape(old), advantages=_ball.shape(adv))
    band = _band(eps_low, eps_high, dual_clip)
    clamp = validate.log_ratio_clamp(log_ratio_clamp, "token")
    clamp = None if clamp is None else _ball.ball(clamp)
    lp = diff("logp", lp)

    def each(a, b, c):
        if isinstance(a, list):
            return [each(x, y, z) for x, y, z in zip(a, b, c)]
        return surrogate(_clamped_exp(a - b, clamp), c, *band)

    return {"objective": each(lp, old, adv)}


# ----------------------------------------------------------------------------- aggregation

def aggregate_rows(values, mask, mode, norm, eps=_ball.ZERO, token_eps=_ball.ZERO):
    """Masked reduction of rows of values (Vars or balls; masked entries are never read); ``eps``
    (the ``mean_eps`` convention) is added to each row's token count in a per-row token mean,
    ``token_eps`` (ε under mean_eps_scope 'every', else 0) to token-mean's count of the batch."""
    lengths = [sum(1 for m in row if m) for row in mask]
    if not any(lengths):
        validate.fail("mask", "selects no token")
    sums = [_ball.fsum(v for v, m in zip(vrow, mrow) if m) for vrow, mrow in zip(values, mask)]
    if mode == "token-mean":  # DAPO §3.3
        return _ball.fsum(sums) / (sum(lengths) + token_eps)
    rows = [i for i, n in enumerate(lengths) if n > 0]
    if mode == "seq-mean-token-mean":  # DeepSeekMath eq. 3: 1/G Σ_i 1/|o_i| Σ_t
        return _ball.fsum(sums[i] / (lengths[i] + eps) for i in rows) / len(rows)
    seq_sum = _ball.fsum(sums[i] for i in rows) / len(rows)
    return seq_sum if mode == "seq-mean-token-sum" else seq_sum / norm  # Dr. GRPO §3


def _aggregate(diff, values, mask, mode="seq-mean-token-mean", norm_length=None, mean_eps=0.0,
               mean_eps_scope="per-row"):
    v = _ball.balls("values", values)
    shape = _ball.shape(v)
    validate.rank("values", shape, 2)
    m = mask_rows("mask", mask, shape)
    validate.aggregation(mode, "mode")
    norm = validate.norm_length(norm_length)
    norm = _ball.ball(shape[1] if norm is None else norm)
    eps = validate.mean_eps(mean_eps)
    token_eps = _ball.ball(validate.mean_eps_scope(mean_eps_scope, eps, (mode,)))
    v = diff("values", v)
    return {"value": aggregate_rows(v, m, mode, norm, _ball.ball(eps), token_eps)}


# ----------------------------------------------------------------------------- loss

def _sequence_ratios(lrow, orow, adv, mrow, level, policy_loss, log_band):
    """The ratio each unmasked token of a row uses: s_i = exp(mean Δ_t) (GSPO, arXiv 2507.18071
    §4.1 eq. 5), its straight-through sg[s_i]·π_t/sg[π_t] (GSPO-token, §4.3), or GMPO's geometric
    mean of the sign-aware log-space-clipped Δ_t (arXiv 2507.20673 §3: A > 0 caps Δ at
    ε_high, otherwise Δ is floored at −ε_low; an entry on the bound keeps its gradient)."""
    logs = [x - o for x, o, on in zip(lrow, orow, mrow) if on]
    if not logs:
        return [None] * len(lrow)
    if policy_loss == "gmpo":
        positive = _ball.sign(adv) > 0
        logs = [_ball.clip(d, None, log_band[1]) if positive else _ball.clip(d, -log_band[0], None)
                for d in logs]
    s = _ball.exp(_ball.fsum(logs) / len(logs))
    if level == "sequence":
        return [s] * len(lrow)
    return [_ball.detach(s) * _ball.exp(x - _ball.detach(x)) for x in lrow]


def _token_policy(policy_loss, eps_low, eps_high, cispo_clip, tau_pos, tau_neg):
    """CISPO's weight bounds (lower or None, upper) or SAPO's (τ_pos, τ_neg), as exact balls."""
    validate.cispo_clip(cispo_clip, policy_loss, eps_low, eps_high)
    taus = (_ball.ball(validate.sapo_temperature("sapo_tau_pos", tau_pos)),
            _ball.ball(validate.sapo_temperature("sapo_tau_neg", tau_neg)))
    if policy_loss == "cispo":
        lo, hi, _ = validate.clip_band(eps_low, eps_high, None)
        if cispo_clip == "raw-upper":
            return None, _ball.ball(hi)
        return (1 - _ball.ball(lo) if cispo_clip == "both" else None), 1 + _ball.ball(hi)
    return taus if policy_loss == "sapo" else None


def _selection(policy_loss, selected, lp, adv, m, ratio, shape):
    """Clip-Cov's or KL-Cov's selection (arXiv 2505.22617 §4) as rows of booleans: ``selected``
    as given (valid tokens only), or KL-Cov's top-k covariance tokens (verl 0.9.1
    compute_policy_loss_kl_cov: k = max(1, ⌊N·kl_cov_ratio⌋), cov_t = (A_t − Ā)·(logπ_t − mean
    logπ) over the N valid tokens). The order is proven: every chosen ball lies strictly above
    every other one (else :class:`_ball.Straddle`: more precision), an exact tie is refused."""
    if selected is not None:
        s = mask_rows("selected", selected, shape)
        validate.selected_within(any(si and not mi for srow, mrow in zip(s, m) for si, mi in zip(srow, mrow)))
        return s
    valid = [(i, t) for i, mrow in enumerate(m) for t, on in enumerate(mrow) if on]
    if not valid:
        validate.fail("mask", "selects no token")
    a_mean = _mean([adv[i] for i, _ in valid])
    l_mean = _mean([_ball.value(lp[i][t]) for i, t in valid])
    cov = [(adv[i] - a_mean) * (_ball.value(lp[i][t]) - l_mean) for i, t in valid]
    order = sorted(range(len(valid)), key=lambda j: _ball.mid_float(cov[j]), reverse=True)
    k = validate.kl_cov_count(ratio, len(valid))
    if k < len(valid):
        validate.top_k_untied(_ball.compare(cov[order[k - 1]], cov[order[k]]) == 0, k)
        # decided pairs order their mids alike: a pair that is not proven above raises Straddle
        for x in order[:k]:
            for y in order[k:]:
                _ball.compare(cov[x], cov[y])
    chosen = {valid[j] for j in order[:k]}
    return [[(i, t) in chosen for t in range(len(mrow))] for i, mrow in enumerate(m)]


def _cispo(x, log_rho, a, lower, upper):
    """CISPO (MiniMax-M1, arXiv 2506.13585, §3.1 eq. 4–5): sg(ŵ)·A·logπ, ŵ = ρ clipped to
    [lower, upper] (lower None: no lower bound); ``log_rho`` is detached, so the weight is a
    constant on the tape."""
    return _ball.clip(_ball.exp(log_rho), lower, upper) * a * x


def _sapo(log_rho, a, tau_pos, tau_neg):
    """SAPO (arXiv 2511.20347 §3): σ(τ(ρ − 1))·4/τ·A, τ = τ_pos where A > 0, else τ_neg; ρ − 1
    formed as expm1(log ρ)."""
    tau = tau_pos if _ball.sign(a) > 0 else tau_neg
    return _ball.sigmoid(tau * _ball.expm1(log_rho)) * 4 / tau * a


def _is_weight(is_weight, shape):
    """grpo.loss's optional per-token weight of the policy term (TRL 1.16.0 grpo_trainer.py: the token
    loss times importance_sampling_ratio; verl 0.9.1 core_algos.py: pg_losses * rollout_is_weights), as
    rows of exact balls, or None; finite and >= 0."""
    if is_weight is None:
        return None
    w = _ball.balls("is_weight", is_weight)
    validate.same_shape(logp=shape, is_weight=_ball.shape(w))
    validate.is_weights(any(_ball.sign(x) < 0 for row in w for x in row))
    return w


def _loss(diff, logp, old_logp, ref_logp, advantages, mask, eps_low=0.2, eps_high=None, dual_clip=None,
          beta=0.04, kl_kind="k3", kl_clamp=None, kl_ratio_weight=False, aggregation="seq-mean-token-mean",
          norm_length=None, ratio_level="token", policy_loss="ppo-clip", log_ratio_clamp=None,
          kl_aggregation=None, mean_eps=0.0, cispo_clip="upper", sapo_tau_pos=1.0, sapo_tau_neg=1.05,
          kl_cov_ratio=0.0002, kl_cov_coef=1.0, mean_eps_scope="per-row", selected=None, is_weight=None):
    lp = _ball.balls("logp", logp)
    shape = _ball.shape(lp)
    validate.rank("logp", shape, 2)
    old = _ball.balls("old_logp", old_logp)
    ref = _ball.balls("ref_logp", ref_logp)
    validate.same_shape(logp=shape, old_logp=_ball.shape(old), ref_logp=_ball.shape(ref))
    adv = _ball.balls("advantages", advantages)
    validate.per_sequence("advantages", _ball.shape(adv), shape)
    m = mask_rows("mask", mask, shape)
    band = _band(eps_low, eps_high, dual_clip)
    b = _ball.ball(validate.kl_penalty_beta(beta))
    validate.kl_kind(kl_kind, "kl_kind")
    c = validate.kl_clamp(kl_clamp, "kl_clamp")
    c = None if c is None else _ball.ball(c)
    weighted = validate.kl_ratio_weight(kl_ratio_weight)
    level = validate.ratio_level(ratio_level)
    validate.policy_loss(policy_loss, level, dual_clip, kl_ratio_weight)
    clamp = validate.log_ratio_clamp(log_ratio_clamp, level)
    validate.cov_log_ratio_clamp(clamp, policy_loss)
    clamp = None if clamp is None else _ball.ball(clamp)
    cov_ratio = validate.kl_cov_ratio(kl_cov_ratio)
    cov_coef = _ball.ball(validate.kl_cov_coef(kl_cov_coef))
    log_band = [_ball.ball(x) for x in validate.clip_band(eps_low, eps_high, None)[:2]]
    validate.aggregation(aggregation)
    norm = validate.norm_length(norm_length)
    norm = _ball.ball(shape[1] if norm is None else norm)
    kl_mode = validate.kl_aggregation(kl_aggregation) or aggregation
    eps = validate.mean_eps(mean_eps)
    token_eps = _ball.ball(validate.mean_eps_scope(mean_eps_scope, eps, (aggregation, kl_mode)))
    eps = _ball.ball(eps)
    token_policy = _token_policy(policy_loss, eps_low, eps_high, cispo_clip, sapo_tau_pos, sapo_tau_neg)
    validate.selection(policy_loss, selected is not None)
    picked = (_selection(policy_loss, selected, lp, adv, m, cov_ratio, shape)
              if policy_loss in validate.COV_POLICY_LOSSES else None)
    weight = _is_weight(is_weight, shape)
    lp = diff("logp", lp)
    policy, kl_term = [], []
    for i, (lrow, orow, rrow, a, mrow) in enumerate(zip(lp, old, ref, adv, m)):
        if ratio_level != "token":
            ratios = _sequence_ratios(lrow, orow, a, mrow, ratio_level, policy_loss, log_band)
        prow, krow = [], []
        for t, (x, o, r, on) in enumerate(zip(lrow, orow, rrow, mrow)):
            if not on:          # never read by the aggregation (any finite number may sit there)
                prow.append(None)
                krow.append(None)
                continue
            if ratio_level == "token":
                # verl 0.9.1 / OpenRLHF 0.11.2: log ρ clamped to [−c, c] before exp (constant outside)
                log_rho = x - o if clamp is None else _ball.clip(x - o, -clamp, clamp)
                rho = _ball.exp(log_rho)
            else:
                rho = ratios[t]
            kl = penalty(r - x, kl_kind, c)
            if policy_loss == "cispo":
                objective = _cispo(x, _ball.detach(log_rho), a, *token_policy)
            elif policy_loss == "reinforce":
                objective = a * x           # REINFORCE (Williams 1992): no ratio, no clip
            elif policy_loss == "clip-cov":
                # arXiv 2505.22617 §4 / verl 0.9.1 compute_policy_loss_clip_cov: the selected
                # token's PPO term is multiplied by 0 (value and gradient)
                objective = _ball.ZERO if picked[i][t] else surrogate(rho, a, *band)
            elif policy_loss == "kl-cov":
                # verl 0.9.1 compute_policy_loss_kl_cov: the unclipped ρA, minus k·|Δ| where selected
                objective = a * rho - (cov_coef * _ball.absolute(x - o) if picked[i][t] else _ball.ZERO)
            elif policy_loss == "sapo":
                objective = _sapo(log_rho, a, *token_policy)
            else:
                objective = a * rho if policy_loss == "gmpo" else surrogate(rho, a, *band)
            # the rollout correction's weight scales the policy term only (a constant: no gradient)
            prow.append(-objective if weight is None else -objective * weight[i][t])
            krow.append(b * (rho * kl if weighted else kl))
        policy.append(prow)
        kl_term.append(krow)
    return {"loss": aggregate_rows(policy, m, aggregation, norm, eps, token_eps)
            + aggregate_rows(kl_term, m, kl_mode, norm, eps, token_eps)}


advantages, _ = _ball.pair(_advantages, ("advantages", "keep"), ())
advantages.__doc__ = "Group-relative advantages (DeepSeekMath §4.1.2; Dr. GRPO §3; DAPO §3.2), as balls."
clip, clip_vjp = _ball.pair(_clip, ("objective",), ("logp",))
clip.__doc__ = "PPO/GRPO clipped surrogate (PPO eq. 7; DeepSeekMath eq. 3; dual clip), as balls."
aggregate, aggregate_vjp = _ball.pair(_aggregate, ("value",), ("values",))
aggregate.__doc__ = "Masked reduction (DeepSeekMath eq. 3; DAPO §3.3; Dr. GRPO §3), as balls."
loss, loss_vjp = _ball.pair(_loss, ("loss",), ("logp",))
loss.__doc__ = "GRPO loss −aggregate(C) + β·aggregate(w·KL) (DeepSeekMath eq. 3–4), as balls."
