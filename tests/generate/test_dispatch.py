"""The generated inputs do not depend on the SIMD path NumPy takes on the CPU.

NumPy dispatches its ufuncs (exp, log, tanh, ...) at run time to the widest instruction set the CPU
offers, and the last bit of a transcendental function differs between the paths: a generator that
formed inputs with them reproduced the golden set on an AVX-512 machine only (issue 38). Here every
family's cases are built again under each narrower path this CPU can take (NumPy's
``NPY_DISABLE_CPU_FEATURES`` turns the wider ones off) and their uids, which hash the inputs,
parameters and conventions, must be the committed ones. Building the cases runs no exact reference,
so this costs seconds; ``vectors generate --check`` compares the rest of every file on the default
path.
"""
import json
import os
import subprocess
import sys

import numpy._core._multiarray_umath as umath

from lossproof.conformance.vectors.load import VectorSet

UIDS = """
import json
from lossproof.conformance import catalog
from lossproof.conformance.generate import FAMILY_MODULES, family_module
from lossproof.conformance.generate.build import uid_of
print(json.dumps(sorted(uid_of(catalog.get(c.objective), c) for f in FAMILY_MODULES for c in family_module(f).cases())))
"""


def _narrower_paths() -> list[str]:
    """For each dispatch target above the baseline that this CPU has, the value of
    NPY_DISABLE_CPU_FEATURES that makes NumPy stop below it (widest first); the default path
    alone where the CPU offers nothing above the baseline."""
    found = [t for t in umath.__cpu_dispatch__ if umath.__cpu_features__.get(t)]
    return [" ".join(found[k:]) for k in range(len(found) - 1, -1, -1)] or [""]


def test_every_dispatch_path_builds_the_committed_inputs():
    committed = sorted(c.uid for c in VectorSet(validate=False).cases())
    runs = {}
    for disabled in _narrower_paths():
        env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": disabled}
        runs[disabled] = subprocess.Popen([sys.executable, "-c", UIDS], env=env, stdout=subprocess.PIPE, text=True)
    for disabled, proc in runs.items():
        out, _ = proc.communicate()
        assert proc.returncode == 0, disabled
        built = json.loads(out)
        assert built == committed, (f"NPY_DISABLE_CPU_FEATURES={disabled!r}: inputs that differ from the committed "
                                    f"ones: {sorted(set(built) - set(committed))[:5]}")
