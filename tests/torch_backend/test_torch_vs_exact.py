"""refimpl.torch against the exact reference (CPU): values and autograd VJPs of every catalog
objective (not tabular) under every convention, in float64, float32, bfloat16 and float16, on
fixed-seed inputs and at the numerical extremes of the design (logits ±1e4, temperature 1e-3,
βΔ = ±1e4, ratios e^±50); exactly zero gradients at masked positions and impossible tokens;
the same InputError messages as refimpl.exact for bad input; the custom backward passes
against torch.autograd.gradcheck. Tolerance policy: tests/torch_backend/torchcheck.py.
"""
from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="tests of the torch backend")

import math

import numpy as np
import torch
import torchcheck

from lossproof.refimpl import torch as rt
from lossproof.refimpl.exact import distill as e_distill
from lossproof.refimpl.exact import dpo as e_dpo
from lossproof.refimpl.exact import grpo as e_grpo
from lossproof.refimpl.exact import kl as e_kl
from lossproof.refimpl.exact import proximal_kl as e_prox
from lossproof.refimpl.torch import _careful, distill, dpo, grpo, kl, proximal_kl
from lossproof.refimpl.validate import InputError

CASES = torchcheck.cases()
PAIRS = [(c, d) for c in CASES for d in torchcheck.DTYPES if torchcheck.supports_dtype(c, d)]


@pytest.fixture(scope="module", autouse=True)
def _summary():
    yield
    print("\n" + torchcheck.summary())


@pytest.mark.parametrize("case,dtype", PAIRS, ids=[f"{c.id}-{d}" for c, d in PAIRS])
def test_matches_exact(case, dtype):
    torchcheck.run(case, dtype, "cpu", seed=len(case.label))


def test_every_objective_and_convention_is_covered():
    from lossproof.conformance import catalog
    covered = {c.objective for c in CASES}
    assert covered == {o.id for o in catalog.OBJECTIVES if o.family != "tabular"}
    for o in catalog.OBJECTIVES:
        for p in o.params:
            if p.choices and o.family != "tabular":
                seen = {c.params.get(p.name, p.default) for c in CASES if c.objective == o.id}
                assert set(p.choices) <= seen, f"{o.id}.{p.name}: {set(p.choices) - seen} untested"


def test_declared_dtypes():
    assert rt.SUPPORTED_DTYPES == ("float64", "float32", "bfloat16", "float16")


# ------------------------------------------------------------------------------ gradients

def _double(x):
    return torch.tensor(x, dtype=torch.float64, requires_grad=True)


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
@pytest.mark.parametrize("kernel", ["reverse", "forward", "jsd", "jsd_kl0", "hinton"])
def test_custom_backward_gradcheck(monkeypatch, kernel, fused):
    """The analytic backward of both paths (``_careful.VocabRows``, ``_fused.FusedRows``)
    against torch's finite differences (float64)."""
    monkeypatch.setattr(distill, "FUSED", fused)
    rng = np.random.default_rng(5)
    z, t = rng.normal(0, 2, (3, 4)), torch.tensor(rng.normal(0, 2, (3, 4)))
    fns = {
        "reverse": lambda x: distill.token_kl(x, t, "reverse", 0.7),
        "forward": lambda x: distill.token_kl(x, t, "forward", 1.3),
        "jsd": lambda x: distill.generalized_jsd(x, t, 0.3, 0.9),
        "jsd_kl0": lambda x: distill.generalized_jsd(x, t, 0.0, 1.0, "kl"),
        "hinton": lambda x: distill.hinton(x, t, torch.tensor([1, 0, 3]), 2.0, 0.4),
    }
    assert torch.autograd.gradcheck(fns[kernel], (_double(z),))


