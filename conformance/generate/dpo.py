"""Vectors for ``dpo.loss`` (Rafailov et al. 2023 §4 eq. 7; IPO eq. 17; cDPO; robust DPO; and
the loss types TRL 1.16.0 trainer/dpo_trainer.py ships beyond them: EXO, NCA, BCO, SPPO, AOT,
APO, DiscoPOP — formulas and papers in refimpl/exact/dpo.py).

The conventions are ``loss_type`` (one group per loss type) and, since vector set 1.3.0,
``nll_aggregation`` for the chosen NLL term that ``rpo_alpha`` adds (RPO, arXiv 2404.19733 §2):
one group per normalisation, with ``chosen_lengths`` as an input (cases before 1.3.0 have
rpo_alpha = 0 and keep their uids). ``beta``,
``label_smoothing``, ``discopop_tau`` (discopop only) and ``reward_shift`` (bco_pair only) are
arguments and vary inside a group. The implicit rewards are
metrics that every library detaches, so their cotangents are zero (see note
``DetachedRewards``); the loss cotangents are random multiples of 1/64 (exact in every dtype).
"""
from __future__ import annotations

import math

import mpmath
import numpy as np

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, article, generated
from lossproof.refimpl.exact import dpo as exact_dpo

OBJ = "dpo.loss"
INPUTS = ("policy_chosen_logps", "policy_rejected_logps", "reference_chosen_logps", "reference_rejected_logps")
DPO_SECTION = "DPO: una pérdida logística sobre dos logaritmos de cocientes"

