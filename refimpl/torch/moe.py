"""The ST-MoE router z-loss and the load-balancing loss (PyTorch, autograd).

Source as ``refimpl.exact.moe``: Zoph et al. 2022 (arXiv 2202.08906) §3.1 eq. 5, the mean over the
(unmasked) tokens of lse(x)², with torch.logsumexp over each token's router logits. bfloat16 and
float16 logits are computed in float32 and the loss is cast back; a masked token's term is
selected away, so its logits get exactly zero gradient.

The load-balancing loss, forms as ``refimpl.exact.moe`` (Switch Transformer arXiv 2101.03961 eq.
4–6; transformers 5.25.0 modeling_mixtral.py load_balancing_loss_func's pooled layers; the
per-layer sum; DeepSeek-V3 arXiv 2412.19437 eq. 17–20): Σ G·q with the top-k counts in G
detached (no gradient flows through f), q = softmax(x) or σ(x)/Σσ(x) in float32 for
bfloat16/float16 logits. Top-k by rank, the lowest index first at a tie (torch.topk does not
promise an order among equal values).
"""
from __future__ import annotations

import torch

from lossproof.refimpl import validate
from lossproof.refimpl.torch import _common

__all__ = ["router_z_loss", "load_balancing"]


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


def _top_k(z: torch.Tensor, k: int) -> torch.Tensor:
    """True where the logit is among its row's k largest (the lowest index first at a tie)."""
    above = z.unsqueeze(-2) > z.unsqueeze(-1)                      # [..., e, j]: z_j > z_e
    idx = torch.arange(z.shape[-1], device=z.device)
    tied_before = (z.unsqueeze(-2) == z.unsqueeze(-1)) & (idx.unsqueeze(0) < idx.unsqueeze(1))
    return (above | tied_before).sum(dim=-1) < k


def load_balancing(router_logits, top_k: int = 1, form: str = "switch", seq_len: int | None = None,
                   fraction_norm: str = "none", mask=None):
    """The auxiliary load-balancing loss of ``form`` (Switch eq. 4; transformers' pooled layers;
    per-layer sum; DeepSeek-V3 eq. 17–20), f divided by k under ``fraction_norm`` 'top_k'
    (Megatron-core, OLMo-core), without its coefficient. Gradient wrt ``router_logits`` through
    the affinities only."""
    z = _common.array("router_logits", router_logits)
    validate.rank("router_logits", tuple(z.shape), (2, 3))
    validate.nonempty("router_logits", tuple(z.shape))
    form = validate.balance_form(form, z.dim() == 3)
    norm = validate.fraction_norm(fraction_norm, form)
    layers = z if z.dim() == 3 else z.unsqueeze(0)
    n_layers, n, e = layers.shape
    k = validate.top_k(top_k, e)
    t = validate.seq_len(seq_len, form, n)
    m = torch.ones(n, dtype=torch.bool, device=z.device) if mask is None else _common.mask("mask", mask, (n,))
    if not m.any():
        validate.fail("mask", "selects no token")
    work = _common.work_dtype(z.dtype)
    x = _common.upcast(layers, work)
    mf = m.to(work)
    sel = (_top_k(layers.detach(), k) & m[None, :, None]).to(work)
    if form == "sequence":
        s = torch.sigmoid(x)
        q = s / s.sum(dim=-1, keepdim=True)
        ms = mf.reshape(n // t, t)
        big_t = ms.sum(dim=1)
        live = big_t > 0
        safe_t = torch.where(live, big_t, torch.ones_like(big_t))
        f = e * sel.reshape(n_layers, n // t, t, e).sum(dim=2) / (k * safe_t[None, :, None])
        g = f[:, :, None, :] * (ms / (safe_t * live.sum().to(work))[:, None])[None, :, :, None]
        g = g.reshape(n_layers, n, e)
    else:
        q = torch.softmax(x, dim=-1)
        counts = sel.sum(dim=1)
        n_tok = mf.sum()
        if form == "concatenated":
            counts = counts.sum(dim=0, keepdim=True).expand(n_layers, e)
            n_tok = n_tok * n_layers
        square = n_tok * n_tok * (k if norm == "top_k" else 1)
        g = (e * counts / square)[:, None, :] * mf[None, :, None]
    terms = torch.where(m[None, :, None], g * q, torch.zeros_like(q))
    return terms.sum().to(z.dtype)
