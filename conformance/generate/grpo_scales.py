"""Tolerance scales of the GRPO vectors: for each objective, the magnitude that rounding errors
scale with (``SCALES``: ``conformance.generate`` hands each case's to ``build.build_test``, for the
tolerance policy of conformance/compare.py). Anything a scale leaves out defaults to the largest |value|."""
from __future__ import annotations

import mpmath

from lossproof.conformance.generate.grpo_inputs import ADV, AGG, CLIP, LOSS, ROLLOUT, row_log_ratios


def _adv_scale(kwargs, outputs, grads):
    """A = (r − mean)/(std + eps): r − mean carries an absolute error of about u·max|r| and the
    std the same, so A inherits u·max|r|/(std + eps)·(1 + |A|) (std over the group, or over the
    batch for 'batch'); degenerate groups are exactly 0."""
    r = [[mpmath.mpf(v) for v in row] for row in kwargs["rewards"]]
    eps = mpmath.mpf(kwargs["eps"])
    ddof = int(kwargs["std_ddof"])
    adv = outputs["advantages"]
    worst = max((abs(a) for a in adv.flat), default=mpmath.mpf(0))

    def std(xs):
        m = mpmath.fsum(xs) / len(xs)
        return mpmath.sqrt(mpmath.fsum((x - m) ** 2 for x in xs) / (len(xs) - ddof))

    scale = worst
    flat = [x for row in r for x in row]
    if kwargs["scale"] == "whiten":
        # c = r − b carries an absolute error of about u·max|r| (times G/(G − 1) ≤ 2 for the
        # leave-one-out baseline); A = (c − mean c)/(std c + eps) inherits it over std c
        baseline = kwargs.get("baseline", "mean")
        singletons = kwargs["degenerate"] == "raw" and len(r[0]) == 1
        if baseline == "none" or singletons:
            c = flat
        else:
            g = len(r[0])
            factor = mpmath.mpf(g) / (g - 1) if baseline == "leave-one-out" and g > 1 else 1
            c = [(x - mpmath.fsum(row) / g) * factor for row in r for x in row]
        if len(c) == 1 or all(x == c[0] for x in c) or not any(a != 0 for a in adv.flat):
            return {"advantages": scale, "keep": mpmath.mpf(1)}
        size = 2 * max(abs(x) for x in flat)
        return {"advantages": max(scale, size / (std(c) + eps) * (1 + worst)), "keep": mpmath.mpf(1)}
    for i, row in enumerate(r):
        size = max(abs(x) for x in row)
        if kwargs.get("baseline", "mean") == "leave-one-out":
            size = 2 * size
        if kwargs["scale"] == "none" or (kwargs["degenerate"] == "raw" and len(row) == 1):
            term = size
        else:
            pool = flat if kwargs["scale"] == "batch" else row
            if len(pool) == 1 or all(x == pool[0] for x in pool):
                continue
            row_worst = max(abs(a) for a in adv[i])
            term = size / (std(pool) + eps) * (1 + row_worst)
        scale = max(scale, term)
    return {"advantages": scale, "keep": mpmath.mpf(1)}


def _band(kwargs):
    lo = 1 - mpmath.mpf(kwargs["eps_low"])
    hi = 1 + mpmath.mpf(kwargs["eps_low"] if kwargs["eps_high"] is None else kwargs["eps_high"])
    return lo, hi, kwargs["dual_clip"]


def _branch(rho, a, lo, hi, dual):
    """(unclipped branch active?, |value|) of the clipped surrogate at one token."""
    unclipped, clipped = rho * a, min(max(rho, lo), hi) * a
    if dual is not None and a < 0 and dual * a > min(unclipped, clipped):
        return False, abs(dual * a)
    return unclipped <= clipped, abs(min(unclipped, clipped))


