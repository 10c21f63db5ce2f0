"""Mutants of ``gae.advantages`` (Schulman et al. 2016, arXiv 1506.02438 eqs. 10, 16): the
backward recursion Â_t = δ_t + γλ·Â_{t+1}, δ_t = r_t + γ·V_{t+1} − V_t, returns Â + V, then an
optional whitening over the valid tokens of the whole batch."""
from __future__ import annotations

import torch

from mutants import Pair, checked, export

OBJ = "gae.advantages"
CONVENTIONS = {"whiten": ["none", "centred", "keep-mean"], "std_ddof": [0, 1], "masked_tokens": ["skip", "zero"]}


@torch.no_grad()     # the catalog declares both outputs constant (detached)
def gae(kw, *, mean_restored=False):
    """Advantages and returns; ``mean_restored`` switches the bug on."""
    on = kw["mask"] != 0
    r = torch.where(on, kw["rewards"], 0.0)
    v = torch.where(on, kw["values"], 0.0)
    gamma, lam = kw.get("gamma", 1.0), kw.get("lam", 1.0)
    skip = kw.get("masked_tokens", "skip") == "skip"
    adv = torch.zeros_like(r)
    later_adv = later_value = torch.zeros_like(r[:, 0])
    for t in reversed(range(r.shape[1])):
        delta = r[:, t] + gamma * later_value - v[:, t]
        here = delta + gamma * lam * later_adv
        if skip:    # a masked token is no time step: the next valid token carries over it
            later_adv = torch.where(on[:, t], here, later_adv)
            later_value = torch.where(on[:, t], v[:, t], later_value)
        else:       # a masked token is a step with reward 0 and value 0
            later_adv, later_value = here, v[:, t]
        adv[:, t] = torch.where(on[:, t], here, 0.0)
    returns = torch.where(on, adv + v, 0.0)
    whiten = kw.get("whiten", "none")
    if whiten != "none":
        n = on.sum()
        mean = adv[on].mean()
        centred = torch.where(on, adv - mean, 0.0)
        var = (centred ** 2).sum() / (n - kw.get("std_ddof", 0))
        scaled = centred / var.sqrt() if n > 1 and var > 0 else torch.zeros_like(centred)
        keep = whiten == "keep-mean" or mean_restored
        adv = torch.where(on, scaled + mean, 0.0) if keep else scaled
    return {"advantages": adv, "returns": returns}


@checked(OBJ)
def gae_twin(**kw):
    """GAE eqs. 10 and 16 with the declared whitening and masked-token rule."""
    return gae(kw)


@checked(OBJ)
def gae_whiten_mean_restored(**kw):
    """The batch mean added back after whitening where centred advantages were declared.

    Seen: THUDM/slime issue #1369 and PR #2356 (distributed_masked_whiten with shift_mean=False
    centred, scaled, then added the global mean back: "not a scale-only path"). Uncentred
    advantages push every token of a batch whose mean is positive up."""
    return gae(kw, mean_restored=True)


PAIRS = [Pair("GAE_WHITEN_MEAN_RESTORED", OBJ, gae_whiten_mean_restored, gae_twin, CONVENTIONS)]
export(globals(), PAIRS)
