"""Known wrong formulas of the proximal_kl.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

FORMS = ()
