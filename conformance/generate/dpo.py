"""Vectors for ``dpo.loss`` (Rafailov et al. 2023 §4 eq. 7; IPO eq. 17; cDPO; robust DPO).

The only convention is ``loss_type``: one group per loss type. ``beta`` and
``label_smoothing`` are arguments and vary inside a group. The implicit rewards are
metrics that every library detaches, so their cotangents are zero (see note
``DetachedRewards``); the loss cotangents are random multiples of 1/64 (exact in every dtype).
"""
from __future__ import annotations

import math

import mpmath

from conformance.generate import sampling as S
from conformance.generate.case import Case, article, generated

OBJ = "dpo.loss"
INPUTS = ("policy_chosen_logps", "policy_rejected_logps", "reference_chosen_logps", "reference_rejected_logps")
DPO_SECTION = "DPO: una pérdida logística sobre dos logaritmos de cocientes"

NOTES = {
    "Article": {"category": "article", "description": "A number printed in the source article: two pairs with "
                "gains (+2, −1) and (−1, −4) have the same margin Δ = 3 and therefore the same loss."},
    "Random": {"category": "random", "description": "Random sequence log-probabilities (sums over tokens, down to "
               "about −300) with references drawn near them so that βΔ spans the logistic's curved region; "
               "B up to 16 pairs; half the cases rounded to float32."},
    "DetachedRewards": {"category": "convention", "description": "chosen_rewards = β·(π_c − ref_c) and "
                        "rejected_rewards = β·(π_r − ref_r) are logged metrics that TRL, OpenRLHF and Liger "
                        "detach: their cotangents are zero, so the gradient comes from the losses alone "
                        "(random cotangents)."},
    "LabelSmoothing": {"category": "convention", "description": "label_smoothing ε > 0 with loss_type 'sigmoid': "
                       "the conservative loss −(1−ε)·log σ(βΔ) − ε·log σ(−βΔ) (cDPO, as OpenRLHF 0.11.2 DPOLoss "
                       "applies it). TRL 1.16.0 and Liger 0.8.5 ignore label_smoothing for 'sigmoid': their "
                       "adapters must not declare these cases."},
    "HugeMargin": {"category": "numerics", "description": "βΔ = ±1e4: log σ must be formed without overflow "
                   "(log σ(1e4) ≈ −e^−1e4 underflows to 0; log σ(−1e4) = −1e4 up to e^−1e4)."},
    "ZeroMargin": {"category": "edge", "description": "Δ = 0 exactly (equal gains): sigmoid loss log 2, gradient "
                   "±β/2 on the logistic losses."},
    "LargeLogps": {"category": "numerics", "description": "Sequence log-probabilities near −1e4 with a margin of "
                   "order 1: the gains cancel, and implementations that group the four terms differently "
                   "(π_c − π_r) − (ref_c − ref_r) round differently; judged against the size of the terms."},
    "HingeKink": {"category": "acceptable", "description": "βΔ at (or within rounding of) the hinge kink "
                  "1 − βΔ = 0: the loss is 0 either way, but the gradient is −β on the closed active branch "
                  "(the exact reference) and 0 for torch.relu (TRL, Liger). Either is accepted."},
    "LowPrecision": {"category": "edge", "description": "Inputs exactly representable in bfloat16 or float16 "
                     "(or both: bfloat16 values inside float16's range), judged in those dtypes: random batches "
                     "of up to 64 pairs with log-probabilities down to −300, margins of ±1e4, log-probabilities "
                     "near −1e4. A case judged in float16 keeps the margin Δ inside float16's range. See "
                     "conformance/compare.py for the careful tolerance model."},
    "InvalidInput": {"category": "invalid", "description": "Input or parameter outside the loss's domain "
                     "(NaN/inf log-probabilities, shapes that disagree, β ≤ 0, label_smoothing outside "
                     "[0, 0.5), unknown loss type); must be rejected."},
}

