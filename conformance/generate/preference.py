"""Vectors for the reference-free and unpaired preference objectives: ``preference.simpo``
(Meng et al. 2024 eq. 6), ``preference.cpo`` (Xu et al. 2024 eq. 3), ``preference.orpo``
(Hong et al. 2024 eqs. 6-7) and ``preference.kto`` (Ethayarajh et al. 2024 eq. 7); formulas in
refimpl/exact/preference.py.

One group per objective, the parameters vary inside it; since vector set 1.3.0 ``preference.cpo``
also has the convention ``nll_aggregation`` of the chosen NLL that ``cpo_alpha`` adds (CPO §3's
L_NLL), one group per normalisation, with ``chosen_lengths`` as an input (the cases before 1.3.0
have cpo_alpha = 0 and keep their uids). The
logged rewards (SimPO, CPO, ORPO) and KTO's reference point z0 are detached metrics in every
library, so their cotangents are zero; the loss cotangents are random multiples of 1/64.
"""
from __future__ import annotations

import math

import mpmath

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated

NOTES = {
    "InvalidNllTerm": {"category": "invalid", "description": "Arguments of the NLL term outside their domain "
                       "under the group's nll_aggregation (chosen_lengths missing, 0 or of another shape, an "
                       "unknown or missing aggregation while the weight is > 0); run for the targets that declare "
                       "that nll_aggregation; must be rejected. A negative weight is InvalidInput.",
                       "bugType": "input-validation",
                       "effect": "A missing or malformed NLL-term argument is accepted and silently changes or "
                                 "drops the term."},
    "Random": {"category": "random", "description": "Random log-probabilities (sequence sums down to about −300, "
               "or per-token averages for ORPO), batches of up to 16; half the cases rounded to float32.",
               "bugType": "formula"},
    "DetachedMetrics": {"category": "convention", "description": "The logged rewards (SimPO, CPO, ORPO) and KTO's "
                        "reference point z0 are detached in TRL 1.16.0 and Liger 0.8.5: their cotangents are zero "
                        "and the gradient comes from the losses alone.",
                        "bugType": "gradient",
                        "effect": "Logged rewards or KTO's z0 that carry a gradient add unintended terms to the "
                                  "backward pass."},
    "LengthNormalised": {"category": "edge", "description": "SimPO divides each sequence log-probability by its "
                         "length: pairs whose sums favour one response and whose per-token averages favour the "
                         "other (the length bias SimPO removes).",
                         "bugType": "normalization",
                         "effect": "SimPO's per-token average replaced by the sum (or the reverse): the length bias "
                                   "the method removes comes back."},
    "HugeMargin": {"category": "numerics", "description": "The logistic's argument at about ±1e4: log σ must be "
                   "formed without overflow.",
                   "bugType": "overflow",
                   "effect": "log σ formed as log(sigmoid(x)) or log(1 + exp(−x)) overflows or underflows to an "
                             "infinite loss at large margins."},
    "NearCertain": {"category": "numerics", "description": "ORPO: average log-probabilities within 1e-6 of 0, where "
                    "log(1 − e^p) must be formed as log(−expm1(p)) (1 − exp(p) loses every digit).",
                    "bugType": "cancellation",
                    "effect": "log(1 − e^p) formed as log(1 − exp(p)) or with an offset loses every digit as p → 0.",
                    "links": ["https://github.com/axolotl-ai-cloud/axolotl/pull/3910",
                              "https://github.com/hpcaitech/ColossalAI/pull/6407"]},
    "ClampedReference": {"category": "edge", "description": "KTO: the batch KL estimate is negative, so z0 = 0 "
                         "(clamped, as TRL 1.16.0 computes it).",
                         "bugType": "clamp",
                         "effect": "KTO's z0 = max(0, KL) without the clamp, or with a gradient through it."},
    "ClassWeights": {"category": "convention", "description": "KTO with λ_D ≠ λ_U (the paper's weights for imbalanced "
                     "desirable/undesirable counts).",
                     "bugType": "convention",
                     "effect": "λ_D and λ_U swapped or ignored: the classes are weighted otherwise."},
    "LowPrecision": {"category": "edge", "description": "Inputs exactly representable in bfloat16 or float16 (or "
                     "both), judged in those dtypes.",
                     "bugType": "precision"},
    "NllTerm": {"category": "convention", "description": "cpo_alpha α > 0: each pair's loss adds α times the NLL "
                "of its chosen response (CPO §3: L_prefer + L_NLL), normalised by nll_aggregation: −c "
                "('seq-mean-token-sum', the paper's −log π(y_w|x)), −c/n per pair ('seq-mean-token-mean'), or the "
                "pair's share −c·B/Σn of the batch token mean ('token-mean': TRL 1.16.0 CPOTrainer's cross-entropy "
                "on the chosen tokens, Liger 0.8.5 compute_nll_loss); c = chosen_logps (sums), n = chosen_lengths.",
                "bugType": "normalization",
                "effect": "The CPO NLL term normalised by another count or weighted wrongly."},
    "InvalidInput": {"category": "invalid", "description": "Input or parameter outside the objective's domain (NaN "
                     "or inf log-probabilities, shapes that disagree, β ≤ 0, lengths < 1, γ < 0, an average "
                     "log-probability of 0 for ORPO, a desirable flag other than 0/1, class weights ≤ 0); must be "
                     "rejected.",
                     "bugType": "input-validation"},
}

