"""The stationary-policy theorem as a conformance probe (DESIGN §3: the probe stands on the
targets and on refimpl.exact._tree).

Source: the stationary-policy theorem of Proximal KL (Bai, Yao, Zhang), as summarised in
[proximal-kl-summary] and derived in FRPO (arXiv 2601.10201), reconstructed in refimpl/exact/_tree.py.

For a target implementing ``proximal_kl.loss`` or ``grpo.loss`` (ours or a third party's), on a
token tree: every complete sequence y is fed to the target as its own minibatch (B = 1, padded
to the horizon H with the mask), with the log-probabilities of its tokens under π (the policy
whose update is measured), under the behaviour policy μ that "sampled" it and under π_ref, and
the exact group-relative advantage A = r(y) − E_μ[r] (``tabular``'s baseline='mean'). The
target's gradient g_t = ∂L(y)/∂logp_t (autograd for torch targets, the declared VJP for NumPy
/ CuPy ones) is chained to the softmax logits θ_s of π(·|s) (∂log π(a|s)/∂θ_s = e_a − π(·|s))
and summed with the weights μ(y):

    Δθ_s = −Σ_y μ(y)·(1/c_y)·Σ_{t: s_t = s} g_t·(e_{y_t} − π(·|s)).

Why one call per sequence. With B = 1 every aggregation mode is the token sum of the sequence
times a known positive factor c_y (token-mean and seq-mean-token-mean: 1/|y|; seq-mean-token-sum:
1; seq-mean-token-sum-norm: 1/norm_length, the padded H by default), so dividing it out gives
the per-sequence token sum whatever mode the target uses. Weighting by μ(y) afterwards is exact
(a batch in which sequences appear in proportion to μ(y) would need rational weights), and the
result is the large-minibatch limit of the token mean, Σ_y μ(y)·Σ_t ∇ℓ_t / E_μ|y|, up to the
constant 1/E_μ|y| — exactly what ``_tree.expected_update`` computes. What a sequence-level
mean does instead (weights 1/|y|, DeepSeekMath eq. 3's 1/|o_i|) is reported separately as
``minibatch_residual_at_optimum``: on trees with variable lengths it moves the rest point too.

The result is compared with ``_tree.expected_update`` of the matching rule, at π* and at a
generic policy (so that agreement is tested where the update is not zero):
``proximal_kl.loss`` → 'proximal_kl' (with ``future_clip`` → 'future_clipped', ``future_window``
→ 'future_window'); ``grpo.loss`` (k3) → 'grpo_k3', or 'grpo_k3_ratio_weighted' with
``kl_ratio_weight``. GRPO's clip is opened (ε_low, ε_high chosen so that every ratio π/μ of
both policies lies strictly inside the band) so that the probe measures the KL term, not the
clip; with ``behavior='on-policy'`` (μ = π) the rules are the ``*_on_policy`` ones.
"""
from __future__ import annotations

import json
from typing import Callable, Iterable

import mpmath
import numpy as np

from lossproof.conformance import catalog
from lossproof.conformance.results import not_implemented
from lossproof.conformance.targets import ANY, Target, TargetError, jaxcall, load
from lossproof.refimpl import validate
from lossproof.refimpl.exact import _fixed_point, _tree, mp

OBJECTIVES = ("proximal_kl.loss", "grpo.loss")
ON_POLICY = "on-policy"
GENERIC_SEED = 20260111          # the generic policy π at which agreement is also checked
EXACT_DPS = 30                   # the exact updates, far beyond float64
TOLERANCES = {"float64": 1e-10, "float32": 1e-4}
UNSUPPORTED_PARAMS = {
    "proximal_kl.loss": {"ratio_clip": "the clipped surrogate has no exact population rule",
                         "ratio_cap": "proximal_kl.loss caps like torch.clamp (no gradient above the "
                                      "cap), tabular's ratio_capped truncates a detached weight"},
    "grpo.loss": {"eps_low": "the probe opens the clip itself", "eps_high": "the probe opens the clip itself",
                  "dual_clip": "the probe opens the clip itself", "kl_clamp": "no exact rule for a clamped KL"},
}


