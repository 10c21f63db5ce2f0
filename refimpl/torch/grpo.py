"""Group Relative Policy Optimization: advantages, clipped surrogate, aggregation, loss
(PyTorch, autograd).

Sources: DeepSeekMath (Shao et al. 2024) §4.1.1 eq. 3–4 and §4.1.2; PPO (Schulman et al. 2017)
eq. 7; DAPO (Yu et al. 2025) §3.1–3.3; Dr. GRPO (Liu et al. 2025) §3; dual clip (Ye et al.
2020); [reading-math-3] §GRPO. Per token t of response i, with advantage A_i:

    ρ_t = exp(logp_t − old_logp_t),
    C_t = min(ρ_t·A_i, clip(ρ_t, 1 − ε_low, 1 + ε_high)·A_i)     (maximised)
    ℓ_t = −C_t + β·w_t·KL_t,   loss = aggregate(ℓ, mask)          (minimised)
"""
from __future__ import annotations

import torch

from lossproof.refimpl import validate
from lossproof.refimpl.torch import _common, kl
from lossproof.refimpl.torch._rollout import rollout_correction

__all__ = ["advantages", "clip", "aggregate", "loss", "rollout_correction"]

SCALES = validate.SCALES
DEGENERATE = validate.DEGENERATE
MODES = validate.AGGREGATIONS


# ----------------------------------------------------------------------------- advantages

def _std(x: torch.Tensor, ddof: int, dim=None) -> torch.Tensor:
    """Standard deviation about the mean (two passes: no cancellation in Σ(x − mean)²)."""
    n = x.numel() if dim is None else x.shape[dim]
    mean = x.mean() if dim is None else x.mean(dim=dim, keepdim=True)
    sq = ((x - mean) ** 2).sum() if dim is None else ((x - mean) ** 2).sum(dim=dim)
    return torch.sqrt(sq / (n - ddof)) if n > ddof else torch.full_like(sq, float("inf"))


