"""Run a target over the vectors and judge every case (DESIGN §6–§8).

Each case runs as its plan says (``conformance.plan``: the dtypes that both the vector and the
target support, the call's arguments, the bound, the known failure); the harness makes the calls
and judges what they return. A target that raises, returns NaN or the wrong shape, mutates its
inputs, answers differently on a second call, or overruns the per-case time limit is reported
with a message and the run goes on. The limit is CPU time, so a loaded machine does not change
a verdict, and a case that overruns it is run once more before it is reported
(docs/performance.md#time-limit-and-load).

Two more misbehaviours are failures even on ``acceptable`` vectors, because no numerical
convention excuses them:
- dtype: a floating array output (or gradient) whose dtype is not the case's dtype (float32
  returned for float64 inputs loses half the digits even when the values happen to agree).
- gradient leak: for torch and JAX targets, the outputs of objectives the catalog marks ``detached`` (stop-gradient
  coefficients by definition, DESIGN §4) must carry no gradient. The harness calls the target
  once more with every floating input requiring grad and fails the case if any output has a
  nonzero gradient with respect to any of them; a target that cannot run with such inputs is
  not judged by this probe. Inputs outside a catalog objective's ``grads`` (old_logp, ref_logp,
  reference log-probabilities, the behaviour policy) are *not* probed: the objective's
  derivative with respect to them is mathematically nonzero and callers pass them detached,
  so a target that does not detach them is correct; the bug class that matters there —
  old/reference log-probs taken from the live graph — changes the gradient with respect to
  ``logp`` and is caught by the gradient vectors.
"""
from __future__ import annotations

import contextlib
import fnmatch
import functools
import time
from dataclasses import dataclass

import numpy as np

from lossproof.conformance import catalog, compare, plan, timelimit, verdict
from lossproof.conformance.numbers import decode_input
from lossproof.conformance.results import MISSING_MODULE, CaseResult, not_implemented
from lossproof.conformance.targets import jaxcall, signature
from lossproof.conformance.targets.imports import missing_module
from lossproof.conformance.targets.target import Target, TargetError
from lossproof.conformance.vectors.load import VectorCase, VectorSet

LEAK_PROBE_SEED = 20261201
# The frameworks whose gradients the harness takes itself (autograd, jax.vjp), not from ``vjps``.
DIFFERENTIABLE = ("torch", "jax")


def _timed_out(res: CaseResult, err: timelimit.Timeout, what: str = "") -> CaseResult:
    """A case that ran out of lossproof's time limit: an error of lossproof's limit, never the
    function raising; ``probes["timeout"]`` holds the limit (seconds of CPU time)."""
    res.status, res.message = "error", what + err.describe()
    res.probes["timeout"] = err.limit
    return res


# --- framework conversion -------------------------------------------------------------

