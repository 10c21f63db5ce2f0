"""The fused token cross-entropy (``refimpl.torch._fused_ce``: ``lm.cross_entropy``'s path for
tensors) and the fused linear cross-entropy (``refimpl.torch._fused_linear``) against the exact
reference, values and gradients, in float64, float32, bfloat16 and float16; through the
compiled CPU kernel and through the torch chunks (compiled path off), with chunks small enough
that every call spans several; for each way backward can go (the kept gradient for the
expected cotangent, a scaled one, a per-row cotangent recomputed).

Exact reference: the logits h·Wᵀ + b summed in mpmath at 60 digits from the (rounded) inputs,
``refimpl.exact.lm.cross_entropy`` and ``cross_entropy_vjp`` on them, and dh = G·W, dW = Gᵀ·h,
db = Σ_rows G in mpmath (G: the exact gradient wrt the logits).

Bound (first order, elementwise; u the working dtype's unit roundoff, 2^-53 or 2^-24). The
computed logits are off by δz_i ≤ (H+1)·u·A_i, A_i = max_j Σ_k |h_ik W_jk| + |b_j| (a dot
product of H terms). The row's loss is 2-Lipschitz in its logits (lse and z'_y, or the mean,
each 1-Lipschitz; tanh too), times 1 + 2ζ|lse| with the z-loss; its own evaluation adds
K·u·(log2 V + 2)·(|ℓ| + |lse| + 1). The gradient wrt the logits, q_j − (1−ε)δ_jy − ε/V + 2ζ·lse·q_j
times sech², moves by at most (q_j + |G_j|)·F_i with F_i = 4(1 + 2ζ|lse| + 2/s)·δz_i +
K·u·(log2 V + 2) (softmax is 2·q-Lipschitz elementwise, sech² 2/s-Lipschitz relatively); the
GEMMs that form dh, dW and db add their own worst case, (terms + 1)·u times the sum of the
absolute products. bfloat16/float16 inputs run in float32 and each output is rounded once to
the input dtype: the bound gains u_out·(|exact| + bound). K = 4.
"""
from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="tests of the torch backend")

import math

import mpmath
import numpy as np
import torch

from lossproof.refimpl.exact import lm as e_lm
from lossproof.refimpl.torch import _compiled, _fused_ce, _fused_linear, lm
from lossproof.refimpl.validate import InputError

K = 4
DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
UNIT = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
CONVENTIONS = [
    {},
    {"label_smoothing": 0.1},
    {"label_smoothing": 1.0},
    {"z_loss": 1e-2},
    {"softcap": 3.0},
    {"reduction": "sum"},
    {"reduction": "none"},
    {"normalizer": 7.0},
    {"ignore_index": -1, "label_smoothing": 0.2, "z_loss": 1e-3, "softcap": 5.0},
]
WORST: dict = {}


def _id(kw):
    return "-".join(f"{k}={v}" for k, v in kw.items()) or "default"


@pytest.fixture(scope="module", autouse=True)
def _summary():
    """How close the errors came to their bounds (printed with -s)."""
    yield
    for key, r in sorted(WORST.items()):
        print(f"{key}: worst err/bound {r:.3g}")


def _route(name, monkeypatch):
    """'compiled': the compiled row kernel (skipped where it cannot be built); 'torch': the torch
    chunks; 'plain': lm.cross_entropy's plain path (``lm.FUSED = False``)."""
    if name == "compiled":
        if _compiled.library() is None:
            pytest.skip(f"compiled CPU kernels unavailable: {_compiled.status()['reason']}")
    else:
        monkeypatch.setattr(_compiled, "ENABLED", False)
    monkeypatch.setattr(lm, "FUSED", name != "plain")


@pytest.fixture(params=["compiled", "torch"])
def path(request, monkeypatch):
    _route(request.param, monkeypatch)
    return request.param


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """A few rows per chunk, so that every call here spans several chunks."""
    monkeypatch.setattr(_fused_ce, "CHUNK_ELEMENTS", 40)
    monkeypatch.setattr(_fused_linear, "CHUNK_ELEMENTS", 40)


def _inputs(dtype, n=7, h=5, v=11, scale=1.0, bias=True, seed=0):
    rng = np.random.default_rng(seed)
    hid = rng.standard_normal((n, h)) * scale
    w = rng.standard_normal((v, h))
    b = rng.standard_normal(v) if bias else None
    labels = rng.integers(0, v, n)
    labels[2] = -100
    rounded = [None if a is None else torch.tensor(a).to(DTYPES[dtype]) for a in (hid, w, b)]
    return rounded, torch.tensor(labels)


def _mp(t):
    return np.array([[mpmath.mpf(float(x)) for x in row] for row in t.double().tolist()], dtype=object) \
        if t.ndim == 2 else np.array([mpmath.mpf(float(x)) for x in t.double().tolist()], dtype=object)


def _labels(labels, kw):
    return torch.where(labels == -100, kw.get("ignore_index", -100), labels)


