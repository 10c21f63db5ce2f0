"""Direct Preference Optimization and its per-pair loss variants.

Source: Rafailov et al. 2023 (DPO) §4 eq. 7; [reading-math-3] §DPO. For a pair (chosen y_w,
rejected y_l) the gains against the frozen reference are

    g_c = log π_θ(y_w|x) − log π_ref(y_w|x),   g_r = log π_θ(y_l|x) − log π_ref(y_l|x),
    Δ = g_c − g_r,

and every loss type is a function of the margin Δ alone (ε = label_smoothing):

    sigmoid, cdpo   −(1−ε)·log σ(βΔ) − ε·log σ(−βΔ)        DPO eq. 7; cDPO (Mitchell 2023)
    hinge           max(0, 1 − βΔ)                         SLiC (Zhao et al. 2023)
    ipo             (Δ − 1/(2β))²                          IPO (Azar et al. 2023) eq. 17
    robust          (−(1−ε)·log σ(βΔ) + ε·log σ(−βΔ))/(1−2ε)   Chowdhury et al. 2024

The implicit rewards are β·g_c and β·g_r (DPO §5).
"""
from __future__ import annotations

import numpy as np

from refimpl import validate
from refimpl.exact import mp

__all__ = ["loss", "loss_vjp"]

LOSS_TYPES = validate.LOSS_TYPES
OUTPUTS = ("losses", "chosen_rewards", "rejected_rewards")
_INPUTS = ("policy_chosen_logps", "policy_rejected_logps",
           "reference_chosen_logps", "reference_rejected_logps")


def _prepare(arrays, beta, loss_type, label_smoothing):
    pc, pr, rc, rr = (mp.array(name, x) for name, x in zip(_INPUTS, arrays))
    validate.rank("policy_chosen_logps", pc.shape, 1)
    validate.same_shape(**dict(zip(_INPUTS, (pc.shape, pr.shape, rc.shape, rr.shape))))
    b = mp.mpf(validate.dpo_beta(beta))
    validate.loss_type(loss_type)
    eps = mp.mpf(validate.label_smoothing(label_smoothing))
    return pc, pr, rc, rr, b, eps


def _margin_loss(delta, beta, loss_type, eps):
    """The per-pair loss ℓ(Δ) and its derivative dℓ/dΔ (elementwise)."""
    z = beta * delta
    if loss_type == "ipo":
        gap = delta - 1 / (2 * beta)
        return gap * gap, 2 * gap
    if loss_type == "hinge":
        # At the kink 1 − βΔ = 0 the active branch 1 − βΔ is taken (closed), slope −β.
        active = (1 - z >= 0).astype(bool)
        return np.where(active, 1 - z, mp.ZERO), np.where(active, -beta, mp.ZERO)
    # d log σ(z)/dz = σ(−z), d log σ(−z)/dz = −σ(z); log σ keeps βΔ = ±1e4 finite and exact.
    ls_pos, ls_neg = mp.logsigmoid(z), mp.logsigmoid(-z)
    s_pos, s_neg = mp.sigmoid(z), mp.sigmoid(-z)
    if loss_type in ("sigmoid", "cdpo"):
        return (-(1 - eps) * ls_pos - eps * ls_neg,
                beta * (-(1 - eps) * s_neg + eps * s_pos))
    norm = 1 - 2 * eps  # robust: ε < 1/2 keeps it positive
    return ((-(1 - eps) * ls_pos + eps * ls_neg) / norm,
            beta * (-(1 - eps) * s_neg - eps * s_pos) / norm)


@mp.exact
def loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
         reference_rejected_logps, beta: float = 0.1, loss_type: str = "sigmoid",
         label_smoothing: float = 0.0):
    """Per-pair preference loss of the margin Δ = g_c − g_r (no mean over the batch).

    Rafailov et al. 2023 (DPO) §4 eq. 7 (``sigmoid``; with ``label_smoothing`` ε > 0 the
    conservative form, as OpenRLHF's DPOLoss applies it — TRL 1.16 ignores ε for 'sigmoid');
    cDPO (Mitchell 2023) for ``cdpo`` (same formula);
    SLiC hinge; IPO (Azar et al. 2023) eq. 17; robust DPO (Chowdhury et al. 2024).
    ``label_smoothing`` does not enter ``hinge`` or ``ipo``.
    Returns {"losses"[B], "chosen_rewards"[B] = β·g_c, "rejected_rewards"[B] = β·g_r}.
    """
    pc, pr, rc, rr, b, eps = _prepare((policy_chosen_logps, policy_rejected_logps,
                                       reference_chosen_logps, reference_rejected_logps),
                                      beta, loss_type, label_smoothing)
    g_c, g_r = pc - rc, pr - rr
    losses, _ = _margin_loss(g_c - g_r, b, loss_type, eps)
    return {"losses": losses, "chosen_rewards": b * g_c, "rejected_rewards": b * g_r}


@mp.exact
def loss_vjp(cotangent, policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
             reference_rejected_logps, beta: float = 0.1, loss_type: str = "sigmoid",
             label_smoothing: float = 0.0):
    """Gradient of Σ_out Σ cotangent[out]·out with respect to the two policy log-probabilities
    (DPO §5: ∇ = −β·σ(−βΔ)·(∇g_c − ∇g_r) for the sigmoid loss).

    ``cotangent`` is a dict by output name; a missing output has a zero cotangent.
    At the hinge kink the gradient of the active branch 1 − βΔ is used.
    """
    pc, pr, rc, rr, b, eps = _prepare((policy_chosen_logps, policy_rejected_logps,
                                       reference_chosen_logps, reference_rejected_logps),
                                      beta, loss_type, label_smoothing)
    if not isinstance(cotangent, dict):
        validate.fail("cotangent", f"expected a dict by output name ({', '.join(OUTPUTS)})")
    ct = {}
    for name in OUTPUTS:
        if name in cotangent:
            ct[name] = mp.array("cotangent", cotangent[name])
            validate.same_shape(**{"policy_chosen_logps": pc.shape,
                                   f"cotangent[{name!r}]": ct[name].shape})
        else:
            ct[name] = mp.zeros(pc.shape)
    unknown = set(cotangent) - set(OUTPUTS)
    if unknown:
        validate.fail("cotangent", f"unknown outputs {sorted(map(str, unknown))}")
    g_c, g_r = pc - rc, pr - rr
    _, dloss = _margin_loss(g_c - g_r, b, loss_type, eps)
    # dΔ/d policy_chosen = +1, dΔ/d policy_rejected = −1; rewards are β·gain.
    through_margin = ct["losses"] * dloss
    return {"policy_chosen_logps": through_margin + b * ct["chosen_rewards"],
            "policy_rejected_logps": -through_margin + b * ct["rejected_rewards"]}
