"""Vectors for ``reward.pairwise`` (Bradley–Terry; InstructGPT §3.5 eq. 1; Eisenstein et al. eq. 2).

Groups: the paper's loss (no margin, no centring), TRL 1.16.0's RewardTrainer with its margin
column and ``center_rewards_coefficient``, and OpenRLHF 0.11.2's log-exp form (the same function:
its group carries the cases where the literal log(1 + exp(r_r − r_c)) overflows or rounds 1 + e^x
to 1, and margins, which OpenRLHF's LogExpLoss ignores).
"""
from __future__ import annotations

import math

import mpmath

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated, paper

OBJ = "reward.pairwise"
INSTRUCTGPT = "2203.02155"

NOTES = {
    "Random": {"category": "random", "description": "Random reward pairs from a fixed seed: chosen rewards drawn "
               "around the rejected ones (mostly ordered, some inverted), several scales, batch sizes 1 to 32.",
               "bugType": "formula"},
    "Margin": {"category": "convention", "description": "A per-pair margin m subtracted from r_c − r_r (TRL 1.16.0's "
               "'margin' column; OpenRLHF 0.11.2 --model.margin_loss_enable); it is a constant, not differentiated.",
               "bugType": "formula",
               "effect": "The margin added instead of subtracted, placed outside the sigmoid, or broadcast against "
                         "the wrong axis.",
               "links": ["https://github.com/modelscope/ms-swift/pull/9927"]},
    "Centring": {"category": "convention", "description": "The centring term c·mean_b (r_c + r_r)² of Eisenstein et al. "
                 "(arXiv 2312.09244) eq. 2 as TRL 1.16.0 adds it: averaged over the B pairs, gradient "
                 "2c·(r_c + r_r)/B to both rewards.",
                 "bugType": "normalization",
                 "effect": "The centring term summed instead of averaged, or without its square.",
                 "links": ["https://github.com/huggingface/trl/issues/1931",
                           "https://github.com/huggingface/trl/pull/1932"]},
    "EqualRewards": {"category": "edge", "description": "r_c = r_r (and m = 0): every pair contributes log 2 exactly and "
                     "gradients ∓1/(2B).",
                     "bugType": "degenerate-input",
                     "effect": "r_c = r_r: every pair contributes log 2 exactly."},
    "SinglePair": {"category": "edge", "description": "B = 1: the mean is the pair's own loss.",
                   "bugType": "degenerate-input",
                   "effect": "B = 1: the mean is the pair's own loss; a wrong count shows here."},
    "HugeDifference": {"category": "numerics", "description": "|r_c − r_r| up to 2·10^4: −log σ(d) is ≈ −d or "
                       "≈ e^{−|d|}; σ(±d) and the log must be formed without overflow (e^{10^4} is infinite in "
                       "every dtype).",
                       "bugType": "overflow",
                       "effect": "σ and its log formed naively overflow or underflow at differences of 1e4."},
    "LogExpOverflow": {"category": "numerics", "description": "r_r − r_c above 88.7 (float32) or 709.8 (float64): the "
                       "literal log(1 + exp(r_r − r_c)) is infinite there; the loss is r_r − r_c + log1p(e^{r_c − r_r}).",
                       "bugType": "overflow",
                       "effect": "log(1 + exp(x)) overflows to inf beyond x = 709.8 (88.7 in float32); "
                                 "−log(sigmoid(d)) likewise once σ underflows.",
                       "links": ["https://github.com/deepspeedai/DeepSpeedExamples/issues/423"]},
    "LogExpAbsorption": {"category": "numerics", "description": "r_c − r_r between 17 and 60: e^{r_r − r_c} is below the "
                         "unit roundoff, so the literal log(1 + exp(·)) rounds the pair's loss to 0; log1p keeps it.",
                         "bugType": "cancellation",
                         "effect": "log(1 + exp(x)) with e^x below the unit roundoff rounds the loss to 0; log1p "
                                   "keeps it."},
    "LowPrecision": {"category": "edge", "description": "Rewards (and margins) exactly representable in bfloat16 and "
                     "float16, or float16 only, judged in those dtypes under the careful model "
                     "(conformance/compare.py): batch sizes 1 to 100, differences from one grid step to ±30, "
                     "rewards within ±30 so that (r_c + r_r)² stays inside float16's range.",
                     "bugType": "precision"},
    "InvalidInput": {"category": "invalid", "description": "Input outside the loss's domain; must be rejected.",
                     "bugType": "input-validation"},
}

