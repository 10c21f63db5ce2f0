"""Vectors for ``distill.softmax``, ``distill.hinton``, ``distill.token_kl``,
``distill.symmetric_kl`` and ``distill.generalized_jsd`` (Hinton et al. 2015 §2; MiniLLM §2.1
eq. 1; Jeffreys 1946 / DistiLLM; GKD §3).

Conventions: ``t2_scale`` and ``soft_term`` (hinton), ``direction`` and ``soft_term`` (token_kl)
and ``endpoints`` (generalized_jsd); one group per convention set. ``temperature``, ``alpha`` and ``beta`` are
arguments and vary inside a group. Cotangents are nonzero multiples of 1/64 in [−2, 2] (exact in
every dtype, so a low-precision target receives exactly the cotangent the gradient was computed
with), drawn from a hash of the case's inputs and parameters so that the scale functions, which
see only those, can rebuild them. The tolerance scales of every distill objective, and the
reasoning behind them, are in ``distill_scales``.
"""
from __future__ import annotations

import math

from lossproof.conformance.generate import distill_divergences, distill_low, distill_sparse
from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, article, generated
from lossproof.conformance.generate.distill_inputs import (
    ALPHAS,
    BETAS,
    HIN,
    HUGE_STUDENT,
    HUGE_TEACHER,
    HUGE_TINY_STUDENT,
    HUGE_TINY_TEACHER,
    INF,
    JSD,
    NI_LABELS_A,
    NI_LABELS_C,
    NI_STUDENT_A,
    NI_STUDENT_B,
    NI_STUDENT_C,
    NI_TEACHER_A,
    NI_TEACHER_C,
    SM,
    SYM,
    TEMPERATURES,
    TKL,
    VOCABS,
    cancellation_inputs,
    clip_logits,
    hinton_case,
    maybe_f32,
    near_deterministic,
    pair_case,
    pair_edges,
    pair_inputs,
    random_labels,
    random_pairs,
    shape_nv,
    softmax_case,
    support_sets,
    with_cotangents,
)
from lossproof.conformance.generate.distill_scales import SCALES  # the family module's contract

SEC_CLASSIC = "Destilación clásica: una temperatura en ambas funciones softmax"
SEC_ONPOLICY = "Destilación on-policy: el alumno ocupa el primer lugar en la KL"
SEC_VOCAB = "Un token muestreado o todo el vocabulario"

ULP_1E4_F32 = 2.0 ** -10   # spacing of float32 (and binary64 multiples of it) near 1e4