def _clip_scale(kwargs, outputs, grads):
    """ρ = exp(logp − old_logp) inherits the absolute error u·(|logp| + |old_logp|) of the
    difference, so ρA carries |ρA|·(1 + |logp| + |old_logp|); a clipped value only its rounding."""
    lo, hi, dual = _band(kwargs)
    clamp = kwargs.get("log_ratio_clamp")
    value, grad = mpmath.mpf(0), mpmath.mpf(0)
    for a, b, c, g in zip(kwargs["logp"], kwargs["old_logp"], kwargs["advantages"], grads["logp"]):
        a, b, c = mpmath.mpf(a), mpmath.mpf(b), mpmath.mpf(c)
        held = clamp is not None and abs(a - b) > clamp
        # a clamped log ρ is the constant ±c: ρ then carries only exp's own rounding
        size = 1 if held else 1 + abs(a) + abs(b)
        rho = mpmath.exp(min(max(a - b, -clamp), clamp) if held else a - b)
        active, magnitude = _branch(rho, c, lo, hi, dual)
        value = max(value, magnitude * size if active else magnitude)
        grad = max(grad, abs(g) * size)
    return {"objective": value, "grad:logp": grad}


def _surrogate(rho, a, lo, hi, dual):
    """The clipped surrogate C_t (with the dual clip where A < 0)."""
    value = min(rho * a, min(max(rho, lo), hi) * a)
    return max(value, dual * a) if dual is not None and a < 0 else value


def aggregation_weights(mask, mode, norm_length):
    """|∂ aggregate / ∂ v_t| (the aggregate is linear in the values); rows without tokens weigh 0."""
    lengths = [sum(row) for row in mask]
    rows = sum(1 for n in lengths if n > 0)
    total = sum(lengths)
    norm = mpmath.mpf(norm_length if norm_length is not None else len(mask[0]))
    out = []
    for row, n in zip(mask, lengths):
        if mode == "token-mean":
            w = mpmath.mpf(1) / total
        elif mode == "seq-mean-token-mean":
            w = mpmath.mpf(1) / (n * rows) if n else 0
        elif mode == "seq-mean-token-sum":
            w = mpmath.mpf(1) / rows
        else:
            w = 1 / (rows * norm)
        out.append([w * m for m in row])
    return out


def _agg_scale(kwargs, outputs, grads):
    """Σ|w_t·v_t|: the size of the terms of the masked sum (also the careful low-precision model's
    elements: the values are its terms)."""
    w = aggregation_weights(kwargs["mask"], kwargs["mode"], kwargs["norm_length"])
    terms = [wt * abs(mpmath.mpf(v)) for wr, vr in zip(w, kwargs["values"]) for wt, v in zip(wr, vr) if wt]
    return {"value": mpmath.fsum(terms), "elements:value": mpmath.fsum(terms)}


def _kl_weights(kwargs, w):
    """The KL term's aggregation weights: ``w`` itself unless ``kl_aggregation`` names another mode."""
    mode = kwargs.get("kl_aggregation") or kwargs["aggregation"]
    return w if mode == kwargs["aggregation"] else aggregation_weights(kwargs["mask"], mode, kwargs["norm_length"])


def _kl_token(lp, ref, kind, clamp):
    """One token's KL estimate at log r = ref_logp − logp after the clamp, with the size of the
    terms rounding touches in it and in its derivative: log r carries u·(1 + |logp| + |ref_logp|);
    beyond the clamp the estimate is a constant."""
    x = ref - lp
    size_ref = 1 + abs(lp) + abs(ref)
    k = {"k1": -x, "k2": x * x / 2, "k3": mpmath.expm1(x) - x, "abs": abs(x)}[kind]
    k_used = k if clamp is None else min(max(k, -mpmath.mpf(clamp)), mpmath.mpf(clamp))
    if clamp is not None and abs(k) >= clamp:
        return k_used, mpmath.mpf(clamp), mpmath.mpf(0)
    if kind == "k3":
        return k_used, mpmath.exp(x) + abs(x) + 1 + abs(mpmath.expm1(x)) * size_ref, (mpmath.exp(x) + 1) * size_ref
    if kind == "k2":
        return k_used, abs(x) * size_ref + x * x / 2, size_ref
    return k_used, size_ref, mpmath.mpf(1)   # k1, abs: the terms of log r itself


