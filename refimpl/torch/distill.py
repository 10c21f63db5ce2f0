"""Knowledge-distillation objectives: tempered softmax, Hinton's combined loss, full-vocabulary
token KL (forward / reverse) and the generalized Jensen–Shannon divergence of GKD (PyTorch).

Notation: z = student logits, t = teacher logits, T = temperature, q = softmax(z/T)
(student), p = softmax(t/T) (teacher), along the last axis (the vocabulary V); leading axes
are batch axes. A logit of −inf marks an impossible token (probability exactly 0); a row with
no possible token is rejected. The teacher is a constant (detached).

Gradients. ``softmax`` has its own backward (``_Softmax``: the centred form, accurate in
saturated rows). ``hinton``, ``token_kl`` and ``generalized_jsd`` take the fused path when
their logits are tensors (``_FusedRows``, section "Fused path" below: one pass over
vocabulary tiles gives the values and the gradient, written straight into the student's
dtype; rows it cannot evaluate to its accuracy go to the careful kernels), and otherwise the
plain path, ``_VocabRows``: a ``torch.autograd.Function`` that returns one value per row and,
in backward, recomputes the rows in chunks and writes the analytic gradient (the closed forms
of ``refimpl.exact.distill``'s ``*_vjp``) straight into a tensor of the student's dtype: no
[N,V] float32 intermediate is kept between forward and backward, and at most one chunk of
them exists at a time. ``FUSED = False`` makes every call take the plain path. Neither is
twice differentiable.

Numerics of the plain path's careful kernels (as in the exact reference). log q = (z − max)/T − log1p(Σ_{j≠argmax} e^{(z_j−max)/T});
log-ratios come from logit differences, r = ((z − t) − (max z − max t))/T − (log1p S_q −
log1p S_p); every KL is summed as Σ a·k3(−ℓ) + Σ_{a=0} b with k3(x) = expm1(x) − x ≥ 0
(``kl.k3``), whose terms do not cancel when a ≈ b; q − p is p·expm1(r) (or −q·expm1(−r)).
"""
from __future__ import annotations

import concurrent.futures
import ctypes
import math
import sys
import threading

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from refimpl import validate
from refimpl.torch import _common
from refimpl.torch.kl import k3

DIRECTIONS = ("reverse", "forward")
ENDPOINTS = ("limit", "kl")

# Logits per chunk of rows (forward, backward and the input checks); None: by device, small
# enough on a CPU for the chunk's temporaries to stay in cache, large enough on a GPU for the
# kernel launches not to dominate (about 20 chunk-sized float32 temporaries live at a time).
CHUNK_ELEMENTS: int | None = None
_CHUNK_BY_DEVICE = {"cpu": 1 << 20, "cuda": 1 << 23}
_NEG_INF = float("-inf")


