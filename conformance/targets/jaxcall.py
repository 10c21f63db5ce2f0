"""How a ``framework: "jax"`` target's functions are called (DESIGN §8).

A JAX target's function takes ``jax.Array`` inputs under the catalog's keyword names and returns
its outputs as a torch target's does; the harness takes its gradients with ``jax.vjp`` of that
same function, with the cotangents the vectors carry, so a JAX target declares no ``vjps``.

- **float64.** JAX computes in float32 unless ``jax_enable_x64`` is on, and then silently makes a
  float64 array float32. ``x64_refusal`` turns it on for the process before the harness makes any
  array (and leaves it on: a later call, a diagnosis's rerun, must see the same dtypes), or
  refuses the target in one line where it cannot. The harness judges every output's dtype, so a
  function that narrows float64 to float32 itself fails (« narrower than the inputs' »).
- **Compiled once per signature.** Training runs a JAX loss under ``jax.jit``; so does the
  harness: a case's values and its vjp are one compiled function, traced once per signature —
  the arrays' shapes and dtypes, the conventions and the non-float parameters (static: they
  choose code paths and shapes) — and cached by ``jax.jit``. A float parameter (β, ε, a
  temperature) is traced as a weakly typed scalar, so one executable serves every value of it
  (a weak scalar does not widen bfloat16 inputs, as a Python float does not).
- **Functions that cannot be traced so.** A function that branches in Python on a float
  parameter (``if label_smoothing > 0``) is traced again with every parameter static (one
  executable per value); one that branches on an array's values (an input check that raises)
  runs as written, eagerly, its gradients by ``jax.vjp`` without ``jit``. Which of the three a
  call needs depends on the function and the call's signature only, never on the cases before.
- **In-place mutation** cannot happen to a ``jax.Array``; what the harness checks instead is
  that no input was donated (a deleted buffer: ``donate_argnums`` in the target's own ``jit``).
"""
from __future__ import annotations

import numbers

import numpy as np

from lossproof.refimpl import cache

INSTALL = "pip install 'lossproof[jax]' (or jax)"
# How a call is traced: float parameters traced, every parameter static, or not traced at all.
TRACED, STATIC, EAGER = "traced", "static", "eager"
_TIERS = (TRACED, STATIC, EAGER)
_tier_of: dict = {}      # {(function, signature): the first tier that traced it}
_compiled: dict = {}     # {(function, tier, output map, wrt, cotangent names): the jitted function}
# Each XLA CPU executable maps its own code pages; a run over every vector (about 170 shapes for
# grpo.loss alone, in four dtypes) kept them all and exhausted the process's memory maps
# (vm.max_map_count: « LLVM compilation error: Cannot allocate memory », then a crash, in a full
# tunix check). Past this many live signatures the compiled functions are dropped; a signature met
# again is compiled again, to the same executable, so a verdict never depends on what ran before.
MAX_LIVE_SIGNATURES = 256
_live: set = set()


def jax_modules():
    import jax
    import jax.numpy as jnp
    return jax, jnp


def x64_refusal() -> str | None:
    """Turn on ``jax_enable_x64`` for this process; why a JAX target cannot run here (JAX missing,
    the flag refused), in one line, or None."""
    try:
        jax, jnp = jax_modules()
    except ImportError:
        return f"framework 'jax' needs JAX, which is not installed ({INSTALL})"
    try:
        jax.config.update("jax_enable_x64", True)
        ok = jnp.zeros((), dtype=jnp.float64).dtype == jnp.float64
        _keep_compiled_on_disk(jax)
    except Exception as err:   # a JAX that refuses the flag: its own exception type
        return f"framework 'jax': cannot enable jax_enable_x64 for float64 cases ({type(err).__name__}: {err})"
    if not ok:
        return ("framework 'jax': jax_enable_x64 is on, yet a float64 array is made float32: "
                "float64 cases cannot run in this process")
    return None