class _Framework:
    def __init__(self, name: str, device: str):
        self.name, self.device = name, device
        if name == "torch":
            import torch
            self.torch = torch
            # The first backward pass imports modules lazily; do it here, outside any
            # per-case time limit, so that an alarm cannot interrupt an import halfway.
            x = torch.ones(1, dtype=torch.float64, requires_grad=True)
            torch.autograd.grad((x * x).sum(), x)
        elif name == "cupy":
            import cupy
            self.cupy = cupy
        elif name == "jax":
            if refusal := jaxcall.x64_refusal():   # before any array is made: else float64 is made float32
                raise TargetError(refusal)
            self.jax, self.jnp = jaxcall.jax_modules()
            self.jax_device = self.jax.devices("cuda" if device.startswith("cuda") else device)[0]

    def array(self, value, dtype: str, integer: bool = False, requires_grad: bool = False):
        data = np.asarray(decode_input(value), dtype=np.int64 if integer else np.float64)
        if self.name == "torch":
            t = self.torch.tensor(data, dtype=self.torch.int64 if integer else getattr(self.torch, dtype),
                                  device=self.device)
            return t.requires_grad_(True) if requires_grad else t
        if self.name == "cupy":
            return self.cupy.asarray(data if integer else data.astype(dtype))
        if self.name == "jax":
            return self.jax.device_put(self.jnp.asarray(data, dtype=self.jnp.int64 if integer else dtype),
                                       self.jax_device)
        if integer:
            return data
        if dtype not in ("float64", "float32"):
            raise TypeError(f"NumPy has no {dtype}")
        return data.astype(dtype)

    def to_numpy(self, x) -> np.ndarray:
        if self.name == "torch" and isinstance(x, self.torch.Tensor):
            return x.detach().to("cpu", self.torch.float64).numpy()
        if self.name == "cupy" and isinstance(x, self.cupy.ndarray):
            return self.cupy.asnumpy(x).astype(np.float64)
        if self.name == "jax" and isinstance(x, self.jax.Array):
            return np.asarray(x).astype(np.float64)
        if isinstance(x, (np.ndarray, np.generic, float, int, bool)):
            return np.asarray(x, dtype=np.float64)
        raise TypeError(f"returned {type(x).__name__}, expected an array of the target's framework")

    def snapshot(self, inputs: dict) -> dict:
        return {k: self.to_numpy(v).copy() for k, v in inputs.items()}

    def changed(self, before: dict, inputs: dict) -> str | None:
        """How the call changed an input: its values (in place), or — a ``jax.Array`` cannot be
        changed — its buffer deleted by donation; None when it left every input as it was."""
        for name, x in inputs.items():
            if self.name == "jax" and isinstance(x, self.jax.Array) and x.is_deleted():
                return f"donated its input {name!r} (its buffer was deleted: donate_argnums)"
            if not np.array_equal(before[name], self.to_numpy(x), equal_nan=True):
                return f"mutated its input {name!r} in place"
        return None

    def dtype_of(self, x) -> str | None:
        """The name of a floating array's dtype ('float32', ...); None for anything else
        (Python scalars, integer or boolean arrays, non-arrays)."""
        if self.name == "torch" and isinstance(x, self.torch.Tensor):
            return str(x.dtype).removeprefix("torch.") if x.is_floating_point() else None
        if self.name == "jax" and isinstance(x, self.jax.Array):
            return str(x.dtype) if self.jnp.issubdtype(x.dtype, self.jnp.floating) else None
        dt = getattr(x, "dtype", None)
        if isinstance(x, (np.ndarray, np.generic)) or (self.name == "cupy" and isinstance(x, self.cupy.ndarray)):
            return np.dtype(dt).name if np.issubdtype(dt, np.floating) else None
        return None


def outputs_by_name(spec: catalog.Objective, returned) -> dict:
    """The returned outputs by name: a dict by output name, a tuple in catalog order (a prefix
    of the outputs), or a single array, which is the primary output (the others are then not
    checked)."""
    if isinstance(returned, dict):
        missing = [o for o in spec.outputs[:1] if o not in returned]
        if missing:
            raise TypeError(f"returned a dict without the primary output {missing[0]!r} "
                            f"({spec.id} outputs: {', '.join(spec.outputs)})")
        return {o: returned[o] for o in spec.outputs if o in returned}
    if isinstance(returned, tuple):
        if not 1 <= len(returned) <= len(spec.outputs):
            raise TypeError(f"returned a tuple of {len(returned)}; {spec.id} has outputs "
                            f"{', '.join(spec.outputs)} (a tuple is read in this order)")
        return dict(zip(spec.outputs, returned))
    return {spec.outputs[0]: returned}


def _repro(target: Target, case: VectorCase, dtype: str, device: str, options: tuple) -> str:
    """The command that reruns this one case with every option that changes its verdict."""
    cmd = f"lossproof check --target {target.spec or target.name} --uid {case.uid} --dtype {dtype}"
    return " ".join([cmd] + ([f"--device {device}"] if device != "cpu" else []) + list(options))


# --- one case ---------------------------------------------------------------------------

@dataclass
class _Call:
    """One case-run's call: the target's function on the inputs (``inputs``, as the framework holds
    them) and the conventions and parameters of the plan (``kwargs`` holds both)."""
    target: Target
    spec: catalog.Objective
    fn: object
    fw: _Framework
    inputs: dict
    kwargs: dict
    time_limit: float


