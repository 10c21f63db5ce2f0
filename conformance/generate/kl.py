"""Vectors for ``kl.estimator`` (Schulman 2020; DeepSeekMath §4.1.1 eq. 4)."""
from __future__ import annotations

import math

import mpmath

from conformance.generate import sampling as S
from conformance.generate.case import Case, article, generated

OBJ = "kl.estimator"

NOTES = {
    "Article": {"category": "article", "description": "A number printed in the source article."},
    "Random": {"category": "random", "description": "Random sampled-token log-probabilities from a fixed seed."},
    "EqualInputs": {"category": "edge", "description": "logp == ref_logp: every estimator is exactly 0."},
    "Cancellation": {"category": "numerics", "description": "|logp − ref_logp| ≤ 1e-6: k3 ≈ (log r)²/2 must be formed "
                     "without cancellation (expm1), judged against the magnitude of its terms."},
    "ExtremeRatio": {"category": "numerics", "description": "|log r| up to 50 (ratios e^±50) and log-probabilities "
                     "near log(1e-300)."},
    "Clamped": {"category": "convention", "description": "Values beyond the clamp bound: the value is clipped and "
                "its gradient is zero."},
    "LowPrecision": {"category": "edge", "description": "Inputs exactly representable in bfloat16 or float16."},
    "InvalidInput": {"category": "invalid", "description": "Input outside the estimator's domain; must be rejected."},
}

GROUPS = {
    "paper": "DeepSeekMath §4.1.1 eq. 4 (k3, no clamp); TRL 1.16.0 trainer/grpo_trainer.py (k3, no clamp)",
    "estimators": "Schulman 2020 k1 and k2 (no clamp)",
    "clamp10": "k1/k2/k3 clamped to ±10: OpenRLHF 0.11.2 models/utils.py compute_approx_kl; "
               "verl 0.9.1 trainer/ppo/core_algos.py kl_penalty (low_var_kl)",
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
    return out


def _k_scale(kwargs, outputs, grads):
    """Magnitude of the terms each estimator sums (k3 = e^{log r} − log r − 1 cancels near 0)."""
    lp, ref = kwargs["logp"], kwargs["ref_logp"]
    terms = []
    for a, b in zip(lp, ref):
        a, b = mpmath.mpf(a), mpmath.mpf(b)
        log_r = b - a
        size = abs(a) + abs(b)
        terms.append({"k1": size, "k2": size * abs(log_r), "k3": mpmath.exp(log_r) + size + 1}[kwargs["kind"]])
    scale = max(terms)
    return {"value": scale, "grad:logp": max(scale, 1)}


SCALES = {OBJ: _k_scale}
GROUPS["invalid"] = "inputs outside the domain (all conventions)"
