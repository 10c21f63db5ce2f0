"""Structure of the proximal_kl and tabular vector generators (counts, notes, groups, determinism),
and the tabular catalog form: the array encoding of a tree decodes to the same tree, and the
catalog functions agree with the tree functions of refimpl/exact/_tree.py."""
from __future__ import annotations

from collections import Counter, defaultdict
from fractions import Fraction

import mpmath
import pytest

from lossproof.conformance import catalog, numbers
from lossproof.conformance.generate import build, proximal_kl, tabular
from lossproof.refimpl.exact import _tree
from lossproof.refimpl.exact import tabular as tb
from lossproof.refimpl.validate import InputError

MODULES = {"proximal_kl": proximal_kl, "tabular": tabular}
MIN_VALID = {"proximal_kl": 60, "tabular": 30}   # enumerated trees are small: 30 per tabular objective


@pytest.fixture(scope="module", params=sorted(MODULES))
def family(request):
    module = MODULES[request.param]
    return request.param, module, module.cases()


def test_counts_per_objective(family):
    name, _, cases = family
    counts = defaultdict(Counter)
    for c in cases:
        counts[c.objective][c.result] += 1
    assert sorted(counts) == sorted(o.id for o in catalog.OBJECTIVES if o.family == name)
    for objective, n in counts.items():
        assert n["valid"] >= MIN_VALID[name], (objective, n)
        assert n["invalid"] >= 6, (objective, n)


def test_every_flag_and_group_is_defined(family):
    _, module, cases = family
    for c in cases:
        assert c.flags and len(set(c.flags)) == len(c.flags), c.comment
        assert all(f in module.NOTES for f in c.flags), c.flags
        assert c.group in module.GROUPS
        if c.result == "acceptable":
            assert any(module.NOTES[f]["category"] == "acceptable" for f in c.flags), c.comment
        if c.result == "invalid":
            assert c.group == "invalid"
    assert "paper" in module.GROUPS and "invalid" in module.GROUPS


def test_one_convention_set_per_group(family):
    _, _, cases = family
    seen = {}
    for c in cases:
        if c.group == "invalid":
            continue
        spec = catalog.get(c.objective)
        conv = tuple(sorted((k, repr(c.conventions.get(k, spec.defaults[k]))) for k in spec.conventions))
        assert seen.setdefault((c.objective, c.group), conv) == conv, (c.objective, c.group)
        if c.group == "paper":
            assert conv == tuple(sorted((k, repr(spec.defaults[k])) for k in spec.conventions))


def test_unique_uids(family):
    _, _, cases = family
    uids = [build.uid_of(catalog.get(c.objective), c) for c in cases]
    assert len(uids) == len(set(uids))


def test_deterministic(family):
    _, module, cases = family
    again = module.cases()
    assert [build.uid_of(catalog.get(c.objective), c) for c in cases] == \
           [build.uid_of(catalog.get(c.objective), c) for c in again]


def test_proximal_kl_low_precision_cases_are_exact_in_a_narrow_dtype():
    low = [c for c in proximal_kl.cases() if c.low_precision]
    assert {c.objective for c in low} == {proximal_kl.FC, proximal_kl.LOSS}
    for c in low:
        floats = [v for k, val in c.inputs.items() if k != "mask" for v in numbers.flat_floats(val)]
        assert any(all(numbers.representable(v, d) for v in floats) for d in ("bfloat16", "float16")), c.comment


def test_proximal_kl_invalid_cases_cover_every_bound():
    why = " | ".join(c.comment for c in proximal_kl.cases() if c.result == "invalid")
    for word in ("window = 0", "clip = 0", "ratio_cap = 0", "ratio_clip = 0", "ratio_clip = 1", "β = 0",
                 "shape", "mask value", "NaN", "inf", "selects no token"):
        assert word in why, word


# --------------------------------------------------------------------------- tabular encoding

def test_every_probability_row_sums_to_one_exactly():
    for c in tabular.cases():
        if c.result == "invalid":
            continue
        for name in ("pi_ref", "pi", "mu", "rho"):
            for row in c.inputs.get(name, []):
                assert sum(Fraction(v) for v in row) == 1 and min(row) > 0, (c.comment, name)


