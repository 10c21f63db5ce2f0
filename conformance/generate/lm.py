"""Vectors for the ``lm`` family: ``lm.cross_entropy`` (torch.nn.functional.cross_entropy with label
smoothing, z-loss, soft-capping, reductions and transformers' num_items_in_batch), ``lm.token_logprobs``
(TRL selective_log_softmax, verl logprobs_from_logits) and ``lm.entropy`` (verl / TRL
entropy_from_logits).

Shapes stay small (N ≤ 6, V ≤ 16): the vector set has a size budget (DESIGN §5), and the vocabulary
reduction's numerics show at V of a few dozen as they do at 10^5. The realistic vocabularies are the
``Large`` cases, V = 128256 (Llama 3's), on the low-precision grids: mostly zero logits with a few
hundred drawn ones, so that their repeated expected digits compress in the Large part.
"""
from __future__ import annotations

import math

import mpmath
import numpy as np

from lossproof.conformance import catalog
from lossproof.conformance.compare import K_ELEM
from lossproof.conformance.generate import lm_pitfalls, lm_smoothing
from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case
from lossproof.conformance.generate.lm_inputs import CE, ENT, LCE, LOW_V, LP
from lossproof.conformance.generate.lm_inputs import case as _case
from lossproof.conformance.generate.lm_inputs import ce_flags as _ce_flags
from lossproof.conformance.generate.lm_inputs import cotangent as _cotangent
from lossproof.conformance.generate.lm_inputs import float32 as _float32
from lossproof.conformance.generate.lm_inputs import labels as _labels
from lossproof.conformance.generate.lm_inputs import lce_flags as _lce_flags
from lossproof.conformance.generate.lm_inputs import linear_inputs as _linear_inputs
from lossproof.conformance.generate.lm_inputs import logits as _logits
from lossproof.conformance.generate.lm_inputs import shape as _shape

NEG_INF = float("-inf")
BIG_V = 128256     # Llama 3's vocabulary

NOTES = {
    "Random": {"category": "random", "description": "Random logits (normal, σ from 0.5 to 8) and labels from a "
               "fixed seed; for lm.cross_entropy about one label in five is ignore_index.",
               "bugType": "formula"},
    "Ignored": {"category": "edge", "description": "Tokens whose label is ignore_index: no loss, no smoothing, no "
                "z-loss, zero gradient; custom ignore_index values (0, −1) and every token ignored.",
                "bugType": "masking",
                "effect": "Tokens at ignore_index counted in the loss, the smoothing term, the z-loss or the "
                          "denominator.",
                "links": ["https://github.com/pytorch/pytorch/issues/73205",
                          "https://github.com/eladhoffer/utils.pytorch/issues/4"]},
    "EmptyBatch": {"category": "edge", "description": "Every token is ignore_index with reduction 'sum', 'none' or a "
                   "normalizer: the loss is exactly 0 (PyTorch's 'mean' would be 0/0 = NaN; the reference rejects "
                   "that case, see InvalidInput).",
                   "bugType": "degenerate-input",
                   "effect": "A batch with every token ignored gives 0/0 = NaN under a token mean instead of 0."},
    "SingleToken": {"category": "edge", "description": "V = 1: q = 1, the cross-entropy, the log-probability and "
                    "the entropy are 0 and so are their gradients (with label smoothing too).",
                    "bugType": "degenerate-input",
                    "effect": "A single token or class is a 0/0 or empty reduction for careless code: NaN or a "
                              "wrong count."},
    "Uniform": {"category": "edge", "description": "Equal logits: the loss is log V and the entropy's gradient is "
                "exactly 0.",
                "bugType": "degenerate-input",
                "effect": "Equal logits: the entropy's gradient must be exactly 0; a careless form leaves rounding "
                          "noise."},
    "NegInf": {"category": "edge", "description": "−inf logits off the label (impossible tokens: probability 0, "
               "gradient 0), under soft-capping −inf becomes −s.",
               "bugType": "non-finite",
               "effect": "0·log 0 evaluated as 0·(−inf) = NaN at impossible tokens; smoothing over −inf logits "
                         "gives inf.",
               "links": ["https://github.com/huggingface/trl/issues/7221",
                         "https://github.com/kkirchheim/pytorch-ood/pull/85"]},
    "HugeLogits": {"category": "numerics", "description": "Logits of ±1e4 (float64) or ±8192 (low precision): "
                   "saturated rows where q_y − 1 ≈ −e^{−10^4} must come from expm1(log q_y), and a label far below "
                   "the maximum.",
                   "bugType": "overflow",
                   "effect": "exp of logits not shifted by the row maximum overflows; saturated rows lose their "
                             "small terms unless formed with expm1/log1p."},
    "Temperature": {"category": "convention", "description": "Temperatures from 1e-3 (near one-hot) to 100 (near "
                    "uniform); the logits are divided by T before the softmax.",
                    "bugType": "extreme-parameter",
                    "effect": "Logits not divided by T (or divided twice) at extreme temperatures change the loss "
                              "and the 1/T in its gradient."},
    "LabelSmoothing": {"category": "convention", "description": "PyTorch's label smoothing ε: (1−ε)·(−log q_y) + "
                       "ε·mean over all V of −log q_v, ε up to 1.",
                       "bugType": "convention",
                       "effect": "Smoothing spread over V − 1 classes, added as 1/V, or computed over a vocabulary "
                                 "shard instead of PyTorch's ε·mean over all V.",
                       "links": ["https://github.com/OpenNMT/OpenNMT-py/issues/1463",
                                 "https://github.com/TimDettmers/ConvE/issues/55",
                                 "https://github.com/NVIDIA/Megatron-LM/issues/7464"]},
    "ZLoss": {"category": "convention", "description": "z-loss ζ·lse² per counted token (PaLM §5: ζ = 1e-4; "
              "Liger's lse_square_scale).",
              "bugType": "formula",
              "effect": "The z-loss as the square of the mean lse, without its square, or counted on ignored "
                        "tokens.",
              "links": ["https://github.com/mlfoundations/open_lm/pull/92"]},
    "Softcap": {"category": "convention", "description": "Final-logit soft-capping s·tanh(z/s) before the softmax "
                "(Gemma 2: s = 30), also on logits far beyond s.",
                "bugType": "formula",
                "effect": "The soft cap missing, or formed as z·tanh(z/s) instead of s·tanh(z/s): logits are not "
                          "capped.",
                "links": ["https://github.com/unslothai/unsloth-zoo/pull/593",
                          "https://github.com/apple/ml-cross-entropy/issues/48"]},
    "Normalizer": {"category": "convention", "description": "The summed loss divided by a given count "
                   "(transformers' num_items_in_batch: the tokens of the whole accumulated batch, so not the "
                   "micro-batch's own count).",
                   "bugType": "normalization",
                   "effect": "The loss divided by the micro-batch's own token count instead of the accumulated "
                             "batch's: gradient accumulation weighs tokens unequally.",
                   "links": ["https://github.com/meta-pytorch/torchtune/pull/1875",
                             "https://github.com/huggingface/transformers/pull/34191",
                             "https://github.com/allenai/open-instruct/pull/1161",
                             "https://github.com/huggingface/transformers/issues/35203"]},
    "LowPrecision": {"category": "edge", "description": "Logits exactly representable in bfloat16 and float16 (or "
                     "float16 only), judged in those dtypes under the careful model of conformance/compare.py "
                     "(float32 inside, the outputs rounded once).",
                     "bugType": "precision"},
    "Large": {"category": "random", "description": "A realistic vocabulary (V = 128256, Llama 3's) on the "
              "low-precision grids: mostly zero logits with a few hundred drawn ones.",
              "bugType": "precision",
              "effect": "An accumulation that loses accuracy with the reduction length (naive sums, low-precision "
                        "partial sums) drifts at realistic sizes."},
    "Bias": {"category": "edge", "description": "lm.linear_cross_entropy with a bias [V] added to the logits "
             "(F.linear's): its gradient Σ_n G_n is checked; a case without one expects no bias gradient.",
             "bugType": "gradient",
             "effect": "The output bias left out of the backward: it never trains."},
    "Cancellation": {"category": "numerics", "description": "lm.linear_cross_entropy logits far below the "
                     "products they are summed from (Σ_h |h·w| ≫ |z|): the matrix product's rounding, which the "
                     "tolerance scales with Σ_h |h·w|, not with |z|.",
                     "bugType": "precision",
                     "effect": "Logits far below the products they are summed from: a matrix product in low "
                               "precision loses them."},
    "InvalidInput": {"category": "invalid", "description": "Input outside the objective's domain; must be rejected.",
                     "bugType": "input-validation"},
}

