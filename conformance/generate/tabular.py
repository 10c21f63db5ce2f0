"""Vectors for ``tabular.optimum``, ``tabular.sequence_kl`` and ``tabular.expected_update``: exact
quantities on enumerated token trees (the stationary-policy theorem of Proximal KL as summarised
in [proximal-kl-summary], and FRPO arXiv 2601.10201; reconstructed, see refimpl/exact/_tree.py).

A tree travels as arrays in the catalog's canonical order (conformance/catalog.py,
``_TREE_ENCODING``; note ``TreeEncoding``): params ``vocab``, ``horizon``, ``eos``; each policy a
[P, V] array, one row per non-terminal prefix in breadth-first order; ``rewards`` an [L] array,
one per leaf, leaves listed prefix by prefix in that order. Every probability row of a vector
sums to 1 exactly (binary64 values on the 2^−53 grid, the largest entry taking the remainder), so
the exact reference's renormalisation is the identity.

No built-in backend implements these objectives (they have no gradients and no fast use): the
vectors serve third-party targets and the theorem's readers. Scale: ≥ 30 valid vectors per
objective (enumerated trees are small; every rule is covered on the built-in trees).
"""
from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated
from lossproof.refimpl.exact import _tree
from lossproof.refimpl.exact import tabular as tb

OPT, SKL, UPD = "tabular.optimum", "tabular.sequence_kl", "tabular.expected_update"
# Rules added in vector set 1.3.0: their cases follow every earlier case (and its tcId).
ADDED_RULES = tuple(r + s for r in ("gspo", "cispo", "sequence_tis", "kl_in_reward") for s in ("", "_on_policy"))
EARLIER_RULES = tuple(r for r in _tree.RULES if r not in ADDED_RULES)
GRID = 2 ** 53

