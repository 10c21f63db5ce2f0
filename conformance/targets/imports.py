"""Importing a library's loss module without running its package ``__init__``.

Libraries such as verl and OpenRLHF import GPU-only or cluster packages (vLLM, DeepSpeed, Ray,
flash-attn) in their package ``__init__`` although their loss functions are plain PyTorch. This
module lets a target — a built-in adapter or your own — load just the loss module: the named
packages get stand-in module objects whose ``__path__`` is the real one (their ``__init__`` does
not run), and the absent packages get placeholders that import, decorate and fail only when used.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from contextlib import contextmanager

from lossproof.conformance.targets.target import TargetError

__all__ = ["MOVED", "import_bare", "missing_module"]


class _Absent:
    """Stands for an attribute of a package that is not installed (GPU-only, cluster-only), so
    that module-level code of a loss module runs without it: importing it works, so do the
    decorators (``@ray.remote``, ``@ray.remote(num_gpus=1)``: the decorated function is returned
    unchanged), annotations (``ray.ObjectRef | None``, ``ray.ObjectRef[int]``), calls (they
    return placeholders: ``ray.get_runtime_context()``), truth tests (falsy:
    ``if ray.is_initialized():``) and iteration (empty). Computing with one (arithmetic, a
    comparison of order, a conversion to a number) raises RuntimeError naming it."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        return _Absent(f"{self._name}.{item}")

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]                              # @absent.decorator
        return _Absent(f"{self._name}(...)")            # @absent.decorator(options), absent.call()

    def __getitem__(self, item):
        return _Absent(f"{self._name}[...]")

    def __or__(self, other):
        return self

    __ror__ = __or__

    def __bool__(self):
        return False

    def __iter__(self):
        return iter(())

    def __repr__(self):
        return f"<placeholder for {self._name}: its package is not installed>"

    def __mro_entries__(self, bases):
        return (object,)

    def _unavailable(self, *args):
        raise RuntimeError(f"{self._name} is not available: its package is not installed (GPU-only); "
                           "lossproof loads only the library's loss code")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _unavailable
    __floordiv__ = __mod__ = __pow__ = __matmul__ = __neg__ = __abs__ = _unavailable
    __lt__ = __le__ = __gt__ = __ge__ = __float__ = __int__ = __index__ = _unavailable


class _AbsentModule(types.ModuleType):
    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        return _Absent(f"{self.__name__}.{item}")


class _AbsentFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots):
        self.roots = tuple(roots)
        self.created: list[str] = []

    def find_spec(self, fullname, path=None, target=None):
        if any(fullname == r or fullname.startswith(r + ".") for r in self.roots):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _AbsentModule(spec.name)
        module.__path__ = []
        self.created.append(spec.name)
        return module

    def exec_module(self, module):
        pass


def _package_dir(name: str) -> list[str]:
    parent, _, leaf = name.rpartition(".")
    if not parent:
        spec = importlib.util.find_spec(name)
        if spec is None:
            raise TargetError(f"{name} is not installed")
        if spec.submodule_search_locations is None:
            raise TargetError(f"{name!r} resolves to {spec.origin}, a module and not the package {name}: a file named "
                              f"like the library shadows it (rename {os.path.basename(spec.origin or name)})")
        return list(spec.submodule_search_locations)
    return [os.path.join(d, leaf) for d in sys.modules[parent].__path__]


@contextmanager
def _bare_packages(packages, absent, stand_ins):
    """Stand-in package objects (real ``__path__``, ``__init__`` not run) for ``packages``,
    placeholder modules for the ``absent`` names and the given objects for the ``stand_ins``,
    while the body imports."""
    finder = _AbsentFinder(absent)
    sys.meta_path.insert(0, finder)
    saved = {name: sys.modules.get(name, finder) for name in stand_ins}   # finder: none was there
    sys.modules.update(stand_ins)
    try:
        for name in packages:
            if name in sys.modules:
                continue
            module = types.ModuleType(name)
            module.__path__ = _package_dir(name)
            module.__package__ = name
            module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
            module.__spec__.submodule_search_locations = module.__path__
            module.__lossproof_bare__ = True
            sys.modules[name] = module
            parent, _, leaf = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], leaf, module)
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in finder.created:
            sys.modules.pop(name, None)
        for name, before in saved.items():
            if before is finder:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = before


def import_bare(module: str, packages=(), absent=(), stand_ins=None):
    """Import ``module`` with the ``__init__`` of ``packages`` skipped, ``absent`` packages
    replaced by placeholders, and each ``stand_ins`` name bound to the object given (a module, or
    any object with the attributes the library uses) — all of them removed from ``sys.modules``
    again afterwards; the loss module keeps what it imported.

    For a library whose package ``__init__`` imports what this machine lacks (a GPU runtime,
    a cluster framework) while its loss module needs none of it::

        from lossproof import import_bare
        core_algos = import_bare("verl.trainer.ppo.core_algos",
                                 packages=("verl", "verl.trainer", "verl.trainer.ppo"),
                                 absent=("vllm",),
                                 stand_ins={"ray": types.SimpleNamespace(remote=lambda fn: fn)})
    """
    if module in sys.modules:
        return sys.modules[module]
    with _bare_packages(packages, absent, dict(stand_ins or {})):
        return importlib.import_module(module)


# Modules lossproof used to have, and where their contents went: a target file written against an
# older release is told where to look instead of getting a bare ModuleNotFoundError.
MOVED = {
    # the two top-level packages of the first releases, now inside the one package lossproof (an
    # unrelated package on the public index is called conformance: never suggest installing it)
    "conformance": "lossproof (from lossproof import import_bare; the public names: docs/targets.md)",
    "refimpl": "lossproof.refimpl",
    "lossproof.conformance.targets._peers": "lossproof.conformance.targets.imports (import_bare) and lossproof.conformance.targets.peers._common "
                                  "(the adapters' helpers)",
    "lossproof.conformance.targets.trl": "lossproof.conformance.targets.peers.trl",
    "lossproof.conformance.targets.verl": "lossproof.conformance.targets.peers.verl",
    "lossproof.conformance.targets.openrlhf": "lossproof.conformance.targets.peers.openrlhf",
    "lossproof.conformance.targets.liger": "lossproof.conformance.targets.peers.liger",
    "lossproof.conformance.probe": "lossproof.conformance.theorem.probe",
    "lossproof.conformance.cite": "lossproof.conformance.vectors.cite",
    "lossproof.conformance.examples": "lossproof.conformance.vectors.examples",
}

# Import names whose distribution (what pip installs) is called otherwise.
DISTRIBUTIONS = {"PIL": "Pillow", "cv2": "opencv-python", "sklearn": "scikit-learn", "yaml": "PyYAML",
                 "attr": "attrs", "bs4": "beautifulsoup4", "google.protobuf": "protobuf", "skimage": "scikit-image",
                 "Crypto": "pycryptodome", "dateutil": "python-dateutil", "flash_attn": "flash-attn"}


def missing_module(err: BaseException) -> str | None:
    """For a ModuleNotFoundError, one line naming what to install (or, for a module lossproof
    removed, where its contents went); None for any other error."""
    if not isinstance(err, ModuleNotFoundError) or not err.name:
        return None
    name = err.name
    for old, new in MOVED.items():
        if name == old or name.startswith(old + "."):
            return f"{old} no longer exists: use {new}"
    root = name.split(".")[0]
    package = DISTRIBUTIONS.get(name) or DISTRIBUTIONS.get(root) or root
    hint = f" (module {root})" if package != root else ""
    return f"needs the package {package}{hint}, which is not installed: pip install {package}"
