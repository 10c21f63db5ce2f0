"""Ball arithmetic with reverse-mode differentiation: the machinery of the certified reference.

Why a tape. Every objective of the catalog is a composition of a few rigorous primitives
(+, −, ×, ÷, exp, log, log1p, expm1, sqrt and the numerically careful ``logsumexp``, ``k3``,
``log_sigmoid`` below). Writing each formula once and differentiating it mechanically makes
every gradient rigorous by construction: each local partial derivative is itself a ball that
encloses the true derivative, so the chain rule, evaluated in ball arithmetic, encloses the true
vector-Jacobian product. Hand-written gradient formulas would be a second, separately derived
formula per objective, i.e. a second place to be wrong.

A value is either a plain :class:`flint.arb` (a constant: an input that is not differentiated,
or anything computed from constants only) or a :class:`Var` recorded on the active
:class:`Tape`. The functions below accept both, so one formula serves a value-only call (plain
balls, no tape) and a gradient call.

Branches. Where a formula is piecewise (clip, clamp, min, hinge) the branch is decided by
:func:`sign`, which returns the sign of a ball only when the ball proves it: an exact zero is a
tie (decided by the objective's documented convention), a ball that straddles zero without
being zero raises :class:`Straddle`; the caller (``conformance.vectors.certify``) then raises
the working precision and starts over, and reports the vector as a kink it cannot decide if the
ball still straddles at the highest precision. Choices between two *identical* formulas (e.g.
the two forms of log σ(x), taken for numerical reasons) are made on midpoints: any choice is
correct, only the width of the ball differs.

Inputs are binary64 numbers and convert to balls without rounding (radius 0).
"""
from __future__ import annotations

import contextlib
import inspect
import math

from flint import arb, ctx

from lossproof.refimpl import validate

ZERO = arb(0)
ONE = arb(1)


class Straddle(ArithmeticError):
    """A branch cannot be decided at the working precision (the ball contains the kink)."""


@contextlib.contextmanager
def precision(bits: int):
    """Run with ``bits`` of working precision (python-flint's context), restoring it after."""
    saved = ctx.prec
    ctx.prec = bits
    try:
        yield
    finally:
        ctx.prec = saved


# {binary64 number: () -> ball}: numbers that stand for another real, e.g. 0.2 for the decimal
# 1/5 or -0.2231435513142097 for log(0.8) (see :func:`standing_for`).
_standing: dict = {}


@contextlib.contextmanager
def standing_for(reals: dict):
    """Within the block, each binary64 number in ``reals`` converts to the ball its function
    returns (formed at the working precision in effect) instead of to itself: an objective is
    evaluated at the reals a paper prints (0.8, log 0.8) rather than at their binary64 roundings,
    through the same formulas. Validation still sees the binary64 numbers."""
    saved = dict(_standing)
    _standing.update(reals)
    try:
        yield
    finally:
        _standing.clear()
        _standing.update(saved)


def ball(x) -> arb:
    """A binary64 number (or int) as an exact ball (or as the real it stands for, see
    :func:`standing_for`)."""
    if isinstance(x, int) and not isinstance(x, bool):
        return arb(x)
    v = float(x)
    return _standing[v]() if _standing and v in _standing else arb(v)


def mid_float(x) -> float:
    """The midpoint as a float (for formula choices only, never for a decision)."""
    return float(value(x).mid())


# --------------------------------------------------------------------------- the tape

class Tape:
    """The list of recorded nodes, in creation order (a topological order)."""

    def __init__(self):
        self.nodes: list[Var] = []

    def var(self, x) -> Var:
        """A differentiated input."""
        return Var(self, x if isinstance(x, arb) else ball(x), ())

    def backward(self, seeds) -> None:
        """Accumulate Σ cotangent·output into every node's ``grad``; ``seeds`` is a list of
        (output, cotangent ball); outputs that are constants contribute nothing."""
        for out, ct in seeds:
            if isinstance(out, Var):
                out.grad = ct if out.grad is None else out.grad + ct
        for node in reversed(self.nodes):
            if node.rule is not None:
                node.rule()
                continue
            g = node.grad
            if g is None:
                continue
            for parent, partial in node.parents:
                contribution = partial * g
                parent.grad = contribution if parent.grad is None else parent.grad + contribution


