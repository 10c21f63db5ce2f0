"""Vectors for ``distill.softmax``, ``distill.hinton``, ``distill.token_kl`` and
``distill.generalized_jsd`` (Hinton et al. 2015 §2; MiniLLM §2.1 eq. 1; GKD §3).

Conventions: ``t2_scale`` (hinton), ``direction`` (token_kl) and ``endpoints``
(generalized_jsd); one group per convention set. ``temperature``, ``alpha`` and ``beta`` are
arguments and vary inside a group. Cotangents are nonzero multiples of 1/64 in [−2, 2] (exact in
every dtype, so a low-precision target receives exactly the cotangent the gradient was computed
with), drawn from a hash of the case's inputs and parameters so that the scale functions, which
see only those, can rebuild them. The tolerance scales are explained above ``SCALES``.
"""
from __future__ import annotations

import hashlib
import json
import math

import mpmath
import numpy as np

from conformance import catalog, numbers
from conformance.generate import sampling as S
from conformance.generate.case import Case, article, generated

SM, HIN, TKL, JSD = "distill.softmax", "distill.hinton", "distill.token_kl", "distill.generalized_jsd"
SEC_CLASSIC = "Destilación clásica: una temperatura en ambas funciones softmax"
SEC_ONPOLICY = "Destilación on-policy: el alumno ocupa el primer lugar en la KL"
SEC_VOCAB = "Un token muestreado o todo el vocabulario"

INF = math.inf
TEMPERATURES = (0.5, 1.0, 2.0, 4.0)
VOCABS = (2, 3, 4, 5, 7, 8, 12, 16, 24, 32, 50, 64)
ALPHAS = (0.0, 0.1, 0.5, 0.9, 1.0)
BETAS = (0.1, 0.5, 0.9)
ULP_1E4_F32 = 2.0 ** -10   # spacing of float32 (and binary64 multiples of it) near 1e4

NOTES = {
    "Article": {"category": "article", "description": "A number printed in the source article: logits (2, 0) → "
                "probabilities (0.88, 0.12) at T = 1 and (0.73, 0.27) at T = 2; teacher (0.8, 0.2) and student "
                "(0.4, 0.6) weighted by the teacher (forward KL) or the student (reverse KL); the full-vocabulary "
                "reverse KL d_t = 0.5 log(0.5/0.6) + 0.2 log(0.2/0.3) + 0.3 log(0.3/0.1) ≈ 0.157. Logits are the "
                "logarithms of the printed probabilities (binary64)."},
    "Random": {"category": "random", "description": "Random logits from a fixed seed: V from 2 to 64, N up to 32 "
               "rows, logits ~ N(0, σ²) with σ ∈ {1, 3, 6}, the teacher either independent or the student plus "
               "N(0, 1) noise; T ∈ {0.5, 1, 2, 4}; α ∈ {0, 0.1, 0.5, 0.9, 1}, β ∈ {0.1, 0.5, 0.9}; half the "
               "cases rounded to float32."},
    "Large": {"category": "random", "description": "A realistic vocabulary (V from 1000 to 4096) with few rows: the "
              "vocabulary reductions at their real length."},
    "Ties": {"category": "edge", "description": "Equal logits in a row (uniform rows, tied maxima): the argmax is "
             "not unique, and a stable log-softmax must not depend on which tied token it picks."},
    "EqualInputs": {"category": "edge", "description": "Student logits equal to the teacher's: every divergence "
                    "and its gradient are exactly 0 (the Hinton loss is then its cross-entropy part)."},
    "HugeLogits": {"category": "numerics", "description": "Logits near ±1e4: every implementation must shift by "
                   "the row maximum (exp(1e4) overflows every dtype); probabilities e^−1e4 underflow to 0. With "
                   "T = 1e-3 and logits that differ by float32 spacings near 1e4 (2^−10), the exponents "
                   "(z − max)/T are of order 1: implementations that divide first and subtract the maximum "
                   "afterwards lose about u·|z|/T in each exponent, which the stored scale allows for."},
    "TinyTemperature": {"category": "numerics", "description": "T = 1e-3: logits that differ by about 1e-3 give "
                        "exponents of order 1, larger differences give near one-hot rows; gradients carry 1/T."},
    "NegInfLogits": {"category": "edge", "description": "−inf logits (impossible tokens, probability exactly 0) "
                     "on one or both sides, with supports for which the divergence is finite: 0·log 0 = 0 must "
                     "not become NaN, an impossible student token gets gradient 0, and a token impossible for "
                     "the weighting distribution but possible for the other contributes 0. Implementations that "
                     "evaluate p·(log p − log q) with p = 0 and log p = −inf "
                     "(e.g. F.kl_div(..., log_target=True)) return NaN here."},
    "Cancellation": {"category": "numerics", "description": "Teacher = student + noise of 1e-7 (binary64), or "
                     "+ one float32 spacing on some tokens (float32): the divergence is of order 1e-14 while its "
                     "terms are of order 1e-7 or 1; judged against the magnitude of the terms (the tolerance scales "
                     "of conformance/generate/distill.py): the difference of two log-softmaxes passes, a result "
                     "that is not close to 0 fails."},
    "NearDeterministic": {"category": "numerics", "description": "Rows with one logit 38·T above N(0, 1) "
                          "others (1 − q_top ≈ e^−35, below binary64's u), or any logits at T = 1e-3: the KL "
                          "between two such rows with the same top token is tiny, with different top tokens large "
                          "(~1/T)."},
    "AlphaEndpoint": {"category": "edge", "description": "α = 0 (cross-entropy only: the teacher is ignored) and "
                      "α = 1 (distillation term only: the labels are ignored)."},
    "BetaNearEndpoint": {"category": "numerics", "description": "β = 1e-6 or 1 − 1e-6: the generalized JSD is of "
                         "order β·(1−β); log β and log(1 − β) must keep their digits (log1p(−β))."},
    "BetaEndpointLimit": {"category": "convention", "description": "β = 0 or β = 1 with endpoints='limit' (the "
                          "continuous formula, GKD eq. 2): the mixture equals one of the two distributions and "
                          "the value and its gradient are exactly 0."},
    "BetaEndpointKL": {"category": "convention", "description": "β = 0 or β = 1 with endpoints='kl', as TRL 1.16.0 "
                       "and Liger 0.8.5 special-case them: β = 0 gives the forward KL(p‖q), β = 1 the reverse "
                       "KL(q‖p), without T²."},
    "ForwardKL": {"category": "convention", "description": "direction='forward': KL(p‖q) weighted by the teacher "
                  "(the soft term of classic distillation, without T²); gradient (q − p)/T."},
    "NoT2Scale": {"category": "convention", "description": "t2_scale=False: the soft term α·KL(p^(T)‖q^(T)) is not "
                  "multiplied by T² (Liger 0.8.5 chunked distillation, TRL 1.16.0 GKD); the hard-label term stays "
                  "at T = 1."},
    "LowPrecision": {"category": "edge", "description": "Logits exactly representable in bfloat16 or float16 "
                     "(or both: bfloat16 values inside float16's range), judged in those dtypes: random shapes "
                     "up to V = 4096 (|z| ≤ 30, T from 0.05 to 64, teachers independent, near or close to the "
                     "student) and the edges low precision changes (ties, −inf logits, saturated rows, logits "
                     "near ±1e4); see conformance/compare.py for the careful tolerance model."},
    "InvalidInput": {"category": "invalid", "description": "Input or parameter outside the objective's domain: "
                     "T ≤ 0, α or β outside [0, 1], unknown direction or endpoints, shapes that disagree, labels "
                     "out of range, NaN or +inf logits, a row that is −inf everywhere, an empty vocabulary, logits "
                     "of the wrong rank (a scalar; 1-D where hinton needs [N, V]); must be rejected."},
    "InfiniteDivergence": {"category": "invalid", "description": "A −inf logit where the weighting distribution has "
                           "probability > 0 (support mismatch), or a −inf student logit at the label: the "
                           "divergence (or cross-entropy) is +inf; must be rejected, not returned as inf or NaN."},
}

