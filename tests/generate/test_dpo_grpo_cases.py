"""Structure of the dpo, grpo and gae vector generators: counts, notes, groups, article cases, and
that each group name labels a single convention set per objective (no build: fast)."""
from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from lossproof.conformance import catalog, numbers
from lossproof.conformance.generate import dpo, gae, grpo

MODULES = {"dpo": dpo, "grpo": grpo, "gae": gae}


@pytest.fixture(scope="module", params=sorted(MODULES))
def family(request):
    module = MODULES[request.param]
    return request.param, module, module.cases()


def test_counts_per_objective(family):
    name, _, cases = family
    counts = defaultdict(Counter)
    for c in cases:
        counts[c.objective][c.result] += 1
    objectives = [o.id for o in catalog.OBJECTIVES if o.family == name]
    assert sorted(counts) == sorted(objectives)
    for objective, n in counts.items():
        assert n["valid"] >= 60, (objective, n)
        assert n["invalid"] >= 6, (objective, n)


def test_every_flag_and_group_is_defined(family):
    _, module, cases = family
    for c in cases:
        assert c.flags, c.comment
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


def test_article_cases_present(family):
    name, _, cases = family
    article = [c for c in cases if "Article" in c.flags]
    if name == "gae":   # the source article has no GAE example
        assert not article
        return
    assert article and all(c.provenance["kind"] == "article" for c in article)
    assert {c.objective for c in article} == ({"dpo.loss"} if name == "dpo" else {"grpo.advantages", "grpo.clip"})


def test_low_precision_cases_are_exact_in_a_narrow_dtype(family):
    name, _, cases = family
    low = [c for c in cases if c.low_precision]
    # an objective the catalog declares low_precision=False has none
    assert bool(low) == any(o.low_precision for o in catalog.OBJECTIVES if o.family == name)
    for c in low:
        floats = [v for k, val in c.inputs.items() if k != "mask" for v in numbers.flat_floats(val)]
        assert any(all(numbers.representable(v, d) for v in floats) for d in ("bfloat16", "float16")), c.comment


def test_deterministic(family):
    _, module, cases = family
    again = module.cases()
    assert [(c.objective, c.inputs, c.params, c.conventions, c.cotangents) for c in cases] == \
           [(c.objective, c.inputs, c.params, c.conventions, c.cotangents) for c in again]


def test_dpo_reward_cotangents_are_zero():
    for c in dpo.cases():
        if c.result == "invalid":
            continue
        assert set(c.cotangents["chosen_rewards"]) == {0.0} and set(c.cotangents["rejected_rewards"]) == {0.0}
