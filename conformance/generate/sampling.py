"""Deterministic input builders shared by the family generators (binary64 values only)."""
from __future__ import annotations

import math

import mpmath
import numpy as np

from lossproof.conformance import numbers


def nearest(x: mpmath.mpf) -> float:
    """``x`` rounded to the nearest binary64 (``float(x)`` rounds toward zero): an input formed by a
    transcendental function in mpmath at its working precision, rounded once, is the same on every
    platform, where NumPy's and libm's own last bit are not."""
    return mpmath.libmp.to_float(x._mpf_, rnd=mpmath.libmp.round_nearest)


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def logits(r: np.random.Generator, shape, spread: float = 3.0) -> list:
    return (r.normal(0.0, spread, size=shape)).tolist()


def logprobs(r: np.random.Generator, shape, low: float = -6.0) -> list:
    """Log-probabilities of sampled tokens: values in [low, 0)."""
    return (-r.exponential(-low / 3, size=shape)).clip(low, -1e-6).tolist()


def near(r: np.random.Generator, base, spread: float) -> list:
    b = np.asarray(base, dtype=float)
    return (b + r.normal(0.0, spread, size=b.shape)).tolist()


def logprobs_near(r: np.random.Generator, base, spread: float) -> list:
    """Log-probabilities near ``base`` (still valid log-probabilities: < 0)."""
    return np.minimum(np.asarray(near(r, base, spread)), -1e-6).tolist()


def mask(r: np.random.Generator, batch: int, length: int, min_len: int = 1) -> list:
    """Ragged right-padded masks: row b has a random length in [min_len, length]."""
    lengths = r.integers(min_len, length + 1, size=batch)
    return [[1 if t < n else 0 for t in range(length)] for n in lengths]


def in_dtype(x, dtype: str):
    """Round nested inputs so they are exactly representable in ``dtype``."""
    return numbers.round_to(x, dtype)


def with_empty_rows(mask, rows) -> list:
    """``mask`` with the given rows emptied (rows without tokens)."""
    mask = [list(m) for m in mask]
    for i in rows:
        mask[i] = [0] * len(mask[i])
    return mask


# Low-precision grids: BOTH = bfloat16 values that float16 holds exactly as well (a case on it is
# judged in both dtypes), FP16 = float16 values (most are not bfloat16 values).
BOTH, FP16 = "bf16+fp16", "fp16"
LOW_GRIDS = (BOTH, FP16)
LOW_MAX = 65280.0   # the largest bfloat16 value below float16's maximum 65504


def in_low(x, grid: str):
    """Round nested inputs to a low-precision grid (``LOW_GRIDS``); magnitudes are clipped to
    ``LOW_MAX`` (within float16's range). On BOTH, tiny values go to the float16 subnormal grid
    and back to bfloat16 (8 significant bits that are multiples of 2^−24: both dtypes hold them)."""
    if isinstance(x, (list, tuple)):
        return [in_low(v, grid) for v in x]
    v = max(-LOW_MAX, min(LOW_MAX, float(x))) if math.isfinite(x) else float(x)
    if grid == FP16:
        return numbers.round_to(v, "float16")
    v = numbers.round_to(numbers.round_to(numbers.round_to(v, "bfloat16"), "float16"), "bfloat16")
    assert numbers.representable(v, "bfloat16") and numbers.representable(v, "float16"), v
    return v


# Low-precision random tokens keep this relative distance from every kink (clip band, ratio cap,
# dual clip, KL clamp, hinge): a ratio formed in bfloat16 itself is off by about 1%, so the side
# of the kink is decided by the inputs, not by the precision.
NEAR_LOW = 2.0 ** -5


def rounded(x, dtype: str | None):
    """Round to ``dtype`` (float32), to a low-precision grid (``LOW_GRIDS``), or not (None)."""
    if dtype in LOW_GRIDS:
        return in_low(x, dtype)
    return in_dtype(x, dtype) if dtype else x


def low_shape(r: np.random.Generator, lengths, large: bool, elems: int) -> tuple[int, int]:
    """[B, T] of a random low-precision case: T drawn from ``lengths``, B ≤ 16 with B·T ≤ ``elems``;
    the ``large`` one is 8 × 256."""
    if large:
        return 8, 256
    t = int(r.choice(lengths))
    return max(1, min(int(r.integers(1, 17)), elems // t)), t


def low_grid(i: int, every: int = 3) -> str:
    """The grid of the i-th low-precision case: FP16 for every ``every``-th, else BOTH."""
    return FP16 if i % every == every - 1 else BOTH


def grid_note(grid: str) -> str:
    return "bfloat16 and float16" if grid == BOTH else "float16"


def ulp_steps(x: float, k: int) -> float:
    """``x`` moved ``k`` binary64 ulps (up for k > 0, down for k < 0)."""
    for _ in range(abs(k)):
        x = math.nextafter(x, math.inf if k > 0 else -math.inf)
    return x


def log(x: float) -> float:
    return math.log(x)
