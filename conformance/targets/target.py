"""The target model: what a target declares (objectives, conventions, dtypes, devices) and the
checks of a declaration (DESIGN §8)."""
from __future__ import annotations

import dataclasses
import fnmatch
import inspect
import json
import re
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

from lossproof.conformance import catalog
from lossproof.conformance.errors import LossproofError

FRAMEWORKS = ("torch", "numpy", "cupy", "jax")
# The frameworks with bfloat16 and float16: a target of one runs in all four dtypes by default.
LOW_PRECISION = ("torch", "jax")
ANY = "*"
# How the data-parallel wrapper reduces gradients over ranks (DESIGN §11): DDP averages them,
# a trainer that all-reduces with SUM (or scales by the world size itself) declares "sum".
GRAD_REDUCTIONS = ("mean", "sum")
# The objectives a step (``--partition``) and a vocabulary-parallel function (``--shard-vocab``)
# may be declared for: views of the catalog (``Objective.step``, ``vocab_sharded``).
STEP_OBJECTIVES = tuple(o.id for o in catalog.OBJECTIVES if o.step)
SHARDED_OBJECTIVES = tuple(o.id for o in catalog.OBJECTIVES if o.vocab_sharded)
# A variant of an objective: ``"grpo.aggregate[per-row]"`` names a second function for the same
# objective, with its own declaration under the same key; each variant is checked and reported as
# a target of its own, named ``<target name>[<variant>]`` (``split_variants``).
VARIANT = re.compile(r"^(?P<objective>[^\[\]]+)\[(?P<variant>[^\[\]]+)\]$")


class TargetError(LossproofError):
    """The target cannot be loaded or is malformed (a usage error: exit status 2)."""


@dataclass
class Target:
    name: str
    framework: str
    objectives: dict
    conventions: dict | str = field(default_factory=dict)
    _: KW_ONLY   # the rest by name: eighteen fields by position were read wrong more than once
    vjps: dict = field(default_factory=dict)
    dtypes: tuple = ("float64", "float32")
    devices: tuple = ("cpu",)
    version: str = ""
    spec: str = ""
    params: dict = field(default_factory=dict)    # {objective: {param: [the only values it takes]}}
    known: dict = field(default_factory=dict)     # {uid glob, optionally "@dtype": reason and link}
    known_rules: tuple = ()                       # ((reason, predicate(case, dtype[, tolerance]) -> bool), ...)
    variant_rules: dict = field(default_factory=dict)   # {variant: known rules of that variant only}
    tolerance_model: dict = field(default_factory=dict)   # {objective glob: "careful" | "native"}
    steps: dict = field(default_factory=dict)     # {objective: step(micro_batches, ctx)} (§11)
    sharded: dict = field(default_factory=dict)   # {objective: vocabulary-parallel fn(**shard, ctx=ctx)}
    grad_reduction: str = "mean"                  # how gradients are reduced over ranks: "mean" | "sum"
    known_splits: tuple = ()                      # ((reason, predicate(case, dtype, split[, tolerance]) -> bool), ...)
    temperature_free: tuple = ()                  # objectives whose function has no temperature (T = 1 only)
    objective_dtypes: dict = field(default_factory=dict)   # {objective: dtypes} where not ``dtypes``

    def all_dtypes(self) -> tuple:
        """Every dtype some objective (or step, or sharded function) of the target runs in."""
        oids = [*self.objectives, *self.steps, *self.sharded]
        return tuple(dict.fromkeys(d for oid in oids for d in self.objective_dtypes.get(oid, self.dtypes))) \
            or tuple(self.dtypes)

    def declared(self, objective_id: str) -> dict:
        """The conventions declared for an objective ({} for a ``"*"`` target)."""
        if self.conventions == ANY:
            return {}
        return self.conventions.get(objective_id, {})

    def accepts(self, objective_id: str, conventions: dict) -> bool:
        """Whether a vector group's conventions are ones this target declares
        (an undeclared convention means the paper default)."""
        declared = ANY if self.conventions == ANY else self.declared(objective_id)
        return conventions_admit(declared, catalog.get(objective_id), conventions)

    def tolerance_model_for(self, objective_id: str) -> str | None:
        """The low-precision tolerance model the target declares for an objective ("native":
        it computes and reduces in the inputs' dtype), or None."""
        return next((m for g, m in self.tolerance_model.items() if fnmatch.fnmatchcase(objective_id, g)), None)

    def deviations(self) -> list[tuple[str, str, object, object]]:
        """(objective, convention, declared, paper default) for every declared convention whose
        value — the first one of a list, the target's default — differs from the paper default
        (``objective`` is the declaration key: ``objective[variant]`` for a variant's own)."""
        if self.conventions == ANY:
            return []
        out = []
        for oid, declared in self.conventions.items():
            first = declared[0] if isinstance(declared, list) and declared else declared
            defaults = catalog.get(objective_of(oid)).defaults
            for name, value in (first or {}).items():
                default_value = value[0] if isinstance(value, (list, tuple)) and value else value
                if value != ANY and default_value != defaults.get(name):
                    out.append((oid, name, value, defaults.get(name)))
        return out


