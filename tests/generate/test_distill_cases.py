"""Structure of the distill vector generator: counts, notes, groups, low-precision inputs, cotangents
that the scale functions can rebuild, the article's printed numbers, and scales that bound the
values they judge (a sample of small cases is built; the whole file is not)."""
from __future__ import annotations

import math
from collections import Counter, defaultdict

import mpmath
import numpy as np
import pytest

from lossproof.conformance import catalog, numbers
from lossproof.conformance.generate import distill, distill_inputs
from lossproof.conformance.generate.build import build_test, call_kwargs

CATEGORIES = {"article", "random", "edge", "convention", "invalid", "acceptable", "numerics"}


@pytest.fixture(scope="module")
def cases():
    return distill.cases()


def _logits(case):
    return case.inputs["logits" if case.objective == distill_inputs.SM else "student_logits"]


def test_counts_per_objective(cases):
    counts = defaultdict(Counter)
    for c in cases:
        counts[c.objective][c.result] += 1
    assert sorted(counts) == sorted(o.id for o in catalog.OBJECTIVES if o.family == "distill")
    for objective, n in counts.items():
        assert n["valid"] >= 60, (objective, n)
        assert n["invalid"] >= 6, (objective, n)


def test_every_flag_and_group_is_defined(cases):
    assert all(note["category"] in CATEGORIES for note in distill.NOTES.values())
    used = set()
    for c in cases:
        assert c.flags, c.comment
        assert all(f in distill.NOTES for f in c.flags), c.flags
        used.update(c.flags)
        assert c.group in distill.GROUPS
        assert (c.group == "invalid") == (c.result == "invalid"), c.comment
    assert used == set(distill.NOTES)


def test_a_group_name_labels_one_convention_set(cases):
    seen = defaultdict(set)
    for c in cases:
        if c.result == "invalid":
            continue
        spec = catalog.get(c.objective)
        conv = tuple(sorted((k, repr(c.conventions.get(k, spec.defaults[k]))) for k in spec.conventions))
        seen[(c.objective, c.group)].add(conv)
    assert all(len(v) == 1 for v in seen.values()), seen


def test_sizes(cases):
    """Most cases are small (DESIGN §5: V ≤ 64), some have a realistic vocabulary (up to 4096)."""
    vocab = Counter()
    for c in cases:
        if c.result == "invalid":
            continue
        shape = np.shape(_logits(c))
        vocab[shape[-1] <= 64] += 1
        assert shape[-1] <= 4096 and (len(shape) < 2 or int(np.prod(shape[:-1])) <= 32), (c.comment, shape)
    assert vocab[False] >= 8 and vocab[True] >= 4 * vocab[False]
    assert sum(np.shape(_logits(c))[-1] == 4096 for c in cases if c.low_precision) >= 4


def test_low_precision_inputs(cases):
    """Low-precision logits are exact in bfloat16 or float16 and inside float16's range; |z| ≤ 30
    (30·T + a few in saturated rows) apart from the ±1e4 rows (HugeLogits)."""
    low = [c for c in cases if c.low_precision]
    assert {c.objective for c in low} == {distill_inputs.SM, distill_inputs.HIN, distill_inputs.TKL, distill_inputs.JSD, distill_inputs.SYM,
                                          distill_inputs.SKL, distill_inputs.TVD, distill_inputs.SPK}
    for c in low:
        floats = [v for k, x in c.inputs.items() if k not in ("labels", "teacher_ids") for v in numbers.flat_floats(x)]
        assert any(all(numbers.representable(v, d) for v in floats) for d in ("bfloat16", "float16")), c.comment
        finite = [abs(v) for v in floats if not math.isinf(v)]
        bound = 10176 if "HugeLogits" in c.flags else 30 * max(1.0, c.params["temperature"]) + 5
        assert max(finite) <= bound, c.comment


