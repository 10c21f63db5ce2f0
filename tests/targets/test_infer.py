"""`lossproof infer`: the declaration of each peer's GRPO advantage function, found from scratch
(the adapter's conventions stripped), accepts every group the adapter declares, and pasted back
into the adapter passes the check; a function whose conventions no committed group holds gets
its declaration from derived cases, and check agrees with it; a function that fits no group is
told which cases rule each group out; float64 ruled out by narrowing only is judged in float32;
a group not computed says why; a group a defect rules out is named as such."""
from __future__ import annotations

import dataclasses
import json

import pytest

torch = pytest.importorskip("torch", reason="the peers' functions are torch functions")

import infer_targets
from lossproof.conformance import cli, derive, harness, infer
from lossproof.conformance.targets import TargetError, from_mapping, load
from lossproof.conformance.vectors.load import VectorSet

OBJECTIVE = "grpo.advantages"
# The peers whose adapter implements grpo.advantages (Liger-Kernel ships no advantage function).
PEERS = ("trl", "verl", "openrlhf")


@pytest.fixture(scope="module")
def vector_set():
    return VectorSet(None, [OBJECTIVE], validate=False)


def _key(conventions: dict) -> str:
    return json.dumps(conventions, sort_keys=True)


@pytest.mark.parametrize("peer", PEERS)
def test_infer_finds_the_declaration_of_a_peers_advantages_from_scratch(peer, vector_set):
    try:
        adapter = load(peer)
    except TargetError as err:
        pytest.skip(f"{peer} is not installed: {err}")
    (found,) = infer.infer(adapter, vector_set, [OBJECTIVE])
    assert found.declaration is not None, found.text()
    judged = [g for g in found.groups if g.fits or g.ruled_out]
    fitting = {_key(g.conventions) for g in judged if g.fits}
    declared = {_key(g.conventions) for g in judged if adapter.accepts(OBJECTIVE, g.conventions)}
    assert declared, f"{peer} declares no group the vectors hold"
    # a declared group whose every float64 case is a declared known failure (verl's whitening
    # eps) is undecided, neither fitting nor ruled out
    undecided = {_key(g.conventions) for g in found.groups if g.undecided}
    assert declared - undecided <= fitting, f"{peer}: declared but inferred not to fit: {sorted(declared - fitting)}"
    assert fitting - declared <= {_key(g.conventions) for g in judged}   # extras are groups it computes right

    pasted = dataclasses.replace(adapter, conventions={OBJECTIVE: found.declaration})
    accepted = {_key(g.conventions) for g in judged if pasted.accepts(OBJECTIVE, g.conventions)}
    assert accepted == fitting, "the declaration printed must accept exactly the groups that fit"
    results = harness.run(pasted, vector_set, objective=OBJECTIVE, dtypes=["float64"])
    bad = [r for r in results if r.status in ("fail", "error")]
    assert not bad, f"{peer} with the inferred declaration: {bad[0].uid}: {bad[0].message[:200]}"
    assert sum(r.status == "pass" for r in results) > 50