def _loss_scale(kwargs, outputs, grads):
    """Σ_t w_t·T_t for the value and max_t w_t·T_t for the gradient, where T_t is the size of the
    terms of ℓ_t that rounding touches: |ρA|·(1 + |logp| + |old|) on the unclipped branch, and
    β·(size of the KL estimate's terms), times ρ·(1 + |logp| + |old|) when ρ weighs the KL.
    elements (the careful low-precision model's terms): Σ_t w_t·|ℓ_t|, ℓ_t = −C_t + β·w_t·KL_t."""
    if kwargs["ratio_level"] != "token":
        return _sequence_loss_scale(kwargs)
    w = aggregation_weights(kwargs["mask"], kwargs["aggregation"], kwargs["norm_length"])
    wk = _kl_weights(kwargs, w)
    clamp_log = kwargs.get("log_ratio_clamp")
    beta = mpmath.mpf(kwargs["beta"])
    kind, clamp = kwargs["kl_kind"], kwargs["kl_clamp"]
    lo, hi, dual = _band(kwargs)
    policy = kwargs["policy_loss"]
    value_terms, grad_terms, elements = [], [mpmath.mpf(0)], []
    for i, row in enumerate(w):
        a = mpmath.mpf(kwargs["advantages"][i])
        for j, wt in enumerate(row):
            if not wt:
                continue
            lp, old, ref = (mpmath.mpf(kwargs[n][i][j]) for n in ("logp", "old_logp", "ref_logp"))
            rho = mpmath.exp(lp - old if clamp_log is None else min(max(lp - old, -clamp_log), clamp_log))
            size_ratio = 1 + abs(lp) + abs(old)
            if policy in ("reinforce", "clip-cov", "kl-cov"):
                objective, surrogate, dsurrogate = _cov_token_scale(kwargs, i, j, rho, lp, old, a, size_ratio)
            elif policy == "ppo-clip":
                active, magnitude = _branch(rho, a, lo, hi, dual)
                surrogate = magnitude * size_ratio if active else magnitude
                objective, dsurrogate = _surrogate(rho, a, lo, hi, dual), surrogate
            else:
                objective, surrogate, dsurrogate = _gated_token_scale(kwargs, rho, lp, a, size_ratio)
            if kwargs.get("is_weight") is not None:   # the rollout correction's factor of the policy term
                c = abs(mpmath.mpf(kwargs["is_weight"][i][j]))
                objective, surrogate, dsurrogate = c * objective, c * surrogate, c * dsurrogate
            k_used, kl_terms, dkl_terms = _kl_token(lp, ref, kind, clamp)
            kl_used = beta * (rho if kwargs["kl_ratio_weight"] else 1) * k_used
            if wk is w:
                elements.append(wt * abs(objective - kl_used))
            else:   # the two terms reduced with their own weights (kl_aggregation)
                elements.append(wt * abs(objective) + wk[i][j] * abs(kl_used))
            weight = rho * size_ratio if kwargs["kl_ratio_weight"] else 1
            penalty = beta * weight * kl_terms
            if wk is w:
                value_terms.append(wt * (surrogate + penalty))
                grad_terms.append(wt * (dsurrogate + penalty + beta * weight * dkl_terms))
            else:
                value_terms.append(wt * surrogate + wk[i][j] * penalty)
                grad_terms.append(wt * dsurrogate + wk[i][j] * (penalty + beta * weight * dkl_terms))
    return {"loss": mpmath.fsum(value_terms), "grad:logp": max(grad_terms), "elements:loss": mpmath.fsum(elements)}


