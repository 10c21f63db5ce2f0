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

The loss types TRL 1.16.0 ships beyond these (a = β·g_c, b = β·g_r, τ = discopop_tau,
δ = reward_shift; papers as in refimpl/exact/dpo.py):

    exo_pair        σ(z)·(log σ(z) − log(1−ε)) + σ(−z)·(log σ(−z) − log ε)   EXO eq. 16
    nca_pair        −log σ(a) − ½·log σ(−a) − ½·log σ(−b)                    NCA §4
    bco_pair        −log σ(a − δ) − log σ(δ − b)                             BCO §3
    sppo_hard       (g_c − 1/(2β))² + (g_r + 1/(2β))²                        SPPO eq. 4.7
    apo_zero        1 − σ(a) + σ(b);   apo_down  σ(a) + 1 − σ(z)             APO eqs. 7-8
    discopop        (1 − σ(z/τ))·(−log σ(z)) + exp(log σ(z/τ) − z)           DiscoPOP eq. 5
    aot             the sigmoid loss of sort(π_c − π_r)_i − sort(ref_c − ref_r)_i   AOT §3
    aot_unpaired    the sigmoid loss of sort(g_c)_i − sort(g_r)_i

With α = rpo_alpha the loss of pair i gains α times the NLL of its chosen response (RPO, Pang
et al. 2024, arXiv 2404.19733 §2), c_i = policy_chosen_logps[i] over n_i = chosen_lengths[i]
tokens of B pairs: −c_i/n_i ('seq-mean-token-mean'), −c_i ('seq-mean-token-sum') or
−c_i·B/Σ_j n_j ('token-mean'); AOT adds pair i's NLL at position i.

