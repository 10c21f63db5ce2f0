"""Token-tree MDPs: exact KL-regularised optima and exact population updates.

Source. The stationary-policy theorem of Proximal KL (H. Bai, J. Yao, T. Zhang) as summarised
in article 004 ("el teorema sobre la política estacionaria supone una actualización exacta sobre
toda la población y que se contabiliza por completo el efecto KL futuro") and the derivation in
FRPO (arXiv 2601.10201); the paper text is not public in our sources, so the update rules below
are the reconstruction of refimpl/exact/proximal_kl.py.

A tree has a vocabulary of V tokens, a horizon H and optionally an end-of-sequence token: a
sequence ends when it emits ``eos`` or reaches length H. Leaves carry rewards r(y); a policy is a
dict ``prefix tuple -> list of V probabilities`` over the non-terminal prefixes.

KL-regularised objective J(π) = E_{y~π}[r(y)] − β·KL(π‖π_ref) over whole responses. Its optimum
is π*(y) ∝ π_ref(y)·exp(r(y)/β), obtained token by token by the soft Bellman backup

    V*(leaf) = r,   V*(s) = β·log Σ_a π_ref(a|s)·exp(V*(s·a)/β),
    π*(a|s) = π_ref(a|s)·exp((V*(s·a) − V*(s))/β),    β·log Z = V*(root).

Population update. For a rule with per-token loss ℓ_t (summed over the tokens of a sequence
sampled from μ), the *expected update* at prefix s is minus the exact expected gradient with
respect to the logits θ_s of π(·|s) under the softmax parametrisation:

    Δθ_s = −Σ_y μ(y) Σ_{t: s_t = s} (∂L(y)/∂log π(y_t|s_t))·(e_{y_t} − π(·|s)).

The minibatch token mean of the practical loss divides this by E_μ|y| (a positive constant in
the large-batch limit), which moves no fixed point, so it is left out. The advantage is the
exact group-relative one, A = r(y) − E_μ[r] (baseline='mean': a group of one prompt in the
infinite-group limit; on-policy rules use E_π[r], held constant), or A = r(y) (baseline='none').
A constant baseline changes no per-token-ratio rule in expectation (Σ_a π(a|s)(e_a − π) = 0),
so the theorem holds with either; it does change the biased rules without a ratio.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Mapping, Sequence

import mpmath

from refimpl import validate
from refimpl.exact import mp

# --------------------------------------------------------------------------- trees


@dataclass(frozen=True)
class Tree:
    """A token-tree MDP. Numbers may be str, Fraction, int, float or mpf; they are converted
    at the working precision when used, so a 50-digit run sees 50-digit rewards."""
    name: str
    vocab: int
    horizon: int
    beta: object
    rewards: Mapping[tuple, object]          # leaf -> r
    ref: Mapping[tuple, Sequence[object]]   # prefix -> π_ref(·|prefix)
    behavior: Mapping[tuple, Sequence[object]] = field(default_factory=dict)  # default μ
    eos: int | None = None
    description: str = ""


def num(x) -> mpmath.mpf:
    """An exact-as-possible mpf at the working precision (Fractions and decimal strings are
    rounded once, at the current precision)."""
    if isinstance(x, Fraction):
        return mpmath.mpf(x.numerator) / x.denominator
    if isinstance(x, mpmath.mpf):
        return +x
    if isinstance(x, str):
        return mpmath.mpf(x)
    return mpmath.mpf(x)


def is_leaf(tree: Tree, y: tuple) -> bool:
    return len(y) >= tree.horizon or (tree.eos is not None and len(y) > 0 and y[-1] == tree.eos)


def prefixes(tree: Tree) -> list[tuple]:
    """The non-terminal prefixes (where a policy acts), breadth first from the root ()."""
    out, frontier = [], [()]
    while frontier:
        out.extend(frontier)
        frontier = [s + (a,) for s in frontier for a in range(tree.vocab) if not is_leaf(tree, s + (a,))]
    return out


def leaves(tree: Tree) -> list[tuple]:
    return [s + (a,) for s in prefixes(tree) for a in range(tree.vocab) if is_leaf(tree, s + (a,))]


def check_tree(tree: Tree) -> Tree:
    if isinstance(tree.vocab, bool) or not isinstance(tree.vocab, int) or tree.vocab < 2:
        validate.fail("tree.vocab", f"must be an integer >= 2, got {tree.vocab!r}")
    if isinstance(tree.horizon, bool) or not isinstance(tree.horizon, int) or tree.horizon < 1:
        validate.fail("tree.horizon", f"must be an integer >= 1, got {tree.horizon!r}")
    if tree.eos is not None and (isinstance(tree.eos, bool) or tree.eos not in range(tree.vocab)):
        validate.fail("tree.eos", f"must be a token id in [0, {tree.vocab}), got {tree.eos!r}")
    validate.positive("tree.beta", num(tree.beta))
    for y in leaves(tree):
        if y not in tree.rewards:
            validate.fail("tree.rewards", f"no reward for leaf {list(y)}")
        validate.real("tree.rewards", num(tree.rewards[y]))
    policy(tree, tree.ref, "tree.ref")
    return tree


def policy(tree: Tree, p: Mapping[tuple, Sequence[object]], name: str = "pi") -> dict:
    """Validate a tabular policy (one distribution with full support per prefix) and convert
    it to mpf at the working precision. Rows must sum to 1 within 1e-9 (binary64 inputs) and
    are renormalised exactly."""
    if not isinstance(p, Mapping):
        validate.fail(name, "must be a dict prefix tuple -> list of probabilities")
    out = {}
    for s in prefixes(tree):
        if s not in p:
            validate.fail(name, f"no distribution for prefix {list(s)}")
        row = [num(v) for v in p[s]]
        if len(row) != tree.vocab:
            validate.fail(name, f"prefix {list(s)}: expected {tree.vocab} probabilities, got {len(row)}")
        for v in row:
            if not mpmath.isfinite(v) or v <= 0:
                validate.fail(name, f"prefix {list(s)}: probabilities must be finite and > 0 "
                                    f"(full support), got {mp.nstr(v, 8)}")
        total = mpmath.fsum(row)
        if abs(total - 1) > mpmath.mpf("1e-9"):
            validate.fail(name, f"prefix {list(s)}: probabilities sum to {mp.nstr(total, 12)}, not 1")
        out[s] = [v / total for v in row]
    return out


def as_strings(tree: Tree, p: Mapping[tuple, Sequence], digits: int) -> list[dict]:
    """The JSON layout of a policy: [{"prefix": [ids], "probs": [decimal strings]}]."""
    return [{"prefix": list(s), "probs": [mp.nstr(v, digits) for v in p[s]]} for s in prefixes(tree)]


# --------------------------------------------------------------------------- sequences

def _paths(tree: Tree):
    return [(y, [(y[:t], y[t]) for t in range(len(y))]) for y in leaves(tree)]


@mp.exact
def sequences(tree: Tree, pi) -> list[tuple[tuple, mpmath.mpf]]:
    """Exact enumeration: every complete sequence y with its probability π(y) = Π_t π(y_t|y_<t)."""
    check_tree(tree)
    p = policy(tree, pi)
    return [(y, mpmath.fprod(p[s][a] for s, a in path)) for y, path in _paths(tree)]


def _reach(tree: Tree, p: dict) -> dict:
    """P(reach s) under policy p for every prefix."""
    reach = {(): mp.ONE}
    for s in prefixes(tree)[1:]:
        reach[s] = reach[s[:-1]] * p[s[:-1]][s[-1]]
    return reach


# --------------------------------------------------------------------------- optimum

@mp.exact
def optimum(tree: Tree, beta=None) -> dict:
    """The optimum of J by the soft Bellman backup (module docstring).

    Returns {"policy": π* per prefix, "beta_log_z": β·log Z = V*(root), "value": V* at every
    prefix and leaf}. Source: the KL-regularised optimum π* ∝ π_ref·exp(r/β) (e.g. DPO §4
    eq. 4) computed token by token (soft Q-learning's backup; FRPO arXiv 2601.10201)."""
    check_tree(tree)
    b = num(tree.beta if beta is None else beta)
    validate.positive("beta", b)
    ref = policy(tree, tree.ref, "tree.ref")
    value = {y: num(tree.rewards[y]) for y in leaves(tree)}
    star = {}
    for s in reversed(prefixes(tree)):
        logits = [mpmath.log(ref[s][a]) + value[s + (a,)] / b for a in range(tree.vocab)]
        lse = mp.logsumexp(mp.array("logits", logits))
        value[s] = b * lse
        star[s] = [mpmath.exp(z - lse) for z in logits]
    return {"policy": {s: star[s] for s in prefixes(tree)}, "beta_log_z": value[()], "value": value}


@mp.exact
def enumerated_optimum(tree: Tree, beta=None) -> dict:
    """π*(y) = π_ref(y)·exp(r(y)/β) / Z over the enumerated sequences (the closed form that the
    soft Bellman backup must reproduce), and β·log Z."""
    check_tree(tree)
    b = num(tree.beta if beta is None else beta)
    validate.positive("beta", b)
    logw = {y: mpmath.log(p) + num(tree.rewards[y]) / b for y, p in sequences(tree, tree.ref)}
    ys = list(logw)
    lse = mp.logsumexp(mp.array("logw", [logw[y] for y in ys]))
    return {"probs": {y: mpmath.exp(logw[y] - lse) for y in ys}, "beta_log_z": b * lse}


# --------------------------------------------------------------------------- KL and objective

@mp.exact
def sequence_kl(tree: Tree, pi, rho) -> dict:
    """KL(π‖ρ) between the sequence distributions, exactly, and its chain-rule decomposition
    KL = E_{y~π} Σ_t KL(π(·|s_t)‖ρ(·|s_t)) = Σ_s P_π(s)·KL_s.

    Returns {"kl": by enumeration Σ_y π(y)·log(π(y)/ρ(y)), "per_prefix": {s: {"reach": P_π(s),
    "token_kl": KL_s}}, "per_step": [Σ_{|s|=t} P_π(s)·KL_s for t = 0..H−1]}."""
    check_tree(tree)
    p, q = policy(tree, pi, "pi"), policy(tree, rho, "rho")
    total = mpmath.fsum(mpmath.fprod(p[s][a] for s, a in path)
                        * mpmath.fsum(mpmath.log(p[s][a]) - mpmath.log(q[s][a]) for s, a in path)
                        for _, path in _paths(tree))
    reach = _reach(tree, p)
    per_prefix, per_step = {}, [mp.ZERO] * tree.horizon
    for s in prefixes(tree):
        kl_s = mpmath.fsum(p[s][a] * (mpmath.log(p[s][a]) - mpmath.log(q[s][a])) for a in range(tree.vocab))
        per_prefix[s] = {"reach": reach[s], "token_kl": kl_s}
        per_step[len(s)] += reach[s] * kl_s
    return {"kl": total, "per_prefix": per_prefix, "per_step": per_step}


@mp.exact
def objective(tree: Tree, pi, beta=None) -> mpmath.mpf:
    """J(π) = E_{y~π}[r(y)] − β·KL(π‖π_ref); its maximum is β·log Z, reached at π* only."""
    check_tree(tree)
    b = num(tree.beta if beta is None else beta)
    seqs = sequences(tree, pi)
    er = mpmath.fsum(pr * num(tree.rewards[y]) for y, pr in seqs)
    return er - b * sequence_kl(tree, pi, tree.ref)["kl"]


# --------------------------------------------------------------------------- rules

@dataclass(frozen=True)
class Rule:
    name: str
    summary: str
    unbiased: bool
    why: str
    params: dict = field(default_factory=dict)


# Parameters of the biased rules: small enough to bind at π* on every built-in tree (checked by
# the tests through fixed_point_kl), recorded in the theorem table.
FUTURE_CLIP = Fraction(1, 4)      # |F_t| ≤ 0.25 nats
FUTURE_WINDOW = 1                 # only the next token's KL
WHOLE_COST_CLIP = Fraction(1, 4)  # |k_t + F_t| ≤ 0.25 nats
RATIO_CAP = Fraction(3, 2)        # truncated importance weight min(ρ, 1.5)

_OFF = (
    Rule("proximal_kl", "−ρ_t·sg(A − β(k_t + F_t)), F_t = Σ_{u>t} k_u (the Proximal KL update)", True,
         "at π*, β·Σ_{u≥t} k_u = r − V*(s_t) on every path (path consistency), so the coefficient "
         "is V*(s_t) − b whatever the token and the future; ρ_t turns μ's token weights into π's, "
         "and Σ_a π(a|s)·(e_a − π(·|s)) = 0"),
    Rule("proximal_kl_no_ratio", "−sg(A − β(k_t + F_t))·log π (ρ dropped)", False,
         "tokens weighted by μ(a|s): Σ_a μ(a|s)·c·(e_a − π) = c·(μ − π) ≠ 0 at π*"),
    Rule("own_token_kl", "−ρ_t·sg(A − β·k_t) (own-token KL only)", False,
         "the future KL cost is missing: the rest point solves π ∝ π_ref·exp(E_μ[r|s·a]/β)"),
    Rule("grpo_k3", "−ρ_t·A + β·k3_t (k3 as a loss, no ratio on the KL)", False,
         "the k3 loss's gradient under μ, (1 − π_ref/π)·μ-weighted, is neither the future KL nor "
         "importance corrected (on-policy it is ∇KL(π_ref‖π), the reverse KL, per token)"),
    Rule("grpo_k3_ratio_weighted", "−ρ_t·A + β·ρ_t·k3_t (TRL's use_bias_correction_kl)", False,
         "d(ρ·k3)/dlogp = ρ·k_t: the same expected update as own_token_kl (no future KL)"),
    Rule("sequence_is", "−(Π_u ρ_u)·sg(A − β·Σ_u k_u) (whole-sequence importance sampling)", True,
         "E_μ[(π(y)/μ(y))·f(y)] = E_π[f(y)]: the expected update is ∇J itself (REINFORCE with the "
         "exact sequence-level KL reward), whose only zero is π*"),
    Rule("future_clipped", "proximal_kl with F_t clipped to [−c, c]", False,
         "at π* |F_t| exceeds c on some path, so the coefficient is no longer V*(s_t) − b",
         {"future_clip": FUTURE_CLIP}),
    Rule("future_window", "proximal_kl with F_t summed over the next W tokens only", False,
         "the KL of tokens beyond the window is dropped (unbiased only when H ≤ W + 1, where the "
         "window covers every later token)", {"future_window": FUTURE_WINDOW}),
    Rule("whole_cost_clipped", "proximal_kl with k_t + F_t clipped to [−c, c]", False,
         "at π* |k_t + F_t| exceeds c on some path", {"whole_cost_clip": WHOLE_COST_CLIP}),
    Rule("ratio_capped", "proximal_kl with the detached truncated weight min(ρ_t, C)·∇log π", False,
         "where π*(a|s) > C·μ(a|s) the token weight min(π, C·μ) is no longer ∝ π",
         {"ratio_cap": RATIO_CAP}),
    Rule("sigma_normalized", "proximal_kl with A = (r − E_μ[r]) / σ_μ(r) (group-normalised reward)", False,
         "dividing A by σ is the same as using β·σ: the rest point is π* for β·σ"),
)


def _on_policy(rule: Rule) -> Rule:
    unbiased = rule.name in ("proximal_kl", "proximal_kl_no_ratio", "sequence_is", "ratio_capped")
    why = {
        "proximal_kl": "the update is the exact policy gradient ∇J (reward-to-go minus the KL to go)",
        "proximal_kl_no_ratio": "with μ = π, ρ = 1: identical to proximal_kl_on_policy",
        "sequence_is": "with μ = π, Π ρ = 1: REINFORCE on r − β·log(π/π_ref), i.e. ∇J",
        "ratio_capped": "with μ = π, ρ = 1 < C: the cap never binds",
    }.get(rule.name, "on-policy sampling does not remove the rule's modelling bias: " + rule.why)
    return Rule(rule.name + "_on_policy", rule.summary + "; μ = π (sampling policy held constant)",
                unbiased, why, dict(rule.params))


RULES: dict[str, Rule] = {r.name: r for r in _OFF}
RULES.update({r.name: r for r in map(_on_policy, _OFF)})
BASELINES = ("mean", "none")


def _clip(x, c):
    return min(max(x, -c), c)


def _token_derivs(base: str, params: dict, lp, lm, lr, adv, beta):
    """∂L(y)/∂log π(y_t|s_t) along one sampled sequence (lp, lm, lr: log π, log μ, log π_ref of
    its tokens; every coefficient in sg(·) is held constant)."""
    T = len(lp)
    k = [lp[t] - lr[t] for t in range(T)]
    rho = [mpmath.exp(lp[t] - lm[t]) for t in range(T)]

    def future(t, window=None):
        stop = T if window is None else min(T, t + 1 + window)
        return mpmath.fsum(k[t + 1:stop])

    if base in ("proximal_kl", "sigma_normalized"):
        return [-rho[t] * (adv - beta * (k[t] + future(t))) for t in range(T)]
    if base == "proximal_kl_no_ratio":
        return [-(adv - beta * (k[t] + future(t))) for t in range(T)]
    if base == "own_token_kl":
        return [-rho[t] * (adv - beta * k[t]) for t in range(T)]
    if base == "grpo_k3":
        # k3 = e^{lr−lp} − (lr − lp) − 1, dk3/dlogp = 1 − e^{lr−lp} = −expm1(lr − lp)
        return [-rho[t] * adv - beta * mpmath.expm1(lr[t] - lp[t]) for t in range(T)]
    if base == "grpo_k3_ratio_weighted":
        # d(ρ·k3)/dlogp = ρ·k3 + ρ·(1 − e^{lr−lp}) = ρ·(lp − lr)
        return [-rho[t] * adv + beta * rho[t] * k[t] for t in range(T)]
    if base == "sequence_is":
        w = mpmath.fprod(rho) * (adv - beta * mpmath.fsum(k))
        return [-w] * T
    if base == "future_clipped":
        c = num(params["future_clip"])
        return [-rho[t] * (adv - beta * (k[t] + _clip(future(t), c))) for t in range(T)]
    if base == "future_window":
        w = int(params["future_window"])
        return [-rho[t] * (adv - beta * (k[t] + future(t, w))) for t in range(T)]
    if base == "whole_cost_clipped":
        c = num(params["whole_cost_clip"])
        return [-rho[t] * (adv - beta * _clip(k[t] + future(t), c)) for t in range(T)]
    if base == "ratio_capped":
        c = num(params["ratio_cap"])
        return [-min(rho[t], c) * (adv - beta * (k[t] + future(t))) for t in range(T)]
    raise AssertionError(base)


@mp.exact
def expected_update(tree: Tree, pi, mu=None, pi_ref=None, beta=None, rule: str = "proximal_kl",
                    rewards=None, baseline: str = "mean", params: dict | None = None) -> dict:
    """Exact population update of ``rule`` at every prefix: Δθ_s = −E_{y~μ}[∇_{θ_s} L(y)] with
    respect to the softmax logits θ_s of π(·|s) (module docstring), as {prefix: [V mpf]}
    (each row sums to zero: it lies in the softmax tangent space).

    ``mu`` defaults to the tree's behaviour policy and is ignored by the ``*_on_policy`` rules
    (μ = π, held constant). ``pi_ref``, ``beta`` and ``rewards`` default to the tree's.
    ``params`` overrides the recorded parameters of the biased rules (``RULES[rule].params``).
    Rules and why each is or is not unbiased: ``RULES``. Sources: the Proximal KL update of the
    article-004 summary / FRPO arXiv 2601.10201 (reconstructed, see proximal_kl.py); GRPO's k3
    loss, DeepSeekMath §4.1.1 eq. 3–4; TRL's ratio-weighted k3 (use_bias_correction_kl)."""
    check_tree(tree)
    validate.choice("rule", rule, RULES)
    validate.choice("baseline", baseline, BASELINES)
    on_policy = rule.endswith("_on_policy")
    base = rule[: -len("_on_policy")] if on_policy else rule
    prm = dict(RULES[rule].params)
    prm.update(params or {})
    b = num(tree.beta if beta is None else beta)
    validate.positive("beta", b)
    p = policy(tree, pi, "pi")
    m = p if on_policy else policy(tree, tree.behavior if mu is None else mu, "mu")
    ref = policy(tree, tree.ref if pi_ref is None else pi_ref, "pi_ref")
    rw = tree.rewards if rewards is None else rewards
    paths = _paths(tree)
    r = {}
    for y, _ in paths:
        if y not in rw:
            validate.fail("rewards", f"no reward for leaf {list(y)}")
        r[y] = num(rw[y])
    logs = {name: {s: [mpmath.log(v) for v in d[s]] for s in d} for name, d in
            (("pi", p), ("mu", m), ("ref", ref))}
    weight = {y: mpmath.fprod(m[s][a] for s, a in path) for y, path in paths}
    mean = mpmath.fsum(weight[y] * r[y] for y in r)
    shift = mean if baseline == "mean" else mp.ZERO
    scale = mp.ONE
    if base == "sigma_normalized":
        # population std of the group (std_ddof = 0, eps = 0: the paper defaults)
        scale = mpmath.sqrt(mpmath.fsum(weight[y] * (r[y] - mean) ** 2 for y in r))
        if scale == 0:
            validate.fail("rewards", "constant under μ: σ = 0, sigma_normalized is undefined")
    update = {s: [mp.ZERO] * tree.vocab for s in prefixes(tree)}
    for y, path in paths:
        lp = [logs["pi"][s][a] for s, a in path]
        lm = [logs["mu"][s][a] for s, a in path]
        lr = [logs["ref"][s][a] for s, a in path]
        d = _token_derivs(base, prm, lp, lm, lr, (r[y] - shift) / scale, b)
        for (s, a), dt in zip(path, d):
            c = weight[y] * dt
            row, ps = update[s], p[s]
            for j in range(tree.vocab):
                row[j] += c * ps[j]          # −c·(e_a − π)_j
            row[a] -= c
    return update


def residual(update: Mapping[tuple, Sequence]) -> mpmath.mpf:
    """max |Δθ_s(a)| over prefixes and tokens (the size of an expected update)."""
    return max(abs(v) for row in update.values() for v in row)


# --------------------------------------------------------------------------- fixed points

FREEZE_BELOW = mpmath.mpf("1e-30")   # a probability this small is taken to be on its way to 0


def _softmax_row(logits):
    top = max(logits)
    e = [mpmath.exp(v - top) for v in logits]
    total = mpmath.fsum(e)
    return [v / total for v in e]


def _norm(v):
    return max((abs(x) for x in v), default=mp.ZERO)


@mp.exact
def fixed_point(tree: Tree, rule: str = "proximal_kl", mu=None, beta=None, start=None,
                baseline: str = "mean", params: dict | None = None, max_iter: int = 100) -> dict:
    """Solve expected_update(π) = 0 (per prefix, in the softmax tangent space).

    Damped Newton on the free logits of every prefix (one token per prefix fixes the softmax
    gauge), on the equations Δθ_s / P(reach s) so that rarely visited prefixes weigh the same;
    the Jacobian is a forward difference at 20 extra digits (step 10^−(dps/2+10)), enough for
    Newton to converge to the working precision. Steps are capped at 2 nats per logit and
    halved until the residual decreases.

    Some biased rules have no interior rest point: they remove the KL barrier of a token (e.g.
    clipping the own-token cost) or feed back on their own scale (σ-normalisation on-policy),
    and the update drives a probability to 0. A token whose probability falls below 1e-30 is
    then frozen at e^{−(dps+30)·ln 10} relative to the prefix's leading token (the limit on the
    face of the simplex) and the rest is solved; such tokens are listed in ``boundary`` with
    the limiting growth rate of their log-probability, Δθ_s(a) / (P(reach s)·π(a|s)) − (the same
    for the leading token), negative when the face attracts.

    ``start`` defaults to π_ref, so that an unbiased rule must *find* π*. Returns {"policy",
    "residual" (max |Δθ| at the working precision), "iterations", "converged" (residual below
    10^−(dps−8)), "boundary"}."""
    check_tree(tree)
    validate.choice("rule", rule, RULES)
    dps = mp.get_dps()
    tol = mpmath.mpf(10) ** (-(dps - 8))
    on_policy = rule.endswith("_on_policy")
    mu = tree.behavior if mu is None else mu
    pre = prefixes(tree)
    V = tree.vocab
    p0 = policy(tree, tree.ref if start is None else start, "start")
    frozen: set = set()

    def run(logits, x, free, lead):
        lg = {s: list(logits[s]) for s in pre}
        for (s, a), v in zip(free, x):
            lg[s][a] = lg[s][lead[s]] + v
        return {s: _softmax_row(lg[s]) for s in pre}, lg

    def equations(pol, free):
        upd = expected_update(tree, pol, mu, beta=beta, rule=rule, baseline=baseline, params=params)
        reach = _reach(tree, pol if on_policy else policy(tree, mu, "mu"))
        return [upd[s][a] / reach[s] for s, a in free], upd, reach

    with mp.precision(dps + 20), mpmath.workdps(dps + 20):
        gap = (dps + 30) * mpmath.log(10)
        logits = {s: [mpmath.log(v) for v in p0[s]] for s in pre}
        h = mpmath.mpf(10) ** (-(dps // 2 + 10))
        it = 0
        while True:
            lead = {s: max((a for a in range(V) if (s, a) not in frozen), key=lambda a: logits[s][a])
                    for s in pre}
            for s, a in frozen:
                logits[s][a] = logits[s][lead[s]] - gap
            free = [(s, a) for s in pre for a in range(V) if (s, a) not in frozen and a != lead[s]]
            x = [logits[s][a] - logits[s][lead[s]] for s, a in free]
            pol, _ = run(logits, x, free, lead)
            f, _, _ = equations(pol, free)
            if it >= max_iter or _norm(f) <= tol * mpmath.mpf(10) ** -10 or not free:
                break
            it += 1
            n = len(x)
            jac = mpmath.matrix(n, n)
            for j in range(n):
                xj = list(x)
                xj[j] += h
                fj, _, _ = equations(run(logits, xj, free, lead)[0], free)
                for i in range(n):
                    jac[i, j] = (fj[i] - f[i]) / h
            try:
                sol = mpmath.lu_solve(jac, mpmath.matrix([-v for v in f]))
            except ZeroDivisionError:
                break
            step = [sol[i] for i in range(n)]
            big = _norm(step)
            alpha = min(mp.ONE, 2 / big) if big > 0 else mp.ONE
            base_norm = _norm(f)
            for _ in range(60):
                xt = [x[i] + alpha * step[i] for i in range(n)]
                pol_t, lg_t = run(logits, xt, free, lead)
                ft, _, _ = equations(pol_t, free)
                if _norm(ft) < base_norm:
                    break
                alpha /= 2
            else:
                break
            logits = lg_t
            frozen |= {(s, a) for s, a in free if pol_t[s][a] < FREEZE_BELOW}
        pol, _ = run(logits, x, free, lead)
        boundary = []
        if frozen:
            _, upd, reach = equations(pol, free)
            for s, a in sorted(frozen):
                rate = (upd[s][a] / pol[s][a] - upd[s][lead[s]] / pol[s][lead[s]]) / reach[s]
                boundary.append({"prefix": s, "token": a, "rate": +rate})
    pol = {s: [+v for v in row] for s, row in pol.items()}
    for b in boundary:
        b["rate"] = +b["rate"]
    res = residual(expected_update(tree, pol, mu, beta=beta, rule=rule, baseline=baseline, params=params))
    return {"policy": pol, "residual": res, "iterations": it, "converged": bool(res < tol),
            "boundary": boundary}


# --------------------------------------------------------------------------- built-in trees

def _uniform(vocab):
    return [Fraction(1, vocab)] * vocab


def _full_tree(vocab, horizon, eos):
    return Tree("", vocab, horizon, 1, {}, {}, eos=eos)


def _random_tree(name, vocab, horizon, beta, seed, eos=None, description=""):
    rng = random.Random(seed)
    skeleton = _full_tree(vocab, horizon, eos)

    def dist():
        w = [rng.randint(1, 9) for _ in range(vocab)]
        return [Fraction(x, sum(w)) for x in w]

    ref = {s: dist() for s in prefixes(skeleton)}
    behavior = {s: dist() for s in prefixes(skeleton)}
    rewards = {y: Fraction(rng.randint(0, 10), 10) for y in leaves(skeleton)}
    return Tree(name, vocab, horizon, beta, rewards, ref, behavior, eos, description)


WORKED_V2H2 = Tree(
    "worked-v2h2", 2, 2, Fraction(1, 2),
    {(0, 0): 1, (0, 1): 0, (1, 0): Fraction(1, 2), (1, 1): 0},
    {(): _uniform(2), (0,): _uniform(2), (1,): _uniform(2)},
    {(): [Fraction(3, 10), Fraction(7, 10)], (0,): [Fraction(4, 10), Fraction(6, 10)],
     (1,): [Fraction(6, 10), Fraction(4, 10)]},
    description="V=2, H=2, β=0.5, π_ref uniform, r(00)=1, r(01)=0, r(10)=0.5, r(11)=0; "
                "μ(0|root)=0.3, μ(0|0)=0.4, μ(0|1)=0.6",
)

RANDOM_V3H3 = _random_tree(
    "random-v3h3", 3, 3, Fraction(3, 10), seed=20260110,
    description="V=3, H=3, β=0.3; π_ref, μ: integer weights 1..9 per prefix, rewards k/10 "
                "(random.Random(20260110))")

EOS_V3H3 = _random_tree(
    "eos-v3h3", 3, 3, Fraction(1, 2), seed=2601, eos=2,
    description="V=3 with token 2 = end of sequence, H=3 (lengths 1..3), β=0.5; π_ref, μ: "
                "integer weights 1..9 per prefix, rewards k/10 (random.Random(2601))")

BUILTIN_TREES: dict[str, Tree] = {t.name: t for t in (WORKED_V2H2, RANDOM_V3H3, EOS_V3H3)}


def random_behavior(tree: Tree, seed: int) -> dict:
    """A random full-support behaviour policy (integer weights 1..99 per prefix), fixed by ``seed``."""
    rng = random.Random(seed)
    out = {}
    for s in prefixes(tree):
        w = [rng.randint(1, 99) for _ in range(tree.vocab)]
        out[s] = [Fraction(x, sum(w)) for x in w]
    return out