def test_k3_backward_gradcheck_and_accuracy_near_zero():
    x = _double([1e-9, -3e-4, 0.2, -0.49, 0.51, 2.0])
    assert torch.autograd.gradcheck(lambda v: kl.estimator(v, torch.zeros(6, dtype=torch.float64)), (x,))
    # k3 = expm1(x) − x ≈ x²/2 and its derivative ≈ x keep their relative accuracy near 0.
    for v in (1e-9, -3e-5, 1e-3, 0.3, -0.49):
        logp = torch.tensor([0.0], dtype=torch.float32, requires_grad=True)
        ref = torch.tensor([v], dtype=torch.float32)
        val = kl.estimator(logp, ref)
        (g,) = torch.autograd.grad(val.sum(), logp)
        want = float(e_kl.estimator([0.0], [float(ref[0])])[0])
        want_g = float(e_kl.estimator_vjp([1.0], [0.0], [float(ref[0])])["logp"][0])
        assert abs(float(val.detach()[0]) - want) <= 4 * 2**-24 * want
        assert abs(float(g[0]) - want_g) <= 4 * 2**-24 * abs(want_g)


def test_chunked_rows_match_single_chunk(monkeypatch):
    """The plain path, chunk by chunk, bit for bit as in one chunk."""
    monkeypatch.setattr(distill, "FUSED", False)  # chunks are the plain path's
    rng = np.random.default_rng(9)
    z = torch.tensor(rng.normal(0, 2, (7, 5)), requires_grad=True)
    t = torch.tensor(rng.normal(0, 2, (7, 5)))
    ct = torch.tensor(rng.normal(0, 1, 7))
    ref_v = distill.generalized_jsd(z, t, 0.4)
    (ref_g,) = torch.autograd.grad(ref_v, z, ct)
    monkeypatch.setattr(_careful, "CHUNK_ELEMENTS", 10)  # two rows per chunk
    v = distill.generalized_jsd(z, t, 0.4)
    (g,) = torch.autograd.grad(v, z, ct)
    assert torch.equal(v, ref_v) and torch.equal(g, ref_g)


def test_nonfinite_safety_far_outside_the_normal_range():
    """Overflowing ratios on flat branches and clamped KLs: finite values, zero gradients."""
    logp = torch.tensor([[200.0, -1.0], [0.0, 0.0]], requires_grad=True)
    old = torch.tensor([[0.0, -1.0], [0.0, 0.0]])
    ref = torch.tensor([[0.0, 150.0], [0.0, 0.0]])
    loss = grpo.loss(logp, old, ref, torch.tensor([1.0, 0.5]), torch.ones(2, 2), kl_clamp=10.0,
                     kl_kind="k1", aggregation="token-mean")
    (g,) = torch.autograd.grad(loss, logp)
    assert torch.isfinite(loss) and torch.isfinite(g).all() and g[0, 0] == 0
    x = torch.tensor([0.0], requires_grad=True)
    v = kl.estimator(x, torch.tensor([150.0]), clamp=10.0)  # k3 = e^150: inf in float32
    (g,) = torch.autograd.grad(v.sum(), x)
    assert float(v.detach()) == 10.0 and g.item() == 0.0
    # A = 0 with ρ = e^200 (inf in float32): objective 0, gradient 0 (no inf·0).
    lp = torch.tensor([200.0, 200.0], requires_grad=True)
    c = grpo.clip(lp, torch.zeros(2), torch.tensor([0.0, 1.0]))
    (g,) = torch.autograd.grad(c.sum(), lp)
    assert c.detach().tolist() == [0.0, 1.2000000476837158] and g.tolist() == [0.0, 0.0]


# ------------------------------------------------------------------------------ bad input

T = torch.tensor
F = [[1.0, 2.0], [0.5, -1.0]]
G = [[0.0, 1.0], [2.0, 3.0]]
M = [[1, 1], [1, 0]]
NAN = math.nan
INF = math.inf

