"""Independent 40-digit values for reward.pairwise and its gradients.

Written from the Bradley–Terry preference model as InstructGPT (Ouyang et al. 2022, arXiv
2203.02155) §3.5 eq. 1 trains a reward model on it, in the log-exp form log(1 + e^{r_r − r_c})
(OpenRLHF 0.11.2 LogExpLoss; it equals −log σ(r_c − r_r)), with TRL 1.16.0's margin inside the
difference and Eisenstein et al. (arXiv 2312.09244) eq. 2's centring term averaged over the pairs:

    loss = (1/B)·Σ_b log(1 + e^{r_r,b − r_c,b + m_b}) + c·(1/B)·Σ_b (r_c,b + r_r,b)²

Gradient by hand: ∂/∂r_c,b = (−1/(1 + e^{r_c,b − r_r,b − m_b}) + 2c·(r_c,b + r_r,b))/B and
∂/∂r_r,b = (1/(1 + e^{r_c,b − r_r,b − m_b}) + 2c·(r_c,b + r_r,b))/B. The differences stay within
±10 here, where the literal log(1 + e^x) keeps every digit at 60.
"""
from __future__ import annotations

import mpmath as mpm
from decimal_tables import Table, over_rows

from lossproof.refimpl.exact import reward


def pairwise_values(chosen_rewards, rejected_rewards, center_rewards_coefficient=None, form="sigmoid", margin=None):
    m = margin if margin is not None else [mpm.mpf(0)] * len(chosen_rewards)
    n = len(chosen_rewards)
    loss = sum(mpm.log(1 + mpm.exp(r - c + mb)) for c, r, mb in zip(chosen_rewards, rejected_rewards, m)) / n
    if center_rewards_coefficient is not None:
        loss += center_rewards_coefficient * sum((c + r) ** 2 for c, r in zip(chosen_rewards, rejected_rewards)) / n
    return {"loss": loss}


def pairwise_gradient(cotangent, chosen_rewards, rejected_rewards, center_rewards_coefficient=None, form="sigmoid",
                      margin=None):
    m = margin if margin is not None else [mpm.mpf(0)] * len(chosen_rewards)
    n = len(chosen_rewards)
    coef = center_rewards_coefficient or 0
    ct = cotangent.item() if hasattr(cotangent, "item") else cotangent   # a scalar loss's cotangent
    gc, gr = [], []
    for c, r, mb in zip(chosen_rewards, rejected_rewards, m):
        push = 1 / (1 + mpm.exp(c - r - mb))
        gc.append(ct * (-push + 2 * coef * (c + r)) / n)
        gr.append(ct * (push + 2 * coef * (c + r)) / n)
    return {"grad:chosen_rewards": gc, "grad:rejected_rewards": gr}


# Literals: decimal_tables.literals(Table.expressions(row)) at 60 digits, i.e. pairwise_values and
# pairwise_gradient above.
REWARD_ROWS = [
    {"id": "paper",
     "inputs": {"chosen_rewards": [1.5, -0.25, 2.0], "rejected_rewards": [0.5, 0.75, -1.0]},
     "params": {},
     "cotangent": 1.0,
     "expect": {
         "loss": "0.5583702422033959089523056365968004272575",
         "grad:chosen_rewards": ["-0.08964714045666504024961358605938790854495",
                                "-0.2436861928766682930837197472739454247884",
                                "-0.01580862439252226029294938392391740046206"],
         "grad:rejected_rewards": ["0.08964714045666504024961358605938790854495",
                                  "0.2436861928766682930837197472739454247884",
                                  "0.01580862439252226029294938392391740046206"]}},
    {"id": "trl-margin-centring",
     "inputs": {"chosen_rewards": [1.5, -0.25, 2.0, 0.125], "rejected_rewards": [0.5, 0.75, -1.0, 0.125],
                "margin": [0.5, 1.0, 0.0, 0.25]},
     "params": {"center_rewards_coefficient": 0.01},
     "cotangent": -2.5,
     "expect": {
         "loss": "0.8821641916689161998473431072219244109774",
         "grad:chosen_rewards": ["0.2109629179988408965802701036160150724556",
                                "0.5442481737361765274072264526157374649231",
                                "0.01714117073597923778907157346082406170457",
                                "0.3482353130536238149520251433402112051083"],
         "grad:rejected_rewards": ["-0.2609629179988408976211041892020993291028",
                                  "-0.5567481737361765276674349740122585290849",
                                  "-0.04214117073597923830948861625386619002815",
                                  "-0.3544853130536238150821294040384717371892"]}},
    {"id": "log-exp-nondyadic",
     "inputs": {"chosen_rewards": [0.1, -0.3, 1.7, 2.9, -7.3], "rejected_rewards": [0.2, 0.4, -1.2, 2.9, 1.1]},
     "params": {"center_rewards_coefficient": 0.1, "form": "log-exp"},
     "cotangent": 0.75,
     "expect": {
         "loss": "3.647503501556449738776526174238257726179",
         "grad:chosen_rewards": ["-0.06974687812184099712332552143697825460849",
                                "-0.09722816582522491518311017876678085242868",
                                "0.007176965538237339957086532646256761284687",
                                "0.09900000000000000432986979603811021182932",
                                "-0.3359662774844650080213659214416730936317"],
         "grad:rejected_rewards": ["0.08774687812184099912172696576226008283781",
                                  "0.1032281658252249175145785304796096982519",
                                  "0.02282303446176266170824800429147804935076",
                                  "0.2490000000000000043298697960381102118293",
                                  "-0.03603372251553499664157078198398348867908"]}},
]

TABLES = [Table("reward.pairwise", REWARD_ROWS, pairwise_values, reward.pairwise, pairwise_gradient,
                reward.pairwise_vjp, output="loss")]
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
