"""refimpl.triton's kernels on the cases the vectors do not hold: vocabularies that are not a
power of two and span several tiles, V = 152,064 (Qwen's vocabulary), rows of −inf but one
token, masked tokens, row counts that are not a multiple of a program's rows, bfloat16, and
the selective log-softmax (no catalog objective: judged against ``refimpl.exact``), and the token
cross-entropy over several vocabulary tiles (saturated rows, impossible tokens, ignored rows,
every convention; its bad-input checks).

Runs where the kernels can run: under ``TRITON_INTERPRET=1`` on CPU tensors (CI does it in a
subprocess, test_triton_backend.py, so that the setting reaches no other test) or on a CUDA
device; skipped with the reason elsewhere.

References: ``refimpl.exact`` (mpmath) for every case small enough for it; for V = 152,064,
where the exact reference needs about 45 s per row, ``refimpl.arrays`` in float64 (NumPy;
itself checked against the exact vectors), whose error is far below the float32 bounds here.
Bounds: the vectors' model (conformance/compare.py) written out for these cases,
8·(1 + log2 V)·u·scale with scale the magnitude of the terms (see ``_scale``).
"""
from __future__ import annotations

import math
import os

import mpmath
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="lossproof.refimpl.triton runs on torch tensors")
pytest.importorskip("triton", reason="lossproof.refimpl.triton needs Triton")

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
pytestmark = pytest.mark.skipif(
    not (INTERPRETED or torch.cuda.is_available()),
    reason="no CUDA device and TRITON_INTERPRET is not set (test_triton_backend.py runs this module "
           "under the interpreter in a subprocess)")
DEVICE = "cpu" if INTERPRETED else "cuda"

from lossproof.conformance import compare
from lossproof.refimpl import arrays, validate
from lossproof.refimpl.exact import distill as exact
from lossproof.refimpl.exact import lm as exact_lm
from lossproof.refimpl.exact import mp
from lossproof.refimpl.triton import _launch, distill, lm, logprobs

NEG = float("-inf")


def _tensor(a, dtype, grad=False):
    t = torch.tensor(np.asarray(a, dtype=np.float64), device=DEVICE).to(getattr(torch, dtype))
    return t.requires_grad_(grad)


def _np(t):
    return t.detach().to("cpu", torch.float64).numpy()


def _log_softmax(x, T):
    """float64 log softmax(x/T) per row, −inf kept."""
    s = (x - x.max(axis=-1, keepdims=True)) / T
    with np.errstate(invalid="ignore"):
        return s - np.log(np.exp(s).sum(axis=-1, keepdims=True))


def _scale(z, t, T):
    """The magnitude of the terms of a token KL row, the vectors' s1 + sA (generate/distill.py,
    tolerance scales): Σ_i w_i (|ℓ_i| + A^q_i + A^p_i), A_i = (|x_i| + |max x|)/T + |log w_i|,
    over both weights; and of its gradient, max_j q_j (|ℓ_j| + Σ q|ℓ| + 1 + A^q_j)/T."""
    lq, lp = _log_softmax(z, T), _log_softmax(t, T)
    q, p = np.exp(lq), np.exp(lp)
    fin = np.isfinite(lq) & np.isfinite(lp)
    ell = np.where(fin, lq - np.where(fin, lp, 0.0), 0.0)
    a_q = np.where(np.isfinite(z), (np.abs(z) + np.abs(z.max(-1, keepdims=True))) / T + np.abs(np.where(np.isfinite(lq), lq, 0)), 0)
    a_p = np.where(np.isfinite(t), (np.abs(t) + np.abs(t.max(-1, keepdims=True))) / T + np.abs(np.where(np.isfinite(lp), lp, 0)), 0)
    terms = (q + p) * (np.abs(ell) + a_q + a_p)
    value = terms.sum(-1).max()
    grad = (q * (np.abs(ell) + (q * np.abs(ell)).sum(-1, keepdims=True) + 1 + a_q) / T).max()
    return value, grad


def _bound(dtype, v, scale, want):
    """The vectors' bound (``compare.bound``) with k = 8·(1 + log2 V): float32/float64
    k·u·scale + ulp; bfloat16 the careful model, three roundings of |want| to the dtype plus
    k·u(float32)·scale + ulp."""
    want = np.asarray(want, dtype=np.float64)
    low = dtype in compare.LOW_PRECISION
    return compare.bound(want, dtype, 8 * (1 + math.log2(v)), scale, np.abs(want) if low else None)


