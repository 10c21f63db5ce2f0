"""Argument checks shared by every backend, so that all of them reject the same inputs
with the same message (the message always names the offending argument).

Two layers. The primitives (``real``, ``positive``, ``in_range``, ``choice``, ``flag``, ...)
say what kind of value is allowed. Above them, one function per parameter or convention of
the catalog (``temperature``, ``std_ddof``, ``clip_band``, ``aggregation``, ...) holds that
parameter's whole rule, its options and its message; the backends call only these, so each
convention is decided in exactly one place. The array checks (NaN, infinities, dtypes) live
with each backend's array conversion (``refimpl.exact.mp``, ``refimpl.arrays._xp``,
``refimpl.torch._common``), which must read its own array type; the shape checks are here.
"""
from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import Iterable


class InputError(ValueError):
    """An argument is outside the objective's domain."""


def fail(name: str, problem: str) -> None:
    raise InputError(f"{name}: {problem}")


# ----------------------------------------------------------------------------- primitives

def _is_bool(value) -> bool:
    # Python's bool, NumPy's bool_ (not a bool subclass) and the like: a truth value is never
    # accepted as a number, where it would silently read as 0 or 1.
    return type(value).__name__ in ("bool", "bool_")


def real(name: str, value) -> float:
    """A finite real number as a float. Truth values and strings are refused (a parameter
    given as True or "0.5" is a mistake in the caller, not a number)."""
    if _is_bool(value) or isinstance(value, (str, bytes)):
        fail(name, f"expected a real number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        fail(name, f"expected a real number, got {value!r}")
    if math.isnan(v) or math.isinf(v):
        fail(name, f"must be finite, got {value!r}")
    return v


def positive(name: str, value) -> float:
    v = real(name, value)
    if v <= 0:
        fail(name, f"must be > 0, got {value!r}")
    return v


def nonnegative(name: str, value) -> float:
    v = real(name, value)
    if v < 0:
        fail(name, f"must be >= 0, got {value!r}")
    return v


def in_range(name: str, value, lo: float, hi: float, *, lo_open=False, hi_open=False) -> float:
    v = real(name, value)
    below = v <= lo if lo_open else v < lo
    above = v >= hi if hi_open else v > hi
    if below or above:
        left, right = "(" if lo_open else "[", ")" if hi_open else "]"
        fail(name, f"must be in {left}{lo}, {hi}{right}, got {value!r}")
    return v


def optional_positive(name: str, value):
    return None if value is None else positive(name, value)


def choice(name: str, value, options: Iterable[str]) -> str:
    options = tuple(options)
    # isinstance first: an array compared with a string is an array, whose truth is undefined
    if not isinstance(value, str) or value not in options:
        fail(name, f"must be one of {', '.join(map(repr, options))}, got {value!r}")
    return str(value)


def flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        fail(name, f"must be True or False, got {value!r}")
    return value


def count(name: str, value, lo: int = 1, *, integral_float: bool = True) -> int:
    """An integer >= ``lo``; truth values are refused, an integral float such as 4.0 is
    accepted when ``integral_float``."""
    kinds = (numbers.Integral, float) if integral_float else numbers.Integral
    if _is_bool(value) or not isinstance(value, kinds):
        fail(name, f"must be an integer >= {lo}, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        fail(name, f"must be an integer >= {lo}, got {value!r}")
    if int(value) < lo:
        fail(name, f"must be an integer >= {lo}, got {value!r}")
    return int(value)


def optional_count(name: str, value) -> int | None:
    """None, or an integer >= 1 (see :func:`count`)."""
    return None if value is None else count(name, value)


# ----------------------------------------------------------------------------- shapes

def same_shape(**shapes: tuple) -> tuple:
    """All named shapes must be equal; returns the common shape."""
    items = list(shapes.items())
    first_name, first = items[0]
    for name, shape in items[1:]:
        if tuple(shape) != tuple(first):
            fail(name, f"shape {tuple(shape)} does not match {first_name} shape {tuple(first)}")
    return tuple(first)


def per_sequence(name: str, shape: tuple, logp_shape: tuple) -> None:
    """A per-sequence input ([B]) must match the batch dimension of the [B,T] log-probabilities."""
    if tuple(shape) != tuple(logp_shape[:1]):
        fail(name, f"shape {tuple(shape)} does not match the batch dimension {tuple(logp_shape[:1])} of logp")


def rank(name: str, shape: tuple, expected: int | tuple) -> None:
    allowed = (expected,) if isinstance(expected, int) else expected
    if len(shape) not in allowed:
        fail(name, f"expected {' or '.join(map(str, allowed))} dimensions, got shape {tuple(shape)}")


def nonempty(name: str, shape: tuple) -> None:
    if any(d == 0 for d in shape):
        fail(name, f"must not be empty, got shape {tuple(shape)}")


# ----------------------------------------------------------------------------- distill

DIRECTIONS = ("reverse", "forward")
ENDPOINTS = ("limit", "kl")


def temperature(value) -> float:
    """The softmax temperature T > 0 (Hinton et al. 2015 §2)."""
    return positive("temperature", value)


def alpha(value) -> float:
    """Hinton's weight λ of the soft term, in [0, 1]."""
    return in_range("alpha", value, 0.0, 1.0)


def t2_scale(value) -> bool:
    """Whether Hinton's soft term is multiplied by T²."""
    return flag("t2_scale", value)


def direction(value) -> str:
    """token_kl's direction: 'reverse' Σ q log q/p (student first) or 'forward'."""
    return choice("direction", value, DIRECTIONS)


SOFT_TERMS = ("kl", "cross_entropy")


def soft_term(value, direction_value: str = "forward") -> str:
    """How the teacher-weighted soft term is written: 'kl' Σ p log(p/q) or Hinton's 'cross_entropy'
    −Σ p log q (= KL + H(p)). A cross-entropy has the teacher's weights, so only a forward
    (teacher-first) term has one."""
    value = choice("soft_term", value, SOFT_TERMS)
    if value == "cross_entropy" and direction_value != "forward":
        fail("soft_term", f"'cross_entropy' needs direction='forward', got direction={direction_value!r} (the "
                          "cross-entropy −Σ p log q is weighted by the teacher; the reverse KL has no such form)")
    return value


def forward_weight(value) -> float:
    """symmetric_kl's weight w of KL(p‖q) in w·KL(p‖q) + (1−w)·KL(q‖p), in [0, 1]."""
    return in_range("forward_weight", value, 0.0, 1.0)


def jsd_beta(value) -> float:
    """The generalized JSD's mixture weight β in [0, 1]."""
    return in_range("beta", value, 0.0, 1.0)


def endpoints(value) -> str:
    """What the generalized JSD is at β ∈ {0, 1}: the formula's 'limit' or TRL's 'kl'."""
    return choice("endpoints", value, ENDPOINTS)


def skew_alpha(value) -> float:
    """The skew KL's mixing weight α in (0, 1] (DistiLLM §3): the mixture αp + (1−α)q keeps the
    divergence finite for every pair of rows only while α > 0; α = 0 is the plain KL
    (``distill.token_kl``)."""
    return in_range("alpha", value, 0.0, 1.0, lo_open=True)


RENORMALIZE = ("none", "teacher", "both", "tail")
# A stored top-k teacher's probabilities may sum a little above 1 by the rounding of its
# log-probabilities: in bfloat16 each log p_k carries a relative error 2^-9, so Σ p_k exceeds its
# true value by at most 2^-9·Σ p_k|log p_k| ≤ 2^-9·log K (0.007 for K = 32). Beyond this the
# stored values are not a (sub-)distribution.
SPARSE_MASS_TOLERANCE = 1e-2


def renormalize(value) -> str:
    """Which top-k distributions ``distill.sparse_kl`` renormalises: 'none' (verl's
    forward_kl_topk), 'teacher', 'both' (teacher and student over the teacher's ids), or 'tail'
    (neither: both get a (K+1)-th bucket holding the mass off the teacher's ids)."""
    return choice("renormalize", value, RENORMALIZE)


def sparse_teacher(ids: list, logps: list, student_shape: tuple) -> None:
    """A top-k teacher for ``distill.sparse_kl``: ``ids`` (rows of ints) and ``logps`` (rows of
    floats, −inf for a probability 0), both [N,K] with the student's N, 1 ≤ K ≤ V; every id in
    [0, V) and distinct within its row; NaN and +inf refused; each row has a probability > 0 and
    Σ_k exp(logps) ≤ 1 + ``SPARSE_MASS_TOLERANCE``."""
    n, v = student_shape
    shape = (len(ids), len(ids[0]) if ids else 0)
    same_shape(teacher_logps=(len(logps), len(logps[0]) if logps else 0), teacher_ids=shape)
    if shape[0] != n:
        fail("teacher_ids", f"has {shape[0]} rows, student_logits has {n}")
    if not 1 <= shape[1] <= v:
        fail("teacher_ids", f"needs 1 <= K <= V ids per row, got K = {shape[1]} for V = {v}")
    for i, (row, lrow) in enumerate(zip(ids, logps)):
        for k in row:
            if not 0 <= k < v:
                fail("teacher_ids", f"id {k} at row {i} is outside [0, {v})")
        if len(set(row)) != len(row):
            fail("teacher_ids", f"row {i} repeats an id ({sorted(k for k in set(row) if row.count(k) > 1)})")
        for x in lrow:
            if math.isnan(x):
                fail("teacher_logps", f"contains NaN at row {i}")
            if x == math.inf:
                fail("teacher_logps", f"contains +inf at row {i}")
        if all(x == -math.inf for x in lrow):
            fail("teacher_logps", f"row {i} is -inf everywhere (no probability on the teacher's top-k)")
        mass = math.fsum(math.exp(x) for x in lrow)
        if mass > 1 + SPARSE_MASS_TOLERANCE:
            fail("teacher_logps", f"row {i}: the probabilities sum to {mass:.6g} > 1 "
                                  f"(+ tolerance {SPARSE_MASS_TOLERANCE:g}): not a top-k of a distribution")


# Σ_k e^{x_k} of floats x_k is 1 exactly only for a single x = 0 (Lindemann–Weierstrass), so a row
# is decided above or below 1 by this many digits unless it lies within ~1e-55 of 1.
_TAIL_DIGITS = 60


def _tail_sign(lrow: list) -> int:
    """The sign of 1 − Σ_k e^{x_k} over the finite x_k: decided in floats away from 1, in
    ``_TAIL_DIGITS``-digit decimals (exact conversions of the floats, correctly rounded exp) near it."""
    live = [x for x in lrow if x != -math.inf]
    mass = math.fsum(math.exp(x) for x in live)
    if abs(mass - 1) > 1e-9:
        return 1 if mass < 1 else -1
    import decimal
    with decimal.localcontext() as ctx:
        ctx.prec = _TAIL_DIGITS
        gap = 1 - sum((decimal.Decimal(float(x)).exp() for x in live), decimal.Decimal(0))
    return (gap > 0) - (gap < 0)


def sparse_tail(ids: list, logps: list, student_live: list) -> None:
    """renormalize='tail' of ``distill.sparse_kl``: the tail buckets p_tail = 1 − Σ_k p_k and
    q_tail = Σ_j q_j over the tokens j off the ids with p_k > 0. Per row, Σ_k p_k ≤ 1 exactly (the
    tail is a probability: no tolerance, unlike ``sparse_teacher``), and where p_tail > 0 some
    token off those ids has student probability > 0 (``student_live``: rows of bools, logit
    > −inf), else the tail term p_tail·log(p_tail / 0) is infinite — the support mismatch the
    other conventions refuse at a teacher id."""
    for i, (row, lrow, zrow) in enumerate(zip(ids, logps, student_live)):
        sign = _tail_sign(lrow)
        if sign < 0:
            mass = math.fsum(math.exp(x) for x in lrow)
            fail("teacher_logps", f"row {i}: renormalize='tail' needs Σ p ≤ 1 (its tail bucket 1 − Σ p is a "
                                  f"probability), the probabilities sum to {mass:.17g}")
        held = {k for k, x in zip(row, lrow) if x != -math.inf}
        if sign > 0 and not any(ok for j, ok in enumerate(zrow) if j not in held):
            fail("student_logits", f"row ({i},) is -inf at every token off the teacher's ids, where the "
                                   "teacher's tail 1 − Σ p is > 0: the KL is infinite (support mismatch)")


# ----------------------------------------------------------------------------- kl

KL_KINDS = ("k1", "k2", "k3", "abs")
REWARD_KL_KINDS = KL_KINDS[:3]


def kl_kind(value, name: str = "kind") -> str:
    """Schulman's estimator k1, k2 or k3, or verl's 'abs' = |log r| (``kl_kind`` inside grpo.loss)."""
    return choice(name, value, KL_KINDS)


def reward_kl_kind(value, name: str = "kind") -> str:
    """gae.kl_rewards' estimator: Schulman's k1, k2 or k3 (the catalog's choices there; 'abs' is
    grpo.loss's and kl.estimator's only)."""
    return choice(name, value, REWARD_KL_KINDS)


def kl_clamp(value, name: str = "clamp") -> float | None:
    """The clamp c > 0 of an estimator's value to [−c, c], or None (``kl_clamp`` in grpo.loss)."""
    return optional_positive(name, value)


# ----------------------------------------------------------------------------- dpo

LOSS_TYPES = ("sigmoid", "hinge", "ipo", "cdpo", "robust", "exo_pair", "nca_pair", "bco_pair", "sppo_hard",
              "aot", "aot_unpaired", "apo_zero", "apo_down", "discopop")


def dpo_beta(value) -> float:
    """DPO's β > 0 (the margin is scaled by it, IPO divides by it)."""
    return positive("beta", value)


def loss_type(value) -> str:
    return choice("loss_type", value, LOSS_TYPES)


def label_smoothing(value, loss_type: str = "sigmoid") -> float:
    """ε in [0, 1/2): the robust loss divides by 1 − 2ε; EXO's target distribution (1 − ε, ε)
    has log ε in its loss, so 'exo_pair' needs ε > 0 (Ji et al. 2024 §4.2 use 1e-3)."""
    return in_range("label_smoothing", value, 0, 0.5, lo_open=loss_type == "exo_pair", hi_open=True)


def discopop_tau(value) -> float:
    """DiscoPOP's temperature τ > 0 of the mixing weight σ(βΔ/τ)."""
    return positive("discopop_tau", value)


def reward_shift(value) -> float:
    """BCO's reward shift δ (a real number: the running mean of the implicit rewards, detached)."""
    return real("reward_shift", value)


NLL_AGGREGATIONS = (None, "seq-mean-token-mean", "seq-mean-token-sum", "token-mean")


def nll_term(weight_name: str, weight, aggregation, lengths_given: bool) -> tuple[float, bool]:
    """The chosen-NLL term a preference loss adds (rpo_alpha, cpo_alpha): its weight α ≥ 0 and
    whether it divides by chosen_lengths (which must then be given). ``aggregation`` None means
    no NLL term, where only α = 0 is meaningful."""
    a = nonnegative(weight_name, weight)
    if aggregation is not None:
        choice("nll_aggregation", aggregation, NLL_AGGREGATIONS[1:])
    elif a != 0:
        fail("nll_aggregation", f"must be one of {', '.join(map(repr, NLL_AGGREGATIONS[1:]))} when {weight_name} "
             f"is nonzero (None: no NLL term), got None")
    needed = a != 0 and aggregation in ("seq-mean-token-mean", "token-mean")
    if needed and not lengths_given:
        fail("chosen_lengths", f"required when the NLL weight is nonzero and nll_aggregation is "
             f"{aggregation!r} (the chosen log-probabilities are divided by token counts)")
    return a, needed


# ----------------------------------------------------------------------------- preference


def simpo_gamma(value) -> float:
    """SimPO's target reward margin γ ≥ 0 (Meng et al. 2024 eq. 6)."""
    return nonnegative("gamma", value)


def class_weight(name: str, value) -> float:
    """KTO's λ_D or λ_U > 0 (Ethayarajh et al. 2024 eq. 7)."""
    return positive(name, value)


def lengths(name: str, values) -> None:
    """Response lengths in tokens: integers ≥ 1 (the length-normalised log-likelihood divides
    by them). ``values`` is an iterable of ints."""
    for i, n in enumerate(values):
        if n < 1:
            fail(name, f"lengths must be >= 1, got {int(n)} at position {i}")


def below_zero(name: str, values) -> None:
    """Average log-probabilities strictly below 0: ORPO's odds p/(1 − p) are infinite at p = 1."""
    for i, v in enumerate(values):
        if not v < 0:
            fail(name, f"must be < 0 (the odds p/(1 − p) are infinite at p = 1), got {float(v)!r} "
                 f"at position {i}")


# ----------------------------------------------------------------------------- grpo

SCALES = ("group", "batch", "none", "whiten")
ADVANTAGE_BASELINES = ("mean", "leave-one-out", "none")
DEGENERATE = ("zero", "drop", "raw")
AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def advantage_scale(value) -> str:
    """What the advantages are divided by: the group's std, the batch's, nothing, or a whitening
    over the whole batch (REINFORCE++)."""
    return choice("scale", value, SCALES)


def advantage_baseline(value) -> str:
    """What is subtracted from each reward: the group mean, the mean of the other G − 1 rewards
    (RLOO), or nothing (REINFORCE++)."""
    return choice("baseline", value, ADVANTAGE_BASELINES)


def std_ddof(value) -> int:
    """0 (population std, the article's) or 1 (sample std); truth values are refused."""
    if _is_bool(value) or not isinstance(value, (numbers.Integral, float)) or value not in (0, 1):
        fail("std_ddof", f"must be 0 or 1, got {value!r}")
    return int(value)


def advantage_eps(value) -> float:
    """The ε added to the std, in [0, 1)."""
    return in_range("eps", value, 0, 1, hi_open=True)


def degenerate(value) -> str:
    """What a group without spread gets: 'zero', 'drop' (DAPO) or 'raw' (verl)."""
    return choice("degenerate", value, DEGENERATE)


def clip_band(eps_low, eps_high, dual_clip) -> tuple[float, float, float | None]:
    """The PPO/GRPO clip parameters, checked: ε_low in [0, 1), ε_high >= 0 (None: = ε_low, the
    symmetric clip), dual clip c > 1 or None. Returns (ε_low, ε_high, c)."""
    lo = in_range("eps_low", eps_low, 0, 1, hi_open=True)
    hi = lo if eps_high is None else real("eps_high", eps_high)
    if hi < 0:
        fail("eps_high", f"must be >= 0, got {eps_high!r}")
    c = None if dual_clip is None else real("dual_clip", dual_clip)
    if c is not None and c <= 1:
        fail("dual_clip", f"must be > 1, got {dual_clip!r}")
    return lo, hi, c


def aggregation(value, name: str = "aggregation") -> str:
    """A masked reduction's mode (``mode`` in grpo.aggregate)."""
    return choice(name, value, AGGREGATIONS)


def norm_length(value) -> float | None:
    """The constant length L > 0 of 'seq-mean-token-sum-norm', or None (the padded T)."""
    return optional_positive("norm_length", value)


def kl_penalty_beta(value) -> float:
    """grpo.loss's KL weight β >= 0 (0 drops the term)."""
    return nonnegative("beta", value)


def kl_ratio_weight(value) -> bool:
    """Whether the KL term is weighted by the ratio ρ (TRL's use_bias_correction_kl)."""
    return flag("kl_ratio_weight", value)


RATIO_LEVELS = ("token", "sequence", "sequence-token")
POLICY_LOSSES = ("ppo-clip", "gmpo", "cispo", "sapo", "clip-cov", "kl-cov", "reinforce")
# the policy losses with a token selection (Cui et al., arXiv 2505.22617 §4)
COV_POLICY_LOSSES = ("clip-cov", "kl-cov")
CISPO_CLIPS = ("upper", "both", "raw-upper")


def ratio_level(value) -> str:
    """Where grpo.loss forms its importance ratio: per token (PPO/GRPO), per sequence (GSPO),
    or per sequence with a per-token gradient (GSPO-token)."""
    return choice("ratio_level", value, RATIO_LEVELS)


def policy_loss(value, level: str, dual_clip, kl_ratio_weight: bool) -> str:
    """grpo.loss's policy term: the PPO clipped surrogate, GMPO's geometric mean of
    log-space-clipped token ratios, CISPO, SAPO, Clip-Cov, KL-Cov or REINFORCE. GMPO's ratio is a
    sequence ratio by definition, and it has neither a dual clip nor a ratio-weighted KL; the
    others are token-level without a dual clip, and REINFORCE has no ratio to weight the KL by:
    those combinations are refused, not guessed."""
    choice("policy_loss", value, POLICY_LOSSES)
    if value == "gmpo":
        if level != "sequence":
            fail("policy_loss", f"'gmpo' needs ratio_level='sequence', got {level!r}")
        if dual_clip is not None:
            fail("dual_clip", "must be None with policy_loss='gmpo'")
        if kl_ratio_weight:
            fail("kl_ratio_weight", "must be False with policy_loss='gmpo'")
    if value == "reinforce" and kl_ratio_weight:
        # REINFORCE has no importance ratio for the KL term to be weighted by
        fail("kl_ratio_weight", "must be False with policy_loss='reinforce'")
    if value in ("cispo", "sapo", "clip-cov", "kl-cov", "reinforce"):
        # token-level weights by definition (MiniMax-M1 §3.1, SAPO §3, arXiv 2505.22617 §4 selects
        # tokens, REINFORCE has no ratio); TRL 1.16 and Liger 0.8.5 refuse sequence-level ratios
        # for CISPO and SAPO; verl 0.9.1's clip_cov and kl_cov have no dual clip
        if level != "token":
            fail("policy_loss", f"{value!r} needs ratio_level='token', got {level!r}")
        if dual_clip is not None:
            fail("dual_clip", f"must be None with policy_loss={value!r}")
    return value


def log_ratio_clamp(value, level: str) -> float | None:
    """The bound c > 0 of grpo.loss's token log-ratio, clamped to [−c, c] before the exponential
    (verl 0.9.1 and OpenRLHF 0.11.2 use 20), or None. It clamps the token ratio ρ_t: the sequence
    ratios (GSPO, GMPO) are formed without it, so other ratio levels are refused, not guessed."""
    c = optional_positive("log_ratio_clamp", value)
    if c is not None and level != "token":
        fail("log_ratio_clamp", f"must be None with ratio_level={level!r} (it clamps token log-ratios)")
    return c


def kl_aggregation(value) -> str | None:
    """The masked reduction of grpo.loss's KL term, or None: the policy term's ``aggregation``."""
    return None if value is None else aggregation(value, "kl_aggregation")


def mean_eps(value) -> float:
    """The ε >= 0 added to each row's token count in a per-sequence token mean, Σ_t m·v / (Σ_t m + ε)
    (verl 0.9.1 agg_loss and OpenRLHF 0.11.2 aggregate_loss: 1e−8); 0 in the papers."""
    return nonnegative("mean_eps", value)


MEAN_EPS_SCOPES = ("per-row", "every")


def mean_eps_scope(value, eps: float, modes) -> float:
    """Which masked means ``mean_eps`` ε enters; returns the ε of token-mean's one mean over the
    batch. 'per-row': only each row's token count in 'seq-mean-token-mean', |o_i| + ε (verl 0.9.1
    agg_loss and OpenRLHF 0.11.2 aggregate_loss, whose token-mean divides by the token count
    alone), so 0. 'every': every masked mean Σ m·x / (Σ m + ε), the batch's token mean too
    (torchtune torchtune/rlhf/rewards.py masked_mean: mask.sum() + 1e-8). The token-sum modes take
    no mean over tokens: under 'every' an ε that none of ``modes`` divides by is refused, not
    dropped."""
    if choice("mean_eps_scope", value, MEAN_EPS_SCOPES) == "per-row":
        return 0.0
    if eps and not any(mode in ("token-mean", "seq-mean-token-mean") for mode in modes):
        fail("mean_eps", f"mode {' and '.join(sorted(set(modes)))} takes no mean over tokens: with mean_eps_scope "
                         "'every' the ε would enter no denominator")
    return eps


def cov_log_ratio_clamp(clamp, policy_loss: str) -> None:
    """KL-Cov's penalty |log ρ| and REINFORCE's −A·logπ have no clamped ratio to read a
    log_ratio_clamp: refused there rather than applied to one term and not the other (verl
    0.9.1 compute_policy_loss_kl_cov and compute_policy_loss_gpg clamp nothing)."""
    if clamp is not None and policy_loss in ("kl-cov", "reinforce"):
        fail("log_ratio_clamp", f"must be None with policy_loss={policy_loss!r}")


def kl_cov_ratio(value) -> float:
    """KL-Cov's share of valid tokens to penalise, in (0, 1] (verl 0.9.1: 0.0002)."""
    return in_range("kl_cov_ratio", value, 0.0, 1.0, lo_open=True)


def kl_cov_coef(value) -> float:
    """KL-Cov's weight of |log π − log π_old| on the selected tokens, >= 0 (verl 0.9.1
    ppo_kl_coef: 1.0)."""
    return nonnegative("kl_cov_coef", value)


def kl_cov_count(ratio: float, n_valid: int) -> int:
    """k = max(1, ⌊N·ratio⌋) over the N valid tokens (verl 0.9.1 compute_policy_loss_kl_cov:
    max(1, int(len * kl_cov_ratio))), with the product formed exactly from the binary64 ratio
    (verl's float product can round across an integer; the exact floor is the reference's)."""
    return max(1, math.floor(Fraction(ratio) * n_valid))


def selection(policy_loss: str, given: bool) -> None:
    """Whether ``selected`` may (and must) be given: Clip-Cov's selection is random (verl 0.9.1
    draws it with torch.randperm), so a vector carries it; KL-Cov's is the top-k by covariance,
    computed when absent; no other policy loss reads one."""
    if given and policy_loss not in COV_POLICY_LOSSES:
        fail("selected", f"only applies to policy_loss 'clip-cov' or 'kl-cov', got {policy_loss!r}")
    if not given and policy_loss == "clip-cov":
        fail("selected", "policy_loss='clip-cov' needs the selected tokens (its selection is random)")


def selected_within(outside: bool) -> None:
    """A selected token must be a valid one (Cui et al. select among response tokens; verl 0.9.1
    sets cov to −inf at masked positions): ``outside`` says whether one is not."""
    if outside:
        fail("selected", "selects a token the mask leaves out")


def top_k_untied(tied: bool, k: int) -> None:
    """KL-Cov's top-k is defined only when the k-th and the (k+1)-th largest covariances differ
    (``tied`` says they do not): a tie would make the selection depend on torch.topk's order, so
    it is refused and a ``selected`` mask asked for."""
    if tied:
        fail("selected", f"the top-{k} covariance is tied at the boundary: pass the selected tokens")


def is_weights(negative: bool) -> None:
    """grpo.loss's ``is_weight``: a detached per-token weight of the policy term (a truncated or
    masked rollout-correction weight, TRL 1.16.0 / verl 0.9.1 / ART), finite and >= 0 (an IS
    weight is a ratio of probabilities): ``negative`` says whether one is below 0."""
    if negative:
        fail("is_weight", "must be >= 0 (a ratio of probabilities)")


def cispo_clip(value, policy_loss: str, eps_low, eps_high) -> str:
    """Which bounds CISPO's IS weight has: 'upper' min(ρ, 1 + ε_high) (MiniMax-M1 §3.1 with
    ε_low^IS large), 'both' clip(ρ, 1 − ε_low, 1 + ε_high) (the paper's eq. written in full; verl
    0.9.1), 'raw-upper' min(ρ, ε_high) with ε_high itself the cap (TRL 1.16, Liger 0.8.5). Only
    CISPO reads it: any other value with another policy_loss is refused, as is a cap of 0."""
    choice("cispo_clip", value, CISPO_CLIPS)
    if value != "upper" and policy_loss != "cispo":
        fail("cispo_clip", f"only applies to policy_loss='cispo', got {value!r} with {policy_loss!r}")
    if value == "raw-upper" and clip_band(eps_low, eps_high, None)[1] == 0:
        fail("eps_high", "the raw cap of cispo_clip='raw-upper' must be > 0, got 0")
    return value


def sapo_temperature(name: str, value) -> float:
    """A SAPO gate temperature τ > 0 (``sapo_tau_pos``, ``sapo_tau_neg``)."""
    return positive(name, value)


# ----------------------------------------------------------------------------- proximal_kl

def cost_clip(value, name: str = "future_clip") -> float | None:
    """The clip c > 0 of a KL cost to [−c, c], or None: the future cost F_t (``future_clip``,
    ``clip`` in future_cost) or, in the tabular rules, the whole cost k_t + F_t."""
    return optional_positive(name, value)


def future_window(value, name: str = "future_window") -> int | None:
    """The number W >= 1 of later tokens the future cost sums, or None (``window`` in future_cost)."""
    return optional_count(name, value)


def regularization_beta(value, name: str = "beta") -> float:
    """β > 0 of the KL-regularised objective E[r] − β·KL(π‖π_ref), whose optimum is
    π* ∝ π_ref·exp(r/β): Proximal KL's β and the tabular trees'."""
    return positive(name, value)


def ratio_clip(value) -> float | None:
    """PPO's ε of the ratio clip, in (0, 1), or None."""
    return None if value is None else in_range("ratio_clip", value, 0, 1, lo_open=True, hi_open=True)


def ratio_cap(value) -> float | None:
    """The cap C > 0 of the ratio, min(ρ, C), or None."""
    return optional_positive("ratio_cap", value)


def sequence_tis_cap(value) -> float | None:
    """The cap C > 0 of the sequence-level truncated importance weight min(Π_t ρ_t, C), or None."""
    return optional_positive("sequence_tis_cap", value)


def cispo_clip_high(value) -> float | None:
    """CISPO's ε_high > 0 of the detached token weight min(ρ, 1 + ε_high), or None."""
    return optional_positive("cispo_clip_high", value)


# ----------------------------------------------------------------------------- tabular

BASELINES = ("mean", "none")
UPDATE_RULES = tuple(r + s for s in ("", "_on_policy") for r in (
    "proximal_kl", "proximal_kl_no_ratio", "own_token_kl", "grpo_k3", "grpo_k3_ratio_weighted", "sequence_is",
    "future_clipped", "future_window", "whole_cost_clipped", "ratio_capped", "sigma_normalized",
    "gspo", "cispo", "sequence_tis", "kl_in_reward"))


def vocab(value, name: str = "vocab") -> int:
    """A token tree's vocabulary size V, an integer >= 2."""
    return count(name, value, 2, integral_float=False)


def horizon(value, name: str = "horizon") -> int:
    """A token tree's maximal sequence length H, an integer >= 1."""
    return count(name, value, 1, integral_float=False)


def eos(value, vocab_size: int, name: str = "eos") -> int | None:
    """A token tree's end-of-sequence token: None, or a token id in [0, V)."""
    if value is not None and (_is_bool(value) or not isinstance(value, numbers.Integral)
                              or not 0 <= value < vocab_size):
        fail(name, f"must be None or a token id in [0, {vocab_size}), got {value!r}")
    return None if value is None else int(value)


def update_rule(value, name: str = "rule") -> str:
    """An update rule of the tabular expected update (refimpl/exact/_tree.py RULES)."""
    return choice(name, value, UPDATE_RULES)


def baseline(value) -> str:
    """The advantage's baseline of the tabular expected update: E_μ[r] ('mean') or 0."""
    return choice("baseline", value, BASELINES)


# ----------------------------------------------------------------------------- gae

WHITENINGS = ("none", "centred", "keep-mean")
MASKED_TOKENS = ("skip", "zero")


def discount(name: str, value) -> float:
    """γ or λ of generalized advantage estimation, in [0, 1]."""
    return in_range(name, value, 0, 1)


def whitening(value) -> str:
    """The batch whitening of GAE advantages: none, centred, or scaled with the mean kept."""
    return choice("whiten", value, WHITENINGS)


def whiten_eps(value, whiten: str) -> float:
    """The ε >= 0 of whitening as TRL's core.py whiten writes it (and verl 0.9.1
    utils/torch_functional.py masked_whiten, torchtune rlhf/rewards.py whiten copy it, with
    1e-8): the masked mean and variance divide by Σ m + ε, the scale is rsqrt(σ² + ε); 0 in the
    papers. Refused with whiten 'none', where it would change nothing."""
    eps = nonnegative("whiten_eps", value)
    if eps and whiten == "none":
        fail("whiten_eps", f"applies to whitening, got {value!r} with whiten 'none'")
    return eps


def masked_tokens(value) -> str:
    """How GAE steps over a masked token: 'skip' (not a time step) or 'zero' (a step with reward
    and value 0)."""
    return choice("masked_tokens", value, MASKED_TOKENS)


def every_row_has_a_token(name: str, rows) -> None:
    """Each row of a 0/1 mask selects at least one token (the score sits on the last one)."""
    for i, row in enumerate(rows):
        if not any(row):
            fail(name, f"selects no token in row {i} (the score has no last token)")


# ----------------------------------------------------------------------------- rollout correction

CORRECTION_LEVELS = ("token", "sequence")
CORRECTIONS = ("truncate", "mask")
SEQ_LOG_RATIOS = ("sum", "mean")
KEPT_WEIGHTS = ("ratio", "token-ratio", "one")


def rollout_correction(level, correction, lower, upper, seq_log_ratio, kept_weight, log_ratio_clamp) -> tuple:
    """The conventions of grpo.rollout_correction, checked together: the band [lower, upper] on the
    ratio π_old/π_rollout (either bound may be None, not both; 0 ≤ lower ≤ upper, upper > 0) and
    the clamp c > 0 of the log-ratio. Returns (level, correction, lower, upper, seq_log_ratio,
    kept_weight, log_ratio_clamp)."""
    level = choice("level", level, CORRECTION_LEVELS)
    correction = choice("correction", correction, CORRECTIONS)
    seq_log_ratio = choice("seq_log_ratio", seq_log_ratio, SEQ_LOG_RATIOS)
    kept_weight = choice("kept_weight", kept_weight, KEPT_WEIGHTS)
    lo = None if lower is None else nonnegative("lower", lower)
    hi = optional_positive("upper", upper)
    if lo is None and hi is None:
        fail("upper", "lower and upper are both None: give at least one bound of the ratio")
    if lo is not None and hi is not None and lo > hi:
        fail("lower", f"must be <= upper, got lower={lower!r} > upper={upper!r}")
    clamp = optional_positive("log_ratio_clamp", log_ratio_clamp)
    return level, correction, lo, hi, seq_log_ratio, kept_weight, clamp


# ----------------------------------------------------------------------------- lm

LM_REDUCTIONS = ("mean", "sum", "none")


def lm_reduction(value) -> str:
    """How lm.cross_entropy reduces its per-token losses: mean over the non-ignored tokens, sum,
    or none (one loss per token, 0 at an ignored one), as torch.nn.functional.cross_entropy."""
    return choice("reduction", value, LM_REDUCTIONS)


def ce_label_smoothing(value) -> float:
    """PyTorch's label smoothing ε in [0, 1]: (1−ε)·(−log q_y) + ε·mean_v(−log q_v)."""
    return in_range("label_smoothing", value, 0, 1)


SMOOTHING_CLASSES = ("all", "others")


def smoothing_classes(value, eps: float, vocab: int) -> str:
    """Over which classes label smoothing spreads ε: 'all' V (PyTorch; Szegedy et al. 2016 §7) or
    'others', the V − 1 classes other than the label (Megatron-core 0.16.1
    tensor_parallel/cross_entropy.py). V = 1 leaves no other class: refused when ε > 0."""
    classes = choice("smoothing_classes", value, SMOOTHING_CLASSES)
    if classes == "others" and eps and vocab < 2:
        fail("smoothing_classes", "'others' spreads the smoothing over the V − 1 classes other than the label; "
             "with V = 1 there is none")
    return classes


def smoothing_weight(eps: float, classes, vocab: int) -> float:
    """The weight ε' of PyTorch's smoothing term (the mean of −log q_v over all V classes) that
    gives the loss of ``classes``: ε itself for 'all'; ε·V/(V − 1) for 'others', as
    (1−ε)·nll_y + ε/(V−1)·Σ_{v≠y} nll_v = (1−ε')·nll_y + ε'·mean_v nll_v (Megatron-core's
    _VocabParallelCrossEntropy computes it so: smoothing = label_smoothing·V/(V − 1))."""
    if smoothing_classes(classes, eps, vocab) == "all" or not eps:
        return eps
    return eps * vocab / (vocab - 1)


def entropy_coef(value) -> float:
    """The entropy bonus's coefficient c of −c·agg(H): any finite real (a negative c penalises
    entropy, which some recipes do on purpose)."""
    return real("coef", value)


def z_loss(value) -> float:
    """The coefficient ≥ 0 of log²Z (PaLM §5's z-loss; Liger's lse_square_scale)."""
    return nonnegative("z_loss", value)


def softcap(value) -> float | None:
    """The cap s > 0 of the final-logit soft-capping s·tanh(z/s) (Gemma 2), or None."""
    return optional_positive("softcap", value)


def ignore_index(value) -> int:
    """The label value whose tokens carry no loss: any integer (PyTorch's default −100)."""
    if _is_bool(value) or not isinstance(value, numbers.Integral):
        fail("ignore_index", f"must be an integer, got {value!r}")
    return int(value)


def ce_normalizer(value, reduction: str) -> float | None:
    """The count that divides the summed loss in place of the number of non-ignored tokens
    (transformers' num_items_in_batch): None or a positive number, only with reduction 'mean'
    (a sum or per-token losses have no denominator to replace)."""
    if value is None:
        return None
    if reduction != "mean":
        fail("normalizer", f"only applies with reduction='mean' (it replaces the count of non-ignored "
                           f"tokens), got reduction={reduction!r}")
    return positive("normalizer", value)


def token_labels(labels: list, vocab_size: int, ignore: int | None = None) -> list[bool]:
    """Each label is a token id in [0, V), or ``ignore`` (the ignore_index, when there is one).
    Returns, per row, whether the token counts (is not ignored)."""
    out = []
    for i, y in enumerate(labels):
        if ignore is not None and y == ignore:
            out.append(False)
            continue
        if not 0 <= y < vocab_size:
            also = f" and is not ignore_index ({ignore})" if ignore is not None else ""
            fail("labels", f"label {int(y)} at row {i} is outside [0, {vocab_size}){also}")
        out.append(True)
    return out


def lm_logit_rows(n: int, v: int) -> None:
    """An lm objective's logits [N, V] need a row and a token."""
    if n == 0:
        fail("logits", "needs at least one row, got shape (0, V)")
    if v == 0:
        fail("logits", f"the vocabulary axis must not be empty, got shape ({n}, 0)")


def linear_shapes(hidden: tuple, weight: tuple, bias: tuple | None) -> tuple[int, int, int]:
    """lm.linear_cross_entropy's hidden [N, H], weight [V, H] and optional bias [V]: the ranks, a
    shared H, a bias of length V, at least one row and one token. Returns (N, H, V)."""
    rank("hidden", hidden, 2)
    rank("weight", weight, 2)
    if weight[1] != hidden[1]:
        fail("weight", f"shape {tuple(weight)} does not match hidden shape {tuple(hidden)}: both need the "
                       f"hidden size H on their last axis")
    if bias is not None:
        rank("bias", bias, 1)
        if bias[0] != weight[0]:
            fail("bias", f"length {bias[0]} does not match the vocabulary size V = {weight[0]} (weight rows)")
    n, h = hidden
    if n == 0:
        fail("hidden", "needs at least one row, got shape (0, H)")
    if weight[0] == 0:
        fail("weight", f"the vocabulary axis must not be empty, got shape (0, {h})")
    return n, h, weight[0]


def lm_conventions(ignore_index_, label_smoothing, z_loss_, softcap_, reduction, normalizer):
    """The conventions every lm cross-entropy backend takes, each through its own check:
    (ignore_index, label_smoothing ε, z_loss ζ, softcap, reduction, normalizer)."""
    ignore, eps, zeta, cap = (ignore_index(ignore_index_), ce_label_smoothing(label_smoothing), z_loss(z_loss_),
                              softcap(softcap_))
    reduction = lm_reduction(reduction)
    return ignore, eps, zeta, cap, reduction, ce_normalizer(normalizer, reduction)


def empty_mean(reduction: str, normalizer, counted: int) -> None:
    """reduction='mean' without a normalizer over zero counted tokens is 0/0 (PyTorch returns NaN):
    refused, never a silent NaN."""
    if reduction == "mean" and normalizer is None and counted == 0:
        fail("labels", "every token is ignore_index: the mean over zero tokens is undefined (0/0); "
                       "pass reduction='sum' or a normalizer")


def lm_rows(all_neg_inf, label_neg_inf, any_neg_inf, counted, smoothing: float = 0.0) -> None:
    """The −inf logits an lm objective refuses, checked row by row (per-row facts as lists of
    bools; ``label_neg_inf`` and ``counted`` are read only for the rows the loss counts): a row with
    no possible token (log Z = −inf); −inf at a counted token's label (−log q_y = +inf); any −inf in
    a counted row when label smoothing averages −log q_v over all V (+inf)."""
    for i, (none, at_label, some, c) in enumerate(zip(all_neg_inf, label_neg_inf, any_neg_inf, counted)):
        if none:
            fail("logits", f"row {i} is -inf everywhere (no possible token)")
        if c and at_label:
            fail("logits", f"-inf at the label of row {i}: the loss is infinite")
        if c and some and smoothing > 0:
            fail("logits", f"-inf in row {i} with label_smoothing > 0: the smoothing term (the mean of "
                           f"-log q over all V tokens) is infinite")
# ----------------------------------------------------------------------------- reward

REWARD_FORMS = ("sigmoid", "log-exp")


def reward_form(value) -> str:
    """How a pairwise reward loss writes −log σ(d): 'sigmoid' (TRL, OpenRLHF PairWiseLoss) or
    'log-exp', log(1 + e^{−d}) (OpenRLHF LogExpLoss): one function, two formulas."""
    return choice("form", value, REWARD_FORMS)


def center_rewards_coefficient(value) -> float | None:
    """The weight c >= 0 of the centring term c·mean((r_c + r_r)²), or None (no term)."""
    return None if value is None else nonnegative("center_rewards_coefficient", value)


# ----------------------------------------------------------------------------- ppo value loss

def clip_range_value(value) -> float | None:
    """The ε > 0 of the clipped value estimate V_old + clip(V − V_old, −ε, ε), or None (unclipped)."""
    return optional_positive("clip_range_value", value)


def value_half(value) -> bool:
    """Whether the squared error carries the factor ½ (``half``)."""
    return flag("half", value)


# ----------------------------------------------------------------------------- moe load balancing

BALANCE_FORMS = ("switch", "concatenated", "per-layer-sum", "sequence")
FRACTION_NORMS = ("none", "top_k")


def balance_form(value, layered: bool) -> str:
    """moe.load_balancing's form. 'switch' is one layer's loss (Switch Transformer eq. 4): layered
    logits [L, N, E] are refused under it (the logits' shape is what is wrong for that form)."""
    form = choice("form", value, BALANCE_FORMS)
    if layered and form == "switch":
        fail("router_logits", "[L, N, E] logits with form 'switch' (one layer's loss over [N, E]); the layers "
             "combine under 'concatenated', 'per-layer-sum' or 'sequence'")
    return form


def fraction_norm(value, form: str) -> str:
    """moe.load_balancing's token fraction f_e: 'none' the share of tokens whose top k include e
    (Σ_e f_e = k, Switch eq. 5 counted as transformers counts it), 'top_k' that share divided by k
    (Σ_e f_e = 1: Megatron-core switch_load_balancing_loss_func, OLMo-core load_balancing_loss).
    DeepSeek-V3's 'sequence' form divides by k in its own f (eq. 18), so 'top_k' is refused there
    rather than read twice or not at all."""
    norm = choice("fraction_norm", value, FRACTION_NORMS)
    if norm == "top_k" and form == "sequence":
        fail("fraction_norm", "'top_k' does not apply to form 'sequence' (DeepSeek-V3 eq. 18 already divides "
             "its f by k)")
    return norm


def top_k(value, experts: int) -> int:
    """The number k of experts each token is routed to, 1 <= k <= E."""
    k = count("top_k", value)
    if k > experts:
        fail("top_k", f"must be <= the number of experts {experts}, got {value!r}")
    return k


def seq_len(value, form: str, tokens: int) -> int:
    """The sequence length of moe.load_balancing's 'sequence' form (the N tokens are N/seq_len
    sequences): None means one sequence of N; only that form takes it."""
    if form != "sequence":
        if value is not None:
            fail("seq_len", f"applies to form 'sequence' only, got {value!r} with form {form!r}")
        return tokens
    t = tokens if value is None else count("seq_len", value)
    if tokens % t:
        fail("seq_len", f"must divide the number of tokens {tokens}, got {value!r}")
    return t
