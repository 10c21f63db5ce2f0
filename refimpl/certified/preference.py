"""The preference family in ball arithmetic: SimPO, CPO, ORPO, KTO.

Written from the papers, as refimpl/exact/preference.py is, sharing only refimpl.validate
(σ the logistic function, ε = label_smoothing):

    simpo  z = β·(c/|y_c| − r/|y_r|) − γ,  ℓ = −(1−ε)·log σ(z) − ε·log σ(−z)
           Meng et al. 2024 (arXiv 2405.14734) §2.2 eq. 6
    cpo    the same with z = β·(c − r)           Xu et al. 2024 (arXiv 2401.08417) §3 eq. 3,
           plus cpo_alpha times the chosen NLL L_NLL (CPO §3), normalised as refimpl/certified/dpo.py says
    orpo   ℓ = −c̄ − λ·log σ(log odds(c̄) − log odds(r̄)),  log odds(p) = p − log(−expm1(p))
           Hong et al. 2024 (arXiv 2403.07691) §4 eqs. 6-7
    kto    z0 = max(0, mean(kl_policy − kl_reference)) (a constant: detached),
           ℓ = λ_D·σ(−β(ρ − z0)) (desirable), λ_U·σ(β(ρ − z0)) (undesirable)
           Ethayarajh et al. 2024 (arXiv 2402.01306) §4.1 eq. 7

σ is :func:`_ball.sigmoid` (e^{−|x|} only: tight balls at |x| = 1e4). KTO's clamp of z0 at 0 is decided by
:func:`_ball.sign` (an exact zero takes 0 either way: the two branches agree there).
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.certified import _ball
from lossproof.refimpl.certified.dpo import chosen_nll

__all__ = ["simpo", "simpo_vjp", "cpo", "cpo_vjp", "orpo", "orpo_vjp", "kto", "kto_vjp"]

PAIR = ("losses", "chosen_rewards", "rejected_rewards")


def _smoothed(z, eps):
    return -(1 - eps) * _ball.log_sigmoid(z) - eps * _ball.log_sigmoid(-z)


def _pair(chosen_logps, rejected_logps):
    c, r = _ball.balls("chosen_logps", chosen_logps), _ball.balls("rejected_logps", rejected_logps)
    validate.rank("chosen_logps", _ball.shape(c), 1)
    validate.same_shape(chosen_logps=_ball.shape(c), rejected_logps=_ball.shape(r))
    return c, r


def _lengths(name, x, shape):
    n = list(x.tolist() if hasattr(x, "tolist") else x)
    for v in n:
        if isinstance(v, bool) or not float(v).is_integer():
            validate.fail(name, f"expected integers, got {v!r}")
    validate.same_shape(**{"chosen_logps": shape, name: (len(n),)})
    validate.lengths(name, [int(v) for v in n])
    return [_ball.ball(int(v)) for v in n]


def _simpo(diff, chosen_logps, rejected_logps, chosen_lengths, rejected_lengths, beta=2.0, gamma=1.0,
           label_smoothing=0.0):
    c, r = _pair(chosen_logps, rejected_logps)
    nc = _lengths("chosen_lengths", chosen_lengths, _ball.shape(c))
    nr = _lengths("rejected_lengths", rejected_lengths, _ball.shape(c))
    b, g = _ball.ball(validate.dpo_beta(beta)), _ball.ball(validate.simpo_gamma(gamma))
    eps = _ball.ball(validate.label_smoothing(label_smoothing))
    c, r = diff("chosen_logps", c), diff("rejected_logps", r)
    cm = [x / n for x, n in zip(c, nc)]
    rm = [x / n for x, n in zip(r, nr)]
    return {"losses": [_smoothed(b * (x - y) - g, eps) for x, y in zip(cm, rm)],
            "chosen_rewards": [b * x for x in cm], "rejected_rewards": [b * y for y in rm]}


def _cpo(diff, chosen_logps, rejected_logps, beta=0.1, label_smoothing=0.0, cpo_alpha=0.0,
         nll_aggregation=None, chosen_lengths=None):
    c, r = _pair(chosen_logps, rejected_logps)
    b, eps = _ball.ball(validate.dpo_beta(beta)), _ball.ball(validate.label_smoothing(label_smoothing))
    c, r = diff("chosen_logps", c), diff("rejected_logps", r)
    nll = chosen_nll(c, chosen_lengths, cpo_alpha, nll_aggregation, "cpo_alpha", "chosen_logps")
    losses = [_smoothed(b * (x - y), eps) for x, y in zip(c, r)]
    if cpo_alpha != 0:  # α = 0: the balls of the cases without the term, untouched
        losses = [x + y for x, y in zip(losses, nll)]
    return {"losses": losses,
            "chosen_rewards": [b * x for x in c], "rejected_rewards": [b * y for y in r]}


def _log_odds(p):
    return p - _ball.log(-_ball.expm1(p))


def _orpo(diff, chosen_logps, rejected_logps, beta=0.1):
    c, r = _pair(chosen_logps, rejected_logps)
    validate.below_zero("chosen_logps", [_ball.mid_float(x) for x in c])
    validate.below_zero("rejected_logps", [_ball.mid_float(y) for y in r])
    b = _ball.ball(validate.dpo_beta(beta))
    c, r = diff("chosen_logps", c), diff("rejected_logps", r)
    return {"losses": [-x - b * _ball.log_sigmoid(_log_odds(x) - _log_odds(y)) for x, y in zip(c, r)],
            "chosen_rewards": [b * x for x in c], "rejected_rewards": [b * y for y in r]}


def _kto(diff, policy_logps, reference_logps, desirable, kl_policy_logps, kl_reference_logps, beta=0.1,
         desirable_weight=1.0, undesirable_weight=1.0):
    p, q = _ball.balls("policy_logps", policy_logps), _ball.balls("reference_logps", reference_logps)
    validate.rank("policy_logps", _ball.shape(p), 1)
    validate.same_shape(policy_logps=_ball.shape(p), reference_logps=_ball.shape(q))
    d = list(desirable.tolist() if hasattr(desirable, "tolist") else desirable)
    validate.same_shape(desirable=(len(d),), inputs=_ball.shape(p))
    if any(v not in (0, 1) for v in d):
        validate.fail("desirable", "must contain only 0 and 1")
    kp = _ball.balls("kl_policy_logps", kl_policy_logps)
    kq = _ball.balls("kl_reference_logps", kl_reference_logps)
    validate.rank("kl_policy_logps", _ball.shape(kp), 1)
    validate.nonempty("kl_policy_logps", _ball.shape(kp))
    validate.same_shape(kl_policy_logps=_ball.shape(kp), kl_reference_logps=_ball.shape(kq))
    b = _ball.ball(validate.dpo_beta(beta))
    w_d = _ball.ball(validate.class_weight("desirable_weight", desirable_weight))
    w_u = _ball.ball(validate.class_weight("undesirable_weight", undesirable_weight))
    mean = _ball.fsum([x - y for x, y in zip(kp, kq)]) / len(kp)
    z0 = mean if _ball.sign(mean) > 0 else _ball.ZERO
    p = diff("policy_logps", p)
    losses = [w_d * _ball.sigmoid(-b * (x - y - z0)) if flag else w_u * _ball.sigmoid(b * (x - y - z0))
              for x, y, flag in zip(p, q, d)]
    return {"losses": losses, "kl": z0}


simpo, simpo_vjp = _ball.pair(_simpo, PAIR, ("chosen_logps", "rejected_logps"))
cpo, cpo_vjp = _ball.pair(_cpo, PAIR, ("chosen_logps", "rejected_logps"))
orpo, orpo_vjp = _ball.pair(_orpo, PAIR, ("chosen_logps", "rejected_logps"))
kto, kto_vjp = _ball.pair(_kto, ("losses", "kl"), ("policy_logps",))
simpo.__doc__ = "SimPO per pair (Meng et al. 2024 eq. 6) and its logged rewards, as balls."
cpo.__doc__ = "CPO per pair (Xu et al. 2024 §3: eq. 3 plus cpo_alpha·L_NLL) and its logged rewards, as balls."
orpo.__doc__ = "ORPO per pair (Hong et al. 2024 eqs. 6-7) on average log-probabilities, as balls."
kto.__doc__ = "KTO per example (Ethayarajh et al. 2024 eq. 7) with the detached reference point z0, as balls."
