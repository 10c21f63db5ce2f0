"""Independent 40-digit values for gae.advantages and gae.kl_rewards (no gradients: detached).

Written from the papers, not from refimpl.exact:

advantages  GAE (Schulman et al. 2016, arXiv 1506.02438) eq. 16 as the explicit sum
            Â_t = Σ_{l≥0} (γλ)^l δ_{t+l}, δ_t = r_t + γ·V_{t+1} − V_t (eq. 10, V = 0 past the
            end), over the time steps of a row: its valid tokens ('skip': masked tokens are no
            steps), or every position with r = V = 0 at masked ones ('zero'). Returns Â + V.
            Whitening over the valid tokens of the batch: (Â − μ)/σ, σ² = Σ(Â − μ)²/(N − ddof),
            + μ for 'keep-mean'. 0 at masked tokens.
kl_rewards  r_t = score·[t = last valid token] − β·k_t, k1 = logp − ref_logp,
            k2 = (logp − ref_logp)²/2, k3 = e^x − x − 1 with x = ref_logp − logp (Schulman 2020),
            clipped to [−c, c]; 0 at masked tokens.
"""
from __future__ import annotations

import mpmath as mpm
from decimal_tables import Table, over_rows

from lossproof.refimpl.exact import gae


def _steps(row_mask, masked_tokens):
    return [t for t, m in enumerate(row_mask) if m] if masked_tokens == "skip" else list(range(len(row_mask)))


def advantages_values(rewards, values, mask, gamma, lam, whiten="none", std_ddof=0, masked_tokens="skip"):
    adv, ret = [], []
    for r, v, m in zip(rewards, values, mask):
        steps = _steps(m, masked_tokens)
        rr = [r[t] if m[t] else 0 for t in steps]
        vv = [v[t] if m[t] else 0 for t in steps]
        delta = [rr[k] + gamma * (vv[k + 1] if k + 1 < len(steps) else 0) - vv[k] for k in range(len(steps))]
        row_adv, row_ret = [mpm.mpf(0)] * len(r), [mpm.mpf(0)] * len(r)
        for k, t in enumerate(steps):
            if m[t]:
                a = sum((gamma * lam) ** l * delta[k + l] for l in range(len(steps) - k))
                row_adv[t], row_ret[t] = a, a + v[t]
        adv.append(row_adv)
        ret.append(row_ret)
    if whiten != "none":
        valid = [a for row, m in zip(adv, mask) for a, o in zip(row, m) if o]
        mean = sum(valid) / len(valid)
        std = mpm.sqrt(sum((a - mean) ** 2 for a in valid) / (len(valid) - std_ddof))
        shift = mean if whiten == "keep-mean" else 0
        adv = [[(a - mean) / std + shift if o else mpm.mpf(0) for a, o in zip(row, m)] for row, m in zip(adv, mask)]
    return {"advantages": adv, "returns": ret}


def kl_rewards_values(scores, logp, ref_logp, mask, beta, kind="k1", clamp=None):
    out = []
    for s, lp, rp, m in zip(scores, logp, ref_logp, mask):
        last = max(t for t, o in enumerate(m) if o)
        row = []
        for t, (a, b, o) in enumerate(zip(lp, rp, m)):
            x = b - a
            k = {"k1": -x, "k2": x * x / 2, "k3": mpm.exp(x) - x - 1}[kind]
            if clamp is not None:
                k = min(max(k, -clamp), clamp)
            row.append((s if t == last else 0) - beta * k if o else mpm.mpf(0))
        out.append(row)
    return {"rewards": out}