GROUPS = {
    "paper": "Bradley & Terry 1952; InstructGPT (arXiv 2203.02155) §3.5 eq. 1: mean −log σ(r_c − r_r), no margin, "
             "no centring",
    "trl-1.16": "TRL 1.16.0 trainer/reward_trainer.py RewardTrainer.compute_loss: −logsigmoid(r_c − r_r − margin).mean() "
                "+ center_rewards_coefficient·mean((r_c + r_r)²) (RewardConfig.center_rewards_coefficient, default None, "
                "recommended 0.01; Eisenstein et al. arXiv 2312.09244 eq. 2)",
    "openrlhf-0.11.2-logexp": "OpenRLHF 0.11.2 models/loss.py LogExpLoss: log(1 + exp(r_r − r_c)).mean() (--model.loss_type "
                              "logexp); the catalog's log-exp form applies a given margin, which LogExpLoss ignores",
    "invalid": "inputs outside the domain (all conventions)",
}

CONVENTIONS = {"paper": {"form": "sigmoid"}, "trl-1.16": {"form": "sigmoid"},
               "openrlhf-0.11.2-logexp": {"form": "log-exp"}, "invalid": {}}
SCALES_OF_REWARDS = (0.5, 2.0, 8.0)


def _case(group, inputs, flags, comment, seed, recipe, params=None, low=False, provenance=None) -> Case:
    return Case(OBJ, inputs, params=params or {}, conventions=CONVENTIONS[group], group=group, flags=flags,
                comment=comment, low_precision=low, provenance=provenance or generated(seed, recipe))


def _pairs(r, b: int, spread: float):
    """Rejected rewards around 0 and chosen ones usually above them (an ordered preference, about one
    pair in five inverted)."""
    rejected = r.normal(0.0, spread, b)
    chosen = rejected + r.normal(0.5 * spread, spread, b)
    return chosen.tolist(), rejected.tolist()


def _random(group: str, i: int) -> Case:
    seed = 27000 + 100 * list(GROUPS).index(group) + i
    r = S.rng(seed)
    b = int(r.choice([1, 2, 3, 4, 8, 16, 32]))
    spread = float(SCALES_OF_REWARDS[i % len(SCALES_OF_REWARDS)])
    chosen, rejected = _pairs(r, b, spread)
    inputs = {"chosen_rewards": chosen, "rejected_rewards": rejected}
    params, flags, notes = {}, ("Random",), []
    with_margin = group == "trl-1.16" and i % 3 != 2 or group == "openrlhf-0.11.2-logexp" and i % 4 == 3
    if with_margin:
        inputs["margin"] = r.uniform(0.0, 2.0, b).round(2).tolist()
        flags += ("Margin",)
        notes.append("margin")
    if group == "trl-1.16" and i % 3 != 0:
        params["center_rewards_coefficient"] = float(r.choice([0.01, 0.1, 1.0]))
        flags += ("Centring",)
        notes.append(f"c={params['center_rewards_coefficient']:g}")
    if i % 2 == 0:   # half the random cases also run in float32
        inputs = {k: S.in_dtype(v, "float32") for k, v in inputs.items()}
        notes.append("float32")
    return _case(group, inputs, flags, f"random B={b}, spread {spread:g}" + "".join(", " + n for n in notes),
                 seed, "normal rejected rewards, chosen = rejected + normal offset", params)