GROUPS = {
    "simpo": "SimPO (Meng et al. 2024, arXiv 2405.14734) §2.2 eq. 6; TRL 1.16.0 experimental/cpo/cpo_trainer.py "
             "loss_type='simpo' with cpo_alpha = 0 (average log-probabilities); Liger 0.8.5 chunked_loss/simpo_loss.py",
    "cpo": "CPO (Xu et al. 2024, arXiv 2401.08417) §3 eq. 3, the preference term L_prefer; TRL 1.16.0 "
           "experimental/cpo/cpo_trainer.py cpo_loss loss_type='sigmoid'; Liger 0.8.5 chunked_loss/cpo_loss.py",
    "orpo": "ORPO (Hong et al. 2024, arXiv 2403.07691) §4 eqs. 6-7; TRL 1.16.0 experimental/orpo/orpo_trainer.py "
            "odds_ratio_loss plus the chosen NLL; Liger 0.8.5 chunked_loss/orpo_loss.py",
    "kto": "KTO (Ethayarajh et al. 2024, arXiv 2402.01306) §4.1 eq. 7 with z0 as TRL 1.16.0 "
           "trainer/kto_trainer.py estimates it (clamped batch mean, detached); Liger 0.8.5 "
           "chunked_loss/kto_loss.py (the caller passes z0)",
    "invalid": "inputs outside the domain",
    "cpo-nll": "CPO (Xu et al. 2024, arXiv 2401.08417) §3: L_prefer + α·L_NLL, L_NLL = −log π(y_w|x) (the chosen "
               "sequence log-probability; α = 1 in the paper)",
    "cpo-token-mean": "CPO with the NLL as the batch token mean of the chosen tokens: TRL 1.16.0 "
                      "experimental/cpo/cpo_trainer.py (loss = losses.mean() + cpo_alpha·cross-entropy on the chosen "
                      "tokens; cpo_alpha 1.0); Liger 0.8.5 chunked_loss/cpo_loss.py (compute_nll_loss True, alpha 1.0: "
                      "CE sum / chosen tokens)",
    "cpo-seq-mean": "CPO with the NLL of each chosen response divided by its length (per-sequence token mean)",
}

PAIR = ("losses", "chosen_rewards", "rejected_rewards")
RANDOM = 44          # random cases per objective (half rounded to float32)
LOW = 60             # low-precision random cases per objective (2/3 on the grid both dtypes hold)


def _ct(r, n: int, outputs=PAIR, scalar=()) -> dict:
    """Random multiples of 1/64 for the losses; zero for the detached metrics."""
    out = {k: ([int(v) / 64 for v in r.integers(-128, 129, size=n)] if k == "losses" else [0.0] * n)
           for k in outputs}
    out.update({k: 0.0 for k in scalar})
    return out


