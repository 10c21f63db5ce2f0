"""Mixture-of-experts auxiliary losses: the router z-loss and the load-balancing loss.

Source: ST-MoE (Zoph et al. 2022, arXiv 2202.08906) §3.1 eq. 5, the router z-loss

    L_z(x) = (1/B) · Σ_{i=1}^{B} (log Σ_{j=1}^{N} e^{x_j^{(i)}})²

over the B tokens of a batch and their N router logits (here [N, E]: N tokens, E experts), which
penalises large router logits for numerical stability. transformers 5.25.0
(models/switch_transformers/modeling_switch_transformers.py, router_z_loss_func) divides the sum
by every position of the padded batch; with ``mask`` this reference averages over the tokens the
mask selects (padding is not a token).

The load-balancing loss (``load_balancing``), over router logits [N, E] or [L, N, E] (L layers),
the tokens a mask [N] selects (n of them), each routed to its top k experts:

- ``switch``: Switch Transformer (Fedus et al. 2021, arXiv 2101.03961) §2.2 eq. 4–6,
  E·Σ_e f_e·P_e with f_e = (1/n)·Σ_t 1[e ∈ top-k(x_t)] (for k > 1 the fraction of tokens whose
  top k include e, so Σ_e f_e = k, as transformers counts it) and P_e = (1/n)·Σ_t softmax(x_t)_e.
  One layer; without the coefficient α.
- ``concatenated``: transformers 5.25.0 models/mixtral/modeling_mixtral.py
  load_balancing_loss_func: the L layers' tokens pooled (torch.cat along tokens in earlier
  releases, running sums over L·n rows in 5.25.0), f and P the means over all of them,
  E·Σ_e f_e·P_e. Its attention mask weights both statistics, as ``mask`` does here.
- ``per-layer-sum``: the switch loss of each layer, summed over the layers (Megatron-style
  per-layer auxiliary losses, each added to the total).
- ``sequence``: DeepSeek-V3 (arXiv 2412.19437) §2.1.2 eq. 17–20, per sequence of T tokens,
  Σ_i f_i·P_i with f_i = E/(k·T)·Σ_t 1[s_{i,t} ∈ top-k], s'_{i,t} = s_{i,t}/Σ_j s_{j,t},
  s = σ(x) (eq. 15's sigmoid affinities) and P_i = (1/T)·Σ_t s'_{i,t}; the mean over the
  sequences (``seq_len`` positions each, T the count the mask selects; sequences without a
  token are left out), summed over the layers; without α.

``fraction_norm`` 'top_k' divides f_e by k in the first three forms (Σ_e f_e = 1), as
Megatron-core 0.16.1 (megatron/core/transformer/moe/moe_utils.py switch_load_balancing_loss_func:
f_i = 1/(T·topk)·Σ routing_map, the loss ·E/(topk·T²)) and OLMo-core 3.0.0
(olmo_core/nn/moe/loss.py load_balancing_loss: scale = num_experts / top_k) do: the loss is 1/k
of the catalog's default, which counts f as transformers does.

f counts are constants (top-k is not differentiable; the papers' gradient flows through P).
Top-k is taken on the logits (softmax and σ are increasing); at a tie at the k-th place the
lowest index wins here, which libraries do not guarantee (torch.topk), so vectors avoid ties.
"""
from __future__ import annotations

import mpmath
import numpy as np

from lossproof.refimpl import validate
from lossproof.refimpl.exact import mp

__all__ = ["router_z_loss", "router_z_loss_vjp", "load_balancing", "load_balancing_vjp"]


def _prepare(router_logits, mask):
    z = mp.array("router_logits", router_logits)
    validate.rank("router_logits", z.shape, 2)
    validate.nonempty("router_logits", z.shape)
    if mask is None:
        return z, mp.full(z.shape[:1], 1)
    m = mp.mask("mask", mask, z.shape[:1])
    if not any(e == 1 for e in m.flat):
        validate.fail("mask", "selects no token")
    return z, m


@mp.exact
def router_z_loss(router_logits, mask=None):
    """ST-MoE eq. 5: the mean over the tokens (those ``mask`` selects) of lse(x)², lse the
    log-sum-exp of the token's router logits over the experts. Returns the scalar loss."""
    z, m = _prepare(router_logits, mask)
    lse = mp.logsumexp(z, axis=-1)
    return mpmath.fsum(m * lse * lse) / mpmath.fsum(m)


@mp.exact
def router_z_loss_vjp(cotangent, router_logits, mask=None):
    """Gradient of cotangent·loss: ∂/∂x_e = 2·m·lse(x)·softmax(x)_e / Σ m (d lse/dx = softmax);
    0 for the logits of a masked token."""
    z, m = _prepare(router_logits, mask)
    ct = mp.array("cotangent", cotangent)
    validate.same_shape(loss=(), cotangent=ct.shape)  # the message names the cotangent
    lse = mp.logsumexp(z, axis=-1, keepdims=True)
    weight = 2 * ct.item() * m[:, None] * lse / mpmath.fsum(m)
    return {"router_logits": weight * mp.exp(z - lse)}


def top_experts(row, k: int) -> set:
    """The k largest entries' indices; at a tie the lowest index wins."""
    return set(sorted(range(len(row)), key=lambda e: (-row[e], e))[:k])