def _mode_factor(mode: str, n_tokens: int, padded: int, norm_length) -> float:
    """c_y: the B = 1 aggregate of a sequence of n tokens divided by its token sum."""
    if mode in ("token-mean", "seq-mean-token-mean"):
        return 1.0 / n_tokens
    if mode == "seq-mean-token-sum":
        return 1.0
    if mode == "seq-mean-token-sum-norm":
        return 1.0 / (padded if norm_length is None else float(norm_length))
    raise validate.InputError(f"aggregation: unknown mode {mode!r}")


def _minibatch_weight(mode: str, n_tokens: int) -> float:
    """The weight a sequence gets in a large minibatch under ``mode``, relative to its token
    sum and up to a constant: 1/|y| for the sequence mean of token means, 1 otherwise."""
    return 1.0 / n_tokens if mode == "seq-mean-token-mean" else 1.0


def _as_target(target, objective):
    if isinstance(target, Target):
        return target
    if isinstance(target, str):
        return load(target)
    if callable(target):
        if objective not in OBJECTIVES:
            raise validate.InputError(f"objective: a bare callable needs objective= one of {', '.join(OBJECTIVES)}")
        return Target(getattr(target, "__name__", "callable"), "torch", {objective: target}, ANY)
    raise TargetError(f"probe: cannot use {type(target).__name__} as a target")


class _Caller:
    """One B = 1 call of the target with gradient ∂L/∂logp, in the target's framework."""

    def __init__(self, target: Target, oid: str, dtype: str, device: str):
        self.target, self.oid, self.fn = target, oid, target.objectives[oid]
        self.dtype, self.device = dtype, device
        if target.framework == "torch":
            import torch
            self.torch = torch
        elif target.framework == "jax":   # the gradient is jax.vjp of the function (targets.jaxcall)
            if refusal := jaxcall.x64_refusal():
                raise TargetError(f"{target.name}: {refusal}")
            self.jax, self.jnp = jaxcall.jax_modules()
        elif oid not in target.vjps:
            raise TargetError(f"{target.name}: {oid} needs a VJP ('vjps') for a {target.framework} target "
                              "(the probe measures gradients)")
        elif target.framework == "cupy":
            import cupy
            self.cupy = cupy

    def _array(self, x):
        x = np.asarray(x, dtype=np.float64)
        if self.target.framework == "torch":
            return self.torch.tensor(x, dtype=getattr(self.torch, self.dtype), device=self.device)
        if self.target.framework == "cupy":
            return self.cupy.asarray(x.astype(self.dtype))
        if self.target.framework == "jax":
            return self.jnp.asarray(x, dtype=self.dtype)
        return x.astype(self.dtype)

    def _numpy(self, x) -> np.ndarray:
        if self.target.framework == "torch" and isinstance(x, self.torch.Tensor):
            return x.detach().to("cpu", self.torch.float64).numpy()
        if self.target.framework == "cupy":
            return self.cupy.asnumpy(x).astype(np.float64)
        return np.asarray(x, dtype=np.float64)

    def grad(self, inputs: dict, params: dict) -> np.ndarray:
        args = {k: self._array(v) for k, v in inputs.items()}
        if self.target.framework == "torch":
            args["logp"].requires_grad_(True)
            out = self.fn(**args, **params)
            if isinstance(out, dict):
                out = out["loss"]
            if not isinstance(out, self.torch.Tensor) or out.numel() != 1:
                raise TargetError(f"{self.target.name}: {self.oid} returned {type(out).__name__}, "
                                  "expected a scalar tensor")
            if not out.requires_grad:
                return np.zeros(args["logp"].shape)
            (g,) = self.torch.autograd.grad(out.reshape(()), args["logp"], allow_unused=True)
            return np.zeros(args["logp"].shape) if g is None else self._numpy(g)
        if self.target.framework == "jax":
            caller = jaxcall.Caller(self.fn, _loss_only, ("logp",), {"loss": self._array(1.0).reshape(())})
            caller(**args, **params)
            if caller.grad_error is not None:
                raise caller.grad_error
            return self._numpy(caller.grads["logp"])
        got = self.target.vjps[self.oid](self._array(1.0).reshape(()), **args, **params)
        return self._numpy(got["logp"] if isinstance(got, dict) else got)


def _loss_only(out) -> dict:
    """A JAX target's loss as the probe differentiates it: the primary output of a dict, or the value."""
    return {"loss": out["loss"] if isinstance(out, dict) else out}


def _f(x) -> float:
    return float(x)