def _round(xs, dtype, grid):
    if dtype:
        xs = [S.in_dtype(x, dtype) for x in xs]
    if grid:
        xs = [S.in_low(x, grid) for x in xs]
    return xs


def _note(dtype, grid) -> str:
    return f", inputs in {dtype}" if dtype else f", inputs exact in {S.grid_note(grid)}" if grid else ""


def _flags(dtype, grid, *extra) -> tuple:
    return ("Random", "DetachedMetrics") + extra + (("LowPrecision",) if grid else ())


# ----------------------------------------------------------------------------- SimPO

def _simpo_random(seed: int, dtype=None, grid=None) -> Case:
    r = S.rng(seed)
    n = int(r.integers(1, 17))
    beta = float(r.choice([2.0, 2.0, 2.5, 1.0, 10.0]))
    gamma = float(r.choice([1.0, 0.5 * beta, 0.0, 1.6]))
    eps = float(r.choice([0.0, 0.0, 0.1, 0.25]))
    lc = [int(v) for v in r.integers(1, 65, size=n)]
    lr = [int(v) for v in r.integers(1, 65, size=n)]
    avg_c = S.logprobs(r, n, low=-4.0)
    avg_r = S.logprobs_near(r, avg_c, 1.0 / beta + 0.5)
    c, rj = _round([[a * k for a, k in zip(avg_c, lc)], [a * k for a, k in zip(avg_r, lr)]], dtype, grid)
    return Case("preference.simpo", {"chosen_logps": c, "rejected_logps": rj, "chosen_lengths": lc,
                                     "rejected_lengths": lr},
                params={"beta": beta, "gamma": gamma, "label_smoothing": eps}, group="simpo",
                flags=_flags(dtype, grid), comment=f"random B={n}, β={beta:g}, γ={gamma:g}, ε={eps:g}" + _note(dtype, grid),
                cotangents=_ct(r, n), low_precision=grid is not None,
                provenance=generated(seed, "per-token averages × random lengths 1..64"))


def _simpo_fixed() -> list[Case]:
    def case(c, rj, lc, lr, flags, comment, beta=2.0, gamma=1.0, seed=0, low=False):
        return Case("preference.simpo", {"chosen_logps": c, "rejected_logps": rj, "chosen_lengths": lc,
                                         "rejected_lengths": lr},
                    params={"beta": beta, "gamma": gamma, "label_smoothing": 0.0}, group="simpo",
                    flags=flags + ("DetachedMetrics",), comment=comment, cotangents=_ct(S.rng(seed), len(c)),
                    low_precision=low, provenance=generated(seed, "fixed"))
    return [
        # Sums favour the rejected response (−40 > −60), averages favour the chosen (−1 > −4).
        case([-60.0, -12.0], [-40.0, -9.0], [60, 24], [10, 3], ("LengthNormalised",),
             "sums favour the rejected response, per-token averages the chosen", seed=1),
        case([-1.0, -20000.0], [-20000.0, -1.0], [1, 1], [1, 1], ("HugeMargin",),
             "β·(c̄ − r̄) − γ ≈ ±4e4 (β = 2, single tokens)", seed=2),
        case([-6.0, -12.5], [-6.0, -12.5], [3, 5], [3, 5], (), "equal averages: z = −γ", seed=3),
        case([-6.0, -12.5], [-6.0, -12.5], [3, 5], [3, 5], (), "equal averages, γ = 0: loss log 2", gamma=0.0,
             seed=4),
        case([-8.0, -3.0, -48.0], [-9.0, -6.0, -40.0], [4, 2, 16], [3, 4, 8], ("LowPrecision",),
             "dyadic inputs, exact in bfloat16 and float16", seed=5, low=True),
    ]


# ----------------------------------------------------------------------------- CPO