def _balance_prepare(router_logits, top_k, form, seq_len, fraction_norm, mask):
    z = mp.array("router_logits", router_logits)
    validate.rank("router_logits", z.shape, (2, 3))
    validate.nonempty("router_logits", z.shape)
    form = validate.balance_form(form, z.ndim == 3)
    validate.fraction_norm(fraction_norm, form)
    layers = z if z.ndim == 3 else z[None]
    n, experts = layers.shape[1:]
    k = validate.top_k(top_k, experts)
    t = validate.seq_len(seq_len, form, n)
    m = [1] * n if mask is None else [int(v) for v in mp.mask("mask", mask, (n,))]
    if not any(m):
        validate.fail("mask", "selects no token")
    return layers, m, k, form, t, z.ndim == 3


def _affinities(row, form):
    """softmax(x), or DeepSeek-V3's normalised sigmoid s/Σ s with σ(−x) = 1 − σ(x) beside it."""
    if form != "sequence":
        return mp.softmax(row), None
    s = [1 / (1 + mpmath.exp(-x)) for x in row]
    total = mpmath.fsum(s)
    return np.array([v / total for v in s], dtype=object), [1 / (1 + mpmath.exp(x)) for x in row]


def _coefficients(layers, m, k, form, t, fraction_norm="none"):
    """G [L, N, E] with loss = Σ G·q, q the affinities: the loss is linear in q once the top-k
    counts (constants) are fixed."""
    n_layers, n, experts = layers.shape
    chosen = [[top_experts(row, k) if on else set() for row, on in zip(layer, m)] for layer in layers]
    coef = mp.zeros(layers.shape)
    if form == "sequence":
        starts = [b for b in range(0, n, t) if any(m[b:b + t])]
        for l in range(n_layers):
            for b in starts:
                toks = [i for i in range(b, b + t) if m[i]]
                big_t = len(toks)
                f = [mp.mpf(experts * sum(e in chosen[l][i] for i in toks)) / (k * big_t) for e in range(experts)]
                for i in toks:
                    coef[l, i] = np.array(f, dtype=object) / (big_t * len(starts))
        return coef
    n_tok = sum(m)
    counts = [[sum(e in sel for sel in chosen[l]) for e in range(experts)] for l in range(n_layers)]
    if form == "concatenated":
        pooled = [sum(c[e] for c in counts) for e in range(experts)]
        counts = [pooled] * n_layers
        denominator = mp.mpf(n_layers * n_tok) ** 2
    else:
        denominator = mp.mpf(n_tok) ** 2
    if fraction_norm == "top_k":
        denominator *= k
    for l in range(n_layers):
        for i in range(n):
            if m[i]:
                coef[l, i] = np.array([experts * mp.mpf(c) for c in counts[l]], dtype=object) / denominator
    return coef


@mp.exact
def load_balancing(router_logits, top_k: int = 1, form: str = "switch", seq_len: int | None = None,
                   fraction_norm: str = "none", mask=None):
    """The auxiliary load-balancing loss of ``form`` (module docstring): Switch eq. 4 (one layer),
    transformers' pooled layers, the per-layer sum, or DeepSeek-V3's sequence-wise eq. 17–20;
    f divided by k under ``fraction_norm`` 'top_k' (Megatron-core, OLMo-core).
    Returns the scalar loss (without the coefficient α)."""
    layers, m, k, form, t, _ = _balance_prepare(router_logits, top_k, form, seq_len, fraction_norm, mask)
    coef = _coefficients(layers, m, k, form, t, fraction_norm)
    terms = []
    for l, layer in enumerate(layers):
        for i, row in enumerate(layer):
            if m[i]:
                q, _ = _affinities(row, form)
                terms += [g * v for g, v in zip(coef[l, i], q)]
    return mpmath.fsum(terms)


@mp.exact
def load_balancing_vjp(cotangent, router_logits, top_k: int = 1, form: str = "switch", seq_len: int | None = None,
                       fraction_norm: str = "none", mask=None):
    """Gradient of cotangent·loss wrt the router logits, through the affinities only: with
    G = ∂loss/∂q per token, q_j·(G_j − Σ_e G_e·q_e) for the softmax and q_j·σ(−x_j)·(G_j − Σ_e G_e·q_e)
    for s/Σ s (∂q_i/∂x_j = q_j·σ(−x_j)·(δ_ij − q_i)); 0 for a masked token."""
    layers, m, k, form, t, layered = _balance_prepare(router_logits, top_k, form, seq_len, fraction_norm, mask)
    ct = mp.array("cotangent", cotangent)
    validate.same_shape(loss=(), cotangent=ct.shape)  # the message names the cotangent
    coef = _coefficients(layers, m, k, form, t, fraction_norm)
    grad = mp.zeros(layers.shape)
    for l, layer in enumerate(layers):
        for i, row in enumerate(layer):
            if not m[i]:
                continue
            q, rest = _affinities(row, form)
            g = coef[l, i]
            # G_j − Σ_e G_e·q_e written as Σ_e q_e·(G_j − G_e) (Σ q = 1): equal G give exactly 0
            d = np.array([q[j] * mpmath.fsum(qe * (g[j] - ge) for qe, ge in zip(q, g)) for j in range(len(q))],
                         dtype=object)
            grad[l, i] = ct.item() * (d if rest is None else d * np.array(rest, dtype=object))
    return {"router_logits": grad if layered else grad[0]}
