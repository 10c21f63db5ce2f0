"""What the diagnoses read off a vector's inputs: the conditions a failure can be confined to
(padding, a masked position inside a row, ignored labels, the sign of an advantage, −inf logits,
a row without tokens, a group of equal rewards, a parameter set away from its neutral value, a
large log ratio) and the
per-case counts and parameters a wrong factor can track (T², 1/K, V/(V−1), the share of
ignored tokens). Pure functions of one case's inputs and parameters; ``conformance.diagnose``
decides which of them separates the failing case-runs from the passing ones."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lossproof.conformance.numbers import decode_input

# The vocabulary size from which a case counts as large (the vectors' Large rows: 32,000 and up).
LARGE_VOCABULARY = 32768
# Pairs of inputs whose difference is a log ratio, (numerator, denominator).
LOG_RATIOS = (("logp", "old_logp"), ("logp", "ref_logp"), ("logp", "behavior_logp"), ("ref_logp", "logp"))


@dataclass(frozen=True)
class Condition:
    """A predicate over the inputs: ``mask(inputs, params)`` marks the elements (of the input
    named ``over``, or None when it does not hold there) it holds on."""
    name: str          # as the defect line says it: "padding (mask = 0)"
    over: str          # the input whose shape the mask has
    mask: Callable
    fix: str


def arrays(test: dict) -> dict:
    return {k: np.asarray(decode_input(v)) for k, v in test["inputs"].items()}


def conditions(spec, test: dict) -> list[Condition]:
    """The conditions that apply to ``spec``'s inputs, most specific first."""
    out = []
    kinds = {i.name: i.kind for i in spec.inputs}
    for name, kind in kinds.items():
        if kind == "mask" and name == "mask":
            out.append(Condition("padding (mask = 0)", name, lambda x, p, n=name: _get(x, n) == 0,
                                 "the positions where mask = 0 enter the result: leave them out of every sum, "
                                 "mean, statistic and denominator"))
        elif kind == "mask":
            out.append(Condition(f"{name} = 1", name, lambda x, p, n=name: _get(x, n) != 0,
                                 f"the positions {name} marks are computed differently from the catalog's "
                                 f"definition of {spec.id}: read what it does with them"))
    if kinds.get("mask") == "mask":
        out.append(Condition("a row without tokens (mask all 0)", "mask",
                             lambda x, p: _rows(_get(x, "mask"), lambda m: ~(m != 0).any(axis=1)),
                             "a row whose mask selects no token is computed differently from the catalog's "
                             f"definition of {spec.id}: guard its empty sum or mean (0/0)"))
        out.append(Condition("a masked position inside a row (mask 0 before a valid token)", "mask",
                             lambda x, p: _rows(_get(x, "mask"), _holes),
                             "a masked position before a valid token enters the result: a recursion or running "
                             "sum (GAE's δ and λ recursion, a sum over the future) runs through it; step over "
                             f"masked positions as the catalog's {spec.id} does, or declare how they are treated"))
    if "rewards" in kinds:
        out.append(Condition("a group whose rewards are all equal", "rewards",
                             lambda x, p: _rows(_get(x, "rewards"), lambda r: r.max(axis=1) == r.min(axis=1)),
                             "a degenerate group (all rewards equal, std 0) is handled differently from the "
                             "catalog: decide it on the rewards (max == min) and give it what the declared "
                             "degenerate convention says"))
    for name in ("logits", "student_logits"):
        if name in kinds:
            out.append(Condition(f"a large vocabulary (V ≥ {LARGE_VOCABULARY})", name,
                                 lambda x, p, n=name: np.asarray(np.shape(_get(x, n))[-1] >= LARGE_VOCABULARY),
                                 "the large vocabularies fail: a sum over V rounded in a narrow dtype, an index or "
                                 "chunk size that overflows, or a vocabulary split into shards"))
            break
    if "labels" in kinds:
        out.append(Condition("ignored labels (label = ignore_index)", "labels",
                             lambda x, p: _get(x, "labels") == p.get("ignore_index", -100),
                             "the ignored positions enter the result: leave them out of the sum and of the "
                             "denominator (count only the labels that are not ignore_index)"))
    if "advantages" in kinds:
        out.append(Condition("advantages < 0", "advantages", lambda x, p: _get(x, "advantages") < 0,
                             "the branch for negative advantages is wrong: with A < 0 the pessimistic bound is the "
                             "other side (min(ρA, clip(ρ)A) takes the upper clip for A < 0)"))
        out.append(Condition("advantages > 0", "advantages", lambda x, p: _get(x, "advantages") > 0,
                             "the branch for positive advantages is wrong: a term meant for A < 0 (a dual clip) "
                             "applies to A > 0 too"))
    for name, i in ((i.name, i) for i in spec.inputs):
        if i.neg_inf:
            out.append(Condition(f"−inf in {name}", name, lambda x, p, n=name: np.isneginf(_get(x, n)),
                                 f"handle −inf in {name} (an impossible token) as the catalog defines it: "
                                 "its probability is 0 and 0·log 0 = 0"))
    # a numeric parameter away from its neutral value (a temperature ≠ 1, a soft cap set): the
    # failures confined to those cases point at how the function applies it (or passes it on)
    for param in spec.params:
        neutral = param.default
        if param.convention or isinstance(neutral, (str, bool)) or param.choices:
            continue
        if neutral not in (None, 0, 0.0, 1, 1.0):
            continue
        out.append(Condition(f"{param.name} ≠ {neutral}", param.name,
                             lambda x, p, n=param.name, v=neutral: np.asarray(p.get(n, v) != v and p.get(n, v)
                                                                                is not None),
                             f"the cases that set {param.name} fail: read how the function applies {param.name} "
                             f"(where in the formula, and whether it is passed on at all) against the catalog's "
                             f"definition of {spec.id}"))
    return out


