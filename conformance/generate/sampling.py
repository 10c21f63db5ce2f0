"""Deterministic input builders shared by the family generators (binary64 values only)."""
from __future__ import annotations

import math

import numpy as np

from conformance import numbers


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


def log(x: float) -> float:
    return math.log(x)
