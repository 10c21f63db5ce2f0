"""Reference-free and unpaired preference objectives: SimPO, CPO, ORPO, KTO.

Every function returns per-example values (no mean over the batch); the libraries' batch means
and their NLL terms computed from token logits are outside these objectives unless stated.
σ is the logistic function, ε = label_smoothing (the conservative cDPO mixture that TRL 1.16.0
and Liger 0.8.5 apply to SimPO and CPO).

    simpo  z = β·(c/|y_c| − r/|y_r|) − γ,  ℓ = −(1−ε)·log σ(z) − ε·log σ(−z)
           Meng et al. 2024 (arXiv 2405.14734) §2.2 eq. 6; c, r sequence log-probabilities
    cpo    z = β·(c − r),  ℓ = −(1−ε)·log σ(z) − ε·log σ(−z) + α·NLL(c)
           Xu et al. 2024 (arXiv 2401.08417) §3 eq. 3 (L_prefer) plus α = cpo_alpha times
           L_NLL = −log π(y_w|x) (CPO §3; α = 0 by default here, 1 in the paper and TRL), the
           NLL normalised as refimpl/exact/dpo.py describes (nll_aggregation)
    orpo   ℓ = −c̄ + λ·(−log σ(log odds(c̄) − log odds(r̄))),  log odds(p) = p − log(1 − e^p)
           Hong et al. 2024 (arXiv 2403.07691) §4 eqs. 6-7, with c̄, r̄ the average per-token
           log-probabilities (the paper's length-normalised P_θ(y|x), eq. 4); −c̄ is L_SFT of the
           pair (its chosen tokens' mean NLL)
    kto    z0 = max(0, mean(kl_policy − kl_reference)) (detached), ρ = policy − reference,
           ℓ = λ_D·(1 − σ(β(ρ − z0))) (desirable), λ_U·(1 − σ(β(z0 − ρ))) (undesirable)
           Ethayarajh et al. 2024 (arXiv 2402.01306) §4.1 eq. 7; z0 estimated as TRL 1.16.0
           (trainer/kto_trainer.py) does: the batch mean over mismatched pairs (x, y′)
"""
from __future__ import annotations

import mpmath
import numpy as np

from lossproof.refimpl import validate
from lossproof.refimpl.exact import mp
from lossproof.refimpl.exact.dpo import chosen_nll

__all__ = ["simpo", "simpo_vjp", "cpo", "cpo_vjp", "orpo", "orpo_vjp", "kto", "kto_vjp"]

PAIR_OUTPUTS = ("losses", "chosen_rewards", "rejected_rewards")
KTO_OUTPUTS = ("losses", "kl")


def _pair(chosen_logps, rejected_logps):
    c, r = mp.array("chosen_logps", chosen_logps), mp.array("rejected_logps", rejected_logps)
    validate.rank("chosen_logps", c.shape, 1)
    validate.same_shape(chosen_logps=c.shape, rejected_logps=r.shape)
    return c, r


def _lengths(name, x, shape):
    n = mp.int_array(name, x)
    validate.same_shape(**{"chosen_logps": shape, name: n.shape})
    validate.lengths(name, n.tolist())
    return n


def _cotangents(cotangent, outputs, shapes):
    """The cotangent dict by output name; a missing output has a zero cotangent."""
    if not isinstance(cotangent, dict):
        validate.fail("cotangent", f"expected a dict by output name ({', '.join(outputs)})")
    unknown = set(cotangent) - set(outputs)
    if unknown:
        validate.fail("cotangent", f"unknown outputs {sorted(map(str, unknown))}")
    ct = {}
    for name in outputs:
        if name in cotangent:
            ct[name] = mp.array("cotangent", cotangent[name])
            validate.same_shape(**{"output": shapes[name], f"cotangent[{name!r}]": ct[name].shape})
        else:
            ct[name] = mp.zeros(shapes[name])
    return ct


