"""Known wrong formulas of the lm.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

FORMS = ()
