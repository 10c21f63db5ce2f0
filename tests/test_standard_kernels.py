"""The default bound accepts the standard kernels (issue 38): correct targets written on PyTorch's CPU
``cross_entropy``/``log_softmax``/``softmax`` and on NumPy's textbook log-softmax pass every lm.* and
distill.* vector — the V = 128256 rows included — without a known-failure declaration, while the
same functions with float32 inside float64, or bfloat16 inside float32, fail. And the bound's
vocabulary term (conformance/compare.py, ``lane_chain``) covers the worst rows of the CPU kernel,
which the pairwise model k_base·(1 + log2 V) does not."""
from __future__ import annotations

import json
import math

import mpmath
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the standard kernels under test are PyTorch's")

from lossproof.conformance import catalog, cli, compare
from lossproof.conformance.vectors.load import VectorSet

VOCABULARY_OBJECTIVES = ("lm.cross_entropy", "lm.token_logprobs", "lm.entropy", "distill.*")
DTYPES = ("float64", "float32", "bfloat16", "float16")


@pytest.fixture(scope="module")
def vector_set():
    return VectorSet()


def _check(vector_set, monkeypatch, tmp_path, target, objectives, dtypes=()):
    monkeypatch.setattr(cli, "_vector_set", lambda args: vector_set)
    report = tmp_path / "report.json"
    argv = ["check", "--target", target, "--quiet", "--report-json", str(report)]
    for objective in objectives:
        argv += ["--objective", objective]
    for dtype in dtypes:
        argv += ["--dtype", dtype]
    status = cli.main(argv)
    return status, json.loads(report.read_text())["cases"]


def _large(case) -> bool:
    return "Large" in case["flags"]


def test_torch_standard_kernels_pass_every_vocabulary_vector(vector_set, monkeypatch, tmp_path):
    status, cases = _check(vector_set, monkeypatch, tmp_path, "standard_kernels:TORCH", VOCABULARY_OBJECTIVES)
    bad = [f"{c['uid']} {c['dtype']}: {c['message'][:200]}" for c in cases
           if c["axis"] == "conformance" and c["status"] not in ("pass", "skip", "unsupported")]
    assert status == 0 and not bad, "\n".join(bad)
    # the Llama-3-sized rows ran and passed in every dtype, with no known-failure declaration
    large = {(c["objective"], c["dtype"]) for c in cases if _large(c) and c["objective"].startswith("lm.")
             and c["status"] == "pass"}
    assert large == {(o, d) for o in ("lm.cross_entropy", "lm.token_logprobs", "lm.entropy") for d in DTYPES}
    assert all(not c["known"] for c in cases)


def test_numpy_textbook_log_softmax_passes(vector_set, monkeypatch, tmp_path):
    status, cases = _check(vector_set, monkeypatch, tmp_path, "standard_kernels:NUMPY",
                           ("lm.cross_entropy", "lm.token_logprobs", "lm.entropy"))
    assert status == 0
    large = {(c["objective"], c["dtype"]) for c in cases if _large(c) and c["status"] == "pass"}
    assert large == {(o, d) for o in ("lm.cross_entropy", "lm.token_logprobs", "lm.entropy")
                     for d in ("float64", "float32")}


@pytest.mark.parametrize("target, dtype", [("FLOAT32_INSIDE_FLOAT64", "float64"),
                                           ("BFLOAT16_INSIDE_FLOAT32", "float32")])
def test_low_precision_inside_still_fails_every_vocabulary_objective(vector_set, monkeypatch, tmp_path, target, dtype):
    status, cases = _check(vector_set, monkeypatch, tmp_path, f"standard_kernels:{target}", VOCABULARY_OBJECTIVES,
                           (dtype,))
    assert status == 1
    judged = {c["objective"] for c in cases
              if c["axis"] == "conformance" and c["status"] not in ("skip", "unsupported")}
    killed = {c["objective"] for c in cases if c["status"] == "fail"}
    assert judged == killed, f"survivors: {sorted(judged - killed)}"


def _spike_rows_worst(v: int, dtype: torch.dtype, count: int = 40) -> float:
    """The largest error of log_softmax's log Z, in units of u, over rows of v − 1 zeros and one logit
    a > 0: after the shift, v − 1 equal terms e^{−a}, which round alike in every lane (log Z exact:
    a + log(1 + (v − 1)·e^{−a}))."""
    u = compare.UNIT_ROUNDOFF[str(dtype).removeprefix("torch.")]
    worst = 0.0
    for a in np.linspace(0.05, 11.0, count):
        a = float(torch.tensor(a, dtype=dtype))
        row = torch.zeros(v, dtype=dtype)
        row[v // 3] = a
        with mpmath.workdps(30):
            log_z = mpmath.mpf(a) + mpmath.log(1 + (v - 1) * mpmath.exp(-mpmath.mpf(a)))
            worst = max(worst, abs(float(torch.log_softmax(row, 0)[0]) + float(log_z)) / u)
    return worst


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_lane_chain_covers_the_cpu_log_softmax_and_the_pairwise_model_does_not(dtype):
    """Measured worst rows of PyTorch's CPU kernel: within ⌈V/L⌉ + L − 2 roundings (the lane model), and at
    V = 128256 beyond the pairwise model's k_base·(1 + log2 V) (which is why the term exists)."""
    for v in (4096, 16384, 128256):
        worst = _spike_rows_worst(v, dtype)
        chain = compare.lane_chain(v, str(dtype).removeprefix("torch."))
        assert worst <= chain, f"V = {v}: {worst:.0f} u > {chain} u"
    k_base = catalog.get("lm.token_logprobs").k_base
    assert worst > k_base * (1 + math.log2(128256))


def test_numpy_sum_needs_no_lane_term():
    """NumPy's pairwise np.sum on the same rows stays within the pairwise model."""
    for v in (4096, 128256):
        for a in np.linspace(0.05, 11.0, 20):
            row = np.zeros(v)
            row[v // 3] = a
            shifted = row - a
            with mpmath.workdps(30):
                log_z = mpmath.mpf(a) + mpmath.log(1 + (v - 1) * mpmath.exp(-mpmath.mpf(a)))
                err = abs(a + np.log(np.sum(np.exp(shifted))) - float(log_z)) / compare.UNIT_ROUNDOFF["float64"]
            assert err <= 4 * (1 + math.log2(v))
