"""The torch fused path declines ``distill.skew_kl`` and ``distill.tvd`` (``distill.FUSED_DECLINED``
says why): tensors take the plain path (``_careful.VocabRows`` with the ``SkewKL`` / ``TVD``
kernels), and these tests show which path served each call."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from conformance import catalog  # noqa: E402
from refimpl.exact import distill as e_distill  # noqa: E402
from refimpl.torch import _careful, _fused, distill  # noqa: E402

CALLS = {
    "distill.skew_kl": lambda z, t: distill.skew_kl(z, t, 0.25, "reverse", 0.7),
    "distill.tvd": lambda z, t: distill.tvd(z, t, 1.3),
}


def test_declined_objectives_are_the_catalogs_and_say_why():
    assert set(distill.FUSED_DECLINED) == set(CALLS)
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