def _rho_range(tree, policies, mu):
    lo, hi = mpmath.inf, mp.ZERO
    for pi in policies:
        for s in _tree.prefixes(tree):
            for a in range(tree.vocab):
                r = pi[s][a] / mu[s][a]
                lo, hi = min(lo, r), max(hi, r)
    return lo, hi


def _rule_for(oid: str, params: dict) -> tuple[str, dict]:
    for name, why in UNSUPPORTED_PARAMS[oid].items():
        if params.get(name) is not None:
            raise validate.InputError(f"params: {name} is not supported by the probe ({why})")
    if oid == "proximal_kl.loss":
        if params.get("future_clip") is not None and params.get("future_window") is not None:
            raise validate.InputError("params: future_clip and future_window together have no exact rule")
        if params.get("future_clip") is not None:
            return "future_clipped", {"future_clip": params["future_clip"]}
        if params.get("future_window") is not None:
            return "future_window", {"future_window": int(params["future_window"])}
        return "proximal_kl", {}
    if params.get("kl_kind", "k3") != "k3":
        raise validate.InputError(f"params: kl_kind {params['kl_kind']!r} has no exact rule (k3 only)")
    return ("grpo_k3_ratio_weighted" if params.get("kl_ratio_weight") else "grpo_k3"), {}


