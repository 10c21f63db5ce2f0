"""The PPO critic's value loss, with PPO2's value clipping, and the policy loss's entropy bonus.

Sources: PPO (Schulman et al. 2017, arXiv 1707.06347) §5 eq. 9, whose value term is the squared
error L^VF_t = (V_θ(s_t) − V^targ_t)² averaged over time steps (Ê_t); the clipped form of OpenAI
baselines ppo2 (model.py: vpredclipped = OLDVPRED + clip(vpred − OLDVPRED, −ε, ε), loss
½·mean(max(vf_losses1, vf_losses2))), which TRL's former PPOTrainer, verl 0.9.1
(trainer/ppo/core_algos.py compute_value_loss) and OpenRLHF 0.11.2 (models/loss.py ValueLoss)
follow. Per token t with value V, old value V_old and return R:

    ℓ_t = s · (V − R)²                                                (clip_range_value None)
    ℓ_t = s · max((V − R)², (V_old + clip(V − V_old, −ε, ε) − R)²)     (clip_range_value ε)

with s = ½ when ``half`` (the libraries) and 1 otherwise (eq. 9), reduced over the mask by
grpo.aggregate's modes (its code: ``refimpl.exact.grpo``); the padded length T is the constant
of 'seq-mean-token-sum-norm'.

Gradient with respect to V. The clipped estimate moves with V inside the closed band
|V − V_old| ≤ ε, where it is V itself and both branches are (V − R)²; outside it is the
constant V_old ± ε. Where (V − R)² > (V_c − R)² the gradient is 2s·(V − R), where it is smaller
0. Where the two are equal outside the band (R halfway between V and V_c) the max has no
derivative: any value between 0 and 2s·(V − R) is a subgradient (torch.max splits the two, giving
s·(V − R)); this reference takes the unclipped branch, and vectors at such ties are marked
acceptable.

The entropy bonus (``entropy_bonus``): PPO eq. 9 adds c₂·S[π_θ](s_t) to the surrogate it maximises
(Table 5, Atari: c₂ = 0.01); as a loss to minimise, −c·agg(H), H_t the per-token entropy and agg
grpo.aggregate (Ê_t is 'token-mean'). verl 0.9.1 workers/utils/losses.py ppo_loss subtracts
entropy_coeff·agg_loss(entropy, response_mask, loss_agg_mode) from the policy loss, with the
policy term's aggregation. The loss is linear in H: its gradient is −c times the aggregation
weights.
"""
from __future__ import annotations

import numpy as np

from lossproof.refimpl import validate
from lossproof.refimpl.exact import grpo, mp

__all__ = ["value_loss", "value_loss_vjp", "entropy_bonus", "entropy_bonus_vjp"]


def _prepare(values, old_values, returns, mask, clip_range_value, half, aggregation):
    v = mp.array("values", values)
    validate.rank("values", v.shape, 2)
    validate.nonempty("values", v.shape)
    old = mp.array("old_values", old_values)
    ret = mp.array("returns", returns)
    validate.same_shape(values=v.shape, old_values=old.shape, returns=ret.shape)
    m = mp.mask("mask", mask, v.shape)
    eps = validate.clip_range_value(clip_range_value)
    scale = mp.mpf(1) / 2 if validate.value_half(half) else mp.ONE
    validate.aggregation(aggregation)
    return v, old, ret, m, (None if eps is None else mp.mpf(eps)), scale


def _per_token(v, old, ret, eps, scale):
    """ℓ_t and ∂ℓ_t/∂V_t."""
    err = v - ret
    if eps is None:
        return scale * err * err, 2 * scale * err
    value = np.empty(v.shape, dtype=object)
    grad = np.empty(v.shape, dtype=object)
    for idx in np.ndindex(v.shape):
        e, step = err[idx], v[idx] - old[idx]
        if -eps <= step <= eps:           # V_c = V: both branches are the same
            value[idx], grad[idx] = scale * e * e, 2 * scale * e
            continue
        e_clipped = old[idx] + (eps if step > 0 else -eps) - ret[idx]
        if e * e >= e_clipped * e_clipped:   # a tie takes the unclipped branch (module docstring)
            value[idx], grad[idx] = scale * e * e, 2 * scale * e
        else:
            value[idx], grad[idx] = scale * e_clipped * e_clipped, mp.ZERO
    return value, grad


