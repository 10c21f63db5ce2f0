"""Known wrong formulas of the distill.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

FORMS = ()