NOTES = {
    "Article": {"category": "article", "description": "A number printed in the source article: logits (2, 0) → "
                "probabilities (0.88, 0.12) at T = 1 and (0.73, 0.27) at T = 2; teacher (0.8, 0.2) and student "
                "(0.4, 0.6) weighted by the teacher (forward KL) or the student (reverse KL); the full-vocabulary "
                "reverse KL d_t = 0.5 log(0.5/0.6) + 0.2 log(0.2/0.3) + 0.3 log(0.3/0.1) ≈ 0.157. Logits are the "
                "logarithms of the printed probabilities (binary64).",
                "bugType": "formula",
                "effect": "An implementation of another formula than the published one disagrees with the number "
                          "the source prints."},
    "Random": {"category": "random", "description": "Random logits from a fixed seed: V from 2 to 64, N up to 32 "
               "rows, logits ~ N(0, σ²) with σ ∈ {1, 3, 6}, the teacher either independent or the student plus "
               "N(0, 1) noise; T ∈ {0.5, 1, 2, 4}; α ∈ {0, 0.1, 0.5, 0.9, 1}, β ∈ {0.1, 0.5, 0.9}; half the "
               "cases rounded to float32.",
               "bugType": "formula",
               "links": ["https://github.com/IntelLabs/distiller/issues/122",
                         "https://github.com/huggingface/transformers/issues/12299",
                         "https://github.com/huggingface/trl/pull/3043",
                         "https://github.com/huggingface/trl/issues/2202",
                         "https://github.com/jongwooko/distillm/issues/7"]},
    "Large": {"category": "random", "description": "A realistic vocabulary (V from 1000 to 4096) with few rows: the "
              "vocabulary reductions at their real length.",
              "bugType": "precision",
              "effect": "An accumulation that loses accuracy with the reduction length (naive sums, low-precision "
                        "partial sums) drifts at realistic sizes."},
    "Ties": {"category": "edge", "description": "Equal logits in a row (uniform rows, tied maxima): the argmax is "
             "not unique, and a stable log-softmax must not depend on which tied token it picks.",
             "bugType": "degenerate-input",
             "effect": "A log-softmax that depends on which tied maximum it shifts by, or an argmax-based shortcut, "
                       "changes the result on ties."},
    "EqualInputs": {"category": "edge", "description": "Student logits equal to the teacher's: every divergence "
                    "and its gradient are exactly 0 (the Hinton loss is then its cross-entropy part).",
                    "bugType": "degenerate-input",
                    "effect": "Identical inputs must give exactly 0 and a zero gradient; a stray term or rounding "
                              "leaves a spurious loss."},
    "HugeLogits": {"category": "numerics", "description": "Logits near ±1e4: every implementation must shift by "
                   "the row maximum (exp(1e4) overflows every dtype); probabilities e^−1e4 underflow to 0. With "
                   "T = 1e-3 and logits that differ by float32 spacings near 1e4 (2^−10), the exponents "
                   "(z − max)/T are of order 1: implementations that divide first and subtract the maximum "
                   "afterwards lose about u·|z|/T in each exponent, which the stored scale allows for.",
                   "bugType": "overflow",
                   "effect": "exp of logits not shifted by the row maximum overflows; saturated rows lose their "
                             "small terms unless formed with expm1/log1p.",
                   "links": ["https://github.com/pytorch/pytorch/issues/1835",
                             "https://github.com/FederatedAI/FATE/issues/65"]},
    "TinyTemperature": {"category": "numerics", "description": "T = 1e-3: logits that differ by about 1e-3 give "
                        "exponents of order 1, larger differences give near one-hot rows; gradients carry 1/T.",
                        "bugType": "extreme-parameter",
                        "effect": "Dividing by a tiny T without care overflows or loses the 1/T factor in the "
                                  "gradient.",
                        "links": ["https://github.com/bowang-lab/BLEEP/issues/5",
                                  "https://github.com/huggingface/trl/pull/5731"]},
    "NegInfLogits": {"category": "edge", "description": "−inf logits (impossible tokens, probability exactly 0) "
                     "on one or both sides, with supports for which the divergence is finite: 0·log 0 = 0 must "
                     "not become NaN, an impossible student token gets gradient 0, and a token impossible for "
                     "the weighting distribution but possible for the other contributes 0. Implementations that "
                     "evaluate p·(log p − log q) with p = 0 and log p = −inf "
                     "(e.g. F.kl_div(..., log_target=True)) return NaN here.",
                     "bugType": "non-finite",
                     "effect": "0·log 0 evaluated as 0·(−inf) = NaN at impossible tokens poisons the loss and "
                               "gradient.",
                     "links": ["https://github.com/huggingface/trl/pull/7263",
                               "https://github.com/NovaSky-AI/SkyRL/pull/2259",
                               "https://github.com/microsoft/LMOps/issues/38",
                               "https://github.com/linkedin/Liger-Kernel/issues/1453",
                               "https://github.com/linkedin/Liger-Kernel/pull/1397"]},
    "Cancellation": {"category": "numerics", "description": "Teacher = student + noise of 1e-7 (binary64), or "
                     "+ one float32 spacing on some tokens (float32): the divergence is of order 1e-14 while its "
                     "terms are of order 1e-7 or 1; judged against the magnitude of the terms (the tolerance scales "
                     "of conformance/generate/distill.py): the difference of two log-softmaxes passes, a result "
                     "that is not close to 0 fails.",
                     "bugType": "cancellation",
                     "effect": "A tiny result formed as the difference of large terms loses its leading digits (use "
                               "the stable form)."},
    "NearDeterministic": {"category": "numerics", "description": "Rows with one logit 38·T above N(0, 1) "
                          "others (1 − q_top ≈ e^−35, below binary64's u), or any logits at T = 1e-3: the KL "
                          "between two such rows with the same top token is tiny, with different top tokens large "
                          "(~1/T).",
                          "bugType": "cancellation",
                          "effect": "1 − q_top below the unit roundoff is lost when formed as 1 − q; the divergence "
                                    "between near-one-hot rows comes out 0 or negative."},
    "AlphaEndpoint": {"category": "edge", "description": "α = 0 (cross-entropy only: the teacher is ignored) and "
                      "α = 1 (distillation term only: the labels are ignored).",
                      "bugType": "extreme-parameter",
                      "effect": "At α = 0 or 1 one term must vanish exactly; an implementation that still evaluates "
                                "it can return NaN (0·inf) or a stray term.",
                      "links": ["https://github.com/ooples/AiDotNet/pull/437"]},
    "BetaNearEndpoint": {"category": "numerics", "description": "β = 1e-6 or 1 − 1e-6: the generalized JSD is of "
                         "order β·(1−β); log β and log(1 − β) must keep their digits (log1p(−β)).",
                         "bugType": "cancellation",
                         "effect": "log(1 − β) formed as log of a rounded 1 − β loses the digits of a divergence of "
                                   "order β(1 − β)."},
    "BetaEndpointLimit": {"category": "convention", "description": "β = 0 or β = 1 with endpoints='limit' (the "
                          "continuous formula, GKD eq. 2): the mixture equals one of the two distributions and "
                          "the value and its gradient are exactly 0.",
                          "bugType": "convention",
                          "effect": "At β = 0 or 1 the limit form must give the plain distributions; special-casing "
                                    "them as KLs computes another convention.",
                          "links": ["https://github.com/huggingface/trl/pull/6781",
                                    "https://github.com/linkedin/Liger-Kernel/issues/278"]},
    "BetaEndpointKL": {"category": "convention", "description": "β = 0 or β = 1 with endpoints='kl', as TRL 1.16.0 "
                       "and Liger 0.8.5 special-case them: β = 0 gives the forward KL(p‖q), β = 1 the reverse "
                       "KL(q‖p), without T².",
                       "bugType": "convention",
                       "effect": "The endpoints special-cased as forward/reverse KL (TRL, Liger) differ from the "
                                 "continuous formula's limit: a declared-convention mismatch."},
    "CrossEntropySoftTerm": {"category": "convention", "description": "soft_term='cross_entropy': the "
                             "teacher-weighted term written as Hinton et al. 2015 §2 write it, −Σ p log q = KL(p‖q) + "
                             "H(p); the same gradient as the KL form, a value larger by the teacher's entropy H(p) "
                             "(times α·s in Hinton's loss).",
                             "bugType": "convention",
                             "effect": "The soft term written as a cross-entropy adds the teacher's entropy H(p) to "
                                       "the value (same gradient): a loss that reports another number."},
    "ForwardWeightEndpoint": {"category": "edge", "description": "symmetric_kl with forward_weight w = 0 (the "
                              "reverse KL(q‖p) only) or w = 1 (the forward KL(p‖q) only).",
                              "bugType": "extreme-parameter",
                              "effect": "At w = 0 or 1 one KL must vanish exactly; an implementation that evaluates "
                                        "it anyway can return NaN."},
    "ForwardKL": {"category": "convention", "description": "direction='forward': KL(p‖q) weighted by the teacher "
                  "(the soft term of classic distillation, without T²); gradient (q − p)/T.",
                  "bugType": "convention",
                  "effect": "KL(p‖q) and KL(q‖p) swapped: the wrong direction of the divergence is trained.",
                  "links": ["https://github.com/huggingface/trl/pull/4935",
                            "https://github.com/paiml/aprender/pull/2153",
                            "https://github.com/jongwooko/distillm/issues/7",
                            "https://github.com/microsoft/LMOps/issues/38"]},
    "NoT2Scale": {"category": "convention", "description": "t2_scale=False: the soft term α·KL(p^(T)‖q^(T)) is not "
                  "multiplied by T² (Liger 0.8.5 chunked distillation, TRL 1.16.0 GKD); the hard-label term stays "
                  "at T = 1.",
                  "bugType": "scale-factor",
                  "effect": "The soft term multiplied by T² (or not) against the declared convention: the loss and "
                            "gradient are off by a factor T².",
                  "links": ["https://github.com/IntelLabs/distiller/issues/122",
                            "https://github.com/keras-team/keras-io/issues/869"]},
    "LowPrecision": {"category": "edge", "description": "Logits exactly representable in bfloat16 or float16 "
                     "(or both: bfloat16 values inside float16's range), judged in those dtypes: random shapes "
                     "up to V = 4096 (|z| ≤ 30, T from 0.05 to 64, teachers independent, near or close to the "
                     "student) and the edges low precision changes (ties, −inf logits, saturated rows, logits "
                     "near ±1e4); see conformance/compare.py for the careful tolerance model.",
                     "bugType": "precision",
                     "links": ["https://github.com/microsoft/LMOps/issues/38",
                               "https://github.com/jongwooko/distillm/issues/7"]},
    "InvalidInput": {"category": "invalid", "description": "Input or parameter outside the objective's domain: "
                     "T ≤ 0, α or β outside [0, 1], unknown direction or endpoints, shapes that disagree, labels "
                     "out of range, NaN or +inf logits, a row that is −inf everywhere, an empty vocabulary, logits "
                     "of the wrong rank (a scalar; 1-D where hinton needs [N, V]); must be rejected.",
                     "bugType": "input-validation"},
    "InfiniteDivergence": {"category": "invalid", "description": "A −inf logit where the weighting distribution has "
                           "probability > 0 (support mismatch), or a −inf student logit at the label: the "
                           "divergence (or cross-entropy) is +inf; must be rejected, not returned as inf or NaN.",
                           "bugType": "input-validation",
                           "effect": "An infinite divergence (support mismatch) is returned as a finite or NaN loss "
                                     "instead of an error."},
}