@torch.no_grad()
def advantages(rewards, scale: str = "group", std_ddof: int = 0, eps: float = 0.0,
               degenerate: str = "zero", baseline: str = "mean"):
    """Group-relative advantages A_ij = (r_ij − b_ij) / (std + eps); no gradient.

    Baselines b: 'mean' (DeepSeekMath §4.1.2), 'leave-one-out' (RLOO: Kool et al. 2019;
    Ahmadian et al. 2024 §3; the mean of the other G − 1 rewards, formed as
    G/(G − 1)·(r − mean)), 'none' (REINFORCE++, arXiv 2501.03262). Scales: 'group'
    (DeepSeekMath §4.1.2: std over the group's G rewards); TRL ``scale_rewards='batch'`` (std
    over all B·G rewards); Dr. GRPO §3 ('none'); 'whiten' (REINFORCE++: c = r − b centred
    and scaled by its std over the whole batch). ``std_ddof`` 0 is the population std of
    [reading-math-3] ((0,1,1,0) → (−1,1,1,−1)). A group is degenerate when G == 1 or its
    rewards are all equal (for 'batch': B·G == 1 or all rewards equal; 'whiten': B·G == 1 or
    all c equal; 'none': never; with leave-one-out also G == 1), decided on the rewards
    themselves, not on a rounded std. ``degenerate``: 'zero' → A = 0, keep = 1; 'drop' (DAPO
    §3.2) → A = 0, keep = 0; 'raw' (verl) → a singleton group gets baseline 0 and
    r/(1 + eps) (r for 'none', the whitening of r for 'whiten'), a zero-std group with G > 1
    gets 0. ``rewards`` is [B,G].
    Returns {"advantages"[B,G], "keep"[B] (1 or 0, in the rewards' dtype)}.
    """
    r = _common.array("rewards", rewards)
    validate.rank("rewards", tuple(r.shape), 2)
    validate.nonempty("rewards", tuple(r.shape))
    validate.advantage_scale(scale)
    ddof = validate.std_ddof(std_ddof)
    e = validate.advantage_eps(eps)
    validate.degenerate(degenerate)
    validate.advantage_baseline(baseline)

    out = r.dtype
    x = r.detach().to(_common.work_dtype(out))
    n_groups, g = x.shape
    raw_singletons = degenerate == "raw" and g == 1
    if baseline == "none" or raw_singletons:
        centred = x
    else:
        centred = x - x.mean(dim=1, keepdim=True)
        if baseline == "leave-one-out":
            centred = centred * (g / max(g - 1, 1))
    if scale == "group":
        degen = (x == x[:, :1]).all(dim=1) | (g == 1)
        divisor = (_std(x, ddof, dim=1) + e)[:, None]
    elif scale == "batch":
        degen = ((x == x.flatten()[0]).all() | (x.numel() == 1)).expand(n_groups)
        divisor = _std(x, ddof) + e
    elif scale == "whiten":
        if baseline == "none" or raw_singletons:
            constant = (centred == centred.flatten()[0]).all()
        else:
            # c = r − b is constant exactly when every group is (then c = 0)
            constant = (x == x[:, :1]).all()
        degen = (constant | (x.numel() == 1)).expand(n_groups)
        divisor = _std(centred, ddof) + e
        if baseline == "none" or raw_singletons:
            # a group baseline leaves every group summing to 0: the batch mean of c is exactly 0
            centred = centred - centred.mean()
    else:
        degen = torch.zeros(n_groups, dtype=torch.bool, device=x.device)
        divisor = 1.0
    if baseline == "leave-one-out" and g == 1 and not raw_singletons:
        degen = torch.ones(n_groups, dtype=torch.bool, device=x.device)
    adv = torch.where(degen[:, None], torch.zeros_like(x), centred / divisor)
    keep = torch.ones(n_groups, dtype=x.dtype, device=x.device)
    if degenerate == "drop":
        keep = torch.where(degen, torch.zeros_like(keep), keep)
    if raw_singletons and scale != "whiten":
        adv = x.clone() if scale == "none" else x / (1 + e)
    return {"advantages": adv.to(out), "keep": keep.to(out)}


# ----------------------------------------------------------------------------- clipped surrogate

def _clip_params(eps_low, eps_high, dual_clip):
    """(1 − ε_low, 1 + ε_high, c) as Python floats."""
    lo, hi, c = validate.clip_band(eps_low, eps_high, dual_clip)
    return 1 - lo, 1 + hi, c


def _surrogate(log_ratio: torch.Tensor, adv: torch.Tensor, lower=None, upper=None,
               dual=None, cap=None) -> torch.Tensor:
    """C = min(ρA, clip(ρ, lower, upper)·A) with ρ = exp(log_ratio), differentiable in
    ``log_ratio``; ``adv`` is a constant broadcast against it.

    The gradient is ρA where the unclipped branch is active (ties included) and 0 elsewhere
    (PPO eq. 7): where the clipped branch is strictly smaller ρ lies outside the band, so that
    branch is flat and is built without a graph. ``dual`` (Ye et al. 2020): where A < 0,
    C = max(C, c·A), flat. ``cap`` (used by proximal_kl): ρ → min(ρ, cap) first, flat where
    ρ > cap. ``lower=None``: no clip band. The active branch sees the log-ratio only where it
    is active (double where), so an overflowing ρ of a flat branch never meets a 0 cotangent
    (0·inf = NaN).
    """
    with torch.no_grad():
        rho = torch.exp(log_ratio)
        live = torch.ones_like(rho, dtype=torch.bool)
        if cap is not None:
            live = rho <= cap  # ρ == cap passes the gradient (closed, as torch.clamp)
            rho = torch.where(live, rho, torch.full_like(rho, cap))
        zero = torch.zeros_like(rho)
        unclipped = torch.where(adv == 0, zero, rho * adv)  # A = 0: no inf·0 at ρ = inf
        value = unclipped
        if lower is not None:
            clipped = torch.where(adv == 0, zero, torch.clamp(rho, lower, upper) * adv)
            take = unclipped <= clipped  # ties take the unclipped branch
            value = torch.where(take, unclipped, clipped)
            live = live & take
        if dual is not None:
            floor = dual * adv + zero
            dual_on = (adv < 0) & (floor > value)
            value = torch.where(dual_on, floor, value)
            live = live & ~dual_on
        live = live & (adv != 0)  # ρ·0 has gradient 0: kept off the graph (ρ may be inf)
    safe = torch.where(live, log_ratio, torch.zeros_like(log_ratio))
    return torch.where(live, torch.exp(safe) * adv, value)