class Var:
    """A ball recorded on a tape with its parents and the partial derivatives towards them."""
    __slots__ = ("grad", "parents", "rule", "v")

    def __init__(self, tape: Tape, v: arb, parents, rule=None):
        self.v, self.parents, self.grad, self.rule = v, parents, None, rule
        tape.nodes.append(self)

    def gradient(self) -> arb:
        return ZERO if self.grad is None else self.grad

    def __add__(self, other):
        if isinstance(other, Var):
            return _node(self.v + other.v, ((self, ONE), (other, ONE)))
        return _node(self.v + other, ((self, ONE),))

    __radd__ = __add__

    def __sub__(self, other):
        if other is self:           # x − x ≡ 0: a constant (ball arithmetic would not know it)
            return ZERO
        if isinstance(other, Var):
            return _node(self.v - other.v, ((self, ONE), (other, -ONE)))
        return _node(self.v - other, ((self, ONE),))

    def __rsub__(self, other):
        return _node(other - self.v, ((self, -ONE),))

    def __neg__(self):
        return _node(-self.v, ((self, -ONE),))

    def __mul__(self, other):
        if isinstance(other, Var):
            return _node(self.v * other.v, ((self, other.v), (other, self.v)))
        return _node(self.v * other, ((self, arb(other)),))

    __rmul__ = __mul__

    def __truediv__(self, other):
        if isinstance(other, Var):
            q = self.v / other.v
            return _node(q, ((self, 1 / other.v), (other, -q / other.v)))
        return _node(self.v / other, ((self, 1 / arb(other)),))

    def __rtruediv__(self, other):
        q = other / self.v
        return _node(q, ((self, -q / self.v),))


def _node(v: arb, parents) -> Var:
    return Var(_ACTIVE[-1], v, tuple(parents))


_ACTIVE: list[Tape] = []


@contextlib.contextmanager
def recording():
    """A fresh tape for one gradient evaluation."""
    tape = Tape()
    _ACTIVE.append(tape)
    try:
        yield tape
    finally:
        _ACTIVE.pop()


def value(x) -> arb:
    """The ball of a Var or a constant."""
    return x.v if isinstance(x, Var) else x


def detach(x) -> arb:
    """Stop-gradient: the same ball, as a constant."""
    return value(x)


def _unary(x, v: arb, d: arb):
    return _node(v, ((x, d),)) if isinstance(x, Var) else v


# --------------------------------------------------------------------------- primitives

def exp(x):
    v = value(x).exp()
    return _unary(x, v, v)


def log(x):
    xv = value(x)
    return _unary(x, xv.log(), 1 / xv)


def log1p(x):
    xv = value(x)
    return _unary(x, xv.log1p(), 1 / (1 + xv))


def expm1(x):
    xv = value(x)
    return _unary(x, xv.expm1(), xv.exp() if isinstance(x, Var) else None)


def sqrt(x):
    v = value(x).sqrt()
    return _unary(x, v, 1 / (2 * v))


def absolute(x):
    """|x| with derivative sign(x), 0 at an exact zero (torch.abs's subgradient); a ball that
    straddles 0 without being 0 raises :class:`Straddle`."""
    s = sign(x)
    return _unary(x, value(x) if s >= 0 else -value(x), ball(s))


def square(x):
    xv = value(x)
    return _unary(x, xv * xv, 2 * xv)


def tanh(x):
    """tanh(x), derivative sech²(x) (the soft-capping s·tanh(z/s) of lm.cross_entropy)."""
    xv = value(x)
    return _unary(x, xv.tanh(), xv.sech() ** 2 if isinstance(x, Var) else None)