def _row_slices(n_rows: int, v: int, device=None):
    chunk = CHUNK_ELEMENTS or _CHUNK_BY_DEVICE.get(getattr(device, "type", "cpu"), 1 << 22)
    step = max(1, chunk // max(v, 1))
    for start in range(0, n_rows, step):
        yield slice(start, min(n_rows, start + step))


# ---------------------------------------------------------------------------------------------
# One chunk of rows (all tensors [R,V] in the working dtype; no graph)
# ---------------------------------------------------------------------------------------------

class _Dist:
    """softmax(z/T) of a chunk of rows: log-probabilities, probabilities, pieces of log Z."""

    def __init__(self, z: torch.Tensor, T: float):
        self.z = z
        self.support = z != _NEG_INF
        self.max, self.top = z.max(dim=-1, keepdim=True)
        x = (z - self.max) / T  # exactly 0 at the top token, −inf for impossible tokens
        # log1p keeps the top token's log-probability −log1p(S) accurate when S < epsilon.
        others = x.scatter(-1, self.top, _NEG_INF)
        self.l1 = torch.log1p(torch.exp(others).sum(dim=-1, keepdim=True))
        self.logp = x - self.l1
        self.p = torch.exp(self.logp)


def _log_ratio(q: _Dist, p: _Dist, T: float):
    """r = log q − log p where both tokens are possible (0 elsewhere), and that mask.

    The logit differences z − t and max z − max t come first, so r keeps its relative accuracy
    when the student is close to the teacher."""
    both = q.support & p.support
    zero = torch.zeros_like(q.z)
    dz = torch.where(both, q.z, zero) - torch.where(both, p.z, zero)
    r = (dz - (q.max - p.max)) / T - (q.l1 - p.l1)
    return torch.where(both, r, zero), both


def _kl(a: torch.Tensor, a_support, ell: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """KL(a‖b) = Σ_{a>0} a·k3(−ℓ) + Σ_{a=0} b, ℓ = log a − log b, supp a ⊆ supp b (checked by
    the callers); every term is ≥ 0.

    Where b ≫ a (ℓ < −20) e^{−ℓ} may overflow while a·e^{−ℓ} = b does not: there the term is
    written b − a + a·ℓ, in which b dominates and nothing cancels."""
    zero = torch.zeros_like(a)
    far = a_support & (ell < -20)
    inside = torch.where(far, b - a + a * ell, a * k3(-torch.where(far, zero, ell)))
    return torch.where(a_support, inside, b).sum(dim=-1)


def _centred(x: torch.Tensor, q: torch.Tensor, top: torch.Tensor, support) -> torch.Tensor:
    """x_j − Σ_i q_i x_i (over supp q), written (x_j − x_k) − Σ_i q_i (x_i − x_k) with k = top,
    the most probable token: when q is nearly one-hot both sides are ≈ 0 and this form keeps
    their relative accuracy (every error term carries a factor q_i)."""
    d = torch.where(support, x - x.gather(-1, top), torch.zeros_like(x))
    return d - (q * d).sum(dim=-1, keepdim=True)


def _q_minus_p(q: _Dist, p: _Dist, r, both) -> torch.Tensor:
    """q − p without cancellation: p·expm1(r) for r ≤ 0, −q·expm1(−r) for r > 0 (neither
    overflows), q or −p where only one of them is possible."""
    neg = r <= 0
    zero = torch.zeros_like(r)
    d = torch.where(neg, p.p * torch.expm1(torch.where(neg, r, zero)),
                    -q.p * torch.expm1(-torch.where(neg, zero, r)))
    return torch.where(both, d, torch.where(q.support, q.p, -p.p))


def _log_mix(w: float, w_c: float, y: torch.Tensor) -> torch.Tensor:
    """log(w_c + w·e^y) = log1p(w·expm1(y)) for w, w_c > 0 with w + w_c = 1, both given to full
    relative accuracy (1 − w is never formed: it would lose β's digits at β = 1e-6), without
    overflow or cancellation:
        y > 1:                     logaddexp(log w_c, log w + y)   (value ≥ log1p(w·(e − 1)))
        y ≤ 1, w·expm1(y) ≥ −1/2:  log1p(w·expm1(y))               (value near 0 keeps its digits)
        y ≤ 1, w·expm1(y) < −1/2:  log(w_c + w·e^y)                (value ≤ log 1/2)."""
    zero = torch.zeros_like(y)
    low = y <= 1
    t = w * torch.expm1(torch.where(low, y, zero))
    near = t >= -0.5
    small = torch.log1p(torch.where(near, t, zero))
    direct = torch.log(w_c + w * torch.exp(torch.where(low, y, zero)))
    big = torch.logaddexp(torch.full_like(y, math.log(w_c)),
                          math.log(w) + torch.where(low, zero + 2, y))
    return torch.where(low, torch.where(near, small, direct), big)


class _ReverseKL:
    """KL(q‖p) per row; gradient q(ℓ − KL)/T with ℓ = log q − log p (MiniLLM §2.1 eq. 1)."""

    def __init__(self, T):
        self.T = T

    def __call__(self, z, t, y, need_grad):
        q, p = _Dist(z, self.T), _Dist(t, self.T)
        r, _ = _log_ratio(q, p, self.T)
        kl = _kl(q.p, q.support, r, p.p)
        if not need_grad:
            return kl, None
        return kl, q.p * _centred(r, q.p, q.top, q.support) / self.T


class _ForwardKL:
    """KL(p‖q) per row; gradient (q − p)/T."""

    def __init__(self, T):
        self.T = T

    def __call__(self, z, t, y, need_grad):
        q, p = _Dist(z, self.T), _Dist(t, self.T)
        r, both = _log_ratio(q, p, self.T)
        kl = _kl(p.p, p.support, -r, q.p)
        return kl, (_q_minus_p(q, p, r, both) / self.T if need_grad else None)


class _JSD:
    """β·KL(p‖m) + (1−β)·KL(q‖m), m = βp + (1−β)q, 0 < β < 1; gradient
    (1−β)·q(ℓ − KL(q‖m))/T with ℓ = log q − log m (GKD §3)."""

    def __init__(self, T, beta):
        self.T, self.beta = T, beta

    def __call__(self, z, t, y, need_grad):
        b = self.beta
        q, p = _Dist(z, self.T), _Dist(t, self.T)
        r, both = _log_ratio(q, p, self.T)
        # log q − log m = −log(1 − β + β·e^{−r}); log p − log m = −log(β + (1−β)·e^{r}):
        # small differences come out of log1p/expm1, large ones out of logaddexp.
        lq_m = torch.where(both, -_log_mix(b, 1 - b, -r), torch.full_like(r, -math.log1p(-b)))
        lp_m = torch.where(both, -_log_mix(1 - b, b, r), torch.full_like(r, -math.log(b)))
        m = torch.exp(torch.logaddexp(math.log(b) + p.logp, math.log1p(-b) + q.logp))
        kl_qm = _kl(q.p, q.support, lq_m, m)
        kl_pm = _kl(p.p, p.support, lp_m, m)
        jsd = b * kl_pm + (1 - b) * kl_qm
        if not need_grad:
            return jsd, None
        return jsd, ((1 - b) / self.T) * q.p * _centred(lq_m, q.p, q.top, q.support)


class _Hinton:
    """(1−α)(−log q^{(1)}_y) + α·s·KL(p^{(T)}‖q^{(T)}) per row; gradient
    (1−α)(q^{(1)} − e_y) + α·s·(q − p)/T (Hinton et al. 2015 §2)."""

    def __init__(self, T, alpha, s):
        self.T, self.alpha, self.s = T, alpha, s

    def __call__(self, z, t, y, need_grad):
        a, T = self.alpha, self.T
        q, p = _Dist(z, T), _Dist(t, T)
        q1 = q if T == 1 else _Dist(z, 1.0)
        r, both = _log_ratio(q, p, T)
        logq1_y = q1.logp.gather(-1, y[:, None])
        value = (1 - a) * (-logq1_y[:, 0]) + a * self.s * _kl(p.p, p.support, -r, q.p)
        if not need_grad:
            return value, None
        ce = q1.p.scatter(-1, y[:, None], torch.expm1(logq1_y))  # q_y − 1 without cancellation
        return value, (1 - a) * ce + (a * self.s / T) * _q_minus_p(q, p, r, both)


class _VocabRows(torch.autograd.Function):
    """Per-row values of ``kernel`` over [N,V] logits, with its analytic gradient wrt the
    student, both computed chunk by chunk in the working dtype. Saves only the inputs."""

    @staticmethod
    def forward(ctx, kernel, work, student, teacher, labels):
        n, v = student.shape
        out = torch.empty(n, dtype=work, device=student.device)
        for sl in _row_slices(n, v, student.device):
            out[sl] = kernel(student[sl].to(work), teacher[sl].to(work),
                             None if labels is None else labels[sl], False)[0]
        ctx.kernel, ctx.work = kernel, work
        ctx.save_for_backward(student, teacher, labels)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        student, teacher, labels = ctx.saved_tensors
        n, v = student.shape
        grad = torch.empty_like(student)
        for sl in _row_slices(n, v, student.device):
            _, d = ctx.kernel(student[sl].to(ctx.work), teacher[sl].to(ctx.work),
                              None if labels is None else labels[sl], True)
            grad[sl] = (g[sl, None].to(ctx.work) * d).to(student.dtype)
        return None, None, grad, None, None


def _vocab_rows(kernel, zs, ts, labels=None):
    """Apply ``kernel`` to every row of the last axis; returns [lead] in the working dtype."""
    work = _common.work_dtype(_common.result_dtype(zs, ts))
    v = zs.shape[-1]
    values = _VocabRows.apply(kernel, work, zs.reshape(-1, v), ts.detach().reshape(-1, v), labels)
    return values.reshape(zs.shape[:-1])


# ---------------------------------------------------------------------------------------------
# Fused path: vocabulary tiles, values and gradient in one pass
# ---------------------------------------------------------------------------------------------
#
# The plain path above (``_VocabRows``) evaluates every row with the careful forms and
# recomputes it in backward: about sixty [chunk]-sized operations per logit, twice. The fused
# path below reads each logit once per pass over a tile that stays in cache, computes the
# value and the gradient (for a unit cotangent) in the same pass, and writes the gradient
# straight into the student's dtype; backward only scales it (or returns it as it is). Per
# logit it costs two exponentials and about a dozen cheap operations (four transcendentals for
# the JSD), and no [N,V] intermediate exists: only ``_Scratch``'s few tile-sized buffers.
#
# Numerics. A tile holds whole rows when V ≤ TILE_ELEMENTS, else one row's vocabulary slice;
# with several tiles per row the passes are: (1) argmax and max of both models (first maximum,
# as torch.max), (2) the normalizers S = Σ_{j≠top} e^{x_j} (top excluded, so that
# log1p(S) keeps the saturated row's −log q_top), (3) the kernel's sums, (4) the gradient; a
# single tile does all four on the same cached exponentials. Sums are in the working dtype
# (torch's cascade summation), the per-row algebra in float64 (numpy). Values are written as
# Σ q·(ℓ − ℓ_top) + ℓ_top, centred at the most probable token like the gradient, with q
# normalised exactly (ez / (1 + S)): the normalisation error does not shift the value.
# What the fused forms do not have is the careful path's k3 form, which keeps the relative
# accuracy of a divergence much smaller than its terms (student ≈ teacher): their absolute
# error is about u·M, M = |ℓ_top| + log1p S_q + log1p S_p + log V + 1 (the log-softmax class
# of error that the vectors' tolerance is built on). So every row whose divergence is below
# u^GUARD·M, or whose value is not finite (−inf logits, overflow at tiny temperatures, bad
# input) is recomputed by the careful kernel of the plain path; non-finite rows first go
# through the plain path's input checks, so bad input raises exactly as there.

FUSED = True  # False: every call takes the plain path (the reference the fused one is tested against)
# Logits per tile; None: by device (CPU: the tile's buffers stay in L2/L3; GPU: big enough for
# the launches not to dominate).
TILE_ELEMENTS: int | None = None
_TILE_BY_DEVICE = {"cpu": 1 << 19, "cuda": 1 << 24}
# Rows whose fused value is at most u^GUARD·M (see above) are recomputed by the careful
# kernel: with 1/2, the fused value's error bound u·M is at most √u of it (half of the
# format's bits, 2^-12 in float32; in practice the error is far below its bound).
GUARD = 0.5
_UNIT = {torch.float32: 2.0 ** -24, torch.float64: 2.0 ** -53}


def _tile_elements(device) -> int:
    return TILE_ELEMENTS or _TILE_BY_DEVICE.get(device.type, 1 << 20)


def _argmax(x: torch.Tensor) -> torch.Tensor:
    """Index [R,1] of the first maximum of each row (a NaN counts as a maximum, as in numpy;
    such a row is flagged later). numpy's argmax is ~15× faster than torch's on a CPU."""
    if x.device.type == "cpu":
        return torch.from_numpy(np.argmax(x.detach().numpy(), axis=-1).reshape(-1, 1))
    return x.argmax(dim=-1, keepdim=True)


def _host(x: torch.Tensor) -> np.ndarray:
    """[R,1] → float64 numpy [R] (per-row algebra runs on the host: tiny arrays)."""
    if x.device.type == "cpu" and x.dtype in _NP:
        return x.detach().numpy().astype(np.float64).ravel()
    return x.detach().reshape(-1).to("cpu", torch.float64).numpy()


_NP = {torch.float32: np.float32, torch.float64: np.float64}


class _Scratch:
    """The call's tile-sized buffers, by name, in the working dtype (allocated once)."""

    def __init__(self, work, device, elements):
        self.work, self.device, self.elements, self.pool = work, device, elements, {}

    def __call__(self, name: str, shape) -> torch.Tensor:
        view = self.pool.get((name, shape))
        if view is None:
            base = self.pool.get(name)
            if base is None:
                base = self.pool[name] = torch.empty(self.elements, dtype=self.work, device=self.device)
            view = self.pool[(name, shape)] = base[: shape[0] * shape[1]].view(shape)
        return view


class _Rows:
    """Per-row constants of a block of rows: tops and maxima (pass 1), normalizers (pass 2).
    Torch [R,1] tensors in the working dtype for the tile operations (``iz``, ``it``: tops
    of the student and the teacher; ``mz``, ``mt``: their logits; ``tz``: the teacher's logit
    at the student's top; ``zt``: the student's at the teacher's), and the same as float64
    numpy [R] in ``h`` for the per-row algebra."""

    def __init__(self, iz, it, cols, like):
        self.iz, self.it = iz, it
        self.mz, self.mt, self.tz, self.zt = (_col(c, like) for c in cols)
        h = self.h = dict(zip(("mz", "mt", "tz", "zt"), cols))
        # The logit differences at the tops (exact in float64), the working-dtype columns the
        # tiles subtract, and what that rounding shifted (added back to the values).
        self.gz, self.gt = _col(h["mz"] - h["tz"], like), _col(h["mt"] - h["zt"], like)
        h["gz_err"] = _host(self.gz) - (h["mz"] - h["tz"])
        h["gt_err"] = _host(self.gt) - (h["mt"] - h["zt"])
        self.sz = self.st = self.s1 = None

    def normalize(self, T: float) -> None:
        h = self.h
        h["l1z"], h["l1t"] = np.log1p(self.sz), np.log1p(self.st)
        h["qz"], h["pt"] = 1.0 / (1.0 + self.sz), 1.0 / (1.0 + self.st)
        if self.s1 is not None:
            h["l11"], h["q1"] = np.log1p(self.s1), 1.0 / (1.0 + self.s1)


class _Tile:
    """A tile [R, Vt] (columns lo..lo+Vt of a block of rows) in the working dtype, and the
    quantities the kernels derive from it, each computed once."""

    def __init__(self, k, scratch, z, t, lo, rows):
        self.k, self.s, self.lo, self.rows = k, scratch, lo, rows
        self.shape = tuple(z.shape)
        self.z = z if z.dtype == scratch.work else scratch("z", self.shape).copy_(z)
        self.t = t if t.dtype == scratch.work else scratch("t", self.shape).copy_(t)
        self.cache = {}

    def local(self, idx: torch.Tensor):
        """Column of global indices [R,1] in this tile, or None where it is elsewhere (only
        possible with one row per block)."""
        if self.lo == 0 and self.shape[1] == self.k.v:
            return idx
        j = int(idx[0, 0]) - self.lo
        return idx - self.lo if 0 <= j < self.shape[1] else None

    def _exp(self, which: str, temperature: float, name: str) -> torch.Tensor:
        """e = exp((logit − max)/T), exactly 1 at the top token, in buffer ``name`` (the
        exponent is not kept: the log-ratios are formed from the logits, see ``_dz``)."""
        src, m = (self.z, self.rows.mz) if which == "z" else (self.t, self.rows.mt)
        x = torch.sub(src, m, out=self.s(name, self.shape))
        if temperature != 1:
            x.div_(temperature)
        if x.device.type == "cpu":
            # numpy's vectorized exp: twice torch's speed on a CPU (AVX-512: 0.46 against
            # 0.83 ns per float32), within 2 ulp; the two exponentials are most of a tile's time.
            xn = x.numpy()
            np.exp(xn, out=xn)
            return x
        return x.exp_()

    def get(self, name: str) -> torch.Tensor:
        if name not in self.cache:
            self.cache[name] = getattr(self, "_" + name)()
        return self.cache[name]

    def _ez(self):
        return self._exp("z", self.k.T, "ez")

    def _et(self):
        return self._exp("t", self.k.T, "et")

    def _e1(self):  # the student's softmax at T = 1 (Hinton's hard term)
        return self.get("ez") if self.k.T == 1 else self._exp("z", 1.0, "e1")

    def _dz(self):
        """ℓ − ℓ_top centred at the student's top k: ((z − t) − (z_k − t_k))/T, zero at k. The
        logit difference comes first, as on the plain path: exact when student ≈ teacher, so
        d keeps its relative accuracy there (x^z − x^t would not). The rounding of the
        column z_k − t_k is a shift common to the row: ``h['gz_err']``, added back."""
        d = torch.sub(self.z, self.t, out=self.s("d", self.shape)).sub_(self.rows.gz)
        return d.div_(self.k.T) if self.k.T != 1 else d

    def _dt(self):
        """(log p − log q) − (…)_j centred at the teacher's top j: ((t − z) − (t_j − z_j))/T."""
        d = torch.sub(self.t, self.z, out=self.s("d", self.shape)).sub_(self.rows.gt)
        return d.div_(self.k.T) if self.k.T != 1 else d

    def excl_sum(self, e: torch.Tensor, top: torch.Tensor) -> torch.Tensor:
        """Σ_{j≠top} e_j per row (e_top = 1 exactly: zeroed for the sum, then restored)."""
        j = self.local(top)
        if j is None:
            return e.sum(dim=1, keepdim=True)
        e.scatter_(1, j, 0.0)
        s = e.sum(dim=1, keepdim=True)
        e.scatter_(1, j, 1.0)
        return s

    def dot(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.mul(a, b, out=self.s("prod", self.shape)).sum(dim=1, keepdim=True)


def _col(a: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """float64 numpy [R] → [R,1] tensor in the working dtype, on the tiles' device."""
    t = torch.from_numpy(np.asarray(a, dtype=np.float64).astype(_NP[like.dtype]).reshape(-1, 1))
    return t if like.device.type == "cpu" else t.to(like.device)


class _Fast:
    """Base of the fused kernels: ``sums`` (pass 3) returns per-row partial sums of a tile,
    ``finish`` turns their totals into values, the careful-row flags and the gradient's
    constants, ``grad`` writes k·∂value/∂z of a tile (k: per-row cotangent)."""

    needs_s1 = False
    needs_l1 = False  # sums need the normalizers (JSD)

    def __init__(self, T: float, careful, v: int, work):
        self.T, self.careful, self.v, self.work = T, careful, v, work
        self.u = _UNIT[work]
        self.log_v = math.log(max(v, 2))

    def _guard(self, value, top_term, h, weight=1.0):
        m = np.abs(top_term) + h["l1z"] + h["l1t"] + self.log_v + 1
        return ~np.isfinite(value) | (value <= self.u ** GUARD * weight * m)


class _FastReverse(_Fast):
    """KL(q‖p) = Σ q·d + ℓ_top, d = ℓ − ℓ_top (student's top); gradient q(d − Σqd)/T."""

    def sums(self, tile):
        return [tile.dot(tile.get("ez"), tile.get("dz"))]

    def finish(self, rows, s, k):
        h = rows.h
        c = s[0] * h["qz"]
        top = -(h["tz"] - h["mt"]) / self.T - h["l1z"] + h["l1t"]
        value = c + h["gz_err"] / self.T + top
        return value, self._guard(value, top, h), {"c": c, "scale": h["qz"] * k / self.T}

    def grad(self, tile, g, out):
        d = tile.get("dz")
        d.sub_(g["c"]).mul_(g["scale"])
        torch.mul(d, tile.get("ez"), out=out)


class _FastForward(_Fast):
    """KL(p‖q) = Σ p·e + (log p − log q)_j, e centred at the teacher's top j; gradient (q − p)/T."""

    def _value(self, rows, s):
        h = rows.h
        top = -h["l1t"] - (h["zt"] - h["mz"]) / self.T + h["l1z"]
        return s[0] * h["pt"] + h["gt_err"] / self.T + top, top

    def sums(self, tile):
        return [tile.dot(tile.get("et"), tile.get("dt"))]

    def finish(self, rows, s, k):
        value, top = self._value(rows, s)
        h = rows.h
        return value, self._guard(value, top, h), {"a": h["qz"] * k / self.T, "b": -h["pt"] * k / self.T}

    def grad(self, tile, g, out):
        tmp = torch.mul(tile.get("ez"), g["a"], out=tile.s("prod", tile.shape))
        torch.addcmul(tmp, tile.get("et"), g["b"], out=out)


class _FastJSD(_Fast):
    """β·KL(p‖m) + (1−β)·KL(q‖m) with the log-ratios to the mixture from r = log q − log p:
    β ≤ ½: ℓ_q = −log1p(β·expm1(−r)), ℓ_p = ℓ_q − r; β > ½: ℓ_p = −log1p((1−β)·expm1(r)),
    ℓ_q = ℓ_p + r (the argument of log1p stays above −½: no cancellation; an overflow makes
    the row non-finite, and the careful kernel takes it). Gradient (1−β)·q(G − ΣqG)/T,
    G = ℓ_q − ℓ_q,top."""

    needs_l1 = True

    def __init__(self, T, careful, v, work, beta):
        super().__init__(T, careful, v, work)
        self.beta = beta

    def _top(self, h):
        r = -(h["tz"] - h["mt"]) / self.T - h["l1z"] + h["l1t"]
        b = self.beta
        with np.errstate(over="ignore", invalid="ignore"):
            if b <= 0.5:
                return r, -np.log1p(b * np.expm1(-r))
            return r, -np.log1p((1 - b) * np.expm1(r)) + r

    def _logs(self, tile):
        """(ℓ_q − ℓ_q,top, ℓ_p) of the tile."""
        if "lq" in tile.cache:
            return tile.cache["lq"], tile.cache["lp"]
        h = tile.rows.h
        r_top, lq_top = self._top(h)
        r = tile.get("dz").add_(_col(r_top + h["gz_err"] / self.T, tile.z))  # r = d + r_top
        lq, lp = tile.s("lq", tile.shape), tile.s("lp", tile.shape)
        b = self.beta
        if b <= 0.5:
            torch.neg(r, out=lq).expm1_().mul_(b).log1p_().neg_()
            torch.sub(lq, r, out=lp)
        else:
            torch.expm1(r, out=lp).mul_(1 - b).log1p_().neg_()
            torch.add(lp, r, out=lq)
        lq.sub_(_col(lq_top, tile.z))
        tile.cache["lq"], tile.cache["lp"] = lq, lp
        return lq, lp

    def sums(self, tile):
        lq, lp = self._logs(tile)
        return [tile.dot(tile.get("et"), lp), tile.dot(tile.get("ez"), lq)]

    def finish(self, rows, s, k):
        h = rows.h
        b = self.beta
        r_top, lq_top = self._top(h)
        c = s[1] * h["qz"]
        value = b * s[0] * h["pt"] + (1 - b) * (c + lq_top)
        flag = self._guard(value, r_top, h, min(b, 1 - b)) | ~np.isfinite(lq_top)
        return value, flag, {"c": c, "scale": (1 - b) * h["qz"] * k / self.T}

    def grad(self, tile, g, out):
        lq, _ = self._logs(tile)
        lq.sub_(g["c"]).mul_(g["scale"])
        torch.mul(lq, tile.get("ez"), out=out)


class _FastHinton(_FastForward):
    """(1−α)(−log q^{(1)}_y) + α·s·KL(p‖q) per row (the forward KL as ``_FastForward``);
    gradient (1−α)(q^{(1)} − e_y) + α·s·(q − p)/T, the label's entry set apart (expm1 form)."""

    def __init__(self, T, careful, v, work, alpha, s):
        super().__init__(T, careful, v, work)
        self.alpha, self.s = alpha, s
        self.needs_s1 = T != 1

    def prepare(self, rows, zs, ts, y):
        """The label's logits (any tile), before the passes."""
        rows.y = y[:, None]
        rows.h["zy"] = _host(zs.gather(1, rows.y))
        rows.h["ty"] = _host(ts.gather(1, rows.y))

    def finish(self, rows, s, k):
        h, a, T, sc = rows.h, self.alpha, self.T, self.s
        kl, top = self._value(rows, s)
        l11, q1 = (h["l11"], h["q1"]) if self.needs_s1 else (h["l1z"], h["qz"])
        ce = l11 - (h["zy"] - h["mz"])
        value = (1 - a) * ce + a * sc * kl
        flag = ~np.isfinite(value) | ~np.isfinite(kl) | (
            (a > 0) & self._guard(kl, top, h))
        with np.errstate(over="ignore", invalid="ignore"):
            qy = np.exp((h["zy"] - h["mz"]) / T - h["l1z"])
            py = np.exp((h["ty"] - h["mt"]) / T - h["l1t"])
            fix = k * ((1 - a) * np.expm1(-ce) + a * sc / T * (qy - py))
        return value, flag, {"a": a * sc * h["qz"] * k / T, "b": -a * sc * h["pt"] * k / T,
                             "c1": (1 - a) * q1 * k, "fix": fix}

    def grad(self, tile, g, out):
        tmp = torch.mul(tile.get("ez"), g["a"], out=tile.s("prod", tile.shape))
        tmp.addcmul_(tile.get("et"), g["b"])
        torch.addcmul(tmp, tile.get("e1"), g["c1"], out=out)
        j = tile.local(tile.rows.y)
        if j is not None:
            out.scatter_(1, j, g["fix"].to(out.dtype))


def _block_rows(k, scratch, zs, ts, r0, r1, width):
    """Passes 1 and 2 for rows r0..r1 (one tile, or a row's tiles); returns (_Rows, the tile
    when the block is a single tile — its exponentials are reused by passes 3 and 4)."""
    work = scratch.work
    z_rows, t_rows = zs[r0:r1], ts[r0:r1]
    v = zs.shape[1]
    if width >= v:
        tile = _Tile(k, scratch, z_rows, t_rows, 0, None)
        iz, it = _argmax(tile.z), _argmax(tile.t)
        if tile.z.device.type == "cpu":
            zn, tn = tile.z.detach().numpy(), tile.t.detach().numpy()
            r, izn, itn = np.arange(len(zn)), iz.numpy().ravel(), it.numpy().ravel()
            cols = [a[r, i].astype(np.float64) for a, i in ((zn, izn), (tn, itn), (tn, izn), (zn, itn))]
        else:
            cols = [_host(a.gather(1, i)) for a, i in ((tile.z, iz), (tile.t, it), (tile.t, iz), (tile.z, it))]
        tile.rows = _Rows(iz, it, cols, tile.z)
        return tile.rows, tile
    best = {}
    for lo in range(0, v, width):
        for name, x in (("z", z_rows[:, lo:lo + width]), ("t", t_rows[:, lo:lo + width])):
            xw = x if x.dtype == work else scratch(name, tuple(x.shape)).copy_(x)
            j = _argmax(xw)
            m = float(xw.gather(1, j)[0, 0])
            if name not in best or m > best[name][1]:
                best[name] = (j + lo, m)
    (iz, mz), (it, mt) = best["z"], best["t"]
    like = torch.empty(1, dtype=work, device=zs.device)
    cols = [np.array([mz]), np.array([mt]), _host(t_rows.gather(1, iz)), _host(z_rows.gather(1, it))]
    return _Rows(iz, it, cols, like), None


def _tiles(k, scratch, zs, ts, r0, r1, width, rows):
    for lo in range(0, zs.shape[1], width):
        yield _Tile(k, scratch, zs[r0:r1, lo:lo + width], ts[r0:r1, lo:lo + width], lo, rows)


def _fused(k, zs, ts, y, need_grad, cot, check):
    """Values (float64 numpy [N]) and, when ``need_grad``, the gradient (student's dtype) of
    ``cot``·value (cot: float64 numpy [N]) for [N,V] logits; careful rows by ``k.careful``."""
    n, v = zs.shape
    elements = _tile_elements(zs.device)
    width = min(v, elements)
    per_block = max(1, elements // v) if v <= elements else 1
    values = np.empty(n)
    grad = _gradient_buffer(zs) if need_grad else None
    starts = range(0, n, per_block)
    workers = min(_workers(zs.device), len(starts))
    flagged = []
    if workers <= 1:
        scratch = _Scratch(k.work, zs.device, min(per_block, n) * width)
        with np.errstate(**_QUIET):
            for r0 in starts:
                flagged += _block(k, scratch, zs, ts, y, need_grad, cot, values, grad, r0, min(n, r0 + per_block), width)
    else:
        # One block at a time per worker thread, each running single-threaded torch operations:
        # independent blocks need no barrier per operation (intra-op parallelism over a tile
        # waits at every one of its ~25 operations, and much longer on a busy machine).
        queue = iter(starts)
        lock = threading.Lock()

        @torch.no_grad()  # grad mode is per thread
        def work():
            scratch = _Scratch(k.work, zs.device, min(per_block, n) * width)
            mine = []
            with np.errstate(**_QUIET):  # numpy's error state is per thread too
                while True:
                    with lock:
                        r0 = next(queue, None)
                    if r0 is None:
                        return mine
                    mine += _block(k, scratch, zs, ts, y, need_grad, cot, values, grad, r0,
                                   min(n, r0 + per_block), width)

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with concurrent.futures.ThreadPoolExecutor(workers) as pool:
                for part in [pool.submit(work) for _ in range(workers)]:
                    flagged += part.result()
        finally:
            torch.set_num_threads(threads)
    if flagged:
        _careful_rows(k, zs, ts, y, need_grad, cot, check, sorted(flagged), values, grad, per_block)
    return values, grad


_QUIET = {"invalid": "ignore", "over": "ignore", "divide": "ignore"}  # non-finite rows are flagged

# Transparent huge pages for the gradient (Linux, CPU, at least this many bytes). A fresh
# [N,V] tensor is zeroed by the kernel page by page on first write: with 4 KiB pages that costs
# more than computing the gradient (about 0.4 s per GiB here, against 0.06 s with 2 MiB pages).
# PyTorch's THP_MEM_ALLOC_ENABLE=1 does the same for every large tensor of a process.
HUGE_PAGES_MIN_BYTES = 8 << 20
_MADV_HUGEPAGE = 14
_LIBC: list = []


def _gradient_buffer(zs: torch.Tensor) -> torch.Tensor:
    grad = torch.empty_like(zs, memory_format=torch.contiguous_format)
    nbytes = grad.numel() * grad.element_size()
    if grad.device.type != "cpu" or nbytes < HUGE_PAGES_MIN_BYTES or not sys.platform.startswith("linux"):
        return grad
    if not _LIBC:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            _LIBC.append(libc)
        except (OSError, AttributeError):
            _LIBC.append(None)
    if _LIBC[0] is not None:
        page = 1 << 21
        start = (grad.data_ptr() + page - 1) & ~(page - 1)
        end = (grad.data_ptr() + nbytes) & ~(page - 1)
        if end > start:
            _LIBC[0].madvise(start, end - start, _MADV_HUGEPAGE)  # advice only: failure is harmless
    return grad


def _workers(device) -> int:
    """Worker threads of the fused path: the intra-op thread count on a CPU, 1 elsewhere."""
    return torch.get_num_threads() if device.type == "cpu" else 1


def _block(k, scratch, zs, ts, y, need_grad, cot, values, grad, r0, r1, width):
    """Passes 1–4 for rows r0..r1: writes their values and gradient rows; returns the rows
    that the careful kernel must redo."""
    rows, tile = _block_rows(k, scratch, zs, ts, r0, r1, width)
    if y is not None:
        k.prepare(rows, zs[r0:r1], ts[r0:r1], y[r0:r1])
    tiles = [tile] if tile is not None else None
    # Pass 2: the normalizers (top token excluded).
    sz = st = s1 = 0.0
    for tl in tiles or _tiles(k, scratch, zs, ts, r0, r1, width, rows):
        sz = sz + _host(tl.excl_sum(tl.get("ez"), rows.iz))
        st = st + _host(tl.excl_sum(tl.get("et"), rows.it))
        if k.needs_s1:
            s1 = s1 + _host(tl.excl_sum(tl.get("e1"), rows.iz))
    rows.sz, rows.st, rows.s1 = sz, st, (s1 if k.needs_s1 else None)
    rows.normalize(k.T)
    # Pass 3: the kernel's sums.
    total = None
    for tl in tiles or _tiles(k, scratch, zs, ts, r0, r1, width, rows):
        part = [_host(x) for x in k.sums(tl)]
        total = part if total is None else [a + b for a, b in zip(total, part)]
    value, flag, gconst = k.finish(rows, total, cot[r0:r1])
    bad = flag | ~np.isfinite(rows.h["mz"]) | ~np.isfinite(rows.h["mt"])
    values[r0:r1] = value
    if need_grad:
        g = {name: _col(c, rows.mz) for name, c in gconst.items()}
        # Pass 4: the gradient, straight into the student's dtype.
        for tl in tiles or _tiles(k, scratch, zs, ts, r0, r1, width, rows):
            k.grad(tl, g, grad[r0:r1, tl.lo:tl.lo + tl.shape[1]])
    return (r0 + np.flatnonzero(bad)).tolist()


def _careful_rows(k, zs, ts, y, need_grad, cot, check, flagged, values, grad, per_block):
    """Recompute the flagged rows with the plain path's careful kernel (after its input checks
    when a fused value was not finite: bad input raises as on the plain path)."""
    if not np.isfinite(values[flagged]).all():
        check()
    idx = torch.tensor(flagged, dtype=torch.long, device=zs.device)
    for start in range(0, len(flagged), per_block):
        sel = idx[start:start + per_block]
        val, d = k.careful(zs[sel].to(k.work), ts[sel].to(k.work), None if y is None else y[sel], need_grad)
        values[sel.cpu().numpy()] = _host(val)
        if need_grad:
            c = _col(cot[sel.cpu().numpy()], d)
            grad[sel] = (c * d).to(grad.dtype)


class _FusedRows(torch.autograd.Function):
    """Per-row values (or their mean) of a fused kernel; the gradient is computed in forward
    for a unit cotangent and kept, so backward returns it (cotangent 1) or scales it in place
    (float32/float64), or recomputes it with the cotangent inside (float16/bfloat16: one
    rounding, as on the plain path; also a second backward through a retained graph)."""

    @staticmethod
    def forward(ctx, k, zs, ts, y, check, mean):
        n = zs.shape[0]
        need = ctx.needs_input_grad[1]
        cot = np.full(n, 1.0 / n if mean else 1.0)
        values, grad = _fused(k, zs, ts, y, need, cot, check)
        ctx.k, ctx.check, ctx.mean, ctx.grad = k, check, mean, grad
        ctx.save_for_backward(zs, ts, y)
        # The mean over rows in float64 (the rows' values are float64 already).
        out = np.array(values.mean()) if mean else values
        return torch.from_numpy(out).to(zs.device, k.work)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        zs, ts, y = ctx.saved_tensors
        grad, ctx.grad = ctx.grad, None  # the caller gets it without a copy
        if grad is not None and bool((g == 1).all()):
            return None, grad, None, None, None, None
        if grad is not None and grad.dtype == ctx.k.work:
            return None, grad.mul_(g if ctx.mean else g[:, None]), None, None, None, None
        n = zs.shape[0]
        cot = np.full(n, float(g) / n) if ctx.mean else _host(g)
        _, grad = _fused(ctx.k, zs, ts, y, True, cot, ctx.check)
        return None, grad, None, None, None, None


def _fast_pair(student_logits, teacher_logits, rank=None):
    """(student, teacher) when the fused path applies: tensors of a supported floating dtype,
    same shape and device, at least one row, a non-empty vocabulary; else None."""
    if not FUSED:
        return None
    zs, ts = student_logits, teacher_logits
    if not (isinstance(zs, torch.Tensor) and isinstance(ts, torch.Tensor)):
        return None
    if zs.dtype not in _common._FLOATS or ts.dtype not in _common._FLOATS:
        return None
    if zs.shape != ts.shape or zs.device != ts.device or zs.ndim < 1 or zs.numel() == 0:
        return None
    if rank is not None and zs.ndim != rank:
        return None
    return zs, ts


def _params_ok(fn) -> bool:
    """True when the parameter checks pass; on any InputError the caller takes the plain path,
    which raises the first error in the plain order."""
    try:
        fn()
    except validate.InputError:
        return False
    return True


def _fused_rows(kernel_cls, careful, zs, ts, check, labels=None, mean=False, **params):
    work = _common.work_dtype(_common.result_dtype(zs, ts))
    v = zs.shape[-1]
    k = kernel_cls(params.pop("T"), careful, v, work, **params)
    z2 = zs.reshape(-1, v)
    t2 = ts.detach().reshape(-1, v)
    values = _FusedRows.apply(k, z2, t2, labels, check, mean)
    return values if mean else values.reshape(zs.shape[:-1])


# ---------------------------------------------------------------------------------------------
# Input handling (messages as refimpl.exact.distill)
# ---------------------------------------------------------------------------------------------

def _row_index(flat: int, lead: tuple) -> tuple:
    return tuple(int(i) for i in np.unravel_index(flat, lead)) if lead else ()


def _first(fn, *mats):
    """First (row, token) — or (row,) — where ``fn`` of the chunks is True, else None."""
    n, v = mats[0].shape
    for sl in _row_slices(n, v, mats[0].device):
        hit = fn(*(m[sl].detach() for m in mats))
        if hit.any():
            idx = hit.nonzero()[0].tolist()
            return (sl.start + idx[0],) + tuple(idx[1:])
    return None


def _logits(name: str, x, rank=None) -> torch.Tensor:
    a = _common.array(name, x, allow_neg_inf=True)
    if rank is not None:
        validate.rank(name, tuple(a.shape), rank)
    elif a.ndim < 1:
        validate.fail(name, "expected at least 1 dimension (the vocabulary axis), got a scalar")
    if a.shape[-1] == 0:
        validate.fail(name, f"the vocabulary axis must not be empty, got shape {tuple(a.shape)}")
    return a


def _rows(name: str, a: torch.Tensor) -> None:
    hit = _first(lambda z: (z == _NEG_INF).all(dim=-1), a.reshape(-1, a.shape[-1]))
    if hit is not None:
        validate.fail(name, f"row {_row_index(hit[0], tuple(a.shape[:-1]))} is -inf everywhere "
                            "(no possible token)")


def _temperature(temperature) -> float:
    return validate.positive("temperature", temperature)


def _pair(student_logits, teacher_logits, temperature, rank=None):
    zs = _logits("student_logits", student_logits, rank)
    ts = _logits("teacher_logits", teacher_logits, rank)
    validate.same_shape(student_logits=tuple(zs.shape), teacher_logits=tuple(ts.shape))
    T = _temperature(temperature)
    _rows("student_logits", zs)
    _rows("teacher_logits", ts)
    return zs, ts, T


def _require_support(name: str, inner: torch.Tensor, outer: torch.Tensor, what: str) -> None:
    """supp inner ⊆ supp outer row by row, else the divergence is +inf: reject, naming ``name``."""
    v = inner.shape[-1]
    hit = _first(lambda a, b: (a != _NEG_INF) & (b == _NEG_INF),
                 inner.reshape(-1, v), outer.reshape(-1, v))
    if hit is not None:
        validate.fail(name, f"-inf at row {_row_index(hit[0], tuple(inner.shape[:-1]))}, token "
                            f"{hit[1]}, where the other distribution has probability > 0: {what} "
                            "is infinite (support mismatch)")


# ---------------------------------------------------------------------------------------------
# Objectives
# ---------------------------------------------------------------------------------------------

class _Softmax(torch.autograd.Function):
    """softmax(z/T) on the last axis with the backward q_j·(c_j − Σ_i q_i c_i)/T in the centred
    form of ``_centred``. Autograd's softmax backward forms c_j − Σ q c directly, which leaves
    no correct digit in a saturated row (logits ±1e4, T = 1e-3), where the whole gradient is
    ~ 1 − q_top. Saves q and the argmax, as torch's softmax saves q."""

    @staticmethod
    def forward(ctx, z, T, work):
        zw = z.to(work)
        top_value, top = zw.max(dim=-1, keepdim=True)
        # The maximum is subtracted before dividing by T: a large logit at a small T costs no
        # absolute accuracy in the exponent.
        q = torch.softmax((zw - top_value) / T, dim=-1)
        ctx.save_for_backward(q, top)
        ctx.T, ctx.in_dtype = T, z.dtype
        return q

    @staticmethod
    @once_differentiable
    def backward(ctx, c):
        q, top = ctx.saved_tensors
        grad = q * _centred(c.to(q.dtype), q, top, q > 0) / ctx.T
        return grad.to(ctx.in_dtype), None, None


def softmax(logits, temperature: float = 1.0):
    """Tempered softmax q_i = exp(z_i/T) / Σ_j exp(z_j/T) along the last axis.

    Hinton, Vinyals & Dean 2015 §2; article 000 §"Destilación clásica" ((2,0) → (0.88, 0.12)
    at T=1, (0.73, 0.27) at T=2). ``logits`` [...,V]; returns probs of the same shape; a −inf
    logit has probability 0 and gradient 0. Gradient by ``_Softmax`` (accurate in saturated
    rows).
    """
    z = _logits("logits", logits)
    T = _temperature(temperature)
    _rows("logits", z)
    return _Softmax.apply(z, T, _common.work_dtype(z.dtype)).to(z.dtype)


def _labels(labels, n: int, v: int, device) -> torch.Tensor:
    y = _common.int_array("labels", labels)
    validate.rank("labels", tuple(y.shape), 1)
    validate.same_shape(**{"student_logits rows": (n,)}, labels=tuple(y.shape))
    bad = ((y < 0) | (y >= v)).nonzero()
    if len(bad):
        i = int(bad[0, 0])
        validate.fail("labels", f"label {int(y[i])} at row {i} is outside [0, {v})")
    return y.to(device)


def hinton(student_logits, teacher_logits, labels, temperature: float = 1.0, alpha: float = 0.5,
           t2_scale: bool = True):
    """Hinton distillation loss, mean over the N rows:

        L = 1/N Σ_n [ (1−α)(−log q_{y_n}^{(1)}) + α·s·KL(p^{(T)} ‖ q^{(T)}) ],  s = T² if t2_scale else 1.

    Hinton et al. 2015 §2 (soft targets at T, hard labels at T = 1, soft term times T²);
    article 000 §"Destilación clásica" (λ = ``alpha``). ``student_logits``, ``teacher_logits``
    [N,V], ``labels`` [N] integers in [0, V). Returns the scalar loss; gradient wrt
    ``student_logits`` by the fused path (``_FastHinton``) or ``_VocabRows``. A −inf student logit at the label or where p > 0
    makes the loss infinite and is rejected (naming ``student_logits``) whatever α is.
    """
    fast = _fast_pair(student_logits, teacher_logits, rank=2)
    if fast is not None and _params_ok(lambda: _hinton_params(fast[0], labels, temperature, alpha, t2_scale)):
        zs, ts = fast
        y, T, a, s = _hinton_params(zs, labels, temperature, alpha, t2_scale)
        check = lambda: _hinton_inputs(zs, ts, labels, temperature, alpha, t2_scale)  # noqa: E731
        loss = _fused_rows(_FastHinton, _Hinton(T, a, s), zs, ts, check, y, mean=True, T=T, alpha=a, s=s)
        return loss.to(_common.result_dtype(zs, ts))
    zs, ts, y, T, a, s = _hinton_inputs(student_logits, teacher_logits, labels, temperature, alpha, t2_scale)
    rows = _vocab_rows(_Hinton(T, a, s), zs, ts, y)
    return rows.mean().to(_common.result_dtype(zs, ts))


def _hinton_params(zs, labels, temperature, alpha, t2_scale):
    """Hinton's checks that read no logit: labels, α, the T² flag, T (fused path)."""
    n, v = zs.shape
    if n == 0:
        validate.fail("student_logits", "needs at least one row (the loss is a mean over rows)")
    y = _labels(labels, n, v, zs.device)
    a = validate.in_range("alpha", alpha, 0.0, 1.0)
    T = _temperature(temperature)
    s = T * T if validate.flag("t2_scale", t2_scale) else 1.0
    return y, T, a, s


def _hinton_inputs(student_logits, teacher_logits, labels, temperature, alpha, t2_scale):
    """All of Hinton's input checks, in the plain order (the first failing one raises)."""
    zs, ts, T = _pair(student_logits, teacher_logits, temperature, rank=2)
    n, v = zs.shape
    if n == 0:
        validate.fail("student_logits", "needs at least one row (the loss is a mean over rows)")
    y = _labels(labels, n, v, zs.device)
    a = validate.in_range("alpha", alpha, 0.0, 1.0)
    s = T * T if validate.flag("t2_scale", t2_scale) else 1.0
    dead = (zs.detach().gather(1, y[:, None])[:, 0] == _NEG_INF).nonzero()
    if len(dead):
        i = int(dead[0, 0])
        validate.fail("student_logits", f"-inf at the label (row {i}, token {int(y[i])}): "
                                        "the cross-entropy term is infinite")
    _require_support("student_logits", ts, zs, "KL(p‖q)")
    return zs, ts, y, T, a, s


def token_kl(student_logits, teacher_logits, direction: str = "reverse", temperature: float = 1.0):
    """Full-vocabulary KL between student q and teacher p at the next token, per row:

        reverse:  kl = Σ_v q_v log(q_v / p_v)   (student first)
        forward:  kl = Σ_v p_v log(p_v / q_v)

    at temperature T, no T² factor. Reverse: MiniLLM (Gu et al. 2024) §2.1 eq. 1; DeepSeek-V4
    §5.1.2 eq. 29; article 000 §"De la KL de secuencia a la KL de token". 0·log 0 = 0; an
    infinite KL (support mismatch) is rejected (reverse: names ``teacher_logits``; forward:
    ``student_logits``). Logits [...,V]; returns kl [...]; gradient wrt ``student_logits``
    by the fused path (``_FastReverse``, ``_FastForward``) or ``_VocabRows`` (reverse: q(ℓ − kl)/T, forward: (q − p)/T).
    """
    fast = _fast_pair(student_logits, teacher_logits)
    if fast is not None and _params_ok(lambda: (_temperature(temperature),
                                                validate.choice("direction", direction, DIRECTIONS))):
        zs, ts = fast
        T = _temperature(temperature)
        check = lambda: _token_kl_inputs(zs, ts, direction, temperature)  # noqa: E731
        fast_cls, careful = ((_FastReverse, _ReverseKL(T)) if direction == "reverse"
                             else (_FastForward, _ForwardKL(T)))
        return _fused_rows(fast_cls, careful, zs, ts, check, T=T).to(_common.result_dtype(zs, ts))
    zs, ts, T = _token_kl_inputs(student_logits, teacher_logits, direction, temperature)
    kernel = _ReverseKL(T) if direction == "reverse" else _ForwardKL(T)
    return _vocab_rows(kernel, zs, ts).to(_common.result_dtype(zs, ts))


def _token_kl_inputs(student_logits, teacher_logits, direction, temperature):
    """All of token_kl's input checks, in the plain order."""
    zs, ts, T = _pair(student_logits, teacher_logits, temperature)
    validate.choice("direction", direction, DIRECTIONS)
    if direction == "reverse":
        _require_support("teacher_logits", zs, ts, "reverse KL(q‖p)")
    else:
        _require_support("student_logits", ts, zs, "forward KL(p‖q)")
    return zs, ts, T


def generalized_jsd(student_logits, teacher_logits, beta: float = 0.5, temperature: float = 1.0,
                    endpoints: str = "limit"):
    """Generalized Jensen–Shannon divergence, per row (p teacher, q student, both at T):

        jsd = β·KL(p ‖ m) + (1−β)·KL(q ‖ m),   m = β·p + (1−β)·q,   β ∈ [0, 1].

    Agarwal et al. 2024 (GKD) §3 eq. 2; TRL GKDTrainer.generalized_jsd_loss.
    ``endpoints='limit'``: the continuous formula, 0 at β = 0 and β = 1 (zero gradient).
    ``endpoints='kl'``: β = 0 gives KL(p‖q) and β = 1 gives KL(q‖p), as TRL and Liger special-
    case them (infinite ones are rejected, naming the argument whose −inf causes it).
    Logits [...,V]; returns jsd [...]; gradient wrt ``student_logits`` by the fused path (``_FastJSD``) or ``_VocabRows``
    ((1−β)·q(ℓ − KL(q‖m))/T, ℓ = log q − log m).
    """
    fast = _fast_pair(student_logits, teacher_logits)
    if fast is not None and _params_ok(lambda: (_temperature(temperature),
                                                validate.in_range("beta", beta, 0.0, 1.0),
                                                validate.choice("endpoints", endpoints, ENDPOINTS))):
        b = validate.in_range("beta", beta, 0.0, 1.0)
        if not (b in (0, 1) and endpoints == "limit"):
            zs, ts = fast
            T = _temperature(temperature)
            check = lambda: _jsd_inputs(zs, ts, beta, temperature, endpoints)  # noqa: E731
            if b == 0:
                fast_cls, careful, extra = _FastForward, _ForwardKL(T), {}
            elif b == 1:
                fast_cls, careful, extra = _FastReverse, _ReverseKL(T), {}
            else:
                fast_cls, careful, extra = _FastJSD, _JSD(T, b), {"beta": b}
            return _fused_rows(fast_cls, careful, zs, ts, check, T=T, **extra).to(_common.result_dtype(zs, ts))
    zs, ts, T, b = _jsd_inputs(student_logits, teacher_logits, beta, temperature, endpoints)
    out = _common.result_dtype(zs, ts)
    if b in (0, 1) and endpoints == "limit":
        # A zero that stays in the graph (gradient exactly 0, also at −inf logits).
        flat = torch.where(torch.zeros_like(zs, dtype=torch.bool), zs, torch.zeros_like(zs))
        return flat.sum(dim=-1).to(out)
    kernel = _ForwardKL(T) if b == 0 else _ReverseKL(T) if b == 1 else _JSD(T, b)
    return _vocab_rows(kernel, zs, ts).to(out)


def _jsd_inputs(student_logits, teacher_logits, beta, temperature, endpoints):
    """All of generalized_jsd's input checks, in the plain order."""
    zs, ts, T = _pair(student_logits, teacher_logits, temperature)
    b = validate.in_range("beta", beta, 0.0, 1.0)
    validate.choice("endpoints", endpoints, ENDPOINTS)
    if endpoints == "kl" and b == 0:
        _require_support("student_logits", ts, zs, "beta=0 with endpoints='kl' → KL(p‖q)")
    if endpoints == "kl" and b == 1:
        _require_support("teacher_logits", zs, ts, "beta=1 with endpoints='kl' → KL(q‖p)")
    return zs, ts, T, b
