"""Turn a Case into a vector test: exact outputs, cotangents, VJPs, scales and a uid.

Every expected digit is computed twice, at the working precision and 30 digits above it,
and the case is refused unless both agree to the printed digits: a vector never carries
a digit that cancellation could have corrupted.

The dtypes a test is judged in: float64 always; float32 when its inputs are float32 values;
bfloat16 and float16 for a low-precision case (``Case.low_precision``) of an objective that
has them (``catalog.Objective.low_precision``) when its inputs and cotangents are values of
that dtype and no exact output or gradient lies beyond the dtype's largest finite value (a
correctly rounded result would be infinite there). A low-precision test also stores, for the
outputs that reduce terms, the magnitude of those terms (``scale.elements``, read by the
careful low-precision tolerance model in conformance/compare.py).
"""
from __future__ import annotations

import importlib
import math
import random

import mpmath
import numpy as np

from lossproof.conformance import catalog, numbers
from lossproof.conformance.errors import LossproofError
from lossproof.conformance.generate.case import Case
from lossproof.conformance.vectors.format import uid
from lossproof.refimpl import validate
from lossproof.refimpl.exact import mp

CHECK_EXTRA_DPS = 30


class GenerationError(LossproofError):
    pass


def exact_functions(objective_id: str):
    family, name = objective_id.split(".")
    module = importlib.import_module(f"lossproof.refimpl.exact.{family}")
    return getattr(module, name), getattr(module, f"{name}_vjp", None)


def call_kwargs(spec: catalog.Objective, case: Case) -> dict:
    kwargs = {**spec.defaults, **case.conventions, **case.params}
    for name, value in case.inputs.items():
        kwargs[name] = numbers.decode_input(numbers.encode_input(value))
    return kwargs


def full_conventions(spec: catalog.Objective, case: Case) -> dict:
    return {name: case.conventions.get(name, spec.defaults[name]) for name in spec.conventions}


def uid_of(spec: catalog.Objective, case: Case) -> str:
    return uid(spec.id, case.inputs, case.params, spec.uid_conventions(full_conventions(spec, case)))


def _shape(x) -> tuple:
    return np.array(x, dtype=object).shape


def _outputs_dict(spec, out) -> dict:
    if isinstance(out, dict):
        return {k: out[k] for k in spec.outputs}
    return {spec.outputs[0]: out}


def _default_cotangents(spec, outputs: dict, uid: str, low_precision: bool) -> dict:
    """Ones for scalar outputs; otherwise drawn from the uid: three decimals in [−2, 2], or for a
    low-precision case nonzero multiples of 1/64 (exact in bfloat16 and float16, so that a target
    receives exactly the cotangent its gradient is judged against)."""
    rng = random.Random(uid)
    cts = {}
    for name, value in outputs.items():
        shape = _shape(value)
        size = int(np.prod(shape))
        if not shape:
            cts[name] = 1.0
        elif low_precision:
            cts[name] = np.array([rng.choice((-1, 1)) * rng.randint(1, 128) / 64 for _ in range(size)],
                                 dtype=float).reshape(shape).tolist()
        else:
            cts[name] = np.array([round(rng.uniform(-2, 2), 3) for _ in range(size)],
                                 dtype=float).reshape(shape).tolist()
    return cts


def _max_abs(x) -> mpmath.mpf:
    arr = np.array(x, dtype=object)
    vals = [abs(mpmath.mpf(v)) for v in arr.flat if not mpmath.isinf(mpmath.mpf(v))]
    return max(vals, default=mp.ZERO)


# Largest finite value of each dtype narrower than binary64.
_MAX_FINITE = {"float32": float(np.finfo(np.float32).max), "bfloat16": (2 - 2.0 ** -7) * 2.0 ** 127,
               "float16": 65504.0}