def fsum(terms):
    """Σ terms, one node for the whole sum (a sum of many terms stays cheap on the tape)."""
    total = ZERO
    parents = []
    for t in terms:
        if isinstance(t, Var):
            total += t.v
            parents.append((t, ONE))
        else:
            total += t
    return _node(total, parents) if parents else total


def _mag(v: arb) -> int:
    """An integer e with |v| < 2^e (v a nonzero ball not containing 0), for precision choices."""
    m = v.abs_upper()
    man, ex = m.man_exp()
    return int(ex) + int(man).bit_length()


def k3(ell):
    """ℓ + e^{−ℓ} − 1 (≥ 0): the summand of a KL written as Σ a·k3(log(a/b)) (and Schulman's k3
    of log r = −ℓ). Near ℓ = 0 the two terms cancel about log2(1/|ℓ|) bits: they are formed
    with that many extra bits, so the result keeps the working precision. Derivative
    1 − e^{−ℓ} = −expm1(−ℓ), exactly 0 at ℓ = 0 (so identical distributions give exact zeros)."""
    lv = value(ell)
    if lv.is_zero():
        return _unary(ell, ZERO, ZERO)
    extra = 16 + (max(0, -_mag(lv)) if not lv.contains(0) else ctx.prec)
    with precision(ctx.prec + extra):
        e = (-lv).expm1()
        v = lv + e
    return _unary(ell, +v, -e)


def log_sigmoid(x):
    """log σ(x) = −log1p(e^{−x}) (x ≥ 0) or x − log1p(e^{x}) (x < 0): two forms of one
    function, chosen on the midpoint so that e^{·} ≤ 1 (no overflow at |x| = 1e4).
    Derivative σ(−x)."""
    xv = value(x)
    if mid_float(xv) >= 0:
        e = (-xv).exp()
        v, d = -e.log1p(), e / (1 + e)
    else:
        e = xv.exp()
        v, d = xv - e.log1p(), 1 / (1 + e)
    return _unary(x, v, d)


def sigmoid(x):
    """σ(x) = 1/(1 + e^{−x}) (x ≥ 0) or e^{x}/(1 + e^{x}) (x < 0), chosen on the midpoint as in
    :func:`log_sigmoid`. Derivative σ(x)·σ(−x), formed from the same e^{∓x}: at an exact x = 0
    both are exact (1/2 and 1/4), so gradients that cancel there cancel exactly."""
    xv = value(x)
    if mid_float(xv) >= 0:
        e = (-xv).exp()
        v = 1 / (1 + e)
        d = v * (e * v)
    else:
        e = xv.exp()
        v = e / (1 + e)
        d = v / (1 + e)
    return _unary(x, v, d)


def logsumexp(xs, top: int):
    """log Σ_j e^{x_j} written as x_top + log1p(Σ_{j≠top} e^{x_j − x_top}): when x_top is the
    largest term the log1p keeps the tiny mass of the others (logits ±1e4). ``top`` is any index
    (the identity holds for every one). Partials: softmax_j = e^{x_j − lse}."""
    if len(xs) == 1:
        return xs[0]
    vals = [value(x) for x in xs]
    t = vals[top]
    rest = ZERO
    shifted = []
    for j, v in enumerate(vals):
        d = v - t if j != top else ZERO
        shifted.append(d)
        if j != top:
            rest += d.exp()
    l1 = rest.log1p()
    lse = t + l1
    parents = [(x, (d - l1).exp()) for x, d in zip(xs, shifted) if isinstance(x, Var)]
    return _node(lse, parents) if parents else lse