BAD = [
    # (torch fn, exact fn, kwargs built from lists, argument named)
    (distill.softmax, e_distill.softmax, dict(logits=F, temperature=0.0), "temperature"),
    (distill.softmax, e_distill.softmax, dict(logits=[[1.0, NAN]]), "logits"),
    (distill.softmax, e_distill.softmax, dict(logits=[[1.0, INF]]), "logits"),
    (distill.softmax, e_distill.softmax, dict(logits=[[-INF, -INF], [0.0, 1.0]]), "logits"),
    (distill.softmax, e_distill.softmax, dict(logits=3.0), "logits"),
    (distill.hinton, e_distill.hinton, dict(student_logits=F, teacher_logits=G, labels=[0, 2]), "labels"),
    (distill.hinton, e_distill.hinton, dict(student_logits=F, teacher_logits=G, labels=[0, 1, 1]), "labels"),
    (distill.hinton, e_distill.hinton, dict(student_logits=F, teacher_logits=G, labels=[0.5, 1]), "labels"),
    (distill.hinton, e_distill.hinton, dict(student_logits=F, teacher_logits=G, labels=[0, 1], alpha=1.5), "alpha"),
    (distill.hinton, e_distill.hinton, dict(student_logits=F, teacher_logits=G, labels=[0, 1], t2_scale=1), "t2_scale"),
    (distill.hinton, e_distill.hinton, dict(student_logits=[[-INF, 1.0], [0.0, 1.0]], teacher_logits=G, labels=[1, 0], alpha=1.0), "student_logits"),
    (distill.hinton, e_distill.hinton, dict(student_logits=[[-INF, 1.0], [0.0, 1.0]], teacher_logits=G, labels=[0, 0], alpha=0.0), "student_logits"),
    (distill.hinton, e_distill.hinton, dict(student_logits=[1.0, 2.0], teacher_logits=[1.0, 2.0], labels=[0]), "student_logits"),
    (distill.token_kl, e_distill.token_kl, dict(student_logits=F, teacher_logits=[[1.0, 2.0]]), "teacher_logits"),
    (distill.token_kl, e_distill.token_kl, dict(student_logits=F, teacher_logits=[[1.0, -INF], [0.0, 0.0]]), "teacher_logits"),
    (distill.token_kl, e_distill.token_kl, dict(student_logits=[[1.0, -INF], [0.0, 0.0]], teacher_logits=G, direction="forward"), "student_logits"),
    (distill.token_kl, e_distill.token_kl, dict(student_logits=F, teacher_logits=G, direction="both"), "direction"),
    (distill.token_kl, e_distill.token_kl, dict(student_logits=F, teacher_logits=G, temperature=-1.0), "temperature"),
    (distill.generalized_jsd, e_distill.generalized_jsd, dict(student_logits=F, teacher_logits=G, beta=1.5), "beta"),
    (distill.generalized_jsd, e_distill.generalized_jsd, dict(student_logits=F, teacher_logits=G, endpoints="x"), "endpoints"),
    (distill.generalized_jsd, e_distill.generalized_jsd, dict(student_logits=[[1.0, -INF], [0.0, 0.0]], teacher_logits=G, beta=0.0, endpoints="kl"), "student_logits"),
    (distill.generalized_jsd, e_distill.generalized_jsd, dict(student_logits=F, teacher_logits=[[1.0, -INF], [0.0, 0.0]], beta=1.0, endpoints="kl"), "teacher_logits"),
    (kl.estimator, e_kl.estimator, dict(logp=[1.0, 2.0], ref_logp=[1.0]), "ref_logp"),
    (kl.estimator, e_kl.estimator, dict(logp=[1.0, NAN], ref_logp=[1.0, 2.0]), "logp"),
    (kl.estimator, e_kl.estimator, dict(logp=[1.0, 2.0], ref_logp=[-INF, 2.0]), "ref_logp"),
    (kl.estimator, e_kl.estimator, dict(logp=[1.0], ref_logp=[1.0], kind="k4"), "kind"),
    (kl.estimator, e_kl.estimator, dict(logp=[1.0], ref_logp=[1.0], clamp=0.0), "clamp"),
    (dpo.loss, e_dpo.loss, dict(policy_chosen_logps=[1.0], policy_rejected_logps=[1.0], reference_chosen_logps=[1.0], reference_rejected_logps=[1.0, 2.0]), "reference_rejected_logps"),
    (dpo.loss, e_dpo.loss, dict(policy_chosen_logps=F, policy_rejected_logps=F, reference_chosen_logps=F, reference_rejected_logps=F), "policy_chosen_logps"),
    (dpo.loss, e_dpo.loss, dict(policy_chosen_logps=[1.0], policy_rejected_logps=[1.0], reference_chosen_logps=[1.0], reference_rejected_logps=[1.0], beta=0.0), "beta"),
    (dpo.loss, e_dpo.loss, dict(policy_chosen_logps=[1.0], policy_rejected_logps=[1.0], reference_chosen_logps=[1.0], reference_rejected_logps=[1.0], label_smoothing=0.5), "label_smoothing"),
    (dpo.loss, e_dpo.loss, dict(policy_chosen_logps=[1.0], policy_rejected_logps=[1.0], reference_chosen_logps=[1.0], reference_rejected_logps=[1.0], loss_type="kto"), "loss_type"),
    (grpo.advantages, e_grpo.advantages, dict(rewards=[1.0, 2.0]), "rewards"),
    (grpo.advantages, e_grpo.advantages, dict(rewards=F, std_ddof=2), "std_ddof"),
    (grpo.advantages, e_grpo.advantages, dict(rewards=F, eps=1.0), "eps"),
    (grpo.advantages, e_grpo.advantages, dict(rewards=F, scale="token"), "scale"),
    (grpo.advantages, e_grpo.advantages, dict(rewards=F, degenerate="nan"), "degenerate"),
    (grpo.clip, e_grpo.clip, dict(logp=[1.0], old_logp=[1.0], advantages=[1.0], eps_low=1.0), "eps_low"),
    (grpo.clip, e_grpo.clip, dict(logp=[1.0], old_logp=[1.0], advantages=[1.0], eps_high=-0.1), "eps_high"),
    (grpo.clip, e_grpo.clip, dict(logp=[1.0], old_logp=[1.0], advantages=[1.0], dual_clip=1.0), "dual_clip"),
    (grpo.clip, e_grpo.clip, dict(logp=[1.0], old_logp=[1.0], advantages=[1.0, 2.0]), "advantages"),
    (grpo.aggregate, e_grpo.aggregate, dict(values=F, mask=[[1, 2], [0, 0]]), "mask"),
    (grpo.aggregate, e_grpo.aggregate, dict(values=F, mask=[[0, 0], [0, 0]]), "mask"),
    (grpo.aggregate, e_grpo.aggregate, dict(values=F, mask=M, mode="sum"), "mode"),
    (grpo.aggregate, e_grpo.aggregate, dict(values=F, mask=M, norm_length=0), "norm_length"),
    (grpo.aggregate, e_grpo.aggregate, dict(values=[1.0], mask=[1]), "values"),
    (grpo.loss, e_grpo.loss, dict(logp=F, old_logp=F, ref_logp=F, advantages=[1.0], mask=M), "advantages"),
    (grpo.loss, e_grpo.loss, dict(logp=F, old_logp=F, ref_logp=G, advantages=[1.0, 2.0], mask=M, beta=-0.1), "beta"),
    (grpo.loss, e_grpo.loss, dict(logp=F, old_logp=F, ref_logp=G, advantages=[1.0, 2.0], mask=M, kl_kind="k0"), "kl_kind"),
    (grpo.loss, e_grpo.loss, dict(logp=F, old_logp=F, ref_logp=G, advantages=[1.0, 2.0], mask=M,
                                  is_weight=[[1.0, -1.0], [1.0, 1.0]]), "is_weight"),
    (grpo.loss, e_grpo.loss, dict(logp=F, old_logp=F, ref_logp=G, advantages=[1.0, 2.0], mask=M,
                                  is_weight=[[1.0, NAN], [1.0, 1.0]]), "is_weight"),
    (grpo.loss, e_grpo.loss, dict(logp=F, old_logp=F, ref_logp=G, advantages=[1.0, 2.0], mask=M,
                                  is_weight=[1.0, 1.0]), "is_weight"),
    (grpo.loss, e_grpo.loss, dict(logp=F, old_logp=F, ref_logp=G, advantages=[1.0, 2.0], mask=M, kl_ratio_weight=1), "kl_ratio_weight"),
    (grpo.loss, e_grpo.loss, dict(logp=F, old_logp=F, ref_logp=G, advantages=[1.0, 2.0], mask=M, aggregation="mean"), "aggregation"),
    (grpo.loss, e_grpo.loss, dict(logp=F, old_logp=[[1.0, INF], [0.0, 0.0]], ref_logp=G, advantages=[1.0, 2.0], mask=M), "old_logp"),
    (grpo.rollout_correction, e_grpo.rollout_correction, dict(old_logp=F, rollout_logp=G, mask=M, lower=3.0),
     "lower"),
    (grpo.rollout_correction, e_grpo.rollout_correction, dict(old_logp=F, rollout_logp=G, mask=M, upper=None),
     "upper"),
    (grpo.rollout_correction, e_grpo.rollout_correction, dict(old_logp=F, rollout_logp=G, mask=[[0, 0], [0, 0]]),
     "mask"),
    (proximal_kl.future_cost, e_prox.future_cost, dict(logp=F, ref_logp=G, mask=M, window=0), "window"),
    (proximal_kl.future_cost, e_prox.future_cost, dict(logp=F, ref_logp=G, mask=M, window=1.5), "window"),
    (proximal_kl.future_cost, e_prox.future_cost, dict(logp=F, ref_logp=G, mask=M, clip=-1.0), "clip"),
    (proximal_kl.future_cost, e_prox.future_cost, dict(logp=F, ref_logp=G, mask=[[0, 0], [0, 0]]), "mask"),
    (proximal_kl.loss, e_prox.loss, dict(logp=F, behavior_logp=F, ref_logp=G, advantages=[1.0, 2.0], mask=M, beta=0.0), "beta"),
    (proximal_kl.loss, e_prox.loss, dict(logp=F, behavior_logp=F, ref_logp=G, advantages=[1.0, 2.0], mask=M, ratio_clip=1.0), "ratio_clip"),
    (proximal_kl.loss, e_prox.loss, dict(logp=F, behavior_logp=F, ref_logp=G, advantages=[1.0, 2.0], mask=M, ratio_cap=0.0), "ratio_cap"),
    (proximal_kl.loss, e_prox.loss, dict(logp=F, behavior_logp=F, ref_logp=G, advantages=[1.0, 2.0], mask=M, future_window=-2), "future_window"),
    (proximal_kl.loss, e_prox.loss, dict(logp=F, behavior_logp=[[1.0]], ref_logp=G, advantages=[1.0, 2.0], mask=M), "behavior_logp"),
]


def _tensor_args(kwargs):
    out = {}
    for k, v in kwargs.items():
        if isinstance(v, list):
            ints = k in ("labels", "mask") and all(
                isinstance(e, int) for e in np.asarray(v, dtype=object).flat)
            out[k] = T(v, dtype=torch.int64 if ints else torch.float64)
        else:
            out[k] = v
    return out


@pytest.mark.parametrize("fn,exact_fn,kwargs,arg", BAD,
                         ids=[f"{f.__module__.split('.')[-1]}.{f.__name__}-{a}-{i}"
                              for i, (f, _, _, a) in enumerate(BAD)])
def test_bad_input_raises_the_exact_message(fn, exact_fn, kwargs, arg):
    with pytest.raises(InputError) as got:
        fn(**_tensor_args(kwargs))
    assert isinstance(got.value, ValueError)
    assert str(got.value).startswith(f"{arg}:"), str(got.value)
    with pytest.raises(InputError) as want:
        exact_fn(**kwargs)
    assert str(got.value) == str(want.value)


def test_unsupported_dtype_is_rejected():
    with pytest.raises(InputError, match="^logp:"):
        kl.estimator(T([1, 2], dtype=torch.complex64), T([1.0, 2.0]))