GROUPS = {
    "paper": "Paper defaults. distill.softmax: Hinton et al. 2015 §2 (softmax of z/T). distill.hinton: Hinton et al. "
             "2015 §2 — hard-label cross-entropy at T = 1 plus the soft term at T multiplied by T² "
             "(t2_scale=True); [reading-math-3] §Destilación clásica (λ = alpha). distill.token_kl: reverse KL(q‖p), "
             "student first — MiniLLM (Gu et al. 2024) §2.1 eq. 1, DeepSeek-V4 §5.1.2 eq. 29; also TRL 1.16.0 "
             "trainer/distillation_trainer.py with kernels/chunked_divergence.py (beta=1.0: reverse KL at T, no "
             "T²). distill.generalized_jsd: GKD (Agarwal et al. 2024) §3 eq. 2, the continuous formula at every β "
             "(endpoints='limit': 0 at β = 0 and β = 1). distill.sparse_kl: renormalize='none', the top-k "
             "estimate as stored (no renormalisation, no tail) — verl 0.9.1 verl/trainer/distillation/fsdp/losses.py "
             "compute_forward_kl_topk (loss_mode forward_kl_topk; its log_prob_min_clamp and clamp_min(0) aside)",
    "no-t2": "distill.hinton with t2_scale=False: Liger-Kernel 0.8.5 chunked_loss/fused_linear_distillation.py "
             "(weight_hard_loss·CE of the raw logits + weight_soft_loss·divergence of logits/T, no T² anywhere; "
             "with chunked_loss/jsd_loss.py at beta=0 the divergence is KL(p‖q)); TRL 1.16.0 "
             "experimental/gkd/gkd_trainer.py GKDTrainer.generalized_jsd_loss (beta=0: KL(p‖q) of logits/T, no T²; "
             "no hard-label term, i.e. alpha=1)",
    "forward": "distill.token_kl with direction='forward': KL(p‖q), teacher first (the soft term of classic "
               "distillation without T²) — TRL 1.16.0 experimental/gkd/gkd_trainer.py generalized_jsd_loss with "
               "beta=0 and trainer/distillation_trainer.py + kernels/chunked_divergence.py with beta=0.0; Liger "
               "0.8.5 chunked_loss/jsd_loss.py and ops/jsd.py with beta=0",
    "symmetric": "distill.symmetric_kl: w·KL(p‖q) + (1−w)·KL(q‖p), Jeffreys' (1946) symmetrised divergence with "
                 "weights, no T²; forward_weight w = 0.5 by default (equal weights). DistiLLM (Ko et al. 2024, arXiv "
                 "2402.03898) uses it as a baseline: its repository (jongwooko/distillm, distillm/losses.py "
                 "symmetric_kl) weighs the reverse term λ = 0.9, i.e. w = 0.1, and writes the forward term as the "
                 "cross-entropy −Σ p log q (H(p) more than the KL per row). No pinned library ships it",
    "cross-entropy": "soft_term='cross_entropy': the soft term −Σ p log q, as Hinton et al. 2015 §2 write it "
                     "(\"the cross entropy with the soft targets\") — distill.hinton (with T², t2_scale=True) and "
                     "distill.token_kl with direction='forward'; DistiLLM's repository (jongwooko/distillm, "
                     "distillm/losses.py forward_kl) computes this form. Values exceed the KL form's by H(p) "
                     "(times α·s in Hinton's loss); gradients are equal",
    "cross-entropy-no-t2": "distill.hinton with soft_term='cross_entropy' and t2_scale=False: Hinton et al.'s "
                           "cross-entropy soft term −Σ p log q without the T² factor, the combination a KD "
                           "recipe met by lossproof's testers computes (issue 25); values exceed the KL form's by "
                           "α·H(p), gradients are the KL form's without T²",
    "kl-endpoints": "distill.generalized_jsd with endpoints='kl': β = 0 → KL(p‖q), β = 1 → KL(q‖p), the "
                    "general formula in between — TRL 1.16.0 experimental/gkd/gkd_trainer.py "
                    "GKDTrainer.generalized_jsd_loss (`if beta == 0` / `elif beta == 1` branches) and "
                    "trainer/distillation_trainer.py + kernels/chunked_divergence.py (beta 0.0 forward, 1.0 "
                    "reverse); Liger 0.8.5 chunked_loss/jsd_loss.py distillation_loss_fn and ops/jsd.py _jsd_kernel "
                    "(same special cases)",
    "invalid": "inputs outside the domain (all conventions)",
}
NOTES.update(distill_divergences.NOTES)
NOTES.update(distill_sparse.NOTES)
GROUPS = {**{k: v for k, v in GROUPS.items() if k != "invalid"}, **distill_divergences.GROUPS,
          **distill_sparse.GROUPS, "invalid": GROUPS["invalid"]}


# ----------------------------------------------------------------------------- distill.softmax

