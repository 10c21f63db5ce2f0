"""Rest points of the exact population updates of ``refimpl.exact._tree``: the fixed-point
solver behind the theorem table (conformance/theorem), which must *find* π* for every unbiased
rule, starting from π_ref, and the rest point of every biased one.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import mpmath

from lossproof.refimpl import validate
from lossproof.refimpl.exact import _tree, mp


def residual(update: Mapping[tuple, Sequence]) -> mpmath.mpf:
    """max |Δθ_s(a)| over prefixes and tokens (the size of an expected update)."""
    return max(abs(v) for row in update.values() for v in row)


# --------------------------------------------------------------------------- fixed points

DELTA0 = 1                           # first pseudo-time step of the local solver
FREEZE_BELOW = mpmath.mpf("1e-9")   # a probability this small is taken to be on its way to 0
RELEASE_CHECK_BELOW = mpmath.mpf("1e-8")  # frozen tokens are re-examined once the rest is this close
SWEEPS = 60                          # passes over the prefixes of a coupled rule before Newton
SWEPT = mpmath.mpf("1e-4")           # ... or fewer, once no probability moves by more than this
SWEEP_TOL = mpmath.mpf("1e-10")      # a pass solves each prefix this far only: Newton finishes


def softmax_row(logits):
    top = max(logits)
    e = [mpmath.exp(v - top) for v in logits]
    total = mpmath.fsum(e)
    return [v / total for v in e]


def _norm(v):
    return max((abs(x) for x in v), default=mp.ZERO)


def _vanishing(history, a, steps=8):
    """A probability below 1e-3 that fell by a factor ≥ 1.1 at each of the last ``steps`` steps
    is on its way to 0; freezing it early is safe because a frozen token whose limiting rate is
    positive is released for good."""
    if len(history) <= steps or history[-1][a] >= mpmath.mpf("1e-3"):
        return False
    recent = [h[a] for h in history[-steps - 1:]]
    return all(later * 11 < earlier * 10 for earlier, later in zip(recent, recent[1:]))


def _solve_prefix(setting, pol, s, shift, scale, gap, tol, max_iter, h):
    """Rest point of the update at prefix s, descendants held at their rest points.

    Unknowns: the logits of the free tokens relative to the leading one. Equations: the rates
    G_j − G_lead with G_j = Δθ_s(j) / (P(reach s)·π(j|s)) (interior zero ⟺ all G_j equal), solved
    by pseudo-transient continuation (I/δ − ∂e/∂x)·Δx = e: Euler steps of the (rate) flow for
    small δ, Newton for large δ; δ grows at least ×2 per accepted step; steps ≤ 2 nats."""
    V = setting.tree.vocab
    logits = [mpmath.log(v) for v in pol[s]]
    frozen, released_once = set(), set()
    history, delta, it = [], mpmath.mpf(DELTA0), 0

    def rates(lg):
        row = softmax_row(lg)
        trial = dict(pol)
        trial[s] = row
        u = setting.local_update(trial, s, shift, scale)
        return [u[j] / row[j] for j in range(V)], row

    while True:
        lead = max((a for a in range(V) if a not in frozen), key=lambda a: logits[a])
        for a in frozen:
            logits[a] = logits[lead] - gap
        free = [a for a in range(V) if a not in frozen and a != lead]
        g, row = rates(logits)
        e = [g[a] - g[lead] for a in free]
        en = _norm(e)
        done = it >= max_iter or en <= tol or not free
        if frozen and (done or en < RELEASE_CHECK_BELOW):
            released = {a for a in frozen if g[a] - g[lead] > 0}
            if released and it < max_iter:
                frozen -= released
                released_once |= released
                for a in released:   # back into the interior, 1e-6 below the leading token
                    logits[a] = logits[lead] - 6 * mpmath.log(10)
                history, delta = [], mpmath.mpf(DELTA0)
                continue
        if done:
            break
        it += 1
        n = len(free)
        jac = mpmath.matrix(n, n)
        for j, b in enumerate(free):
            lg = list(logits)
            lg[b] += h
            gj = rates(lg)[0]
            for i, a in enumerate(free):
                jac[i, j] = ((gj[a] - gj[lead]) - e[i]) / h
        for _ in range(80):
            lhs = -jac
            for i in range(n):
                lhs[i, i] += 1 / delta
            try:
                sol = mpmath.lu_solve(lhs, mpmath.matrix(e))
            except ZeroDivisionError:
                delta /= 4
                continue
            step = [sol[i] for i in range(n)]
            big = _norm(step)
            if big > 2:
                step = [v * 2 / big for v in step]
            lg = list(logits)
            for i, a in enumerate(free):
                lg[a] += step[i]
            gt, row_t = rates(lg)
            if _norm([gt[a] - gt[lead] for a in free]) < 10 * en:
                break
            delta /= 4
        else:
            break
        logits = lg
        delta *= 2
        history.append(row_t)
        frozen |= {a for a in free if a not in released_once
                   and (row_t[a] < FREEZE_BELOW or _vanishing(history, a))}
    row = softmax_row(logits)
    boundary = [{"prefix": s, "token": a, "rate": g[a] - g[lead]} for a in sorted(frozen)]
    return row, boundary, it, en


def _rates_all(setting, pol):
    """G_a − G_lead at every prefix (G_a = Δθ_s(a) / (P(reach s)·π(a|s)), lead = the most probable
    token), flattened over the prefixes in order, with the lead tokens left out."""
    upd, reach = setting.update(pol), setting.reach_of(pol)
    out = []
    for s in setting.pre:
        row = pol[s]
        lead = max(range(len(row)), key=lambda a: row[a])
        g = [upd[s][a] / (reach[s] * row[a]) for a in range(len(row))]
        out += [g[a] - g[lead] for a in range(len(row)) if a != lead]
    return out


def _newton_all(setting, pol, tol, max_iter, h):
    """Newton on the free logits of every prefix together (the coupled rules), from a policy
    the passes have brought close: a forward-difference Jacobian of :func:`_rates_all`, steps
    halved until the residual falls, at most ``max_iter`` steps."""
    logits = {s: [mpmath.log(v) for v in pol[s]] for s in setting.pre}
    leads = {s: max(range(len(pol[s])), key=lambda a: pol[s][a]) for s in setting.pre}
    free = [(s, a) for s in setting.pre for a in range(len(pol[s])) if a != leads[s]]

    def policy_of(lg):
        return {s: softmax_row(lg[s]) for s in setting.pre}

    e = _rates_all(setting, pol)
    it = 0
    while _norm(e) > tol and it < max_iter:
        it += 1
        jac = mpmath.matrix(len(free), len(free))
        for j, (s, a) in enumerate(free):
            lg = {q: list(v) for q, v in logits.items()}
            lg[s][a] += h
            col = _rates_all(setting, policy_of(lg))
            for i in range(len(free)):
                jac[i, j] = (col[i] - e[i]) / h
        step = mpmath.lu_solve(jac, mpmath.matrix(e))
        scale = mp.ONE
        while True:
            lg = {q: list(v) for q, v in logits.items()}
            for i, (s, a) in enumerate(free):
                lg[s][a] -= scale * step[i]
            trial = _rates_all(setting, policy_of(lg))
            if _norm(trial) < _norm(e) or scale < mpmath.mpf(10) ** -6:
                break
            scale /= 2
        logits, e = lg, trial
    return policy_of(logits), it


def _sigma_on_policy(tree, beta):
    """sigma_normalized_on_policy: its update is (1/σ_π)·proximal_kl_on_policy with β' = β·σ_π,
    whose only rest point is π*_{β'}; so π = π*_{β·s} with s = σ_{π*_{β·s}}(r), a scalar
    equation. The rest point the update reaches is the largest root (stable: the curve
    s ↦ σ(π*_{β·s}) crosses the diagonal from above), else the collapse s → 0 (the greedy
    policy, reported as π*_{β'} with β' = β·σ_max·1e-6, its non-greedy probabilities far
    below the working precision)."""
    b = _tree.num(tree.beta if beta is None else beta, "beta")
    rs = [_tree.num(tree.rewards[y]) for y in _tree.leaves(tree)]
    hi = (max(rs) - min(rs)) / 2             # no distribution of r has a larger std
    if hi == 0:
        validate.fail("tree.rewards", "constant: σ = 0, sigma_normalized is undefined")

    def h(sc):
        star = _tree.optimum(tree, beta=b * sc)["policy"]
        weights = _tree.sequences(tree, star)
        mean = mpmath.fsum(w * _tree.num(tree.rewards[y]) for y, w in weights)
        return mpmath.sqrt(mpmath.fsum(w * (_tree.num(tree.rewards[y]) - mean) ** 2 for y, w in weights)) - sc

    grid = [hi * mpmath.mpf(2) ** (-k / mpmath.mpf(4)) for k in range(0, 121)]
    values = [h(sc) for sc in grid]
    for k in range(1, len(grid)):
        if values[k] > 0 >= values[k - 1]:
            root = mpmath.findroot(h, (grid[k], grid[k - 1]), solver="anderson")
            return _tree.optimum(tree, beta=b * root)["policy"], root, abs(h(root))
    return _tree.optimum(tree, beta=b * hi * mpmath.mpf("1e-6"))["policy"], mp.ZERO, None


@mp.exact
def fixed_point(tree: _tree.Tree, rule: str = "proximal_kl", mu=None, beta=None, start=None,
                baseline: str = "mean", params: dict | None = None, max_iter: int = 200) -> dict:
    """Solve expected_update(π) = 0 (per prefix, in the softmax tangent space) for the rest point
    that the update itself reaches.

    Most rules' update at prefix s depends on π at s and below only (``_tree.Setting.local_update``),
    so the fixed point is solved prefix by prefix from the leaves up, each a small system in the
    V−1 free logits (``_solve_prefix``: pseudo-transient continuation on the rates, a Jacobian by
    forward differences at 20 extra digits with step 10^−(dps/2+10), enough for Newton to reach
    the working precision). The ``_tree.COUPLED`` rules (off-policy; gspo also on-policy) see π
    above s as well: their pass is repeated (block Gauss–Seidel, each prefix solved to SWEEP_TOL
    from its last solution, at most SWEEPS passes) until no probability moves by SWEPT, and Newton
    on the free logits of all prefixes together finishes (``_newton_all``; skipped when a token
    went to the boundary, and the result is then judged like any other).
    sigma_normalized_on_policy couples every prefix through σ_π(r) and
    is solved as a scalar equation (``_sigma_on_policy``; ``start``, ``mu``, ``baseline`` and
    ``params`` play no part there) and its result checked like the others.

    Some biased rules have no interior rest point: they remove the KL barrier of a token (e.g.
    clipping the own-token cost) or feed back on their own scale (σ-normalisation on-policy), and
    the update drives a probability to 0. A token whose probability falls below 1e-9 (or below
    1e-3 after falling by a factor ≥ 1.1 at each of eight steps) is frozen at 10^{−2(dps+30)}
    relative to the prefix's leading token (the limit on the face of the simplex) and the rest is
    solved; such tokens are listed in ``boundary`` with the limiting rate G_a − G_lead
    (G_a = Δθ_s(a) / (P(reach s)·π(a|s))), negative when the face attracts. A frozen token whose
    rate comes out positive is released for good and the solve resumed.

    ``start`` (default π_ref) is where each prefix's solve starts, so that an unbiased rule must
    *find* π*. Returns {"policy", "residual" (max |Δθ| at the working precision), "rate_residual"
    (max |G_a − G_lead| over the tokens not on the boundary), "iterations", "converged"
    (rate_residual below 10^−(dps−8) and no boundary rate > 0; for the σ → 0 collapse of
    sigma_normalized_on_policy, where A/σ makes rates unbounded, the scalar analysis decides and
    rate_residual is None), "boundary", "note"}."""
    _tree.check_tree(tree)
    validate.update_rule(rule)
    validate.baseline(baseline)
    dps = mp.get_dps()
    tol = mpmath.mpf(10) ** (-(dps - 8))
    mu = tree.behavior if mu is None else mu
    pre = _tree.prefixes(tree)
    V = tree.vocab
    boundary, iterations, note, scalar_res = [], 0, "", None
    with mp.precision(dps + 20), mpmath.workdps(dps + 20):
        if rule == "sigma_normalized_on_policy":
            pol, sigma, scalar_res = _sigma_on_policy(tree, beta)
            note = (f"π = π*(β·σ) with σ = σ_π(r) = {mp.nstr(sigma, 20)}" if scalar_res is not None else
                    "collapse: no σ > 0 solves σ = σ_{π*(β·σ)}(r); the rest point is the σ → 0 limit "
                    "(the greedy policy), whose rates are unbounded (A/σ)")
            cut = mpmath.mpf(10) ** (-(dps + 30))
            boundary = [{"prefix": s, "token": a, "rate": None} for s in pre for a in range(V)
                        if pol[s][a] < cut]
        else:
            setting = _tree.Setting(tree, rule, mu, None, beta, None, baseline, params)
            pol = _tree.policy(tree, tree.ref if start is None else start, "start")
            gap = 2 * (dps + 30) * mpmath.log(10)
            h = mpmath.mpf(10) ** (-(dps // 2 + 10))
            # One pass from the leaves up is exact for the rules whose update at s depends on π at
            # s and below only; a coupled rule repeats the pass (block Gauss–Seidel, each prefix
            # from its last solution) until it settles, then Newton on every prefix at once.
            for sweep in range(SWEEPS if setting.coupled else 1):
                before = {s: list(pol[s]) for s in pre}
                boundary = []
                local_tol = SWEEP_TOL if setting.coupled else tol * mpmath.mpf(10) ** -10
                for s in reversed(pre):
                    shift, scale = setting.advantage_terms(pol)
                    pol[s], bnd, it, _ = _solve_prefix(setting, pol, s, shift, scale, gap,
                                                       local_tol, max_iter, h)
                    boundary += bnd
                    iterations += it
                if max(abs(a - b) for s in pre for a, b in zip(pol[s], before[s])) < SWEPT:
                    break
            if setting.coupled and not boundary:
                pol, it = _newton_all(setting, pol, tol * mpmath.mpf(10) ** -10, max_iter, h)
                iterations += it
                note = f"coupled prefixes: {sweep + 1} passes, then {it} Newton steps on all of them"
    pol = {s: [+v for v in row] for s, row in pol.items()}
    on_face = {(b["prefix"], b["token"]) for b in boundary}
    setting = _tree.Setting(tree, rule, mu, None, beta, None, baseline, params)
    upd = setting.update(pol)
    reach = setting.reach_of(pol)
    rate_res = mp.ZERO
    for s in pre:
        lead = max(range(V), key=lambda a: pol[s][a])
        g = [upd[s][a] / (reach[s] * pol[s][a]) for a in range(V)]
        for b in boundary:
            if b["prefix"] == s:
                b["rate"] = +(g[b["token"]] - g[lead])
        for a in range(V):
            # on the boundary only a repelling face (rate > 0) counts against the rest point
            if (s, a) not in on_face or g[a] - g[lead] > 0:
                rate_res = max(rate_res, abs(g[a] - g[lead]))
    if rule == "sigma_normalized_on_policy" and scalar_res is None:
        # the σ → 0 limit: A/σ is unbounded, so rates mean nothing; the scalar analysis decides
        for b in boundary:
            b["rate"] = None
        rate_res = None
    converged = (rate_res is None) or bool(rate_res < tol)
    if scalar_res is not None:
        converged = converged and bool(scalar_res < tol)
    return {"policy": pol, "residual": residual(upd), "rate_residual": rate_res,
            "iterations": iterations, "converged": converged, "boundary": boundary, "note": note}
