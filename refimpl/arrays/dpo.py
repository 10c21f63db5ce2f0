"""Direct Preference Optimization and its per-pair loss variants over the array API.

Source: Rafailov et al. 2023 (DPO) §4 eq. 7; [reading-math-3] §DPO. With gains against the frozen
reference g_c = π_c − ref_c, g_r = π_r − ref_r (log-probabilities), margin Δ = g_c − g_r and
ε = label_smoothing:

    sigmoid, cdpo   −(1−ε)·log σ(βΔ) − ε·log σ(−βΔ)        DPO eq. 7; cDPO (Mitchell 2023)
    hinge           max(0, 1 − βΔ)                         SLiC (Zhao et al. 2023)
    ipo             (Δ − 1/(2β))²                          IPO (Azar et al. 2023) eq. 17
    robust          (−(1−ε)·log σ(βΔ) + ε·log σ(−βΔ))/(1−2ε)   Chowdhury et al. 2024

Implicit rewards β·g_c, β·g_r (DPO §5). Same names and contract as ``refimpl.exact.dpo``.
"""
from __future__ import annotations

from refimpl import validate
from refimpl.arrays import _xp

__all__ = ["loss", "loss_vjp"]

LOSS_TYPES = validate.LOSS_TYPES
OUTPUTS = ("losses", "chosen_rewards", "rejected_rewards")
_INPUTS = ("policy_chosen_logps", "policy_rejected_logps",
           "reference_chosen_logps", "reference_rejected_logps")


def _prepare(arrays, beta, loss_type, label_smoothing):
    xp = _xp.namespace(*arrays)
    dt = _xp.float_dtype(xp, **dict(zip(_INPUTS, arrays)))
    pc, pr, rc, rr = (_xp.array(xp, name, x, dt) for name, x in zip(_INPUTS, arrays))
    validate.rank("policy_chosen_logps", _xp.shape(pc), 1)
    validate.same_shape(**dict(zip(_INPUTS, map(_xp.shape, (pc, pr, rc, rr)))))
    b = validate.dpo_beta(beta)
    validate.loss_type(loss_type)
    eps = validate.label_smoothing(label_smoothing)
    return xp, dt, pc, pr, rc, rr, b, eps


def _margin_loss(xp, delta, beta, loss_type, eps):
    """The per-pair loss ℓ(Δ) and dℓ/dΔ (elementwise)."""
    z = beta * delta
    if loss_type == "ipo":
        gap = delta - 1 / (2 * beta)
        return gap * gap, 2 * gap
    if loss_type == "hinge":
        # At the kink 1 − βΔ = 0 the active branch is taken (closed), slope −β.
        active = (1 - z) >= 0
        return _xp.masked(xp, active, 1 - z), _xp.masked(xp, active, xp.zeros_like(z) - beta)
    # log σ and σ in their overflow-free forms keep βΔ = ±1e4 finite and accurate.
    ls_pos, ls_neg = _xp.logsigmoid(xp, z), _xp.logsigmoid(xp, -z)
    s_pos, s_neg = _xp.sigmoid(xp, z), _xp.sigmoid(xp, -z)
    if loss_type in ("sigmoid", "cdpo"):
        return (-(1 - eps) * ls_pos - eps * ls_neg,
                beta * (-(1 - eps) * s_neg + eps * s_pos))
    norm = 1 - 2 * eps  # robust: ε < 1/2 keeps it positive
    return ((-(1 - eps) * ls_pos + eps * ls_neg) / norm,
            beta * (-(1 - eps) * s_neg - eps * s_pos) / norm)


def loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
         reference_rejected_logps, beta: float = 0.1, loss_type: str = "sigmoid",
         label_smoothing: float = 0.0):
    """Per-pair preference loss of the margin Δ = g_c − g_r (no mean over the batch).

    DPO (Rafailov et al. 2023) §4 eq. 7 (``sigmoid``, conservative with ε > 0 as TRL);
    cDPO (Mitchell 2023); SLiC hinge; IPO (Azar et al. 2023) eq. 17; robust DPO (Chowdhury
    et al. 2024). ``label_smoothing`` does not enter ``hinge`` or ``ipo``.
    Returns {"losses"[B], "chosen_rewards"[B] = β·g_c, "rejected_rewards"[B] = β·g_r}.
    """
    xp, _, pc, pr, rc, rr, b, eps = _prepare(
        (policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
         reference_rejected_logps), beta, loss_type, label_smoothing)
    g_c, g_r = pc - rc, pr - rr
    losses, _ = _margin_loss(xp, g_c - g_r, b, loss_type, eps)
    return {"losses": losses, "chosen_rewards": b * g_c, "rejected_rewards": b * g_r}


def loss_vjp(cotangent, policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
             reference_rejected_logps, beta: float = 0.1, loss_type: str = "sigmoid",
             label_smoothing: float = 0.0):
    """Gradient of Σ_out Σ cotangent[out]·out with respect to the two policy log-probabilities
    (DPO §5: ∇ = −β·σ(−βΔ)·(∇g_c − ∇g_r) for the sigmoid loss). ``cotangent`` is a dict by
    output name; a missing output has a zero cotangent."""
    xp, dt, pc, pr, rc, rr, b, eps = _prepare(
        (policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
         reference_rejected_logps), beta, loss_type, label_smoothing)
    ct = _xp.cotangents(xp, cotangent, dt, OUTPUTS, "policy_chosen_logps", _xp.shape(pc))
    g_c, g_r = pc - rc, pr - rr
    _, dloss = _margin_loss(xp, g_c - g_r, b, loss_type, eps)
    # dΔ/d policy_chosen = +1, dΔ/d policy_rejected = −1; rewards are β·gain.
    through_margin = ct["losses"] * dloss
    return {"policy_chosen_logps": through_margin + b * ct["chosen_rewards"],
            "policy_rejected_logps": -through_margin + b * ct["rejected_rewards"]}
