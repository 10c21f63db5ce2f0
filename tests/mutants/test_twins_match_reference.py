"""Twins of families without vectors yet (proximal_kl) agree with ``refimpl.torch`` on random
inputs under every convention they declare, and each mutant differs from its twin there
(in value, gradient or gradient leak): the pairs are ready for the day the vectors land."""
from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch", reason="the twins are compared with lossproof.refimpl.torch")

from mutants import proximal_kl as pkl
from lossproof.refimpl.torch import proximal_kl as ref

FUTURE_GRID = list(itertools.product([None, 0.5], [None, 1, 3]))
LOSS_GRID = list(itertools.product([None, 0.2], [None, 1.1], [None, 0.7], [None, 2], pkl.MODES))


def _inputs(seed, b=3, t=7):
    g = torch.Generator().manual_seed(seed)
    logp = -3 * torch.rand(b, t, generator=g, dtype=torch.float64)
    mask = (torch.rand(b, t, generator=g) > 0.3).double()
    mask[:, 0] = 1
    return {"logp": logp, "behavior_logp": logp + 0.3 * torch.randn(b, t, generator=g, dtype=torch.float64),
            "ref_logp": logp + 0.5 * torch.randn(b, t, generator=g, dtype=torch.float64),
            "advantages": torch.randn(b, generator=g, dtype=torch.float64), "mask": mask}


def _value_and_grad(fn, kw):
    x = kw["logp"].clone().requires_grad_(True)
    out = fn(**{**kw, "logp": x})
    if not out.requires_grad:
        return out.detach(), torch.zeros_like(x)
    (g,) = torch.autograd.grad(out, x, torch.ones_like(out), allow_unused=True)
    return out.detach(), (torch.zeros_like(x) if g is None else g)


@pytest.mark.parametrize("clip, window", FUTURE_GRID)
def test_future_cost_twin_matches_reference(clip, window):
    kw = {k: v for k, v in _inputs(1).items() if k in ("logp", "ref_logp", "mask")}
    kw.update(clip=clip, window=window)
    torch.testing.assert_close(pkl.future_twin(**kw), ref.future_cost(**kw), rtol=1e-14, atol=1e-14)


def test_loss_twin_matches_reference_under_every_convention():
    for i, (rc, cap, fc, fw, agg) in enumerate(LOSS_GRID):
        kw = {**_inputs(100 + i), "beta": 0.3, "ratio_clip": rc, "ratio_cap": cap, "future_clip": fc,
              "future_window": fw, "aggregation": agg}
        got, want = _value_and_grad(pkl.loss_twin, kw), _value_and_grad(ref.loss, kw)
        torch.testing.assert_close(got[0], want[0], rtol=1e-13, atol=1e-14)
        torch.testing.assert_close(got[1], want[1], rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("pair", pkl.PAIRS, ids=[p.slug for p in pkl.PAIRS])
def test_each_proximal_mutant_differs_from_its_twin(pair):
    names = ("logp", "ref_logp", "mask") if pair.objective.endswith("future_cost") else None
    kw = {k: v for k, v in _inputs(7).items() if names is None or k in names}
    if names is None:
        kw["beta"] = 0.3
    tv, tg = _value_and_grad(pair.twin, kw)
    mv, mg = _value_and_grad(pair.mutant, kw)
    assert not (torch.equal(tv, mv) and torch.equal(tg, mg)), f"{pair.slug} is indistinguishable from its twin"
