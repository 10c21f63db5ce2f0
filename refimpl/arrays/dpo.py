"""Direct Preference Optimization and its per-pair loss variants over the array API.

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
or −c_i·B/Σ_j n_j ('token-mean', the pair's share of the batch token mean), with c_i =
policy_chosen_logps[i] and n_i = chosen_lengths[i]; AOT adds pair i's NLL at position i.

The two AOT losses couple the batch: sort is ascending over the batch dimension and losses[i]
belongs to the i-th sorted position (as TRL 1.16.0 trainer/dpo_trainer.py returns them). The
gradient moves through the sorting permutation (ties: the stable order; the vectors avoid
ties, where the gradient is not unique). BCO's δ is the running mean of the implicit rewards
in the paper; TRL 1.16.0 and Liger 0.8.5 use δ = 0 (the default here). The implicit rewards
are a = β·g_c and b = β·g_r (DPO §5). Same names and contract as ``refimpl.exact.dpo``.
"""
from __future__ import annotations

import math

from lossproof.refimpl import validate
from lossproof.refimpl.arrays import _xp

__all__ = ["loss", "loss_vjp"]

LOSS_TYPES = validate.LOSS_TYPES
SORTED = ("aot", "aot_unpaired")
OUTPUTS = ("losses", "chosen_rewards", "rejected_rewards")
_INPUTS = ("policy_chosen_logps", "policy_rejected_logps",
           "reference_chosen_logps", "reference_rejected_logps")


def _prepare(arrays, beta, loss_type, label_smoothing, discopop_tau, reward_shift):
    xp = _xp.namespace(*arrays)
    dt = _xp.float_dtype(xp, **dict(zip(_INPUTS, arrays)))
    pc, pr, rc, rr = (_xp.array(xp, name, x, dt) for name, x in zip(_INPUTS, arrays))
    validate.rank("policy_chosen_logps", _xp.shape(pc), 1)
    validate.same_shape(**dict(zip(_INPUTS, map(_xp.shape, (pc, pr, rc, rr)))))
    b = validate.dpo_beta(beta)
    validate.loss_type(loss_type)
    eps = validate.label_smoothing(label_smoothing, loss_type)
    tau = validate.discopop_tau(discopop_tau)
    shift = validate.reward_shift(reward_shift)
    return xp, dt, pc, pr, rc, rr, b, eps, tau, shift


def _margin_loss(xp, delta, beta, loss_type, eps, tau):
    """ℓ(Δ) and dℓ/dΔ (elementwise) for the loss types that depend on the margin alone."""
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
    if loss_type in ("sigmoid", "cdpo", "aot", "aot_unpaired"):
        return (-(1 - eps) * ls_pos - eps * ls_neg,
                beta * (-(1 - eps) * s_neg + eps * s_pos))
    if loss_type == "robust":
        norm = 1 - 2 * eps  # ε < 1/2 keeps it positive
        return ((-(1 - eps) * ls_pos + eps * ls_neg) / norm,
                beta * (-(1 - eps) * s_neg - eps * s_pos) / norm)
    if loss_type == "exo_pair":
        # dℓ/dz = σ(z)σ(−z)·(z − log((1−ε)/ε)), since log σ(z) − log σ(−z) = z.
        log_keep, log_flip = math.log1p(-eps), math.log(eps)
        value = s_pos * (ls_pos - log_keep) + s_neg * (ls_neg - log_flip)
        return value, beta * s_pos * s_neg * (z - (log_keep - log_flip))
    # discopop: m = σ(z/τ); m·e^{−z} = exp(log σ(z/τ) − z) stays finite where e^{−z} overflows.
    ls_m, ls_mneg = _xp.logsigmoid(xp, z / tau), _xp.logsigmoid(xp, -z / tau)
    m = _xp.sigmoid(xp, z / tau)
    m_exp = xp.exp(ls_m - z)
    dm = xp.exp(ls_m + ls_mneg) / tau  # m' = σ(z/τ)σ(−z/τ)/τ
    dm_exp = xp.exp(ls_m + ls_mneg - z) / tau
    value = (1 - m) * (-ls_pos) + m_exp
    return value, beta * (dm * ls_pos + dm_exp - (1 - m) * s_neg - m_exp)


