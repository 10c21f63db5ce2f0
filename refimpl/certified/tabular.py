"""Token-tree objectives in ball arithmetic: the KL-regularised optimum, the sequence KL with its
chain-rule decomposition, and the exact population update of the update rules.

The tree (catalog ``_TREE_ENCODING``): V tokens, horizon H, optional eos; a sequence ends when
it emits eos or reaches length H. Rows of a policy follow the non-terminal prefixes breadth
first, then lexicographically; rewards follow the leaves (for each prefix in that order, its
children that end the sequence, by token). A row is renormalised by its exact sum.

* optimum: soft Bellman backup V*(leaf) = r, V*(s) = β·log Σ_a π_ref(a|s)·e^{V*(s·a)/β},
  π*(a|s) = π_ref(a|s)·e^{(V*(s·a) − V*(s))/β}; β·log Z = V*(root) (π* ∝ π_ref·e^{r/β}, DPO §4
  eq. 4, token by token). A finite backward recursion: no iteration, certified like the rest.
* sequence_kl: reach P_π(s) = Π π along s; KL_s = Σ_a ρ_a·φ(π_a/ρ_a), φ(x) = x·log x − x + 1,
  with x − 1 = (π_a·S_ρ − ρ_a·S_π)/(ρ_a·S_π) from the raw rows (S: row sums) so that equal
  rows give an exact 0; per_step[t] = Σ_{|s|=t} P_π(s)·KL_s; kl = Σ_t per_step[t] (Cover &
  Thomas Thm 2.5.3).
* expected_update: Δθ_s = −Σ_y μ(y) Σ_{t: s_t=s} (∂L(y)/∂log π(y_t|s_t))·(e_{y_t} − π(·|s)),
  A = (r − shift)/scale, shift = E_μ[r] ('mean') or 0 ('none'), scale = σ_μ(r) for
  sigma_normalized; μ = π for the *_on_policy rules. ∂L/∂log π per rule, k_t = log π − log π_ref,
  ρ_t = π/μ, F_t = Σ_{u>t} k_u (catalog: future_clipped c = 1/2, future_window W = 1,
  whole_cost_clipped c = 1/2, ratio_capped C = 3/2 with the detached weight min(ρ, C)):
  proximal_kl, sigma_normalized −ρ_t(A − β(k_t + F_t)); proximal_kl_no_ratio −(A − β(k_t + F_t));
  own_token_kl −ρ_t(A − βk_t); grpo_k3 −ρ_tA + β(1 − π_ref/π); grpo_k3_ratio_weighted
  −ρ_tA + βρ_t k_t; sequence_is −Π_u ρ_u·(A − βΣ_u k_u) at every t; future_clipped
  −ρ_t(A − β(k_t + clip(F_t, c))); future_window −ρ_t(A − β(k_t + Σ_{t<u≤t+W} k_u));
  whole_cost_clipped −ρ_t(A − β·clip(k_t + F_t, c)); ratio_capped −min(ρ_t, C)(A − β(k_t + F_t));
  gspo (1/T)(−s·A + β(1 − π_ref/π)), s = exp((1/T)Σ_u log ρ_u), T = |y|; cispo
  −min(ρ_t, 1 + ε_high)·A + β(1 − π_ref/π) (ε_high = 1/5); sequence_tis −min(Π_u ρ_u, C)·(A − βΣ_u k_u)
  at every t (C = 2); kl_in_reward −(A − βΣ_u k_u) at every t.
  (Proximal KL summary [proximal-kl-summary]; FRPO arXiv 2601.10201; DeepSeekMath §4.1.1 eq. 3–4;
  TRL 1.16 use_bias_correction_kl; GSPO arXiv 2507.18071 §4.1; MiniMax-M1 arXiv 2506.13585 §3.1;
  TIS, Yao et al. 2025; verl 0.9.1 use_kl_in_reward.) The clips and the min of a value need no branch decision:
  arb's min/max enclose them whichever side the ball is on.
"""
from __future__ import annotations

from flint import arb

from lossproof.refimpl import validate
from lossproof.refimpl.certified import _ball

__all__ = ["expected_update", "optimum", "sequence_kl"]

FUTURE_CLIP = arb(1) / 2
FUTURE_WINDOW = 1
WHOLE_COST_CLIP = arb(1) / 2
RATIO_CAP = arb(3) / 2
SEQUENCE_TIS_CAP = arb(2)


def _shape(vocab, horizon, eos):
    """(prefixes, leaves) of the tree in the catalog's orders."""
    def leaf(y):
        return len(y) >= horizon or (eos is not None and len(y) > 0 and y[-1] == eos)

    out, frontier = [], [()]
    while frontier:
        out.extend(frontier)
        frontier = [s + (a,) for s in frontier for a in range(vocab) if not leaf(s + (a,))]
    ends = [s + (a,) for s in out for a in range(vocab) if leaf(s + (a,))]
    return out, ends


