"""Known wrong formulas of the preference.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

FORMS = ()