def conventions_admit(declared, spec: catalog.Objective, conventions: dict) -> bool:
    """Whether a declaration (ANY, a dict, or a list of alternative combinations: conventions that
    do not vary independently) admits a vector group's conventions; an undeclared convention
    means the paper default."""
    if declared == ANY:
        return True
    if isinstance(declared, list):
        return any(conventions_admit(d, spec, conventions) for d in declared)
    for name, value in conventions.items():
        allowed = declared.get(name, spec.defaults.get(name))
        if allowed == ANY:
            continue
        if isinstance(allowed, (list, tuple)):
            if value not in allowed:
                return False
        elif value != allowed:
            return False
    return True


def from_mapping(obj, spec: str) -> Target:
    get = obj.get if isinstance(obj, dict) else (lambda k, d=None: getattr(obj, k, d))
    name, framework, objectives = get("name"), get("framework"), get("objectives")
    if not isinstance(name, str) or not name:
        raise TargetError(f"{spec}: target needs a non-empty 'name'")
    if framework not in FRAMEWORKS:
        raise TargetError(f"{spec}: 'framework' must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")
    if framework == "jax":
        if get("vjps", None):
            raise TargetError(f"{spec}: 'vjps' is for numpy and cupy targets; a jax target's gradients are "
                              "jax.vjp of its own functions")
        from lossproof.conformance.targets import jaxcall
        if refusal := jaxcall.x64_refusal():   # before the harness makes an array: float64 stays float64
            raise TargetError(f"{spec}: {refusal}")
    if objectives is None and (get("steps", None) or get("sharded", None)):
        objectives = {}   # a target of distributed functions only
    elif not isinstance(objectives, dict) or not objectives:
        raise TargetError(f"{spec}: 'objectives' must be a non-empty dict of objective id -> callable")
    for key, fn in objectives.items():
        if objective_of(key) not in catalog.BY_ID:
            raise TargetError(f"{spec}: unknown objective {key!r} (see 'lossproof list'; a variant is "
                              f"'objective[name]')")
        if not callable(fn):
            raise TargetError(f"{spec}: objectives[{key!r}] is not callable")
    conventions = get("conventions", {}) or {}
    if conventions != ANY:
        if not isinstance(conventions, dict):
            raise TargetError(f"{spec}: 'conventions' must be a dict")
        for key, conv in conventions.items():
            oid = objective_of(key)
            if oid not in catalog.BY_ID:
                raise TargetError(f"{spec}: conventions for unknown objective {key!r}")
            known = set(p.name for p in catalog.get(oid).params)
            for key in (k for c in (conv if isinstance(conv, list) else [conv]) for k in c):
                if key not in known:
                    raise TargetError(f"{spec}: {oid} has no convention {key!r} (known: {', '.join(sorted(known))})")
    steps = _callables(get("steps", {}) or {}, "steps", STEP_OBJECTIVES, spec)
    sharded = _callables(get("sharded", {}) or {}, "sharded", SHARDED_OBJECTIVES, spec)
    grad_reduction = get("grad_reduction", None) or "mean"
    if grad_reduction not in GRAD_REDUCTIONS:
        raise TargetError(f"{spec}: 'grad_reduction' must be one of {', '.join(GRAD_REDUCTIONS)}, "
                          f"got {grad_reduction!r}")
    dtypes, objective_dtypes = _dtypes(get("dtypes", None), framework, objectives, spec)
    return Target(name, framework, dict(objectives), conventions, vjps=dict(get("vjps", {}) or {}), dtypes=dtypes,
                  objective_dtypes=objective_dtypes,
                  devices=tuple(get("devices", None) or ("cpu",)), version=str(get("version", "") or ""), spec=spec,
                  params=_params(get("params", {}) or {}, spec), known=_known(get("known", {}) or {}, spec),
                  known_rules=_known_rules(get("known_rules", ()) or (), spec, 2),
                  variant_rules=_variant_rules(get("known_rules", ()) or (), objectives, spec),
                  tolerance_model=_tolerance_model(get("tolerance_model", {}) or {}, spec),
                  steps=steps, sharded=sharded, grad_reduction=grad_reduction,
                  known_splits=_known_rules(get("known_splits", ()) or (), spec, 3),
                  temperature_free=_temperature_free(get("temperature_free", ()) or (), objectives, steps, sharded,
                                                     spec))


