"""Independent 40-digit values for preference.cpo with its chosen NLL term, and its gradient.

Written from CPO (Xu et al. 2024, arXiv 2401.08417) §3: L_prefer = −log σ(β(c − r)) on the
sequence log-probabilities c, r of the chosen and rejected responses (with ε = label_smoothing the
cDPO mixture −(1−ε)·log σ(z) − ε·log σ(−z) that TRL and Liger apply), plus α = cpo_alpha times
L_NLL of the chosen response: −c (the paper's −log π(y_w|x), 'seq-mean-token-sum'), −c/n
('seq-mean-token-mean') or −c·B/Σn ('token-mean', the pair's share of the batch token mean),
n = chosen_lengths. Rewards β·c and β·r.

Gradient by hand, for a cotangent (c_ℓ, c_w, c_l): ∂/∂c = c_ℓ·(β·ℓ'(z) − α/d) + β·c_w,
∂/∂r = −c_ℓ·β·ℓ'(z) + β·c_l, with ℓ'(z) = −(1−ε)·σ(−z) + ε·σ(z) and d = 1, n, Σn/B.
"""
from __future__ import annotations

import mpmath as mpm
from decimal_tables import Table, over_rows

from lossproof.refimpl.exact import preference


def sigma(x):
    return 1 / (1 + mpm.exp(-x))


def divisors(n_pairs, aggregation, lengths):
    if aggregation in (None, "seq-mean-token-sum"):
        return [1] * n_pairs
    if aggregation == "seq-mean-token-mean":
        return list(lengths)
    return [mpm.mpf(sum(int(k) for k in lengths)) / n_pairs] * n_pairs


def cpo_values(chosen_logps, rejected_logps, beta, label_smoothing, cpo_alpha, nll_aggregation,
               chosen_lengths=None):
    d = divisors(len(chosen_logps), nll_aggregation, chosen_lengths)
    eps = label_smoothing
    losses = [-(1 - eps) * mpm.log(sigma(beta * (c - r))) - eps * mpm.log(sigma(-beta * (c - r))) - cpo_alpha * c / k
              for c, r, k in zip(chosen_logps, rejected_logps, d)]
    return {"losses": losses, "chosen_rewards": [beta * c for c in chosen_logps],
            "rejected_rewards": [beta * r for r in rejected_logps]}


def cpo_gradient(cotangent, chosen_logps, rejected_logps, beta, label_smoothing, cpo_alpha, nll_aggregation,
                 chosen_lengths=None):
    d = divisors(len(chosen_logps), nll_aggregation, chosen_lengths)
    eps = label_smoothing
    out_c, out_r = [], []
    for i, (c, r, k) in enumerate(zip(chosen_logps, rejected_logps, d)):
        z = beta * (c - r)
        slope = -(1 - eps) * sigma(-z) + eps * sigma(z)
        ct = cotangent["losses"][i]
        out_c.append(ct * (beta * slope - cpo_alpha / k) + beta * cotangent["chosen_rewards"][i])
        out_r.append(-ct * beta * slope + beta * cotangent["rejected_rewards"][i])
    return {"grad:chosen_logps": out_c, "grad:rejected_logps": out_r}


