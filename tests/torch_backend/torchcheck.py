"""Shared machinery of the refimpl.torch tests: cases for every catalog objective and
convention, and one runner that compares values and autograd VJPs with refimpl.exact.

Policy. Inputs are first rounded to the dtype under test; the exact reference is evaluated on
the rounded inputs (and on the rounded cotangents), so only the computation's own error is
measured. Per output (and per gradient) the scale is max |exact| over its elements, and

    float64:                   |torch − exact| ≤ 1e-12 · scale
    float32/bfloat16/float16:  |torch − exact| ≤ K · eps(dtype) · scale · max(1, log2 n) · cond
                                                 + ulp_dtype(exact)

elementwise, with n the reduction length of the case (the softmax axis, all logits of a
mean, the tokens of an aggregate, the rewards of a group), K = ``K_UNITS``, and ulp_dtype the
spacing of the output dtype at the exact value (DESIGN §6: a result can be no closer than
its own rounding; this is what lets a float16 gradient of 1e-24 be 0). ``cond`` is 1 except
where a case says otherwise: exp of a computed exponent x = (z − max)/T carries |x| ulps of
relative error, so a softmax at T = 1e-3 whose surviving exponents reach |x| ≈ 60 gets
cond = max |x| (``_exp_cond``). An exact value beyond the dtype's range must come back as the
infinity of its sign (the correctly rounded result).
"""
from __future__ import annotations

import dataclasses
import importlib
import itertools
import math

import numpy as np
import torch

from lossproof.conformance import catalog

NEG_INF = -math.inf
K_UNITS = 4
F64_REL = 1e-12
DTYPES = {"float64": torch.float64, "float32": torch.float32,
          "bfloat16": torch.bfloat16, "float16": torch.float16}

WORST: dict[tuple[str, str], float] = {}  # (objective, dtype) -> worst err / (eps·scale·log2 n)
WORST_REL: dict[tuple[str, str], float] = {}  # (objective, dtype) -> worst err / scale


@dataclasses.dataclass
class Case:
    objective: str
    label: str
    inputs: dict
    params: dict
    n: int = 1          # reduction length for the bound
    cond: float = 1.0   # extra error factor of an ill-conditioned case (see module docstring)

    @property
    def id(self) -> str:
        return f"{self.objective}[{self.label}]"


# ------------------------------------------------------------------------------ inputs

def _grid(**axes):
    keys = list(axes)
    return [dict(zip(keys, vals)) for vals in itertools.product(*axes.values())]


def _label(params: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in params.items()) or "defaults"


def _mask(rng, b, t, empty_row=True):
    m = (rng.random((b, t)) < 0.7).astype(np.int64)
    m[0, 0] = 1
    if empty_row and b >= 3:
        m[1] = 0
    return m


def _junk(x, m, rng, size=1e4):
    """Masked-out positions hold arbitrary finite values (large ones, to provoke overflow)."""
    x = x.copy()
    off = m == 0
    x[off] = rng.choice([-size, size, 37.0, -0.5], size=int(off.sum()))
    return x


def _logp(rng, shape):
    return -rng.exponential(1.5, shape) - 0.01


def _distill_pair(rng, shape=(3, 5), scale=2.0, student_only=(), teacher_only=(), both=()):
    z = rng.normal(0, scale, shape)
    t = rng.normal(0, scale * 1.5, shape)
    for idx in student_only:
        z[idx] = NEG_INF
    for idx in teacher_only:
        t[idx] = NEG_INF
    for idx in both:
        z[idx] = t[idx] = NEG_INF
    return z, t


def _exp_cond(z, T, limit=87.0) -> float:
    """max |(z − max z)/T| over the entries whose exp does not underflow in float32."""
    z = np.asarray(z, dtype=np.float64)
    x = (z - np.max(z, axis=-1, keepdims=True)) / T
    x = np.abs(x[np.isfinite(x) & (np.abs(x) <= limit)])
    return max(1.0, float(x.max()) if x.size else 1.0)


