"""Argument checks shared by every backend, so that all of them reject the same inputs
with the same message (the message always names the offending argument)."""
from __future__ import annotations

import math
import numbers
from typing import Iterable


class InputError(ValueError):
    """An argument is outside the objective's domain."""


def fail(name: str, problem: str) -> None:
    raise InputError(f"{name}: {problem}")


def real(name: str, value) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
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
    if value not in options:
        fail(name, f"must be one of {', '.join(map(repr, options))}, got {value!r}")
    return value


def flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        fail(name, f"must be True or False, got {value!r}")
    return value


def same_shape(**shapes: tuple) -> tuple:
    """All named shapes must be equal; returns the common shape."""
    items = list(shapes.items())
    first_name, first = items[0]
    for name, shape in items[1:]:
        if tuple(shape) != tuple(first):
            fail(name, f"shape {tuple(shape)} does not match {first_name} shape {tuple(first)}")
    return tuple(first)


def optional_count(name: str, value) -> int | None:
    """None, or an integer >= 1 (an integral float such as 4.0 is accepted; bools are not)."""
    if value is None:
        return None
    if type(value).__name__ in ("bool", "bool_") or not isinstance(value, (numbers.Integral, float)):
        fail(name, f"must be an integer >= 1, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        fail(name, f"must be an integer >= 1, got {value!r}")
    if int(value) < 1:
        fail(name, f"must be an integer >= 1, got {value!r}")
    return int(value)


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
