"""Every backend rejects a bad parameter or convention with the same InputError message.

For every catalog objective and each of its parameters (``conformance.catalog``), bad values
chosen by the parameter's kind — a string option, a flag, an integer option (std_ddof), an
integer count, a real number — and values just outside its range are passed, with valid
inputs, to ``refimpl.exact``, ``refimpl.arrays`` and ``refimpl.torch`` (and to the VJPs of
the first two). Each call must raise ``refimpl.validate.InputError`` whose message names the
parameter, and the message must be the same in every backend: the checks live in one
function of ``refimpl.validate`` per parameter, which the last test asserts of the source
(no backend calls the primitive checks for a parameter itself). Tabular objectives exist in
the exact backend only.
"""
from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest

from backend_inputs import backends_of, function, required_params, to_backend, valid_inputs
from lossproof.conformance import catalog
from lossproof.refimpl import validate
from lossproof.refimpl.exact import _tree

NAN, INF = math.nan, math.inf

NOT_A_STRING = [None, 1, 0.5, True, np.True_, b"x", ["x"], np.array(["a", "b"]), "", "nope"]
NOT_A_FLAG = [1, 0, 1.0, np.True_, np.False_, "True", None, [True]]
NOT_0_OR_1 = [True, False, np.True_, np.False_, 2, -1, 0.5, NAN, INF, "0", None, [0], np.array([0, 1])]
NOT_A_NUMBER = [NAN, INF, -INF, True, False, np.True_, np.float64("nan"), "0.5", "x", b"1", [0.5],
                np.array([0.1, 0.2]), 1j, {}]
COUNTS = ("window", "future_window", "vocab", "horizon")
NOT_A_COUNT = NOT_A_NUMBER + [0, -1, 1.5, np.float64(2.5)]

# just outside each parameter's range, by name (and by objective where the range differs)
OUTSIDE = {
    "temperature": [0.0, -1.0, -1e-300],
    "alpha": [-0.1, 1.5],
    "forward_weight": [-0.1, 1.5],
    "beta": [-0.5, -1e-300],
    "clamp": [0.0, -1.0],
    "kl_clamp": [0.0, -1.0],
    "log_ratio_clamp": [0.0, -20.0],
    "mean_eps": [-1e-8],
    "clip": [0.0, -1.0],
    "future_clip": [0.0, -1.0],
    "z_loss": [-1e-4],
    "softcap": [0.0, -1.0],
    "normalizer": [0.0, -1.0],
    "ignore_index": [1.5],
    "eps": [-1e-4, 1.0],
    "eps_low": [-0.1, 1.0],
    "eps_high": [-0.1],
    "dual_clip": [1.0, 0.5, -3.0],
    "norm_length": [0.0, -1.0],
    "ratio_clip": [0.0, 1.0, 1.5],
    "ratio_cap": [0.0, -2.0],
    "vocab": [1],
    "eos": [-1, 2, 1.5, True, np.True_, "0", NAN],  # the tree of the inputs has V = 2
    "center_rewards_coefficient": [-0.01, -1e-300],
    "clip_range_value": [0.0, -0.5],
}
OUTSIDE_FOR = {
    ("distill.generalized_jsd", "beta"): [1.5, 1 + 1e-12],
    ("distill.skew_kl", "alpha"): [0.0, -1e-300, 1 + 1e-12],
    ("dpo.loss", "beta"): [0.0],
    ("dpo.loss", "label_smoothing"): [-0.1, 0.5, 0.7],
    ("preference.simpo", "label_smoothing"): [-0.1, 0.5, 0.7],
    ("preference.cpo", "label_smoothing"): [-0.1, 0.5, 0.7],
    ("lm.cross_entropy", "label_smoothing"): [-0.1, 1.5],
    ("proximal_kl.loss", "beta"): [0.0],
    ("tabular.optimum", "beta"): [0.0, None],
    ("tabular.expected_update", "beta"): [0.0, None],
}


def bad_values(objective_id: str, param: catalog.Param) -> list:
    if param.choices and all(isinstance(c, str) for c in param.choices):
        values = NOT_A_STRING + [str(param.default).upper()]
    elif param.choices == (True, False):
        values = NOT_A_FLAG
    elif param.choices:
        values = NOT_0_OR_1
    elif param.name == "eos":
        values = []
    elif param.name in COUNTS:
        values = NOT_A_COUNT
    else:
        values = NOT_A_NUMBER
    values = values + OUTSIDE.get(param.name, []) + OUTSIDE_FOR.get((objective_id, param.name), [])
    # None is the documented "off" of an optional parameter
    return [v for v in values if not (v is None and param.default is None and param.name != "beta")]


CASES = [(o.id, p.name, v) for o in catalog.OBJECTIVES for p in o.params for v in bad_values(o.id, p)]


