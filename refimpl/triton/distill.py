"""Knowledge-distillation objectives as fused Triton kernels (``_kernels``): tempered softmax,
Hinton's combined loss, full-vocabulary token KL (forward / reverse, forward also as a
cross-entropy), the symmetric KL (the forward and reverse kernels, weighted) and the generalized
Jensen–Shannon divergence of GKD, with the catalog's signatures (``conformance/catalog.py``)
and the formulas of ``refimpl.torch.distill``, whose docstrings cite the papers.

Inputs are tensors on a CUDA device (or CPU tensors under ``TRITON_INTERPRET=1``); values
come back in the inputs' dtype, the gradient in the student's dtype, by autograd (a custom
backward kernel: not twice differentiable).

Input checks. Cheap checks (shapes, parameters, labels) run before the launch; the checks
that read every logit (NaN, +inf, rows of −inf, support mismatches; ``_checks``, with every
backend's messages) run only when a row's value comes out non-finite, which every such input
causes. A non-finite value of an input that passes them is an error of this backend, raised
as such.
"""
from __future__ import annotations

import math

import torch

from lossproof.refimpl import validate
from lossproof.refimpl.triton import _checks, _kernels, _launch

__all__ = ["generalized_jsd", "hinton", "skew_kl", "softmax", "symmetric_kl", "token_kl", "tvd"]

# Catalog objectives of the family this backend has no kernel for (tests/test_backend_catalog.py).
DECLINED = {
    "distill.sparse_kl": "no kernel: the teacher is K stored log-probabilities, not a logit row, so the only "
                         "vocabulary-wide work is the student's log-sum-exp; lossproof.refimpl.torch.distill.sparse_kl "
                         "(autograd through log_softmax) serves it",
}


def _tensors(check, rank, *xs):
    """The logits as contiguous [N,V] tensors when they are floating tensors of one shape and
    device with a non-empty vocabulary; otherwise the full checks decide (they raise, or
    return converted tensors)."""
    ok = (all(isinstance(x, torch.Tensor) and x.dtype in _checks.FLOATS for x in xs)
          and len({(tuple(x.shape), x.device) for x in xs}) == 1
          and xs[0].ndim >= 1 and xs[0].shape[-1] > 0 and (rank is None or xs[0].ndim == rank))
    if not ok:
        xs = check()[:len(xs)]
    _launch.check_device(*xs)
    return xs


def _rows2(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1]).contiguous()


class _TokenKL:
    def __init__(self, T: float, forward: bool):
        self.T, self.forward_kl = T, forward

    def forward(self, zs, ts, y):
        n, v = zs.shape
        work = _launch.work_dtype(zs, ts)
        values = torch.empty(n, dtype=work, device=zs.device)
        stats = torch.empty(n, 5, dtype=work, device=zs.device)
        _launch.launch(_kernels.token_kl_forward, n, v, work, zs, ts, values, stats, [self.T],
                       FORWARD=self.forward_kl)
        return values, stats

    def backward(self, zs, ts, y, stats, cot):
        n, v = zs.shape
        grad = torch.empty_like(zs)
        _launch.launch(_kernels.token_kl_backward, n, v, stats.dtype, zs, ts, stats, cot, grad, [self.T],
                       FORWARD=self.forward_kl)
        return grad


class _JSD:
    def __init__(self, T: float, beta: float):
        self.params = [T, beta, math.log(beta), math.log1p(-beta)]

    def forward(self, zs, ts, y):
        n, v = zs.shape
        work = _launch.work_dtype(zs, ts)
        values = torch.empty(n, dtype=work, device=zs.device)
        stats = torch.empty(n, 5, dtype=work, device=zs.device)
        _launch.launch(_kernels.jsd_forward, n, v, work, zs, ts, values, stats, self.params)
        return values, stats

    def backward(self, zs, ts, y, stats, cot):
        n, v = zs.shape
        grad = torch.empty_like(zs)
        _launch.launch(_kernels.jsd_backward, n, v, stats.dtype, zs, ts, stats, cot, grad, self.params)
        return grad


class _Mixed:
    """A two-pass kernel pair of ``_kernels`` (``skew_*`` or ``tvd_*``) with its parameters."""

    def __init__(self, forward_kernel, backward_kernel, params, **constexprs):
        self.kernels, self.params, self.constexprs = (forward_kernel, backward_kernel), params, constexprs

    def forward(self, zs, ts, y):
        n, v = zs.shape
        work = _launch.work_dtype(zs, ts)
        values = torch.empty(n, dtype=work, device=zs.device)
        stats = torch.empty(n, 5, dtype=work, device=zs.device)
        _launch.launch(self.kernels[0], n, v, work, zs, ts, values, stats, self.params, **self.constexprs)
        return values, stats

    def backward(self, zs, ts, y, stats, cot):
        n, v = zs.shape
        grad = torch.empty_like(zs)
        _launch.launch(self.kernels[1], n, v, stats.dtype, zs, ts, stats, cot, grad, self.params, **self.constexprs)
        return grad