def _smoothed(z, eps):
    """−(1−ε)·log σ(z) − ε·log σ(−z) and its derivative in z."""
    return (-(1 - eps) * mp.logsigmoid(z) - eps * mp.logsigmoid(-z),
            -(1 - eps) * mp.sigmoid(-z) + eps * mp.sigmoid(z))


# --------------------------------------------------------------------------- SimPO

def _simpo(chosen_logps, rejected_logps, chosen_lengths, rejected_lengths, beta, gamma, label_smoothing):
    c, r = _pair(chosen_logps, rejected_logps)
    nc = _lengths("chosen_lengths", chosen_lengths, c.shape)
    nr = _lengths("rejected_lengths", rejected_lengths, c.shape)
    b = mp.mpf(validate.dpo_beta(beta))
    g = mp.mpf(validate.simpo_gamma(gamma))
    eps = mp.mpf(validate.label_smoothing(label_smoothing))
    nc, nr = nc.astype(object), nr.astype(object)
    return c / nc, r / nr, nc, nr, b, g, eps


@mp.exact
def simpo(chosen_logps, rejected_logps, chosen_lengths, rejected_lengths, beta: float = 2.0,
          gamma: float = 1.0, label_smoothing: float = 0.0):
    """SimPO (Meng et al. 2024, arXiv 2405.14734) §2.2 eq. 6: the length-normalised reward
    β·log π(y|x)/|y| and the target margin γ, per pair (smoothed with ε as TRL/Liger do).
    chosen_logps, rejected_logps [B] are sequence sums; the lengths [B] count their tokens.
    Returns {"losses"[B], "chosen_rewards"[B] = β·c/|y_c|, "rejected_rewards"[B] = β·r/|y_r|}."""
    cm, rm, _, _, b, g, eps = _simpo(chosen_logps, rejected_logps, chosen_lengths, rejected_lengths,
                                     beta, gamma, label_smoothing)
    losses, _ = _smoothed(b * (cm - rm) - g, eps)
    return {"losses": losses, "chosen_rewards": b * cm, "rejected_rewards": b * rm}


@mp.exact
def simpo_vjp(cotangent, chosen_logps, rejected_logps, chosen_lengths, rejected_lengths,
              beta: float = 2.0, gamma: float = 1.0, label_smoothing: float = 0.0):
    """Gradient of Σ_out Σ cotangent[out]·out wrt chosen_logps and rejected_logps:
    ∂ℓ/∂c = ℓ'(z)·β/|y_c|, ∂ℓ/∂r = −ℓ'(z)·β/|y_r|."""
    cm, rm, nc, nr, b, g, eps = _simpo(chosen_logps, rejected_logps, chosen_lengths, rejected_lengths,
                                       beta, gamma, label_smoothing)
    ct = _cotangents(cotangent, PAIR_OUTPUTS, {k: cm.shape for k in PAIR_OUTPUTS})
    _, slope = _smoothed(b * (cm - rm) - g, eps)
    return {"chosen_logps": (ct["losses"] * slope + ct["chosen_rewards"]) * b / nc,
            "rejected_logps": (-ct["losses"] * slope + ct["rejected_rewards"]) * b / nr}


# --------------------------------------------------------------------------- CPO

def _cpo(chosen_logps, rejected_logps, beta, label_smoothing, cpo_alpha, nll_aggregation, chosen_lengths):
    c, r = _pair(chosen_logps, rejected_logps)
    b, eps = mp.mpf(validate.dpo_beta(beta)), mp.mpf(validate.label_smoothing(label_smoothing))
    return c, r, b, eps, chosen_nll(c, chosen_lengths, cpo_alpha, nll_aggregation, "cpo_alpha", "chosen_logps")