def objective_of(key: str) -> str:
    """The objective id of a declaration key: ``key`` itself, or ``X`` of a variant ``X[name]``."""
    m = VARIANT.match(key) if isinstance(key, str) else None
    return m["objective"] if m else key


def _variant_of(key: str) -> str | None:
    m = VARIANT.match(key) if isinstance(key, str) else None
    return m["variant"] if m else None


def _dtypes(declared, framework: str, objectives: dict, spec: str) -> tuple[tuple, dict]:
    """``dtypes``: a list for every objective, or {objective (or variant, or "*"): list}; the
    objectives it does not name run in the framework's dtypes. (default, {objective: dtypes})."""
    default = ("float64", "float32", "bfloat16", "float16") if framework in LOW_PRECISION else ("float64", "float32")
    if not declared:
        return default, {}
    if not isinstance(declared, dict):
        if isinstance(declared, str) or not isinstance(declared, (list, tuple)):
            raise TargetError(f"{spec}: 'dtypes' must be a list of dtypes or {{objective: [dtypes]}}, got {declared!r}")
        return tuple(declared), {}
    out = {}
    for key, values in declared.items():
        if key != ANY and key not in {*objectives, *map(objective_of, objectives)}:
            raise TargetError(f"{spec}: dtypes for {key!r}, which the target does not implement")
        if isinstance(values, str) or not isinstance(values, (list, tuple)) or not values:
            raise TargetError(f"{spec}: dtypes[{key!r}] must be a non-empty list of dtypes")
        out[key] = tuple(values)
    return out.pop(ANY, default), out


def split_variants(target: Target) -> list[Target]:
    """The targets a declaration with variants stands for: the plain objectives (and the steps
    and sharded functions) under the target's name, then one target per variant name, named
    ``name[variant]``, holding the objectives declared ``objective[variant]``. A variant's
    declaration (conventions, params, dtypes, vjps, temperature_free) is the one under its own
    key, else the one under the plain objective id; ``tolerance_model`` globs are matched
    against the objective id, a variant's own key first. ``known_rules`` hold for the plain
    objectives and every variant; a rule declared ``(reason, predicate, variant)`` for that
    variant only (its function's own failure: the plain function passes those cases, which
    would otherwise be reported as stale known failures)."""
    names = list(dict.fromkeys(v for v in map(_variant_of, target.objectives) if v is not None))
    if not names:
        return [target]
    base = [] if not ({k for k in target.objectives if _variant_of(k) is None} or target.steps or target.sharded) \
        else [_restricted(target, None)]
    return base + [_restricted(target, v) for v in names]


