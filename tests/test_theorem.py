"""The stationary-policy table at reduced size (conformance.theorem.run(reduced=True))."""
from __future__ import annotations

import json

import mpmath
import pytest

from lossproof.conformance.theorem import table as theorem
from lossproof.refimpl.exact import _tree
from lossproof.refimpl.validate import InputError


@pytest.fixture(scope="module")
def table():
    seen = []
    out = theorem.run(reduced=True, progress=seen.append)
    out["_progress"] = seen
    return out


@pytest.fixture(autouse=True)
def _arithmetic_at_80_digits():
    with mpmath.workdps(80):
        yield


def _num(s: str) -> mpmath.mpf:
    assert isinstance(s, str)
    return mpmath.mpf(s)


def test_reduced_table_reports_progress(table):
    assert table["reduced"] is True and table["dps"] == theorem.REDUCED_DPS
    names = [t["name"] for t in table["trees"]]
    assert names == list(theorem.REDUCED_TREES)
    for name in names:
        assert any(msg.startswith(name) for msg in table["_progress"])
    assert sum(1 for m in table["_progress"] if m.endswith("proximal_kl")) == len(names)


def test_layout_and_decimal_strings(table):
    body = {k: v for k, v in table.items() if not k.startswith("_")}
    json.dumps(body)   # plain JSON
    for tree in table["trees"]:
        for key in ("name", "vocab", "horizon", "beta", "optimum", "rules"):
            assert key in tree
        _num(tree["beta"])
        _num(tree["optimum"]["beta_log_z"])
        n_prefixes = len(_tree.prefixes(_tree.BUILTIN_TREES[tree["name"]]))
        assert len(tree["optimum"]["policy"]) == n_prefixes
        for row in tree["optimum"]["policy"]:
            assert isinstance(row["prefix"], list) and len(row["probs"]) == tree["vocab"]
            assert abs(sum(_num(p) for p in row["probs"]) - 1) < mpmath.mpf(10) ** -25
        assert [r["rule"] for r in tree["rules"]] == list(theorem.REDUCED_RULES)
        for rule in tree["rules"]:
            for key in ("residual_at_optimum", "fixed_point_kl", "objective_at_fixed_point"):
                _num(rule[key])
            assert len(rule["fixed_point"]) == n_prefixes
            for row in rule["fixed_point"]:
                assert abs(sum(_num(p) for p in row["probs"]) - 1) < mpmath.mpf(10) ** -25


def test_the_theorem_holds_and_the_biased_rules_show_their_bias(table):
    dps = table["dps"]
    for tree in table["trees"]:
        best = _num(tree["optimum"]["beta_log_z"])
        for rule in tree["rules"]:
            assert rule["converged"], (tree["name"], rule["rule"])
            residual, kl = _num(rule["residual_at_optimum"]), _num(rule["fixed_point_kl"])
            value = _num(rule["objective_at_fixed_point"])
            assert value <= best + mpmath.mpf(10) ** -(dps - 5)       # π* maximises J
            if rule["unbiased"]:
                assert residual < mpmath.mpf(10) ** -(dps - 10), rule["rule"]
                assert kl < mpmath.mpf(10) ** -(dps - 10), rule["rule"]
            else:
                assert residual > 1e-6, rule["rule"]
                assert kl > 1e-10, rule["rule"]
                assert value < best
    claims = {r["rule"]: r["unbiased"] for r in table["trees"][0]["rules"]}
    assert claims["proximal_kl"] and claims["sequence_is"] and claims["proximal_kl_on_policy"]
    assert not any(claims[r] for r in ("proximal_kl_no_ratio", "own_token_kl", "grpo_k3"))


def test_boundary_tokens_print_as_zero(table):
    worked = table["trees"][0]
    rule = next(r for r in worked["rules"] if r["rule"] == "whole_cost_clipped")
    assert rule["boundary"] == [{"prefix": [0], "token": 1}]
    row = next(r for r in rule["fixed_point"] if r["prefix"] == [0])
    assert row["probs"][1] == "0" and _num(row["probs"][0]) == 1


def test_bad_arguments():
    with pytest.raises(InputError, match="^trees"):
        theorem.run(trees=["no-such-tree"], reduced=True)
    with pytest.raises(InputError, match="^rules"):
        theorem.run(rules=["ppo"], reduced=True)


# --------------------------------------------------------------------------- the entropy bonus