R = [[0.0, 0.125, 0.0, 1.0, 0.0], [0.0, -0.25, 0.5, 0.0, 0.0]]
V = [[0.5, 0.25, -0.75, 0.5, 3.0], [0.125, -0.25, 0.375, 1.5, -2.0]]
M_TRAIL = [[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]]
M_INNER = [[1, 0, 1, 1, 0], [1, 1, 0, 1, 0]]
ADV_SPECS = [
    ("lambda-1", M_TRAIL, {"gamma": 1.0, "lam": 1.0}),
    ("gamma-lambda", M_TRAIL, {"gamma": 0.9, "lam": 0.75}),
    ("skip-interior", M_INNER, {"gamma": 0.9, "lam": 0.75, "masked_tokens": "skip"}),
    ("zero-interior", M_INNER, {"gamma": 0.9, "lam": 0.75, "masked_tokens": "zero"}),
    ("whiten-centred-ddof1", M_INNER, {"gamma": 0.99, "lam": 0.95, "whiten": "centred", "std_ddof": 1}),
    ("whiten-keep-mean", M_TRAIL, {"gamma": 1.0, "lam": 0.95, "whiten": "keep-mean", "std_ddof": 0}),
]
KL_SPECS = [
    ("k1", {"beta": 0.05, "kind": "k1"}),
    ("k2", {"beta": 0.1, "kind": "k2"}),
    ("k3-clamped", {"beta": 0.5, "kind": "k3", "clamp": 1.0}),
]
KL_INPUTS = {"scores": [2.0, -1.0], "logp": [[-0.5, -1.0, -2.0, -0.25], [-0.25, -3.0, -1.0, -4.0]],
             "ref_logp": [[-0.75, -1.0, -3.5, -0.5], [-0.5, -2.0, -1.0, -1.0]],
             "mask": [[1, 1, 1, 0], [1, 0, 1, 0]]}


# Literals: decimal_tables.literals(Table.expressions(row)) at 60 digits of the expressions above.
ADVANTAGES_ROWS = [
    {"id": "lambda-1",
     "inputs": {"rewards": R, "values": V, "mask": M_TRAIL},
     "params": {"gamma": 1.0, "lam": 1.0},
     "expect": {
         "advantages": [["0.6250000000000000000000000000000000000000", "0.8750000000000000000000000000000000000000", "1.750000000000000000000000000000000000000", "0.5000000000000000000000000000000000000000", "0"],
                    ["0.1250000000000000000000000000000000000000", "0.5000000000000000000000000000000000000000", "0.1250000000000000000000000000000000000000", "0", "0"]],
         "returns": [["1.125000000000000000000000000000000000000", "1.125000000000000000000000000000000000000", "1.000000000000000000000000000000000000000", "1.000000000000000000000000000000000000000", "0"],
                    ["0.2500000000000000000000000000000000000000", "0.2500000000000000000000000000000000000000", "0.5000000000000000000000000000000000000000", "0", "0"]]}},
    {"id": "gamma-lambda",
     "inputs": {"rewards": R, "values": V, "mask": M_TRAIL},
     "params": {"gamma": 0.9, "lam": 0.75},
     "expect": {
         "advantages": [["-0.1144765624999999755941754164823004028507", "0.2378125000000000220656826144249865644759", "1.537500000000000019428902930940239457414", "0.5000000000000000000000000000000000000000", "0"],
                    ["-0.06523437499999999149985496771364506404788", "0.4218750000000000104083408558608425664715", "0.1250000000000000000000000000000000000000", "0", "0"]],
         "returns": [["0.3855234375000000244058245835176995971493", "0.4878125000000000220656826144249865644759", "0.7875000000000000194289029309402394574136", "1.000000000000000000000000000000000000000", "0"],
                    ["0.05976562500000000850014503228635493595212", "0.1718750000000000104083408558608425664715", "0.5000000000000000000000000000000000000000", "0", "0"]]}},
    {"id": "skip-interior",
     "inputs": {"rewards": R, "values": V, "mask": M_INNER},
     "params": {"gamma": 0.9, "lam": 0.75, "masked_tokens": "skip"},
     "expect": {
         "advantages": [["-0.1371874999999999779343173855750134355241", "0", "1.537500000000000019428902930940239457414", "0.5000000000000000000000000000000000000000", "0"],
                    ["-0.1221874999999999943101069987960725916619", "0.3375000000000000083266726846886740531772", "0", "-1.500000000000000000000000000000000000000", "0"]],
         "returns": [["0.3628125000000000220656826144249865644759", "0", "0.7875000000000000194289029309402394574136", "1.000000000000000000000000000000000000000", "0"],
                    ["0.002812500000000005689893001203927408338068", "0.08750000000000000832667268468867405317724", "0", "0", "0"]]}},
    {"id": "zero-interior",
     "inputs": {"rewards": R, "values": V, "mask": M_INNER},
     "params": {"gamma": 0.9, "lam": 0.75, "masked_tokens": "zero"},
     "expect": {
         "advantages": [["-0.2551015624999999790636223684359145916746", "0", "1.537500000000000019428902930940239457414", "0.5000000000000000000000000000000000000000", "0"],
                    ["-0.1962265624999999941695943972419510748809", "0.2278125000000000112410081243297101104562", "0", "-1.500000000000000000000000000000000000000", "0"]],
         "returns": [["0.2448984375000000209363776315640854083254", "0", "0.7875000000000000194289029309402394574136", "1.000000000000000000000000000000000000000", "0"],
                    ["-0.07122656249999999416959439724195107488094", "-0.02218749999999998875899187567028988954377", "0", "0", "0"]]}},
    {"id": "whiten-centred-ddof1",
     "inputs": {"rewards": R, "values": V, "mask": M_INNER},
     "params": {"gamma": 0.99, "lam": 0.95, "whiten": "centred", "std_ddof": 1},
     "expect": {
         "advantages": [["0.2161124563813513791171918071351535979921", "0", "1.491843493026555385286072972486987910110", "0.3388007362731784343402747158372306780197", "0"],
                    ["-0.4227794977094382542085482481513873234383", "-0.06515561319215805936172191028670950384323", "0", "-1.558821574779488885173269337021275358840", "0"]],
         "returns": [["0.8706926249999998879589568900883047838982", "0", "0.9652499999999999693578445203456796815230", "1.000000000000000000000000000000000000000", "0"],
                    ["-0.1776678749999999402735539888453825741896", "-0.1757499999999999347188861520407960147361", "0", "0", "0"]]}},
    {"id": "whiten-keep-mean",
     "inputs": {"rewards": R, "values": V, "mask": M_TRAIL},
     "params": {"gamma": 1.0, "lam": 0.95, "whiten": "keep-mean", "std_ddof": 0},
     "expect": {
         "advantages": [["0.3584918020827832612825528936578620123833", "0.9251179519003352951965998725852352018512", "2.815100642031315578889708014973729621610", "0.4065401266498324852893581017482843542006", "0"],
                    ["-0.3916027584217355771961015236747167180046", "0.3942515525917636828582886764119359497809", "-0.3307743168342950057080301826229673113259", "0", "0"]],
         "returns": [["0.9755624999999998732680417390383861861497", "1.013749999999999902300373832986225428797", "0.9749999999999999777955395074968691915274", "1.000000000000000000000000000000000000000", "0"],
                    ["0.2190624999999999727995358966836650061401", "0.2437499999999999944488848768742172978818", "0.5000000000000000000000000000000000000000", "0", "0"]]}},
]

