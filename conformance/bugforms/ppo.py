"""Known wrong formulas of the ppo.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

FORMS = ()