def _judge(got, want, bound, what):
    err = np.abs(got - want)
    assert np.all(err <= bound), f"{what}: error {err.max():.3g} > bound {np.min(bound):.3g}"


def _exact_kl(z, t, direction, T, cot):
    kl = np.array([float(v) for v in exact.token_kl(z.tolist(), t.tolist(), direction, T)], dtype=np.float64)
    g = np.array(exact.token_kl_vjp(cot.tolist(), z.tolist(), t.tolist(), direction, T)["student_logits"],
                 dtype=np.float64)
    return kl, g


def _triton_kl(z, t, direction, T, cot, dtype):
    zt = _tensor(z, dtype, grad=True)
    kl = distill.token_kl(zt, _tensor(t, dtype), direction, T)
    (g,) = torch.autograd.grad(kl, zt, _tensor(cot, dtype).to(kl.dtype))
    assert kl.dtype == g.dtype == getattr(torch, dtype)
    return _np(kl), _np(g)


@pytest.mark.parametrize("v", [1000, 4097, 12289])
@pytest.mark.parametrize("direction", ["reverse", "forward"])
def test_vocabularies_that_are_not_a_power_of_two(v, direction):
    """Several tiles per row (4097: a last tile of one token) and the masked tail of the last one."""
    rng = np.random.default_rng(v)
    z, t = rng.standard_normal((2, v)) * 4, rng.standard_normal((2, v)) * 4
    cot = rng.uniform(0.5, 1.5, 2)
    want, gwant = (arrays.distill.token_kl(z, t, direction, 1.5),
                   arrays.distill.token_kl_vjp(cot, z, t, direction, 1.5)["student_logits"])
    got, g = _triton_kl(z, t, direction, 1.5, cot, "float32")
    s, sg = _scale(z, t, 1.5)
    _judge(got, want, _bound("float32", v, s, want), "kl")
    _judge(g, gwant, _bound("float32", v, sg * cot.max(), gwant), "gradient")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_qwen_vocabulary_152064(dtype):
    """V = 152,064 = 2^10·3^3·... : 38 tiles of 4096 per row, the last one partly masked. bfloat16
    inputs are judged against the reference on the same (rounded) logits."""
    v = 152064
    rng = np.random.default_rng(7)
    z = _np(_tensor(rng.standard_normal((2, v)) * 3, dtype))
    t = _np(_tensor(rng.standard_normal((2, v)) * 3, dtype))
    z[1, ::7] = NEG   # masked tokens in both models
    t[1, ::7] = NEG
    cot = np.array([0.75, 1.25])
    for direction in ("reverse", "forward"):
        want = arrays.distill.token_kl(z, t, direction, 1.0)
        gwant = arrays.distill.token_kl_vjp(cot, z, t, direction, 1.0)["student_logits"]
        got, g = _triton_kl(z, t, direction, 1.0, cot, dtype)
        s, sg = _scale(z, t, 1.0)
        _judge(got, want, _bound(dtype, v, s, want), f"{direction} kl")
        _judge(g, gwant, _bound(dtype, v, sg * cot.max(), gwant), f"{direction} gradient")
        assert np.all(g[1, ::7] == 0), "masked tokens get exactly zero gradient"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_rows_of_minus_inf_but_one_token(dtype):
    """One possible token in the student: q = e_k, reverse KL = −log p_k, gradient 0; in the
    teacher: forward KL = −log q_k, gradient (q − e_k)/T."""
    v, T = 37, 0.5
    rng = np.random.default_rng(1)
    z, t = rng.standard_normal((3, v)), rng.standard_normal((3, v))
    one = np.full((3, v), NEG)
    one[np.arange(3), [0, 17, 36]] = 1.0
    cot = np.array([1.0, 0.5, 2.0])
    for direction, zz, tt in (("reverse", one, t), ("forward", z, one)):
        want, gwant = _exact_kl(zz, tt, direction, T, cot)
        got, g = _triton_kl(zz, tt, direction, T, cot, dtype)
        s, sg = _scale(zz, tt, T)
        _judge(got, want, _bound(dtype, v, s, want), f"{direction} kl")
        _judge(g, gwant, _bound(dtype, v, sg * cot.max(), gwant), f"{direction} gradient")
    # The same rows in both models: the token KL is exactly 0 with a zero gradient; the JSD's
    # log m = log(β·e^{log β'} + …) rounds once more: within its terms' roundings, |log β| + |log(1−β)|.
    got, g = _triton_kl(one, one, "reverse", T, cot, dtype)
    assert np.all(got == 0) and np.all(g == 0)
    jsd = _np(distill.generalized_jsd(_tensor(one, dtype), _tensor(one, dtype), 0.3, T))
    _judge(jsd, np.zeros(3), _bound(dtype, v, abs(math.log(0.3)) + abs(math.log(0.7)), np.zeros(3)), "jsd")