NOTES = {
    "TreeEncoding": {"category": "convention", "description": "Every tabular vector encodes its tree as arrays: "
                     "params vocab V, horizon H, eos (a token id, or null: no end-of-sequence token; a sequence "
                     "ends when it emits eos or reaches length H). Policies (pi_ref, pi, mu, rho) are [P, V] "
                     "arrays, one row per non-terminal prefix in breadth-first order — by length, then "
                     "lexicographically — starting with the empty prefix. rewards is an [L] array, one per leaf, "
                     "listing for each prefix in that order its children s·a that end the sequence, by token a. "
                     "Outputs indexed by prefix (policy, reach, token_kl, update) use the same row order; "
                     "per_step[t] sums the prefixes of length t. Every probability row sums to 1 exactly.",
                     "bugType": "formula",
                     "effect": "The tree read with another encoding (eos, horizon) computes expectations over other "
                               "sequences."},
    "BuiltinTree": {"category": "edge", "description": "One of the three built-in trees of the stationary-policy "
                    "table (lossproof theorem): worked-v2h2 (V = 2, H = 2, β = 0.5), random-v3h3 (V = 3, H = 3, "
                    "β = 0.3), eos-v3h3 (V = 3 with eos = 2, H = 3, β = 0.5); probabilities rounded to the "
                    "2^−53 grid, rewards k/10 as binary64.",
                    "bugType": "formula",
                    "effect": "A wrong backup on a small hand-checkable tree."},
    "Random": {"category": "random", "description": "A random tree from a fixed seed (V ≤ 3, H ≤ 3, with and "
               "without eos; π_ref rows from uniform weights; rewards uniform in [0, 1], binary, graded k/4 or "
               "N(0, 2)) or a random policy on a tree.",
               "bugType": "formula"},
    "ConstantReward": {"category": "edge", "description": "All rewards equal to c: π* = π_ref and β·log Z = c.",
                       "bugType": "degenerate-input",
                       "effect": "Constant rewards: π* = π_ref and β log Z = c exactly."},
    "ExtremeExponent": {"category": "numerics", "description": "r/β up to 1000 (β = 1e−3 with rewards in {0, 1}, "
                        "or rewards ±1000 with β = 1): exp(r/β) overflows binary64, so the backup must be done "
                        "in log space; π* has probabilities below 1e−300 (judged against 1).",
                        "bugType": "overflow",
                        "effect": "exp(r/β) overflows binary64 unless the backup is done in log space."},
    "LargeBeta": {"category": "edge", "description": "β = 1000: π* is within 1e−3 of π_ref and β·log Z ≈ E_ref[r].",
                  "bugType": "extreme-parameter",
                  "effect": "β = 1000: π* within 1e−3 of π_ref; a careless exponent loses the difference."},
    "EqualPolicies": {"category": "edge", "description": "π = ρ: the KL and every term of its decomposition "
                      "are exactly 0.",
                      "bugType": "degenerate-input",
                      "effect": "π = ρ: the KL and every term must be exactly 0."},
    "TinyKL": {"category": "numerics", "description": "ρ within 1e−8 (relative) of π: the KL is of order 1e−16, "
               "formed from terms of order 1 when computed as Σ p·(log p − log q); judged against the size of "
               "those terms, so an implementation need not use the cancellation-free φ(p/q) form.",
               "bugType": "cancellation",
               "effect": "A KL of order 1e−16 formed as Σ p(log p − log q) from terms of order 1."},
    "SmallProbabilities": {"category": "numerics", "description": "Probabilities down to 2^−53 ≈ 1.1e−16: log "
                           "ratios of about 36 and reach probabilities of 1e−32.",
                           "bugType": "precision",
                           "effect": "Probabilities near 2^−53: log ratios of 36 and reach probabilities of 1e−32 "
                                     "must keep their digits."},
    "AtOptimum": {"category": "edge", "description": "π = π* of the tree, rounded to the 2^−53 grid: an unbiased "
                  "rule's update is of the order of that rounding (≈ 1e−16) and formed from terms of order 1 "
                  "(judged against their size); a rule that moves the rest point gives an update of the order "
                  "of its bias. Which rules are unbiased on which tree: refimpl/exact/_tree.py RULES and "
                  "unbiased_on (future_window with W = 1 is unbiased on trees with H ≤ 2).",
                  "bugType": "cancellation",
                  "effect": "At the optimum an unbiased update is of the order of rounding; a biased rule is not."},
    "RandomPolicy": {"category": "random", "description": "The update at a random full-support policy π "
                     "(integer weights 1..99 per prefix), behaviour μ = the tree's (or a random one).",
                     "bugType": "formula",
                     "effect": "A biased update rule shows at a random full-support policy."},
    "OnPolicyRule": {"category": "convention", "description": "A *_on_policy rule: sequences are sampled from π "
                     "itself (held constant), the advantage's baseline is E_π[r]; the input mu is ignored (the "
                     "vectors pass mu = pi).",
                     "bugType": "convention",
                     "effect": "Sampling from π instead of μ (or the reverse) and another baseline."},
    "BaselineNone": {"category": "convention", "description": "baseline 'none': A = r(y) without subtracting "
                     "the mean reward; unchanged updates for the per-token-ratio rules (Σ_a π(a|s)·(e_a − π) "
                     "= 0), changed for the rules without a ratio.",
                     "bugType": "convention",
                     "effect": "The mean-reward baseline subtracted where the rule takes none (or the reverse)."},
    "InvalidInput": {"category": "invalid", "description": "A bad tree or parameter: probabilities that do not "
                     "sum to 1 (beyond 1e−9), are negative or 0 (full support is required), arrays of the wrong "
                     "shape for (V, H, eos), NaN/inf, vocab < 2, horizon < 1, eos out of range, β ≤ 0, unknown "
                     "rule or baseline, constant rewards under σ-normalisation; must be rejected.",
                     "bugType": "input-validation"},
}

_THEOREM = ("the stationary-policy theorem of Proximal KL (summary [proximal-kl-summary], reconstructed) and FRPO arXiv "
            "2601.10201; exact reference refimpl/exact/tabular.py")
