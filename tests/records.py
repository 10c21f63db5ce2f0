"""Numbers the tests measure for the record — gradient checks and their worst agreement, bad
inputs tried per category — printed once in pytest's terminal summary (tests/conftest.py).

They are collected as the tests run and read only after the session, so no test depends on
another test having run first."""
from __future__ import annotations

from collections import Counter, defaultdict

GRADIENT_DIGITS: dict[str, list[tuple[str, float]]] = defaultdict(list)   # family -> (case, digits)
BAD_INPUTS: Counter = Counter()                                           # category -> inputs tried


def gradient_check(family: str, case: str, digits: float) -> None:
    GRADIENT_DIGITS[family].append((case, digits))


def bad_input(category: str) -> None:
    BAD_INPUTS[category] += 1


def summary_lines() -> list[str]:
    lines = []
    for family, checks in sorted(GRADIENT_DIGITS.items()):
        case, worst = min(checks, key=lambda c: c[1])
        lines.append(f"{family}: {len(checks)} gradient checks against mpmath.diff, worst agreement "
                     f"{worst:.1f} digits ({case})")
    if BAD_INPUTS:
        lines.append("bad inputs tried per category: " + ", ".join(f"{k} {v}" for k, v in sorted(BAD_INPUTS.items())))
    return lines
