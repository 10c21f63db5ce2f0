"""Known wrong formulas of the dpo.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

FORMS = ()