def probe(target, tree="worked-v2h2", beta=None, behavior=None, objective: str | None = None,
          params: dict | None = None, dtype: str = "float64", device: str = "cpu",
          tol: float | None = None) -> dict:
    """Probe one objective of ``target`` on one tree (module docstring).

    ``target``: a ``Target``, a target spec ('torch', 'pkg.mod:NAME', 'file.py:NAME') or a bare
    torch callable (then ``objective`` is required). ``tree``: a built-in tree name or a
    ``_tree.Tree``; ``beta`` overrides the tree's β (the target receives it as ``beta``);
    ``behavior``: μ as a policy dict (default the tree's), or 'on-policy' (μ = π);
    ``objective``: 'proximal_kl.loss' or 'grpo.loss' (default: the first the target has);
    ``params``: further keyword arguments for the target (aggregation, kl_ratio_weight,
    future_clip, future_window, ...); ``tol``: agreement and stationarity tolerance, relative to
    max(1, scale) where scale is the largest component of the exact update at the generic
    policy (default 1e-10 in float64, 1e-4 in float32).

    Returns a JSON-ready dict: target, objective, rule, tree, beta, behavior, dtype, device,
    params (as passed), aggregation, max_abs_diff (target vs exact over both policies), scale,
    matches, residual_at_optimum (max |Δθ| of the target's update at π*), exact_residual_at_optimum,
    stationary (residual ≤ tol·max(1, scale)), expected_stationary (the theorem's claim for the
    rule), minibatch_residual_at_optimum (with sequence-mean weights when the aggregation is
    seq-mean-token-mean), worst (where the largest disagreement is), tol."""
    tgt = _as_target(target, objective)
    oid = objective or next((o for o in OBJECTIVES if o in tgt.objectives), None)
    if oid not in OBJECTIVES:
        raise validate.InputError(f"objective: the probe needs one of {', '.join(OBJECTIVES)}, got {oid!r}")
    if oid not in tgt.objectives:
        raise TargetError(f"{tgt.name}: does not implement {oid}")
    if dtype not in TOLERANCES:
        raise validate.InputError(f"dtype: choose from {', '.join(TOLERANCES)}, got {dtype!r}")
    tol = TOLERANCES[dtype] if tol is None else float(tol)
    tr = _tree.BUILTIN_TREES.get(tree) if isinstance(tree, str) else tree
    if not isinstance(tr, _tree.Tree):
        raise validate.InputError(f"tree: unknown tree {tree!r}; built-in: {', '.join(_tree.BUILTIN_TREES)}")
    _tree.check_tree(tr)
    prm = dict(params or {})
    if "beta" in prm:
        raise validate.InputError("params: pass beta as beta=, not in params")
    on_policy = isinstance(behavior, str) and behavior == ON_POLICY
    if isinstance(behavior, str) and not on_policy:
        raise validate.InputError(f"behavior: a policy dict or {ON_POLICY!r}, got {behavior!r}")
    rule, rule_params = _rule_for(oid, prm)
    if on_policy:
        rule += "_on_policy"
    spec = catalog.get(oid)
    mode = prm.get("aggregation", spec.defaults["aggregation"])
    norm_length = prm.get("norm_length")

    with mp.precision(EXACT_DPS), mpmath.workdps(EXACT_DPS):
        b = _tree.num(tr.beta if beta is None else beta, "beta")
        validate.positive("beta", b)
        star = _tree.optimum(tr, beta=b)["policy"]
        generic = _tree.policy(tr, _tree.random_behavior(tr, GENERIC_SEED))
        mu_fixed = None if on_policy else _tree.policy(tr, tr.behavior if behavior is None else behavior, "behavior")
        if oid == "grpo.loss":
            lo = hi = None
            for pi in (star, generic):
                a, z = _rho_range(tr, [pi], pi if on_policy else mu_fixed)
                lo = a if lo is None else min(lo, a)
                hi = z if hi is None else max(hi, z)
            # every ratio strictly inside [1 − ε_low, 1 + ε_high]: the clip never binds
            prm.update(eps_low=_f(1 - lo / 2), eps_high=_f(2 * hi))
        exact = {}
        for label, pi in (("optimum", star), ("generic", generic)):
            exact[label] = _tree.expected_update(tr, pi, mu=mu_fixed, beta=b, rule=rule,
                                                   params=rule_params or None)
        claim = _tree.unbiased_on(tr, rule, rule_params or None)[0]
        # the rows fed to the target: every sequence, its log-probs under π, μ, π_ref
        ref = _tree.policy(tr, tr.ref, "tree.ref")
        rewards = {y: _tree.num(tr.rewards[y]) for y in _tree.leaves(tr)}
        runs = {}
        for label, pi in (("optimum", star), ("generic", generic)):
            mu = pi if on_policy else mu_fixed
            weights = dict(_tree.sequences(tr, mu))
            baseline = mpmath.fsum(weights[y] * rewards[y] for y in rewards)
            rows = []
            for y in _tree.leaves(tr):
                path = [(y[:t], y[t]) for t in range(len(y))]
                rows.append({"y": y, "weight": weights[y], "adv": _f(rewards[y] - baseline),
                             "logp": [_f(mpmath.log(pi[s][a])) for s, a in path],
                             "mu": [_f(mpmath.log(mu[s][a])) for s, a in path],
                             "ref": [_f(mpmath.log(ref[s][a])) for s, a in path]})
            runs[label] = (pi, rows)

    caller = _Caller(tgt, oid, dtype, device)
    H, V = tr.horizon, tr.vocab
    behavior_name = {"proximal_kl.loss": "behavior_logp", "grpo.loss": "old_logp"}[oid]
    call_params = {**prm, "beta": _f(b)}
    updates, minibatch = {}, {}
    for label, (pi, rows) in runs.items():
        pif = {s: np.array([_f(v) for v in pi[s]]) for s in _tree.prefixes(tr)}
        upd = {s: np.zeros(V) for s in pif}
        mb = {s: np.zeros(V) for s in pif}
        for row in rows:
            n = len(row["y"])
            pad = [0.0] * (H - n)
            inputs = {"logp": [row["logp"] + pad], behavior_name: [row["mu"] + pad],
                      "ref_logp": [row["ref"] + pad], "advantages": [row["adv"]],
                      "mask": [[1.0] * n + pad]}
            g = caller.grad(inputs, call_params).reshape(-1)
            c = _mode_factor(mode, n, H, norm_length)
            w = _f(row["weight"])
            for t in range(n):
                s, a = row["y"][:t], row["y"][t]
                step = -(w / c) * g[t] * (np.eye(V)[a] - pif[s])
                upd[s] += step
                mb[s] += _minibatch_weight(mode, n) * step
        updates[label], minibatch[label] = upd, mb

    scale = max(abs(_f(v)) for row in exact["generic"].values() for v in row)
    bound = tol * max(1.0, scale)
    worst, max_diff = None, 0.0
    for label in runs:
        for s, row in exact[label].items():
            for a, want in enumerate(row):
                d = abs(updates[label][s][a] - _f(want))
                if worst is None or d > max_diff:
                    max_diff = d
                    worst = {"policy": label, "prefix": list(s), "token": a,
                             "got": float(updates[label][s][a]), "want": _f(want)}
    residual = max(float(np.max(np.abs(r))) for r in updates["optimum"].values())
    mb_res = max(float(np.max(np.abs(r))) for r in minibatch["optimum"].values())
    return {
        "target": tgt.name, "objective": oid, "rule": rule, "tree": tr.name, "beta": _f(b),
        "behavior": ON_POLICY if on_policy else ("tree" if behavior is None else "given"),
        "dtype": dtype, "device": device,
        "params": {k: v for k, v in call_params.items()}, "aggregation": mode,
        "max_abs_diff": max_diff, "scale": scale, "matches": bool(max_diff <= bound),
        "residual_at_optimum": residual,
        "exact_residual_at_optimum": _f(_fixed_point.residual(exact["optimum"])),
        "stationary": bool(residual <= bound), "expected_stationary": bool(claim),
        "minibatch_residual_at_optimum": mb_res, "worst": worst, "tol": tol,
    }


