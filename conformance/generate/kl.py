"""Vectors for ``kl.estimator`` (Schulman 2020; DeepSeekMath §4.1.1 eq. 4)."""
from __future__ import annotations

import math

import mpmath

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, article, generated

OBJ = "kl.estimator"

NOTES = {
    "Article": {"category": "article", "description": "A number printed in the source article.",
                "bugType": "formula",
                "effect": "An implementation of another formula than the published one disagrees with the number "
                          "the source prints."},
    "Random": {"category": "random", "description": "Random sampled-token log-probabilities from a fixed seed.",
               "bugType": "formula",
               "links": ["https://github.com/Rolv-Arild/rocket-learn/pull/12",
                         "https://github.com/areal-project/AReaL/pull/408",
                         "https://github.com/DLR-RM/stable-baselines3/pull/419",
                         "https://github.com/verl-project/verl/pull/2953",
                         "https://github.com/rllm-org/rllm/pull/746",
                         "https://github.com/rllm-org/rllm/pull/747",
                         "https://github.com/PrimeIntellect-ai/prime-rl/pull/1697",
                         "https://github.com/google-research/seed_rl/issues/81"]},
    "EqualInputs": {"category": "edge", "description": "logp == ref_logp: every estimator is exactly 0.",
                    "bugType": "degenerate-input",
                    "effect": "Identical inputs must give exactly 0 and a zero gradient; a stray term or rounding "
                              "leaves a spurious loss."},
    "Cancellation": {"category": "numerics", "description": "|logp − ref_logp| ≤ 1e-6: k3 ≈ (log r)²/2 must be formed "
                     "without cancellation (expm1), judged against the magnitude of its terms.",
                     "bugType": "cancellation",
                     "effect": "A tiny result formed as the difference of large terms loses its leading digits (use "
                               "the stable form)."},
    "ExtremeRatio": {"category": "numerics", "description": "|log r| up to 50 (ratios e^±50) and log-probabilities "
                     "near log(1e-300).",
                     "bugType": "overflow",
                     "effect": "exp of a large log-ratio overflows to inf; inf·0 on an inactive branch turns the "
                               "loss or gradient into NaN.",
                     "links": ["https://github.com/verl-project/verl/issues/2928",
                               "https://github.com/verl-project/verl/pull/1779"]},
    "Clamped": {"category": "convention", "description": "Values beyond the clamp bound: the value is clipped and "
                "its gradient is zero.",
                "bugType": "clamp",
                "effect": "A clamp missing, at another bound, or passing a gradient where it holds changes the KL "
                          "penalty beyond the bound."},
    "LowPrecision": {"category": "edge", "description": "Inputs exactly representable in bfloat16 or float16 "
                     "(or both: bfloat16 values inside float16's range), judged in those dtypes: random lengths "
                     "up to 256, log-ratios from one grid step to ±28, values 2^−5 (relative) away from the "
                     "clamp. A case judged in float16 keeps r = e^{log r} inside float16's range (log r ≤ 11); "
                     "larger ratios are bfloat16 only. See conformance/compare.py for the careful tolerance "
                     "model.",
                     "bugType": "precision",
                     "links": ["https://github.com/OpenRLHF/OpenRLHF/pull/797"]},
    "AbsKink": {"category": "edge", "description": "abs at log r = 0 exactly (gradient 0 by definition, as "
                "torch.abs) and at log r = ±2^−30, ±2^−60 (gradient ∓1): the sign of ref_logp − logp is exact in "
                "every dtype, so the kink is never decided by rounding.",
                "bugType": "gradient",
                "effect": "The gradient of |x| at 0 differs between implementations (sqrt(x²) gives NaN, sign(x) "
                          "gives 0): a NaN or a wrong subgradient."},
    "InvalidInput": {"category": "invalid", "description": "Input outside the estimator's domain; must be rejected.",
                     "bugType": "input-validation"},
}

GROUPS = {
    "paper": "DeepSeekMath §4.1.1 eq. 4 (k3, no clamp); TRL 1.16.0 trainer/grpo_trainer.py (k3, no clamp)",
    "estimators": "Schulman 2020 k1 and k2 (no clamp)",
    "clamp10": "k1/k2/k3 clamped to ±10: OpenRLHF 0.11.2 models/utils.py compute_approx_kl; "
               "verl 0.9.1 trainer/ppo/core_algos.py kl_penalty (low_var_kl)",
    "verl-0.9.1-abs": "abs = |log r|: verl 0.9.1 trainer/ppo/core_algos.py kl_penalty_forward kl_penalty='abs' "
                      "(no clamp; no paper defines it); its gradient at log r = 0 is 0 (torch.abs)",
}


