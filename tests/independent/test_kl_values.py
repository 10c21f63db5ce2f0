"""Independent 40-digit values for kl.estimator (k1, k2, k3, with and without a clamp) and its
gradient.

Written from Schulman, "Approximating KL Divergence" (2020), with r = π_ref(y)/π(y) for y
sampled from π, i.e. log r = ref_logp − logp:

    k1 = −log r,   k2 = (log r)²/2,   k3 = (r − 1) − log r        (DeepSeekMath §4.1.1 eq. 4: k3)

and with ``clamp=c`` the value clipped to [−c, c] (OpenRLHF and verl clamp; no paper does).
Gradient by hand (d log r/d logp = −1): k1 → 1, k2 → −log r, k3 → 1 − r; 0 where the clamp is
active (no row has a value on the clamp bound).
"""
from __future__ import annotations

import mpmath as mpm
import pytest
from decimal_tables import Table

from refimpl.exact import kl


def estimate(log_r, kind):
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return log_r ** 2 / 2
    return (mpm.exp(log_r) - 1) - log_r


def slope(log_r, kind):
    if kind == "k1":
        return mpm.mpf(1)
    if kind == "k2":
        return -log_r
    return 1 - mpm.exp(log_r)


def kl_values(logp, ref_logp, kind, clamp):
    values = [estimate(r - p, kind) for p, r in zip(logp, ref_logp)]
    if clamp is not None:
        values = [min(max(v, -clamp), clamp) for v in values]
    return {"value": values}


def kl_gradient(cotangent, logp, ref_logp, kind, clamp):
    grad = []
    for c, p, r in zip(cotangent, logp, ref_logp):
        clamped = clamp is not None and abs(estimate(r - p, kind)) > clamp
        grad.append(mpm.mpf(0) if clamped else c * slope(r - p, kind))
    return {"grad:logp": grad}