GROUPS = {
    "paper": "DPO (Rafailov et al. 2023) §4 eq. 7, loss_type 'sigmoid'; TRL 1.16.0 trainer/dpo_trainer.py "
             "loss_type='sigmoid' (label_smoothing 0 only); Liger 0.8.5 chunked_loss/dpo_loss.py 'sigmoid' "
             "(label_smoothing 0 only); OpenRLHF 0.11.2 models/loss.py DPOLoss (ipo=False; label_smoothing = cDPO)",
    "cdpo": "cDPO (Mitchell 2023): −(1−ε)·log σ(βΔ) − ε·log σ(−βΔ); OpenRLHF 0.11.2 models/loss.py DPOLoss "
            "with label_smoothing ε",
    "hinge": "SLiC hinge (Zhao et al. 2023) max(0, 1 − βΔ); TRL 1.16.0 trainer/dpo_trainer.py loss_type='hinge'; "
             "Liger 0.8.5 chunked_loss/dpo_loss.py 'hinge' (torch.relu: gradient 0 at the kink)",
    "ipo": "IPO (Azar et al. 2023) eq. 17 (Δ − 1/(2β))²; OpenRLHF 0.11.2 models/loss.py DPOLoss(ipo=True); "
           "TRL 1.16.0 trainer/dpo_trainer.py loss_type='ipo' when given per-token-averaged log-probabilities "
           "(TRL divides each gain by its completion length before the loss)",
    "robust": "robust DPO (Chowdhury et al. 2024) eq. 8 (−(1−ε)·log σ(βΔ) + ε·log σ(−βΔ))/(1−2ε); TRL 1.16.0 "
              "trainer/dpo_trainer.py loss_type='robust'; Liger 0.8.5 chunked_loss/dpo_loss.py 'robust'",
    "invalid": "inputs outside the domain (all loss types)",
}

LOSS_TYPES = {"paper": "sigmoid", "cdpo": "cdpo", "hinge": "hinge", "ipo": "ipo", "robust": "robust"}
SMOOTHED = ("cdpo", "robust")


def _cotangents(r, batch: int) -> dict:
    """Random loss cotangents (multiples of 1/64 in [−2, 2], exact in every dtype); the rewards are
    detached metrics (zero cotangent)."""
    losses = [int(k) / 64 for k in r.integers(-128, 129, size=batch)]
    return {"losses": losses, "chosen_rewards": [0.0] * batch, "rejected_rewards": [0.0] * batch}


def _inputs(pc, pr, rc, rr) -> dict:
    return dict(zip(INPUTS, (pc, pr, rc, rr)))


def _margins(inputs) -> list:
    pc, pr, rc, rr = (inputs[n] for n in INPUTS)
    return [(a - c) - (b - d) for a, b, c, d in zip(pc, pr, rc, rr)]


def _random_case(group: str, seed: int, dtype: str | None, grid: str | None = None, max_batch: int = 16) -> Case:
    """``dtype`` float32 rounds the inputs to float32; ``grid`` to a low-precision grid
    (sampling.in_low), keeping βΔ NEAR_LOW away from the hinge's kink."""
    r = S.rng(seed)
    loss_type = LOSS_TYPES[group]
    batch = int(r.integers(1, max_batch + 1))
    beta = float(r.choice([0.01, 0.05, 0.1, 0.1, 0.5, 1.0]))
    depth = float(r.choice([5.0, 50.0, 300.0]))
    spread = min(3.0 / beta, depth)  # βΔ of order a few units
    if loss_type in SMOOTHED:
        smoothing = float(r.choice([0.0, 0.1, 0.25, 0.4]))
    else:
        smoothing = 0.0
    while True:
        pc = S.logprobs(r, batch, low=-depth)
        pr = S.logprobs(r, batch, low=-depth)
        rc = S.logprobs_near(r, pc, spread / 2)
        rr = S.logprobs_near(r, pr, spread / 2)
        if dtype:
            pc, pr, rc, rr = (S.in_dtype(x, dtype) for x in (pc, pr, rc, rr))
        if grid:
            pc, pr, rc, rr = (S.in_low(x, grid) for x in (pc, pr, rc, rr))
        inputs = _inputs(pc, pr, rc, rr)
        # A hinge case whose βΔ lies within rounding of the kink would make the gradient
        # implementation-defined: redraw (HingeKink covers the kink on purpose).
        near = S.NEAR_LOW if grid else 1e-3
        if loss_type != "hinge" or all(abs(1 - beta * d) > near for d in _margins(inputs)):
            break
    rounded = f", inputs in {dtype}" if dtype else f", inputs exact in {S.grid_note(grid)}" if grid else ""
    return Case(OBJ, inputs, params={"beta": beta, "label_smoothing": smoothing},
                conventions={"loss_type": loss_type}, group=group,
                flags=("Random", "DetachedRewards") + (("LowPrecision",) if grid else ()),
                comment=f"random B={batch}, β={beta:g}, ε={smoothing:g}" + rounded,
                cotangents=_cotangents(r, batch), low_precision=grid is not None,
                provenance=generated(seed, "sequence logprobs; references = policy + normal offset"
                                     + (f"; rounded to the {grid} grid" if grid else "")))