def _softmax_cases() -> list[Case]:
    out = []
    for T, printed in ((1.0, "Con T=1, las probabilidades son aproximadamente (0.88,0.12)"),
                       (2.0, "con T=2, pasan a ser (0.73,0.27)")):
        out.append(Case(SM, {"logits": [2.0, 0.0]}, params={"temperature": T}, flags=("Article",),
                        comment=f"«cat», «dog» with scores (2, 0) at T = {T:g}",
                        provenance=article(SEC_CLASSIC, printed)))
    for i in range(60):
        seed = 7000 + i
        r = S.rng(seed)
        v = int(r.choice(VOCABS))
        rank = int(r.choice([1, 2, 2, 3]))
        lead = {1: (), 2: (int(r.integers(1, 17)),), 3: (int(r.integers(1, 5)), int(r.integers(1, 5)))}[rank]
        spread = float(r.choice([1.0, 3.0, 6.0]))
        T = float(r.choice(TEMPERATURES))
        z = S.logits(r, lead + (v,), spread)
        z = maybe_f32(z, i % 2 == 0)
        out.append(softmax_case(z, T, ("Random",), f"random shape {lead + (v,)}, σ={spread:g}, T={T:g}"
                                + (", float32" if i % 2 == 0 else ""), seed, "normal logits"))
    for k, (v, n, T) in enumerate(((1024, 2, 1.0), (4096, 1, 2.0))):
        seed = 7100 + k
        r = S.rng(seed)
        z = S.in_dtype(S.logits(r, (n, v), 4.0), "float32")
        out.append(softmax_case(z, T, ("Large",), f"V={v}, N={n}, T={T:g}, float32", seed, "normal logits"))
    out.append(softmax_case([[0.5] * 7], 1.0, ("Ties",),
                            "a uniform row (V = 7)", 7200, "fixed"))
    out.append(softmax_case([[3.0, 3.0, -1.0, 2.0], [-2.0, 5.0, 5.0, 5.0]], 0.5, ("Ties",),
                            "tied maxima", 7201, "fixed"))
    out.append(softmax_case(HUGE_STUDENT, 1.0, ("HugeLogits",), "logits ±1e4, T = 1", 7210, "fixed"))
    out.append(softmax_case(HUGE_TEACHER, 2.0, ("HugeLogits",), "logits ±1e4, T = 2", 7211, "fixed"))
    out.append(softmax_case(HUGE_TINY_STUDENT, 1e-3, ("HugeLogits", "TinyTemperature"),
                            "logits ±1e4 differing by 2^-10, T = 1e-3", 7212, "fixed"))
    tiny = [[0.5, 0.501, 0.4995, -3.0, 0.5005], [1.0, 1.002, 0.999, 1.0, 0.0]]
    out.append(softmax_case(tiny, 1e-3, ("TinyTemperature",), "logits 1e-3 apart, T = 1e-3", 7220, "fixed"))
    out.append(softmax_case(S.in_dtype(tiny, "float32"), 1e-3, ("TinyTemperature",),
                            "logits 1e-3 apart, T = 1e-3, float32", 7221, "fixed"))
    r = S.rng(7222)
    out.append(softmax_case(S.in_dtype(S.logits(r, (4, 16), 3.0), "float32"), 1e-3,
                            ("TinyTemperature", "NearDeterministic"),
                            "normal logits at T = 1e-3: one-hot rows", 7222, "normal logits"))
    out.append(softmax_case(NI_STUDENT_B, 1.0, ("NegInfLogits",), "−inf logits, one row with a single possible token",
                            7230, "fixed"))
    out.append(softmax_case([[-INF, 2.0, -INF], [0.0, -INF, 0.0]], 0.5, ("NegInfLogits", "Ties"),
                            "−inf logits with ties", 7231, "fixed"))
    for k, T in enumerate((0.5, 2.0)):
        r = S.rng(7240 + k)
        z, _ = near_deterministic(r, 3, 9, T, True)
        out.append(softmax_case(maybe_f32(z, k == 1), T, ("NearDeterministic",),
                                f"top logit 38·T above the rest, T = {T:g}", 7240 + k, "normal logits"))
    out.append(softmax_case([[0.25, -1.5, 3.0, 3.0 + 2 ** -40, 1.0]], 1.0, ("Ties",),
                            "two maxima 2^-40 apart (binary64)", 7202, "fixed"))
    for k, dtype in enumerate(("bfloat16", "float16", "bfloat16", "float16")):
        seed = 7250 + k
        r = S.rng(seed)
        v = (8, 32, 64, 5)[k]
        T = (1.0, 0.5, 2.0, 1.0)[k]
        z = S.in_dtype(clip_logits(S.logits(r, (4, v), 5.0), 20.0), dtype)
        out.append(softmax_case(z, T, ("LowPrecision",), f"logits exact in {dtype}, V={v}, T={T:g}", seed,
                                f"normal logits clipped to ±20, rounded to {dtype}", low=True))
    bad = [
        ([1.0, 2.0], {"temperature": 0.0}, "T = 0"),
        ([1.0, 2.0], {"temperature": -1.0}, "T < 0"),
        ([[1.0, math.nan, 0.0]], {"temperature": 1.0}, "NaN logit"),
        ([[1.0, INF, 0.0]], {"temperature": 1.0}, "+inf logit"),
        ([[1.0, 0.0], [-INF, -INF]], {"temperature": 1.0}, "a row that is −inf everywhere"),
        ([[], []], {"temperature": 1.0}, "empty vocabulary axis"),
        (1.5, {"temperature": 1.0}, "a scalar (no vocabulary axis)"),
    ]
    for z, params, why in bad:
        out.append(Case(SM, {"logits": z}, params=params, group="invalid", result="invalid",
                        flags=("InvalidInput",), comment=why, provenance=generated(0, "fixed")))
    return out


# ----------------------------------------------------------------------------- distill.hinton

_RANDOM_RECIPE = "normal logits; teacher independent or student + N(0,1)"


def _random_hinton_inputs(seed: int, i: int):
    """(z, t, labels, T, α, comment) of the i-th random Hinton case, drawn from ``seed``; even i
    on the float32 grid, every third teacher independent of the student."""
    r = S.rng(seed)
    n, v = shape_nv(r)
    spread = float(r.choice([1.0, 3.0, 6.0]))
    T = float(r.choice(TEMPERATURES))
    alpha = float(r.choice(ALPHAS))
    f32 = i % 2 == 0
    z, t = pair_inputs(r, n, v, spread, bool(i % 3 == 0), f32)
    comment = f"random N={n}, V={v}, σ={spread:g}, T={T:g}, α={alpha:g}" + (", float32" if f32 else "")
    return z, t, random_labels(r, n, v), T, alpha, comment