KL_REWARDS_ROWS = [
    {"id": "k1",
     "inputs": KL_INPUTS,
     "params": {"beta": 0.05, "kind": "k1"},
     "expect": {
         "rewards": [["-0.01250000000000000069388939039072283776477", "0", "1.924999999999999995836663657655662973411", "0"],
                    ["-0.01250000000000000069388939039072283776477", "0", "-1.000000000000000000000000000000000000000", "0"]]}},
    {"id": "k2",
     "inputs": KL_INPUTS,
     "params": {"beta": 0.1, "kind": "k2"},
     "expect": {
         "rewards": [["-0.003125000000000000173472347597680709441192", "0", "1.887499999999999993754995486483494460117", "0"],
                    ["-0.003125000000000000173472347597680709441192", "0", "-1.000000000000000000000000000000000000000", "0"]]}},
    {"id": "k3-clamped",
     "inputs": KL_INPUTS,
     "params": {"beta": 0.5, "kind": "k3", "clamp": 1.0},
     "expect": {
         "rewards": [["-0.01440039153570243412258513348916032364839", "0", "1.638434919925785085533359764617993739329", "0"],
                    ["-0.01440039153570243412258513348916032364839", "0", "-1.000000000000000000000000000000000000000", "0"]]}},
]

TABLES = [
    Table("gae.advantages", ADVANTAGES_ROWS, advantages_values, gae.advantages),
    Table("gae.kl_rewards", KL_REWARDS_ROWS, kl_rewards_values, gae.kl_rewards),
]
ROWS = over_rows(TABLES)


@ROWS
def test_literals_are_the_written_expressions(table, row):
    table.check_literals(row)


@ROWS
def test_reference_matches_literals(table, row):
    table.check_reference(row)


def test_lambda_one_is_the_return_minus_the_value():
    # γ = λ = 1: Â_t = Σ_{u≥t} r_u − V_t (eq. 16 telescopes): 0.125 + 1 − 0.25 at t = 1
    row = next(r for r in ADVANTAGES_ROWS if r["id"] == "lambda-1")
    assert row["expect"]["advantages"][0][1] == "0.8750000000000000000000000000000000000000"
