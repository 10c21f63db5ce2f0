"""NumPy-framework mutants: values from the objective, gradients from a hand-written VJP
(``vjps`` in the target), as a framework without autograd would supply them."""
from __future__ import annotations

import numpy as np

from mutants import Pair, checked, export

KL, AGG, DPO = "kl.estimator", "grpo.aggregate", "dpo.loss"


# ----------------------------------------------------------------------------------- kl.estimator

def _k(log_r, kind):
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return log_r * log_r / 2
    # expm1(x) − x, by its series where the two terms cancel
    small = np.abs(log_r) < 0.5
    x = np.where(small, log_r, 0.0)
    series = np.zeros_like(x)
    fact = [1.0]
    for n in range(1, 18):
        fact.append(fact[-1] * n)
    for n in range(17, 1, -1):
        series = series * x + 1.0 / fact[n]
    return np.where(small, series * x * x, np.expm1(log_r) - log_r)


def _dk_dlogp(log_r, kind):
    if kind == "k1":
        return np.ones_like(log_r)
    if kind == "k2":
        return -log_r
    return -np.expm1(log_r)


def kl_value(logp, ref_logp, kind="k3", clamp=None):
    value = _k(ref_logp - logp, kind)
    return value if clamp is None else np.clip(value, -clamp, clamp)


def kl_vjp(cotangent, logp, ref_logp, kind="k3", clamp=None, *, score_function=False):
    log_r = ref_logp - logp
    value = _k(log_r, kind)
    grad = value if score_function else _dk_dlogp(log_r, kind)
    if clamp is not None and not score_function:
        grad = np.where(np.abs(value) <= clamp, grad, 0.0)
    if clamp is not None and score_function:
        grad = np.clip(value, -clamp, clamp)
    return {"logp": np.asarray(cotangent) * grad}


@checked(KL, "numpy")
def kl_twin(logp, ref_logp, kind="k3", clamp=None):
    """k1/k2/k3 of log r = ref_logp − logp (Schulman 2020), values; the VJP is kl_twin_vjp."""
    return kl_value(logp, ref_logp, kind, clamp)


def kl_twin_vjp(cotangent, **kw):
    return kl_vjp(cotangent, **kw)


@checked(KL, "numpy")
def kl_score_function(logp, ref_logp, kind="k3", clamp=None):
    """k3 value with a REINFORCE-style gradient, in a NumPy target's hand-written VJP.

    Seen: verl-project/verl PR #2953 (which gradient a sampled KL term should pass on);
    google-research/seed_rl issue #81 (a KL loss whose gradient is the score-function form).
    The values are exact; the VJP returns ct·k instead of ct·∂k/∂logp."""
    return kl_value(logp, ref_logp, kind, clamp)


def kl_score_function_vjp(cotangent, **kw):
    return kl_vjp(cotangent, score_function=True, **kw)


# ----------------------------------------------------------------------------------- aggregate

def agg_value(values, mask, mode, norm_length, ignore_mask=False):
    m = np.ones(values.shape, bool) if ignore_mask else np.asarray(mask) != 0
    v = np.where(m, values, 0.0)
    lengths = m.sum(axis=1).astype(values.dtype)
    if mode == "token-mean":
        return v.sum() / lengths.sum()
    rows = lengths > 0
    sums = v.sum(axis=1)
    if mode == "seq-mean-token-mean":
        return (sums / np.where(rows, lengths, 1)).sum() / rows.sum()
    seq = sums.sum() / rows.sum()
    return seq if mode == "seq-mean-token-sum" else seq / (values.shape[1] if norm_length is None else norm_length)


def agg_grad(cotangent, values, mask, mode, norm_length, ignore_mask=False):
    m = np.ones(values.shape, bool) if ignore_mask else np.asarray(mask) != 0
    lengths = m.sum(axis=1).astype(values.dtype)
    rows = lengths > 0
    if mode == "token-mean":
        g = m / lengths.sum()
    elif mode == "seq-mean-token-mean":
        g = m / np.where(rows, lengths, 1)[:, None] / rows.sum()
    else:
        g = m / rows.sum()
        if mode == "seq-mean-token-sum-norm":
            g = g / (values.shape[1] if norm_length is None else norm_length)
    return {"values": float(np.asarray(cotangent)) * g.astype(values.dtype)}


@checked(AGG, "numpy")
def agg_twin(values, mask, mode="seq-mean-token-mean", norm_length=None):
    """DeepSeekMath eq. 3 / DAPO §3.3 / Dr. GRPO §3 masked reductions (NumPy)."""
    return agg_value(values, mask, mode, norm_length)


def agg_twin_vjp(cotangent, values, mask, mode="seq-mean-token-mean", norm_length=None):
    return agg_grad(cotangent, values, mask, mode, norm_length)


