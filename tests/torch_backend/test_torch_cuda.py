"""refimpl.torch on a CUDA device against the exact reference: the same cases and tolerance
policy as test_torch_vs_exact.py (tests/torch_backend/torchcheck.py), every dtype, with the tensors
created on the device (the implementation follows its inputs; it never calls .cuda()).
Skipped, with the reason stated, where torch.cuda.is_available() is False."""
from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="tests of the torch backend")

import torch
import torchcheck

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

CASES = torchcheck.cases()
PAIRS = [(c, d) for c in CASES for d in torchcheck.DTYPES if torchcheck.supports_dtype(c, d)]


@pytest.fixture(scope="module", autouse=True)
def _summary():
    yield
    print("\n[cuda] " + torchcheck.summary())


@pytest.mark.parametrize("case,dtype", PAIRS, ids=[f"{c.id}-{d}" for c, d in PAIRS])
def test_matches_exact_on_cuda(case, dtype):
    torchcheck.run(case, dtype, "cuda", seed=len(case.label))


def test_large_vocabulary_rows_in_chunks_on_cuda():
    """A realistic row size in bfloat16: finite, in the input dtype, grads on the device."""
    from lossproof.refimpl.torch import distill
    g = torch.Generator(device="cuda").manual_seed(0)
    z = (torch.randn(64, 32768, device="cuda", generator=g) * 3).to(torch.bfloat16).requires_grad_()
    t = (torch.randn(64, 32768, device="cuda", generator=g) * 3).to(torch.bfloat16)
    kl = distill.token_kl(z, t)
    (grad,) = torch.autograd.grad(kl.sum(), z)
    assert kl.dtype == torch.bfloat16 and grad.dtype == torch.bfloat16 and grad.is_cuda
    assert torch.isfinite(kl).all() and torch.isfinite(grad).all()
