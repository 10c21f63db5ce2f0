"""refimpl.arrays against the exact reference: values and VJPs of every catalog objective
(not tabular) under every convention, on random inputs from fixed seeds and at the numerical
extremes the design names; the same InputError messages for bad input; and one code path for
every array-API namespace (run here on array_api_strict, the standard's strict namespace).

Tolerances, relative to the output's scale (max |exact|, per output): float64 1e-12;
float32 (inputs rounded to float32 first, the exact reference evaluated on the rounded
inputs) 1e-5. Run as a script to print the worst relative error per objective and dtype.
"""
from __future__ import annotations

import itertools
import math

import array_api_compat
import mpmath
import numpy as np
import pytest

from lossproof.conformance import catalog
from lossproof.refimpl import arrays
from lossproof.refimpl.exact import distill as ex_distill
from lossproof.refimpl.exact import dpo as ex_dpo
from lossproof.refimpl.exact import gae as ex_gae
from lossproof.refimpl.exact import grpo as ex_grpo
from lossproof.refimpl.exact import kl as ex_kl
from lossproof.refimpl.exact import lm as ex_lm
from lossproof.refimpl.exact import moe as ex_moe
from lossproof.refimpl.exact import mp
from lossproof.refimpl.exact import ppo as ex_ppo
from lossproof.refimpl.exact import preference as ex_preference
from lossproof.refimpl.exact import proximal_kl as ex_proximal_kl
from lossproof.refimpl.exact import reward as ex_reward
from lossproof.refimpl.validate import InputError

EXACT = {"distill": ex_distill, "kl": ex_kl, "dpo": ex_dpo, "preference": ex_preference, "grpo": ex_grpo,
         "gae": ex_gae, "proximal_kl": ex_proximal_kl, "lm": ex_lm, "reward": ex_reward,
         "ppo": ex_ppo, "moe": ex_moe}
TOL = {"float64": 1e-12, "float32": 1e-5}
SEEDS = (0, 1)
NEG_INF = -math.inf


# ------------------------------------------------------------------------------ inputs

def _logits(rng, shape, sd=2.0):
    return rng.normal(0.0, sd, shape)


def _mask(rng, b, t, empty_row=True):
    m = (rng.random((b, t)) < 0.7).astype(np.float64)
    m[0, 0] = 1.0
    if empty_row and b >= 3:
        m[1] = 0.0  # a fully masked row: left out of the sequence means
    return m


def _logp(rng, shape):
    return -rng.exponential(1.5, shape) - 0.01


