"""Independent 40-digit values for grpo.rollout_correction.

The weights as the sources write them, with ratios rather than log-ratios (no code shared with
refimpl.exact): the token ratio ρ_t = π_old(y_t)/π_rollout(y_t) = exp(old_logp_t)/exp(rollout_logp_t),
the sequence ratio Π_t ρ_t over the valid tokens (its geometric mean (Π_t ρ_t)^(1/n) for
seq_log_ratio="mean", OpenRLHF 0.11.2), verl 0.9.1's ±20 log clamp as a clamp of the ratio to
[e^−20, e^20]; truncated IS (Yao et al. 2025 [tis-blog]) min(max(ρ, lower), upper); masked IS /
IcePop (arXiv 2510.18855, the IcePop objective) M(ρ) = ρ on [lower, upper], 0 outside; kept_weight 'one' keeps 1,
'token-ratio' the token's own ρ_t. Zero outside the mask.
"""
from __future__ import annotations

import mpmath
from decimal_tables import Table, over_rows

from lossproof.refimpl.exact import grpo


def correction_values(old_logp, rollout_logp, mask, level, correction, lower, upper, seq_log_ratio,
                      kept_weight, log_ratio_clamp):
    def clamped(r):
        if log_ratio_clamp is None:
            return r
        return min(max(r, mpmath.exp(-log_ratio_clamp)), mpmath.exp(log_ratio_clamp))

    weights, keep = [], []
    for o, q, m in zip(old_logp, rollout_logp, mask):
        rho = [mpmath.exp(a) / mpmath.exp(b) for a, b in zip(o, q)]
        on = [t for t in range(len(m)) if m[t] == 1]
        seq = mpmath.fprod(rho[t] for t in on) if on else None
        if seq is not None and seq_log_ratio == "mean":
            seq = mpmath.root(seq, len(on))
        wrow, krow = [], []
        for t in range(len(m)):
            if m[t] != 1:
                wrow.append(0)
                krow.append(0)
                continue
            w = clamped(seq if level == "sequence" else rho[t])
            if correction == "truncate":
                v = w if upper is None else min(w, upper)
                wrow.append(v if lower is None else max(v, lower))
                krow.append(1)
            elif (lower is None or w >= lower) and (upper is None or w <= upper):
                wrow.append({"ratio": w, "token-ratio": clamped(rho[t]), "one": 1}[kept_weight])
                krow.append(1)
            else:
                wrow.append(0)
                krow.append(0)
        weights.append(wrow)
        keep.append(krow)
    return {"weights": weights, "keep": keep}


def _p(level="token", correction="truncate", lower=None, upper=2.0, seq_log_ratio="sum", kept_weight="ratio",
       log_ratio_clamp=None):
    return {"level": level, "correction": correction, "lower": lower, "upper": upper,
            "seq_log_ratio": seq_log_ratio, "kept_weight": kept_weight, "log_ratio_clamp": log_ratio_clamp}


# d = old − rollout: row 0 ≈ (0.35, −0.9, 1.3, 0.05); row 1 ≈ (−0.2, 0.6, ·, ·) with two padded
# positions holding a huge log-ratio; row 2 ≈ (−25, 0.1, 0.2, 0.3) (beyond verl's ±20 clamp).
OLD = [[-1.1, -2.6, -0.35, -3.05], [-0.3, -1.2, 0.0, 0.0], [-30.0, -0.7, -0.9, -1.45]]
ROLL = [[-1.45, -1.7, -1.65, -3.1], [-0.1, -1.8, -900.0, -1.0], [-5.0, -0.8, -1.1, -1.75]]
MASK = [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]]
INPUTS = {"old_logp": OLD, "rollout_logp": ROLL, "mask": MASK}

