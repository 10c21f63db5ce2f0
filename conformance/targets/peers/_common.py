"""Shared plumbing of the third-party adapters (``--target NAME`` for each name in
``lossproof.conformance.targets.PEERS``).

An adapter calls the library's own loss code, never a re-implementation of it. This module
holds what the adapters share: the convention table each one declares (one row per
convention, with the library file it comes from), the tolerance model of each objective's
low-precision arithmetic (with the library lines it is read from), the lazy import of a pinned
library with a one-line install hint, and the documented findings (library bugs and deviations)
that the adapters declare as known failures, with the predicates that say which cases each
explains.

An adapter that checks a second call form of the same objective (another function of the library,
or the same one called another way) declares it as a variant, as a user target does
(conformance/targets/target.py VARIANT): the key ``"objective[variant]"`` in ``objectives`` and in
the rows of its ``Convention`` and ``Arithmetic`` tables (a variant without rows of its own takes
the plain objective's), and ``Finding(..., variant=...)`` for a failure of that call form only.
Each variant is checked and reported as the target ``name[variant]``.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from lossproof.conformance import catalog
from lossproof.conformance.numbers import decode_input
from lossproof.conformance.targets.steps import global_test
from lossproof.conformance.targets.target import Target, TargetError, from_mapping, objective_of, rule_predicate
from lossproof.refimpl.arrays import dpo, grpo

# One command installs every pinned library next to the core install (see docs/conventions.md).
INSTALL_ALL = "scripts/install-peers.sh"


@dataclass(frozen=True)
class Convention:
    """One convention of a library: the value(s) it can be configured to (the first is its
    default), where that comes from, and a note when it needs one. ``objective`` is the
    declaration key: an objective id, or ``"objective[variant]"`` for a variant's own row."""
    objective: str
    param: str
    values: tuple            # accepted values, library default first
    source: str              # library file (and function) the behaviour comes from
    note: str = ""

    @property
    def default(self):
        return self.values[0]

    @property
    def paper(self):
        return catalog.get(objective_of(self.objective)).defaults[self.param]


@dataclass(frozen=True)
class Arithmetic:
    """How a library computes an objective in bfloat16/float16, hence the tolerance model it is
    judged by (conformance/compare.py). ``native``: it evaluates in the inputs' dtype a step that the
    careful model assumes float32 and that cancels there (k3 = e^x − x − 1, r − mean with a rounded
    mean, a vocabulary sum of rounded log-probabilities, a DPO margin formed from rounded
    log-ratios), or it accumulates gradient partials in that dtype. ``careful``: it upcasts, or
    rounds to the dtype only what the careful model grants (a term, a partial sum, a weight).
    ``objective``: an objective id, or ``"objective[variant]"`` for a variant's own model."""
    objective: str
    model: str               # "careful" | "native"
    source: str              # library file(s) and the lines the model is read from


# TRL's GRPO loss types, which Liger's LigerFusedLinearGRPOLoss takes under the same names: the
# aggregation each implies, and the policy losses that carry their own normaliser.
_TRL_LOSS_TYPES = {"token-mean": "dapo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum-norm": "dr_grpo"}
_TRL_GATED = {"cispo": "token-mean", "sapo": "seq-mean-token-mean"}


def trl_loss_type(library: str, aggregation: str, policy_loss: str, cispo_clip: str, eps_low: float,
                  eps_high: float | None) -> tuple[str, float | None]:
    """(loss_type, epsilon_high) for TRL's or Liger's GRPO loss. 'cispo' and 'sapo' are loss types
    with their own normaliser: another aggregation is unsupported. CISPO's cap is the raw
    epsilon_high, so the paper's 'upper' is passed as 1 + ε_high; neither library has a lower bound
    on the IS weight ('both' is unsupported)."""
    if policy_loss not in _TRL_GATED:
        return _TRL_LOSS_TYPES.get(aggregation, "dapo"), eps_high
    if aggregation != _TRL_GATED[policy_loss]:
        raise NotImplementedError(f"{library} loss_type={policy_loss!r} aggregates as {_TRL_GATED[policy_loss]!r}")
    if cispo_clip == "both":
        raise NotImplementedError(f"{library} loss_type='cispo' has no lower bound on the IS weight")
    if cispo_clip == "upper":  # the paper's 1 + ε_high as the library's raw cap
        eps_high = 1 + (eps_low if eps_high is None else eps_high)
    return policy_loss, eps_high


