"""Known wrong formulas of the moe.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

import numpy as np

from lossproof.conformance.bugforms import Form, call
from lossproof.refimpl.arrays import moe


def _top_k_probabilities(kw):
    _, dt, _, q, _, g, m = call(moe._balance, kw, mask=kw.get("mask"))
    z = kw["router_logits"]
    chosen = moe._top_k(np, z if z.ndim == 3 else z[None, ...], kw["top_k"], dt)
    # P_e sums the routing weights of the tokens sent to e: q·[e in the top k], not every token's q_e
    return {"loss": np.sum(np.where(m[None, :, None] == 1, g * q * chosen, 0.0))}


FORMS = (
    Form("moe.load_balancing", "P from the top-k weights",
         "the mean router probability P_e is taken over the top-k routing weights only (0 for the experts a token "
         "is not sent to), where Switch eq. 4–6 averages every expert's full softmax probability",
         "average the full router softmax (every expert's probability, chosen or not) into P, and the top-k "
         "membership into f only",
         ("AI-Hypercomputer/maxtext#1433", "huggingface/transformers#28021", "paiml/aprender#2162"), _top_k_probabilities),
)
