"""Error metrics against the exact value and the tolerance policy (DESIGN §6).

A result passes when, element by element, ``|got − want| ≤ tol``, where ``tol`` is built
from a model of where an implementation rounds — never one global rtol. Every model ends in
``ulp_dtype(want)``, the spacing of the output dtype at the exact value: the best a correctly
rounded result can do (plus a little, since the value is rounded once more at the end).

float64 and float32 outputs (both models)::

    tol = k · u(dtype) · scale + ulp_dtype(want)
    k = max(k_base · (1 + log2 n),  k_base + ⌈V/L⌉ + L − 2)        L = LANES[dtype]

u is the unit roundoff of the dtype, n the length of the objective's reduction, and
``scale`` the magnitude stored with the vector: the size of the terms that rounding errors
are proportional to, so that near-zero results that come from cancellation are judged
against their terms, not against themselves. ``k_base``, declared on each catalog entry, counts
the roundings on the critical path; the log grows with the reduction (a pairwise or blocked sum).

The second term is the vocabulary sum of a softmax, log-softmax or log-sum-exp (V: the axis
named ``V`` of the reduced input, 1 where there is none) accumulated lane-wise, as the
standard kernels do: PyTorch's CPU ``softmax``/``log_softmax`` (and ``cross_entropy``, which
calls it) keep one running sum per vector lane and add the V exponentials to it one after
another, then add up the lanes. A recursive sum of m + 1 terms has a relative error of at most
γ_m = m·u/(1 − m·u) ([higham2002] §4.2, eq. 4.4, for any order of the additions); the longest
chain of additions here is ⌈V/L⌉ − 1 in a lane plus L − 1 across the lanes, so log Z, a
log-probability and a probability inherit an error of at most (⌈V/L⌉ + L − 2)·u, which
``scale`` (at least the magnitude with which log Z enters the result) turns into the bound.
L is the fewest lanes of those kernels: a 128-bit vector register, PyTorch's aarch64 build
(NEON, ``aten/src/ATen/cpu/vec/vec128``: ``Vectorized<double>`` holds 2, ``Vectorized<float>``
4), against 4 and 8 in its generic and AVX2 builds and 8 and 16 with AVX-512; a low-precision
computation sums in float32 (4). NumPy's pairwise ``np.sum`` and JAX's
CPU reductions (measured) and PyTorch's CUDA softmax (one running sum per thread of a block,
then a tree: read from its source, not measured here) have far shorter chains. The rounding
errors of such a sum are not independent — the V − 256 zero logits of a Llama-3-sized row give
V − 256 equal terms, which round the same way until the running sum crosses a power of two —
so the probabilistic λ·√V·u bound ([higham-mary2019]), which assumes independent errors of
mean zero, does not hold for them: measured with torch 2.13 (docs/vectors.md, Tolerance
policy), log Z is off by up to 0.59 of the bound with L = 4 on an x86 machine whose float64
kernel keeps 4 lanes (608 u at V = 4096, 10576 u at V = 128256), linear in V/L; hence L = 2 for
float64, the lanes of an aarch64 build. The term exceeds the pairwise one only from
V ≈ L·k_base·log2 n on.

bfloat16 and float16 outputs, model ``careful`` (the default). Every implementation meant
for training (torch's own reductions, Liger's kernels, refimpl/torch) accumulates a
low-precision computation in float32 and rounds to the dtype only what it stores. The model
says which values those are:

- the inputs are exact in the dtype (the vectors hold only representable values);
- each *term* of the objective's outer reduction — a per-row loss of ``distill.hinton``, a
  per-token loss of ``grpo.loss`` or ``proximal_kl.loss``, a value of ``grpo.aggregate``, a
  per-token KL term of ``proximal_kl.future_cost``, a pair's loss of ``reward.pairwise``, a
  token's squared error of ``ppo.value_loss``, a token's lse² of ``moe.router_z_loss``, a token's
  loss of ``lm.cross_entropy`` — is
  computed in float32 and may be
  stored in the dtype (one rounding, u·|term|); so may the reduction's weights (1/n, 1/|o_i|)
  and one partial result (a per-row sum): K_ELEM = 3 roundings in all;
- everything inside a term is float32: exponentials, logs, log-softmax over the vocabulary,
  the vocabulary sums of a divergence, the ratio and its clipping, differences of inputs
  (exact in float32 for inputs of the dtype); so are the reductions themselves;
- the result is rounded to the dtype once.

Hence::

    tol = K_ELEM · u(dtype) · scale_elem + k · u(float32) · scale + ulp_dtype(want)

with ``scale_elem`` the sum of the magnitudes of the terms an element of the output is
reduced from — stored in the vector (``scale.elements``) for the outputs listed above
(hinton's loss, the aggregate, the losses, the future cost per position), and |want|
element by element everywhere else (a per-row divergence, a probability, a per-token value,
every other gradient: each is one float32 computation rounded once, and the gradient of a
reduction of terms rounds each term's cotangent — the weight — once more). The one gradient
stored too (``scale.elements`` under ``grad:NAME``) is lm.linear_cross_entropy's: its
gradients are matrix products of the logits' gradient G, which an implementation stores in the
dtype before the product (one rounding of each G_nv, as F.linear's backward and Liger's kernel
do), as it may store the logits (docs/lm.md). For an output
that is not a reduction the bound is K_ELEM·u·|want| + ulp ≈ 2.5 to 4 ulps of the dtype, so
two formulas whose values differ by more than about four ulps cannot both pass: a swapped KL
direction, a cross-entropy for a KL, an untempered teacher or a missing T² fails wherever it
moves the value that much — unless the float32 term is larger, which happens only where the
value is far below its terms (a KL of 1e-12 between saturated rows; in float16 a KL of 1e-4
between close rows, whose float32 log-softmaxes carry errors of order u(float32)·|z|/T). The
float32 term is the float32 model above, unchanged (the computation inside is a float32
computation). A computation that rounds inside a term — k3 = e^x − x − 1 evaluated in
bfloat16, a log-softmax stored in bfloat16 and then summed over the vocabulary — loses to
cancellation far more than this allows, and fails: that is the point. Measured on vector
set 1.1.0: refimpl/torch stays within 0.2 of this bound in bfloat16 (0.42 in float16): it
rounds correctly; float32-inside implementations of the wrong formulas above fail every
bfloat16 vector where they move the value by more than 4 ulps, except two saturated-row
cases (tests/test_compare.py).

bfloat16 and float16 outputs, model ``native`` (opt-in, ``--tolerance-model native``): for
implementations that compute in the low dtype itself — every elementwise operation rounds,
and the reductions accumulate in the dtype. Its errors are the float64/float32 model's
roundings at u(dtype): the same formula as above with u(bfloat16) = 2^−8 or u(float16) =
2^−11. It is loose (tens of percent of ``scale`` for a vocabulary of 4096 in bfloat16) and a
wrong formula often passes it; a result under this model says "no gross error", not "right".

``k`` can be overridden per case (``tolerance.k`` in the vector: the k of the scale term)
and per target (a JSON file mapping objective globs to per-dtype k). A target's k for a low
dtype states its own rounding budget in units of u(dtype)·scale: it switches that objective
and dtype to the native formula with that k.
"""
from __future__ import annotations