def _cpo_random(seed: int, dtype=None, grid=None) -> Case:
    r = S.rng(seed)
    n = int(r.integers(1, 17))
    beta = float(r.choice([0.1, 0.1, 0.05, 0.5, 1.0]))
    eps = float(r.choice([0.0, 0.0, 0.1, 0.25]))
    depth = float(r.choice([5.0, 50.0, 300.0]))
    c = S.logprobs(r, n, low=-depth)
    rj = S.logprobs_near(r, c, min(3.0 / beta, depth))
    c, rj = _round([c, rj], dtype, grid)
    return Case("preference.cpo", {"chosen_logps": c, "rejected_logps": rj},
                params={"beta": beta, "label_smoothing": eps}, group="cpo", flags=_flags(dtype, grid),
                comment=f"random B={n}, β={beta:g}, ε={eps:g}" + _note(dtype, grid), cotangents=_ct(r, n),
                low_precision=grid is not None, provenance=generated(seed, "sequence logprobs"))


def _cpo_fixed() -> list[Case]:
    def case(c, rj, flags, comment, beta=0.1, eps=0.0, seed=0, low=False):
        return Case("preference.cpo", {"chosen_logps": c, "rejected_logps": rj},
                    params={"beta": beta, "label_smoothing": eps}, group="cpo", flags=flags + ("DetachedMetrics",),
                    comment=comment, cotangents=_ct(S.rng(seed), len(c)), low_precision=low,
                    provenance=generated(seed, "fixed"))
    return [
        case([-1.0, -100001.0], [-100001.0, -1.0], ("HugeMargin",), "β·(c − r) = ±1e4", seed=11),
        case([-7.5, -300.0], [-7.5, -300.0], (), "c = r: loss log 2", seed=12),
        case([-7.5, -300.0], [-7.5, -300.0], (), "c = r with ε = 0.25: loss log 2", eps=0.25, seed=13),
        case([-10234.5, -9876.25], [-10240.0, -9875.0], (), "log-probabilities near −1e4, margins of order 1",
             seed=14),
        case([-8.0, -3.0, -48.0], [-9.0, -6.0, -40.0], ("LowPrecision",), "dyadic inputs, β = 0.25", beta=0.25,
             seed=15, low=True),
    ]


# ----------------------------------------------------------------------------- ORPO

def _orpo_random(seed: int, dtype=None, grid=None) -> Case:
    r = S.rng(seed)
    n = int(r.integers(1, 17))
    beta = float(r.choice([0.1, 0.1, 0.05, 0.25, 1.0]))
    c = S.logprobs(r, n, low=-6.0)
    rj = S.logprobs(r, n, low=-6.0)
    c, rj = _round([c, rj], dtype, grid)
    c, rj = ([min(v, -2.0 ** -20) for v in x] for x in (c, rj))  # rounding must not reach p = 1
    return Case("preference.orpo", {"chosen_logps": c, "rejected_logps": rj}, params={"beta": beta},
                group="orpo", flags=_flags(dtype, grid), comment=f"random B={n}, λ={beta:g}" + _note(dtype, grid),
                cotangents=_ct(r, n), low_precision=grid is not None,
                provenance=generated(seed, "average per-token logprobs in [−6, 0)"))


def _orpo_fixed() -> list[Case]:
    def case(c, rj, flags, comment, beta=0.1, seed=0, low=False):
        return Case("preference.orpo", {"chosen_logps": c, "rejected_logps": rj}, params={"beta": beta},
                    group="orpo", flags=flags + ("DetachedMetrics",), comment=comment,
                    cotangents=_ct(S.rng(seed), len(c)), low_precision=low, provenance=generated(seed, "fixed"))
    return [
        case([-1e-6, -3.0], [-2.0, -1e-7], ("NearCertain",), "average log-probabilities within 1e-6 of 0", seed=21),
        case([-1e-12, -0.5], [-0.5, -1e-12], ("NearCertain",), "p̄ = e^−1e−12: odds ≈ 1e12", seed=22),
        case([-0.75, -2.5], [-0.75, -2.5], (), "equal averages: L_OR = log 2", seed=23),
        case([-40.0, -1e-9], [-1e-9, -40.0], ("HugeMargin",), "log-odds ratio ≈ ±(40 + 20.7)", beta=1.0, seed=24),
        case([-0.5, -1.25, -3.0], [-2.0, -0.25, -0.0625], ("LowPrecision",), "dyadic inputs", seed=25, low=True),
    ]


