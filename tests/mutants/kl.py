"""Mutants of ``kl.estimator`` (Schulman 2020; DeepSeekMath §4.1.1 eq. 4).

With log r = ref_logp − logp: k1 = −log r, k2 = (log r)²/2, k3 = r − log r − 1, optionally
clipped to [−c, c]; gradient with respect to ``logp``."""
from __future__ import annotations

import torch

from mutants import Pair, checked, export

OBJ = "kl.estimator"
CONVENTIONS = {"kind": ["k1", "k2", "k3"], "clamp": "*"}


def k3_of(log_r: torch.Tensor) -> torch.Tensor:
    """r − log r − 1 = expm1(log r) − log r, with the Taylor series where the terms cancel
    (|log r| < 1/2), so that the value keeps its relative accuracy near r = 1."""
    small = log_r.abs() < 0.5
    x = torch.where(small, log_r, torch.zeros_like(log_r))
    series = torch.zeros_like(x)
    for n in range(17, 1, -1):  # x²·Σ_{n≥2} x^{n−2}/n!, Horner
        series = series * x + 1.0 / _factorial(n)
    far = torch.where(small, torch.ones_like(log_r), log_r)
    return torch.where(small, series * x * x, torch.expm1(far) - far)


def _factorial(n: int) -> float:
    out = 1.0
    for i in range(2, n + 1):
        out *= i
    return out


def estimate(logp, ref_logp, kind, clamp, *, swap=False, undeclared_clamp=None, log_ratio_clamp=None,
             score_function=False, float32=False, k2_half=True, ref_on_graph=False):
    """The estimator; every keyword after ``*`` switches one bug on."""
    lp, rp = logp, (ref_logp if ref_on_graph else ref_logp.detach())
    if float32:
        lp, rp = lp.float(), rp.float()
    log_r = lp - rp if swap else rp - lp
    if log_ratio_clamp is not None:
        log_r = log_r.clamp(-log_ratio_clamp, log_ratio_clamp)
    if kind == "k1":
        value = -log_r
    elif kind == "k2":
        value = log_r * log_r / (2 if k2_half else 1)
    else:
        value = k3_of(log_r)
    bound = clamp if clamp is not None else undeclared_clamp
    if bound is not None:
        value = value.clamp(-bound, bound)
    if score_function:
        # value unchanged, gradient value·∇logp (the REINFORCE / score-function form)
        value = value.detach() + value.detach() * (lp - lp.detach())
    return value.to(logp.dtype)


@checked(OBJ)
def twin(logp, ref_logp, kind="k3", clamp=None):
    """The estimators as written in Schulman (2020) and DeepSeekMath eq. 4."""
    return estimate(logp, ref_logp, kind, clamp)


@checked(OBJ)
def k3_arguments_swapped(logp, ref_logp, kind="k3", clamp=None):
    """k3 arguments swapped: log r = logp − ref_logp, i.e. r = π/π_ref instead of π_ref/π.

    Seen: Rolv-Arild/rocket-learn PR #12 (k3 written with the ratio the wrong way round,
    "the previous estimator was simply incorrect"); DLR-RM/stable-baselines3 PR #419 (review
    thread on which log-ratio the approximate KL takes). The estimate becomes KL(π_ref‖π)'s
    sample, with a different value and gradient."""
    return estimate(logp, ref_logp, kind, clamp, swap=True)


@checked(OBJ)
def undeclared_value_clamp(logp, ref_logp, kind="k3", clamp=None):
    """Undeclared clamp of the KL value to [−10, 10].

    Seen: verl core_algos.kl_penalty ('low_var_kl' returns torch.clamp(kld, -10, 10);
    verl-project/verl issue #2928, PR #1779), OpenRLHF compute_approx_kl. Correct when a
    target declares clamp=10, a bug when it declares none (the paper default)."""
    return estimate(logp, ref_logp, kind, clamp, undeclared_clamp=10.0)


@checked(OBJ)
def undeclared_log_ratio_clamp(logp, ref_logp, kind="k3", clamp=None):
    """Undeclared clamp of the log-ratio to [−20, 20] before the estimator.

    Seen: verl core_algos.kl_penalty (`kl = torch.clamp(kl, min=-20, max=20)` "for numerical
    stability", quoted in verl-project/verl issue #2928). Invisible until |log r| > 20."""
    return estimate(logp, ref_logp, kind, clamp, log_ratio_clamp=20.0)


@checked(OBJ)
def k3_value_score_function_gradient(logp, ref_logp, kind="k3", clamp=None):
    """k3 value with a REINFORCE-style gradient: ∇ = k·∇logp instead of ∂k/∂logp.

    Seen: verl-project/verl PR #2953 (the k3 gradient discussion: which gradient a sampled KL
    term passes on); rllm-org/rllm PR #746/#747 (KL terms whose value and gradient come from
    different forms). The value is exact, only the gradient is wrong."""
    return estimate(logp, ref_logp, kind, clamp, score_function=True)


@checked(OBJ)
def float32_inside_float64(logp, ref_logp, kind="k3", clamp=None):
    """float32 computation inside a float64 function (result cast back to float64).

    Seen: OpenRLHF compute_approx_kl (`log_probs.float() - log_probs_base.float()`, quoted in
    OpenRLHF/OpenRLHF PR #797): `.float()` downcasts float64 inputs."""
    return estimate(logp, ref_logp, kind, clamp, float32=True)


@checked(OBJ)
def k2_without_half(logp, ref_logp, kind="k3", clamp=None):
    """k2 without its 1/2: (log r)² instead of (log r)²/2.

    Seen: PrimeIntellect-ai/prime-rl PR #1697 (the Kimi K2.5 squared-log-ratio KL "no 0.5
    factor", against Schulman's k2 = ½(log r)²)."""
    return estimate(logp, ref_logp, kind, clamp, k2_half=False)


PAIRS = [
    Pair("KL_K3_ARGS_SWAPPED", OBJ, k3_arguments_swapped, twin, CONVENTIONS),
    Pair("KL_UNDECLARED_CLAMP", OBJ, undeclared_value_clamp, twin, CONVENTIONS),
    Pair("KL_UNDECLARED_LOG_RATIO_CLAMP", OBJ, undeclared_log_ratio_clamp, twin, CONVENTIONS),
    Pair("KL_K3_SCORE_FUNCTION_GRAD", OBJ, k3_value_score_function_gradient, twin, CONVENTIONS),
    Pair("KL_FLOAT32_INSIDE_FLOAT64", OBJ, float32_inside_float64, twin, CONVENTIONS),
    Pair("KL_K2_WITHOUT_HALF", OBJ, k2_without_half, twin, CONVENTIONS),
]
export(globals(), PAIRS)