def clip(logp, old_logp, advantages, eps_low: float = 0.2, eps_high: float | None = None,
         dual_clip: float | None = None, log_ratio_clamp: float | None = None):
    """PPO/GRPO clipped surrogate C = min(ρA, clip(ρ, 1 − ε_low, 1 + ε_high)·A), ρ = π/π_old.

    PPO (Schulman et al. 2017) eq. 7; DeepSeekMath §4.1.1 eq. 3; DAPO §3.1 clip-higher
    (``eps_high`` ≠ ``eps_low``; None means symmetric); dual clip (Ye et al. 2020, verl's
    clip_ratio_c): where A < 0, C = max(C, c·A). [reading-math-3]: A = 1, ρ = 1.5 → 1.2;
    A = −1, ρ = 0.5 → −0.8. ``log_ratio_clamp`` c: ρ = exp(clamp(log ρ, −c, c)) (verl 0.9.1
    compute_policy_loss_vanilla, OpenRLHF 0.11.2 PolicyLoss: c = 20; no gradient outside the
    closed band). ``logp``, ``old_logp``, ``advantages`` share a shape; returns the objective of
    that shape, to be maximised. Gradient wrt ``logp``.
    """
    lp = _common.array("logp", logp)
    old = _common.array("old_logp", old_logp)
    adv = _common.array("advantages", advantages)
    validate.same_shape(logp=tuple(lp.shape), old_logp=tuple(old.shape),
                        advantages=tuple(adv.shape))
    lower, upper, dual = _clip_params(eps_low, eps_high, dual_clip)
    clamp = validate.log_ratio_clamp(log_ratio_clamp, "token")
    out = _common.result_dtype(lp, old, adv)
    work = _common.work_dtype(out)
    log_ratio = _common.upcast(lp, work) - _common.constant(old, work)
    if clamp is not None:  # torch.clamp: constant (zero gradient) outside the closed band
        log_ratio = torch.clamp(log_ratio, -clamp, clamp)
    return _surrogate(log_ratio, _common.constant(adv, work), lower, upper, dual).to(out)


# ----------------------------------------------------------------------------- aggregation

def _aggregate_params(mode_name, mode, norm_length, length):
    validate.aggregation(mode, mode_name)
    norm = validate.norm_length(norm_length)
    return float(length) if norm is None else norm


def _check_tokens(m: torch.Tensor) -> None:
    if not m.any():
        validate.fail("mask", "selects no token")


def _aggregate(values: torch.Tensor, m: torch.Tensor, mode: str, norm: float, eps: float = 0.0,
               token_eps: float = 0.0) -> torch.Tensor:
    """Masked reduction of values [B,T] (m: bool [B,T], at least one token). Masked entries
    are replaced, not multiplied, by 0: their gradient is exactly 0 whatever they hold. ``eps``
    (the ``mean_eps`` convention) is added to each row's token count in a per-row token mean,
    ``token_eps`` (ε under mean_eps_scope 'every', else 0) to token-mean's count."""
    v = torch.where(m, values, torch.zeros_like(values))
    lengths = m.sum(dim=1).to(values.dtype)
    if mode == "token-mean":  # DAPO §3.3
        return v.sum() / (lengths.sum() + token_eps)
    sums = v.sum(dim=1)
    rows = lengths > 0  # rows without tokens leave the sequence means (verl 0.9.1 agg_loss)
    n_rows = rows.sum().to(values.dtype)
    if mode == "seq-mean-token-mean":  # DeepSeekMath eq. 3: 1/G Σ_i 1/|o_i| Σ_t
        return (sums / (torch.where(rows, lengths, torch.ones_like(lengths)) + eps)).sum() / n_rows
    seq_sum = sums.sum() / n_rows
    return seq_sum if mode == "seq-mean-token-sum" else seq_sum / norm  # Dr. GRPO §3


