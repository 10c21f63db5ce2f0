"""Token-tree MDPs: soft Bellman optimum against enumeration, path consistency, chain-rule KL,
the stationary-policy theorem (proximal_kl vanishes at π* for every full-support μ), the loss
function tied to the population update, gradients of J, fixed points against closed forms."""
from __future__ import annotations

from fractions import Fraction

import mpmath
import pytest

from lossproof.refimpl.exact import _fixed_point, _tree, mp, proximal_kl
from lossproof.refimpl.validate import InputError

TREES = list(_tree.BUILTIN_TREES.values())
EXACT = mpmath.mpf(10) ** -45      # agreement demanded between two exact computations (50 digits)
THEOREM = mpmath.mpf(10) ** -40    # the bound claimed for the proximal_kl residual at π* at 50 digits


@pytest.fixture(autouse=True)
def _test_arithmetic_at_60_digits():
    # The reference returns 50-digit mpf; sums and differences taken here must not round them.
    with mpmath.workdps(60):
        yield


def _ids(trees):
    return [t.name for t in trees]


def _extra_trees():
    """Two more shapes: a deeper binary tree and an EOS tree with V = 4, both from fixed seeds."""
    return [_tree._random_tree("random-v2h4", 2, 4, Fraction(7, 10), seed=11),
            _tree._random_tree("eos-v4h2", 4, 2, Fraction(1, 4), seed=12, eos=0)]


ALL = TREES + _extra_trees()


# --------------------------------------------------------------------------- optimum

@pytest.mark.parametrize("tree", ALL, ids=_ids(ALL))
def test_soft_bellman_equals_the_enumerated_optimum(tree):
    opt = _tree.optimum(tree)
    enum = _tree.enumerated_optimum(tree)
    assert abs(opt["beta_log_z"] - enum["beta_log_z"]) < EXACT
    for y, p in _tree.sequences(tree, opt["policy"]):
        assert abs(p - enum["probs"][y]) < EXACT


@pytest.mark.parametrize("tree", ALL, ids=_ids(ALL))
def test_path_consistency(tree):
    """r(y) − β·Σ_{u≥t} log(π*/π_ref)(y_u|s_u) = V*(s_t) at every step of every path."""
    opt = _tree.optimum(tree)
    with mpmath.workdps(50):
        ref = _tree.policy(tree, tree.ref)
        beta = _tree.num(tree.beta)
        for y in _tree.leaves(tree):
            for t in range(len(y)):
                cost = mpmath.fsum(mpmath.log(opt["policy"][y[:u]][y[u]] / ref[y[:u]][y[u]])
                                   for u in range(t, len(y)))
                assert abs(_tree.num(tree.rewards[y]) - beta * cost - opt["value"][y[:t]]) < EXACT


def test_worked_example_closed_form():
    # V=2, H=2, β=0.5, π_ref uniform: β·log Z = β·log(¼·Σ_y e^{r(y)/β}) with r = (1, 0, 0.5, 0).
    opt = _tree.optimum(_tree.WORKED_V2H2)
    with mpmath.workdps(50):
        want = mpmath.mpf("0.5") * mpmath.log((mpmath.e ** 2 + 1 + mpmath.e + 1) / 4)
        # π*(0|0) = e²/(e² + 1): the last step is a softmax of r/β under a uniform π_ref.
        assert abs(opt["policy"][(0,)][0] - mpmath.e ** 2 / (mpmath.e ** 2 + 1)) < EXACT
    assert abs(opt["beta_log_z"] - want) < EXACT
    assert abs(_tree.objective(_tree.WORKED_V2H2, opt["policy"]) - want) < EXACT   # J(π*) = β·log Z


# --------------------------------------------------------------------------- sequence KL

@pytest.mark.parametrize("tree", ALL, ids=_ids(ALL))
def test_chain_rule_kl_equals_the_enumerated_kl(tree):
    for seed in (1, 2):
        p, q = _tree.random_behavior(tree, seed), _tree.random_behavior(tree, seed + 100)
        out = _tree.sequence_kl(tree, p, q)
        chain = mpmath.fsum(v["reach"] * v["token_kl"] for v in out["per_prefix"].values())
        assert out["kl"] > 0
        assert abs(out["kl"] - chain) < EXACT and abs(out["kl"] - out["chain"]) < EXACT
        assert abs(out["kl"] - mpmath.fsum(out["per_step"])) < EXACT
    assert _tree.sequence_kl(tree, p, p)["chain"] == 0


