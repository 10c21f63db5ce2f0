"""Language-model token objectives (PyTorch): cross-entropy, the fused-linear cross-entropy, the
sampled token's log-probability, entropy.

Same names, formulas and contract as ``refimpl.exact.lm`` (torch.nn.functional.cross_entropy with
PyTorch's label smoothing, PaLM §5's z-loss, Gemma 2 §2's soft-capping and transformers'
num_items_in_batch as ``normalizer``; TRL 1.16.0 / verl 0.9.1 selective_log_softmax,
logprobs_from_logits and entropy_from_logits). bfloat16 and float16 logits are computed in float32
and the outputs cast back. Each objective is one autograd Function whose backward is the analytic
gradient, formed as the exact reference forms it: q_y − 1 as expm1(log q_y) (autograd's
softmax − one-hot would lose it when q_y ≈ 1), the entropy's gradient from logit differences (0
for a row of equal logits), the cap's derivative as sech² (no 1 − tanh² cancellation).
"""
from __future__ import annotations

import torch

from lossproof.refimpl import validate
from lossproof.refimpl.torch import _common, _fused_ce, _fused_linear

# True: cross_entropy takes the fused path (``_fused_ce``: row chunks, no [N,V] intermediate,
# the compiled CPU kernel where it applies); False: the plain path below (``_CrossEntropy``).
FUSED = True

__all__ = ["cross_entropy", "linear_cross_entropy", "token_logprobs", "entropy"]


class _Soft:
    """softmax(z/T) along the last axis, shifted by the row maximum (no graph)."""

    def __init__(self, z: torch.Tensor, T: float):
        self.support = z > -torch.inf
        m = z.max(dim=-1, keepdim=True).values
        self.max = torch.where(m == -torch.inf, torch.zeros_like(m), m)
        dz = z - self.max
        self.x = dz / T if T != 1.0 else dz
        top = z.argmax(dim=-1, keepdim=True)
        is_top = torch.zeros_like(self.support).scatter_(-1, top, True)
        # log Σ e^{x} = log1p(S), S without the top token: exact when S is below u
        self.l1 = torch.log1p(torch.where(is_top, 0.0, torch.exp(self.x)).sum(dim=-1, keepdim=True))
        self.logp = self.x - self.l1
        self.p = torch.exp(self.logp)
        self.lse = (self.max / T if T != 1.0 else self.max) + self.l1
        self.x_live = torch.where(self.support, self.x, 0.0)   # q = 0 there: no 0·∞

    def nll(self, onehot):
        """−log q_y = −x_y + log1p(S) per row (both terms ≥ 0)."""
        return -torch.where(onehot, self.x_live, 0.0).sum(dim=-1) + self.l1[:, 0]

    def q_minus_onehot(self, onehot):
        return torch.where(onehot, torch.expm1(self.logp), self.p)


def _logits(logits) -> torch.Tensor:
    z = _common.array("logits", logits, allow_neg_inf=True)
    validate.rank("logits", tuple(z.shape), 2)
    validate.lm_logit_rows(*z.shape)
    return z


def _labels(labels, z: torch.Tensor) -> torch.Tensor:
    y = _common.int_array("labels", labels)
    validate.rank("labels", tuple(y.shape), 1)
    validate.same_shape(**{"logits rows": (z.shape[0],)}, labels=tuple(y.shape))
    return y.to(z.device)


def _onehot(y, counted, v: int) -> torch.Tensor:
    safe = torch.where(counted, y, 0)
    return (torch.arange(v, device=y.device) == safe[:, None]) & counted[:, None]


def _check_rows(z, onehot, counted, smoothing=0.0) -> None:
    support = z.detach() > -torch.inf
    none = ~support.any(dim=-1)
    at_label = counted & (onehot & ~support).any(dim=-1)
    some = counted & ~support.all(dim=-1)
    if (none | at_label | (some & (smoothing > 0))).any():
        validate.lm_rows(none.tolist(), at_label.tolist(), some.tolist(), counted.tolist(), smoothing)


# --------------------------------------------------------------------------- cross-entropy

