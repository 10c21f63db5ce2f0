"""The lossproof target of preference_losses: which catalog objective each function computes,
and under which conventions (docs/targets.md documents every key)."""
import json
from pathlib import Path

from preference_losses import dpo_loss

TARGET = {
    "name": "preference-losses",
    "framework": "torch",
    "conventions": {"dpo.loss": {"loss_type": ["sigmoid", "hinge"]}},
    "objectives": {"dpo.loss": dpo_loss},
}

# The pytest plugin applies only the target's own declarations: the same known.json, declared.
WITH_KNOWN = {**TARGET, "known": json.loads(Path(__file__).with_name("known.json").read_text(encoding="utf-8"))}