class _Hinton:
    def __init__(self, T: float, alpha: float, scale: float):
        self.params = [T, alpha, scale]
        self.same_t = T == 1

    def forward(self, zs, ts, y):
        n, v = zs.shape
        work = _launch.work_dtype(zs, ts)
        values = torch.empty(n, dtype=work, device=zs.device)
        stats = torch.empty(n, 5, dtype=work, device=zs.device)
        _launch.launch(_kernels.hinton_forward, n, v, work, zs, ts, y, values, stats, self.params,
                       SAME_T=self.same_t)
        return values, stats

    def backward(self, zs, ts, y, stats, cot):
        n, v = zs.shape
        grad = torch.empty_like(zs)
        _launch.launch(_kernels.hinton_backward, n, v, stats.dtype, zs, ts, y, stats, cot, grad, self.params)
        return grad


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, T):
        n, v = z.shape
        work = _launch.work_dtype(z)
        probs = torch.empty_like(z)
        stats = torch.empty(n, 2, dtype=work, device=z.device)
        _launch.launch(_kernels.softmax_forward, n, v, work, z, probs, stats, [T])
        ctx.T = T
        ctx.save_for_backward(z, stats)
        return probs

    @staticmethod
    def backward(ctx, g):
        z, stats = ctx.saved_tensors
        n, v = z.shape
        grad = torch.empty_like(z)
        _launch.launch(_kernels.softmax_backward, n, v, stats.dtype, z, stats, g.contiguous(), grad, [ctx.T])
        return grad, None


def _softmax_inputs(logits, temperature):
    """All of softmax's input checks, in every backend's order."""
    z = _checks.logits("logits", logits)
    validate.temperature(temperature)
    _checks.possible_rows("logits", z)
    return (z,)


def _teacher_entropy(ts: torch.Tensor, T: float, work) -> torch.Tensor:
    """H(p) = −Σ_{p>0} p log p of softmax(t/T) per row, in ``work``, no graph: what the
    cross-entropy soft term −Σ p log q adds to KL(p‖q) (the same gradient). A separate torch
    pass over the teacher; the kernels compute only the KL."""
    t = ts.detach().to(work) / T
    logp = torch.log_softmax(t, dim=-1)
    return torch.where(t > _checks.NEG_INF, -logp.exp() * logp, torch.zeros_like(t)).sum(dim=-1)


def _hinton_params(zs, labels, temperature, alpha, t2_scale, soft_term="kl"):
    """Hinton's checks that read no logit: rows, labels, α, the T² flag, T, the soft term."""
    validate.soft_term(soft_term)
    n, v = zs.shape
    if n == 0:
        validate.fail("student_logits", "needs at least one row (the loss is a mean over rows)")
    y = _checks.indices("labels", labels, (n,), v, zs.device, "student_logits rows")
    a = validate.alpha(alpha)
    T = validate.temperature(temperature)
    s = T * T if validate.t2_scale(t2_scale) else 1.0
    return y, T, a, s


def _hinton_inputs(student_logits, teacher_logits, labels, temperature, alpha, t2_scale, soft_term="kl"):
    """All of Hinton's input checks, in every backend's order."""
    zs, ts, _ = _checks.pair(student_logits, teacher_logits, temperature, rank=2)
    y = _hinton_params(zs, labels, temperature, alpha, t2_scale, soft_term)[0]
    dead = (zs.detach().gather(1, y[:, None])[:, 0] == _checks.NEG_INF).nonzero()
    if len(dead):
        i = int(dead[0, 0])
        validate.fail("student_logits", f"-inf at the label (row {i}, token {int(y[i])}): "
                                        "the cross-entropy term is infinite")
    _checks.support("student_logits", ts, zs, "KL(p‖q)")
    return zs, ts


def _token_kl_inputs(student_logits, teacher_logits, direction, temperature, soft_term="kl"):
    zs, ts, _ = _checks.pair(student_logits, teacher_logits, temperature)
    validate.direction(direction)
    validate.soft_term(soft_term, direction)
    if direction == "reverse":
        _checks.support("teacher_logits", zs, ts, "reverse KL(q‖p)")
    else:
        _checks.support("student_logits", ts, zs, "forward KL(p‖q)")
    return zs, ts


