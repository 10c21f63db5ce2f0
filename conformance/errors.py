"""One exception base for every mistake a user can make (bad option, bad file, bad target).

``cli.main`` catches :class:`LossproofError` once and prints a one-line message with exit
status 2; anything else that escapes is a bug in lossproof and keeps its traceback.
"""
from __future__ import annotations


class LossproofError(Exception):
    """A user-facing error: the message is complete on one line, no traceback is needed."""


class UsageError(LossproofError):
    """A command-line option or a combination of options that cannot be honoured."""
