"""Where lossproof keeps what it builds once per machine (compiled kernels, compiled JAX programs):
``$LOSSPROOF_CACHE``, else ``$XDG_CACHE_HOME/lossproof``, else ``~/.cache/lossproof``."""
from __future__ import annotations

import os
from pathlib import Path


def directory() -> Path:
    given = os.environ.get("LOSSPROOF_CACHE")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lossproof"