import fnmatch
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lossproof.conformance import catalog, numbers

UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "bfloat16": 2.0**-8, "float16": 2.0**-11}
# (mantissa bits incl. the implicit one, smallest normal exponent)
_FORMAT = {"float64": (53, -1022), "float32": (24, -126), "bfloat16": (8, -126), "float16": (11, -14)}
LOW_PRECISION = ("bfloat16", "float16")
MODELS = ("careful", "native")
# Roundings to the low dtype the careful model grants per term: the term, one partial result
# (a per-row sum) and the reduction's weight (see the module docstring).
K_ELEM = 3.0
# Running sums the standard softmax kernels keep for the vocabulary sum, at the fewest: a 128-bit
# register (see the module docstring); bfloat16/float16 sum in float32. The vocabulary term of k
# is ⌈V/L⌉ + L − 2 roundings.
LANES = {"float64": 2, "float32": 4}



def ulp(want: np.ndarray, dtype: str) -> np.ndarray:
    """Spacing of ``dtype`` at |want| (subnormal spacing near zero)."""
    bits, emin = _FORMAT[dtype]
    a = np.abs(np.asarray(want, dtype=np.float64))
    a = np.where(np.isfinite(a), a, 0.0)  # infinite exact values are matched exactly, not by ulps
    with np.errstate(divide="ignore"):
        e = np.where(a > 0, np.floor(np.log2(np.where(a > 0, a, 1.0))), emin)
    e = np.maximum(e, emin)
    return np.ldexp(1.0, (e - (bits - 1)).astype(int))


