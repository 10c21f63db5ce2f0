"""Reference-free and unpaired preference objectives (PyTorch, autograd): SimPO, CPO, ORPO, KTO.

Same names, formulas and contract as ``refimpl.exact.preference`` (papers cited there):

    simpo  ℓ = −(1−ε)·log σ(z) − ε·log σ(−z),  z = β·(c/|y_c| − r/|y_r|) − γ   SimPO eq. 6
    cpo    the same with z = β·(c − r)                                       CPO eq. 3
    orpo   ℓ = −c̄ − λ·log σ(log odds(c̄) − log odds(r̄)),  log odds(p) = p − log(−expm1(p))
                                                                             ORPO eqs. 6-7
    kto    ℓ = λ_y·σ(−s·β(ρ − z0)), s = ±1 (desirable / undesirable),
           z0 = max(0, mean(kl_policy − kl_reference)) detached               KTO eq. 7
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from lossproof.refimpl import validate
from lossproof.refimpl.torch import _common
from lossproof.refimpl.torch.dpo import chosen_nll

__all__ = ["simpo", "cpo", "orpo", "kto"]


def _pair(chosen_logps, rejected_logps):
    c, r = _common.array("chosen_logps", chosen_logps), _common.array("rejected_logps", rejected_logps)
    validate.rank("chosen_logps", tuple(c.shape), 1)
    validate.same_shape(chosen_logps=tuple(c.shape), rejected_logps=tuple(r.shape))
    out = _common.result_dtype(c, r)
    work = _common.work_dtype(out)
    return _common.upcast(c, work), _common.upcast(r, work), out, work


def _lengths(name, x, shape, work, device):
    n = _common.int_array(name, x)
    validate.same_shape(**{"chosen_logps": shape, name: tuple(n.shape)})
    validate.lengths(name, n.tolist())
    return n.to(device=device, dtype=work)


def _smoothed(z, eps):
    return -(1 - eps) * F.logsigmoid(z) - eps * F.logsigmoid(-z)


def simpo(chosen_logps, rejected_logps, chosen_lengths, rejected_lengths, beta: float = 2.0,
          gamma: float = 1.0, label_smoothing: float = 0.0):
    """SimPO per pair (Meng et al. 2024 eq. 6); lengths [B] count the tokens of each response.
    Returns {"losses"[B], "chosen_rewards"[B] = β·c/|y_c|, "rejected_rewards"[B] = β·r/|y_r|}."""
    c, r, out, work = _pair(chosen_logps, rejected_logps)
    nc = _lengths("chosen_lengths", chosen_lengths, tuple(c.shape), work, c.device)
    nr = _lengths("rejected_lengths", rejected_lengths, tuple(c.shape), work, c.device)
    b, g = validate.dpo_beta(beta), validate.simpo_gamma(gamma)
    eps = validate.label_smoothing(label_smoothing)
    cm, rm = c / nc, r / nr
    return {"losses": _smoothed(b * (cm - rm) - g, eps).to(out), "chosen_rewards": (b * cm).to(out),
            "rejected_rewards": (b * rm).to(out)}


def cpo(chosen_logps, rejected_logps, beta: float = 0.1, label_smoothing: float = 0.0, cpo_alpha: float = 0.0,
        nll_aggregation: str | None = None, chosen_lengths=None):
    """CPO per pair (Xu et al. 2024 §3: eq. 3 plus cpo_alpha·L_NLL of the chosen response,
    normalised as refimpl/torch/dpo.py describes). Returns {"losses"[B], "chosen_rewards"[B] = β·c,
    "rejected_rewards"[B] = β·r}."""
    c, r, out, _ = _pair(chosen_logps, rejected_logps)
    b, eps = validate.dpo_beta(beta), validate.label_smoothing(label_smoothing)
    nll = chosen_nll(c, chosen_lengths, cpo_alpha, nll_aggregation, "cpo_alpha", "chosen_logps")
    losses = _smoothed(b * (c - r), eps)
    if cpo_alpha != 0:
        losses = losses + nll
    return {"losses": losses.to(out), "chosen_rewards": (b * c).to(out), "rejected_rewards": (b * r).to(out)}


def _log_odds(p):
    return p - torch.log(-torch.expm1(p))


def orpo(chosen_logps, rejected_logps, beta: float = 0.1):
    """ORPO per pair (Hong et al. 2024 eqs. 6-7) on average log-probabilities (< 0). Returns
    {"losses"[B], "chosen_rewards"[B] = λ·c̄, "rejected_rewards"[B] = λ·r̄}."""
    c, r, out, _ = _pair(chosen_logps, rejected_logps)
    validate.below_zero("chosen_logps", c.detach().tolist())
    validate.below_zero("rejected_logps", r.detach().tolist())
    b = validate.dpo_beta(beta)
    losses = -c - b * F.logsigmoid(_log_odds(c) - _log_odds(r))
    return {"losses": losses.to(out), "chosen_rewards": (b * c).to(out), "rejected_rewards": (b * r).to(out)}


def kto(policy_logps, reference_logps, desirable, kl_policy_logps, kl_reference_logps,
        beta: float = 0.1, desirable_weight: float = 1.0, undesirable_weight: float = 1.0):
    """KTO per example (Ethayarajh et al. 2024 eq. 7); z0 = max(0, mean(kl_policy_logps −
    kl_reference_logps)) carries no gradient. Returns {"losses"[N], "kl": z0 (a scalar)}."""
    p, q = _common.array("policy_logps", policy_logps), _common.array("reference_logps", reference_logps)
    validate.rank("policy_logps", tuple(p.shape), 1)
    validate.same_shape(policy_logps=tuple(p.shape), reference_logps=tuple(q.shape))
    d = _common.mask("desirable", desirable, tuple(p.shape))
    kp = _common.array("kl_policy_logps", kl_policy_logps)
    kq = _common.array("kl_reference_logps", kl_reference_logps)
    validate.rank("kl_policy_logps", tuple(kp.shape), 1)
    validate.nonempty("kl_policy_logps", tuple(kp.shape))
    validate.same_shape(kl_policy_logps=tuple(kp.shape), kl_reference_logps=tuple(kq.shape))
    b = validate.dpo_beta(beta)
    w_d = validate.class_weight("desirable_weight", desirable_weight)
    w_u = validate.class_weight("undesirable_weight", undesirable_weight)
    out = _common.result_dtype(p, q, kp, kq)
    work = _common.work_dtype(out)
    rho = _common.upcast(p, work) - _common.constant(q, work)
    z0 = (_common.constant(kp, work) - _common.constant(kq, work)).mean().clamp(min=0)
    x = b * (rho - z0)
    losses = torch.where(d.to(rho.device), w_d * torch.sigmoid(-x), w_u * torch.sigmoid(x))
    return {"losses": losses.to(out), "kl": z0.to(out)}
