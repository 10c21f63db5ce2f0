"""ppo.value_loss and ppo.entropy_bonus in ball arithmetic.

PPO (Schulman et al. 2017, arXiv 1707.06347) §5 eq. 9: the critic's squared error (V − R)²,
averaged over time steps; OpenAI baselines ppo2's clipped variant, kept by verl 0.9.1
compute_value_loss and OpenRLHF 0.11.2 ValueLoss: V_c = V_old + clip(V − V_old, −ε, ε) and the
larger of (V − R)² and (V_c − R)². Inside the closed band |V − V_old| ≤ ε, V_c is V (the same
node, so both branches coincide); outside, V_c is the constant V_old ± ε, and the branch is
decided by comparing the two squares (an exact tie takes (V − R)²). Times ½ when ``half``; reduced
over the mask with grpo.aggregate's modes (the padded length T for 'seq-mean-token-sum-norm').

The entropy bonus: PPO eq. 9's c₂·S[π_θ](s_t), as a loss −c·agg(H) (verl 0.9.1
workers/utils/losses.py ppo_loss: policy_loss −= entropy_coeff·agg_loss(entropy, ...)), agg the
same masked reduction (``aggregate_rows``) with its ``norm_length`` and ``mean_eps``.
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.certified import _ball
from lossproof.refimpl.certified.grpo import aggregate_rows, mask_rows

__all__ = ["value_loss", "value_loss_vjp", "entropy_bonus", "entropy_bonus_vjp"]


def _token(v, old, ret, eps):
    """max((V − R)², (V_c − R)²), or (V − R)² without a clip."""
    unclipped = _ball.square(v - ret)
    if eps is None:
        return unclipped
    side = _ball.band(_ball.value(v) - old, -eps, eps)
    if side == 0:
        return unclipped
    clipped = _ball.square(old + (eps if side > 0 else -eps) - ret)
    return unclipped if _ball.compare(unclipped, clipped) >= 0 else clipped


def _value_loss(diff, values, old_values, returns, mask, clip_range_value=None, half=False,
                aggregation="token-mean"):
    v = _ball.balls("values", values)
    shape = _ball.shape(v)
    validate.rank("values", shape, 2)
    validate.nonempty("values", shape)
    old = _ball.balls("old_values", old_values)
    ret = _ball.balls("returns", returns)
    validate.same_shape(values=shape, old_values=_ball.shape(old), returns=_ball.shape(ret))
    m = mask_rows("mask", mask, shape)
    eps = validate.clip_range_value(clip_range_value)
    eps = None if eps is None else _ball.ball(eps)
    s = _ball.ball(0.5) if validate.value_half(half) else _ball.ONE
    validate.aggregation(aggregation)
    v = diff("values", v)
    per_token = [[s * _token(a, b, c, eps) if on else None for a, b, c, on in zip(vr, orow, rr, mr)]
                 for vr, orow, rr, mr in zip(v, old, ret, m)]
    return {"loss": aggregate_rows(per_token, m, aggregation, _ball.ball(shape[1]))}


value_loss, value_loss_vjp = _ball.pair(_value_loss, ("loss",), ("values",))
value_loss.__doc__ = "PPO value loss, unclipped (eq. 9) or PPO2-clipped, as balls."


def _entropy_bonus(diff, entropy, mask, coef=0.01, aggregation="token-mean", norm_length=None, mean_eps=0.0,
                   mean_eps_scope="per-row"):
    h = _ball.balls("entropy", entropy)
    shape = _ball.shape(h)
    validate.rank("entropy", shape, 2)
    validate.nonempty("entropy", shape)
    m = mask_rows("mask", mask, shape)
    c = _ball.ball(validate.entropy_coef(coef))
    validate.aggregation(aggregation)
    norm = validate.norm_length(norm_length)
    norm = _ball.ball(shape[1] if norm is None else norm)
    eps = validate.mean_eps(mean_eps)
    token_eps = _ball.ball(validate.mean_eps_scope(mean_eps_scope, eps, (aggregation,)))
    h = diff("entropy", h)
    return {"loss": -(c * aggregate_rows(h, m, aggregation, norm, _ball.ball(eps), token_eps))}


entropy_bonus, entropy_bonus_vjp = _ball.pair(_entropy_bonus, ("loss",), ("entropy",))
entropy_bonus.__doc__ = "PPO entropy bonus −c·agg(H) (arXiv 1707.06347 eq. 9), as balls."