def _inputs(oid: str, rng) -> dict:
    if oid == "distill.softmax":
        z = _logits(rng, (2, 3, 5))
        z[0, 1, 2] = NEG_INF
        return {"logits": z}
    if oid in ("distill.token_kl", "distill.generalized_jsd", "distill.hinton", "distill.symmetric_kl",
               "distill.skew_kl", "distill.tvd"):
        z, t = _logits(rng, (3, 5)), _logits(rng, (3, 5), 3.0)
        z[1, 3] = t[1, 3] = NEG_INF  # impossible under both: 0·log 0 terms
        out = {"student_logits": z, "teacher_logits": t}
        if oid == "distill.hinton":
            out["labels"] = np.array([0, 4, 2])
        return out
    if oid == "distill.sparse_kl":
        z = _logits(rng, (3, 6))
        z[2, 1] = NEG_INF   # impossible for the student, off the teacher's ids
        ids = np.array([rng.permutation([0, 2, 3, 4, 5])[:3] for _ in range(3)])
        lp = np.log(rng.dirichlet(np.ones(3), size=3) * 0.9)
        lp[1, 2] = NEG_INF  # a padding id
        return {"student_logits": z, "teacher_ids": ids, "teacher_logps": lp}
    if oid == "kl.estimator":
        lp = _logp(rng, 6)
        return {"logp": lp, "ref_logp": lp + rng.normal(0, 1.0, 6)}
    if oid == "moe.router_z_loss":  # a row around 1e3 (lse² ~ 1e6) and a masked row of junk
        z = rng.normal(0.0, 2.0, (4, 6))
        z[2] += 1e3
        z[3] = 1e4
        return {"router_logits": z, "mask": np.array([1.0, 1.0, 1.0, 0.0])}
    if oid == "ppo.entropy_bonus":  # padding holds 1e4: it must not reach the loss
        m = _mask(rng, 4, 6)
        return {"entropy": np.where(m == 1, rng.uniform(0.0, 4.0, (4, 6)), 1e4), "mask": m}
    if oid == "moe.load_balancing":  # continuous logits: no tie at a top-k boundary; a masked row of junk
        z = rng.normal(0.0, 2.0, (6, 5))
        z[4] = [30.0, -30.0, 30.0, -30.0, 30.0]
        return {"router_logits": z, "mask": np.array([1.0, 1.0, 1.0, 1.0, 0.0, 1.0])}
    if oid == "ppo.value_loss":  # steps of up to several ε = 0.2; at these seeds no token sits on a kink
        m = _mask(rng, 4, 6)
        values = rng.normal(0.0, 1.0, (4, 6))
        return {"values": values, "old_values": values - rng.normal(0.0, 0.4, (4, 6)),
                "returns": values + rng.normal(0.0, 1.0, (4, 6)), "mask": m}
    if oid == "reward.pairwise":  # one pair far apart (d = ±40: σ(∓d) ≈ e^{−40})
        chosen, rejected = rng.normal(0.0, 2.0, 5), rng.normal(0.0, 2.0, 5)
        chosen[3], rejected[3] = 20.0, -20.0
        return {"chosen_rewards": chosen, "rejected_rewards": rejected, "margin": rng.uniform(0.0, 1.0, 5)}
    if oid == "dpo.loss":
        names = ("policy_chosen_logps", "policy_rejected_logps",
                 "reference_chosen_logps", "reference_rejected_logps")
        return {**{k: -rng.uniform(0.05, 30.0, 4) for k in names}, "chosen_lengths": rng.integers(1, 30, 4)}
    if oid == "preference.simpo":
        return {"chosen_logps": -rng.uniform(0.5, 60.0, 4), "rejected_logps": -rng.uniform(0.5, 60.0, 4),
                "chosen_lengths": rng.integers(1, 30, 4), "rejected_lengths": rng.integers(1, 30, 4)}
    if oid == "preference.cpo":
        return {"chosen_logps": -rng.uniform(0.05, 30.0, 4), "rejected_logps": -rng.uniform(0.05, 30.0, 4),
                "chosen_lengths": rng.integers(1, 30, 4)}
    if oid == "preference.orpo":  # average log-probabilities, one within 1e-9 of 0
        return {"chosen_logps": np.array([-1e-9, -0.3, -2.0, -5.0]), "rejected_logps": -rng.uniform(1e-3, 4.0, 4)}
    if oid == "preference.kto":
        lp = -rng.uniform(0.5, 30.0, 5)
        return {"policy_logps": lp, "reference_logps": lp + rng.normal(0, 3.0, 5),
                "desirable": np.array([1.0, 0.0, 1.0, 0.0, 0.0]), "kl_policy_logps": -rng.uniform(0.5, 30.0, 3),
                "kl_reference_logps": -rng.uniform(0.5, 30.0, 3)}
    if oid == "grpo.advantages":
        r = rng.integers(0, 3, (4, 4)).astype(np.float64) + rng.normal(0, 0.1, (4, 4)) * (rng.random((4, 4)) < .5)
        r[2] = 0.3  # a constant group (degenerate)
        return {"rewards": r}
    if oid == "grpo.clip":
        lp = _logp(rng, 8)
        return {"logp": lp, "old_logp": lp + rng.normal(0, 0.8, 8),
                "advantages": rng.normal(0, 1.0, 8)}
    if oid == "grpo.aggregate":
        return {"values": rng.normal(0, 2.0, (3, 4)), "mask": _mask(rng, 3, 4)}
    lp = _logp(rng, (3, 4))
    if oid == "grpo.loss":
        return {"logp": lp, "old_logp": lp + rng.normal(0, 0.4, (3, 4)),
                "ref_logp": lp + rng.normal(0, 0.5, (3, 4)), "advantages": rng.normal(0, 1, 3),
                "mask": _mask(rng, 3, 4)}
    if oid == "gae.advantages":
        mask = _mask(rng, 3, 4)
        mask[0] = [1.0, 0.0, 1.0, 1.0]  # an observation token between valid ones
        return {"rewards": rng.normal(0, 0.5, (3, 4)), "values": rng.normal(0, 1, (3, 4)), "mask": mask}
    if oid == "gae.kl_rewards":
        return {"scores": rng.normal(0, 1, 3), "logp": lp, "ref_logp": lp + rng.normal(0, 2.0, (3, 4)),
                "mask": _mask(rng, 3, 4, empty_row=False)}  # every row needs a last token
    if oid == "grpo.rollout_correction":
        return {"old_logp": lp, "rollout_logp": lp + rng.normal(0, 0.6, (3, 4)), "mask": _mask(rng, 3, 4)}
    if oid == "proximal_kl.future_cost":
        return {"logp": lp, "ref_logp": lp + rng.normal(0, 0.5, (3, 4)), "mask": _mask(rng, 3, 4)}
    if oid == "proximal_kl.loss":
        return {"logp": lp, "behavior_logp": lp + rng.normal(0, 0.4, (3, 4)),
                "ref_logp": lp + rng.normal(0, 0.5, (3, 4)), "advantages": rng.normal(0, 1, 3),
                "mask": _mask(rng, 3, 4)}
    if oid in ("lm.cross_entropy", "lm.token_logprobs", "lm.entropy"):
        z = _logits(rng, (4, 6), 2.5)
        z[2, 4] = NEG_INF      # an impossible token off the labels
        if oid == "lm.entropy":
            return {"logits": z}
        return {"logits": z, "labels": np.array([3, -100, 0, 5]) if oid == "lm.cross_entropy" else np.array([3, 1, 0, 5])}
    if oid == "lm.linear_cross_entropy":
        return {"hidden": rng.normal(0, 1.5, (4, 3)), "weight": rng.normal(0, 1.0, (6, 3)),
                "labels": np.array([3, -100, 0, 5]), "bias": rng.normal(0, 1.0, 6)}
    raise KeyError(oid)


def _grid(**axes):
    keys = list(axes)
    return [dict(zip(keys, vals)) for vals in itertools.product(*axes.values())]