def variants(target: Target, objective: str) -> list[dict]:
    """The parameter sets worth probing for ``objective`` on ``target``, one per declared
    combination of conventions (a declaration may be a value, a list, ``"*"`` or a list of
    combinations, as for the harness): its first aggregation, and for grpo.loss the k3 estimator
    with each kl_ratio_weight it declares (both for ``"*"``). Every variant names the conventions
    it sets, so the target never falls back to a default of its own. A combination without k3
    has no exact rule and is left out; one whose KL is always clamped is returned with a
    ``refused`` reason instead of being probed against the unclamped rule."""
    spec = catalog.get(objective)
    declared = {} if target.conventions == ANY else target.declared(objective)
    out = []
    for combo in declared if isinstance(declared, list) else [declared]:
        def values(name, fallback):
            value = ANY if target.conventions == ANY else combo.get(name, spec.defaults[name])
            if value == ANY:
                return fallback
            return list(value) if isinstance(value, (list, tuple)) else [value]
        base = {"aggregation": values("aggregation", [spec.defaults["aggregation"]])[0]}
        if objective == "proximal_kl.loss":
            out.append(base)
            continue
        if "k3" not in values("kl_kind", ["k3"]):
            continue
        base["kl_kind"] = "k3"
        clamps = values("kl_clamp", [None])
        if None not in clamps:
            out.append({**base, "kl_clamp": clamps[0],
                        "refused": f"declares kl_clamp={clamps[0]} only: the probe has no exact rule for a clamped "
                                   "KL (declare None among its values to probe the unclamped update)"})
            continue
        base["kl_clamp"] = None
        out += [{**base, "kl_ratio_weight": bool(w)} for w in values("kl_ratio_weight", [False, True])]
    return list({json.dumps(v, sort_keys=True): v for v in out}.values())


def probe_all(target, trees: Iterable | None = None, behavior=None, dtype: str = "float64",
              device: str = "cpu", objectives: Iterable[str] | None = None,
              progress: Callable[[int, int], None] | None = None) -> list[dict]:
    """:func:`probe` for every objective of OBJECTIVES the target implements, every variant
    (:func:`variants`) and every tree (default: the built-in trees)."""
    tgt = _as_target(target, None)
    for o in objectives or ():
        if o not in OBJECTIVES:
            raise validate.InputError(f"objectives: the probe knows {', '.join(OBJECTIVES)}, got {o!r}")
    oids = [o for o in (objectives or OBJECTIVES) if o in tgt.objectives]
    if not oids:
        raise TargetError(f"{tgt.name}: implements none of {', '.join(objectives or OBJECTIVES)}")
    names = list(_tree.BUILTIN_TREES) if trees is None else list(trees)
    jobs = [(o, v, t) for o in oids for v in variants(tgt, o) for t in names]
    out = []
    for i, (oid, params, tree) in enumerate(jobs):
        if progress:
            progress(i, len(jobs))
        if "refused" in params:
            out.append({"target": tgt.name, "objective": oid, "tree": tree, "params": params,
                        "refused": params["refused"]})
            continue
        try:
            out.append(probe(tgt, tree=tree, behavior=behavior, objective=oid, params=params,
                             dtype=dtype, device=device))
        except NotImplementedError as err:   # unsupported here as in every runner: a line, not a traceback
            out.append({"target": tgt.name, "objective": oid, "tree": tree, "params": params,
                        "refused": not_implemented(err)})
    if progress:
        progress(len(jobs), len(jobs))
    return out