def _judge(target: Target, p: plan.CasePlan, device: str, fw: _Framework, time_limit: float, options: tuple,
           observe=None) -> CaseResult:
    case, test, dtype = p.case, p.test, p.dtype
    spec = catalog.get(case.objective)
    res = CaseResult(case.uid, case.objective, target.name, dtype, device, "pass", test["flags"],
                     repro=_repro(target, case, dtype, device, options), result=test["result"],
                     group=case.group, conventions=p.conventions)
    autograd = target.framework == "torch"   # a JAX function is differentiated by jax.vjp (_jax_caller)
    kinds = {i.name: i.kind for i in spec.inputs}
    try:
        inputs = {name: fw.array(value, dtype, integer=kinds.get(name) == "int",
                                 requires_grad=autograd and name in spec.grads and test["result"] != "invalid")
                  for name, value in test["inputs"].items()}
    except (TypeError, ValueError, OverflowError) as err:
        res.status, res.message = "skip", f"inputs not representable on this backend: {err}"
        return res
    if p.status != "run":   # the plan refused the call (an argument the function does not take)
        res.status, res.message = p.status, p.why
        return res
    fn = target.objectives[case.objective]
    if target.framework == "jax":
        fn = _jax_caller(fn, spec, inputs, test, dtype, fw)
    call = _Call(target, spec, fn, fw, inputs, {**inputs, **p.kwargs}, time_limit)
    if test["result"] == "invalid":
        return _judge_invalid(res, call, test)
    return _judge_valid(res, call, p, observe)


@functools.cache
def _outputs_of(objective_id: str):
    """``outputs_by_name`` of one objective, one function per objective (it keys compiled calls)."""
    return functools.partial(outputs_by_name, catalog.get(objective_id))


def _jax_caller(fn, spec: catalog.Objective, inputs: dict, test: dict, dtype: str, fw: _Framework):
    """A JAX function as a case calls it: compiled, its vjp with the vector's cotangents taken in
    the same call (``targets.jaxcall``)."""
    if test["result"] == "invalid" or not test.get("grads"):
        return jaxcall.Caller(fn, _outputs_of(spec.id))
    cotangents = {name: fw.array(v, dtype) for name, v in test["cotangents"].items()}
    return jaxcall.Caller(fn, _outputs_of(spec.id), spec.grads_of(inputs), cotangents)


def _raised(call: _Call, err: Exception) -> tuple[str, str]:
    """(status, message) of a call that raised ``err`` on a valid vector."""
    if untaken := plan.untaken(call.target, call.spec.id, call.kwargs, err):
        return "unsupported", untaken
    if missing := missing_module(err):   # the environment's, not the target's
        return "error", MISSING_MODULE + missing
    return "error", f"raised {type(err).__name__}: {str(err)[:300]}"


def _judge_invalid(res, call: _Call, test: dict) -> CaseResult:
    """Validation: a bad input must be rejected with an exception. NotImplementedError says the
    target does not take these arguments at all (unsupported), not that it checked them."""
    try:
        with timelimit.limit(call.time_limit):
            returned = outputs_by_name(call.spec, call.fn(**call.kwargs))
    except timelimit.Timeout as err:
        return _timed_out(res, err)
    except NotImplementedError as err:
        res.status, res.message = "unsupported", not_implemented(err)
        return res
    except Exception as err:
        if untaken := plan.untaken(call.target, call.spec.id, call.kwargs, err):
            res.status, res.message = "unsupported", untaken
            return res
        if missing := missing_module(err):   # the environment's, not a rejection of the input
            res.status, res.message = "error", MISSING_MODULE + missing
            return res
        if signature.call_error(err):
            why = "a call whose arguments do not fit the function called: not a rejection of the input"
            res.status, res.message = "error", f"raised TypeError: {str(err)[:200]} ({why})"
            return res
        return verdict.judge_invalid(res, {"type": type(err).__name__, "message": str(err)}, True, test)
    finite = True
    for value in returned.values():
        try:
            finite = finite and bool(np.isfinite(call.fw.to_numpy(value)).all())
        except TypeError:
            continue
    return verdict.judge_invalid(res, None, finite, test)


def _widens(got: str, want: str) -> bool:
    """Whether dtype ``got`` holds every value of ``want`` (float32 for bfloat16 inputs)."""
    return got == want or (got, want) in {("float32", "bfloat16"), ("float32", "float16"), ("float64", "bfloat16"),
                                          ("float64", "float16"), ("float64", "float32")}