def _hinton_cases() -> list[Case]:
    out = []
    for group in ("paper", "no-t2"):
        out.append(Case(HIN, {"student_logits": [[0.0, 0.0]], "teacher_logits": [[2.0, 0.0]], "labels": [0]},
                        params={"temperature": 2.0, "alpha": 0.5}, conventions={"t2_scale": group == "paper"},
                        group=group, flags=("Article",) + (() if group == "paper" else ("NoT2Scale",)),
                        comment="teacher scores (2, 0) for «cat», «dog» → soft targets (0.73, 0.27) at T = 2; "
                                "uniform student; label «cat»; λ = 0.5",
                        provenance=article(SEC_CLASSIC, "con T=2, pasan a ser (0.73,0.27) … "
                                           "L=(1−λ)(−log q_y^(1))+λT² D_KL(p^(T)∥q^(T))")))
    base = {"paper": 8000, "no-t2": 8100}
    for group, count in (("paper", 26), ("no-t2", 20)):
        for i in range(count):
            seed = base[group] + i
            z, t, y, T, alpha, comment = _random_hinton_inputs(seed, i)
            out.append(hinton_case(z, t, y, T, alpha, group, ("Random",), comment, seed, _RANDOM_RECIPE))
    for k, (v, n, T) in enumerate(((1024, 2, 2.0), (4096, 1, 1.0))):
        seed = 8200 + k
        r = S.rng(seed)
        z, t = pair_inputs(r, n, v, 4.0, False, True)
        out.append(hinton_case(z, t, random_labels(r, n, v), T, 0.5, "paper", ("Large",),
                               f"V={v}, N={n}, T={T:g}, float32", seed, "normal logits; teacher = student + N(0,1)"))
    for group in ("paper", "no-t2"):
        g = 0 if group == "paper" else 50
        r = S.rng(8300 + g)
        z = S.logits(r, (4, 8), 3.0)
        z[1] = [1.25] * 8
        z[2][3] = z[2][5] = max(z[2]) + 1.0
        out.append(hinton_case(z, [row[:] for row in z], random_labels(r, 4, 8), 2.0, 0.5, group,
                               ("EqualInputs", "Ties"),
                               "teacher = student (KL 0): loss = (1 − α)·CE; a uniform row and a tied maximum",
                               8300 + g, "normal logits"))
        out.append(hinton_case(HUGE_STUDENT, HUGE_TEACHER, [0, 3, 4], 1.0, 0.5, group, ("HugeLogits",),
                               "logits ±1e4, T = 1", 8301 + g, "fixed"))
        out.append(hinton_case(HUGE_STUDENT, HUGE_TEACHER, [3, 2, 1], 2.0, 0.9, group, ("HugeLogits",),
                               "logits ±1e4, T = 2, α = 0.9 (row 1: label probability e^-2e4, cross-entropy ≈ 2e4)",
                               8302 + g, "fixed"))
        out.append(hinton_case(HUGE_TINY_STUDENT, HUGE_TINY_TEACHER, [0, 1, 2], 1e-3, 0.5, group,
                               ("HugeLogits", "TinyTemperature"), "logits ±1e4 differing by 2^-10, T = 1e-3", 8303 + g,
                               "fixed"))
        r = S.rng(8304 + g)
        z, t = pair_inputs(r, 5, 10, 3.0, True, True)
        out.append(hinton_case(z, t, random_labels(r, 5, 10), 1e-3, 0.5, group, ("TinyTemperature",),
                               "normal logits at T = 1e-3 (near one-hot rows), float32", 8304 + g, "normal logits"))
        out.append(hinton_case(NI_STUDENT_A, NI_TEACHER_A, NI_LABELS_A, 1.0, 0.5, group, ("NegInfLogits",),
                               "−inf at the same tokens on both sides", 8305 + g, "fixed"))
        out.append(hinton_case(NI_STUDENT_C, NI_TEACHER_C, NI_LABELS_C, 2.0, 0.5, group, ("NegInfLogits",),
                               "teacher −inf where the student is finite (p = 0 terms)", 8306 + g, "fixed"))
        for f32 in (False, True):
            r = S.rng(8307 + g + f32)
            z, t = cancellation_inputs(r, 4, 16, f32)
            out.append(hinton_case(z, t, random_labels(r, 4, 16), 1.0, 1.0, group, ("Cancellation",),
                                   "teacher = student + " + ("one float32 spacing" if f32 else "1e-7 noise")
                                   + ", α = 1", 8307 + g + f32, "normal logits + tiny noise"))
        for k, same in enumerate((True, False)):
            r = S.rng(8312 + g + k)
            z, t = near_deterministic(r, 3, 12, 1.0, same)
            out.append(hinton_case(z, t, random_labels(r, 3, 12), 1.0, 0.5, group, ("NearDeterministic",),
                                   "one-hot-like rows, " + ("the same" if same else "different") + " top tokens",
                                   8312 + g + k, "normal logits + 38·T at one token"))
        r = S.rng(8310 + g)
        z, t = pair_inputs(r, 6, 8, 3.0, True, False)
        out.append(hinton_case(z, t, random_labels(r, 6, 8), 2.0, 0.0, group, ("AlphaEndpoint",),
                               "α = 0: cross-entropy only", 8310 + g, "normal logits"))
        out.append(hinton_case(z, t, random_labels(r, 6, 8), 2.0, 1.0, group, ("AlphaEndpoint",),
                               "α = 1: distillation only", 8311 + g, "normal logits"))
        for k, dtype in enumerate(("bfloat16", "float16")):
            seed = 8320 + g + k
            r = S.rng(seed)
            v = (16, 64)[k]
            T = (2.0, 1.0)[k]
            z = S.in_dtype(clip_logits(S.logits(r, (8, v), 4.0), 20.0), dtype)
            t = S.in_dtype(clip_logits(S.near(r, z, 1.5), 20.0), dtype)
            out.append(hinton_case(z, t, random_labels(r, 8, v), T, 0.5, group, ("LowPrecision",),
                                   f"logits exact in {dtype}, V={v}, T={T:g}", seed,
                                   f"normal logits clipped to ±20, rounded to {dtype}", low=True))
    ok_z, ok_t, ok_y = [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]], [[0.5, 2.5, 0.0], [1.0, -1.0, 2.0]], [1, 2]
    bad = [
        (ok_z, ok_t, ok_y, {"temperature": 0.0}, {}, "T = 0", "InvalidInput"),
        (ok_z, ok_t, ok_y, {"temperature": -2.0}, {}, "T < 0", "InvalidInput"),
        (ok_z, ok_t, ok_y, {"alpha": -0.1}, {}, "α < 0", "InvalidInput"),
        (ok_z, ok_t, ok_y, {"alpha": 1.5}, {}, "α > 1", "InvalidInput"),
        (ok_z, ok_t, [1, 3], {}, {}, "label = V (out of range)", "InvalidInput"),
        (ok_z, ok_t, [-1, 2], {}, {}, "negative label", "InvalidInput"),
        (ok_z, ok_t, [1, 2, 0], {}, {}, "labels longer than the rows", "InvalidInput"),
        (ok_z, [[0.5, 2.5], [1.0, -1.0]], ok_y, {}, {}, "teacher vocabulary differs", "InvalidInput"),
        ([[1.0, math.nan, 0.5], [0.0, -1.0, 3.0]], ok_t, ok_y, {}, {}, "NaN student logit", "InvalidInput"),
        (ok_z, [[0.5, INF, 0.0], [1.0, -1.0, 2.0]], ok_y, {}, {}, "+inf teacher logit", "InvalidInput"),
        (ok_z, [[0.5, 2.5, 0.0], [-INF, -INF, -INF]], ok_y, {}, {}, "teacher row −inf everywhere", "InvalidInput"),
        ([[], []], [[], []], ok_y, {}, {}, "empty vocabulary", "InvalidInput"),
        ([1.0, 2.0, 0.5], [0.5, 2.5, 0.0], [1], {}, {}, "1-D logits (rank must be 2)", "InvalidInput"),
        ([[1.0, -INF, 0.5], [0.0, -1.0, 3.0]], ok_t, [0, 2], {}, {},
         "student −inf where the teacher has p > 0: KL(p‖q) = +inf", "InfiniteDivergence"),
        ([[1.0, -INF, 0.5], [0.0, -1.0, 3.0]], [[0.5, -INF, 0.0], [1.0, -1.0, 2.0]], ok_y, {}, {},
         "student −inf at the label: cross-entropy = +inf", "InfiniteDivergence"),
    ]
    for z, t, y, params, conv, why, flag in bad:
        out.append(Case(HIN, {"student_logits": z, "teacher_logits": t, "labels": y},
                        params={"temperature": 1.0, "alpha": 0.5, **params}, conventions=conv, group="invalid",
                        result="invalid", flags=(flag,), comment=why, provenance=generated(0, "fixed")))
    return out


_CE = {"soft_term": "cross_entropy"}
_ARTICLE_PAIR = ([[math.log(0.4), math.log(0.6)]], [[math.log(0.8), math.log(0.2)]])
_ARTICLE_PAIR_TEXT = ("las probabilidades del profesor para cat y dog son 0.8 y 0.2; las del alumno son 0.4 y 0.6. "
                      "La KL directa pondera los logaritmos de los cocientes profesor-alumno con 0.8 y 0.2. La KL "
                      "inversa pondera los logaritmos de los cocientes alumno-profesor con 0.4 y 0.6.")


def _hin_ce(t2_scale, z, t, y, T, alpha, flags, comment, seed, recipe, low=False):
    """A Hinton case with the cross-entropy soft term, with T² (the paper's scaling) or without it
    (``t2_scale`` False: its own group)."""
    return Case(HIN, {"student_logits": z, "teacher_logits": t, "labels": y},
                params={"temperature": T, "alpha": alpha}, conventions={"t2_scale": t2_scale, **_CE},
                group="cross-entropy" if t2_scale else "cross-entropy-no-t2",
                flags=flags + ("CrossEntropySoftTerm",) + (() if t2_scale else ("NoT2Scale",)), comment=comment,
                low_precision=low, provenance=generated(seed, recipe))