def _restricted(target: Target, variant: str | None) -> Target:
    def pick(mapping):
        if mapping == ANY:
            return ANY
        plain = {k: v for k, v in mapping.items() if _variant_of(k) is None}
        if variant is None:
            return plain
        own = {objective_of(k): v for k, v in mapping.items() if _variant_of(k) == variant}
        return {k: v for k, v in {**plain, **own}.items() if k in objectives or k == ANY}

    objectives = {objective_of(k): f for k, f in target.objectives.items() if _variant_of(k) == variant}
    own_models = {objective_of(k): m for k, m in target.tolerance_model.items() if _variant_of(k) == variant} \
        if variant is not None else {}
    plain_models = {k: m for k, m in target.tolerance_model.items() if _variant_of(k) is None and k not in own_models}
    free = [objective_of(k) for k in target.temperature_free if _variant_of(k) in (None, variant)]
    return dataclasses.replace(
        target, name=target.name if variant is None else f"{target.name}[{variant}]", objectives=objectives,
        conventions=pick(target.conventions), vjps=pick(target.vjps), params=pick(target.params),
        objective_dtypes=pick(target.objective_dtypes),
        tolerance_model={**own_models, **plain_models},
        known_rules=target.known_rules + target.variant_rules.get(variant, ()), variant_rules={},
        temperature_free=tuple(dict.fromkeys(o for o in free if o in objectives or variant is None)),
        steps=target.steps if variant is None else {}, sharded=target.sharded if variant is None else {})


def rule_predicate(predicate, leading: int = 2):
    """A known-failure predicate as ``(*leading arguments, tolerance) -> bool``: one written
    without the trailing ``tolerance`` parameter (``predicate(case, dtype)``, or
    ``predicate(case, dtype, split)`` for a split rule) is wrapped to ignore it."""
    try:
        inspect.signature(predicate).bind(*[None] * (leading + 1))
    except (TypeError, ValueError):   # ValueError: a builtin without an introspectable signature
        return lambda *args: predicate(*args[:leading])
    return predicate


def _known_rules(rules, spec: str, leading: int) -> tuple:
    """The rules ``(reason, predicate)`` that hold for every variant; a ``known_rules`` entry
    ``(reason, predicate, variant)`` is one variant's (``_variant_rules``)."""
    out = []
    variant = leading == 2   # known_splits are for the steps and sharded functions: no variant there
    for rule in rules:
        if not (isinstance(rule, (tuple, list)) and (len(rule) == 2 or (variant and len(rule) == 3))
                and isinstance(rule[0], str) and callable(rule[1])):
            raise TargetError(f"{spec}: each known rule must be (reason, predicate)"
                              + (" or (reason, predicate, variant)" if variant else "") + f", got {rule!r}")
        if len(rule) == 2:
            out.append((rule[0], rule_predicate(rule[1], leading)))
    return tuple(out)


def _variant_rules(rules, objectives: dict, spec: str) -> dict:
    """{variant: ((reason, predicate), ...)}: the ``known_rules`` entries ``(reason, predicate,
    variant)``, each for a variant some ``objective[variant]`` key declares."""
    variants = {v for v in map(_variant_of, objectives or {}) if v is not None}
    out: dict = {}
    for rule in (r for r in rules if isinstance(r, (tuple, list)) and len(r) == 3):
        if rule[2] not in variants:
            raise TargetError(f"{spec}: known rule {rule[0][:60]!r} is for variant {rule[2]!r}, which no "
                              f"'objective[variant]' key declares (declared: {', '.join(sorted(variants)) or 'none'})")
        out.setdefault(rule[2], []).append((rule[0], rule_predicate(rule[1], 2)))
    return {v: tuple(r) for v, r in out.items()}