def _judge_valid(res, call: _Call, p: plan.CasePlan, observe=None) -> CaseResult:
    test = p.test
    before = call.fw.snapshot(call.inputs)
    try:
        with timelimit.limit(call.time_limit):
            returned = outputs_by_name(call.spec, call.fn(**call.kwargs))
            again = outputs_by_name(call.spec, call.fn(**call.kwargs))
    except timelimit.Timeout as err:
        return _timed_out(res, err)
    except NotImplementedError as err:
        res.status, res.message = "unsupported", not_implemented(err)
        return res
    except Exception as err:
        res.status, res.message = _raised(call, err)
        return res
    if changed := call.fw.changed(before, call.inputs):
        res.status, res.message = "fail", changed
        return res
    judged = verdict.Judgement(res, p.tolerance, observe)
    check = functools.partial(_check, judged, call.fw, p.dtype, _selection(call.spec, test))
    for name in returned:
        check(name, returned[name], test["expected"][name])
        try:
            a, b = call.fw.to_numpy(returned[name]), call.fw.to_numpy(again[name])
        except TypeError:
            continue  # already reported by check()
        if a.shape != b.shape or not np.array_equal(a, b, equal_nan=True):
            judged.fail(f"{name}: a second call on the same inputs returned different values")
    if test.get("grads") and not _judge_gradients(judged, call, returned, test, p.dtype, check):
        return res
    if call.target.framework in DIFFERENTIABLE and call.spec.detached:
        try:
            leaks = _leaks(call)
        except timelimit.Timeout as err:
            return _timed_out(res, err, "the gradient-leak probe ")
        for output, leak in leaks:
            res.probes.setdefault("leak", []).append(output)
            judged.fail_hard(leak)
    return judged.decide(test["result"])


def _check(judged: verdict.Judgement, fw: _Framework, dtype: str, selected: dict, label: str, got,
           want_strings) -> None:
    """Judge one returned output or gradient: its dtype (no narrower than the inputs'), its values."""
    try:
        g = fw.to_numpy(got)
    except TypeError as err:
        judged.fail(f"{label}: {err}")
        return
    got_dtype = fw.dtype_of(got)
    if got_dtype is not None and not _widens(got_dtype, dtype):
        judged.res.probes.setdefault("narrowed", {})[label] = got_dtype
        judged.fail_hard(f"{label}: dtype {got_dtype}, narrower than the inputs' {dtype}")
    judged.output(label, g, want_strings, selected.get(label.rpartition(":")[2]))


def _judge_gradients(judged: verdict.Judgement, call: _Call, returned: dict, test: dict, dtype: str,
                     check) -> bool:
    """Judge the gradients of a valid case, or say why they are not checked; False when that
    decides the case (the gradient could not be computed: an error)."""
    res, failures = judged.res, judged.failures
    unchecked = [o for o, ct in test["cotangents"].items() if o not in returned and np.any(verdict.expected(ct))]
    declined = ""
    try:
        with timelimit.limit(call.time_limit):
            grads = None if unchecked else _gradients(call, returned, test, dtype)
        msg = ""
    except timelimit.Timeout as err:
        _timed_out(res, err, "the gradient ")
        return False
    except NotImplementedError as err:   # the values stand; the gradient is declined, not wrong
        grads, msg, declined = None, "", f"gradients not checked: the gradient {not_implemented(err)}"
    except Exception as err:
        grads, msg = None, f"gradient raised {type(err).__name__}: {str(err)[:300]}"
    if unchecked:
        res.message = (f"gradients not checked: the vector's cotangent weights output(s) "
                       f"{', '.join(unchecked)}, which the target does not return")
    elif grads is None and call.target.framework not in DIFFERENTIABLE and call.spec.id not in call.target.vjps:
        res.message = f"gradients not checked: the target declares no vjp for {call.spec.id}"
    elif grads is None and declined:
        res.message = declined
    elif grads is None:
        res.status, res.message = "error", msg
        return False
    else:
        grads, detached = grads
        for name in call.spec.grads_of(test["inputs"]):
            check(f"grad:{name}", grads[name], test["grads"][name])
        if detached and any(f.startswith("grad:") for f in failures):
            failures.insert(0, f"output(s) {', '.join(detached)} carry no gradient (computed under "
                               f"torch.no_grad() or detached?)")
    return True


def _selection(spec: catalog.Objective, test: dict) -> dict:
    """{output name: boolean array} for per-token outputs of masked objectives: values where
    the mask does not select the token are unspecified (DESIGN §6) and are not compared."""
    if "mask" not in test["inputs"]:
        return {}
    mask = np.asarray(decode_input(test["inputs"]["mask"]), dtype=np.float64) != 0
    return {name: mask for name in spec.outputs if np.shape(verdict.expected(test["expected"][name])) == mask.shape}