def _hinton_cross_entropy_cases(t2_scale: bool = True, seeds: int = 8500) -> list[Case]:
    """Hinton with soft_term='cross_entropy': the article's pair, random rows, and the edges where
    H(p) is extreme (near one-hot teachers: ≈ 0; uniform ones: log V) or the KL is 0 (equal inputs).
    ``t2_scale=False`` and other ``seeds``: the same recipe for the group without T²."""
    z, t = _ARTICLE_PAIR
    out = [Case(HIN, {"student_logits": z, "teacher_logits": t, "labels": [0]},
                params={"temperature": 1.0, "alpha": 1.0}, conventions={"t2_scale": t2_scale, **_CE},
                group="cross-entropy" if t2_scale else "cross-entropy-no-t2",
                flags=("Article", "CrossEntropySoftTerm") + (() if t2_scale else ("NoT2Scale",)),
                comment="teacher (0.8, 0.2), student (0.4, 0.6), α = 1: −Σ p log q = KL 0.3348 + H(p) 0.5004 "
                        "= 0.8352", provenance=article(SEC_ONPOLICY, _ARTICLE_PAIR_TEXT))]
    for i in range(14):
        z, t, y, T, alpha, comment = _random_hinton_inputs(seeds + i, i)
        out.append(_hin_ce(t2_scale, z, t, y, T, alpha, ("Random",), comment, seeds + i, _RANDOM_RECIPE))
    r = S.rng(seeds + 20)
    z = S.logits(r, (4, 8), 3.0)
    z[1] = [1.25] * 8
    out.append(_hin_ce(t2_scale, z, [row[:] for row in z], random_labels(r, 4, 8), 2.0, 0.5, ("EqualInputs", "Ties"),
                       "teacher = student: KL 0, the soft term is H(p) (log 8 on the uniform row)", seeds + 20,
                       "normal logits"))
    out.append(_hin_ce(t2_scale, HUGE_STUDENT, HUGE_TEACHER, [0, 3, 4], 2.0, 0.5, ("HugeLogits",), "logits ±1e4, T = 2",
                       seeds + 21, "fixed"))
    out.append(_hin_ce(t2_scale, NI_STUDENT_C, NI_TEACHER_C, NI_LABELS_C, 2.0, 0.5, ("NegInfLogits",),
                       "teacher −inf where the student is finite (p = 0 terms: 0·log q = 0)", seeds + 22, "fixed"))
    r = S.rng(seeds + 23)
    z, t = near_deterministic(r, 3, 12, 1.0, True)
    out.append(_hin_ce(t2_scale, z, t, random_labels(r, 3, 12), 1.0, 0.5, ("NearDeterministic",),
                       "one-hot-like rows (H(p) ≈ 0)", seeds + 23, "normal logits + 38·T at one token"))
    for k, dtype in enumerate(("bfloat16", "float16")):
        seed = seeds + 30 + k
        r = S.rng(seed)
        v, T = (16, 64)[k], (2.0, 1.0)[k]
        z = S.in_dtype(clip_logits(S.logits(r, (8, v), 4.0), 20.0), dtype)
        t = S.in_dtype(clip_logits(S.near(r, z, 1.5), 20.0), dtype)
        out.append(_hin_ce(t2_scale, z, t, random_labels(r, 8, v), T, 0.5, ("LowPrecision",), f"logits exact in {dtype}, V={v}, "
                           f"T={T:g}", seed, f"normal logits clipped to ±20, rounded to {dtype}", low=True))
    return out


# ----------------------------------------------------------------------------- token_kl and generalized_jsd

def _large_pairs(obj, group, conv, params_of, seed0, extra_flags=(), sizes=None):
    out = []
    sizes = sizes or ((1024, 2, 1.0), (4096, 1, 2.0))
    for k, (v, n, T) in enumerate(sizes):
        seed = seed0 + k
        r = S.rng(seed)
        z, t = pair_inputs(r, n, v, 4.0, False, True)
        out.append(pair_case(obj, z, t, params_of(T), conv, group, ("Large",) + extra_flags,
                             f"V={v}, N={n}, T={T:g}, float32", seed, "normal logits; teacher = student + N(0,1)"))
    return out


def _token_kl_cases() -> list[Case]:
    out = []
    two_s, two_t = [[math.log(0.4), math.log(0.6)]], [[math.log(0.8), math.log(0.2)]]
    printed = ("las probabilidades del profesor para cat y dog son 0.8 y 0.2; las del alumno son 0.4 y 0.6. La KL "
               "directa pondera los logaritmos de los cocientes profesor-alumno con 0.8 y 0.2. La KL inversa "
               "pondera los logaritmos de los cocientes alumno-profesor con 0.4 y 0.6.")
    for direction, group in (("reverse", "paper"), ("forward", "forward")):
        out.append(Case(TKL, {"student_logits": two_s, "teacher_logits": two_t}, params={"temperature": 1.0},
                        conventions={"direction": direction}, group=group,
                        flags=("Article",) + (("ForwardKL",) if direction == "forward" else ()),
                        comment=f"{direction} KL, teacher (0.8, 0.2), student (0.4, 0.6); logits = log probabilities",
                        provenance=article(SEC_ONPOLICY, printed)))
    out.append(Case(TKL, {"student_logits": [[math.log(0.5), math.log(0.2), math.log(0.3)]],
                          "teacher_logits": [[math.log(0.6), math.log(0.3), math.log(0.1)]]},
                    params={"temperature": 1.0}, conventions={"direction": "reverse"}, flags=("Article",),
                    comment="full-vocabulary reverse KL over «cat», «dog», «fox» ≈ 0.157",
                    provenance=article(SEC_VOCAB, "d_t=0.5log(0.5/0.6)+0.2log(0.2/0.3)+0.3log(0.3/0.1)≈0.157")))
    for direction, group, seed0, extra in (("reverse", "paper", 9000, ()),
                                           ("forward", "forward", 9500, ("ForwardKL",))):
        conv = {"direction": direction}
        out += random_pairs(TKL, group, conv, lambda T, r: {"temperature": T}, seed0, 28, extra)
        out += _large_pairs(TKL, group, conv, lambda T: {"temperature": T}, seed0 + 100, extra,
                            sizes=None if group == "paper" else ((2048, 1, 1.0),))
        out += pair_edges(TKL, group, conv, lambda T: {"temperature": T}, direction, seed0 + 200, extra)
    ok_z, ok_t = [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]], [[0.5, 2.5, 0.0], [1.0, -1.0, 2.0]]
    bad = [
        (ok_z, ok_t, {"temperature": 0.0}, {}, "T = 0", "InvalidInput"),
        (ok_z, ok_t, {"temperature": -0.5}, {}, "T < 0", "InvalidInput"),
        (ok_z, ok_t, {}, {"direction": "symmetric"}, "unknown direction", "InvalidInput"),
        (ok_z, [[0.5, 2.5, 0.0]], {}, {}, "shapes disagree (rows)", "InvalidInput"),
        (ok_z, [[0.5, 2.5], [1.0, -1.0]], {}, {}, "shapes disagree (vocabulary)", "InvalidInput"),
        ([[1.0, math.nan, 0.5], [0.0, -1.0, 3.0]], ok_t, {}, {}, "NaN student logit", "InvalidInput"),
        (ok_z, [[0.5, 2.5, INF], [1.0, -1.0, 2.0]], {}, {}, "+inf teacher logit", "InvalidInput"),
        ([[-INF, -INF, -INF], [0.0, -1.0, 3.0]], ok_t, {}, {}, "student row −inf everywhere", "InvalidInput"),
        ([[], []], [[], []], {}, {}, "empty vocabulary", "InvalidInput"),
        (ok_z, [[0.5, -INF, 0.0], [1.0, -1.0, 2.0]], {}, {"direction": "reverse"},
         "reverse KL(q‖p) with the teacher −inf where q > 0: +inf", "InfiniteDivergence"),
        ([[1.0, 2.0, -INF], [0.0, -1.0, 3.0]], ok_t, {}, {"direction": "forward"},
         "forward KL(p‖q) with the student −inf where p > 0: +inf", "InfiniteDivergence"),
    ]
    for z, t, params, conv, why, flag in bad:
        out.append(Case(TKL, {"student_logits": z, "teacher_logits": t}, params={"temperature": 1.0, **params},
                        conventions=conv, group="invalid", result="invalid", flags=(flag,), comment=why,
                        provenance=generated(0, "fixed")))
    return out


