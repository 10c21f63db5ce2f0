"""Direct Preference Optimization and its per-pair loss variants (PyTorch, autograd).

Source: Rafailov et al. 2023 (DPO) §4 eq. 7; [reading-math-3] §DPO. With the gains against the
frozen reference g_c = π_c − ref_c, g_r = π_r − ref_r (log-probabilities of the chosen and
rejected responses), margin Δ = g_c − g_r and ε = label_smoothing:

    sigmoid, cdpo   −(1−ε)·log σ(βΔ) − ε·log σ(−βΔ)        DPO eq. 7; cDPO (Mitchell 2023)
    hinge           max(0, 1 − βΔ)                         SLiC (Zhao et al. 2023)
    ipo             (Δ − 1/(2β))²                          IPO (Azar et al. 2023) eq. 17
    robust          (−(1−ε)·log σ(βΔ) + ε·log σ(−βΔ))/(1−2ε)   Chowdhury et al. 2024

Implicit rewards β·g_c and β·g_r (DPO §5).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from refimpl import validate
from refimpl.torch import _common

__all__ = ["loss"]

LOSS_TYPES = validate.LOSS_TYPES
OUTPUTS = ("losses", "chosen_rewards", "rejected_rewards")
_INPUTS = ("policy_chosen_logps", "policy_rejected_logps",
           "reference_chosen_logps", "reference_rejected_logps")


def _margin_loss(delta: torch.Tensor, beta: float, loss_type: str, eps: float) -> torch.Tensor:
    """ℓ(Δ), elementwise and differentiable."""
    z = beta * delta
    if loss_type == "ipo":
        gap = delta - 1 / (2 * beta)
        return gap * gap
    if loss_type == "hinge":
        # At the kink 1 − βΔ = 0 the active branch is taken (closed): slope −β, not relu's 0.
        h = 1 - z
        return torch.where(h >= 0, h, torch.zeros_like(h))
    # F.logsigmoid is log σ in the overflow-free form: exact at βΔ = ±1e4.
    pos, neg = F.logsigmoid(z), F.logsigmoid(-z)
    if loss_type in ("sigmoid", "cdpo"):
        return -(1 - eps) * pos - eps * neg
    return (-(1 - eps) * pos + eps * neg) / (1 - 2 * eps)


def loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
         reference_rejected_logps, beta: float = 0.1, loss_type: str = "sigmoid",
         label_smoothing: float = 0.0):
    """Per-pair preference loss of the margin Δ = g_c − g_r (no mean over the batch).

    Rafailov et al. 2023 (DPO) §4 eq. 7 (``sigmoid``; ``label_smoothing`` ε > 0 gives the
    conservative form as TRL applies it); cDPO (Mitchell 2023) for ``cdpo`` (same formula);
    SLiC hinge; IPO (Azar et al. 2023) eq. 17; robust DPO (Chowdhury et al. 2024).
    ``label_smoothing`` does not enter ``hinge`` or ``ipo``. All four inputs are [B].
    Returns {"losses"[B], "chosen_rewards"[B] = β·g_c, "rejected_rewards"[B] = β·g_r}, all
    differentiable wrt the policy log-probabilities (the references are constants).
    """
    pc, pr, rc, rr = (_common.array(name, x) for name, x in zip(
        _INPUTS, (policy_chosen_logps, policy_rejected_logps,
                  reference_chosen_logps, reference_rejected_logps)))
    validate.rank("policy_chosen_logps", tuple(pc.shape), 1)
    validate.same_shape(**dict(zip(_INPUTS, (tuple(t.shape) for t in (pc, pr, rc, rr)))))
    b = validate.dpo_beta(beta)
    validate.loss_type(loss_type)
    eps = validate.label_smoothing(label_smoothing)

    out = _common.result_dtype(pc, pr, rc, rr)
    work = _common.work_dtype(out)
    g_c = _common.upcast(pc, work) - _common.constant(rc, work)
    g_r = _common.upcast(pr, work) - _common.constant(rr, work)
    losses = _margin_loss(g_c - g_r, b, loss_type, eps)
    return {"losses": losses.to(out), "chosen_rewards": (b * g_c).to(out),
            "rejected_rewards": (b * g_r).to(out)}