@mp.exact
def cpo(chosen_logps, rejected_logps, beta: float = 0.1, label_smoothing: float = 0.0, cpo_alpha: float = 0.0,
        nll_aggregation: str | None = None, chosen_lengths=None):
    """CPO (Xu et al. 2024, arXiv 2401.08417) §3: L_prefer (eq. 3, DPO without the reference,
    −log σ(β(c − r)) on sequence log-probabilities, smoothed with ε as TRL does) plus
    ``cpo_alpha`` times L_NLL of the chosen response, normalised by ``nll_aggregation``
    (``chosen_lengths`` [B] are its token counts, needed unless α = 0 or 'seq-mean-token-sum').
    Returns {"losses"[B], "chosen_rewards"[B] = β·c, "rejected_rewards"[B] = β·r}."""
    c, r, b, eps, (nll, _) = _cpo(chosen_logps, rejected_logps, beta, label_smoothing, cpo_alpha,
                                  nll_aggregation, chosen_lengths)
    losses, _ = _smoothed(b * (c - r), eps)
    return {"losses": losses + nll, "chosen_rewards": b * c, "rejected_rewards": b * r}


@mp.exact
def cpo_vjp(cotangent, chosen_logps, rejected_logps, beta: float = 0.1, label_smoothing: float = 0.0,
            cpo_alpha: float = 0.0, nll_aggregation: str | None = None, chosen_lengths=None):
    """Gradient wrt chosen_logps and rejected_logps: ∂ℓ/∂c = β·ℓ'(z) + ∂(α·NLL)/∂c, ∂ℓ/∂r = −β·ℓ'(z)."""
    c, r, b, eps, (_, nll_slope) = _cpo(chosen_logps, rejected_logps, beta, label_smoothing, cpo_alpha,
                                        nll_aggregation, chosen_lengths)
    ct = _cotangents(cotangent, PAIR_OUTPUTS, {k: c.shape for k in PAIR_OUTPUTS})
    _, slope = _smoothed(b * (c - r), eps)
    return {"chosen_logps": b * (ct["losses"] * slope + ct["chosen_rewards"]) + ct["losses"] * nll_slope,
            "rejected_logps": b * (-ct["losses"] * slope + ct["rejected_rewards"])}


# --------------------------------------------------------------------------- ORPO

def _log_odds(p):
    """log(e^p/(1 − e^p)) = p − log(−expm1(p)) for p < 0, and its derivative 1/(1 − e^p)."""
    return p - mp.log(-mp.expm1(p)), 1 / (-mp.expm1(p))


def _orpo(chosen_logps, rejected_logps, beta):
    c, r = _pair(chosen_logps, rejected_logps)
    validate.below_zero("chosen_logps", c.tolist())
    validate.below_zero("rejected_logps", r.tolist())
    return c, r, mp.mpf(validate.dpo_beta(beta))


@mp.exact
def orpo(chosen_logps, rejected_logps, beta: float = 0.1):
    """ORPO (Hong et al. 2024, arXiv 2403.07691) §4 eqs. 6-7 per pair: L_SFT + λ·L_OR with
    L_SFT = −c̄ and L_OR = −log σ(log odds(c̄) − log odds(r̄)); c̄, r̄ [B] are average per-token
    log-probabilities (< 0), λ = ``beta`` (TRL's name). Returns {"losses"[B], "chosen_rewards"[B]
    = λ·c̄, "rejected_rewards"[B] = λ·r̄} (TRL 1.16.0 experimental/orpo's logged rewards)."""
    c, r, b = _orpo(chosen_logps, rejected_logps, beta)
    (lo_c, _), (lo_r, _) = _log_odds(c), _log_odds(r)
    return {"losses": -c - b * mp.logsigmoid(lo_c - lo_r), "chosen_rewards": b * c, "rejected_rewards": b * r}


@mp.exact
def orpo_vjp(cotangent, chosen_logps, rejected_logps, beta: float = 0.1):
    """Gradient wrt chosen_logps and rejected_logps: with x = log odds(c̄) − log odds(r̄),
    ∂ℓ/∂c̄ = −1 − λ·σ(−x)/(1 − e^c̄), ∂ℓ/∂r̄ = λ·σ(−x)/(1 − e^r̄)."""
    c, r, b = _orpo(chosen_logps, rejected_logps, beta)
    ct = _cotangents(cotangent, PAIR_OUTPUTS, {k: c.shape for k in PAIR_OUTPUTS})
    (lo_c, d_c), (lo_r, d_r) = _log_odds(c), _log_odds(r)
    s = mp.sigmoid(lo_r - lo_c)
    return {"chosen_logps": ct["losses"] * (-1 - b * s * d_c) + b * ct["chosen_rewards"],
            "rejected_logps": ct["losses"] * (b * s * d_r) + b * ct["rejected_rewards"]}


