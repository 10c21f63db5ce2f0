"""Independent 40-digit values for moe.router_z_loss and its gradient.

Written from ST-MoE (Zoph et al. 2022, arXiv 2202.08906) §3.1 eq. 5,
L_z = (1/B)·Σ_i (log Σ_j e^{x_ij})², the mean over the tokens a mask selects, with the
log-sum-exp written literally (the logits here are small). Gradient by hand:
∂L_z/∂x_ij = 2·m_i·lse_i·e^{x_ij}/Σ_k e^{x_ik} / Σ_i m_i.
"""
from __future__ import annotations

import mpmath as mpm
from decimal_tables import Table, over_rows

from refimpl.exact import moe


def _lse(row):
    return mpm.log(sum(mpm.exp(x) for x in row))


def z_loss_values(router_logits, mask=None):
    m = mask.tolist() if mask is not None else [1] * len(router_logits)
    return {"loss": sum(mi * _lse(row) ** 2 for row, mi in zip(router_logits, m)) / sum(m)}


def z_loss_gradient(cotangent, router_logits, mask=None):
    ct = cotangent.item() if hasattr(cotangent, "item") else cotangent   # a scalar loss's cotangent
    m = mask.tolist() if mask is not None else [1] * len(router_logits)
    out = []
    for row, mi in zip(router_logits, m):
        lse, total = _lse(row), sum(mpm.exp(x) for x in row)
        out.append([ct * 2 * mi * lse * mpm.exp(x) / total / sum(m) for x in row])
    return {"grad:router_logits": out}


# Literals: decimal_tables.literals(Table.expressions(row)) at 60 digits, i.e. z_loss_values and
# z_loss_gradient above.
MOE_ROWS = [
    {"id": "paper",
     "inputs": {"router_logits": [[0.5, -1.25, 2.0], [0.0, 0.0, 0.0]]},
     "params": {},
     "cotangent": 1.0,
     "expect": {
         "loss": "3.095774940121517529906160345551528194457",
         "grad:router_logits": [["0.3947726256291848077303313725177102591879",
                                 "0.06860119592186970527661408280920348091490",
                                 "1.769248161550978163466555634486852626567"],
                                ["0.3662040962227032304650817456408419015492",
                                 "0.3662040962227032304650817456408419015492",
                                 "0.3662040962227032304650817456408419015492"]]}},
    {"id": "masked-nondyadic",
     "inputs": {"router_logits": [[0.1, -0.7, 1.3, 0.2], [5.0, 5.0, 5.0, 5.0], [-2.9, 0.4, 0.4, -0.3]],
                "mask": [1, 0, 1]},
     "params": {},
     "cotangent": -0.5,
     "expect": {
         "loss": "2.633552418227406855470101275409282662237",
         "grad:router_logits": [["-0.1592138598419280471583410587672678605912",
                                 "-0.07153939871587803800046467371278051854573",
                                 "-0.5286086303953901437824692706776110169703",
                                 "-0.1759585276518711060788431316320639184075"],
                                ["0",
                                 "0",
                                 "0",
                                 "0"],
                                ["-0.009678325450806836402371729987028947361102",
                                 "-0.2624049433043392091920780276845205837217",
                                 "-0.2624049433043392091920780276845205837217",
                                 "-0.1303064384871528748013640461106906846690"]]}},
]

TABLES = [Table("moe.router_z_loss", MOE_ROWS, z_loss_values, moe.router_z_loss, z_loss_gradient,
                moe.router_z_loss_vjp, output="loss")]
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
