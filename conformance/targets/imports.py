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

from conformance.targets.target import TargetError

__all__ = ["import_bare"]


class _Absent:
    """Stands for an attribute of a package that is not installed (GPU-only, cluster-only).
    Importing it works, and so does applying it as a decorator at import time (``@ray.remote``,
    ``@ray.remote(num_gpus=1)``): the decorated function is returned unchanged. Any other use
    raises."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        return _Absent(f"{self._name}.{item}")

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]                              # @absent.decorator
        if not args and kwargs:
            return _Absent(f"{self._name}(...)")        # @absent.decorator(options)
        raise RuntimeError(f"{self._name} is not available: its package is not installed (GPU-only); "
                           "lossproof loads only the library's loss code")

    def __mro_entries__(self, bases):
        return (object,)


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
        if spec is None or spec.submodule_search_locations is None:
            raise TargetError(f"{name} is not installed")
        return list(spec.submodule_search_locations)
    return [os.path.join(d, leaf) for d in sys.modules[parent].__path__]


@contextmanager
def _bare_packages(packages, absent):
    """Stand-in package objects (real ``__path__``, ``__init__`` not run) for ``packages``, and
    placeholder modules for the ``absent`` names, while the body imports."""
    finder = _AbsentFinder(absent)
    sys.meta_path.insert(0, finder)
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


def import_bare(module: str, packages=(), absent=()):
    """Import ``module`` with the ``__init__`` of ``packages`` skipped and ``absent`` packages
    replaced by placeholders (removed from ``sys.modules`` again afterwards).

    For a library whose package ``__init__`` imports what this machine lacks (a GPU runtime,
    a cluster framework) while its loss module needs none of it::

        from conformance.targets.imports import import_bare
        core_algos = import_bare("verl.trainer.ppo.core_algos",
                                 packages=("verl", "verl.trainer", "verl.trainer.ppo"),
                                 absent=("ray", "vllm"))
    """
    if module in sys.modules:
        return sys.modules[module]
    with _bare_packages(packages, absent):
        return importlib.import_module(module)