GROUPS = {
    "paper": "optimum: soft Bellman backup of the KL-regularised objective (π* ∝ π_ref·exp(r/β), DPO §4 eq. 4). "
             "sequence_kl: chain rule of relative entropy (Cover & Thomas Thm 2.5.3). expected_update: the "
             "Proximal KL update −ρ_t·sg(A − β(k_t + F_t)) with unbounded F_t, baseline E_μ[r] — " + _THEOREM,
    "invalid": "bad trees and parameters (all conventions)",
}
for _name, _rule in _tree.RULES.items():
    if _name != "proximal_kl":
        _prm = ", ".join(f"{k} = {float(v):g}" for k, v in _rule.params.items())
        GROUPS[_name] = (f"expected_update rule {_name}: {_rule.summary}" + (f" ({_prm})" if _prm else "")
                         + f"; {'unbiased' if _rule.unbiased else 'biased'}: {_rule.why} — " + _THEOREM)
    GROUPS[f"{_name}-baseline-none"] = (f"expected_update rule {_name} with baseline 'none' (A = r) — " + _THEOREM)


# ============================================================================ trees

def _row(p) -> list[float]:
    """A full-support distribution on the 2^−53 grid whose binary64 entries sum to 1 exactly."""
    p = np.asarray([float(v) for v in p], dtype=float)
    p = p / p.sum()
    big = int(np.argmax(p))
    out = [max(round(v * GRID), 1) / GRID for v in p]
    out[big] = 0.0
    rest = 1 - sum(Fraction(v) for v in out)
    out[big] = float(rest)
    assert Fraction(out[big]) == rest and min(out) > 0 and sum(Fraction(v) for v in out) == 1
    return out


def _rows(rows) -> list[list[float]]:
    return [_row(r) for r in rows]


class T:
    """A tree as the vectors carry it: shape params and binary64 arrays."""

    def __init__(self, name, vocab, horizon, eos, beta, ref, behavior, rewards, builtin=False, seed=0, recipe=""):
        self.name, self.vocab, self.horizon, self.eos, self.beta = name, vocab, horizon, eos, beta
        self.ref, self.behavior, self.rewards, self.builtin = ref, behavior, rewards, builtin
        self.seed, self.recipe = seed, recipe
        skeleton = _tree.skeleton(vocab, horizon, eos)
        self.prefixes, self.leaves = _tree.prefixes(skeleton), _tree.leaves(skeleton)

    @property
    def shape(self) -> dict:
        return {"vocab": self.vocab, "horizon": self.horizon, "eos": self.eos}

    def optimum(self, beta=None) -> list[list[float]]:
        out = tb.optimum(self.ref, self.rewards, **self.shape, beta=self.beta if beta is None else beta)
        return _rows([[float(v) for v in row] for row in out["policy"]])

    def random_policy(self, seed) -> list[list[float]]:
        r = S.rng(seed)
        return _rows([r.integers(1, 100, self.vocab).tolist() for _ in self.prefixes])

    def label(self) -> str:
        return f"{self.name} (V={self.vocab}, H={self.horizon}, eos={self.eos})"


def _builtin(tree: _tree.Tree) -> T:
    pre = _tree.prefixes(tree)
    return T(tree.name, tree.vocab, tree.horizon, tree.eos, float(Fraction(tree.beta)),
             _rows([tree.ref[s] for s in pre]), _rows([tree.behavior[s] for s in pre]),
             [float(Fraction(tree.rewards[y])) for y in _tree.leaves(tree)], builtin=True,
             recipe=f"built-in tree {tree.name} (refimpl/exact/tabular.py BUILTIN_TREES: {tree.description}); "
                    "probabilities rounded to the 2^−53 grid")


RANDOM_SHAPES = [(2, 1, None), (3, 1, None), (2, 2, 0), (2, 3, None), (2, 3, 1), (3, 2, None), (3, 2, 2),
                 (3, 3, 0), (3, 3, None)]
REWARD_KINDS = ("uniform", "binary", "graded", "normal")


def _rewards(r, kind, n):
    if kind == "uniform":
        return r.uniform(0, 1, n).tolist()
    if kind == "binary":
        return (r.uniform(size=n) < 0.5).astype(float).tolist()
    if kind == "graded":
        return (r.integers(0, 5, n) / 4).tolist()
    return r.normal(0, 2, n).tolist()


