"""Known wrong formulas of the lm.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

import numpy as np

from lossproof.conformance.bugforms import Form, call
from lossproof.refimpl.arrays import lm


def _zloss_square_of_mean(kw):
    # the square of a mean needs a mean: per token ('none') or summed the z-loss is the catalog's
    if kw["reduction"] != "mean" or not kw["z_loss"]:
        return {"loss": call(lm.cross_entropy, kw)}
    xp, _, zc, _, _, counted, _, zeta, _, denominator = call(lm._ce_prepare, kw)
    lse = lm._Soft(xp, zc, 1.0).lse[:, 0]
    mean_lse = np.sum(np.where(counted, lse, 0.0)) / denominator
    return {"loss": call(lm.cross_entropy, kw, z_loss=0.0) + zeta * mean_lse * mean_lse}


FORMS = (
    Form("lm.cross_entropy", "z-loss of the mean",
         "the z-loss is ζ·(mean lse)², the square of the batch's mean log-partition, where PaLM §5 adds "
         "ζ·lse² at every token (the mean of the squares)",
         "square each token's logsumexp before the mean: ζ·mean(lse²), not ζ·mean(lse)²",
         ("mlfoundations/open_lm#92",), _zloss_square_of_mean),
)
