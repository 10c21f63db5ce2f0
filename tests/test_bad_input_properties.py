"""Bad input everywhere gives a clear answer and loses nothing.

Property-based (hypothesis, under the profile of tests/conftest.py: derandomized by default)
over every catalog objective of the three reference backends — refimpl.exact,
refimpl.arrays (NumPy) and refimpl.torch — and the exact/arrays VJPs. Each bad input must
either raise ``refimpl.validate.InputError`` whose message starts with the name of the
offending argument, or return the documented value (never a NaN). Any other exception is a
bug. Categories: non-finite values, wrong dtypes, wrong shapes, empty arrays, non-0/1 masks,
out-of-range parameters and conventions, bad cotangents. The number of bad inputs tried per
category is printed at the end (``test_zz_counts``).

The CLI half: every bad argument exits 2 with one line naming the option or file (no
traceback), and reports are written atomically.

Regressions found by these properties are pinned at the bottom (``REGRESSIONS``)."""
from __future__ import annotations

import os

import mpmath
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import records
from backend_inputs import BACKENDS, function, required_params, to_backend, torch, valid_inputs
from lossproof.conformance import catalog, cli
from lossproof.conformance._io import write_tree
from lossproof.conformance.vectors.format import MANIFEST, manifest_bytes
from lossproof.refimpl import validate