# ----------------------------------------------------------------------------- KTO

def _kto_random(seed: int, dtype=None, grid=None) -> Case:
    r = S.rng(seed)
    n = int(r.integers(1, 17))
    m = n if r.random() < 0.7 else int(r.integers(1, 17))
    beta = float(r.choice([0.1, 0.1, 0.05, 0.5]))
    w_d, w_u = (float(r.choice([1.0, 1.0, 1.33, 0.75])) for _ in range(2))
    depth = float(r.choice([5.0, 50.0, 300.0]))
    p = S.logprobs(r, n, low=-depth)
    q = S.logprobs_near(r, p, min(3.0 / beta, depth))
    kp = S.logprobs(r, m, low=-depth)
    kq = S.logprobs_near(r, kp, min(3.0 / beta, depth))
    p, q, kp, kq = _round([p, q, kp, kq], dtype, grid)
    desirable = [int(v) for v in r.integers(0, 2, size=n)]
    z = sum(a - b for a, b in zip(kp, kq)) / m
    extra = (("ClampedReference",) if z < 0 else ()) + (("ClassWeights",) if w_d != w_u else ())
    return Case("preference.kto", {"policy_logps": p, "reference_logps": q, "desirable": desirable,
                                   "kl_policy_logps": kp, "kl_reference_logps": kq},
                params={"beta": beta, "desirable_weight": w_d, "undesirable_weight": w_u}, group="kto",
                flags=_flags(dtype, grid, *extra),
                comment=f"random N={n}, M={m}, β={beta:g}, λ_D={w_d:g}, λ_U={w_u:g}" + _note(dtype, grid),
                cotangents=_ct(r, n, ("losses",), ("kl",)), low_precision=grid is not None,
                provenance=generated(seed, "sequence logprobs; references = policy + normal offset"))


def _kto_fixed() -> list[Case]:
    def case(p, q, d, kp, kq, flags, comment, beta=0.1, seed=0, low=False):
        return Case("preference.kto", {"policy_logps": p, "reference_logps": q, "desirable": d,
                                       "kl_policy_logps": kp, "kl_reference_logps": kq},
                    params={"beta": beta, "desirable_weight": 1.0, "undesirable_weight": 1.0}, group="kto",
                    flags=flags + ("DetachedMetrics",), comment=comment,
                    cotangents=_ct(S.rng(seed), len(p), ("losses",), ("kl",)), low_precision=low,
                    provenance=generated(seed, "fixed"))
    return [
        case([-1.0, -100001.0], [-100001.0, -1.0], [1, 0], [-5.0], [-5.0], ("HugeMargin",),
             "β·(ρ − z0) = ±1e4, z0 = 0", seed=31),
        case([-3.0, -9.0], [-4.0, -8.0], [1, 0], [-2.0, -7.0], [-1.0, -6.0], ("ClampedReference",),
             "KL estimate −1: z0 clamped to 0", seed=32),
        case([-3.0, -9.0], [-4.0, -8.0], [1, 0], [-1.0, -6.0], [-2.0, -7.0], (), "KL estimate +1: z0 = 1", seed=33),
        case([-3.0, -9.0, -2.5], [-4.0, -8.0, -3.5], [0, 0, 0], [-1.0], [-3.0], (), "only undesirable examples",
             seed=34),
        case([-8.0, -3.0, -48.0], [-9.0, -6.0, -40.0], [1, 0, 1], [-4.0, -2.0], [-5.0, -2.5], ("LowPrecision",),
             "dyadic inputs, β = 0.25", beta=0.25, seed=35, low=True),
    ]


# ----------------------------------------------------------------------------- invalid

