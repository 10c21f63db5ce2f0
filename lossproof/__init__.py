"""lossproof: exact reference values and conformance vectors for LLM training objectives.

The names listed in ``__all__`` are lossproof's public face, each documented in
docs/targets.md ("The lossproof module"). The subpackages ``lossproof.conformance`` (the
catalog, the vectors, the harness, the command line) and ``lossproof.refimpl`` (the reference
implementations) are internal: their names may change in any release.

Every name is imported when first used, so ``import lossproof`` imports nothing else and a
command pays only for the modules it runs (``lossproof --version`` never loads the harness).
"""
import importlib
from pathlib import Path

# A wheel holds the subpackages at lossproof/conformance and lossproof/refimpl (setup.py maps
# them there); a source checkout keeps them at its top-level conformance/ and refimpl/ folders,
# which this package's path then includes, so that the same names import from both.
_HERE = Path(__file__).resolve().parent
if not (_HERE / "conformance").is_dir() and (_HERE.parent / "conformance" / "__init__.py").is_file():
    __path__.append(str(_HERE.parent))

_STEPS = "lossproof.conformance.targets.steps"
_FACE = {
    "__version__": "lossproof.conformance",
    # running the checks from code
    "main": "lossproof.conformance.cli",
    "cases": "lossproof.conformance.testing",
    "check": "lossproof.conformance.testing",
    "failed": "lossproof.conformance.results",
    "TargetCase": "lossproof.conformance.testing",
    "CaseResult": "lossproof.conformance.results",
    # writing a target
    "import_bare": "lossproof.conformance.targets.imports",
    "StepContext": _STEPS, "ShardContext": _STEPS, "micro_batch_mean": _STEPS, "global_mean": _STEPS,
    "global_mean_terms": _STEPS, "global_token_normalizer": _STEPS, "vocab_parallel": _STEPS,
    "tokens": _STEPS, "sequences": _STEPS, "rows": _STEPS, "labelled": _STEPS,
}
__all__ = sorted(name for name in _FACE if name != "__version__")


def __getattr__(name):
    if name not in _FACE:
        raise AttributeError(f"module 'lossproof' has no attribute {name!r}")
    value = getattr(importlib.import_module(_FACE[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_FACE))