def _rows(x, rows):
    """A mask over ``x``'s elements marking the rows (first axis) that ``rows`` picks out."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise KeyError("rows")
    return np.broadcast_to(rows(x)[:, None], x.shape)


def _holes(m):
    """Rows with a 0 of the mask before a valid position (not padding that only trails)."""
    on = m != 0
    last = on.shape[1] - 1 - np.argmax(on[:, ::-1], axis=1)     # each row's last valid position
    return on.any(axis=1) & ((~on) & (np.arange(on.shape[1]) < last[:, None])).any(axis=1)


def _get(inputs, name):
    x = inputs.get(name)
    if x is None:
        raise KeyError(name)
    return x


def log_ratio(spec, inputs: dict):
    """(numerator, denominator, |log ratio|) of the first log-ratio pair the inputs hold, or None."""
    for a, b in LOG_RATIOS:
        if a in inputs and b in inputs and np.shape(inputs[a]) == np.shape(inputs[b]):
            with np.errstate(invalid="ignore"):
                return a, b, np.abs(inputs[a].astype(np.float64) - inputs[b].astype(np.float64))
    return None


def factors(spec, test: dict) -> dict:
    """{what it tracks: value} for the case: the parameters and counts a wrong normaliser or
    scaling tracks. A value of 1 (or none) is left out: it cannot be told from no factor."""
    x, p = arrays(test), test["params"]
    out = {}
    t = p.get("temperature")
    if isinstance(t, (int, float)) and t not in (0, 1):
        out["T² (the temperature squared)"] = t * t
        out["1/T² (one over the temperature squared)"] = 1 / (t * t)
        out["T (the temperature)"] = t
        out["1/T (one over the temperature)"] = 1 / t
    k = p.get("top_k")
    if isinstance(k, int) and k > 1:
        out["1/top_k"] = 1 / k
        out["top_k"] = k
    for name, v in x.items():
        if name == "teacher_ids" and v.ndim == 2 and v.shape[1] > 1:
            out["1/K (K, the teacher's top-k)"] = 1 / v.shape[1]
    for name in ("logits", "student_logits", "router_logits"):
        v = x.get(name)
        if v is not None and v.ndim >= 2 and v.shape[-1] > 1:
            n = v.shape[-1]
            out["V/(V−1) (ε spread over V−1 classes)"] = n / (n - 1)
            out["(V−1)/V"] = (n - 1) / n
            out["1/V (a mean over the vocabulary too)"] = 1 / n
            break
    for name in ("normalizer", "num_items"):
        n = p.get(name)
        if isinstance(n, (int, float)) and n not in (0, 1):
            out[f"1/{name} (divided by it once more)"] = 1 / n
            out[f"{name} (multiplied by it)"] = n
    labels = x.get("labels")
    if labels is not None and labels.size:
        valid = int(np.sum(labels != p.get("ignore_index", -100)))
        if 0 < valid < labels.size:
            out["valid/all labels (the denominator counts ignored labels)"] = valid / labels.size
            out["all/valid labels"] = labels.size / valid
    for name, v in x.items():
        if any(i.name == name and i.kind == "mask" for i in spec.inputs) and v.size:
            if v.ndim == 2 and v.shape[1]:
                longest = int((v != 0).sum(axis=1).max())
                if 0 < longest < v.shape[1]:
                    out[f"longest row/padded length ({name}: a length normaliser taken from the longest row)"] = \
                        v.shape[1] / longest
            tokens = int(np.sum(v != 0))
            if 0 < tokens < v.size:
                out[f"tokens/positions ({name}: the denominator counts padding)"] = tokens / v.size
                out[f"positions/tokens ({name})"] = v.size / tokens
    return out