def _mean_eps(mean_eps, scope, *modes) -> tuple:
    """(ε of the per-row means, ε of token-mean's one mean) of ``mean_eps`` under ``scope``."""
    eps = validate.mean_eps(mean_eps)
    return eps, validate.mean_eps_scope(scope, eps, modes)


def aggregate(values, mask, mode: str = "seq-mean-token-mean", norm_length: float | None = None,
              mean_eps: float = 0.0, mean_eps_scope: str = "per-row"):
    """Masked reduction of per-token values [B,T] to a scalar; mask is 0/1 [B,T].

    ``seq-mean-token-mean``: DeepSeekMath §4.1.1 eq. 3 (1/G Σ_i 1/|o_i| Σ_t);
    ``token-mean``: DAPO §3.3 (Σ m·v / Σ m); ``seq-mean-token-sum``: mean over rows of Σ_t m·v;
    ``seq-mean-token-sum-norm``: Dr. GRPO §3, that mean divided by L = ``norm_length``
    (default: the padded length T). Rows without tokens are left out of the sequence means
    (verl 0.9.1 agg_loss); a mask with no token is rejected. ``mean_eps``: each row's token
    count |o_i| + ε in 'seq-mean-token-mean' (verl 0.9.1, OpenRLHF 0.11.2: 1e−8), and token-mean's
    Σ m + ε as well under ``mean_eps_scope`` 'every' (torchtune's masked_mean). Gradient wrt
    ``values``.
    """
    v = _common.array("values", values)
    validate.rank("values", tuple(v.shape), 2)
    m = _common.mask("mask", mask, tuple(v.shape))
    norm = _aggregate_params("mode", mode, norm_length, v.shape[1])
    eps = _mean_eps(mean_eps, mean_eps_scope, mode)
    _check_tokens(m)
    work = _common.work_dtype(v.dtype)
    return _aggregate(_common.upcast(v, work), m, mode, norm, *eps).to(v.dtype)


# ----------------------------------------------------------------------------- loss

def _token_policy(policy_loss, eps_low, eps_high, cispo_clip, tau_pos, tau_neg):
    """CISPO's weight bounds (lower or None, upper) or SAPO's (τ_pos, τ_neg); None for PPO."""
    validate.cispo_clip(cispo_clip, policy_loss, eps_low, eps_high)
    taus = (validate.sapo_temperature("sapo_tau_pos", tau_pos), validate.sapo_temperature("sapo_tau_neg", tau_neg))
    if policy_loss == "cispo":
        lo, hi, _ = validate.clip_band(eps_low, eps_high, None)
        if cispo_clip == "raw-upper":
            return None, hi
        return (1 - lo if cispo_clip == "both" else None), 1 + hi
    return taus if policy_loss == "sapo" else None


def _cispo(log_ratio, lp, adv, lower, upper):
    """CISPO (MiniMax-M1, arXiv 2506.13585, §3.1 eq. 4–5): sg(ŵ)·A·logπ, ŵ = ρ clamped to
    [lower, upper] (lower None: no lower bound); gradient ŵ·A in logπ."""
    with torch.no_grad():
        weight = torch.clamp(torch.exp(log_ratio), min=lower, max=upper)
    return weight * adv * lp


def _sapo(log_ratio, adv, tau_pos, tau_neg):
    """SAPO (arXiv 2511.20347 §3): σ(τ(ρ − 1))·4/τ·A, τ = τ_pos where A > 0, else τ_neg."""
    tau = torch.where(adv > 0, torch.full_like(adv, tau_pos), torch.full_like(adv, tau_neg))
    return torch.sigmoid(tau * torch.expm1(log_ratio)) * 4 / tau * adv