CONVENTIONS = {
    "distill.softmax": _grid(temperature=[1.0, 0.5, 2.0, 1e-3]),
    "distill.hinton": (_grid(temperature=[1.0, 2.0, 0.5], alpha=[0.0, 0.5, 1.0], t2_scale=[True, False])
                       + _grid(temperature=[1.0, 2.0], alpha=[0.5, 1.0], soft_term=["cross_entropy"])),
    "distill.token_kl": (_grid(direction=["reverse", "forward"], temperature=[1.0, 2.0, 0.5])
                         + _grid(direction=["forward"], temperature=[1.0, 2.0, 0.5], soft_term=["cross_entropy"])),
    "distill.symmetric_kl": _grid(forward_weight=[0.0, 0.1, 0.5, 1.0], temperature=[1.0, 2.0, 0.5]),
    "distill.generalized_jsd": _grid(beta=[0.0, 0.1, 0.5, 0.9, 1.0], endpoints=["limit", "kl"],
                                     temperature=[1.0, 2.0]),
    "distill.skew_kl": _grid(alpha=[0.1, 0.5, 1.0, 1e-6], direction=["forward", "reverse"], temperature=[1.0, 2.0]),
    "distill.tvd": _grid(temperature=[1.0, 0.5, 2.0]),
    "distill.sparse_kl": (_grid(renormalize=["none", "teacher", "both", "tail"], temperature=[1.0, 0.5, 2.0])
                          + _grid(renormalize=["none", "tail"], temperature=[0.5, 2.0], t2_scale=[True])),
    "kl.estimator": _grid(kind=["k1", "k2", "k3", "abs"], clamp=[None, 0.5]),
    "dpo.loss": (_grid(loss_type=["sigmoid", "hinge", "ipo", "cdpo", "robust", "aot", "aot_unpaired"],
                       label_smoothing=[0.0, 0.2], beta=[0.1, 1.0])
                 + _grid(loss_type=["exo_pair"], label_smoothing=[1e-3, 0.2], beta=[0.1, 1.0])
                 + _grid(loss_type=["nca_pair", "sppo_hard", "apo_zero", "apo_down"], beta=[0.1, 1.0])
                 + _grid(loss_type=["bco_pair"], reward_shift=[0.0, 0.3], beta=[0.1, 1.0])
                 + _grid(loss_type=["discopop"], discopop_tau=[0.05, 1.0], beta=[0.1, 1.0])
                 + _grid(loss_type=["sigmoid", "aot"], rpo_alpha=[0.5],
                         nll_aggregation=["seq-mean-token-mean", "seq-mean-token-sum", "token-mean"])),
    "preference.simpo": _grid(beta=[2.0, 0.5], gamma=[1.0, 0.0], label_smoothing=[0.0, 0.1]),
    "preference.cpo": (_grid(beta=[0.1, 1.0], label_smoothing=[0.0, 0.25])
                       + _grid(cpo_alpha=[1.0], nll_aggregation=["seq-mean-token-mean", "seq-mean-token-sum",
                                                                 "token-mean"])),
    "preference.orpo": _grid(beta=[0.1, 1.0]),
    "preference.kto": _grid(beta=[0.1, 0.5], desirable_weight=[1.0, 1.33], undesirable_weight=[1.0, 0.75]),
    "grpo.advantages": (_grid(scale=["group", "batch", "none"], std_ddof=[0, 1], eps=[0.0, 1e-4],
                              degenerate=["zero", "drop", "raw"])
                        + _grid(scale=["whiten"], std_ddof=[0, 1], eps=[0.0, 1e-4], degenerate=["zero", "drop", "raw"],
                                baseline=["mean", "leave-one-out", "none"])
                        + _grid(scale=["group", "batch", "none"], degenerate=["zero", "drop", "raw"],
                                baseline=["leave-one-out", "none"])),
    "grpo.clip": _grid(eps_high=[None, 0.28], dual_clip=[None, 3.0]) + _grid(log_ratio_clamp=[0.3],
                                                                             dual_clip=[None, 3.0]),
    "gae.advantages": (_grid(gamma=[1.0, 0.9], lam=[1.0, 0.7, 0.0], whiten=["none", "centred", "keep-mean"],
                             std_ddof=[0, 1], masked_tokens=["skip", "zero"])
                       + _grid(whiten=["centred", "keep-mean"], std_ddof=[0, 1], whiten_eps=[1e-8, 0.5])),
    "gae.kl_rewards": _grid(beta=[0.05, 1.0], kind=["k1", "k2", "k3"], clamp=[None, 1.0]),
    "grpo.aggregate": (_grid(mode=list(ex_grpo.MODES), norm_length=[None, 7.0])
                       + _grid(mode=list(ex_grpo.MODES), mean_eps=[0.25])
                       + _grid(mode=["token-mean", "seq-mean-token-mean"], mean_eps=[0.25], mean_eps_scope=["every"])),
    "grpo.loss": (_grid(aggregation=list(ex_grpo.MODES), kl_kind=["k1", "k2", "k3"],
                        kl_ratio_weight=[False, True])
                  + _grid(eps_high=[0.28], dual_clip=[3.0], kl_clamp=[0.05], beta=[0.04, 0.0],
                          aggregation=["seq-mean-token-sum-norm"], norm_length=[None, 6.0])
                  + _grid(ratio_level=["sequence", "sequence-token"], aggregation=["token-mean", "seq-mean-token-mean"],
                          kl_ratio_weight=[False, True], dual_clip=[None, 1.1])
                  + _grid(ratio_level=["sequence"], policy_loss=["gmpo"], eps_low=[0.3, 0.2], eps_high=[None, 0.5],
                          aggregation=["token-mean", "seq-mean-token-mean"])
                  + _grid(log_ratio_clamp=[0.3], eps_low=[0.5], kl_ratio_weight=[False, True], dual_clip=[None, 1.2])
                  + _grid(kl_aggregation=list(ex_grpo.MODES), aggregation=["token-mean", "seq-mean-token-mean"],
                          mean_eps=[0.0, 0.25])
                  + _grid(policy_loss=["cispo"], cispo_clip=["upper", "both", "raw-upper"], kl_kind=["k3", "abs"],
                          kl_ratio_weight=[False, True])
                  + _grid(policy_loss=["sapo"], sapo_tau_pos=[1.0, 2.0], kl_kind=["abs"],
                          aggregation=["token-mean", "seq-mean-token-mean"], kl_ratio_weight=[False, True])
                  # the log-ratio clamp on CISPO's weight and SAPO's gate (verl 0.9.1 clamps both)
                  + _grid(policy_loss=["cispo", "sapo"], log_ratio_clamp=[0.3], kl_ratio_weight=[False, True],
                          kl_aggregation=[None, "token-mean"], aggregation=["seq-mean-token-mean"])
                  # vector set 1.5.0: REINFORCE, KL-Cov's own top-k (given selections: the extremes below)
                  + _grid(policy_loss=["reinforce"], aggregation=list(ex_grpo.MODES))
                  + _grid(policy_loss=["kl-cov"], kl_cov_ratio=[0.2, 0.5], kl_cov_coef=[1.0, 0.5])
                  + _grid(aggregation=["token-mean"], kl_aggregation=[None, "seq-mean-token-mean"], mean_eps=[0.25],
                          mean_eps_scope=["every"])),
    "grpo.rollout_correction": (_grid(level=["token", "sequence"], correction=["truncate", "mask"],
                                      seq_log_ratio=["sum", "mean"], log_ratio_clamp=[None, 0.5],
                                      lower=[None, 0.5], upper=[2.0, 1.2])
                                + _grid(level=["token", "sequence"], correction=["mask"], seq_log_ratio=["mean"],
                                        kept_weight=["token-ratio", "one"], lower=[0.7])),
    "lm.cross_entropy": (_grid(reduction=["mean", "sum", "none"], z_loss=[0.0, 0.01], softcap=[None, 3.0])
                         + _grid(label_smoothing=[0.2, 1.0], softcap=[3.0], reduction=["mean", "none"])
                         + _grid(normalizer=[2.5, 40.0])
                         + _grid(label_smoothing=[0.2, 0.75], smoothing_classes=["others"], softcap=[3.0],
                                 reduction=["mean", "none"])),
    "lm.linear_cross_entropy": (_grid(reduction=["mean", "sum", "none"], z_loss=[0.0, 0.01], softcap=[None, 3.0])
                                + _grid(label_smoothing=[0.2], normalizer=[2.5, 40.0])
                                + _grid(label_smoothing=[0.2], smoothing_classes=["others"], z_loss=[0.0, 0.01])),
    "lm.token_logprobs": _grid(temperature=[1.0, 0.5, 2.0]),
    "lm.entropy": _grid(temperature=[1.0, 0.5, 2.0]),
    "moe.router_z_loss": [{}],
    "moe.load_balancing": (_grid(form=["switch", "concatenated", "per-layer-sum", "sequence"], top_k=[1, 2, 5])
                           + _grid(form=["sequence"], seq_len=[2, 3], top_k=[1, 3])
                           + _grid(form=["switch", "concatenated", "per-layer-sum"], top_k=[1, 2, 5],
                                   fraction_norm=["top_k"])),
    "ppo.entropy_bonus": (_grid(aggregation=list(ex_grpo.MODES), mean_eps=[0.0, 1e-8], coef=[0.01, 1.0])
                          + _grid(aggregation=["token-mean", "seq-mean-token-mean"], mean_eps=[0.25],
                                  mean_eps_scope=["every"])
                          + _grid(aggregation=["seq-mean-token-sum-norm"], norm_length=[7.0, 4096.0])),
    "ppo.value_loss": _grid(clip_range_value=[None, 0.2], half=[False, True], aggregation=list(ex_grpo.MODES)),
    "reward.pairwise": _grid(form=["sigmoid", "log-exp"], center_rewards_coefficient=[None, 0.01, 1.0]),
    "proximal_kl.future_cost": _grid(clip=[None, 0.5], window=[None, 1, 2, 10]),
    "proximal_kl.loss": (_grid(aggregation=list(ex_grpo.MODES), ratio_clip=[None, 0.2],
                               ratio_cap=[None, 1.3])
                         + _grid(future_clip=[None, 0.7], future_window=[None, 2], beta=[0.04, 0.5])),
}
assert set(CONVENTIONS) == {o.id for o in catalog.OBJECTIVES if o.family != "tabular"}