def _edges(group: str) -> list[Case]:
    out = []
    trl = group == "trl-1.16"
    params = {"center_rewards_coefficient": 0.01} if trl else {}
    extra = ("Centring",) if trl else ()
    out.append(_case(group, {"chosen_rewards": [0.75, -2.5, 3.0], "rejected_rewards": [0.75, -2.5, 3.0]},
                     ("EqualRewards",) + extra, "equal rewards: each pair's loss is log 2", 0, "fixed", params))
    out.append(_case(group, {"chosen_rewards": [1.25], "rejected_rewards": [-0.5]}, ("SinglePair",) + extra,
                     "B = 1, d = 1.75", 0, "fixed", params))
    out.append(_case(group, {"chosen_rewards": [1e4, -1e4, 5000.0, 0.5], "rejected_rewards": [-1e4, 1e4, -5000.0, 0.25]},
                     ("HugeDifference",) + extra, "d = 2e4, −2e4, 1e4 and 0.25", 0, "fixed", params))
    out.append(_case(group, {"chosen_rewards": [0.0, -50.0, 2.0], "rejected_rewards": [100.0, 750.0, 1.0]},
                     ("LogExpOverflow",) + extra, "r_r − r_c = 100 (e^100 overflows float32), 800 (overflows "
                     "float64) and −1", 0, "fixed", params))
    out.append(_case(group, {"chosen_rewards": [20.0, 40.0, 60.0], "rejected_rewards": [0.0, 0.0, 0.0]},
                     ("LogExpAbsorption",) + extra, "r_c − r_r = 20, 40, 60: the pair losses are ≈ e^{−20}, e^{−40}, "
                     "e^{−60}", 0, "fixed", params))
    if group != "paper":
        out.append(_case(group, {"chosen_rewards": [2.0, 0.5, -1.0], "rejected_rewards": [1.0, 0.5, -3.0],
                                 "margin": [1.0, 0.0, 2.0]}, ("Margin", "EqualRewards") + extra,
                         "margins equal to the differences: d = 0 in every pair", 0, "fixed", params))
    return out


# ----------------------------------------------------------------------------- low precision

LOW_CASES = 60            # every fourth on the float16-only grid: 45 judged in bfloat16, 60 in float16
LOW_LENGTHS = (1, 2, 3, 5, 8, 16, 32, 64, 100)
LOW_GROUPS = ("paper", "trl-1.16", "openrlhf-0.11.2-logexp")


def _low(i: int) -> Case:
    seed, grid = 27500 + i, S.low_grid(i, every=4)
    group = LOW_GROUPS[i % len(LOW_GROUPS)]
    r = S.rng(seed)
    b = int(r.choice(LOW_LENGTHS))
    spread = float(r.choice([0.05, 0.5, 2.0, 8.0]))
    chosen, rejected = _pairs(r, b, spread)
    clip = lambda x: [max(-30.0, min(30.0, v)) for v in x]  # noqa: E731  (r_c + r_r)² < 65504
    inputs = {"chosen_rewards": S.in_low(clip(chosen), grid), "rejected_rewards": S.in_low(clip(rejected), grid)}
    params, flags = {}, ("Random", "LowPrecision")
    if group != "paper" and i % 2:
        inputs["margin"] = S.in_low(r.uniform(0.0, 2.0, b).tolist(), grid)
        flags += ("Margin",)
    if group == "trl-1.16" and i % 4 != 1:
        params["center_rewards_coefficient"] = float(r.choice([0.01, 0.125, 1.0]))
        flags += ("Centring",)
    return _case(group, inputs, flags, f"random B={b}, spread {spread:g}, inputs exact in {S.grid_note(grid)}",
                 seed, f"normal rewards rounded to the {grid} grid", params, low=True)


def _low_edges() -> list[Case]:
    out = []
    for group in LOW_GROUPS:
        params = {"center_rewards_coefficient": 0.125} if group == "trl-1.16" else {}
        extra = ("Centring",) if params else ()
        out.append(_case(group, {"chosen_rewards": [0.5, -2.0, 3.0, 0.0], "rejected_rewards": [0.5, -2.0, 3.0, 0.0]},
                         ("EqualRewards", "LowPrecision") + extra, "equal rewards, exact in bfloat16 and float16", 0,
                         "fixed", params, low=True))
        out.append(_case(group, {"chosen_rewards": [30.0, -30.0, 1.0, 0.00390625],
                                 "rejected_rewards": [-30.0, 30.0, 1.0078125, 0.0]},
                         ("HugeDifference", "LowPrecision") + extra,
                         "d = ±60 and one grid step (2^−7, 2^−8): e^{60} overflows float16", 0, "fixed", params,
                         low=True))
    return out