# --------------------------------------------------------------------------- the theorem

@pytest.mark.parametrize("tree", ALL, ids=_ids(ALL))
def test_proximal_kl_vanishes_at_the_optimum_for_every_behaviour(tree):
    opt = _tree.optimum(tree)["policy"]
    behaviours = [tree.behavior] if tree.behavior else []
    behaviours += [_tree.random_behavior(tree, seed) for seed in range(4)]
    for mu in behaviours:
        for baseline in _tree.BASELINES:
            upd = _tree.expected_update(tree, opt, mu, rule="proximal_kl", baseline=baseline)
            assert _fixed_point.residual(upd) < THEOREM
        # and it does not vanish elsewhere: at π_ref the update is of the size of the rewards
        assert _fixed_point.residual(_tree.expected_update(tree, tree.ref, mu, rule="proximal_kl")) > 1e-3
    assert _fixed_point.residual(_tree.expected_update(tree, opt, rule="proximal_kl_on_policy")) < THEOREM


@pytest.mark.parametrize("tree", TREES, ids=_ids(TREES))
def test_each_rule_vanishes_at_the_optimum_exactly_when_it_is_unbiased(tree):
    opt = _tree.optimum(tree)["policy"]
    for rule in _tree.RULES:
        upd = _tree.expected_update(tree, opt, rule=rule)
        assert all(abs(mpmath.fsum(row)) < EXACT for row in upd.values())   # tangent space
        if _tree.unbiased_on(tree, rule)[0]:
            assert _fixed_point.residual(upd) < THEOREM, rule
        else:
            assert _fixed_point.residual(upd) > 1e-5, rule


def test_own_token_kl_and_ratio_weighted_k3_have_the_same_update():
    # d(ρ·k3)/dlogp = ρ·(log π − log π_ref): TRL's bias-corrected k3 is the own-token KL.
    tree = _tree.RANDOM_V3H3
    pi, mu = _tree.random_behavior(tree, 5), _tree.random_behavior(tree, 6)
    a = _tree.expected_update(tree, pi, mu, rule="own_token_kl")
    b = _tree.expected_update(tree, pi, mu, rule="grpo_k3_ratio_weighted")
    assert max(abs(x - y) for s in a for x, y in zip(a[s], b[s])) < EXACT


@pytest.mark.parametrize("tree", [_tree.WORKED_V2H2, _tree.EOS_V3H3], ids=["worked-v2h2", "eos-v3h3"])
def test_on_policy_update_and_sequence_is_are_the_gradient_of_J(tree):
    """proximal_kl on-policy and sequence-level IS from any μ both equal ∇_θ J (softmax logits),
    checked against mpmath.diff of J itself."""
    pi, mu = _tree.random_behavior(tree, 7), _tree.random_behavior(tree, 8)
    on = _tree.expected_update(tree, pi, rule="proximal_kl_on_policy")
    seq = _tree.expected_update(tree, pi, mu, rule="sequence_is")
    # as in gradcheck: the value at 120 digits, mpmath.diff at 60 (its steps need the headroom)
    with mp.precision(120), mpmath.workdps(60):
        base = _tree.policy(tree, pi)
        for s in _tree.prefixes(tree):
            for a in range(tree.vocab):
                def J(x, s=s, a=a):
                    logits = [mpmath.log(v) for v in base[s]]
                    logits[a] += x
                    return _tree.objective(tree, {**base, s: _fixed_point.softmax_row(logits)})
                grad = mpmath.diff(J, 0)
                assert abs(on[s][a] - grad) < EXACT and abs(seq[s][a] - grad) < EXACT


# --------------------------------------------------------------------------- GSPO, CISPO, TIS, KL in the reward

ADDED = ("gspo", "cispo", "sequence_tis", "kl_in_reward")