def cases() -> list[Case]:
    out: list[Case] = []
    add = out.append

    # distill.softmax
    for i, p in enumerate(_grid(temperature=[1.0, 0.5, 2.0, 1e-3])):
        rng = np.random.default_rng(100 + i)
        z = rng.normal(0, 2, (2, 3, 5))
        z[0, 1, 2] = NEG_INF
        add(Case("distill.softmax", _label(p), {"logits": z}, p, 5,
                 cond=_exp_cond(z, p["temperature"])))
    rng = np.random.default_rng(110)
    z = np.round(rng.normal(0, 1, (3, 6)), 2) * 1e4  # logits ±1e4 at T = 1e-3
    z[1, 0] = NEG_INF
    add(Case("distill.softmax", "extreme:logits±1e4,T=1e-3", {"logits": z}, {"temperature": 1e-3}, 6))
    add(Case("distill.softmax", "rank1", {"logits": np.array([2.0, 0.0, NEG_INF, -1.0])},
             {"temperature": 2.0}, 4))

    # distill.hinton
    for i, p in enumerate(_grid(temperature=[1.0, 2.0, 0.5], alpha=[0.0, 0.5, 1.0],
                                t2_scale=[True, False])):
        rng = np.random.default_rng(200 + i)
        z, t = _distill_pair(rng, teacher_only=[(0, 3)], both=[(2, 1)])
        add(Case("distill.hinton", _label(p), {"student_logits": z, "teacher_logits": t,
                                               "labels": np.array([0, 4, 2])}, p, 15))
    rng = np.random.default_rng(230)
    z, t = _distill_pair(rng, (2, 6), scale=1.0)
    add(Case("distill.hinton", "extreme:logits±1e4,T=1e-3",
             {"student_logits": np.round(z, 1) * 1e4, "teacher_logits": np.round(t, 1) * 1e4,
              "labels": np.array([1, 5])}, {"temperature": 1e-3}, 12))

    # distill.token_kl
    for i, p in enumerate(_grid(direction=["reverse", "forward"], temperature=[1.0, 2.0, 0.5, 1e-3])):
        rng = np.random.default_rng(300 + i)
        only = {"student_only": [(0, 2)]} if p["direction"] == "reverse" else {"teacher_only": [(0, 2)]}
        z, t = _distill_pair(rng, both=[(1, 3)], **only)
        add(Case("distill.token_kl", _label(p), {"student_logits": z, "teacher_logits": t}, p, 5))
    for i, (d, T) in enumerate(itertools.product(["reverse", "forward"], [1.0, 1e-3])):
        rng = np.random.default_rng(320 + i)
        t = np.round(rng.normal(0, 1, (2, 2, 6)), 1) * 1e4
        z = t + rng.normal(0, 1, t.shape) * (1.0 if T == 1 else 1e-3)  # close at large logits
        z[0, 0] = np.round(rng.normal(0, 1, 6), 1) * 1e4                 # far in one row
        add(Case("distill.token_kl", f"extreme:logits±1e4,{d},T={T}",
                 {"student_logits": z, "teacher_logits": t}, {"direction": d, "temperature": T}, 6))

    # distill.generalized_jsd
    for i, p in enumerate(_grid(beta=[0.0, 0.1, 0.5, 0.9, 1.0], endpoints=["limit", "kl"],
                                temperature=[1.0, 2.0])):
        rng = np.random.default_rng(400 + i)
        if p["endpoints"] == "kl" and p["beta"] == 0.0:
            special = {"teacher_only": [(0, 2)]}
        elif p["endpoints"] == "kl" and p["beta"] == 1.0:
            special = {"student_only": [(0, 2)]}
        else:
            special = {"teacher_only": [(0, 2)], "student_only": [(2, 4)]}
        z, t = _distill_pair(rng, both=[(1, 3)], **special)
        add(Case("distill.generalized_jsd", _label(p), {"student_logits": z, "teacher_logits": t},
                 p, 5))
    for i, (b, T) in enumerate(itertools.product([1e-6, 0.5, 1 - 1e-6], [1.0, 1e-3])):
        rng = np.random.default_rng(440 + i)
        z, t = _distill_pair(rng, (2, 6), scale=1.0)
        add(Case("distill.generalized_jsd", f"extreme:logits±1e4,beta={b},T={T}",
                 {"student_logits": np.round(z, 1) * 1e4, "teacher_logits": np.round(t, 1) * 1e4},
                 {"beta": b, "temperature": T}, 6))

    # soft_term 'cross_entropy' (KL + H(p)) of hinton and forward token_kl; distill.symmetric_kl
    # (−inf only where both are: each direction is then finite)
    for i, p in enumerate(_grid(temperature=[1.0, 2.0], alpha=[0.5, 1.0])):
        rng = np.random.default_rng(240 + i)
        z, t = _distill_pair(rng, teacher_only=[(0, 3)], both=[(2, 1)])
        add(Case("distill.hinton", _label({**p, "soft_term": "cross_entropy"}),
                 {"student_logits": z, "teacher_logits": t, "labels": np.array([0, 4, 2])},
                 {**p, "soft_term": "cross_entropy"}, 15))
    for i, T in enumerate([1.0, 0.5]):
        rng = np.random.default_rng(330 + i)
        z, t = _distill_pair(rng, both=[(1, 3)], teacher_only=[(0, 2)])
        p = {"direction": "forward", "soft_term": "cross_entropy", "temperature": T}
        add(Case("distill.token_kl", _label(p), {"student_logits": z, "teacher_logits": t}, p, 5))
    for i, p in enumerate(_grid(forward_weight=[0.0, 0.3, 0.5, 1.0], temperature=[1.0, 2.0])):
        rng = np.random.default_rng(450 + i)
        z, t = _distill_pair(rng, both=[(1, 3)])
        add(Case("distill.symmetric_kl", _label(p), {"student_logits": z, "teacher_logits": t}, p, 5))

    # distill.skew_kl (α = 1: exactly 0); distill.tvd (equal rows: every token a tie, gradient 0)
    for i, p in enumerate(_grid(alpha=[0.1, 0.5, 1.0, 1e-6], direction=["forward", "reverse"],
                                temperature=[1.0, 0.5])):
        rng = np.random.default_rng(460 + i)
        z, t = _distill_pair(rng, both=[(1, 3)], teacher_only=[(0, 2)], student_only=[(2, 4)])
        add(Case("distill.skew_kl", _label(p), {"student_logits": z, "teacher_logits": t}, p, 5))
    for i, p in enumerate(_grid(temperature=[1.0, 2.0, 0.5])):
        rng = np.random.default_rng(480 + i)
        z, t = _distill_pair(rng, both=[(1, 3)], teacher_only=[(0, 2)], student_only=[(2, 4)])
        t[1] = z[1]
        add(Case("distill.tvd", _label(p), {"student_logits": z, "teacher_logits": t}, p, 5))

    # distill.sparse_kl: shuffled ids, a padding id, a student −inf off the ids; K = V (forward KL)
    for i, p in enumerate(_grid(renormalize=["none", "teacher", "both", "tail"], temperature=[1.0, 0.5, 2.0])):
        rng = np.random.default_rng(490 + i)
        z = rng.normal(0, 2.0, (3, 7))
        z[2, 1] = NEG_INF
        ids = np.array([rng.permutation([0, 2, 3, 4, 5, 6])[:4] for _ in range(3)])
        lp = np.log(rng.dirichlet(np.ones(4), size=3) * 0.95)
        lp[0, 3] = NEG_INF
        add(Case("distill.sparse_kl", _label(p), {"student_logits": z, "teacher_ids": ids, "teacher_logps": lp},
                 p, 7))
    rng = np.random.default_rng(499)
    z, t = rng.normal(0, 2.0, (2, 5)), rng.normal(0, 2.0, (2, 5))
    full = t - np.log(np.exp(t).sum(axis=-1, keepdims=True))
    add(Case("distill.sparse_kl", "full support,both", {"student_logits": z, "teacher_ids": np.array([[4, 0, 1, 2, 3]] * 2),
             "teacher_logps": full[:, [4, 0, 1, 2, 3]]}, {"renormalize": "both"}, 5))
    # 'tail': a one-hot teacher (p_t = 0) with K = V and padding, a tail of 0.01 (it stays > 0 when the
    # log-probabilities are rounded to bfloat16), a student −inf off the ids
    add(Case("distill.sparse_kl", "tail edges", {
        "student_logits": np.array([[0.5, -0.25, 1.0, 2.0, -1.0], [1.0, 0.0, NEG_INF, -2.0, 0.5]]),
        "teacher_ids": np.array([[2, 0, 1, 3, 4], [3, 1, 0, 2, 4]]),
        "teacher_logps": np.array([[0.0] + [NEG_INF] * 4, [np.log(0.6), np.log(0.3), np.log(0.09), NEG_INF, NEG_INF]])},
        {"renormalize": "tail", "temperature": 1.5}, 5))
    # t2_scale (axolotl's T²): the same draws, times T²
    for i, p in enumerate(_grid(renormalize=["none", "tail"], temperature=[0.5, 2.0], t2_scale=[True])):
        rng = np.random.default_rng(3490 + i)
        z = rng.normal(0, 2.0, (3, 7))
        ids = np.array([rng.permutation([0, 2, 3, 4, 5, 6])[:4] for _ in range(3)])
        lp = np.log(rng.dirichlet(np.ones(4), size=3) * 0.95)
        add(Case("distill.sparse_kl", _label(p), {"student_logits": z, "teacher_ids": ids, "teacher_logps": lp},
                 p, 7))

    # kl.estimator
    for i, p in enumerate(_grid(kind=["k1", "k2", "k3", "abs"], clamp=[None, 0.5])):
        rng = np.random.default_rng(500 + i)
        lp = _logp(rng, 8)
        add(Case("kl.estimator", _label(p), {"logp": lp, "ref_logp": lp + rng.normal(0, 1, 8)}, p))
    for kind in ("k1", "k2", "k3", "abs"):
        # log r = ±50 (ratios e^±50), near 0, and exactly on the clamp bound (closed band).
        lp = np.array([-60.0, -1.0, -2.0, -3.0, -1.0, -5.0])
        ref = np.array([-10.0, -51.0, -2.0 + 2.0**-20, -3.0 - 1e-3, -1.5, -5.0])
        add(Case("kl.estimator", f"extreme:ratios e^±50,{kind}", {"logp": lp, "ref_logp": ref},
                 {"kind": kind}))
        add(Case("kl.estimator", f"clamp bound,{kind}", {"logp": lp, "ref_logp": ref},
                 {"kind": kind, "clamp": 0.5}))

    # dpo.loss
    names = ("policy_chosen_logps", "policy_rejected_logps",
             "reference_chosen_logps", "reference_rejected_logps")
    for i, p in enumerate(_grid(loss_type=["sigmoid", "hinge", "ipo", "cdpo", "robust"],
                                label_smoothing=[0.0, 0.2], beta=[0.1, 1.0])):
        rng = np.random.default_rng(600 + i)
        add(Case("dpo.loss", _label(p), {k: -rng.uniform(0.05, 30.0, 5) for k in names}, p))
    extra = (_grid(loss_type=["exo_pair", "aot", "aot_unpaired"], label_smoothing=[1e-3, 0.2], beta=[0.1, 1.0])
             + _grid(loss_type=["nca_pair", "sppo_hard", "apo_zero", "apo_down"], beta=[0.1, 1.0])
             + _grid(loss_type=["bco_pair"], reward_shift=[0.0, 0.3], beta=[0.1, 1.0])
             + _grid(loss_type=["discopop"], discopop_tau=[0.05, 1.0], beta=[0.1, 1.0]))
    for i, p in enumerate(extra):
        rng = np.random.default_rng(650 + i)
        add(Case("dpo.loss", _label(p), {k: -rng.uniform(0.05, 30.0, 5) for k in names}, p))
    # The chosen NLL term (rpo_alpha) by its three normalisations.
    for i, p in enumerate(_grid(loss_type=["sigmoid", "aot"], rpo_alpha=[0.5],
                                nll_aggregation=["seq-mean-token-mean", "seq-mean-token-sum", "token-mean"])):
        rng = np.random.default_rng(670 + i)
        add(Case("dpo.loss", _label(p), {**{k: -rng.uniform(0.05, 30.0, 5) for k in names},
                                         "chosen_lengths": rng.integers(1, 30, 5)}, p))

    # preference
    for i, p in enumerate(_grid(beta=[2.0, 0.5], gamma=[1.0, 0.0], label_smoothing=[0.0, 0.1])):
        rng = np.random.default_rng(680 + i)
        add(Case("preference.simpo", _label(p), {"chosen_logps": -rng.uniform(0.5, 60.0, 4),
                                                 "rejected_logps": -rng.uniform(0.5, 60.0, 4),
                                                 "chosen_lengths": rng.integers(1, 30, 4),
                                                 "rejected_lengths": rng.integers(1, 30, 4)}, p))
    for i, p in enumerate(_grid(beta=[0.1, 1.0], label_smoothing=[0.0, 0.25])):
        rng = np.random.default_rng(690 + i)
        add(Case("preference.cpo", _label(p), {"chosen_logps": -rng.uniform(0.05, 30.0, 4),
                                               "rejected_logps": -rng.uniform(0.05, 30.0, 4)}, p))
    for i, p in enumerate(_grid(cpo_alpha=[1.0], nll_aggregation=["seq-mean-token-mean", "seq-mean-token-sum",
                                                                  "token-mean"])):
        rng = np.random.default_rng(692 + i)
        add(Case("preference.cpo", _label(p), {"chosen_logps": -rng.uniform(0.05, 30.0, 4),
                                               "rejected_logps": -rng.uniform(0.05, 30.0, 4),
                                               "chosen_lengths": rng.integers(1, 30, 4)}, p))
    for i, p in enumerate(_grid(beta=[0.1, 1.0])):
        rng = np.random.default_rng(695 + i)
        add(Case("preference.orpo", _label(p), {"chosen_logps": np.array([-1e-4, -0.3, -2.0, -5.0]),
                                                "rejected_logps": -rng.uniform(1e-3, 4.0, 4)}, p))
    for i, p in enumerate(_grid(beta=[0.1, 0.5], desirable_weight=[1.0, 1.33])):
        rng = np.random.default_rng(698 + i)
        lp = -rng.uniform(0.5, 30.0, 5)
        add(Case("preference.kto", _label(p), {"policy_logps": lp, "reference_logps": lp + rng.normal(0, 3.0, 5),
                                               "desirable": np.array([1.0, 0.0, 1.0, 0.0, 0.0]),
                                               "kl_policy_logps": -rng.uniform(0.5, 30.0, 3),
                                               "kl_reference_logps": -rng.uniform(0.5, 30.0, 3)}, p))
    for lt in ("sigmoid", "hinge", "ipo", "robust"):
        # βΔ = ±1e4 (β = 1) and the hinge kink βΔ = 1 exactly (β = 1: Δ = 1).
        ext = {"policy_chosen_logps": np.array([-1.0, -10001.0, -3.0, -2.0]),
               "policy_rejected_logps": np.array([-10001.0, -1.0, -2.0, -3.5]),
               "reference_chosen_logps": np.array([-1.0, -1.0, -2.0, -2.0]),
               "reference_rejected_logps": np.array([-1.0, -1.0, -2.0, -2.5])}
        add(Case("dpo.loss", f"extreme:βΔ=±1e4,{lt}", ext,
                 {"beta": 1.0, "loss_type": lt, "label_smoothing": 0.1}))

    # grpo.advantages
    for i, p in enumerate(_grid(scale=["group", "batch", "none"], std_ddof=[0, 1], eps=[0.0, 1e-4],
                                degenerate=["zero", "drop", "raw"])):
        rng = np.random.default_rng(700 + i)
        r = rng.integers(0, 3, (4, 4)).astype(np.float64) + rng.normal(0, 0.1, (4, 4))
        r[2] = 0.3  # a constant group
        r[3] = [0.0, 1.0, 1.0, 0.0]  # [reading-math-3]
        add(Case("grpo.advantages", _label(p), {"rewards": r}, p, 16))
    for deg in ("zero", "drop", "raw"):
        for sc in ("group", "batch", "none"):
            rng = np.random.default_rng(730)
            add(Case("grpo.advantages", f"G=1,scale={sc},degenerate={deg}",
                     {"rewards": rng.normal(0, 1, (3, 1))},
                     {"scale": sc, "degenerate": deg, "eps": 1e-3}, 3))
    # the leave-one-out baseline (RLOO) and the batch whitening (REINFORCE++)
    for i, p in enumerate(_grid(scale=["whiten", "none", "group"], std_ddof=[0, 1], degenerate=["zero", "raw"],
                                baseline=["mean", "leave-one-out", "none"])):
        rng = np.random.default_rng(740 + i)
        r = rng.integers(0, 3, (4, 4)).astype(np.float64) + rng.normal(0, 0.1, (4, 4))
        r[2] = 0.3  # a constant group
        add(Case("grpo.advantages", _label(p), {"rewards": r}, p, 16))
        add(Case("grpo.advantages", "G=1," + _label(p), {"rewards": rng.normal(0, 1, (3, 1))}, p, 3))

    # grpo.clip
    for i, p in enumerate(_grid(eps_low=[0.2, 0.1], eps_high=[None, 0.28], dual_clip=[None, 3.0])):
        rng = np.random.default_rng(800 + i)
        ratios = np.array([0.5, 0.85, 0.95, 1.0, 1.13, 1.25, 1.6, 4.0] * 2)  # off every band edge
        old = _logp(rng, 16)
        adv = np.concatenate([rng.uniform(0.1, 2, 7), [0.0], -rng.uniform(0.1, 2, 8)])
        add(Case("grpo.clip", _label(p), {"logp": old + np.log(ratios), "old_logp": old,
                                          "advantages": adv}, p))
    for dual in (None, 3.0):  # log ρ = ±25 and ±15 against verl's ±20 clamp, both signs of A
        old = np.array([-30.0, -1.0, -30.0, -1.0, -20.0, -2.0, -20.0, -2.0])
        lp = np.array([-5.0, -26.0, -5.0, -26.0, -5.0, -17.0, -5.0, -17.0])
        add(Case("grpo.clip", f"log_ratio_clamp=20,dual_clip={dual}", {"logp": lp, "old_logp": old,
                 "advantages": np.array([1.0, 1.0, -1.0, -1.0, 0.5, 0.5, -0.5, -0.5])},
                 {"dual_clip": dual, "log_ratio_clamp": 20.0}))
    old = np.array([-60.0, -1.0, -60.0, -1.0, -5.0, -5.0])
    lp = np.array([-10.0, -51.0, -10.0, -51.0, -5.0, -5.0])
    add(Case("grpo.clip", "extreme:ratios e^±50", {"logp": lp, "old_logp": old,
             "advantages": np.array([1.5, 1.5, -1.5, -1.5, 0.0, 2.0])}, {"dual_clip": 3.0}))

    # grpo.aggregate
    for i, p in enumerate(_grid(mode=["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                      "seq-mean-token-sum-norm"], norm_length=[None, 7.0]) + _grid(mode=["seq-mean-token-mean", "token-mean"],
                                                                              mean_eps=[0.25, 1e-8])):
        rng = np.random.default_rng(900 + i)
        m = _mask(rng, 3, 5)
        add(Case("grpo.aggregate", _label(p),
                 {"values": _junk(rng.normal(0, 2, (3, 5)), m, rng), "mask": m}, p, 15))
    # mean_eps_scope 'every' (torchtune's masked_mean: token-mean's count + ε too)
    for i, p in enumerate(_grid(mode=["token-mean", "seq-mean-token-mean"], mean_eps=[0.25, 1e-3],
                                mean_eps_scope=["every"])):
        rng = np.random.default_rng(940 + i)
        m = _mask(rng, 3, 5)
        add(Case("grpo.aggregate", _label(p),
                 {"values": _junk(rng.normal(0, 2, (3, 5)), m, rng), "mask": m}, p, 15))

    # grpo.loss
    grid = (_grid(aggregation=["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                               "seq-mean-token-sum-norm"], kl_kind=["k1", "k2", "k3"],
                  kl_ratio_weight=[False, True])
            + _grid(eps_high=[0.28], dual_clip=[3.0], kl_clamp=[0.05], beta=[0.04, 0.0],
                    aggregation=["seq-mean-token-sum-norm"], norm_length=[None, 6.0])
            + _grid(ratio_level=["sequence", "sequence-token"], aggregation=["token-mean", "seq-mean-token-mean"],
                    kl_ratio_weight=[False, True], dual_clip=[None, 1.1])
            + _grid(ratio_level=["sequence"], policy_loss=["gmpo"], eps_low=[0.3, 0.2], eps_high=[None, 0.5],
                    aggregation=["token-mean", "seq-mean-token-mean"])
            + _grid(log_ratio_clamp=[0.3], eps_low=[0.5], kl_ratio_weight=[False, True], dual_clip=[None, 1.2])
            + _grid(kl_aggregation=["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"], aggregation=["token-mean", "seq-mean-token-mean"],
                    mean_eps=[0.0, 0.25])
            + _grid(policy_loss=["cispo"], cispo_clip=["upper", "both", "raw-upper"], kl_kind=["k3", "abs"],
                    kl_ratio_weight=[False, True])
            + _grid(policy_loss=["sapo"], sapo_tau_pos=[1.0, 2.0], kl_kind=["abs"],
                    aggregation=["token-mean", "seq-mean-token-mean"], kl_ratio_weight=[False, True])
            # the log-ratio clamp on CISPO's weight and SAPO's gate (verl 0.9.1 clamps both)
            + _grid(policy_loss=["cispo", "sapo"], log_ratio_clamp=[0.3], kl_ratio_weight=[False, True],
                    kl_aggregation=[None, "token-mean"], aggregation=["seq-mean-token-mean"])
            # vector set 1.5.0: REINFORCE, and KL-Cov's own top-k (selections given: below)
            + _grid(policy_loss=["reinforce"], aggregation=["token-mean", "seq-mean-token-mean"], kl_kind=["k3", "abs"])
            + _grid(policy_loss=["kl-cov"], kl_cov_ratio=[0.2, 0.5], kl_cov_coef=[1.0, 0.5])
            # vector set 1.7.0: ε in token-mean's count too
            + _grid(aggregation=["token-mean"], kl_aggregation=[None, "seq-mean-token-mean"], mean_eps=[0.25],
                    mean_eps_scope=["every"]))
    for i, p in enumerate(grid):
        rng = np.random.default_rng(1000 + i)
        m = _mask(rng, 3, 5)
        lp = _logp(rng, (3, 5))
        add(Case("grpo.loss", _label(p), {
            "logp": _junk(lp, m, rng), "old_logp": _junk(lp + rng.normal(0, 0.3, (3, 5)), m, rng),
            "ref_logp": _junk(lp + rng.normal(0, 0.5, (3, 5)), m, rng),
            "advantages": rng.normal(0, 1, 3), "mask": m}, p, 15))
    rng = np.random.default_rng(1050)
    m = np.array([[1, 1, 1, 0], [1, 1, 0, 0]])
    add(Case("grpo.loss", "extreme:ratios e^±50", {
        "logp": np.array([[-10.0, -51.0, -2.0, -1e4], [-10.0, -51.0, 3.0, 1e4]]),
        "old_logp": np.array([[-60.0, -1.0, -2.0, 0.0], [-60.0, -1.0, -1e4, -1e4]]),
        "ref_logp": np.array([[-11.0, -50.0, -2.5, 1e4], [-9.0, -52.0, 0.0, -1e4]]),
        "advantages": np.array([1.0, -1.0]), "mask": m},
        {"beta": 0.04, "dual_clip": 3.0, "aggregation": "token-mean"}, 8))
    for policy in ("clip-cov", "kl-cov"):  # a given selection: valid tokens only (the junk must not leak)
        for i, agg in enumerate(("token-mean", "seq-mean-token-mean")):
            rng = np.random.default_rng(1060 + i)
            m = _mask(rng, 3, 5)
            lp = _logp(rng, (3, 5))
            chosen = m * (rng.random((3, 5)) < 0.4)
            add(Case("grpo.loss", f"{policy},selected,aggregation={agg}", {
                "logp": _junk(lp, m, rng), "old_logp": _junk(lp + rng.normal(0, 0.3, (3, 5)), m, rng),
                "ref_logp": _junk(lp + rng.normal(0, 0.5, (3, 5)), m, rng), "advantages": rng.normal(0, 1, 3),
                "mask": m, "selected": chosen}, {"policy_loss": policy, "aggregation": agg}, 15))
    # vector set 1.7.0: the rollout correction's weight on the policy term (junk weights at masked slots)
    for i, p in enumerate(_grid(policy_loss=["ppo-clip", "cispo", "sapo", "reinforce"],
                                aggregation=["token-mean", "seq-mean-token-mean"], kl_ratio_weight=[False, True])
                          + _grid(ratio_level=["sequence", "sequence-token"], aggregation=["seq-mean-token-sum"])
                          + _grid(ratio_level=["sequence"], policy_loss=["gmpo"], aggregation=["token-mean"])):
        if p.get("policy_loss") == "reinforce" and p["kl_ratio_weight"]:
            continue
        rng = np.random.default_rng(1080 + i)
        m = _mask(rng, 3, 5)
        lp = _logp(rng, (3, 5))
        w = np.minimum(np.exp(rng.normal(0, 0.8, (3, 5))), 3.0) * (rng.random((3, 5)) > 0.2)
        add(Case("grpo.loss", "is_weight," + _label(p), {
            "logp": _junk(lp, m, rng), "old_logp": _junk(lp + rng.normal(0, 0.3, (3, 5)), m, rng),
            "ref_logp": _junk(lp + rng.normal(0, 0.5, (3, 5)), m, rng), "advantages": rng.normal(0, 1, 3),
            "mask": m, "is_weight": w}, {"beta": 0.1, **p}, 15))

    # gae.advantages (observation tokens inside row 0, trailing padding elsewhere) and gae.kl_rewards
    for i, p in enumerate(_grid(gamma=[1.0, 0.95], lam=[1.0, 0.8], whiten=["none", "centred", "keep-mean"],
                                std_ddof=[0, 1], masked_tokens=["skip", "zero"])):
        rng = np.random.default_rng(1200 + i)
        m = np.ones((3, 6))
        m[0, 2:4] = 0.0
        m[1, 4:] = 0.0
        add(Case("gae.advantages", _label(p), {"rewards": rng.normal(0, 0.5, (3, 6)), "values": rng.normal(0, 1, (3, 6)),
                                               "mask": m}, p, 6))
    # whiten_eps (TRL's whiten: μ and σ² over N + ε, rsqrt(σ² + ε))
    for i, p in enumerate(_grid(whiten=["centred", "keep-mean"], std_ddof=[0, 1], whiten_eps=[1e-8, 0.5])):
        rng = np.random.default_rng(1250 + i)
        m = np.ones((3, 6))
        m[0, 2:4] = 0.0
        add(Case("gae.advantages", _label(p), {"rewards": rng.normal(0, 0.5, (3, 6)), "values": rng.normal(0, 1, (3, 6)),
                                               "mask": m}, p, 6))
    for i, p in enumerate(_grid(beta=[0.05, 1.0], kind=["k1", "k2", "k3"], clamp=[None, 1.0])):
        rng = np.random.default_rng(1300 + i)
        lp = _logp(rng, (3, 6))
        m = np.ones((3, 6))
        m[2, 3:] = 0.0
        add(Case("gae.kl_rewards", _label(p), {"scores": rng.normal(0, 1, 3), "logp": lp,
                                               "ref_logp": lp + rng.normal(0, 1.0, (3, 6)), "mask": m}, p, 6))
    # grpo.rollout_correction (no gradient: the harness's leak probe and the values)
    grid = (_grid(level=["token", "sequence"], correction=["truncate", "mask"], seq_log_ratio=["sum", "mean"],
                  log_ratio_clamp=[None, 0.5], lower=[None, 0.5])
            + _grid(level=["token", "sequence"], correction=["mask"], seq_log_ratio=["mean"],
                    kept_weight=["token-ratio", "one"], lower=[0.7]))
    for i, p in enumerate(grid):
        rng = np.random.default_rng(1080 + i)
        m = _mask(rng, 3, 6)
        lp = _logp(rng, (3, 6))
        add(Case("grpo.rollout_correction", _label(p),
                 {"old_logp": _junk(lp, m, rng), "rollout_logp": _junk(lp + rng.normal(0, 0.3, (3, 6)), m, rng),
                  "mask": m}, p, 6))

    # moe.router_z_loss
    for i, masked in enumerate((False, True)):
        rng = np.random.default_rng(1500 + i)
        z = rng.normal(0, 2, (5, 8)) + rng.normal(0, 2, (5, 1))
        inputs = {"router_logits": z}
        if masked:
            z[1] = 1e4
            inputs["mask"] = np.array([1, 0, 1, 1, 0])
        add(Case("moe.router_z_loss", "masked" if masked else "defaults", inputs, {}, 40))
    # x − lse at logits ~1e4 carries an absolute error u·1e4: softmax (the gradient) is that ill-conditioned
    add(Case("moe.router_z_loss", "extreme:logits±1e4", {
        "router_logits": np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4], [9999.5, 1e4, -3.0]])}, {}, 9, cond=1e4))

    # moe.load_balancing (continuous logits: a tie at a top-k boundary has probability 0 in float64,
    # and where rounding to a low dtype makes one both sides take the lower index)
    for i, p in enumerate(_grid(form=["switch", "concatenated", "per-layer-sum", "sequence"], top_k=[1, 2])):
        rng = np.random.default_rng(1600 + i)
        z = rng.normal(0, 2, (6, 5))
        z[3] = 40.0
        add(Case("moe.load_balancing", _label(p) + ",masked", {"router_logits": z, "mask": np.array([1, 1, 1, 0, 1, 1])},
                 p, 30))
        if p["form"] != "switch":
            add(Case("moe.load_balancing", _label(p) + ",layers", {"router_logits": rng.normal(0, 2, (3, 4, 6))},
                     p, 72))
    add(Case("moe.load_balancing", "sequence,seq_len=2", {"router_logits": np.random.default_rng(1620).normal(0, 2, (6, 4))},
             {"form": "sequence", "seq_len": 2, "top_k": 2}, 24))
    # fraction_norm 'top_k' (Megatron-core, OLMo-core: f/k)
    for i, p in enumerate(_grid(form=["switch", "concatenated", "per-layer-sum"], top_k=[2, 3],
                                fraction_norm=["top_k"])):
        rng = np.random.default_rng(1640 + i)
        z = rng.normal(0, 2, (6, 5))
        z[3] = 40.0
        add(Case("moe.load_balancing", _label(p) + ",masked", {"router_logits": z, "mask": np.array([1, 1, 1, 0, 1, 1])},
                 p, 30))
        if p["form"] != "switch":
            add(Case("moe.load_balancing", _label(p) + ",layers", {"router_logits": rng.normal(0, 2, (3, 4, 6))},
                     p, 72))

    # ppo.entropy_bonus (padding holds 1e4)
    for i, p in enumerate(_grid(aggregation=["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                             "seq-mean-token-sum-norm"], mean_eps=[0.0, 1e-8])):
        rng = np.random.default_rng(1700 + i)
        m = _mask(rng, 3, 5)
        h = np.where(m == 1, rng.uniform(0.0, 4.0, (3, 5)), 1e4)
        add(Case("ppo.entropy_bonus", _label(p), {"entropy": h, "mask": m}, {**p, "coef": 0.05}, 15))
    for i, p in enumerate(_grid(aggregation=["token-mean", "seq-mean-token-mean"], mean_eps=[0.25],
                                mean_eps_scope=["every"])):
        rng = np.random.default_rng(1720 + i)
        m = _mask(rng, 3, 5)
        h = np.where(m == 1, rng.uniform(0.0, 4.0, (3, 5)), 1e4)
        add(Case("ppo.entropy_bonus", _label(p), {"entropy": h, "mask": m}, {**p, "coef": 0.05}, 15))

    # ppo.value_loss (padding holds far-off junk; steps up to several ε)
    for i, p in enumerate(_grid(clip_range_value=[None, 0.2], half=[False, True],
                                aggregation=["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                             "seq-mean-token-sum-norm"])):
        rng = np.random.default_rng(1400 + i)
        m = _mask(rng, 3, 5)
        values = rng.normal(0, 1, (3, 5))
        add(Case("ppo.value_loss", _label(p), {
            "values": _junk(values, m, rng, 1e3), "old_values": _junk(values - rng.normal(0, 0.4, (3, 5)), m, rng, 1e3),
            "returns": _junk(values + rng.normal(0, 1, (3, 5)), m, rng, 1e3), "mask": m}, p, 15))

    # reward.pairwise
    for i, p in enumerate(_grid(form=["sigmoid", "log-exp"], center_rewards_coefficient=[None, 0.01, 1.0])):
        rng = np.random.default_rng(1300 + i)
        chosen, rejected = rng.normal(0, 2, 6), rng.normal(0, 2, 6)
        add(Case("reward.pairwise", _label(p), {"chosen_rewards": chosen, "rejected_rewards": rejected,
                                                 "margin": rng.uniform(0, 1, 6)}, p, 6))
    add(Case("reward.pairwise", "extreme:d=±1e4 and ±100", {
        "chosen_rewards": np.array([1e4, -1e4, 100.0, 0.0, 0.5]),
        "rejected_rewards": np.array([-1e4, 1e4, 0.0, 100.0, 0.25])}, {"form": "log-exp"}, 5))

    # proximal_kl.future_cost
    for i, p in enumerate(_grid(clip=[None, 0.5], window=[None, 1, 2, 10])):
        rng = np.random.default_rng(1100 + i)
        m = _mask(rng, 3, 6)
        lp = _logp(rng, (3, 6))
        add(Case("proximal_kl.future_cost", _label(p),
                 {"logp": _junk(lp, m, rng, 50.0), "ref_logp": lp + rng.normal(0, 0.5, (3, 6)),
                  "mask": m}, p, 6))

    # proximal_kl.loss
    grid = (_grid(aggregation=["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                               "seq-mean-token-sum-norm"], ratio_clip=[None, 0.2],
                  ratio_cap=[None, 1.3])
            + _grid(future_clip=[None, 0.7], future_window=[None, 2], beta=[0.04, 0.5]))
    for i, p in enumerate(grid):
        rng = np.random.default_rng(1200 + i)
        m = _mask(rng, 3, 5)
        lp = _logp(rng, (3, 5))
        add(Case("proximal_kl.loss", _label(p), {
            "logp": _junk(lp, m, rng),
            "behavior_logp": _junk(lp + rng.normal(0, 0.4, (3, 5)), m, rng),
            "ref_logp": lp + rng.normal(0, 0.5, (3, 5)), "advantages": rng.normal(0, 1, 3),
            "mask": m}, p, 15))
    add(Case("proximal_kl.loss", "extreme:ratios e^±50", {
        "logp": np.array([[-10.0, -51.0, -2.0, -1e4], [-10.0, -51.0, 3.0, 1e4]]),
        "behavior_logp": np.array([[-60.0, -1.0, -2.0, 0.0], [-60.0, -1.0, -1e4, -1e4]]),
        "ref_logp": np.array([[-11.0, -50.0, -2.5, -3.0], [-9.0, -52.0, 0.0, -1.0]]),
        "advantages": np.array([1.0, -1.0]), "mask": np.array([[1, 1, 1, 0], [1, 1, 0, 0]])},
        {"ratio_cap": 2.0}, 8))

    # lm.cross_entropy, lm.token_logprobs, lm.entropy: ignored tokens, −inf off the label, every
    # reduction with smoothing, z-loss and the cap; saturated rows at ±1e4
    for i, p in enumerate(_grid(reduction=["mean", "sum", "none"], label_smoothing=[0.0, 0.3], z_loss=[0.0, 0.01],
                                softcap=[None, 3.0])
                          + _grid(normalizer=[2.5, 40.0], ignore_index=[-100, 1])):
        rng = np.random.default_rng(1200 + i)
        z = _logits_lm(rng, (4, 7))
        y = np.array([3, -100, 0, 6]) if p.get("ignore_index", -100) == -100 else np.array([3, 1, 0, 6])
        if not p.get("label_smoothing") or p.get("softcap"):
            z[2, 4] = NEG_INF
        add(Case("lm.cross_entropy", _label(p), {"logits": z, "labels": y}, p, 28))
    # smoothing over the V − 1 classes other than the label (Megatron-core)
    for i, p in enumerate(_grid(reduction=["mean", "none"], label_smoothing=[0.3], z_loss=[0.0, 0.01],
                                softcap=[None, 3.0], smoothing_classes=["others"])):
        rng = np.random.default_rng(1250 + i)
        z = _logits_lm(rng, (4, 7))
        if p.get("softcap"):
            z[2, 4] = NEG_INF
        add(Case("lm.cross_entropy", _label(p), {"logits": z, "labels": np.array([3, -100, 0, 6])}, p, 28))
    huge = np.array([[1e4, -1e4, 0.0, 9999.0], [-1e4, 1e4, 1e4, -1e4], [1e4, -1e4, -1e4, -1e4]])
    for p in ({}, {"reduction": "none"}, {"softcap": 30.0}):
        add(Case("lm.cross_entropy", "extreme:logits±1e4," + _label(p), {"logits": huge, "labels": np.array([0, 0, 0])},
                 p, 12))
    for i, T in enumerate((1.0, 0.5, 2.0)):
        rng = np.random.default_rng(1300 + i)
        z = _logits_lm(rng, (3, 6))
        z[1, 2] = NEG_INF
        add(Case("lm.token_logprobs", f"T={T}", {"logits": z, "labels": np.array([0, 3, 5])}, {"temperature": T}, 6))
        add(Case("lm.entropy", f"T={T}", {"logits": z}, {"temperature": T}, 6))
    add(Case("lm.token_logprobs", "extreme:logits±1e4", {"logits": huge, "labels": np.array([3, 0, 1])}, {}, 4))
    add(Case("lm.entropy", "extreme:logits±1e4", {"logits": huge}, {}, 4))
    add(Case("lm.entropy", "equal logits", {"logits": np.full((2, 5), 1.5)}, {"temperature": 0.5}, 5))
    # lm.linear_cross_entropy: every reduction with z-loss and the cap, with and without a bias
    for i, p in enumerate(_grid(reduction=["mean", "sum", "none"], z_loss=[0.0, 0.01], softcap=[None, 3.0])
                          + _grid(label_smoothing=[0.2], normalizer=[2.5, 40.0])):
        rng = np.random.default_rng(1400 + i)
        inputs = {"hidden": rng.normal(0.0, 1.5, (4, 3)), "weight": rng.normal(0.0, 1.0, (7, 3)),
                  "labels": np.array([3, -100, 0, 6])}
        if i % 2:
            inputs["bias"] = rng.normal(0.0, 1.0, 7)
        add(Case("lm.linear_cross_entropy", _label(p) + (",bias" if i % 2 else ""), inputs, p, 28))
    for i, p in enumerate(_grid(reduction=["mean", "none"], label_smoothing=[0.2], z_loss=[0.0, 0.01],
                                smoothing_classes=["others"])):
        rng = np.random.default_rng(1450 + i)
        inputs = {"hidden": rng.normal(0.0, 1.5, (4, 3)), "weight": rng.normal(0.0, 1.0, (7, 3)),
                  "labels": np.array([3, -100, 0, 6])}
        if i % 2:
            inputs["bias"] = rng.normal(0.0, 1.0, 7)
        add(Case("lm.linear_cross_entropy", _label(p) + (",bias" if i % 2 else ""), inputs, p, 28))
    return out


def _logits_lm(rng, shape):
    return rng.normal(0.0, 2.5, shape)


# ------------------------------------------------------------------------------ running

def _exact_module(family):
    return importlib.import_module(f"lossproof.refimpl.exact.{family}")


def _torch_module(family):
    return importlib.import_module(f"lossproof.refimpl.torch.{family}")


def _to_float(a) -> np.ndarray:
    return np.vectorize(float, otypes=[np.float64])(np.asarray(a, dtype=object))


def _eps(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps


def _ulp(w: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """Spacing of ``dtype`` at |w| (the subnormal spacing below the smallest normal)."""
    fi = torch.finfo(dtype)
    a = np.maximum(np.abs(w), fi.tiny)
    return np.exp2(np.floor(np.log2(a))) * fi.eps


def _compare(case: Case, dtype_name: str, what: str, got: torch.Tensor, want) -> float:
    dtype = DTYPES[dtype_name]
    g = got.detach().to("cpu", torch.float64).numpy()
    w = _to_float(want)
    assert g.shape == w.shape, f"{case.id} {what}: shape {g.shape} != {w.shape}"
    # Beyond the dtype's range the correctly rounded result is ±inf.
    over = np.abs(w) > torch.finfo(dtype).max
    assert (g[over] == np.sign(w[over]) * np.inf).all(), f"{case.id} {what}: overflow {g[over]}"
    g, w = g[~over], w[~over]
    assert np.isfinite(g).all(), f"{case.id} {what}: non-finite result {g}"
    if not w.size:
        return 0.0
    scale = float(np.max(np.abs(w)))
    err = np.abs(g - w)
    if dtype == torch.float64:
        bound = np.full(w.shape, F64_REL * scale)
        units_of = 1.0
    else:
        units_of = _eps(dtype) * scale * max(1.0, math.log2(case.n)) * case.cond
        bound = K_UNITS * units_of + _ulp(w, dtype)
    key = (case.objective, dtype_name)
    normal = np.abs(w) >= torch.finfo(dtype).tiny  # a subnormal result is judged by its ulp
    rel = float(err[normal].max()) / scale if scale and normal.any() else 0.0
    WORST_REL[key] = max(WORST_REL.get(key, 0.0), rel)
    if dtype != torch.float64 and scale:
        WORST[key] = max(WORST.get(key, 0.0), float(np.max(np.maximum(err - _ulp(w, dtype), 0))) / units_of)
    bad = err > bound
    assert not bad.any(), (f"{case.id} {what} ({dtype_name}): |err| {err.max():.3e} > bound "
                           f"{bound[bad].min():.3e} (scale {scale:.3e})\n got  {g}\n want {w}")
    return rel


def rounded_inputs(case: Case, dtype: torch.dtype, device: str):
    """(torch kwargs, exact kwargs, names of differentiated inputs) with floats rounded to dtype."""
    spec = catalog.get(case.objective)
    kinds = {i.name: i.kind for i in spec.inputs}
    t_in, e_in = {}, {}
    for name, x in case.inputs.items():
        if kinds[name] == "float":
            t = torch.tensor(np.asarray(x, dtype=np.float64), dtype=torch.float64).to(dtype)
            e_in[name] = t.to(torch.float64).numpy().tolist()
            t_in[name] = t.to(device).requires_grad_(name in spec.grads)
        else:
            e_in[name] = np.asarray(x).tolist()
            t_in[name] = torch.tensor(np.asarray(x), dtype=torch.int64, device=device)
    return t_in, e_in, list(spec.grads_of(case.inputs))


def run(case: Case, dtype_name: str, device: str = "cpu", seed: int = 0) -> None:
    """Values and VJPs of refimpl.torch against refimpl.exact for one case and dtype."""
    dtype = DTYPES[dtype_name]
    family, name = case.objective.split(".")
    t_fn = getattr(_torch_module(family), name)
    e_mod = _exact_module(family)
    t_in, e_in, wrt = rounded_inputs(case, dtype, device)

    got = t_fn(**t_in, **case.params)
    want = getattr(e_mod, name)(**e_in, **case.params)
    multi = isinstance(want, dict)
    got_d = got if multi else {"": got}
    want_d = want if multi else {"": want}
    assert set(got_d) == set(want_d), f"{case.id}: outputs {set(got_d)} != {set(want_d)}"
    for out_name, g in got_d.items():
        assert g.dtype == dtype, f"{case.id} {out_name}: dtype {g.dtype}, want {dtype}"
        assert g.device.type == torch.device(device).type
        _compare(case, dtype_name, f"value {out_name}".strip(), g, want_d[out_name])
    if not wrt:
        return

    rng = np.random.default_rng(seed)
    cot_t, cot_e = {}, {}
    for out_name, g in got_d.items():
        c = torch.tensor(rng.normal(0, 1, tuple(g.shape)), dtype=torch.float64).to(dtype)
        cot_t[out_name] = c.to(device)
        cot_e[out_name] = c.to(torch.float64).numpy().tolist()
    # A detached output (KTO's reference point z0) carries no graph; its cotangent still goes to
    # the exact VJP, which must ignore it likewise.
    live = [k for k in got_d if got_d[k].requires_grad]
    grads = torch.autograd.grad([got_d[k] for k in live], [t_in[w] for w in wrt], [cot_t[k] for k in live])
    want_g = getattr(e_mod, name + "_vjp")(cot_e if multi else cot_e[""], **e_in, **case.params)
    for w, g in zip(wrt, grads):
        assert g.dtype == dtype, f"{case.id} grad {w}: dtype {g.dtype}, want {dtype}"
        _compare(case, dtype_name, f"grad {w}", g, want_g[w])
        # Masked-out positions and impossible tokens: exactly zero gradient.
        for m_name, x in case.inputs.items():
            if m_name == "mask":
                assert (g.detach().cpu()[torch.tensor(x) == 0] == 0).all(), f"{case.id}: masked grad"
        x = np.asarray(case.inputs[w], dtype=np.float64)
        if np.isneginf(x).any():
            assert (g.detach().cpu().double().numpy()[np.isneginf(x)] == 0).all(), f"{case.id}: -inf grad"


def supports_dtype(case: Case, dtype_name: str) -> bool:
    return dtype_name in ("float64", "float32") or catalog.get(case.objective).low_precision


def summary() -> str:
    lines = ["worst |err|/scale per objective and dtype (values and gradients; low precision "
             "includes the output's own rounding; in parentheses the error beyond that rounding "
             "in units of eps·scale·log2(n)·cond)"]
    objectives = sorted({k[0] for k in WORST_REL})
    for o in objectives:
        cells = []
        for d in DTYPES:
            if (o, d) in WORST_REL:
                cell = f"{d}={WORST_REL[(o, d)]:.2e}"
                if (o, d) in WORST:
                    cell += f" ({WORST[(o, d)]:.2f} u)"
                cells.append(cell)
        lines.append(f"  {o:26s} " + "  ".join(cells))
    return "\n".join(lines)
