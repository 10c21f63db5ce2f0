"""Independent 40-digit values, vector set 1.5.0 of the GRPO family (with gradients).

Written from the papers and verl 0.9.1's code, sharing nothing with refimpl.exact:

clip clamp  PPO eq. 7 on ρ = exp(clamp(logp − old_logp, −c, c)) (verl 0.9.1
            compute_policy_loss_vanilla: c = 20): a clamped token's ratio is the constant
            e^±c, so its gradient is 0; elsewhere dC/dlogp = ρA on the unclipped branch.
Clip-Cov    Cui et al., arXiv 2505.22617 §4, verl 0.9.1 compute_policy_loss_clip_cov:
            ℓ_t = −C_t·(1 − s_t) + β·k3_t, C_t PPO's clipped surrogate, s_t = 1 on the selected
            tokens; dℓ_t/dlogp_t = −(1 − s_t)·ρA (unclipped branch) + β·(1 − π_ref/π).
KL-Cov      the same section, verl 0.9.1 compute_policy_loss_kl_cov: ℓ_t = −ρ_t·A + s_t·k·|Δ_t| +
            β·k3_t (no clip), Δ_t = logp_t − old_logp_t; dℓ_t/dlogp_t = −ρA + s_t·k·sign(Δ_t) + β·(1 −
            π_ref/π). Without ``selected``: s = the top k = max(1, ⌊N·r⌋) valid tokens by
            (A − Ā)(logp − mean logp), means over the N valid tokens.
REINFORCE   Williams 1992: ℓ_t = −A·logp_t + β·k3_t, dℓ_t/dlogp_t = −A + β·(1 − π_ref/π).

loss = Σ m·ℓ / Σ m ('token-mean') or 1/G Σ_i 1/|o_i| Σ_t m·ℓ ('seq-mean-token-mean', rows with
tokens only).
"""
from __future__ import annotations

import mpmath as mpm
from decimal_tables import Table, over_rows

from lossproof.refimpl.exact import grpo

# ------------------------------------------------------------------------------ grpo.clip, log ρ clamped


def clamped_clip_token(d, a, eps_low, eps_high, dual_clip, c):
    """(C, dC/dlogp) of one token at log ρ = d."""
    inside = abs(d) <= c
    rho = mpm.exp(d if inside else mpm.sign(d) * c)
    hi = eps_low if eps_high is None else eps_high
    unclipped, clipped = rho * a, min(max(rho, 1 - eps_low), 1 + hi) * a
    value, grad = (unclipped, rho * a) if unclipped <= clipped else (clipped, mpm.mpf(0))
    if dual_clip is not None and a < 0 and dual_clip * a > value:
        value, grad = dual_clip * a, mpm.mpf(0)
    return value, (grad if inside else mpm.mpf(0))


def clip_values(logp, old_logp, advantages, eps_low, eps_high, dual_clip, log_ratio_clamp):
    return {"objective": [clamped_clip_token(x - o, a, eps_low, eps_high, dual_clip, log_ratio_clamp)[0]
                          for x, o, a in zip(logp, old_logp, advantages)]}


def clip_gradient(cotangent, logp, old_logp, advantages, eps_low, eps_high, dual_clip, log_ratio_clamp):
    return {"grad:logp": [ct * clamped_clip_token(x - o, a, eps_low, eps_high, dual_clip, log_ratio_clamp)[1]
                          for ct, x, o, a in zip(cotangent, logp, old_logp, advantages)]}


# log ρ = 25, −25, 19.5, −19.5, 0.125, −0.5: clamped to ±20 at the first two, where A = −1 keeps the
# unclipped branch (−e^20, not −e^25; no dual clip) and A = 1 keeps e^−20 (gradient 0 both)
CLIP_INPUTS = {"logp": [-0.5, -30.0, -0.5, -20.0, -1.0, -2.0], "old_logp": [-25.5, -5.0, -20.0, -0.5, -1.125, -1.5],
               "advantages": [-1.0, 1.0, -0.5, 1.5, 2.0, -1.0]}