def _group(kind, clamp):
    if clamp is not None:
        return "clamp10"
    return "paper" if kind == "k3" else "estimators"


def cases() -> list[Case]:
    out = [Case(OBJ, {"logp": [math.log(0.5)], "ref_logp": [math.log(0.6)]}, conventions={"kind": "k1"},
                group="estimators", flags=("Article",),
                comment="sampled log-ratio of 'cat': log(0.5/0.6) ≈ −0.182",
                provenance=article("Un token muestreado o todo el vocabulario",
                                   "El logaritmo del cociente de «cat» muestreado por sí solo es aproximadamente −0.182"))]
    for kind in ("k1", "k2", "k3"):
        for clamp in (None, 10.0):
            conv = {"kind": kind, "clamp": clamp}
            g = _group(kind, clamp)
            for i in range(20):
                seed = 1000 + i
                r = S.rng(seed)
                n = int(r.integers(1, 65))
                lp = S.logprobs(r, n)
                ref = S.logprobs_near(r, lp, 0.5 if i % 2 else 2.0)
                if i % 2 == 0:  # half the random cases also run in float32
                    lp, ref = S.in_dtype(lp, "float32"), S.in_dtype(ref, "float32")
                out.append(Case(OBJ, {"logp": lp, "ref_logp": ref}, conventions=conv, group=g, flags=("Random",),
                                comment=f"random N={n}", provenance=generated(seed, "logprobs + normal offset")))
            for dtype in ("bfloat16", "float16"):
                r = S.rng(2000)
                lp = S.in_dtype(S.logprobs(r, 16), dtype)
                ref = S.in_dtype(S.near(r, lp, 1.0), dtype)
                out.append(Case(OBJ, {"logp": lp, "ref_logp": ref}, conventions=conv, group=g,
                                flags=("LowPrecision",), low_precision=True, comment=f"inputs exact in {dtype}",
                                provenance=generated(2000, f"logprobs rounded to {dtype}")))
            out.append(Case(OBJ, {"logp": [-1.5, -0.25, -7.0], "ref_logp": [-1.5, -0.25, -7.0]}, conventions=conv,
                            group=g, flags=("EqualInputs",), comment="identical inputs: value 0",
                            provenance=generated(0, "fixed")))
            out.append(Case(OBJ, {"logp": [-2.0, -0.5, -3.0], "ref_logp": [-2.0 + 1e-8, -0.5 - 3e-7, -3.0 + 1e-6]},
                            conventions=conv, group=g, flags=("Cancellation",), comment="log r ≈ 1e-8 … 1e-6",
                            provenance=generated(0, "fixed")))
            out.append(Case(OBJ, {"logp": [-50.0, 0.0, -690.0, -1e-3], "ref_logp": [0.0, -50.0, -689.5, -690.0]},
                            conventions=conv, group=g,
                            flags=("ExtremeRatio",) + (("Clamped",) if clamp else ()),
                            comment="ratios e^±50, probabilities ~1e-300", provenance=generated(0, "fixed")))
    out += _low_precision_cases()
    bad = [
        ({"logp": [float("nan"), -1.0], "ref_logp": [-1.0, -1.0]}, {}, "NaN log-probability"),
        ({"logp": [float("inf")], "ref_logp": [-1.0]}, {}, "+inf log-probability"),
        ({"logp": [-1.0], "ref_logp": [float("-inf")]}, {}, "−inf reference log-probability (infinite KL)"),
        ({"logp": [-1.0, -2.0], "ref_logp": [-1.0]}, {}, "shapes disagree"),
        ({"logp": [-1.0], "ref_logp": [-1.0]}, {"kind": "k4"}, "unknown estimator"),
        ({"logp": [-1.0], "ref_logp": [-2.0]}, {"clamp": 0.0}, "clamp must be positive"),
        ({"logp": [-1.0], "ref_logp": [-2.0]}, {"clamp": -10.0}, "negative clamp"),
    ]
    for inputs, conv, why in bad:
        out.append(Case(OBJ, inputs, conventions=conv, group="invalid", result="invalid", flags=("InvalidInput",),
                        comment=why, provenance=generated(0, "fixed")))
    return out + _abs_cases()


