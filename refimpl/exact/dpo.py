"""Direct Preference Optimization and its per-pair loss variants.

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

With α = rpo_alpha > 0 each pair's loss also carries α times the NLL of its chosen response
(RPO, Pang et al. 2024, arXiv 2404.19733 §2: DPO + NLL on the winning sequence; TRL's former
rpo_alpha, OpenRLHF's nll_loss_coef, Liger's compute_nll_loss with alpha). With c_i the chosen
sequence log-probability (policy_chosen_logps) and n_i its token count (chosen_lengths), the
pair's NLL by ``nll_aggregation`` is

    seq-mean-token-mean   −c_i / n_i              (RPO §2: divided by the length; OpenRLHF)
    seq-mean-token-sum    −c_i                    (the sequence NLL; no lengths needed)
    token-mean            −c_i · B / Σ_j n_j      (the pair's share of the batch token mean
                                                   −Σc/Σn of TRL's 'sft' loss type and Liger)

so that the mean of the losses over the pairs is the trainer's loss. For AOT the NLL of pair i is
added to losses[i] (the i-th sorted position's loss): the mean is unchanged.

The two AOT losses couple the batch: sort is ascending over the batch dimension and losses[i]
belongs to the i-th sorted position (as TRL 1.16.0 trainer/dpo_trainer.py returns them). The
gradient moves through the sorting permutation (ties: the stable order; the vectors avoid
ties, where the gradient is not unique). BCO's δ is the running mean of the implicit rewards
in the paper; TRL 1.16.0 and Liger 0.8.5 use δ = 0 (the default here). The implicit rewards
are a = β·g_c and b = β·g_r (DPO §5).
"""
from __future__ import annotations

import mpmath
import numpy as np

from lossproof.refimpl import validate
from lossproof.refimpl.exact import mp

__all__ = ["loss", "loss_vjp"]

LOSS_TYPES = validate.LOSS_TYPES
SORTED = ("aot", "aot_unpaired")
OUTPUTS = ("losses", "chosen_rewards", "rejected_rewards")
_INPUTS = ("policy_chosen_logps", "policy_rejected_logps",
           "reference_chosen_logps", "reference_rejected_logps")


def _prepare(arrays, beta, loss_type, label_smoothing, discopop_tau, reward_shift):
    pc, pr, rc, rr = (mp.array(name, x) for name, x in zip(_INPUTS, arrays))
    validate.rank("policy_chosen_logps", pc.shape, 1)
    validate.same_shape(**dict(zip(_INPUTS, (pc.shape, pr.shape, rc.shape, rr.shape))))
    b = mp.mpf(validate.dpo_beta(beta))
    validate.loss_type(loss_type)
    eps = mp.mpf(validate.label_smoothing(label_smoothing, loss_type))
    tau = mp.mpf(validate.discopop_tau(discopop_tau))
    shift = mp.mpf(validate.reward_shift(reward_shift))
    return pc, pr, rc, rr, b, eps, tau, shift


def chosen_nll(chosen, chosen_lengths, weight, aggregation, weight_name, chosen_name):
    """α·NLL_i of each pair's chosen response and its derivative in c_i (module docstring); the
    NLL term of dpo.loss (rpo_alpha) and preference.cpo (cpo_alpha)."""
    a, divides = validate.nll_term(weight_name, weight, aggregation, chosen_lengths is not None)
    a = mp.mpf(a)
    if chosen_lengths is not None:
        n = mp.int_array("chosen_lengths", chosen_lengths)
        validate.same_shape(**{chosen_name: chosen.shape, "chosen_lengths": n.shape})
        validate.lengths("chosen_lengths", n.tolist())
    if not divides:
        return -a * chosen, np.full(chosen.shape, -a, dtype=object)
    n = n.astype(object)
    denom = n if aggregation == "seq-mean-token-mean" else np.full(n.shape, mp.mpf(int(n.sum())) / n.shape[0],
                                                                    dtype=object)
    return -a * chosen / denom, -a / denom


