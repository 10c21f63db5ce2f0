"""The fused path of the distillation objectives (PyTorch): vocabulary tiles, values and
gradient in one pass. ``refimpl.torch.distill`` takes it for tensor logits (``distill.FUSED``).

The plain path (``_careful.VocabRows``) evaluates every row with the careful forms and
recomputes it in backward: about sixty [chunk]-sized operations per logit, twice. The fused
path reads each logit once per pass over a tile that stays in cache, computes the value and
the gradient (for a unit cotangent) in the same pass, and writes the gradient straight into
the student's dtype; backward only scales it (or returns it as it is). Per logit it costs two
exponentials and about a dozen cheap operations (four transcendentals for the JSD), and no
[N,V] intermediate exists: only ``_Scratch``'s few tile-sized buffers.

Numerics. A tile holds whole rows when V ≤ TILE_ELEMENTS, else one row's vocabulary slice;
with several tiles per row the passes are: (1) argmax and max of both models (first maximum,
as torch.max), (2) the normalizers S = Σ_{j≠top} e^{x_j} (top excluded, so that log1p(S)
keeps the saturated row's −log q_top), (3) the kernel's sums, (4) the gradient; a single tile
does all four on the same cached exponentials. Sums are in the working dtype (torch's cascade
summation), the per-row algebra in float64 (numpy). Values are written as
Σ q·(ℓ − ℓ_top) + ℓ_top, centred at the most probable token like the gradient, with q
normalised exactly (ez / (1 + S)): the normalisation error does not shift the value.
What the fused forms do not have is the careful path's k3 form, which keeps the relative
accuracy of a divergence much smaller than its terms (student ≈ teacher): their absolute
error is about u·M, M = |ℓ_top| + log1p S_q + log1p S_p + log V + 1 (the log-softmax class of
error that the vectors' tolerance is built on). So every row whose divergence is below
u^GUARD·M, or whose value is not finite (−inf logits, overflow at tiny temperatures, bad
input) is recomputed by the careful kernel of the plain path; non-finite rows first go
through the plain path's input checks, so bad input raises exactly as there.

Compiled. On a CPU, every kernel here runs in ``_compiled`` (one C++ loop per row, the same
numerics) where a C++ compiler is present (``_Fast.compiled``); the tiles below are the path
everywhere else, and the fallback.

Threads. On a CPU, blocks of rows are shared out to worker threads, each running
single-threaded torch operations; see ``_single_threaded`` for how that is arranged without
touching any process-wide setting.
"""
from __future__ import annotations

import concurrent.futures
import ctypes
import math
import re
import sys
import threading

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from lossproof.refimpl.torch import _common, _compiled

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
    kind = ""  # the kernel in _compiled.KINDS

    def compiled(self) -> dict:
        """The compiled kernel's parameters (``_compiled.rows``'s p1, p2)."""
        return {}

    def __init__(self, T: float, careful, v: int, work):
        self.T, self.careful, self.v, self.work = T, careful, v, work
        self.u = _UNIT[work]
        self.log_v = math.log(max(v, 2))

    def _guard(self, value, top_term, h, weight=1.0):
        m = np.abs(top_term) + h["l1z"] + h["l1t"] + self.log_v + 1
        return ~np.isfinite(value) | (value <= self.u ** GUARD * weight * m)


class FastReverse(_Fast):
    """KL(q‖p) = Σ q·d + ℓ_top, d = ℓ − ℓ_top (student's top); gradient q(d − Σqd)/T."""

    kind = "reverse"

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


class FastForward(_Fast):
    """KL(p‖q) = Σ p·e + (log p − log q)_j, e centred at the teacher's top j; gradient (q − p)/T."""

    kind = "forward"

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


class FastJSD(_Fast):
    """β·KL(p‖m) + (1−β)·KL(q‖m) with the log-ratios to the mixture from r = log q − log p:
    β ≤ ½: ℓ_q = −log1p(β·expm1(−r)), ℓ_p = ℓ_q − r; β > ½: ℓ_p = −log1p((1−β)·expm1(r)),
    ℓ_q = ℓ_p + r (the argument of log1p stays above −½: no cancellation; an overflow makes
    the row non-finite, and the careful kernel takes it). Gradient (1−β)·q(G − ΣqG)/T,
    G = ℓ_q − ℓ_q,top."""

    needs_l1 = True
    kind = "jsd"

    def __init__(self, T, careful, v, work, beta):
        super().__init__(T, careful, v, work)
        self.beta = beta

    def compiled(self):
        return {"p1": self.beta}

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