@checked(AGG, "numpy")
def agg_ignores_mask(values, mask, mode="seq-mean-token-mean", norm_length=None):
    """Aggregation ignoring the mask, values and VJP alike (NumPy).

    Seen: NovaSky-AI/SkyRL PR #462 ("the average token loss previously included padded
    tokens"); Tencent-Hunyuan/UniRL PR #409."""
    return agg_value(values, mask, mode, norm_length, ignore_mask=True)


def agg_ignores_mask_vjp(cotangent, values, mask, mode="seq-mean-token-mean", norm_length=None):
    return agg_grad(cotangent, values, mask, mode, norm_length, ignore_mask=True)


# ----------------------------------------------------------------------------------- dpo

def _log_sigmoid(z, naive=False):
    if naive:
        with np.errstate(all="ignore"):
            return np.log(1.0 / (1.0 + np.exp(-z)))
    return -np.logaddexp(0.0, -z)


def _sigmoid(z):
    return np.exp(_log_sigmoid(z))


def dpo_value(kw, naive=False):
    beta, eps, kind = kw.get("beta", 0.1), kw.get("label_smoothing", 0.0), kw.get("loss_type", "sigmoid")
    g_c = kw["policy_chosen_logps"] - kw["reference_chosen_logps"]
    g_r = kw["policy_rejected_logps"] - kw["reference_rejected_logps"]
    delta = g_c - g_r
    z = beta * delta
    if kind == "ipo":
        losses = (delta - 1 / (2 * beta)) ** 2
    elif kind == "hinge":
        losses = np.maximum(1 - z, 0.0)
    else:
        with np.errstate(invalid="ignore"):   # the naive form's 0·(−inf)
            pos, neg = _log_sigmoid(z, naive), _log_sigmoid(-z, naive)
            losses = (-(1 - eps) * pos - eps * neg if kind in ("sigmoid", "cdpo")
                      else (-(1 - eps) * pos + eps * neg) / (1 - 2 * eps))
    return {"losses": losses, "chosen_rewards": beta * g_c, "rejected_rewards": beta * g_r}


def dpo_vjp(ct, kw):
    beta, eps, kind = kw.get("beta", 0.1), kw.get("label_smoothing", 0.0), kw.get("loss_type", "sigmoid")
    delta = (kw["policy_chosen_logps"] - kw["reference_chosen_logps"]
             - kw["policy_rejected_logps"] + kw["reference_rejected_logps"])
    z = beta * delta
    if kind == "ipo":
        dl = 2 * (delta - 1 / (2 * beta))
    elif kind == "hinge":
        dl = np.where(1 - z >= 0, -beta, 0.0)
    elif kind in ("sigmoid", "cdpo"):
        dl = beta * (-(1 - eps) * _sigmoid(-z) + eps * _sigmoid(z))
    else:
        dl = beta * (-(1 - eps) * _sigmoid(-z) - eps * _sigmoid(z)) / (1 - 2 * eps)
    through = np.asarray(ct["losses"]) * dl
    return {"policy_chosen_logps": through + beta * np.asarray(ct["chosen_rewards"]),
            "policy_rejected_logps": -through + beta * np.asarray(ct["rejected_rewards"])}


@checked(DPO, "numpy")
def dpo_twin(**kw):
    """DPO eq. 7 and variants (NumPy), log σ(z) = −logaddexp(0, −z)."""
    return dpo_value(kw)


def dpo_twin_vjp(cotangent, **kw):
    return dpo_vjp(cotangent, kw)


@checked(DPO, "numpy")
def dpo_log_of_sigmoid(**kw):
    """log(sigmoid(z)) formed as log(1/(1 + exp(−z))) in a NumPy target: −inf past z ≈ −745.

    Seen: thinking-machines-lab/tinker-cookbook PR #188; FederatedAI/FATE issue #65 ("when x
    is larger than 710, exp(x) will overflow")."""
    return dpo_value(kw, naive=True)


DPO_CONVENTIONS = {"loss_type": ["sigmoid", "hinge", "ipo", "cdpo", "robust"]}
PAIRS = [
    Pair("NP_KL_SCORE_FUNCTION_VJP", KL, kl_score_function, kl_twin, {"kind": ["k1", "k2", "k3"], "clamp": "*"},
         framework="numpy", mutant_vjp=kl_score_function_vjp, twin_vjp=kl_twin_vjp),
    Pair("NP_AGG_IGNORES_MASK", AGG, agg_ignores_mask, agg_twin,
         {"mode": ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]},
         framework="numpy", mutant_vjp=agg_ignores_mask_vjp, twin_vjp=agg_twin_vjp),
    Pair("NP_DPO_LOG_OF_SIGMOID", DPO, dpo_log_of_sigmoid, dpo_twin, DPO_CONVENTIONS,
         framework="numpy", mutant_vjp=dpo_twin_vjp, twin_vjp=dpo_twin_vjp),
]
export(globals(), PAIRS)