def _leaks(call: _Call) -> list:
    """(output name, message) for the outputs of a detached objective that carry a gradient to a floating
    input. The probe's cotangent is random, not ones: a leak through a mean-centred output
    (group-normalised advantages sum to zero) is invisible to a cotangent of ones."""
    if call.target.framework == "jax":
        return _jax_leaks(call)
    torch, spec = call.fw.torch, call.spec
    kinds = {i.name: i.kind for i in spec.inputs}
    probe = {name: (t.detach().clone().requires_grad_(True) if kinds.get(name) == "float" and t.is_floating_point()
                    else t) for name, t in call.inputs.items()}
    leaves = {name: t for name, t in probe.items() if t.requires_grad}
    generator = torch.Generator().manual_seed(LEAK_PROBE_SEED)
    try:
        with timelimit.limit(call.time_limit):
            returned = outputs_by_name(spec, call.fn(**{**call.kwargs, **probe}))
            out = []
            for oname, o in returned.items():
                if not (isinstance(o, torch.Tensor) and o.requires_grad):
                    continue
                cotangent = torch.rand(o.shape, generator=generator, dtype=torch.float64).add_(0.5)
                grads = torch.autograd.grad(o, list(leaves.values()), cotangent.to(o.dtype), allow_unused=True)
                for iname, g in zip(leaves, grads):
                    if g is not None and bool((g != 0).any()):
                        out.append((oname, _leak(spec, oname, iname)))
            return out
    except Exception:
        return []   # a target that cannot run on inputs requiring grad: the probe cannot judge it


def _leak(spec: catalog.Objective, output: str, name: str) -> str:
    return f"{output}: leaks gradient to input {name!r} ({spec.id} declares its outputs constant: detach them)"


def _jax_leaks(call: _Call) -> list:
    """``_leaks`` of a JAX function: the vjp of its floating outputs with respect to every floating
    input (a missing ``stop_gradient`` leaves it nonzero), with the same kind of seeded random
    cotangents; all outputs at once, then — only where that finds a leak — one output at a time."""
    fw, spec = call.fw, call.spec
    kinds = {i.name: i.kind for i in spec.inputs}
    wrt = tuple(n for n, x in call.inputs.items() if kinds.get(n) == "float" and fw.dtype_of(x) is not None)
    generator = np.random.default_rng(LEAK_PROBE_SEED)

    def leaking(cts: dict) -> list:
        probe = jaxcall.Caller(call.fn.fn, call.fn.outputs, wrt, cts)
        probe(**call.kwargs)
        return [name for name, g in (probe.grads or {}).items() if bool((fw.to_numpy(g) != 0).any())]
    try:
        with timelimit.limit(call.time_limit):
            returned = jaxcall.Caller(call.fn.fn, call.fn.outputs)(**call.kwargs)
            cts = {o: fw.jnp.asarray(generator.random(np.shape(x)) + 0.5) for o, x in returned.items()
                   if fw.dtype_of(x) is not None}
            if not wrt or not cts or not leaking(cts):
                return []
            return [(o, _leak(spec, o, name)) for o in cts for name in leaking({o: cts[o]})]
    except Exception:
        return []   # a function the probe cannot run: it cannot judge it


def _gradients(call: _Call, returned: dict, test: dict, dtype: str):
    """(gradients by input name, names of returned outputs that carry no gradient although
    their cotangent is nonzero); None for a values-only target."""
    spec, fw, inputs = call.spec, call.fw, call.inputs
    if call.target.framework == "jax":   # taken with the values, in the same compiled call
        if call.fn.grad_error is not None:
            raise call.fn.grad_error
        return call.fn.grads, []
    cotangents = {name: fw.array(v, dtype) for name, v in test["cotangents"].items() if name in returned}
    if call.target.framework == "torch":
        torch = fw.torch
        outs, cts, detached = [], [], []
        for name, ct in cotangents.items():
            out = returned[name]
            if isinstance(out, torch.Tensor) and out.requires_grad:
                outs.append(out)
                cts.append(ct.to(out.dtype).reshape(out.shape))
            elif bool((ct != 0).any()):
                detached.append(name)
        names = spec.grads_of(inputs)
        wrt = [inputs[name] for name in names]
        got = torch.autograd.grad(outs, wrt, cts, allow_unused=True) if outs else [None] * len(wrt)
        return {name: (g if g is not None else torch.zeros_like(inputs[name]))
                for name, g in zip(names, got)}, detached
    vjp = call.target.vjps.get(spec.id)
    if vjp is None:
        return None
    ct_arg = cotangents if len(spec.outputs) > 1 else cotangents[spec.outputs[0]]
    return vjp(ct_arg, **call.kwargs), []


