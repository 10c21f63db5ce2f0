"""Vectors for ``ppo.value_loss`` (PPO eq. 9; baselines ppo2's value clipping, as verl 0.9.1,
OpenRLHF 0.11.2 and TRL's former PPOTrainer compute it), and the family's entry point for
``ppo.entropy_bonus`` (its cases in ``ppo_entropy``).

Random tokens keep away from the two kinks of the clipped loss, so that rounding never decides a
branch: |V − V_old| stays a relative 2^−5 (low precision) or 1e-6 away from ε, and outside the band
the two squares differ by that much too. The kinks themselves are separate cases: V − V_old = ±ε
exactly (valid where the loss is differentiable there, acceptable where it is not) and
(V − R)² = (V_c − R)² outside the band (the max has no derivative there: acceptable).
"""
from __future__ import annotations

import math

import mpmath

from lossproof.conformance.generate import ppo_entropy
from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated, paper, rows_without_tokens
from lossproof.refimpl.exact import grpo as exact_grpo

OBJ = "ppo.value_loss"
PPO = "1707.06347"
MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")

NOTES = {
    "Random": {"category": "random", "description": "Random values, old values and returns from a fixed seed "
               "(returns around the values; old values within a few ε of them), ragged right-padded masks.",
               "bugType": "formula"},
    "Clipped": {"category": "convention", "description": "Tokens whose V − V_old lies outside [−ε, ε] and whose "
                "clipped branch (V_c − R)² is the larger: their loss is the clipped square and their gradient 0.",
                "bugType": "clamp",
                "effect": "The clipped value loss missing, with another range, or passing a gradient where the "
                          "clipped branch is taken.",
                "links": ["https://github.com/ray-project/ray/issues/2233",
                          "https://github.com/tensorflow/agents/issues/352"]},
    "BandEdge": {"category": "edge", "description": "V − V_old = ±ε exactly (V_old ∈ {0, ±ε}: every difference exact in "
                 "binary64) with R on the inner side: (V − R)² is the larger on both sides of the edge, the loss is "
                 "differentiable and its gradient 2s·(V − R). An implementation whose clip or max splits the gradient "
                 "at a tie (torch.max(torch.min(x, hi), lo); torch.max of two equal squares) returns a fraction of it.",
                 "bugType": "clamp",
                 "effect": "V − V_old exactly at ±ε: the clip's closedness decides the branch."},
    "BandEdgeKink": {"category": "edge", "description": "V − V_old = ±ε exactly with R beyond the edge: moving V out "
                     "of the band towards R hands the max to the constant clipped square, so the one-sided "
                     "derivatives are 2s·(V − R) and 0. The vector stores the closed band's 2s·(V − R) and is "
                     "acceptable.",
                     "bugType": "gradient",
                     "effect": "At the band's edge the one-sided derivatives differ: either is acceptable, another "
                               "is not."},
    "MaxTie": {"category": "edge", "description": "V outside the band and R halfway between V and V_c: (V − R)² = "
               "(V_c − R)², where the max has no derivative. Any gradient between 0 and 2s·(V − R) is a "
               "subgradient (torch.max splits it: s·(V − R)); the vector stores the unclipped branch's and is "
               "acceptable.",
               "bugType": "gradient",
               "effect": "Equal branches of the max: any subgradient between them is acceptable, another is not."},
    "MaskedValues": {"category": "edge", "description": "Padding holds values, old values and returns far from the "
                     "valid ones (±100, ±1000): they must not reach the loss or its gradient.",
                     "bugType": "masking",
                     "effect": "Padding values reaching the loss or its gradient."},
    "FullyMaskedRow": {"category": "edge", "description": "Rows without tokens under token-mean: they contribute "
                       "nothing.",
                       "bugType": "masking",
                       "effect": "A row without tokens counted in a token mean changes the denominator or gives 0/0 "
                                 "= NaN."},
    "FullyMaskedRowSeqMean": {"category": "edge", "description": "Rows without tokens under a sequence-mean "
                              "aggregation: left out of the mean over rows (verl 0.9.1 agg_loss); an implementation "
                              "that counts them divides by more rows, so the vector is acceptable.",
                              "bugType": "masking",
                              "effect": "A row without tokens counted in the mean over rows divides by more rows."},
    "SingleToken": {"category": "edge", "description": "B = T = 1.",
                    "bugType": "degenerate-input",
                    "effect": "A single token or class is a 0/0 or empty reduction for careless code: NaN or a "
                              "wrong count."},
    "Cancellation": {"category": "numerics", "description": "Values within 1e-9 of large returns (|R| ~ 1e3): the "
                     "squared error is ~1e-18, formed from the exact difference of the inputs.",
                     "bugType": "cancellation",
                     "effect": "Values within 1e-9 of large returns: the squared error must be formed from the "
                               "exact difference."},
    "LowPrecision": {"category": "edge", "description": "Inputs exactly representable in bfloat16 and float16, or "
                     "float16 only, judged in those dtypes under the careful model (conformance/compare.py): batch "
                     "up to 8 rows of up to 32 tokens, kinks kept a relative 2^−5 away.",
                     "bugType": "precision"},
    "InvalidInput": {"category": "invalid", "description": "Input outside the loss's domain; must be rejected.",
                     "bugType": "input-validation"},
}