def reduction_length(spec: catalog.Objective, inputs: dict) -> int:
    if not spec.reduction or spec.reduction not in inputs:
        return 1
    shape = np.shape(inputs[spec.reduction])
    return int(shape[-1]) if len(shape) == 1 or spec.family == "distill" else int(np.prod(shape))


def vocabulary_length(spec: catalog.Objective, inputs: dict) -> int:
    """V: the length of the reduced input's axis named ``V`` in the catalog (the vocabulary a softmax
    sums over), or 1 where it has none."""
    if not spec.reduction or spec.reduction not in inputs:
        return 1
    axes = next(i.shape for i in spec.inputs if i.name == spec.reduction).split(",")
    shape = np.shape(inputs[spec.reduction])
    if "V" not in axes or len(shape) < len(axes) - axes.index("V"):
        return 1
    return int(shape[axes.index("V") - len(axes)])


def lane_chain(v: int, dtype: str) -> int:
    """The additions on the longest chain of a V-term sum in ``dtype`` kept in LANES running sums
    (module docstring)."""
    lanes = LANES.get(dtype, LANES["float32"])
    return math.ceil(v / lanes) + lanes - 2 if v > 1 else 0


def bound(want, dtype: str, k: float, scale: float, elements=None) -> np.ndarray:
    """The tolerance at each element of ``want``. ``elements`` None: k·u(dtype)·scale + ulp
    (float64/float32, and the native low-precision model); otherwise the careful low-precision
    model, K_ELEM·u(dtype)·elements + k·u(float32)·scale + ulp, with ``elements`` the
    magnitude of the terms of each element (an array of want's shape, or a scalar)."""
    w = np.asarray(want, dtype=np.float64)
    spacing = ulp(w, dtype)
    if elements is None:
        return k * UNIT_ROUNDOFF[dtype] * scale + spacing
    e = np.broadcast_to(np.asarray(elements, dtype=np.float64), w.shape)
    e = np.where(np.isfinite(w), e, 0.0)   # infinite exact values must be matched exactly
    return K_ELEM * UNIT_ROUNDOFF[dtype] * e + k * UNIT_ROUNDOFF["float32"] * scale + spacing


@dataclass
class Tolerances:
    """The tolerance model for low-precision outputs (``careful`` or ``native``, see the module
    docstring; None: each target's declaration, else careful) and per-target overrides:
    {objective glob: {dtype or "*": k}}."""
    overrides: dict
    model: str | None = None

    def __post_init__(self):
        if self.model is not None and self.model not in MODELS:
            raise ValueError(f"tolerance model {self.model!r}: choose from {', '.join(MODELS)}")

    @classmethod
    def from_file(cls, path: str | Path | None, model: str | None = None) -> Tolerances:
        if path is None:
            return cls({}, model)
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"--tolerances {path}: {err}") from None
        ok = isinstance(data, dict) and all(
            isinstance(v, dict) and all(isinstance(k, (int, float)) and k > 0 for k in v.values())
            for v in data.values())
        if not ok:
            raise ValueError(f"--tolerances {path}: expected {{objective glob: {{dtype: positive k}}}}")
        return cls(data, model)

    def override(self, spec: catalog.Objective, dtype: str) -> float | None:
        """The target's k for this objective and dtype, if its override file names one."""
        for pattern, per_dtype in self.overrides.items():
            if fnmatch.fnmatch(spec.id, pattern):
                value = per_dtype.get(dtype, per_dtype.get("*"))
                if value is not None:
                    return float(value)
        return None

    def k(self, spec: catalog.Objective, dtype: str, n: int, case_k: float | None, v: int = 1) -> float:
        """k for a reduction of length n whose vocabulary axis (if any) has length v."""
        value = self.override(spec, dtype)
        if value is not None:
            return value
        if case_k is not None:
            return float(case_k)
        return max(spec.k_base * (1.0 + math.log2(max(n, 1))), spec.k_base + lane_chain(v, dtype))

    def for_case(self, spec: catalog.Objective, test: dict, dtype: str, declared: str | None = None) -> CaseTolerance:
        """The bound for every output and gradient of one vector judged in ``dtype``; ``declared``:
        the model the target declares for this objective (the run's model, if set, wins)."""
        inputs = {name: numbers.decode_input(v) for name, v in test["inputs"].items()}
        n, v = reduction_length(spec, inputs), vocabulary_length(spec, inputs)
        model = self.model or declared or "careful"
        careful = (model == "careful" and dtype in LOW_PRECISION
                   and self.override(spec, dtype) is None)
        return CaseTolerance(test, dtype, self.k(spec, dtype, n, test.get("tolerance", {}).get("k"), v), careful)


