"""Vectors for ``moe.router_z_loss`` (ST-MoE, Zoph et al. 2022, arXiv 2202.08906, §3.1 eq. 5), and the
family's entry point for ``moe.load_balancing`` (its cases in ``moe_balance``).

The objective has no convention: the groups say whether a mask is given (the paper and
transformers 5.25.0's router_z_loss_func average over every position; with a mask only the
selected tokens count).
"""
from __future__ import annotations

import math

import mpmath

from lossproof.conformance.generate import moe_balance
from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated, paper

OBJ = "moe.router_z_loss"
ST_MOE = "2202.08906"

NOTES = {
    "Random": {"category": "random", "description": "Random router logits from a fixed seed (a common offset per "
               "token plus per-expert noise, several scales), up to 32 tokens and 32 experts.",
               "bugType": "formula"},
    "Masked": {"category": "convention", "description": "A token mask: the mean runs over the selected tokens only; "
               "masked rows hold far-off logits (±50, ±1e3) that must not reach the loss or its gradient.",
               "bugType": "masking",
               "effect": "Masked tokens counted in the mean, or their far-off logits reaching the loss or gradient."},
    "SingleExpert": {"category": "edge", "description": "E = 1: lse(x) = x, loss mean x², gradient 2x/n.",
                     "bugType": "degenerate-input",
                     "effect": "E = 1: lse(x) = x; a careless shift or mean over experts breaks it."},
    "EqualLogits": {"category": "edge", "description": "A row of equal logits c: lse = c + log E, softmax 1/E.",
                    "bugType": "degenerate-input",
                    "effect": "Equal logits: lse = c + log E; an off-by-one expert count shows here."},
    "HugeLogits": {"category": "numerics", "description": "Router logits up to ±1e4: lse must be formed around the "
                   "row's maximum (e^{1e4} overflows every dtype); lse² ~ 1e8.",
                   "bugType": "overflow",
                   "effect": "exp of logits not shifted by the row maximum overflows; saturated rows lose their "
                             "small terms unless formed with expm1/log1p."},
    "LseNearZero": {"category": "numerics", "description": "Rows whose log-sum-exp is within 1e-16 of 0 (E equal logits "
                    "of −log E in binary64): lse² ~ 1e-33 comes from the cancellation of max and log Σ e^{x − max}, "
                    "judged against the size of those terms.",
                    "bugType": "cancellation",
                    "effect": "lse² ~ 1e-33 formed from the cancellation of max and log Σ e^{x − max}."},
    "SingleToken": {"category": "edge", "description": "N = 1.",
                    "bugType": "degenerate-input",
                    "effect": "N = 1: the mean over one token; a wrong count shows here."},
    "LowPrecision": {"category": "edge", "description": "Router logits exactly representable in bfloat16 and float16, "
                     "or float16 only, judged in those dtypes under the careful model (conformance/compare.py): up to "
                     "32 tokens and 16 experts, logits within ±40.",
                     "bugType": "precision"},
    "InvalidInput": {"category": "invalid", "description": "Input outside the loss's domain; must be rejected.",
                     "bugType": "input-validation"},
}

GROUPS = {
    "paper": "ST-MoE (arXiv 2202.08906) §3.1 eq. 5: (1/B)·Σ_i (log Σ_j e^{x_ij})² over all B tokens; transformers "
             "5.25.0 models/switch_transformers/modeling_switch_transformers.py router_z_loss_func (sum over the "
             "[groups, tokens] positions / their number)",
    "masked": "eq. 5 over the tokens a mask selects (padding is not a token); transformers' router_z_loss_func takes no "
              "mask and counts padded positions",
    "invalid": "inputs outside the domain",
}


def _case(group, inputs, flags, comment, seed, recipe, low=False, provenance=None) -> Case:
    return Case(OBJ, inputs, group=group, flags=flags, comment=comment, low_precision=low,
                provenance=provenance or generated(seed, recipe))


def _logits(r, n, e, spread):
    """Per token an offset (routers drift as a whole) plus per-expert noise."""
    return (r.normal(0.0, spread, (n, 1)) + r.normal(0.0, spread, (n, e))).tolist()


def _masked(r, n):
    mask = [int(v) for v in (r.random(n) < 0.7)]
    mask[int(r.integers(0, n))] = 1
    return mask


def _junk(logits, mask, size):
    return [row if on else [size if (i + j) % 2 else -size for j in range(len(row))]
            for i, (row, on) in enumerate(zip(logits, mask))]


def _random(i: int, masked: bool) -> Case:
    seed = 29000 + (100 if masked else 0) + i
    r = S.rng(seed)
    n = int(r.choice([1, 2, 4, 8, 16, 32]))
    e = int(r.choice([2, 4, 8, 16, 32]))
    spread = float(r.choice([0.1, 1.0, 5.0]))
    logits = _logits(r, n, e, spread)
    inputs = {"router_logits": logits}
    flags = ("Random",)
    if masked:
        mask = _masked(r, n)
        inputs = {"router_logits": _junk(logits, mask, 1e3 if i % 2 else 50.0), "mask": mask}
        flags += ("Masked",)
    if i % 2 == 0:
        inputs["router_logits"] = S.in_dtype(inputs["router_logits"], "float32")
    return _case("masked" if masked else "paper", inputs, flags,
                 f"random N={n}, E={e}, spread {spread:g}" + (", float32" if i % 2 == 0 else ""), seed,
                 "normal offset per token plus normal noise per expert")