GROUPS = {
    "paper": "PPO (Schulman et al. 2017, arXiv 1707.06347) §5 eq. 9: L^VF = (V − V^targ)², no ½, averaged over "
             "the time steps (token-mean), no clipping",
    "clip0.5-half": "verl 0.9.1 trainer/ppo/core_algos.py compute_value_loss (critic cliprange_value 0.5, "
                    "loss_agg_mode token-mean, 0.5·agg_loss(max(...))); OpenRLHF 0.11.2 models/loss.py ValueLoss "
                    "(--critic.value_clip 0.5, token_level_loss True, 0.5·aggregate_loss)",
    "clip0.2-half": "OpenAI baselines ppo2 model.py (vf_loss = .5·mean(max(...)), cliprange 0.2); TRL's former "
                    "PPOTrainer (trl/trainer/ppo_trainer.py, cliprange_value 0.2, 0.5·masked_mean; TRL 1.16.0 "
                    "ships no PPO trainer)",
    "half-unclipped": "OpenRLHF 0.11.2 ValueLoss with clip_eps None: 0.5·aggregate_loss((V − R)²)",
    "invalid": "inputs outside the domain (all conventions)",
}
for _mode in MODES[1:]:
    GROUPS[f"clip0.5-half-{_mode}"] = f"verl 0.9.1 compute_value_loss with critic loss_agg_mode '{_mode}' (agg_loss)"
GROUPS["clip0.5-half-seq-mean-token-mean"] += (" — agg_loss divides each row by |o_i| + 1e-8, a relative 1e-8/|o_i| "
                                               "this entry has no convention for")


def conventions(group: str) -> dict:
    if group == "paper":
        return {"clip_range_value": None, "half": False, "aggregation": "token-mean"}
    if group == "half-unclipped":
        return {"clip_range_value": None, "half": True, "aggregation": "token-mean"}
    if group == "invalid":
        return {}
    eps = 0.2 if group.startswith("clip0.2") else 0.5
    mode = group.removeprefix("clip0.5-half-") if group.startswith("clip0.5-half-") else "token-mean"
    return {"clip_range_value": eps, "half": True, "aggregation": mode}


def _case(group, inputs, flags, comment, seed, recipe, low=False, result="valid", provenance=None) -> Case:
    return Case(OBJ, inputs, conventions=conventions(group), group=group, flags=flags, comment=comment,
                low_precision=low, result=result, provenance=provenance or generated(seed, recipe))


def _clear_of_kinks(v, old, ret, eps, near, round_to):
    """Move V_old (rounded by ``round_to``) until neither kink is within the relative distance
    ``near``: the band edge |V − V_old| = ε and, outside the band, the tie of the two squares."""
    def bad(a, b, r):
        step = abs(a - b)
        if abs(step - eps) <= near * eps:
            return True
        if step <= eps:
            return False
        vc = b + math.copysign(eps, a - b)
        u, w = (a - r) ** 2, (vc - r) ** 2
        return abs(u - w) <= near * max(u, w, 1e-300)
    out = [row[:] for row in old]
    for i, row in enumerate(out):
        for j in range(len(row)):
            k = 0
            while bad(v[i][j], out[i][j], ret[i][j]):
                k += 1   # inside the band, then further in: (V − V_old) shrinks towards 0
                out[i][j] = round_to(v[i][j] - (v[i][j] - old[i][j]) * 0.5 ** k if k < 40 else v[i][j])
    return out