def _gain_loss(xp, g_c, g_r, beta, loss_type, eps, tau, shift):
    """ℓ(g_c, g_r), ∂ℓ/∂g_c and ∂ℓ/∂g_r (elementwise) for the per-pair loss types."""
    a, b = beta * g_c, beta * g_r
    if loss_type == "nca_pair":
        value = -_xp.logsigmoid(xp, a) - _xp.logsigmoid(xp, -a) / 2 - _xp.logsigmoid(xp, -b) / 2
        return (value, beta * (-_xp.sigmoid(xp, -a) + _xp.sigmoid(xp, a) / 2),
                beta * _xp.sigmoid(xp, b) / 2)
    if loss_type == "bco_pair":
        value = -_xp.logsigmoid(xp, a - shift) - _xp.logsigmoid(xp, shift - b)
        return value, -beta * _xp.sigmoid(xp, shift - a), beta * _xp.sigmoid(xp, b - shift)
    if loss_type == "sppo_hard":
        half = 1 / (2 * beta)
        gc, gr = g_c - half, g_r + half
        return gc * gc + gr * gr, 2 * gc, 2 * gr
    if loss_type == "apo_zero":
        sa, sb = _xp.sigmoid(xp, a), _xp.sigmoid(xp, b)
        # 1 − σ(a) = σ(−a): no cancellation where σ(a) ≈ 1 (a ≫ 0).
        return _xp.sigmoid(xp, -a) + sb, -beta * sa * _xp.sigmoid(xp, -a), beta * sb * _xp.sigmoid(xp, -b)
    if loss_type == "apo_down":
        z = a - b
        sa, sz = _xp.sigmoid(xp, a), _xp.sigmoid(xp, z)
        dz = beta * sz * _xp.sigmoid(xp, -z)
        return sa + _xp.sigmoid(xp, -z), beta * sa * _xp.sigmoid(xp, -a) - dz, dz  # 1 − σ(z) = σ(−z)
    value, slope = _margin_loss(xp, g_c - g_r, beta, loss_type, eps, tau)
    return value, slope, -slope


def _losses(xp, pc, pr, rc, rr, beta, loss_type, eps, tau, shift):
    """losses[B], ∂losses[i]/∂pc[ic[i]] and ∂losses[i]/∂pr[ir[i]] with the sorting
    permutations ic, ir of AOT (None for the per-pair types)."""
    if loss_type not in SORTED:
        value, dc, dr = _gain_loss(xp, pc - rc, pr - rr, beta, loss_type, eps, tau, shift)
        return value, dc, dr, None, None
    if loss_type == "aot":
        ic = ir = xp.argsort(pc - pr, stable=True)
        delta = xp.take(pc - pr, ic) - xp.sort(rc - rr, stable=True)
    else:
        ic, ir = xp.argsort(pc - rc, stable=True), xp.argsort(pr - rr, stable=True)
        delta = xp.take(pc - rc, ic) - xp.take(pr - rr, ir)
    value, slope = _margin_loss(xp, delta, beta, loss_type, eps, tau)
    return value, slope, -slope, ic, ir


def chosen_nll(xp, chosen, chosen_lengths, weight, aggregation, weight_name, chosen_name):
    """(α·NLL_i, its derivative in c_i) for every pair (module docstring); the NLL term of
    dpo.loss (rpo_alpha) and preference.cpo (cpo_alpha)."""
    a, divides = validate.nll_term(weight_name, weight, aggregation, chosen_lengths is not None)
    if chosen_lengths is not None:
        n = _xp.int_array(xp, "chosen_lengths", chosen_lengths)
        validate.same_shape(**{chosen_name: _xp.shape(chosen), "chosen_lengths": _xp.shape(n)})
        validate.lengths("chosen_lengths", [int(v) for v in n])
    slope = xp.full(_xp.shape(chosen), -a, dtype=chosen.dtype)
    if divides:
        if aggregation == "seq-mean-token-mean":
            slope = slope / xp.astype(n, chosen.dtype)
        else:
            slope = slope * (_xp.shape(chosen)[0] / sum(int(v) for v in n))
    return slope * chosen, slope


def loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
         reference_rejected_logps, beta: float = 0.1, loss_type: str = "sigmoid",
         label_smoothing: float = 0.0, discopop_tau: float = 0.05, reward_shift: float = 0.0,
         rpo_alpha: float = 0.0, nll_aggregation: str | None = None, chosen_lengths=None):
    """Per-pair preference loss (no mean over the batch); formulas and papers in the module
    docstring. ``label_smoothing`` enters sigmoid, cdpo, robust, exo_pair (ε > 0), aot and
    aot_unpaired; ``discopop_tau`` only discopop; ``reward_shift`` only bco_pair; ``rpo_alpha``
    weighs the chosen NLL (normalised by ``nll_aggregation``, ``chosen_lengths`` its token counts).
    Returns {"losses"[B], "chosen_rewards"[B] = β·g_c, "rejected_rewards"[B] = β·g_r}.
    """
    xp, _, pc, pr, rc, rr, b, eps, tau, shift = _prepare(
        (policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
         reference_rejected_logps), beta, loss_type, label_smoothing, discopop_tau, reward_shift)
    nll, _ = chosen_nll(xp, pc, chosen_lengths, rpo_alpha, nll_aggregation, "rpo_alpha", "policy_chosen_logps")
    losses = _losses(xp, pc, pr, rc, rr, b, loss_type, eps, tau, shift)[0]
    if rpo_alpha != 0:
        losses = losses + nll
    return {"losses": losses, "chosen_rewards": b * (pc - rc), "rejected_rewards": b * (pr - rr)}


def loss_vjp(cotangent, policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
             reference_rejected_logps, beta: float = 0.1, loss_type: str = "sigmoid",
             label_smoothing: float = 0.0, discopop_tau: float = 0.05, reward_shift: float = 0.0,
             rpo_alpha: float = 0.0, nll_aggregation: str | None = None, chosen_lengths=None):
    """Gradient of Σ_out Σ cotangent[out]·out with respect to the two policy log-probabilities
    (DPO §5: ∇ = −β·σ(−βΔ)·(∇g_c − ∇g_r) for the sigmoid loss; AOT through the sorting
    permutation). ``cotangent`` is a dict by output name; a missing output has a zero cotangent."""
    xp, dt, pc, pr, rc, rr, b, eps, tau, shift = _prepare(
        (policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
         reference_rejected_logps), beta, loss_type, label_smoothing, discopop_tau, reward_shift)
    _, nll_slope = chosen_nll(xp, pc, chosen_lengths, rpo_alpha, nll_aggregation, "rpo_alpha", "policy_chosen_logps")
    ct = _xp.cotangents(xp, cotangent, dt, OUTPUTS, "policy_chosen_logps", _xp.shape(pc))
    _, dc, dr, ic, ir = _losses(xp, pc, pr, rc, rr, b, loss_type, eps, tau, shift)
    from_c, from_r = ct["losses"] * dc, ct["losses"] * dr
    if ic is not None:
        # Position i belongs to pair ic[i]: pair j receives position argsort(ic)[j] (a gather,
        # since the array API has no scatter).
        from_c, from_r = xp.take(from_c, xp.argsort(ic)), xp.take(from_r, xp.argsort(ir))
    if rpo_alpha != 0:
        from_c = from_c + ct["losses"] * nll_slope
    return {"policy_chosen_logps": from_c + b * ct["chosen_rewards"],
            "policy_rejected_logps": from_r + b * ct["rejected_rewards"]}
