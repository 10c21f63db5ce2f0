"""The stationary-policy table at reduced size (conformance.theorem.run(reduced=True))."""
from __future__ import annotations

import json

import mpmath
import pytest

from conformance.theorem import table as theorem
from refimpl.exact import _tree
from refimpl.validate import InputError


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