NOTES = {
    "InvalidNllTerm": {"category": "invalid", "description": "Arguments of the NLL term outside their domain "
                       "under the group's nll_aggregation (chosen_lengths missing, 0 or of another shape, an "
                       "unknown or missing aggregation while the weight is > 0); run for the targets that declare "
                       "that nll_aggregation; must be rejected. A negative weight is InvalidInput.",
                       "bugType": "input-validation",
                       "effect": "A missing or malformed NLL-term argument is accepted and silently changes or "
                                 "drops the term."},
    "Article": {"category": "article", "description": "A number printed in the source article: two pairs with "
                "gains (+2, −1) and (−1, −4) have the same margin Δ = 3 and therefore the same loss.",
                "bugType": "formula",
                "effect": "An implementation of another formula than the published one disagrees with the number "
                          "the source prints."},
    "Random": {"category": "random", "description": "Random sequence log-probabilities (sums over tokens, down to "
               "about −300) with references drawn near them so that βΔ spans the logistic's curved region; "
               "B up to 16 pairs; half the cases rounded to float32.",
               "bugType": "formula",
               "links": ["https://github.com/huggingface/trl/pull/1653",
                         "https://github.com/huggingface/trl/pull/1655",
                         "https://github.com/huggingface/trl/pull/1265",
                         "https://github.com/huggingface/trl/issues/1677",
                         "https://github.com/modelscope/ms-swift/pull/9925",
                         "https://github.com/huggingface/trl/pull/1022",
                         "https://github.com/modelscope/ms-swift/pull/10167"]},
    "DetachedRewards": {"category": "convention", "description": "chosen_rewards = β·(π_c − ref_c) and "
                        "rejected_rewards = β·(π_r − ref_r) are logged metrics that TRL, OpenRLHF and Liger "
                        "detach: their cotangents are zero, so the gradient comes from the losses alone "
                        "(random cotangents).",
                        "bugType": "gradient",
                        "effect": "Logged rewards that carry a gradient add a second, unintended term to the "
                                  "backward pass."},
    "LabelSmoothing": {"category": "convention", "description": "label_smoothing ε > 0 with loss_type 'sigmoid': "
                       "the conservative loss −(1−ε)·log σ(βΔ) − ε·log σ(−βΔ) (cDPO, as OpenRLHF 0.11.2 DPOLoss "
                       "applies it). TRL 1.16.0 and Liger 0.8.5 ignore label_smoothing for 'sigmoid': their "
                       "adapters must not declare these cases.",
                       "bugType": "convention",
                       "effect": "Label smoothing applied to another loss type or in another form (robust vs "
                                 "conservative) trains another objective.",
                       "links": ["https://github.com/rasbt/LLMs-from-scratch/pull/617"]},
    "HugeMargin": {"category": "numerics", "description": "βΔ = ±1e4: log σ must be formed without overflow "
                   "(log σ(1e4) ≈ −e^−1e4 underflows to 0; log σ(−1e4) = −1e4 up to e^−1e4).",
                   "bugType": "overflow",
                   "effect": "log σ formed as log(sigmoid(x)) or log(1 + exp(−x)) overflows or underflows to an "
                             "infinite loss at large margins.",
                   "links": ["https://github.com/thinking-machines-lab/tinker-cookbook/pull/188",
                             "https://github.com/deepspeedai/DeepSpeedExamples/pull/501",
                             "https://github.com/FederatedAI/FATE/issues/65"]},
    "ZeroMargin": {"category": "edge", "description": "Δ = 0 exactly (equal gains): sigmoid loss log 2, gradient "
                   "±β/2 on the logistic losses.",
                   "bugType": "degenerate-input",
                   "effect": "At Δ = 0 the loss is log 2; a hinge or branch taken on the wrong side gives another "
                             "gradient."},
    "LargeLogps": {"category": "numerics", "description": "Sequence log-probabilities near −1e4 with a margin of "
                   "order 1: the gains cancel, and implementations that group the four terms differently "
                   "(π_c − π_r) − (ref_c − ref_r) round differently; judged against the size of the terms.",
                   "bugType": "cancellation",
                   "effect": "Sequence log-probabilities near −1e4 differ by O(1): grouping the four terms badly "
                             "loses the margin's digits."},
    "HingeKink": {"category": "acceptable", "description": "βΔ at (or within rounding of) the hinge kink "
                  "1 − βΔ = 0: the loss is 0 either way, but the gradient is −β on the closed active branch "
                  "(the exact reference) and 0 for torch.relu (TRL, Liger). Either is accepted.",
                  "bugType": "gradient",
                  "effect": "At the hinge kink the gradient differs between branches: an implementation must pick "
                            "one consistently."},
    "LowPrecision": {"category": "edge", "description": "Inputs exactly representable in bfloat16 or float16 "
                     "(or both: bfloat16 values inside float16's range), judged in those dtypes: random batches "
                     "of up to 64 pairs with log-probabilities down to −300, margins of ±1e4, log-probabilities "
                     "near −1e4. A case judged in float16 keeps the margin Δ inside float16's range. See "
                     "conformance/compare.py for the careful tolerance model.",
                     "bugType": "precision"},
    "InvalidInput": {"category": "invalid", "description": "Input or parameter outside the loss's domain "
                     "(NaN/inf log-probabilities, shapes that disagree, β ≤ 0, label_smoothing outside "
                     "[0, 0.5), unknown loss type); must be rejected.",
                     "bugType": "input-validation"},
    "InvalidForLossType": {"category": "invalid", "description": "A parameter outside the domain of the "
                           "group's loss type (label_smoothing = 0 for exo_pair, 0.5 for aot, discopop_tau ≤ 0, "
                           "β = 0 for sppo_hard); run for the targets that declare that loss type; must be "
                           "rejected.",
                           "bugType": "input-validation",
                           "effect": "A parameter outside the loss type's domain (division by zero, log 0) returns "
                                     "a number instead of an error."},
    "SortedBatch": {"category": "convention", "description": "aot / aot_unpaired (AOT, Melnyk et al. 2024 §3) "
                    "sort each side over the batch before forming the margins: losses[i] belongs to the i-th "
                    "sorted position (as TRL 1.16.0 returns it), and a target must see the whole batch in one "
                    "call. The sort keys are kept apart (no ties, no near-ties within rounding of the "
                    "dtype), so the gradient's permutation is unique.",
                    "bugType": "convention",
                    "effect": "AOT sorts over the batch before forming margins; unsorted or per-pair margins "
                              "compute another loss."},
    "RewardShift": {"category": "convention", "description": "bco_pair with a reward shift δ ≠ 0: BCO (Jung "
                    "et al. 2024 §3) subtracts the running mean of the implicit rewards; TRL 1.16.0 and Liger "
                    "0.8.5 use δ = 0 and their adapters must not declare these cases.",
                    "bugType": "convention",
                    "effect": "BCO's running reward shift omitted or misapplied changes the loss of every pair."},
    "NllTerm": {"category": "convention", "description": "rpo_alpha α > 0: each pair's loss adds α times the NLL "
                "of its chosen response (RPO, Pang et al. 2024, arXiv 2404.19733 §2), normalised by "
                "nll_aggregation: −c/n per pair ('seq-mean-token-mean': RPO, OpenRLHF 0.11.2 nll_loss_coef), −c "
                "('seq-mean-token-sum'), or the pair's share −c·B/Σn of the batch token mean ('token-mean': TRL "
                "1.16.0 loss_type 'sft', Liger 0.8.5 compute_nll_loss); c = policy_chosen_logps, n = chosen_lengths "
                "(token counts). The mean of the losses over the pairs is the trainer's loss.",
                "bugType": "normalization",
                "effect": "The RPO NLL term normalised by another count (tokens vs sequences) or weighted wrongly."},
    "DiscoPopTau": {"category": "convention", "description": "discopop with τ ≠ 0.05 (DiscoPOP eq. 5's value, "
                    "TRL's DPOConfig.discopop_tau and Liger's default).",
                    "bugType": "constant",
                    "effect": "A hard-coded τ instead of the given one changes the DiscoPOP mixing of the logistic "
                              "and exponential losses."},
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
    "exo_pair": "EXO (Ji et al. 2024, arXiv 2402.00856) eq. 16 σ(z)·log(σ(z)/(1−ε)) + σ(−z)·log(σ(−z)/ε), "
                "ε = label_smoothing > 0; TRL 1.16.0 trainer/dpo_trainer.py loss_type='exo_pair'; Liger 0.8.5 "
                "chunked_loss/dpo_loss.py 'exo_pair'",
    "nca_pair": "NCA (Chen et al. 2024, arXiv 2402.05369) §4 −log σ(βg_c) − ½log σ(−βg_c) − ½log σ(−βg_r); "
                "TRL 1.16.0 loss_type='nca_pair'; Liger 0.8.5 'nca_pair'",
    "bco_pair": "BCO (Jung et al. 2024, arXiv 2404.04656) §3 −log σ(βg_c − δ) − log σ(δ − βg_r), δ = "
                "reward_shift; TRL 1.16.0 loss_type='bco_pair' and Liger 0.8.5 'bco_pair' (δ = 0)",
    "sppo_hard": "SPPO (Wu et al. 2024, arXiv 2405.00675) eq. 4.7 with hard labels (g_c − 1/(2β))² + "
                 "(g_r + 1/(2β))²; TRL 1.16.0 loss_type='sppo_hard'; Liger 0.8.5 'sppo_hard'",
    "aot": "AOT paired (Melnyk et al. 2024, arXiv 2406.05882) §3: the cDPO loss of sort(π_c − π_r)_i − "
           "sort(ref_c − ref_r)_i; TRL 1.16.0 loss_type='aot'",
    "aot_unpaired": "AOT unpaired (Melnyk et al. 2024) §3: the cDPO loss of sort(g_c)_i − sort(g_r)_i; TRL 1.16.0 "
                    "loss_type='aot_unpaired'",
    "apo_zero": "APO-zero (D'Oosterlinck et al. 2024, arXiv 2408.06266) eq. 7 1 − σ(βg_c) + σ(βg_r); TRL 1.16.0 "
                "loss_type='apo_zero'; Liger 0.8.5 'apo_zero'",
    "apo_down": "APO-down (D'Oosterlinck et al. 2024) eq. 8 σ(βg_c) + 1 − σ(βΔ); TRL 1.16.0 loss_type='apo_down'; "
                "Liger 0.8.5 'apo_down'",
    "discopop": "DiscoPOP (Lu et al. 2024, arXiv 2406.08414) eq. 5 (1 − σ(βΔ/τ))·(−log σ(βΔ)) + σ(βΔ/τ)·e^{−βΔ}; "
                "TRL 1.16.0 loss_type='discopop' (DPOConfig.discopop_tau 0.05); Liger 0.8.5 'discopop'",
    "rpo": "RPO (Pang et al. 2024, arXiv 2404.19733) §2: DPO + α·NLL of the chosen response divided by its "
           "length; OpenRLHF 0.11.2 trainer/dpo_trainer.py nll_loss_coef (−mean of the chosen token-mean "
           "log-probabilities)",
    "rpo-token-mean": "DPO + α·NLL as the batch token mean of the chosen tokens: TRL 1.16.0 trainer/dpo_trainer.py "
                      "loss_type=['sigmoid', 'sft'] with loss_weights=[1, α]; Liger 0.8.5 "
                      "chunked_loss/fused_linear_preference.py compute_nll_loss with alpha (CE sum / chosen tokens)",
    "rpo-sequence-nll": "DPO + α·NLL of the chosen sequence (its summed log-probability, no length division)",
    "invalid": "inputs outside the domain (all loss types)",
}