def _invalid() -> list[Case]:
    nan, inf = math.nan, math.inf
    two = {"chosen_logps": [-8.0, -3.0], "rejected_logps": [-11.0, -4.0]}
    lengths = {"chosen_lengths": [4, 2], "rejected_lengths": [3, 5]}
    avg = {"chosen_logps": [-0.8, -0.3], "rejected_logps": [-1.1, -0.4]}
    kto = {"policy_logps": [-8.0, -3.0], "reference_logps": [-7.0, -4.0], "desirable": [1, 0],
           "kl_policy_logps": [-5.0, -6.0], "kl_reference_logps": [-5.5, -6.5]}
    bad = [
        ("preference.simpo", {**two, **lengths, "chosen_logps": [nan, -3.0]}, {}, "NaN log-probability"),
        ("preference.simpo", {**two, **lengths, "rejected_lengths": [3]}, {}, "shapes disagree"),
        ("preference.simpo", {**two, **lengths, "chosen_lengths": [0, 2]}, {}, "a length of 0"),
        ("preference.simpo", {**two, **lengths}, {"gamma": -0.5}, "γ < 0"),
        ("preference.simpo", {**two, **lengths}, {"beta": 0.0}, "β = 0"),
        ("preference.cpo", {**two, "rejected_logps": [inf, -4.0]}, {}, "+inf log-probability"),
        ("preference.cpo", {**two, "rejected_logps": [-4.0]}, {}, "shapes disagree"),
        ("preference.cpo", {"chosen_logps": [[-8.0, -3.0]], "rejected_logps": [[-11.0, -4.0]]}, {},
         "rank-2 inputs (per-token log-probabilities instead of sequence sums)"),
        ("preference.cpo", two, {"beta": -0.1}, "negative β"),
        ("preference.cpo", two, {"label_smoothing": 0.5}, "label_smoothing = 0.5"),
        ("preference.orpo", {**avg, "chosen_logps": [0.0, -0.3]}, {}, "average log-probability 0 (infinite odds)"),
        ("preference.orpo", {**avg, "rejected_logps": [-1.1, 0.25]}, {}, "positive average log-probability"),
        ("preference.orpo", {**avg, "chosen_logps": [nan, -0.3]}, {}, "NaN log-probability"),
        ("preference.orpo", {**avg, "rejected_logps": [-1.1]}, {}, "shapes disagree"),
        ("preference.orpo", avg, {"beta": 0.0}, "λ = 0"),
        ("preference.kto", {**kto, "desirable": [1, 2]}, {}, "desirable flag 2"),
        ("preference.kto", {**kto, "kl_policy_logps": [], "kl_reference_logps": []}, {},
         "no mismatched completions for z0"),
        ("preference.kto", {**kto, "policy_logps": [-inf, -3.0]}, {}, "−inf log-probability"),
        ("preference.kto", {**kto, "kl_reference_logps": [-5.5]}, {}, "KL inputs' shapes disagree"),
        ("preference.kto", kto, {"undesirable_weight": 0.0}, "λ_U = 0"),
        ("preference.kto", kto, {"beta": -1.0}, "negative β"),
    ]
    return [Case(obj, inputs, params=params, group="invalid", result="invalid", flags=("InvalidInput",),
                 comment=why, provenance=generated(0, "fixed")) for obj, inputs, params, why in bad]


def cases() -> list[Case]:
    out = []
    for k, (random_case, fixed) in enumerate(((_simpo_random, _simpo_fixed), (_cpo_random, _cpo_fixed),
                                              (_orpo_random, _orpo_fixed), (_kto_random, _kto_fixed))):
        for i in range(RANDOM):
            out.append(random_case(30000 + 1000 * k + i, "float32" if i % 2 == 0 else None))
        for i in range(LOW):
            out.append(random_case(30500 + 1000 * k + i, grid=S.low_grid(i)))
        out.extend(fixed())
    out.extend(_invalid())
    out.extend(_cpo_nll_cases())
    return out


# ----------------------------------------------------------------------------- CPO's NLL term (1.3.0)

CPO_NLL_GROUPS = {"seq-mean-token-sum": "cpo-nll", "token-mean": "cpo-token-mean", "seq-mean-token-mean": "cpo-seq-mean"}