def test_more_rows_than_a_program_takes():
    """37 rows of 100 tokens: one program holds up to 64 rows; the rows past the end are masked.
    Every objective, against the exact reference."""
    rng = np.random.default_rng(2)
    n, v, T = 37, 100, 2.0
    z, t = rng.standard_normal((n, v)) * 2, rng.standard_normal((n, v)) * 2
    z[::5, 3] = NEG
    t[::5, 3] = NEG
    y = rng.integers(0, v, n)
    y[::5] = 4
    cot = rng.uniform(0.5, 1.5, n)
    zt = _tensor(z, "float64", grad=True)
    tt = _tensor(t, "float64")
    cases = [
        (distill.generalized_jsd(zt, tt, 0.25, T), exact.generalized_jsd(z.tolist(), t.tolist(), 0.25, T),
         exact.generalized_jsd_vjp(cot.tolist(), z.tolist(), t.tolist(), 0.25, T)["student_logits"], cot),
        (distill.hinton(zt, tt, torch.tensor(y, device=DEVICE), T, 0.3),
         exact.hinton(z.tolist(), t.tolist(), y.tolist(), T, 0.3),
         exact.hinton_vjp(1.5, z.tolist(), t.tolist(), y.tolist(), T, 0.3)["student_logits"], np.array(1.5)),
    ]
    for got, want, gwant, c in cases:
        (g,) = torch.autograd.grad(got, zt, torch.tensor(c, device=DEVICE).reshape(got.shape))
        want = np.array(want, dtype=np.float64).reshape(got.shape)
        assert np.allclose(_np(got), want, rtol=1e-13, atol=1e-13)
        assert np.allclose(_np(g), np.array(gwant, dtype=np.float64), rtol=1e-12, atol=1e-14)


def test_leading_axes_mixed_dtypes_and_no_rows():
    """[B,T,V] logits keep their leading axes; a bfloat16 student with a float32 teacher gives
    float32 values and a bfloat16 gradient; zero rows give an empty result."""
    rng = np.random.default_rng(3)
    z, t = rng.standard_normal((2, 3, 40)), rng.standard_normal((2, 3, 40))
    zt = _tensor(z, "bfloat16", grad=True)
    kl = distill.token_kl(zt, _tensor(t, "float32"), "forward", 1.0)
    (g,) = torch.autograd.grad(kl.sum(), zt)
    assert kl.shape == (2, 3) and kl.dtype == torch.float32 and g.dtype == torch.bfloat16
    zb = _np(zt)
    want = np.array(exact.token_kl(zb.tolist(), t.tolist(), "forward", 1.0), dtype=np.float64)
    s, _ = _scale(zb.reshape(6, 40), t.reshape(6, 40), 1.0)
    _judge(_np(kl), want, _bound("float32", 40, s, want), "kl")
    empty = distill.token_kl(_tensor(np.zeros((0, 5)), "float32"), _tensor(np.zeros((0, 5)), "float32"))
    assert empty.shape == (0,)