class _CrossEntropy(torch.autograd.Function):
    """Per-token losses of the counted tokens (0 elsewhere) and, saved for backward, ∂ℓ_i/∂z."""

    @staticmethod
    def forward(ctx, z, onehot, counted, eps, zeta, cap):
        with torch.no_grad():
            if cap is not None:
                zc = cap * torch.tanh(z / cap)
                dcap = torch.cosh(z / cap).pow(-2)         # sech²: 0 at ±inf
            else:
                zc, dcap = z, None
            d = _Soft(zc, 1.0)
            per = (1 - eps) * d.nll(onehot)
            if eps:
                # lse − mean_v z_v = mean_v (max − z_v) + log1p(S): non-negative terms
                per = per + eps * ((-d.x_live).mean(dim=-1) + d.l1[:, 0])
            if zeta:
                per = per + zeta * d.lse[:, 0].square()
            per = torch.where(counted, per, 0.0)
            # q_y − (1−ε) = expm1(log q_y) + ε (no cancellation at q_y ≈ 1), or q_y at ε = 1
            g = torch.where(onehot, d.p if eps == 1 else torch.expm1(d.logp) + eps, d.p)
            if eps:
                g = g - eps / z.shape[-1]
            if zeta:
                g = g + (2 * zeta) * d.lse * d.p
            if dcap is not None:
                g = g * dcap
            g = torch.where(counted[:, None], g, 0.0)
        ctx.save_for_backward(g)
        return per

    @staticmethod
    def backward(ctx, grad_per):
        (g,) = ctx.saved_tensors
        return grad_per[:, None] * g, None, None, None, None, None


def cross_entropy(logits, labels, ignore_index: int = -100, label_smoothing: float = 0.0, z_loss: float = 0.0,
                  softcap: float | None = None, reduction: str = "mean", normalizer: float | None = None,
                  smoothing_classes: str = "all"):
    """Token cross-entropy (torch.nn.functional.cross_entropy; see ``refimpl.exact.lm``): per counted
    token (1−ε)(lse − z'_y) + ε(lse − mean z') + ζ·lse², z' = s·tanh(z/s) when capped, 0 at
    ignore_index; reduced by 'mean' (÷ counted tokens or ÷ normalizer), 'sum' or 'none';
    ``smoothing_classes`` 'others' (ε over the classes but the label, Megatron-core) is that form
    at ε·V/(V − 1) (``validate.smoothing_weight``). Gradient
    wrt ``logits`` by autograd: the fused path's kept gradient (``_fused_ce``, when ``FUSED``)
    or the analytic backward of ``_CrossEntropy``."""
    z = _logits(logits)
    n, v = z.shape
    y = _labels(labels, z)
    ignore, eps, zeta, cap, reduction, norm = validate.lm_conventions(ignore_index, label_smoothing, z_loss,
                                                                      softcap, reduction, normalizer)
    eps = validate.smoothing_weight(eps, smoothing_classes, v)
    counted = _fused_ce.counted_labels(y, v, ignore)
    if FUSED:
        if cap is None:
            _fused_ce.check_rows(z, torch.where(counted, y, 0), counted, eps)
        count = int(counted.sum())
        validate.empty_mean(reduction, norm, count)
        return _fused_ce.cross_entropy(z, torch.where(counted, y, 0), counted, _fused_ce.Conventions(eps, zeta, cap),
                                       reduction, (norm if norm is not None else count) if reduction == "mean" else None,
                                       _common.result_dtype(z))
    onehot = _onehot(y, counted, v)
    if cap is None:
        _check_rows(z, onehot, counted, eps)
    count = int(counted.sum())
    validate.empty_mean(reduction, norm, count)
    out_dtype = _common.result_dtype(z)
    zw = _common.upcast(z, _common.work_dtype(out_dtype))
    per = _CrossEntropy.apply(zw, onehot, counted, eps, zeta, cap)
    if reduction == "none":
        return per.to(out_dtype)
    total = per.sum()
    if reduction == "mean":
        total = total / (norm if norm is not None else count)
    return total.to(out_dtype)


# --------------------------------------------------------------------------- fused-linear cross-entropy