def _random_tree(i, vocab, horizon, eos) -> T:
    seed = 16000 + i
    r = S.rng(seed)
    kind = REWARD_KINDS[i % len(REWARD_KINDS)]
    skeleton = _tree.skeleton(vocab, horizon, eos)
    n_pre, n_leaf = len(_tree.prefixes(skeleton)), len(_tree.leaves(skeleton))
    ref = _rows(r.uniform(0.05, 1.0, (n_pre, vocab)).tolist())
    behavior = _rows(r.uniform(0.05, 1.0, (n_pre, vocab)).tolist())
    while True:   # no prefix whose leaves all share one reward (its exact update would be 0 by symmetry)
        rewards = _rewards(r, kind, n_leaf)
        below = [[v for y, v in zip(_tree.leaves(skeleton), rewards) if y[:len(s)] == s] for s in _tree.prefixes(skeleton)]
        if all(len(set(vs)) > 1 for vs in below):
            break
    beta = float(r.choice([0.1, 0.25, 0.5, 1.0]))
    name = f"random-v{vocab}h{horizon}" + (f"-eos{eos}" if eos is not None else "")
    return T(name, vocab, horizon, eos, beta, ref, behavior, rewards, seed=seed,
             recipe=f"random tree: π_ref, μ rows from U(0.05, 1) weights, {kind} rewards, β = {beta:g}")


def trees() -> list[T]:
    return ([_builtin(t) for t in _tree.BUILTIN_TREES.values()]
            + [_random_tree(i, *shape) for i, shape in enumerate(RANDOM_SHAPES)])


def _flags(tree: T, *more) -> tuple:
    flags = ("TreeEncoding", "BuiltinTree" if tree.builtin else "Random") + more
    return tuple(dict.fromkeys(flags))


# ============================================================================ optimum

def _provenance(tree: T, seed, recipe):
    return generated(seed if seed is not None else tree.seed, tree.recipe + (f"; {recipe}" if recipe else ""))


def _opt_case(tree: T, beta, flags, comment, seed=None, recipe="", rewards=None, ref=None):
    inputs = {"pi_ref": tree.ref if ref is None else ref, "rewards": tree.rewards if rewards is None else rewards}
    return Case(OPT, inputs, params={**tree.shape, "beta": beta}, flags=flags, comment=comment,
                provenance=_provenance(tree, seed, recipe))


def _opt_cases(ts: list[T]) -> list[Case]:
    out = []
    for i, tree in enumerate(ts):
        others = [b for b in (0.05, 0.2, 1.0, 5.0) if b != tree.beta]
        for beta in [tree.beta] + [others[i % len(others)], others[(i + 2) % len(others)]]:
            out.append(_opt_case(tree, beta, _flags(tree), f"{tree.label()}, β = {beta:g}"))
    worked, eos = ts[0], ts[2]
    for tree, c in ((worked, 0.75), (eos, -2.5)):
        out.append(_opt_case(tree, tree.beta, _flags(tree, "ConstantReward"), f"{tree.label()}, every reward {c:g}",
                             rewards=[c] * len(tree.leaves)))
    for tree in (ts[1], ts[2]):
        rewards01 = [float(k % 2) for k in range(len(tree.leaves))]
        out.append(_opt_case(tree, 1e-3, _flags(tree, "ExtremeExponent"), f"{tree.label()}, rewards 0/1, β = 1e−3",
                             rewards=rewards01))
        big = [1000.0 if k % 3 == 0 else -1000.0 if k % 3 == 1 else 0.0 for k in range(len(tree.leaves))]
        out.append(_opt_case(tree, 1.0, _flags(tree, "ExtremeExponent"), f"{tree.label()}, rewards ±1000, β = 1",
                             rewards=big))
        out.append(_opt_case(tree, 1000.0, _flags(tree, "LargeBeta"), f"{tree.label()}, β = 1000"))
    small = ts[4]
    out.append(_opt_case(small, small.beta, _flags(small, "SmallProbabilities"),
                         f"{small.label()}: π_ref with probabilities 2^−53",
                         ref=[[2.0 ** -53] * (small.vocab - 1) + [1 - (small.vocab - 1) * 2.0 ** -53]
                              for _ in small.prefixes]))
    return out + _opt_invalid(worked)