def _exact_selective(z, y, T, cot):
    """log softmax(z/T)[y] and (e_y − q)/T·c by mpmath."""
    with mpmath.workdps(50):
        zz = mp.array("logits", z.tolist(), allow_neg_inf=True) / mpmath.mpf(T)
        ls = mp.log_softmax(zz)
        rows = np.arange(z.shape[0])
        value = np.array([float(ls[r, y[r]]) for r in rows])
        q = np.vectorize(lambda x: float(mpmath.exp(x)))(ls)
        onehot = np.zeros_like(q)
        onehot[rows, y] = 1.0
        return value, (onehot - q) * (cot[:, None] / T)


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
@pytest.mark.parametrize("v, T", [(50, 1.0), (5000, 0.7), (40, 1e-3)])
def test_selective_log_softmax_matches_the_exact_reference(dtype, v, T):
    rng = np.random.default_rng(v)
    n = 6
    z = _np(_tensor(rng.standard_normal((n, v)) * 3, dtype))   # exact in the dtype
    z[0, 1::2] = NEG
    y = rng.integers(0, v // 2, n) * 2
    cot = rng.uniform(0.5, 1.5, n)
    want, gwant = _exact_selective(z, y, T, cot)
    zt = _tensor(z, dtype, grad=True)
    got = logprobs.selective_log_softmax(zt, torch.tensor(y, device=DEVICE), T)
    (g,) = torch.autograd.grad(got, zt, _tensor(cot, dtype))
    assert got.dtype == g.dtype == zt.dtype
    # log q_y = (z_y − M)/T − log S: roundings of magnitude (|z_y| + |M|)/T + |log q_y| (+ log V
    # for the sum); the gradient's terms are q_j and the label's 1, times |c|/T.
    a = (np.abs(z[np.arange(n), y]) + np.abs(z.max(-1))) / T + np.abs(want)
    _judge(_np(got), want, _bound(dtype, v, a, want), "log-probability")
    _judge(_np(g), gwant, _bound(dtype, v, cot.max() / T * (1 + a.max()), gwant), "gradient")


def test_selective_log_softmax_rejects_bad_input():
    from lossproof.refimpl.validate import InputError
    z = _tensor(np.zeros((2, 5)), "float32")
    with pytest.raises(InputError, match="index"):
        logprobs.selective_log_softmax(z, torch.tensor([0, 5], device=DEVICE))
    dead = _tensor([[0.0, NEG], [0.0, 1.0]], "float32")
    with pytest.raises(InputError, match="-inf at the index"):
        logprobs.selective_log_softmax(dead, torch.tensor([1, 0], device=DEVICE))
    with pytest.raises(InputError, match="NaN"):
        logprobs.selective_log_softmax(_tensor([[0.0, math.nan]], "float32"), torch.tensor([0], device=DEVICE))


def test_tiles_cover_any_vocabulary():
    """Tile shapes: a power of two per row, at most MAX_BLOCK tokens, several rows for short ones."""
    for n, v in ((1, 1), (3, 5), (37, 100), (2, 152064), (10**6, 4096)):
        rows, block = _launch.tile(n, v)
        assert block & (block - 1) == 0 and rows & (rows - 1) == 0
        assert block <= _launch.MAX_BLOCK and (block >= v or block == _launch.MAX_BLOCK)
        assert rows == 1 or rows * block <= (_launch.INTERPRETER_TILE_ELEMENTS if INTERPRETED else _launch.TILE_ELEMENTS)


# ------------------------------------------------------------------------------ lm.cross_entropy

def _ce_scale(z, kw):
    """The magnitude of a row's terms: |max z'| + |z'_j| over the finite logits, + log V + 1
    (the log-softmax class of error the vectors' bounds are built on), times 1 + 2ζ|lse|."""
    zf = np.where(np.isfinite(z), z, 0.0)
    if kw.get("softcap"):
        zf = kw["softcap"] * np.tanh(zf / kw["softcap"])
    m = np.abs(zf).max()
    lse = m + math.log(z.shape[-1])
    return (2 * m + math.log(z.shape[-1]) + 1) * (1 + 2 * kw.get("z_loss", 0.0) * lse)


def _ce_case(z, labels, kw, dtype, cot):
    want = np.atleast_1d(np.array(mp.to_float(exact_lm.cross_entropy(z.tolist(), labels.tolist(), **kw)),
                                  dtype=np.float64))
    gwant = np.array(mp.to_float(exact_lm.cross_entropy_vjp(cot.tolist() if cot.ndim else float(cot), z.tolist(),
                                                            labels.tolist(), **kw)["logits"]), dtype=np.float64)
    zt = _tensor(z, dtype, grad=True)
    out = lm.cross_entropy(zt, torch.tensor(labels, device=DEVICE), **kw)
    (g,) = torch.autograd.grad(out, zt, _tensor(cot, dtype).to(out.dtype))
    assert out.dtype == g.dtype == getattr(torch, dtype)
    s = _ce_scale(z, kw)
    v = z.shape[-1]
    _judge(np.atleast_1d(_np(out)), want, _bound(dtype, v, s * (np.abs(cot).max() if cot.ndim else 1.0), want),
           f"value {kw}")
    _judge(_np(g), gwant, _bound(dtype, v, s * np.abs(cot).max(), gwant), f"gradient {kw}")
    return _np(g)


CE_CONVENTIONS = [{}, {"label_smoothing": 0.1}, {"z_loss": 1e-2, "reduction": "sum"}, {"softcap": 4.0},
                  {"reduction": "none", "ignore_index": 0, "label_smoothing": 0.3, "softcap": 2.0, "z_loss": 1e-3},
                  {"normalizer": 5.0, "label_smoothing": 1.0}]


@pytest.mark.parametrize("kw", CE_CONVENTIONS, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()) or "plain")
@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_cross_entropy_over_several_tiles(kw, dtype, monkeypatch):
    """V = 37 in tiles of 16 (the online maximum moves between tiles; a last tile of 5 tokens),
    6 rows in programs of 4; a saturated row (q_y ≈ 1: q_y − 1 from the other tokens' sum) and a
    row whose maximum is in the last tile."""
    monkeypatch.setattr(_launch, "MAX_BLOCK", 16)
    monkeypatch.setattr(_launch, "INTERPRETER_TILE_ELEMENTS", 64)
    rng = np.random.default_rng(11)
    z = _np(_tensor(rng.standard_normal((6, 37)) * 3, dtype))
    z[1, 20] = 40.0
    z[3, 36] = 12.0
    labels = np.array([3, 20, 0, 36, 17, 5])
    n = 6 if kw.get("reduction") == "none" else None
    cot = rng.uniform(-2, 2, n) if n else np.array(1.5)
    _ce_case(z, labels, kw, dtype, cot)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cross_entropy_impossible_tokens_and_ignored_rows(dtype):
    """−inf logits away from the label get exactly zero gradient; an ignored row contributes 0 and
    gets zero gradient; with a cap, −inf is −s (finite, gradient sech²(−∞) = 0)."""
    rng = np.random.default_rng(5)
    z = _np(_tensor(rng.standard_normal((4, 50)) * 2, dtype))
    z[0, ::3] = NEG
    z[2, :] = NEG                      # ignored below: no check refuses it
    z[2, 1] = 0.5
    labels = np.array([1, 4, -100, 7])
    g = _ce_case(z, labels, {}, dtype, np.array(1.0))
    assert np.all(g[0, ::3] == 0) and np.all(g[2] == 0)
    g = _ce_case(z, labels, {"softcap": 3.0}, dtype, np.array(1.0))
    assert np.all(g[0, ::3] == 0)