def _fixed(group, inputs, flags, comment, beta=0.1, smoothing=0.0, result="valid", seed=0, low=False):
    r = S.rng(seed)
    return Case(OBJ, inputs, params={"beta": beta, "label_smoothing": smoothing},
                conventions={"loss_type": LOSS_TYPES[group]}, group=group, flags=flags + ("DetachedRewards",),
                comment=comment, result=result, low_precision=low,
                cotangents=_cotangents(r, len(inputs[INPUTS[0]])), provenance=generated(seed, "fixed"))


def _edges(group: str, index: int) -> list[Case]:
    loss_type = LOSS_TYPES[group]
    smoothing = 0.1 if loss_type in SMOOTHED else 0.0
    out = []
    # βΔ = +1e4 and −1e4 with β = 0.1: Δ = ±1e5 from gains of ±5e4.
    huge = _inputs([-1.0, -50001.0], [-50001.0, -1.0], [-50001.0, -1.0], [-1.0, -50001.0])
    out.append(_fixed(group, huge, ("HugeMargin",), "βΔ = +1e4 and −1e4 (β = 0.1)", smoothing=smoothing,
                      seed=10 + index))
    zero = _inputs([-12.5, -3.0, -40.0], [-7.25, -9.0, -41.0], [-11.5, -3.0, -39.0], [-6.25, -9.0, -40.0])
    out.append(_fixed(group, zero, ("ZeroMargin",), "Δ = 0 exactly in every pair", smoothing=smoothing,
                      seed=20 + index))
    big = _inputs([-10234.5, -9876.25, -12001.0], [-10240.0, -9875.0, -11999.5],
                  [-10235.75, -9876.0, -12000.0], [-10241.0, -9876.5, -11999.0])
    out.append(_fixed(group, big, ("LargeLogps",), "log-probabilities near −1e4, margins of order 1",
                      smoothing=smoothing, seed=30 + index))
    for k, dtype in enumerate(("bfloat16", "float16")):
        seed = 40 + 10 * index + k
        r = S.rng(seed)
        n = 8
        pc = S.in_dtype(S.logprobs(r, n, low=-60.0), dtype)
        pr = S.in_dtype(S.logprobs(r, n, low=-60.0), dtype)
        rc = S.in_dtype(S.logprobs_near(r, pc, 4.0), dtype)
        rr = S.in_dtype(S.logprobs_near(r, pr, 4.0), dtype)
        beta = 0.25
        inputs = _inputs(pc, pr, rc, rr)
        if loss_type == "hinge":  # keep away from the kink (βΔ = 1 ⇔ Δ = 4)
            assert all(abs(1 - beta * d) > 1e-3 for d in _margins(inputs))
        out.append(_fixed(group, inputs, ("LowPrecision",), f"inputs exact in {dtype}, β = 0.25", beta=beta,
                          smoothing=smoothing, seed=seed, low=True))
    if loss_type == "hinge":
        # β = 0.5, Δ = 2: βΔ = 1 exactly (binary64 and every narrower dtype).
        kink = _inputs([-3.0, -2.0], [-5.0, -6.0], [-4.0, -3.0], [-4.0, -5.0])
        out.append(_fixed(group, kink, ("HingeKink",), "βΔ = 1 exactly (β = 0.5, Δ = 2)", beta=0.5,
                          result="acceptable", seed=50))
        # β = 0.1, Δ = 10: βΔ = 1 + 5.6e−17 exactly, but 0.1·10 rounds to 1 in binary64.
        near = _inputs([-3.0], [-12.0], [-4.0], [-3.0])
        out.append(_fixed(group, near, ("HingeKink",), "βΔ = 0.1·10 = 1 + 5.6e−17 (rounds to 1)", beta=0.1,
                          result="acceptable", seed=51))
    return out


