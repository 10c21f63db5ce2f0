"""Reference-free and unpaired preference objectives over the array API: SimPO, CPO, ORPO, KTO.

Same names, formulas and contract as ``refimpl.exact.preference`` (papers cited there):

    simpo  ℓ = −(1−ε)·log σ(z) − ε·log σ(−z),  z = β·(c/|y_c| − r/|y_r|) − γ   SimPO eq. 6
    cpo    the same with z = β·(c − r)                                       CPO eq. 3
    orpo   ℓ = −c̄ − λ·log σ(log odds(c̄) − log odds(r̄)),  log odds(p) = p − log(−expm1(p))
                                                                             ORPO eqs. 6-7
    kto    ℓ = λ_y·σ(−s·β(ρ − z0)), s = ±1 (desirable / undesirable),
           z0 = max(0, mean(kl_policy − kl_reference)) detached               KTO eq. 7
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.arrays import _xp
from lossproof.refimpl.arrays.dpo import chosen_nll

__all__ = ["simpo", "simpo_vjp", "cpo", "cpo_vjp", "orpo", "orpo_vjp", "kto", "kto_vjp"]

PAIR_OUTPUTS = ("losses", "chosen_rewards", "rejected_rewards")


def _pair(xp_inputs):
    xp = _xp.namespace(*xp_inputs.values())
    dt = _xp.float_dtype(xp, **xp_inputs)
    c, r = (_xp.array(xp, name, x, dt) for name, x in xp_inputs.items())
    validate.rank("chosen_logps", _xp.shape(c), 1)
    validate.same_shape(chosen_logps=_xp.shape(c), rejected_logps=_xp.shape(r))
    return xp, dt, c, r


def _lengths(xp, name, x, shape, dt):
    n = _xp.int_array(xp, name, x)
    validate.same_shape(**{"chosen_logps": shape, name: _xp.shape(n)})
    validate.lengths(name, [int(v) for v in n])
    return xp.astype(n, dt)


def _smoothed(xp, z, eps):
    """−(1−ε)·log σ(z) − ε·log σ(−z) and its derivative in z."""
    return (-(1 - eps) * _xp.logsigmoid(xp, z) - eps * _xp.logsigmoid(xp, -z),
            -(1 - eps) * _xp.sigmoid(xp, -z) + eps * _xp.sigmoid(xp, z))


# --------------------------------------------------------------------------- SimPO

def _simpo(chosen_logps, rejected_logps, chosen_lengths, rejected_lengths, beta, gamma, label_smoothing):
    xp, dt, c, r = _pair({"chosen_logps": chosen_logps, "rejected_logps": rejected_logps})
    nc = _lengths(xp, "chosen_lengths", chosen_lengths, _xp.shape(c), dt)
    nr = _lengths(xp, "rejected_lengths", rejected_lengths, _xp.shape(c), dt)
    b, g = validate.dpo_beta(beta), validate.simpo_gamma(gamma)
    eps = validate.label_smoothing(label_smoothing)
    return xp, dt, c / nc, r / nr, nc, nr, b, g, eps


def simpo(chosen_logps, rejected_logps, chosen_lengths, rejected_lengths, beta: float = 2.0,
          gamma: float = 1.0, label_smoothing: float = 0.0):
    """SimPO per pair (Meng et al. 2024 eq. 6). Returns {"losses"[B], "chosen_rewards"[B] =
    β·c/|y_c|, "rejected_rewards"[B] = β·r/|y_r|}."""
    xp, _, cm, rm, _, _, b, g, eps = _simpo(chosen_logps, rejected_logps, chosen_lengths, rejected_lengths,
                                            beta, gamma, label_smoothing)
    losses, _ = _smoothed(xp, b * (cm - rm) - g, eps)
    return {"losses": losses, "chosen_rewards": b * cm, "rejected_rewards": b * rm}


def simpo_vjp(cotangent, chosen_logps, rejected_logps, chosen_lengths, rejected_lengths,
              beta: float = 2.0, gamma: float = 1.0, label_smoothing: float = 0.0):
    """∂ℓ/∂c = ℓ'(z)·β/|y_c|, ∂ℓ/∂r = −ℓ'(z)·β/|y_r| (plus the rewards' β/|y|)."""
    xp, dt, cm, rm, nc, nr, b, g, eps = _simpo(chosen_logps, rejected_logps, chosen_lengths,
                                               rejected_lengths, beta, gamma, label_smoothing)
    ct = _xp.cotangents(xp, cotangent, dt, PAIR_OUTPUTS, "chosen_logps", _xp.shape(cm))
    _, slope = _smoothed(xp, b * (cm - rm) - g, eps)
    return {"chosen_logps": (ct["losses"] * slope + ct["chosen_rewards"]) * b / nc,
            "rejected_logps": (-ct["losses"] * slope + ct["rejected_rewards"]) * b / nr}


# --------------------------------------------------------------------------- CPO

def _cpo(chosen_logps, rejected_logps, beta, label_smoothing, cpo_alpha, nll_aggregation, chosen_lengths):
    xp, dt, c, r = _pair({"chosen_logps": chosen_logps, "rejected_logps": rejected_logps})
    nll = chosen_nll(xp, c, chosen_lengths, cpo_alpha, nll_aggregation, "cpo_alpha", "chosen_logps")
    return xp, dt, c, r, validate.dpo_beta(beta), validate.label_smoothing(label_smoothing), nll


def cpo(chosen_logps, rejected_logps, beta: float = 0.1, label_smoothing: float = 0.0, cpo_alpha: float = 0.0,
        nll_aggregation: str | None = None, chosen_lengths=None):
    """CPO per pair (Xu et al. 2024 §3: eq. 3 plus cpo_alpha·L_NLL of the chosen response).
    Returns {"losses"[B], "chosen_rewards"[B] = β·c, "rejected_rewards"[B] = β·r}."""
    xp, _, c, r, b, eps, (nll, _) = _cpo(chosen_logps, rejected_logps, beta, label_smoothing, cpo_alpha,
                                         nll_aggregation, chosen_lengths)
    losses, _ = _smoothed(xp, b * (c - r), eps)
    if cpo_alpha != 0:
        losses = losses + nll
    return {"losses": losses, "chosen_rewards": b * c, "rejected_rewards": b * r}


def cpo_vjp(cotangent, chosen_logps, rejected_logps, beta: float = 0.1, label_smoothing: float = 0.0,
            cpo_alpha: float = 0.0, nll_aggregation: str | None = None, chosen_lengths=None):
    """∂ℓ/∂c = β·ℓ'(z) + ∂(α·NLL)/∂c, ∂ℓ/∂r = −β·ℓ'(z) (plus the rewards' β)."""
    xp, dt, c, r, b, eps, (_, nll_slope) = _cpo(chosen_logps, rejected_logps, beta, label_smoothing, cpo_alpha,
                                                nll_aggregation, chosen_lengths)
    ct = _xp.cotangents(xp, cotangent, dt, PAIR_OUTPUTS, "chosen_logps", _xp.shape(c))
    _, slope = _smoothed(xp, b * (c - r), eps)
    grad_c = b * (ct["losses"] * slope + ct["chosen_rewards"])
    if cpo_alpha != 0:
        grad_c = grad_c + ct["losses"] * nll_slope
    return {"chosen_logps": grad_c, "rejected_logps": b * (-ct["losses"] * slope + ct["rejected_rewards"])}


# --------------------------------------------------------------------------- ORPO

def _log_odds(xp, p):
    """p − log(1 − e^p) for p < 0 (expm1 keeps 1 − e^p accurate near p = 0) and 1/(1 − e^p)."""
    one_minus = -xp.expm1(p)
    return p - xp.log(one_minus), 1 / one_minus


def _orpo(chosen_logps, rejected_logps, beta):
    xp, dt, c, r = _pair({"chosen_logps": chosen_logps, "rejected_logps": rejected_logps})
    for name, x in (("chosen_logps", c), ("rejected_logps", r)):
        # the comparison carries no gradient, so under jax.vjp only a failing input is read
        if not bool(xp.all(x < 0)):
            validate.below_zero(name, [float(v) for v in x])
    return xp, dt, c, r, validate.dpo_beta(beta)


def orpo(chosen_logps, rejected_logps, beta: float = 0.1):
    """ORPO per pair (Hong et al. 2024 eqs. 6-7) on average log-probabilities. Returns
    {"losses"[B], "chosen_rewards"[B] = λ·c̄, "rejected_rewards"[B] = λ·r̄}."""
    xp, _, c, r, b = _orpo(chosen_logps, rejected_logps, beta)
    (lo_c, _), (lo_r, _) = _log_odds(xp, c), _log_odds(xp, r)
    return {"losses": -c - b * _xp.logsigmoid(xp, lo_c - lo_r), "chosen_rewards": b * c,
            "rejected_rewards": b * r}


def orpo_vjp(cotangent, chosen_logps, rejected_logps, beta: float = 0.1):
    """∂ℓ/∂c̄ = −1 − λ·σ(−x)/(1 − e^c̄), ∂ℓ/∂r̄ = λ·σ(−x)/(1 − e^r̄), x the log-odds ratio."""
    xp, dt, c, r, b = _orpo(chosen_logps, rejected_logps, beta)
    ct = _xp.cotangents(xp, cotangent, dt, PAIR_OUTPUTS, "chosen_logps", _xp.shape(c))
    (lo_c, d_c), (lo_r, d_r) = _log_odds(xp, c), _log_odds(xp, r)
    s = _xp.sigmoid(xp, lo_r - lo_c)
    return {"chosen_logps": ct["losses"] * (-1 - b * s * d_c) + b * ct["chosen_rewards"],
            "rejected_logps": ct["losses"] * (b * s * d_r) + b * ct["rejected_rewards"]}


# --------------------------------------------------------------------------- KTO

def _kto(policy_logps, reference_logps, desirable, kl_policy_logps, kl_reference_logps, beta,
         desirable_weight, undesirable_weight):
    floats = {"policy_logps": policy_logps, "reference_logps": reference_logps,
              "kl_policy_logps": kl_policy_logps, "kl_reference_logps": kl_reference_logps}
    xp = _xp.namespace(*floats.values(), desirable)
    dt = _xp.float_dtype(xp, **floats)
    p, q, kp, kq = (_xp.array(xp, name, x, dt) for name, x in floats.items())
    validate.rank("policy_logps", _xp.shape(p), 1)
    validate.same_shape(policy_logps=_xp.shape(p), reference_logps=_xp.shape(q))
    d = _xp.mask(xp, "desirable", desirable, _xp.shape(p), dt) != 0
    validate.rank("kl_policy_logps", _xp.shape(kp), 1)
    validate.nonempty("kl_policy_logps", _xp.shape(kp))
    validate.same_shape(kl_policy_logps=_xp.shape(kp), kl_reference_logps=_xp.shape(kq))
    b = validate.dpo_beta(beta)
    w_d = validate.class_weight("desirable_weight", desirable_weight)
    w_u = validate.class_weight("undesirable_weight", undesirable_weight)
    z0 = xp.maximum(xp.mean(kp - kq), xp.zeros((), dtype=dt))
    ones = xp.ones(_xp.shape(p), dtype=dt)
    sign = xp.where(d, ones, -ones)
    weight = xp.where(d, w_d * ones, w_u * ones)
    return xp, dt, p - q, z0, b, sign, weight


def kto(policy_logps, reference_logps, desirable, kl_policy_logps, kl_reference_logps,
        beta: float = 0.1, desirable_weight: float = 1.0, undesirable_weight: float = 1.0):
    """KTO per example (Ethayarajh et al. 2024 eq. 7) with the detached reference point z0.
    Returns {"losses"[N], "kl": z0 (a scalar)}."""
    xp, _, rho, z0, b, sign, weight = _kto(policy_logps, reference_logps, desirable, kl_policy_logps,
                                           kl_reference_logps, beta, desirable_weight, undesirable_weight)
    return {"losses": weight * _xp.sigmoid(xp, -sign * b * (rho - z0)), "kl": z0}


def kto_vjp(cotangent, policy_logps, reference_logps, desirable, kl_policy_logps, kl_reference_logps,
            beta: float = 0.1, desirable_weight: float = 1.0, undesirable_weight: float = 1.0):
    """∂ℓ/∂ρ = −s·λ·β·σ(x)σ(−x), x = s·β(ρ − z0); the "kl" cotangent reaches no input (z0 is
    detached)."""
    xp, dt, rho, z0, b, sign, weight = _kto(policy_logps, reference_logps, desirable, kl_policy_logps,
                                            kl_reference_logps, beta, desirable_weight, undesirable_weight)
    if not isinstance(cotangent, dict):
        validate.fail("cotangent", "expected a dict by output name (losses, kl)")
    per_example = {k: v for k, v in cotangent.items() if k != "kl"}
    ct = _xp.cotangents(xp, per_example, dt, ("losses",), "policy_logps", _xp.shape(rho))
    if "kl" in cotangent:  # checked although z0 is detached: a malformed cotangent is the caller's error
        kl_ct = _xp.array(xp, "cotangent", cotangent["kl"], dt)
        validate.same_shape(**{"kl": (), "cotangent['kl']": _xp.shape(kl_ct)})
    x = sign * b * (rho - z0)
    return {"policy_logps": ct["losses"] * (-sign * weight * b * _xp.sigmoid(xp, x) * _xp.sigmoid(xp, -x))}
