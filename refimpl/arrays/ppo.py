"""The PPO critic's value loss over the array API (PPO eq. 9; baselines ppo2's value clipping), and
the policy loss's entropy bonus −c·agg(H).

Sources as ``refimpl.exact.ppo``. Per token, with s = ½ when ``half``:

    ℓ_t = s·(V − R)²,  or  s·max((V − R)², (V_c − R)²),  V_c = clip(V, V_old − ε, V_old + ε)

(verl 0.9.1's clip_by_value form of V_old + clip(V − V_old, −ε, ε): V itself inside the band, so
nothing is rounded there), reduced with grpo.aggregate's modes (``refimpl.arrays.grpo``'s
aggregate_value and aggregate_weights). Gradient 2s·(V − R) where the unclipped branch is the
larger or equal (V inside the band included), 0 where the clipped branch is.
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.arrays import _xp, grpo

__all__ = ["value_loss", "value_loss_vjp", "entropy_bonus", "entropy_bonus_vjp"]


def _prepare(values, old_values, returns, mask, clip_range_value, half, aggregation):
    xp = _xp.namespace(values, old_values, returns, mask)
    dt = _xp.float_dtype(xp, values=values, old_values=old_values, returns=returns)
    v = _xp.array(xp, "values", values, dt)
    validate.rank("values", _xp.shape(v), 2)
    validate.nonempty("values", _xp.shape(v))
    old = _xp.array(xp, "old_values", old_values, dt)
    ret = _xp.array(xp, "returns", returns, dt)
    validate.same_shape(values=_xp.shape(v), old_values=_xp.shape(old), returns=_xp.shape(ret))
    m = _xp.mask(xp, "mask", mask, _xp.shape(v), dt)
    eps = validate.clip_range_value(clip_range_value)
    scale = 0.5 if validate.value_half(half) else 1.0
    validate.aggregation(aggregation)
    return xp, dt, v, old, ret, m, eps, scale


def _per_token(xp, v, old, ret, eps, scale):
    """ℓ_t and ∂ℓ_t/∂V_t."""
    err = v - ret
    unclipped = err * err
    if eps is None:
        return scale * unclipped, 2 * scale * err
    clipped_err = xp.clip(v, old - eps, old + eps) - ret
    clipped = clipped_err * clipped_err
    active = unclipped >= clipped          # a tie takes the unclipped branch, as the exact reference
    return scale * xp.where(active, unclipped, clipped), 2 * scale * _xp.masked(xp, active, err)


def value_loss(values, old_values, returns, mask, clip_range_value: float | None = None, half: bool = False,
               aggregation: str = "token-mean"):
    """PPO value loss: aggregate of s·(V − R)² (PPO eq. 9) or, with ``clip_range_value=ε``, of
    s·max((V − R)², (V_c − R)²) (baselines ppo2; verl 0.9.1; OpenRLHF 0.11.2); s = ½ when ``half``.
    Returns the scalar loss."""
    xp, _, v, old, ret, m, eps, scale = _prepare(values, old_values, returns, mask, clip_range_value, half,
                                                 aggregation)
    value, _ = _per_token(xp, v, old, ret, eps, scale)
    return grpo.aggregate_value(xp, value, m, aggregation, float(v.shape[1]))


def value_loss_vjp(cotangent, values, old_values, returns, mask, clip_range_value: float | None = None,
                   half: bool = False, aggregation: str = "token-mean"):
    """Gradient of cotangent·loss with respect to ``values``: w_t·2s·(V − R) where the unclipped
    branch is the larger or equal, 0 where the clipped one is; w_t the aggregation weight."""
    xp, dt, v, old, ret, m, eps, scale = _prepare(values, old_values, returns, mask, clip_range_value, half,
                                                  aggregation)
    ct = _xp.array(xp, "cotangent", cotangent, dt)
    validate.same_shape(loss=(), cotangent=_xp.shape(ct))  # the message names the cotangent
    _, grad = _per_token(xp, v, old, ret, eps, scale)
    return {"values": ct * grpo.aggregate_weights(xp, m, aggregation, float(v.shape[1])) * grad}


def _entropy(entropy, mask, coef, aggregation, norm_length, mean_eps, mean_eps_scope):
    xp = _xp.namespace(entropy, mask)
    dt = _xp.float_dtype(xp, entropy=entropy)
    h = _xp.array(xp, "entropy", entropy, dt)
    validate.rank("entropy", _xp.shape(h), 2)
    validate.nonempty("entropy", _xp.shape(h))
    m = _xp.mask(xp, "mask", mask, _xp.shape(h), dt)
    c = validate.entropy_coef(coef)
    norm = grpo.aggregate_params("aggregation", aggregation, norm_length, h.shape[1])
    return xp, dt, h, m, c, norm, grpo.token_eps(mean_eps, mean_eps_scope, aggregation)


def entropy_bonus(entropy, mask, coef: float = 0.01, aggregation: str = "token-mean", norm_length: float | None = None,
                  mean_eps: float = 0.0, mean_eps_scope: str = "per-row"):
    """The entropy term of the policy loss, −c·aggregate(H) (PPO eq. 9's c₂·S as a loss; verl 0.9.1
    workers/utils/losses.py ppo_loss), aggregated by grpo.aggregate's modes. Returns the scalar loss."""
    xp, _, h, m, c, norm, eps = _entropy(entropy, mask, coef, aggregation, norm_length, mean_eps, mean_eps_scope)
    return -c * grpo.aggregate_value(xp, h, m, aggregation, norm, *eps)


def entropy_bonus_vjp(cotangent, entropy, mask, coef: float = 0.01, aggregation: str = "token-mean",
                      norm_length: float | None = None, mean_eps: float = 0.0, mean_eps_scope: str = "per-row"):
    """Gradient of cotangent·loss with respect to ``entropy``: −c·cotangent times the aggregation
    weights (0 at masked tokens)."""
    xp, dt, _, m, c, norm, eps = _entropy(entropy, mask, coef, aggregation, norm_length, mean_eps, mean_eps_scope)
    ct = grpo.scalar_cotangent(xp, cotangent, dt)
    return {"entropy": (-c * ct) * grpo.aggregate_weights(xp, m, aggregation, norm, *eps)}
