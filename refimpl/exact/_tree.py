"""Token-tree MDPs: exact KL-regularised optima and exact population updates (the tree API).

Private to the exact reference: ``refimpl.exact.tabular`` decodes the catalog's arrays into
these trees and policies, ``refimpl.exact._fixed_point`` solves for the rest points of the
updates defined here, and conformance's theorem table and probe use both.

Source. The stationary-policy theorem of Proximal KL (H. Bai, J. Yao, T. Zhang) as summarised
in [proximal-kl-summary] ("el teorema sobre la política estacionaria supone una actualización exacta sobre
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

import functools
import random
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Mapping, Sequence

import mpmath

from lossproof.refimpl import validate
from lossproof.refimpl.exact import mp

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


def num(x, name: str = "value") -> mpmath.mpf:
    """An exact-as-possible mpf at the working precision (Fractions and decimal strings are
    rounded once, at the current precision; binary64 floats convert exactly)."""
    if isinstance(x, Fraction):
        return mpmath.mpf(x.numerator) / x.denominator
    if isinstance(x, mpmath.mpf):
        return +x
    if isinstance(x, bool):
        validate.fail(name, f"not a number: {x!r}")
    try:
        v = mpmath.mpf(x)
    except (TypeError, ValueError):
        validate.fail(name, f"not a number: {x!r}")
    if not mpmath.isfinite(v):
        validate.fail(name, f"must be finite, got {x!r}")
    return v


def is_leaf(tree: Tree, y: tuple) -> bool:
    return len(y) >= tree.horizon or (tree.eos is not None and len(y) > 0 and y[-1] == tree.eos)


@functools.lru_cache(maxsize=64)
def _shape(vocab: int, horizon: int, eos) -> tuple[tuple, tuple]:
    skeleton = Tree("", vocab, horizon, 1, {}, {}, eos=eos)
    out, frontier = [], [()]
    while frontier:
        out.extend(frontier)
        frontier = [s + (a,) for s in frontier for a in range(vocab) if not is_leaf(skeleton, s + (a,))]
    ends = [s + (a,) for s in out for a in range(vocab) if is_leaf(skeleton, s + (a,))]
    return tuple(out), tuple(ends)


def prefixes(tree: Tree) -> list[tuple]:
    """The non-terminal prefixes (where a policy acts), breadth first from the root ()."""
    return list(_shape(tree.vocab, tree.horizon, tree.eos)[0])


def leaves(tree: Tree) -> list[tuple]:
    """The complete sequences (length H, or ending with ``eos``)."""
    return list(_shape(tree.vocab, tree.horizon, tree.eos)[1])


def check_tree(tree: Tree) -> Tree:
    validate.vocab(tree.vocab, "tree.vocab")
    validate.horizon(tree.horizon, "tree.horizon")
    validate.eos(tree.eos, tree.vocab, "tree.eos")
    validate.regularization_beta(num(tree.beta, "tree.beta"), "tree.beta")
    for y in leaves(tree):
        if y not in tree.rewards:
            validate.fail("tree.rewards", f"no reward for leaf {list(y)}")
        num(tree.rewards[y], "tree.rewards")
    policy(tree, tree.ref, "tree.ref")
    return tree


@mp.exact
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
        row = [num(v, name) for v in p[s]]
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
    b = num(tree.beta if beta is None else beta, "beta")
    validate.regularization_beta(b)
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
    b = num(tree.beta if beta is None else beta, "beta")
    validate.regularization_beta(b)
    logw = {y: mpmath.log(p) + num(tree.rewards[y]) / b for y, p in sequences(tree, tree.ref)}
    ys = list(logw)
    lse = mp.logsumexp(mp.array("logw", [logw[y] for y in ys]))
    return {"probs": {y: mpmath.exp(logw[y] - lse) for y in ys}, "beta_log_z": b * lse}


# --------------------------------------------------------------------------- KL and objective

def _token_kl(p_row, q_row):
    """KL(p‖q) of one distribution as Σ_a q_a·φ(p_a/q_a), φ(x) = x·log x − x + 1 ≥ 0 (equal to
    Σ p·log(p/q) when both sum to 1): every term is non-negative, so a KL near zero keeps its
    relative accuracy instead of drowning in the cancellation of Σ p·log p − Σ p·log q."""
    total = []
    for p_a, q_a in zip(p_row, q_row):
        d = (p_a - q_a) / q_a                   # p/q − 1 without rounding it through 1 + d
        if d < -0.5:                            # p ≪ q: φ(x) directly (1 + d may round to 0)
            x = p_a / q_a
            total.append(q_a * (x * mpmath.log(x) - x + 1))
        else:                                   # φ(1 + d) = (1 + d)·log1p(d) − d ≈ d²/2
            total.append(q_a * ((1 + d) * mpmath.log1p(d) - d))
    return mpmath.fsum(total)


@mp.exact
def sequence_kl(tree: Tree, pi, rho) -> dict:
    """KL(π‖ρ) between the sequence distributions, exactly, and its chain-rule decomposition
    KL = E_{y~π} Σ_t KL(π(·|s_t)‖ρ(·|s_t)) = Σ_s P_π(s)·KL_s (Cover & Thomas, Thm 2.5.3).

    Returns {"kl": by enumeration Σ_y π(y)·log(π(y)/ρ(y)), "chain": Σ_s P_π(s)·KL_s (a sum of
    non-negative terms, accurate also when the KL is tiny), "per_prefix": {s: {"reach": P_π(s),
    "token_kl": KL_s}}, "per_step": [Σ_{|s|=t} P_π(s)·KL_s for t = 0..H−1]}."""
    check_tree(tree)
    p, q = policy(tree, pi, "pi"), policy(tree, rho, "rho")
    total = mpmath.fsum(mpmath.fprod(p[s][a] for s, a in path)
                        * mpmath.fsum(mpmath.log(p[s][a]) - mpmath.log(q[s][a]) for s, a in path)
                        for _, path in _paths(tree))
    reach = _reach(tree, p)
    per_prefix, per_step = {}, [mp.ZERO] * tree.horizon
    for s in prefixes(tree):
        kl_s = _token_kl(p[s], q[s])
        per_prefix[s] = {"reach": reach[s], "token_kl": kl_s}
        per_step[len(s)] += reach[s] * kl_s
    return {"kl": total, "chain": mpmath.fsum(per_step), "per_prefix": per_prefix, "per_step": per_step}


@mp.exact
def objective(tree: Tree, pi, beta=None) -> mpmath.mpf:
    """J(π) = E_{y~π}[r(y)] − β·KL(π‖π_ref); its maximum is β·log Z, reached at π* only."""
    check_tree(tree)
    b = num(tree.beta if beta is None else beta, "beta")
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
FUTURE_CLIP = Fraction(1, 2)      # |F_t| ≤ 0.5 nat
FUTURE_WINDOW = 1                 # only the next token's KL
WHOLE_COST_CLIP = Fraction(1, 2)  # |k_t + F_t| ≤ 0.5 nat
RATIO_CAP = Fraction(3, 2)        # truncated importance weight min(ρ, 1.5)
# CISPO's upper clip of the detached token weight, min(ρ, 1 + ε_high) (no lower clip, MiniMax-M1
# §3.1); 0.2 is verl 0.9.1's clip_ratio_high default. The sequence-level TIS cap C = 2 is verl
# 0.9.1's rollout_is_threshold default. Both bind at π* on every built-in tree.
CISPO_CLIP_HIGH = Fraction(1, 5)
SEQUENCE_TIS_CAP = 2

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
    Rule("sequence_is", "L(y) = −(Π_u ρ_u)·sg(A − β·Σ_u k_u), one term per sequence "
         "(whole-sequence importance sampling)", True,
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
    # The truncated weight is detached (truncated importance sampling). proximal_kl.loss's
    # ratio_cap is torch.clamp-like instead (no gradient where ρ > C): its expected update jumps
    # at π(a|s) = C·μ(a|s) and its rest point generically sits on that jump, where no zero exists.
    Rule("ratio_capped", "proximal_kl with the detached truncated weight min(ρ_t, C)·∇log π", False,
         "where π*(a|s) > C·μ(a|s) the token weight min(π, C·μ) is no longer ∝ π",
         {"ratio_cap": RATIO_CAP}),
    Rule("sigma_normalized", "proximal_kl with A = (r − E_μ[r]) / σ_μ(r) (group-normalised reward)", False,
         "dividing A by σ is the same as using β·σ: the rest point is π* for β·σ"),
    # GSPO's clip (ε = 3e−4 / 4e−4) is left open: off-policy it excludes every sequence of the
    # built-in trees at π* and pins the rest point to the band around μ (a jump in the update,
    # no zero); on-policy s = 1 and no clip ever binds (docs/proximal_kl.md).
    Rule("gspo", "(1/|y|)·(−s·A + β·Σ_t k3_t), s = exp(mean_t log ρ_t) (GSPO's sequence ratio, clip "
         "open; k3 as a loss in GSPO's per-sequence token mean)", False,
         "s = (π(y)/μ(y))^{1/|y|} is a geometric mean, not an importance weight (E_μ[s·f] ≠ E_π[f]), "
         "and the k3 loss is grpo_k3's"),
    Rule("cispo", "−sg(min(ρ_t, 1 + ε_high))·A·log π + β·k3_t (CISPO's detached clipped weight)", False,
         "grpo_k3 with the token weight capped: the k3 bias, plus min(π, (1 + ε)·μ) ≠ π where "
         "π*(a|s) > (1 + ε)·μ(a|s)", {"cispo_clip_high": CISPO_CLIP_HIGH}),
    Rule("sequence_tis", "−sg(min(Π_u ρ_u, C))·sg(A − β·Σ_u k_u)·Σ_t log π (sequence_is with the "
         "truncated, detached sequence weight of TIS)", False,
         "where π*(y) > C·μ(y) the sequence weight min(π, C·μ) is no longer ∝ π",
         {"sequence_tis_cap": SEQUENCE_TIS_CAP}),
    Rule("kl_in_reward", "−sg(A − β·Σ_u k_u)·Σ_t log π (KL folded into the sequence reward, plain "
         "policy gradient, no ratio)", False,
         "no ratio: sequences are weighted by μ(y), not π(y), and the past KL Σ_{u<t} k_u does not "
         "cancel under μ's token weights"),
)

# Rules whose off-policy update at prefix s depends on π above s as well (the past ratios or the
# past KL do not factor out; for gspo also on-policy, through its 1/|y| weights): their rest point
# is solved for all prefixes together, and their per-token derivatives need the whole sequence.
COUPLED = frozenset({"gspo", "sequence_tis", "kl_in_reward"})


def _on_policy(rule: Rule) -> Rule:
    unbiased = rule.name in ("proximal_kl", "proximal_kl_no_ratio", "sequence_is", "ratio_capped",
                             "sequence_tis", "kl_in_reward")
    why = {
        "proximal_kl": "the update is the exact policy gradient ∇J (reward-to-go minus the KL to go)",
        "proximal_kl_no_ratio": "with μ = π, ρ = 1: identical to proximal_kl_on_policy",
        "sequence_is": "with μ = π, Π ρ = 1: REINFORCE on r − β·log(π/π_ref), i.e. ∇J",
        "ratio_capped": "with μ = π, ρ = 1 < C: the cap never binds",
        "sequence_tis": "with μ = π, Π ρ = 1 < C: the cap never binds, the rule is sequence_is_on_policy",
        "kl_in_reward": "REINFORCE on r − β·log(π(y)/π_ref(y)) sampled from π: ∇J (the past KL is a "
                        "constant at each prefix, which Σ_a π(a|s)·(e_a − π) = 0 removes)",
        "gspo": "with μ = π, s = 1 and ∇s = s·mean_t ∇log π: grpo_k3_on_policy with the per-sequence "
                "weights 1/|y|, so the k3 loss's bias remains",
        "cispo": "with μ = π, ρ = 1 < 1 + ε: the rule is grpo_k3_on_policy, whose k3 loss is biased",
    }.get(rule.name, "on-policy sampling does not remove the rule's modelling bias: " + rule.why)
    return Rule(rule.name + "_on_policy", rule.summary + "; μ = π (sampling policy held constant)",
                unbiased, why, dict(rule.params))


RULES: dict[str, Rule] = {r.name: r for r in _OFF}
RULES.update({r.name: r for r in map(_on_policy, _OFF)})
BASELINES = validate.BASELINES


def unbiased_on(tree: Tree, rule: str, params: dict | None = None) -> tuple[bool, str]:
    """Whether ``rule`` provably keeps π* as its rest point on this tree, and why.

    Beyond ``RULES[rule].unbiased``: a future window W covers every later token when every
    sequence has at most W + 1 tokens (H ≤ W + 1), and then future_window is proximal_kl."""
    validate.update_rule(rule)
    r = RULES[rule]
    prm = dict(r.params)
    prm.update(params or {})
    if r.name.startswith("future_window") and tree.horizon <= prm["future_window"] + 1:
        return True, (f"H = {tree.horizon} ≤ W + 1 = {prm['future_window'] + 1}: the window covers "
                      "every later token, so the rule is proximal_kl" +
                      ("_on_policy" if r.name.endswith("_on_policy") else "") + " on this tree")
    return r.unbiased, r.why


def _clip(x, c):
    return min(max(x, -c), c)


def _token_derivs(base: str, params: dict, lp, lm, lr, adv, beta):
    """∂L(y)/∂log π(y_t|s_t) along one sampled sequence (lp, lm, lr: log π, log μ, log π_ref of
    its tokens; every coefficient in sg(·) is held constant), with an entropy bonus when
    ``params`` has ``entropy_coeff`` c > 0.

    The bonus is the loss term −c·H(π(·|s_t)) at every sampled position: the entropy of the whole
    distribution, without a ratio and without credit for the entropy of later positions (verl
    0.9.1's ``entropy_coeff``: ``policy_loss = pg_loss − entropy_coeff·entropy_loss``, the entropy
    from the logits at μ's tokens). Its gradient in θ_s is −c·Σ_a π(a|s)·(−log π(a|s))·(e_a − π),
    which is E_{a~μ}[ρ_a·c·log π(a|s)·(e_a − π)]: the per-token derivative c·ρ_t·log π(y_t|s_t)
    gives it exactly under any sampling policy."""
    d = _rule_derivs(base, params, lp, lm, lr, adv, beta)
    c = params.get("entropy_coeff")
    if not c:
        return d
    return [dt + c * mpmath.exp(lp[t] - lm[t]) * lp[t] for t, dt in enumerate(d)]


def _rule_derivs(base: str, params: dict, lp, lm, lr, adv, beta):
    """The rule's own ∂L(y)/∂log π(y_t|s_t) (:func:`_token_derivs`)."""
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
        c = params["future_clip"]
        return [-rho[t] * (adv - beta * (k[t] + _clip(future(t), c))) for t in range(T)]
    if base == "future_window":
        w = params["future_window"]
        return [-rho[t] * (adv - beta * (k[t] + future(t, w))) for t in range(T)]
    if base == "whole_cost_clipped":
        c = params["whole_cost_clip"]
        return [-rho[t] * (adv - beta * _clip(k[t] + future(t), c)) for t in range(T)]
    if base == "ratio_capped":
        c = params["ratio_cap"]
        return [-min(rho[t], c) * (adv - beta * (k[t] + future(t))) for t in range(T)]
    if base == "gspo":
        # L = −s·A + β·(1/T)·Σ_t k3_t with s = exp((1/T)·Σ_t (lp_t − lm_t)): ∂s/∂lp_t = s/T
        s = mpmath.exp(mpmath.fsum(lp[t] - lm[t] for t in range(T)) / T)
        return [(-s * adv - beta * mpmath.expm1(lr[t] - lp[t])) / T for t in range(T)]
    if base == "cispo":
        cap = 1 + params["cispo_clip_high"]
        return [-min(rho[t], cap) * adv - beta * mpmath.expm1(lr[t] - lp[t]) for t in range(T)]
    if base == "sequence_tis":
        w = min(mpmath.fprod(rho), params["sequence_tis_cap"]) * (adv - beta * mpmath.fsum(k))
        return [-w] * T
    if base == "kl_in_reward":
        return [-(adv - beta * mpmath.fsum(k))] * T
    raise AssertionError(base)


class Setting:
    """Everything of an expected update except π, validated and converted once (at the precision
    in effect), so that the fixed-point solver evaluates only the π-dependent part."""

    def __init__(self, tree, rule, mu, pi_ref, beta, rewards, baseline, params):
        check_tree(tree)
        validate.update_rule(rule)
        validate.baseline(baseline)
        self.tree, self.baseline = tree, baseline
        self.on_policy = rule.endswith("_on_policy")
        self.base = rule[: -len("_on_policy")] if self.on_policy else rule
        # GSPO's 1/|y| weights also make the on-policy baseline E_π[r] matter where lengths vary
        self.coupled = self.base in COUPLED and (not self.on_policy or self.base == "gspo")
        prm = dict(RULES[rule].params)
        prm.update(params or {})
        for key in ("future_clip", "whole_cost_clip", "ratio_cap", "cispo_clip_high", "sequence_tis_cap"):
            if key in prm:
                prm[key] = num(prm[key], key)
        validate.cost_clip(prm.get("future_clip"), "future_clip")
        validate.cost_clip(prm.get("whole_cost_clip"), "whole_cost_clip")
        validate.ratio_cap(prm.get("ratio_cap"))
        validate.sequence_tis_cap(prm.get("sequence_tis_cap"))
        validate.cispo_clip_high(prm.get("cispo_clip_high"))
        if "future_window" in prm:
            prm["future_window"] = validate.future_window(prm["future_window"])
        if "entropy_coeff" in prm:
            prm["entropy_coeff"] = num(prm["entropy_coeff"], "entropy_coeff")
            if prm["entropy_coeff"] < 0:
                validate.fail("entropy_coeff", f"must be >= 0, got {mp.nstr(prm['entropy_coeff'], 8)}")
        self.params = prm
        self.beta = num(tree.beta if beta is None else beta, "beta")
        validate.regularization_beta(self.beta)
        self.pre = prefixes(tree)
        self.paths = _paths(tree)
        ref = policy(tree, tree.ref if pi_ref is None else pi_ref, "pi_ref")
        self.log_ref = {s: [mpmath.log(v) for v in ref[s]] for s in self.pre}
        rw = tree.rewards if rewards is None else rewards
        self.r = {}
        for y, _ in self.paths:
            if y not in rw:
                validate.fail("rewards", f"no reward for leaf {list(y)}")
            self.r[y] = num(rw[y], "rewards")
        self.mu = None if self.on_policy else policy(tree, tree.behavior if mu is None else mu, "mu")
        if self.mu is not None:
            self._sampling = self._sampler(self.mu)

    def _sampler(self, m):
        """Sequence weights μ(y), log μ per prefix, and the advantage's shift and scale."""
        weight = {y: mpmath.fprod(m[s][a] for s, a in path) for y, path in self.paths}
        log_m = {s: [mpmath.log(v) for v in m[s]] for s in self.pre}
        mean = mpmath.fsum(weight[y] * self.r[y] for y in self.r)
        shift = mean if self.baseline == "mean" else mp.ZERO
        scale = mp.ONE
        if self.base == "sigma_normalized":
            # population std of the group (std_ddof = 0, eps = 0: the paper defaults)
            scale = mpmath.sqrt(mpmath.fsum(weight[y] * (self.r[y] - mean) ** 2 for y in self.r))
            if scale == 0:
                validate.fail("rewards", "constant under the sampling policy: σ = 0, "
                                         "sigma_normalized is undefined")
        return weight, log_m, shift, scale

    def reach_of(self, p):
        return _reach(self.tree, p if self.on_policy else self.mu)

    def advantage_terms(self, p):
        """(shift, scale) of A = (r − shift)/scale under the sampling policy (π when on-policy)."""
        return (self._sampler(p) if self.on_policy else self._sampling)[2:]

    def local_update(self, p: dict, s: tuple, shift, scale) -> list:
        """Δθ_s / P(reach s): the update at prefix s from the sequences through s, sampled from s
        on. It depends on π at s and below only: the past enters the proximal family nowhere,
        and sequence_is only through a positive factor (the past ratios) and an additive constant
        in the coefficient (the past KL), which Σ_a π(a|s)·E_μ[Π_{u>t} ρ_u | s·a]·(e_a − π) = 0
        removes. So the fixed point can be solved prefix by prefix from the leaves up; the
        advantage's shift and scale are passed in (on-policy, a constant shift of A changes no
        update: every token is weighted by π(a|s)). The COUPLED rules off-policy are the
        exception: their coefficient at s keeps the past (read here from π above s), so the
        solver iterates over the prefixes until they agree (_fixed_point)."""
        V, t0 = self.tree.vocab, len(s)
        samp = p if self.on_policy else self.mu
        row = [mp.ZERO] * V
        ps = p[s]
        for y, path in self.paths:
            if len(y) <= t0 or y[:t0] != s:
                continue
            start = 0 if self.coupled else t0
            sub = path[start:]
            weight = mpmath.fprod(samp[q][a] for q, a in path[t0:])
            lp = [mpmath.log(p[q][a]) for q, a in sub]
            lm = lp if self.on_policy else [mpmath.log(samp[q][a]) for q, a in sub]
            lr = [self.log_ref[q][a] for q, a in sub]
            d = _token_derivs(self.base, self.params, lp, lm, lr, (self.r[y] - shift) / scale, self.beta)
            c = weight * d[t0 - start]
            for j in range(V):
                row[j] += c * ps[j]
            row[path[t0][1]] -= c
        return row

    def update(self, p: dict) -> dict:
        """Δθ_s for the mpf policy ``p`` (already validated)."""
        weight, log_m, shift, scale = self._sampler(p) if self.on_policy else self._sampling
        log_p = {s: [mpmath.log(v) for v in p[s]] for s in self.pre}
        V = self.tree.vocab
        update = {s: [mp.ZERO] * V for s in self.pre}
        for y, path in self.paths:
            lp = [log_p[s][a] for s, a in path]
            lm = [log_m[s][a] for s, a in path]
            lr = [self.log_ref[s][a] for s, a in path]
            d = _token_derivs(self.base, self.params, lp, lm, lr, (self.r[y] - shift) / scale, self.beta)
            for (s, a), dt in zip(path, d):
                c = weight[y] * dt
                row, ps = update[s], p[s]
                for j in range(V):
                    row[j] += c * ps[j]          # −c·(e_a − π)_j
                row[a] -= c
        return update


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
    summary [proximal-kl-summary] / FRPO arXiv 2601.10201 (reconstructed, see proximal_kl.py); GRPO's k3
    loss, DeepSeekMath §4.1.1 eq. 3–4; TRL's ratio-weighted k3 (use_bias_correction_kl); GSPO's
    sequence ratio, arXiv 2507.18071 §4.1 eq. 5 (unverified beyond secondary sources); CISPO's
    clipped detached weight, MiniMax-M1 arXiv 2506.13585 §3.1 (unverified); truncated importance
    sampling, Yao et al. 2025 (fengyao.notion.site/off-policy-rl; verl 0.9.1 rollout_is
    'sequence'); the KL folded into the reward (verl 0.9.1 use_kl_in_reward, apply_kl_penalty)."""
    setting = Setting(tree, rule, mu, pi_ref, beta, rewards, baseline, params)
    return setting.update(policy(tree, pi, "pi"))


# --------------------------------------------------------------------------- built-in trees

def uniform(vocab):
    """The uniform distribution over ``vocab`` tokens, exactly (Fractions)."""
    return [Fraction(1, vocab)] * vocab


def skeleton(vocab, horizon, eos):
    """The tree's shape alone (no rewards, no policies): enough for prefixes and leaves."""
    return Tree("", vocab, horizon, 1, {}, {}, eos=eos)


def _random_tree(name, vocab, horizon, beta, seed, eos=None, description=""):
    rng = random.Random(seed)
    shape = skeleton(vocab, horizon, eos)

    def dist():
        w = [rng.randint(1, 9) for _ in range(vocab)]
        return [Fraction(x, sum(w)) for x in w]

    ref = {s: dist() for s in prefixes(shape)}
    behavior = {s: dist() for s in prefixes(shape)}
    rewards = {y: Fraction(rng.randint(0, 10), 10) for y in leaves(shape)}
    return Tree(name, vocab, horizon, beta, rewards, ref, behavior, eos, description)


WORKED_V2H2 = Tree(
    "worked-v2h2", 2, 2, Fraction(1, 2),
    {(0, 0): 1, (0, 1): 0, (1, 0): Fraction(1, 2), (1, 1): 0},
    {(): uniform(2), (0,): uniform(2), (1,): uniform(2)},
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
