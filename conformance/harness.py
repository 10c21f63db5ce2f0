"""Run a target over the vectors and judge every case (DESIGN §6–§8).

Each case runs in every dtype that both the vector and the target support. A target that
raises, returns NaN or the wrong shape, mutates its inputs, answers differently on a second
call, or overruns the per-case time limit is reported with a message and the run goes on.

Two more misbehaviours are failures even on ``acceptable`` vectors, because no numerical
convention excuses them:
- dtype: a floating array output (or gradient) whose dtype is not the case's dtype (float32
  returned for float64 inputs loses half the digits even when the values happen to agree).
- gradient leak: for torch targets, the outputs of ``DETACHED`` objectives (stop-gradient
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
import signal
import threading
import time

import numpy as np

from conformance import catalog, compare
from conformance.numbers import decode_input
from conformance.results import CaseResult
from conformance.targets.target import Target
from conformance.vectors.load import VectorCase, VectorSet

# Objectives whose outputs are constants by definition: advantages (PPO eq. 7's Â is data) and
# the future KL cost (the sg(·) of Proximal KL's coefficient).
DETACHED = ("grpo.advantages", "proximal_kl.future_cost")


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float):
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise _Timeout()
    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


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

    def array(self, value, dtype: str, integer: bool = False, requires_grad: bool = False):
        data = np.asarray(decode_input(value), dtype=np.int64 if integer else np.float64)
        if self.name == "torch":
            t = self.torch.tensor(data, dtype=self.torch.int64 if integer else getattr(self.torch, dtype),
                                  device=self.device)
            return t.requires_grad_(True) if requires_grad else t
        if self.name == "cupy":
            return self.cupy.asarray(data if integer else data.astype(dtype))
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
        if isinstance(x, (np.ndarray, np.generic, float, int, bool)):
            return np.asarray(x, dtype=np.float64)
        raise TypeError(f"returned {type(x).__name__}, expected an array of the target's framework")

    def snapshot(self, inputs: dict) -> dict:
        return {k: self.to_numpy(v).copy() for k, v in inputs.items()}

    def dtype_of(self, x) -> str | None:
        """The name of a floating array's dtype ('float32', ...); None for anything else
        (Python scalars, integer or boolean arrays, non-arrays)."""
        if self.name == "torch" and isinstance(x, self.torch.Tensor):
            return str(x.dtype).removeprefix("torch.") if x.is_floating_point() else None
        dt = getattr(x, "dtype", None)
        if isinstance(x, (np.ndarray, np.generic)) or (self.name == "cupy" and isinstance(x, self.cupy.ndarray)):
            return np.dtype(dt).name if np.issubdtype(dt, np.floating) else None
        return None


def _expected(values) -> np.ndarray:
    return np.asarray(decode_input_strings(values), dtype=np.float64)


def decode_input_strings(x):
    if isinstance(x, list):
        return [decode_input_strings(v) for v in x]
    return float(x)


def _outputs(spec: catalog.Objective, returned) -> dict:
    if len(spec.outputs) == 1 and not isinstance(returned, dict):
        return {spec.outputs[0]: returned}
    if not isinstance(returned, dict):
        raise TypeError(f"returned {type(returned).__name__}; {spec.id} has outputs "
                        f"{', '.join(spec.outputs)}: return a dict by output name")
    missing = [o for o in spec.outputs if o not in returned]
    if missing:
        raise TypeError(f"returned dict lacks output(s) {', '.join(missing)}")
    return returned


def _repro(target: Target, case: VectorCase, dtype: str, device: str) -> str:
    cmd = f"lossproof check --target {target.spec or target.name} --uid {case.uid} --dtype {dtype}"
    return cmd + (f" --device {device}" if device != "cpu" else "")


# --- one case ---------------------------------------------------------------------------

def compare_output(res: CaseResult, failures: list, label: str, got: np.ndarray, want_strings,
                   tolerance: compare.CaseTolerance) -> None:
    """Judge one output (or gradient) against the exact values; records metrics in ``res``
    and appends a message to ``failures`` when it is out of tolerance."""
    w = _expected(want_strings)
    if got.shape != w.shape:
        failures.append(f"{label}: shape {got.shape}, expected {w.shape}")
        return
    if np.isnan(got).any() or (np.isinf(got) & ~np.isinf(w)).any():
        failures.append(f"{label}: non-finite value where the exact value is finite")
    m = tolerance.measure(label, got, w)
    res.outputs[label] = m.as_dict()
    if not m.passed and res.worst is None:
        res.worst = {"output": label, "index": list(m.worst_index), "got": m.got, "want": m.want,
                     "tol": m.tol, "ulps": m.max_ulp}
    if not m.passed:
        failures.append(f"{label}: error {m.max_abs:.3g} > tolerance {m.tol:.3g} "
                        f"(got {m.got!r}, want {m.want!r} at {list(m.worst_index)})")


def _judge(target: Target, case: VectorCase, dtype: str, device: str, tolerances: compare.Tolerances,
           time_limit: float, fw: _Framework) -> CaseResult:
    spec = catalog.get(case.objective)
    test = case.test
    res = CaseResult(case.uid, case.objective, target.name, dtype, device, "pass", test["flags"],
                     repro=_repro(target, case, dtype, device), result=test["result"])
    fn = target.objectives[case.objective]
    autograd = target.framework == "torch"
    kinds = {i.name: i.kind for i in spec.inputs}
    try:
        inputs = {name: fw.array(value, dtype, integer=kinds.get(name) == "int",
                                 requires_grad=autograd and name in spec.grads and test["result"] != "invalid")
                  for name, value in test["inputs"].items()}
    except (TypeError, ValueError, OverflowError) as err:
        res.status, res.message = "skip", f"inputs not representable on this backend: {err}"
        return res
    kwargs = {**inputs, **case.conventions, **test["params"]}
    before = fw.snapshot(inputs)

    if test["result"] == "invalid":
        try:
            with _time_limit(time_limit):
                fn(**kwargs)
        except _Timeout:
            res.status, res.message = "error", f"exceeded the {time_limit:g} s time limit"
        except Exception:
            pass
        else:
            res.status, res.message = "fail", f"accepted invalid input ({test['comment']}); expected: {test['error']}"
        return res

    try:
        with _time_limit(time_limit):
            returned = _outputs(spec, fn(**kwargs))
            again = _outputs(spec, fn(**kwargs))
    except _Timeout:
        res.status, res.message = "error", f"exceeded the {time_limit:g} s time limit"
        return res
    except Exception as err:
        res.status, res.message = "error", f"raised {type(err).__name__}: {str(err)[:300]}"
        return res

    after = fw.snapshot(inputs)
    for name in inputs:
        if not np.array_equal(before[name], after[name], equal_nan=True):
            res.status, res.message = "fail", f"mutated its input {name!r} in place"
            return res

    tolerance = tolerances.for_case(spec, test, dtype)
    failures = []
    hard = []   # failures that no 'acceptable' flag excuses (dtype, gradient leak)

    def check(label, got, want_strings):
        try:
            g = fw.to_numpy(got)
        except TypeError as err:
            failures.append(f"{label}: {err}")
            return
        got_dtype = fw.dtype_of(got)
        if got_dtype is not None and got_dtype != dtype:
            hard.append(f"{label}: dtype {got_dtype}, expected {dtype} (the inputs' dtype)")
        compare_output(res, failures, label, g, want_strings, tolerance)

    for name in spec.outputs:
        check(name, returned[name], test["expected"][name])
        try:
            a, b = fw.to_numpy(returned[name]), fw.to_numpy(again[name])
        except TypeError:
            continue  # already reported by check()
        if a.shape != b.shape or not np.array_equal(a, b, equal_nan=True):
            failures.append(f"{name}: a second call on the same inputs returned different values")

    if test.get("grads"):
        try:
            with _time_limit(time_limit):
                grads = _gradients(target, spec, fw, fn, kwargs, inputs, returned, test, dtype)
        except _Timeout:
            grads, msg = None, f"gradient exceeded the {time_limit:g} s time limit"
        except Exception as err:
            grads, msg = None, f"gradient raised {type(err).__name__}: {str(err)[:300]}"
        if grads is None and target.framework != "torch" and case.objective not in target.vjps:
            pass  # a values-only target: gradients are not checked
        elif grads is None:
            res.status, res.message = "error", msg
            return res
        else:
            for name in spec.grads:
                check(f"grad:{name}", grads[name], test["grads"][name])

    if autograd and case.objective in DETACHED:
        hard += _leaks(fw, fn, kwargs, inputs, kinds, spec, time_limit)
    if failures:
        res.status = "pass" if test["result"] == "acceptable" else "fail"
        res.message = ("acceptable difference: " if res.status == "pass" else "") + "; ".join(failures)
    if hard:
        res.status, res.message = "fail", "; ".join(hard + failures)
    return res


def _leaks(fw, fn, kwargs, inputs, kinds, spec, time_limit) -> list:
    """Messages for the outputs of a DETACHED objective that carry a nonzero gradient to a
    floating input (one extra call with every floating input requiring grad)."""
    torch = fw.torch
    probe = {name: (t.detach().clone().requires_grad_(True) if kinds.get(name) == "float" and t.is_floating_point()
                    else t) for name, t in inputs.items()}
    leaves = {name: t for name, t in probe.items() if t.requires_grad}
    try:
        with _time_limit(time_limit):
            returned = _outputs(spec, fn(**{**kwargs, **probe}))
            out = []
            for oname in spec.outputs:
                o = returned.get(oname)
                if not (isinstance(o, torch.Tensor) and o.requires_grad):
                    continue
                grads = torch.autograd.grad(o, list(leaves.values()), torch.ones_like(o), allow_unused=True)
                for iname, g in zip(leaves, grads):
                    if g is not None and bool((g != 0).any()):
                        out.append(f"{oname}: leaks gradient to input {iname!r} "
                                   f"({spec.id} declares its outputs constant: detach them)")
            return out
    except Exception:
        return []   # a target that cannot run on inputs requiring grad: the probe cannot judge it


def _gradients(target, spec, fw, fn, kwargs, inputs, returned, test, dtype):
    cotangents = {name: fw.array(v, dtype) for name, v in test["cotangents"].items()}
    if target.framework == "torch":
        torch = fw.torch
        outs, cts = [], []
        for name, ct in cotangents.items():
            out = returned[name]
            if isinstance(out, torch.Tensor) and out.requires_grad:
                outs.append(out)
                cts.append(ct.to(out.dtype).reshape(out.shape))
        wrt = [inputs[name] for name in spec.grads]
        if outs:
            got = torch.autograd.grad(outs, wrt, cts, allow_unused=True)
        else:
            got = [None] * len(wrt)
        return {name: (g if g is not None else torch.zeros_like(inputs[name]))
                for name, g in zip(spec.grads, got)}
    vjp = target.vjps.get(spec.id)
    if vjp is None:
        return None
    ct_arg = cotangents if len(spec.outputs) > 1 else cotangents[spec.outputs[0]]
    return vjp(ct_arg, **kwargs)


# --- the run ----------------------------------------------------------------------------

def run_case(target: Target, case: VectorCase, *, dtypes=None, device: str | None = None,
             tolerances: compare.Tolerances | None = None, time_limit: float = 30.0,
             as_paper: bool = False, frameworks: dict | None = None) -> list[CaseResult]:
    """Judge one vector on a target: one result per dtype (and device) it runs in."""
    tolerances = tolerances or compare.Tolerances({})
    devices = [device] if device else list(target.devices[:1])
    frameworks = frameworks or {d: _Framework(target.framework, d) for d in devices}
    base = dict(uid=case.uid, objective=case.objective, target=target.name, flags=case.flags, result=case.result)
    if case.objective not in target.objectives:
        return [CaseResult(dtype="-", device="-", status="unsupported",
                           message="the target does not implement this objective", **base)]
    declared = Target(target.name, target.framework, target.objectives, {} if as_paper else target.conventions)
    if not declared.accepts(case.objective, case.conventions):
        return [CaseResult(dtype="-", device="-", status="skip",
                           message="conventions differ from the target's declaration", **base)]
    run_dtypes = [d for d in case.test["dtypes"] if d in target.dtypes and (not dtypes or d in dtypes)]
    if not run_dtypes:
        return [CaseResult(dtype="-", device="-", status="skip",
                           message="no dtype shared by the vector, the target and --dtype", **base)]
    results = []
    for dev in devices:
        for dt in run_dtypes:
            started = time.perf_counter()
            r = _judge(target, case, dt, dev, tolerances, time_limit, frameworks[dev])
            r.seconds = time.perf_counter() - started
            results.append(r)
    return results


def run(target: Target, vs: VectorSet, *, objective: str = "*", dtypes=None, device: str | None = None,
        uids=None, tolerances: compare.Tolerances | None = None, time_limit: float = 30.0,
        as_paper: bool = False, progress=None) -> list[CaseResult]:
    cases = [c for c in vs.cases(objective) if not uids or c.uid in uids]
    devices = [device] if device else list(target.devices[:1])
    frameworks = {d: _Framework(target.framework, d) for d in devices}
    results = []
    with single_threaded(target.framework):
        for i, case in enumerate(cases):
            if progress:
                progress(i, len(cases))
            results += run_case(target, case, dtypes=dtypes, device=device, tolerances=tolerances,
                                time_limit=time_limit, as_paper=as_paper, frameworks=frameworks)
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
