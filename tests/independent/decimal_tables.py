"""Tables of independently computed 40-digit values, and the checks run on them.

A table row holds an objective's inputs, parameters, an optional cotangent and, under
"expect", decimal strings of 40 significant digits for every output ("losses", …) and for
the hand-written gradients ("grad:<argument>"). The literals were produced by the mpmath
expressions written next to each table (straight from the papers' formulas, sharing no code
with refimpl.exact) as ``literals(table.expressions(row))`` at RECOMPUTE_DPS digits, and pasted.
Three checks use them:

1. ``assert_reproduces``: the written expressions, re-evaluated at RECOMPUTE_DPS = 60 digits,
   round to the literal: |literal − v| ≤ 1e-39·|v| (a correctly rounded 40-digit literal
   is within 5e-40·|v|; the 60-digit evaluation adds far less than the remaining margin).
2. The hand-written gradient equals ``gradcheck.numerical_vjp`` (mpmath.diff) of the written
   value expressions to gradcheck.AGREE_DIGITS, so no hand derivation is taken on trust.
3. ``assert_reference_matches``: refimpl.exact at its 50-digit working precision agrees with
   the literal to REFERENCE_DIGITS = 35 significant digits: |got − literal| ≤ 1e-35·|literal|
   + ABS_FLOOR, ABS_FLOOR = 1e-45. The floor only matters for literals below 1e-10 in size;
   the exact zeros of the tables (inactive hinge, masked positions, a last token's empty
   future) must therefore come out below 1e-45, and the reference produces them as exact 0.

Every input is a binary64 number (most are dyadic, e.g. −1.375); a parameter such as
β = 0.1 enters both sides as the exact binary64 value mpf(0.1), which is what refimpl.exact
receives (it converts binary64 arguments without rounding).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gradcheck
import mpmath
import numpy as np
import pytest

RECOMPUTE_DPS = 60
LITERAL_DIGITS = 40
REPRODUCE_REL = mpmath.mpf("1e-39")
REFERENCE_DIGITS = 35
ABS_FLOOR = mpmath.mpf("1e-45")


def exact(x):
    """Nested lists of binary64 numbers → an object array of mpf, converted without rounding
    (mpmath.mpf of a float is exact at any precision ≥ 53 bits); integer arrays (labels, masks
    written as 0/1) stay integer arrays."""
    a = np.asarray(x)
    if a.dtype.kind in "iu":
        return a
    return np.vectorize(lambda v: mpmath.mpf(float(v)), otypes=[object])(a.astype(float))


def literals(values: dict) -> dict:
    """The 40-significant-digit strings of every value (how the tables were written)."""
    def one(v):
        return "0" if v == 0 else mpmath.nstr(v, LITERAL_DIGITS, strip_zeros=False)
    return {k: np.vectorize(one, otypes=[object])(np.asarray(v, dtype=object)).tolist()
            for k, v in values.items()}


def _pairs(expect: dict, got: dict):
    assert set(got) == set(expect), f"keys {sorted(got)} differ from the table's {sorted(expect)}"
    for key, literal in expect.items():
        want = np.asarray(literal, dtype=object)
        have = np.asarray(got[key], dtype=object)
        assert want.shape == have.shape, f"{key}: shape {have.shape} != table shape {want.shape}"
        for idx in np.ndindex(want.shape):
            yield f"{key}{list(idx)}", mpmath.mpf(want[idx]), mpmath.mpf(have[idx])


def assert_reproduces(expect: dict, recomputed: dict) -> None:
    """The literals are the 40-digit roundings of the values recomputed at 60 digits."""
    with mpmath.workdps(RECOMPUTE_DPS):
        for where, want, have in _pairs(expect, recomputed):
            assert abs(want - have) <= REPRODUCE_REL * abs(have), \
                f"{where}: literal {mpmath.nstr(want, 45)} != recomputed {mpmath.nstr(have, 45)}"


def assert_reference_matches(expect: dict, got: dict) -> None:
    """refimpl.exact agrees with every literal to 35 significant digits (floor 1e-45)."""
    rel = mpmath.mpf(10) ** -REFERENCE_DIGITS
    with mpmath.workdps(RECOMPUTE_DPS):
        for where, want, have in _pairs(expect, got):
            assert abs(want - have) <= rel * abs(want) + ABS_FLOOR, \
                f"{where}: lossproof.refimpl.exact {mpmath.nstr(have, 45)} != literal {mpmath.nstr(want, 45)}"


def exact_params(params: dict) -> dict:
    """Float parameters as their exact binary64 value; strings, ints, bools and None as given."""
    return {k: mpmath.mpf(v) if isinstance(v, float) else v for k, v in params.items()}


@dataclass(frozen=True)
class Table:
    """One objective's table and the two computations compared with it.

    ``values(**inputs, **params)`` returns {output: values} and ``hand_gradient(cotangent,
    **inputs, **params)`` {"grad:<argument>": gradient}, both written from the papers;
    ``reference`` / ``reference_vjp`` are the refimpl.exact functions. ``output`` names the
    result of a reference that returns a bare array (its cotangent is then a bare array too)."""
    objective: str
    rows: list
    values: Callable
    reference: Callable
    hand_gradient: Callable | None = None
    reference_vjp: Callable | None = None
    output: str | None = None

    def _kwargs(self, row) -> dict:
        return {**{k: exact(v) for k, v in row["inputs"].items()}, **exact_params(row["params"])}

    def _cotangent(self, row):
        ct = row["cotangent"]
        return {k: exact(v) for k, v in ct.items()} if isinstance(ct, dict) else exact(ct)

    def expressions(self, row) -> dict:
        """Every tabulated quantity from the written expressions, at the current precision."""
        kwargs = self._kwargs(row)
        out = dict(self.values(**kwargs))
        if self.hand_gradient is not None:
            out.update(self.hand_gradient(self._cotangent(row), **kwargs))
        return out

    def check_literals(self, row) -> None:
        with mpmath.workdps(RECOMPUTE_DPS):
            assert_reproduces(row["expect"], self.expressions(row))

    def check_hand_gradient(self, row) -> None:
        """The hand-written gradient against mpmath.diff of the written value expressions."""
        with mpmath.workdps(RECOMPUTE_DPS):
            kwargs, ct = self._kwargs(row), self._cotangent(row)
            hand = self.hand_gradient(ct, **kwargs)
            weights = ct if isinstance(ct, dict) else {self.output: ct}
            for key, analytic in hand.items():
                numeric = self._numerical_gradient(kwargs, key.removeprefix("grad:"), weights)
                digits = gradcheck.agreement_digits(analytic, numeric)
                assert digits >= gradcheck.AGREE_DIGITS, f"{key}: only {digits:.1f} digits agree"

    def _numerical_gradient(self, kwargs, name, weights):
        """gradcheck.numerical_vjp over the finite entries of ``name``; a −inf logit (an
        impossible token) has no neighbourhood to difference in, and its gradient is 0."""
        template = kwargs[name]
        finite = [idx for idx in np.ndindex(template.shape) if mpmath.isfinite(template[idx])]
        if len(finite) == template.size:
            return gradcheck.numerical_vjp(self.values, kwargs, name, weights)

        def embedded(**kw):
            x = template.copy()
            for idx, v in zip(finite, kw[name]):
                x[idx] = v
            return self.values(**{**kw, name: x})

        values = np.array([template[idx] for idx in finite], dtype=object)
        partial = gradcheck.numerical_vjp(embedded, {**kwargs, name: values}, name, weights)
        grad = np.full(template.shape, mpmath.mpf(0), dtype=object)
        for idx, g in zip(finite, partial):
            grad[idx] = g
        return grad

    def check_reference(self, row) -> None:
        out = self.reference(**row["inputs"], **row["params"])
        got = dict(out) if isinstance(out, dict) else {self.output: out}
        if self.reference_vjp is not None:
            vjp = self.reference_vjp(row["cotangent"], **row["inputs"], **row["params"])
            got.update({f"grad:{name}": g for name, g in vjp.items()})
        assert_reference_matches(row["expect"], got)


def over_rows(tables, with_hand_gradient: bool = False):
    """``pytest.mark.parametrize("table,row", ...)`` over every row of ``tables`` (only those of
    tables with a hand-derived gradient when ``with_hand_gradient``), ids ``objective:row``."""
    cases = [(t, row) for t in tables if not with_hand_gradient or t.hand_gradient is not None for row in t.rows]
    return pytest.mark.parametrize("table,row", cases, ids=[f"{t.objective}:{row['id']}" for t, row in cases])