class FastHinton(FastForward):
    """(1−α)(−log q^{(1)}_y) + α·s·KL(p‖q) per row (the forward KL as ``FastForward``);
    gradient (1−α)(q^{(1)} − e_y) + α·s·(q − p)/T, the label's entry set apart (expm1 form)."""

    kind = "hinton"

    def __init__(self, T, careful, v, work, alpha, s):
        super().__init__(T, careful, v, work)
        self.alpha, self.s = alpha, s
        self.needs_s1 = T != 1

    def compiled(self):
        return {"p1": self.alpha, "p2": self.s}

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
    grad = _gradient_buffer(zs) if need_grad else None
    if _compiled.usable(zs, ts):
        values, flagged = _compiled.rows(k.kind, k.T, zs, ts, y, need_grad, cot, grad, torch.get_num_threads(),
                                         k.u ** GUARD, **k.compiled())
        if flagged:
            _careful_rows(k, zs, ts, y, need_grad, cot, check, flagged, values, grad, per_block)
        return values, grad
    values = np.empty(n)
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
            _single_threaded()
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

        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            for part in [pool.submit(work) for _ in range(workers)]:
                flagged += part.result()
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
    """Worker threads of the fused path: on a CPU, torch's intra-op thread count, if a worker
    thread can be made single-threaded (``_single_threaded``); else 1, and the blocks run in
    the calling thread, each operation with torch's intra-op parallelism."""
    if device.type != "cpu":
        return 1
    threads = torch.get_num_threads()
    return threads if threads > 1 and _openmp() is not None else 1


def _single_threaded() -> None:
    """Make the calling (worker) thread run torch's CPU operations on one thread.

    OpenMP's omp_set_num_threads sets the nthreads-var of the calling thread only (OpenMP 4.5
    §2.3.3 and §3.2.1), which is what torch's intra-op parallelism reads (at::get_num_threads
    is omp_get_max_threads), so the setting ends with the worker thread. torch.set_num_threads
    is not scoped: it also sets the count that every thread created afterwards starts with,
    process-wide, and MKL's. torch initialises a thread's count at its first query, which
    would overwrite the setting: so it is queried first."""
    lib = _openmp()
    if lib is not None:
        torch.get_num_threads()
        lib.omp_set_num_threads(1)


_OPENMP: list = []  # [the OpenMP runtime torch runs on, or None], looked up once


def _openmp():
    """The OpenMP runtime of torch's CPU operations (a ctypes handle), when it is loaded (found
    in /proc/self/maps, Linux) and one thread's setting reaches torch (tried once, in a scratch
    thread); else None."""
    if not _OPENMP:
        _OPENMP.append(_find_openmp())
    return _OPENMP[0]


def _find_openmp():
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if re.search(r"/lib[gi]?omp[^/]*\.so", line)})
    except OSError:
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)  # already loaded: the same library, not a second copy
            set_threads = lib.omp_set_num_threads
        except (OSError, AttributeError):
            continue
        seen = []
        thread = threading.Thread(target=_probe, args=(set_threads, seen))
        thread.start()
        thread.join()
        if seen == [1]:
            return lib
    return None


def _probe(set_threads, seen: list) -> None:
    """In a scratch thread: torch's thread count after ``set_threads(1)``, appended to ``seen``."""
    torch.get_num_threads()
    set_threads(1)
    seen.append(torch.get_num_threads())


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


class FusedRows(torch.autograd.Function):
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


def rows(kernel_cls, careful, zs, ts, check, labels=None, mean=False, **params):
    work = _common.work_dtype(_common.result_dtype(zs, ts))
    v = zs.shape[-1]
    k = kernel_cls(params.pop("T"), careful, v, work, **params)
    z2 = zs.reshape(-1, v)
    t2 = ts.detach().reshape(-1, v)
    values = FusedRows.apply(k, z2, t2, labels, check, mean)
    return values if mean else values.reshape(zs.shape[:-1])