def _token_kl_cross_entropy_cases() -> list[Case]:
    """Forward token KL with soft_term='cross_entropy': the article's pair, random rows, the edges."""
    z, t = _ARTICLE_PAIR
    conv, flags = {"direction": "forward", **_CE}, ("ForwardKL", "CrossEntropySoftTerm")
    out = [Case(TKL, {"student_logits": z, "teacher_logits": t}, params={"temperature": 1.0},
                conventions=conv, group="cross-entropy", flags=("Article",) + flags,
                comment="−Σ p log q for teacher (0.8, 0.2), student (0.4, 0.6): KL(p‖q) 0.3348 + H(p) 0.5004 = 0.8352",
                provenance=article(SEC_ONPOLICY, _ARTICLE_PAIR_TEXT))]
    out += random_pairs(TKL, "cross-entropy", conv, lambda T, r: {"temperature": T}, 9800, 14, flags)
    out += pair_edges(TKL, "cross-entropy", conv, lambda T: {"temperature": T}, "forward", 9900, flags)
    return out


def _cross_entropy_invalid_cases() -> list[Case]:
    """The soft_term's own invalid values (new groups: after every case of 1.2.0, whose ids stay)."""
    ok_z, ok_t = [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]], [[0.5, 2.5, 0.0], [1.0, -1.0, 2.0]]
    fixed = generated(0, "fixed")
    return [
        Case(HIN, {"student_logits": ok_z, "teacher_logits": ok_t, "labels": [1, 2]},
             params={"temperature": 1.0, "alpha": 0.5}, conventions={"soft_term": "ce"}, group="invalid",
             result="invalid", flags=("InvalidInput",), comment="unknown soft_term", provenance=fixed),
        Case(TKL, {"student_logits": ok_z, "teacher_logits": ok_t}, params={"temperature": 1.0},
             conventions={"direction": "forward", "soft_term": "ce"}, group="invalid", result="invalid",
             flags=("InvalidInput",), comment="unknown soft_term", provenance=fixed),
        Case(TKL, {"student_logits": ok_z, "teacher_logits": ok_t}, params={"temperature": 1.0},
             conventions={"direction": "reverse", "soft_term": "cross_entropy"}, group="invalid", result="invalid",
             flags=("InvalidInput",), comment="soft_term='cross_entropy' with direction='reverse' (no cross-entropy "
             "form)", provenance=fixed),
    ]


def _symmetric_kl_cases() -> list[Case]:
    """w·KL(p‖q) + (1−w)·KL(q‖p): the article's pair at the default and DistiLLM's weights, random
    rows over w ∈ {0, 0.1, 0.5, 0.9, 1}, the shared edges (−inf only at the same tokens: both
    directions finite), the weights' endpoints, and invalid inputs."""
    z, t = _ARTICLE_PAIR
    out = []
    for w, why in ((0.5, "w = 0.5: (0.3348 + 0.3819)/2 = 0.3584"),
                   (0.1, "w = 0.1 (DistiLLM's λ = 0.9 on the reverse term): 0.1·0.3348 + 0.9·0.3819 = 0.3772")):
        out.append(Case(SYM, {"student_logits": z, "teacher_logits": t}, params={"forward_weight": w, "temperature": 1.0},
                        group="symmetric", flags=("Article",), comment=f"teacher (0.8, 0.2), student (0.4, 0.6), {why}",
                        provenance=article(SEC_ONPOLICY, _ARTICLE_PAIR_TEXT)))
    weights = (0.0, 0.1, 0.5, 0.9, 1.0)
    out += random_pairs(SYM, "symmetric", {},
                        lambda T, r: {"forward_weight": float(r.choice(weights)), "temperature": T}, 11000, 28)
    out += _large_pairs(SYM, "symmetric", {}, lambda T: {"forward_weight": 0.5, "temperature": T}, 11100,
                        sizes=((2048, 1, 1.0),))
    out += pair_edges(SYM, "symmetric", {}, lambda T: {"forward_weight": 0.5, "temperature": T}, "both", 11200,
                      low_params_of=lambda T, k: {"forward_weight": (0.1, 0.9, 0.5, 0.25)[k], "temperature": T})
    for k, w in enumerate((0.0, 1.0)):
        r = S.rng(11300 + k)
        zz, tt = pair_inputs(r, 4, 10, 3.0, True, k == 0)
        out.append(pair_case(SYM, zz, tt, {"forward_weight": w, "temperature": 2.0}, {}, "symmetric",
                             ("ForwardWeightEndpoint",), f"w = {w:g}: " + ("reverse" if w == 0 else "forward")
                             + " KL only", 11300 + k, "normal logits"))
    ok_z, ok_t = [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]], [[0.5, 2.5, 0.0], [1.0, -1.0, 2.0]]
    bad = [
        (ok_z, ok_t, {"temperature": 0.0}, "T = 0", "InvalidInput"),
        (ok_z, ok_t, {"forward_weight": -0.5}, "w < 0", "InvalidInput"),
        (ok_z, ok_t, {"forward_weight": 1.25}, "w > 1", "InvalidInput"),
        (ok_z, [[0.5, 2.5], [1.0, -1.0]], {}, "shapes disagree", "InvalidInput"),
        (ok_z, [[0.5, math.nan, 0.0], [1.0, -1.0, 2.0]], {}, "NaN teacher logit", "InvalidInput"),
        ([[1.0, 2.0, INF], [0.0, -1.0, 3.0]], ok_t, {}, "+inf student logit", "InvalidInput"),
        (ok_z, [[0.5, 2.5, 0.0], [-INF, -INF, -INF]], {}, "teacher row −inf everywhere", "InvalidInput"),
        ([[]], [[]], {}, "empty vocabulary", "InvalidInput"),
        ([[1.0, -INF, 0.5], [0.0, -1.0, 3.0]], ok_t, {},
         "student −inf where p > 0: the forward term KL(p‖q) is +inf", "InfiniteDivergence"),
        (ok_z, [[0.5, -INF, 0.0], [1.0, -1.0, 2.0]], {},
         "teacher −inf where q > 0: the reverse term KL(q‖p) is +inf", "InfiniteDivergence"),
        (ok_z, [[0.5, -INF, 0.0], [1.0, -1.0, 2.0]], {"forward_weight": 1.0},
         "w = 1 and the teacher −inf where q > 0: rejected (0·∞ is never evaluated)", "InfiniteDivergence"),
    ]
    for zz, tt, params, why, flag in bad:
        out.append(Case(SYM, {"student_logits": zz, "teacher_logits": tt},
                        params={"forward_weight": 0.5, "temperature": 1.0, **params}, group="invalid",
                        result="invalid", flags=(flag,), comment=why, provenance=generated(0, "fixed")))
    return out