def cases() -> list[Case]:
    out = [_case("paper", {"chosen_rewards": [1.0], "rejected_rewards": [0.0]}, ("SinglePair",),
                 "one comparison with r_c − r_r = 1: −log σ(1) = log(1 + e^{−1}) (InstructGPT eq. 1, K = 2)", 0,
                 "fixed", provenance=paper(INSTRUCTGPT, "§3.5 eq. 1"))]
    for group in ("paper", "trl-1.16", "openrlhf-0.11.2-logexp"):
        out += [_random(group, i) for i in range(16)]
        out += _edges(group)
    out += [_low(i) for i in range(LOW_CASES)]
    out += _low_edges()
    ok = {"chosen_rewards": [1.0, 2.0], "rejected_rewards": [0.5, 3.0]}
    bad = [
        ({"chosen_rewards": [1.0, math.nan], "rejected_rewards": [0.5, 3.0]}, {}, {}, "NaN chosen reward"),
        ({"chosen_rewards": [1.0, 2.0], "rejected_rewards": [math.inf, 3.0]}, {}, {}, "+inf rejected reward"),
        ({**ok, "margin": [0.0, -math.inf]}, {}, {}, "−inf margin"),
        ({"chosen_rewards": [1.0, 2.0], "rejected_rewards": [0.5]}, {}, {}, "shapes disagree"),
        ({**ok, "margin": [0.5]}, {}, {}, "margin shape disagrees"),
        ({"chosen_rewards": [[1.0, 2.0]], "rejected_rewards": [[0.5, 3.0]]}, {}, {}, "rank-2 rewards"),
        ({"chosen_rewards": [], "rejected_rewards": []}, {}, {}, "no pair (B = 0)"),
        (ok, {"center_rewards_coefficient": -0.01}, {}, "negative centring coefficient"),
        (ok, {}, {"form": "logexp"}, "unknown form (OpenRLHF's flag value, not the catalog's)"),
    ]
    for inputs, params, conv, why in bad:
        out.append(Case(OBJ, inputs, params=params, conventions=conv, group="invalid", result="invalid",
                        flags=("InvalidInput",), comment=why, provenance=generated(0, "fixed")))
    return out


def _scale(kwargs, outputs, grads):
    """Per pair, the size of what rounding touches: the loss term −log σ(d) plus σ(−d) times the terms of
    d = r_c − r_r − m, and the centring term c·(r_c + r_r)² plus the rounding of r_c + r_r it squares;
    for the gradients, σ(−d)·(1 + σ(d)·size of d) + 2c·(|r_c| + |r_r|) (−σ(−d) + 2c·(r_c + r_r) may
    cancel). elements (the careful low-precision model's terms): Σ_b |term_b| / B."""
    c, r = kwargs["chosen_rewards"], kwargs["rejected_rewards"]
    m = kwargs.get("margin") or [0.0] * len(c)
    coef = mpmath.mpf(kwargs.get("center_rewards_coefficient") or 0)
    n = len(c)
    value, grad, elements = [], [], []
    for a, b, mb in zip(c, r, m):
        a, b, mb = mpmath.mpf(a), mpmath.mpf(b), mpmath.mpf(mb)
        d = a - b - mb
        size = abs(a) + abs(b) + abs(mb)
        push = 1 / (1 + mpmath.exp(d))
        term = mpmath.log1p(mpmath.exp(-d))
        centre = coef * (a + b) ** 2
        value.append(term + push * size + centre + 2 * coef * abs(a + b) * (abs(a) + abs(b)))
        grad.append(push * (1 + (1 - push) * size) + 2 * coef * (abs(a) + abs(b)))
        elements.append(term + centre)
    return {"loss": mpmath.fsum(value) / n, "grad:chosen_rewards": max(grad) / n,
            "grad:rejected_rewards": max(grad) / n, "elements:loss": mpmath.fsum(elements) / n}


SCALES = {OBJ: _scale}
