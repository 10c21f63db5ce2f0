"""Independent 40-digit values for dpo.loss, every loss type, and its gradient.

Written from the papers (Δ = (pc − rc) − (pr − rr) with pc, pr the policy and rc, rr the
reference log-probabilities of the chosen / rejected response, z = βΔ,
σ(x) = 1/(1 + e^{−x}), ε = label_smoothing):

    sigmoid  −log σ(z)                                  DPO (Rafailov et al. 2023) eq. 7;
             −(1−ε)·log σ(z) − ε·log σ(−z) with ε > 0   (conservative DPO, as OpenRLHF applies ε)
    cdpo     −(1−ε)·log σ(z) − ε·log σ(−z)              cDPO (Mitchell 2023)
    robust   ((1−ε)·(−log σ(z)) − ε·(−log σ(−z)))/(1−2ε)  rDPO (Chowdhury et al. 2024): the loss of
             the observed order minus ε times that of the flipped order, debiased by 1−2ε
    hinge    max(0, 1 − z)                              SLiC (Zhao et al. 2023), margin 1/β
    ipo      (Δ − 1/(2β))²                              IPO (Azar et al. 2023) eq. 17, τ = β
    rewards  β·(pc − rc), β·(pr − rr)                   DPO §5

ε does not enter hinge or ipo (rows "hinge-ls" and "ipo-ls" pass ε > 0 to show it is ignored).

Gradient by hand, for a cotangent (c_ℓ, c_w, c_l) on (losses, chosen_rewards, rejected_rewards):
∂/∂pc = c_ℓ·ℓ'(Δ) + β·c_w, ∂/∂pr = −c_ℓ·ℓ'(Δ) + β·c_l, where (d log σ(x)/dx = σ(−x))

    sigmoid, cdpo  ℓ' = β·(−(1−ε)·σ(−z) + ε·σ(z))      (DPO §5: −β·σ(−βΔ) at ε = 0)
    robust         ℓ' = β·(−(1−ε)·σ(−z) − ε·σ(z))/(1−2ε)
    hinge          ℓ' = −β where 1 − z > 0, else 0      (no row sits on the kink z = 1)
    ipo            ℓ' = 2·(Δ − 1/(2β))
"""
from __future__ import annotations

import mpmath as mpm
from decimal_tables import Table, over_rows

from refimpl.exact import dpo


def sigma(x):
    return 1 / (1 + mpm.exp(-x))


def margin_loss(delta, beta, loss_type, eps):
    z = beta * delta
    if loss_type in ("sigmoid", "cdpo"):
        return -(1 - eps) * mpm.log(sigma(z)) - eps * mpm.log(sigma(-z))
    if loss_type == "robust":
        return ((1 - eps) * -mpm.log(sigma(z)) - eps * -mpm.log(sigma(-z))) / (1 - 2 * eps)
    if loss_type == "hinge":
        return max(mpm.mpf(0), 1 - z)
    return (delta - 1 / (2 * beta)) ** 2


def margin_slope(delta, beta, loss_type, eps):
    z = beta * delta
    if loss_type in ("sigmoid", "cdpo"):
        return beta * (-(1 - eps) * sigma(-z) + eps * sigma(z))
    if loss_type == "robust":
        return beta * (-(1 - eps) * sigma(-z) - eps * sigma(z)) / (1 - 2 * eps)
    if loss_type == "hinge":
        return -beta if 1 - z > 0 else mpm.mpf(0)
    return 2 * (delta - 1 / (2 * beta))


def dpo_values(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
               reference_rejected_logps, beta, loss_type, label_smoothing):
    out = {"losses": [], "chosen_rewards": [], "rejected_rewards": []}
    for pc, pr, rc, rr in zip(policy_chosen_logps, policy_rejected_logps,
                              reference_chosen_logps, reference_rejected_logps):
        out["losses"].append(margin_loss((pc - rc) - (pr - rr), beta, loss_type, label_smoothing))
        out["chosen_rewards"].append(beta * (pc - rc))
        out["rejected_rewards"].append(beta * (pr - rr))
    return out