def _jsd_cases() -> list[Case]:
    out = []
    for endpoints, group, seed0 in (("limit", "paper", 10000), ("kl", "kl-endpoints", 10500)):
        conv = {"endpoints": endpoints}
        out += random_pairs(JSD, group, conv, lambda T, r: {"beta": float(r.choice(BETAS)), "temperature": T},
                            seed0, 24)
        out += _large_pairs(JSD, group, conv, lambda T: {"beta": 0.5, "temperature": T}, seed0 + 100,
                            sizes=None if group == "paper" else ((2048, 1, 1.0),))
        # Seed 10706 (the default for 'kl') draws rows whose student top token and another token both
        # have p ≪ q, so ℓ = log q − log m ≈ log 2 at both: the exact reference's gradient (their
        # difference times e^-465) is then not stable to 32 digits at 50 digits; 10751 is.
        out += pair_edges(JSD, group, conv, lambda T: {"beta": 0.5, "temperature": T}, "any", seed0 + 200,
                          onehot_seed=None if group == "paper" else 10751,
                          low_params_of=lambda T, k: {"beta": (0.1, 0.9, 0.25, 0.5)[k], "temperature": T})
        # β at and near the endpoints.
        end_flag = "BetaEndpointLimit" if endpoints == "limit" else "BetaEndpointKL"
        for j, beta in enumerate((0.0, 1.0)):
            kind = "forward" if beta == 0.0 else "reverse"
            for i in range(4):
                seed = seed0 + 300 + 10 * j + i
                r = S.rng(seed)
                n, v = int(r.integers(1, 9)), int(r.choice(VOCABS))
                T = float(r.choice(TEMPERATURES))
                z, t = pair_inputs(r, n, v, 3.0, bool(i % 2), i % 2 == 0)
                out.append(pair_case(JSD, z, t, {"beta": beta, "temperature": T}, conv, group, (end_flag,),
                                     f"β = {beta:g}, N={n}, V={v}, T={T:g}" + (", float32" if i % 2 == 0 else ""),
                                     seed, "normal logits"))
            for k, (z, t, why) in enumerate(support_sets(kind)):
                seed = seed0 + 320 + 10 * j + k
                out.append(pair_case(JSD, z, t, {"beta": beta, "temperature": 1.0}, conv, group,
                                     (end_flag, "NegInfLogits"), f"β = {beta:g}: {why}", seed, "fixed"))
            r = S.rng(seed0 + 340 + j)
            z, t = cancellation_inputs(r, 3, 10, False)
            out.append(pair_case(JSD, z, t, {"beta": beta, "temperature": 1.0}, conv, group,
                                 (end_flag, "Cancellation"), f"β = {beta:g}: teacher = student + 1e-7 noise",
                                 seed0 + 340 + j, "normal logits + tiny noise"))
            r = S.rng(seed0 + 350 + j)
            z = S.in_dtype(clip_logits(S.logits(r, (6, 16), 4.0), 20.0), "bfloat16")
            t = S.in_dtype(clip_logits(S.near(r, z, 1.5), 20.0), "bfloat16")
            out.append(pair_case(JSD, z, t, {"beta": beta, "temperature": 1.0}, conv, group,
                                 (end_flag, "LowPrecision"), f"β = {beta:g}: logits exact in bfloat16",
                                 seed0 + 350 + j, "normal logits clipped to ±20, rounded to bfloat16", low=True))
        for k, beta in enumerate((1e-6, 1 - 1e-6)):
            seed = seed0 + 360 + k
            r = S.rng(seed)
            z, t = pair_inputs(r, 4, 10, 3.0, True, k == 0)
            out.append(pair_case(JSD, z, t, {"beta": beta, "temperature": 1.0}, conv, group, ("BetaNearEndpoint",),
                                 f"β = {beta!r}", seed, "normal logits"))
    ok_z, ok_t = [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]], [[0.5, 2.5, 0.0], [1.0, -1.0, 2.0]]
    bad = [
        (ok_z, ok_t, {"temperature": 0.0}, {}, "T = 0", "InvalidInput"),
        (ok_z, ok_t, {"temperature": -1.0}, {}, "T < 0", "InvalidInput"),
        (ok_z, ok_t, {"beta": -0.25}, {}, "β < 0", "InvalidInput"),
        (ok_z, ok_t, {"beta": 1.5}, {}, "β > 1", "InvalidInput"),
        (ok_z, ok_t, {}, {"endpoints": "clamp"}, "unknown endpoints convention", "InvalidInput"),
        (ok_z, [[0.5, 2.5], [1.0, -1.0]], {}, {}, "shapes disagree", "InvalidInput"),
        (ok_z, [[0.5, math.nan, 0.0], [1.0, -1.0, 2.0]], {}, {}, "NaN teacher logit", "InvalidInput"),
        ([[1.0, 2.0, INF], [0.0, -1.0, 3.0]], ok_t, {}, {}, "+inf student logit", "InvalidInput"),
        (ok_z, [[0.5, 2.5, 0.0], [-INF, -INF, -INF]], {}, {}, "teacher row −inf everywhere", "InvalidInput"),
        ([[]], [[]], {}, {}, "empty vocabulary", "InvalidInput"),
        ([[1.0, -INF, 0.5], [0.0, -1.0, 3.0]], ok_t, {"beta": 0.0}, {"endpoints": "kl"},
         "β = 0 with endpoints='kl' (KL(p‖q)) and the student −inf where p > 0: +inf", "InfiniteDivergence"),
        (ok_z, [[0.5, -INF, 0.0], [1.0, -1.0, 2.0]], {"beta": 1.0}, {"endpoints": "kl"},
         "β = 1 with endpoints='kl' (KL(q‖p)) and the teacher −inf where q > 0: +inf", "InfiniteDivergence"),
    ]
    for z, t, params, conv, why, flag in bad:
        out.append(Case(JSD, {"student_logits": z, "teacher_logits": t},
                        params={"beta": 0.5, "temperature": 1.0, **params}, conventions=conv, group="invalid",
                        result="invalid", flags=(flag,), comment=why, provenance=generated(0, "fixed")))
    return out


def cases() -> list[Case]:
    # The cases added in 1.3.0 come last: the groups they open follow the existing ones, whose
    # test ids (tcId, by position) stay.
    return with_cotangents(_softmax_cases() + _hinton_cases() + _token_kl_cases() + _jsd_cases()
                           + distill_low.cases() + _hinton_cross_entropy_cases() + _token_kl_cross_entropy_cases()
                           + _cross_entropy_invalid_cases() + _symmetric_kl_cases() + distill_low.cases_1_3()
                           + distill_divergences.cases() + distill_sparse.cases()
                           + _hinton_cross_entropy_cases(t2_scale=False, seeds=8600))