def softmax(xs, top: int):
    """[e^{x_j − lse}]_j as one vector primitive whose VJP is x̄_j = q_j·((c_j − c_t) + D),
    D = Σ_{i≠t} q_i·(c_t − c_i), t = ``top`` (c: the probabilities' cotangents). This equals
    q_j(c_j − Σ_i c_i q_i) because Σ_i q_i = 1; written this way an exactly zero gradient (equal
    cotangents in a row) stays exactly zero, and the top token's gradient at logits ±1e4 (of
    the size of 1 − q_t) is formed without cancellation."""
    lse = logsumexp([value(x) for x in xs], top)
    probs = [(value(x) - lse).exp() for x in xs]
    if not any(isinstance(x, Var) for x in xs):
        return probs
    outs = []

    def rule():
        c = [o.gradient() for o in outs]
        d = fsum(probs[i] * (c[top] - c[i]) for i in range(len(xs)) if i != top)
        for j, x in enumerate(xs):
            if isinstance(x, Var):
                g = probs[j] * ((c[j] - c[top]) + d)
                x.grad = g if x.grad is None else x.grad + g

    Var(_ACTIVE[-1], ZERO, (), rule)          # processed after every output below (reverse order)
    outs.extend(Var(_ACTIVE[-1], q, ()) for q in probs)
    return outs


def entropy(xs, top: int):
    """H = −Σ_j q_j log q_j of softmax(xs), written with d_j = x_j − x_top (d_top = 0 exactly) and
    l1 = log1p(Σ_{j≠top} e^{d_j}): −log q_j = l1 − d_j ≥ 0, H = Σ_j q_j·(l1 − d_j). One primitive
    whose partials ∂H/∂x_j = −q_j·(d_j − Σ_i q_i d_i) (= −q_j·Σ_i q_i·(x_j − x_i), as Σ_i q_i = 1) are
    formed from the differences d: a row of equal x has exact zero partials."""
    vals = [value(x) for x in xs]
    t = vals[top]
    d = [v - t if j != top else ZERO for j, v in enumerate(vals)]
    l1 = ZERO
    for j, dj in enumerate(d):
        if j != top:
            l1 += dj.exp()
    l1 = l1.log1p()
    q = [(dj - l1).exp() for dj in d]
    h = ZERO
    centre = ZERO
    for qj, dj in zip(q, d):
        h += qj * (l1 - dj)
        centre += qj * dj
    parents = [(x, -qj * (dj - centre)) for x, qj, dj in zip(xs, q, d) if isinstance(x, Var)]
    return _node(h, parents) if parents else h


# --------------------------------------------------------------------------- branches

def sign(x) -> int:
    """−1, 0 or +1 when the ball proves it (0 only for an exact zero), else :class:`Straddle`."""
    v = value(x)
    if v.is_zero():
        return 0
    if v > 0:
        return 1
    if v < 0:
        return -1
    raise Straddle(f"a branch condition is undecided at {ctx.prec} bits (ball {v.str(5)})")


def compare(a, b) -> int:
    """sign(a − b), decided rigorously (see :func:`sign`)."""
    return sign(value(a) - value(b))


def clip(x, lo, hi):
    """x clipped to the closed band [lo, hi] (either bound may be None): a clipped entry is the
    constant bound (zero gradient); an entry on a bound passes its gradient, as torch.clamp."""
    if hi is not None and compare(x, hi) > 0:
        return hi
    if lo is not None and compare(x, lo) < 0:
        return lo
    return x


def band(x, lo, hi) -> int:
    """−1 below lo, +1 above hi, 0 inside the closed band [lo, hi]."""
    if compare(x, hi) > 0:
        return 1
    if compare(x, lo) < 0:
        return -1
    return 0


# --------------------------------------------------------------------------- inputs and objectives