CLIP_ROWS = [
    {"id": "clamp-20", "inputs": CLIP_INPUTS,
     "params": {"eps_low": 0.2, "eps_high": None, "dual_clip": None, "log_ratio_clamp": 20.0},
     "cotangent": [1.0, -0.5, 0.25, 1.0, -1.0, 0.75],
     "expect": None},
    {"id": "clamp-20-dual", "inputs": CLIP_INPUTS,
     "params": {"eps_low": 0.2, "eps_high": 0.28, "dual_clip": 3.0, "log_ratio_clamp": 20.0},
     "cotangent": [1.0, -0.5, 0.25, 1.0, -1.0, 0.75],
     "expect": None},
]


# ------------------------------------------------------------------------------ grpo.loss: Cov, REINFORCE

def _weights(mask, aggregation):
    lengths = [sum(row) for row in mask]
    rows = sum(1 for n in lengths if n > 0)
    return {(i, t): (mpm.mpf(1) / sum(lengths) if aggregation == "token-mean" else mpm.mpf(1) / (rows * lengths[i]))
            for i, row in enumerate(mask) for t, m in enumerate(row) if m == 1}


def _top_k(logp, advantages, mask, ratio):
    valid = [(i, t) for i, row in enumerate(mask) for t, m in enumerate(row) if m == 1]
    a_bar = sum(advantages[i] for i, _ in valid) / len(valid)
    l_bar = sum(logp[i][t] for i, t in valid) / len(valid)
    cov = {(i, t): (advantages[i] - a_bar) * (logp[i][t] - l_bar) for i, t in valid}
    k = max(1, int(mpm.floor(ratio * len(valid))))
    return set(sorted(cov, key=cov.get, reverse=True)[:k])


def _terms(logp, old_logp, ref_logp, advantages, mask, beta, policy_loss, eps_low, kl_cov_coef, kl_cov_ratio,
           selected):
    """{(i, t): (ℓ_t, dℓ_t/dlogp_t)} over the valid tokens."""
    if selected is None and policy_loss == "kl-cov":
        chosen = _top_k(logp, advantages, mask, kl_cov_ratio)
    else:
        chosen = {(i, t) for i, row in enumerate(selected if selected is not None else mask)
                  for t, s in enumerate(row) if s == 1 and selected is not None}
    eps_low = mpm.mpf(eps_low)   # the binary64 ε exactly: 1 ± ε formed in mpmath, not in floats
    out = {}
    for (i, t) in _weights(mask, "token-mean"):
        a, x, d = advantages[i], logp[i][t], logp[i][t] - old_logp[i][t]
        rho = mpm.exp(d)
        if policy_loss == "reinforce":
            value, grad = -a * x, -a
        elif policy_loss == "clip-cov":
            unclipped, clipped = rho * a, min(max(rho, 1 - eps_low), 1 + eps_low) * a
            value, grad = (-unclipped, -rho * a) if unclipped <= clipped else (-clipped, mpm.mpf(0))
            if (i, t) in chosen:
                value, grad = mpm.mpf(0), mpm.mpf(0)
        else:
            value, grad = -rho * a, -rho * a
            if (i, t) in chosen:
                value, grad = value + kl_cov_coef * abs(d), grad + kl_cov_coef * mpm.sign(d)
        log_r = ref_logp[i][t] - x
        out[i, t] = (value + beta * (mpm.exp(log_r) - log_r - 1), grad + beta * (1 - mpm.exp(log_r)))
    return out


def loss_values(logp, old_logp, ref_logp, advantages, mask, beta, aggregation, policy_loss, eps_low=0.2,
                kl_cov_coef=1.0, kl_cov_ratio=0.0002, selected=None):
    terms = _terms(logp, old_logp, ref_logp, advantages, mask, beta, policy_loss, eps_low, kl_cov_coef,
                   kl_cov_ratio, selected)
    w = _weights(mask, aggregation)
    return {"loss": sum(w[k] * v for k, (v, _) in terms.items())}