def _draw(r, b, t, eps, spread):
    """Values, returns near them, old values from well inside the band to several ε outside."""
    values = r.normal(0.0, spread, (b, t))
    returns = values + r.normal(0.0, spread, (b, t))
    step = r.normal(0.0, 1.5 * (eps or 0.5), (b, t))
    return values.tolist(), (values - step).tolist(), returns.tolist()


def _random(group: str, gi: int, i: int) -> Case:
    seed = 28000 + 100 * gi + i
    r = S.rng(seed)
    b = int(r.integers(1, 9))
    t = int(r.choice([1, 3, 8, 16, 32]))
    spread = float(r.choice([0.1, 1.0, 5.0]))
    eps = conventions(group)["clip_range_value"]
    v, old, ret = _draw(r, b, t, eps, spread)
    rnd = (lambda x: S.in_dtype(x, "float32")) if i % 2 == 0 else (lambda x: x)
    v, ret = rnd(v), rnd(ret)
    old = _clear_of_kinks(v, rnd(old), ret, eps, 1e-6, rnd) if eps else rnd(old)
    mask = S.mask(r, b, t)
    flags = ("Random",) + (("Clipped",) if eps and _clipped(v, old, ret, mask, eps) else ())
    return _case(group, {"values": v, "old_values": old, "returns": ret, "mask": mask}, flags,
                 f"random B={b}, T={t}, spread {spread:g}" + (", float32" if i % 2 == 0 else ""), seed,
                 "normal values, returns and steps, ragged mask")


def _clipped(v, old, ret, mask, eps) -> bool:
    """Whether some valid token takes the clipped branch."""
    for vr, orow, rr, mr in zip(v, old, ret, mask):
        for a, b, c, on in zip(vr, orow, rr, mr):
            if on and abs(a - b) > eps and (b + math.copysign(eps, a - b) - c) ** 2 > (a - c) ** 2:
                return True
    return False


