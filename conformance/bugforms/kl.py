"""Known wrong formulas of the kl.* objectives (``conformance.bugforms``)."""
from __future__ import annotations

from lossproof.conformance.bugforms import Form, call
from lossproof.refimpl.arrays import kl


def _ratio_reversed(kw):
    return {"value": call(kl.estimator, kw, logp=kw["ref_logp"], ref_logp=kw["logp"])}


FORMS = (
    Form("kl.estimator", "log-ratio reversed",
         "the estimator is formed from log(π/π_ref) = logp − ref_logp where Schulman's k1–k3 take "
         "log r = log(π_ref/π): k3 becomes a sample of KL(π_ref‖π), not of KL(π‖π_ref)",
         "form the log-ratio as ref_logp − logp (r = π_ref/π) before the estimator",
         ("Rolv-Arild/rocket-learn#12", "DLR-RM/stable-baselines3#419"), _ratio_reversed),
)