def test_cross_entropy_rejects_bad_input():
    z = torch.zeros(3, 5, device=DEVICE)
    y = torch.tensor([0, 1, 2], device=DEVICE)
    with pytest.raises(validate.InputError, match="labels: label 9 at row 1"):
        lm.cross_entropy(z, torch.tensor([0, 9, -100], device=DEVICE))
    for bad, pattern, kw in ((NEG, "row 1 is -inf everywhere", {}), (math.nan, "contains NaN", {}),
                             (math.inf, r"contains \+inf", {"softcap": 2.0})):
        zb = z.clone()
        zb[1] = bad
        with pytest.raises(validate.InputError, match=pattern):
            lm.cross_entropy(zb, y, **kw)
    zb = z.clone()
    zb[2, 2] = NEG
    with pytest.raises(validate.InputError, match="-inf at the label of row 2"):
        lm.cross_entropy(zb, y)
    zb[2, 2], zb[0, 4] = 0.0, NEG
    with pytest.raises(validate.InputError, match="-inf in row 0 with label_smoothing"):
        lm.cross_entropy(zb, y, label_smoothing=0.1)
    zb[0] = NEG
    with pytest.raises(validate.InputError, match="row 0 is -inf everywhere"):
        lm.cross_entropy(zb, torch.tensor([-100, 1, 2], device=DEVICE))


# ------------------------------------------------------------------------------ lm.linear_cross_entropy

LINEAR_CONVENTIONS = [{}, {"label_smoothing": 0.1, "bias": True}, {"normalizer": 5.0, "z_loss": 1e-2},
                      {"reduction": "none", "softcap": 3.0, "z_loss": 1e-3, "label_smoothing": 0.2, "bias": True},
                      {"reduction": "sum", "ignore_index": 0}]


