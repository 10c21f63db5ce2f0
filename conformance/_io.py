"""Atomic file writes: a reader never sees a half-written file, and shared files stay readable."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _staged(path: Path, data: bytes) -> str:
    """Write ``data`` to a temporary file beside ``path`` (readable like a normal file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 would make shared files unreadable to others
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def _commit(tmp: str, path: Path) -> None:
    try:
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_atomically(path: Path | str, data: bytes) -> None:
    path = Path(path)
    _commit(_staged(path, data), path)


def write_tree(directory: Path, files: dict[str, bytes], last: str | None = None) -> None:
    """Stage every file first, then rename them into place with ``last`` (an index such as a
    manifest) renamed last: a failure while staging leaves the previous set untouched, and a
    crash during the renames leaves an index mismatch that a loader reports, never a silently
    mixed set."""
    staged = {}
    try:
        for rel, data in sorted(files.items()):
            staged[rel] = _staged(directory / rel, data)
    except BaseException:
        for tmp in staged.values():
            os.unlink(tmp)
        raise
    order = sorted(staged, key=lambda r: r == last)
    for i, rel in enumerate(order):
        try:
            _commit(staged[rel], directory / rel)
        except BaseException:
            for later in order[i + 1:]:
                os.unlink(staged[later])
            raise