def _tree(vocab, horizon, eos):
    vocab = validate.vocab(vocab)
    horizon = validate.horizon(horizon)
    eos = validate.eos(eos, vocab)
    return vocab, horizon, eos, *_shape(vocab, horizon, eos)


def _policy(name, rows, prefixes, vocab):
    """{prefix: (row balls normalised by the exact sum, raw row, sum)}; full support required."""
    b = _ball.balls(name, rows)
    if _ball.shape(b) != (len(prefixes), vocab):
        validate.fail(name, f"expected shape {(len(prefixes), vocab)} (prefixes × vocab), got {_ball.shape(b)}")
    out = {}
    for s, row in zip(prefixes, b):
        for v in row:
            if not v > 0:
                validate.fail(name, f"prefix {list(s)}: probabilities must be finite and > 0 (full support)")
        total = _ball.fsum(row)
        if not abs(total - 1) <= arb("1e-9"):
            validate.fail(name, f"prefix {list(s)}: probabilities do not sum to 1 within 1e-9")
        out[s] = ([v / total for v in row], row, total)
    return out


def _rewards(rewards, ends):
    r = _ball.balls("rewards", rewards)
    if _ball.shape(r) != (len(ends),):
        validate.fail("rewards", f"expected shape ({len(ends)},) (one reward per leaf), got {_ball.shape(r)}")
    return dict(zip(ends, r))


def _optimum(diff, pi_ref, rewards, vocab=None, horizon=None, eos=None, beta=None):
    b = _ball.ball(validate.regularization_beta(beta))
    vocab, horizon, eos, prefixes, ends = _tree(vocab, horizon, eos)
    ref = _policy("pi_ref", pi_ref, prefixes, vocab)
    value = _rewards(rewards, ends)
    star = {}
    for s in reversed(prefixes):
        logits = [ref[s][0][a].log() + value[s + (a,)] / b for a in range(vocab)]
        top = max(range(vocab), key=lambda a: _ball.mid_float(logits[a]))
        lse = _ball.logsumexp(logits, top)
        value[s] = b * lse
        star[s] = [(z - lse).exp() for z in logits]
    return {"policy": [star[s] for s in prefixes], "beta_log_z": value[()]}


def _token_kl(p_raw, p_sum, q_raw, q_sum):
    """KL(p‖q) = Σ_a q_a·φ(p_a/q_a) of two raw rows (normalised by their sums)."""
    total = []
    for pa, qa in zip(p_raw, q_raw):
        q = qa / q_sum
        d = (pa * q_sum - qa * p_sum) / (qa * p_sum)          # p_a/q_a − 1
        if _ball.mid_float(d) < -0.5:                          # φ(x) directly where 1 + d is small
            x = 1 + d
            total.append(q * (x * x.log() - x + 1))
        else:
            total.append(q * ((1 + d) * d.log1p() - d))
    return _ball.fsum(total)


def _sequence_kl(diff, pi, rho, vocab=None, horizon=None, eos=None):
    vocab, horizon, eos, prefixes, _ = _tree(vocab, horizon, eos)
    p = _policy("pi", pi, prefixes, vocab)
    q = _policy("rho", rho, prefixes, vocab)
    reach = {(): _ball.ONE}
    for s in prefixes[1:]:
        reach[s] = reach[s[:-1]] * p[s[:-1]][0][s[-1]]
    token = {s: _token_kl(p[s][1], p[s][2], q[s][1], q[s][2]) for s in prefixes}
    per_step = [_ball.fsum(reach[s] * token[s] for s in prefixes if len(s) == t) for t in range(horizon)]
    return {"kl": _ball.fsum(per_step), "reach": [reach[s] for s in prefixes],
            "token_kl": [token[s] for s in prefixes], "per_step": per_step}


def _clip(x, c):
    return x.max(-c).min(c)


