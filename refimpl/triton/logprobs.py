"""The log-probability of the sampled token, straight from the logits (Triton).

``selective_log_softmax(logits, index, temperature)`` = log softmax(logits/T)[index] along the
last axis: what the GRPO and Proximal KL losses take as ``logp`` (the catalog objectives start
from log-probabilities; this is the step before them). It is TRL's ``selective_log_softmax``
(TRL 1.16.0, trl/trainer/utils.py) without the [N,V] log-softmax: one pass over vocabulary
tiles with an online maximum and normaliser gives log q_y = (z_y − M)/T − log S, and the
backward pass writes (e_y − q)/T times the row's cotangent. No catalog objective takes
logits and an index, so it has no vectors: tests/triton_backend checks it against
``refimpl.exact.mp.log_softmax``.
"""
from __future__ import annotations

import torch

from lossproof.refimpl import validate
from lossproof.refimpl.triton import _checks, _kernels, _launch

__all__ = ["selective_log_softmax"]


class _Selective:
    def __init__(self, T: float):
        self.T = T

    def forward(self, z, _, y):
        n, v = z.shape
        work = _launch.work_dtype(z)
        values = torch.empty(n, dtype=work, device=z.device)
        stats = torch.empty(n, 2, dtype=work, device=z.device)
        _launch.launch(_kernels.selective_forward, n, v, work, z, y, values, stats, [self.T])
        return values, stats

    def backward(self, z, _, y, stats, cot):
        n, v = z.shape
        grad = torch.empty_like(z)
        _launch.launch(_kernels.selective_backward, n, v, stats.dtype, z, y, stats, cot, grad, [self.T])
        return grad


def _inputs(logits, index, temperature):
    """Every check, in order: the logits (NaN, +inf, a row of −inf), T, the index, and a −inf
    logit at the index (its log-probability is −inf: no finite loss can use it)."""
    z = _checks.logits("logits", logits)
    validate.temperature(temperature)
    _checks.possible_rows("logits", z)
    y = _checks.indices("index", index, tuple(z.shape[:-1]), z.shape[-1], z.device, "logits without the vocabulary axis")
    dead = (z.detach().gather(-1, y[..., None])[..., 0] == float("-inf")).nonzero()
    if len(dead):
        at = tuple(int(i) for i in dead[0])
        validate.fail("logits", f"-inf at the index (position {at}, token {int(y[at])}): the log-probability is -inf")
    return z, y


def selective_log_softmax(logits, index, temperature: float = 1.0):
    """log softmax(logits/T)[..., index] along the last axis: ``logits`` [...,V] (CUDA tensor, or
    CPU under ``TRITON_INTERPRET=1``), ``index`` [...] integers in [0, V); returns [...] in the
    logits' dtype (float32 accumulation for bfloat16/float16), differentiable wrt ``logits``."""
    if not (isinstance(logits, torch.Tensor) and logits.dtype in _checks.FLOATS and logits.ndim >= 1
            and logits.shape[-1] > 0):
        logits, index = _inputs(logits, index, temperature)
    _launch.check_device(logits)
    T = validate.temperature(temperature)
    v = logits.shape[-1]
    y = _checks.indices("index", index, tuple(logits.shape[:-1]), v, logits.device, "logits without the vocabulary axis")
    if logits.numel() == 0:
        return logits.sum(dim=-1)
    z = logits.reshape(-1, v).contiguous()
    logp = _launch.Rows.apply(_Selective(T), z, None, y.reshape(-1).contiguous())
    _launch.require_finite(logp, lambda: _inputs(logits, index, temperature))
    return logp.reshape(logits.shape[:-1]).to(logits.dtype)