def _edges(group: str) -> list[Case]:
    conv = conventions(group)
    eps = conv["clip_range_value"]
    empty_flag, empty_result = rows_without_tokens(conv)
    out = [_case(group, {"values": [[1.25]], "old_values": [[1.0]], "returns": [[0.5]], "mask": [[1]]},
                 ("SingleToken",), "B = T = 1", 0, "fixed")]
    r = S.rng(28900 + list(VALUE_GROUPS).index(group))
    v, old, ret = (S.in_dtype(x, "float32") for x in _draw(r, 4, 6, eps, 1.0))
    mask = S.mask(r, 4, 6, min_len=2)
    for i, row in enumerate(mask):
        for j, on in enumerate(row):
            if not on:
                v[i][j], old[i][j], ret[i][j] = (100.0, -1000.0, -100.0) if (i + j) % 2 else (-100.0, 1000.0, 100.0)
    if eps:
        old = _clear_of_kinks(v, old, ret, eps, 1e-6, lambda x: S.in_dtype(x, "float32"))
    out.append(_case(group, {"values": v, "old_values": old, "returns": ret, "mask": mask}, ("MaskedValues",),
                     "±100 and ±1000 at every masked position", 28900, "normal values; padding filled"))
    mask = [[1, 1, 0], [0, 0, 0], [1, 0, 0]]
    out.append(_case(group, {"values": [[0.5, -1.0, 7.0], [3.0, 3.0, 3.0], [2.0, 9.0, 9.0]],
                             "old_values": [[0.25, -1.25, 7.0], [0.0, 0.0, 0.0], [2.125, 9.0, 9.0]],
                             "returns": [[1.0, 0.0, 7.0], [1.0, 1.0, 1.0], [1.5, 9.0, 9.0]], "mask": mask},
                     (empty_flag,), "the middle row has no token", 0, "fixed", result=empty_result))
    out.append(_case(group, {"values": [[1000.0 + 2.0 ** -30, -512.0]], "old_values": [[1000.0, -512.0]],
                             "returns": [[1000.0, -512.0 + 2.0 ** -31]], "mask": [[1, 1]]}, ("Cancellation",),
                     "V − R = 2^−30 and −2^−31 at |R| ~ 1e3", 0, "fixed"))
    if eps:
        e = eps
        # V − V_old = ±ε exactly in binary64 (V_old ∈ {0, ±ε}, so V_old ± ε and V − V_old are exact).
        # Moving V out of the band away from R, (V − R)² stays the larger: the loss is differentiable there.
        out.append(_case(group, {"values": [[e, -e, 2 * e, -2 * e]], "old_values": [[0.0, 0.0, e, -e]],
                                 "returns": [[-3.0, 4.0, -1.0, 2.0]], "mask": [[1, 1, 1, 1]]}, ("BandEdge",),
                         "V − V_old = ε, −ε, ε, −ε, R on the inner side: gradient 2s·(V − R)", 0, "fixed"))
        # Moving out towards R, the clipped square takes over: a kink, one-sided derivatives 0 and 2s·(V − R).
        out.append(_case(group, {"values": [[e, -e, 2 * e, -2 * e]], "old_values": [[0.0, 0.0, e, -e]],
                                 "returns": [[3.0, -4.0, 1.5, -2.5]], "mask": [[1, 1, 1, 1]]}, ("BandEdgeKink",),
                         "V − V_old = ε, −ε, ε, −ε, R on the outer side: a kink (the closed band's 2s·(V − R) is "
                         "stored)", 0, "fixed", result="acceptable"))
        # clipped branch the larger: V moved away from V_old beyond ε, towards R
        out.append(_case(group, {"values": [[2.0, -3.0, 1.0]], "old_values": [[0.0, 0.0, 0.0]],
                                 "returns": [[3.0, -5.0, 0.0]], "mask": [[1, 1, 1]]}, ("Clipped",),
                         "V − V_old = 2, −3 towards R: the clipped squares are larger (gradient 0); the third token "
                         "moves away from R (unclipped branch)", 0, "fixed"))
        # the tie: R halfway between V and V_c
        vc = e
        out.append(_case(group, {"values": [[2.0, 0.25]], "old_values": [[0.0, 0.25]],
                                 "returns": [[(2.0 + vc) / 2, 1.0]], "mask": [[1, 1]]}, ("MaxTie",),
                         f"V = 2, V_old = 0, V_c = {vc:g}, R = {(2.0 + vc) / 2:g}: the two squares are equal", 0,
                         "fixed", result="acceptable"))
    return out


# ----------------------------------------------------------------------------- low precision

LOW_CASES = 60            # every fourth on the float16-only grid: 45 judged in bfloat16, 60 in float16
LOW_GROUPS = ("paper", "clip0.5-half", "clip0.2-half", "half-unclipped", "clip0.5-half-seq-mean-token-mean")


def _low(i: int) -> Case:
    seed, grid = 28500 + i, S.low_grid(i, every=4)
    group = LOW_GROUPS[i % len(LOW_GROUPS)]
    eps = conventions(group)["clip_range_value"]
    r = S.rng(seed)
    b = int(r.integers(1, 9))
    t = int(r.choice([1, 2, 5, 8, 16, 32]))
    spread = float(r.choice([0.1, 1.0, 8.0]))
    rnd = lambda x: S.in_low(x, grid)  # noqa: E731
    v, old, ret = (rnd(x) for x in _draw(r, b, t, eps, spread))
    if eps:
        old = _clear_of_kinks(v, old, ret, eps, S.NEAR_LOW, rnd)
    mask = S.mask(r, b, t)
    flags = ("Random", "LowPrecision") + (("Clipped",) if eps and _clipped(v, old, ret, mask, eps) else ())
    return _case(group, {"values": v, "old_values": old, "returns": ret, "mask": mask}, flags,
                 f"random B={b}, T={t}, spread {spread:g}, inputs exact in {S.grid_note(grid)}", seed,
                 f"normal values rounded to the {grid} grid", low=True)