def _expected_loss(tree, pi0, mu, rule, s, a, x):
    on = rule.endswith("_on_policy")
    base = rule[: -len("_on_policy")] if on else rule
    p0 = _tree.policy(tree, pi0)
    m = p0 if on else _tree.policy(tree, mu, "mu")
    ref = _tree.policy(tree, tree.ref)
    logits = [mpmath.log(v) for v in p0[s]]
    logits[a] += x
    p = {**p0, s: _fixed_point.softmax_row(logits)}
    beta = _tree.num(tree.beta)
    r = {y: _tree.num(tree.rewards[y]) for y in _tree.leaves(tree)}
    w = {y: mpmath.fprod(m[y[:t]][y[t]] for t in range(len(y))) for y in r}
    b = mpmath.fsum(w[y] * r[y] for y in r)
    total = []
    for y in r:
        T = len(y)
        steps = [(y[:t], y[t]) for t in range(T)]
        lp = [mpmath.log(p[q][c]) for q, c in steps]
        lp0 = [mpmath.log(p0[q][c]) for q, c in steps]
        lm = [mpmath.log(m[q][c]) for q, c in steps]
        lr = [mpmath.log(ref[q][c]) for q, c in steps]
        k3 = mpmath.fsum(mpmath.exp(lr[t] - lp[t]) - (lr[t] - lp[t]) - 1 for t in range(T))
        kl0 = mpmath.fsum(lp0[t] - lr[t] for t in range(T))
        A = r[y] - b
        if base == "gspo":          # GSPO eq. 5 with the clip open, plus β·mean_t k3
            loss = -mpmath.exp(mpmath.fsum(lp[t] - lm[t] for t in range(T)) / T) * A + beta * k3 / T
        elif base == "cispo":       # MiniMax-M1 §3.1: sg(min(ρ, 1 + ε_high))·A·log π, plus β·Σ k3
            cap = 1 + _tree.num(_tree.CISPO_CLIP_HIGH)
            loss = -mpmath.fsum(min(mpmath.exp(lp0[t] - lm[t]), cap) * A * lp[t] for t in range(T)) + beta * k3
        elif base == "sequence_tis":    # sg(min(π0(y)/μ(y), C))·sg(r − β·KL − b)·log π(y)
            weight = min(mpmath.exp(mpmath.fsum(lp0) - mpmath.fsum(lm)), _tree.SEQUENCE_TIS_CAP)
            loss = -weight * (A - beta * kl0) * mpmath.fsum(lp)
        else:                       # kl_in_reward: sg(r − β·KL − b)·log π(y), no ratio
            loss = -(A - beta * kl0) * mpmath.fsum(lp)
        total.append(w[y] * loss)
    return mpmath.fsum(total)


@pytest.mark.parametrize("tree", [_tree.WORKED_V2H2, _tree.EOS_V3H3], ids=["worked-v2h2", "eos-v3h3"])
def test_added_rules_are_minus_the_gradient_of_their_expected_loss(tree):
    """A finite-difference check: the exact update of GSPO, CISPO, sequence TIS and the KL in the
    reward is −∂/∂θ_s(a) of Σ_y μ(y)·L(y), the loss of each written from its paper's formula
    (stop-gradients held at π0), by mpmath.diff."""
    pi, mu = _tree.random_behavior(tree, 41), _tree.random_behavior(tree, 42)
    for rule in ADDED + tuple(r + "_on_policy" for r in ADDED):
        upd = _tree.expected_update(tree, pi, mu, rule=rule)
        with mp.precision(120), mpmath.workdps(60):
            for s in _tree.prefixes(tree):
                for a in range(tree.vocab):
                    grad = mpmath.diff(lambda x: _expected_loss(tree, pi, mu, rule, s, a, x), 0)
                    assert abs(upd[s][a] + grad) < EXACT, (rule, s, a)