@mp.exact
def value_loss(values, old_values, returns, mask, clip_range_value: float | None = None, half: bool = False,
               aggregation: str = "token-mean"):
    """PPO value loss: aggregate over tokens of s·(V − R)² (PPO eq. 9), or with ``clip_range_value=ε``
    of s·max((V − R)², (V_old + clip(V − V_old, −ε, ε) − R)²) (baselines ppo2; verl 0.9.1
    compute_value_loss; OpenRLHF 0.11.2 ValueLoss); s = ½ when ``half``. ``aggregation`` is
    grpo.aggregate's mode, with the padded length T for 'seq-mean-token-sum-norm'; the paper's
    Ê_t is 'token-mean'. A mask without a token is rejected. Returns the scalar loss."""
    v, old, ret, m, eps, scale = _prepare(values, old_values, returns, mask, clip_range_value, half, aggregation)
    value, _ = _per_token(v, old, ret, eps, scale)
    return grpo.aggregate(value, m, mode=aggregation)


@mp.exact
def value_loss_vjp(cotangent, values, old_values, returns, mask, clip_range_value: float | None = None,
                   half: bool = False, aggregation: str = "token-mean"):
    """Gradient of cotangent·loss with respect to ``values``: w_t·2s·(V − R) where the unclipped
    branch is the larger (or the clip is off, or V is inside the closed band), 0 where the clipped
    branch is, w_t the aggregation weight (0 at masked tokens); ties take the unclipped branch."""
    v, old, ret, m, eps, scale = _prepare(values, old_values, returns, mask, clip_range_value, half, aggregation)
    ct = mp.array("cotangent", cotangent)
    validate.same_shape(loss=(), cotangent=ct.shape)  # the message names the cotangent
    value, grad = _per_token(v, old, ret, eps, scale)
    # the aggregate is linear in the per-token values: its VJP is the aggregation weights
    w = grpo.aggregate_vjp(ct.item(), value, m, mode=aggregation)["values"]
    return {"values": w * grad}


def _entropy(entropy, coef, aggregation):
    h = mp.array("entropy", entropy)
    validate.rank("entropy", h.shape, 2)
    validate.nonempty("entropy", h.shape)
    validate.aggregation(aggregation)   # named as this objective names it (grpo.aggregate says 'mode')
    return h, mp.mpf(validate.entropy_coef(coef))


@mp.exact
def entropy_bonus(entropy, mask, coef: float = 0.01, aggregation: str = "token-mean", norm_length: float | None = None,
                  mean_eps: float = 0.0, mean_eps_scope: str = "per-row"):
    """The entropy term of the policy loss, −c·aggregate(H) (PPO eq. 9's c₂·S with the sign of a
    loss; verl 0.9.1 ppo_loss). ``aggregation``, ``norm_length``, ``mean_eps`` and
    ``mean_eps_scope`` are grpo.aggregate's ``mode``, ``norm_length``, ``mean_eps`` and
    ``mean_eps_scope``. Returns the scalar loss."""
    h, c = _entropy(entropy, coef, aggregation)
    return -c * grpo.aggregate(h, mask, mode=aggregation, norm_length=norm_length, mean_eps=mean_eps,
                               mean_eps_scope=mean_eps_scope)


@mp.exact
def entropy_bonus_vjp(cotangent, entropy, mask, coef: float = 0.01, aggregation: str = "token-mean",
                      norm_length: float | None = None, mean_eps: float = 0.0, mean_eps_scope: str = "per-row"):
    """Gradient of cotangent·loss with respect to ``entropy``: −c·cotangent·w_t, w_t the
    aggregation weight (0 at masked tokens)."""
    h, c = _entropy(entropy, coef, aggregation)
    ct = mp.array("cotangent", cotangent)
    validate.same_shape(loss=(), cotangent=ct.shape)  # the message names the cotangent
    w = grpo.aggregate_vjp(ct.item(), h, mask, mode=aggregation, norm_length=norm_length, mean_eps=mean_eps,
                           mean_eps_scope=mean_eps_scope)["values"]
    return {"entropy": -c * w}
