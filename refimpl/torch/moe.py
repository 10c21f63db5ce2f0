"""The ST-MoE router z-loss (PyTorch, autograd).

Source as ``refimpl.exact.moe``: Zoph et al. 2022 (arXiv 2202.08906) §3.1 eq. 5, the mean over the
(unmasked) tokens of lse(x)², with torch.logsumexp over each token's router logits. bfloat16 and
float16 logits are computed in float32 and the loss is cast back; a masked token's term is
selected away, so its logits get exactly zero gradient.
"""
from __future__ import annotations

import torch

from refimpl import validate
from refimpl.torch import _common

__all__ = ["router_z_loss"]


def router_z_loss(router_logits, mask=None):
    """ST-MoE eq. 5: the mean over the tokens (those ``mask`` selects) of lse(x)². Gradient wrt
    ``router_logits``."""
    z = _common.array("router_logits", router_logits)
    validate.rank("router_logits", tuple(z.shape), 2)
    validate.nonempty("router_logits", tuple(z.shape))
    m = torch.ones(z.shape[:1], dtype=torch.bool, device=z.device) if mask is None else \
        _common.mask("mask", mask, tuple(z.shape[:1]))
    if not m.any():
        validate.fail("mask", "selects no token")
    work = _common.work_dtype(z.dtype)
    lse = torch.logsumexp(_common.upcast(z, work), dim=-1)
    terms = torch.where(m, lse * lse, torch.zeros_like(lse))
    return (terms.sum() / m.sum().to(work)).to(z.dtype)
