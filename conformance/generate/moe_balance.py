"""Vectors for ``moe.load_balancing``: Switch Transformer (Fedus et al. 2021, arXiv 2101.03961) §2.2
eq. 4–6, transformers 5.25.0 models/mixtral/modeling_mixtral.py load_balancing_loss_func (layers
pooled), the per-layer sum, and DeepSeek-V3 (arXiv 2412.19437) §2.1.2 eq. 17–20 (sequence-wise, on
normalised sigmoid affinities).

Top-k is a discontinuous choice: a tie at the k-th place, or logits so close that an
implementation's rounded probabilities tie or swap, would make f ambiguous. Valid cases keep the
k-th and (k+1)-th logits of every selected row at least ``GAP`` apart (drawn on a 1/8 grid of
distinct values, so bfloat16 and float16 hold them and their softmax probabilities differ by far
more than a rounding); the tie itself is one acceptable case (the references take the lowest index,
torch.topk promises no order). Rows are small (E ≤ 8, N ≤ 16, L ≤ 3) to keep the file small.

``fraction_norm`` 'top_k' (1.7.0: Megatron-core's and OLMo-core's f/k) has its own group,
``FRACTION_GROUPS``, drawn after every earlier case so that their test ids stay.
"""
from __future__ import annotations

import math

import mpmath

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated, paper

OBJ = "moe.load_balancing"
SWITCH, V3 = "2101.03961", "2412.19437"
FORMS = ("switch", "concatenated", "per-layer-sum", "sequence")
GAP = 0.125

NOTES = {
    "BalanceRandom": {"category": "random", "description": "Random router logits from a fixed seed: per token a "
                      "permutation of distinct multiples of 1/8 (spread up to ±6) plus a common offset, so no two "
                      "logits of a token are closer than 1/8 and top-k never hinges on a rounding; k from 1 to 4.",
                      "bugType": "formula",
                      "effect": "f and P computed over the wrong set (top-k only, or not normalised by the token "
                                "count) change the auxiliary loss.",
                      "links": ["https://github.com/paiml/aprender/pull/2162",
                                "https://github.com/AI-Hypercomputer/maxtext/pull/1433",
                                "https://github.com/huggingface/transformers/issues/28021"]},
    "BalanceMasked": {"category": "convention", "description": "A token mask: f and P run over the selected tokens "
                      "only; masked rows hold far-off logits (±30 alternating) that must not reach the counts, the "
                      "probabilities or the gradient (transformers' load_balancing_loss_func without its "
                      "attention_mask counts them).",
                      "bugType": "masking",
                      "effect": "Masked tokens counted in f or P, or their logits reaching the gradient.",
                      "links": ["https://github.com/huggingface/transformers/issues/28505",
                                "https://github.com/huggingface/transformers/pull/28517"]},
    "BalanceLayers": {"category": "convention", "description": "Router logits of L = 2 or 3 layers [L, N, E]: pooled "
                      "('concatenated': transformers) or summed layer by layer ('per-layer-sum', 'sequence').",
                      "bugType": "convention",
                      "effect": "Layers pooled where they should be summed layer by layer (or the reverse).",
                      "links": ["https://github.com/huggingface/transformers/issues/28255"]},
    "BalanceSequences": {"category": "convention", "description": "The 'sequence' form with seq_len: N/seq_len "
                         "sequences, each with its own f and P (DeepSeek-V3 eq. 17–20), then their mean.",
                         "bugType": "normalization",
                         "effect": "Sequence-wise balance computed over the whole batch, or averaged over another "
                                   "count."},
    "BalanceUniform": {"category": "edge", "description": "Every expert gets the same count: G is the same for every "
                       "expert and the gradient is exactly 0 (it is formed as a difference of equal terms).",
                       "bugType": "degenerate-input",
                       "effect": "Equal counts: the gradient must be exactly 0; a difference of equal terms formed "
                                 "carelessly leaves noise."},
    "BalanceAllExperts": {"category": "edge", "description": "k = E: every expert is in every top-k, f is constant "
                          "and the gradient 0 (Switch form: the loss is E·k·(1/E)·Σ P = k).",
                          "bugType": "degenerate-input",
                          "effect": "k = E: f is constant and the loss is k; a top-k over all experts mishandled "
                                    "shows here."},
    "BalanceTopKTie": {"category": "edge", "description": "Two logits tie at the k-th place: the references take "
                       "the lower index; torch.topk promises no order among equal values, so the vector is "
                       "acceptable.",
                       "bugType": "degenerate-input",
                       "effect": "A tie at the k-th place: the choice of expert is implementation-defined."},
    "BalanceEmptySequence": {"category": "edge", "description": "The 'sequence' form with a sequence whose tokens are "
                             "all masked: it leaves the mean over sequences.",
                             "bugType": "masking",
                             "effect": "A fully masked sequence counted in the mean over sequences: 0/0 or a wrong "
                                       "denominator."},
}
# LowPrecision and InvalidInput are the family's (conformance.generate.moe).