def _exact(hid, w, b, labels, cot, kw):
    """Exact value, gradients (dh, dW, db as float64 arrays) and the bound's ingredients."""
    with mpmath.workdps(60):
        H, W = _mp(hid), _mp(w)
        B = _mp(b) if b is not None else None
        n, v = H.shape[0], W.shape[0]
        z = np.empty((n, v), dtype=object)
        for i in range(n):
            for j in range(v):
                z[i, j] = mpmath.fsum(H[i, k] * W[j, k] for k in range(H.shape[1])) + (B[j] if B is not None else 0)
        y = labels.tolist()
        value = e_lm.cross_entropy(z, y, **kw)
        ct = cot.double().tolist()
        G = e_lm.cross_entropy_vjp(ct, z, y, **kw)["logits"]
        dh = np.array([[float(mpmath.fsum(G[i, j] * W[j, k] for j in range(v))) for k in range(H.shape[1])]
                       for i in range(n)])
        dw = np.array([[float(mpmath.fsum(G[i, j] * H[i, k] for i in range(n))) for k in range(H.shape[1])]
                       for j in range(v)])
        db = np.array([float(mpmath.fsum(G[i, j] for i in range(n))) for j in range(v)])
        zf = np.vectorize(float)(z)
    val = np.atleast_1d(np.vectorize(float)(value)).astype(np.float64)
    return val, np.vectorize(float)(G), dh, dw, db, zf


def _bounds(hid, w, b, labels, cot, kw, zf, G, dtype):
    """The module docstring's bound for the value(s), dh, dW and db."""
    u = UNIT["float64"] if dtype == "float64" else UNIT["float32"]
    h64, w64 = hid.double().numpy(), w.double().numpy()
    b64 = np.zeros(w64.shape[0]) if b is None else b.double().numpy()
    n, width = h64.shape
    v = w64.shape[0]
    A = (np.abs(h64) @ np.abs(w64).T + np.abs(b64)).max(axis=1)
    dz = (width + 1) * u * A
    cap, zeta, eps = kw.get("softcap"), kw.get("z_loss", 0.0), kw.get("label_smoothing", 0.0)
    zc = zf if cap is None else cap * np.tanh(zf / cap)
    m = zc.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(zc - m).sum(axis=1, keepdims=True)))[:, 0]
    q = np.exp(zc - lse[:, None])
    ignore = kw.get("ignore_index", -100)
    counted = labels.numpy() != ignore
    y = np.where(counted, labels.numpy(), 0)
    per = (1 - eps) * (lse - zc[np.arange(n), y]) + eps * (lse - zc.mean(axis=1)) + zeta * lse ** 2
    lg = math.log2(v) + 2
    row_val = np.where(counted, 2 * (1 + 2 * zeta * np.abs(lse)) * dz + K * u * lg * (np.abs(per) + np.abs(lse) + 1), 0)
    reduction = kw.get("reduction", "mean")
    c = cot.double().numpy()
    if reduction == "none":
        w_rows = c
        bound_val = row_val
    else:
        denom = kw.get("normalizer") or counted.sum() if reduction == "mean" else 1.0
        w_rows = np.full(n, float(c.reshape(-1)[0]) / denom)
        bound_val = np.atleast_1d(np.abs(w_rows) @ row_val + K * u * lg * np.abs(per) @ np.abs(w_rows))
    Gunit = np.where(np.abs(w_rows[:, None]) > 0, np.abs(G) / np.where(w_rows == 0, 1, np.abs(w_rows))[:, None], 0)
    F = 4 * (1 + 2 * zeta * np.abs(lse) + (2 / cap if cap else 0)) * dz + K * u * lg
    E = np.abs(w_rows)[:, None] * (q + Gunit) * F[:, None] * counted[:, None]
    aG = np.abs(G)
    bdh = E @ np.abs(w64) + (v + 1) * u * (aG @ np.abs(w64))
    bdw = E.T @ np.abs(h64) + (n + 1) * u * (aG.T @ np.abs(h64))
    bdb = E.sum(axis=0) + (n + 1) * u * aG.sum(axis=0)
    return bound_val, bdh, bdw, bdb


def _judge(name, got, exact, bound, dtype):
    got = np.atleast_1d(got.detach().double().numpy()) if isinstance(got, torch.Tensor) else got
    exact = np.atleast_1d(exact)
    if dtype in ("bfloat16", "float16"):
        bound = bound + UNIT[dtype] * (np.abs(exact) + bound)
    err = np.abs(got - exact)
    assert np.all(err <= bound), (name, dtype, float(np.max(err - bound)), got, exact)
    WORST[(name, dtype)] = max(WORST.get((name, dtype), 0.0), float(np.max(err / np.maximum(bound, 1e-300))))