def dpo_gradient(cotangent, policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
                 reference_rejected_logps, beta, loss_type, label_smoothing):
    d_chosen, d_rejected = [], []
    for i, (pc, pr, rc, rr) in enumerate(zip(policy_chosen_logps, policy_rejected_logps,
                                             reference_chosen_logps, reference_rejected_logps)):
        through_loss = cotangent["losses"][i] * margin_slope((pc - rc) - (pr - rr), beta, loss_type,
                                                              label_smoothing)
        d_chosen.append(through_loss + beta * cotangent["chosen_rewards"][i])
        d_rejected.append(-through_loss + beta * cotangent["rejected_rewards"][i])
    return {"grad:policy_chosen_logps": d_chosen, "grad:policy_rejected_logps": d_rejected}


# Margins: pairs A Δ = (1.75, −1.125, −3), B Δ = (4.75, −4.25, 2.25), C Δ = (12.5, 9.5, −0.75).
# Literals: decimal_tables.literals(Table.expressions(row)) at 60 digits, i.e. dpo_values and
# dpo_gradient above, e.g. sigmoid: -(1-eps)*mp.log(1/(1+mp.exp(-beta*((pc-rc)-(pr-rr))))) - ….
DPO_ROWS = [
    {"id": "sigmoid",
     "inputs": {"policy_chosen_logps": [-14.25, -3.5, -27.875],
                "policy_rejected_logps": [-15.75, -2.125, -30.0],
                "reference_chosen_logps": [-14.75, -3.0, -26.5],
                "reference_rejected_logps": [-14.5, -2.75, -31.625]},
     "params": {"beta": 0.1, "loss_type": "sigmoid", "label_smoothing": 0.0},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["0.6094704306630468173186942826808044060203",
                    "0.7509783782388968196920502942471171651793",
                    "0.8543552444685271283809780628945872406949"],
         "chosen_rewards": ["0.05000000000000000277555756156289135105908",
                            "-0.05000000000000000277555756156289135105908",
                            "-0.1375000000000000076327832942979512154125"],
         "rejected_rewards": ["-0.1250000000000000069388939039072283776477",
                              "0.06250000000000000346944695195361418882385",
                              "0.1625000000000000090205620750793968909420"],
         "grad:policy_chosen_logps": ["-0.02063613127629211446299476846413103068573",
                                      "-0.1264047687204193586165467820500634910179",
                                      "0.1148885033623318046222170765263815856963"],
         "grad:policy_rejected_logps": ["0.04563613127629211585077354924557670621527",
                                        "0.1014047687204193572287680012686178154884",
                                        "-0.1648885033623318073977746380892729367553"]}},
    {"id": "sigmoid-ls",
     "inputs": {"policy_chosen_logps": [-8.0, -20.5, -5.25],
                "policy_rejected_logps": [-11.5, -18.25, -9.0],
                "reference_chosen_logps": [-9.5, -19.0, -6.0],
                "reference_rejected_logps": [-8.25, -21.0, -7.5]},
     "params": {"beta": 0.5, "loss_type": "sigmoid", "label_smoothing": 0.1},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["0.3264394654749387388335786252436742212807",
                    "2.025322278771569257561150042353339921851",
                    "0.3936501362483147818145098200700636000730"],
         "chosen_rewards": ["0.7500000000000000000000000000000000000000",
                            "-0.7500000000000000000000000000000000000000",
                            "0.3750000000000000000000000000000000000000"],
         "rejected_rewards": ["-1.625000000000000000000000000000000000000",
                              "1.375000000000000000000000000000000000000",
                              "-0.7500000000000000000000000000000000000000"],
         "grad:policy_chosen_logps": ["0.1324504774964898845469889606354775337313",
                                      "-0.6983273515135872008396484625282244322731",
                                      "0.1450850131323717032042288093389516196056"],
         "grad:policy_rejected_logps": ["-0.007450477496489884546988960635477533731284",
                                        "0.5733273515135872008396484625282244322731",
                                        "-0.3950850131323717032042288093389516196056"]}},
    {"id": "cdpo",
     "inputs": {"policy_chosen_logps": [-14.25, -3.5, -27.875],
                "policy_rejected_logps": [-15.75, -2.125, -30.0],
                "reference_chosen_logps": [-14.75, -3.0, -26.5],
                "reference_rejected_logps": [-14.5, -2.75, -31.625]},
     "params": {"beta": 0.1, "loss_type": "cdpo", "label_smoothing": 0.1},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["0.6269704306630468192615845757748284056877",
                    "0.7397283782388968184430493915438160225359",
                    "0.8243552444685271250503089890191175269793"],
         "chosen_rewards": ["0.05000000000000000277555756156289135105908",
                            "-0.05000000000000000277555756156289135105908",
                            "-0.1375000000000000076327832942979512154125"],
         "rejected_rewards": ["-0.1250000000000000069388939039072283776477",
                              "0.06250000000000000346944695195361418882385",
                              "0.1625000000000000090205620750793968909420"],
         "grad:policy_chosen_logps": ["-0.01063613127629211335277174383897445944722",
                                      "-0.1214047687204193580614352697374852053987",
                                      "0.09488850336233180240177102727606844321923"],
         "grad:policy_rejected_logps": ["0.03563613127629211474055052462042013497676",
                                        "0.09640476872041935667365648895603952986915",
                                        "-0.1448885033623318051773285888389597942783"]}},
    {"id": "cdpo-beta2",
     "inputs": {"policy_chosen_logps": [-8.0, -20.5, -5.25],
                "policy_rejected_logps": [-11.5, -18.25, -9.0],
                "reference_chosen_logps": [-9.5, -19.0, -6.0],
                "reference_rejected_logps": [-8.25, -21.0, -7.5]},
     "params": {"beta": 2.0, "loss_type": "cdpo", "label_smoothing": 0.3},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["2.850074849028629161692900661639927768000",
                    "5.950203447672129537461607798857391407135",
                    "1.361047744848593766361608110584218614362"],
         "chosen_rewards": ["3.000000000000000000000000000000000000000",
                            "-3.000000000000000000000000000000000000000",
                            "1.500000000000000000000000000000000000000"],
         "rejected_rewards": ["-6.500000000000000000000000000000000000000",
                              "5.500000000000000000000000000000000000000",
                              "-3.000000000000000000000000000000000000000"],
         "grad:policy_chosen_logps": ["1.099850307544978755333413096016871731655",
                                      "-2.699796573021944804584835591046514871449",
                                      "-1.156052229477627235436537501006104714784"],
         "grad:policy_rejected_logps": ["-0.5998503075449787553334130960168717316547",
                                        "2.199796573021944804584835591046514871449",
                                        "0.1560522294776272354365375010061047147842"]}},
    {"id": "robust",
     "inputs": {"policy_chosen_logps": [-14.25, -3.5, -27.875],
                "policy_rejected_logps": [-15.75, -2.125, -30.0],
                "reference_chosen_logps": [-14.75, -3.0, -26.5],
                "reference_rejected_logps": [-14.5, -2.75, -31.625]},
     "params": {"beta": 0.1, "loss_type": "robust", "label_smoothing": 0.1},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["0.5875954306630468145865048080173331269972",
                    "0.7650408782388968214484578136736344159798",
                    "0.8918552444685271330647314480319665761630"],
         "chosen_rewards": ["0.05000000000000000277555756156289135105908",
                            "-0.05000000000000000277555756156289135105908",
                            "-0.1375000000000000076327832942979512154125"],
         "rejected_rewards": ["-0.1250000000000000069388939039072283776477",
                              "0.06250000000000000346944695195361418882385",
                              "0.1625000000000000090205620750793968909420"],
         "grad:policy_chosen_logps": ["-0.03313613127629211602424589684325747584177",
                                      "-0.1326547687204193593971723462396267135960",
                                      "0.1398885033623318077447193332846344760083"],
         "grad:policy_rejected_logps": ["0.05813613127629211741202467762470315137131",
                                        "0.1076547687204193580093935654581810380664",
                                        "-0.1898885033623318105202768948475258270674"]}},
    {"id": "robust-ls0.2",
     "inputs": {"policy_chosen_logps": [-8.0, -20.5, -5.25],
                "policy_rejected_logps": [-11.5, -18.25, -9.0],
                "reference_chosen_logps": [-9.5, -19.0, -6.0],
                "reference_rejected_logps": [-8.25, -21.0, -7.5]},
     "params": {"beta": 0.25, "loss_type": "robust", "label_smoothing": 0.2},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["-0.1296434966986790390570863150239278662726",
                    "1.713499804537873365944872141339939326277",
                    "0.2634372815951249425825864437789742234990"],
         "chosen_rewards": ["0.3750000000000000000000000000000000000000",
                            "-0.3750000000000000000000000000000000000000",
                            "0.1875000000000000000000000000000000000000"],
         "rejected_rewards": ["-0.8125000000000000000000000000000000000000",
                              "0.6875000000000000000000000000000000000000",
                              "-0.3750000000000000000000000000000000000000"],
         "grad:policy_chosen_logps": ["-0.07925992256184340964207972415639023024883",
                                      "-0.3845626677432268152740544209874241735938",
                                      "0.3481512694264750877922474978620933080342"],
         "grad:policy_rejected_logps": ["0.1417599225618434096420797241563902302488",
                                        "0.3220626677432268152740544209874241735938",
                                        "-0.4731512694264750877922474978620933080342"]}},
    {"id": "robust-ls0",
     "inputs": {"policy_chosen_logps": [-40.5, -6.25, -12.0],
                "policy_rejected_logps": [-52.0, -17.0, -11.5],
                "reference_chosen_logps": [-41.0, -7.0, -12.25],
                "reference_rejected_logps": [-40.0, -7.0, -12.5]},
     "params": {"beta": 0.1, "loss_type": "robust", "label_smoothing": 0.0},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["0.2519290813453728735004923692718924264940",
                    "0.2936376193995640208032377639984251348845",
                    "0.7313501408267951628596506781615051991348"],
         "chosen_rewards": ["0.05000000000000000277555756156289135105908",
                            "0.07500000000000000416333634234433702658862",
                            "0.02500000000000000138777878078144567552954"],
         "rejected_rewards": ["-1.200000000000000066613381477509392425418",
                              "-1.000000000000000055511151231257827021182",
                              "0.1000000000000000055511151231257827021182"],
         "grad:policy_chosen_logps": ["0.002729986117469116052652378191613480539752",
                                      "-0.1127226692936798723630842638114841516981",
                                      "0.1037482431757070536640755976396255193791"],
         "grad:policy_rejected_logps": ["0.02227001388253088533512640258983219498979",
                                        "0.08772266929367987097530548303003847616859",
                                        "-0.1537482431757070564396331592025168704381"]}},
    {"id": "hinge",
     "inputs": {"policy_chosen_logps": [-8.0, -20.5, -5.25],
                "policy_rejected_logps": [-11.5, -18.25, -9.0],
                "reference_chosen_logps": [-9.5, -19.0, -6.0],
                "reference_rejected_logps": [-8.25, -21.0, -7.5]},
     "params": {"beta": 0.5, "loss_type": "hinge", "label_smoothing": 0.0},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["0", "3.125000000000000000000000000000000000000", "0"],
         "chosen_rewards": ["0.7500000000000000000000000000000000000000",
                            "-0.7500000000000000000000000000000000000000",
                            "0.3750000000000000000000000000000000000000"],
         "rejected_rewards": ["-1.625000000000000000000000000000000000000",
                              "1.375000000000000000000000000000000000000",
                              "-0.7500000000000000000000000000000000000000"],
         "grad:policy_chosen_logps": ["0.1250000000000000000000000000000000000000",
                                      "-0.7500000000000000000000000000000000000000",
                                      "0"],
         "grad:policy_rejected_logps": ["0",
                                        "0.6250000000000000000000000000000000000000",
                                        "-0.2500000000000000000000000000000000000000"]}},
    {"id": "hinge-ls",
     "inputs": {"policy_chosen_logps": [-40.5, -6.25, -12.0],
                "policy_rejected_logps": [-52.0, -17.0, -11.5],
                "reference_chosen_logps": [-41.0, -7.0, -12.25],
                "reference_rejected_logps": [-40.0, -7.0, -12.5]},
     "params": {"beta": 0.1, "loss_type": "hinge", "label_smoothing": 0.2},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["0", "0", "1.075000000000000004163336342344337026589"],
         "chosen_rewards": ["0.05000000000000000277555756156289135105908",
                            "0.07500000000000000416333634234433702658862",
                            "0.02500000000000000138777878078144567552954"],
         "rejected_rewards": ["-1.200000000000000066613381477509392425418",
                              "-1.000000000000000055511151231257827021182",
                              "0.1000000000000000055511151231257827021182"],
         "grad:policy_chosen_logps": ["0.02500000000000000138777878078144567552954",
                                      "-0.1000000000000000055511151231257827021182",
                                      "0.2000000000000000111022302462515654042363"],
         "grad:policy_rejected_logps": ["0",
                                        "0.07500000000000000416333634234433702658862",
                                        "-0.2500000000000000138777878078144567552954"]}},
    {"id": "ipo",
     "inputs": {"policy_chosen_logps": [-14.25, -3.5, -27.875],
                "policy_rejected_logps": [-15.75, -2.125, -30.0],
                "reference_chosen_logps": [-14.75, -3.0, -26.5],
                "reference_rejected_logps": [-14.5, -2.75, -31.625]},
     "params": {"beta": 0.1, "loss_type": "ipo", "label_smoothing": 0.0},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["10.56249999999999819588758498412079899715",
                    "37.51562499999999659994198708545836073096",
                    "63.99999999999999555910790149937416186170"],
         "chosen_rewards": ["0.05000000000000000277555756156289135105908",
                            "-0.05000000000000000277555756156289135105908",
                            "-0.1375000000000000076327832942979512154125"],
         "rejected_rewards": ["-0.1250000000000000069388939039072283776477",
                              "0.06250000000000000346944695195361418882385",
                              "0.1625000000000000090205620750793968909420"],
         "grad:policy_chosen_logps": ["-6.474999999999999443500708906640314927534",
                                      "-6.224999999999999727995358966836663003650",
                                      "31.99999999999999888977697537484352120613"],
         "grad:policy_rejected_logps": ["6.499999999999999444888487687421760603063",
                                        "6.199999999999999726607580186055217328120",
                                        "-32.04999999999999889255253293640641255719"]}},
    {"id": "ipo-ls",
     "inputs": {"policy_chosen_logps": [-8.0, -20.5, -5.25],
                "policy_rejected_logps": [-11.5, -18.25, -9.0],
                "reference_chosen_logps": [-9.5, -19.0, -6.0],
                "reference_rejected_logps": [-8.25, -21.0, -7.5]},
     "params": {"beta": 0.5, "loss_type": "ipo", "label_smoothing": 0.3},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["14.06250000000000000000000000000000000000",
                    "27.56250000000000000000000000000000000000",
                    "1.562500000000000000000000000000000000000"],
         "chosen_rewards": ["0.7500000000000000000000000000000000000000",
                            "-0.7500000000000000000000000000000000000000",
                            "0.3750000000000000000000000000000000000000"],
         "rejected_rewards": ["-1.625000000000000000000000000000000000000",
                              "1.375000000000000000000000000000000000000",
                              "-0.7500000000000000000000000000000000000000"],
         "grad:policy_chosen_logps": ["7.625000000000000000000000000000000000000",
                                      "-5.750000000000000000000000000000000000000",
                                      "-5.000000000000000000000000000000000000000"],
         "grad:policy_rejected_logps": ["-7.500000000000000000000000000000000000000",
                                        "5.625000000000000000000000000000000000000",
                                        "4.750000000000000000000000000000000000000"]}},
]

TABLES = [Table("dpo.loss", DPO_ROWS, dpo_values, dpo.loss, dpo_gradient, dpo.loss_vjp)]
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


def test_every_loss_type_is_tabulated():
    assert {row["params"]["loss_type"] for row in DPO_ROWS} == set(dpo.LOSS_TYPES)