def tolerance_models(arithmetic: list[Arithmetic]) -> dict:
    """A target's ``tolerance_model`` declaration {objective: "careful" | "native"}."""
    return {a.objective: a.model for a in arithmetic}


@dataclass(frozen=True)
class Finding:
    """A documented, confirmed reason why a library fails some vectors under its declared
    conventions: ``bug`` (the library computes something other than what it declares),
    ``deviation`` (a behaviour the catalog cannot express, e.g. a clamp), ``precision`` (a
    narrower internal dtype than the inputs'), or ``numerics`` (a rounding the formula invites).

    The adapter declares each one as a known failure (DESIGN §8): a run lists its cases as
    ``xfail`` and only a new failure fails it. ``applies`` is as specific as the finding (by
    objective, conventions, parameters, flags, inputs and dtype), so that a case it names that
    passes shows up as a stale declaration (``xpass``). It is asked about the ``valid`` vectors
    only, unless ``results`` says otherwise: an ``acceptable`` vector passes whatever its values
    (only a narrower dtype or a gradient leak fails it there), and an ``invalid`` one is judged on
    the validation axis, which needs no declaration. ``variant``: the finding is a failure of that
    variant's call form only (``"objective[variant]"`` among the adapter's objectives) and explains
    cases of the target ``name[variant]`` alone; without it, it holds for the plain objectives and
    every variant alike."""
    id: str
    kind: str
    summary: str
    source: str
    applies: Callable = field(compare=False, repr=False)   # (VectorCase, dtype[, tolerance]) -> bool
    results: tuple = ("valid",)
    as_paper_only: bool = False
    variant: str | None = None

    @property
    def reason(self) -> str:
        """The known-failure reason: the finding's id, what it is and where in the library."""
        return f"{self.id} ({self.kind}): {self.summary} [{self.source}]"

    def covers(self, case, dtype: str, tolerance) -> bool:
        """Whether the finding explains a failure of ``case`` in ``dtype`` judged by ``tolerance``."""
        return case.result in self.results and bool(rule_predicate(self.applies)(case, dtype, tolerance))


def known_rules(findings: list[Finding]) -> tuple:
    """A target's ``known_rules``: each finding's reason and predicate, and its variant where it
    has one (target.py _variant_rules)."""
    return tuple((f.reason, f.covers) if f.variant is None else (f.reason, f.covers, f.variant) for f in findings)


def split_rules(findings) -> tuple:
    """A target's ``known_splits``: findings whose ``applies(case, dtype, split, tolerance)`` also
    reads the partition of a distributed case (rows per rank and micro-batch)."""
    def rule(f):
        applies = rule_predicate(f.applies, 3)
        return lambda case, dtype, split, tolerance: (case.result in f.results
                                                      and bool(applies(case, dtype, split, tolerance)))
    return tuple((f.reason, rule(f)) for f in findings)


def declaration(conventions: list[Convention], alternatives: dict | None = None) -> dict:
    """The harness declaration {objective: {param: value | [values]}} of a convention table.
    ``alternatives`` replaces an objective's declaration by a list of admissible combinations
    (a library whose conventions do not vary independently)."""
    out: dict = {}
    for c in conventions:
        out.setdefault(c.objective, {})[c.param] = c.values[0] if len(c.values) == 1 else list(c.values)
    for objective, combos in (alternatives or {}).items():
        out[objective] = [dict(combo) for combo in combos]
    return out


def require(module: str, distribution: str, version: str, install: str) -> str:
    """Check that the pinned library is importable without importing it; returns its version.
    A missing or differently versioned library is a usage error (exit status 2)."""
    if importlib.util.find_spec(module) is None:
        raise TargetError(f"{distribution} is not installed: {install} (or {INSTALL_ALL} for all the peers)")
    try:
        installed = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        installed = ""
    if installed and installed != version:
        raise TargetError(f"{distribution} {installed} is installed but the adapter is pinned to {version} "
                          f"(its declared conventions were read from that release): {install}")
    return installed or version


