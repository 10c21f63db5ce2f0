"""The built-in backends as targets: refimpl.arrays on NumPy and CuPy, refimpl.torch."""
from __future__ import annotations

import importlib

from conformance import catalog
from conformance.targets.steps import builtin_torch
from conformance.targets.target import ANY, Target, TargetError

BUILTINS = ("numpy", "torch", "cupy")


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


def load(name: str) -> Target:
    if name == "numpy":
        from refimpl import arrays
        objectives, vjps = _functions("refimpl.arrays")
        return Target("numpy", "numpy", objectives, ANY, vjps, tuple(arrays.SUPPORTED_DTYPES), ("cpu",),
                      _version("numpy"), "numpy")
    if name == "cupy":
        ok, why = cupy_available()
        if not ok:
            raise TargetError(f"--target cupy: {why}")
        from refimpl import arrays
        objectives, vjps = _functions("refimpl.arrays")
        return Target("cupy", "cupy", objectives, ANY, vjps, tuple(arrays.SUPPORTED_DTYPES), ("cuda",),
                      _version("cupy"), "cupy")
    try:
        import torch  # noqa: F401
    except ImportError:
        raise TargetError("--target torch: PyTorch is not installed (pip install torch)") from None
    from refimpl import torch as rtorch
    objectives, _ = _functions("refimpl.torch")
    devices = ("cpu", "cuda") if cuda_available() else ("cpu",)
    steps, sharded = builtin_torch()
    return Target("torch", "torch", objectives, ANY, {}, tuple(rtorch.SUPPORTED_DTYPES), devices,
                  _version("torch"), "torch", steps=steps, sharded=sharded)


def _version(module: str) -> str:
    try:
        return importlib.import_module(module).__version__
    except Exception:
        return ""


def available() -> list[str]:
    """Built-in backends that can run on this machine."""
    names = ["numpy"]
    try:
        import torch  # noqa: F401
        names.append("torch")
    except ImportError:
        pass
    if cupy_available()[0]:
        names.append("cupy")
    return names