def _abs_cases() -> list[Case]:
    """verl's abs estimator, after the cases that were already there (they keep their places)."""
    conv, g = {"kind": "abs", "clamp": None}, "verl-0.9.1-abs"
    out = []
    for i in range(12):
        seed = 1500 + i
        r = S.rng(seed)
        n = int(r.integers(1, 65))
        lp = S.logprobs(r, n)
        ref = S.logprobs_near(r, lp, 0.5 if i % 2 else 2.0)
        if i % 2 == 0:
            lp, ref = S.in_dtype(lp, "float32"), S.in_dtype(ref, "float32")
        out.append(Case(OBJ, {"logp": lp, "ref_logp": ref}, conventions=conv, group=g, flags=("Random",),
                        comment=f"random N={n}", provenance=generated(seed, "logprobs + normal offset")))
    for dtype in ("bfloat16", "float16"):
        r = S.rng(2500)
        lp = S.in_dtype(S.logprobs(r, 16), dtype)
        ref = S.in_dtype(S.near(r, lp, 1.0), dtype)
        out.append(Case(OBJ, {"logp": lp, "ref_logp": ref}, conventions=conv, group=g, flags=("LowPrecision",),
                        low_precision=True, comment=f"inputs exact in {dtype}",
                        provenance=generated(2500, f"logprobs rounded to {dtype}")))
    out.append(Case(OBJ, {"logp": [-1.5, -0.25, -7.0, -3.0], "ref_logp": [-1.5, -0.25 - 2.0 ** -9, -7.0, -2.5]},
                    conventions=conv, group=g, flags=("AbsKink", "LowPrecision"), low_precision=True,
                    comment="log r = 0, −2^−9, 0, 0.5, exact in bfloat16 and float16", provenance=generated(0, "fixed")))
    out.append(Case(OBJ, {"logp": [-1.5, -0.25, -7.0, -2.0, -3.0],
                          "ref_logp": [-1.5, -0.25 + 2.0 ** -30, -7.0 - 2.0 ** -30, -2.0 + 2.0 ** -50, -3.0]},
                    conventions=conv, group=g, flags=("AbsKink",), comment="log r = 0, ±2^−30, 2^−50, 0",
                    provenance=generated(0, "fixed")))
    out.append(Case(OBJ, {"logp": [-2.0, -0.5, -3.0], "ref_logp": [-2.0 + 1e-8, -0.5 - 3e-7, -3.0 + 1e-6]},
                    conventions=conv, group=g, flags=("Cancellation",), comment="log r ≈ 1e-8 … 1e-6",
                    provenance=generated(0, "fixed")))
    out.append(Case(OBJ, {"logp": [-50.0, 0.0, -690.0, -1e-3], "ref_logp": [0.0, -50.0, -689.5, -690.0]},
                    conventions=conv, group=g, flags=("ExtremeRatio",), comment="ratios e^±50, probabilities ~1e-300",
                    provenance=generated(0, "fixed")))
    out.append(Case(OBJ, {"logp": [-1.0], "ref_logp": [-2.0]}, conventions={"kind": "Abs"}, group="invalid",
                    result="invalid", flags=("InvalidInput",), comment="unknown estimator (names are lower case)",
                    provenance=generated(0, "fixed")))
    return out


# ----------------------------------------------------------------------------- low precision
#
# Cases judged in bfloat16 and float16 (the careful model of conformance/compare.py): random
# lengths up to 256 on the two low-precision grids (sampling.in_low), offsets from tiny (one grid
# step: k3 ≈ (log r)²/2 formed without cancellation) to large; log-ratios up to ±25 (k3 = e^25 overflows
# float16, so that case is judged in bfloat16 only); values kept NEAR_LOW away from the clamp.

LOW_LENGTHS = (1, 2, 3, 5, 8, 16, 32, 64, 100, 128, 256)
LOW_RANDOM = 42
CLAMP_GROUPS = [(kind, clamp) for kind in ("k1", "k2", "k3") for clamp in (None, 10.0)]


def _estimate(x: float, kind: str) -> float:
    return {"k1": -x, "k2": x * x / 2, "k3": math.expm1(x) - x}[kind]


def _off_clamp(lp, ref, kind, clamp, grid):
    """Move the reference (re-rounded to the grid) until no estimate lies within NEAR_LOW of the
    clamp: the value is continuous there, its gradient is not."""
    ref = list(ref)
    for i in range(len(ref)):
        step = 0
        while clamp and abs(abs(_estimate(ref[i] - lp[i], kind)) / clamp - 1) < S.NEAR_LOW:
            step += 1
            ref[i] = S.in_low([ref[i] - 0.05 * step], grid)[0]
    return ref