def balls(name: str, x, *, allow_neg_inf: bool = False):
    """Nested lists of binary64 numbers as nested lists of exact balls; −inf (only where
    ``allow_neg_inf``: an impossible token's logit) becomes None. NaN and other infinities
    are refused, naming the argument."""
    if isinstance(x, (list, tuple)):
        return [balls(name, v, allow_neg_inf=allow_neg_inf) for v in x]
    if hasattr(x, "tolist"):
        return balls(name, x.tolist(), allow_neg_inf=allow_neg_inf)
    v = validate.real(name, x) if not (isinstance(x, float) and math.isinf(x)) else x
    if isinstance(v, float) and math.isinf(v):
        if v < 0 and allow_neg_inf:
            return None
        validate.fail(name, f"contains {'+' if v > 0 else '-'}inf")
    return ball(x) if isinstance(x, int) and not isinstance(x, bool) else ball(v)


def mask_rows(name, x, expected: tuple):
    """A 0/1 mask of the ``expected`` shape as rows of booleans (``mp.mask``)."""
    m = balls(name, x)
    validate.same_shape(**{"inputs": expected, name: shape(m)})
    out = []
    for row in m:
        if any(not (v.is_zero() or v == 1) for v in row):
            validate.fail(name, "must contain only 0 and 1")
        out.append([v == 1 for v in row])
    return out


def shape(x) -> tuple:
    out = []
    while isinstance(x, (list, tuple)):
        out.append(len(x))
        x = x[0] if x else None
    return tuple(out)


def nested(x, fn):
    """fn applied to every leaf of nested lists (None leaves stay None)."""
    if isinstance(x, list):
        return [nested(v, fn) for v in x]
    return None if x is None else fn(x)


def _gradients(x):
    """The accumulated gradient of every leaf Var; an impossible token (None) gets exact 0."""
    if isinstance(x, list):
        return [_gradients(v) for v in x]
    return ZERO if x is None else x.gradient()


def flat(x):
    if isinstance(x, list):
        for v in x:
            yield from flat(v)
    else:
        yield x


def pair(body, outputs: tuple, grads: tuple):
    """The value function and the VJP function of an objective written once as
    ``body(diff, **arguments) -> {output: nested balls}``, where ``diff(name, balls)`` marks
    an input as differentiated (it returns Vars when a gradient is asked for).

    value(**arguments) returns the output (a dict when there are several);
    vjp(cotangent, **arguments) returns {input: gradient of Σ cotangent·output};
    value.both(cotangent, **arguments) returns (outputs dict, gradients dict) from one tape."""

    def both(cotangent, **arguments):
        differentiate = cotangent is not None and bool(grads)
        marked: dict = {}
        with recording() as tape:

            def diff(name, x):
                if not differentiate or name not in grads:
                    return x
                marked[name] = nested(x, tape.var)
                return marked[name]

            out = body(diff, **arguments)
            if differentiate:
                ct = cotangent if isinstance(cotangent, dict) else {outputs[0]: cotangent}
                unknown = set(ct) - set(outputs)
                if unknown:
                    validate.fail("cotangent", f"unknown outputs {sorted(map(str, unknown))}")
                seeds = []
                for name, c in ct.items():
                    if shape(c) != shape(out[name]):
                        validate.fail("cotangent", f"shape {shape(c)} does not match output {name!r} "
                                                   f"of shape {shape(out[name])}")
                    seeds.extend((o, ball(ci)) for o, ci in zip(flat(out[name]), flat(c)))
                tape.backward(seeds)
        values = {k: nested(out[k], value) for k in outputs}
        if not differentiate:
            return values, {}
        # an optional differentiated input the call omits (a bias of None) was never marked: no gradient
        return values, {g: _gradients(marked[g]) for g in grads if g in marked}

    params = list(inspect.signature(body).parameters.values())[1:]
    signature = inspect.Signature(params)

    def arguments_of(args, kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.arguments

    def value_fn(*args, **kwargs):
        values, _ = both(None, **arguments_of(args, kwargs))
        return values if len(outputs) > 1 else values[outputs[0]]

    def vjp_fn(cotangent, *args, **kwargs):
        return both(cotangent, **arguments_of(args, kwargs))[1]

    value_fn.both = both
    return value_fn, vjp_fn