# --- the run ----------------------------------------------------------------------------

def run_case(target: Target, case: VectorCase, *, dtypes=None, device: str | None = None,
             tolerances: compare.Tolerances | None = None, time_limit: float = 30.0,
             as_paper: bool = False, frameworks: dict | None = None, options: tuple = (),
             observe=None) -> list[CaseResult]:
    """Judge one vector on a target: one result per dtype (and device) it runs in, as the case
    plan has them. ``options`` are the command-line options that changed the verdict, for the
    repro line. ``observe(res, label, got)``, when given, sees every output and gradient
    compared (float64 numpy)."""
    asked = plan.Asked(tuple(dtypes or ()), tolerances or compare.Tolerances({}), as_paper)
    plans = plan.plan(target, case, asked)
    devices = [device] if device else list(target.devices[:1])
    if plans[0].dtype == "-":
        p = plans[0]
        return [CaseResult(case.uid, case.objective, target.name, "-", "-", p.status, case.flags, message=p.why,
                           result=case.result, group=case.group,
                           **({} if p.conventions is None else {"conventions": p.conventions}))]
    frameworks = frameworks or {d: _Framework(target.framework, d) for d in devices}
    results = []
    for dev in devices:
        for p in plans:
            started = time.perf_counter()
            r = _judge(target, p, dev, frameworks[dev], time_limit, options, observe)
            if "timeout" in r.probes:
                # Once more, at once and alone, before it is reported: a first call's one-time
                # work (a torch.compile warm-up, a lazy import or build) is not the case's cost.
                r = _judge(target, p, dev, frameworks[dev], time_limit, options, observe)
                if "timeout" in r.probes:
                    r.message += " (twice)"
            r.seconds = time.perf_counter() - started
            apply_known(r, p.known)
            results.append(r)
    return results


def apply_known(r: CaseResult, reason: str | None) -> None:
    """A declared known failure turns fail/error into xfail, and a pass into xpass (the
    declaration is stale). Validation results keep their status and carry the reason."""
    if not reason or r.message.startswith(MISSING_MODULE):   # the environment's error, not the library's
        return
    r.known = reason
    if r.axis == "conformance" and r.status in ("fail", "error"):
        r.status = "xfail"
    elif r.axis == "conformance" and r.status == "pass":
        r.status, r.message = "xpass", f"passes although declared a known failure ({reason}): remove the declaration"


def run(target: Target, vs: VectorSet, *, objective="*", dtypes=None, device: str | None = None,
        uids=None, tolerances: compare.Tolerances | None = None, time_limit: float = 30.0,
        as_paper: bool = False, progress=None, options: tuple = (), observe=None) -> list[CaseResult]:
    """Judge every selected vector on the target. ``objective``: a glob or a list of globs.
    ``observe``: see :func:`run_case`."""
    globs = [objective] if isinstance(objective, str) else list(objective)
    # An objective the target lacks is reported (unsupported) only when it was asked for by
    # name; a glob selects among the objectives the target implements.
    cases = [c for c in vs.cases() if (not uids or c.uid in uids)
             and (c.objective in globs or (c.objective in target.objectives
                                           and any(fnmatch.fnmatchcase(c.objective, g) for g in globs)))]
    devices = [device] if device else list(target.devices[:1])
    frameworks = {d: _Framework(target.framework, d) for d in devices}
    results = []
    with single_threaded(target.framework):
        for i, case in enumerate(cases):
            if progress:
                progress(i, len(cases))
            results += run_case(target, case, dtypes=dtypes, device=device, tolerances=tolerances,
                                time_limit=time_limit, as_paper=as_paper, frameworks=frameworks, options=options,
                                observe=observe)
    if progress:
        progress(len(cases), len(cases))
    return results




@contextlib.contextmanager
def single_threaded(framework: str):
    """Vectors are small: torch's intra-op thread pool costs far more than it saves on them
    (a tiny logsigmoid takes ~30× longer with 2 threads on 2 cores). Restored afterwards."""
    if framework != "torch":
        yield
        return
    import torch
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)