GROUPS = {
    "paper": "torch.nn.functional.cross_entropy defaults (PyTorch 2.x): reduction 'mean' over the non-ignored "
             "tokens, ignore_index −100, no smoothing, no z-loss, no cap; for lm.token_logprobs / lm.entropy the "
             "definitions (log-softmax at the label; Shannon entropy) with the temperature as a parameter",
    "sum": "reduction 'sum' (torch.nn.functional.cross_entropy; transformers 5.25 loss/loss_utils.py "
           "fixed_cross_entropy sums before dividing by num_items_in_batch)",
    "none": "reduction 'none': one loss per token, 0 at ignore_index (torch.nn.functional.cross_entropy)",
    "num-items": "reduction 'mean' with normalizer = num_items_in_batch: transformers 5.25 loss/loss_utils.py "
                 "fixed_cross_entropy (PR #34191)",
    "liger-0.8.5": "label_smoothing, z-loss (lse_square_scale) and soft-capping: Liger 0.8.5 "
                   "liger_kernel/ops/cross_entropy.py; PaLM §5 (z-loss), Gemma 2 §2 (soft-capping)",
    "smoothing-others": "label smoothing over the V − 1 classes other than the label, target (1−ε)·e_y + "
                        "ε/(V−1) off y (smoothing_classes='others'): Megatron-core 0.16.1 "
                        "megatron/core/tensor_parallel/cross_entropy.py _VocabParallelCrossEntropy (smoothing = "
                        "ε·V/(V − 1); NeMo's smoothed cross-entropy)",
    "invalid": "inputs outside the domain (all conventions)",
}

NOTES, GROUPS = {**NOTES, **lm_pitfalls.NOTES}, {**GROUPS, **lm_pitfalls.GROUPS}


# ----------------------------------------------------------------------------- lm.cross_entropy

_CE_SETS = (   # group, conventions, params: the convention sets the random cases cycle through
    ("paper", {}, {}),
    ("sum", {"reduction": "sum"}, {}),
    ("none", {"reduction": "none"}, {}),
    ("num-items", {}, {"normalizer": "global"}),
    ("liger-0.8.5", {}, {"label_smoothing": 0.1}),
    ("liger-0.8.5", {}, {"z_loss": 1e-4}),
    ("liger-0.8.5", {}, {"softcap": 30.0}),
    ("liger-0.8.5", {}, {"label_smoothing": 0.2, "z_loss": 0.01, "softcap": 5.0}),
    ("liger-0.8.5", {"reduction": "sum"}, {"label_smoothing": 0.25, "z_loss": 0.05}),
    ("liger-0.8.5", {"reduction": "none"}, {"label_smoothing": 0.5, "softcap": 2.0}),
)


def _with_normalizer(params, labels, r):
    """'global': a count for the whole accumulated batch, at least this micro-batch's own count."""
    if params.get("normalizer") != "global":
        return params
    own = sum(t != -100 for t in labels)
    return {**params, "normalizer": float(own + int(r.integers(0, 3 * own + 1)))}


def _ce_random() -> list[Case]:
    out = []
    for i in range(30):
        seed = 1000 + i
        group, conv, params = _CE_SETS[i % len(_CE_SETS)]
        r = S.rng(seed)
        n, v = _shape(r)
        z, y = _logits(r, n, v), _labels(r, n, v, 0.2)
        if i % 2 == 0:
            z = _float32(z)
        p = _with_normalizer(params, y, r)
        out.append(_case(CE, {"logits": z, "labels": y}, p, conv, group, ("Random",) + _ce_flags(p),
                         f"random N={n}, V={v}", seed, "normal logits, labels with ignore_index"))
    return out