def cases() -> list[Case]:
    out = []
    # Article: reference −10 for every response; gains (+2, −1) and (−1, −4) → Δ = 3 in both pairs.
    out.append(Case(OBJ, _inputs([-8.0, -11.0], [-11.0, -14.0], [-10.0, -10.0], [-10.0, -10.0]),
                    params={"beta": 0.1, "label_smoothing": 0.0}, conventions={"loss_type": "sigmoid"},
                    group="paper", flags=("Article", "DetachedRewards"),
                    comment="gains (+2, −1) and (−1, −4): both Δ = 3, same loss −log σ(0.3)",
                    cotangents={"losses": [1.0, 1.0], "chosen_rewards": [0.0, 0.0], "rejected_rewards": [0.0, 0.0]},
                    provenance=article(DPO_SECTION, "Preferida más 2 y rechazada menos 1 dan una diferencia de "
                                       "ganancias de 3. Preferida menos 1 y rechazada menos 4 también dan 3")))
    for index, group in enumerate(LOSS_TYPES):
        for i in range(14):
            seed = 5000 + 100 * index + i
            out.append(_random_case(group, seed, "float32" if i % 2 == 0 else None))
        out.extend(_edges(group, index))
    for i in range(3):  # cDPO through the 'sigmoid' loss type (OpenRLHF's DPOLoss form)
        out.append(_smoothed(_random_case("paper", 5900 + i, None if i else "float32"), (0.1, 0.25, 0.4)[i]))
    out.extend(_low_precision_cases())
    out.extend(_invalid())
    return out


def _smoothed(case: Case, smoothing: float) -> Case:
    case.params["label_smoothing"] = smoothing
    case.flags = case.flags + ("LabelSmoothing",)
    case.comment += f" → ε = {smoothing:g}"
    return case


# ----------------------------------------------------------------------------- low precision
#
# Cases judged in bfloat16 and float16 (the careful model of conformance/compare.py): random
# batches of up to 64 pairs on the two low-precision grids (sampling.in_low), cDPO through
# 'sigmoid', and per loss type a margin of ±1e4 (its IPO loss, 1e8, is beyond float16), equal
# gains and log-probabilities near −1e4 (float16 grid: spacing 8 there).

LOW_RANDOM = 42


def _low_precision_cases() -> list[Case]:
    out = []
    for i in range(LOW_RANDOM):
        group = list(LOSS_TYPES)[i % len(LOSS_TYPES)]
        out.append(_random_case(group, 22000 + i, None, grid=S.low_grid(i), max_batch=64))
    for i in range(4):
        out.append(_smoothed(_random_case("paper", 22100 + i, None, grid=S.low_grid(i), max_batch=64),
                             (0.1, 0.25, 0.4, 0.05)[i]))
    huge = _inputs([-64.0, -5184.0], [-5184.0, -64.0], [-5184.0, -64.0], [-64.0, -5184.0])
    zero = _inputs([-12.5, -3.0, -40.0], [-7.25, -9.0, -41.0], [-11.5, -3.0, -39.0], [-6.25, -9.0, -40.0])
    big = _inputs([-10232.0, -9872.0, -12000.0], [-10240.0, -9880.0, -11992.0],
                  [-10240.0, -9880.0, -12008.0], [-10232.0, -9872.0, -12000.0])
    for index, group in enumerate(LOSS_TYPES):
        smoothing = 0.1 if LOSS_TYPES[group] in SMOOTHED else 0.0
        low = ("LowPrecision",)
        out.append(_fixed(group, huge, ("HugeMargin",) + low, "βΔ = ±10240 (β = 1; Δ inside float16's range)",
                          beta=1.0, smoothing=smoothing, seed=22200 + index, low=True))
        out.append(_fixed(group, zero, ("ZeroMargin",) + low, "Δ = 0 exactly in every pair (β = 0.25)", beta=0.25,
                          smoothing=smoothing, seed=22210 + index, low=True))
        out.append(_fixed(group, big, ("LargeLogps",) + low, "log-probabilities near −1e4 on the float16 grid, "
                          "βΔ = 2, 2, 0 (β = 0.125)", beta=0.125, smoothing=smoothing, seed=22220 + index, low=True))
    return out