def _tree_invalid(tree: T):
    """Bad trees, as (inputs patch, params patch, why), for an objective whose inputs include
    the [P, V] array ``key``."""
    P, V = len(tree.prefixes), tree.vocab
    good = tree.ref
    return [
        ({"row": [0.5, 0.6]}, {}, "a row sums to 1.1"),
        ({"row": [1.25, -0.25]}, {}, "a negative probability"),
        ({"row": [1.0, 0.0]}, {}, "a zero probability (full support is required)"),
        ({"row": [float("nan"), 0.5]}, {}, "NaN probability"),
        ({"all": good[:-1]}, {}, f"{P - 1} rows for {P} prefixes"),
        ({"all": [r + [0.0] for r in good]}, {}, f"{V + 1} columns for V = {V}"),
        ({}, {"vocab": 1}, "vocab = 1"),
        ({}, {"horizon": 0}, "horizon = 0"),
        ({}, {"eos": V}, f"eos = {V} outside [0, V)"),
        ({}, {"horizon": 3}, "arrays for H = 2 given H = 3"),
        ({}, {"eos": 1}, "arrays for a tree without eos given eos = 1"),
    ]


def _patched(rows, patch):
    if "all" in patch:
        return patch["all"]
    if "row" in patch:
        return [patch["row"]] + rows[1:]
    return rows


def _invalid(objective, inputs, params, conventions, why):
    return Case(objective, inputs, params=params, conventions=conventions, group="invalid", result="invalid",
                flags=("InvalidInput",), comment=why, provenance=generated(0, "fixed"))


def _opt_invalid(tree: T) -> list[Case]:
    base = {**tree.shape, "beta": tree.beta}
    out = [_invalid(OPT, {"pi_ref": _patched(tree.ref, ip), "rewards": tree.rewards}, {**base, **pp}, {},
                    "pi_ref: " + why) for ip, pp, why in _tree_invalid(tree)]
    for rewards, why in ((tree.rewards[:-1], "one reward missing"), ([float("nan")] + tree.rewards[1:], "NaN reward"),
                         ([float("inf")] + tree.rewards[1:], "+inf reward")):
        out.append(_invalid(OPT, {"pi_ref": tree.ref, "rewards": rewards}, base, {}, why))
    for beta, why in ((0.0, "β = 0"), (-0.5, "negative β"), (None, "β missing")):
        out.append(_invalid(OPT, {"pi_ref": tree.ref, "rewards": tree.rewards}, {**base, "beta": beta}, {}, why))
    return out


def _opt_scale(kwargs, outputs, grads):
    """log π*(a|s) = log π_ref + (V*(s·a) − V*(s))/β where each V*/β is a chain of up to H
    log-sum-exps of terms of size max|r|/β + H·max|log π_ref|: π* inherits that, times itself."""
    beta = mpmath.mpf(kwargs["beta"])
    H = kwargs["horizon"]
    big_r = max(abs(mpmath.mpf(v)) for v in kwargs["rewards"])
    big_l = max(abs(mpmath.log(mpmath.mpf(v))) for row in kwargs["pi_ref"] for v in row)
    depth = H * (big_r / beta + H * big_l)
    pol = max(v * (1 + big_l + 2 * depth) for v in outputs["policy"].flat)
    return {"policy": pol, "beta_log_z": beta * depth + abs(outputs["beta_log_z"])}


# ============================================================================ sequence KL

def _skl_case(tree: T, pi, rho, flags, comment, seed=None, recipe=""):
    return Case(SKL, {"pi": pi, "rho": rho}, params=dict(tree.shape), flags=flags, comment=comment,
                provenance=_provenance(tree, seed, recipe))


def _near(rows, seed, rel):
    r = S.rng(seed)
    return _rows([[v * (1 + rel * r.uniform(-1, 1)) for v in row] for row in rows])