def _margin_loss(delta, beta, loss_type, eps, tau):
    """ℓ(Δ) and dℓ/dΔ (elementwise) for the loss types that depend on the margin alone."""
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
    if loss_type in ("sigmoid", "cdpo", "aot", "aot_unpaired"):
        return (-(1 - eps) * ls_pos - eps * ls_neg,
                beta * (-(1 - eps) * s_neg + eps * s_pos))
    if loss_type == "robust":
        norm = 1 - 2 * eps  # ε < 1/2 keeps it positive
        return ((-(1 - eps) * ls_pos + eps * ls_neg) / norm,
                beta * (-(1 - eps) * s_neg - eps * s_pos) / norm)
    if loss_type == "exo_pair":
        # dℓ/dz = σ(z)σ(−z)·(log σ(z) − log σ(−z) − log((1−ε)/ε)) and log σ(z) − log σ(−z) = z.
        log_odds = mpmath.log1p(-eps) - mpmath.log(eps)
        value = s_pos * (ls_pos - mpmath.log1p(-eps)) + s_neg * (ls_neg - mpmath.log(eps))
        return value, beta * s_pos * s_neg * (z - log_odds)
    # discopop: m = σ(z/τ), ℓ = (1 − m)·(−log σ(z)) + m·e^{−z};
    # dℓ/dz = m'·(log σ(z) + e^{−z}) − (1 − m)·σ(−z) − m·e^{−z},  m' = σ(z/τ)σ(−z/τ)/τ.
    # m·e^{−z} = exp(log σ(z/τ) − z) stays finite where e^{−z} alone overflows (z ≪ 0).
    ls_m, ls_mneg = mp.logsigmoid(z / tau), mp.logsigmoid(-z / tau)
    m = mp.sigmoid(z / tau)
    m_exp = mp.exp(ls_m - z)
    dm_exp = mp.exp(ls_m + ls_mneg - z) / tau  # m'·e^{−z}
    dm = mp.exp(ls_m + ls_mneg) / tau
    value = (1 - m) * (-ls_pos) + m_exp
    slope = dm * ls_pos + dm_exp - (1 - m) * s_neg - m_exp
    return value, beta * slope


def _gain_loss(g_c, g_r, beta, loss_type, eps, tau, shift):
    """ℓ(g_c, g_r), ∂ℓ/∂g_c and ∂ℓ/∂g_r (elementwise) for the per-pair loss types."""
    a, b = beta * g_c, beta * g_r
    if loss_type == "nca_pair":
        value = -mp.logsigmoid(a) - mp.logsigmoid(-a) / 2 - mp.logsigmoid(-b) / 2
        return value, beta * (-mp.sigmoid(-a) + mp.sigmoid(a) / 2), beta * mp.sigmoid(b) / 2
    if loss_type == "bco_pair":
        value = -mp.logsigmoid(a - shift) - mp.logsigmoid(shift - b)
        return value, -beta * mp.sigmoid(shift - a), beta * mp.sigmoid(b - shift)
    if loss_type == "sppo_hard":
        half = 1 / (2 * beta)
        gc, gr = g_c - half, g_r + half
        return gc * gc + gr * gr, 2 * gc, 2 * gr
    if loss_type == "apo_zero":
        sa, sb = mp.sigmoid(a), mp.sigmoid(b)
        # 1 − σ(a) = σ(−a): no cancellation where σ(a) ≈ 1 (a ≫ 0).
        return mp.sigmoid(-a) + sb, -beta * sa * mp.sigmoid(-a), beta * sb * mp.sigmoid(-b)
    if loss_type == "apo_down":
        z = a - b
        sa, sz = mp.sigmoid(a), mp.sigmoid(z)
        dz = beta * sz * mp.sigmoid(-z)
        return sa + mp.sigmoid(-z), beta * sa * mp.sigmoid(-a) - dz, dz  # 1 − σ(z) = σ(−z)
    value, slope = _margin_loss(g_c - g_r, beta, loss_type, eps, tau)
    return value, slope, -slope


def _losses(pc, pr, rc, rr, beta, loss_type, eps, tau, shift):
    """losses[B] and the Jacobian's two nonzero parts: ∂losses[i]/∂pc[j] = dc[i] if j = ic[i]
    (else 0), and likewise dr with ir for pr (ic, ir are the identity except for AOT)."""
    if loss_type in SORTED:
        if loss_type == "aot":
            ic = ir = np.argsort(pc - pr, kind="stable")
            ref = np.sort(rc - rr, kind="stable")
            delta = (pc - pr)[ic] - ref
        else:
            ic, ir = np.argsort(pc - rc, kind="stable"), np.argsort(pr - rr, kind="stable")
            delta = (pc - rc)[ic] - (pr - rr)[ir]
        value, slope = _margin_loss(delta, beta, loss_type, eps, tau)
        return value, slope, -slope, ic, ir
    ident = np.arange(pc.shape[0])
    value, dc, dr = _gain_loss(pc - rc, pr - rr, beta, loss_type, eps, tau, shift)
    return value, dc, dr, ident, ident