LOSS_TYPES = {"paper": "sigmoid", "cdpo": "cdpo", "hinge": "hinge", "ipo": "ipo", "robust": "robust"}
# The loss types after the first five (issue 15): their own seeds, so the first five's vectors
# are unchanged.
NEW_TYPES = ("exo_pair", "nca_pair", "bco_pair", "sppo_hard", "aot", "aot_unpaired", "apo_zero", "apo_down",
             "discopop")
LOSS_TYPES.update({t: t for t in NEW_TYPES})
SMOOTHED = ("cdpo", "robust", "exo_pair", "aot", "aot_unpaired")
SORTED = ("aot", "aot_unpaired")


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
    batch = int(r.integers(1, (min(max_batch, 12) if loss_type in SORTED else max_batch) + 1))
    beta = float(r.choice([0.01, 0.05, 0.1, 0.1, 0.5, 1.0]))
    depth = float(r.choice([5.0, 50.0, 300.0]))
    spread = min(3.0 / beta, depth)  # βΔ of order a few units
    if loss_type == "exo_pair":
        smoothing = float(r.choice([0.001, 0.1, 0.25, 0.4]))  # EXO needs ε > 0 (§4.2 uses 1e-3)
    elif loss_type in SMOOTHED:
        smoothing = float(r.choice([0.0, 0.1, 0.25, 0.4]))
    else:
        smoothing = 0.0
    extra = _extra_params(r, loss_type)
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
        kink_free = loss_type != "hinge" or all(abs(1 - beta * d) > near for d in _margins(inputs))
        gap = KEY_GAP["low" if grid else "float32" if dtype else "float64"]
        if kink_free and _sort_keys_apart(inputs, loss_type, gap):
            break
    rounded = f", inputs in {dtype}" if dtype else f", inputs exact in {S.grid_note(grid)}" if grid else ""
    return Case(OBJ, inputs, params={"beta": beta, "label_smoothing": smoothing, **extra},
                conventions={"loss_type": loss_type}, group=group,
                flags=("Random", "DetachedRewards") + (("LowPrecision",) if grid else ()) + _extra_flags(extra)
                + (("SortedBatch",) if loss_type in SORTED else ()),
                comment=f"random B={batch}, β={beta:g}, ε={smoothing:g}" + _extra_note(extra) + rounded,
                cotangents=_cotangents(r, batch), low_precision=grid is not None,
                provenance=generated(seed, "sequence logprobs; references = policy + normal offset"
                                     + (f"; rounded to the {grid} grid" if grid else "")))