def _sequence_loss_scale(kwargs):
    """As ``_loss_scale``, with the row's ratio s_i = exp(mean of the Δ_t): log s_i inherits the
    absolute error u·mean_t(|logp_t| + |old_logp_t|) of its terms (the summation's growth with the
    row length is the objective's k), so s_i·A carries |s_i·A|·(1 + mean_t(|logp| + |old|)). The
    gradient of a token is its share 1/|o_i| of the row's terms through s_i (GSPO, GMPO) or its own
    term (GSPO-token), whichever is larger, plus its KL derivative's terms."""
    w = aggregation_weights(kwargs["mask"], kwargs["aggregation"], kwargs["norm_length"])
    wk = _kl_weights(kwargs, w)
    beta = mpmath.mpf(kwargs["beta"])
    kind, clamp, weighted = kwargs["kl_kind"], kwargs["kl_clamp"], kwargs["kl_ratio_weight"]
    gmpo = kwargs["policy_loss"] == "gmpo"
    lo, hi, dual = _band(kwargs)
    lp_all = [[mpmath.mpf(x) for x in row] for row in kwargs["logp"]]
    old_all = [[mpmath.mpf(x) for x in row] for row in kwargs["old_logp"]]
    adv_all = [mpmath.mpf(a) for a in kwargs["advantages"]]
    logs = row_log_ratios(lp_all, old_all, kwargs["mask"], adv_all,
                          {"eps_low": mpmath.mpf(kwargs["eps_low"]),
                           "eps_high": None if kwargs["eps_high"] is None else mpmath.mpf(kwargs["eps_high"])},
                          kwargs)
    value_terms, grad_terms, elements = [], [mpmath.mpf(0)], []
    for i, row in enumerate(w):
        on = [j for j, wt in enumerate(row) if wt]
        if not on:
            continue
        a = adv_all[i]
        s = mpmath.exp(mpmath.fsum(logs[i]) / len(logs[i]))
        size = 1 + mpmath.fsum(abs(lp_all[i][j]) + abs(old_all[i][j]) for j in on) / len(on)
        if gmpo:
            objective, through = a * s, abs(a * s) * size
        else:
            active, magnitude = _branch(s, a, lo, hi, dual)
            objective, through = _surrogate(s, a, lo, hi, dual), (magnitude * size if active else 0)
        value_row, through_row, own = [], [], []
        row_objective, row_through = objective, through
        for j in on:
            if kwargs.get("is_weight") is not None:   # the rollout correction's factor of the policy term
                c = abs(mpmath.mpf(kwargs["is_weight"][i][j]))
                objective, through = c * row_objective, c * row_through
            lp, ref = lp_all[i][j], mpmath.mpf(kwargs["ref_logp"][i][j])
            k_used, kl_terms, dkl_terms = _kl_token(lp, ref, kind, clamp)
            kl_used = beta * (s if weighted else 1) * k_used
            if wk is w:
                elements.append(row[j] * abs(objective - kl_used))
            else:   # the two terms reduced with their own weights (kl_aggregation)
                elements.append(row[j] * abs(objective) + wk[i][j] * abs(kl_used))
            weight = s * size if weighted else 1
            if wk is w:
                value_row.append(row[j] * ((through or abs(objective)) + beta * weight * kl_terms))
                through_row.append(row[j] * (through + (beta * weight * kl_terms if weighted else 0)))
                own.append(row[j] * beta * weight * dkl_terms)
            else:
                value_row.append(row[j] * (through or abs(objective)) + wk[i][j] * beta * weight * kl_terms)
                through_row.append(row[j] * through + (wk[i][j] * beta * weight * kl_terms if weighted else 0))
                own.append(wk[i][j] * beta * weight * dkl_terms)
        value_terms.extend(value_row)
        pooled = mpmath.fsum(through_row) / len(on)
        grad_terms.extend(max(pooled, t) + d for t, d in zip(through_row, own))
    return {"loss": mpmath.fsum(value_terms), "grad:logp": max(grad_terms), "elements:loss": mpmath.fsum(elements)}


