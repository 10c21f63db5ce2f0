"""Known wrong formulas of the reward.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

FORMS = ()