@pytest.mark.parametrize("tree", [_tree.WORKED_V2H2, _tree.EOS_V3H3], ids=["worked-v2h2", "eos-v3h3"])
def test_on_policy_tis_and_kl_in_reward_are_the_gradient_of_J(tree):
    """On-policy, the KL folded into the reward and sequence TIS (whose cap does not bind at
    Π ρ = 1) are REINFORCE on r − β·log(π/π_ref): ∇_θ J, checked against mpmath.diff of J."""
    pi = _tree.random_behavior(tree, 43)
    updates = [_tree.expected_update(tree, pi, rule=r) for r in ("kl_in_reward_on_policy", "sequence_tis_on_policy")]
    with mp.precision(120), mpmath.workdps(60):
        base = _tree.policy(tree, pi)
        for s in _tree.prefixes(tree):
            for a in range(tree.vocab):
                def J(x, s=s, a=a):
                    logits = [mpmath.log(v) for v in base[s]]
                    logits[a] += x
                    return _tree.objective(tree, {**base, s: _fixed_point.softmax_row(logits)})
                grad = mpmath.diff(J, 0)
                assert all(abs(u[s][a] - grad) < EXACT for u in updates)


def _gap(a, b):
    return max(abs(x - y) for s in a for x, y in zip(a[s], b[s]))


def test_added_rules_reduce_to_earlier_ones():
    """Where the new rules' defining features vanish they are the rules they extend: CISPO
    on-policy (ρ = 1 < 1 + ε) and with an unbounded cap is grpo_k3; TIS with an unbounded cap is
    sequence_is; GSPO on one-token sequences (s = ρ) is grpo_k3, and on-policy on a fixed-length
    tree it is grpo_k3_on_policy / H; an off-policy rule sampled from μ = π is its on-policy form."""
    tree = _tree.RANDOM_V3H3
    pi, mu = _tree.random_behavior(tree, 44), _tree.random_behavior(tree, 45)

    def upd(rule, m=mu, **params):
        return _tree.expected_update(tree, pi, m, rule=rule, params=params or None)

    assert _gap(upd("cispo_on_policy"), upd("grpo_k3_on_policy")) < EXACT
    assert _gap(upd("cispo", cispo_clip_high=10 ** 9), upd("grpo_k3")) < EXACT
    assert _gap(upd("sequence_tis", sequence_tis_cap=10 ** 9), upd("sequence_is")) < EXACT
    third = {s: [v / 3 for v in row] for s, row in upd("grpo_k3_on_policy").items()}
    assert _gap(upd("gspo_on_policy"), third) < EXACT
    for rule in ("gspo", "sequence_tis", "kl_in_reward", "cispo"):
        assert _gap(upd(rule, m=pi), upd(rule + "_on_policy")) < EXACT, rule
    one = _tree.Tree("one-step", 3, 1, Fraction(1, 4), {(0,): 0, (1,): 1, (2,): Fraction(1, 2)},
                     {(): [Fraction(1, 2), Fraction(1, 4), Fraction(1, 4)]},
                     {(): [Fraction(1, 5), Fraction(3, 5), Fraction(1, 5)]})
    p1 = {(): [Fraction(1, 3)] * 3}
    assert _gap(_tree.expected_update(one, p1, rule="gspo"), _tree.expected_update(one, p1, rule="grpo_k3")) < EXACT


def test_coupled_rules_local_update_is_the_update_at_the_prefix():
    """The fixed-point solver's per-prefix update of the coupled rules (which read the past from
    π above the prefix) times P(reach s) is the full expected update at s."""
    for tree in (_tree.WORKED_V2H2, _tree.EOS_V3H3):
        pi = _tree.policy(tree, _tree.random_behavior(tree, 46))
        for rule in ("gspo", "sequence_tis", "kl_in_reward", "gspo_on_policy"):
            setting = _tree.Setting(tree, rule, None, None, None, None, "mean", None)
            assert setting.coupled
            full, reach = setting.update(pi), setting.reach_of(pi)
            shift, scale = setting.advantage_terms(pi)
            for s in _tree.prefixes(tree):
                local = setting.local_update(pi, s, shift, scale)
                assert max(abs(x * reach[s] - y) for x, y in zip(local, full[s])) < EXACT, (rule, s)


