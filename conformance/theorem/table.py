"""The stationary-policy probe: which update rules keep π* ∝ π_ref·exp(r/β) as their rest point.

Source: the stationary-policy theorem of Proximal KL (Bai, Yao, Zhang) as summarised in article
004 and derived in FRPO (arXiv 2601.10201) — reconstructed, the paper text is not public in our
sources (see refimpl/exact/proximal_kl.py). With exact population expectations and the full
future KL cost, the Proximal KL update vanishes at π* for every behaviour μ with full support;
own-token-only KL, GRPO's k3-as-loss, dropping the ratio, bounding the future cost or
σ-normalising the reward move the rest point, and so do GSPO's sequence ratio, CISPO's clipped
weight, truncated sequence-level importance sampling (TIS) and the KL folded into the reward
without a ratio off-policy (the last two keep π* on-policy); an entropy bonus added to the
Proximal KL update moves it too (``VARIANTS``). On each built-in token tree this module computes,
at ``dps`` digits, π* (soft Bellman backup), each rule's expected update at π*, and each rule's
rest point with its distance KL(π_fix‖π*) and objective J(π_fix) ≤ β·log Z.

``lossproof theorem`` prints this table; the JSON layout is::

    {"trees": [{"name", "vocab", "horizon", "beta", "optimum": {"policy": [{"prefix", "probs"}],
     "beta_log_z"}, "rules": [{"rule", "residual_at_optimum", "fixed_point_kl",
     "objective_at_fixed_point", "fixed_point": [{"prefix", "probs"}], ...}]}]}

with every number a decimal string. Additional keys (additive): top level "schema", "dps",
"reduced"; per tree "eos", "description", "behavior" (the μ of the off-policy rules); per rule
"unbiased" (the claim, with "why"), "params" (the recorded parameters of biased rules),
"converged", "boundary" (tokens whose probability goes to 0 at the rest point; printed as "0"
in "fixed_point") and "note".
"""
from __future__ import annotations

from fractions import Fraction
from typing import Callable, Iterable

import mpmath

from lossproof.refimpl import validate
from lossproof.refimpl.exact import _fixed_point, _tree, mp

SCHEMA = "lossproof-theorem/1"
EXTRA_DPS = 20   # fixed points, KL and J are computed this much beyond dps, then printed at dps

# The reduced table (CI): two trees, the rules that carry the claim.
REDUCED_TREES = ("worked-v2h2", "eos-v3h3")
REDUCED_RULES = ("proximal_kl", "proximal_kl_no_ratio", "own_token_kl", "grpo_k3",
                 "sequence_is", "future_clipped", "whole_cost_clipped", "ratio_capped",
                 "sigma_normalized", "proximal_kl_on_policy", "grpo_k3_on_policy",
                 "gspo", "cispo", "sequence_tis", "kl_in_reward_on_policy", "proximal_kl_entropy",
                 "proximal_kl_entropy_on_policy")
REDUCED_DPS = 30
ALL_TREES = tuple(_tree.BUILTIN_TREES)

# Rows that run a rule of _tree.RULES with a term added: {row: (rule, params, why)}. They are
# not update rules of the catalog (no vectors): they answer a question about the theorem.
ENTROPY_COEFF = Fraction(1, 100)
_ENTROPY_WHY = ("the entropy bonus c·H(π(·|s_t)) at every sampled position (c = 0.01, no credit for "
                "later positions' entropy, as verl's entropy_coeff) adds c·P(reach s)·∇H(π(·|s)) at each "
                "prefix: the rest point solves (β + c)·log π(a|s) = β·log π_ref(a|s) + W(s·a) + const, "
                "W(s·a) = E[r − β·Σ_{u>t} k_u | s·a] under the sampling policy (SAMPLING), and is π* "
                "only at c = 0")
VARIANTS = {
    "proximal_kl_entropy": ("proximal_kl", {"entropy_coeff": ENTROPY_COEFF},
                            _ENTROPY_WHY.replace("SAMPLING", "μ: the rest point depends on it")),
    "proximal_kl_entropy_on_policy": ("proximal_kl_on_policy", {"entropy_coeff": ENTROPY_COEFF},
                                      _ENTROPY_WHY.replace("SAMPLING", "π itself")),
}
ALL_RULES = tuple(_tree.RULES) + tuple(VARIANTS)


def _s(x, digits: int) -> str:
    return mp.nstr(x, digits)


def _param(v) -> str:
    return _s(_tree.num(v), 20) if not isinstance(v, int) else str(v)


def _policy_json(tree, pol, digits, zeros=frozenset()):
    return [{"prefix": list(s),
             "probs": ["0" if (s, a) in zeros else _s(v, digits) for a, v in enumerate(pol[s])]}
            for s in _tree.prefixes(tree)]


def _resolve(trees) -> list:
    if trees is None:
        return list(_tree.BUILTIN_TREES.values())
    out = []
    for t in trees:
        if isinstance(t, _tree.Tree):
            out.append(t)
        elif t in _tree.BUILTIN_TREES:
            out.append(_tree.BUILTIN_TREES[t])
        else:
            raise validate.InputError(
                f"trees: unknown tree {t!r}; built-in: {', '.join(_tree.BUILTIN_TREES)}")
    return out