# ------------------------------------------------------------------------------ helpers

def _fns(oid):
    fam, name = oid.split(".")
    mod_x, mod_a = EXACT[fam], getattr(arrays, fam)
    return (getattr(mod_x, name), getattr(mod_x, name + "_vjp", None),
            getattr(mod_a, name), getattr(mod_a, name + "_vjp", None))


def _float_names(oid):
    return [i.name for i in catalog.get(oid).inputs if i.kind in ("float", "mask")]


def _round(kwargs, oid, dtype):
    """Inputs for the fast backend (in ``dtype``) and, for the exact one, the same values
    in binary64 (float32 rounding first: the exact reference sees the rounded numbers)."""
    fast, exact = dict(kwargs), dict(kwargs)
    for k in (k for k in _float_names(oid) if k in kwargs):   # an optional input may be absent
        a = np.asarray(kwargs[k], dtype=np.float64).astype(dtype)
        fast[k], exact[k] = a, a.astype(np.float64)
    return fast, exact


def _to_float(x):
    if isinstance(x, np.ndarray) and x.dtype == object:
        return np.vectorize(float, otypes=[np.float64])(x)
    if isinstance(x, (mpmath.mpf, int, float)):
        return np.float64(float(x))
    if isinstance(x, (np.ndarray, np.generic)):
        return np.asarray(x, dtype=np.float64)
    return np.asarray(np.from_dlpack(x), dtype=np.float64)  # another namespace's array


def rel_err(got, want, dtype="float64") -> float:
    """(max |got − want| − tiny) / max |want|, tiny = the dtype's smallest normal number
    (so ``rel_err <= tol`` is |got − want| ≤ tol·scale + tiny: an exact value that
    underflows the dtype is not an error). 0/0 → 0; an error on an exact-zero output → inf."""
    g, w = _to_float(got), _to_float(want)
    assert np.shape(g) == np.shape(w), (np.shape(g), np.shape(w))
    err = float(np.max(np.abs(g - w), initial=0.0))
    err = max(0.0, err - float(np.finfo(dtype).tiny))
    scale = float(np.max(np.abs(w), initial=0.0))
    if err == 0.0:
        return 0.0
    return err / scale if scale > 0 else math.inf


def _outputs(out):
    return out if isinstance(out, dict) else {"": out}


def _cotangent(oid, rng, exact_out, dtype):
    outs = catalog.get(oid).outputs
    def one(o):
        shape = np.shape(_to_float(o))
        return np.asarray(rng.normal(0, 1.0, shape), dtype=dtype).astype(np.float64) if shape else \
            float(np.float64(rng.normal(0, 1.0)).astype(dtype))
    if isinstance(exact_out, dict):
        return {k: one(exact_out[k]) for k in outs}
    return one(exact_out)


WORST: dict = {}


def _record(oid, dtype, what, err):
    key = (oid, dtype, what)
    WORST[key] = max(WORST.get(key, 0.0), err)


def compare_case(oid, kwargs, params, dtype, seed):
    """Values and VJPs of the fast backend vs exact; returns {output or 'grad:x': rel err}."""
    fx, fx_vjp, fa, fa_vjp = _fns(oid)
    fast_in, exact_in = _round(kwargs, oid, dtype)
    want = fx(**exact_in, **params)
    got = fa(**fast_in, **params)
    errs = {}
    for name, w in _outputs(want).items():
        g = _outputs(got)[name]
        assert _to_float(g).dtype == np.float64
        if name != "keep":
            assert str(g.dtype) == np.dtype(dtype).name, (name, g.dtype)
        errs[name or "value"] = rel_err(g, w, dtype)
    if catalog.get(oid).grads:
        ct = _cotangent(oid, np.random.default_rng(seed + 100), want, dtype)
        gw = fx_vjp(ct, **exact_in, **params)
        ga = fa_vjp(ct, **fast_in, **params)
        assert set(gw) == set(ga) == set(catalog.get(oid).grads_of(kwargs))
        for k in gw:
            assert str(ga[k].dtype) == np.dtype(dtype).name
            errs["grad:" + k] = rel_err(ga[k], gw[k], dtype)
    return errs


