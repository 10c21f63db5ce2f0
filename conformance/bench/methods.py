"""What ``lossproof bench`` compares: the inputs, and one forward + backward by each method.

- ``lossproof``: ``refimpl.torch.distill`` as it runs by default: on a CPU the compiled kernel
  (``refimpl.torch._compiled``) where a C++ compiler is present, the fused, vocabulary-tiled
  torch path otherwise;
- ``lossproof-tiles``: the fused torch path with the compiled kernel switched off (measured
  only where the two differ: on a CPU);
- ``lossproof-plain``: the same objectives on the plain path (``distill.FUSED = False``);
- ``naive``: two ``log_softmax``, ``exp``, multiply, sum, then autograd (the textbook form);
- ``trl``: TRL 1.16's ``ChunkedDivergenceFunction`` (online log-sum-exp over [4096, 32768]
  tiles; the torch path, as on a CPU), fed logits: its projection ``_project`` is replaced by
  a copy of the logits' columns and its gradient accumulation ``_addmm_fp32`` by an addition
  into those columns, so the rest of its forward and backward runs as shipped;
- ``liger``: Liger-Kernel 0.8.5's chunked JSD (``LigerFusedLinearJSDFunction``, β = 0 / 1 for
  the forward / reverse KL): its per-chunk loss ``distillation_loss_fn`` differentiated with
  ``torch.func.grad_and_value`` over 1024-row chunks and the chunk gradients concatenated, as
  ``LigerFusedLinearDistillationBase.forward`` does without the projection (compiled=False).

A library that cannot be imported is reported as unavailable with the reason, never fatal;
Hinton's loss exists in neither library.

torch, TRL and Liger are optional dependencies: each is imported inside the functions that
need it, so that the command line starts without them.
"""
from __future__ import annotations

import math
from importlib.metadata import version

from lossproof import conformance

KERNELS = ("token_kl.reverse", "token_kl.forward", "generalized_jsd", "hinton")
METHODS = ("lossproof", "lossproof-tiles", "lossproof-plain", "naive", "trl", "liger")
DEFAULT_METHODS = ("lossproof", "lossproof-tiles", "naive", "trl", "liger")  # the plain path only on request
COMPILED_KERNELS = KERNELS  # those refimpl.torch._compiled runs
LIBRARIES = ("trl", "liger")
# β of the JSD rows; Hinton at T = 2, α = 0.5 (the soft term times T²).
JSD_BETA = 0.5
HINTON = {"temperature": 2.0, "alpha": 0.5}
# The libraries' generalized JSD at these β is the kernel (β = 1: reverse KL, β = 0: forward).
_LIBRARY_BETA = {"token_kl.reverse": 1.0, "token_kl.forward": 0.0, "generalized_jsd": JSD_BETA}


def inputs(n: int, v: int, dtype, device: str = "cpu", seed: int = 0):
    """Student logits z ~ N(0, 2²), teacher t = z + N(0, 1) (a distillation in progress), and
    labels y; z requires its gradient."""
    import torch  # optional dependency
    if device != "cpu":
        # Drawn on the device (another stream of numbers than the CPU's, the same distribution):
        # drawing [16384, 152064] on the host and copying it would take longer than every timing.
        g = torch.Generator(device=device).manual_seed(seed)
        z = torch.randn(n, v, generator=g, device=device).mul_(2)
        t = torch.randn(n, v, generator=g, device=device).add_(z)
        y = torch.randint(0, v, (n,), generator=g, device=device)
        return z.to(dtype).requires_grad_(True), t.to(dtype), y
    g = torch.Generator().manual_seed(seed)
    z = torch.empty(n, v, dtype=torch.float32)
    t = torch.empty(n, v, dtype=torch.float32)
    for s in range(0, n, 256):  # in slices: no [N,V] temporary
        zs = torch.randn(min(256, n - s), v, generator=g) * 2
        z[s:s + 256] = zs
        t[s:s + 256] = zs + torch.randn(zs.shape, generator=g)
    y = torch.randint(0, v, (n,), generator=g)
    if dtype != torch.float32:
        z, t = z.to(dtype), t.to(dtype)
    return z.requires_grad_(True), t, y


def _import_trl() -> tuple[bool, str]:
    try:
        import trl
        import trl.kernels.chunked_divergence
    except Exception as err:  # any import failure means "not measurable here"
        return False, f"{type(err).__name__}: {err}"
    return True, trl.__version__


def _import_liger() -> tuple[bool, str]:
    try:
        import liger_kernel.chunked_loss.jsd_loss  # noqa: F401
    except Exception as err:  # any import failure means "not measurable here"
        return False, f"{type(err).__name__}: {err}"
    return True, version("liger-kernel")


class _TRL:
    """TRL's ChunkedDivergenceFunction on logits: the projection of a [rows, cols] tile becomes
    a copy of the logits' columns, the gradient's matmul-accumulate an addition into them."""

    def __init__(self):
        import trl.kernels.chunked_divergence as cd  # optional dependency
        self.cd = cd
        self.cols = (0, 0)

    def _project(self, tile, hidden, weight, bias, start, end, dtype):
        self.cols = (start, end)
        tile.copy_(hidden[:, start:end])

    def _addmm(self, acc, a, b):
        start, end = self.cols
        acc[:, start:end] += a

    def __call__(self, beta, z, t, temperature=1.0):
        import torch  # optional dependency
        cd = self.cd
        saved = cd._project, cd._addmm_fp32
        cd._project, cd._addmm_fp32 = self._project, self._addmm
        try:
            w = torch.empty(z.shape[1], 0, dtype=z.dtype, device=z.device)
            div, _ = cd.ChunkedDivergenceFunction.apply(z, w, None, t, w, None, beta, temperature)
            div.sum().backward()
        finally:
            cd._project, cd._addmm_fp32 = saved


