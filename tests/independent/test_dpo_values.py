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

    exo_pair  σ(z)·log(σ(z)/(1−ε)) + σ(−z)·log(σ(−z)/ε)   EXO (Ji et al. 2024) eq. 16: KL from the
              model's pair distribution (σ(z), σ(−z)) to the smoothed label (1−ε, ε)
    nca_pair  −log σ(a) − ½·log σ(−a) − ½·log σ(−b)     NCA (Chen et al. 2024) §4, a = β·(pc − rc),
              b = β·(pr − rr)
    bco_pair  −log σ(a − δ) − log σ(δ − b)               BCO (Jung et al. 2024) §3, δ = reward_shift
    sppo_hard (pc − rc − 1/(2β))² + (pr − rr + 1/(2β))²  SPPO (Wu et al. 2024) eq. 4.7, P = 1 / 0
    apo_zero  1 − σ(a) + σ(b)                            APO (D'Oosterlinck et al. 2024) eq. 7
    apo_down  σ(a) + 1 − σ(z)                            APO eq. 8
    discopop  (1 − σ(z/τ))·(−log σ(z)) + σ(z/τ)·e^{−z}   DiscoPOP (Lu et al. 2024) eq. 5, τ = discopop_tau
    aot       the sigmoid loss (with ε) at position i of the ascending sorts: Δ_i = sort(pc − pr)_i
              − sort(rc − rr)_i; aot_unpaired: Δ_i = sort(pc − rc)_i − sort(pr − rr)_i
              (AOT, Melnyk et al. 2024 §3)

ε does not enter hinge or ipo (rows "hinge-ls" and "ipo-ls" pass ε > 0 to show it is ignored).

Gradient by hand, for a cotangent (c_ℓ, c_w, c_l) on (losses, chosen_rewards, rejected_rewards):
∂/∂pc = c_ℓ·ℓ'(Δ) + β·c_w, ∂/∂pr = −c_ℓ·ℓ'(Δ) + β·c_l, where (d log σ(x)/dx = σ(−x))

    sigmoid, cdpo  ℓ' = β·(−(1−ε)·σ(−z) + ε·σ(z))      (DPO §5: −β·σ(−βΔ) at ε = 0)
    robust         ℓ' = β·(−(1−ε)·σ(−z) − ε·σ(z))/(1−2ε)
    hinge          ℓ' = −β where 1 − z > 0, else 0      (no row sits on the kink z = 1)
    ipo            ℓ' = 2·(Δ − 1/(2β))
    exo_pair       ℓ' = β·σ(z)σ(−z)·(z − log((1−ε)/ε))
    discopop       ℓ' = β·(m'·(log σ(z) + e^{−z}) − (1 − m)·σ(−z) − m·e^{−z}), m = σ(z/τ),
                   m' = m·(1 − m)/τ
and for the losses of the two gains (∂/∂pc = c_ℓ·∂ℓ/∂g_c, ∂/∂pr = c_ℓ·∂ℓ/∂g_r, plus the rewards)

    nca_pair   ∂ℓ/∂g_c = β·(−σ(−a) + ½σ(a)),   ∂ℓ/∂g_r = ½β·σ(b)
    bco_pair   ∂ℓ/∂g_c = −β·σ(δ − a),          ∂ℓ/∂g_r = β·σ(b − δ)
    sppo_hard  ∂ℓ/∂g_c = 2·(g_c − 1/(2β)),     ∂ℓ/∂g_r = 2·(g_r + 1/(2β))
    apo_zero   ∂ℓ/∂g_c = −β·σ(a)σ(−a),         ∂ℓ/∂g_r = β·σ(b)σ(−b)
    apo_down   ∂ℓ/∂g_c = β·(σ(a)σ(−a) − σ(z)σ(−z)),  ∂ℓ/∂g_r = β·σ(z)σ(−z)

RPO (Pang et al. 2024, arXiv 2404.19733 §2): with α = rpo_alpha, n_i = chosen_lengths[i] and B
pairs, losses[i] gains α·NLL_i, NLL_i = −pc_i/n_i ('seq-mean-token-mean'), −pc_i
('seq-mean-token-sum') or −pc_i·B/Σ_j n_j ('token-mean'); ∂/∂pc_i gains c_ℓ[i]·(−α/n_i, −α,
−α·B/Σn). For AOT the NLL of pair i is added at position i.