def cases() -> list[Case]:
    out = [_case("paper", {"values": [[0.5, 2.0]], "old_values": [[0.5, 2.0]], "returns": [[1.5, 1.0]],
                           "mask": [[1, 1]]}, ("SingleToken",),
                 "two time steps with errors −1 and 1: L^VF = 1 (eq. 9, no ½)", 0, "fixed",
                 provenance=paper(PPO, "§5 eq. 9"))]
    for gi, group in enumerate(g for g in VALUE_GROUPS if g != "invalid"):
        out += [_random(group, gi, i) for i in range(12)]
        out += _edges(group)
    out += [_low(i) for i in range(LOW_CASES)]
    ok = {"values": [[1.0, 2.0]], "old_values": [[1.0, 2.0]], "returns": [[0.0, 0.0]], "mask": [[1, 1]]}
    bad = [
        ({**ok, "values": [[1.0, math.nan]]}, {}, "NaN value"),
        ({**ok, "returns": [[math.inf, 0.0]]}, {}, "+inf return"),
        ({**ok, "old_values": [[1.0, -math.inf]], "mask": [[1, 0]]}, {}, "−inf old value (masked)"),
        ({**ok, "mask": [[0, 0]]}, {}, "mask selects no token"),
        ({**ok, "mask": [[1, 2]]}, {}, "mask value 2"),
        ({**ok, "returns": [[0.0]]}, {}, "returns shape differs"),
        ({"values": [1.0, 2.0], "old_values": [1.0, 2.0], "returns": [0.0, 0.0], "mask": [1, 1]}, {},
         "rank-1 inputs"),
        (ok, {"clip_range_value": 0.0}, "clip_range_value = 0"),
        (ok, {"clip_range_value": -0.2}, "negative clip_range_value"),
        (ok, {"aggregation": "sum"}, "unknown aggregation"),
        (ok, {"half": 0.5}, "half is a flag, not a factor"),
    ]
    for inputs, conv, why in bad:
        out.append(Case(OBJ, inputs, conventions=conv, group="invalid", result="invalid", flags=("InvalidInput",),
                        comment=why, provenance=generated(0, "fixed")))
    return out + ppo_entropy.cases()


def _scale(kwargs, outputs, grads):
    """Per valid token, with w_t its aggregation weight and a_t the residual of the branch taken
    (V − R or V_c − R): the loss term s·a_t² plus what rounding the residual's inputs moves it by,
    2s·|a_t|·(|V| + |V_old| + |R| + ε); the gradient 2s·w_t·(|V − R| + |V| + |R|). elements (the
    careful low-precision model's terms): Σ_t w_t·ℓ_t."""
    eps = kwargs["clip_range_value"]
    s = mpmath.mpf(0.5) if kwargs["half"] else mpmath.mpf(1)
    mask = kwargs["mask"]
    zeros = [[0.0] * len(row) for row in mask]
    weights = exact_grpo.aggregate_vjp(1.0, zeros, mask, mode=kwargs["aggregation"])["values"]
    value, grad, elements = [], [mpmath.mpf(0)], []
    for i, row in enumerate(mask):
        for j, on in enumerate(row):
            if not on:
                continue
            v, old, ret = (mpmath.mpf(kwargs[k][i][j]) for k in ("values", "old_values", "returns"))
            w = abs(weights[i][j])
            a = v - ret
            if eps is not None and abs(v - old) > eps:
                ac = old + mpmath.sign(v - old) * eps - ret
                a = a if a * a >= ac * ac else ac
            size = abs(v) + abs(old) + abs(ret) + (eps or 0)
            value.append(w * s * (a * a + 2 * abs(a) * size))
            grad.append(2 * s * w * (abs(v - ret) + abs(v) + abs(ret)))
            elements.append(w * s * a * a)
    return {"loss": mpmath.fsum(value), "grad:values": max(grad), "elements:loss": mpmath.fsum(elements)}


SCALES = {OBJ: _scale, ppo_entropy.OBJ: ppo_entropy.scale}
VALUE_GROUPS = dict(GROUPS)
GROUPS.update(ppo_entropy.GROUPS)
GROUPS.update(ppo_entropy.EVERY_MEAN_GROUPS)
NOTES.update(ppo_entropy.NOTES)