def _ce_edges() -> list[Case]:
    out = []
    add = lambda inputs, params=None, conv=None, group="paper", flags=(), comment="": out.append(  # noqa: E731
        _case(CE, inputs, params, conv, group, flags + _ce_flags(params or {}), comment))
    one = {"logits": [[0.5], [-3.0], [7.25]], "labels": [0, 0, -100]}
    add(one, flags=("SingleToken",), comment="V = 1: loss 0")
    add(one, {"label_smoothing": 0.3, "z_loss": 0.01}, group="liger-0.8.5", flags=("SingleToken",),
        comment="V = 1 with smoothing and z-loss: only ζ·z² remains")
    uni = {"logits": [[1.5] * 7, [-2.0] * 7], "labels": [3, 6]}
    add(uni, flags=("Uniform",), comment="equal logits: loss log 7")
    add({"logits": [[1.5, 0.5, -1.0, 2.0, 0.0, 0.25, -0.5], [-2.0, 1.0, 0.5, -2.0, 3.0, -0.75, 0.0]],
         "labels": [3, 6]}, {"label_smoothing": 1.0}, group="liger-0.8.5",
        comment="ε = 1: the loss is the mean of −log q_v, the label has no weight")
    neg = {"logits": [[NEG_INF, 1.0, 2.0, NEG_INF], [0.5, NEG_INF, -1.0, 3.0], [NEG_INF, NEG_INF, 4.0, NEG_INF]],
           "labels": [2, 3, 2]}
    add(neg, flags=("NegInf",), comment="−inf off the label; a row with one possible token (loss 0)")
    add({"logits": neg["logits"], "labels": [0, 3, 2]}, {"ignore_index": 0}, {"reduction": "none"}, "none",
        ("NegInf", "Ignored"), "ignore_index 0 where the logit of token 0 is −inf: no loss")
    add(neg, {"softcap": 3.0}, group="liger-0.8.5", flags=("NegInf",), comment="soft-capping maps −inf to −3")
    add({"logits": neg["logits"], "labels": [0, 1, 0]}, {"softcap": 3.0, "label_smoothing": 0.1},
        group="liger-0.8.5", flags=("NegInf",), comment="capped: labels at −inf logits are finite (−s)")
    huge = {"logits": [[1e4, -1e4, 0.0, 9999.0], [-1e4, 1e4, 1e4, -1e4], [1e4, -1e4, -1e4, -1e4]],
            "labels": [0, 0, 0]}
    add(huge, flags=("HugeLogits",), comment="±1e4: q_y − 1 ≈ −e^{−1}, a label 2e4 below, a saturated label")
    add(huge, conv={"reduction": "none"}, group="none", flags=("HugeLogits",), comment="±1e4 per token")
    add({"logits": [[1e4, -1e4, -1e4, -1e4], [-1e4, 1e4, -1e4, -1e4]], "labels": [0, 1]}, flags=("HugeLogits",),
        comment="every label saturated: loss 3·e^{−2e4}, gradient of that size")
    add(huge, {"softcap": 30.0, "z_loss": 1e-4}, group="liger-0.8.5", flags=("HugeLogits",),
        comment="±1e4 capped at 30 (Gemma 2)")
    add(huge, {"label_smoothing": 0.1}, group="liger-0.8.5", flags=("HugeLogits",),
        comment="±1e4 with smoothing: the mean of −log q_v is ~1e4")
    r = S.rng(7)
    z = _logits(r, 4, 6)
    for ii in (0, -1):
        add({"logits": z, "labels": [0, 3, ii, 5]}, {"ignore_index": ii}, flags=("Ignored",),
            comment=f"ignore_index = {ii} (a token id for 0)")
    empty = {"logits": z, "labels": [-100] * 4}
    add(empty, conv={"reduction": "sum"}, group="sum", flags=("EmptyBatch", "Ignored"), comment="all ignored: sum 0")
    add(empty, conv={"reduction": "none"}, group="none", flags=("EmptyBatch", "Ignored"), comment="all ignored")
    add(empty, {"normalizer": 12.0}, group="num-items", flags=("EmptyBatch", "Ignored"),
        comment="all ignored in this micro-batch, 12 tokens in the batch: 0")
    mb = {"logits": z, "labels": [1, -100, 2, 4]}
    for norm, why in ((3.0, "its own count: the plain mean"), (40.0, "the accumulated batch's 40 tokens"),
                      (2.5, "a count divided by the ranks (2.5)")):
        add(mb, {"normalizer": norm}, group="num-items", comment=f"normalizer {norm:g}: {why}")
    return out


_CE_LOW_SETS = _CE_SETS[:4] + (
    ("liger-0.8.5", {}, {"label_smoothing": 0.125}),
    ("liger-0.8.5", {}, {"z_loss": 1e-4, "softcap": 30.0}),
)


def _ce_low() -> list[Case]:
    out = []
    for i in range(60):
        seed, grid = 21000 + i, S.low_grid(i)
        group, conv, params = _CE_LOW_SETS[i % len(_CE_LOW_SETS)]
        r = S.rng(seed)
        n, v = int(r.integers(1, 7)), int(r.choice(LOW_V))
        z = S.in_low(_logits(r, n, v), grid)
        y = _labels(r, n, v, 0.2)
        p = _with_normalizer(params, y, r)
        out.append(_case(CE, {"logits": z, "labels": y}, p, conv, group, ("Random", "LowPrecision") + _ce_flags(p),
                         f"random N={n}, V={v}, logits exact in {S.grid_note(grid)}", seed,
                         f"normal logits rounded to the {grid} grid", low=True))
    edges = (
        ({"logits": [[8192.0, -8192.0, 0.0, 8064.0], [-8192.0, 8192.0, 8192.0, -8192.0]], "labels": [0, 3]}, {},
         ("HugeLogits",), "±8192: saturated and far-below labels"),
        ({"logits": [[NEG_INF, 1.0, 2.5, NEG_INF], [0.5, NEG_INF, -1.0, 3.0]], "labels": [2, 3]}, {},
         ("NegInf",), "−inf off the label"),
        ({"logits": [[0.75] * 16, [-3.0] * 16], "labels": [3, 15]}, {}, ("Uniform",), "equal logits: log 16"),
        ({"logits": [[200.0, -150.0, 64.0, 0.5]] * 2, "labels": [1, 2]}, {"softcap": 30.0}, ("Softcap",),
         "logits beyond the cap 30"),
    )
    for k, (inputs, params, flags, comment) in enumerate(edges):
        out.append(_case(CE, inputs, params, {}, "liger-0.8.5" if params else "paper", flags + ("LowPrecision",),
                         comment + ", exact in bfloat16 and float16", 21100 + k, low=True))
    out += _large(CE, 21200, {}, {})
    return out