@pytest.mark.parametrize("kw", LINEAR_CONVENTIONS, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()) or "plain")
@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
@pytest.mark.parametrize("cot_kind", ["unit", "scaled"])
def test_linear_cross_entropy_over_several_chunks(kw, dtype, cot_kind, monkeypatch):
    """N = 10 rows in chunks of 4 (chunks 0–3, 4–7, 8–9: two boundaries and a short last chunk),
    V = 37 in vocabulary tiles of 16; ignored rows on both sides of the first boundary (rows 3
    and 4) and in the last chunk; a saturated row. The cotangent 1 takes the gradients formed
    in forward; a scaled one (1.5, or per row for 'none') the scaling or the rerun of backward.
    Judged against ``refimpl.exact.lm.linear_cross_entropy`` and its VJP; the bounds are the
    cross-entropy's (``_ce_case``) on the logit scale plus the GEMMs' rounding (H products per
    logit), times the l1 norm of the other GEMM operand for dh, dW and db."""
    kw = dict(kw)
    with_bias = kw.pop("bias", False)
    monkeypatch.setattr(_launch, "MAX_BLOCK", 16)
    monkeypatch.setattr(_launch, "INTERPRETER_TILE_ELEMENTS", 64)
    monkeypatch.setattr(lm, "CHUNK_ELEMENTS", 4 * 37)
    rng = np.random.default_rng(23)
    n, width, v = 10, 6, 37
    hid = _np(_tensor(rng.standard_normal((n, width)), dtype))
    w = _np(_tensor(rng.standard_normal((v, width)) * 0.7, dtype))
    hid[5] = _np(_tensor(w[20] * 6, dtype))        # a saturated row: q ≈ 1 at token 20
    b = _np(_tensor(rng.standard_normal(v), dtype)) if with_bias else None
    ignore = kw.get("ignore_index", -100)
    labels = rng.integers(1, v, n)
    labels[5] = 20
    labels[[3, 4, 9]] = ignore
    cot = rng.uniform(-2, 2, n) if kw.get("reduction") == "none" else np.array(1.0 if cot_kind == "unit" else 1.5)
    if kw.get("reduction") == "none" and cot_kind == "unit":
        cot = np.ones(n)
    args = dict(kw, bias=None if b is None else b.tolist())
    want = np.atleast_1d(np.array(mp.to_float(exact_lm.linear_cross_entropy(hid.tolist(), w.tolist(), labels.tolist(),
                                                                             **args)), dtype=np.float64))
    gwant = {k: np.array(mp.to_float(x), dtype=np.float64) for k, x in exact_lm.linear_cross_entropy_vjp(
        cot.tolist() if cot.ndim else float(cot), hid.tolist(), w.tolist(), labels.tolist(), **args).items()}
    leaves = [_tensor(x, dtype, grad=True) for x in (hid, w) + ((b,) if b is not None else ())]
    out = lm.linear_cross_entropy(leaves[0], leaves[1], torch.tensor(labels, device=DEVICE), **kw,
                                  bias=leaves[2] if b is not None else None)
    got = torch.autograd.grad(out, leaves, _tensor(cot, dtype).to(out.dtype))
    assert out.dtype == getattr(torch, dtype) and all(g.dtype == out.dtype for g in got)
    z = hid @ w.T + (b if b is not None else 0.0)
    products = np.abs(hid) @ np.abs(w).T + (np.abs(b) if b is not None else 0.0)
    s = _ce_scale(z, kw) + width * products.max()
    c = np.abs(cot).max()
    _judge(np.atleast_1d(_np(out)), want, _bound(dtype, v, s * c, want), f"value {kw}")
    operand = {"hidden": np.abs(w).sum(0).max(), "weight": np.abs(hid).sum(0).max(), "bias": n}
    for name, g in zip(("hidden", "weight", "bias"), got):
        _judge(_np(g), gwant[name], _bound(dtype, v, s * c * operand[name], gwant[name]), f"{name} gradient {kw}")
    ignored = labels == ignore
    assert np.all(_np(got[0])[ignored] == 0), "an ignored row has a hidden gradient"


def test_linear_cross_entropy_rejects_bad_input():
    """The torch backend's checks, in its words; an overflow of the float32 logits is an error,
    never a NaN."""
    h = torch.zeros(2, 3, device=DEVICE)
    w = torch.ones(4, 3, device=DEVICE)
    y = torch.tensor([0, 1], device=DEVICE)
    with pytest.raises(validate.InputError, match="hidden: contains -inf"):
        lm.linear_cross_entropy(torch.full((2, 3), NEG, device=DEVICE), w, y)
    with pytest.raises(validate.InputError, match="bias: length 3 does not match"):
        lm.linear_cross_entropy(h, w, y, bias=torch.zeros(3, device=DEVICE))
    with pytest.raises(validate.InputError, match="labels: label 4 at row 1"):
        lm.linear_cross_entropy(h, w, torch.tensor([0, 4], device=DEVICE))
    with pytest.raises(FloatingPointError, match="overflow the working dtype torch.float32"):
        lm.linear_cross_entropy(torch.full((2, 3), 1e20, device=DEVICE), w * 1e20, y)