def test_prefix_and_leaf_order_is_the_documented_one():
    # breadth first, by length then lexicographically; leaves prefix by prefix, by token
    assert _tree.prefixes(_tree.EOS_V3H3) == [(), (0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1)]
    assert _tree.leaves(_tree.EOS_V3H3)[:4] == [(2,), (0, 2), (1, 2), (0, 0, 0)]
    assert "breadth first" in catalog.get("tabular.optimum").summary
    assert "breadth-first" in tabular.NOTES["TreeEncoding"]["description"]


@pytest.mark.parametrize("tree", list(_tree.BUILTIN_TREES.values()), ids=list(_tree.BUILTIN_TREES))
def test_catalog_form_matches_the_tree_functions(tree):
    """With exact (Fraction) rows the catalog form decodes to the same tree: same π*, β·log Z,
    KL decomposition and update as the Tree API."""
    pre, ends = _tree.prefixes(tree), _tree.leaves(tree)

    def exact(v):
        with mpmath.workdps(60):
            return mpmath.mpf(Fraction(v).numerator) / Fraction(v).denominator
    ref = [[exact(v) for v in tree.ref[s]] for s in pre]
    mu = [[exact(v) for v in tree.behavior[s]] for s in pre]
    rewards = [exact(tree.rewards[y]) for y in ends]
    beta = exact(tree.beta)
    shape = {"vocab": tree.vocab, "horizon": tree.horizon, "eos": tree.eos}
    got = tb.optimum(ref, rewards, **shape, beta=beta)
    want = _tree.optimum(tree)
    with mpmath.workdps(60):
        assert abs(got["beta_log_z"] - want["beta_log_z"]) < mpmath.mpf(10) ** -45
        for i, s in enumerate(pre):
            assert max(abs(a - b) for a, b in zip(got["policy"][i], want["policy"][s])) < mpmath.mpf(10) ** -45
    kl = tb.sequence_kl(mu, ref, **shape)
    kl_want = _tree.sequence_kl(tree, tree.behavior, tree.ref)
    with mpmath.workdps(60):
        assert abs(kl["kl"] - kl_want["kl"]) < mpmath.mpf(10) ** -45
        assert abs(mpmath.fsum(kl["per_step"]) - kl["kl"]) < mpmath.mpf(10) ** -45
    upd = tb.expected_update(mu, mu, ref, rewards, **shape, beta=beta, rule="own_token_kl")["update"]
    upd_want = _tree.expected_update(tree, tree.behavior, tree.behavior, rule="own_token_kl")
    with mpmath.workdps(60):
        for i, s in enumerate(pre):
            assert max(abs(a - b) for a, b in zip(upd[i], upd_want[s])) < mpmath.mpf(10) ** -45


def test_unbiased_rules_are_near_zero_at_the_rounded_optimum():
    """The AtOptimum vectors: at π* rounded to 2^−53, proximal_kl's update is of the order of that
    rounding; own_token_kl's is not."""
    cases = [c for c in tabular.cases() if c.objective == tabular.UPD and "AtOptimum" in c.flags
             and "worked-v2h2" in c.comment and c.conventions["rule"] in ("proximal_kl", "own_token_kl")]
    assert len(cases) == 2
    for c in cases:
        fn, _ = build.exact_functions(c.objective)
        kwargs = build.call_kwargs(catalog.get(c.objective), c)
        size = max(abs(v) for v in fn(**kwargs)["update"].flat)
        assert (size < 1e-14) == (c.conventions["rule"] == "proximal_kl"), (c.comment, size)


def test_catalog_form_rejects_bad_trees():
    tree = tabular.trees()[0]
    ok = {"pi_ref": tree.ref, "rewards": tree.rewards, **tree.shape, "beta": 0.5}
    tb.optimum(**ok)
    for patch in ({"pi_ref": tree.ref[:-1]}, {"rewards": tree.rewards[:-1]}, {"beta": 0.0}, {"vocab": 1},
                  {"eos": 5}, {"pi_ref": [[0.5, 0.6]] + tree.ref[1:]}):
        with pytest.raises(InputError):
            tb.optimum(**{**ok, **patch})