def _low_case(kind, clamp, lp, ref, flags, comment, seed, recipe, grid):
    ref = _off_clamp(lp, ref, kind, clamp, grid)
    return Case(OBJ, {"logp": lp, "ref_logp": ref}, conventions={"kind": kind, "clamp": clamp},
                group=_group(kind, clamp), flags=flags + ("LowPrecision",), low_precision=True, comment=comment,
                provenance=generated(seed, recipe))


def _low_precision_cases() -> list[Case]:
    out = []
    for i in range(LOW_RANDOM):
        seed, grid = 21000 + i, S.low_grid(i)
        kind, clamp = CLAMP_GROUPS[i % len(CLAMP_GROUPS)]
        r = S.rng(seed)
        n = int(r.choice(LOW_LENGTHS))
        spread = float(r.choice([0.01, 0.1, 0.5, 2.0, 6.0]))
        lp = S.in_low(S.logprobs(r, n, low=-11.0), grid)   # log r ≤ 11: e^11 < float16's largest value
        ref = S.in_low(S.logprobs_near(r, lp, spread), grid)
        out.append(_low_case(kind, clamp, lp, ref, ("Random",), f"random N={n}, offset σ={spread:g}, inputs exact in "
                             f"{S.grid_note(grid)}", seed, f"logprobs + normal offset, rounded to the {grid} grid",
                             grid))
    for g, (kind, clamp) in enumerate(CLAMP_GROUPS):
        seed = 21100 + 10 * g
        r = S.rng(seed)
        lp = S.in_low(S.logprobs(r, 32), S.BOTH)
        # one grid step apart (the spacing of lp's binade): |log r| down to 2^−14
        ref = [min(a + float(d) * 2.0 ** (math.floor(math.log2(-a)) - 7), -2.0 ** -10)
               for a, d in zip(lp, r.choice([-1, 1], 32))]
        out.append(_low_case(kind, clamp, lp, S.in_low(ref, S.BOTH), ("Cancellation",),
                             "reference one grid step from logp: tiny log-ratios", seed,
                             "logprobs; reference one bfloat16 step away", S.BOTH))
        lp = S.in_low([-0.5, -11.25, -3.0, -12.0, -0.125, -9.0, -1.0, -20.0], S.BOTH)
        ref = S.in_low([-9.5, -0.25, -12.0, -3.0, -8.0, -0.5, -20.0, -9.0], S.BOTH)
        out.append(_low_case(kind, clamp, lp, ref, ("ExtremeRatio",) + (("Clamped",) if clamp else ()),
                             "log r between −19 and +11 (e^11 is inside float16's range)", seed + 1, "fixed",
                             S.BOTH))
        out.append(_low_case(kind, clamp, [-0.25, -25.0, -30.0], [-25.25, -2.0 ** -26, -2.0],
                             ("ExtremeRatio",) + (("Clamped",) if clamp else ()),
                             "log r = −25, 25, 28, bfloat16 only (r = e^25 is beyond float16's range; the "
                             "reference −2^−26 is below it)", seed + 2, "fixed", S.BOTH))
        out.append(_low_case(kind, clamp, lp, lp, ("EqualInputs",), "identical inputs: value 0", seed + 3,
                             "fixed", S.BOTH))
        out.append(_low_case(kind, clamp, [-0.25, -2.0, -0.5, -1.0], [-25.25, -24.0, -22.5, -21.0],
                             ("ExtremeRatio",) + (("Clamped",) if clamp else ()),
                             "log r = −25, −22, −22, −20: r below float16's range, the estimates inside it",
                             seed + 4, "fixed", S.BOTH))
    return out


def _k_scale(kwargs, outputs, grads):
    """Magnitude of the terms each estimator sums (k3 = e^{log r} − log r − 1 cancels near 0), and of
    what the rounding of log r = ref_logp − logp moves them by (as ``grpo._loss_scale``)."""
    lp, ref = kwargs["logp"], kwargs["ref_logp"]
    terms = []
    for a, b in zip(lp, ref):
        a, b = mpmath.mpf(a), mpmath.mpf(b)
        log_r = b - a
        size = abs(a) + abs(b)
        # k3: r = e^{log r} inherits the relative error of log r's absolute error u·size, r·u·size
        terms.append({"k1": size, "k2": size * abs(log_r),
                      "k3": mpmath.exp(log_r) + size + 1 + abs(mpmath.expm1(log_r)) * size,
                      "abs": size}[kwargs["kind"]])
    scale = max(terms)
    return {"value": scale, "grad:logp": max(scale, 1)}


SCALES = {OBJ: _k_scale}
GROUPS["invalid"] = "inputs outside the domain (all conventions)"