def _skl_cases(ts: list[T]) -> list[Case]:
    out = []
    for i, tree in enumerate(ts):
        out.append(_skl_case(tree, tree.behavior, tree.ref, _flags(tree), f"{tree.label()}: KL(μ‖π_ref)"))
        out.append(_skl_case(tree, tree.optimum(), tree.ref, _flags(tree),
                             f"{tree.label()}: KL(π*‖π_ref) at β = {tree.beta:g}"))
        seed = 17000 + i
        out.append(_skl_case(tree, tree.random_policy(seed), tree.random_policy(seed + 500), _flags(tree, "Random"),
                             f"{tree.label()}: two random policies", seed, "integer weights 1..99 per prefix"))
    for tree in (ts[0], ts[2], ts[5]):
        out.append(_skl_case(tree, tree.behavior, tree.behavior, _flags(tree, "EqualPolicies"),
                             f"{tree.label()}: π = ρ = μ"))
        out.append(_skl_case(tree, tree.behavior, _near(tree.behavior, 17900, 1e-8), _flags(tree, "TinyKL"),
                             f"{tree.label()}: ρ within 1e−8 of π", 17900, "π·(1 + 1e−8·U(−1, 1)), renormalised"))
    for tree in (ts[1], ts[4]):
        tiny = [[2.0 ** -53] * (tree.vocab - 1) + [1 - (tree.vocab - 1) * 2.0 ** -53] for _ in tree.prefixes]
        out.append(_skl_case(tree, tiny, tree.ref, _flags(tree, "SmallProbabilities"),
                             f"{tree.label()}: π with probabilities 2^−53 against π_ref"))
        out.append(_skl_case(tree, tree.ref, tiny, _flags(tree, "SmallProbabilities"),
                             f"{tree.label()}: π_ref against ρ with probabilities 2^−53"))
    return out + _skl_invalid(ts[0])


def _skl_invalid(tree: T) -> list[Case]:
    out = []
    for key, other in (("pi", "rho"), ("rho", "pi")):
        for ip, pp, why in _tree_invalid(tree)[: None if key == "pi" else 6]:
            inputs = {key: _patched(tree.ref, ip), other: tree.behavior}
            out.append(_invalid(SKL, dict(sorted(inputs.items())), {**tree.shape, **pp}, {}, f"{key}: {why}"))
    return out


def _skl_scale(kwargs, outputs, grads):
    """Per prefix, Σ_a p_a·(|log p_a| + |log q_a|) (the terms of Σ p·(log p − log q)); the KL
    and per_step weigh them by the reach P_π(s), a product of up to H probabilities."""
    H = kwargs["horizon"]
    terms = [mpmath.fsum(mpmath.mpf(p) * (abs(mpmath.log(mpmath.mpf(p))) + abs(mpmath.log(mpmath.mpf(q))))
                         for p, q in zip(pr, qr)) for pr, qr in zip(kwargs["pi"], kwargs["rho"])]
    reach = list(outputs["reach"])
    pre = _tree.prefixes(_tree.skeleton(kwargs["vocab"], H, kwargs["eos"]))
    steps = [mpmath.fsum(r * (t + H * k) for s, r, t, k in zip(pre, reach, terms, outputs["token_kl"])
                         if len(s) == d) for d in range(H)]
    return {"kl": mpmath.fsum(steps), "reach": mpmath.mpf(H), "token_kl": max(terms), "per_step": max(steps)}


# ============================================================================ expected update

def _upd_case(tree: T, pi, rule, flags, comment, mu=None, baseline="mean", seed=None, recipe="", beta=None):
    on_policy = rule.endswith("_on_policy")
    mu = pi if on_policy else (tree.behavior if mu is None else mu)
    group = "paper" if (rule, baseline) == ("proximal_kl", "mean") else (
        rule if baseline == "mean" else f"{rule}-baseline-none")
    flags = flags + (("OnPolicyRule",) if on_policy else ()) + (("BaselineNone",) if baseline == "none" else ())
    return Case(UPD, {"pi": pi, "mu": mu, "pi_ref": tree.ref, "rewards": tree.rewards},
                params={**tree.shape, "beta": tree.beta if beta is None else beta},
                conventions={"rule": rule, "baseline": baseline}, group=group, flags=flags,
                comment=f"{tree.label()}, rule {rule}" + (", baseline none" if baseline == "none" else "")
                + f": {comment}", provenance=_provenance(tree, seed, recipe))