def _invalid() -> list[Case]:
    ok = _inputs([-8.0, -3.0], [-11.0, -4.0], [-10.0, -3.5], [-10.0, -3.0])
    bad = [
        (_inputs([math.nan, -3.0], [-11.0, -4.0], [-10.0, -3.5], [-10.0, -3.0]), {}, {}, "NaN log-probability"),
        (_inputs([-8.0, -3.0], [math.inf, -4.0], [-10.0, -3.5], [-10.0, -3.0]), {}, {}, "+inf log-probability"),
        (_inputs([-8.0, -3.0], [-11.0, -4.0], [-math.inf, -3.5], [-10.0, -3.0]), {}, {},
         "−inf reference log-probability"),
        (_inputs([-8.0, -3.0], [-11.0], [-10.0, -3.5], [-10.0, -3.0]), {}, {}, "shapes disagree"),
        (_inputs([[-8.0, -3.0]], [[-11.0, -4.0]], [[-10.0, -3.5]], [[-10.0, -3.0]]), {}, {},
         "rank-2 inputs (per-token log-probabilities instead of sequence sums)"),
        (ok, {"beta": 0.0}, {}, "β = 0"),
        (ok, {"beta": -0.1}, {}, "negative β"),
        (ok, {"label_smoothing": 0.5}, {"loss_type": "robust"}, "label_smoothing = 0.5 (robust divides by 1 − 2ε)"),
        (ok, {"label_smoothing": -0.1}, {}, "negative label_smoothing"),
        (ok, {}, {"loss_type": "kto"}, "unknown loss type"),
    ]
    out = []
    for inputs, params, conv, why in bad:
        out.append(Case(OBJ, inputs, params={"beta": 0.1, "label_smoothing": 0.0, **params},
                        conventions=conv, group="invalid", result="invalid", flags=("InvalidInput",),
                        comment=why, provenance=generated(0, "fixed")))
    return out


# ----------------------------------------------------------------------------- tolerance scales

def _sig(z):
    return 1 / (1 + mpmath.exp(-z))


def _slopes(delta, beta, loss_type, eps):
    """dℓ/dΔ and d²ℓ/dΔ² of the per-pair loss."""
    z = beta * delta
    if loss_type == "ipo":
        return 2 * (delta - 1 / (2 * beta)), mpmath.mpf(2)
    if loss_type == "hinge":
        # β on both sides: near the kink a correctly rounded 1 − βΔ may land on either side.
        return -beta, mpmath.mpf(0)
    curvature = beta ** 2 * _sig(z) * _sig(-z)
    if loss_type == "robust":
        return beta * (-(1 - eps) * _sig(-z) - eps * _sig(z)) / (1 - 2 * eps), curvature
    return beta * (-(1 - eps) * _sig(-z) + eps * _sig(z)), curvature


def _scale(kwargs, outputs, grads):
    """The margin Δ inherits an absolute error of about u·(|π_c|+|ref_c|+|π_r|+|ref_r|) whatever
    the grouping; the loss and its slope inherit it through ℓ' and ℓ''."""
    beta = mpmath.mpf(kwargs["beta"])
    eps = mpmath.mpf(kwargs["label_smoothing"])
    loss_type = kwargs["loss_type"]
    cols = [[mpmath.mpf(v) for v in kwargs[n]] for n in INPUTS]
    loss_terms, grad_terms, chosen, rejected = [], [], [mpmath.mpf(0)], [mpmath.mpf(0)]
    g_chosen = grads.get("policy_chosen_logps")
    for i, (pc, pr, rc, rr) in enumerate(zip(*cols)):
        size = abs(pc) + abs(pr) + abs(rc) + abs(rr) + 1 / beta
        delta = (pc - rc) - (pr - rr)
        slope, curve = _slopes(delta, beta, loss_type, eps)
        loss_terms.append(abs(outputs["losses"][i]) + abs(slope) * size)
        gi = g_chosen[i] if g_chosen is not None else 0
        ct = abs(gi / slope) if gi != 0 and slope != 0 else mpmath.mpf(2)
        grad_terms.append(abs(ct * slope) + ct * curve * size)
        chosen.append(beta * (abs(pc) + abs(rc)))
        rejected.append(beta * (abs(pr) + abs(rr)))
    grad = max(grad_terms, default=mpmath.mpf(0))
    return {"losses": max(loss_terms, default=mpmath.mpf(0)), "chosen_rewards": max(chosen),
            "rejected_rewards": max(rejected), "grad:policy_chosen_logps": grad,
            "grad:policy_rejected_logps": grad}


SCALES = {OBJ: _scale}