def _id(case):
    objective_id, name, value = case
    return f"{objective_id}-{name}-{type(value).__name__}:{value!r}"


def _call(fn, backend, objective_id, inputs, params, cotangent=None):
    kwargs = {k: to_backend(backend, v) for k, v in inputs.items()}
    try:
        if cotangent is None:
            fn(**kwargs, **params)
        else:
            fn(cotangent, **kwargs, **params)
    except validate.InputError as err:
        return str(err)
    except Exception as err:  # noqa: BLE001 — anything but InputError is the failure reported
        return f"<{type(err).__name__}: {err}>"
    return "<accepted>"


def _cotangent(objective_id, inputs, params):
    """Ones shaped like the outputs (from the arrays backend at the default parameters)."""
    spec = catalog.get(objective_id)
    out = function("arrays", objective_id)(**inputs, **params)
    if len(spec.outputs) == 1:
        return np.ones_like(np.asarray(out, dtype=np.float64))
    return {k: np.ones_like(np.asarray(v, dtype=np.float64)) for k, v in out.items()}


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_every_backend_rejects_with_the_same_message(case):
    objective_id, name, bad = case
    spec = catalog.get(objective_id)
    full = valid_inputs(objective_id, 0)
    good = {k: v for k, v in {**spec.defaults, **required_params(objective_id)}.items() if k not in full}
    inputs = {k: v for k, v in full.items() if k != name}  # tabular's vocab and horizon come with them
    params = {**good, name: bad}
    messages = {}
    for backend in backends_of(objective_id):
        messages[backend] = _call(function(backend, objective_id), backend, objective_id, inputs, params)
        vjp = function(backend, objective_id, vjp=True)
        if vjp is not None:
            ct = _cotangent(objective_id, full, good)
            messages[f"{backend}_vjp"] = _call(vjp, backend, objective_id, inputs, params, ct)
    first = next(iter(messages.values()))
    assert first.startswith(f"{name}: "), messages
    assert all(m == first for m in messages.values()), messages


def test_every_parameter_is_covered():
    """Each parameter of the catalog gets bad values of its kind (a new parameter whose kind
    this test does not know fails here rather than going unchecked)."""
    for spec in catalog.OBJECTIVES:
        for p in spec.params:
            assert len(bad_values(spec.id, p)) >= 3, (spec.id, p.name)


def test_options_match_the_catalog():
    """The options refimpl.validate accepts are the catalog's, parameter by parameter."""
    options = {"direction": validate.DIRECTIONS, "endpoints": validate.ENDPOINTS,
               "kind": validate.KL_KINDS, "kl_kind": validate.KL_KINDS,
               "loss_type": validate.LOSS_TYPES, "scale": validate.SCALES,
               "degenerate": validate.DEGENERATE, "mode": validate.AGGREGATIONS,
               "aggregation": validate.AGGREGATIONS, "kl_aggregation": validate.AGGREGATIONS,
               "rule": validate.UPDATE_RULES,
               "baseline": validate.BASELINES, "level": validate.CORRECTION_LEVELS,
               "correction": validate.CORRECTIONS, "seq_log_ratio": validate.SEQ_LOG_RATIOS,
               "kept_weight": validate.KEPT_WEIGHTS, "policy_loss": validate.POLICY_LOSSES,
               "cispo_clip": validate.CISPO_CLIPS}
    by_objective = {("grpo.advantages", "baseline"): validate.ADVANTAGE_BASELINES,
                    ("gae.kl_rewards", "kind"): validate.REWARD_KL_KINDS}
    for spec in catalog.OBJECTIVES:
        for p in spec.params:
            if (spec.id, p.name) in by_objective:
                assert set(p.choices) == set(by_objective[spec.id, p.name]), (spec.id, p.name)
            elif p.name in options:
                assert set(p.choices) == set(options[p.name]), (spec.id, p.name)
    # the tabular update rules are defined in refimpl/exact/_tree.py, in the order the message lists
    assert tuple(_tree.RULES) == validate.UPDATE_RULES


PRIMITIVES = {"real", "positive", "nonnegative", "in_range", "optional_positive", "choice", "flag",
              "count", "optional_count"}
BACKEND_DIRS = [Path(validate.__file__).parent / b for b in ("exact", "arrays", "torch")]


def test_backends_call_one_function_per_parameter():
    """No backend module applies a primitive check (positive, choice, ...) itself: every
    parameter goes through its own function of refimpl.validate, shared by all backends."""
    offenders = []
    for folder in BACKEND_DIRS:
        for path in sorted(folder.glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "validate"
                        and node.func.attr in PRIMITIVES):
                    offenders.append(f"{path.relative_to(folder.parent)}:{node.lineno} validate.{node.func.attr}")
    assert not offenders, offenders