def test_coupled_solver_finds_the_optimum_of_an_uncapped_tis():
    """With a cap that never binds, sequence TIS is sequence_is, an unbiased rule: the coupled
    solver (passes over the prefixes, then Newton on all of them) must find π* from π_ref."""
    tree = _tree.EOS_V3H3
    fp = _fixed_point.fixed_point(tree, "sequence_tis", params={"sequence_tis_cap": 10 ** 9})
    assert fp["converged"] and not fp["boundary"] and fp["note"].startswith("coupled")
    assert _tree.sequence_kl(tree, fp["policy"], _tree.optimum(tree)["policy"])["chain"] < THEOREM


def test_gspo_clip_would_exclude_every_sequence_at_the_optimum():
    """Why the gspo row leaves GSPO's clip open (docs/proximal_kl.md): at π*, under each built-in
    tree's μ, every sequence's s = (π*(y)/μ(y))^{1/|y|} lies outside [1 − 3e−4, 1 + 4e−4] (GSPO
    §5.1), so the clipped objective would give those sequences no gradient at all."""
    lo, hi = 1 - mpmath.mpf("3e-4"), 1 + mpmath.mpf("4e-4")
    for tree in TREES:
        star = dict(_tree.sequences(tree, _tree.optimum(tree)["policy"]))
        for y, w in _tree.sequences(tree, tree.behavior):
            ratio = (star[y] / w) ** (mpmath.mpf(1) / len(y))
            assert not lo <= ratio <= hi, (tree.name, y)


# --------------------------------------------------------------------------- loss ↔ theorem

def _loss_update(tree, pi, mu, rule_kwargs, on_policy=False):
    """−Σ_y μ(y)·∇_θ L(y) with L(y) = Σ_t ℓ_t from proximal_kl.loss_vjp, one sequence per call
    (aggregation 'seq-mean-token-sum' with B = 1 is the plain token sum), chained to the logits."""
    with mpmath.workdps(50):
        p = _tree.policy(tree, pi)
        m = p if on_policy else _tree.policy(tree, mu, "mu")
        ref = _tree.policy(tree, tree.ref)
        beta = _tree.num(tree.beta)
        seqs = [(y, mpmath.fprod(m[y[:t]][y[t]] for t in range(len(y)))) for y in _tree.leaves(tree)]
        b = mpmath.fsum(w * _tree.num(tree.rewards[y]) for y, w in seqs)
        update = {s: [mp.ZERO] * tree.vocab for s in _tree.prefixes(tree)}
        H = tree.horizon
        for y, w in seqs:
            pad = H - len(y)
            lp = [mpmath.log(p[y[:t]][y[t]]) for t in range(len(y))] + [mp.mpf(-1)] * pad
            bl = [mpmath.log(m[y[:t]][y[t]]) for t in range(len(y))] + [mp.mpf(-1)] * pad
            rl = [mpmath.log(ref[y[:t]][y[t]]) for t in range(len(y))] + [mp.mpf(-1)] * pad
            g = proximal_kl.loss_vjp(mp.ONE, [lp], [bl], [rl], [_tree.num(tree.rewards[y]) - b],
                                     [[1] * len(y) + [0] * pad], beta=beta,
                                     aggregation="seq-mean-token-sum", **rule_kwargs)["logp"][0]
            for t in range(len(y)):
                s, a = y[:t], y[t]
                for j in range(tree.vocab):
                    update[s][j] += w * g[t] * p[s][j]
                update[s][a] -= w * g[t]
    return update


TIES = [("proximal_kl", {}), ("future_clipped", {"future_clip": _tree.FUTURE_CLIP}),
        ("future_window", {"future_window": _tree.FUTURE_WINDOW})]


@pytest.mark.parametrize("tree", TREES, ids=_ids(TREES))
def test_the_loss_function_gives_the_population_update(tree):
    """proximal_kl.loss, averaged over the μ-weighted full set of sequences, has exactly the
    gradient that _tree.expected_update computes: this ties the loss to the theorem."""
    pi, mu = _tree.random_behavior(tree, 21), _tree.random_behavior(tree, 22)
    for rule, kw in TIES:
        kw = {k: (mpmath.mpf(v.numerator) / v.denominator if isinstance(v, Fraction) else v)
              for k, v in kw.items()}
        for on_policy in (False, True):
            name = rule + ("_on_policy" if on_policy else "")
            want = _tree.expected_update(tree, pi, mu, rule=name)
            got = _loss_update(tree, pi, mu, kw, on_policy)
            assert max(abs(x - y) for s in want for x, y in zip(want[s], got[s])) < EXACT, name
    # at π* the loss's population gradient vanishes too
    opt = _tree.optimum(tree)["policy"]
    assert _fixed_point.residual(_loss_update(tree, opt, mu, {})) < THEOREM


