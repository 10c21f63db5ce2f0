"""Exact number handling for vector files: binary64 inputs, decimal-string outputs, and
exact representability in the narrower dtypes."""
from __future__ import annotations

import math
import struct

import mpmath
import numpy as np

DIGITS = 32                      # significant digits of every expected value
DTYPES = ("float64", "float32", "bfloat16", "float16")
NONFINITE = {"-Infinity": -math.inf, "Infinity": math.inf, "NaN": math.nan}


def encode_input(x):
    """A binary64 number as JSON: a number (shortest round-trip repr), or a string for ±inf/NaN."""
    if isinstance(x, (list, tuple, np.ndarray)):
        return [encode_input(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return int(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    v = float(x)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    if v.is_integer() and abs(v) < 2**53:
        return int(v) if not (v == 0 and math.copysign(1, v) < 0) else -0.0
    return v


def decode_input(x):
    if isinstance(x, list):
        return [decode_input(v) for v in x]
    if isinstance(x, str):
        return NONFINITE[x]
    return x


def encode_exact(x, digits: int = DIGITS):
    """An mpf (or nested array of them) as decimal strings with ``digits`` significant digits."""
    if isinstance(x, np.ndarray):
        return [encode_exact(v, digits) for v in x] if x.ndim else encode_exact(x.item(), digits)
    if isinstance(x, (list, tuple)):
        return [encode_exact(v, digits) for v in x]
    if not isinstance(x, mpmath.mpf):
        x = mpmath.mpf(x)  # an existing mpf keeps its digits (mpf(x) would round it to the current dps)
    if x == 0:
        return "0"
    if mpmath.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    tie = digits == DIGITS and _tie(x, digits)   # the printed (certified) numbers, not the 6-digit scales
    return mpmath.nstr(x, digits + 1 if tie else digits, strip_zeros=False, min_fixed=-4, max_fixed=6)


def _tie(x, digits: int) -> bool:
    """Whether x is (to the working precision) a decimal with exactly ``digits`` + 1 significant
    digits, the last a 5: a rounding tie at ``digits``, printed with that one digit more so that
    the string is the exact value, not one of two equally near roundings (β·c/n of binary64 c and
    n = 40, say; refimpl/certified can then prove the printed string)."""
    wide = mpmath.nstr(x, digits + 8, strip_zeros=False, min_fixed=-4, max_fixed=6)
    mantissa = wide.split("e")[0].lstrip("-").replace(".", "").lstrip("0")
    if not (len(mantissa) == digits + 8 and mantissa[digits] == "5" and set(mantissa[digits + 1:]) == {"0"}):
        return False
    with mpmath.workdps(digits + 20):
        return abs(x - mpmath.mpf(wide)) <= abs(x) * mpmath.mpf(10) ** (-digits - 12)


def decode_exact(x):
    if isinstance(x, list):
        return [decode_exact(v) for v in x]
    return mpmath.mpf(x)


def _bf16_exact(v: float) -> bool:
    bits = struct.unpack("<I", struct.pack("<f", v))[0]
    return (bits & 0xFFFF) == 0


def representable(v: float, dtype: str) -> bool:
    """True when the binary64 value v is exactly a value of ``dtype`` (±inf counts)."""
    if math.isnan(v):
        return True
    if dtype == "float64" or math.isinf(v):
        return True
    with np.errstate(over="ignore"):
        f32 = np.float32(v)
    if float(f32) != v:
        return False
    if dtype == "float32":
        return True
    if dtype == "bfloat16":
        return _bf16_exact(float(f32))
    with np.errstate(over="ignore"):
        return float(np.float16(v)) == v


def flat_floats(x):
    if isinstance(x, (list, tuple)):
        for v in x:
            yield from flat_floats(v)
    else:
        yield float(x)


def round_to(x, dtype: str):
    """Round nested numbers to the nearest value of ``dtype`` (returned as binary64)."""
    if isinstance(x, (list, tuple)):
        return [round_to(v, dtype) for v in x]
    v = float(x)
    if dtype == "float32":
        return float(np.float32(v))
    if dtype == "float16":
        return float(np.float16(v))
    if dtype == "bfloat16":
        # round-to-nearest-even on the upper 16 bits of the float32 pattern
        bits = struct.unpack("<I", struct.pack("<f", np.float32(v)))[0]
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return struct.unpack("<f", struct.pack("<I", bits))[0]
    return v