GROUPS = {
    "paper": "Paper defaults. distill.softmax: Hinton et al. 2015 §2 (softmax of z/T). distill.hinton: Hinton et al. "
             "2015 §2 — hard-label cross-entropy at T = 1 plus the soft term at T multiplied by T² "
             "(t2_scale=True); [reading-math-3] §Destilación clásica (λ = alpha). distill.token_kl: reverse KL(q‖p), "
             "student first — MiniLLM (Gu et al. 2024) §2.1 eq. 1, DeepSeek-V4 §5.1.2 eq. 29; also TRL 1.16.0 "
             "trainer/distillation_trainer.py with kernels/chunked_divergence.py (beta=1.0: reverse KL at T, no "
             "T²). distill.generalized_jsd: GKD (Agarwal et al. 2024) §3 eq. 2, the continuous formula at every β "
             "(endpoints='limit': 0 at β = 0 and β = 1)",
    "no-t2": "distill.hinton with t2_scale=False: Liger-Kernel 0.8.5 chunked_loss/fused_linear_distillation.py "
             "(weight_hard_loss·CE of the raw logits + weight_soft_loss·divergence of logits/T, no T² anywhere; "
             "with chunked_loss/jsd_loss.py at beta=0 the divergence is KL(p‖q)); TRL 1.16.0 "
             "experimental/gkd/gkd_trainer.py GKDTrainer.generalized_jsd_loss (beta=0: KL(p‖q) of logits/T, no T²; "
             "no hard-label term, i.e. alpha=1)",
    "forward": "distill.token_kl with direction='forward': KL(p‖q), teacher first (the soft term of classic "
               "distillation without T²) — TRL 1.16.0 experimental/gkd/gkd_trainer.py generalized_jsd_loss with "
               "beta=0 and trainer/distillation_trainer.py + kernels/chunked_divergence.py with beta=0.0; Liger "
               "0.8.5 chunked_loss/jsd_loss.py and ops/jsd.py with beta=0",
    "kl-endpoints": "distill.generalized_jsd with endpoints='kl': β = 0 → KL(p‖q), β = 1 → KL(q‖p), the "
                    "general formula in between — TRL 1.16.0 experimental/gkd/gkd_trainer.py "
                    "GKDTrainer.generalized_jsd_loss (`if beta == 0` / `elif beta == 1` branches) and "
                    "trainer/distillation_trainer.py + kernels/chunked_divergence.py (beta 0.0 forward, 1.0 "
                    "reverse); Liger 0.8.5 chunked_loss/jsd_loss.py distillation_loss_fn and ops/jsd.py _jsd_kernel "
                    "(same special cases)",
    "invalid": "inputs outside the domain (all conventions)",
}


# ----------------------------------------------------------------------------- input builders

def _cotangent_seed(objective: str, merged: dict) -> int:
    """A seed from the objective, its inputs and every parameter (paper defaults filled in): the
    scale functions, which see only those, can rebuild the cotangent a case was given."""
    spec = catalog.get(objective)
    content = {"objective": objective,
               "inputs": {i.name: numbers.encode_input(merged[i.name]) for i in spec.inputs},
               "params": {p.name: merged[p.name] for p in spec.params}}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _cotangent(objective: str, merged: dict):
    """The case's cotangent: nonzero multiples of 1/64 in [−2, 2] (exact in bfloat16 and float16),
    shaped like the output."""
    r = S.rng(_cotangent_seed(objective, merged))
    shape = np.shape(merged["logits" if objective == SM else "student_logits"])
    shape = () if objective == HIN else shape if objective == SM else shape[:-1]
    ks = r.integers(1, 129, size=shape) * r.choice([-1, 1], size=shape)
    return (ks / 64.0).tolist()


def _with_cotangents(out: list[Case]) -> list[Case]:
    for case in out:
        if case.result != "invalid":
            spec = catalog.get(case.objective)
            merged = {**spec.defaults, **case.conventions, **case.params, **case.inputs}
            case.cotangents = {spec.outputs[0]: _cotangent(case.objective, merged)}
    return out


def _logits(r, n: int, v: int, spread: float) -> list:
    return S.logits(r, (n, v), spread)


def _teacher(r, student: list, spread: float, independent: bool) -> list:
    if independent:
        return S.logits(r, (len(student), len(student[0])), spread)
    return S.near(r, student, 1.0)


def _clip(x, bound: float) -> list:
    if isinstance(x, list):
        return [_clip(v, bound) for v in x]
    return max(-bound, min(bound, x))