# --------------------------------------------------------------------------- fixed points

def test_solver_finds_the_optimum_from_the_reference_for_random_behaviours():
    tree = _tree.RANDOM_V3H3
    opt = _tree.optimum(tree)["policy"]
    for seed in (31, 32):
        fp = _fixed_point.fixed_point(tree, "proximal_kl", mu=_tree.random_behavior(tree, seed))
        assert fp["converged"] and not fp["boundary"]
        assert _tree.sequence_kl(tree, fp["policy"], opt)["chain"] < THEOREM


def test_sigma_normalized_rest_point_is_the_optimum_for_beta_sigma():
    # A/σ_μ − β·(k + F) = (1/σ_μ)·(A − β·σ_μ·(k + F)): the rest point is π* for β·σ_μ.
    tree = _tree.EOS_V3H3
    fp = _fixed_point.fixed_point(tree, "sigma_normalized")
    with mpmath.workdps(50):
        seqs = _tree.sequences(tree, tree.behavior)
        r = {y: _tree.num(tree.rewards[y]) for y in _tree.leaves(tree)}
        mean = mpmath.fsum(w * r[y] for y, w in seqs)
        sigma = mpmath.sqrt(mpmath.fsum(w * (r[y] - mean) ** 2 for y, w in seqs))
        want = _tree.optimum(tree, beta=_tree.num(tree.beta) * sigma)["policy"]
    assert fp["converged"]
    assert _tree.sequence_kl(tree, fp["policy"], want)["chain"] < THEOREM


def test_own_token_kl_rest_point_closed_form():
    # Without the future cost the rest point is π(a|s) ∝ π_ref(a|s)·exp(E_μ[r | s·a]/β).
    tree = _tree.RANDOM_V3H3
    fp = _fixed_point.fixed_point(tree, "own_token_kl")
    with mpmath.workdps(50):
        mu, ref, beta = _tree.policy(tree, tree.behavior), _tree.policy(tree, tree.ref), _tree.num(tree.beta)
        want = {}
        for s in _tree.prefixes(tree):
            q = []
            for a in range(tree.vocab):
                ys = [y for y in _tree.leaves(tree) if y[:len(s) + 1] == s + (a,)]
                ws = [mpmath.fprod(mu[y[:t]][y[t]] for t in range(len(s) + 1, len(y))) for y in ys]
                q.append(mpmath.fsum(w * _tree.num(tree.rewards[y]) for w, y in zip(ws, ys)))
            z = [mpmath.log(ref[s][a]) + q[a] / beta for a in range(tree.vocab)]
            want[s] = _fixed_point.softmax_row(z)
    assert fp["converged"]
    assert _tree.sequence_kl(tree, fp["policy"], want)["chain"] < THEOREM


def test_sigma_normalized_on_policy_interior_and_collapse():
    # One step, r = (0, 1), π_ref uniform: π*_{β·s}(1) = sigmoid(1/(β·s)), σ = sqrt(p(1 − p)).
    # β = 4 has an interior rest point σ = σ_{π*(β·σ)}; β = 0.5 (the worked tree) collapses.
    tree = _tree.Tree("one-step", 2, 1, 4, {(0,): 0, (1,): 1}, {(): [0.5, 0.5]}, {(): [0.5, 0.5]})
    fp = _fixed_point.fixed_point(tree, "sigma_normalized_on_policy")
    assert fp["converged"] and not fp["boundary"] and fp["rate_residual"] < THEOREM
    p = fp["policy"][()][1]
    sigma = mpmath.sqrt(p * (1 - p))
    assert abs(p - 1 / (1 + mpmath.exp(-1 / (4 * sigma)))) < THEOREM
    assert _fixed_point.residual(_tree.expected_update(tree, fp["policy"], rule="sigma_normalized_on_policy")) < THEOREM
    fp = _fixed_point.fixed_point(_tree.WORKED_V2H2, "sigma_normalized_on_policy")
    assert fp["converged"] and fp["rate_residual"] is None and fp["note"].startswith("collapse")
    assert fp["policy"][()][0] == 1 and fp["policy"][(0,)][0] == 1   # greedy on r(00) = 1