def _upd_cases(ts: list[T]) -> list[Case]:
    out = []
    worked, rand3, eos = ts[0], ts[1], ts[2]
    # every rule at π* on each built-in tree, and at a random policy on two of them
    for tree in (worked, rand3, eos):
        out += _at_optimum(tree, EARLIER_RULES)
    for k, tree in enumerate((worked, eos)):
        out += _at_random_policy(tree, 18000 + k, EARLIER_RULES)
    # baseline 'none' for the rules where it matters and where it does not
    for tree in (worked, eos):
        pi = tree.random_policy(18100)
        for rule in ("proximal_kl", "proximal_kl_no_ratio", "grpo_k3", "sequence_is", "proximal_kl_on_policy"):
            out.append(_upd_case(tree, pi, rule, _flags(tree, "RandomPolicy"), "random π", baseline="none",
                                 seed=18100, recipe="integer weights 1..99 per prefix"))
    # the theorem on random trees: proximal_kl at π* for a random μ (≈ 0), and own_token_kl (not)
    for i, tree in enumerate(ts[3:]):
        star = tree.optimum()
        seed = 18200 + i
        mu = tree.random_policy(seed)
        for rule in ("proximal_kl", "own_token_kl"):
            out.append(_upd_case(tree, star, rule, _flags(tree, "AtOptimum"), "π = π*, random μ", mu=mu,
                                 seed=seed, recipe="random μ: integer weights 1..99 per prefix"))
    return out + _upd_invalid(worked) + _added_upd_cases(ts)


def _at_optimum(tree: T, rules) -> list[Case]:
    star, exact_tree = tree.optimum(), _tree.BUILTIN_TREES[tree.name]
    return [_upd_case(tree, star, rule, _flags(tree, "AtOptimum"),
                      f"π = π* ({'unbiased: ≈ 0' if _tree.unbiased_on(exact_tree, rule)[0] else 'biased'})")
            for rule in rules]


def _at_random_policy(tree: T, seed, rules) -> list[Case]:
    pi = tree.random_policy(seed)
    return [_upd_case(tree, pi, rule, _flags(tree, "RandomPolicy"), "random π", seed=seed,
                      recipe="integer weights 1..99 per prefix") for rule in rules]


def _added_upd_cases(ts: list[T]) -> list[Case]:
    """The rules of GSPO, CISPO, sequence-level TIS and the KL in the reward: at π* and at a
    random π on the built-in trees like every rule, on every random tree at a random π and a
    random μ, and with baseline 'none' where the baseline matters."""
    worked, rand3, eos = ts[0], ts[1], ts[2]
    out = []
    for tree in (worked, rand3, eos):
        out += _at_optimum(tree, ADDED_RULES)
    for k, tree in enumerate((worked, eos)):
        out += _at_random_policy(tree, 18000 + k, ADDED_RULES)
    for i, tree in enumerate(ts[3:]):
        seed = 18300 + i
        pi, mu = tree.random_policy(seed), tree.random_policy(seed + 500)
        for rule in ADDED_RULES:
            out.append(_upd_case(tree, pi, rule, _flags(tree, "RandomPolicy"), "random π, random μ", mu=mu,
                                 seed=seed, recipe="random π and μ: integer weights 1..99 per prefix"))
    for tree in (worked, eos):
        pi = tree.random_policy(18100)
        for rule in ("gspo", "kl_in_reward", "gspo_on_policy"):
            out.append(_upd_case(tree, pi, rule, _flags(tree, "RandomPolicy"), "random π", baseline="none",
                                 seed=18100, recipe="integer weights 1..99 per prefix"))
    return out