σ is :func:`_ball.sigmoid` (exact at 0, so APO's two σ′(0) terms cancel exactly). AOT's sorts compare exact differences of binary64 inputs (rigorously,
:func:`_ball.compare`); ties keep the input order (a stable sort), as the exact reference.
"""
from __future__ import annotations

import functools

from lossproof.refimpl import validate
from lossproof.refimpl.certified import _ball

__all__ = ["loss", "loss_vjp"]

_INPUTS = ("policy_chosen_logps", "policy_rejected_logps", "reference_chosen_logps", "reference_rejected_logps")


def _per_pair(delta, beta, loss_type, eps, tau=None):
    z = beta * delta
    if loss_type == "ipo":
        return _ball.square(delta - 1 / (2 * beta))
    if loss_type == "hinge":
        return 1 - z if _ball.sign(1 - z) >= 0 else _ball.ZERO
    pos, neg = _ball.log_sigmoid(z), _ball.log_sigmoid(-z)
    if loss_type in ("sigmoid", "cdpo", "aot", "aot_unpaired"):
        return -(1 - eps) * pos - eps * neg
    if loss_type == "exo_pair":
        return (_ball.exp(pos) * (pos - _ball.log1p(-eps)) + _ball.exp(neg) * (neg - _ball.log(eps)))
    if loss_type == "discopop":
        m_log = _ball.log_sigmoid(z / tau)
        return (1 - _ball.exp(m_log)) * (-pos) + _ball.exp(m_log - z)
    return (-(1 - eps) * pos + eps * neg) / (1 - 2 * eps)


def _per_gains(g_c, g_r, beta, loss_type, eps, tau, shift):
    """The loss of one pair from its two gains (the margin-only types through _per_pair)."""
    a, b = beta * g_c, beta * g_r
    if loss_type == "nca_pair":
        return -_ball.log_sigmoid(a) - _ball.log_sigmoid(-a) / 2 - _ball.log_sigmoid(-b) / 2
    if loss_type == "bco_pair":
        return -_ball.log_sigmoid(a - shift) - _ball.log_sigmoid(shift - b)
    if loss_type == "sppo_hard":
        return _ball.square(g_c - 1 / (2 * beta)) + _ball.square(g_r + 1 / (2 * beta))
    if loss_type == "apo_zero":
        return 1 - _ball.sigmoid(a) + _ball.sigmoid(b)
    if loss_type == "apo_down":
        # σ(a) − σ(a − b) = σ(a − b)·σ(−a)·expm1(b): exactly 0, with an exactly 0 derivative in a,
        # when the rejected gain b is an exact 0 (the two σ′ terms would otherwise leave a ball)
        return 1 + _ball.sigmoid(a - b) * _ball.sigmoid(-a) * _ball.expm1(b)
    return _per_pair(g_c - g_r, beta, loss_type, eps, tau)


def _stable_order(keys):
    """Indices that sort ``keys`` ascending, ties in input order (compared rigorously)."""
    def cmp(i, j):
        return _ball.compare(keys[i], keys[j]) or (i > j) - (i < j)
    return sorted(range(len(keys)), key=functools.cmp_to_key(cmp))


def _sorted_losses(pc, pr, rc, rr, beta, loss_type, eps):
    """AOT: the loss at every sorted position (sorting over the batch)."""
    if loss_type == "aot":
        keys = [c - r for c, r in zip(pc, pr)]
        refs = [c - r for c, r in zip(rc, rr)]
        order, ref_order = _stable_order(keys), _stable_order(refs)
        deltas = [keys[i] - refs[j] for i, j in zip(order, ref_order)]
    else:
        g_c = [p - r for p, r in zip(pc, rc)]
        g_r = [p - r for p, r in zip(pr, rr)]
        deltas = [g_c[i] - g_r[j] for i, j in zip(_stable_order(g_c), _stable_order(g_r))]
    return [_per_pair(d, beta, loss_type, eps) for d in deltas]


def chosen_nll(chosen, chosen_lengths, weight, aggregation, weight_name, chosen_name):
    """α·NLL of every pair's chosen response (balls; the module docstring); ``chosen`` may be Vars."""
    a, divides = validate.nll_term(weight_name, weight, aggregation, chosen_lengths is not None)
    if chosen_lengths is not None:
        n = list(chosen_lengths.tolist() if hasattr(chosen_lengths, "tolist") else chosen_lengths)
        for v in n:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not float(v).is_integer():
                validate.fail("chosen_lengths", f"expected integers, got {v!r}")
        validate.same_shape(**{chosen_name: (len(chosen),), "chosen_lengths": (len(n),)})
        validate.lengths("chosen_lengths", [int(v) for v in n])
    if not divides:
        return [-_ball.ball(a) * c for c in chosen]
    if aggregation == "seq-mean-token-mean":
        return [-_ball.ball(a) * c / _ball.ball(int(k)) for c, k in zip(chosen, n)]
    share = _ball.ball(a) * _ball.ball(len(n)) / _ball.ball(sum(int(k) for k in n))
    return [-share * c for c in chosen]


def _loss(diff, policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
          reference_rejected_logps, beta=0.1, loss_type="sigmoid", label_smoothing=0.0, discopop_tau=0.05,
          reward_shift=0.0, rpo_alpha=0.0, nll_aggregation=None, chosen_lengths=None):
    pc, pr, rc, rr = (_ball.balls(n, x) for n, x in zip(_INPUTS, (
        policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps)))
    validate.rank("policy_chosen_logps", _ball.shape(pc), 1)
    validate.same_shape(**{n: _ball.shape(a) for n, a in zip(_INPUTS, (pc, pr, rc, rr))})
    b = _ball.ball(validate.dpo_beta(beta))
    validate.loss_type(loss_type)
    eps = _ball.ball(validate.label_smoothing(label_smoothing, loss_type))
    tau = _ball.ball(validate.discopop_tau(discopop_tau))
    shift = _ball.ball(validate.reward_shift(reward_shift))
    pc, pr = diff("policy_chosen_logps", pc), diff("policy_rejected_logps", pr)
    nll = chosen_nll(pc, chosen_lengths, rpo_alpha, nll_aggregation, "rpo_alpha", "policy_chosen_logps")
    g_c = [p - r for p, r in zip(pc, rc)]
    g_r = [p - r for p, r in zip(pr, rr)]
    if loss_type in ("aot", "aot_unpaired"):
        losses = _sorted_losses(pc, pr, rc, rr, b, loss_type, eps)
    else:
        losses = [_per_gains(c, r, b, loss_type, eps, tau, shift) for c, r in zip(g_c, g_r)]
    if rpo_alpha != 0:
        losses = [x + y for x, y in zip(losses, nll)]
    return {"losses": losses, "chosen_rewards": [b * g for g in g_c], "rejected_rewards": [b * g for g in g_r]}


loss, loss_vjp = _ball.pair(_loss, ("losses", "chosen_rewards", "rejected_rewards"),
                            ("policy_chosen_logps", "policy_rejected_logps"))
loss.__doc__ = "Per-pair DPO loss and implicit rewards (DPO §4 eq. 7 and variants), as balls."
