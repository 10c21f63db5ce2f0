"""Known wrong formulas of the kl.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

FORMS = ()