def _selection(policy_loss, selected, lp, a, m, ratio):
    """Clip-Cov's or KL-Cov's selection as a bool [B,T] (arXiv 2505.22617 §4): ``selected`` as
    given (valid tokens only), or KL-Cov's top-k = max(1, ⌊N·kl_cov_ratio⌋) valid tokens by
    cov_t = (A_t − Ā)·(logπ_t − mean logπ) over the N valid tokens (verl 0.9.1
    compute_policy_loss_kl_cov), detached, in the working dtype."""
    validate.selection(policy_loss, selected is not None)
    if selected is not None:
        s = _common.mask("selected", selected, tuple(lp.shape))
        validate.selected_within(bool((s & ~m).any()))
        return s
    with torch.no_grad():
        a_tok = a[:, None].expand_as(lp)[m]
        l_tok = lp[m]
        cov = (a_tok - a_tok.mean()) * (l_tok - l_tok.mean())
        k = validate.kl_cov_count(ratio, cov.numel())
        ordered, index = torch.sort(cov, descending=True, stable=True)
        validate.top_k_untied(k < cov.numel() and bool(ordered[k - 1] == ordered[k]), k)
        picked = torch.zeros(cov.numel(), dtype=torch.bool, device=lp.device)
        picked[index[:k]] = True
        out = torch.zeros_like(m)
        out[m] = picked
    return out


def _sequence_log_ratio(log_ratio, lp, adv, m, level, policy_loss, log_band):
    """log s_i as a [B,1] column (GSPO, arXiv 2507.18071 §4.1; GMPO, arXiv 2507.20673 §3:
    the mean of sign-aware log-space-clipped Δ_t), or GSPO-token's [B,T] log of
    sg[s_i]·π_t/sg[π_t] (§4.3). ``log_ratio`` is already 0 at masked positions; a row without
    tokens has s_i = 1 (the max(n_i, 1) of TRL 1.16 and verl 0.9.1)."""
    if policy_loss == "gmpo":
        bound = torch.clamp(log_ratio, -log_band[0], log_band[1]).detach()
        active = torch.where(adv[:, None] > 0, log_ratio <= bound, log_ratio >= bound)
        log_ratio = torch.where(active, log_ratio, bound)
    counts = m.sum(dim=1).clamp(min=1).to(log_ratio.dtype)
    log_s = (log_ratio.sum(dim=1) / counts)[:, None]
    if level == "sequence-token":
        return log_s.detach() + torch.where(m, lp - lp.detach(), torch.zeros_like(lp))
    return log_s


