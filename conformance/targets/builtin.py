"""The built-in backends as targets: refimpl.arrays on NumPy, CuPy and JAX, refimpl.torch, and
refimpl.triton (its fused kernels, on CUDA or in Triton's CPU interpreter)."""
from __future__ import annotations

import fnmatch
import functools
import importlib
import importlib.util
import os

from lossproof.conformance import catalog
from lossproof.conformance.targets import jaxcall
from lossproof.conformance.targets.steps import builtin_torch
from lossproof.conformance.targets.target import ANY, Target, TargetError

BUILTINS = ("numpy", "torch", "cupy", "triton", "jax")
# Objectives the jax backend leaves out (globs): the array-API code is differentiated by jax.vjp
# here, and these have not passed every vector since their causes were fixed (kinks as selects,
# the maximum read at the top token, sg(·) as _xp.constant: docs/contributing.md) — tied maxima
# (0.035 off at [0, 0] on distill.hinton:49779c70026c3d63), tvd's |q − p| and logaddexp's kinks.
# Claimed again after a full run with 0 failures (2026-12-07, jax 0.10.2, float64 and float32):
# dpo.loss 787 pass + 42 rejected; distill.softmax 235 + 14, hinton 311 + 32, token_kl 330 + 26,
# symmetric_kl 194 + 22, generalized_jsd 328 + 24.
JAX_UNCLAIMED = ("distill.skew_kl", "distill.tvd", "distill.sparse_kl")


def _functions(package: str) -> tuple[dict, dict]:
    objectives, vjps = {}, {}
    for spec in catalog.OBJECTIVES:
        try:
            module = importlib.import_module(f"{package}.{spec.family}")
        except ModuleNotFoundError:
            continue
        fn = getattr(module, spec.name, None)
        if fn is not None:
            objectives[spec.id] = fn
            vjp = getattr(module, f"{spec.name}_vjp", None)
            if vjp is not None:
                vjps[spec.id] = vjp
    return objectives, vjps


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def cupy_available() -> tuple[bool, str]:
    try:
        import cupy
    except ImportError:
        return False, "CuPy is not installed (pip install cupy-cuda12x)"
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # CuPy raises its own runtime errors when no driver is present
        return False, f"no CUDA device for CuPy ({type(err).__name__})"
    return True, ""


def triton_interpreted() -> bool:
    """Whether Triton runs its kernels in the CPU interpreter (read by Triton at import)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def triton_available() -> tuple[bool, str]:
    """Triton installed, and a CUDA device or the interpreter to run its kernels on."""
    if importlib.util.find_spec("triton") is None:
        return False, "Triton is not installed (pip install triton)"
    if importlib.util.find_spec("torch") is None:
        return False, "PyTorch is not installed (pip install torch)"
    if not (triton_interpreted() or cuda_available()):
        return False, ("no CUDA device (torch.cuda.is_available() is False); set TRITON_INTERPRET=1 "
                       "to run the kernels on the CPU in Triton's interpreter")
    return True, ""


def load(name: str) -> Target:
    if name == "numpy":
        from lossproof.refimpl import arrays
        objectives, vjps = _functions("lossproof.refimpl.arrays")
        return Target("numpy", "numpy", objectives, ANY, vjps=vjps, dtypes=tuple(arrays.SUPPORTED_DTYPES),
                      devices=("cpu",), version=_version("numpy"), spec="numpy")
    if name == "cupy":
        ok, why = cupy_available()
        if not ok:
            raise TargetError(f"--target cupy: {why}")
        from lossproof.refimpl import arrays
        objectives, vjps = _functions("lossproof.refimpl.arrays")
        return Target("cupy", "cupy", objectives, ANY, vjps=vjps, dtypes=tuple(arrays.SUPPORTED_DTYPES),
                      devices=("cuda",), version=_version("cupy"), spec="cupy")
    if name == "jax":
        # refimpl.arrays on jax.numpy, as a "jax" target: its gradients are jax.vjp of the array-API
        # code, not the analytic *_vjp functions, so a run proves the framework's own path.
        if refusal := jaxcall.x64_refusal():
            raise TargetError(f"--target jax: {refusal}")
        from lossproof.refimpl import arrays
        objectives, _ = _functions("lossproof.refimpl.arrays")
        objectives = {oid: _constant(fn) if catalog.get(oid).detached else fn for oid, fn in objectives.items()
                      if not any(fnmatch.fnmatchcase(oid, g) for g in JAX_UNCLAIMED)}
        return Target("jax", "jax", objectives, ANY, dtypes=tuple(arrays.SUPPORTED_DTYPES), devices=("cpu",),
                      version=_version("jax"), spec="jax")
    if name == "triton":
        ok, why = triton_available()
        if not ok:
            raise TargetError(f"--target triton: {why}")
        from lossproof.refimpl import triton as rtriton
        objectives, _ = _functions("lossproof.refimpl.triton")
        devices = ("cpu",) if triton_interpreted() else ("cuda",)
        return Target("triton", "torch", objectives, ANY, dtypes=tuple(rtriton.SUPPORTED_DTYPES), devices=devices,
                      version=_version("triton"), spec="triton")
    try:
        import torch  # noqa: F401
    except ImportError:
        raise TargetError("--target torch: PyTorch is not installed (pip install torch)") from None
    from lossproof.refimpl import torch as rtorch
    objectives, _ = _functions("lossproof.refimpl.torch")
    devices = ("cpu", "cuda") if cuda_available() else ("cpu",)
    steps, sharded = builtin_torch()
    return Target("torch", "torch", objectives, ANY, dtypes=tuple(rtorch.SUPPORTED_DTYPES), devices=devices,
                  version=_version("torch"), spec="torch", steps=steps, sharded=sharded)


def _constant(fn):
    """``fn`` with its outputs under ``jax.lax.stop_gradient``: the catalog's detached objectives
    are constants by definition, which the array-API code, written for NumPy, does not say."""
    import jax

    @functools.wraps(fn)
    def constant(**kwargs):
        return jax.tree_util.tree_map(jax.lax.stop_gradient, fn(**kwargs))
    return constant


def _version(module: str) -> str:
    try:
        return importlib.import_module(module).__version__
    except Exception:
        return ""


def available() -> list[str]:
    """Built-in backends that can run on this machine, which a run without targets checks."""
    names = ["numpy"]
    try:
        import torch  # noqa: F401
        names.append("torch")
    except ImportError:
        pass
    if cupy_available()[0]:
        names.append("cupy")
    if triton_available()[0]:
        names.append("triton")
    # not jax, even where it is installed: its run compiles every signature of every vector
    # (minutes), so a plain `lossproof check` leaves it to --backend jax

    return names