def _upd_invalid(tree: T) -> list[Case]:
    out = []
    base = {**tree.shape, "beta": tree.beta}
    inputs = {"pi": tree.behavior, "mu": tree.behavior, "pi_ref": tree.ref, "rewards": tree.rewards}
    for key in ("pi", "mu", "pi_ref"):
        for ip, pp, why in _tree_invalid(tree)[:6]:
            out.append(_invalid(UPD, {**inputs, key: _patched(inputs[key], ip)}, {**base, **pp}, {},
                                f"{key}: {why}"))
    for ip, pp, why in _tree_invalid(tree)[6:]:
        out.append(_invalid(UPD, inputs, {**base, **pp}, {}, why))
    out += [
        _invalid(UPD, {**inputs, "rewards": tree.rewards + [0.0]}, base, {}, "one reward too many"),
        _invalid(UPD, inputs, {**base, "beta": 0.0}, {}, "β = 0"),
        _invalid(UPD, inputs, {**base, "beta": -1.0}, {}, "negative β"),
        _invalid(UPD, inputs, base, {"rule": "ppo"}, "unknown rule"),
        _invalid(UPD, inputs, base, {"rule": "proximal_kl_off_policy"}, "unknown rule"),
        _invalid(UPD, inputs, base, {"baseline": "median"}, "unknown baseline"),
        _invalid(UPD, {**inputs, "rewards": [0.5] * len(tree.leaves)}, base, {"rule": "sigma_normalized"},
                 "σ-normalised advantage with constant rewards (σ = 0)"),
    ]
    return out


def _upd_scale(kwargs, outputs, grads):
    """Σ_y w(y)·Σ_t (|∂L/∂log π_t| + ρ̃_t)·(1 + Σ_u (|log π_u| + |log μ_u| + |log π_ref_u|) + (|r| + |b|)/σ)
    ·(1 + β): the terms whose rounding the update inherits (w = μ(y), or π(y) on-policy; b the
    baseline, σ the σ-normalisation; ρ̃ the larger of the token and sequence ratios and 1).
    At π* the unbiased rules' update is ≈ 0 and is judged against these terms."""
    tree = tb.tree_of(kwargs["vocab"], kwargs["horizon"], kwargs["eos"], kwargs["pi_ref"], kwargs["rewards"],
                      beta=kwargs["beta"])
    rule, beta = kwargs["rule"], _tree.num(kwargs["beta"])
    on = rule.endswith("_on_policy")
    base = rule[: -len("_on_policy")] if on else rule
    params = {k: _tree.num(v) if not isinstance(v, int) else v for k, v in _tree.RULES[rule].params.items()}
    pi = _tree.policy(tree, tb.rows_to_policy(tree, "pi", kwargs["pi"]), "pi")
    samp = pi if on else _tree.policy(tree, tb.rows_to_policy(tree, "mu", kwargs["mu"]), "mu")
    ref = _tree.policy(tree, tree.ref, "pi_ref")
    paths = _tree._paths(tree)
    r = {y: _tree.num(tree.rewards[y]) for y, _ in paths}
    w = {y: mpmath.fprod(samp[s][a] for s, a in path) for y, path in paths}
    mean = mpmath.fsum(w[y] * r[y] for y in r)
    b = mean if kwargs["baseline"] == "mean" else mpmath.mpf(0)
    sigma = mpmath.mpf(1)
    if base == "sigma_normalized":
        sigma = mpmath.sqrt(mpmath.fsum(w[y] * (r[y] - mean) ** 2 for y in r))
    total = []
    for y, path in paths:
        lp = [mpmath.log(pi[s][a]) for s, a in path]
        lm = [mpmath.log(samp[s][a]) for s, a in path]
        lr = [mpmath.log(ref[s][a]) for s, a in path]
        d = _tree._token_derivs(base, params, lp, lm, lr, (r[y] - b) / sigma, beta)
        logs = 1 + mpmath.fsum(abs(v) for v in lp + lm + lr) + (abs(r[y]) + abs(b)) / sigma
        seq_ratio = mpmath.exp(mpmath.fsum(lp) - mpmath.fsum(lm))
        for t, dt in enumerate(d):
            rho = max(mpmath.exp(lp[t] - lm[t]), seq_ratio, 1)
            total.append(w[y] * (abs(dt) + rho) * logs * (1 + beta))
    return {"update": mpmath.fsum(total)}


# ============================================================================ all

def cases() -> list[Case]:
    ts = trees()
    return _opt_cases(ts) + _skl_cases(ts) + _upd_cases(ts)


SCALES = {OPT: _opt_scale, SKL: _skl_scale, UPD: _upd_scale}
