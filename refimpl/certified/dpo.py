"""dpo.loss in ball arithmetic.

Rafailov et al. 2023 (DPO) §4 eq. 7: with the gains g_c = log π(y_w) − log π_ref(y_w),
g_r = log π(y_l) − log π_ref(y_l) and the margin Δ = g_c − g_r, the per-pair losses are
(ε = label_smoothing, z = βΔ)

    sigmoid, cdpo   −(1−ε)·log σ(z) − ε·log σ(−z)                 DPO eq. 7; cDPO (Mitchell 2023)
    hinge           max(0, 1 − z)                                 SLiC (Zhao et al. 2023)
    ipo             (Δ − 1/(2β))²                                 IPO (Azar et al. 2023) eq. 17
    robust          (−(1−ε)·log σ(z) + ε·log σ(−z)) / (1 − 2ε)    Chowdhury et al. 2024 eq. 8

and the implicit rewards are β·g_c and β·g_r (DPO §5). The hinge's kink 1 − z = 0 takes the
active branch 1 − z (closed), as the catalog's convention says.
"""
from __future__ import annotations

from refimpl import validate
from refimpl.certified import _ball

__all__ = ["loss", "loss_vjp"]

_INPUTS = ("policy_chosen_logps", "policy_rejected_logps", "reference_chosen_logps", "reference_rejected_logps")


def _per_pair(delta, beta, loss_type, eps):
    z = beta * delta
    if loss_type == "ipo":
        return _ball.square(delta - 1 / (2 * beta))
    if loss_type == "hinge":
        return 1 - z if _ball.sign(1 - z) >= 0 else _ball.ZERO
    pos, neg = _ball.log_sigmoid(z), _ball.log_sigmoid(-z)
    if loss_type in ("sigmoid", "cdpo"):
        return -(1 - eps) * pos - eps * neg
    return (-(1 - eps) * pos + eps * neg) / (1 - 2 * eps)


def _loss(diff, policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
          reference_rejected_logps, beta=0.1, loss_type="sigmoid", label_smoothing=0.0):
    pc, pr, rc, rr = (_ball.balls(n, x) for n, x in zip(_INPUTS, (
        policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps)))
    validate.rank("policy_chosen_logps", _ball.shape(pc), 1)
    validate.same_shape(**{n: _ball.shape(a) for n, a in zip(_INPUTS, (pc, pr, rc, rr))})
    b = _ball.ball(validate.dpo_beta(beta))
    validate.loss_type(loss_type)
    eps = _ball.ball(validate.label_smoothing(label_smoothing))
    pc, pr = diff("policy_chosen_logps", pc), diff("policy_rejected_logps", pr)
    g_c = [p - r for p, r in zip(pc, rc)]
    g_r = [p - r for p, r in zip(pr, rr)]
    return {"losses": [_per_pair(c - r, b, loss_type, eps) for c, r in zip(g_c, g_r)],
            "chosen_rewards": [b * g for g in g_c], "rejected_rewards": [b * g for g in g_r]}


loss, loss_vjp = _ball.pair(_loss, ("losses", "chosen_rewards", "rejected_rewards"),
                            ("policy_chosen_logps", "policy_rejected_logps"))
loss.__doc__ = "Per-pair DPO loss and implicit rewards (DPO §4 eq. 7 and variants), as balls."