def _symmetric_inputs(student_logits, teacher_logits, forward_weight, temperature):
    zs, ts, _ = _checks.pair(student_logits, teacher_logits, temperature)
    validate.forward_weight(forward_weight)
    _checks.support("student_logits", ts, zs, "forward KL(p‖q)")
    _checks.support("teacher_logits", zs, ts, "reverse KL(q‖p)")
    return zs, ts


def _jsd_inputs(student_logits, teacher_logits, beta, temperature, endpoints):
    zs, ts, _ = _checks.pair(student_logits, teacher_logits, temperature)
    b = validate.jsd_beta(beta)
    validate.endpoints(endpoints)
    if endpoints == "kl" and b == 0:
        _checks.support("student_logits", ts, zs, "beta=0 with endpoints='kl' → KL(p‖q)")
    if endpoints == "kl" and b == 1:
        _checks.support("teacher_logits", zs, ts, "beta=1 with endpoints='kl' → KL(q‖p)")
    return zs, ts


def softmax(logits, temperature: float = 1.0):
    """Tempered softmax q_i = exp(z_i/T) / Σ_j exp(z_j/T) along the last axis (Hinton et al.
    2015 §2). ``logits`` [...,V]; probs of the same shape and dtype."""
    check = lambda: _softmax_inputs(logits, temperature)
    (z,) = _tensors(check, None, logits)
    T = validate.temperature(temperature)
    if z.numel() == 0:
        return z.clone()
    probs = _Softmax.apply(_rows2(z), T).reshape(z.shape)
    _launch.require_finite(probs, check)
    return probs


def hinton(student_logits, teacher_logits, labels, temperature: float = 1.0, alpha: float = 0.5,
           t2_scale: bool = True, soft_term: str = "kl"):
    """Hinton distillation loss, mean over the N rows (``refimpl.torch.distill.hinton``):

        L = 1/N Σ_n [ (1−α)(−log q_{y_n}^{(1)}) + α·s·KL(p^{(T)} ‖ q^{(T)}) ],  s = T² if t2_scale else 1.

    ``student_logits``, ``teacher_logits`` [N,V], ``labels`` [N] integers in [0, V).
    ``soft_term='cross_entropy'`` adds α·s·mean H(p) (−Σ p log q = KL + H(p), Hinton §2's form)."""
    check = lambda: _hinton_inputs(student_logits, teacher_logits, labels, temperature, alpha, t2_scale, soft_term)
    zs, ts = _tensors(check, 2, student_logits, teacher_logits)
    y, T, a, s = _hinton_params(zs, labels, temperature, alpha, t2_scale, soft_term)
    rows = _launch.Rows.apply(_Hinton(T, a, s), zs.contiguous(), ts.detach().contiguous(), y.contiguous())
    _launch.require_finite(rows, check)
    if soft_term == "cross_entropy":
        rows = rows + (a * s) * _teacher_entropy(ts, T, rows.dtype)
    return rows.mean().to(_checks.result_dtype(zs, ts))


def token_kl(student_logits, teacher_logits, direction: str = "reverse", temperature: float = 1.0,
             soft_term: str = "kl"):
    """Full-vocabulary KL per row at temperature T (no T² factor): reverse Σ q log(q/p)
    (student first), forward Σ p log(p/q) (``refimpl.torch.distill.token_kl``); forward with
    ``soft_term='cross_entropy'``: −Σ p log q = KL + H(p). Logits [...,V]; returns kl [...]."""
    check = lambda: _token_kl_inputs(student_logits, teacher_logits, direction, temperature, soft_term)
    zs, ts = _tensors(check, None, student_logits, teacher_logits)
    T = validate.temperature(temperature)
    validate.direction(direction)
    validate.soft_term(soft_term, direction)
    kl = _launch.Rows.apply(_TokenKL(T, direction == "forward"), _rows2(zs), _rows2(ts.detach()), None)
    _launch.require_finite(kl, check)
    if soft_term == "cross_entropy":
        kl = kl + _teacher_entropy(_rows2(ts), T, kl.dtype)
    return kl.reshape(zs.shape[:-1]).to(_checks.result_dtype(zs, ts))


def symmetric_kl(student_logits, teacher_logits, forward_weight: float = 0.5, temperature: float = 1.0):
    """w·KL(p‖q) + (1−w)·KL(q‖p) per row (``refimpl.torch.distill.symmetric_kl``): the forward
    and reverse token KL kernels, weighted (autograd adds their gradients). Logits [...,V]."""
    check = lambda: _symmetric_inputs(student_logits, teacher_logits, forward_weight, temperature)
    zs, ts = _tensors(check, None, student_logits, teacher_logits)
    T = validate.temperature(temperature)
    w = validate.forward_weight(forward_weight)
    z2, t2 = _rows2(zs), _rows2(ts.detach())
    forward = _launch.Rows.apply(_TokenKL(T, True), z2, t2, None)
    reverse = _launch.Rows.apply(_TokenKL(T, False), z2, t2, None)
    kl = w * forward + (1 - w) * reverse
    _launch.require_finite(kl, check)
    return kl.reshape(zs.shape[:-1]).to(_checks.result_dtype(zs, ts))


