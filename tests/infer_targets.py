"""Targets for ``lossproof infer`` (tests/targets/test_infer.py): functions whose conventions
form a combination no committed vector group holds, a function that computes in float32 on
purpose, wrappers that cannot compute a convention's values or do not take it, and one with a defect in one
branch.

    PYTHONPATH=tests lossproof infer --target infer_targets:SAMPLE_STD_EPS_1E6 --objective grpo.advantages
"""
from __future__ import annotations

import torch


def _advantages(rewards, baseline, ddof, eps):
    with torch.no_grad():
        g = rewards.shape[1]
        centred = rewards - rewards.mean(dim=1, keepdim=True)
        if baseline == "leave-one-out":
            centred = centred * (g / max(g - 1, 1))
        flat = (rewards == rewards[:, :1]).all(dim=1, keepdim=True) | (g == 1)
        std = rewards.std(dim=1, correction=ddof, keepdim=True) if g > ddof else torch.ones_like(rewards[:, :1])
        adv = torch.where(flat, torch.zeros_like(rewards), centred / (torch.where(flat, 1.0, std) + eps))
        return {"advantages": adv, "keep": torch.ones(rewards.shape[0], dtype=rewards.dtype)}


def sample_std_eps_1e6(rewards, scale="group", std_ddof=1, eps=1e-6, degenerate="zero", baseline="mean"):
    """Group mean, sample std (ddof 1), eps 1e-6 and zero for degenerate groups, whatever it is
    called with: verl's eps and ddof with TRL's treatment of degenerate groups, a combination no
    committed group holds."""
    return _advantages(rewards, "mean", 1, 1e-6)


def rloo_group_std(rewards, scale="group", std_ddof=0, eps=0.0, degenerate="zero", baseline="leave-one-out"):
    """The leave-one-out baseline scaled by the group's population std: no committed group holds
    leave-one-out with scale 'group'."""
    return _advantages(rewards, "leave-one-out", 0, 0.0)


SAMPLE_STD_EPS_1E6 = {"name": "sample-std-eps-1e-6", "framework": "torch",
                      "objectives": {"grpo.advantages": sample_std_eps_1e6}, "dtypes": ["float64"]}
RLOO_GROUP_STD = {"name": "rloo-group-std", "framework": "torch",
                  "objectives": {"grpo.advantages": rloo_group_std}, "dtypes": ["float64"]}


def kl_in_float32(logp, ref_logp, kind="k3", clamp=None):
    """k1/k2/k3 computed and returned in float32 whatever the inputs' dtype (a library that
    computes in float32 on purpose)."""
    x = ref_logp.float() - logp.float()
    k = {"k1": -x, "k2": x * x / 2, "k3": torch.expm1(x) - x, "abs": x.abs()}[kind]
    return k if clamp is None else k.clamp(-clamp, clamp)


KL_IN_FLOAT32 = {"name": "kl-in-float32", "framework": "torch", "objectives": {"kl.estimator": kl_in_float32},
                 "dtypes": ["float64", "float32"]}


def kl_abs_by_square_root(logp, ref_logp, kind="k3", clamp=None):
    """Every kind right but 'abs', formed as √(x²): its gradient at x = 0 is 0/0 = NaN."""
    x = ref_logp - logp
    k = {"k1": -x, "k2": x * x / 2, "k3": torch.expm1(x) - x, "abs": torch.sqrt(x * x)}[kind]
    return k if clamp is None else k.clamp(-clamp, clamp)


KL_ABS_BY_SQUARE_ROOT = {"name": "kl-abs-by-square-root", "framework": "torch",
                         "objectives": {"kl.estimator": kl_abs_by_square_root}, "dtypes": ["float64"]}


def kl_unclamped_only(logp, ref_logp, kind="k3", clamp=None):
    """A wrapper whose library has no clamp: it says so for any clamp value."""
    if clamp is not None:
        raise NotImplementedError("this library's KL has no clamp")
    x = ref_logp - logp
    return {"k1": -x, "k2": x * x / 2, "k3": torch.expm1(x) - x, "abs": x.abs()}[kind]


KL_UNCLAMPED_ONLY = {"name": "kl-unclamped-only", "framework": "torch",
                     "objectives": {"kl.estimator": kl_unclamped_only}, "dtypes": ["float64"]}


def kl_without_clamp(logp, ref_logp, kind="k3"):
    """A wrapper that does not take the clamp convention at all."""
    x = ref_logp - logp
    return {"k1": -x, "k2": x * x / 2, "k3": torch.expm1(x) - x, "abs": x.abs()}[kind]


KL_WITHOUT_CLAMP = {"name": "kl-without-clamp", "framework": "torch",
                    "objectives": {"kl.estimator": kl_without_clamp}, "dtypes": ["float64"]}
