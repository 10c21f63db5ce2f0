"""Progress output for long commands (to stderr; silent with --quiet)."""
from __future__ import annotations

import contextlib
import sys

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)


@contextlib.contextmanager
def bar(description: str, quiet: bool = False):
    """Yields ``update(done, total)``; draws a bar on a terminal, one line per 10% elsewhere."""
    if quiet:
        yield lambda done, total: None
        return
    console = Console(file=sys.stderr)
    if console.is_terminal:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=True) as progress:
            task = progress.add_task(description, total=None)
            yield lambda done, total: progress.update(task, completed=done, total=total)
        return
    last = [-1]

    def update(done, total):
        step = 10 * done // max(total, 1)
        if step != last[0]:
            last[0] = step
            print(f"{description}: {done}/{total}", file=sys.stderr, flush=True)
    yield update