def _callables(declared, key: str, allowed: tuple, spec: str) -> dict:
    """``steps`` / ``sharded``: {objective id: callable} for the objectives that take one."""
    if not isinstance(declared, dict):
        raise TargetError(f"{spec}: '{key}' must be a dict {{objective: callable}}")
    for oid, fn in declared.items():
        if oid not in allowed:
            raise TargetError(f"{spec}: '{key}' is for {', '.join(allowed)}, got {oid!r}")
        if not callable(fn):
            raise TargetError(f"{spec}: {key}[{oid!r}] is not callable")
    return dict(declared)


def _tolerance_model(declared, spec: str) -> dict:
    """``"native"`` for every objective, or {objective glob: "careful" | "native"}."""
    if isinstance(declared, str):
        declared = {"*": declared}
    if not isinstance(declared, dict) or not all(v in ("careful", "native") for v in declared.values()):
        raise TargetError(f"{spec}: 'tolerance_model' must be \"careful\", \"native\" or "
                          f"{{objective glob: \"careful\" | \"native\"}}")
    return dict(declared)


def _temperature_free(declared, objectives: dict, steps: dict, sharded: dict, spec: str) -> tuple:
    """``temperature_free``: the objective ids (a list) whose functions take no temperature —
    losses written without one, which a target declares instead of dividing the logits itself.
    Each must be one the target implements, and have a ``temperature`` in the catalog."""
    if isinstance(declared, str) or not isinstance(declared, (list, tuple)):
        raise TargetError(f"{spec}: 'temperature_free' must be a list of objective ids, got {declared!r}")
    for key in declared:
        oid = objective_of(key)
        if oid not in catalog.BY_ID:
            raise TargetError(f"{spec}: temperature_free names unknown objective {key!r}")
        if "temperature" not in {p.name for p in catalog.get(oid).params}:
            raise TargetError(f"{spec}: temperature_free names {key}, which has no temperature")
        implemented = {*objectives, *map(objective_of, objectives), *steps, *sharded}
        if key not in implemented:
            raise TargetError(f"{spec}: temperature_free names {oid}, which the target does not implement")
    return tuple(declared)


def _params(params, spec: str) -> dict:
    if not isinstance(params, dict):
        raise TargetError(f"{spec}: 'params' must be a dict {{objective: {{param: [values]}}}}")
    for key, per_param in params.items():
        oid = objective_of(key)
        if oid not in catalog.BY_ID:
            raise TargetError(f"{spec}: params for unknown objective {key!r}")
        if not isinstance(per_param, dict):
            raise TargetError(f"{spec}: params[{key!r}] must be a dict {{param: [values]}}")
        names = {p.name for p in catalog.get(oid).params}
        for name, values in per_param.items():
            if name not in names:
                raise TargetError(f"{spec}: {oid} has no parameter {name!r} (known: {', '.join(sorted(names))})")
            if not isinstance(values, (list, tuple)):
                raise TargetError(f"{spec}: params[{key!r}][{name!r}] must be a list of the values it takes")
    return {oid: {name: list(values) for name, values in per_param.items()} for oid, per_param in params.items()}


def known_file(path: str) -> dict:
    """Known failures from a JSON file ``{uid or glob[@dtype]: reason and link}`` (``--known``)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TargetError(f"--known {path}: {err}") from None
    return _known(data, f"--known {path}")


def _known(known, spec: str) -> dict:
    if not isinstance(known, dict) or not all(isinstance(k, str) and isinstance(v, str) and v.strip()
                                              for k, v in known.items()):
        raise TargetError(f"{spec}: 'known' must be a dict {{uid or glob: reason}} with a non-empty reason each")
    return dict(known)