def _shape_nv(r, max_elems: int = 512) -> tuple[int, int]:
    v = int(r.choice(VOCABS))
    n = int(r.integers(1, 33))
    n = max(1, min(n, max_elems // v))
    return n, v


def _maybe_f32(x, flag: bool):
    return S.in_dtype(x, "float32") if flag else x


# Fixed rows with −inf logits (V = 6). A: the same impossible tokens on both sides; B: the student
# has more impossible tokens (finite for KL(q‖p)); C: the teacher has more (finite for KL(p‖q)).
_NI_STUDENT_A = [[1.5, -INF, 0.25, -2.0, -INF, 3.0], [-INF, 0.5, -INF, -INF, 2.0, -1.0],
                 [0.0, 0.0, -INF, 1.0, -0.5, -INF]]
_NI_TEACHER_A = [[0.5, -INF, 1.25, -1.0, -INF, 2.0], [-INF, 1.5, -INF, -INF, 1.0, 0.0],
                 [1.0, -0.5, -INF, 0.0, 0.5, -INF]]
_NI_STUDENT_B = [[-INF, -INF, 0.25, -2.0, -INF, 3.0], [-INF, 0.5, -INF, -INF, 2.0, -1.0],
                 [0.0, -INF, -INF, 1.0, -0.5, -INF], [-INF, -INF, 2.0, -INF, -INF, -INF]]
_NI_TEACHER_B = _NI_TEACHER_A + [[0.5, 1.0, -1.5, 0.0, 2.5, -3.0]]
_NI_STUDENT_C = _NI_STUDENT_A + [[0.5, 1.0, -1.5, 0.0, 2.5, -3.0]]
_NI_TEACHER_C = [[0.5, -INF, 1.25, -INF, -INF, 2.0], [-INF, 1.5, -INF, -INF, 1.0, 0.0],
                 [1.0, -0.5, -INF, 0.0, -INF, -INF], [-INF, -INF, 2.0, -INF, -INF, -INF]]
_NI_LABELS_A = [5, 4, 3]
_NI_LABELS_C = [5, 4, 3, 2]

# ±1e4 logits: T = 1 and T = 2 (gaps of order 1) and T = 1e-3 (gaps of float32 spacings).
_HUGE_STUDENT = [[1e4, -1e4, 1e4 - 1, 9998.5, 0.0], [-1e4, -1e4 + 2.5, -1e4 + 1, 1e4, -1e4],
                 [1e4, 1e4, -1e4, -1e4, 9999.75]]
_HUGE_TEACHER = [[1e4 - 0.5, -1e4, 1e4, 9997.0, -1e4 + 3], [-1e4 + 1, -1e4, -1e4 + 2, 1e4 - 2, 1e4],
                 [1e4, 9999.5, -1e4, 1e4, 9999.25]]
_U = ULP_1E4_F32
_HUGE_TINY_STUDENT = [[1e4, 1e4 - _U, 1e4 - 2 * _U, -1e4], [-1e4, -1e4 + _U, -1e4 + 3 * _U, -1e4 + 2 * _U],
                      [1e4 - 4 * _U, 1e4, -1e4, 1e4 - _U]]
_HUGE_TINY_TEACHER = [[1e4 - _U, 1e4, 1e4 - 3 * _U, 1e4 - 4 * _U], [-1e4 + 2 * _U, -1e4, -1e4 + _U, -1e4 + 3 * _U],
                      [1e4, 1e4 - 2 * _U, -1e4, 1e4 - _U]]


def _pair_inputs(r, n: int, v: int, spread: float, independent: bool, f32: bool) -> tuple[list, list]:
    z = _logits(r, n, v, spread)
    t = _teacher(r, z, spread, independent)
    return _maybe_f32(z, f32), _maybe_f32(t, f32)


def _labels(r, n: int, v: int) -> list:
    return [int(y) for y in r.integers(0, v, size=n)]


def _near_deterministic(r, n: int, v: int, T: float, same_top: bool) -> tuple[list, list]:
    z = S.logits(r, (n, v), 1.0)
    t = S.logits(r, (n, v), 1.0)
    for i in range(n):
        k = int(r.integers(0, v))
        z[i][k] += 38.0 * T
        kt = k if same_top else (k + 1 + int(r.integers(0, v - 1))) % v
        t[i][kt] += 38.0 * T
    return z, t


def _cancellation(r, n: int, v: int, f32: bool) -> tuple[list, list]:
    """Teacher = student + 1e-7 noise (binary64) or ± one float32 spacing on about half the tokens."""
    z = S.logits(r, (n, v), 3.0)
    if not f32:
        return z, S.near(r, z, 1e-7)
    z = S.in_dtype(z, "float32")
    zf = np.asarray(z, dtype=np.float32)
    step = r.integers(-1, 2, size=zf.shape)
    t = np.where(step > 0, np.nextafter(zf, np.float32(INF)),
                 np.where(step < 0, np.nextafter(zf, np.float32(-INF)), zf))
    return z, t.astype(float).tolist()


# ----------------------------------------------------------------------------- distill.softmax

def _sm(logits, T, flags, comment, seed, recipe, low=False):
    return Case(SM, {"logits": logits}, params={"temperature": T}, flags=flags, comment=comment,
                low_precision=low, provenance=generated(seed, recipe))


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
        z = _maybe_f32(z, i % 2 == 0)
        out.append(_sm(z, T, ("Random",), f"random shape {lead + (v,)}, σ={spread:g}, T={T:g}"
                       + (", float32" if i % 2 == 0 else ""), seed, "normal logits"))
    for k, (v, n, T) in enumerate(((1024, 2, 1.0), (4096, 1, 2.0))):
        seed = 7100 + k
        r = S.rng(seed)
        z = S.in_dtype(S.logits(r, (n, v), 4.0), "float32")
        out.append(_sm(z, T, ("Large",), f"V={v}, N={n}, T={T:g}, float32", seed, "normal logits"))
    out.append(_sm([[0.5] * 7], 1.0, ("Ties",),
                   "a uniform row (V = 7)", 7200, "fixed"))
    out.append(_sm([[3.0, 3.0, -1.0, 2.0], [-2.0, 5.0, 5.0, 5.0]], 0.5, ("Ties",),
                   "tied maxima", 7201, "fixed"))
    out.append(_sm(_HUGE_STUDENT, 1.0, ("HugeLogits",), "logits ±1e4, T = 1", 7210, "fixed"))
    out.append(_sm(_HUGE_TEACHER, 2.0, ("HugeLogits",), "logits ±1e4, T = 2", 7211, "fixed"))
    out.append(_sm(_HUGE_TINY_STUDENT, 1e-3, ("HugeLogits", "TinyTemperature"),
                   "logits ±1e4 differing by 2^-10, T = 1e-3", 7212, "fixed"))
    tiny = [[0.5, 0.501, 0.4995, -3.0, 0.5005], [1.0, 1.002, 0.999, 1.0, 0.0]]
    out.append(_sm(tiny, 1e-3, ("TinyTemperature",), "logits 1e-3 apart, T = 1e-3", 7220, "fixed"))
    out.append(_sm(S.in_dtype(tiny, "float32"), 1e-3, ("TinyTemperature",), "logits 1e-3 apart, T = 1e-3, float32",
                   7221, "fixed"))
    r = S.rng(7222)
    out.append(_sm(S.in_dtype(S.logits(r, (4, 16), 3.0), "float32"), 1e-3, ("TinyTemperature", "NearDeterministic"),
                   "normal logits at T = 1e-3: one-hot rows", 7222, "normal logits"))
    out.append(_sm(_NI_STUDENT_B, 1.0, ("NegInfLogits",), "−inf logits, one row with a single possible token",
                   7230, "fixed"))
    out.append(_sm([[-INF, 2.0, -INF], [0.0, -INF, 0.0]], 0.5, ("NegInfLogits", "Ties"), "−inf logits with ties",
                   7231, "fixed"))
    for k, T in enumerate((0.5, 2.0)):
        r = S.rng(7240 + k)
        z, _ = _near_deterministic(r, 3, 9, T, True)
        out.append(_sm(_maybe_f32(z, k == 1), T, ("NearDeterministic",), f"top logit 38·T above the rest, T = {T:g}",
                       7240 + k, "normal logits"))
    out.append(_sm([[0.25, -1.5, 3.0, 3.0 + 2 ** -40, 1.0]], 1.0, ("Ties",),
                   "two maxima 2^-40 apart (binary64)", 7202, "fixed"))
    for k, dtype in enumerate(("bfloat16", "float16", "bfloat16", "float16")):
        seed = 7250 + k
        r = S.rng(seed)
        v = (8, 32, 64, 5)[k]
        T = (1.0, 0.5, 2.0, 1.0)[k]
        z = S.in_dtype(_clip(S.logits(r, (4, v), 5.0), 20.0), dtype)
        out.append(_sm(z, T, ("LowPrecision",), f"logits exact in {dtype}, V={v}, T={T:g}", seed,
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

def _hin(z, t, y, T, alpha, group, flags, comment, seed, recipe, low=False):
    t2 = group != "no-t2"
    flags = flags + (() if t2 else ("NoT2Scale",))
    return Case(HIN, {"student_logits": z, "teacher_logits": t, "labels": y},
                params={"temperature": T, "alpha": alpha}, conventions={"t2_scale": t2}, group=group,
                flags=flags, comment=comment, low_precision=low, provenance=generated(seed, recipe))


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
            r = S.rng(seed)
            n, v = _shape_nv(r)
            spread = float(r.choice([1.0, 3.0, 6.0]))
            T = float(r.choice(TEMPERATURES))
            alpha = float(r.choice(ALPHAS))
            f32 = i % 2 == 0
            z, t = _pair_inputs(r, n, v, spread, bool(i % 3 == 0), f32)
            y = _labels(r, n, v)
            out.append(_hin(z, t, y, T, alpha, group, ("Random",),
                            f"random N={n}, V={v}, σ={spread:g}, T={T:g}, α={alpha:g}" + (", float32" if f32 else ""),
                            seed, "normal logits; teacher independent or student + N(0,1)"))
    for k, (v, n, T) in enumerate(((1024, 2, 2.0), (4096, 1, 1.0))):
        seed = 8200 + k
        r = S.rng(seed)
        z, t = _pair_inputs(r, n, v, 4.0, False, True)
        out.append(_hin(z, t, _labels(r, n, v), T, 0.5, "paper", ("Large",), f"V={v}, N={n}, T={T:g}, float32",
                        seed, "normal logits; teacher = student + N(0,1)"))
    for group in ("paper", "no-t2"):
        g = 0 if group == "paper" else 50
        r = S.rng(8300 + g)
        z = S.logits(r, (4, 8), 3.0)
        z[1] = [1.25] * 8
        z[2][3] = z[2][5] = max(z[2]) + 1.0
        out.append(_hin(z, [row[:] for row in z], _labels(r, 4, 8), 2.0, 0.5, group, ("EqualInputs", "Ties"),
                        "teacher = student (KL 0): loss = (1 − α)·CE; a uniform row and a tied maximum", 8300 + g,
                        "normal logits"))
        out.append(_hin(_HUGE_STUDENT, _HUGE_TEACHER, [0, 3, 4], 1.0, 0.5, group, ("HugeLogits",),
                        "logits ±1e4, T = 1", 8301 + g, "fixed"))
        out.append(_hin(_HUGE_STUDENT, _HUGE_TEACHER, [3, 2, 1], 2.0, 0.9, group, ("HugeLogits",),
                        "logits ±1e4, T = 2, α = 0.9 (row 1: label probability e^-2e4, cross-entropy ≈ 2e4)",
                        8302 + g, "fixed"))
        out.append(_hin(_HUGE_TINY_STUDENT, _HUGE_TINY_TEACHER, [0, 1, 2], 1e-3, 0.5, group,
                        ("HugeLogits", "TinyTemperature"), "logits ±1e4 differing by 2^-10, T = 1e-3", 8303 + g,
                        "fixed"))
        r = S.rng(8304 + g)
        z, t = _pair_inputs(r, 5, 10, 3.0, True, True)
        out.append(_hin(z, t, _labels(r, 5, 10), 1e-3, 0.5, group, ("TinyTemperature",),
                        "normal logits at T = 1e-3 (near one-hot rows), float32", 8304 + g, "normal logits"))
        out.append(_hin(_NI_STUDENT_A, _NI_TEACHER_A, _NI_LABELS_A, 1.0, 0.5, group, ("NegInfLogits",),
                        "−inf at the same tokens on both sides", 8305 + g, "fixed"))
        out.append(_hin(_NI_STUDENT_C, _NI_TEACHER_C, _NI_LABELS_C, 2.0, 0.5, group, ("NegInfLogits",),
                        "teacher −inf where the student is finite (p = 0 terms)", 8306 + g, "fixed"))
        for f32 in (False, True):
            r = S.rng(8307 + g + f32)
            z, t = _cancellation(r, 4, 16, f32)
            out.append(_hin(z, t, _labels(r, 4, 16), 1.0, 1.0, group, ("Cancellation",),
                            "teacher = student + " + ("one float32 spacing" if f32 else "1e-7 noise") + ", α = 1",
                            8307 + g + f32, "normal logits + tiny noise"))
        for k, same in enumerate((True, False)):
            r = S.rng(8312 + g + k)
            z, t = _near_deterministic(r, 3, 12, 1.0, same)
            out.append(_hin(z, t, _labels(r, 3, 12), 1.0, 0.5, group, ("NearDeterministic",),
                            "one-hot-like rows, " + ("the same" if same else "different") + " top tokens",
                            8312 + g + k, "normal logits + 38·T at one token"))
        r = S.rng(8310 + g)
        z, t = _pair_inputs(r, 6, 8, 3.0, True, False)
        out.append(_hin(z, t, _labels(r, 6, 8), 2.0, 0.0, group, ("AlphaEndpoint",), "α = 0: cross-entropy only",
                        8310 + g, "normal logits"))
        out.append(_hin(z, t, _labels(r, 6, 8), 2.0, 1.0, group, ("AlphaEndpoint",), "α = 1: distillation only",
                        8311 + g, "normal logits"))
        for k, dtype in enumerate(("bfloat16", "float16")):
            seed = 8320 + g + k
            r = S.rng(seed)
            v = (16, 64)[k]
            T = (2.0, 1.0)[k]
            z = S.in_dtype(_clip(S.logits(r, (8, v), 4.0), 20.0), dtype)
            t = S.in_dtype(_clip(S.near(r, z, 1.5), 20.0), dtype)
            out.append(_hin(z, t, _labels(r, 8, v), T, 0.5, group, ("LowPrecision",),
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


# ----------------------------------------------------------------------------- token_kl and generalized_jsd

def _pair_case(obj, z, t, params, conv, group, flags, comment, seed, recipe, low=False):
    return Case(obj, {"student_logits": z, "teacher_logits": t}, params=params, conventions=conv, group=group,
                flags=flags, comment=comment, low_precision=low, provenance=generated(seed, recipe))


def _support_sets(kind: str) -> list[tuple]:
    """(student, teacher, comment) −inf sets with a finite divergence for ``kind``:
    'reverse' needs supp q ⊆ supp p, 'forward' supp p ⊆ supp q, 'any' (0 < β < 1) neither."""
    sets = [(_NI_STUDENT_A, _NI_TEACHER_A, "−inf at the same tokens on both sides")]
    if kind in ("reverse", "any"):
        sets.append((_NI_STUDENT_B, _NI_TEACHER_B, "student −inf where the teacher is finite; a one-hot student row"))
    if kind in ("forward", "any"):
        sets.append((_NI_STUDENT_C, _NI_TEACHER_C, "teacher −inf where the student is finite; a one-hot teacher row"))
    return sets


def _pair_edges(obj, group, conv, params_of, kind, seed0, extra_flags=(), onehot_seed=None,
                low_params_of=None) -> list[Case]:
    """Edge cases shared by token_kl and generalized_jsd; ``params_of(T)`` gives the params.
    ``onehot_seed`` replaces the seed of the T = 1e-3 random case where the exact reference's
    digits are not stable for the default one (see the jsd caller); ``low_params_of(T, k)`` gives
    the params of the k-th low-precision case (default ``params_of(T)``)."""
    out = []
    fl = extra_flags

    def add(z, t, T, flags, comment, seed, recipe="fixed", low=False, params=None):
        out.append(_pair_case(obj, z, t, params or params_of(T), conv, group, flags + fl, comment, seed, recipe,
                              low))

    r = S.rng(seed0)
    z = S.logits(r, (4, 8), 3.0)
    z[1] = [-0.75] * 8
    z[2][1] = z[2][6] = max(z[2]) + 0.5
    add(z, [row[:] for row in z], 2.0, ("EqualInputs", "Ties"), "teacher = student: divergence 0; a uniform row "
        "and a tied maximum", seed0, "normal logits")
    r = S.rng(seed0 + 1)
    z, t = _pair_inputs(r, 3, 6, 2.0, True, True)
    z[0] = [0.5] * 6
    t[2] = [-3.0] * 6
    t[1][0] = t[1][4] = max(t[1])
    add(z, t, 1.0, ("Ties",), "uniform student row, uniform teacher row, tied teacher maximum", seed0 + 1,
        "normal logits")
    add(_HUGE_STUDENT, _HUGE_TEACHER, 1.0, ("HugeLogits",), "logits ±1e4, T = 1", seed0 + 2)
    add(_HUGE_STUDENT, _HUGE_TEACHER, 2.0, ("HugeLogits",), "logits ±1e4, T = 2", seed0 + 3)
    add(_HUGE_TINY_STUDENT, _HUGE_TINY_TEACHER, 1e-3, ("HugeLogits", "TinyTemperature"),
        "logits ±1e4 differing by 2^-10, T = 1e-3", seed0 + 4)
    tiny_z = S.in_dtype([[0.5, 0.501, 0.4995, -3.0, 0.5005], [1.0, 1.002, 0.999, 1.0, 0.0]], "float32")
    tiny_t = S.in_dtype([[0.5005, 0.5, 0.499, 0.2, 0.5], [1.001, 1.0, 1.0, 0.998, 0.5]], "float32")
    add(tiny_z, tiny_t, 1e-3, ("TinyTemperature",), "logits 1e-3 apart, T = 1e-3, float32", seed0 + 5)
    seed = onehot_seed or seed0 + 6
    r = S.rng(seed)
    z, t = _pair_inputs(r, 4, 12, 3.0, True, True)
    add(z, t, 1e-3, ("TinyTemperature", "NearDeterministic"), "normal logits at T = 1e-3 (one-hot rows), float32",
        seed, "normal logits")
    for k, (z, t, why) in enumerate(_support_sets(kind)):
        add(z, t, (1.0, 2.0, 0.5)[k], ("NegInfLogits",), why, seed0 + 7 + k)
    for f32 in (False, True):
        r = S.rng(seed0 + 10 + f32)
        z, t = _cancellation(r, 4, 16, f32)
        add(z, t, 1.0, ("Cancellation",), "teacher = student + " + ("one float32 spacing" if f32 else "1e-7 noise"),
            seed0 + 10 + f32, "normal logits + tiny noise")
    for k, same in enumerate((True, False)):
        r = S.rng(seed0 + 14 + k)
        z, t = _near_deterministic(r, 3, 12, 1.0, same)
        add(z, t, 1.0, ("NearDeterministic",), "one-hot-like rows, " + ("the same" if same else "different")
            + " top tokens", seed0 + 14 + k, "normal logits + 38·T at one token")
    r = S.rng(seed0 + 13)
    z, t = _near_deterministic(r, 2, 5, 0.5, True)
    add(z, t, 0.5, ("NearDeterministic",), "one-hot-like rows at T = 0.5, same top token", seed0 + 13,
        "normal logits + 38·T at one token")
    for k, dtype in enumerate(("bfloat16", "float16", "bfloat16", "float16")):
        seed = seed0 + 20 + k
        r = S.rng(seed)
        v = (8, 16, 64, 32)[k]
        T = (1.0, 2.0, 0.5, 1.0)[k]
        z = S.in_dtype(_clip(S.logits(r, (8, v), 4.0), 20.0), dtype)
        t = S.in_dtype(_clip(S.near(r, z, 1.5) if k % 2 else S.logits(r, (8, v), 4.0), 20.0), dtype)
        params = (low_params_of or (lambda T, k: params_of(T)))(T, k)
        extra = "".join(f", β={val:g}" for key, val in params.items() if key == "beta")
        add(z, t, T, ("LowPrecision",), f"logits exact in {dtype}, V={v}, T={T:g}{extra}", seed,
            f"normal logits clipped to ±20, rounded to {dtype}", low=True, params=params)
    return out


def _random_pairs(obj, group, conv, params_of, seed0, count, extra_flags=()) -> list[Case]:
    out = []
    for i in range(count):
        seed = seed0 + i
        r = S.rng(seed)
        n, v = _shape_nv(r)
        spread = float(r.choice([1.0, 3.0, 6.0]))
        T = float(r.choice(TEMPERATURES))
        params = params_of(T, r)
        f32 = i % 2 == 0
        z, t = _pair_inputs(r, n, v, spread, bool(i % 3 == 0), f32)
        desc = ", ".join(f"{'β' if k == 'beta' else k}={val:g}" for k, val in params.items() if k != "temperature")
        out.append(_pair_case(obj, z, t, params, conv, group, ("Random",) + extra_flags,
                              f"random N={n}, V={v}, σ={spread:g}, T={T:g}" + (f", {desc}" if desc else "")
                              + (", float32" if f32 else ""), seed,
                              "normal logits; teacher independent or student + N(0,1)"))
    return out


def _large_pairs(obj, group, conv, params_of, seed0, extra_flags=(), sizes=None):
    out = []
    sizes = sizes or ((1024, 2, 1.0), (4096, 1, 2.0))
    for k, (v, n, T) in enumerate(sizes):
        seed = seed0 + k
        r = S.rng(seed)
        z, t = _pair_inputs(r, n, v, 4.0, False, True)
        out.append(_pair_case(obj, z, t, params_of(T), conv, group, ("Large",) + extra_flags,
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
        out += _random_pairs(TKL, group, conv, lambda T, r: {"temperature": T}, seed0, 28, extra)
        out += _large_pairs(TKL, group, conv, lambda T: {"temperature": T}, seed0 + 100, extra,
                            sizes=None if group == "paper" else ((2048, 1, 1.0),))
        out += _pair_edges(TKL, group, conv, lambda T: {"temperature": T}, direction, seed0 + 200, extra)
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


def _jsd_cases() -> list[Case]:
    out = []
    for endpoints, group, seed0 in (("limit", "paper", 10000), ("kl", "kl-endpoints", 10500)):
        conv = {"endpoints": endpoints}
        out += _random_pairs(JSD, group, conv, lambda T, r: {"beta": float(r.choice(BETAS)), "temperature": T},
                             seed0, 24)
        out += _large_pairs(JSD, group, conv, lambda T: {"beta": 0.5, "temperature": T}, seed0 + 100,
                            sizes=None if group == "paper" else ((2048, 1, 1.0),))
        # Seed 10706 (the default for 'kl') draws rows whose student top token and another token both
        # have p ≪ q, so ℓ = log q − log m ≈ log 2 at both: the exact reference's gradient (their
        # difference times e^-465) is then not stable to 32 digits at 50 digits; 10751 is.
        out += _pair_edges(JSD, group, conv, lambda T: {"beta": 0.5, "temperature": T}, "any", seed0 + 200,
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
                z, t = _pair_inputs(r, n, v, 3.0, bool(i % 2), i % 2 == 0)
                out.append(_pair_case(JSD, z, t, {"beta": beta, "temperature": T}, conv, group, (end_flag,),
                                      f"β = {beta:g}, N={n}, V={v}, T={T:g}" + (", float32" if i % 2 == 0 else ""),
                                      seed, "normal logits"))
            for k, (z, t, why) in enumerate(_support_sets(kind)):
                seed = seed0 + 320 + 10 * j + k
                out.append(_pair_case(JSD, z, t, {"beta": beta, "temperature": 1.0}, conv, group,
                                      (end_flag, "NegInfLogits"), f"β = {beta:g}: {why}", seed, "fixed"))
            r = S.rng(seed0 + 340 + j)
            z, t = _cancellation(r, 3, 10, False)
            out.append(_pair_case(JSD, z, t, {"beta": beta, "temperature": 1.0}, conv, group,
                                  (end_flag, "Cancellation"), f"β = {beta:g}: teacher = student + 1e-7 noise",
                                  seed0 + 340 + j, "normal logits + tiny noise"))
            r = S.rng(seed0 + 350 + j)
            z = S.in_dtype(_clip(S.logits(r, (6, 16), 4.0), 20.0), "bfloat16")
            t = S.in_dtype(_clip(S.near(r, z, 1.5), 20.0), "bfloat16")
            out.append(_pair_case(JSD, z, t, {"beta": beta, "temperature": 1.0}, conv, group,
                                  (end_flag, "LowPrecision"), f"β = {beta:g}: logits exact in bfloat16",
                                  seed0 + 350 + j, "normal logits clipped to ±20, rounded to bfloat16", low=True))
        for k, beta in enumerate((1e-6, 1 - 1e-6)):
            seed = seed0 + 360 + k
            r = S.rng(seed)
            z, t = _pair_inputs(r, 4, 10, 3.0, True, k == 0)
            out.append(_pair_case(JSD, z, t, {"beta": beta, "temperature": 1.0}, conv, group, ("BetaNearEndpoint",),
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


# ----------------------------------------------------------------------------- low precision
#
# Cases judged in bfloat16 and float16 (the careful model of conformance/compare.py holds them to
# a few ulps of the dtype): random shapes up to V = 4096 on the two low-precision grids
# (sampling.in_low: bfloat16 values that float16 also holds, judged in both; float16 values), and
# the edges that low precision changes — ties (the coarse grid makes them common), −inf logits,
# saturated rows, logits near ±1e4, equal inputs, tiny temperatures, the α and β endpoints.

LOW_VOCABS = (2, 3, 5, 8, 13, 16, 32, 50, 64, 100, 128, 256, 512, 1000, 1024)
LOW_ELEMS = 384          # N·V of a random case; the large ones below keep the real vocabulary
LOW_LARGE = ((4096, 1), (1024, 2))
LOW_RANDOM = 45          # per objective: 30 on the bfloat16+float16 grid, 15 on the float16 grid
LOW_CLIP = 30.0
LOW_FLAGS = ("LowPrecision",)


def _low_shape(r, i: int) -> tuple[int, int]:
    """(N, V) of the i-th random low-precision case: the last ones are the large vocabularies."""
    k = i - (LOW_RANDOM - len(LOW_LARGE))
    if k >= 0:
        v, n = LOW_LARGE[k]
        return n, v
    v = int(r.choice(LOW_VOCABS))
    return max(1, min(int(r.integers(1, 17)), LOW_ELEMS // v)), v


def _low_pair(r, n: int, v: int, grid: str) -> tuple[list, list, str]:
    """Student and teacher logits on ``grid``: the teacher independent, the student plus N(0, 1)
    noise, or the student plus N(0, 0.1) noise (close rows, where a swapped direction or a
    missing factor moves the value least)."""
    spread = float(r.choice([1.0, 3.0, 6.0]))
    kind = str(r.choice(["independent", "near", "close"]))
    z = S.logits(r, (n, v), spread)
    t = S.logits(r, (n, v), spread) if kind == "independent" else S.near(r, z, 1.0 if kind == "near" else 0.1)
    z, t = (S.in_low(_clip(x, LOW_CLIP), grid) for x in (z, t))
    return z, t, f"σ={spread:g}, teacher {kind}"


def _low_ties(r, grid: str) -> tuple[list, list]:
    """Rows with ties: uniform, a tied maximum, logits drawn from a few grid values."""
    z = [[0.5] * 6, [2.0, 2.0, -1.0, 0.25, 2.0, 1.0], [float(x) for x in r.choice([-1.0, 0.0, 1.5], 6)],
         [-3.0, 4.0, 4.0, 4.0, 0.0, -3.0]]
    t = [[1.0, 1.0, -0.5, 1.0, 1.0, 0.0], [0.5] * 6, [float(x) for x in r.choice([-2.0, 0.5, 1.0], 6)],
         [4.0, -3.0, 4.0, 0.0, 4.0, 0.0]]
    return S.in_low(z, grid), S.in_low(t, grid)


def _low_saturated(r, n: int, v: int, T: float, same_top: bool) -> tuple[list, list]:
    """Rows whose top logit is 30·T above N(0, 1) others: probabilities e^−30 beside 1 (0 in
    float16, a subnormal-free bfloat16 value), q_top rounds to 1."""
    z, t = _near_deterministic(r, n, v, T, same_top)
    for rows in (z, t):
        for row in rows:
            k = max(range(v), key=lambda j: row[j])
            row[k] -= 8.0 * T   # 38·T → 30·T above the rest
    return S.in_low(z, S.BOTH), S.in_low(t, S.BOTH)


def _low_huge(r, n: int, v: int) -> tuple[list, list]:
    """Logits 9984 + 64·k and −9984 − 64·k (k small integers; both grids hold them) at T = 64:
    exponents of order 1 after the maximum is shifted out, e^156 before (overflow)."""
    def row():
        sign = float(r.choice([-1.0, 1.0]))
        return [sign * 9984.0 + 64.0 * float(k) for k in r.integers(-3, 4, size=v)]
    return [row() for _ in range(n)], [row() for _ in range(n)]


def _low_tiny_t(r, n: int, v: int) -> tuple[list, list]:
    """Logits 0.5 + k/64 at T = 0.05: exponents k·0.3125."""
    return ([[0.5 + float(k) / 64 for k in r.integers(-8, 9, size=v)] for _ in range(n)],
            [[0.5 + float(k) / 64 for k in r.integers(-8, 9, size=v)] for _ in range(n)])


def _low_desc(grid, n, v, T, extra=""):
    return f"logits exact in {S.grid_note(grid)}, N={n}, V={v}, T={T:g}" + (f", {extra}" if extra else "")


def _low_softmax_cases() -> list[Case]:
    out = []
    seed0 = 20000
    for i in range(LOW_RANDOM):
        seed, grid = seed0 + i, S.low_grid(i)
        r = S.rng(seed)
        n, v = _low_shape(r, i)
        T = float(r.choice(TEMPERATURES))
        spread = float(r.choice([1.0, 3.0, 6.0]))
        lead = (n,) if i % 4 else ((int(r.integers(1, 4)), max(1, n // 3)) if n > 1 else ())
        z = S.in_low(_clip(S.logits(r, lead + (v,), spread), LOW_CLIP), grid)
        flags = ("Random",) + (("Large",) if v >= 1000 else ()) + LOW_FLAGS
        out.append(_sm(z, T, flags, _low_desc(grid, n, v, T, f"shape {lead + (v,)}, σ={spread:g}"), seed,
                       f"normal logits clipped to ±{LOW_CLIP:g}, rounded to the {grid} grid", low=True))
    r = S.rng(seed0 + 100)
    z, _ = _low_ties(r, S.BOTH)
    out.append(_sm(z, 1.0, ("Ties",) + LOW_FLAGS, "uniform rows and tied maxima, exact in bfloat16 and float16",
                   seed0 + 100, "fixed rows", low=True))
    out.append(_sm(_NI_STUDENT_B, 0.5, ("NegInfLogits",) + LOW_FLAGS, "−inf logits, one row with a single "
                   "possible token, T = 0.5", seed0 + 101, "fixed", low=True))
    out.append(_sm([[-INF, 2.0, -INF, 2.0], [0.0, -INF, 0.0, -0.5]], 2.0, ("NegInfLogits", "Ties") + LOW_FLAGS,
                   "−inf logits with ties, T = 2", seed0 + 106, "fixed", low=True))
    for T, seed in ((1.0, seed0 + 102), (4.0, seed0 + 103), (0.5, seed0 + 107)):
        r = S.rng(seed)
        z, _ = _low_saturated(r, 4, 24, T, True)
        out.append(_sm(z, T, ("NearDeterministic",) + LOW_FLAGS, f"saturated rows: top logit 30·T above, T={T:g}",
                       seed, "normal logits + 30·T at one token", low=True))
    r = S.rng(seed0 + 104)
    z, _ = _low_huge(r, 3, 16)
    out.append(_sm(z, 64.0, ("HugeLogits",) + LOW_FLAGS, "logits ±9984 + 64·k, T = 64", seed0 + 104,
                   "fixed grid values", low=True))
    r = S.rng(seed0 + 105)
    z, _ = _low_tiny_t(r, 3, 12)
    out.append(_sm(z, 0.05, ("TinyTemperature",) + LOW_FLAGS, "logits 0.5 + k/64 at T = 0.05", seed0 + 105,
                   "0.5 + k/64", low=True))
    return out


def _low_hinton_cases() -> list[Case]:
    out = []
    seed0 = 20200
    for i in range(LOW_RANDOM):
        seed, grid = seed0 + i, S.low_grid(i)
        group = ("paper", "no-t2")[i % 2]
        r = S.rng(seed)
        n, v = _low_shape(r, i)
        T = float(r.choice(TEMPERATURES))
        alpha = float(r.choice(ALPHAS))
        z, t, how = _low_pair(r, n, v, grid)
        flags = ("Random",) + (("Large",) if v >= 1000 else ()) + LOW_FLAGS
        out.append(_hin(z, t, _labels(r, n, v), T, alpha, group, flags, _low_desc(grid, n, v, T, f"α={alpha:g}, {how}"),
                        seed, f"normal logits clipped to ±{LOW_CLIP:g}, rounded to the {grid} grid", low=True))
    for g, group in enumerate(("paper", "no-t2")):
        s = seed0 + 100 + 20 * g
        r = S.rng(s)
        z, t = _low_ties(r, S.BOTH)
        out.append(_hin(z, t, [1, 0, 2, 3], 2.0, 0.5, group, ("Ties",) + LOW_FLAGS, "uniform rows and tied maxima",
                        s, "fixed rows", low=True))
        out.append(_hin(z, [row[:] for row in z], [1, 0, 2, 3], 2.0, 0.9, group, ("EqualInputs", "Ties") + LOW_FLAGS,
                        "teacher = student: loss = (1 − α)·CE", s + 1, "fixed rows", low=True))
        out.append(_hin(_NI_STUDENT_C, _NI_TEACHER_C, _NI_LABELS_C, 2.0, 0.75, group, ("NegInfLogits",) + LOW_FLAGS,
                        "teacher −inf where the student is finite (p = 0 terms)", s + 2, "fixed", low=True))
        for k, same in enumerate((True, False)):
            r = S.rng(s + 3 + k)
            z, t = _low_saturated(r, 3, 12, 1.0, same)
            out.append(_hin(z, t, _labels(r, 3, 12), 1.0, 0.5, group, ("NearDeterministic",) + LOW_FLAGS,
                            "saturated rows, " + ("the same" if same else "different") + " top tokens", s + 3 + k,
                            "normal logits + 30·T at one token", low=True))
        r = S.rng(s + 5)
        z, t = _low_huge(r, 3, 8)
        out.append(_hin(z, t, _labels(r, 3, 8), 64.0, 0.25, group, ("HugeLogits",) + LOW_FLAGS,
                        "logits ±9984 + 64·k, T = 64, α = 0.25 (cross-entropy at T = 1 of logits 64 apart)", s + 5,
                        "fixed grid values", low=True))
        r = S.rng(s + 6)
        z, t, _ = _low_pair(r, 6, 16, S.BOTH)
        for k, alpha in enumerate((0.0, 1.0)):
            out.append(_hin(z, t, _labels(r, 6, 16), 2.0, alpha, group, ("AlphaEndpoint",) + LOW_FLAGS,
                            f"α = {alpha:g}", s + 6 + k, "normal logits", low=True))
    return out


def _low_pair_cases(obj, groups, seed0) -> list[Case]:
    """Random and edge low-precision cases for token_kl and generalized_jsd. ``groups``: (group,
    conventions, kind for the −inf supports, params(T, r) of a random case, params(T) of an edge)."""
    out = []
    for i in range(LOW_RANDOM):
        seed, grid = seed0 + i, S.low_grid(i)
        group, conv, _, params_of, _ = groups[i % len(groups)]
        r = S.rng(seed)
        n, v = _low_shape(r, i)
        T = float(r.choice(TEMPERATURES))
        params = params_of(T, r)
        z, t, how = _low_pair(r, n, v, grid)
        extra = "".join(f", β={val:g}" for key, val in params.items() if key == "beta")
        flags = ("Random",) + (("Large",) if v >= 1000 else ()) + LOW_FLAGS
        out.append(_pair_case(obj, z, t, params, conv, group, flags, _low_desc(grid, n, v, T, how + extra), seed,
                              f"normal logits clipped to ±{LOW_CLIP:g}, rounded to the {grid} grid", low=True))
    for g, (group, conv, kind, _, edge_params) in enumerate(groups):
        out += _low_pair_edges(obj, group, conv, kind, edge_params, seed0 + 100 + 20 * g)
    return out


def _low_pair_edges(obj, group, conv, kind, edge_params, s) -> list[Case]:
    out = []
    r = S.rng(s)

    def add(z, t, T, flags, comment, k, recipe="fixed"):
        out.append(_pair_case(obj, z, t, edge_params(T), conv, group, flags + LOW_FLAGS, comment, s + k, recipe,
                              low=True))
    z, t = _low_ties(r, S.BOTH)
    add(z, t, 1.0, ("Ties",), "uniform rows and tied maxima", 0, "fixed rows")
    add(z, [row[:] for row in z], 2.0, ("EqualInputs", "Ties"), "teacher = student: divergence 0", 1, "fixed rows")
    for k, (zs, ts, why) in enumerate(_support_sets(kind)):   # temperatures unlike _pair_edges' (new uids)
        add(zs, ts, (0.75, 1.5, 3.0)[k], ("NegInfLogits",), why, 2 + k)
    for k, same in enumerate((True, False)):
        z, t = _low_saturated(S.rng(s + 5 + k), 3, 12, 1.0, same)
        add(z, t, 1.0, ("NearDeterministic",), "saturated rows, " + ("the same" if same else "different")
            + " top tokens", 5 + k, "normal logits + 30·T at one token")
    z, t = _low_huge(S.rng(s + 7), 3, 8)
    add(z, t, 64.0, ("HugeLogits",), "logits ±9984 + 64·k, T = 64", 7, "fixed grid values")
    z, t = _low_tiny_t(S.rng(s + 8), 3, 12)
    add(z, t, 0.05, ("TinyTemperature",), "logits 0.5 + k/64 at T = 0.05", 8, "0.5 + k/64")
    return out


def _low_token_kl_cases() -> list[Case]:
    groups = [(group, {"direction": d}, d, lambda T, r: {"temperature": T}, lambda T: {"temperature": T})
              for group, d in (("paper", "reverse"), ("forward", "forward"))]
    return _low_pair_cases(TKL, groups, 20400)


def _low_jsd_cases() -> list[Case]:
    """β drawn from BETAS, 0.25 and the endpoints (0 and 1: zero under 'limit', a KL under 'kl');
    the edge cases at β = 0.25 (−inf supports that are finite only for 0 < β < 1)."""
    groups = [(group, {"endpoints": e}, "any",
               lambda T, r: {"beta": float(r.choice(BETAS + (0.0, 1.0, 0.25))), "temperature": T},
               lambda T: {"beta": 0.25, "temperature": T})
              for group, e in (("paper", "limit"), ("kl-endpoints", "kl"))]
    return _low_pair_cases(JSD, groups, 20600)


def cases() -> list[Case]:
    return _with_cotangents(_softmax_cases() + _hinton_cases() + _token_kl_cases() + _jsd_cases()
                            + _low_softmax_cases() + _low_hinton_cases() + _low_token_kl_cases()
                            + _low_jsd_cases())


# ----------------------------------------------------------------------------- tolerance scales
#
# The tolerance is k·u·scale + ulp(want) with k = K_BASE·(1 + log2 V) (conformance/compare.py): K_BASE
# roundings on the critical path, growing with the log of the vocabulary reduction. Each scale is
# the magnitude of what the result inherits rounding errors from, in two parts:
#
#   s1  the terms of the vocabulary sum (Σ w_i|ℓ_i| for a KL, the probability for a softmax), whose
#       rounding errors do grow with the reduction: they get the full k;
#   sA  the roundings made once per token while forming its log-probability. The plain evaluation
#       that libraries use — log_softmax(z/T) for both models, then Σ w·(log a − log b) (TRL 1.16.0
#       GKDTrainer.generalized_jsd_loss, Liger 0.8.5 chunked_loss/jsd_loss.py) — rounds z_i/T, the
#       log-sum-exp (≈ max/T) and log q_i, so log q_i carries an absolute error ≈ u·A_i with
#       A_i = (|z_i| + |max z|)/T + |log q_i|; weighted by the probabilities (and, for the weight
#       e^{log q_i} itself, by |ℓ_i|). These errors do not grow with V: sA enters divided by
#       d = 1 + log2 V, i.e. it is granted K_BASE roundings, not K_BASE·(1 + log2 V).
#
# Measured on these vectors (float64 and float32, every case): the plain evaluation above stays
# below 0.75·u·sA + 10·u·s1, i.e. under 1/10 of the tolerance; refimpl/torch and refimpl/arrays
# (shift-first log-softmax, log-ratios from logit differences) under 1/7; so do TRL's and Liger's own
# functions through their adapters (float32). Deliberate bugs (z·T for z/T, T on one side only, T²
# on the token KL or none in Hinton's loss, the hard label at T, swapped direction or β, the mean
# instead of the sum over V, a float16 softmax inside a float32 function) fail every float64 and
# float32 case where they change the value by more than 0.1%, except in float32 the near-ties of
# ±1e4 logits at T = 1e-3 and β = 1e-6, 1 − 1e-6, where the plain evaluation has no correct digit
# either. That is the price of the A part, which makes the scale depend on |z|/T, not only on logit
# differences: those cases test float64, NaN and overflow, while ties among logits of order 1 are
# judged tightly. One scale per output: the largest row's, so rows of very different sizes go into
# separate cases.

SCALE_DPS = 20  # the scales need two correct digits; 20 keep ℓ = log q − log p exact enough at |z|/T ~ 1e7
_NEG_INF = mpmath.mpf("-inf")


class _Dist:
    """softmax(z/T) of one row, with per token (see ``SCALES``):
    a_i = (|z_i| + |max z|)/T, the magnitude of the exponent's roundings, and
    A_i = a_i + |log q_i|, the magnitude of the roundings of log q_i = z_i/T − lse."""

    def __init__(self, row, T):
        row = [mpmath.mpf(v) for v in row]
        self.fin = [not mpmath.isinf(z) for z in row]
        m = max(z for z, f in zip(row, self.fin) if f)
        x = [(z - m) / T if f else _NEG_INF for z, f in zip(row, self.fin)]
        l1 = mpmath.log(mpmath.fsum(mpmath.exp(xi) for xi, f in zip(x, self.fin) if f))
        self.logp = [xi - l1 if f else _NEG_INF for xi, f in zip(x, self.fin)]
        self.p = [mpmath.exp(li) if f else mpmath.mpf(0) for li, f in zip(self.logp, self.fin)]
        self.a = [(abs(z) + abs(m)) / T if f else mpmath.mpf(0) for z, f in zip(row, self.fin)]
        self.A = [ai + abs(li) if f else mpmath.mpf(0) for ai, li, f in zip(self.a, self.logp, self.fin)]
        self.d = 1 + mpmath.log(len(row), 2)

    def rel(self) -> list:
        """Relative error magnitude of each q_i from its exponents' roundings:
        (1 − q_i)·a_i + Σ_{j≠i} q_j a_j (a shift common to all exponents cancels, so a saturated top
        token keeps ~(1 − q_top))."""
        k = max(range(len(self.p)), key=lambda i: self.p[i])
        rest = mpmath.fsum(pj for j, pj in enumerate(self.p) if j != k)   # 1 − q_k, without cancelling
        qa = mpmath.fsum(pj * aj for pj, aj in zip(self.p, self.a))
        return [(rest if i == k else 1 - pi) * ai + (qa - pi * ai) if f else mpmath.mpf(0)
                for i, (pi, ai, f) in enumerate(zip(self.p, self.a, self.fin))]


class _Mixture:
    """The JSD's mixture m as a distribution for ``_kl_parts``; the error of log m is passed
    to ``_kl_parts`` as ``extra``."""

    def __init__(self, logm, m, fin):
        self.logp, self.p, self.fin = logm, m, fin
        self.A = [mpmath.mpf(0)] * len(m)


def _rows(x, T) -> list[_Dist]:
    arr = np.array(x, dtype=object)
    return [_Dist(row, T) for row in arr.reshape(-1, arr.shape[-1])]


def _row_cotangents(objective, kwargs, n_rows: int) -> list:
    c = np.array(_cotangent(objective, kwargs), dtype=object)
    return [abs(mpmath.mpf(v)) for v in c.reshape(n_rows)]


def _kl_parts(A, B, extra=None):
    """KL(A‖B) = Σ a_i ℓ_i (ℓ = log a − log b) and its two magnitudes:
        s1 = Σ_{a_i>0} a_i |ℓ_i| + Σ_{a_i=0} b_i               the terms of the sum;
        sA = Σ_{a_i>0} a_i (A^a_i (1 + |ℓ_i|) + A^b_i + x_i) + Σ_{a_i=0} b_i (A^b_i + x_i)
    the roundings of log a_i and log b_i, and of the weight a_i = e^{log a_i} times its ℓ_i
    (x_i = ``extra``: further error of log b_i, the JSD's log m)."""
    x = extra or [0] * len(A.p)
    kl, s1, sa, ell = [], [], [], []
    for i in range(len(A.p)):
        if A.fin[i]:
            li = A.logp[i] - B.logp[i]
            ell.append(li)
            kl.append(A.p[i] * li)
            s1.append(A.p[i] * abs(li))
            sa.append(A.p[i] * (A.A[i] * (1 + abs(li)) + B.A[i] + x[i]))
        else:
            ell.append(None)
            if B.fin[i]:
                s1.append(B.p[i])
                sa.append(B.p[i] * (B.A[i] + x[i]))
    return mpmath.fsum(kl), mpmath.fsum(s1), mpmath.fsum(sa), ell


def _centred_grad(Q: _Dist, ell, K, s1, sA, extra) -> mpmath.mpf:
    """max_j of the magnitude of q_j(ℓ_j − K), which autograd forms as q_j(ℓ_j + 1) − q_j(K + 1):
    terms q_j(|ℓ_j| + s1 + 1) (s1 bounds K's sum), roundings
    q_j(A^q_j (1 + |ℓ_j − K|) + x_j + sA)/d (x_j: the error of ℓ_j beyond log q_j's)."""
    return max((Q.p[j] * ((abs(ell[j]) + s1 + 1) + (Q.A[j] * (1 + abs(ell[j] - K)) + extra[j] + sA) / Q.d)
                for j in range(len(Q.p)) if Q.fin[j]), default=mpmath.mpf(0))


def _forward_grad(Q: _Dist, P: _Dist) -> mpmath.mpf:
    """max_j of the magnitude of q_j − p_j: terms q_j + p_j, roundings (q_j A^q_j + p_j A^p_j)/d."""
    return max(Q.p[j] + P.p[j] + (Q.p[j] * Q.A[j] + P.p[j] * P.A[j]) / Q.d for j in range(len(Q.p)))


def _softmax_scale(kwargs, outputs, grads):
    """probs: max_i q_i·(1 + (rel_i + A_i)/d) — the largest probability (an absolute error policy),
    more where the row is ill-conditioned or the logits large against T. rel_i (``_Dist.rel``):
    rounding the exponents z/T (or (z − max)/T) moves q_i by q_i·rel_i·u, which matters for
    near-ties among logits whose |z|/T is large. A_i: a softmax formed as exp(log_softmax(z/T))
    (TRL 1.16.0 trainer/utils.py selective_log_softmax, exponentiated) carries the absolute error
    u·A_i of log q_i = z_i/T − lse into q_i, also in a saturated row (1 − q_top below u·|lse|).

    grad q_j(c_j − Σ q c)/T: terms q_j(|c_j| + Σ q|c|) (a saturated row cancels them entirely
    unless written in the centred form), times 1 + A_j/d for the rounding of q_j in the log
    domain, and q_j·rel_j·|c_j − Σ q c|/d for the exponents' roundings; over T."""
    with mpmath.workdps(SCALE_DPS):
        T = mpmath.mpf(kwargs["temperature"])
        rows = _rows(kwargs["logits"], T)
        cts = np.array(_cotangent(SM, kwargs), dtype=object).reshape(len(rows), -1)
        value, grad = [], []
        for D, c in zip(rows, cts):
            c = [mpmath.mpf(v) for v in c]
            rel = D.rel()
            value.append(max(pi * (1 + (ri + Ai) / D.d) for pi, ri, Ai in zip(D.p, rel, D.A)))
            mean = mpmath.fsum(pi * ci for pi, ci in zip(D.p, c))
            amean = mpmath.fsum(pi * abs(ci) for pi, ci in zip(D.p, c))
            grad.append(max(D.p[j] * ((abs(c[j]) + amean) * (1 + D.A[j] / D.d) + rel[j] * abs(c[j] - mean) / D.d) / T
                            for j in range(len(D.p))))
        return {"probs": max(value), "grad:logits": max(grad)}


def _kl_rows_scale(objective, kwargs, direction):
    """Per row s1 + sA/d (``_kl_parts``) and the gradient's magnitude times |c|/T; max over rows."""
    with mpmath.workdps(SCALE_DPS):
        T = mpmath.mpf(kwargs["temperature"])
        qs, ps = _rows(kwargs["student_logits"], T), _rows(kwargs["teacher_logits"], T)
        value, grad = [], []
        for Q, P, c in zip(qs, ps, _row_cotangents(objective, kwargs, len(qs))):
            if direction == "reverse":
                K, s1, sA, ell = _kl_parts(Q, P)
                g = _centred_grad(Q, ell, K, s1, sA, P.A)
            else:
                _, s1, sA, _ = _kl_parts(P, Q)
                g = _forward_grad(Q, P)
            value.append(s1 + sA / Q.d)
            grad.append(c * g / T)
        return max(value), max(grad)


def _token_kl_scale(kwargs, outputs, grads):
    """kl: the largest row's s1 + sA/d (weights q for 'reverse', p for 'forward'); grad: reverse
    q_j(ℓ_j − K)/T (``_centred_grad``), forward (q_j − p_j)/T (``_forward_grad``), times |c|."""
    value, grad = _kl_rows_scale(TKL, kwargs, kwargs["direction"])
    return {"kl": value, "grad:student_logits": grad}


def _hinton_scale(kwargs, outputs, grads):
    """loss: mean over rows of (1−α)(|log q^(1)_y| + A^(1)_y/d) + α·s·(s1 + sA/d) of the forward
    KL(p^(T)‖q^(T)). grad: |c|/N · max over rows and tokens of (1−α)(q^(1)_j + [j = y] +
    q^(1)_j A^(1)_j/d) + α·s·(q_j + p_j + (q_j A^q_j + p_j A^p_j)/d)/T. elements (the careful
    low-precision model's terms): the mean of the per-row losses' magnitudes."""
    with mpmath.workdps(SCALE_DPS):
        T = mpmath.mpf(kwargs["temperature"])
        a = mpmath.mpf(kwargs["alpha"])
        s = T * T if kwargs["t2_scale"] else mpmath.mpf(1)
        q1s = _rows(kwargs["student_logits"], mpmath.mpf(1))
        qs, ps = _rows(kwargs["student_logits"], T), _rows(kwargs["teacher_logits"], T)
        c = abs(mpmath.mpf(_cotangent(HIN, kwargs)))
        value, grad, rows = [], [], []
        for Q1, Q, P, y in zip(q1s, qs, ps, kwargs["labels"]):
            kl, s1, sA, _ = _kl_parts(P, Q)
            rows.append(abs((1 - a) * -Q1.logp[y] + a * s * kl))
            value.append((1 - a) * (abs(Q1.logp[y]) + Q1.A[y] / Q1.d) + a * s * (s1 + sA / Q.d))
            grad.append(max((1 - a) * (Q1.p[j] + (1 if j == y else 0) + Q1.p[j] * Q1.A[j] / Q1.d)
                            + a * s * (Q.p[j] + P.p[j] + (Q.p[j] * Q.A[j] + P.p[j] * P.A[j]) / Q.d) / T
                            for j in range(len(Q.p))))
        n = len(qs)
        return {"loss": mpmath.fsum(value) / n, "grad:student_logits": c * max(grad) / n,
                "elements:loss": mpmath.fsum(rows) / n}


def _jsd_scale(kwargs, outputs, grads):
    """0 < β < 1: β·(s1 + sA/d)(p‖m) + (1−β)·(s1 + sA/d)(q‖m) (``_kl_parts`` against the mixture),
    where log m = logsumexp(log q + log(1−β), log p + log β) adds x_i = A^q_i + A^p_i + |log m_i| +
    |log β| + |log(1−β)| to the roundings of log m_i. grad (1−β)·q_j(ℓ_j − KL(q‖m))/T with
    ℓ = log q − log m: ``_centred_grad`` with the same x_i (the terms through m are at most
    (1−β)q_j, inside its +1), times (1−β)|c|/T.

    β ∈ {0, 1}: endpoints='kl' is the forward / reverse KL (as ``_token_kl_scale``); endpoints=
    'limit' is exactly 0 with a zero gradient, which the continuous formula also gives in floating
    point (log m = log q or log p exactly, weights 0·finite): scale 0, an exact zero (or a
    subnormal of the dtype) is required."""
    beta = mpmath.mpf(kwargs["beta"])
    if beta in (0, 1):
        if kwargs["endpoints"] == "limit":
            return {"jsd": mpmath.mpf(0), "grad:student_logits": mpmath.mpf(0)}
        value, grad = _kl_rows_scale(JSD, kwargs, "forward" if beta == 0 else "reverse")
        return {"jsd": value, "grad:student_logits": grad}
    with mpmath.workdps(SCALE_DPS):
        T = mpmath.mpf(kwargs["temperature"])
        qs, ps = _rows(kwargs["student_logits"], T), _rows(kwargs["teacher_logits"], T)
        lb, l1b = abs(mpmath.log(beta)), abs(mpmath.log1p(-beta))
        value, grad = [], []
        for Q, P, c in zip(qs, ps, _row_cotangents(JSD, kwargs, len(qs))):
            m = [beta * pj + (1 - beta) * qj for pj, qj in zip(P.p, Q.p)]
            fin = [qf or pf for qf, pf in zip(Q.fin, P.fin)]
            logm = [mpmath.log(mj) if f else _NEG_INF for mj, f in zip(m, fin)]
            x = [Q.A[i] + P.A[i] + abs(logm[i]) + lb + l1b if fin[i] else 0 for i in range(len(m))]
            M = _Mixture(logm, m, fin)
            _, s1_pm, sA_pm, _ = _kl_parts(P, M, x)
            k_qm, s1_qm, sA_qm, ell = _kl_parts(Q, M, x)
            value.append(beta * (s1_pm + sA_pm / Q.d) + (1 - beta) * (s1_qm + sA_qm / Q.d))
            grad.append(c * (1 - beta) * _centred_grad(Q, ell, k_qm, s1_qm + 1, sA_qm, x) / T)
        return {"jsd": max(value), "grad:student_logits": max(grad)}


SCALES = {SM: _softmax_scale, HIN: _hinton_scale, TKL: _token_kl_scale, JSD: _jsd_scale}