AOT: the loss at sorted position i sends c_ℓ[i]·ℓ'(Δ_i) to the pair that sorts there (and its
negative to the rejected side), ℓ' the sigmoid slope.
"""
from __future__ import annotations

import mpmath as mpm
from decimal_tables import Table, over_rows

from lossproof.refimpl.exact import dpo


def sigma(x):
    return 1 / (1 + mpm.exp(-x))


def margin_loss(delta, beta, loss_type, eps, tau=0.05):
    z = beta * delta
    if loss_type in ("sigmoid", "cdpo", "aot", "aot_unpaired"):
        return -(1 - eps) * mpm.log(sigma(z)) - eps * mpm.log(sigma(-z))
    if loss_type == "robust":
        return ((1 - eps) * -mpm.log(sigma(z)) - eps * -mpm.log(sigma(-z))) / (1 - 2 * eps)
    if loss_type == "hinge":
        return max(mpm.mpf(0), 1 - z)
    if loss_type == "exo_pair":
        return sigma(z) * mpm.log(sigma(z) / (1 - eps)) + sigma(-z) * mpm.log(sigma(-z) / eps)
    if loss_type == "discopop":
        m = sigma(z / tau)
        return (1 - m) * -mpm.log(sigma(z)) + m * mpm.exp(-z)
    return (delta - 1 / (2 * beta)) ** 2


def margin_slope(delta, beta, loss_type, eps, tau=0.05):
    z = beta * delta
    if loss_type in ("sigmoid", "cdpo", "aot", "aot_unpaired"):
        return beta * (-(1 - eps) * sigma(-z) + eps * sigma(z))
    if loss_type == "robust":
        return beta * (-(1 - eps) * sigma(-z) - eps * sigma(z)) / (1 - 2 * eps)
    if loss_type == "hinge":
        return -beta if 1 - z > 0 else mpm.mpf(0)
    if loss_type == "exo_pair":
        return beta * sigma(z) * sigma(-z) * (z - mpm.log((1 - eps) / eps))
    if loss_type == "discopop":
        m = sigma(z / tau)
        dm = m * (1 - m) / tau
        return beta * (dm * (mpm.log(sigma(z)) + mpm.exp(-z)) - (1 - m) * sigma(-z) - m * mpm.exp(-z))
    return 2 * (delta - 1 / (2 * beta))


GAIN_TYPES = ("nca_pair", "bco_pair", "sppo_hard", "apo_zero", "apo_down")


def gain_loss(gc, gr, beta, loss_type, shift):
    a, b = beta * gc, beta * gr
    if loss_type == "nca_pair":
        return -mpm.log(sigma(a)) - mpm.log(sigma(-a)) / 2 - mpm.log(sigma(-b)) / 2
    if loss_type == "bco_pair":
        return -mpm.log(sigma(a - shift)) - mpm.log(sigma(shift - b))
    if loss_type == "sppo_hard":
        return (gc - 1 / (2 * beta)) ** 2 + (gr + 1 / (2 * beta)) ** 2
    if loss_type == "apo_zero":
        return 1 - sigma(a) + sigma(b)
    return sigma(a) + 1 - sigma(a - b)


def gain_slopes(gc, gr, beta, loss_type, shift):
    a, b = beta * gc, beta * gr
    if loss_type == "nca_pair":
        return beta * (-sigma(-a) + sigma(a) / 2), beta * sigma(b) / 2
    if loss_type == "bco_pair":
        return -beta * sigma(shift - a), beta * sigma(b - shift)
    if loss_type == "sppo_hard":
        return 2 * (gc - 1 / (2 * beta)), 2 * (gr + 1 / (2 * beta))
    if loss_type == "apo_zero":
        return -beta * sigma(a) * sigma(-a), beta * sigma(b) * sigma(-b)
    dz = beta * sigma(a - b) * sigma(b - a)
    return beta * sigma(a) * sigma(-a) - dz, dz


def positions(pc, pr, rc, rr, loss_type):
    """(Δ_i, chosen pair, rejected pair) per loss position: the pair itself, or AOT's sorts."""
    n = range(len(pc))
    if loss_type == "aot":
        order = sorted(n, key=lambda i: pc[i] - pr[i])
        ref = sorted(rc[i] - rr[i] for i in n)
        return [((pc[j] - pr[j]) - ref[i], j, j) for i, j in enumerate(order)]
    if loss_type == "aot_unpaired":
        oc, orr = sorted(n, key=lambda i: pc[i] - rc[i]), sorted(n, key=lambda i: pr[i] - rr[i])
        return [((pc[j] - rc[j]) - (pr[k] - rr[k]), j, k) for j, k in zip(oc, orr)]
    return [((pc[i] - rc[i]) - (pr[i] - rr[i]), i, i) for i in n]


def dpo_values(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
               reference_rejected_logps, beta, loss_type, label_smoothing, discopop_tau=0.05,
               reward_shift=0.0, rpo_alpha=0.0, nll_aggregation=None, chosen_lengths=None):
    pc, pr, rc, rr = (policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
                      reference_rejected_logps)
    nll = nll_divisors(len(pc), nll_aggregation, chosen_lengths)
    out = {"losses": [], "chosen_rewards": [beta * (c - d) for c, d in zip(pc, rc)],
           "rejected_rewards": [beta * (c - d) for c, d in zip(pr, rr)]}
    for i, (delta, _, _) in enumerate(positions(pc, pr, rc, rr, loss_type)):
        if loss_type in GAIN_TYPES:
            out["losses"].append(gain_loss(pc[i] - rc[i], pr[i] - rr[i], beta, loss_type, reward_shift))
        else:
            out["losses"].append(margin_loss(delta, beta, loss_type, label_smoothing, discopop_tau))
        out["losses"][i] += -rpo_alpha * pc[i] / nll[i]
    return out