def test_infer_finds_the_forward_kd_declaration(capsys):
    """The forward KD with the cross-entropy soft term and no T²: the group that holds that
    combination fits, and the others are each ruled out by a named case."""
    code = cli.main(["infer", "--target", "diagnose.targets:KD_CE_NO_T2", "--objective", "distill.hinton",
                     "--quiet"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("distill.hinton: fits the groups cross-entropy-no-t2")
    assert "{'t2_scale': False, 'soft_term': 'cross_entropy'}" in out
    for group in ("paper", "no-t2", "cross-entropy"):
        assert f"  not {group} (" in out and "ruled out by distill.hinton:" in out


def test_a_function_that_fits_no_group_is_told_what_rules_each_out(capsys):
    code = cli.main(["infer", "--target", "diagnose.targets:KL_FLOAT32", "--objective", "kl.estimator",
                     "--quiet"])
    out = capsys.readouterr().out
    assert code == 1
    assert out.startswith("kl.estimator: no convention group of the vectors fits")
    for group in ("paper", "estimators", "clamp10"):
        assert f"  {group} (" in out and "ruled out by kl.estimator:" in out


def test_infer_of_an_objective_the_target_lacks_is_a_usage_error(capsys):
    assert cli.main(["infer", "--target", "diagnose.targets:KD_CE_NO_T2", "--objective", "grpo.*"]) == 2
    assert "implements none of grpo.*" in capsys.readouterr().err


def _peer(name):
    try:
        return load(name)
    except TargetError as err:
        pytest.skip(f"{name} is not installed: {err}")


def test_a_group_judged_only_through_known_failures_is_undecided(vector_set):
    """verl's whitened advantages differ from the catalog's in every float64 case by the eps of
    masked_whiten, declared as known failures that a ddof = 0 group trips as well: the groups
    reinforce++ (ddof 0, which verl cannot compute) and verl-0.9.1-reinforce++ (ddof 1) both had
    only excused cases, and both used to be proposed."""
    (found,) = infer.infer(_peer("verl"), vector_set, [OBJECTIVE])
    by_name = {g.name: g for g in found.groups}
    for name in ("reinforce++", "verl-0.9.1-reinforce++"):
        assert by_name[name].undecided and not by_name[name].fits, by_name[name].counts
        assert f"  undecided {name} (" in found.text()
    assert "verl-0.9.1" in [g.name for g in found.groups if g.fits]


def test_liger_distillation_is_decided_in_float32_not_in_float64(capsys):
    """Liger's distillation computes in float32 whatever the inputs (a declared finding on every
    float64 case): in float64 no group of distill.hinton is decided (it used to propose both
    t2_scale values), in float32 exactly the declared t2_scale=False fits."""
    _peer("liger")
    argv = ["infer", "--target", "liger", "--objective", "distill.hinton", "--quiet"]
    assert cli.main(argv) == 1
    out = capsys.readouterr().out
    assert out.startswith("distill.hinton: no convention group of the vectors fits")
    assert "  undecided paper (" in out and "  undecided no-t2 (" in out and "liger-distill-float32" in out
    assert cli.main([*argv, "--dtype", "float32"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("distill.hinton: fits the groups no-t2\n") and "{'t2_scale': False}" in out


def _checked(spec: dict, objective: str, declaration, vs) -> list:
    """What ``lossproof check`` judges for the target declaring ``declaration``: the committed
    groups it declares and the cases derived for each combination no group holds."""
    target = from_mapping({**spec, "conventions": {objective: declaration}}, spec["name"])
    results = harness.run(target, vs, objective=objective, dtypes=["float64"])
    for assignment in derive.uncovered(target, vs, objective):
        for case in derive.derive(vs, objective, assignment)[0]:
            results += harness.run_case(target, case, dtypes=["float64"])
    return results


@pytest.mark.parametrize("name, expected", [("SAMPLE_STD_EPS_1E6", {"std_ddof": 1, "eps": 1e-6}),
                                            ("RLOO_GROUP_STD", {"baseline": "leave-one-out"})])
def test_a_combination_no_committed_group_holds_is_found_and_check_agrees(name, expected, vector_set):
    """verl's eps and sample std with zeroed degenerate groups, and the leave-one-out baseline
    scaled by the group std: no committed group holds either, every committed group rules the
    function out, and the combinations next to them, judged on derived cases, find it."""
    spec = getattr(infer_targets, name)
    (found,) = infer.infer(from_mapping(spec, spec["name"]), vector_set, [OBJECTIVE])
    assert found.declaration == expected, found.text()
    assert not any(g.fits for g in found.groups if not g.derived)
    assert [g.derived for g in found.groups if g.fits] == [True]
    assert "(cases derived at run time: no committed group holds it)" in found.text()
    checked = [r for r in _checked(spec, OBJECTIVE, found.declaration, vector_set) if r.axis == "conformance"]
    assert not [r for r in checked if r.status in ("fail", "error")]
    passed = [r for r in checked if r.status == "pass"]
    assert len(passed) >= 10 and all(r.group == derive.GROUP for r in passed)


def test_float64_ruled_out_by_narrowing_only_is_judged_in_float32(capsys):
    assert cli.main(["infer", "--target", "infer_targets:KL_IN_FLOAT32", "--objective", "kl.estimator",
                     "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "are ruled out only because the function returns a narrower dtype than its inputs; judged in float32" \
        in out
    assert "{'kind': ['k3', 'k1', 'k2', 'abs'], 'clamp': [None, 10.0]}" in out


def test_a_group_not_computed_says_why(capsys):
    assert cli.main(["infer", "--target", "infer_targets:KL_UNCLAMPED_ONLY", "--objective", "kl.estimator",
                     "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "{'kind': ['k3', 'k1', 'k2', 'abs']}" in out
    assert "  clamp10: not computed (" in out and "this library's KL has no clamp" in out


def test_a_wrapper_without_the_parameter_computes_nothing_and_is_told_so(capsys):
    assert cli.main(["infer", "--target", "infer_targets:KL_WITHOUT_CLAMP", "--objective", "kl.estimator",
                     "--quiet"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("kl.estimator: no convention group of the vectors fits")
    assert "  paper: not computed (not called: kl_without_clamp() does not take 'clamp'" in out
    assert "ruled out" not in out


def test_a_group_left_out_by_a_defect_is_named_not_dropped_silently(capsys):
    """'abs' as √(x²): its gradient at 0 is NaN, a defect; the other kinds fit."""
    assert cli.main(["infer", "--target", "infer_targets:KL_ABS_BY_SQUARE_ROOT", "--objective", "kl.estimator",
                     "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "{'kind': ['k3', 'k1', 'k2'], 'clamp': [None, 10.0]}" in out
    assert "  left out by a defect, not a convention: verl-0.9.1-abs (kind='abs', clamp=None): [" in out
    assert "  not verl-0.9.1-abs" not in out


def _twins() -> list:
    """Each distinct twin of the kill table (tests/mutants): a correct function with the
    conventions it declares."""
    from mutants import all_pairs
    from mutants.killtable import twin_name
    pairs, out = all_pairs(), {}
    for p in pairs:
        out.setdefault(twin_name(p, pairs), p)
    return [pytest.param(p, id=name) for name, p in out.items()]


def _agrees(mapping: dict, objective: str, vector_set) -> infer.Inference:
    """infer from scratch, then check with the declaration infer printed: nothing fails."""
    (found,) = infer.infer(from_mapping(mapping, mapping["name"]), vector_set, [objective])
    assert found.declaration is not None, found.text()
    checked = [r for r in _checked(mapping, objective, found.declaration, vector_set) if r.axis == "conformance"]
    bad = [r for r in checked if r.status in ("fail", "error")]
    assert not bad, f"check with {found.declaration}: {bad[0].uid}: {bad[0].message[:200]}"
    assert any(r.status == "pass" for r in checked)
    return found


@pytest.fixture(scope="module")
def every_vector():
    return VectorSet(validate=False)


@pytest.mark.slow
@pytest.mark.parametrize("pair", _twins())
def test_infer_and_check_agree_on_every_twin(pair, every_vector):
    """The twin's conventions stripped, infer proposes a declaration that accepts every group the
    twin declares, and check with that declaration passes."""
    mapping = pair.target("twin")
    found = _agrees(mapping, pair.objective, every_vector)
    pasted = from_mapping({**mapping, "conventions": {pair.objective: found.declaration}}, mapping["name"])
    declared = from_mapping(mapping, mapping["name"])
    for g in found.groups:
        if not g.derived and declared.accepts(pair.objective, g.conventions) and (g.fits or g.ruled_out):
            assert pasted.accepts(pair.objective, g.conventions), f"{g.name}: declared by the twin, not by infer"


# Pinned twins whose combination the reference refuses (refimpl.validate.policy_loss: dual_clip
# must be None with CISPO) and so the twin too (its inputs are validated by the reference): the
# pinned function raises InputError on every call, no case can be derived for the combination,
# and there is nothing for infer to find. The message every call and every derivation gives:
REFUSED = {
    'LOSS_CISPO_WEIGHT_ATTACHED__TWIN[dual_clip=3.0, kl_kind="k1", kl_ratio_weight=true, aggregation="token-mean", '
    'policy_loss="cispo"]': "dual_clip: must be None with policy_loss='cispo'",
}
# Pinned twins with a convention that does not act under their other conventions: infer names it
# as not observed and leaves it open ("*"), which accepts the pinned value. std_ddof is read only
# when whitening (refimpl/exact/gae.py advantages; the twin's gae() likewise), and whiten is "none".
LEFT_OPEN = {"GAE_WHITEN_MEAN_RESTORED__TWIN[std_ddof=1]": ("std_ddof",)}


def _pinned() -> list:
    """Each twin pinned to one convention combination it declares that no committed group holds
    (``derive.uncovered``; an open "*" set to the paper default): called with any conventions,
    it computes that one combination, as a library function with fixed choices does."""
    from lossproof.conformance import catalog
    from lossproof.conformance.targets.target import ANY
    vs = VectorSet(validate=False)
    out = []
    for param in _twins():
        pair = param.values[0]
        spec = catalog.get(pair.objective)
        twin = from_mapping(pair.target("twin"), param.id)
        for assignment in derive.uncovered(twin, vs, pair.objective):
            fixed = {k: (spec.defaults[k] if v == ANY else v) for k, v in assignment.items()}
            name = f"{param.id}[{derive.describe(fixed, spec)}]"
            out.append(pytest.param(pair, fixed, name, id=name))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("pair, fixed, name", _pinned())
def test_infer_finds_a_twin_pinned_to_a_combination_no_committed_group_holds(pair, fixed, name, every_vector):
    def pinned(**kwargs):
        return pair.twin(**{**kwargs, **fixed})
    mapping = {"name": f"{pair.slug}-pinned", "framework": pair.framework, "objectives": {pair.objective: pinned},
               "dtypes": ["float64"]}
    if pair.twin_vjp is not None:
        mapping["vjps"] = {pair.objective: lambda cotangent, **kwargs: pair.twin_vjp(cotangent, **{**kwargs, **fixed})}
    if name in REFUSED:
        cases, dropped = derive.derive(every_vector, pair.objective, fixed)
        assert not cases and dropped and all(REFUSED[name] in line for line in dropped), dropped
        (found,) = infer.infer(from_mapping(mapping, mapping["name"]), every_vector, [pair.objective])
        assert found.declaration is None, found.text()
        committed = [g for g in found.groups if not g.derived]
        assert committed and all(g.ruled_out and REFUSED[name] in g.against for g in committed), found.text()
        return
    found = _agrees(mapping, pair.objective, every_vector)
    pasted = from_mapping({**mapping, "conventions": {pair.objective: found.declaration}}, mapping["name"])
    assert pasted.accepts(pair.objective, fixed), f"infer proposes {found.declaration}"
    for convention in LEFT_OPEN.get(name, ()):
        assert found.declaration[convention] == "*" and f"not observed: {convention} (" in found.text(), found.text()