def _dtypes(spec, case: Case, cotangents: dict | None = None, exact: list | None = None) -> list[str]:
    """float64, then every narrower dtype that holds the inputs (and cotangents) exactly and
    the exact results (``exact``: outputs and gradients, decimal strings) within its range."""
    floats = [v for name, val in case.inputs.items()
              if next(i for i in spec.inputs if i.name == name).kind == "float"
              for v in numbers.flat_floats(val)]
    # float32 judges the cotangent's float32 rounding (its error is far inside the float32 bound)
    cts = [v for val in (cotangents or {}).values() for v in numbers.flat_floats(val)]
    largest = max((abs(v) for x in exact or [] for v in numbers.flat_floats(x) if not math.isinf(v)),
                  default=0.0)
    if not all(numbers.representable(v, "float32") for v in floats) or largest > _MAX_FINITE["float32"]:
        return ["float64"]
    out = ["float64", "float32"]
    if case.low_precision and spec.low_precision:
        out += [d for d in ("bfloat16", "float16")
                if all(numbers.representable(v, d) for v in floats + cts) and largest <= _MAX_FINITE[d]]
    return out


def _evaluate(spec, fn, vjp, kwargs, cotangents):
    outputs = _outputs_dict(spec, fn(**kwargs))
    grads = {}
    if vjp is not None and spec.grads:
        ct = {k: numbers.decode_input(v) for k, v in cotangents.items()}
        ct_arg = ct if len(spec.outputs) > 1 else ct[spec.outputs[0]]
        grads = vjp(ct_arg, **kwargs)
        grads = {k: grads[k] for k in spec.grads_of(kwargs)}
    return outputs, grads


def _check_digits(uid, label, low, high):
    lo = numbers.encode_exact(low)
    if lo != numbers.encode_exact(high):
        raise GenerationError(f"{uid}: {label} is not stable to {numbers.DIGITS} digits between precisions")
    return lo


def build_test(case: Case, scale_fn=None) -> dict:
    """Compute one test's JSON object (without its tcId)."""
    spec = catalog.get(case.objective)
    fn, vjp = exact_functions(spec.id)
    kwargs = call_kwargs(spec, case)
    uid = uid_of(spec, case)
    test = {
        "uid": uid, "comment": case.comment, "flags": sorted(case.flags), "result": case.result,
        "dtypes": _dtypes(spec, case),
        "inputs": {k: numbers.encode_input(v) for k, v in case.inputs.items()},
        "params": case.params,
    }
    if case.result == "invalid":
        try:
            fn(**kwargs)
        except validate.InputError as err:
            test["error"] = str(err)
        else:
            raise GenerationError(f"{uid}: marked invalid but the exact reference accepts it")
        test["provenance"] = case.provenance
        return test
    dps = mp.get_dps()
    outputs, _ = _evaluate(spec, fn, None, kwargs, {})
    low = case.low_precision and spec.low_precision
    cotangents = case.cotangents or _default_cotangents(spec, outputs, uid, low)
    outputs, grads = _evaluate(spec, fn, vjp, kwargs, cotangents)
    with mp.precision(dps + CHECK_EXTRA_DPS):
        hi_outputs, hi_grads = _evaluate(spec, fn, vjp, kwargs, cotangents)
    test["expected"] = {k: _check_digits(uid, k, v, hi_outputs[k]) for k, v in outputs.items()}
    if grads:
        test["cotangents"] = {k: numbers.encode_input(v) for k, v in cotangents.items()}
        test["grads"] = {k: _check_digits(uid, f"grad {k}", v, hi_grads[k]) for k, v in grads.items()}
    test["dtypes"] = _dtypes(spec, case, cotangents if grads else None,
                             list(test["expected"].values()) + list(test.get("grads", {}).values()))
    with mpmath.workdps(dps):
        scales = scale_fn(kwargs, outputs, grads) if scale_fn else {}
        test["scale"] = {
            "outputs": {k: numbers.encode_exact(scales.get(k, _max_abs(v)), 6) for k, v in outputs.items()},
            "grads": {k: numbers.encode_exact(scales.get(f"grad:{k}", _max_abs(v)), 6) for k, v in grads.items()},
        }
        elements = {k: scales[f"elements:{k}"] for k in outputs if f"elements:{k}" in scales}
        elements.update({f"grad:{k}": scales[f"elements:grad:{k}"] for k in grads if f"elements:grad:{k}" in scales})
        if elements and set(test["dtypes"]) & {"bfloat16", "float16"}:
            test["scale"]["elements"] = {k: numbers.encode_exact(v, 6) for k, v in elements.items()}
    if case.tolerance:
        test["tolerance"] = case.tolerance
    test["provenance"] = case.provenance
    return test