# --------------------------------------------------------------------------- KTO

def _kto(policy_logps, reference_logps, desirable, kl_policy_logps, kl_reference_logps, beta,
         desirable_weight, undesirable_weight):
    p, q = mp.array("policy_logps", policy_logps), mp.array("reference_logps", reference_logps)
    validate.rank("policy_logps", p.shape, 1)
    validate.same_shape(policy_logps=p.shape, reference_logps=q.shape)
    d = mp.mask("desirable", desirable, p.shape)
    kp, kq = mp.array("kl_policy_logps", kl_policy_logps), mp.array("kl_reference_logps", kl_reference_logps)
    validate.rank("kl_policy_logps", kp.shape, 1)
    validate.nonempty("kl_policy_logps", kp.shape)
    validate.same_shape(kl_policy_logps=kp.shape, kl_reference_logps=kq.shape)
    b = mp.mpf(validate.dpo_beta(beta))
    w_d = mp.mpf(validate.class_weight("desirable_weight", desirable_weight))
    w_u = mp.mpf(validate.class_weight("undesirable_weight", undesirable_weight))
    z0 = max(mp.ZERO, mpmath.fsum(kp - kq) / kp.shape[0])
    # 1 − σ(x) = σ(−x): the loss is λ·σ(−s·β(ρ − z0)) with s = +1 (desirable) or −1.
    sign = np.where(d.astype(bool), mp.ONE, -mp.ONE)
    weight = np.where(d.astype(bool), w_d, w_u)
    return p - q, z0, b, sign, weight


@mp.exact
def kto(policy_logps, reference_logps, desirable, kl_policy_logps, kl_reference_logps,
        beta: float = 0.1, desirable_weight: float = 1.0, undesirable_weight: float = 1.0):
    """KTO (Ethayarajh et al. 2024, arXiv 2402.01306) §4.1 eq. 7 per example: λ_y − v(x, y) with
    v = λ_D·σ(β(ρ − z0)) for a desirable y and λ_U·σ(β(z0 − ρ)) for an undesirable one,
    ρ = policy_logps − reference_logps (sequence sums, [N]) and the reference point z0 =
    max(0, mean(kl_policy_logps − kl_reference_logps)) over the M mismatched completions
    (TRL 1.16.0 trainer/kto_trainer.py; detached: no gradient flows through it).
    ``desirable`` [N] is 1 for a desirable example, 0 for an undesirable one.
    Returns {"losses"[N], "kl": z0 (a scalar)}."""
    rho, z0, b, sign, weight = _kto(policy_logps, reference_logps, desirable, kl_policy_logps,
                                    kl_reference_logps, beta, desirable_weight, undesirable_weight)
    return {"losses": weight * mp.sigmoid(-sign * b * (rho - z0)), "kl": z0}


@mp.exact
def kto_vjp(cotangent, policy_logps, reference_logps, desirable, kl_policy_logps, kl_reference_logps,
            beta: float = 0.1, desirable_weight: float = 1.0, undesirable_weight: float = 1.0):
    """Gradient wrt policy_logps: ∂ℓ/∂ρ = −s·λ·β·σ(x)σ(−x), x = s·β(ρ − z0) (z0 is detached;
    the cotangent of "kl" reaches no policy_logps)."""
    rho, z0, b, sign, weight = _kto(policy_logps, reference_logps, desirable, kl_policy_logps,
                                    kl_reference_logps, beta, desirable_weight, undesirable_weight)
    ct = _cotangents(cotangent, KTO_OUTPUTS, {"losses": rho.shape, "kl": ()})
    x = sign * b * (rho - z0)
    return {"policy_logps": ct["losses"] * (-sign * weight * b * mp.sigmoid(x) * mp.sigmoid(-x))}
