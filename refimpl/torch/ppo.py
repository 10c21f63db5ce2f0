"""The PPO critic's value loss (PyTorch, autograd): PPO eq. 9 and baselines ppo2's value clipping; the
policy loss's entropy bonus −c·agg(H).

Sources as ``refimpl.exact.ppo``. Per token, with s = ½ when ``half``:

    ℓ_t = s·(V − R)²,  or  s·max((V − R)², (V_c − R)²),  V_c = clamp(V, V_old − ε, V_old + ε)

(verl 0.9.1's clip_by_value form: V itself inside the closed band, where its gradient passes),
reduced with grpo.aggregate's modes (``refimpl.torch.grpo``). The max is a select that keeps the
unclipped branch at a tie, as the exact reference does (torch.max would split the gradient).
bfloat16/float16 inputs are computed in float32 and the loss is cast back.
"""
from __future__ import annotations

import torch

from lossproof.refimpl import validate
from lossproof.refimpl.torch import _common, grpo

__all__ = ["value_loss", "entropy_bonus"]


def value_loss(values, old_values, returns, mask, clip_range_value: float | None = None, half: bool = False,
               aggregation: str = "token-mean"):
    """PPO value loss: aggregate of s·(V − R)² (PPO eq. 9) or, with ``clip_range_value=ε``, of
    s·max((V − R)², (V_c − R)²) (baselines ppo2; verl 0.9.1 compute_value_loss; OpenRLHF 0.11.2
    ValueLoss); s = ½ when ``half``. Gradient wrt ``values``; old values and returns are constants."""
    v = _common.array("values", values)
    validate.rank("values", tuple(v.shape), 2)
    validate.nonempty("values", tuple(v.shape))
    old = _common.array("old_values", old_values)
    ret = _common.array("returns", returns)
    validate.same_shape(values=tuple(v.shape), old_values=tuple(old.shape), returns=tuple(ret.shape))
    m = _common.mask("mask", mask, tuple(v.shape))
    eps = validate.clip_range_value(clip_range_value)
    scale = 0.5 if validate.value_half(half) else 1.0
    validate.aggregation(aggregation)
    if not m.any():
        validate.fail("mask", "selects no token")
    out = _common.result_dtype(v, old, ret)
    work = _common.work_dtype(out)
    vw, rw = _common.upcast(v, work), _common.constant(ret, work)
    # Padding may hold any finite numbers: their squares are not formed (they could overflow).
    vw = torch.where(m, vw, rw)
    unclipped = (vw - rw) ** 2
    if eps is None:
        per_token = unclipped
    else:
        ow = torch.where(m, _common.constant(old, work), rw)
        clipped = (torch.clamp(vw, ow - eps, ow + eps) - rw) ** 2
        per_token = torch.where(unclipped >= clipped, unclipped, clipped)
    return (scale * grpo._aggregate(per_token, m, aggregation, float(v.shape[1]))).to(out)


def entropy_bonus(entropy, mask, coef: float = 0.01, aggregation: str = "token-mean", norm_length: float | None = None,
                  mean_eps: float = 0.0, mean_eps_scope: str = "per-row"):
    """The entropy term of the policy loss, −c·aggregate(H) (PPO eq. 9's c₂·S as a loss; verl 0.9.1
    workers/utils/losses.py ppo_loss), with grpo.aggregate's modes, reduced in float32 for
    bfloat16/float16 entropies and cast back once. Gradient wrt ``entropy``."""
    h = _common.array("entropy", entropy)
    validate.rank("entropy", tuple(h.shape), 2)
    validate.nonempty("entropy", tuple(h.shape))
    m = _common.mask("mask", mask, tuple(h.shape))
    c = validate.entropy_coef(coef)
    norm = grpo._aggregate_params("aggregation", aggregation, norm_length, h.shape[1])
    eps = grpo._mean_eps(mean_eps, mean_eps_scope, aggregation)
    grpo._check_tokens(m)
    work = _common.work_dtype(h.dtype)
    return (-c * grpo._aggregate(_common.upcast(h, work), m, aggregation, norm, *eps)).to(h.dtype)