@dataclass
class CaseTolerance:
    test: dict
    dtype: str
    k: float
    careful: bool = False     # the careful low-precision model (else k·u(dtype)·scale + ulp)

    def measure(self, label: str, got, want) -> Metrics:
        """Judge an output (``name``) or a gradient (``grad:name``) against the exact values."""
        kind, _, name = label.rpartition(":")
        scale = float(self.test["scale"]["grads" if kind == "grad" else "outputs"][name])
        elements = None
        if self.careful:
            # a gradient's terms are stored under "grad:NAME" (lm.linear_cross_entropy's matrix products)
            stored = self.test["scale"].get("elements", {}).get(label if kind == "grad" else name)
            elements = np.abs(np.asarray(want, dtype=np.float64)) if stored is None else np.asarray(
                stored, dtype=np.float64)   # decimal strings, a scalar or want's shape
        return measure(got, want, scale, self.dtype, self.k, elements)


@dataclass
class Metrics:
    max_abs: float
    max_rel: float
    max_ulp: float
    max_err_over_tol: float   # ≤ 1 passes
    tol: float                # the bound at the worst element
    worst_index: tuple
    got: float
    want: float

    @property
    def passed(self) -> bool:
        return self.max_err_over_tol <= 1.0

    def as_dict(self) -> dict:
        return {"max_abs": self.max_abs, "max_rel": self.max_rel, "max_ulp": self.max_ulp,
                "err_over_tol": self.max_err_over_tol, "tol": self.tol}


def measure(got, want, scale: float, dtype: str, k: float, elements=None) -> Metrics:
    """Compare an output (any shape) with the exact values (float64 rounding of the 32-digit
    strings); ``elements`` selects the careful low-precision bound (see :func:`bound`).

    The float64 rounding of ``want`` is exact enough for every dtype's bound except float64's
    own ulp term, which absorbs it."""
    g = np.asarray(got, dtype=np.float64)
    w = np.asarray(want, dtype=np.float64)
    if g.shape != w.shape:
        raise ValueError(f"shape {g.shape} differs from expected {w.shape}")
    same_inf = np.isinf(w) & (g == w)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(same_inf, 0.0, np.abs(g - w))
    err = np.where(np.isnan(err), np.inf, err)
    spacing = ulp(w, dtype)
    tol = bound(w, dtype, k, scale, elements)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.where(err == 0, 0.0, err / tol)
        rel = np.where(err == 0, 0.0, err / np.abs(w))
        ulps = np.where(err == 0, 0.0, err / spacing)
    if g.size == 0:
        return Metrics(0.0, 0.0, 0.0, 0.0, 0.0, (), 0.0, 0.0)
    idx = np.unravel_index(int(np.argmax(ratio)), ratio.shape) if ratio.ndim else ()
    return Metrics(float(err.max()), float(np.max(rel)), float(np.max(ulps)), float(ratio.max()),
                   float(tol[idx] if tol.ndim else tol), tuple(int(i) for i in idx),
                   float(g[idx] if g.ndim else g), float(w[idx] if w.ndim else w))