def _cpo_nll_cases() -> list[Case]:
    """Per normalisation: 12 random batches (half in float32) and 2 on the low-precision grids,
    cpo_alpha in {0.5, 1, 2}, chosen responses 1 to 512 tokens long; then the invalid arguments."""
    out = []
    for k, aggregation in enumerate(CPO_NLL_GROUPS):
        for i in range(14):
            seed = 36000 + 100 * k + i
            case = (_cpo_random(seed, "float32" if i % 2 == 0 else None) if i < 12
                    else _cpo_random(seed, grid=S.low_grid(i - 12)))
            r = S.rng(seed + 1)
            alpha = float(r.choice([0.5, 1.0, 1.0, 2.0]))
            case.group = CPO_NLL_GROUPS[aggregation]
            case.params["cpo_alpha"] = alpha
            case.conventions["nll_aggregation"] = aggregation
            if aggregation != "seq-mean-token-sum":
                case.inputs["chosen_lengths"] = [int(n) for n in r.integers(1, 513, size=len(case.inputs["chosen_logps"]))]
            case.flags = case.flags + ("NllTerm",)
            case.comment += f"; cpo_alpha={alpha:g}, nll_aggregation={aggregation}"
            out.append(case)
    two = {"chosen_logps": [-8.0, -3.0], "rejected_logps": [-11.0, -4.0]}
    bad = [
        (two, {"cpo_alpha": -1.0}, {}, "negative cpo_alpha"),
        (two, {"cpo_alpha": 1.0}, {"nll_aggregation": "token-mean"}, "cpo_alpha > 0 without chosen_lengths"),
        ({**two, "chosen_lengths": [0, 4]}, {"cpo_alpha": 1.0}, {"nll_aggregation": "token-mean"},
         "a chosen length of 0"),
        ({**two, "chosen_lengths": [4]}, {"cpo_alpha": 1.0}, {"nll_aggregation": "seq-mean-token-mean"},
         "chosen_lengths of another shape"),
        (two, {"cpo_alpha": 1.0}, {"nll_aggregation": "mean"}, "unknown nll_aggregation"),
        (two, {"cpo_alpha": 1.0}, {}, "cpo_alpha > 0 without an nll_aggregation"),
    ]
    out.extend(Case("preference.cpo", inputs, params=params, conventions=conv, group="invalid", result="invalid",
                    flags=("InvalidInput" if params["cpo_alpha"] < 0 else "InvalidNllTerm",), comment=why,
                    provenance=generated(0, "fixed"))
               for inputs, params, conv, why in bad)
    return out


# ----------------------------------------------------------------------------- tolerance scales
#
# Each scale bounds how the rounding of the inputs (a relative error u on every input) moves an
# output, in units of u: the logistic's argument z moves by S_z, the loss by |ℓ'(z)|·S_z (ℓ' ≤ 1
# for the smoothed logistic loss), its slope by ℓ''·S_z with ℓ'' ≤ 1/4 (σσ' ≤ 1/10 for KTO's σ).
# Cotangents are at most 2.

def _mp(kwargs, *names):
    return [[mpmath.mpf(v) for v in kwargs[n]] for n in names]


def _logistic_scales(sizes, losses, dz_dinput):
    loss = max((abs(l) + s for l, s in zip(losses, sizes)), default=mpmath.mpf(0))
    grad = max((2 * d * (1 + s / 4) for d, s in zip(dz_dinput, sizes)), default=mpmath.mpf(0))
    return loss, grad


def _simpo_scale(kwargs, outputs, grads):
    beta, gamma = mpmath.mpf(kwargs["beta"]), mpmath.mpf(kwargs["gamma"])
    c, r = _mp(kwargs, "chosen_logps", "rejected_logps")
    nc, nr = kwargs["chosen_lengths"], kwargs["rejected_lengths"]
    sizes = [beta * (abs(a) / m + abs(b) / n) + gamma for a, b, m, n in zip(c, r, nc, nr)]
    slopes = [beta / min(m, n) for m, n in zip(nc, nr)]
    loss, grad = _logistic_scales(sizes, outputs["losses"], slopes)
    return {"losses": loss, "chosen_rewards": max([beta * abs(a) / m for a, m in zip(c, nc)], default=0),
            "rejected_rewards": max([beta * abs(b) / n for b, n in zip(r, nr)], default=0),
            "grad:chosen_logps": grad, "grad:rejected_logps": grad}