# log r = ref_logp − logp = (0.5, −0.75, −0.125, −2.5, 0.625) and, in the last two rows,
# log r = (0.1, −0.3, 1.7, −0.05, 0.0) in binary64 (not dyadic).
# Literals: decimal_tables.literals(Table.expressions(row)) at 60 digits, i.e. kl_values and
# kl_gradient above, e.g. k3: (mp.exp(ref_logp - logp) - 1) - (ref_logp - logp).
KL_ROWS = [
    {"id": "k1",
     "inputs": {"logp": [-2.5, -0.75, -4.125, -1.0, -6.0],
                "ref_logp": [-2.0, -1.5, -4.25, -3.5, -5.375]},
     "params": {"kind": "k1", "clamp": None},
     "cotangent": [1.0, -0.5, 2.0, 0.25, -1.5],
     "expect": {
         "value": ["-0.5000000000000000000000000000000000000000",
                   "0.7500000000000000000000000000000000000000",
                   "0.1250000000000000000000000000000000000000",
                   "2.500000000000000000000000000000000000000",
                   "-0.6250000000000000000000000000000000000000"],
         "grad:logp": ["1.000000000000000000000000000000000000000",
                       "-0.5000000000000000000000000000000000000000",
                       "2.000000000000000000000000000000000000000",
                       "0.2500000000000000000000000000000000000000",
                       "-1.500000000000000000000000000000000000000"]}},
    {"id": "k2",
     "inputs": {"logp": [-2.5, -0.75, -4.125, -1.0, -6.0],
                "ref_logp": [-2.0, -1.5, -4.25, -3.5, -5.375]},
     "params": {"kind": "k2", "clamp": None},
     "cotangent": [1.0, -0.5, 2.0, 0.25, -1.5],
     "expect": {
         "value": ["0.1250000000000000000000000000000000000000",
                   "0.2812500000000000000000000000000000000000",
                   "0.007812500000000000000000000000000000000000",
                   "3.125000000000000000000000000000000000000",
                   "0.1953125000000000000000000000000000000000"],
         "grad:logp": ["-0.5000000000000000000000000000000000000000",
                       "-0.3750000000000000000000000000000000000000",
                       "0.2500000000000000000000000000000000000000",
                       "0.6250000000000000000000000000000000000000",
                       "0.9375000000000000000000000000000000000000"]}},
    {"id": "k3",
     "inputs": {"logp": [-2.5, -0.75, -4.125, -1.0, -6.0],
                "ref_logp": [-2.0, -1.5, -4.25, -3.5, -5.375]},
     "params": {"kind": "k3", "clamp": None},
     "cotangent": [1.0, -0.5, 2.0, 0.25, -1.5],
     "expect": {
         "value": ["0.1487212707001281468486507878141635716538",
                   "0.2223665527410147071380465509432679129702",
                   "0.007496902584595402864892143229050736222005",
                   "1.582084998623898795169528674467159807838",
                   "0.2432459574322224065018356201881044531150"],
         "grad:logp": ["-0.6487212707001281468486507878141635716538",
                       "-0.2638167236294926464309767245283660435149",
                       "0.2350061948308091942702157135418985275560",
                       "0.2294787503440253012076178313832100480405",
                       "1.302368936148333609752753430282156679672"]}},
    {"id": "k1-clamp",
     "inputs": {"logp": [-2.5, -0.75, -4.125, -1.0, -6.0],
                "ref_logp": [-2.0, -1.5, -4.25, -3.5, -5.375]},
     "params": {"kind": "k1", "clamp": 0.6},
     "cotangent": [1.0, -0.5, 2.0, 0.25, -1.5],
     "expect": {
         "value": ["-0.5000000000000000000000000000000000000000",
                   "0.5999999999999999777955395074968691915274",
                   "0.1250000000000000000000000000000000000000",
                   "0.5999999999999999777955395074968691915274",
                   "-0.5999999999999999777955395074968691915274"],
         "grad:logp": ["1.000000000000000000000000000000000000000",
                       "0",
                       "2.000000000000000000000000000000000000000",
                       "0",
                       "0"]}},
    {"id": "k2-clamp",
     "inputs": {"logp": [-2.5, -0.75, -4.125, -1.0, -6.0],
                "ref_logp": [-2.0, -1.5, -4.25, -3.5, -5.375]},
     "params": {"kind": "k2", "clamp": 0.25},
     "cotangent": [1.0, -0.5, 2.0, 0.25, -1.5],
     "expect": {
         "value": ["0.1250000000000000000000000000000000000000",
                   "0.2500000000000000000000000000000000000000",
                   "0.007812500000000000000000000000000000000000",
                   "0.2500000000000000000000000000000000000000",
                   "0.1953125000000000000000000000000000000000"],
         "grad:logp": ["-0.5000000000000000000000000000000000000000",
                       "0",
                       "0.2500000000000000000000000000000000000000",
                       "0",
                       "0.9375000000000000000000000000000000000000"]}},
    {"id": "k3-clamp",
     "inputs": {"logp": [-2.5, -0.75, -4.125, -1.0, -6.0],
                "ref_logp": [-2.0, -1.5, -4.25, -3.5, -5.375]},
     "params": {"kind": "k3", "clamp": 0.2},
     "cotangent": [1.0, -0.5, 2.0, 0.25, -1.5],
     "expect": {
         "value": ["0.1487212707001281468486507878141635716538",
                   "0.2000000000000000111022302462515654042363",
                   "0.007496902584595402864892143229050736222005",
                   "0.2000000000000000111022302462515654042363",
                   "0.2000000000000000111022302462515654042363"],
         "grad:logp": ["-0.6487212707001281468486507878141635716538",
                       "0",
                       "0.2350061948308091942702157135418985275560",
                       "0",
                       "0"]}},
    {"id": "k3-nondyadic",
     "inputs": {"logp": [-1.2, -0.4, -2.9, -0.85, -3.3],
                "ref_logp": [-1.1, -0.7, -1.2, -0.9, -3.3]},
     "params": {"kind": "k3", "clamp": None},
     "cotangent": [1.0, -0.5, 2.0, 0.25, -1.5],
     "expect": {
         "value": ["0.005170918075647610800126854264249987362029",
                   "0.04081822068171784880189904156943649262236",
                   "2.773947391727199562107686452721031101357",
                   "0.001229424500714011257273953520726975480017",
                   "0"],
         "grad:logp": ["-0.1051709180756474775733638992454651365262",
                       "-0.1295908896591410422923597404605855409799",
                       "-8.947894783454399035397530935429538968824",
                       "0.01219264387482150828791175787138366036631",
                       "0"]}},
    {"id": "k2-clamp-nondyadic",
     "inputs": {"logp": [-1.2, -0.4, -2.9, -0.85, -3.3],
                "ref_logp": [-1.1, -0.7, -1.2, -0.9, -3.3]},
     "params": {"kind": "k2", "clamp": 0.5},
     "cotangent": [1.0, -0.5, 2.0, 0.25, -1.5],
     "expect": {
         "value": ["0.004999999999999986677323704498130389601604",
                   "0.04499999999999998001598555674718449104593",
                   "0.5000000000000000000000000000000000000000",
                   "0.001250000000000002220446049250314066923395",
                   "0"],
         "grad:logp": ["-0.09999999999999986677323704498121514916420",
                       "-0.1499999999999999666933092612453037872910",
                       "0",
                       "0.01250000000000001110223024625156540423632",
                       "0"]}},
]

TABLES = [Table("kl.estimator", KL_ROWS, kl_values, kl.estimator, kl_gradient, kl.estimator_vjp,
                output="value")]
CASES = [case for table in TABLES for case in table.cases()]
IDS = [f"{table.objective}:{row['id']}" for table, row in CASES]


@pytest.mark.parametrize("table,row", CASES, ids=IDS)
def test_literals_are_the_written_expressions(table, row):
    table.check_literals(row)


@pytest.mark.parametrize("table,row", CASES, ids=IDS)
def test_hand_gradient_is_the_derivative_of_the_written_estimator(table, row):
    table.check_hand_gradient(row)


@pytest.mark.parametrize("table,row", CASES, ids=IDS)
def test_reference_matches_literals(table, row):
    table.check_reference(row)