def run(dps: int = 50, trees: Iterable | None = None, reduced: bool = False,
        progress: Callable[[str], None] | None = None, rules: Iterable[str] | None = None) -> dict:
    """The stationary-policy table (module docstring) at ``dps`` digits.

    ``trees``: built-in tree names or ``refimpl.exact._tree.Tree`` objects (default: every built-in tree);
    ``reduced``: the CI version (trees worked-v2h2 and eos-v3h3, 17 rules, 30 digits unless
    ``dps`` is given below that); ``rules``: a subset of ``ALL_RULES`` (``_tree.RULES`` and
    ``VARIANTS``); ``progress`` is
    called with a short string before each tree and each rule."""
    if reduced:
        dps = min(dps, REDUCED_DPS)
        trees = REDUCED_TREES if trees is None else trees
        rules = REDUCED_RULES if rules is None else rules
    rule_names = list(ALL_RULES) if rules is None else list(rules)
    for r in rule_names:
        if r not in VARIANTS:
            validate.update_rule(r, "rules")
    note = progress or (lambda _msg: None)
    out = {"schema": SCHEMA, "dps": dps, "reduced": bool(reduced), "trees": []}
    for tree in _resolve(trees):
        note(f"{tree.name}: optimum")
        with mp.precision(dps):
            opt = _tree.optimum(tree)
            mu = _tree.policy(tree, tree.behavior, "mu") if tree.behavior else None
        with mp.precision(dps + EXTRA_DPS):
            opt_hp = _tree.optimum(tree)
        entry = {
            "name": tree.name, "vocab": tree.vocab, "horizon": tree.horizon,
            "beta": _s(_tree.num(tree.beta), dps), "eos": tree.eos,
            "description": tree.description,
            "behavior": _policy_json(tree, mu, dps) if mu else None,
            "optimum": {"policy": _policy_json(tree, opt["policy"], dps),
                        "beta_log_z": _s(opt["beta_log_z"], dps)},
            "rules": [],
        }
        for rule in rule_names:
            note(f"{tree.name}: {rule}")
            base, params, why = VARIANTS.get(rule, (rule, None, None))
            with mp.precision(dps):
                at_opt = _fixed_point.residual(_tree.expected_update(tree, opt["policy"], rule=base, params=params))
            with mp.precision(dps + EXTRA_DPS):
                fp = _fixed_point.fixed_point(tree, base, params=params)
                with mpmath.workdps(dps + EXTRA_DPS):
                    kl = _tree.sequence_kl(tree, fp["policy"], opt_hp["policy"])["chain"]
                    value = _tree.objective(tree, fp["policy"])
            unbiased, why = (False, why) if why else _tree.unbiased_on(tree, rule)
            zeros = {(b["prefix"], b["token"]) for b in fp["boundary"]}
            entry["rules"].append({
                "rule": rule,
                "residual_at_optimum": _s(at_opt, 6),
                "fixed_point_kl": _s(kl, dps),
                "objective_at_fixed_point": _s(value, dps),
                "fixed_point": _policy_json(tree, fp["policy"], dps, zeros),
                "unbiased": unbiased,
                "why": why,
                "params": {k: _param(v) for k, v in (params or _tree.RULES[rule].params).items()},
                "converged": fp["converged"],
                "boundary": [{"prefix": list(b["prefix"]), "token": b["token"]} for b in fp["boundary"]],
                "note": fp["note"],
            })
        out["trees"].append(entry)
    return out


def verdict(out: dict) -> dict:
    """Judge a table from :func:`run` against the theorem's claims at its own precision: an
    unbiased rule must leave π* stationary and converge to it (residual and KL below
    10^-(dps-10)); a biased one must not. Returns per-tree rows (mpf values) for printing,
    the contradicted (tree, rule) pairs and the largest Proximal KL residual at π*."""
    digits = out["dps"]
    bound = mpmath.mpf(10) ** -(digits - 10)
    trees, contradicted, worst = [], [], None
    with mpmath.workdps(digits + 10):
        for tree in out["trees"]:
            rows = []
            for r in tree["rules"]:
                res, kl = mpmath.mpf(r["residual_at_optimum"]), mpmath.mpf(r["fixed_point_kl"])
                holds = (res < bound and kl < bound) if r["unbiased"] else kl >= bound
                if not holds or not r["converged"]:
                    contradicted.append(f"{tree['name']}/{r['rule']}")
                if r["rule"] == "proximal_kl":
                    worst = res if worst is None else max(worst, res)
                rows.append({"rule": r["rule"], "unbiased": r["unbiased"], "residual": res, "kl": kl,
                             "objective": mpmath.mpf(r["objective_at_fixed_point"]),
                             "boundary": len(r["boundary"]), "converged": r["converged"]})
            trees.append({"name": tree["name"], "beta": mpmath.mpf(tree["beta"]),
                          "beta_log_z": mpmath.mpf(tree["optimum"]["beta_log_z"]), "rows": rows})
    return {"dps": digits, "trees": trees, "contradicted": contradicted, "worst_proximal_kl": worst,
            "biased": sum(1 for t in out["trees"] for r in t["rules"] if not r["unbiased"])}