def _cov_token_scale(kwargs, i, j, rho, lp, old, a, size_ratio):
    """One token's policy term for ``_loss_scale`` as ``_gated_token_scale`` gives it, for
    REINFORCE (C = A·logp, dC = A: the terms are the inputs themselves), Clip-Cov (PPO's term, or 0
    on a selected token) and KL-Cov (ρA, which carries ρ's error, minus k·|Δ| on a selected
    token, whose Δ carries u·(|logp| + |old|)). KL-Cov without ``selected`` is scaled as if every
    token were selected (an upper bound: the top-k is not recomputed here)."""
    policy = kwargs["policy_loss"]
    if policy == "reinforce":
        return a * lp, abs(a * lp), abs(a)
    chosen = kwargs.get("selected")
    picked = True if chosen is None else bool(chosen[i][j])
    if policy == "clip-cov":
        if picked:
            return mpmath.mpf(0), mpmath.mpf(0), mpmath.mpf(0)
        lo, hi, dual = _band(kwargs)
        active, magnitude = _branch(rho, a, lo, hi, dual)
        surrogate = magnitude * size_ratio if active else magnitude
        return _surrogate(rho, a, lo, hi, dual), surrogate, surrogate
    k = mpmath.mpf(kwargs["kl_cov_coef"]) if picked else mpmath.mpf(0)
    unclipped = abs(rho * a) * size_ratio
    return rho * a - k * abs(lp - old), unclipped + k * size_ratio, unclipped + k


def _gated_token_scale(kwargs, rho, lp, a, size_ratio):
    """One token's policy term for ``_loss_scale``: (C_t, the size of the terms rounding
    touches in C_t, the same for dC_t/dlogp). ``size_ratio`` = 1 + |logp| + |old_logp| is what the
    rounding of log ρ scales ρ's relative error by. CISPO: C = ŵ·A·logp, dC = ŵ·A, with ŵ carrying
    ρ's error unless it sits on a bound well away from ρ; SAPO: C = σ(x)·4/τ·A at x = τ(ρ − 1),
    dC = g = 4ρσ(x)σ(−x)·A, moved by ρ's error at most g·size_ratio (C) and g·(1 + τρ)·size_ratio
    (dC, whose derivative in log ρ is g·(1 + τρ(1 − 2σ)))."""
    if kwargs["policy_loss"] == "cispo":
        lo, hi = kwargs["eps_low"], kwargs["eps_low"] if kwargs["eps_high"] is None else kwargs["eps_high"]
        upper = mpmath.mpf(hi) if kwargs["cispo_clip"] == "raw-upper" else 1 + mpmath.mpf(hi)
        lower = 1 - mpmath.mpf(lo) if kwargs["cispo_clip"] == "both" else mpmath.mpf(0)
        w = min(max(rho, lower), upper)
        carried = size_ratio if lower * (1 - mpmath.mpf(1e-3)) <= rho <= upper * (1 + mpmath.mpf(1e-3)) else 1
        return w * a * lp, abs(w * a * lp) * (1 + carried), abs(w * a) * carried
    tau = mpmath.mpf(kwargs["sapo_tau_pos"] if a > 0 else kwargs["sapo_tau_neg"])
    x = tau * (rho - 1)
    gate = 1 / (1 + mpmath.exp(-x))
    g = abs(4 * rho * gate * (1 - gate) * a)
    objective = gate * 4 / tau * a
    return objective, abs(objective) + g * size_ratio, g * (1 + tau * rho) * size_ratio + g


def _rollout_scale(kwargs, outputs, grads):
    """The weights' size times the size of the terms their log-ratio is formed from (a unit's
    Σ |old_logp| + |rollout_logp|): a float implementation's relative error grows with them."""
    old, roll, mask = kwargs["old_logp"], kwargs["rollout_logp"], kwargs["mask"]
    level = kwargs["level"]
    biggest = mpmath.mpf(0)
    for b, (o, r, m) in enumerate(zip(old, roll, mask)):
        row_terms = sum(abs(mpmath.mpf(x)) + abs(mpmath.mpf(y)) for x, y, on in zip(o, r, m) if on)
        for t, on in enumerate(m):
            if on:
                terms = row_terms if level == "sequence" else abs(mpmath.mpf(o[t])) + abs(mpmath.mpf(r[t]))
                biggest = max(biggest, abs(outputs["weights"][b, t]) * (1 + terms))
    return {"weights": biggest, "keep": mpmath.mpf(1)}


SCALES = {ADV: _adv_scale, CLIP: _clip_scale, AGG: _agg_scale, LOSS: _loss_scale, ROLLOUT: _rollout_scale}
