"""Mutants of ``dpo.loss`` (DPO eq. 7; IPO eq. 17; cDPO; robust DPO eq. 8).

Margin Δ = (π_c − ref_c) − (π_r − ref_r), z = βΔ, ε = label_smoothing:
sigmoid/cdpo −(1−ε)·log σ(z) − ε·log σ(−z); hinge max(0, 1 − z); ipo (Δ − 1/(2β))²;
robust (−(1−ε)·log σ(z) + ε·log σ(−z))/(1 − 2ε); rewards β·(π − ref)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from mutants import Pair, checked, export

OBJ = "dpo.loss"
CONVENTIONS = {"loss_type": ["sigmoid", "hinge", "ipo", "cdpo", "robust"]}


def _log_sigmoid_naive(z):
    return torch.log(torch.sigmoid(z))


def dpo(pc, pr, rc, rr, beta, loss_type, label_smoothing, *, log_sigmoid=F.logsigmoid, ipo_length=1.0,
        ignore_smoothing=False, reference_free=False, robust_as_cdpo=False, always_sigmoid=False):
    """The per-pair losses and rewards; every keyword after ``*`` switches one bug on."""
    g_c = pc if reference_free else pc - rc.detach()
    g_r = pr if reference_free else pr - rr.detach()
    delta = g_c - g_r
    z = beta * delta
    kind = "sigmoid" if always_sigmoid else loss_type
    eps = 0.0 if (ignore_smoothing and kind == "sigmoid") else label_smoothing
    if kind == "ipo":
        gap = delta / ipo_length - 1 / (2 * beta)
        losses = gap * gap
    elif kind == "hinge":
        h = 1 - z
        losses = torch.where(h >= 0, h, torch.zeros_like(h))  # closed kink: slope −β there
    elif kind in ("sigmoid", "cdpo") or (kind == "robust" and robust_as_cdpo):
        losses = -(1 - eps) * log_sigmoid(z) - eps * log_sigmoid(-z)
    else:
        losses = (-(1 - eps) * log_sigmoid(z) + eps * log_sigmoid(-z)) / (1 - 2 * eps)
    return {"losses": losses, "chosen_rewards": beta * g_c, "rejected_rewards": beta * g_r}


def _call(kw, **bug):
    return dpo(kw["policy_chosen_logps"], kw["policy_rejected_logps"], kw["reference_chosen_logps"],
               kw["reference_rejected_logps"], kw.get("beta", 0.1), kw.get("loss_type", "sigmoid"),
               kw.get("label_smoothing", 0.0), **bug)


@checked(OBJ)
def twin(**kw):
    """DPO eq. 7 and its variants as the papers write them, log σ in the overflow-free form."""
    return _call(kw)


@checked(OBJ)
def log_of_sigmoid(**kw):
    """log(sigmoid(z)) instead of logsigmoid(z): −inf (and a NaN gradient) once σ underflows.

    Seen: thinking-machines-lab/tinker-cookbook PR #188 ("replaces the numerically unstable
    -torch.log(torch.sigmoid(...)) with F.logsigmoid"); deepspeedai/DeepSpeedExamples PR #501
    (infinite reward-model loss from log(sigmoid))."""
    return _call(kw, log_sigmoid=_log_sigmoid_naive)


@checked(OBJ)
def robust_computed_as_cdpo(**kw):
    """cDPO vs robust: loss_type='robust' computed with the conservative (cDPO) formula.

    Seen: huggingface/trl PR #1653 (robust DPO added next to cDPO: the ε term's sign and the
    1/(1−2ε) factor are what distinguish them) and PR #1655 (cDPO usage documented wrongly);
    Chowdhury et al. 2024 eq. 8 vs Mitchell 2023."""
    return _call(kw, robust_as_cdpo=True)


@checked(OBJ)
def ipo_length_normalised(**kw):
    """IPO length normalisation: the margin divided by a length where sequence sums were declared.

    Seen: huggingface/trl PR #1265 (IPO switched to average log-probabilities), issue #1677
    (is the average in the paper?), modelscope/ms-swift PR #9925. A black box cannot see the
    lengths, so this mutant takes every response as 4 tokens long: Δ/4 in (Δ − 1/(2β))²."""
    return _call(kw, ipo_length=4.0)


@checked(OBJ)
def label_smoothing_ignored(**kw):
    """label_smoothing ignored for loss_type='sigmoid' (the conservative term dropped).

    Seen: TRL 1.16.0 and Liger-Kernel 0.8.5 ignore label_smoothing for 'sigmoid' (the
    LabelSmoothing note of vectors/dpo/loss.json); rasbt/LLMs-from-scratch PR #617 (the
    label_smoothing argument documented but unused)."""
    return _call(kw, ignore_smoothing=True)


@checked(OBJ)
def reference_dropped(**kw):
    """Reference log-probabilities dropped (reference-free DPO) where none was declared.

    Seen: huggingface/trl PR #1022 ("we ignore the reference model as beta -> 0", the
    reference_free option of DPOTrainer); DPO §4 eq. 7 needs the reference."""
    return _call(kw, reference_free=True)


@checked(OBJ)
def loss_type_ignored(**kw):
    """The declared loss type ignored: every variant trained as sigmoid DPO.

    Seen: modelscope/ms-swift PR #10167 ("Megatron DPO ... calls the shared dpo_loss() without
    passing [loss_type] ... hinge and ipo silently train with sigmoid DPO")."""
    return _call(kw, always_sigmoid=True)


PAIRS = [
    Pair("DPO_LOG_OF_SIGMOID", OBJ, log_of_sigmoid, twin, CONVENTIONS),
    Pair("DPO_ROBUST_AS_CDPO", OBJ, robust_computed_as_cdpo, twin, CONVENTIONS),
    Pair("DPO_IPO_LENGTH_NORMALISED", OBJ, ipo_length_normalised, twin, CONVENTIONS),
    Pair("DPO_LABEL_SMOOTHING_IGNORED", OBJ, label_smoothing_ignored, twin, CONVENTIONS),
    Pair("DPO_REFERENCE_DROPPED", OBJ, reference_dropped, twin, CONVENTIONS),
    Pair("DPO_LOSS_TYPE_IGNORED", OBJ, loss_type_ignored, twin, CONVENTIONS),
]
export(globals(), PAIRS)
