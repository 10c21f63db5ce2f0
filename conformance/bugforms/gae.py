"""Known wrong formulas of the gae.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

FORMS = ()
