"""Known wrong formulas of the moe.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

FORMS = ()
