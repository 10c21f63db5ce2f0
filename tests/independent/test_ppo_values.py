"""Independent 40-digit values for ppo.value_loss, ppo.entropy_bonus and their gradients.

Written from PPO (Schulman et al. 2017, arXiv 1707.06347) §5 eq. 9, L^VF_t = (V_t − V^targ_t)²
averaged over the time steps, and the clipped form of OpenAI baselines ppo2 (model.py), with the
libraries' factor s = ½ (verl 0.9.1 compute_value_loss, OpenRLHF 0.11.2 ValueLoss):

    V_c = V_old + clip(V − V_old, −ε, ε),    ℓ_t = s·max((V − R)², (V_c − R)²)

token-mean: Σ_t m_t ℓ_t / Σ_t m_t; seq-mean-token-mean: the mean over rows with a token of
Σ_t m_t ℓ_t / Σ_t m_t (DeepSeekMath eq. 3's 1/G Σ_i 1/|o_i| Σ_t, as grpo.aggregate). Gradient by
hand: ∂ℓ_t/∂V = 2s·(V − R) where the unclipped square is the larger (or V inside the band),
0 where the clipped one is, times the token's weight (1/Σm, or 1/(G·|o_i|)). No token lies near a
kink (|V − V_old| = ε, or equal squares).

The entropy bonus, PPO eq. 9's c₂·S[π_θ] as a loss: −c·Σ_t w_t·H_t with the weights w of the
aggregation (token-mean 1/Σm; seq-mean-token-mean 1/(G·(|o_i| + ε)); seq-mean-token-sum 1/G;
seq-mean-token-sum-norm 1/(G·L)), G the rows with a token; gradient −c·w_t.
"""
from __future__ import annotations

import mpmath as mpm
from decimal_tables import Table, over_rows

from lossproof.refimpl.exact import ppo


def _clipped(v, old, eps):
    return old + min(max(v - old, -eps), eps)


def _token(v, old, r, eps, s):
    u = (v - r) ** 2
    if eps is None:
        return s * u, 2 * s * (v - r)
    w = (_clipped(v, old, eps) - r) ** 2
    return (s * u, 2 * s * (v - r)) if u >= w else (s * w, mpm.mpf(0))


def _weights(mask, aggregation):
    if aggregation == "token-mean":
        total = sum(sum(row) for row in mask)
        return [[mpm.mpf(m) / total for m in row] for row in mask]
    rows = [row for row in mask if sum(row)]
    return [[mpm.mpf(m) / (sum(row) * len(rows)) if sum(row) else mpm.mpf(0) for m in row] for row in mask]


def _s(half):
    return mpm.mpf(1) / 2 if half else mpm.mpf(1)


def value_loss_values(values, old_values, returns, mask, clip_range_value=None, half=False,
                      aggregation="token-mean"):
    w = _weights(mask.tolist(), aggregation)
    total = 0
    for i in range(len(values)):
        for j in range(len(values[i])):
            total += w[i][j] * _token(values[i][j], old_values[i][j], returns[i][j], clip_range_value, _s(half))[0]
    return {"loss": total}


def value_loss_gradient(cotangent, values, old_values, returns, mask, clip_range_value=None, half=False,
                        aggregation="token-mean"):
    ct = cotangent.item() if hasattr(cotangent, "item") else cotangent   # a scalar loss's cotangent
    w = _weights(mask.tolist(), aggregation)
    return {"grad:values": [[ct * w[i][j] * _token(values[i][j], old_values[i][j], returns[i][j], clip_range_value,
                                                   _s(half))[1] for j in range(len(values[i]))]
                            for i in range(len(values))]}


# Literals: decimal_tables.literals(Table.expressions(row)) at 60 digits, i.e. value_loss_values and
# value_loss_gradient above.
PPO_ROWS = [
    {"id": "paper",
     "inputs": {"values": [[0.5, 3.0, -1.25], [1.5, 9.0, 2.0]], "old_values": [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]],
                "returns": [[1.5, 1.0, -0.75], [1.0, 0.0, 2.5]], "mask": [[1, 1, 1], [1, 0, 1]]},
     "params": {},
     "cotangent": 1.0,
     "expect": {
         "loss": "1.150000000000000000000000000000000000000",
         "grad:values": [["-0.4000000000000000000000000000000000000000",
                          "0.8000000000000000000000000000000000000000",
                          "-0.2000000000000000000000000000000000000000"],
                         ["0.2000000000000000000000000000000000000000",
                          "0",
                          "-0.2000000000000000000000000000000000000000"]]}},
    {"id": "clip0.5-half",
     "inputs": {"values": [[2.0, 2.0, 0.25, -1.0], [0.75, -3.0, 1.0, 1.0]],
                "old_values": [[0.0, 0.0, 0.0, 0.125], [1.0, -1.5, 7.0, 1.0]],
                "returns": [[3.0, 0.0, 1.0, -2.0], [-1.0, -5.0, 7.0, 2.0]], "mask": [[1, 1, 1, 1], [1, 1, 1, 0]]},
     "params": {"clip_range_value": 0.5, "half": True},
     "cotangent": -1.5,
     "expect": {
         "loss": "4.393973214285714285714285714285714285714",
         "grad:values": [["0",
                          "-0.4285714285714285714285714285714285714286",
                          "0.1607142857142857142857142857142857142857",
                          "0"],
                         ["-0.3750000000000000000000000000000000000000",
                          "0",
                          "1.285714285714285714285714285714285714286",
                          "0"]]}},
    {"id": "clip0.2-half-seq-mean-nondyadic",
     "inputs": {"values": [[0.1, 0.7, -0.3], [1.1, 0.0, 0.0], [0.9, -0.4, 2.3]],
                "old_values": [[0.05, 0.3, -0.9], [0.8, 0.0, 0.0], [0.9, -0.1, 2.0]],
                "returns": [[0.6, 1.7, 0.2], [2.2, 0.0, 0.0], [0.1, 0.3, 3.3]],
                "mask": [[1, 1, 1], [0, 0, 0], [1, 1, 0]]},
     "params": {"clip_range_value": 0.2, "half": True, "aggregation": "seq-mean-token-mean"},
     "cotangent": 0.75,
     "expect": {
         "loss": "0.3495833333333333307428129425413017253826",
         "grad:values": [["-0.06249999999999999653055304804638581117615",
                          "0",
                          "0"],
                         ["0",
                          "0",
                          "0"],
                         ["0.1500000000000000031225022567582527699415",
                          "-0.1312500000000000020816681711721685132943",
                          "0"]]}},
]



