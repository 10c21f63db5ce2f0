"""Direct Preference Optimization and its per-pair loss variants (PyTorch, autograd).

Source: Rafailov et al. 2023 (DPO) §4 eq. 7; [reading-math-3] §DPO. For a pair (chosen y_w,
rejected y_l) the gains against the frozen reference are

    g_c = log π_θ(y_w|x) − log π_ref(y_w|x),   g_r = log π_θ(y_l|x) − log π_ref(y_l|x),
    Δ = g_c − g_r,   z = βΔ,   a = β·g_c,   b = β·g_r,

and with ε = label_smoothing, τ = discopop_tau, δ = reward_shift the loss types are

    sigmoid, cdpo   −(1−ε)·log σ(z) − ε·log σ(−z)            DPO eq. 7; cDPO (Mitchell 2023)
    hinge           max(0, 1 − z)                            SLiC (Zhao et al. 2023)
    ipo             (Δ − 1/(2β))²                            IPO (Azar et al. 2023) eq. 17
    robust          (−(1−ε)·log σ(z) + ε·log σ(−z))/(1−2ε)   Chowdhury et al. 2024 eq. 8
    exo_pair        σ(z)·(log σ(z) − log(1−ε)) + σ(−z)·(log σ(−z) − log ε)
                    = KL((σ(z), σ(−z)) ‖ (1−ε, ε))           EXO (Ji et al. 2024, arXiv 2402.00856) eq. 16
    nca_pair        −log σ(a) − ½·log σ(−a) − ½·log σ(−b)    NCA (Chen et al. 2024, arXiv 2402.05369) §4
    bco_pair        −log σ(a − δ) − log σ(−(b − δ))          BCO (Jung et al. 2024, arXiv 2404.04656) §3
    sppo_hard       (g_c − 1/(2β))² + (g_r + 1/(2β))²        SPPO (Wu et al. 2024, arXiv 2405.00675)
                                                             eq. 4.7 with P = 1 / 0 (hard labels)
    apo_zero        1 − σ(a) + σ(b)                          APO (D'Oosterlinck et al. 2024,
    apo_down        σ(a) + 1 − σ(z)                          arXiv 2408.06266) eqs. 7, 8
    discopop        (1 − m)·(−log σ(z)) + m·e^{−z},  m = σ(z/τ)
                                                             DiscoPOP (Lu et al. 2024, arXiv 2406.08414) eq. 5
    aot             the sigmoid/cdpo loss of Δ_i = sort(π_c − π_r)_i − sort(ref_c − ref_r)_i
    aot_unpaired    the sigmoid/cdpo loss of Δ_i = sort(g_c)_i − sort(g_r)_i
                                                             AOT (Melnyk et al. 2024, arXiv 2406.05882) §3

With α = rpo_alpha each pair's loss also carries α times its chosen response's NLL (RPO, Pang
et al. 2024, arXiv 2404.19733 §2): −c_i/n_i ('seq-mean-token-mean'), −c_i ('seq-mean-token-sum')
or −c_i·B/Σ_j n_j ('token-mean'), c_i = policy_chosen_logps[i], n_i = chosen_lengths[i]; AOT
adds pair i's NLL at position i.

The two AOT losses couple the batch: sort is ascending over the batch dimension and losses[i]
belongs to the i-th sorted position (as TRL 1.16.0 trainer/dpo_trainer.py returns them). torch.sort
carries the gradient through the permutation (the vectors avoid ties, where it is not unique). BCO's δ is the running mean of the implicit rewards
in the paper; TRL 1.16.0 and Liger 0.8.5 use δ = 0 (the default here). The implicit rewards
are a = β·g_c and b = β·g_r (DPO §5).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from lossproof.refimpl import validate
from lossproof.refimpl.torch import _common

__all__ = ["loss"]

LOSS_TYPES = validate.LOSS_TYPES
OUTPUTS = ("losses", "chosen_rewards", "rejected_rewards")
_INPUTS = ("policy_chosen_logps", "policy_rejected_logps",
           "reference_chosen_logps", "reference_rejected_logps")


def _margin_loss(delta: torch.Tensor, beta: float, loss_type: str, eps: float, tau: float) -> torch.Tensor:
    """ℓ(Δ) for the loss types that depend on the margin alone, elementwise and differentiable."""
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
    if loss_type in ("sigmoid", "cdpo", "aot", "aot_unpaired"):
        return -(1 - eps) * pos - eps * neg
    if loss_type == "robust":
        return (-(1 - eps) * pos + eps * neg) / (1 - 2 * eps)
    if loss_type == "exo_pair":
        return torch.sigmoid(z) * (pos - math.log1p(-eps)) + torch.sigmoid(-z) * (neg - math.log(eps))
    # discopop: m·e^{−z} = exp(log σ(z/τ) − z) stays finite where e^{−z} alone overflows.
    m = torch.sigmoid(z / tau)
    return (1 - m) * (-pos) + torch.exp(F.logsigmoid(z / tau) - z)


def _gain_loss(g_c, g_r, beta: float, loss_type: str, eps: float, tau: float, shift: float) -> torch.Tensor:
    a, b = beta * g_c, beta * g_r
    if loss_type == "nca_pair":
        return -F.logsigmoid(a) - F.logsigmoid(-a) / 2 - F.logsigmoid(-b) / 2
    if loss_type == "bco_pair":
        return -F.logsigmoid(a - shift) - F.logsigmoid(shift - b)
    if loss_type == "sppo_hard":
        return (g_c - 1 / (2 * beta)) ** 2 + (g_r + 1 / (2 * beta)) ** 2
    if loss_type == "apo_zero":
        return torch.sigmoid(-a) + torch.sigmoid(b)  # 1 − σ(a) = σ(−a): no cancellation for a ≫ 0
    if loss_type == "apo_down":
        return torch.sigmoid(a) + torch.sigmoid(b - a)
    if loss_type == "aot_unpaired":
        return _margin_loss(torch.sort(g_c, stable=True).values - torch.sort(g_r, stable=True).values,
                            beta, loss_type, eps, tau)
    return _margin_loss(g_c - g_r, beta, loss_type, eps, tau)


def chosen_nll(chosen_w, chosen_lengths, weight, aggregation, weight_name, chosen_name):
    """α·NLL_i of every pair's chosen response from the (work-dtype, differentiable) chosen
    log-probabilities (module docstring); the NLL term of dpo.loss and preference.cpo."""
    a, divides = validate.nll_term(weight_name, weight, aggregation, chosen_lengths is not None)
    if chosen_lengths is not None:
        n = _common.int_array("chosen_lengths", chosen_lengths)
        validate.same_shape(**{chosen_name: tuple(chosen_w.shape), "chosen_lengths": tuple(n.shape)})
        validate.lengths("chosen_lengths", n.tolist())
    if not divides:
        return -a * chosen_w
    if aggregation == "seq-mean-token-mean":
        return -a * chosen_w / n.to(device=chosen_w.device, dtype=chosen_w.dtype)
    return -a * chosen_w * (chosen_w.shape[0] / int(n.sum()))


def loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
         reference_rejected_logps, beta: float = 0.1, loss_type: str = "sigmoid",
         label_smoothing: float = 0.0, discopop_tau: float = 0.05, reward_shift: float = 0.0,
         rpo_alpha: float = 0.0, nll_aggregation: str | None = None, chosen_lengths=None):
    """Per-pair preference loss (no mean over the batch); formulas and papers in the module
    docstring. ``label_smoothing`` enters sigmoid, cdpo, robust, exo_pair (ε > 0), aot and
    aot_unpaired; ``discopop_tau`` only discopop; ``reward_shift`` only bco_pair; ``rpo_alpha``
    weighs the chosen NLL (``nll_aggregation``; ``chosen_lengths`` [B] its token counts). All four
    inputs are [B]. Returns {"losses"[B], "chosen_rewards"[B] = β·g_c, "rejected_rewards"[B] =
    β·g_r}, all differentiable wrt the policy log-probabilities (the references are constants).
    """
    pc, pr, rc, rr = (_common.array(name, x) for name, x in zip(
        _INPUTS, (policy_chosen_logps, policy_rejected_logps,
                  reference_chosen_logps, reference_rejected_logps)))
    validate.rank("policy_chosen_logps", tuple(pc.shape), 1)
    validate.same_shape(**dict(zip(_INPUTS, (tuple(t.shape) for t in (pc, pr, rc, rr)))))
    b = validate.dpo_beta(beta)
    validate.loss_type(loss_type)
    eps = validate.label_smoothing(label_smoothing, loss_type)
    tau = validate.discopop_tau(discopop_tau)
    shift = validate.reward_shift(reward_shift)

    out = _common.result_dtype(pc, pr, rc, rr)
    work = _common.work_dtype(out)
    pc_w, pr_w = _common.upcast(pc, work), _common.upcast(pr, work)
    rc_w, rr_w = _common.constant(rc, work), _common.constant(rr, work)
    g_c, g_r = pc_w - rc_w, pr_w - rr_w
    nll = chosen_nll(pc_w, chosen_lengths, rpo_alpha, nll_aggregation, "rpo_alpha", "policy_chosen_logps")
    if loss_type == "aot":  # the margin regrouped as (π_c − π_r) − (ref_c − ref_r), each side sorted
        delta = torch.sort(pc_w - pr_w, stable=True).values - torch.sort(rc_w - rr_w, stable=True).values
        losses = _margin_loss(delta, b, loss_type, eps, tau)
    else:
        losses = _gain_loss(g_c, g_r, b, loss_type, eps, tau, shift)
    if rpo_alpha != 0:
        losses = losses + nll
    return {"losses": losses.to(out), "chosen_rewards": (b * g_c).to(out),
            "rejected_rewards": (b * g_r).to(out)}