def _cpo_scale(kwargs, outputs, grads):
    beta = mpmath.mpf(kwargs["beta"])
    c, r = _mp(kwargs, "chosen_logps", "rejected_logps")
    sizes = [beta * (abs(a) + abs(b)) for a, b in zip(c, r)]
    loss, grad = _logistic_scales(sizes, outputs["losses"], [beta] * len(c))
    # The NLL term's slope in c is a constant −α/n (−α, −α·B/Σn): a cotangent of at most 2 times it.
    lengths = kwargs.get("chosen_lengths")
    alpha, aggregation = mpmath.mpf(kwargs.get("cpo_alpha", 0.0)), kwargs.get("nll_aggregation")
    if alpha and lengths is not None and aggregation != "seq-mean-token-sum":
        nll = alpha / (min(lengths) if aggregation == "seq-mean-token-mean" else mpmath.mpf(sum(lengths)) / len(c))
    else:
        nll = alpha
    return {"losses": loss, "chosen_rewards": max([beta * abs(a) for a in c], default=0),
            "rejected_rewards": max([beta * abs(b) for b in r], default=0),
            "grad:chosen_logps": grad + 2 * nll, "grad:rejected_logps": grad}


def _orpo_scale(kwargs, outputs, grads):
    """log odds(p) = p − log(1 − e^p) moves by |p|·(1 + 1/(1 − e^p)) for a relative error in p;
    its derivative 1/(1 − e^p) by |p|·e^p/(1 − e^p)²."""
    lam = mpmath.mpf(kwargs["beta"])
    c, r = _mp(kwargs, "chosen_logps", "rejected_logps")
    loss_terms, grad_terms = [], []
    for a, b, value in zip(c, r, outputs["losses"]):
        da, db = 1 / -mpmath.expm1(a), 1 / -mpmath.expm1(b)
        lo_a, lo_b = a - mpmath.log(-mpmath.expm1(a)), b - mpmath.log(-mpmath.expm1(b))
        size = abs(a) * (1 + da) + abs(b) * (1 + db) + abs(lo_a) + abs(lo_b)
        loss_terms.append(abs(value) + abs(a) + lam * size)
        curve = abs(a) * mpmath.exp(a) * da ** 2 + abs(b) * mpmath.exp(b) * db ** 2
        grad_terms.append(2 * (1 + lam * max(da, db) * (1 + size / 4) + lam * curve))
    return {"losses": max(loss_terms, default=0), "chosen_rewards": max([lam * abs(a) for a in c], default=0),
            "rejected_rewards": max([lam * abs(b) for b in r], default=0),
            "grad:chosen_logps": max(grad_terms, default=0), "grad:rejected_logps": max(grad_terms, default=0)}


def _kto_scale(kwargs, outputs, grads):
    beta = mpmath.mpf(kwargs["beta"])
    weight = max(mpmath.mpf(kwargs["desirable_weight"]), mpmath.mpf(kwargs["undesirable_weight"]))
    p, q, kp, kq = _mp(kwargs, "policy_logps", "reference_logps", "kl_policy_logps", "kl_reference_logps")
    kl_size = max([abs(a) + abs(b) for a, b in zip(kp, kq)], default=mpmath.mpf(0))
    sizes = [beta * (abs(a) + abs(b) + kl_size) for a, b in zip(p, q)]
    loss = max((abs(v) + weight * s / 4 for v, s in zip(outputs["losses"], sizes)), default=mpmath.mpf(0))
    grad = max((2 * weight * beta * (mpmath.mpf(1) / 4 + s / 10) for s in sizes), default=mpmath.mpf(0))
    return {"losses": loss, "kl": kl_size, "grad:policy_logps": grad}


SCALES = {"preference.simpo": _simpo_scale, "preference.cpo": _cpo_scale, "preference.orpo": _orpo_scale,
          "preference.kto": _kto_scale}