INPUTS = {"chosen_logps": [-14.25, -3.5, -27.875], "rejected_logps": [-15.75, -2.125, -30.0]}
COTANGENT = {"losses": [1.0, 0.5, -2.0], "chosen_rewards": [0.25, -1.0, 0.0], "rejected_rewards": [0.0, 0.75, -0.5]}
CPO_ROWS = [
    {"id": "cpo-nll-seq-mean-token-sum",
     "inputs": {"chosen_logps": [-14.25, -3.5, -27.875],
                "rejected_logps": [-15.75, -2.125, -30.0]},
     "params": {"beta": 0.1, "label_smoothing": 0.0, "cpo_alpha": 1.0, "nll_aggregation": "seq-mean-token-sum"},
     "cotangent": COTANGENT,
     "expect": {
         "losses": ["14.87095704778953207366217158704264021353",
                    "4.264258602453678345502064986204987283926",
                    "28.46753112342779423792443593335008905710"],
         "chosen_rewards": ["-1.425000000000000079103390504542403505184",
                            "-0.3500000000000000194289029309402394574136",
                            "-2.787500000000000154737334057131192821544"],
         "rejected_rewards": ["-1.575000000000000087430063189231077558361",
                              "-0.2125000000000000117961196366422882420011",
                              "-3.000000000000000166533453693773481063545"],
         "grad:chosen_logps": ["-1.021257015465625046028499575033993037689",
                               "-0.6267160471834652373644030275560456590605",
                               "2.089414802373418820717717565082558541708"],
         "grad:rejected_logps": ["0.04625701546562504741627835581543871321826",
                                 "0.1017160471834652359766242467745999835309",
                                 "-0.1394148023734188234932751266454498927674"]}},
    {"id": "cpo-nll-seq-mean-token-mean",
     "inputs": {"chosen_logps": [-14.25, -3.5, -27.875],
                "rejected_logps": [-15.75, -2.125, -30.0],
                "chosen_lengths": [5, 1, 12]},
     "params": {"beta": 0.1, "label_smoothing": 0.25, "cpo_alpha": 0.5, "nll_aggregation": "seq-mean-token-mean"},
     "cotangent": COTANGENT,
     "expect": {
         "losses": ["2.083457047789532075743839758214808726829",
                    "2.479883602453678343593869162630499480072",
                    "1.807114456761127574206799175843994450935"],
         "chosen_rewards": ["-1.425000000000000079103390504542403505184",
                            "-0.3500000000000000194289029309402394574136",
                            "-2.787500000000000154737334057131192821544"],
         "rejected_rewards": ["-1.575000000000000087430063189231077558361",
                              "-0.2125000000000000117961196366422882420011",
                              "-3.000000000000000166533453693773481063545"],
         "grad:chosen_logps": ["-0.09625701546562504464072079425254736215918",
                               "-0.3642160471834652366705136371653228212957",
                               "0.1227481357067521512754933368530005239826"],
         "grad:rejected_logps": ["0.02125701546562504602849957503399303768872",
                                 "0.08921604718346523528273485638387714576615",
                                 "-0.08941480237341882071771756508255854170833"]}},
    {"id": "cpo-nll-token-mean",
     "inputs": {"chosen_logps": [-14.25, -3.5, -27.875],
                "rejected_logps": [-15.75, -2.125, -30.0],
                "chosen_lengths": [5, 1, 12]},
     "params": {"beta": 0.1, "label_smoothing": 0.1, "cpo_alpha": 2.0, "nll_aggregation": "token-mean"},
     "cotangent": COTANGENT,
     "expect": {
         "losses": ["5.385957047789532075327506123980375070393",
                    "1.917175269120345010642174994012063665139",
                    "9.905447790094460906950326527345213437650"],
         "chosen_rewards": ["-1.425000000000000079103390504542403505184",
                            "-0.3500000000000000194289029309402394574136",
                            "-2.787500000000000154737334057131192821544"],
         "rejected_rewards": ["-1.575000000000000087430063189231077558361",
                              "-0.2125000000000000117961196366422882420011",
                              "-3.000000000000000166533453693773481063545"],
         "grad:chosen_logps": ["-0.3445903487989583782516098837421697997835",
                               "-0.2883827138501319034759581819101340401079",
                               "0.7360814690400854851639381824989120658980"],
         "grad:rejected_logps": ["0.03625701546562504630605533119028214197975",
                                 "0.09671604718346523542151273446202169791166",
                                 "-0.1194148023734188212728290773951367502904"]}},
]

TABLES = [Table("preference.cpo", CPO_ROWS, cpo_values, preference.cpo, cpo_gradient, preference.cpo_vjp)]
ROWS = over_rows(TABLES)


@ROWS
def test_literals_are_the_written_expressions(table, row):
    table.check_literals(row)


@ROWS
def test_hand_gradient_is_the_derivative_of_the_written_loss(table, row):
    table.check_hand_gradient(row)


@ROWS
def test_reference_matches_literals(table, row):
    table.check_reference(row)


def test_every_nll_aggregation_is_tabulated():
    assert {row["params"]["nll_aggregation"] for row in CPO_ROWS} == {
        "seq-mean-token-sum", "seq-mean-token-mean", "token-mean"}