CASES = [(oid, i, p) for oid, grid in CONVENTIONS.items() for i, p in enumerate(grid)]


def _case_id(c):
    oid, _, p = c
    return oid + "[" + ",".join(f"{k}={v}" for k, v in p.items()) + "]"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_random_inputs_match_exact(case, dtype):
    oid, _, params = case
    for seed in SEEDS:
        kwargs = _inputs(oid, np.random.default_rng(seed))
        errs = compare_case(oid, kwargs, params, dtype, seed)
        for what, e in errs.items():
            _record(oid, dtype, what, e)
            assert e <= TOL[dtype], f"{oid} {params} seed {seed}: {what} rel err {e:.3g}"


IS_WEIGHT_CONVENTIONS = (_grid(policy_loss=["ppo-clip", "cispo", "sapo", "reinforce"],
                               aggregation=["token-mean", "seq-mean-token-mean"])
                         + _grid(ratio_level=["sequence", "sequence-token"], aggregation=list(ex_grpo.MODES))
                         + _grid(ratio_level=["sequence"], policy_loss=["gmpo"], kl_ratio_weight=[False]))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("params", IS_WEIGHT_CONVENTIONS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()))
def test_is_weight_matches_exact(params, dtype):
    """grpo.loss with the rollout correction's weight on the policy term (vector set 1.7.0): truncated
    weights, some 0 (masked IS), values and gradients against the exact reference."""
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        kwargs = _inputs("grpo.loss", rng)
        kwargs["is_weight"] = np.minimum(np.exp(rng.normal(0, 0.8, (3, 4))), 3.0) * (rng.random((3, 4)) > 0.2)
        errs = compare_case("grpo.loss", kwargs, {"beta": 0.1, **params}, dtype, seed)
        for what, e in errs.items():
            _record("grpo.loss", dtype, what, e)
            assert e <= TOL[dtype], f"grpo.loss {params} seed {seed}: {what} rel err {e:.3g}"


# ------------------------------------------------------------------------------ extremes

def _extreme_cases():
    """The regimes DESIGN §"Numerics" names: logits ±1e4, temperature 1e-3, βΔ = ±1e4,
    ratios e^±50 (float64, same tolerance)."""
    big = np.array([[1e4, -1e4, 0.0, 3.0], [-1e4, 1e4 - 1.0, 1e4, NEG_INF]])
    big_t = np.array([[1e4 - 2.0, -1e4, 5.0, 0.0], [-1e4, 1e4, 1e4 - 0.5, NEG_INF]])
    small = np.array([[0.0, -0.5, 1.0, 0.3], [1.2, 0.4, -0.9, NEG_INF]])
    small_t = np.array([[0.2, -0.4, 0.9, 0.35], [0.6, 1.3, -0.7, NEG_INF]])
    out = []
    for (z, t), T in itertools.product(((big, big_t), (small, small_t)), (1.0, 1e-3)):
        out.append(("distill.softmax", {"logits": z}, {"temperature": T}))
        out.append(("distill.hinton", {"student_logits": z, "teacher_logits": t,
                                        "labels": np.array([0, 2])}, {"temperature": T}))
        for d in ("reverse", "forward"):
            out.append(("distill.token_kl", {"student_logits": z, "teacher_logits": t},
                        {"direction": d, "temperature": T}))
        for b in (0.5, 0.01, 0.99):
            out.append(("distill.generalized_jsd", {"student_logits": z, "teacher_logits": t},
                        {"beta": b, "temperature": T}))
    # q ≈ p (the KL's non-negative-term form): a 1e-9 perturbation.
    z = np.array([[0.3, -1.2, 2.0, 0.7, -0.4]])
    out.append(("distill.token_kl", {"student_logits": z, "teacher_logits": z + np.array([[1e-9, 0, -2e-9, 0, 0]])}, {}))
    out.append(("distill.generalized_jsd", {"student_logits": z, "teacher_logits": z + 1e-9 * np.arange(5.0)}, {}))
    # q ≈ p with the top token changing places (a near tie), and rows one ulp apart.
    tie_z, tie_t = np.array([[1.0, 1.0 + 1e-12, 0.3, -2.0]]), np.array([[1.0 + 2e-12, 1.0, 0.3, -2.0]])
    one_ulp = np.nextafter(z, np.inf)
    for zz, tt in ((tie_z, tie_t), (z, one_ulp)):
        for d in ("reverse", "forward"):
            out.append(("distill.token_kl", {"student_logits": zz, "teacher_logits": tt}, {"direction": d}))
        out.append(("distill.generalized_jsd", {"student_logits": zz, "teacher_logits": tt}, {"beta": 0.3}))
        out.append(("distill.hinton", {"student_logits": zz, "teacher_logits": tt, "labels": np.array([1])},
                    {"temperature": 2.0}))
    lp = np.array([-1.0, -3.0, -0.5, -2.0])
    for kind in ("k1", "k2", "k3", "abs"):
        out.append(("kl.estimator", {"logp": lp, "ref_logp": lp + np.array([50.0, -50.0, 1e-9, -3e-7])},
                    {"kind": kind}))
    pc = np.array([-1.0, -1.0, -5.0, -2.0])
    for lt in ("sigmoid", "hinge", "ipo", "cdpo", "robust"):
        for ls in (0.0, 0.25):
            out.append(("dpo.loss", {"policy_chosen_logps": pc, "policy_rejected_logps": np.array([-1.0, -1.0, -1.0, -1.0]),
                                     "reference_chosen_logps": np.array([-1e4 - 1.0, 1e4 - 1.0, -5.0, -2.0]),
                                     "reference_rejected_logps": np.array([-1.0, -1.0, -1.0 + 1e-8, -1.5])},
                        {"loss_type": lt, "beta": 1.0, "label_smoothing": ls}))
    for dual in (None, 3.0):
        out.append(("grpo.clip", {"logp": np.array([-1.0, -60.0, -0.5, -70.0]),
                                  "old_logp": np.array([-51.0, -10.0, -50.5, -20.0]),
                                  "advantages": np.array([1.0, -1.0, -2.0, 0.5])}, {"dual_clip": dual}))
    ratio = {"logp": np.array([[-1.0, -60.0], [-0.5, -2.0]]), "old_logp": np.array([[-51.0, -10.0], [-0.6, -2.0]]),
             "ref_logp": np.array([[-1.0, -11.0], [-50.0, -2.0]]), "advantages": np.array([1.0, -0.5]),
             "mask": np.ones((2, 2))}
    for w, kind in itertools.product((False, True), ("k1", "k2", "k3")):
        # log r = ±49: with the ratio weight, k3 + dk3 = −log r from two terms ~e^49
        out.append(("grpo.loss", ratio, {"kl_ratio_weight": w, "kl_kind": kind}))
    out.append(("grpo.loss", ratio, {"kl_ratio_weight": True, "kl_clamp": 10.0}))
    for policy in ("cispo", "sapo"):  # ŵ = 1.2 at ρ = e^50; the soft gate saturates flat
        out.append(("grpo.loss", ratio, {"policy_loss": policy, "kl_kind": "abs"}))
    # Clip-Cov drops a selected token at ρ = e^50 and keeps one at e^−50; KL-Cov's unclipped ρ = e^50
    # carries k·|Δ| = 50 on a selected token; REINFORCE reads no ratio at all
    for policy in ("clip-cov", "kl-cov"):
        out.append(("grpo.loss", {**ratio, "selected": np.array([[1.0, 0.0], [0.0, 1.0]])}, {"policy_loss": policy}))
    out.append(("grpo.loss", ratio, {"policy_loss": "reinforce"}))
    prox = dict(ratio)
    prox["behavior_logp"] = prox.pop("old_logp")
    out.append(("proximal_kl.loss", prox, {}))
    out.append(("proximal_kl.loss", prox, {"ratio_cap": 2.0, "ratio_clip": 0.2}))
    return out