GROUPS = {
    "switch-k1": "Switch Transformer (arXiv 2101.03961) §2.2 eq. 4–6: α·N·Σ_i f_i·P_i with k = 1 routing (the "
                 "coefficient α left out): the paper default",
    "switch": "Switch Transformer eq. 4 with k > 1: f_e the fraction of tokens whose top k include e (Σ f = k), as "
              "transformers 5.25.0 load_balancing_loss_func counts it; one layer",
    "concatenated": "transformers 5.25.0 models/mixtral/modeling_mixtral.py load_balancing_loss_func (also "
                    "Qwen2-MoE, Qwen3-MoE, OLMoE): the layers' tokens pooled, attention mask weighting both "
                    "statistics, times num_experts",
    "per-layer-sum": "the Switch loss of each layer, summed over the layers (one auxiliary loss per MoE layer)",
    "sequence": "DeepSeek-V3 (arXiv 2412.19437) §2.1.2 eq. 17–20: sequence-wise balance loss on s'_{i,t} = "
                "s_{i,t}/Σ_j s_{j,t}, s = σ(u·e) (eq. 15), f_i = E/(K·T)·count; mean over sequences, summed over "
                "layers (α left out)",
    "balance-invalid": "inputs outside the domain",
}


FRACTION_GROUPS = {
    "fraction-top_k": "f_e divided by k (Σ_e f_e = 1), the loss E/k·Σ_e f_e·P_e: Megatron-core 0.16.1 "
                      "megatron/core/transformer/moe/moe_utils.py switch_load_balancing_loss_func (one layer's "
                      "loss, E/(topk·T²)·Σ_e probs_e·tokens_e; one per layer) and OLMo-core 3.0.0 "
                      "olmo_core/nn/moe/loss.py load_balancing_loss (scale = num_experts / top_k); switch, "
                      "per-layer-sum and concatenated forms",
}


def _case(group, inputs, params, flags, comment, seed, recipe, low=False, result="valid", provenance=None) -> Case:
    form = "switch" if group == "switch-k1" else group
    conv = {} if group == "balance-invalid" else {"form": form}
    return Case(OBJ, inputs, params=params, conventions=conv, group=group, flags=flags, comment=comment,
                low_precision=low, result=result, provenance=provenance or generated(seed, recipe))


def _rows(r, n, e, spread):
    """n rows of E distinct logits on the 1/8 grid within ±spread (plus a per-token offset)."""
    half = max(int(spread * 8), e)
    out = []
    for _ in range(n):
        grid = r.choice(2 * half + 1, size=e, replace=False) - half
        offset = int(r.integers(-8, 9))
        out.append([float(g + offset) / 8.0 for g in grid])
    return out


def _junk(logits, mask):
    return [row if on else [30.0 if (i + j) % 2 else -30.0 for j in range(len(row))]
            for i, (row, on) in enumerate(zip(logits, mask))]