def _closed_form_rest_point(tree, c, mu=None):
    """The rest point of the Proximal KL update with the bonus c·H(π(·|s)) at every prefix,
    derived by hand. The coefficient of token a at s is W(s·a) − b − β·log(π/π_ref) − c·log π,
    where W(s·a) = E[r − β·Σ_{u>t} k_u | s·a] with the later tokens drawn from the sampling
    policy (μ; π itself on-policy) and their k_u from π (the ratio ρ_t corrects the token at s
    only). At a rest point it is the same for every a, so from the leaves up
    π(a|s) ∝ exp((β·log π_ref(a|s) + W(s·a))/(β + c)), W(leaf) = r,
    W(s) = Σ_a m(a|s)·(W(s·a) − β·log(π(a|s)/π_ref(a|s))), m = μ (or π)."""
    beta = _tree.num(tree.beta)
    ref = _tree.policy(tree, tree.ref, "ref")
    m = None if mu is None else _tree.policy(tree, mu, "mu")
    w = {y: _tree.num(tree.rewards[y]) for y in _tree.leaves(tree)}
    pol = {}
    for s in reversed(_tree.prefixes(tree)):
        z = [(beta * mpmath.log(ref[s][a]) + w[s + (a,)]) / (beta + c) for a in range(tree.vocab)]
        top = max(z)
        e = [mpmath.exp(v - top) for v in z]
        pol[s] = [v / mpmath.fsum(e) for v in e]
        weights = pol[s] if m is None else m[s]
        w[s] = mpmath.fsum(q * (w[s + (a,)] - beta * mpmath.log(pol[s][a] / ref[s][a]))
                           for a, q in enumerate(weights))
    return pol


def test_the_entropy_bonus_moves_the_rest_point_to_its_closed_form(table):
    """The rows proximal_kl_entropy (off-policy, the tree's μ) and its on-policy twin (c = 0.01):
    the rest point the solver finds from π_ref is the hand-derived one to the table's digits, and
    it is not π*."""
    c = _tree.num(theorem.ENTROPY_COEFF)
    for tree in table["trees"]:
        t = _tree.BUILTIN_TREES[tree["name"]]
        for name, mu in (("proximal_kl_entropy", t.behavior), ("proximal_kl_entropy_on_policy", None)):
            row = next(r for r in tree["rules"] if r["rule"] == name)
            assert not row["unbiased"] and row["params"] == {"entropy_coeff": "0.010000000000000000208"}
            expected = _closed_form_rest_point(t, c, mu)
            for got in row["fixed_point"]:
                want = expected[tuple(got["prefix"])]
                assert max(abs(_num(p) - q) for p, q in zip(got["probs"], want)) < mpmath.mpf(10) ** -(table["dps"] - 5)
            assert _num(row["fixed_point_kl"]) > mpmath.mpf("1e-5"), (tree["name"], name)


def test_the_entropy_bonus_adds_c_times_the_entropy_gradient_at_each_prefix():
    """At any π, the update with the bonus minus the one without is c·P_μ(reach s)·∂H/∂θ_s with
    ∂H/∂θ_j = −π_j·(log π_j + H) (the analytic gradient of the row's entropy), whatever the rule's
    ratio: the per-token form c·ρ_t·log π is exact in expectation under μ."""
    tree = _tree.BUILTIN_TREES["eos-v3h3"]
    c = mpmath.mpf("0.01")
    pi = _tree.random_behavior(tree, 7)
    reach = _tree._reach(tree, _tree.policy(tree, tree.behavior))
    p = _tree.policy(tree, pi)
    for rule in ("proximal_kl", "grpo_k3", "proximal_kl_no_ratio"):
        plain = _tree.expected_update(tree, pi, rule=rule)
        bonus = _tree.expected_update(tree, pi, rule=rule, params={"entropy_coeff": c})
        for s in _tree.prefixes(tree):
            h = -mpmath.fsum(v * mpmath.log(v) for v in p[s])
            for j, v in enumerate(p[s]):
                assert abs(bonus[s][j] - plain[s][j] - c * reach[s] * -v * (mpmath.log(v) + h)) < mpmath.mpf(10) ** -45  # expected_update works at 50 digits
    with pytest.raises(InputError, match="entropy_coeff"):
        _tree.expected_update(tree, tree.ref, params={"entropy_coeff": -1})