def _extra_params(r, loss_type: str) -> dict:
    """discopop_tau for discopop, reward_shift for bco_pair (mostly the libraries' values)."""
    if loss_type == "discopop":
        return {"discopop_tau": float(r.choice([0.05, 0.05, 0.05, 0.5, 1.0]))}
    if loss_type == "bco_pair":
        return {"reward_shift": float(r.choice([0.0, 0.0, 0.0, 0.125, -0.375]))}
    return {}


def _extra_flags(extra: dict) -> tuple:
    flags = ()
    if extra.get("reward_shift", 0.0) != 0.0:
        flags += ("RewardShift",)
    if extra.get("discopop_tau", 0.05) != 0.05:
        flags += ("DiscoPopTau",)
    return flags


def _extra_note(extra: dict) -> str:
    return "".join(f", {k}={v:g}" for k, v in extra.items())


def _sort_keys_apart(inputs, loss_type: str, rel: float) -> bool:
    """AOT's sort keys (π_c − π_r for aot; each gain for aot_unpaired) differ pairwise by more
    than ``rel`` times their size, so that rounding each key once (rel ≥ 2u of the dtype) cannot
    reorder them."""
    if loss_type not in SORTED:
        return True
    pc, pr, rc, rr = (inputs[n] for n in INPUTS)
    sides = [zip(pc, pr)] if loss_type == "aot" else [zip(pc, rc), zip(pr, rr)]
    for side in sides:
        keys = sorted(mpmath.mpf(a) - mpmath.mpf(b) for a, b in side)
        if any(k2 - k1 <= rel * max(abs(k1), abs(k2)) for k1, k2 in zip(keys, keys[1:])):
            return False
    return True