def linear_cross_entropy(hidden, weight, labels, ignore_index: int = -100, label_smoothing: float = 0.0,
                         z_loss: float = 0.0, softcap: float | None = None, reduction: str = "mean",
                         normalizer: float | None = None, smoothing_classes: str = "all", bias=None):
    """``cross_entropy`` of F.linear(hidden, weight, bias): the fused path (``_fused_linear``: row chunks,
    the gradients formed in forward as Liger 0.8.5 LigerFusedLinearCrossEntropyLoss does, no [N, V]
    logits) when ``FUSED``, else unfused (the [N, V] logits materialised). Unfused, bfloat16/float16 inputs are upcast to float32
    first, so that each logit is a float32 dot product of exact products (never rounded to the input
    dtype) and the gradients wrt hidden, weight and bias (autograd through F.linear) are float32
    matrix products rounded once to the inputs' dtype."""
    if FUSED:
        return _fused_linear.linear_cross_entropy(hidden, weight, labels, ignore_index, label_smoothing, z_loss,
                                                  softcap, reduction, normalizer, smoothing_classes, bias)
    h = _common.array("hidden", hidden)
    w = _common.array("weight", weight).to(h.device)
    b = None if bias is None else _common.array("bias", bias).to(h.device)
    validate.linear_shapes(tuple(h.shape), tuple(w.shape), None if b is None else tuple(b.shape))
    out_dtype = _common.result_dtype(h, w) if b is None else _common.result_dtype(h, w, b)
    work = _common.work_dtype(out_dtype)
    z = torch.nn.functional.linear(_common.upcast(h, work), _common.upcast(w, work),
                                   None if b is None else _common.upcast(b, work))
    return cross_entropy(z, labels, ignore_index, label_smoothing, z_loss, softcap, reduction, normalizer,
                         smoothing_classes).to(out_dtype)


# --------------------------------------------------------------------------- sampled-token log-probability

class _TokenLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, onehot, T):
        with torch.no_grad():
            d = _Soft(z, T)
            ctx.save_for_backward(d.q_minus_onehot(onehot))
            ctx.T = T
            return -d.nll(onehot)

    @staticmethod
    def backward(ctx, grad):
        (g,) = ctx.saved_tensors
        return -(grad[:, None] / ctx.T) * g, None, None


def token_logprobs(logits, labels, temperature: float = 1.0):
    """log q_y of softmax(z/T) per row (TRL 1.16.0 selective_log_softmax, verl 0.9.1
    logprobs_from_logits). Returns logp[N]; gradient c·(δ_{jy} − q_j)/T by autograd."""
    z = _logits(logits)
    n, v = z.shape
    T = validate.temperature(temperature)
    y = _labels(labels, z)
    counted = _fused_ce.counted_labels(y, v, None)
    onehot = _onehot(y, counted, v)
    _check_rows(z, onehot, counted)
    out_dtype = _common.result_dtype(z)
    return _TokenLogprobs.apply(_common.upcast(z, _common.work_dtype(out_dtype)), onehot, T).to(out_dtype)


# --------------------------------------------------------------------------- entropy

class _Entropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, T):
        with torch.no_grad():
            d = _Soft(z, T)
            h = (d.p * (d.l1 - d.x_live)).sum(dim=-1)
            centre = (d.p * d.x_live).sum(dim=-1, keepdim=True)
            # ∂H/∂x_j = −q_j·(x_j − Σ_k q_k x_k), x shifted: exactly 0 for equal logits
            ctx.save_for_backward(torch.where(d.support, -d.p * (d.x_live - centre), 0.0))
            ctx.T = T
            return h

    @staticmethod
    def backward(ctx, grad):
        (g,) = ctx.saved_tensors
        return (grad[:, None] / ctx.T) * g, None


def entropy(logits, temperature: float = 1.0):
    """Entropy −Σ q log q of softmax(z/T) per row (verl 0.9.1 / TRL 1.16.0 entropy_from_logits);
    0·log 0 = 0 at impossible tokens. Gradient by autograd (``_Entropy``'s analytic backward)."""
    z = _logits(logits)
    T = validate.temperature(temperature)
    none = ~(z.detach() > -torch.inf).any(dim=-1)
    if none.any():
        false = [False] * z.shape[0]
        validate.lm_rows(none.tolist(), false, false, false)
    out_dtype = _common.result_dtype(z)
    return _Entropy.apply(_common.upcast(z, _common.work_dtype(out_dtype)), T).to(out_dtype)