def _ce_invalid() -> list[Case]:
    z = [[1.0, 2.0, -0.5], [0.0, 0.5, 1.5]]
    bad = [
        ({"logits": z, "labels": [3, 0]}, {}, {}, "label V = 3 is outside [0, V)"),
        ({"logits": z, "labels": [-1, 0]}, {}, {}, "label −1 is neither a token nor ignore_index (−100)"),
        ({"logits": z, "labels": [0, -100]}, {"ignore_index": -1}, {}, "label −100 with ignore_index −1"),
        ({"logits": z, "labels": [-100, -100]}, {}, {}, "every token ignored with reduction 'mean': 0/0 (PyTorch: "
                                                        "NaN)"),
        ({"logits": [[1.0, NEG_INF], [0.0, 0.5]], "labels": [1, 0]}, {}, {}, "−inf at the label: infinite loss"),
        ({"logits": [[1.0, NEG_INF], [0.0, 0.5]], "labels": [0, 0]}, {"label_smoothing": 0.1}, {},
         "−inf with label smoothing: the mean of −log q_v is infinite"),
        ({"logits": [[NEG_INF, NEG_INF], [0.0, 0.5]], "labels": [-100, 0]}, {}, {}, "a row −inf everywhere"),
        ({"logits": [[1.0, float("nan")], [0.0, 0.5]], "labels": [0, 0]}, {}, {}, "NaN logit"),
        ({"logits": [[1.0, float("inf")], [0.0, 0.5]], "labels": [0, 0]}, {}, {}, "+inf logit"),
        ({"logits": z, "labels": [0]}, {}, {}, "labels shorter than the rows"),
        ({"logits": z, "labels": [0, 1]}, {"label_smoothing": 1.5}, {}, "label_smoothing > 1"),
        ({"logits": z, "labels": [0, 1]}, {"z_loss": -1e-4}, {}, "negative z-loss"),
        ({"logits": z, "labels": [0, 1]}, {"softcap": 0.0}, {}, "soft-cap 0"),
        ({"logits": z, "labels": [0, 1]}, {"normalizer": 0.0}, {}, "normalizer 0"),
        ({"logits": z, "labels": [0, 1]}, {"normalizer": 4.0}, {"reduction": "sum"},
         "a normalizer with reduction 'sum'"),
        ({"logits": z, "labels": [0, 1]}, {}, {"reduction": "avg"}, "unknown reduction"),
        ({"logits": [1.0, 2.0], "labels": [0]}, {}, {}, "logits of rank 1"),
    ]
    return [_case(CE, inputs, params, conv, "invalid", ("InvalidInput",), why, result="invalid")
            for inputs, params, conv, why in bad]


# ----------------------------------------------------------------------------- lm.linear_cross_entropy
#
# hidden ~ N(0, σ_h²), weight ~ N(0, s²/H): logits of spread about σ_h·s, as the cross-entropy's. Sizes
# stay small (V·H ≤ 256 for most cases: every weight element carries a 32-digit gradient); a few cases
# reach H = 64 or V = 512.