OBJECTIVES = [o for o in catalog.OBJECTIVES if o.family != "tabular"]
SETTINGS = settings(max_examples=150,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


# ------------------------------------------------------------------------------- bad parameters

NAN, INF = float("nan"), float("inf")
BAD_PARAMS = {
    "temperature": [0.0, -1.0, NAN, INF, "hot", None],
    "alpha": [-0.1, 1.5, NAN, "half"],
    "t2_scale": ["yes", 2, None],
    "direction": ["sideways", None, 1],
    "beta": [-0.5, NAN, INF, "x"],
    "endpoints": ["both", None],
    "kind": ["k4", None, 3],
    "clamp": [0.0, -1.0, NAN, "ten"],
    "clip": [0.0, -1.0, NAN, "ten"],
    "loss_type": ["kto", None],
    "label_smoothing": [-0.1, 0.5, 0.7, NAN],
    "discopop_tau": [0.0, -0.05, NAN, INF, "cold"],
    "reward_shift": [NAN, INF, -INF, "mean", None],
    "gamma": [-0.5, NAN, INF, "wide"],
    "lam": [-0.1, 1.5, NAN, "one"],
    "whiten": ["batch", None, 1],
    "masked_tokens": ["drop", None],
    "baseline": ["median", None, 1],
    "renormalize": ["student", None, 1],
    "desirable_weight": [0.0, -1.0, NAN, INF],
    "undesirable_weight": [0.0, -1.0, NAN, INF],
    "scale": ["global", None],
    "std_ddof": [2, -1, True, 0.5],
    "eps": [-1e-4, 1.0, NAN, INF],
    "degenerate": ["skip", None],
    "eps_low": [-0.1, 1.0, NAN],
    "eps_high": [-0.1, NAN, INF],
    "dual_clip": [1.0, 0.5, NAN, -3.0],
    "mode": ["sum", None],
    "aggregation": ["sum", None],
    "norm_length": [0.0, -1.0, NAN, INF],
    "kl_kind": ["k4", None],
    "kl_clamp": [0.0, -1.0, NAN],
    "kl_ratio_weight": [1, "yes", None],
    "window": [0, -1, 1.5, True],
    "level": ["batch", None, 1],
    "correction": ["clip", None],
    "lower": [-0.5, NAN, INF, "low", 3.0],
    "upper": [0.0, -1.0, NAN, INF, "high", None],
    "seq_log_ratio": ["max", None],
    "kept_weight": ["zero", None],
    "future_window": [0, -2, 2.5, False],
    "future_clip": [0.0, -1.0, NAN],
    "ratio_clip": [0.0, 1.0, 1.5, NAN],
    "ratio_cap": [0.0, -2.0, NAN],
    "forward_weight": [-0.1, 1.5, NAN, INF],
    "soft_term": ["CE", None, 1],
    "ratio_level": ["seq", None, 1],
    "policy_loss": ["gspo", "gmpo", None],   # 'gmpo' is refused with the default token ratios
    "log_ratio_clamp": [0.0, -1.0, -20.0, NAN, INF, "twenty"],
    "kl_aggregation": ["sum", 1],
    "mean_eps": [-1e-8, NAN, INF, None],
    "mean_eps_scope": ["all", None, 1],
    "kl_cov_ratio": [0.0, -0.1, 1.5, NAN],
    "kl_cov_coef": [-1.0, NAN, INF],
    "whiten_eps": [-1e-8, NAN, INF, "x"],
    "smoothing_classes": ["other", None, 1],
    "fraction_norm": ["k", None, 1],
    "rpo_alpha": [-0.5, NAN, INF, "x"],
    "cpo_alpha": [-1.0, NAN, -INF, "one"],
    "nll_aggregation": ["sum", "Token-Mean", 1],
    "cispo_clip": ["lower", None, "both"],   # 'both' is refused with the default policy_loss (not CISPO)
    "sapo_tau_pos": [0.0, -1.0, NAN, INF],
    "sapo_tau_neg": [0.0, -1.05, NAN, INF],
    "ignore_index": [1.5, "x", True, None],
    "z_loss": [-1e-4, NAN, INF, "x"],
    "softcap": [0.0, -1.0, NAN, INF, "x"],
    "reduction": ["avg", None, 1],
    "normalizer": [0.0, -2.0, NAN, INF, "n"],
    "center_rewards_coefficient": [-0.1, NAN, INF, "x"],
    "form": ["logistic", None, 1],
    "clip_range_value": [0.0, -0.2, NAN, "x"],
    "half": ["yes", 2, None],
    "coef": [NAN, INF, "x", None, True],
    "top_k": [0, -1, 1.5, 99, True, None],
    "seq_len": [0, -2, 1.5, "x", 4],      # 4: any value under the default form 'switch'
}
# a parameter whose range differs between objectives that share its name
BAD_PARAMS_OF = {("lm.cross_entropy", "label_smoothing"): [-0.1, 1.5, NAN, INF],
                 ("lm.linear_cross_entropy", "label_smoothing"): [-0.1, 1.5, NAN, INF]}
# dpo's and proximal_kl's beta must be > 0; grpo.loss's may be 0; the JSD's lies in [0, 1]
EXTRA_BAD = {("dpo.loss", "beta"): [0.0], ("proximal_kl.loss", "beta"): [0.0],
             ("distill.generalized_jsd", "beta"): [1.5], ("distill.skew_kl", "alpha"): [0.0]}


# ------------------------------------------------------------------------------- the property

def outputs_have_nan(out) -> bool:
    values = out.values() if isinstance(out, dict) else [out]
    for v in values:
        if isinstance(v, torch.Tensor):
            if v.is_floating_point() and bool(torch.isnan(v).any()):
                return True
        elif isinstance(v, mpmath.mpf):
            if mpmath.isnan(v):
                return True
        else:
            a = np.asarray(v)
            if a.dtype == object:
                if any(isinstance(e, mpmath.mpf) and mpmath.isnan(e) for e in a.flat):
                    return True
            elif np.issubdtype(a.dtype, np.floating) and np.isnan(a).any():
                return True
    return False


def judge(call, culprits, allow_value: bool, what: str) -> str:
    """Run ``call``; it must raise InputError naming one of ``culprits`` or (when
    ``allow_value``) return a NaN-free value. Returns 'rejected' or 'returned'."""
    try:
        out = call()
    except validate.InputError as err:
        name = str(err).split(":", 1)[0]
        assert name in culprits, f"{what}: InputError names {name!r}, expected one of {sorted(culprits)}: {err}"
        return "rejected"
    except Exception as err:  # noqa: BLE001 — the property: nothing but InputError
        raise AssertionError(f"{what}: unrelated exception {type(err).__name__}: {err}") from err
    assert allow_value, f"{what}: accepted without error (returned {type(out).__name__})"
    assert not outputs_have_nan(out), f"{what}: returned NaN"
    return "returned"


def params_of(objective_id: str) -> dict:
    return {**catalog.get(objective_id).defaults, **required_params(objective_id)}


def cotangent_for(backend, objective_id, inputs, params):
    """A valid cotangent, shaped like the outputs (evaluated with the exact backend's shapes)."""
    spec = catalog.get(objective_id)
    out = function("arrays", objective_id)(**{**inputs, **params})
    if len(spec.outputs) == 1:
        return np.ones_like(np.asarray(out, dtype=np.float64))
    return {k: np.ones_like(np.asarray(v, dtype=np.float64)) for k, v in out.items()}


# one strategy per category: (objective, seed, choices) drawn by hypothesis
objective_ids = st.sampled_from([o.id for o in OBJECTIVES])


def _float_inputs(spec):
    return [i for i in spec.inputs if i.kind == "float"]


@pytest.mark.parametrize("backend", BACKENDS)
@SETTINGS
@given(data=st.data(), objective_id=objective_ids, seed=st.integers(0, 2**16))
def test_nonfinite_values(backend, data, objective_id, seed):
    spec = catalog.get(objective_id)
    inputs = valid_inputs(objective_id, seed)
    # an optional input that valid_inputs leaves out (grpo.loss's selected) is not there to spoil
    name = data.draw(st.sampled_from([i.name for i in spec.inputs if i.kind != "int" and i.name in inputs]),
                     label="input")
    bad = data.draw(st.sampled_from([NAN, INF, -INF]), label="value")
    arr = inputs[name].astype(np.float64).copy()
    flat = arr.reshape(-1)
    flat[data.draw(st.integers(0, flat.size - 1), label="index")] = bad
    inputs[name] = arr
    neg_inf_ok = bad == -INF and next(i for i in spec.inputs if i.name == name).neg_inf
    kwargs = {k: to_backend(backend, v) for k, v in inputs.items()}
    culprits = {i.name for i in spec.inputs} if neg_inf_ok else {name}
    records.bad_input("non-finite values")
    judge(lambda: function(backend, objective_id)(**kwargs, **params_of(objective_id)), culprits,
          allow_value=neg_inf_ok, what=f"{backend} {objective_id} {name}[..]={bad}")


WRONG_DTYPES = ("strings", "complex", "bool", "ragged", "none", "fractional-int")


def wrong_dtype(backend, value: np.ndarray, how: str, kind: str):
    if how == "strings":
        return np.full(value.shape, "abc").tolist()
    if how == "complex":
        c = value.astype(np.complex128) + 1j
        return torch.from_numpy(c) if backend == "torch" else c
    if how == "bool":
        bb = value != 0
        return torch.from_numpy(bb) if backend == "torch" else bb
    if how == "ragged":
        rows = value.reshape(value.shape[0], -1).tolist() if value.ndim > 1 else [[1.0], [1.0, 2.0]]
        if value.ndim > 1:
            rows[0] = rows[0] + [0.0]
        return rows
    if how == "none":
        return None
    return (value + 0.5).tolist()  # fractional-int: non-integers where integers are expected


@pytest.mark.parametrize("backend", BACKENDS)
@SETTINGS
@given(data=st.data(), objective_id=objective_ids, seed=st.integers(0, 2**16))
def test_wrong_dtypes(backend, data, objective_id, seed):
    spec = catalog.get(objective_id)
    inputs = valid_inputs(objective_id, seed)
    victim = data.draw(st.sampled_from([i for i in spec.inputs if i.name in inputs]), label="input")
    choices = [h for h in WRONG_DTYPES if (h == "fractional-int") == (victim.kind == "int")
               and not (h == "bool" and victim.kind == "mask")
               and not (h == "none" and victim.optional)]   # None: an optional input absent
    if victim.kind == "int":
        choices += ["bool", "strings"] + ([] if victim.optional else ["none"])  # None: an optional input absent
    how = data.draw(st.sampled_from(choices), label="how")
    kwargs = {k: to_backend(backend, v) for k, v in inputs.items()}
    kwargs[victim.name] = wrong_dtype(backend, inputs[victim.name], how, victim.kind)
    records.bad_input("wrong dtypes")
    # exact and arrays read booleans as the numbers 0 and 1 (mp._to_mpf, _xp.array: documented);
    # torch refuses a bool tensor where it expects floats
    lenient = how == "bool" and victim.kind == "float" and backend != "torch"
    judge(lambda: function(backend, objective_id)(**kwargs, **params_of(objective_id)), {victim.name},
          allow_value=lenient, what=f"{backend} {objective_id} {victim.name} as {how}")


@pytest.mark.parametrize("backend", BACKENDS)
@SETTINGS
@given(data=st.data(), objective_id=objective_ids, seed=st.integers(0, 2**16))
def test_wrong_shapes(backend, data, objective_id, seed):
    spec = catalog.get(objective_id)
    inputs = valid_inputs(objective_id, seed)
    victim = data.draw(st.sampled_from([i for i in spec.inputs if i.name in inputs]), label="input")
    how = data.draw(st.sampled_from(["shorter", "extra-axis", "flattened"]), label="how")
    value = inputs[victim.name]
    axis = None
    if how == "shorter":
        axis = data.draw(st.integers(0, value.ndim - 1), label="axis")
        if value.shape[axis] < 2:
            return
        value = np.take(value, range(value.shape[axis] - 1), axis=axis)
    elif how == "extra-axis":
        value = value[None]
    else:
        if value.ndim < 2:
            return
        value = value.reshape(-1)
    inputs[victim.name] = value
    # a lone input may change its sizes freely, and its rank too where the catalog says "...,V"
    alone = len(spec.inputs) == 1 and (how == "shorter" or spec.inputs[0].shape.startswith("..."))
    # and an axis no other input shares (the E of router logits [N,E] beside a mask [N]) may shrink
    others = {d for i in spec.inputs if i is not victim for d in i.shape.split(",")}
    dims = victim.shape.split(",")
    alone = alone or (axis is not None and len(dims) == value.ndim and dims[axis] not in others
                      and "..." not in victim.shape)
    kwargs = {k: to_backend(backend, v) for k, v in inputs.items()}
    records.bad_input("wrong shapes")
    judge(lambda: function(backend, objective_id)(**kwargs, **params_of(objective_id)),
          {i.name for i in spec.inputs} | {"inputs", "batch"}, allow_value=alone,
          what=f"{backend} {objective_id} {victim.name} {how}")


@pytest.mark.parametrize("backend", BACKENDS)
@SETTINGS
@given(data=st.data(), objective_id=objective_ids, seed=st.integers(0, 2**16))
def test_empty_arrays(backend, data, objective_id, seed):
    spec = catalog.get(objective_id)
    inputs = valid_inputs(objective_id, seed)
    first = inputs[spec.inputs[0].name]
    axis = data.draw(st.integers(0, first.ndim - 1), label="axis")
    size = first.shape[axis]
    for k, v in list(inputs.items()):
        # every input sharing that axis length along the same axis loses it
        if v.ndim > axis and v.shape[axis] == size:
            inputs[k] = np.take(v, [], axis=axis)
    kwargs = {k: to_backend(backend, v) for k, v in inputs.items()}
    records.bad_input("empty arrays")
    judge(lambda: function(backend, objective_id)(**kwargs, **params_of(objective_id)),
          {i.name for i in spec.inputs} | {"inputs", "batch"}, allow_value=True,
          what=f"{backend} {objective_id} empty along axis {axis}")


MASKED = [o.id for o in OBJECTIVES if any(i.kind == "mask" for i in o.inputs)]


@pytest.mark.parametrize("backend", BACKENDS)
@SETTINGS
@given(data=st.data(), objective_id=st.sampled_from(MASKED), seed=st.integers(0, 2**16))
def test_masks_that_are_not_0_1(backend, data, objective_id, seed):
    inputs = valid_inputs(objective_id, seed)
    name = next(i.name for i in catalog.get(objective_id).inputs if i.kind == "mask")
    # A token mask must select something; KTO's desirable flags may all be 0 (all undesirable).
    empty = ["none-selected"] if name == "mask" else []
    how = data.draw(st.sampled_from([0.5, 2.0, -1.0, 1 + 1e-12] + empty), label="value")
    m = inputs[name].copy()
    if how == "none-selected":
        m[:] = 0.0
    else:
        m.reshape(-1)[data.draw(st.integers(0, m.size - 1), label="index")] = how
    inputs[name] = m
    kwargs = {k: to_backend(backend, v) for k, v in inputs.items()}
    records.bad_input("non-0/1 masks")
    judge(lambda: function(backend, objective_id)(**kwargs, **params_of(objective_id)), {name},
          allow_value=False, what=f"{backend} {objective_id} {name} {how}")


PARAMETERISED = [o.id for o in OBJECTIVES if o.params]


@pytest.mark.parametrize("backend", BACKENDS)
@SETTINGS
@given(data=st.data(), objective_id=st.sampled_from(PARAMETERISED), seed=st.integers(0, 2**16))
def test_out_of_range_parameters_and_conventions(backend, data, objective_id, seed):
    spec = catalog.get(objective_id)
    param = data.draw(st.sampled_from([p.name for p in spec.params]), label="param")
    bad = data.draw(st.sampled_from(BAD_PARAMS_OF.get((objective_id, param), BAD_PARAMS[param])
                                    + EXTRA_BAD.get((objective_id, param), [])), label="value")
    if bad is None and spec.param(param).default is None:
        return  # None is the documented "off" for optional parameters
    if objective_id == "grpo.loss" and param == "beta" and bad == 0.0:
        return
    inputs = valid_inputs(objective_id, seed)
    kwargs = {k: to_backend(backend, v) for k, v in inputs.items()}
    records.bad_input("out-of-range parameters")
    judge(lambda: function(backend, objective_id)(**kwargs, **{**params_of(objective_id), param: bad}), {param},
          allow_value=False, what=f"{backend} {objective_id} {param}={bad!r}")


WITH_VJP = [o.id for o in OBJECTIVES if o.grads]


@pytest.mark.parametrize("backend", ("exact", "arrays"))
@SETTINGS
@given(data=st.data(), objective_id=st.sampled_from(WITH_VJP), seed=st.integers(0, 2**16))
def test_bad_cotangents(backend, data, objective_id, seed):
    vjp = function(backend, objective_id, vjp=True)
    if vjp is None:
        return
    inputs = valid_inputs(objective_id, seed)
    params = params_of(objective_id)
    ct = cotangent_for(backend, objective_id, inputs, params)
    how = data.draw(st.sampled_from(["nan", "inf", "shape", "strings"]), label="how")
    spec = catalog.get(objective_id)
    key = data.draw(st.sampled_from(list(spec.outputs)), label="output") if isinstance(ct, dict) else None
    arr = np.array(ct[key] if key else ct, dtype=np.float64)
    if how in ("nan", "inf"):
        arr.reshape(-1)[0] = NAN if how == "nan" else INF
        bad = arr
    elif how == "shape":
        bad = np.ones(arr.shape + (2,))
    else:
        bad = np.full(arr.shape, "abc").tolist()
    ct = {**ct, key: bad} if key else bad
    records.bad_input("bad cotangents")
    judge(lambda: vjp(ct, **inputs, **params), {"cotangent"} | ({f"cotangent[{key!r}]", f"cotangent.{key}", key}
                                                             if key else set()),
          allow_value=False, what=f"{backend} {objective_id}_vjp cotangent {how}")


# ------------------------------------------------------------------------------- CLI

BAD_ARGS = [
    (["check", "--time-limit", "-1"], "--time-limit"),
    (["check", "--time-limit", "nan"], "--time-limit"),
    (["check", "--time-limit", "soon"], "--time-limit"),
    (["check", "--frobnicate"], "--frobnicate"),
    (["frobnicate"], "frobnicate"),
    (["vectors", "generate", "--workers", "0"], "--workers"),
    (["check", "--backend", "nope"], "--backend"),
    (["check", "--dtype", "float8"], "--dtype"),
    (["check", "--backend", "numpy", "--device", "tpu"], "--device"),
    (["check", "--target", "no/such/file.py:T"], "no/such/file.py"),
    (["check", "--target", "lossproof.conformance.catalog:NOPE"], "NOPE"),
    (["check", "--backend", "numpy", "--tolerances", "{tmp}/missing.json"], "--tolerances"),
    (["check", "--backend", "numpy", "--tolerances", "{tmp}/not-json.json"], "--tolerances"),
    (["check", "--backend", "numpy", "--tolerances", "{tmp}/wrong-shape.json"], "--tolerances"),
    (["check", "--backend", "numpy", "--uid", "kl.estimator:0000000000000000"], "--uid"),
    (["show"], "uid"),
    (["cite", "x", "--latex", "--bibtex"], "--bibtex"),
    (["check", "--vectors", "{tmp}/no-such-dir"], "no-such-dir"),
    (["validate", "{tmp}/not-json.json"], "not-json.json"),
]


def _exit_status(argv) -> int:
    try:
        return cli.main(argv)
    except SystemExit as stop:   # argparse's own errors
        return stop.code


@pytest.mark.parametrize("argv, named", BAD_ARGS, ids=[" ".join(a) for a, _ in BAD_ARGS])
def test_cli_bad_arguments_exit_2_with_one_line(tmp_path, capsys, argv, named):
    (tmp_path / "not-json.json").write_text("{ nope")
    (tmp_path / "wrong-shape.json").write_text('{"kl.*": 3}')
    code = _exit_status([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    records.bad_input("bad CLI arguments")
    assert code == 2
    assert len(err) == 1 and "Traceback" not in err[0] and "error" in err[0], err
    assert named in err[0], err


def test_failed_report_write_leaves_the_previous_report_intact(tmp_path, monkeypatch):
    report = tmp_path / "report.json"
    report.write_text("previous")

    def interrupted(src, dst):
        raise KeyboardInterrupt
    monkeypatch.setattr(os, "replace", interrupted)
    code = cli.main(["check", "--backend", "numpy", "--objective", "kl.*", "--quiet", "--report-json", str(report)])
    assert code == 130                                   # "lossproof: interrupted"
    assert report.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]   # no temporary file left behind


def test_failed_generation_leaves_the_vectors_intact(tmp_path, monkeypatch, capsys):
    from lossproof.conformance import generate
    files = {"kl/estimator.json": b"{}\n"}
    files["MANIFEST.json"] = manifest_bytes(files)
    write_tree(tmp_path, files, last=MANIFEST)
    before = {p.name: p.read_bytes() for p in tmp_path.rglob("*.json")}

    def broken(**kw):
        raise generate.build.GenerationError("kl.estimator:0: not stable")
    monkeypatch.setattr(generate, "generate", broken)
    assert cli.main(["vectors", "generate", "--quiet", "--vectors", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == "lossproof: error: kl.estimator:0: not stable"
    assert {p.name: p.read_bytes() for p in tmp_path.rglob("*.json")} == before


# ------------------------------------------------------------------------------- regressions

# Inputs on which a property above once failed, replayed exactly (see the module docstring).
# test_wrong_dtypes[torch], distill.hinton: labels=None raised RuntimeError ("Could not infer
# dtype of NoneType") and labels of strings ValueError ("too many dimensions 'str'") from
# torch.as_tensor inside refimpl.torch._common.int_array; fixed there (InputError naming labels).
def _hinton_labels(labels):
    z = np.zeros((3, 4))
    return {"student_logits": z, "teacher_logits": z, "labels": labels}


def _pkl_loss_vjp_bad_cotangent():
    kw = valid_inputs("proximal_kl.loss", 0)
    return {"cotangent": np.ones(2), **kw}


# test_bad_cotangents[exact], proximal_kl.loss_vjp: a cotangent of shape (2,) for the scalar loss
# was rejected by an InputError naming 'loss' (same_shape's argument order), not 'cotangent';
# fixed in refimpl/exact/proximal_kl.py and refimpl/arrays/proximal_kl.py.
REGRESSIONS = [
    ("torch", "distill.hinton", False, _hinton_labels(None), "labels"),
    ("torch", "distill.hinton", False, _hinton_labels(["abc", "abc", "abc"]), "labels"),
    ("torch", "distill.hinton", False, _hinton_labels("abc"), "labels"),
    ("torch", "distill.hinton", False, _hinton_labels({"a": 1}), "labels"),
    ("exact", "proximal_kl.loss", True, _pkl_loss_vjp_bad_cotangent(), "cotangent"),
    ("arrays", "proximal_kl.loss", True, _pkl_loss_vjp_bad_cotangent(), "cotangent"),
]


@pytest.mark.parametrize("backend, objective_id, vjp, kwargs, culprit", REGRESSIONS,
                         ids=[f"{b}-{o}{'_vjp' if v else ''}-{c}-{i}" for i, (b, o, v, _, c) in enumerate(REGRESSIONS)])
def test_regressions(backend, objective_id, vjp, kwargs, culprit):
    kwargs = {k: to_backend(backend, v) for k, v in kwargs.items()}
    judge(lambda: function(backend, objective_id, vjp=vjp)(**kwargs), {culprit}, allow_value=False,
          what=f"regression {backend} {objective_id}{'_vjp' if vjp else ''}")