# Literals: decimal_tables.literals(Table.expressions(row)) at 60 digits (keep written as 0/1).
CORRECTION_ROWS = [
    {"id": "tis", "inputs": INPUTS, "params": _p(),
     "expect": {
         "weights": [["1.419067548593257059212619748346400927733", "0.4065696597405990577174945566821875770184", "2.000000000000000000000000000000000000000", "1.051271096376024319812407953038207044767"], ["0.8187307530779818723045415041570777191246", "1.822118800390509136712027331835890938634", "0", "0"], ["0.00000000001388794386496402059466176374608685691040", "1.105170918075647722970603777986778587183", "1.221402758160169915282839861645218007682", "1.349858807576003163929517439885502187154"]],
         "keep": [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]]}},
    {"id": "tis-lower", "inputs": INPUTS, "params": _p(lower=0.5, upper=3.0),
     "expect": {
         "weights": [["1.419067548593257059212619748346400927733", "0.5000000000000000000000000000000000000000", "3.000000000000000000000000000000000000000", "1.051271096376024319812407953038207044767"], ["0.8187307530779818723045415041570777191246", "1.822118800390509136712027331835890938634", "0", "0"], ["0.5000000000000000000000000000000000000000", "1.105170918075647722970603777986778587183", "1.221402758160169915282839861645218007682", "1.349858807576003163929517439885502187154"]],
         "keep": [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]]}},
    {"id": "token-mask", "inputs": INPUTS, "params": _p(correction="mask", lower=0.5, upper=3.0),
     "expect": {
         "weights": [["1.419067548593257059212619748346400927733", "0", "0", "1.051271096376024319812407953038207044767"], ["0.8187307530779818723045415041570777191246", "1.822118800390509136712027331835890938634", "0", "0"], ["0", "1.105170918075647722970603777986778587183", "1.221402758160169915282839861645218007682", "1.349858807576003163929517439885502187154"]],
         "keep": [[1, 0, 0, 1], [1, 1, 0, 0], [0, 1, 1, 1]]}},
    {"id": "token-mask-clamp", "inputs": INPUTS, "params": _p(correction="mask", lower=1e-12, upper=5.0, log_ratio_clamp=20.0),
     "expect": {
         "weights": [["1.419067548593257059212619748346400927733", "0.4065696597405990577174945566821875770184", "3.669296667619243976033231241736793819536", "1.051271096376024319812407953038207044767"], ["0.8187307530779818723045415041570777191246", "1.822118800390509136712027331835890938634", "0", "0"], ["0.000000002061153622438557827965940380155820976376", "1.105170918075647722970603777986778587183", "1.221402758160169915282839861645218007682", "1.349858807576003163929517439885502187154"]],
         "keep": [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]]}},
    {"id": "token-tis-clamp", "inputs": INPUTS, "params": _p(log_ratio_clamp=20.0),
     "expect": {
         "weights": [["1.419067548593257059212619748346400927733", "0.4065696597405990577174945566821875770184", "2.000000000000000000000000000000000000000", "1.051271096376024319812407953038207044767"], ["0.8187307530779818723045415041570777191246", "1.822118800390509136712027331835890938634", "0", "0"], ["0.000000002061153622438557827965940380155820976376", "1.105170918075647722970603777986778587183", "1.221402758160169915282839861645218007682", "1.349858807576003163929517439885502187154"]],
         "keep": [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]]}},
    {"id": "sequence-truncate", "inputs": INPUTS, "params": _p(level="sequence", upper=3.0),
     "expect": {
         "weights": [["2.225540928492467456328730667915884938445", "2.225540928492467456328730667915884938445", "2.225540928492467456328730667915884938445", "2.225540928492467456328730667915884938445"], ["1.491824697641270475169375115288303381825", "1.491824697641270475169375115288303381825", "0", "0"], ["0.00000000002530548361511897502800563120924058304778", "0.00000000002530548361511897502800563120924058304778", "0.00000000002530548361511897502800563120924058304778", "0.00000000002530548361511897502800563120924058304778"]],
         "keep": [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]]}},
    {"id": "sequence-truncate-clamp", "inputs": INPUTS, "params": _p(level="sequence", upper=3.0, log_ratio_clamp=20.0),
     "expect": {
         "weights": [["2.225540928492467456328730667915884938445", "2.225540928492467456328730667915884938445", "2.225540928492467456328730667915884938445", "2.225540928492467456328730667915884938445"], ["1.491824697641270475169375115288303381825", "1.491824697641270475169375115288303381825", "0", "0"], ["0.000000002061153622438557827965940380155820976376", "0.000000002061153622438557827965940380155820976376", "0.000000002061153622438557827965940380155820976376", "0.000000002061153622438557827965940380155820976376"]],
         "keep": [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]]}},
    {"id": "sequence-mask", "inputs": INPUTS, "params": _p(level="sequence", correction="mask", lower=0.1, upper=3.0),
     "expect": {
         "weights": [["2.225540928492467456328730667915884938445", "2.225540928492467456328730667915884938445", "2.225540928492467456328730667915884938445", "2.225540928492467456328730667915884938445"], ["1.491824697641270475169375115288303381825", "1.491824697641270475169375115288303381825", "0", "0"], ["0", "0", "0", "0"]],
         "keep": [[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]]}},
    {"id": "sequence-mean-token-ratio", "inputs": INPUTS, "params": _p(level="sequence", correction="mask", lower=0.5, upper=5.0, seq_log_ratio="mean", kept_weight="token-ratio"),
     "expect": {
         "weights": [["1.419067548593257059212619748346400927733", "0.4065696597405990577174945566821875770184", "3.669296667619243976033231241736793819536", "1.051271096376024319812407953038207044767"], ["0.8187307530779818723045415041570777191246", "1.822118800390509136712027331835890938634", "0", "0"], ["0", "0", "0", "0"]],
         "keep": [[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]]}},
    {"id": "sequence-mean-one", "inputs": INPUTS, "params": _p(level="sequence", correction="mask", lower=0.5, seq_log_ratio="mean", kept_weight="one"),
     "expect": {
         "weights": [["1", "1", "1", "1"], ["1", "1", "0", "0"], ["0", "0", "0", "0"]],
         "keep": [[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]]}},
]

TABLES = [Table("grpo.rollout_correction", CORRECTION_ROWS, correction_values, grpo.rollout_correction)]
ROWS = over_rows(TABLES)


@ROWS
def test_literals_are_the_written_expressions(table, row):
    table.check_literals(row)


@ROWS
def test_reference_matches_literals(table, row):
    table.check_reference(row)
