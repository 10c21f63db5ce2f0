"""docs/mutation.md, the kill table: every mutant and twin of tests/mutants run through
``lossproof check --target`` and rendered by ``tests/mutants/killtable.py``.

The mutants are tests, not part of the installed package: the page is built from a source
checkout, whose ``tests/`` this module puts on ``sys.path`` to import them; without them (an
installed wheel, a partial copy) the build reports the page as skipped and says why.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import sys
from pathlib import Path

from lossproof.conformance.docs import DocsError, Unavailable
from lossproof.conformance.docs.context import Context

MUTANTS = "tests/mutants"     # relative to the root of the checkout


@contextlib.contextmanager
def _importable(directory: Path):
    sys.path.insert(0, str(directory))
    try:
        yield
    finally:
        sys.path.remove(str(directory))


def page(ctx: Context) -> str:
    mutants = ctx.root / MUTANTS
    if not (mutants / "killtable.py").is_file():
        raise Unavailable(f"{MUTANTS}/killtable.py not found under {ctx.root}: docs/mutation.md is built from "
                          "a source checkout, where the mutants live")
    if importlib.util.find_spec("torch") is None:
        raise Unavailable("torch is not installed: most mutants are torch targets")
    with _importable(mutants.parent):
        killtable = importlib.import_module("mutants.killtable")
    if Path(killtable.__file__).resolve().parent != mutants.resolve():
        raise DocsError(f"the mutants were already imported from {Path(killtable.__file__).parent}, "
                        f"not from {mutants}: build this checkout in a fresh process")
    # Each `lossproof check` of the kill table notes on stderr the conventions of a mutant that no
    # vector group holds; tests/mutants/test_kill_table.py is where that matters, not this page.
    with contextlib.redirect_stderr(io.StringIO()):
        return killtable.page(ctx.vs)