# Twice the unit roundoff of the narrowest dtype a case is judged in (bfloat16: 2^-8).
KEY_GAP = {"low": 2.0 ** -7, "float32": 2.0 ** -23, "float64": 2.0 ** -52}


def _fixed(group, inputs, flags, comment, beta=0.1, smoothing=0.0, result="valid", seed=0, low=False):
    r = S.rng(seed)
    loss_type = LOSS_TYPES[group]
    if loss_type in SORTED:
        flags = flags + ("SortedBatch",)
    return Case(OBJ, inputs, params={"beta": beta, "label_smoothing": smoothing},
                conventions={"loss_type": loss_type}, group=group, flags=flags + ("DetachedRewards",),
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
        for i in range(14 if index < 5 else 16):
            seed = 5000 + 100 * index + i
            out.append(_random_case(group, seed, "float32" if i % 2 == 0 else None))
        out.extend(_edges(group, index))
    for i in range(3):  # cDPO through the 'sigmoid' loss type (OpenRLHF's DPOLoss form)
        out.append(_smoothed(_random_case("paper", 5900 + i, None if i else "float32"), (0.1, 0.25, 0.4)[i]))
    out.extend(_low_precision_cases())
    # The fixed edge cases whose AOT sort keys tie (equal gains, say) would make the gradient's
    # permutation ambiguous: those are left out of the two AOT groups.
    out = [c for c in out if _sort_keys_apart(c.inputs, c.conventions["loss_type"],
                                              KEY_GAP["low" if c.low_precision else "float32"])]
    out.extend(_invalid())
    out.extend(_nll_cases())
    return out


def _smoothed(case: Case, smoothing: float) -> Case:
    case.params["label_smoothing"] = smoothing
    case.flags = case.flags + ("LabelSmoothing",)
    case.comment += f" → ε = {smoothing:g}"
    return case


# ----------------------------------------------------------------------------- the NLL term (1.3.0)
#
# Per normalisation: 12 random batches with the sigmoid loss (half in float32), two on the
# low-precision grids, and one each with ipo, nca_pair, apo_zero and aot (the term is added to
# any loss type; for AOT pair i's NLL goes to position i); α in {0.25, 0.5, 1, 2}; the chosen
# responses 1 to 512 tokens long. Then the invalid arguments of the term.

NLL_GROUPS = {"seq-mean-token-mean": "rpo", "token-mean": "rpo-token-mean", "seq-mean-token-sum": "rpo-sequence-nll"}
NLL_LOSS_TYPES = ("ipo", "nca_pair", "apo_zero", "aot")
GROUPS.update({f"{group}-{loss_type}": f"{GROUPS[group]}; the term added to loss_type='{loss_type}'"
               for group in NLL_GROUPS.values() for loss_type in NLL_LOSS_TYPES})


def _with_nll(case: Case, aggregation: str, seed: int) -> Case:
    r = S.rng(seed + 1)
    batch = len(case.inputs[INPUTS[0]])
    alpha = float(r.choice([0.25, 0.5, 1.0, 1.0, 2.0]))
    loss_type = case.conventions["loss_type"]
    case.group = NLL_GROUPS[aggregation] + ("" if loss_type == "sigmoid" else f"-{loss_type}")
    case.params["rpo_alpha"] = alpha
    case.conventions["nll_aggregation"] = aggregation
    if aggregation != "seq-mean-token-sum":
        case.inputs["chosen_lengths"] = [int(n) for n in r.integers(1, 513, size=batch)]
    case.flags = case.flags + ("NllTerm",)
    case.comment += f"; rpo_alpha={alpha:g}, nll_aggregation={aggregation}"
    case.provenance["recipe"] += "; chosen lengths uniform in [1, 512]"
    return case


def _nll_cases() -> list[Case]:
    out = []
    for k, aggregation in enumerate(NLL_GROUPS):
        base = 26000 + 100 * k
        for i in range(12):
            out.append(_with_nll(_random_case("paper", base + i, "float32" if i % 2 == 0 else None),
                                 aggregation, base + i))
        for i in range(2):
            out.append(_with_nll(_random_case("paper", base + 20 + i, None, grid=S.low_grid(i), max_batch=64),
                                 aggregation, base + 20 + i))
        for j, loss_type in enumerate(NLL_LOSS_TYPES):
            out.append(_with_nll(_random_case(loss_type, base + 30 + j, None), aggregation, base + 30 + j))
    ok = _inputs([-8.0, -3.0], [-11.0, -4.0], [-10.0, -3.5], [-10.0, -3.0])
    bad = [
        ({"rpo_alpha": -1.0}, {}, {}, "negative rpo_alpha"),
        ({"rpo_alpha": 1.0}, {"nll_aggregation": "token-mean"}, {}, "rpo_alpha > 0 without chosen_lengths"),
        ({"rpo_alpha": 1.0}, {"nll_aggregation": "seq-mean-token-mean"}, {"chosen_lengths": [12, 0]},
         "a chosen length of 0"),
        ({"rpo_alpha": 1.0}, {"nll_aggregation": "seq-mean-token-mean"}, {"chosen_lengths": [12]},
         "chosen_lengths of another shape"),
        ({"rpo_alpha": 1.0}, {}, {"chosen_lengths": [12, 3]}, "rpo_alpha > 0 without an nll_aggregation"),
        ({"rpo_alpha": 1.0}, {"nll_aggregation": "sum"}, {"chosen_lengths": [12, 3]}, "unknown nll_aggregation"),
    ]
    for params, conv, extra, why in bad:
        flag = "InvalidInput" if params["rpo_alpha"] < 0 else "InvalidNllTerm"
        out.append(Case(OBJ, {**ok, **extra}, params={"beta": 0.1, "label_smoothing": 0.0, **params},
                        conventions=conv, group="invalid", result="invalid", flags=(flag,),
                        comment=why, provenance=generated(0, "fixed")))
    return out


# ----------------------------------------------------------------------------- low precision
#
# Cases judged in bfloat16 and float16 (the careful model of conformance/compare.py): random
# batches of up to 64 pairs on the two low-precision grids (sampling.in_low), cDPO through
# 'sigmoid', and per loss type a margin of ±1e4 (its IPO loss, 1e8, is beyond float16), equal
# gains and log-probabilities near −1e4 (float16 grid: spacing 8 there).

LOW_RANDOM = 42


def _low_precision_cases() -> list[Case]:
    out = []
    first = list(LOSS_TYPES)[:5]
    for i in range(LOW_RANDOM):
        group = first[i % len(first)]
        out.append(_random_case(group, 22000 + i, None, grid=S.low_grid(i), max_batch=64))
    for k, group in enumerate(NEW_TYPES):
        for i in range(4):
            seed = 23000 + 10 * k + i
            out.append(_random_case(group, seed, None, grid=S.low_grid(i), max_batch=64))
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
    # Invalid under one loss type only: run for the targets that declare it.
    bad_for_type = [
        (ok, {"label_smoothing": 0.0}, {"loss_type": "exo_pair"}, "exo_pair with label_smoothing = 0 (log ε)"),
        (ok, {"label_smoothing": 0.5}, {"loss_type": "aot"}, "aot with label_smoothing = 0.5"),
        (ok, {"discopop_tau": 0.0}, {"loss_type": "discopop"}, "discopop_tau = 0"),
        (ok, {"discopop_tau": -0.05}, {"loss_type": "discopop"}, "negative discopop_tau"),
        (ok, {"beta": 0.0}, {"loss_type": "sppo_hard"}, "β = 0 (sppo_hard divides by β)"),
    ]
    out = []
    for cases, flag in ((bad, "InvalidInput"), (bad_for_type, "InvalidForLossType")):
        for inputs, params, conv, why in cases:
            out.append(Case(OBJ, inputs, params={"beta": 0.1, "label_smoothing": 0.0, **params},
                            conventions=conv, group="invalid", result="invalid", flags=(flag,),
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


def _pair_loss(loss_type, beta, eps, kwargs):
    """ℓ(g_c, g_r) of one pair (AOT: of one sorted position, g_c − g_r its margin), from the
    exact reference."""
    tau = mpmath.mpf(kwargs.get("discopop_tau", 0.05))
    shift = mpmath.mpf(kwargs.get("reward_shift", 0.0))
    margin_type = "sigmoid" if loss_type in SORTED else loss_type

    def value(gc, gr):
        one = (lambda x: np.array([x], dtype=object))
        return exact_dpo._gain_loss(one(gc), one(gr), beta, margin_type, eps, tau, shift)[0][0]
    return value


def _scale_new(kwargs, outputs, beta, eps, loss_type):
    """The loss types of issue 15: each gain inherits an absolute error of about u·(|π|+|ref|)
    (u·(|π_c|+|π_r|+|ref_c|+|ref_r|) for AOT's regrouped margins); the loss and the gradient
    inherit it through the first and second partial derivatives of ℓ(g_c, g_r) (by mpmath.diff),
    the gradient for a cotangent of at most 2."""
    cols = [[mpmath.mpf(v) for v in kwargs[n]] for n in INPUTS]
    loss = _pair_loss(loss_type, beta, eps, kwargs)
    whole = max((abs(a) + abs(b) + abs(c) + abs(d) for a, b, c, d in zip(*cols)), default=mpmath.mpf(0))
    loss_terms, grad_terms, chosen, rejected = [], [], [mpmath.mpf(0)], [mpmath.mpf(0)]
    if loss_type in SORTED:
        pc, pr, rc, rr = cols
        if loss_type == "aot":
            keys = sorted(a - b for a, b in zip(pc, pr))
            refs = sorted(c - d for c, d in zip(rc, rr))
            deltas = [k - q for k, q in zip(keys, refs)]
        else:
            deltas = [k - q for k, q in zip(sorted(a - c for a, c in zip(pc, rc)),
                                            sorted(b - d for b, d in zip(pr, rr)))]
        points = [(d, mpmath.mpf(0), whole + 1 / beta, whole + 1 / beta) for d in deltas]
    else:
        points = [(a - c, b - d, abs(a) + abs(c) + 1 / beta, abs(b) + abs(d) + 1 / beta)
                  for a, b, c, d in zip(*cols)]
    with mpmath.workdps(40):
        for i, (gc, gr, size_c, size_r) in enumerate(points):
            d_c, d_r = (abs(mpmath.diff(loss, (gc, gr), order)) for order in ((1, 0), (0, 1)))
            curve = max(abs(mpmath.diff(loss, (gc, gr), order)) for order in ((2, 0), (1, 1), (0, 2)))
            loss_terms.append(abs(outputs["losses"][i]) + d_c * size_c + d_r * size_r)
            grad_terms.append(2 * max(d_c, d_r) + 2 * curve * (size_c + size_r))
    for a, b, c, d in zip(*cols):
        chosen.append(beta * (abs(a) + abs(c)))
        rejected.append(beta * (abs(b) + abs(d)))
    grad = max(grad_terms, default=mpmath.mpf(0))
    return {"losses": max(loss_terms, default=mpmath.mpf(0)), "chosen_rewards": max(chosen),
            "rejected_rewards": max(rejected), "grad:policy_chosen_logps": grad,
            "grad:policy_rejected_logps": grad}


def _scale(kwargs, outputs, grads):
    """The margin Δ inherits an absolute error of about u·(|π_c|+|ref_c|+|π_r|+|ref_r|) whatever
    the grouping; the loss and its slope inherit it through ℓ' and ℓ''."""
    beta = mpmath.mpf(kwargs["beta"])
    eps = mpmath.mpf(kwargs["label_smoothing"])
    loss_type = kwargs["loss_type"]
    if kwargs.get("rpo_alpha", 0.0):
        return _scale_nll(kwargs, outputs, beta, eps, loss_type)
    if loss_type in NEW_TYPES:
        return _scale_new(kwargs, outputs, beta, eps, loss_type)
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


def _scale_nll(kwargs, outputs, beta, eps, loss_type):
    """With the NLL term: the scales of the preference loss (by the partial derivatives, as for
    the loss types of issue 15) and the NLL's constant slope |∂(α·NLL_i)/∂c_i| for a cotangent of
    at most 2 (its value's rounding is relative to the loss, which the losses scale holds)."""
    scales = _scale_new(kwargs, outputs, beta, eps, loss_type)
    _, slopes = exact_dpo.chosen_nll(exact_dpo.mp.array("c", kwargs["policy_chosen_logps"]),
                                     kwargs.get("chosen_lengths"), kwargs["rpo_alpha"], kwargs["nll_aggregation"],
                                     "rpo_alpha", "policy_chosen_logps")
    scales["grad:policy_chosen_logps"] += 2 * max((abs(v) for v in slopes), default=mpmath.mpf(0))
    return scales


SCALES = {OBJ: _scale}