def generalized_jsd(student_logits, teacher_logits, beta: float = 0.5, temperature: float = 1.0,
                    endpoints: str = "limit"):
    """Generalized Jensen–Shannon divergence per row, β·KL(p‖m) + (1−β)·KL(q‖m), m = β·p + (1−β)·q
    (``refimpl.torch.distill.generalized_jsd``). ``endpoints='limit'``: 0 at β = 0 and β = 1;
    ``'kl'``: β = 0 is KL(p‖q), β = 1 is KL(q‖p) (the token KL kernels). Logits [...,V]."""
    check = lambda: _jsd_inputs(student_logits, teacher_logits, beta, temperature, endpoints)
    zs, ts = _tensors(check, None, student_logits, teacher_logits)
    T = validate.temperature(temperature)
    b = validate.jsd_beta(beta)
    validate.endpoints(endpoints)
    out = _checks.result_dtype(zs, ts)
    if b in (0, 1) and endpoints == "limit":
        check()  # the rows of −inf are still rejected
        # A zero that stays in the graph (gradient exactly 0, also at −inf logits).
        flat = torch.where(torch.zeros_like(zs, dtype=torch.bool), zs, torch.zeros_like(zs))
        return flat.sum(dim=-1).to(out)
    spec = _TokenKL(T, b == 0) if b in (0, 1) else _JSD(T, b)
    jsd = _launch.Rows.apply(spec, _rows2(zs), _rows2(ts.detach()), None)
    _launch.require_finite(jsd, check)
    return jsd.reshape(zs.shape[:-1]).to(out)


def _skew_inputs(student_logits, teacher_logits, alpha, direction, temperature):
    zs, ts, _ = _checks.pair(student_logits, teacher_logits, temperature)
    validate.skew_alpha(alpha)
    validate.direction(direction)
    return zs, ts


def skew_kl(student_logits, teacher_logits, alpha: float = 0.1, direction: str = "forward",
            temperature: float = 1.0):
    """Skew KL per row (``refimpl.torch.distill.skew_kl``; DistiLLM §3): forward KL(p‖αp + (1−α)q),
    reverse KL(q‖αq + (1−α)p); α = 1 gives 0. Logits [...,V]; returns kl [...]."""
    check = lambda: _skew_inputs(student_logits, teacher_logits, alpha, direction, temperature)
    zs, ts = _tensors(check, None, student_logits, teacher_logits)
    T = validate.temperature(temperature)
    a = validate.skew_alpha(alpha)
    validate.direction(direction)
    out = _checks.result_dtype(zs, ts)
    if a == 1:
        check()  # the rows of −inf are still rejected
        flat = torch.where(torch.zeros_like(zs, dtype=torch.bool), zs, torch.zeros_like(zs))
        return flat.sum(dim=-1).to(out)
    forward = direction == "forward"
    # the log-weights of p and q in m, from α itself (1 − α would lose α's digits at α = 1e-6)
    logs = [math.log(a), math.log1p(-a)] if forward else [math.log1p(-a), math.log(a)]
    spec = _Mixed(_kernels.skew_forward, _kernels.skew_backward, [T, a] + logs, FORWARD=forward)
    kl = _launch.Rows.apply(spec, _rows2(zs), _rows2(ts.detach()), None)
    _launch.require_finite(kl, check)
    return kl.reshape(zs.shape[:-1]).to(out)


def tvd(student_logits, teacher_logits, temperature: float = 1.0):
    """Total variation ½·Σ|q − p| per row, subgradient sign(0) = 0 (``refimpl.torch.distill.tvd``).
    Logits [...,V]; returns tvd [...]."""
    check = lambda: _checks.pair(student_logits, teacher_logits, temperature)
    zs, ts = _tensors(check, None, student_logits, teacher_logits)
    T = validate.temperature(temperature)
    spec = _Mixed(_kernels.tvd_forward, _kernels.tvd_backward, [T])
    value = _launch.Rows.apply(spec, _rows2(zs), _rows2(ts.detach()), None)
    _launch.require_finite(value, check)
    return value.reshape(zs.shape[:-1]).to(_checks.result_dtype(zs, ts))