def loss_gradient(cotangent, logp, old_logp, ref_logp, advantages, mask, beta, aggregation, policy_loss,
                  eps_low=0.2, kl_cov_coef=1.0, kl_cov_ratio=0.0002, selected=None):
    terms = _terms(logp, old_logp, ref_logp, advantages, mask, beta, policy_loss, eps_low, kl_cov_coef,
                   kl_cov_ratio, selected)
    w = _weights(mask, aggregation)
    grad = [[mpm.mpf(0)] * len(row) for row in logp]
    for (i, t), (_, d) in terms.items():
        grad[i][t] = cotangent * w[i, t] * d
    return {"grad:logp": grad}


# log ρ = (0.25, −0.125, 0.625 | −0.125, 0.375, ·) with ε = 0.2: ρ = 1.868 (A > 0) is clipped; row 2 has
# no tokens. Selected: (0, 1), (1, 0) — both on the unclipped branch, Δ < 0 at both (KL-Cov's sign).
INPUTS = {"logp": [[-1.25, -0.5, -2.0], [-0.75, -3.0, -1.5], [-1.0, -1.0, -1.0]],
          "old_logp": [[-1.5, -0.375, -2.625], [-0.625, -3.375, -1.5], [-1.0, -1.0, -1.0]],
          "ref_logp": [[-1.0, -0.625, -2.5], [-1.0, -2.75, -1.25], [-1.0, -1.0, -1.0]],
          "advantages": [1.25, -0.75, 0.5],
          "mask": [[1, 1, 1], [1, 1, 0], [0, 0, 0]]}
SELECTED = [[0, 1, 0], [1, 0, 0], [0, 0, 0]]


def _row(rid, policy_loss, aggregation, beta, **params):
    inputs = dict(INPUTS)
    if "selected" in params:
        inputs["selected"] = params.pop("selected")
    return {"id": rid, "inputs": inputs,
            "params": {"beta": beta, "aggregation": aggregation, "policy_loss": policy_loss, **params},
            "cotangent": 1.0, "expect": None}


LOSS_ROWS = [
    _row("clip-cov", "clip-cov", "token-mean", 0.04, selected=SELECTED),
    _row("clip-cov-seq-mean", "clip-cov", "seq-mean-token-mean", 0.0, selected=SELECTED),
    _row("kl-cov", "kl-cov", "token-mean", 0.04, selected=SELECTED, kl_cov_coef=0.5),
    # the top 2 of 5 valid tokens by covariance (k = ⌊5·0.4⌋): (1, 1) and (0, 1), not the given pair
    _row("kl-cov-top-k", "kl-cov", "seq-mean-token-mean", 0.04, kl_cov_ratio=0.4),
    _row("reinforce", "reinforce", "seq-mean-token-mean", 0.04),
    _row("reinforce-token-mean", "reinforce", "token-mean", 0.0),
]