def _cotangent(kw, n, dtype, mode):
    if kw.get("reduction") == "none":
        return torch.tensor(np.random.default_rng(1).uniform(-2, 2, n)).to(DTYPES[dtype])
    return torch.tensor(1.0 if mode == "unit" else 2.5).to(DTYPES[dtype])


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kw", CONVENTIONS, ids=_id)
@pytest.mark.parametrize("mode", ["unit", "scaled"])
def test_linear_matches_exact(kw, dtype, mode, path):
    (hid, w, b), labels = _inputs(dtype, bias=not kw.get("softcap"), scale=2.0 if mode == "scaled" else 1.0)
    labels = _labels(labels, kw)
    cot = _cotangent(kw, len(labels), dtype, mode)
    val, G, dh, dw, db, zf = _exact(hid, w, b, labels, cot, kw)
    bv, bdh, bdw, bdb = _bounds(hid, w, b, labels, cot, kw, zf, G, dtype)
    leaves = [t.clone().requires_grad_() for t in (hid, w) + ((b,) if b is not None else ())]
    out = _fused_linear.linear_cross_entropy(leaves[0], leaves[1], labels, bias=leaves[2] if b is not None else None,
                                             **kw)
    assert out.dtype == DTYPES[dtype]
    grads = torch.autograd.grad(out, leaves, cot)
    _judge("value", out, val, bv, dtype)
    _judge("dh", grads[0], dh, bdh, dtype)
    _judge("dW", grads[1], dw, bdw, dtype)
    if b is not None:
        _judge("db", grads[2], db, bdb, dtype)
    assert all(g.dtype == DTYPES[dtype] for g in grads)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kw", CONVENTIONS, ids=_id)
@pytest.mark.parametrize("route", ["compiled", "torch", "plain"])
def test_logits_path_matches_exact(kw, dtype, route, monkeypatch):
    """lm.cross_entropy's fused path on logits (δz = 0: the row kernel's own error only), with a
    non-unit cotangent so that backward scales or recomputes the kept gradient; and the plain
    path (``lm.FUSED = False``) under the same bound."""
    _route(route, monkeypatch)
    rng = np.random.default_rng(3)
    z = torch.tensor(rng.standard_normal((7, 11)) * 4).to(DTYPES[dtype])
    z[4, 3] = -math.inf if not kw.get("label_smoothing") else z[4, 3]
    labels = _labels(torch.tensor(rng.integers(0, 11, 7)).masked_fill(torch.arange(7) == 2, -100), kw)
    if not kw.get("label_smoothing"):
        labels[4] = 5
    cot = _cotangent(kw, 7, dtype, "scaled")
    with mpmath.workdps(60):
        zm = _mp(z)
        val = np.atleast_1d(np.vectorize(float)(e_lm.cross_entropy(zm, labels.tolist(), **kw)))
        G = np.vectorize(float)(e_lm.cross_entropy_vjp(cot.double().tolist(), zm, labels.tolist(), **kw)["logits"])
    leaf = z.clone().requires_grad_()
    out = lm.cross_entropy(leaf, labels, **kw)
    (g,) = torch.autograd.grad(out, leaf, cot)
    u = UNIT["float64"] if dtype == "float64" else UNIT["float32"]
    lg = math.log2(11) + 2
    zf = z.double().numpy()
    scale = np.abs(np.where(np.isfinite(zf), zf, 0)).max() + 1
    bound = K * u * lg * scale * (np.abs(val) + 1) * (1 + 2 * kw.get("z_loss", 0) * scale)
    _judge("ce value", out, val, bound, dtype)
    _judge("ce grad", g, G, K * u * lg * scale * (np.abs(G) + np.abs(cot.double().numpy()).max()), dtype)


def test_linear_rejects_bad_input():
    (hid, w, b), labels = _inputs("float64")
    with pytest.raises(InputError, match="weight"):
        _fused_linear.linear_cross_entropy(hid, w[:, :3], labels)
    with pytest.raises(InputError, match="bias"):
        _fused_linear.linear_cross_entropy(hid, w, labels, bias=b[:4])
    with pytest.raises(InputError, match="labels"):
        _fused_linear.linear_cross_entropy(hid, w, labels.index_fill(0, torch.tensor([0]), 99))
    with pytest.raises(InputError, match="hidden: contains NaN"):
        _fused_linear.linear_cross_entropy(hid.index_fill(0, torch.tensor([1]), math.nan), w, labels)
    with pytest.raises(FloatingPointError, match="overflow"):
        _fused_linear.linear_cross_entropy((hid * 1e20).float(), (w * 1e20).float(), labels)


def test_linear_chunking_does_not_change_the_result(monkeypatch):
    """One chunk or many: the same value and gradients up to rounding (each row is the same)."""
    (hid, w, b), labels = _inputs("float64", n=9)

    def run():
        leaves = [t.clone().requires_grad_() for t in (hid, w, b)]
        out = _fused_linear.linear_cross_entropy(leaves[0], leaves[1], labels, bias=leaves[2], label_smoothing=0.1)
        return [out, *torch.autograd.grad(out, leaves)]

    many = run()
    monkeypatch.setattr(_fused_linear, "CHUNK_ELEMENTS", 1 << 20)
    one = run()
    for a, c in zip(many, one):
        torch.testing.assert_close(a, c, rtol=1e-14, atol=1e-15)

