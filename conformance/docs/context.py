"""What the producers of the docs build share: the root of the checkout being built, whether
slow producers run, and the vector set (loaded and validated once per process)."""
from __future__ import annotations

from pathlib import Path

from lossproof.conformance.docs import DocsError
from lossproof.conformance.vectors.format import MANIFEST, sha256
from lossproof.conformance.vectors.load import VectorCase, VectorSet, default_dir

# Loading and validating every vector file takes seconds: keep one VectorSet per manifest.
_VECTOR_SETS: dict[tuple[str, str], VectorSet] = {}


class Context:
    def __init__(self, root: Path, vectors_dir: Path | None = None, include_slow: bool = True):
        self.root = Path(root)
        self.include_slow = include_slow
        self._vectors_dir = vectors_dir
        self._vs = None

    @property
    def vs(self) -> VectorSet:
        if self._vs is None:
            directory = Path(self._vectors_dir) if self._vectors_dir else default_dir()
            manifest = directory / MANIFEST
            key = (str(directory.resolve()), sha256(manifest.read_bytes()) if manifest.is_file() else "")
            if key not in _VECTOR_SETS:
                _VECTOR_SETS[key] = VectorSet(directory)
            self._vs = _VECTOR_SETS[key]
        return self._vs

    def case(self, uid: str) -> VectorCase:
        try:
            return self.vs.by_uid(uid)
        except KeyError:
            raise DocsError(f"the docs cite vector {uid}, which {self.vs.directory} does not hold (a vector "
                            "was removed or its content changed: update conformance/docs/families.py)") from None
