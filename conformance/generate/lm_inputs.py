"""What the lm family's case modules share (``conformance.generate.lm``, ``lm_smoothing``): the
objective ids, the case constructor that gives every case its cotangent, and the input builders."""
from __future__ import annotations

import hashlib
import json
import math

from lossproof.conformance import catalog, numbers
from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated

CE, LP, ENT, LCE = "lm.cross_entropy", "lm.token_logprobs", "lm.entropy", "lm.linear_cross_entropy"
LOW_V = (2, 3, 4, 6, 8, 12, 16)   # vocabularies of the random low-precision cases


# ----------------------------------------------------------------------------- cotangents

def cotangent_seed(objective: str, merged: dict) -> int:
    """A seed from the objective, its inputs and every parameter: the scale functions, which see only
    those, rebuild the cotangent a case was given."""
    spec = catalog.get(objective)
    content = {"objective": objective,
               "inputs": {i.name: numbers.encode_input(merged[i.name]) for i in spec.inputs
                          if merged.get(i.name) is not None},   # an optional input (a bias) absent: not hashed
               # a late parameter at its default is left out, as from the uid: earlier cases keep their cotangents
               "params": {p.name: merged[p.name] for p in spec.params if not (p.added and merged[p.name] == p.default)}}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def per_row(objective: str, merged: dict) -> bool:
    return objective not in (CE, LCE) or merged["reduction"] == "none"


def cotangent(objective: str, merged: dict):
    """1 for a scalar loss; else nonzero multiples of 1/64 in [−2, 2] per row (exact in bfloat16 and
    float16)."""
    if not per_row(objective, merged):
        return 1.0
    r = S.rng(cotangent_seed(objective, merged))
    n = len(merged["hidden"] if objective == LCE else merged["logits"])
    return (r.integers(1, 129, size=n) * r.choice([-1, 1], size=n) / 64.0).tolist()


def case(objective, inputs, params=None, conventions=None, group="paper", flags=(), comment="", seed=0,
          recipe="fixed", low=False, result="valid") -> Case:
    params, conventions = dict(params or {}), dict(conventions or {})
    case = Case(objective, inputs, params=params, conventions=conventions, flags=tuple(flags), comment=comment,
                result=result, provenance=generated(seed, recipe), low_precision=low, group=group)
    if result != "invalid":
        spec = catalog.get(objective)
        merged = {**spec.defaults, **conventions, **params, **inputs}
        case.cotangents = {spec.outputs[0]: cotangent(objective, merged)}
    return case


# ----------------------------------------------------------------------------- inputs

def shape(r, v_max=12, n_max=6):
    return int(r.integers(1, n_max + 1)), int(r.integers(2, v_max + 1))


def logits(r, n, v):
    return S.logits(r, (n, v), float(r.choice([0.5, 1.0, 3.0, 8.0])))


def labels(r, n, v, ignored=0.0, ignore_index=-100):
    y = [int(t) for t in r.integers(0, v, size=n)]
    if ignored:
        y = [ignore_index if r.random() < ignored else t for t in y]
        if all(t == ignore_index for t in y):
            y[0] = int(r.integers(0, v))
    return y


def float32(x):
    return S.in_dtype(x, "float32")


def ce_flags(params):
    return tuple(f for k, f in (("label_smoothing", "LabelSmoothing"), ("z_loss", "ZLoss"), ("softcap", "Softcap"),
                                ("normalizer", "Normalizer")) if k in params)



def linear_inputs(r, n, h, v, bias: bool, grid=None):
    sh, s = float(r.choice([0.5, 1.0, 2.0])), float(r.choice([0.5, 1.0, 3.0, 8.0]))
    inputs = {"hidden": (r.normal(0.0, sh, size=(n, h))).tolist(),
              "weight": (r.normal(0.0, s / math.sqrt(h), size=(v, h))).tolist()}
    if bias:
        inputs["bias"] = r.normal(0.0, 1.0, size=v).tolist()
    return {k: (S.in_low(x, grid) if grid in S.LOW_GRIDS else S.rounded(x, grid)) for k, x in inputs.items()}


def lce_flags(params, inputs):
    return ce_flags(params) + (("Bias",) if "bias" in inputs else ())