def _mask(r, n):
    mask = [int(v) for v in (r.random(n) < 0.75)]
    mask[int(r.integers(0, n))] = 1
    return mask


def _draw(r, group, i, low):
    """Inputs, params and flags of a random case of ``group``."""
    e = int(r.choice([2, 4, 8] if low else [2, 3, 4, 6, 8]))
    k = 1 if group == "switch-k1" else int(r.integers(1, min(e, 4) + 1))
    if group == "switch" and k == 1 and e > 1:
        k = 2
    layers = int(r.choice([2, 3])) if group in ("concatenated", "per-layer-sum") or (group == "sequence" and i % 3 == 0) \
        else 1
    params, flags = {"top_k": k}, ["BalanceRandom"]
    if group == "sequence" and i % 2 == 1:
        seq = int(r.choice([2, 4, 6]))
        n = seq * int(r.integers(1, 5))
        params["seq_len"] = seq
        flags.append("BalanceSequences")
    else:
        n = int(r.choice([1, 3, 8, 12, 16] if not low else [3, 8, 16]))
    spread = float(r.choice([1.0, 3.0, 6.0]))
    z = [_rows(r, n, e, spread) for _ in range(layers)]
    inputs = {"router_logits": z if layers > 1 else z[0]}
    if layers > 1:
        flags.append("BalanceLayers")
    if i % 3 == 2 and n > 1:
        mask = _mask(r, n)
        inputs = {"router_logits": [_junk(zl, mask) for zl in z] if layers > 1 else _junk(z[0], mask), "mask": mask}
        flags.append("BalanceMasked")
    return inputs, params, tuple(flags), f"L={layers}, N={n}, E={e}, k={k}, spread {spread:g}"


def _random(group: str, gi: int, i: int) -> Case:
    seed = 33000 + 100 * gi + i
    inputs, params, flags, note = _draw(S.rng(seed), group, i, False)
    return _case(group, inputs, params, flags, "random " + note, seed, "distinct logits on the 1/8 grid")


def _edges() -> list[Case]:
    out = []
    # every expert chosen once per two tokens: equal counts, gradient exactly 0
    z = [[1.0, 0.0, -1.0, -2.0], [-2.0, -1.0, 0.0, 1.0], [0.0, 1.0, -2.0, -1.0], [-1.0, -2.0, 1.0, 0.0]]
    for group in ("switch-k1", "concatenated", "per-layer-sum", "sequence"):
        logits = [z, z[::-1]] if group in ("concatenated", "per-layer-sum") else z
        out.append(_case(group, {"router_logits": logits}, {"top_k": 1}, ("BalanceUniform",),
                         "each of the 4 experts is the top-1 of one token: uniform counts, gradient 0", 0, "fixed"))
    for group in ("switch", "sequence"):
        out.append(_case(group, {"router_logits": [[0.5, -1.0, 2.0], [0.0, 0.0, 0.0]]}, {"top_k": 3},
                         ("BalanceAllExperts",), "k = E = 3: f constant, gradient 0", 0, "fixed"))
    tie = {"router_logits": [[1.0, 1.0, -0.5], [0.25, -1.0, 2.0], [0.0, 1.5, 1.5]]}
    for group in ("switch-k1", "sequence"):
        out.append(_case(group, tie, {"top_k": 1}, ("BalanceTopKTie",),
                         "rows 1 and 3 tie at the top: the lower index is counted", 0, "fixed", result="acceptable"))
    out.append(_case("sequence", {"router_logits": [[0.5, -0.25, 1.0], [-3.0, 3.0, 0.0], [1.5, 0.0, -1.0],
                                                    [0.25, 2.0, -2.0]], "mask": [1, 1, 0, 0]},
                     {"top_k": 1, "seq_len": 2}, ("BalanceEmptySequence", "BalanceSequences", "BalanceMasked"),
                     "the second sequence has no token", 0, "fixed"))
    return out