# Literals: decimal_tables.literals(Table.expressions(row)) at 60 digits, i.e. the written
# clip_values / clip_gradient and loss_values / loss_gradient above.
EXPECT = {
    "clamp-20": {
     "objective": [
      "-485165195.4097902779691068305415405586846",
      "0.000000002061153622438557827965940380155820976376",
      "-147133783.0207544032833404002266722890459",
      "0.000000005097401729242606837711106815216301853582",
      "2.266296906133652633658014455623587745131",
      "-0.7999999999999999888977697537484345957637"
     ],
     "grad:logp": [
      "0",
      "0",
      "-36783445.75518860082083510005666807226146",
      "0.000000005097401729242606837711106815216301853582",
      "-2.266296906133652633658014455623587745131",
      "0"
     ]
    },
    "clamp-20-dual": {
     "objective": [
      "-3.000000000000000000000000000000000000000",
      "0.000000002061153622438557827965940380155820976376",
      "-1.500000000000000000000000000000000000000",
      "0.000000005097401729242606837711106815216301853582",
      "2.266296906133652633658014455623587745131",
      "-0.7999999999999999888977697537484345957637"
     ],
     "grad:logp": [
      "0",
      "0",
      "0",
      "0.000000005097401729242606837711106815216301853582",
      "-2.266296906133652633658014455623587745131",
      "0"
     ]
    },
    "clip-cov": {
     "loss": "-0.3800642543773168718050420067287031946149",
     "grad:logp": [
      [
       "-0.002272203333501931919887098122322205826760",
       "0.0009400247793232367966490594864708299928414",
       "0.003147754722298932676695411880736318519455"
      ],
      [
       "0.001769593735428761090875707413650587288829",
       "0.2159765088592282684881819556758055704253",
       "0"
      ],
      [
       "0",
       "0",
       "0"
      ]
     ]
    },
    "clip-cov-seq-mean": {
     "loss": "-0.2271891097590872541158429520238258647834",
     "grad:logp": [
      [
       "0",
       "0",
       "0"
      ],
      [
       "0",
       "0.2728108902409127505100863172476597203150",
       "0"
      ],
      [
       "0",
       "0",
       "0"
      ]
     ]
    },
    "kl-cov": {
     "loss": "-0.6313817881657673791842301449884607939818",
     "grad:logp": [
      [
       "-0.3232785575054373029382422401379313204108",
       "-0.3196842008668256139195739763207918540627",
       "-0.4639137346357566689487634931662897947593"
      ],
      [
       "0.03414412912311807152060952889800819772213",
       "0.2159765088592282684881819556758055704253",
       "0"
      ],
      [
       "0",
       "0",
       "0"
      ]
     ]
    },
    "kl-cov-top-k": {
     "loss": "-0.2860990496471008652923525099940685761418",
     "grad:logp": [
      [
       "-0.2693987979211977524485352001149427670090",
       "-0.3497368340556880115996449802673265450522",
       "-0.3865947788631305574573029109719081622994"
      ],
      [
       "0.1676801614038975894007619111225102471527",
       "0.5199706360740353356102274445947569630316",
       "0"
      ],
      [
       "0",
       "0",
       "0"
      ]
     ]
    },
    "reinforce": {
     "loss": "0.07974028185749126562709146496107295043349",
     "grad:logp": [
      [
       "-0.2102268361112516099332392484352685048556",
       "-0.2075499793505639693361257837612743083393",
       "-0.2057102043980842227694204900993864012338"
      ],
      [
       "0.1897119921692859513635946342670632341110",
       "0.1846597458331225851001411273470972427166",
       "0"
      ],
      [
       "0",
       "0",
       "0"
      ]
     ]
    },
    "reinforce-token-mean": {
     "loss": "0.3750000000000000000000000000000000000000",
     "grad:logp": [
      [
       "-0.2500000000000000000000000000000000000000",
       "-0.2500000000000000000000000000000000000000",
       "-0.2500000000000000000000000000000000000000"
      ],
      [
       "0.1500000000000000000000000000000000000000",
       "0.1500000000000000000000000000000000000000",
       "0"
      ],
      [
       "0",
       "0",
       "0"
      ]
     ]
    },
}
for _row_ in CLIP_ROWS + LOSS_ROWS:
    _row_["expect"] = EXPECT[_row_["id"]]

TABLES = [
    Table("grpo.clip", CLIP_ROWS, clip_values, grpo.clip, clip_gradient, grpo.clip_vjp, output="objective"),
    Table("grpo.loss", LOSS_ROWS, loss_values, grpo.loss, loss_gradient, grpo.loss_vjp, output="loss"),
]
ROWS = over_rows(TABLES)
GRADIENT_ROWS = over_rows(TABLES, with_hand_gradient=True)


@ROWS
def test_literals_are_the_written_expressions(table, row):
    table.check_literals(row)


@GRADIENT_ROWS
def test_hand_gradient_is_the_derivative_of_the_written_objective(table, row):
    table.check_hand_gradient(row)


@ROWS
def test_reference_matches_literals(table, row):
    table.check_reference(row)


def test_top_k_row_selects_other_tokens_than_the_given_ones():
    """The top-k row is not the given selection in disguise: its covariance picks differ."""
    chosen = _top_k(INPUTS["logp"], INPUTS["advantages"], INPUTS["mask"], 0.4)
    assert chosen == {(1, 1), (0, 1)} and chosen != {(0, 1), (1, 0)}