def _entropy_weights(mask, aggregation, norm_length, mean_eps):
    rows = [row for row in mask if sum(row)]
    out = []
    for row in mask:
        n = sum(row)
        if aggregation == "token-mean":
            w = mpm.mpf(1) / sum(sum(r) for r in mask)
        elif aggregation == "seq-mean-token-mean":
            w = 1 / ((n + mean_eps) * len(rows)) if n else mpm.mpf(0)
        elif aggregation == "seq-mean-token-sum":
            w = mpm.mpf(1) / len(rows)
        else:
            w = 1 / (len(rows) * (norm_length if norm_length is not None else len(row)))
        out.append([w * m for m in row])
    return out


def entropy_bonus_values(entropy, mask, coef=0.01, aggregation="token-mean", norm_length=None, mean_eps=0.0):
    w = _entropy_weights(mask.tolist(), aggregation, norm_length, mean_eps)
    return {"loss": -coef * sum(w[i][j] * entropy[i][j] for i in range(len(entropy)) for j in range(len(entropy[i])))}


def entropy_bonus_gradient(cotangent, entropy, mask, coef=0.01, aggregation="token-mean", norm_length=None,
                           mean_eps=0.0):
    ct = cotangent.item() if hasattr(cotangent, "item") else cotangent
    w = _entropy_weights(mask.tolist(), aggregation, norm_length, mean_eps)
    return {"grad:entropy": [[-coef * ct * wij for wij in row] for row in w]}


ENTROPY_ROWS = [
    {"id": "paper",
     "inputs": {"entropy": [[0.5, 1.5, 7.0], [2.0, 0.25, 3.0]], "mask": [[1, 1, 0], [1, 1, 1]]},
     "params": {},
     "cotangent": 1.0,
     "expect": {
         "loss": "-0.01450000000000000030184188481996443442767",
         "grad:entropy": [["-0.002000000000000000041633363423443370265886",
                           "-0.002000000000000000041633363423443370265886",
                           "0"],
                          ["-0.002000000000000000041633363423443370265886",
                           "-0.002000000000000000041633363423443370265886",
                           "-0.002000000000000000041633363423443370265886"]]}},
    {"id": "verl-seq-mean-token-mean-nondyadic",
     "inputs": {"entropy": [[0.1, 2.7, 1.3], [0.9, 0.0, 4.4], [3.3, 0.6, 0.05]],
                "mask": [[1, 1, 1], [0, 0, 0], [1, 1, 0]]},
     "params": {"coef": 0.003, "aggregation": "seq-mean-token-mean", "mean_eps": 1e-8},
     "cotangent": -0.75,
     "expect": {
         "loss": "-0.004974999978541666830050186692811081345951",
         "grad:entropy": [["0.0003749999987500000119729222424993568327059",
                           "0.0003749999987500000119729222424993568327059",
                           "0.0003749999987500000119729222424993568327059"],
                          ["0",
                           "0",
                           "0"],
                          ["0.0005624999971875000257718832751393294710710",
                           "0.0005624999971875000257718832751393294710710",
                           "0"]]}},
    {"id": "seq-mean-token-sum-norm",
     "inputs": {"entropy": [[1.25, 0.75], [2.5, 0.125]], "mask": [[1, 0], [1, 1]]},
     "params": {"coef": 0.05, "aggregation": "seq-mean-token-sum-norm", "norm_length": 4096.0},
     "cotangent": 2.0,
     "expect": {
         "loss": "-0.00002365112304687500131290106824416552555590",
         "grad:entropy": [["-0.00001220703125000000067762635780344027125466",
                           "0"],
                          ["-0.00001220703125000000067762635780344027125466",
                           "-0.00001220703125000000067762635780344027125466"]]}},
]

TABLES = [Table("ppo.value_loss", PPO_ROWS, value_loss_values, ppo.value_loss, value_loss_gradient,
                ppo.value_loss_vjp, output="loss"),
          Table("ppo.entropy_bonus", ENTROPY_ROWS, entropy_bonus_values, ppo.entropy_bonus, entropy_bonus_gradient,
                ppo.entropy_bonus_vjp, output="loss")]
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