# ----------------------------------------------------------------------------- low precision

LOW_CASES = 48            # on the 1/8 grid: every one is exact in bfloat16 and float16


def _low(i: int) -> Case:
    seed = 33500 + i
    groups = [g for g in GROUPS if g != "balance-invalid"]
    group = groups[i % len(groups)]
    inputs, params, flags, note = _draw(S.rng(seed), group, i // len(groups), True)
    return _case(group, inputs, params, flags + ("LowPrecision",), "random " + note + ", exact in bfloat16 and "
                 "float16", seed, "distinct logits on the 1/8 grid", low=True)


FRACTION_FORMS = ("switch", "per-layer-sum", "concatenated")


def _fraction(i: int, low: bool) -> Case:
    """A random case of 'fraction-top_k': the forms in turn, drawn as their own groups are, with
    2 ≤ k < E (k = 1 makes the two fraction_norm values agree, k = E makes f constant); a draw
    with E = 2 is drawn again from the next seed."""
    form = FRACTION_FORMS[i % len(FRACTION_FORMS)]
    seed = 34000 + (1000 if low else 0) + 10 * i
    while True:
        r = S.rng(seed)
        inputs, params, flags, note = _draw(r, form, i // len(FRACTION_FORMS), low)
        e = len(inputs["router_logits"][0][0] if form != "switch" else inputs["router_logits"][0])
        if e > 2:
            break
        seed += 1
    k = min(max(params["top_k"], 2), e - 1)
    note = note.replace(f"k={params['top_k']}", f"k={k}")
    where = ", exact in bfloat16 and float16" if low else ""
    return Case(OBJ, inputs, params={**params, "top_k": k}, conventions={"form": form, "fraction_norm": "top_k"},
                group="fraction-top_k", flags=flags + (("LowPrecision",) if low else ()),
                comment=f"random {note}, f/k{where}", low_precision=low,
                provenance=generated(seed, "distinct logits on the 1/8 grid"))


def _fraction_cases() -> list[Case]:
    ok = [[1.0, 2.0], [0.5, -0.5]]
    bad = [({"form": "sequence", "fraction_norm": "top_k"}, "fraction_norm 'top_k' with form 'sequence' (whose f "
            "divides by k already)"),
           ({"form": "switch", "fraction_norm": "experts"}, "unknown fraction_norm")]
    return ([_fraction(i, False) for i in range(12)] + [_fraction(i, True) for i in range(12)]
            + [Case(OBJ, {"router_logits": ok}, conventions=conv, group="balance-invalid", result="invalid",
                    flags=("InvalidInput",), comment=why, provenance=generated(0, "fixed")) for conv, why in bad])


def cases() -> list[Case]:
    out = [_case("switch-k1", {"router_logits": [[2.0, 0.0], [1.0, -1.0], [0.0, 1.0]]}, {"top_k": 1}, (),
                 "N = 3 tokens, E = 2: f = (2/3, 1/3)", 0, "fixed",
                 provenance=paper(SWITCH, "§2.2 eq. 4–6")),
           _case("sequence", {"router_logits": [[2.0, 0.0, -1.0], [1.0, -1.0, 0.5]]}, {"top_k": 1}, (),
                 "one sequence of T = 2 tokens, E = 3, K = 1", 0, "fixed", provenance=paper(V3, "§2.1.2 eq. 17–20"))]
    for gi, group in enumerate(g for g in GROUPS if g != "balance-invalid"):
        out += [_random(group, gi, i) for i in range(12)]
    out += _edges()
    out += [_low(i) for i in range(LOW_CASES)]
    ok = [[1.0, 2.0], [0.5, -0.5]]
    bad = [
        ({"router_logits": [[1.0, math.nan], [0.5, -0.5]]}, {}, {}, "NaN logit"),
        ({"router_logits": [[1.0, -math.inf], [0.5, -0.5]]}, {}, {}, "−inf logit"),
        ({"router_logits": [1.0, 2.0]}, {}, {}, "rank-1 logits"),
        ({"router_logits": [ok, ok]}, {}, {"form": "switch"}, "layered logits with the one-layer switch form"),
        ({"router_logits": ok}, {"top_k": 3}, {}, "top_k above E"),
        ({"router_logits": ok}, {"top_k": 0}, {}, "top_k 0"),
        ({"router_logits": ok}, {"top_k": 1.5}, {}, "top_k 1.5"),
        ({"router_logits": ok, "mask": [0, 0]}, {}, {}, "mask selects no token"),
        ({"router_logits": ok, "mask": [1, 1, 0]}, {}, {}, "mask shape differs"),
        ({"router_logits": ok}, {}, {"form": "mean"}, "unknown form"),
        ({"router_logits": ok}, {"seq_len": 3}, {"form": "sequence"}, "seq_len does not divide N"),
        ({"router_logits": ok}, {"seq_len": 1}, {"form": "concatenated"}, "seq_len with a form that has no sequences"),
    ]
    for inputs, params, conv, why in bad:
        out.append(Case(OBJ, inputs, params=params, conventions=conv, group="balance-invalid", result="invalid",
                        flags=("InvalidInput",), comment=why, provenance=generated(0, "fixed")))
    return out + _fraction_cases()


def _affinities(row, form):
    """softmax(x) or s/Σ s (s = σ(x)), and per entry the factor the gradient carries (1 or σ(−x))."""
    x = [mpmath.mpf(v) for v in row]
    if form == "sequence":
        s = [1 / (1 + mpmath.exp(-v)) for v in x]
        total = mpmath.fsum(s)
        return [v / total for v in s], [1 / (1 + mpmath.exp(v)) for v in x]
    top = max(x)
    ex = [mpmath.exp(v - top) for v in x]
    total = mpmath.fsum(ex)
    return [v / total for v in ex], [mpmath.mpf(1)] * len(x)


def scale(kwargs, outputs, grads):
    """The loss is a sum of non-negative terms f·P: its own size, plus for the gradient
    Σ G·q_j·(1 + |x_j − max x|) per entry (q_j(G_j − Σ G q) cancels to exactly 0 where the counts are
    equal; the probabilities carry a relative error growing with |x_j − max x|), G_max the largest
    count coefficient (divided by k under fraction_norm 'top_k'); elements: the loss."""
    z = kwargs["router_logits"]
    layers = z if isinstance(z[0][0], list) else [z]
    form = kwargs["form"]
    mask = kwargs.get("mask") or [1] * len(layers[0])
    loss = abs(mpmath.mpf(outputs["loss"]))
    e = len(layers[0][0])
    k = kwargs["top_k"]
    n = sum(mask)
    # the largest count coefficient G (at most E/n when the layers' counts are pooled or per layer;
    # E/(k·T·n_seq), T the fewest tokens of a sequence, for 'sequence')
    if form == "sequence":
        t = kwargs.get("seq_len") or len(mask)
        lengths = [sum(mask[b:b + t]) for b in range(0, len(mask), t)]
        lengths = [v for v in lengths if v]
        g_max = mpmath.mpf(e) / (k * min(lengths) * len(lengths))
    else:
        g_max = mpmath.mpf(e) / n
    if kwargs.get("fraction_norm") == "top_k":
        g_max /= k
    grad = mpmath.mpf(0)
    for layer in layers:
        for row, on in zip(layer, mask):
            if not on:
                continue
            q, rest = _affinities(row, form)
            top = max(mpmath.mpf(v) for v in row)
            for qj, rj, v in zip(q, rest, row):
                grad = max(grad, g_max * qj * rj * (1 + abs(mpmath.mpf(v) - top)))
    return {"loss": loss, "elements:loss": loss, "grad:router_logits": grad}