def _lce_random() -> list[Case]:
    out = []
    for i in range(40):
        seed = 7000 + i
        group, conv, params = _CE_SETS[i % len(_CE_SETS)]
        r = S.rng(seed)
        n, h, v = int(r.integers(1, 7)), int(r.integers(1, 9)), int(r.integers(2, 17))
        inputs = _linear_inputs(r, n, h, v, bias=(i // len(_CE_SETS)) % 2 == 1, grid="float32" if i % 2 == 0 else None)
        inputs["labels"] = _labels(r, n, v, 0.2)
        p = _with_normalizer(params, inputs["labels"], r)
        out.append(_case(LCE, inputs, p, conv, group, ("Random",) + _lce_flags(p, inputs),
                         f"random N={n}, H={h}, V={v}{', bias' if 'bias' in inputs else ''}", seed,
                         "normal hidden and weight (σ/√H), labels with ignore_index"))
    return out


def _lce_edges() -> list[Case]:
    out = []

    def add(inputs, params=None, conv=None, group="paper", flags=(), comment=""):
        out.append(_case(LCE, inputs, params, conv, group, flags + _lce_flags(params or {}, inputs), comment))

    h = [[1.0, -0.5, 2.0], [0.25, 0.75, -1.5]]
    add({"hidden": [[0.0, 0.0]] * 2, "weight": [[1.0, -2.0], [0.5, 0.25], [-1.0, 3.0]], "labels": [0, 2], "bias": [0.5, -1.0, 2.0]},
        comment="zero hidden states: the logits are the bias, log-softmax of (0.5, −1, 2)")
    add({"hidden": [[3.0], [-2.0], [0.5]], "weight": [[1.0], [-1.0], [0.0], [2.5]], "labels": [0, 3, -100]},
        comment="H = 1: rank-one logits")
    add({"hidden": [[0.0, 0.0, 0.0]] * 2, "weight": [[0.5, 0.5, 0.5], [1.0, -1.0, 2.0], [0.0, 0.25, -3.0],
                                                   [-2.0, 1.5, 0.0], [0.75, 0.0, 1.0]], "labels": [4, 1]},
        flags=("Uniform",), comment="zero hidden states, no bias: equal logits, loss log 5, weight gradient 0")
    add({"hidden": h, "weight": [[0.5, 0.5, 0.5]], "labels": [0, 0], "bias": [7.0]}, {"label_smoothing": 0.3},
        group="liger-0.8.5", flags=("SingleToken",), comment="V = 1: loss 0, every gradient 0")
    add({"hidden": h, "weight": [[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0], [2.0, -2.0, 1.0], [0.0, 0.0, 1.0]],
         "labels": [0, 3], "bias": [0.0, 1.0, -1.0, 0.5]}, {"ignore_index": 0}, {"reduction": "none"}, "none",
        ("Ignored",), "ignore_index 0: the first token carries no loss and no gradient")
    w4 = [[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0], [2.0, -2.0, 1.0], [0.0, 0.0, 1.0]]
    add({"hidden": h, "weight": w4, "labels": [-100, -100]}, conv={"reduction": "sum"}, group="sum",
        flags=("EmptyBatch", "Ignored"), comment="all ignored: sum 0, every gradient 0")
    add({"hidden": h, "weight": w4, "labels": [2, -100], "bias": [0.0, 1.0, -1.0, 0.5]}, {"normalizer": 16.0},
        group="num-items", comment="one counted token over an accumulated count of 16")
    big = [[100.0, -100.0, 50.0], [-80.0, 120.0, 10.0]]
    add({"hidden": big, "weight": w4, "labels": [3, 1]}, flags=("HugeLogits",),
        comment="logits in the hundreds: saturated rows, labels far below the maximum")
    add({"hidden": big, "weight": w4, "labels": [3, 1], "bias": [1.0, -1.0, 0.0, 2.0]}, {"softcap": 30.0, "z_loss": 1e-4},
        group="liger-0.8.5", flags=("HugeLogits",), comment="logits in the hundreds capped at 30 (Gemma 2)")
    # the products are ~1e3, the logits ~1: Σ_h |h·w| sets the rounding
    add({"hidden": [[1000.0, 1000.0, 1.0], [-500.0, 500.0, 2.0]],
         "weight": [[1.0, -1.0, 0.5], [1.001, -1.0, 0.0], [0.999, -1.0, -0.5], [-1.0, 1.0, 1.0]], "labels": [1, 2]},
        flags=("Cancellation",), comment="products ~1e3 cancelling to logits of order 1")
    add({"hidden": [[1000.0, 1000.0, 1.0], [-500.0, 500.0, 2.0]],
         "weight": [[1.0, -1.0, 0.5], [1.001, -1.0, 0.0], [0.999, -1.0, -0.5], [-1.0, 1.0, 1.0]], "labels": [1, 2],
         "bias": [-0.5, 0.25, 0.0, 1.0]}, {"label_smoothing": 0.1}, group="liger-0.8.5",
        flags=("Cancellation",), comment="cancelling products with a bias and smoothing")
    return out


def _lce_low() -> list[Case]:
    out = []
    for i in range(60):
        seed, grid = 27000 + i, S.low_grid(i)
        group, conv, params = _CE_SETS[i % len(_CE_SETS)]
        r = S.rng(seed)
        n, h, v = int(r.integers(1, 5)), int(r.choice((1, 2, 4, 8))), int(r.choice(LOW_V))
        inputs = _linear_inputs(r, n, h, v, bias=i % 4 >= 2, grid=grid)
        inputs["labels"] = _labels(r, n, v, 0.2)
        p = _with_normalizer(params, inputs["labels"], r)
        out.append(_case(LCE, inputs, p, conv, group, ("Random", "LowPrecision") + _lce_flags(p, inputs),
                         f"random N={n}, H={h}, V={v}{', bias' if 'bias' in inputs else ''}, inputs exact in "
                         f"{S.grid_note(grid)}", seed, f"normal hidden and weight rounded to the {grid} grid", low=True))
    for k, (n, h, v, bias) in enumerate(((3, 64, 32, True), (2, 8, 512, False), (4, 32, 128, True))):
        seed = 27100 + k
        r = S.rng(seed)
        inputs = _linear_inputs(r, n, h, v, bias=bias, grid=S.BOTH)
        inputs["labels"] = _labels(r, n, v)
        out.append(_case(LCE, inputs, {}, {}, "paper", ("Random", "LowPrecision") + _lce_flags({}, inputs),
                         f"random N={n}, H={h}, V={v}{', bias' if bias else ''}, inputs exact in bfloat16 and "
                         f"float16", seed, "normal hidden and weight rounded to the bf16+fp16 grid", low=True))
    return out


def _lce_invalid() -> list[Case]:
    h, w = [[1.0, 2.0], [0.0, -0.5]], [[1.0, 0.5], [-1.0, 0.25], [0.0, 2.0]]
    bad = [
        ({"hidden": h, "weight": w, "labels": [3, 0]}, {}, {}, "label V = 3 is outside [0, V)"),
        ({"hidden": h, "weight": w, "labels": [-1, 0]}, {}, {}, "label −1 is neither a token nor ignore_index"),
        ({"hidden": h, "weight": [[1.0, 0.5, 0.0], [-1.0, 0.25, 1.0]], "labels": [0, 1]}, {}, {},
         "weight rows of length 3, hidden rows of length 2"),
        ({"hidden": h, "weight": w, "labels": [0, 1], "bias": [0.0, 1.0]}, {}, {}, "bias of length 2 for V = 3"),
        ({"hidden": h, "weight": w, "labels": [0, 1], "bias": [[0.0, 1.0, 2.0]]}, {}, {}, "bias of rank 2"),
        ({"hidden": [1.0, 2.0], "weight": w, "labels": [0]}, {}, {}, "hidden of rank 1"),
        ({"hidden": h, "weight": w, "labels": [0]}, {}, {}, "labels shorter than the rows"),
        ({"hidden": [[1.0, float("nan")], [0.0, 0.5]], "weight": w, "labels": [0, 0]}, {}, {}, "NaN in hidden"),
        ({"hidden": h, "weight": [[1.0, float("-inf")], [0.0, 0.5], [1.0, 1.0]], "labels": [0, 0]}, {}, {},
         "−inf in weight"),
        ({"hidden": h, "weight": w, "labels": [-100, -100]}, {}, {}, "every token ignored with reduction 'mean'"),
        ({"hidden": h, "weight": w, "labels": [0, 1]}, {"normalizer": 4.0}, {"reduction": "sum"},
         "a normalizer with reduction 'sum'"),
        ({"hidden": h, "weight": w, "labels": [0, 1]}, {"label_smoothing": 1.5}, {}, "label_smoothing > 1"),
    ]
    return [_case(LCE, inputs, params, conv, "invalid", ("InvalidInput",), why, result="invalid")
            for inputs, params, conv, why in bad]


# ----------------------------------------------------------------------------- token_logprobs, entropy

def _large(objective, seed, params, conv) -> list[Case]:
    """V = 128256 rows, mostly zero logits with 256 drawn ones (exact in bfloat16 and float16)."""
    r = S.rng(seed)
    n = 2
    z = [[0.0] * BIG_V for _ in range(n)]
    for row in z:
        for j in r.choice(BIG_V, size=256, replace=False):
            row[int(j)] = S.in_low([float(r.normal(0.0, 4.0))], S.BOTH)[0]
    inputs = {"logits": z}
    if objective != ENT:
        inputs["labels"] = [int(np.argmax(z[0])), int(r.integers(0, BIG_V))]
    return [_case(objective, inputs, params, conv, "paper", ("Large", "LowPrecision"),
                  f"V={BIG_V}, N={n}, exact in bfloat16 and float16", seed, "zeros with 256 normal logits", low=True)]


def _tempered_random(objective, seed0, count, low=False) -> list[Case]:
    out = []
    for i in range(count):
        seed = seed0 + i
        r = S.rng(seed)
        T = float(r.choice([1.0, 1.0, 0.5, 0.7, 1.5, 2.0]))
        if low:
            grid = S.low_grid(i)
            n, v = int(r.integers(1, 7)), int(r.choice(LOW_V))
            z = S.in_low(_logits(r, n, v), grid)
            where = f", logits exact in {S.grid_note(grid)}"
        else:
            n, v = _shape(r)
            z = _logits(r, n, v)
            if i % 2 == 0:
                z = _float32(z)
            where = ""
        inputs = {"logits": z}
        if objective == LP:
            inputs["labels"] = _labels(r, n, v)
        flags = ("Random",) + (("Temperature",) if T != 1 else ()) + (("LowPrecision",) if low else ())
        out.append(_case(objective, inputs, {"temperature": T}, {}, "paper", flags,
                         f"random N={n}, V={v}, T={T:g}{where}", seed, "normal logits", low=low))
    return out


def _tempered_edges(objective) -> list[Case]:
    labels = objective == LP
    out = []

    def add(z, y, T=1.0, flags=(), comment="", low=False):
        inputs = {"logits": z}
        if labels:
            inputs["labels"] = y
        out.append(_case(objective, inputs, {"temperature": T}, {}, "paper",
                         flags + (("Temperature",) if T != 1 else ()) + (("LowPrecision",) if low else ()),
                         comment, low=low))

    add([[0.5], [-3.0]], [0, 0], flags=("SingleToken",), comment="V = 1: 0")
    add([[1.5] * 7, [-2.0] * 7], [3, 6], flags=("Uniform",),
        comment="equal logits: −log 7" if labels else "equal logits: log 7 (gradient 0)")
    add([[NEG_INF, 1.0, 2.0, NEG_INF], [0.5, NEG_INF, -1.0, 3.0], [NEG_INF, NEG_INF, 4.0, NEG_INF]], [2, 3, 2],
        flags=("NegInf",), comment="−inf off the label; a one-hot row")
    add([[1e4, -1e4, 0.0, 9999.0], [-1e4, 1e4, 1e4, -1e4], [1e4, -1e4, -1e4, -1e4]], [0, 0, 0],
        flags=("HugeLogits",), comment="±1e4")
    add([[2.0, 1.0, -1.0, 0.5], [0.3, 0.2, 0.1, 0.0]], [0, 3], 1e-3, comment="T = 1e-3: near one-hot")
    add([[2.0, 1.0, -1.0, 0.5], [30.0, -20.0, 0.1, 0.0]], [1, 2], 100.0, comment="T = 100: near uniform")
    add([[8192.0, -8192.0, 0.0, 8064.0], [NEG_INF, 1.0, 2.5, NEG_INF], [0.75] * 4], [3, 2, 1], 1.0,
        ("HugeLogits", "NegInf", "Uniform"), "±8192, −inf, equal logits, exact in bfloat16 and float16", low=True)
    add([[2.0, 1.0, -1.0, 0.5], [0.375, 0.25, 0.125, 0.0]], [0, 3], 0.25, (),
        "T = 0.25, exact in bfloat16 and float16", low=True)
    return out


def _tempered_invalid(objective) -> list[Case]:
    z = [[1.0, 2.0, -0.5], [0.0, 0.5, 1.5]]
    y = {"labels": [0, 1]} if objective == LP else {}
    bad = [
        ({"logits": z, **y}, {"temperature": 0.0}, "temperature 0"),
        ({"logits": z, **y}, {"temperature": -1.0}, "negative temperature"),
        ({"logits": [[1.0, float("nan")], [0.0, 0.5]], **({"labels": [0, 0]} if y else {})}, {}, "NaN logit"),
        ({"logits": [[1.0, float("inf")], [0.0, 0.5]], **({"labels": [0, 0]} if y else {})}, {}, "+inf logit"),
        ({"logits": [[NEG_INF, NEG_INF], [0.0, 0.5]], **({"labels": [0, 0]} if y else {})}, {},
         "a row −inf everywhere"),
        ({"logits": [1.0, 2.0], **({"labels": [0]} if y else {})}, {}, "logits of rank 1"),
    ]
    if objective == LP:
        bad += [
            ({"logits": z, "labels": [3, 0]}, {}, "label V = 3 is outside [0, V)"),
            ({"logits": z, "labels": [-100, 0]}, {}, "label −100: token_logprobs has no ignore_index"),
            ({"logits": [[1.0, NEG_INF], [0.0, 0.5]], "labels": [1, 0]}, {}, "−inf at the label: log q_y = −∞"),
            ({"logits": z, "labels": [0]}, {}, "labels shorter than the rows"),
        ]
    return [_case(objective, inputs, params, {}, "invalid", ("InvalidInput",), why, result="invalid")
            for inputs, params, why in bad]


def cases() -> list[Case]:
    out = _ce_random() + _ce_edges() + _ce_low() + _ce_invalid()
    out += _lce_random() + _lce_edges() + _lce_low() + _lce_invalid()
    for objective, seed in ((LP, 3000), (ENT, 5000)):
        out += _tempered_random(objective, seed, 20)
        out += _tempered_edges(objective)
        out += _tempered_random(objective, seed + 20000, 60, low=True)
        out += _large(objective, seed + 20500, {}, {})
        out += _tempered_invalid(objective)
    return out + lm_smoothing.ce_cases() + lm_smoothing.lce_cases() + [_case(**spec) for spec in lm_pitfalls.cases()]


# ----------------------------------------------------------------------------- tolerance scales
#
# As for the distillation losses (conformance/generate/distill_scales.py): a careful implementation
# forms log q_v = (z_v − max)/T − log Σ …, rounding the exponents and the log-sum-exp, so log q_v
# carries an absolute error ≈ u·A_v, A_v = (|z_v| + |max z|)/T + |log q_v|; those errors do not grow
# with V and enter divided by d = 1 + log2 V (k_base roundings, not k_base·(1 + log2 V)). The values
# reduce terms of the sizes below; a gradient is judged against the largest of |c|·(q_j + [j = y] + …):
# q_y − 1 formed as softmax − one-hot (PyTorch's own backward) has an absolute error of u, which is
# allowed, while the expm1 form keeps digits the scale does not ask for.

SCALE_DPS = 20


class _RowScale:
    def __init__(self, row, T):
        z = [mpmath.mpf(v) for v in row]
        self.live = [not mpmath.isinf(v) for v in z]
        m = max(v for v, f in zip(z, self.live) if f)
        x = [(v - m) / T if f else None for v, f in zip(z, self.live)]
        self.l1 = mpmath.log(mpmath.fsum(mpmath.exp(xi) for xi in x if xi is not None))
        self.lse = m / T + self.l1
        self.logq = [xi - self.l1 if xi is not None else None for xi in x]
        self.q = [mpmath.exp(lq) if lq is not None else mpmath.mpf(0) for lq in self.logq]
        self.A = [(abs(v) + abs(m)) / T + abs(lq) if f else mpmath.mpf(0) for v, lq, f in zip(z, self.logq, self.live)]
        self.m = abs(m) / T
        self.d = 1 + mpmath.log(len(z), 2)


def _cap(row, s):
    return [v if s is None else float(s) * math.tanh(v / float(s)) if math.isfinite(v) else -float(s) for v in row]


def _smoothed(kwargs, y, v) -> list[int]:
    """The classes label smoothing spreads ε over: all V, or the V − 1 but the label ('others')."""
    return [j for j in range(v) if kwargs.get("smoothing_classes", "all") == "all" or j != y]


def _ce_rows(kwargs, ct):
    """Per counted row of a cross-entropy with cotangent ``ct``: (row index, its _RowScale, the term's
    magnitude, its value bound, the gradient bound per logit)."""
    eps, zeta = mpmath.mpf(kwargs["label_smoothing"]), mpmath.mpf(kwargs["z_loss"])
    for i, (row, y) in enumerate(zip(kwargs["logits"], kwargs["labels"])):
        if y == kwargs["ignore_index"]:
            continue
        R = _RowScale(_cap(row, kwargs["softcap"]), 1)
        v = len(row)
        nll = -R.logq[y]
        smoothed = _smoothed(kwargs, y, v)
        share = len(smoothed) or 1
        smooth = mpmath.fsum(-R.logq[j] for j in smoothed) / share if eps else 0
        lse_err = 2 * abs(R.lse) * (R.m + R.l1) / R.d
        term = abs((1 - eps) * nll + eps * smooth + zeta * R.lse ** 2)
        value = ((1 - eps) * (nll + R.A[y] / R.d)
                 + eps * (smooth + mpmath.fsum(R.A[j] for j in smoothed) / (share * R.d)) + zeta * (R.lse ** 2 + lse_err))
        c = abs(mpmath.mpf(ct[i] if isinstance(ct, list) else ct))
        grad = [c * (R.q[j] * (1 + 2 * zeta * abs(R.lse) + R.A[j] / R.d + 2 * zeta * (R.m + R.l1) / R.d)
                     + (1 - eps) * (j == y) + eps * (j in smoothed) / share) for j in range(v)]
        yield i, R, term, value, grad


def _ce_denominator(kwargs, counted: int):
    if kwargs["reduction"] != "mean":
        return 1
    return mpmath.mpf(kwargs["normalizer"]) if kwargs["normalizer"] is not None else counted


def _ce_scale(kwargs, outputs, grads):
    with mpmath.workdps(SCALE_DPS):
        rows = list(_ce_rows(kwargs, _cotangent(CE, kwargs)))
        values = [value for *_, value, _ in rows]
        gmax = [max(grad) for *_, grad in rows]
        if kwargs["reduction"] == "none":
            return {"loss": max(values, default=mpmath.mpf(0)), "grad:logits": max(gmax, default=mpmath.mpf(0))}
        den = _ce_denominator(kwargs, len(rows))
        return {"loss": mpmath.fsum(values) / den, "elements:loss": mpmath.fsum(term for _, _, term, _, _ in rows) / den,
                "grad:logits": max(gmax, default=mpmath.mpf(0)) / den}


def _logprobs_scale(kwargs, outputs, grads):
    with mpmath.workdps(SCALE_DPS):
        T = mpmath.mpf(kwargs["temperature"])
        ct = _cotangent(LP, kwargs)
        values, gmax = [], []
        for row, y, c in zip(kwargs["logits"], kwargs["labels"], ct):
            R = _RowScale(row, T)
            values.append(-R.logq[y] + R.A[y] / R.d)
            gmax.append(abs(mpmath.mpf(c)) / T * max(R.q[j] * (1 + R.A[j] / R.d) + (j == y) for j in range(len(row))))
        return {"logp": max(values), "grad:logits": max(gmax)}


def _entropy_scale(kwargs, outputs, grads):
    with mpmath.workdps(SCALE_DPS):
        T = mpmath.mpf(kwargs["temperature"])
        ct = _cotangent(ENT, kwargs)
        values, gmax = [], []
        for row, c in zip(kwargs["logits"], ct):
            R = _RowScale(row, T)
            h = mpmath.fsum(qj * -lq for qj, lq in zip(R.q, R.logq) if lq is not None)
            spread = mpmath.fsum(qj * aj for qj, aj in zip(R.q, R.A))
            values.append(h + spread / R.d)
            gmax.append(abs(mpmath.mpf(c)) / T * max(qj * (abs(lq) + h + (aj + spread) / R.d)
                                                     for qj, lq, aj in zip(R.q, R.logq, R.A) if lq is not None))
        return {"entropy": max(values), "grad:logits": max(gmax)}


# lm.linear_cross_entropy: the logits z = h·wᵀ + b are formed by an implementation, not given. A careful
# one forms each as a length-H dot product (a float32 one for bfloat16/float16 inputs, whose products
# are exact in float32), so that |δz_nv| ≤ γ_{H+1}·M_nv ≈ (H+1)·u·M_nv with M_nv = Σ_h |h_nh·w_vh| + |b_v|
# (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., §3.1, eq. 3.5; the bias is one
# more term). In units of u, the bounds below are
#   loss:  k_base·D·S_ce + Σ_n w_n·Σ_v |∂ℓ_n/∂z_nv|·(H+1)·M_nv       (the plain cross-entropy's bound at
#          the exact logits, S_ce its scale, D = 1 + log2(N·V) its growth; then the logits' errors)
#   G_nv:  k_base·D·g_nv + w_n·(H+1)·max_j M_nj·Σ_j |∂G_nv/∂z_nj|/max  (g_nv the cross-entropy's own
#          per-logit gradient bound; the second-order change of the softmax with the logits' errors)
#   hidden G·w:  Σ_v |w_vh|·e(G_nv) + V·Σ_v |G_nv·w_vh|   weight Gᵀ·h: Σ_n |h_nh|·e(G_nv) + N·Σ_n |G_nv·h_nh|
#   bias Σ_n G_n: Σ_n e(G_nv) + N·Σ_n |G_nv|
# and the scale is the bound divided by k_base·(1 + log2 n), n = V·H the reduction length the
# tolerance grows with, so that the tolerance k·u·scale is the bound itself. For bfloat16/float16
# (the careful model), the implementation may store the logits and G in the dtype (F.linear's output
# and backward do; Liger 0.8.5 ops/fused_linear_cross_entropy.py keeps the chunk's logits and its
# gradient in the input dtype): one rounding of each, u·|z_nv| and u·|G_nv|, which scale.elements
# carries (÷ K_ELEM, since the careful model multiplies it by K_ELEM) beside the terms of the loss
# and |want| of each gradient.

def _softmax_jacobian_bound(R, g0, j, zeta, cap, z):
    """Σ_j |∂G_v/∂z_j| per unit change of every logit (first order), for logit v = j here: the
    softmax's q_v·(δ_vj − q_j) summed (≤ 2q_v), the z-loss's 2ζ·(lse·∂q + q·∂lse), and the cap's
    d sech²(z/s)/dz = −(2/s)·sech²·tanh."""
    q, lse = R.q[j], abs(R.lse)
    if cap is None:
        return q * (2 * (1 + 2 * zeta * lse) + 2 * zeta)
    t = mpmath.tanh(mpmath.mpf(z) / cap)
    sech2 = 1 - t * t
    return q * (2 * (1 + 2 * zeta * lse) + 2 * zeta) * sech2 + abs(g0) * 2 / cap * sech2 * abs(t)


def _lce_scale(kwargs, outputs, grads):
    with mpmath.workdps(SCALE_DPS):
        h, w = np.asarray(kwargs["hidden"], dtype=float), np.asarray(kwargs["weight"], dtype=float)
        b = np.asarray(kwargs["bias"], dtype=float) if kwargs.get("bias") is not None else np.zeros(len(w))
        n, hd = h.shape
        v = w.shape[0]
        z = [[math.fsum([float(h[i, k] * w[j, k]) for k in range(hd)] + [float(b[j])]) for j in range(v)]
             for i in range(n)]
        M = np.abs(h) @ np.abs(w).T + np.abs(b)
        eps, zeta = mpmath.mpf(kwargs["label_smoothing"]), mpmath.mpf(kwargs["z_loss"])
        cap = None if kwargs["softcap"] is None else mpmath.mpf(kwargs["softcap"])
        ct = _cotangent(LCE, kwargs)
        ce = {**kwargs, "logits": z}
        rows = list(_ce_rows(ce, ct))
        den = _ce_denominator(kwargs, len(rows))
        reduce = kwargs["reduction"] != "none"
        k_base = catalog.get(LCE).k_base
        D = 1 + mpmath.log(n * v, 2)
        G, eG = np.zeros((n, v)), np.zeros((n, v))       # |G| and its error bound (units of u)
        dG = np.zeros((n, v))                            # G's change per unit change of the row's logits
        values, terms, stored = [], [], []
        for i, R, term, value, gbound in rows:
            y = kwargs["labels"][i]
            per = 1 / den if reduce else 1
            c = abs(mpmath.mpf(ct[i] if isinstance(ct, list) else ct)) * per
            # |∂ℓ/∂z_j|: the exact gradient of the token's loss (without its cotangent)
            smoothed = _smoothed(kwargs, y, v)
            g0 = [R.q[j] * (1 + 2 * zeta * R.lse) - (1 - eps) * (j == y) - eps * (j in smoothed) / (len(smoothed) or 1)
                  for j in range(v)]
            sens = [abs(g) * (1 if cap is None else 1 - mpmath.tanh(mpmath.mpf(z[i][j]) / cap) ** 2)
                    for j, g in enumerate(g0)]
            logit_error = (hd + 1) * mpmath.fsum(sj * float(M[i, j]) for j, sj in enumerate(sens))
            values.append(per * (k_base * D * value + logit_error))
            terms.append(per * term)
            stored.append(per * mpmath.fsum(sj * abs(z[i][j]) for j, sj in enumerate(sens)))
            mmax = float(M[i].max())
            for j in range(v):
                G[i, j] = float(c * sens[j])
                dG[i, j] = float(c * _softmax_jacobian_bound(R, g0[j], j, zeta, cap, z[i][j]))
                eG[i, j] = float(k_base * D * gbound[j] * per) + (hd + 1) * mmax * dG[i, j]
        zmax = np.array([max(abs(t) for t in row) for row in z])
        d_n = k_base * (1 + math.log2(v * hd))
        aw, ah = np.abs(w), np.abs(h)
        bound_h = eG @ aw + v * (G @ aw)
        bound_w = eG.T @ ah + n * (G.T @ ah)
        bound_b = eG.sum(axis=0) + n * G.sum(axis=0)
        # the low dtype: G_nv stored (u·|G_nv|) and the logits stored (u·|z_n|·|∂G_nv/∂z|), per element
        store = G + dG * zmax[:, None]
        want = {k: np.abs(np.asarray(g, dtype=float)) for k, g in grads.items()}

        def top(a):
            return mpmath.mpf(float(a.max())) if a.size else mpmath.mpf(0)
        out = {"grad:hidden": top(bound_h) / d_n, "grad:weight": top(bound_w) / d_n,
               "elements:grad:hidden": top(want["hidden"] + store @ aw / K_ELEM),
               "elements:grad:weight": top(want["weight"] + store.T @ ah / K_ELEM)}
        if "bias" in grads:
            out["grad:bias"] = top(bound_b) / d_n
            out["elements:grad:bias"] = top(want["bias"] + store.sum(axis=0) / K_ELEM)
        if not reduce:
            out["loss"] = max(values, default=mpmath.mpf(0)) / d_n
            per_token = [mpmath.mpf(0)] * n     # an ignored token's loss is exactly 0
            for (i, *_), term, st in zip(rows, terms, stored):
                per_token[i] = term + st / K_ELEM
            out["elements:loss"] = per_token
        else:
            out["loss"] = mpmath.fsum(values) / d_n
            out["elements:loss"] = mpmath.fsum(terms) + mpmath.fsum(stored) / K_ELEM
        return out


SCALES = {CE: _ce_scale, LP: _logprobs_scale, ENT: _entropy_scale, LCE: _lce_scale}