def load_or_explain(loader, distribution: str, install: str):
    """Run ``loader`` (the adapter's lazy import); a missing runtime import is a usage error."""
    try:
        return loader()
    except ImportError as err:
        raise TargetError(f"{distribution}: cannot import its loss code ({err}): {install} "
                          f"(or {INSTALL_ALL})") from None


def build(name: str, version: str, objectives: dict, conventions: list[Convention], findings: list[Finding],
          arithmetic: list[Arithmetic], *, alternatives: dict | None = None,
          dtypes=("float64", "float32", "bfloat16", "float16"), steps: dict | None = None,
          split_findings: list[Finding] = (), temperature_free: tuple = (), sharded: dict | None = None,
          computes_in: dict | None = None, framework: str = "torch") -> Target:
    """``steps``: the library's trainer step per batch objective (``--partition``);
    ``sharded``: the library's vocabulary-parallel function per objective (``--shard-vocab``);
    ``computes_in``: {objective: "float32"} where the library computes in float32 by design;
    ``split_findings``: findings whose ``covers(case, dtype, split)`` reads the partition;
    ``temperature_free``: objectives whose library function has no temperature (T = 1 only);
    ``framework``: "jax" for a JAX library's functions (jax.Array in and out, gradients by jax.vjp)."""
    spec = {"name": name, "framework": framework, "version": version, "objectives": objectives,
            "conventions": declaration(conventions, alternatives), "known_rules": known_rules(findings),
            "tolerance_model": tolerance_models(arithmetic), "dtypes": list(dtypes), "devices": ["cpu"],
            "steps": steps or {}, "sharded": sharded or {}, "computes_in": computes_in or {},
            "known_splits": split_rules(split_findings),
            "temperature_free": list(temperature_free)}
    return from_mapping(spec, name)


# --- small shared helpers -------------------------------------------------------------------------

def per_element(fn, *tensors):
    """Call ``fn`` on each element (as a (1, 1) tensor) of same-shaped 1-D tensors and stack the
    scalar results: for library functions that only return a reduced loss."""
    import torch
    outs = [fn(*(t[i].reshape(1, 1) for t in tensors)) for i in range(tensors[0].shape[0])]
    return torch.stack([o.reshape(()) for o in outs]) if outs else tensors[0][:0].clone()


def representable_logits(*tensors, why: str) -> None:
    """Refuse (NotImplementedError: the case is unsupported, not failed) logits that the
    adapter cannot pass through a library interface that takes hidden states, not logits."""
    import torch
    for t in tensors:
        if torch.isinf(t).any():
            raise NotImplementedError(why)


def loss_mask_labels(logits, labels, ignore_index):
    """(mask, labels) for a library whose LM loss takes a loss mask instead of an ignore index (its
    labels are the next input ids, never ignored): the counted tokens, and each ignored token given
    its row's largest logit as label, so that its masked-out log-probability is finite as a real
    token's is."""
    import torch
    counted = labels != ignore_index
    return counted, torch.where(counted, labels, logits.detach().argmax(dim=-1))


def has_neg_inf_logits(case) -> bool:
    """Whether some logit of an lm.* case is −∞ (an impossible token)."""
    return bool(np.isneginf(as_array(case.test["inputs"]["logits"])).any())


def as_array(value) -> np.ndarray:
    """An input (or cotangent) of a vector as a float64 array."""
    return np.asarray(decode_input(value), dtype=np.float64)


def decoded(values: dict) -> dict:
    """A vector's inputs (or cotangents) as float64 arrays by name."""
    return {name: as_array(v) for name, v in values.items()}


