"""The figure of docs/distributed.md shows what the formula says: with a token mean over N tokens
in M micro-batches, the per-micro-batch mean gives a token of micro-batch k the gradient
1/(M·n_k) instead of 1/N (largest relative error N/(M·n_min) − 1), the global normaliser 1/N."""
import pytest

pytest.importorskip("torch", reason="the figure runs the torch step helpers")

from lossproof.conformance.docs import distributed


def test_accumulation_errors_follow_the_formula():
    spread, naive, exact = distributed.accumulation_errors()
    n, m = distributed.TOKENS, distributed.MICRO
    for s, err_naive, err_exact in zip(spread, naive, exact):
        n_min = n / m * (1 - s / 2)
        assert err_naive == pytest.approx(n / (m * n_min) - 1, rel=1e-12, abs=1e-15)
        assert err_exact <= 4e-16
    assert naive[0] == 0 and naive[-1] > 5