def _keep_compiled_on_disk(jax):
    """XLA's compilations are most of a JAX run's time (about 19× a torch target's CPU time on a
    first run, 2× once compiled: benchmarks/jax_vs_torch.py); JAX's persistent cache keeps them in
    lossproof's cache directory, so a second process (the docs build, a rerun) compiles nothing it
    has compiled before. A cache the user configured is left as it is."""
    if jax.config.jax_compilation_cache_dir is None:
        jax.config.update("jax_compilation_cache_dir", str(cache.directory() / "jax"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


def _trace_errors(jax) -> tuple:
    """The errors of a function that cannot run under ``jit`` as called (a Python branch or a
    conversion on a traced value, a boolean mask index): it is then traced less, or run eagerly."""
    return jax.errors.JAXTypeError, jax.errors.JAXIndexError


def _is_float_param(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, numbers.Integral))


class Caller:
    """One case's call of a JAX function: ``caller(**kwargs)`` returns what the function returns
    (mapped by ``outputs``, a hashable function of the returned value) and keeps the vjp of the
    inputs ``wrt`` with the ``cotangents`` given (a dict by output name; outputs without one get
    zeros) in ``grads``, or the error that computing it raised in ``grad_error``. Without
    ``wrt``, values only."""

    def __init__(self, fn, outputs, wrt: tuple = (), cotangents: dict | None = None):
        self.jax, self.jnp = jax_modules()
        self.fn, self.outputs, self.wrt, self.cotangents = fn, outputs, tuple(wrt), cotangents or {}
        self.grads, self.grad_error = None, None

    def __call__(self, **kwargs):
        arrays = {k: v for k, v in kwargs.items() if isinstance(v, self.jax.Array)}
        rest = {k: v for k, v in kwargs.items() if k not in arrays}
        signature = (tuple((k, v.shape, str(v.dtype)) for k, v in arrays.items()),
                     tuple(sorted(rest.items(), key=lambda kv: kv[0])))
        key = (self.fn, self.outputs, self.wrt, tuple(self.cotangents), signature)
        try:
            hash(key)
        except TypeError:   # an unhashable function or parameter value cannot key a compiled function
            key = None
        tiers = _TIERS[_TIERS.index(_tier_of.get(key, TRACED)):] if key is not None else (EAGER,)
        self._keep_bounded(key)
        for tier in tiers:
            try:
                returned, grads, error = self._run(tier, arrays, rest)
            except _trace_errors(self.jax) if tier != EAGER else ():
                continue
            if key is not None:
                _tier_of[key] = tier
            self.grads, self.grad_error = grads, error
            return returned
        raise AssertionError("unreachable: the eager tier raises or returns")

    def _keep_bounded(self, key):
        """Count a signature as live; drop every compiled function first when the bound is reached."""
        if key is None or key in _live:
            return
        if len(_live) >= MAX_LIVE_SIGNATURES:
            self.jax.clear_caches()
            _compiled.clear()
            _live.clear()
        _live.add(key)

    def _run(self, tier: str, arrays: dict, rest: dict):
        floats = {k: v for k, v in rest.items() if tier == TRACED and _is_float_param(v)}
        static = tuple(sorted(((k, v) for k, v in rest.items() if k not in floats), key=lambda kv: kv[0]))
        if not self.wrt:
            return self._values(tier, arrays, floats, static), None, None
        try:
            returned, grads = self._with_vjp(tier, arrays, floats, static)
            return returned, grads, None
        except _trace_errors(self.jax) if tier != EAGER else ():
            raise
        except Exception as err:   # the values may stand where the vjp alone fails
            return self._values(tier, arrays, floats, static), None, err

    def _function(self, tier: str, with_vjp: bool):
        key = (self.fn, tier, self.outputs, self.wrt if with_vjp else (), tuple(self.cotangents) if with_vjp else ())
        if tier == EAGER or key not in _compiled:
            def values(arrays, floats, static):
                return self.outputs(self.fn(**arrays, **floats, **dict(static)))

            def values_and_vjp(arrays, floats, static, cotangents):
                def of(*diff):
                    return values({**arrays, **dict(zip(self.wrt, diff))}, floats, static)
                out, pull = self.jax.vjp(of, *(arrays[k] for k in self.wrt))
                cts = {name: self._cotangent(o, cotangents.get(name)) for name, o in out.items()}
                return out, dict(zip(self.wrt, pull(cts)))
            fn = values_and_vjp if with_vjp else values
            if tier == EAGER:
                return fn
            _compiled[key] = self.jax.jit(fn, static_argnums=(2,))
        return _compiled[key]

    def _values(self, tier, arrays, floats, static):
        return self.jax.block_until_ready(self._function(tier, False)(arrays, floats, static))

    def _with_vjp(self, tier, arrays, floats, static):
        out = self._function(tier, True)(arrays, floats, static, self.cotangents)
        return self.jax.block_until_ready(out)

    def _cotangent(self, out, ct):
        """The cotangent of one output: the vector's, in the output's dtype and shape; zeros where
        it has none (float0 for a non-floating output, which has no gradient)."""
        jax, jnp = self.jax, self.jnp
        if not jnp.issubdtype(out.dtype, jnp.inexact):
            return np.zeros(out.shape, dtype=jax.dtypes.float0)
        if ct is None:
            return jnp.zeros_like(out)
        return jnp.reshape(ct.astype(out.dtype), out.shape)