def _liger(beta, z, t, temperature=1.0, chunk=1024):
    import torch  # optional dependency
    from liger_kernel.chunked_loss.jsd_loss import LigerFusedLinearJSDFunction as F  # optional dependency

    def loss(a, b):
        return F.distillation_loss_fn(a / temperature, b / temperature, beta=beta)

    grads = []
    for zs, ts in zip(z.detach().split(chunk), t.split(chunk)):
        g, _ = torch.func.grad_and_value(loss)(zs, ts)
        grads.append(g)
    z.grad = torch.cat(grads)


def _naive(kernel, z, t, y):
    """The textbook form: log_softmax of both models, exp, multiply, sum, autograd."""
    import torch  # optional dependency
    if kernel == "hinton":
        T, a = HINTON["temperature"], HINTON["alpha"]
        lq, lp = torch.log_softmax(z / T, -1), torch.log_softmax(t / T, -1)
        kl = (lp.exp() * (lp - lq)).sum(-1)
        loss = ((1 - a) * torch.nn.functional.cross_entropy(z, y, reduction="none") + a * T * T * kl).mean()
    else:
        lq, lp = torch.log_softmax(z, -1), torch.log_softmax(t, -1)
        if kernel == "token_kl.reverse":
            loss = (lq.exp() * (lq - lp)).sum(-1).sum()
        elif kernel == "token_kl.forward":
            loss = (lp.exp() * (lp - lq)).sum(-1).sum()
        else:
            b = JSD_BETA
            lm = torch.logaddexp(lp + math.log(b), lq + math.log1p(-b))
            loss = (b * (lp.exp() * (lp - lm)).sum(-1) + (1 - b) * (lq.exp() * (lq - lm)).sum(-1)).sum()
    loss.backward()


def _ours(kernel, z, t, y, fused=True, compiled=True):
    from lossproof.refimpl.torch import _compiled, distill  # optional dependency: refimpl.torch imports torch
    saved, distill.FUSED = distill.FUSED, fused
    saved_compiled, _compiled.ENABLED = _compiled.ENABLED, compiled and _compiled.ENABLED
    try:
        if kernel == "token_kl.reverse":
            loss = distill.token_kl(z, t).sum()
        elif kernel == "token_kl.forward":
            loss = distill.token_kl(z, t, "forward").sum()
        elif kernel == "generalized_jsd":
            loss = distill.generalized_jsd(z, t, JSD_BETA).sum()
        else:
            loss = distill.hinton(z, t, y, HINTON["temperature"], HINTON["alpha"])
        loss.backward()
    finally:
        distill.FUSED = saved
        _compiled.ENABLED = saved_compiled


def compiled_differs(kernel: str, device: str) -> str:
    """Why ``lossproof-tiles`` would measure the same code as ``lossproof`` here ('' if not)."""
    from lossproof.refimpl.torch import _compiled  # optional dependency
    if kernel not in COMPILED_KERNELS:
        return f"same code as lossproof: no compiled kernel for {kernel}"
    if device != "cpu":
        return "same code as lossproof: the compiled kernel is for CPUs"
    if _compiled.library() is None:
        return f"same code as lossproof: compiled kernel unavailable ({_compiled.status()['reason']})"
    return ""


class Runners:
    """The methods of one run: which peer libraries import (only those among ``methods`` are
    tried: TRL's import brings transformers, seconds), and a callable (z, t, y) running one
    forward + backward of each."""

    def __init__(self, methods=DEFAULT_METHODS):
        self.libraries = {name: (False, "not requested") for name in LIBRARIES}
        if "trl" in methods:
            self.libraries["trl"] = _import_trl()
        if "liger" in methods:
            self.libraries["liger"] = _import_liger()
        self._trl = None  # built once: it imports TRL's kernel module

    def get(self, method: str, kernel: str, device: str = "cpu"):
        """The callable for ``method`` on ``kernel``, or the reason it cannot run (a str)."""
        if method == "lossproof":
            return lambda z, t, y: _ours(kernel, z, t, y)
        if method == "lossproof-tiles":
            why = compiled_differs(kernel, device)
            if why:
                return why
            return lambda z, t, y: _ours(kernel, z, t, y, compiled=False)
        if method == "lossproof-plain":
            return lambda z, t, y: _ours(kernel, z, t, y, fused=False)
        if method == "naive":
            return lambda z, t, y: _naive(kernel, z, t, y)
        ok, why = self.libraries[method]
        if not ok:
            return f"not installed or not importable: {why}"
        if kernel == "hinton":
            return "no Hinton loss on logits in this library"
        beta = _LIBRARY_BETA[kernel]
        if method == "trl":
            if self._trl is None:
                self._trl = _TRL()
            return lambda z, t, y: self._trl(beta, z, t)
        return lambda z, t, y: _liger(beta, z, t)

    def version(self, method: str) -> str:
        """The version measured: the library's for a peer, lossproof's for the torch forms."""
        if method in LIBRARIES:
            return self.libraries[method][1]
        return conformance.__version__