def log_ratio_clamp_changes(case) -> bool:
    """Whether clamping log ρ = logp − old_logp to ±20 before exp (verl, OpenRLHF) changes the
    clipped objective of a selected token of a grpo.clip case (grpo.loss declares the clamp:
    ``log_ratio_clamp``): ρ < e^−20 with A > 0 (the unclipped term ρ·A becomes e^−20·A and its
    gradient 0), or ρ > e^20 with A < 0 and no dual clip (the unclipped term is capped). Elsewhere
    the clip makes the term constant and the clamp changes nothing. A case that holds the clamp
    (grpo.clip's log_ratio_clamp, vector set 1.5.0) expresses it: never."""
    if case.conventions.get("log_ratio_clamp") is not None:
        return False
    inputs = decoded(case.test["inputs"])
    log_ratio, adv = inputs["logp"] - inputs["old_logp"], inputs["advantages"]
    tiny = (log_ratio < -20) & (adv > 0)
    huge = (log_ratio > 20) & (adv < 0) & (case.conventions.get("dual_clip") is None)
    return bool((tiny | huge).any())


def has_empty_row(case) -> bool:
    """Whether some row of the case's mask selects no token."""
    return bool((as_array(case.test["inputs"]["mask"]).sum(axis=1) == 0).any())


def equal_group_mean_inexact(case, dtype: str) -> bool:
    """Whether some group of the case's rewards is all-equal while torch's mean of it in
    ``dtype`` is not that value: the group-normalising libraries then divide a rounding error
    by a standard deviation of the same order (the ZeroStdRounding vectors). torch's own mean
    decides it, since the libraries call it."""
    import torch  # the adapters are torch targets: torch is loaded whenever this runs
    rewards = torch.tensor(as_array(case.test["inputs"]["rewards"]), dtype=getattr(torch, dtype))
    equal = (rewards == rewards[:, :1]).all(dim=1)
    return bool((equal & (rewards.mean(dim=1) != rewards[:, 0])).any())


def arguments(case) -> dict:
    """The case's conventions and parameters, the catalog's defaults for those it leaves out."""
    return {**catalog.get(case.objective).defaults, **case.conventions, **case.test["params"]}


def deviation_shows(tolerance, exact: dict, deviating: dict, share: float = 1.0) -> bool:
    """Whether a library formula that deviates from the catalog's moves some output or gradient
    of a case beyond ``share`` of ``tolerance``, the bound the case is judged by (its dtype, the
    run's tolerance model). ``exact`` and ``deviating`` map labels ("losses", "grad:logp") to the
    two formulas' values in float64. In bfloat16/float16 the bound can absorb a deviation that
    float32 and float64 show: it then explains no failure there."""
    return any(tolerance.measure(label, np.asarray(deviating[label], dtype=np.float64),
                                 np.asarray(want, dtype=np.float64)).max_err_over_tol > share
               for label, want in exact.items())


def label_smoothing_ignored_shows(case, dtype: str, tolerance) -> bool:
    """Whether computing plain DPO where the case asks for cDPO (label smoothing ε > 0 ignored)
    shows in ``dtype``: each loss moves by ε·β·Δ and each policy gradient by ε·β times the loss's
    cotangent (the formulas evaluated by refimpl/arrays)."""
    inputs, cotangents, declared = decoded(case.test["inputs"]), decoded(case.test["cotangents"]), arguments(case)
    exact, deviating = ({**dpo.loss(**inputs, **kw),
                         **{f"grad:{n}": g for n, g in dpo.loss_vjp(cotangents, **inputs, **kw).items()}}
                        for kw in (declared, {**declared, "label_smoothing": 0.0}))
    return deviation_shows(tolerance, exact, deviating)