def loss(logp, old_logp, ref_logp, advantages, mask, eps_low: float = 0.2,
         eps_high: float | None = None, dual_clip: float | None = None, beta: float = 0.04,
         kl_kind: str = "k3", kl_clamp: float | None = None, kl_ratio_weight: bool = False,
         aggregation: str = "seq-mean-token-mean", norm_length: float | None = None,
         ratio_level: str = "token", policy_loss: str = "ppo-clip", log_ratio_clamp: float | None = None,
         kl_aggregation: str | None = None, mean_eps: float = 0.0, cispo_clip: str = "upper",
         sapo_tau_pos: float = 1.0, sapo_tau_neg: float = 1.05, kl_cov_ratio: float = 0.0002,
         kl_cov_coef: float = 1.0, mean_eps_scope: str = "per-row", selected=None, is_weight=None):
    """GRPO loss (to minimise): aggregate over tokens of ℓ_t = −C_t + β·w_t·KL_t.

    DeepSeekMath §4.1.1 eq. 3–4 (clipped surrogate with the response's advantage broadcast over
    its tokens, k3 penalty, β = 0.04 in §4.2, 1/G Σ_i 1/|o_i| Σ_t aggregation); DAPO §3.1
    (``eps_high``) and §3.3 (``aggregation='token-mean'``); Dr. GRPO §3
    (``seq-mean-token-sum-norm``); dual clip (Ye et al. 2020); w_t = ρ_t, differentiable, when
    ``kl_ratio_weight`` (TRL 1.16 use_bias_correction_kl), else 1. ``beta`` may be 0.
    ``ratio_level`` 'sequence' (GSPO, arXiv 2507.18071 eq. 5) replaces ρ_t by the row's
    s_i = exp(mean Δ); 'sequence-token' (GSPO-token, §4.3) by sg[s_i]·π_t/sg[π_t] (same value,
    per-token gradient); ``policy_loss='gmpo'`` (arXiv 2507.20673 §3) is C_i = A_i·s_i
    with s_i the geometric mean of the sign-aware log-space-clipped token ratios;
    ``policy_loss='cispo'`` (MiniMax-M1 §3.1) is sg(ŵ_t)·A_i·logπ_t with ŵ_t bounded as
    ``cispo_clip`` says; ``policy_loss='sapo'`` (arXiv 2511.20347 §3) is σ(τ(ρ_t − 1))·4/τ·A_i.
    Library conventions (verl 0.9.1, OpenRLHF 0.11.2): ``log_ratio_clamp`` c clamps log ρ_t to
    [−c, c] before exp (ρ constant outside); ``kl_aggregation`` reduces the KL term with its own
    mode (None: ``aggregation``); ``mean_eps`` adds ε to each row's token count in a per-row mean
    (and to token-mean's count under ``mean_eps_scope`` 'every').
    ``policy_loss`` 'clip-cov' / 'kl-cov' (Cui et al., arXiv 2505.22617 §4; verl 0.9.1
    compute_policy_loss_clip_cov / _kl_cov): on the tokens of ``selected`` Clip-Cov drops the PPO
    term, KL-Cov's unclipped −ρ_t·A_i gains ``kl_cov_coef``·|logπ_t − logπ_old,t| (without
    ``selected``: the top-k covariance tokens, k = max(1, ⌊N·``kl_cov_ratio``⌋)); 'reinforce'
    (Williams 1992; verl 0.9.1 compute_policy_loss_gpg) is −A_i·logπ_t.
    ``is_weight`` [B,T] (optional): the rollout correction's weight, detached, multiplying each
    token's policy term and not the KL term (TRL 1.16.0 trainer/grpo_trainer.py ``per_token_loss *
    importance_sampling_ratio``; verl 0.9.1 ``pg_losses * rollout_is_weights``).
    ``logp``, ``old_logp``, ``ref_logp``, ``mask`` are [B,T], ``advantages`` [B]. Returns the
    scalar loss; gradient wrt ``logp`` (exactly 0 at masked positions).
    """
    lp = _common.array("logp", logp)
    validate.rank("logp", tuple(lp.shape), 2)
    old = _common.array("old_logp", old_logp)
    ref = _common.array("ref_logp", ref_logp)
    validate.same_shape(logp=tuple(lp.shape), old_logp=tuple(old.shape), ref_logp=tuple(ref.shape))
    adv = _common.array("advantages", advantages)
    validate.per_sequence("advantages", tuple(adv.shape), tuple(lp.shape))
    m = _common.mask("mask", mask, tuple(lp.shape))
    lower, upper, dual = _clip_params(eps_low, eps_high, dual_clip)
    b = validate.kl_penalty_beta(beta)
    validate.kl_kind(kl_kind, "kl_kind")
    c = validate.kl_clamp(kl_clamp, "kl_clamp")
    validate.kl_ratio_weight(kl_ratio_weight)
    level = validate.ratio_level(ratio_level)
    validate.policy_loss(policy_loss, level, dual_clip, kl_ratio_weight)
    clamp = validate.log_ratio_clamp(log_ratio_clamp, level)
    validate.cov_log_ratio_clamp(clamp, policy_loss)
    cov_ratio = validate.kl_cov_ratio(kl_cov_ratio)
    cov_coef = validate.kl_cov_coef(kl_cov_coef)
    norm = _aggregate_params("aggregation", aggregation, norm_length, lp.shape[1])
    kl_mode = validate.kl_aggregation(kl_aggregation) or aggregation
    eps = _mean_eps(mean_eps, mean_eps_scope, aggregation, kl_mode)
    token_policy = _token_policy(policy_loss, eps_low, eps_high, cispo_clip, sapo_tau_pos, sapo_tau_neg)
    _check_tokens(m)
    if is_weight is not None:
        w_is = _common.array("is_weight", is_weight)
        validate.same_shape(logp=tuple(lp.shape), is_weight=tuple(w_is.shape))
        validate.is_weights(bool((w_is.detach() < 0).any()))

    out = _common.result_dtype(lp, old, ref, adv)
    work = _common.work_dtype(out)
    lp_w = _common.upcast(lp, work)
    zero = torch.zeros_like(lp_w)
    # Masked positions may hold any finite numbers: a neutral 0 log-ratio there keeps exp() of
    # an arbitrary difference out of the graph (their gradient is exactly 0 through the where).
    log_ratio = torch.where(m, lp_w - _common.constant(old, work), zero)
    a = _common.constant(adv, work)
    if policy_loss in validate.COV_POLICY_LOSSES:
        picked = _selection(policy_loss, selected, lp_w, a, m, cov_ratio)
    else:
        validate.selection(policy_loss, selected is not None)
    if ratio_level == "token":
        if clamp is not None:  # torch.clamp: constant (zero gradient) outside the closed band
            log_ratio = torch.clamp(log_ratio, -clamp, clamp)
        if policy_loss == "reinforce":  # Williams 1992: no ratio, no clip
            per_token = -(a[:, None] * torch.where(m, lp_w, zero))
        elif policy_loss == "clip-cov":  # the selected tokens' PPO term (value and gradient) removed
            per_token = torch.where(picked, zero, -_surrogate(log_ratio, a[:, None], lower, upper, dual))
        elif policy_loss == "kl-cov":  # the unclipped −ρA, plus k·|Δ| on the selected tokens
            penalty = torch.where(picked, cov_coef * torch.abs(log_ratio), zero)
            per_token = -_surrogate(log_ratio, a[:, None]) + penalty
        elif policy_loss == "cispo":
            per_token = -_cispo(log_ratio, torch.where(m, lp_w, zero), a[:, None], *token_policy)
        elif policy_loss == "sapo":
            per_token = -_sapo(log_ratio, a[:, None], *token_policy)
        else:
            per_token = -_surrogate(log_ratio, a[:, None], lower, upper, dual)
    else:
        log_ratio = _sequence_log_ratio(log_ratio, lp_w, a, m, ratio_level, policy_loss,
                                        validate.clip_band(eps_low, eps_high, None)[:2])
        if policy_loss == "gmpo":
            per_token = -(a[:, None] * torch.exp(log_ratio)) + zero
        else:
            per_token = -_surrogate(log_ratio, a[:, None], lower, upper, dual) + zero
    if is_weight is not None:
        per_token = per_token * _common.constant(w_is, work)
    if b != 0:  # β = 0 drops the term (no 0·inf when an unused KL overflows)
        log_r = torch.where(m, _common.constant(ref, work) - lp_w, zero)
        penalty = kl.clamped(log_r, kl_kind, c)
        if kl_ratio_weight:
            penalty = torch.exp(log_ratio) * penalty
        if kl_mode != aggregation:  # the KL term reduced on its own (OpenRLHF 0.11.2: a token mean)
            kl_term = b * _aggregate(penalty, m, kl_mode, norm, *eps)
            return (_aggregate(per_token, m, aggregation, norm, *eps) + kl_term).to(out)
        per_token = per_token + b * penalty
    return _aggregate(per_token, m, aggregation, norm, *eps).to(out)
