"""The stationary-policy probe (conformance/probe.py) on our backends and on mutants.

The claims checked: our torch proximal_kl.loss reproduces the exact expected
update (_tree.expected_update, rule 'proximal_kl') to 1e-12 in float64 and keeps π*
stationary; our torch grpo.loss is reported non-stationary off-policy (β > 0); a Proximal KL
without the ratio ρ is reported non-stationary."""
from __future__ import annotations

import json

import mpmath
import pytest

torch = pytest.importorskip("torch")

from lossproof.conformance import cli  # noqa: E402
from lossproof.conformance.targets import Target, TargetError  # noqa: E402
from lossproof.conformance.theorem import probe  # noqa: E402
from lossproof.refimpl.exact import _fixed_point, _tree, mp  # noqa: E402
from lossproof.refimpl.torch import proximal_kl as torch_proximal_kl  # noqa: E402
from lossproof.refimpl.validate import InputError  # noqa: E402

TREES = list(_tree.BUILTIN_TREES)


def no_ratio_loss(logp, behavior_logp, ref_logp, advantages, mask, beta=0.04, ratio_clip=None,
                  ratio_cap=None, future_clip=None, future_window=None, aggregation="token-mean"):
    """Mutant: the Proximal KL coefficient on log π instead of ρ (the ratio to μ dropped)."""
    m = torch.as_tensor(mask, dtype=torch.float64)
    k = (logp - ref_logp).detach() * m
    future = k.flip(1).cumsum(1).flip(1) - k          # Σ_{u>t} k_u
    x = advantages[:, None] - beta * (k + future)
    per_token = -logp * x * m
    return per_token.sum() / m.sum()


MUTANT_FILE = '''
import torch
from lossproof.refimpl.torch import proximal_kl

def loss(logp, behavior_logp, ref_logp, advantages, mask, **params):
    # mutant: the behaviour log-probs are detached copies of logp (ρ ≡ 1, μ ignored)
    return proximal_kl.loss(logp, logp.detach(), ref_logp, advantages, mask, **params)

TARGET = {"name": "prox-no-mu", "framework": "torch", "objectives": {"proximal_kl.loss": loss}}
'''


@pytest.mark.parametrize("tree", TREES)
def test_torch_proximal_kl_matches_the_exact_update_and_keeps_the_optimum(tree):
    r = probe.probe("torch", tree=tree, objective="proximal_kl.loss")
    assert r["rule"] == "proximal_kl" and r["expected_stationary"]
    assert r["max_abs_diff"] < 1e-12, r["worst"]
    assert r["residual_at_optimum"] < 1e-12
    assert r["matches"] and r["stationary"]
    assert r["scale"] > 1e-3          # the generic policy's update is not zero: agreement is tested


def test_torch_proximal_kl_keeps_the_optimum_for_random_behaviours_and_every_aggregation():
    tree = _tree.BUILTIN_TREES["eos-v3h3"]
    for seed in (1, 2):
        r = probe.probe("torch", tree=tree, objective="proximal_kl.loss",
                        behavior=_tree.random_behavior(tree, seed))
        assert r["max_abs_diff"] < 1e-12 and r["residual_at_optimum"] < 1e-12
    for mode in torch_proximal_kl.AGGREGATIONS:
        r = probe.probe("torch", tree=tree, objective="proximal_kl.loss", params={"aggregation": mode})
        assert r["max_abs_diff"] < 1e-12 and r["stationary"], mode
        # a per-sequence mean of token means weights responses by 1/|y|: with variable lengths
        # (eos-v3h3) this moves the rest point, the other modes do not
        if mode == "seq-mean-token-mean":
            assert r["minibatch_residual_at_optimum"] > 1e-3
        else:
            assert r["minibatch_residual_at_optimum"] < 1e-12


def test_torch_proximal_kl_on_policy_and_bounded_future_cost():
    r = probe.probe("torch", tree="random-v3h3", objective="proximal_kl.loss", behavior=probe.ON_POLICY)
    assert r["rule"] == "proximal_kl_on_policy" and r["max_abs_diff"] < 1e-12 and r["stationary"]
    r = probe.probe("torch", tree="random-v3h3", objective="proximal_kl.loss", params={"future_clip": 0.5})
    assert r["rule"] == "future_clipped" and r["max_abs_diff"] < 1e-12
    assert not r["stationary"] and not r["expected_stationary"]


@pytest.mark.parametrize("ratio_weight", [False, True])
def test_torch_grpo_is_reported_biased_off_policy(ratio_weight):
    rule = "grpo_k3_ratio_weighted" if ratio_weight else "grpo_k3"
    for tree in TREES:
        r = probe.probe("torch", tree=tree, objective="grpo.loss", params={"kl_ratio_weight": ratio_weight})
        assert r["rule"] == rule and r["matches"], (tree, r["worst"])
        assert r["max_abs_diff"] < 1e-12
        assert not r["stationary"] and not r["expected_stationary"]
        assert r["residual_at_optimum"] > 1e-3
        # the clip was opened: its band contains every ratio, so the residual is the KL term's
        assert abs(r["residual_at_optimum"] - r["exact_residual_at_optimum"]) < 1e-12