def test_every_rule_on_the_worked_tree():
    """Unbiased rules find π* from π_ref; every biased one rests measurably elsewhere, with
    a lower objective. whole-cost clipping removes the barrier of token 1 after prefix 0."""
    tree = _tree.WORKED_V2H2
    opt = _tree.optimum(tree)
    for rule in _tree.RULES:
        fp = _fixed_point.fixed_point(tree, rule)
        assert fp["converged"], rule
        kl = _tree.sequence_kl(tree, fp["policy"], opt["policy"])["chain"]
        value = _tree.objective(tree, fp["policy"])
        if _tree.unbiased_on(tree, rule)[0]:
            assert kl < THEOREM and abs(value - opt["beta_log_z"]) < THEOREM, rule
        else:
            assert kl > 1e-10 and value < opt["beta_log_z"] - 1e-12, rule
    fp = _fixed_point.fixed_point(tree, "whole_cost_clipped")
    assert [(b["prefix"], b["token"]) for b in fp["boundary"]] == [((0,), 1)]
    assert fp["boundary"][0]["rate"] < 0


# --------------------------------------------------------------------------- bad input

def test_bad_input_names_the_argument():
    t = _tree.WORKED_V2H2
    opt = _tree.optimum(t)["policy"]
    cases = [
        ("rule", lambda: _tree.expected_update(t, opt, rule="ppo")),
        ("baseline", lambda: _tree.expected_update(t, opt, baseline="median")),
        ("beta", lambda: _tree.expected_update(t, opt, beta=0)),
        ("beta", lambda: _tree.optimum(t, beta=-1)),
        ("mu", lambda: _tree.expected_update(t, opt, {**t.behavior, (0,): [1, 0]})),
        ("mu", lambda: _tree.expected_update(t, opt, {(): [0.5, 0.5]})),
        ("pi", lambda: _tree.expected_update(t, {**opt, (): [0.5, 0.6]})),
        ("pi", lambda: _tree.expected_update(t, {**opt, (): [0.5, 0.25, 0.25]})),
        ("pi", lambda: _tree.sequence_kl(t, {**opt, (1,): [float("nan"), 1]}, opt)),
        ("rho", lambda: _tree.sequence_kl(t, opt, {**opt, (1,): [0, 1]})),
        ("rewards", lambda: _tree.expected_update(t, opt, rewards={(0, 0): 1})),
        ("future_window", lambda: _tree.expected_update(t, opt, rule="future_window",
                                                     params={"future_window": 0})),
        ("ratio_cap", lambda: _tree.expected_update(t, opt, rule="ratio_capped", params={"ratio_cap": -1})),
        ("sequence_tis_cap", lambda: _tree.expected_update(t, opt, rule="sequence_tis",
                                                           params={"sequence_tis_cap": 0})),
        ("cispo_clip_high", lambda: _tree.expected_update(t, opt, rule="cispo_on_policy",
                                                          params={"cispo_clip_high": -0.2})),
        ("tree.vocab", lambda: _tree.optimum(_tree.Tree("x", 1, 2, 1, {}, {}))),
        ("tree.horizon", lambda: _tree.optimum(_tree.Tree("x", 2, 0, 1, {}, {}))),
        ("tree.eos", lambda: _tree.optimum(_tree.Tree("x", 2, 2, 1, t.rewards, t.ref, eos=2))),
        ("tree.beta", lambda: _tree.optimum(_tree.Tree("x", 2, 2, 0, t.rewards, t.ref))),
        ("tree.rewards", lambda: _tree.optimum(_tree.Tree("x", 2, 2, 1, {(0, 0): 1}, t.ref))),
        ("tree.ref", lambda: _tree.optimum(_tree.Tree("x", 2, 2, 1, t.rewards, {(): [1, 0]}))),
    ]
    for name, call in cases:
        with pytest.raises(InputError, match=f"^{name}"):
            call()
