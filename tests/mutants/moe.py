"""Mutants of ``moe.router_z_loss`` (ST-MoE, arXiv 2202.08906, §3.1 eq. 5) and ``moe.load_balancing``
(Switch Transformer arXiv 2101.03961 eq. 4–6; transformers' pooled layers; per-layer sum;
DeepSeek-V3 arXiv 2412.19437 eq. 17–20).

z-loss: the mean over the (unmasked) tokens of lse(router logits)²; load balancing: E·Σ f·P (or
V3's Σ f·P); gradients with respect to the logits."""
from __future__ import annotations

import torch

from mutants import Pair, checked, export

OBJ = "moe.router_z_loss"


def z_loss(router_logits, mask, *, count_padding=False):
    """The loss; every keyword after ``*`` switches one bug on."""
    lse = torch.logsumexp(router_logits, dim=-1)
    if mask is None:
        return (lse ** 2).mean()
    m = mask.to(torch.bool)
    terms = torch.where(m, lse ** 2, torch.zeros_like(lse))
    return terms.sum() / (len(lse) if count_padding else m.sum())


@checked(OBJ)
def twin(router_logits, mask=None):
    """ST-MoE eq. 5 over the tokens the mask selects."""
    return z_loss(router_logits, mask)


@checked(OBJ)
def padding_counted_in_the_mean(router_logits, mask=None):
    """Padded positions counted in the mean's denominator.

    Seen: transformers 5.25.0 models/switch_transformers/modeling_switch_transformers.py
    router_z_loss_func divides the sum over [groups, tokens] by every position (it takes no
    attention mask), so padding dilutes the loss by the padded fraction."""
    return z_loss(router_logits, mask, count_padding=True)


BALANCE = "moe.load_balancing"


def _top_k(z, k):
    """Top-k membership, the lowest index first at a tie (the catalog's rule)."""
    above = z.unsqueeze(-2) > z.unsqueeze(-1)
    idx = torch.arange(z.shape[-1])
    tied = (z.unsqueeze(-2) == z.unsqueeze(-1)) & (idx.unsqueeze(0) < idx.unsqueeze(1))
    return ((above | tied).sum(dim=-1) < k).to(z.dtype)


def balance_of(router_logits, top_k, form, seq_len, mask, *, count_padding=False, top_k_probs=False):
    """The loss; every keyword after ``*`` switches one bug on."""
    z = router_logits if router_logits.dim() == 3 else router_logits.unsqueeze(0)
    n_layers, n, e = z.shape
    m = torch.ones(n, dtype=z.dtype) if (mask is None or count_padding) else mask.to(z.dtype)
    sel = _top_k(z.detach(), top_k) * m[None, :, None]
    if form == "sequence":
        s = torch.sigmoid(z)
        q = s / s.sum(dim=-1, keepdim=True)
    else:
        q = torch.softmax(z, dim=-1)
    if top_k_probs:   # only the chosen experts' probabilities enter P
        q = q * sel
    q = q * m[None, :, None]
    if form == "sequence":
        t = seq_len or n
        total = 0
        for layer in range(n_layers):
            losses = []
            for b in range(0, n, t):
                big_t = m[b:b + t].sum()
                if big_t == 0:
                    continue
                f = e * sel[layer, b:b + t].sum(dim=0) / (top_k * big_t)
                losses.append((f * q[layer, b:b + t].sum(dim=0) / big_t).sum())
            total = total + torch.stack(losses).mean()
        return total
    count, prob = sel.sum(dim=1), q.sum(dim=1)          # [L, E]
    if form == "concatenated":
        rows = n_layers * m.sum()
        return e * (count.sum(dim=0) * prob.sum(dim=0)).sum() / rows ** 2
    return (e * (count * prob).sum(dim=1) / m.sum() ** 2).sum()


@checked(BALANCE)
def balance_twin(router_logits, top_k=1, form="switch", seq_len=None, mask=None):
    """The forms of the catalog: Switch eq. 4, transformers' pooled layers, per-layer sum, DeepSeek-V3."""
    return balance_of(router_logits, top_k, form, seq_len, mask)


@checked(BALANCE)
def balance_counts_padding(router_logits, top_k=1, form="switch", seq_len=None, mask=None):
    """Padded positions counted in the routed fractions and mean probabilities.

    Seen: huggingface/transformers issue #28505 and pull request #28517 (Mixtral's
    load_balancing_loss_func took no attention mask: padding tokens entered f and P)."""
    return balance_of(router_logits, top_k, form, seq_len, mask, count_padding=True)


@checked(BALANCE)
def balance_from_top_k_probabilities(router_logits, top_k=1, form="switch", seq_len=None, mask=None):
    """P from the top-k experts' probabilities only (the others' set to 0), not the full softmax.

    Seen: AI-Hypercomputer/maxtext pull request #1433 (load_balance_loss fed the top-k weights
    instead of every expert's score); huggingface/transformers issue #28021 (router probabilities
    taken from the top-k routing weights)."""
    return balance_of(router_logits, top_k, form, seq_len, mask, top_k_probs=True)


PAIRS = [Pair("MOE_Z_PADDING_COUNTED", OBJ, padding_counted_in_the_mean, twin),
         Pair("MOE_LB_PADDING_COUNTED", BALANCE, balance_counts_padding, balance_twin, {"form": "*"}),
         Pair("MOE_LB_TOP_K_PROBABILITIES", BALANCE, balance_from_top_k_probabilities, balance_twin, {"form": "*"})]
export(globals(), PAIRS)