def test_mutant_without_the_ratio_is_reported_non_stationary():
    for tree in TREES:
        r = probe.probe(no_ratio_loss, tree=tree, objective="proximal_kl.loss")
        assert not r["matches"] and not r["stationary"]
        # what it computes instead is exactly the no-ratio rule
        with mp.precision(30), mpmath.workdps(30):
            tr = _tree.BUILTIN_TREES[tree]
            want = _fixed_point.residual(_tree.expected_update(tr, _tree.optimum(tr)["policy"],
                                                            rule="proximal_kl_no_ratio"))
        assert abs(r["residual_at_optimum"] - float(want)) < 1e-12


def test_numpy_backend_through_its_vjp():
    r = probe.probe("numpy", tree="worked-v2h2")
    assert r["objective"] == "proximal_kl.loss" and r["max_abs_diff"] < 1e-12 and r["stationary"]
    results = probe.probe_all("numpy", trees=["worked-v2h2"])
    assert [(x["objective"], x["rule"]) for x in results] == [
        ("proximal_kl.loss", "proximal_kl"), ("grpo.loss", "grpo_k3"), ("grpo.loss", "grpo_k3_ratio_weighted")]


def test_bad_arguments():
    with pytest.raises(InputError, match="^params"):
        probe.probe("torch", objective="proximal_kl.loss", params={"ratio_clip": 0.2})
    with pytest.raises(InputError, match="^params"):
        probe.probe("torch", objective="grpo.loss", params={"kl_kind": "k1"})
    with pytest.raises(InputError, match="^tree"):
        probe.probe("torch", tree="no-such-tree")
    with pytest.raises(InputError, match="^behavior"):
        probe.probe("torch", behavior="sometimes")
    with pytest.raises(InputError, match="^objectives"):
        probe.probe_all("torch", objectives=["dpo.loss"])
    with pytest.raises(TargetError, match="implements none"):
        probe.probe_all(Target("x", "torch", {"proximal_kl.loss": no_ratio_loss}), objectives=["grpo.loss"])
    with pytest.raises(TargetError, match="does not implement grpo.loss"):
        probe.probe(Target("x", "torch", {"proximal_kl.loss": no_ratio_loss}), objective="grpo.loss")


def test_cli_probe(tmp_path, capsys):
    out = tmp_path / "probe.json"
    assert cli.main(["probe", "--target", "torch", "--tree", "worked-v2h2", "--quiet", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == "lossproof-probe/1"
    verdict = {(r["objective"], r["rule"]): r["stationary"] for r in doc["results"]}
    assert verdict == {("proximal_kl.loss", "proximal_kl"): True, ("grpo.loss", "grpo_k3"): False,
                       ("grpo.loss", "grpo_k3_ratio_weighted"): False}
    mutant = tmp_path / "mutant.py"
    mutant.write_text(MUTANT_FILE)
    capsys.readouterr()
    assert cli.main(["probe", "--target", f"{mutant}:TARGET", "--quiet"]) == 1
    assert "3 probe(s): 0 keep π* stationary, 3 disagree" in capsys.readouterr().out
    assert cli.main(["probe", "--target", "no_such_module:TARGET"]) == 2


def test_variants_accept_every_declaration_form():
    from lossproof.refimpl.torch import grpo as torch_grpo
    combos = Target("combos", "torch", {"grpo.loss": torch_grpo.loss},
                    {"grpo.loss": [{"aggregation": "token-mean", "kl_ratio_weight": False},
                                   {"aggregation": "seq-mean-token-mean", "kl_ratio_weight": True}]})
    assert probe.variants(combos, "grpo.loss") == [
        {"aggregation": "token-mean", "kl_kind": "k3", "kl_clamp": None, "kl_ratio_weight": False},
        {"aggregation": "seq-mean-token-mean", "kl_kind": "k3", "kl_clamp": None, "kl_ratio_weight": True}]
    anything = Target("any", "torch", {"grpo.loss": torch_grpo.loss}, "*")
    assert [v["kl_ratio_weight"] for v in probe.variants(anything, "grpo.loss")] == [False, True]


def test_a_declared_kl_clamp_is_probed_unclamped_when_it_can_be_and_refused_otherwise():
    from lossproof.refimpl.torch import grpo as torch_grpo
    optional = Target("opt", "torch", {"grpo.loss": torch_grpo.loss}, {"grpo.loss": {"kl_clamp": [10.0, None]}})
    assert all(v["kl_clamp"] is None and "refused" not in v for v in probe.variants(optional, "grpo.loss"))
    always = Target("always", "torch", {"grpo.loss": torch_grpo.loss}, {"grpo.loss": {"kl_clamp": 10.0}})
    (variant,) = probe.variants(always, "grpo.loss")
    assert "no exact rule for a clamped KL" in variant["refused"]
    results = probe.probe_all(always, trees=["worked-v2h2"])
    assert results and all("refused" in r for r in results)