def nll_divisors(n_pairs, aggregation, lengths):
    """The divisor of −pc_i in the pair's NLL: n_i, 1, or Σn/B."""
    if aggregation == "seq-mean-token-sum" or lengths is None:
        return [1] * n_pairs
    if aggregation == "seq-mean-token-mean":
        return list(lengths)
    return [mpm.mpf(sum(int(n) for n in lengths)) / n_pairs] * n_pairs


def dpo_gradient(cotangent, policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
                 reference_rejected_logps, beta, loss_type, label_smoothing, discopop_tau=0.05,
                 reward_shift=0.0, rpo_alpha=0.0, nll_aggregation=None, chosen_lengths=None):
    pc, pr, rc, rr = (policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
                      reference_rejected_logps)
    nll = nll_divisors(len(pc), nll_aggregation, chosen_lengths)
    d_chosen = [beta * c - rpo_alpha * ct / d for c, ct, d in zip(cotangent["chosen_rewards"], cotangent["losses"], nll)]
    d_rejected = [beta * c for c in cotangent["rejected_rewards"]]
    for i, (delta, j, k) in enumerate(positions(pc, pr, rc, rr, loss_type)):
        if loss_type in GAIN_TYPES:
            dc, dr = gain_slopes(pc[i] - rc[i], pr[i] - rr[i], beta, loss_type, reward_shift)
        else:
            dc = margin_slope(delta, beta, loss_type, label_smoothing, discopop_tau)
            dr = -dc
        d_chosen[j] += cotangent["losses"][i] * dc
        d_rejected[k] += cotangent["losses"][i] * dr
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
    {"id": "exo_pair",
     "inputs": {"policy_chosen_logps": [-14.25, -3.5, -27.875],
                "policy_rejected_logps": [-15.75, -2.125, -30.0],
                "reference_chosen_logps": [-14.75, -3.0, -26.5],
                "reference_rejected_logps": [-14.5, -2.75, -31.625]},
     "params": {"beta": 0.1, "loss_type": "exo_pair", "label_smoothing": 0.001},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["2.463642517652658156869031849978416477153",
                    "2.956858102492954416920522745599609777251",
                    "3.286511608956381879325434772874692876976"],
         "chosen_rewards": ["0.05000000000000000277555756156289135105908",
                            "-0.05000000000000000277555756156289135105908",
                            "-0.1375000000000000076327832942979512154125"],
         "rejected_rewards": ["-0.1250000000000000069388939039072283776477",
                              "0.06250000000000000346944695195361418882385",
                              "0.1625000000000000090205620750793968909420"],
         "grad:policy_chosen_logps": ["-0.1420119178265689316238894952246258485361",
                                      "-0.1874636522729682157740198726459890452798",
                                      "0.3523502211915280881735299670496335096183"],
         "grad:policy_rejected_logps": ["0.1670119178265689330116682760060715240656",
                                        "0.1624636522729682143862410918645433697503",
                                        "-0.4023502211915280909490875286125248606773"]}},
    {"id": "exo_pair-ls0.25",
     "inputs": {"policy_chosen_logps": [-8.0, -20.5, -5.25],
                "policy_rejected_logps": [-11.5, -18.25, -9.0],
                "reference_chosen_logps": [-9.5, -19.0, -6.0],
                "reference_rejected_logps": [-8.25, -21.0, -7.5]},
     "params": {"beta": 0.5, "loss_type": "exo_pair", "label_smoothing": 0.25},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["0.09012323168380211493798483424412678915205",
                    "0.9295429726198207459208918554022281847091",
                    "0.00006470362515658183159829380478192089825530"],
         "chosen_rewards": ["0.7500000000000000000000000000000000000000",
                            "-0.7500000000000000000000000000000000000000",
                            "0.3750000000000000000000000000000000000000"],
         "rejected_rewards": ["-1.625000000000000000000000000000000000000",
                              "1.375000000000000000000000000000000000000",
                              "-0.7500000000000000000000000000000000000000"],
         "grad:policy_chosen_logps": ["0.1746879850931716233076929984887675685852",
                                      "-0.5768087771840919582241607172028557148841",
                                      "-0.004882210796924466919990414523258380532252"],
         "grad:policy_rejected_logps": ["-0.04968798509317162330769299848876756858518",
                                        "0.4518087771840919582241607172028557148841",
                                        "-0.2451177892030755330800095854767416194677"]}},
    {"id": "nca_pair",
     "inputs": {"policy_chosen_logps": [-14.25, -3.5, -27.875],
                "policy_rejected_logps": [-15.75, -2.125, -30.0],
                "reference_chosen_logps": [-14.75, -3.0, -26.5],
                "reference_rejected_logps": [-14.5, -2.75, -31.625]},
     "params": {"beta": 0.1, "loss_type": "nca_pair", "label_smoothing": 0.0},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["1.343988989678513972081334183896082796978",
                    "1.415132163198817209154060659342278863425",
                    "1.466485071916290141603159864808502759557"],
         "chosen_rewards": ["0.05000000000000000277555756156289135105908",
                            "-0.05000000000000000277555756156289135105908",
                            "-0.1375000000000000076327832942979512154125"],
         "rejected_rewards": ["-0.1250000000000000069388939039072283776477",
                              "0.06250000000000000346944695195361418882385",
                              "0.1625000000000000090205620750793968909420"],
         "grad:policy_chosen_logps": ["0.001874609472631551757305313277932639663844",
                                      "-0.1134373047363157821236571701554718597149",
                                      "0.06029628310079138532861230345579503953564"],
         "grad:policy_rejected_logps": ["0.02343953133131218835250355524559443911622",
                                        "0.08789049789307539561016783522666663178673",
                                        "-0.1040535839273789418199566126150899114163"]}},
    {"id": "nca_pair-beta0.5",
     "inputs": {"policy_chosen_logps": [-8.0, -20.5, -5.25],
                "policy_rejected_logps": [-11.5, -18.25, -9.0],
                "reference_chosen_logps": [-9.5, -19.0, -6.0],
                "reference_rejected_logps": [-8.25, -21.0, -7.5]},
     "params": {"beta": 0.5, "loss_type": "nca_pair", "label_smoothing": 0.0},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["1.045178826865179437667280051438125697403",
                    "2.130512834973173878933007761431513094659",
                    "1.165620399267210037263482637397371214319"],
         "chosen_rewards": ["0.7500000000000000000000000000000000000000",
                            "-0.7500000000000000000000000000000000000000",
                            "0.3750000000000000000000000000000000000000"],
         "rejected_rewards": ["-1.625000000000000000000000000000000000000",
                              "1.375000000000000000000000000000000000000",
                              "-0.7500000000000000000000000000000000000000"],
         "grad:policy_chosen_logps": ["0.1343840243815447298697600868324342659257",
                                      "-0.6296920121907723649348800434162171329628",
                                      "0.1110001000688953618509100187313790949079"],
         "grad:policy_rejected_logps": ["0.04112911572414079075648630659760831899859",
                                        "0.4747733472174526462402733149692043362449",
                                        "-0.4104106504123035134201599421117104893829"]}},
    {"id": "bco_pair",
     "inputs": {"policy_chosen_logps": [-8.0, -20.5, -5.25],
                "policy_rejected_logps": [-11.5, -18.25, -9.0],
                "reference_chosen_logps": [-9.5, -19.0, -6.0],
                "reference_rejected_logps": [-8.25, -21.0, -7.5]},
     "params": {"beta": 0.5, "loss_type": "bco_pair", "label_smoothing": 0.0},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["0.5666156415005589879948795644482055774687",
                    "2.737283657716547870526334984434980371980",
                    "0.9099942702547399872888819377409294153255"],
         "chosen_rewards": ["0.7500000000000000000000000000000000000000",
                            "-0.7500000000000000000000000000000000000000",
                            "0.3750000000000000000000000000000000000000"],
         "rejected_rewards": ["-1.625000000000000000000000000000000000000",
                              "1.375000000000000000000000000000000000000",
                              "-0.7500000000000000000000000000000000000000"],
         "grad:policy_chosen_logps": ["-0.03541065041230351342015994211171048938289",
                                      "-0.6697946747938482432899200289441447553086",
                                      "0.4073334000459302412339400124875860632719"],
         "grad:policy_rejected_logps": ["0.08225823144828158151297261319521663799717",
                                        "0.5745466944349052924805466299384086724898",
                                        "-0.5708213008246070268403198842234209787658"]}},
    {"id": "bco_pair-shift",
     "inputs": {"policy_chosen_logps": [-14.25, -3.5, -27.875],
                "policy_rejected_logps": [-15.75, -2.125, -30.0],
                "reference_chosen_logps": [-14.75, -3.0, -26.5],
                "reference_rejected_logps": [-14.5, -2.75, -31.625]},
     "params": {"beta": 0.1, "loss_type": "bco_pair", "label_smoothing": 0.0, "reward_shift": 0.0625},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["1.303202001238384802147229463766750675196",
                    "1.444125558798842129011807004600119771606",
                    "1.542535529455162743447413918959158950826"],
         "chosen_rewards": ["0.05000000000000000277555756156289135105908",
                            "-0.05000000000000000277555756156289135105908",
                            "-0.1375000000000000076327832942979512154125"],
         "rejected_rewards": ["-0.1250000000000000069388939039072283776477",
                              "0.06250000000000000346944695195361418882385",
                              "0.1625000000000000090205620750793968909420"],
         "grad:policy_chosen_logps": ["-0.02531249593105316195161215829599776293794",
                                      "-0.1264047687204193585733156255591738767389",
                                      "0.1099667994624955881940622159992231454710"],
         "grad:policy_rejected_logps": ["0.04532618480153861569263669902312484427930",
                                        "0.1000000000000000055944832100252028818859",
                                        "-0.1549958374957880062737384220844737414536"]}},
    {"id": "sppo_hard",
     "inputs": {"policy_chosen_logps": [-14.25, -3.5, -27.875],
                "policy_rejected_logps": [-15.75, -2.125, -30.0],
                "reference_chosen_logps": [-14.75, -3.0, -26.5],
                "reference_rejected_logps": [-14.5, -2.75, -31.625]},
     "params": {"beta": 0.1, "loss_type": "sppo_hard", "label_smoothing": 0.0},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["34.31249999999999542033002342122967904967",
                    "61.89062499999999382438442552256724078347",
                    "84.53124999999999278355033993648304191422"],
         "chosen_rewards": ["0.05000000000000000277555756156289135105908",
                            "-0.05000000000000000277555756156289135105908",
                            "-0.1375000000000000076327832942979512154125"],
         "rejected_rewards": ["-0.1250000000000000069388939039072283776477",
                              "0.06250000000000000346944695195361418882385",
                              "0.1625000000000000090205620750793968909420"],
         "grad:policy_chosen_logps": ["-8.974999999999999443500708906640314927534",
                                      "-5.599999999999999727995358966836663003650",
                                      "25.49999999999999888977697537484352120613"],
         "grad:policy_rejected_logps": ["7.499999999999999444888487687421760603063",
                                        "5.699999999999999726607580186055217328120",
                                        "-26.54999999999999889255253293640641255719"]}},
    {"id": "sppo_hard-beta0.5",
     "inputs": {"policy_chosen_logps": [-8.0, -20.5, -5.25],
                "policy_rejected_logps": [-11.5, -18.25, -9.0],
                "reference_chosen_logps": [-9.5, -19.0, -6.0],
                "reference_rejected_logps": [-8.25, -21.0, -7.5]},
     "params": {"beta": 0.5, "loss_type": "sppo_hard", "label_smoothing": 0.0},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["5.312500000000000000000000000000000000000",
                    "20.31250000000000000000000000000000000000",
                    "0.3125000000000000000000000000000000000000"],
         "chosen_rewards": ["0.7500000000000000000000000000000000000000",
                            "-0.7500000000000000000000000000000000000000",
                            "0.3750000000000000000000000000000000000000"],
         "rejected_rewards": ["-1.625000000000000000000000000000000000000",
                              "1.375000000000000000000000000000000000000",
                              "-0.7500000000000000000000000000000000000000"],
         "grad:policy_chosen_logps": ["1.125000000000000000000000000000000000000",
                                      "-3.000000000000000000000000000000000000000",
                                      "1.000000000000000000000000000000000000000"],
         "grad:policy_rejected_logps": ["-4.500000000000000000000000000000000000000",
                                        "4.125000000000000000000000000000000000000",
                                        "1.750000000000000000000000000000000000000"]}},
    {"id": "apo_zero",
     "inputs": {"policy_chosen_logps": [-8.0, -20.5, -5.25],
                "policy_rejected_logps": [-11.5, -18.25, -9.0],
                "reference_chosen_logps": [-9.5, -19.0, -6.0],
                "reference_rejected_logps": [-8.25, -21.0, -7.5]},
     "params": {"beta": 0.5, "loss_type": "apo_zero", "label_smoothing": 0.0},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["0.4853377637211701898662651106138542547601",
                    "1.477365476915014143081866635530213711193",
                    "0.7281547008705372680742598967110070420377"],
         "chosen_rewards": ["0.7500000000000000000000000000000000000000",
                            "-0.7500000000000000000000000000000000000000",
                            "0.3750000000000000000000000000000000000000"],
         "rejected_rewards": ["-1.625000000000000000000000000000000000000",
                              "1.375000000000000000000000000000000000000",
                              "-0.7500000000000000000000000000000000000000"],
         "grad:policy_chosen_logps": ["0.01605250311909298525987474991791293844323",
                                      "-0.5544737484404535073700626250410435307784",
                                      "0.2414129012529523985825484640625563620207"],
         "grad:policy_rejected_logps": ["0.06872539816628345957050213769612970604582",
                                        "0.4152711613953154411832070616916424425321",
                                        "-0.4678949937618140294802505001641741231135"]}},
    {"id": "apo_down",
     "inputs": {"policy_chosen_logps": [-8.0, -20.5, -5.25],
                "policy_rejected_logps": [-11.5, -18.25, -9.0],
                "reference_chosen_logps": [-9.5, -19.0, -6.0],
                "reference_rejected_logps": [-8.25, -21.0, -7.5]},
     "params": {"beta": 0.5, "loss_type": "apo_down", "label_smoothing": 0.0},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["0.7642777441824132096168173176314066558898",
                    "1.214130706878955835750028857462101409976",
                    "0.8377516130864414675214039199771482584519"],
         "chosen_rewards": ["0.7500000000000000000000000000000000000000",
                            "-0.7500000000000000000000000000000000000000",
                            "0.3750000000000000000000000000000000000000"],
         "rejected_rewards": ["-1.625000000000000000000000000000000000000",
                              "1.375000000000000000000000000000000000000",
                              "-0.7500000000000000000000000000000000000000"],
         "grad:policy_chosen_logps": ["0.1950188981079503244297578503264483637237",
                                      "-0.4693531793368403347546563547527928055419",
                                      "-0.05639455178267550276699816389181270436545"],
         "grad:policy_rejected_logps": ["0.03892859877295669031036739975563869783311",
                                        "0.3988269277772938421247189797938363363203",
                                        "-0.4350183494702768958155503001707436576552"]}},
    {"id": "discopop",
     "inputs": {"policy_chosen_logps": [-8.0, -20.5, -5.25],
                "policy_rejected_logps": [-11.5, -18.25, -9.0],
                "reference_chosen_logps": [-9.5, -19.0, -6.0],
                "reference_rejected_logps": [-8.25, -21.0, -7.5]},
     "params": {"beta": 0.5, "loss_type": "discopop", "label_smoothing": 0.0},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["0.09301448921066348669985499832725727408655",
                    "2.237822278771569271496730856343522545498",
                    "0.3246524673509895794349150208846066047456"],
         "chosen_rewards": ["0.7500000000000000000000000000000000000000",
                            "-0.7500000000000000000000000000000000000000",
                            "0.3750000000000000000000000000000000000000"],
         "rejected_rewards": ["-1.625000000000000000000000000000000000000",
                              "1.375000000000000000000000000000000000000",
                              "-0.7500000000000000000000000000000000000000"],
         "grad:policy_chosen_logps": ["0.07849275539466825665017276351613478952726",
                                      "-0.7233273515135871921822033514146253887475",
                                      "0.3246524671976847215299180075365278990752"],
         "grad:policy_rejected_logps": ["0.04650724460533174334982723648386521047274",
                                        "0.5983273515135871921822033514146253887475",
                                        "-0.5746524671976847215299180075365278990752"]}},
    {"id": "discopop-tau1",
     "inputs": {"policy_chosen_logps": [-14.25, -3.5, -27.875],
                "policy_rejected_logps": [-15.75, -2.125, -30.0],
                "reference_chosen_logps": [-14.75, -3.0, -26.5],
                "reference_rejected_logps": [-14.5, -2.75, -31.625]},
     "params": {"beta": 0.1, "loss_type": "discopop", "label_smoothing": 0.0, "discopop_tau": 1.0},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["0.7345000385904920802414365707922851429552",
                    "0.9246835822370605403163731407562828686285",
                    "1.065220493695399913536050769967475391759"],
         "chosen_rewards": ["0.05000000000000000277555756156289135105908",
                            "-0.05000000000000000277555756156289135105908",
                            "-0.1375000000000000076327832942979512154125"],
         "rejected_rewards": ["-0.1250000000000000069388939039072283776477",
                              "0.06250000000000000346944695195361418882385",
                              "0.1625000000000000090205620750793968909420"],
         "grad:policy_chosen_logps": ["-0.03575682845416156250258486563853928449084",
                                      "-0.1357623592068913072811215322322424427087",
                                      "0.1566593514917139248960348348727304831519"],
         "grad:policy_rejected_logps": ["0.06075682845416156389036364641998496002038",
                                        "0.1107623592068913058933427514507967671792",
                                        "-0.2066593514917139276715923964356218342110"]}},
    {"id": "aot",
     "inputs": {"policy_chosen_logps": [-14.25, -3.5, -27.875],
                "policy_rejected_logps": [-15.75, -2.125, -30.0],
                "reference_chosen_logps": [-14.75, -3.0, -26.5],
                "reference_rejected_logps": [-14.5, -2.75, -31.625]},
     "params": {"beta": 0.1, "loss_type": "aot", "label_smoothing": 0.0},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["0.7509783782388968196920502942471171651793",
                    "0.6094704306630468173186942826808044060203",
                    "0.8543552444685271283809780628945872406949"],
         "chosen_rewards": ["0.05000000000000000277555756156289135105908",
                            "-0.05000000000000000277555756156289135105908",
                            "-0.1375000000000000076327832942979512154125"],
         "rejected_rewards": ["-0.1250000000000000069388939039072283776477",
                              "0.06250000000000000346944695195361418882385",
                              "0.1625000000000000090205620750793968909420"],
         "grad:policy_chosen_logps": ["0.002181934361853943462392006158657322421904",
                                      "-0.1528095374408387116819784409743442799177",
                                      "0.1148885033623318046222170765263815856963"],
         "grad:policy_rejected_logps": ["0.02281806563814605792538677462278835310764",
                                        "0.1278095374408387102941996601928986043882",
                                        "-0.1648885033623318073977746380892729367553"]}},
    {"id": "aot-ls",
     "inputs": {"policy_chosen_logps": [-8.0, -20.5, -5.25],
                "policy_rejected_logps": [-11.5, -18.25, -9.0],
                "reference_chosen_logps": [-9.5, -19.0, -6.0],
                "reference_rejected_logps": [-8.25, -21.0, -7.5]},
     "params": {"beta": 0.5, "loss_type": "aot", "label_smoothing": 0.1},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["0.9240769841801066780974397935182793986965",
                    "0.4132616875182228396001106180936383440334",
                    "0.4359445810050557172980963708015872875182"],
         "chosen_rewards": ["0.7500000000000000000000000000000000000000",
                            "-0.7500000000000000000000000000000000000000",
                            "0.3750000000000000000000000000000000000000"],
         "rejected_rewards": ["-1.625000000000000000000000000000000000000",
                              "1.375000000000000000000000000000000000000",
                              "-0.7500000000000000000000000000000000000000"],
         "grad:policy_chosen_logps": ["0.08276464465750122120056859123690474412083",
                                      "-0.7612296656009272795438927213098628883176",
                                      "0.1942149721629887687328470975771388329868"],
         "grad:policy_rejected_logps": ["0.04223535534249877879943140876309525587917",
                                        "0.6362296656009272795438927213098628883176",
                                        "-0.4442149721629887687328470975771388329868"]}},
    {"id": "aot_unpaired",
     "inputs": {"policy_chosen_logps": [-8.0, -20.5, -5.25],
                "policy_rejected_logps": [-11.5, -18.25, -9.0],
                "reference_chosen_logps": [-9.5, -19.0, -6.0],
                "reference_rejected_logps": [-8.25, -21.0, -7.5]},
     "params": {"beta": 0.5, "loss_type": "aot_unpaired", "label_smoothing": 0.0},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["0.3484445810050557124408706380665274231648",
                    "0.2811501362483147755695053065535580601900",
                    "1.053700678276518637213592895021672053842"],
         "chosen_rewards": ["0.7500000000000000000000000000000000000000",
                            "-0.7500000000000000000000000000000000000000",
                            "0.3750000000000000000000000000000000000000"],
         "rejected_rewards": ["-1.625000000000000000000000000000000000000",
                              "1.375000000000000000000000000000000000000",
                              "-0.7500000000000000000000000000000000000000"],
         "grad:policy_chosen_logps": ["0.7763548646660542436211986948549585720614",
                                      "-0.6471074860814943871419811103514607675525",
                                      "-0.06127125328309292718883598311618358043094"],
         "grad:policy_rejected_logps": ["0.1471074860814943871419811103514607675525",
                                        "-0.2763548646660542436211986948549585720614",
                                        "-0.1887287467169070728111640168838164195691"]}},
    {"id": "aot_unpaired-ls",
     "inputs": {"policy_chosen_logps": [-14.25, -3.5, -27.875],
                "policy_rejected_logps": [-15.75, -2.125, -30.0],
                "reference_chosen_logps": [-14.75, -3.0, -26.5],
                "reference_rejected_logps": [-14.5, -2.75, -31.625]},
     "params": {"beta": 0.1, "loss_type": "aot_unpaired", "label_smoothing": 0.25},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["0.6962917116827900586039945569445621941297",
                    "0.7228533782388968181307991658679907802085",
                    "0.7228533782388968181307991658679907802085"],
         "chosen_rewards": ["0.05000000000000000277555756156289135105908",
                            "-0.05000000000000000277555756156289135105908",
                            "-0.1375000000000000076327832942979512154125"],
         "rejected_rewards": ["-0.1250000000000000069388939039072283776477",
                              "0.06250000000000000346944695195361418882385",
                              "0.1625000000000000090205620750793968909420"],
         "grad:policy_chosen_logps": ["0.08061907488167741087394785491567748006963",
                                      "-0.1139047687204193579226573916593406532532",
                                      "-0.02531249593105316203834494405127975091912"],
         "grad:policy_rejected_logps": ["0.02531249593105316203834494405127975091912",
                                        "0.08890476872041935653487861087789497772364",
                                        "-0.1056190748816774122617266356971231555992"]}},
    {"id": "rpo-seq-mean-token-mean",
     "inputs": {"policy_chosen_logps": [-14.25, -3.5, -27.875],
                "policy_rejected_logps": [-15.75, -2.125, -30.0],
                "reference_chosen_logps": [-14.75, -3.0, -26.5],
                "reference_rejected_logps": [-14.5, -2.75, -31.625],
                "chosen_lengths": [5, 1, 12]},
     "params": {"beta": 0.1, "loss_type": "sigmoid", "label_smoothing": 0.0,
                "rpo_alpha": 1.0, "nll_aggregation": "seq-mean-token-mean"},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["3.459470430663046817318694282680804406020",
                    "4.250978378238896819692050294247117165179",
                    "3.177271911135193795047644729561253907362"],
         "chosen_rewards": ["0.05000000000000000277555756156289135105908",
                            "-0.05000000000000000277555756156289135105908",
                            "-0.1375000000000000076327832942979512154125"],
         "rejected_rewards": ["-0.1250000000000000069388939039072283776477",
                              "0.06250000000000000346944695195361418882385",
                              "0.1625000000000000090205620750793968909420"],
         "grad:policy_chosen_logps": ["-0.2206361312762921144629947684641310306857",
                                      "-0.6264047687204193586165467820500634910179",
                                      "0.2815551700289984712888837431930482523629"],
         "grad:policy_rejected_logps": ["0.04563613127629211585077354924557670621527",
                                        "0.1014047687204193572287680012686178154884",
                                        "-0.1648885033623318073977746380892729367553"]}},
    {"id": "rpo-seq-mean-token-sum",
     "inputs": {"policy_chosen_logps": [-14.25, -3.5, -27.875],
                "policy_rejected_logps": [-15.75, -2.125, -30.0],
                "reference_chosen_logps": [-14.75, -3.0, -26.5],
                "reference_rejected_logps": [-14.5, -2.75, -31.625],
                "chosen_lengths": [5, 1, 12]},
     "params": {"beta": 0.1, "loss_type": "ipo", "label_smoothing": 0.0,
                "rpo_alpha": 0.5, "nll_aggregation": "seq-mean-token-sum"},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["17.68749999999999819588758498412079899715",
                    "39.26562499999999659994198708545836073096",
                    "77.93749999999999555910790149937416186170"],
         "chosen_rewards": ["0.05000000000000000277555756156289135105908",
                            "-0.05000000000000000277555756156289135105908",
                            "-0.1375000000000000076327832942979512154125"],
         "rejected_rewards": ["-0.1250000000000000069388939039072283776477",
                              "0.06250000000000000346944695195361418882385",
                              "0.1625000000000000090205620750793968909420"],
         "grad:policy_chosen_logps": ["-6.974999999999999443500708906640314927534",
                                      "-6.474999999999999727995358966836663003650",
                                      "32.99999999999999888977697537484352120613"],
         "grad:policy_rejected_logps": ["6.499999999999999444888487687421760603063",
                                        "6.199999999999999726607580186055217328120",
                                        "-32.04999999999999889255253293640641255719"]}},
    {"id": "rpo-token-mean",
     "inputs": {"policy_chosen_logps": [-14.25, -3.5, -27.875],
                "policy_rejected_logps": [-15.75, -2.125, -30.0],
                "reference_chosen_logps": [-14.75, -3.0, -26.5],
                "reference_rejected_logps": [-14.5, -2.75, -31.625],
                "chosen_lengths": [5, 1, 12]},
     "params": {"beta": 0.1, "loss_type": "aot", "label_smoothing": 0.0,
                "rpo_alpha": 2.0, "nll_aggregation": "token-mean"},
     "cotangent": {"losses": [1.0, 0.5, -2.0],
                   "chosen_rewards": [0.25, -1.0, 0.0],
                   "rejected_rewards": [0.0, 0.75, -0.5]},
     "expect": {
         "losses": ["5.500978378238896819692050294247117165179",
                    "1.776137097329713483985360949347471072687",
                    "10.14602191113519379504764472956125390736"],
         "chosen_rewards": ["0.05000000000000000277555756156289135105908",
                            "-0.05000000000000000277555756156289135105908",
                            "-0.1375000000000000076327832942979512154125"],
         "rejected_rewards": ["-0.1250000000000000069388939039072283776477",
                              "0.06250000000000000346944695195361418882385",
                              "0.1625000000000000090205620750793968909420"],
         "grad:policy_chosen_logps": ["-0.3311513989714793898709413271746760109114",
                                      "-0.3194762041075053783486451076410109465844",
                                      "0.7815551700289984712888837431930482523629"],
         "grad:policy_rejected_logps": ["0.02281806563814605792538677462278835310764",
                                        "0.1278095374408387102941996601928986043882",
                                        "-0.1648885033623318073977746380892729367553"]}},
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