def _edges() -> list[Case]:
    out = []
    for group in ("paper", "masked"):
        mask = {"mask": [1, 0, 1]} if group == "masked" else {}
        flags = ("Masked",) if mask else ()
        out.append(_case(group, {"router_logits": [[0.5], [-7.0], [3.0]], **mask}, ("SingleExpert",) + flags,
                         "E = 1: lse = x", 0, "fixed"))
        out.append(_case(group, {"router_logits": [[2.0, 2.0, 2.0, 2.0], [-1.0, -1.0, -1.0, -1.0], [0.0, 0.0, 0.0, 0.0]],
                                 **mask}, ("EqualLogits",) + flags, "equal logits: lse = c + log 4", 0, "fixed"))
        out.append(_case(group, {"router_logits": [[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4], [9999.5, 1e4, -3.0]], **mask},
                         ("HugeLogits",) + flags, "logits ±1e4", 0, "fixed"))
        c2 = -math.log(2.0)
        out.append(_case(group, {"router_logits": [[c2, c2], [c2, c2 + 2.0 ** -40], [c2, c2]], **mask},
                         ("LseNearZero",) + flags, "E = 2 logits of −log 2 (binary64, one moved by 2^−40): "
                         "lse ≈ 1e-17 and 5e-13", 0, "fixed"))
    out.append(_case("paper", {"router_logits": [[0.25, -1.5, 2.0, 0.0]]}, ("SingleToken",), "N = 1", 0, "fixed"))
    return out


# ----------------------------------------------------------------------------- low precision

LOW_CASES = 60            # every fourth on the float16-only grid: 45 judged in bfloat16, 60 in float16


def _low(i: int) -> Case:
    seed, grid = 29500 + i, S.low_grid(i, every=4)
    r = S.rng(seed)
    n = int(r.choice([1, 3, 8, 16, 32]))
    e = int(r.choice([2, 4, 8, 16]))
    spread = float(r.choice([0.05, 0.5, 2.0, 8.0]))
    logits = [[max(-40.0, min(40.0, v)) for v in row] for row in _logits(r, n, e, spread)]
    masked = i % 3 == 2
    inputs = {"router_logits": logits}
    flags = ("Random", "LowPrecision")
    if masked:
        mask = _masked(r, n)
        inputs = {"router_logits": _junk(logits, mask, 40.0), "mask": mask}
        flags += ("Masked",)
    inputs["router_logits"] = S.in_low(inputs["router_logits"], grid)
    return _case("masked" if masked else "paper", inputs, flags,
                 f"random N={n}, E={e}, spread {spread:g}, logits exact in {S.grid_note(grid)}", seed,
                 f"normal router logits rounded to the {grid} grid", low=True)


def cases() -> list[Case]:
    out = [_case("paper", {"router_logits": [[0.0, 0.0], [1.0, -1.0]]}, ("EqualLogits",),
                 "two tokens, two experts: lse = log 2 and log(e + 1/e)", 0, "fixed",
                 provenance=paper(ST_MOE, "§3.1 eq. 5"))]
    out += [_random(i, masked) for masked in (False, True) for i in range(14)]
    out += _edges()
    out += [_low(i) for i in range(LOW_CASES)]
    ok = [[1.0, 2.0], [0.5, -0.5]]
    bad = [
        ({"router_logits": [[1.0, math.nan], [0.5, -0.5]]}, "NaN logit"),
        ({"router_logits": [[1.0, math.inf], [0.5, -0.5]]}, "+inf logit"),
        ({"router_logits": [[1.0, -math.inf], [0.5, -0.5]]}, "−inf logit (a router logit is finite)"),
        ({"router_logits": [1.0, 2.0]}, "rank-1 logits"),
        ({"router_logits": [[], []]}, "no expert (E = 0)"),
        ({"router_logits": ok, "mask": [1, 1, 0]}, "mask shape differs"),
        ({"router_logits": ok, "mask": [1, 2]}, "mask value 2"),
        ({"router_logits": ok, "mask": [0, 0]}, "mask selects no token"),
    ]
    for inputs, why in bad:
        out.append(Case(OBJ, inputs, group="invalid", result="invalid", flags=("InvalidInput",), comment=why,
                        provenance=generated(0, "fixed")))
    return out + moe_balance.cases()


def _scale(kwargs, outputs, grads):
    """Per selected token, with lse its log-sum-exp and M its largest logit: the term lse² plus what the
    rounding of lse = M + log Σ e^{x − M} moves it by, 2|lse|·(|M| + |lse| + 1); per gradient entry
    2·p·(|lse| + 1)·(1 + |M| + |x − lse|)/n (p = softmax: its relative error grows with |x − lse|).
    elements (the careful low-precision model's terms): Σ lse²/n."""
    rows = kwargs["router_logits"]
    mask = kwargs.get("mask") or [1] * len(rows)
    n = sum(mask)
    value, grad, elements = [], [mpmath.mpf(0)], []
    for row, on in zip(rows, mask):
        if not on:
            continue
        x = [mpmath.mpf(v) for v in row]
        top = max(x)
        lse = top + mpmath.log(mpmath.fsum(mpmath.exp(v - top) for v in x))
        value.append(lse * lse + 2 * abs(lse) * (abs(top) + abs(lse) + 1))
        elements.append(lse * lse)
        grad += [2 * mpmath.exp(v - lse) * (abs(lse) + 1) * (1 + abs(top) + abs(v - lse)) / n for v in x]
    return {"loss": mpmath.fsum(value) / n, "grad:router_logits": max(grad), "elements:loss": mpmath.fsum(elements) / n}


SCALES = {OBJ: _scale, moe_balance.OBJ: moe_balance.scale}
GROUPS.update(moe_balance.GROUPS)
GROUPS.update(moe_balance.FRACTION_GROUPS)
NOTES.update(moe_balance.NOTES)