def _token_derivs(base, lp, lm, lr, adv, beta):
    """∂L(y)/∂log π(y_t|s_t) along one sequence (module docstring); lp, lm, lr: log π, log μ,
    log π_ref of its tokens."""
    T = len(lp)
    k = [lp[t] - lr[t] for t in range(T)]
    rho = [(lp[t] - lm[t]).exp() for t in range(T)]

    def future(t, window=None):
        stop = T if window is None else min(T, t + 1 + window)
        return _ball.fsum(k[t + 1:stop])

    if base in ("proximal_kl", "sigma_normalized"):
        return [-rho[t] * (adv - beta * (k[t] + future(t))) for t in range(T)]
    if base == "proximal_kl_no_ratio":
        return [-(adv - beta * (k[t] + future(t))) for t in range(T)]
    if base == "own_token_kl":
        return [-rho[t] * (adv - beta * k[t]) for t in range(T)]
    if base == "grpo_k3":
        # k3 = e^{lr−lp} − (lr − lp) − 1: d/dlogp = 1 − e^{lr−lp} = −expm1(lr − lp)
        return [-rho[t] * adv - beta * (lr[t] - lp[t]).expm1() for t in range(T)]
    if base == "grpo_k3_ratio_weighted":
        return [-rho[t] * adv + beta * rho[t] * k[t] for t in range(T)]
    if base == "sequence_is":
        w = _product(rho) * (adv - beta * _ball.fsum(k))
        return [-w] * T
    if base == "future_clipped":
        return [-rho[t] * (adv - beta * (k[t] + _clip(future(t), FUTURE_CLIP))) for t in range(T)]
    if base == "future_window":
        return [-rho[t] * (adv - beta * (k[t] + future(t, FUTURE_WINDOW))) for t in range(T)]
    if base == "whole_cost_clipped":
        return [-rho[t] * (adv - beta * _clip(k[t] + future(t), WHOLE_COST_CLIP)) for t in range(T)]
    if base == "ratio_capped":
        return [-rho[t].min(RATIO_CAP) * (adv - beta * (k[t] + future(t))) for t in range(T)]
    if base == "gspo":
        s = (_ball.fsum([lp[t] - lm[t] for t in range(T)]) / T).exp()
        return [(-s * adv - beta * (lr[t] - lp[t]).expm1()) / T for t in range(T)]
    if base == "cispo":
        cap = arb(6) / 5            # 1 + ε_high: 1/5 is not binary, so formed at the working precision
        return [-rho[t].min(cap) * adv - beta * (lr[t] - lp[t]).expm1() for t in range(T)]
    if base == "sequence_tis":
        w = _product(rho).min(SEQUENCE_TIS_CAP) * (adv - beta * _ball.fsum(k))
        return [-w] * T
    if base == "kl_in_reward":
        return [-(adv - beta * _ball.fsum(k))] * T
    raise AssertionError(base)


def _product(xs):
    out = _ball.ONE
    for x in xs:
        out = out * x
    return out


def _expected_update(diff, pi, mu, pi_ref, rewards, vocab=None, horizon=None, eos=None, beta=None,
                     rule="proximal_kl", baseline="mean"):
    validate.update_rule(rule)
    validate.baseline(baseline)
    b = _ball.ball(validate.regularization_beta(beta))
    vocab, horizon, eos, prefixes, ends = _tree(vocab, horizon, eos)
    ref = _policy("pi_ref", pi_ref, prefixes, vocab)
    r = _rewards(rewards, ends)
    p = _policy("pi", pi, prefixes, vocab)
    m = _policy("mu", mu, prefixes, vocab)
    on_policy = rule.endswith("_on_policy")
    base = rule[: -len("_on_policy")] if on_policy else rule
    samp = p if on_policy else m
    paths = [(y, [(y[:t], y[t]) for t in range(len(y))]) for y in ends]
    weight = {y: _product(samp[s][0][a] for s, a in path) for y, path in paths}
    mean = _ball.fsum(weight[y] * r[y] for y in ends)
    shift = mean if baseline == "mean" else _ball.ZERO
    scale = _ball.ONE
    if base == "sigma_normalized":
        scale = _ball.fsum(weight[y] * _ball.square(r[y] - mean) for y in ends).sqrt()
        if scale.is_zero():
            validate.fail("rewards", "constant under the sampling policy: σ = 0, sigma_normalized is undefined")
    log_p = {s: [v.log() for v in p[s][0]] for s in prefixes}
    log_m = log_p if on_policy else {s: [v.log() for v in m[s][0]] for s in prefixes}
    log_r = {s: [v.log() for v in ref[s][0]] for s in prefixes}
    update = {s: [_ball.ZERO] * vocab for s in prefixes}
    for y, path in paths:
        d = _token_derivs(base, [log_p[s][a] for s, a in path], [log_m[s][a] for s, a in path],
                          [log_r[s][a] for s, a in path], (r[y] - shift) / scale, b)
        for (s, a), dt in zip(path, d):
            c = weight[y] * dt
            row, ps = update[s], p[s][0]
            for j in range(vocab):
                row[j] += c * ps[j]          # −c·(e_a − π)_j
            row[a] -= c
    return {"update": [update[s] for s in prefixes]}


optimum, _ = _ball.pair(_optimum, ("policy", "beta_log_z"), ())
optimum.__doc__ = "π* ∝ π_ref·exp(r/β) by the soft Bellman backup, and β·log Z (DPO §4 eq. 4), as balls."
sequence_kl, _ = _ball.pair(_sequence_kl, ("kl", "reach", "token_kl", "per_step"), ())
sequence_kl.__doc__ = "Sequence KL and its chain-rule decomposition (Cover & Thomas Thm 2.5.3), as balls."
expected_update, _ = _ball.pair(_expected_update, ("update",), ())
expected_update.__doc__ = "Exact population update of an update rule on a token tree (Proximal KL summary), as balls."
