"""Known wrong formulas of the preference.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

import math

import numpy as np

from lossproof.conformance.bugforms import Form
from lossproof.refimpl.arrays import _xp

# 1 − e^p with the offset ColossalAI's OddsRatioLoss adds, log(−exp(p) + 1.0001) (hpcaitech/ColossalAI#6407):
# the shipped literal, whose rounding the form keeps
_ONE_PLUS_OFFSET = 1.0001


def _orpo_offset(kw):
    c, r, beta = kw["chosen_logps"], kw["rejected_logps"], kw["beta"]
    if (c >= 0).any() or (r >= 0).any():
        return None

    def log_odds(p):
        # 1.0001 − e^p cancels as p → 0 (to 1e-4: four digits lost), so the code's value carries the
        # rounding of its e^p: math.exp (glibc) rounds it as PyTorch's CPU exp does (both correctly
        # at the vectors' p near 0, checked with mpmath), where NumPy's vectorised exp is an ulp off
        e = np.array([math.exp(v) for v in p.ravel()]).reshape(p.shape)
        return p - np.log(_ONE_PLUS_OFFSET - e)
    return {"losses": -c - beta * _xp.logsigmoid(np, log_odds(c) - log_odds(r)),
            "chosen_rewards": beta * c, "rejected_rewards": beta * r}


FORMS = (
    Form("preference.orpo", "offset inside the log-odds",
         "the log odds are p − log(1.0001 − e^p): a constant 1e-4 added to 1 − e^p inside the logarithm "
         "biases every pair's odds (most where p is near 0), where ORPO eq. 6 takes p − log(1 − e^p)",
         "compute log(1 − e^p) as log(−expm1(p)) (p < 0), with no offset",
         ("hpcaitech/ColossalAI#6407",), _orpo_offset),
)