def micro_batch_mean_shows(case, split, tolerance) -> bool:
    """Whether averaging each micro-batch over its own rows (and dividing by the accumulation
    steps, DDP averaging the ranks) moves a row gradient of ``case`` beyond ``tolerance``, the bound
    of the global objective:
    row i's gradient is then the global one times B/(S·B_mb(i)), with B the rows the global mean
    counts (non-empty rows where there is a mask), S the micro-batches of all ranks and B_mb(i)
    the rows of i's micro-batch."""
    test = global_test(case, arguments(case))
    counts = (as_array(test["inputs"]["mask"]) != 0).sum(axis=1) if "mask" in test["inputs"] else None
    rows = len(next(iter(test["inputs"].values())))
    counted = rows if counts is None else int((counts > 0).sum())
    slots = [mb for rank in split for mb in rank]
    weight = np.ones(rows)
    for mb in slots:
        weight[list(mb)] = counted / (len(slots) * len(mb))
    exact = {f"grad:{n}": np.asarray(g, dtype=np.float64) for n, g in test["grads"].items()}
    deviating = {label: g * weight.reshape((-1,) + (1,) * (g.ndim - 1)) for label, g in exact.items()}
    # the logged loss: each row's own objective (refimpl/arrays, float64), re-weighted the same way
    terms = _row_terms(case, counts)
    exact["loss"] = np.asarray(float(test["expected"]["loss"]))
    deviating["loss"] = np.asarray(float(np.sum(weight * terms)) / counted)
    # A trainer that computes in bfloat16/float16 adds its own rounding, up to the bound itself, on
    # top of the deviation: there a deviation of 90% of the bound already counts (a case it then
    # leaves passing is reported stale, which only --strict fails).
    return deviation_shows(tolerance, exact, deviating, 0.9 if tolerance.dtype in ("bfloat16", "float16") else 1.0)


def _row_terms(case, counts) -> np.ndarray:
    """Each row's term of a row-mean objective: the per-pair losses of dpo.loss, the objective of
    the row alone for the sequence-mean modes of grpo.loss and proximal_kl.loss (0 for a row
    without tokens, which the mean leaves out)."""
    inputs, args = decoded(case.test["inputs"]), arguments(case)
    if case.objective == "dpo.loss":
        return np.asarray(dpo.loss(**inputs, **args)["losses"], dtype=np.float64)
    family, name = case.objective.split(".")
    fn = getattr(importlib.import_module(f"lossproof.refimpl.arrays.{family}"), name)
    return np.array([float(fn(**{k: v[i:i + 1] for k, v in inputs.items()}, **args)) if counts[i] else 0.0
                     for i in range(len(counts))])


def sapo_float32_tau_shows(case, dtype: str, tolerance) -> bool:
    """Whether SAPO's temperatures rounded to float32 (1.05 → 1.0499999523; a library that builds
    them in the default dtype) move the loss or its gradient beyond ``tolerance`` (refimpl/arrays
    with τ_pos and τ_neg rounded, against the same with the declared τ)."""
    declared = arguments(case)
    rounded = {name: float(np.float32(declared[name])) for name in ("sapo_tau_pos", "sapo_tau_neg")}
    if all(rounded[name] == declared[name] for name in rounded):
        return False
    inputs = decoded(case.test["inputs"])
    cotangent = decoded(case.test["cotangents"])["loss"]
    kw = {**declared, **rounded}
    exact = {"loss": grpo.loss(**inputs, **declared), "grad:logp": grpo.loss_vjp(cotangent, **inputs, **declared)["logp"]}
    deviating = {"loss": grpo.loss(**inputs, **kw), "grad:logp": grpo.loss_vjp(cotangent, **inputs, **kw)["logp"]}
    return deviation_shows(tolerance, exact, deviating)


def where(objectives=(), dtypes=(), flags=(), conventions=None, test=None, shows=None):
    """A finding's predicate ``(case, dtype) -> bool``: the case's objective is one of
    ``objectives``, ``dtype`` one of ``dtypes``, the case carries one of ``flags``, its group's
    conventions have the given values (a tuple: any of them), ``test(case)`` holds and
    ``shows(case, dtype, tolerance)`` (the deviation is beyond the bound the case is judged by)
    holds. An empty condition holds for every case."""
    conventions = conventions or {}

    def applies(case, dtype, tolerance) -> bool:
        return ((not objectives or case.objective in objectives) and (not dtypes or dtype in dtypes)
                and (not flags or any(f in case.flags for f in flags))
                and all(case.conventions.get(name) in (value if isinstance(value, tuple) else (value,))
                        for name, value in conventions.items())
                and (test is None or bool(test(case))) and (shows is None or bool(shows(case, dtype, tolerance))))
    return applies
