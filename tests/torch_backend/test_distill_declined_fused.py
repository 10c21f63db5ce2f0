"""The torch fused path declines ``distill.skew_kl``, ``distill.tvd`` and ``distill.sparse_kl``
(``distill.FUSED_DECLINED`` says why): tensors take the plain path (``_careful.VocabRows`` with the
``SkewKL`` / ``TVD`` kernels; autograd through log_softmax for the top-k teacher), and these tests
show which path served each call."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from lossproof.conformance import catalog  # noqa: E402
from lossproof.refimpl.exact import distill as e_distill  # noqa: E402
from lossproof.refimpl.torch import _careful, _fused, distill  # noqa: E402

CALLS = {
    "distill.skew_kl": lambda z, t: distill.skew_kl(z, t, 0.25, "reverse", 0.7),
    "distill.tvd": lambda z, t: distill.tvd(z, t, 1.3),
}


def test_declined_objectives_are_the_catalogs_and_say_why():
    assert set(distill.FUSED_DECLINED) == set(CALLS) | {"distill.sparse_kl"}
    assert all(catalog.get(o) and len(why) > 40 for o, why in distill.FUSED_DECLINED.items())


@pytest.mark.parametrize("objective", sorted(CALLS))
def test_tensors_take_the_plain_path(objective, monkeypatch):
    served = []

    def no_fused(*args, **kwargs):
        raise AssertionError("the fused path served a declined objective")

    real = _careful.vocab_rows

    def spy(kernel, *args, **kwargs):
        served.append(type(kernel).__name__)
        return real(kernel, *args, **kwargs)

    monkeypatch.setattr(_fused, "rows", no_fused)
    monkeypatch.setattr(_careful, "vocab_rows", spy)
    assert distill.FUSED
    g = torch.Generator().manual_seed(3)
    z = torch.randn(3, 7, dtype=torch.float64, generator=g, requires_grad=True)
    t = torch.randn(3, 7, dtype=torch.float64, generator=g)
    value = CALLS[objective](z, t)
    value.sum().backward()
    assert served == [{"distill.skew_kl": "SkewKL", "distill.tvd": "TVD"}[objective]]
    # and the plain path's numbers are the exact reference's
    zl, tl = z.detach().tolist(), t.tolist()
    if objective == "distill.skew_kl":
        want = e_distill.skew_kl(zl, tl, 0.25, "reverse", 0.7)
        grad = e_distill.skew_kl_vjp([1.0] * 3, zl, tl, 0.25, "reverse", 0.7)["student_logits"]
    else:
        want = e_distill.tvd(zl, tl, 1.3)
        grad = e_distill.tvd_vjp([1.0] * 3, zl, tl, 1.3)["student_logits"]
    assert torch.allclose(value, torch.tensor([float(x) for x in want], dtype=torch.float64), rtol=1e-13, atol=0)
    want_g = torch.tensor([[float(x) for x in row] for row in grad], dtype=torch.float64)
    assert torch.allclose(z.grad, want_g, rtol=1e-12, atol=1e-15)


def test_sparse_kl_takes_neither_kernel_path(monkeypatch):
    """A top-k teacher is no logit row: neither the fused rows nor the careful vocabulary rows
    serve it, and its autograd numbers are the exact reference's."""
    def no_kernel(*args, **kwargs):
        raise AssertionError("a vocabulary-row kernel served distill.sparse_kl")

    monkeypatch.setattr(_fused, "rows", no_kernel)
    monkeypatch.setattr(_careful, "vocab_rows", no_kernel)
    g = torch.Generator().manual_seed(5)
    z = torch.randn(3, 7, dtype=torch.float64, generator=g, requires_grad=True)
    ids = [[6, 0, 3], [1, 2, 5], [4, 3, 0]]
    lp = [[-0.5, -1.5, -3.0], [-1.0, -1.2, -2.0], [-0.2, -2.5, float("-inf")]]
    for mode in ("none", "teacher", "both", "tail"):
        z.grad = None
        value = distill.sparse_kl(z, torch.tensor(ids), torch.tensor(lp, dtype=torch.float64), mode, 0.7)
        value.sum().backward()
        zl = z.detach().tolist()
        want = torch.tensor([float(x) for x in e_distill.sparse_kl(zl, ids, lp, mode, 0.7)], dtype=torch.float64)
        grad = e_distill.sparse_kl_vjp([1.0] * 3, zl, ids, lp, mode, 0.7)["student_logits"]
        assert torch.allclose(value, want, rtol=1e-13, atol=1e-16), mode
        want_g = torch.tensor([[float(x) for x in row] for row in grad], dtype=torch.float64)
        assert torch.allclose(z.grad, want_g, rtol=1e-12, atol=1e-15), mode