@mp.exact
def loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
         reference_rejected_logps, beta: float = 0.1, loss_type: str = "sigmoid",
         label_smoothing: float = 0.0, discopop_tau: float = 0.05, reward_shift: float = 0.0,
         rpo_alpha: float = 0.0, nll_aggregation: str | None = None, chosen_lengths=None):
    """Per-pair preference loss (no mean over the batch); the formulas and their papers are in
    the module docstring.

    Rafailov et al. 2023 (DPO) §4 eq. 7 (``sigmoid``; with ``label_smoothing`` ε > 0 the
    conservative form, as OpenRLHF's DPOLoss applies it — TRL 1.16 ignores ε for 'sigmoid');
    cDPO (Mitchell 2023) for ``cdpo`` (same formula); SLiC hinge; IPO (Azar et al. 2023)
    eq. 17; robust DPO (Chowdhury et al. 2024) eq. 8; EXO eq. 16; NCA §4; BCO §3;
    SPPO eq. 4.7 (hard); APO eqs. 7–8; DiscoPOP eq. 5; AOT §3 (paired and unpaired).
    ``label_smoothing`` enters sigmoid, cdpo, robust, exo_pair (needs ε > 0), aot and
    aot_unpaired; ``discopop_tau`` only discopop; ``reward_shift`` only bco_pair.
    ``rpo_alpha`` adds α times the chosen NLL normalised by ``nll_aggregation`` (RPO,
    arXiv 2404.19733 §2); ``chosen_lengths`` [B] (token counts) are needed unless α = 0 or the
    aggregation is 'seq-mean-token-sum'.
    Returns {"losses"[B], "chosen_rewards"[B] = β·g_c, "rejected_rewards"[B] = β·g_r}.
    """
    pc, pr, rc, rr, b, eps, tau, shift = _prepare(
        (policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps),
        beta, loss_type, label_smoothing, discopop_tau, reward_shift)
    nll, _ = chosen_nll(pc, chosen_lengths, rpo_alpha, nll_aggregation, "rpo_alpha", "policy_chosen_logps")
    losses = _losses(pc, pr, rc, rr, b, loss_type, eps, tau, shift)[0] + nll
    return {"losses": losses, "chosen_rewards": b * (pc - rc), "rejected_rewards": b * (pr - rr)}


@mp.exact
def loss_vjp(cotangent, policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
             reference_rejected_logps, beta: float = 0.1, loss_type: str = "sigmoid",
             label_smoothing: float = 0.0, discopop_tau: float = 0.05, reward_shift: float = 0.0,
             rpo_alpha: float = 0.0, nll_aggregation: str | None = None, chosen_lengths=None):
    """Gradient of Σ_out Σ cotangent[out]·out with respect to the two policy log-probabilities
    (DPO §5: ∇ = −β·σ(−βΔ)·(∇g_c − ∇g_r) for the sigmoid loss; the other types by the chain
    rule through ℓ(g_c, g_r), AOT through the sorting permutation); the NLL term adds
    −α/n_i (or −α, −α·B/Σn) to ∂losses[i]/∂c_i.

    ``cotangent`` is a dict by output name; a missing output has a zero cotangent.
    At the hinge kink the gradient of the active branch 1 − βΔ is used.
    """
    pc, pr, rc, rr, b, eps, tau, shift = _prepare(
        (policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps),
        beta, loss_type, label_smoothing, discopop_tau, reward_shift)
    _, nll_slope = chosen_nll(pc, chosen_lengths, rpo_alpha, nll_aggregation, "rpo_alpha", "policy_chosen_logps")
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
    _, dc, dr, ic, ir = _losses(pc, pr, rc, rr, b, loss_type, eps, tau, shift)
    # Rewards are β·gain; the loss of position i reaches the pair ic[i] (ir[i]).
    grad_c, grad_r = b * ct["chosen_rewards"], b * ct["rejected_rewards"]
    grad_c[ic] = grad_c[ic] + ct["losses"] * dc
    grad_r[ir] = grad_r[ir] + ct["losses"] * dr
    grad_c = grad_c + ct["losses"] * nll_slope
    return {"policy_chosen_logps": grad_c, "policy_rejected_logps": grad_r}
