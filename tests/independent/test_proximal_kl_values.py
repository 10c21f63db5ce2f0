"""Independent 40-digit values for proximal_kl.future_cost.

The future KL cost as DESIGN §4 states it (reconstructed from the Proximal KL summary, article
004, and FRPO arXiv 2601.10201; the paper text is not public in our sources):

    F_t = Σ_{t < u, m_u = 1} (logp_u − ref_logp_u)

with ``window=W`` keeping only u ≤ t + W, and ``clip=c`` clipping F_t to [−c, c]. F_t is
defined at every position (masked or not); only the later tokens are masked. Detached: no
gradient.
"""
from __future__ import annotations

from decimal_tables import Table, over_rows

from lossproof.refimpl.exact import proximal_kl


def future_cost_values(logp, ref_logp, mask, clip, window):
    cost = []
    for lp, rp, m in zip(logp, ref_logp, mask):
        T = len(lp)
        row = []
        for t in range(T):
            last = T - 1 if window is None else min(T - 1, t + window)
            f = sum((lp[u] - rp[u] for u in range(t + 1, last + 1) if m[u] == 1), 0)
            row.append(f if clip is None else min(max(f, -clip), clip))
        cost.append(row)
    return {"cost": cost}


# k = logp − ref_logp: row 0 ≈ (0.4, −0.6, 0.85, −0.45, 0.3), all tokens; row 1 ≈ (0.2, −0.75,
# 0.5, 0.55, 0.2) with tokens 2 and 4 masked out. Binary64 inputs that are not dyadic, so the
# sums carry every digit of their binary64 values.
# Literals: decimal_tables.literals(Table.expressions(row)) at 60 digits, i.e.
# future_cost_values: min(max(mp.fsum(lp[u] - ref[u] for u in range(t+1, t+W+1) if m[u]), -c), c).
FUTURE_COST_ROWS = [
    {"id": "unbounded",
     "inputs": {"logp": [[-1.1, -2.6, -0.35, -3.05, -1.7], [-0.3, -4.0, -2.1, -1.45, -0.8]],
                "ref_logp": [[-1.5, -2.0, -1.2, -2.6, -2.0], [-0.5, -3.25, -2.6, -2.0, -1.0]],
                "mask": [[1, 1, 1, 1, 1], [1, 1, 0, 1, 0]]},
     "params": {"clip": None, "window": None},
     "expect": {
         "cost": [["0.1000000000000001998401444325281772762537",
                   "0.7000000000000002886579864025407005101442",
                   "-0.1499999999999996891375531049561686813831",
                   "0.3000000000000000444089209850062616169453",
                   "0"],
                  ["-0.1999999999999999555910790149937383830547",
                   "0.5500000000000000444089209850062616169453",
                   "0.5500000000000000444089209850062616169453",
                   "0",
                   "0"]]}},
    {"id": "clip",
     "inputs": {"logp": [[-1.1, -2.6, -0.35, -3.05, -1.7], [-0.3, -4.0, -2.1, -1.45, -0.8]],
                "ref_logp": [[-1.5, -2.0, -1.2, -2.6, -2.0], [-0.5, -3.25, -2.6, -2.0, -1.0]],
                "mask": [[1, 1, 1, 1, 1], [1, 1, 0, 1, 0]]},
     "params": {"clip": 0.25, "window": None},
     "expect": {
         "cost": [["0.1000000000000001998401444325281772762537",
                   "0.2500000000000000000000000000000000000000",
                   "-0.1499999999999996891375531049561686813831",
                   "0.2500000000000000000000000000000000000000",
                   "0"],
                  ["-0.1999999999999999555910790149937383830547",
                   "0.2500000000000000000000000000000000000000",
                   "0.2500000000000000000000000000000000000000",
                   "0",
                   "0"]]}},
    {"id": "window",
     "inputs": {"logp": [[-1.1, -2.6, -0.35, -3.05, -1.7], [-0.3, -4.0, -2.1, -1.45, -0.8]],
                "ref_logp": [[-1.5, -2.0, -1.2, -2.6, -2.0], [-0.5, -3.25, -2.6, -2.0, -1.0]],
                "mask": [[1, 1, 1, 1, 1], [1, 1, 0, 1, 0]]},
     "params": {"clip": None, "window": 2},
     "expect": {
         "cost": [["0.2499999999999998889776975374843459576368",
                   "0.4000000000000002442490654175344388931990",
                   "-0.1499999999999996891375531049561686813831",
                   "0.3000000000000000444089209850062616169453",
                   "0"],
                  ["-0.7500000000000000000000000000000000000000",
                   "0.5500000000000000444089209850062616169453",
                   "0.5500000000000000444089209850062616169453",
                   "0",
                   "0"]]}},
    {"id": "window1-clip",
     "inputs": {"logp": [[-1.1, -2.6, -0.35, -3.05, -1.7], [-0.3, -4.0, -2.1, -1.45, -0.8]],
                "ref_logp": [[-1.5, -2.0, -1.2, -2.6, -2.0], [-0.5, -3.25, -2.6, -2.0, -1.0]],
                "mask": [[1, 1, 1, 1, 1], [1, 1, 0, 1, 0]]},
     "params": {"clip": 0.2, "window": 1},
     "expect": {
         "cost": [["-0.2000000000000000111022302462515654042363",
                   "0.2000000000000000111022302462515654042363",
                   "-0.2000000000000000111022302462515654042363",
                   "0.2000000000000000111022302462515654042363",
                   "0"],
                  ["-0.2000000000000000111022302462515654042363",
                   "0",
                   "0.2000000000000000111022302462515654042363",
                   "0",
                   "0"]]}},
    {"id": "window-beyond-end",
     "inputs": {"logp": [[-1.1, -2.6, -0.35, -3.05, -1.7], [-0.3, -4.0, -2.1, -1.45, -0.8]],
                "ref_logp": [[-1.5, -2.0, -1.2, -2.6, -2.0], [-0.5, -3.25, -2.6, -2.0, -1.0]],
                "mask": [[1, 1, 1, 1, 1], [1, 1, 0, 1, 0]]},
     "params": {"clip": None, "window": 10},
     "expect": {
         "cost": [["0.1000000000000001998401444325281772762537",
                   "0.7000000000000002886579864025407005101442",
                   "-0.1499999999999996891375531049561686813831",
                   "0.3000000000000000444089209850062616169453",
                   "0"],
                  ["-0.1999999999999999555910790149937383830547",
                   "0.5500000000000000444089209850062616169453",
                   "0.5500000000000000444089209850062616169453",
                   "0",
                   "0"]]}},
]

TABLES = [Table("proximal_kl.future_cost", FUTURE_COST_ROWS, future_cost_values,
                proximal_kl.future_cost, output="cost")]
ROWS = over_rows(TABLES)


@ROWS
def test_literals_are_the_written_expressions(table, row):
    table.check_literals(row)


@ROWS
def test_reference_matches_literals(table, row):
    table.check_reference(row)