def _special_cases():
    """Shapes and ties the random grid does not reach, under every convention."""
    out = []
    for rewards in ([[0.5], [1.0], [2.0]], [[0.7]], [[1.0, 1.0], [1.0, 1.0]], [[0.1, 0.1, 0.1], [0.0, 1.0, 0.5]]):
        for params in CONVENTIONS["grpo.advantages"]:
            out.append(("grpo.advantages", {"rewards": np.array(rewards)}, params))
    z = _logits(np.random.default_rng(11), (2, 2, 4))
    t = _logits(np.random.default_rng(12), (2, 2, 4))
    for oid in ("distill.token_kl", "distill.generalized_jsd", "distill.softmax"):
        kw = {"logits": z} if oid == "distill.softmax" else {"student_logits": z, "teacher_logits": t}
        for params in CONVENTIONS[oid][::3]:
            out.append((oid, kw, params))
    # hinge kink βΔ = 1 exactly, IPO optimum Δ = 1/(2β) exactly
    kink = {"policy_chosen_logps": np.array([-1.0, -2.0]), "policy_rejected_logps": np.array([-2.0, -3.0]),
            "reference_chosen_logps": np.array([-1.5, -2.25]), "reference_rejected_logps": np.array([-2.0, -3.0])}
    out.append(("dpo.loss", kink, {"loss_type": "hinge", "beta": 2.0}))
    out.append(("dpo.loss", kink, {"loss_type": "ipo", "beta": 1.0}))
    # identical rows: every KL is exactly 0
    out.append(("distill.token_kl", {"student_logits": z[0], "teacher_logits": z[0]}, {}))
    out.append(("distill.generalized_jsd", {"student_logits": z[0], "teacher_logits": z[0]}, {}))
    # windows at and beyond the sequence length
    kw = _inputs("proximal_kl.future_cost", np.random.default_rng(13))
    for w in (3, 4, 100):
        out.append(("proximal_kl.future_cost", kw, {"window": w}))
    return out


EXTREMES = _extreme_cases() + _special_cases()


@pytest.mark.parametrize("i", range(len(EXTREMES)), ids=[f"{c[0]}-{n}" for n, c in enumerate(EXTREMES)])
def test_extremes_match_exact(i):
    oid, kwargs, params = EXTREMES[i]
    for what, e in compare_case(oid, kwargs, params, "float64", i).items():
        _record(oid, "float64-extreme", what, e)
        assert e <= TOL["float64"], f"{oid} {params}: {what} rel err {e:.3g}"