def test_cotangents_are_exact_and_rebuilt_by_the_scales(cases):
    for c in cases:
        if c.result == "invalid":
            continue
        spec = catalog.get(c.objective)
        (ct,) = c.cotangents.values()
        for v in numbers.flat_floats(ct):
            assert v != 0 and abs(v) <= 2 and (v * 64).is_integer()
        assert distill_inputs.case_cotangent(c.objective, call_kwargs(spec, c)) == ct


def test_random_cases_cover_the_parameters(cases):
    temps, alphas, betas = set(), set(), Counter()
    for c in cases:
        if c.result == "invalid":
            continue
        temps.add(c.params.get("temperature"))
        alphas.add(c.params.get("alpha"))
        if c.objective == distill_inputs.JSD:
            betas[(c.params["beta"], c.conventions["endpoints"])] += 1
    assert {0.5, 1.0, 2.0, 4.0, 1e-3} <= temps
    assert {0.0, 0.1, 0.5, 0.9, 1.0} <= alphas
    for beta in (0.0, 0.1, 0.5, 0.9, 1.0):
        for endpoints in ("limit", "kl"):
            assert betas[(beta, endpoints)] >= 1, (beta, endpoints)


def _built(case):
    return build_test(case, distill.SCALES[case.objective])


def test_article_numbers(cases):
    art = {(c.objective, c.conventions.get("direction"), c.params.get("temperature"), c.comment): c
           for c in cases if "Article" in c.flags}
    probs = {T: [float(p) for p in _built(c)["expected"]["probs"]]
             for (obj, _, T, _), c in art.items() if obj == distill_inputs.SM}
    # "Con T=1, las probabilidades son aproximadamente (0.88,0.12); con T=2, pasan a ser (0.73,0.27)"
    assert [round(p, 2) for p in probs[1.0]] == [0.88, 0.12]
    assert [round(p, 2) for p in probs[2.0]] == [0.73, 0.27]
    kls = {}
    for (obj, direction, _, comment), c in art.items():
        if obj == distill_inputs.TKL and c.conventions.get("soft_term", "kl") == "kl":
            kls[(direction, "fox" in comment)] = float(_built(c)["expected"]["kl"][0])
        elif obj == distill_inputs.TKL:   # the cross-entropy form: KL + H(p)
            kls["cross_entropy"] = float(_built(c)["expected"]["kl"][0])
    # "d_t = 0.5 log(0.5/0.6) + 0.2 log(0.2/0.3) + 0.3 log(0.3/0.1) ≈ 0.157"
    assert round(kls[("reverse", True)], 3) == 0.157
    # teacher (0.8, 0.2), student (0.4, 0.6): weights 0.4, 0.6 (reverse) and 0.8, 0.2 (forward)
    assert math.isclose(kls[("reverse", False)], 0.4 * math.log(0.4 / 0.8) + 0.6 * math.log(0.6 / 0.2), rel_tol=1e-14)
    assert math.isclose(kls[("forward", False)], 0.8 * math.log(0.8 / 0.4) + 0.2 * math.log(0.2 / 0.6), rel_tol=1e-14)
    assert math.isclose(kls["cross_entropy"], -0.8 * math.log(0.4) - 0.2 * math.log(0.6), rel_tol=1e-14)


def test_scales_bound_what_they_judge(cases):
    """Every scale is at least the largest |value| of its output (it adds the rounding magnitudes to
    the terms of the result), and exactly 0 for the 'limit' endpoints, whose value is exactly 0."""
    small = [c for c in cases if c.result == "valid" and np.size(np.array(_logits(c), dtype=float)) <= 40]
    picked = small[::3]
    assert len(picked) >= 40
    for c in picked:
        test = _built(c)
        for section, scales in (("expected", test["scale"]["outputs"]), ("grads", test["scale"]["grads"])):
            for name, scale in scales.items():
                values = np.array(test[section][name], dtype=object).ravel()
                largest = max((abs(mpmath.mpf(v)) for v in values), default=mpmath.mpf(0))
                assert mpmath.mpf(scale) >= largest * (1 - 1e-5), (c.comment, section, name, scale, largest)
                if "BetaEndpointLimit" in c.flags:
                    assert mpmath.mpf(scale) == 0