def _distill_fuzz(seed):
    """Logit scale 1, 30, 1e4 × temperature 1, 1e-3, 7 × teacher = student + noise of
    relative size 1, 1e-6, 0.1 (seed 0..26 covers every combination once), with −inf
    entries, a teacher-only −inf on odd seeds (forward KL and JSD only)."""
    rng = np.random.default_rng(seed)
    scale, T = [1.0, 30.0, 1e4][seed % 3], [1.0, 1e-3, 7.0][(seed // 3) % 3]
    z = rng.normal(0, scale, (3, 5))
    t = z + rng.normal(0, scale * [1.0, 1e-6, 0.1][(seed // 9) % 3], (3, 5))
    z[0, 1] = t[0, 1] = NEG_INF
    if seed % 2:
        t[2, 4] = NEG_INF
    pair = {"student_logits": z, "teacher_logits": t}
    out = [("distill.softmax", {"logits": z}, {"temperature": T}),
           ("distill.generalized_jsd", pair, {"temperature": T, "beta": float(rng.uniform(0.001, 0.999))}),
           ("distill.token_kl", pair, {"temperature": T, "direction": "forward"})]
    if seed % 2 == 0:
        out += [("distill.token_kl", pair, {"temperature": T, "direction": "reverse"}),
                ("distill.hinton", dict(pair, labels=np.array([0, 2, 3])), {"temperature": T})]
    return out


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("seed", range(27))
def test_distill_extreme_scales_match_exact(seed, dtype):
    """The exact reference runs at 400 digits here: at T = 1e-3 with logits ~30 its default
    50 digits leave an absolute error ~1e-50 in log q_top − log p_top, whose true value can
    be ~e^{-5000}, and the KL (~r²) or q_top − p_top it feeds is then noise (reported)."""
    for oid, kwargs, params in _distill_fuzz(seed):
        with mp.precision(400):
            errs = compare_case(oid, kwargs, params, dtype, seed)
        for what, e in errs.items():
            _record(oid, dtype + "-scales", what, e)
            assert e <= TOL[dtype], f"{oid} {params} seed {seed}: {what} rel err {e:.3g}"


# ------------------------------------------------------------------------------ bad input

def _bad_inputs():
    """(objective, kwargs, argument named): every data check raises the exact reference's
    InputError, with the same message."""
    rng = np.random.default_rng(7)
    out = []
    def bad(oid, name, value, **params):
        kw = _inputs(oid, rng)
        if name is not None:
            kw[name] = value
        out.append((oid, kw, params))

    z = _logits(rng, (3, 5))
    bad("distill.softmax", "logits", np.array([[1.0, np.nan]]))
    bad("distill.softmax", "logits", np.array([[1.0, np.inf]]))
    bad("distill.softmax", "logits", np.array([[0.0, 1.0], [NEG_INF, NEG_INF]]))
    bad("distill.softmax", "logits", np.zeros((2, 0)))
    bad("distill.softmax", "logits", 1.0)
    bad("distill.softmax", None, None, temperature=0.0)
    bad("distill.softmax", None, None, temperature=float("nan"))
    bad("distill.hinton", "labels", np.array([0, 5, 1]))
    bad("distill.hinton", "labels", np.array([0, -1, 1]))
    bad("distill.hinton", "labels", np.array([0.5, 1, 1]))
    bad("distill.hinton", "labels", np.array([0, 1]))
    bad("distill.hinton", "labels", [True, 0, 1])
    bad("distill.hinton", "labels", [0, None, 1])
    bad("distill.hinton", "labels", "ab")
    bad("distill.hinton", "labels", [[0], [1], [2]])
    bad("distill.hinton", None, None, alpha=1.5)
    bad("distill.hinton", None, None, t2_scale=1)
    zl = z.copy(); zl[1, 4] = NEG_INF
    bad("distill.hinton", "student_logits", zl)           # −inf at the label
    zk = z.copy(); zk[2, 1] = NEG_INF
    bad("distill.hinton", "student_logits", zk)           # teacher > 0 where student −inf
    bad("distill.hinton", "teacher_logits", z[:2])
    tk = z.copy(); tk[0, 3] = NEG_INF
    bad("distill.token_kl", "teacher_logits", tk)         # reverse KL infinite
    bad("distill.token_kl", "student_logits", zk, direction="forward")
    bad("distill.token_kl", None, None, direction="sideways")
    bad("distill.token_kl", "teacher_logits", np.where(np.arange(5) == 2, np.nan, z))
    bad("distill.generalized_jsd", None, None, beta=1.2)
    bad("distill.generalized_jsd", None, None, endpoints="both")
    bad("distill.generalized_jsd", "student_logits", zk, beta=0.0, endpoints="kl")
    bad("distill.generalized_jsd", "teacher_logits", tk, beta=1.0, endpoints="kl")
    bad("kl.estimator", "logp", np.array([0.0, np.nan, 1.0, 2.0, 3.0, 4.0]))
    bad("kl.estimator", "ref_logp", np.zeros(5))
    bad("kl.estimator", "logp", [0.0, None, 1.0, 2.0, 3.0, 4.0])
    bad("kl.estimator", "logp", [0.0, "x", 1.0, 2.0, 3.0, 4.0])
    bad("kl.estimator", "logp", [[0.0], [1.0, 2.0]])
    bad("kl.estimator", None, None, kind="k4")
    bad("kl.estimator", None, None, clamp=-1.0)
    bad("dpo.loss", "reference_rejected_logps", np.array([0.0, -np.inf, 0, 0]))
    bad("dpo.loss", "policy_rejected_logps", np.zeros(3))
    bad("dpo.loss", "policy_chosen_logps", np.zeros((2, 2)))
    bad("dpo.loss", None, None, beta=0.0)
    bad("dpo.loss", None, None, label_smoothing=0.5)
    bad("dpo.loss", None, None, loss_type="kto")
    bad("grpo.advantages", "rewards", np.zeros(4))
    bad("grpo.advantages", "rewards", np.zeros((2, 0)))
    bad("grpo.advantages", "rewards", np.array([[1.0, np.inf]]))
    bad("grpo.advantages", None, None, std_ddof=2)
    bad("grpo.advantages", None, None, eps=1.0)
    bad("grpo.advantages", None, None, scale="global")
    bad("grpo.advantages", None, None, degenerate="skip")
    bad("grpo.advantages", None, None, baseline="median")
    bad("grpo.clip", "advantages", np.zeros(3))
    bad("grpo.clip", None, None, eps_low=1.0)
    bad("grpo.clip", None, None, eps_high=-0.1)
    bad("grpo.clip", None, None, dual_clip=1.0)
    bad("grpo.aggregate", "mask", np.full((3, 4), 0.5))
    bad("grpo.aggregate", "mask", np.zeros((3, 4)))
    bad("grpo.aggregate", "mask", np.ones((3, 5)))
    bad("grpo.aggregate", "values", np.zeros(4))
    bad("grpo.aggregate", None, None, mode="sum")
    bad("grpo.aggregate", None, None, norm_length=0.0)
    bad("grpo.loss", "advantages", np.zeros(4))
    bad("grpo.loss", "mask", np.zeros((3, 4)))
    bad("grpo.loss", "mask", np.full((3, 4), 2.0))
    bad("grpo.loss", "ref_logp", np.full((3, 4), np.nan))
    bad("grpo.loss", None, None, beta=-0.1)
    bad("grpo.loss", None, None, kl_kind="k0")
    bad("grpo.loss", None, None, kl_ratio_weight="yes")
    bad("grpo.loss", None, None, aggregation="mean")
    bad("grpo.loss", "is_weight", np.full((3, 4), -0.5))
    bad("grpo.loss", "is_weight", np.full((3, 4), np.inf))
    bad("grpo.loss", "is_weight", np.ones(3))
    bad("proximal_kl.future_cost", "mask", np.zeros((3, 4)))
    bad("proximal_kl.future_cost", None, None, window=0)
    bad("proximal_kl.future_cost", None, None, window=1.5)
    bad("proximal_kl.future_cost", None, None, clip=0.0)
    bad("proximal_kl.loss", "behavior_logp", np.zeros((3, 3)))
    bad("proximal_kl.loss", "advantages", np.zeros((3, 1)))
    bad("proximal_kl.loss", "mask", np.full((3, 4), -1.0))
    bad("proximal_kl.loss", None, None, beta=0.0)
    bad("proximal_kl.loss", None, None, ratio_clip=1.0)
    bad("proximal_kl.loss", None, None, ratio_cap=0.0)
    bad("proximal_kl.loss", None, None, future_window=-2)
    return out


BAD = _bad_inputs()


@pytest.mark.parametrize("i", range(len(BAD)), ids=[f"{c[0]}-{n}" for n, c in enumerate(BAD)])
def test_bad_input_raises_same_input_error(i):
    oid, kwargs, params = BAD[i]
    fx, fx_vjp, fa, fa_vjp = _fns(oid)
    with pytest.raises(InputError) as want:
        fx(**kwargs, **params)
    with pytest.raises(InputError) as got:
        fa(**kwargs, **params)
    assert isinstance(got.value, ValueError)
    assert str(got.value) == str(want.value)
    named = str(got.value).split(":")[0]
    # The exact proximal_kl names the batch dimension 'batch' for an advantages shape error.
    assert named in {i.name for i in catalog.get(oid).inputs} | {p.name for p in catalog.get(oid).params} \
        or (oid, named) == ("proximal_kl.loss", "batch"), named
    if fa_vjp is not None:
        ct = 1.0 if not catalog.get(oid).outputs[0] in ("probs", "kl", "jsd", "value", "objective", "losses") else None
        if ct is not None:
            with pytest.raises(InputError) as got_vjp:
                fa_vjp(ct, **kwargs, **params)
            assert str(got_vjp.value) == str(want.value)


def test_bad_cotangent_shape_matches_exact():
    kw = _inputs("kl.estimator", np.random.default_rng(0))
    for fx, fa, ct in ((ex_kl.estimator_vjp, arrays.kl.estimator_vjp, np.zeros(5)),):
        with pytest.raises(InputError) as want:
            fx(ct, **kw)
        with pytest.raises(InputError) as got:
            fa(ct, **kw)
        assert str(got.value) == str(want.value)
    kw = _inputs("dpo.loss", np.random.default_rng(0))
    for ct in ([1.0], {"losses": np.zeros(3)}, {"loss": np.zeros(4)}):
        with pytest.raises(InputError) as want:
            ex_dpo.loss_vjp(ct, **kw)
        with pytest.raises(InputError) as got:
            arrays.dpo.loss_vjp(ct, **kw)
        assert str(got.value) == str(want.value)


def test_unsupported_dtype_is_refused():
    with pytest.raises(InputError, match="^logp: dtype float16"):
        arrays.kl.estimator(np.zeros(3, np.float16), np.zeros(3, np.float16))


def test_supported_dtypes_declared():
    assert arrays.SUPPORTED_DTYPES == ("float64", "float32")


# ------------------------------------------------------------------------------ namespace

def _namespace(name):
    """(namespace module as array_namespace reports it, numpy → that namespace's array)."""
    if name == "array_api_strict":
        xps = pytest.importorskip("array_api_strict")
        return xps, xps.asarray
    torch = pytest.importorskip("torch")
    return array_api_compat.array_namespace(torch.zeros(1)), torch.from_numpy


@pytest.mark.parametrize("ns", ["array_api_strict", "torch"])
def test_namespace_generic(ns):
    """Every objective runs unchanged on array_api_strict (the standard with nothing extra:
    no NumPy functions, no implicit conversions) and on torch tensors through
    array-api-compat, returns that namespace's arrays, and agrees with the NumPy run."""
    xns, conv = _namespace(ns)
    for oid, grid in CONVENTIONS.items():
        fx, fx_vjp, fa, fa_vjp = _fns(oid)
        for params in grid[:: max(1, len(grid) // 6)]:
            kwargs = _inputs(oid, np.random.default_rng(3))
            other = {k: (conv(v) if isinstance(v, np.ndarray) else v) for k, v in kwargs.items()}
            out, ref = fa(**other, **params), fa(**kwargs, **params)
            got, ref = _outputs(out), _outputs(ref)
            for name in ref:
                assert array_api_compat.array_namespace(got[name]) is xns, (oid, name)
                assert rel_err(got[name], ref[name]) <= 1e-15, (oid, params, name)
            if fa_vjp is None:
                continue
            ct = _cotangent(oid, np.random.default_rng(4), ref if "" not in ref else ref[""], "float64")
            ct_o = ({k: conv(np.asarray(v)) for k, v in ct.items()} if isinstance(ct, dict)
                    else conv(np.asarray(ct)))
            g_o, g_n = fa_vjp(ct_o, **other, **params), fa_vjp(ct, **kwargs, **params)
            for k in g_n:
                assert array_api_compat.array_namespace(g_o[k]) is xns
                assert rel_err(g_o[k], g_n[k]) <= 1e-15, (oid, params, k)


def test_float32_strict_stays_float32():
    xps = pytest.importorskip("array_api_strict")
    z = xps.asarray(np.random.default_rng(0).normal(size=(2, 4)), dtype=xps.float32)
    assert arrays.distill.softmax(z, temperature=0.5).dtype == xps.float32
    out = arrays.distill.token_kl_vjp(xps.ones((2,), dtype=xps.float32), z, z * 0.5)
    assert out["student_logits"].dtype == xps.float32


def test_bool_mask_and_int_labels_accepted():
    kw = _inputs("grpo.loss", np.random.default_rng(5))
    as_bool = dict(kw, mask=kw["mask"].astype(bool))
    assert float(arrays.grpo.loss(**as_bool)) == float(arrays.grpo.loss(**kw))


# ------------------------------------------------------------------------------ report

def _print_table():
    rows = {}
    for (oid, dtype, _), e in WORST.items():
        rows[(oid, dtype)] = max(rows.get((oid, dtype), 0.0), e)
    for (oid, dtype), e in sorted(rows.items()):
        print(f"{oid:28s} {dtype:16s} worst rel err {e:.3g}")


@pytest.fixture(scope="module", autouse=True)
def _summary():
    yield
    if WORST:
        print()
        _print_table()


if __name__ == "__main__":
    for case in CASES:
        for dtype in ("float64", "float32"):
            test_random_inputs_match_exact(case, dtype)
    for i in range(len(EXTREMES)):
        test_extremes_match_exact(i)
    for seed in range(27):
        for dtype in ("float64", "float32"):
            test_distill_extreme_scales_match_exact(seed, dtype)
    _print_table()
