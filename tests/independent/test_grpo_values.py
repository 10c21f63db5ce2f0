"""Independent 40-digit values for grpo.advantages, grpo.clip and grpo.loss (with gradients).

Written from the papers:

advantages  DeepSeekMath (Shao et al. 2024) §4.1.2: A_ij = (r_ij − mean_j r_ij)/(std_j + eps),
            std over the group's G rewards with divisor G − std_ddof (0: population, as the
            article's (0,1,1,0) → (−1,1,1,−1)); scale 'batch' takes the std over all B·G
            rewards (mean still per group), 'none' divides by 1 (Dr. GRPO §3). A group whose
            rewards are all equal gets A = 0 ('zero'; 'drop' also sets keep = 0, DAPO §3.2).
clip        PPO (Schulman et al. 2017) eq. 7 / DeepSeekMath eq. 3, ρ = exp(logp − old_logp):
            C = min(ρ·A, clip(ρ, 1 − ε_low, 1 + ε_high)·A) (DAPO §3.1: ε_high ≠ ε_low);
            dual clip (Ye et al. 2020): C = max(C, c·A) where A < 0.
            dC/dlogp = ρ·A where the unclipped branch is the minimum, else 0 (no row has a tie
            outside the band), and 0 where the dual clip binds.
loss        DeepSeekMath §4.1.1 eq. 3–4 negated: ℓ_t = −C_t + β·(π_ref/π − log(π_ref/π) − 1),
            loss = 1/G Σ_i 1/|o_i| Σ_t m_it·ℓ_it ('seq-mean-token-mean'), or Σ m·ℓ / Σ m
            ('token-mean', DAPO §3.3). Gradient by hand: w_it·(−dC_t/dlogp + β·(1 − π_ref/π)),
            w_it = m_it/(G·|o_i|) or m_it/Σ m.
library     the conventions of verl 0.9.1 and OpenRLHF 0.11.2 (none in the papers): log ρ clamped to
            [−c, c] before exp (a clamped token's ratio is constant), the KL term reduced with its
            own mode, and each row's token count |o_i| + ε in per-row token means.
"""
from __future__ import annotations

import mpmath as mpm
import numpy as np
import pytest
from decimal_tables import RECOMPUTE_DPS, Table, over_rows

from lossproof.refimpl.exact import grpo

# ------------------------------------------------------------------------------ advantages

def std(xs, ddof):
    mean = sum(xs) / len(xs)
    return mpm.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - ddof))


def advantages_values(rewards, scale, std_ddof, eps, degenerate, baseline="mean"):
    everything = [r for row in rewards for r in row]
    if scale == "whiten":
        # REINFORCE++ (arXiv 2501.03262): c = r − b (b: group mean, the mean of the other G − 1
        # rewards (RLOO), or 0), whitened over all B·G values of c
        def b(row, i):
            if baseline == "none":
                return 0
            if baseline == "mean":
                return sum(row) / len(row)
            return (sum(row) - row[i]) / (len(row) - 1)
        c = [[r - b(list(row), i) for i, r in enumerate(row)] for row in rewards]
        flat = [x for row in c for x in row]
        mean = sum(flat) / len(flat)
        divisor = std(flat, std_ddof) + eps
        return {"advantages": [[(x - mean) / divisor for x in row] for row in c], "keep": [1] * len(rewards)}
    advantages, keep = [], []
    for row in rewards:
        row = list(row)
        if scale == "group":
            constant, divisor = len(set(row)) == 1, std(row, std_ddof) + eps
        elif scale == "batch":
            constant, divisor = len(set(everything)) == 1, std(everything, std_ddof) + eps
        else:
            constant, divisor = False, mpm.mpf(1)
        g = len(row)
        if baseline == "leave-one-out":
            bases = [(sum(row) - r) / (g - 1) for r in row]
        else:
            bases = [sum(row) / g if baseline == "mean" else 0] * g
        advantages.append([mpm.mpf(0) if constant else (r - bb) / divisor for r, bb in zip(row, bases)])
        keep.append(0 if constant and degenerate == "drop" else 1)
    return {"advantages": advantages, "keep": keep}


# Literals: decimal_tables.literals(Table.expressions(row)) at 60 digits, i.e. advantages_values,
# e.g. (r - mean)/(mp.sqrt(mp.fsum((x - mean)**2 for x in group)/(G - ddof)) + eps).
ADVANTAGES_ROWS = [
    {"id": "article",
     "inputs": {"rewards": [[0.0, 1.0, 1.0, 0.0]]},
     "params": {"scale": "group", "std_ddof": 0, "eps": 0.0, "degenerate": "zero"},
     "expect": {
         "advantages": [["-1.000000000000000000000000000000000000000",
                         "1.000000000000000000000000000000000000000",
                         "1.000000000000000000000000000000000000000",
                         "-1.000000000000000000000000000000000000000"]],
         "keep": ["1"]}},
    {"id": "group",
     "inputs": {"rewards": [[0.5, 1.0, 0.0, 0.25], [2.0, -1.0, 0.75, 3.5]]},
     "params": {"scale": "group", "std_ddof": 0, "eps": 0.0, "degenerate": "zero"},
     "expect": {
         "advantages": [["0.1690308509457033155019236654731890585262",
                         "1.521277658511329839517312989258701526735",
                         "-1.183215956619923208513465658312323409683",
                         "-0.5070925528371099465057709964195671755785"],
                        ["0.4160582109597285838742043937821265693777",
                         "-1.399468527773632509395051142721698460634",
                         "-0.3404112635125052049879854130944671931272",
                         "1.323821580326409130508832162034039084384"]],
         "keep": ["1", "1"]}},
    {"id": "group-ddof1",
     "inputs": {"rewards": [[0.5, 1.0, 0.0, 0.25], [2.0, -1.0, 0.75, 3.5]]},
     "params": {"scale": "group", "std_ddof": 1, "eps": 0.0, "degenerate": "zero"},
     "expect": {
         "advantages": [["0.1463850109422799769031576954360150284391",
                         "1.317465098480519792128419258924135255952",
                         "-1.024695076595959838322103868052105199074",
                         "-0.4391550328268399307094730863080450853172"],
                        ["0.3603169801442301036004623083832731233060",
                         "-1.211975296848773984837918673652827778393",
                         "-0.2948048019361882665821964341317689190686",
                         "1.146463118640732147819652799401323574156"]],
         "keep": ["1", "1"]}},
    {"id": "group-eps",
     "inputs": {"rewards": [[0.5, 1.0, 0.0, 0.25], [2.0, -1.0, 0.75, 3.5]]},
     "params": {"scale": "group", "std_ddof": 0, "eps": 0.0001, "degenerate": "zero"},
     "expect": {
         "advantages": [["0.1689851490200456438230726618018679210951",
                         "1.520866341180410794407653956216811289856",
                         "-1.182896043140319506761508632613075447665",
                         "-0.5069554470601369314692179854056037632852"],
                        ["0.4160330336565019260198433210129535859388",
                         "-1.399383840480961023884927534316298425431",
                         "-0.3403906639007743031071445353742347521318",
                         "1.323741470725233400972228748677579591624"]],
         "keep": ["1", "1"]}},
    {"id": "group-ddof1-eps-nondyadic",
     "inputs": {"rewards": [[0.3, 0.7, 0.1, 0.9], [1.1, 0.2, 0.2, 0.6]]},
     "params": {"scale": "group", "std_ddof": 1, "eps": 1e-06, "degenerate": "zero"},
     "expect": {
         "advantages": [["-0.5477210575092740327900921363998590197124",
                         "0.5477210575092739187727429266182002384449",
                         "-1.095442115018548008571509667908888648791",
                         "1.095442115018548122588858877690547430059"],
                        ["1.345970042077945209027394311188451662353",
                         "-0.7607656759570994038260839570729466623620",
                         "-0.7607656759570994038260839570729466623620",
                         "0.1755613098362535986247736029574416623708"]],
         "keep": ["1", "1"]}},
    {"id": "batch",
     "inputs": {"rewards": [[0.5, 1.0, 0.0, 0.25], [2.0, -1.0, 0.75, 3.5]]},
     "params": {"scale": "batch", "std_ddof": 0, "eps": 0.0, "degenerate": "zero"},
     "expect": {
         "advantages": [["0.04902903378454600798104061643291136528427",
                         "0.4412613040609140718293655478962022875584",
                         "-0.3432032364918220558672843150303795569899",
                         "-0.1470871013536380239431218492987340958528"],
                        ["0.5393193716300060877914467807620250181269",
                         "-1.814074250028202295298502808017720515518",
                         "-0.4412613040609140718293655478962022875584",
                         "1.716016182459110279336421575151897784949"]],
         "keep": ["1", "1"]}},
    {"id": "none",
     "inputs": {"rewards": [[0.5, 1.0, 0.0, 0.25], [2.0, -1.0, 0.75, 3.5]]},
     "params": {"scale": "none", "std_ddof": 0, "eps": 0.0, "degenerate": "zero"},
     "expect": {
         "advantages": [["0.06250000000000000000000000000000000000000",
                         "0.5625000000000000000000000000000000000000",
                         "-0.4375000000000000000000000000000000000000",
                         "-0.1875000000000000000000000000000000000000"],
                        ["0.6875000000000000000000000000000000000000",
                         "-2.312500000000000000000000000000000000000",
                         "-0.5625000000000000000000000000000000000000",
                         "2.187500000000000000000000000000000000000"]],
         "keep": ["1", "1"]}},
    {"id": "constant-group-zero",
     "inputs": {"rewards": [[1.0, 1.0, 1.0], [0.0, 1.0, 0.5]]},
     "params": {"scale": "group", "std_ddof": 0, "eps": 0.0, "degenerate": "zero"},
     "expect": {
         "advantages": [["0", "0", "0"],
                        ["-1.224744871391589049098642037352945695983",
                         "1.224744871391589049098642037352945695983",
                         "0"]],
         "keep": ["1", "1"]}},
    {"id": "constant-group-drop",
     "inputs": {"rewards": [[1.0, 1.0, 1.0], [0.0, 1.0, 0.5]]},
     "params": {"scale": "group", "std_ddof": 1, "eps": 0.0, "degenerate": "drop"},
     "expect": {
         "advantages": [["0", "0", "0"],
                        ["-1.000000000000000000000000000000000000000",
                         "1.000000000000000000000000000000000000000",
                         "0"]],
         "keep": ["0", "1"]}},
    {"id": "rloo",
     "inputs": {"rewards": [[0.5, 1.0, 0.0, 0.25], [2.0, -1.0, 0.75, 3.5]]},
     "params": {"scale": "none", "std_ddof": 0, "eps": 0.0, "degenerate": "zero", "baseline": "leave-one-out"},
     "expect": {
         "advantages": [["0.08333333333333333333333333333333333333333",
                         "0.7500000000000000000000000000000000000000",
                         "-0.5833333333333333333333333333333333333333",
                         "-0.2500000000000000000000000000000000000000"],
                        ["0.9166666666666666666666666666666666666667",
                         "-3.083333333333333333333333333333333333333",
                         "-0.7500000000000000000000000000000000000000",
                         "2.916666666666666666666666666666666666667"]],
         "keep": ["1", "1"]}},
    {"id": "rloo-group-ddof1-eps",
     "inputs": {"rewards": [[0.5, 1.0, 0.0, 0.25], [2.0, -1.0, 0.75, 3.5]]},
     "params": {"scale": "group", "std_ddof": 1, "eps": 0.0001, "degenerate": "zero", "baseline": "leave-one-out"},
     "expect": {
         "advantages": [["0.1951343110085031254780015572090654590868",
                         "1.756208799076528129302014014881589131781",
                         "-1.365940177059521878346010900463458213608",
                         "-0.5854029330255093764340046716271963772604"],
                        ["0.4803974626849579183260468389809517432124",
                         "-1.615882374485767543460339367481383136260",
                         "-0.3930524694695110240849474137116877899011",
                         "1.528537381270320649219239942212119182949"]],
         "keep": ["1", "1"]}},
    {"id": "reinforce++",
     "inputs": {"rewards": [[0.5, 1.0, 0.0], [2.0, -1.0, 0.75], [3.5, 0.25, -0.5]]},
     "params": {"scale": "whiten", "std_ddof": 0, "eps": 0.0, "degenerate": "zero", "baseline": "none"},
     "expect": {
         "advantages": [["-0.1739952913161422732377430997954834821244",
                         "0.2174941141451778415471788747443543526555",
                         "-0.5654846967774623880226650743353213169043"],
                        ["1.000472925067818071117022823824030022215",
                         "-1.348463507700102617592509023414996986464",
                         "0.02174941141451778415471788747443543526555"],
                        ["2.174941141451778415471788747443543526555",
                         "-0.3697399940468023306302040870654023995144",
                         "-0.9569741022387825028075870488751591516843"]],
         "keep": ["1", "1", "1"]}},
    {"id": "reinforce++-baseline",
     "inputs": {"rewards": [[0.5, 1.0, 0.0, 0.25], [2.0, -1.0, 0.75, 3.5]]},
     "params": {"scale": "whiten", "std_ddof": 1, "eps": 0.0, "degenerate": "zero", "baseline": "mean"},
     "expect": {
         "advantages": [["0.04882823143721369253658318569429869615832",
                         "0.4394540829349232328292486712486882654249",
                         "-0.3417976200604958477560822998600908731083",
                         "-0.1464846943116410776097495570828960884750"],
                        ["0.5371105458093506179024150426372856577416",
                         "-1.806644563176906623853577870689051757858",
                         "-0.4394540829349232328292486712486882654249",
                         "1.708988100302479238780411499300454365541"]],
         "keep": ["1", "1"]}},
    {"id": "rloo-whiten-ddof1-eps",
     "inputs": {"rewards": [[0.5, 1.0, 0.0, 0.25], [2.0, -1.0, 0.75, 3.5]]},
     "params": {"scale": "whiten", "std_ddof": 1, "eps": 0.0001, "degenerate": "zero", "baseline": "leave-one-out"},
     "expect": {
         "advantages": [["0.04882537056942068686197760945330132635312",
                         "0.4394283351247861817577984850797119371781",
                         "-0.3417775939859448080338432661731092844719",
                         "-0.1464761117082620605859328283599039790594"],
                        ["0.5370790762636275554817537039863145898844",
                         "-1.806538711068565413893171549772149075066",
                         "-0.4394283351247861817577984850797119371781",
                         "1.708887969929724040169216330865546422359"]],
         "keep": ["1", "1"]}},
]


# ------------------------------------------------------------------------------ clip

def band(rho, eps_low, eps_high):
    return min(max(rho, 1 - eps_low), 1 + (eps_low if eps_high is None else eps_high))


def surrogate(log_ratio, adv, eps_low, eps_high, dual_clip):
    """C and dC/dlogp for one token."""
    rho = mpm.exp(log_ratio)
    value = min(rho * adv, band(rho, eps_low, eps_high) * adv)
    slope = rho * adv if rho * adv <= band(rho, eps_low, eps_high) * adv else mpm.mpf(0)
    if dual_clip is not None and adv < 0 and dual_clip * adv > value:
        return dual_clip * adv, mpm.mpf(0)
    return value, slope


def clip_values(logp, old_logp, advantages, eps_low, eps_high, dual_clip):
    return {"objective": [surrogate(p - o, a, eps_low, eps_high, dual_clip)[0]
                          for p, o, a in zip(logp, old_logp, advantages)]}


def clip_gradient(cotangent, logp, old_logp, advantages, eps_low, eps_high, dual_clip):
    return {"grad:logp": [c * surrogate(p - o, a, eps_low, eps_high, dual_clip)[1]
                          for c, p, o, a in zip(cotangent, logp, old_logp, advantages)]}


# log ρ = logp − old_logp = (0.25, −0.5, 0.125, −0.125, 0.375, −0.375, 0.1875, 1.25), so
# ρ ≈ (1.284, 0.607, 1.133, 0.882, 1.455, 0.687, 1.206, 3.490) against A = advantages: every
# side of the band for both signs of A; 1.206 lies between 1 + 0.2 and 1 + 0.28, and ρ·A =
# −3.49 is below the dual-clip floor 3·A = −3.
# Literals: decimal_tables.literals(Table.expressions(row)) at 60 digits, i.e. clip_values and
# clip_gradient, e.g. min(mp.exp(lp - old)*A, min(max(mp.exp(lp - old), 1 - el), 1 + eh)*A).
CLIP_ROWS = [
    {"id": "symmetric",
     "inputs": {"logp": [-1.25, -2.5, -0.625, -3.125, -0.875, -2.875, -0.8125, -2.75],
                "old_logp": [-1.5, -2.0, -0.75, -3.0, -1.25, -2.5, -1.0, -4.0],
                "advantages": [1.5, 1.5, -0.75, 2.0, -1.25, -0.5, 0.5, -1.0]},
     "params": {"eps_low": 0.2, "eps_high": None, "dual_clip": None},
     "cotangent": [1.0, -0.5, 2.0, 0.25, -1.5, 1.0, 0.75, 1.0],
     "expect": {
         "objective": ["1.800000000000000016653345369377348106354",
                       "0.9097959895689501354056993024867706801629",
                       "-0.8498613398001197376217554208588454044241",
                       "1.764993805169190805729784286458101472444",
                       "-1.818739268272751670067242114984398135434",
                       "-0.3999999999999999944488848768742172978818",
                       "0.6000000000000000055511151231257827021182",
                       "-3.490342957461841376130546029672265482652"],
         "grad:logp": ["0",
                       "-0.4548979947844750677028496512433853400814",
                       "-1.699722679600239475243510841717690808848",
                       "0.4412484512922977014324460716145253681110",
                       "2.728108902409127505100863172476597203150",
                       "0",
                       "0",
                       "-3.490342957461841376130546029672265482652"]}},
    {"id": "clip-higher",
     "inputs": {"logp": [-1.25, -2.5, -0.625, -3.125, -0.875, -2.875, -0.8125, -2.75],
                "old_logp": [-1.5, -2.0, -0.75, -3.0, -1.25, -2.5, -1.0, -4.0],
                "advantages": [1.5, 1.5, -0.75, 2.0, -1.25, -0.5, 0.5, -1.0]},
     "params": {"eps_low": 0.2, "eps_high": 0.28, "dual_clip": None},
     "cotangent": [1.0, -0.5, 2.0, 0.25, -1.5, 1.0, 0.75, 1.0],
     "expect": {
         "objective": ["1.920000000000000039968028886505635455251",
                       "0.9097959895689501354056993024867706801629",
                       "-0.8498613398001197376217554208588454044241",
                       "1.764993805169190805729784286458101472444",
                       "-1.818739268272751670067242114984398135434",
                       "-0.3999999999999999944488848768742172978818",
                       "0.6031151247104903553277930052232167740202",
                       "-3.490342957461841376130546029672265482652"],
         "grad:logp": ["0",
                       "-0.4548979947844750677028496512433853400814",
                       "-1.699722679600239475243510841717690808848",
                       "0.4412484512922977014324460716145253681110",
                       "2.728108902409127505100863172476597203150",
                       "0",
                       "0.4523363435328677664958447539174125805151",
                       "-3.490342957461841376130546029672265482652"]}},
    {"id": "asymmetric",
     "inputs": {"logp": [-1.25, -2.5, -0.625, -3.125, -0.875, -2.875, -0.8125, -2.75],
                "old_logp": [-1.5, -2.0, -0.75, -3.0, -1.25, -2.5, -1.0, -4.0],
                "advantages": [1.5, 1.5, -0.75, 2.0, -1.25, -0.5, 0.5, -1.0]},
     "params": {"eps_low": 0.1, "eps_high": 0.3, "dual_clip": None},
     "cotangent": [1.0, -0.5, 2.0, 0.25, -1.5, 1.0, 0.75, 1.0],
     "expect": {
         "objective": ["1.926038125031612226110130852093654687504",
                       "0.9097959895689501354056993024867706801629",
                       "-0.8498613398001197376217554208588454044241",
                       "1.764993805169190805729784286458101472444",
                       "-1.818739268272751670067242114984398135434",
                       "-0.4499999999999999972244424384371086489409",
                       "0.6031151247104903553277930052232167740202",
                       "-3.490342957461841376130546029672265482652"],
         "grad:logp": ["1.926038125031612226110130852093654687504",
                       "-0.4548979947844750677028496512433853400814",
                       "-1.699722679600239475243510841717690808848",
                       "0.4412484512922977014324460716145253681110",
                       "2.728108902409127505100863172476597203150",
                       "0",
                       "0.4523363435328677664958447539174125805151",
                       "-3.490342957461841376130546029672265482652"]}},
    {"id": "dual-clip",
     "inputs": {"logp": [-1.25, -2.5, -0.625, -3.125, -0.875, -2.875, -0.8125, -2.75],
                "old_logp": [-1.5, -2.0, -0.75, -3.0, -1.25, -2.5, -1.0, -4.0],
                "advantages": [1.5, 1.5, -0.75, 2.0, -1.25, -0.5, 0.5, -1.0]},
     "params": {"eps_low": 0.2, "eps_high": None, "dual_clip": 3.0},
     "cotangent": [1.0, -0.5, 2.0, 0.25, -1.5, 1.0, 0.75, 1.0],
     "expect": {
         "objective": ["1.800000000000000016653345369377348106354",
                       "0.9097959895689501354056993024867706801629",
                       "-0.8498613398001197376217554208588454044241",
                       "1.764993805169190805729784286458101472444",
                       "-1.818739268272751670067242114984398135434",
                       "-0.3999999999999999944488848768742172978818",
                       "0.6000000000000000055511151231257827021182",
                       "-3.000000000000000000000000000000000000000"],
         "grad:logp": ["0",
                       "-0.4548979947844750677028496512433853400814",
                       "-1.699722679600239475243510841717690808848",
                       "0.4412484512922977014324460716145253681110",
                       "2.728108902409127505100863172476597203150",
                       "0",
                       "0",
                       "0"]}},
]


# ------------------------------------------------------------------------------ loss

def token_losses(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, beta):
    """{(i, t): (ℓ_it, dℓ_it/dlogp_it)} over the unmasked tokens."""
    out = {}
    for i, a in enumerate(advantages):
        for t in range(len(logp[i])):
            if mask[i][t] == 1:
                c, dc = surrogate(logp[i][t] - old_logp[i][t], a, eps_low, eps_high, None)
                log_r = ref_logp[i][t] - logp[i][t]
                k3 = mpm.exp(log_r) - log_r - 1
                out[i, t] = (-c + beta * k3, -dc + beta * (1 - mpm.exp(log_r)))
    return out


def token_weights(mask, aggregation):
    lengths = [sum(row) for row in mask]
    if aggregation == "token-mean":
        return {(i, t): mpm.mpf(1) / sum(lengths) for i, row in enumerate(mask)
                for t, m in enumerate(row) if m == 1}
    return {(i, t): mpm.mpf(1) / (len(mask) * lengths[i]) for i, row in enumerate(mask)
            for t, m in enumerate(row) if m == 1}


def loss_values(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, beta, aggregation):
    per_token = token_losses(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, beta)
    if aggregation == "token-mean":
        return {"loss": sum(v for v, _ in per_token.values()) / len(per_token)}
    rows = [[value for (i, _), (value, _) in per_token.items() if i == b] for b in range(len(mask))]
    return {"loss": sum(sum(r) / len(r) for r in rows) / len(rows)}


def loss_gradient(cotangent, logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, beta,
                  aggregation):
    per_token = token_losses(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, beta)
    weights = token_weights(mask, aggregation)
    grad = [[mpm.mpf(0)] * len(row) for row in logp]
    for (i, t), (_, d) in per_token.items():
        grad[i][t] = cotangent * weights[i, t] * d
    return {"grad:logp": grad}


# Ratios per token (log ρ = logp − old_logp) cover both sides of the band for A > 0 and A < 0;
# in the [3,4] rows log ρ[0][1] = 0.1875 (ρ ≈ 1.206) is clipped at ε_high = 0.2, not at 0.28.
# The fully masked row of "token-mean-empty-row" contributes nothing to Σ m·ℓ / Σ m.
# Literals: decimal_tables.literals(Table.expressions(row)) at 60 digits, i.e. loss_values and
# loss_gradient, e.g. seq-mean-token-mean: mp.fsum(mp.fsum(l[i])/len(l[i]) for i in rows)/B with
# l = -min(rho*A, clip(rho)*A) + beta*(mp.exp(ref - lp) - (ref - lp) - 1) on the unmasked tokens.
LOSS_ROWS = [
    {"id": "deepseekmath",
     "inputs": {"logp": [[-1.25, -0.5, -2.0], [-0.75, -3.0, -1.5]],
                "old_logp": [[-1.5, -0.375, -2.125], [-0.5, -2.5, -1.5]],
                "ref_logp": [[-1.0, -0.625, -2.5], [-1.0, -2.75, -1.25]],
                "advantages": [1.25, -0.75],
                "mask": [[1, 1, 1], [1, 1, 0]]},
     "params": {"eps_low": 0.2,
                "eps_high": None,
                "beta": 0.04,
                "aggregation": "seq-mean-token-mean"},
     "cotangent": 1.0,
     "expect": {
         "loss": "-0.3683108339032215991187718809858494955351",
         "grad:logp": [["-0.001893502777918276599905915101935171522300",
                        "-0.1830701673890213449329783136006598783855",
                        "-0.2334494654536730387754636625601767913516"],
                       ["0.002211992169285951363594634267063234111036",
                        "-0.002840254166877414899858872652902757283450",
                        "0"]]}},
    {"id": "token-mean",
     "inputs": {"logp": [[-1.25, -0.5, -2.0], [-0.75, -3.0, -1.5]],
                "old_logp": [[-1.5, -0.375, -2.125], [-0.5, -2.5, -1.5]],
                "ref_logp": [[-1.0, -0.625, -2.5], [-1.0, -2.75, -1.25]],
                "advantages": [1.25, -0.75],
                "mask": [[1, 1, 1], [1, 1, 0]]},
     "params": {"eps_low": 0.2, "eps_high": None, "beta": 0.04, "aggregation": "token-mean"},
     "cotangent": 1.0,
     "expect": {
         "loss": "-0.5622243054829025026916974155996203932756",
         "grad:logp": [["-0.002272203333501931919887098122322205826760",
                        "-0.2196842008668256139195739763207918540627",
                        "-0.2801393585444076465305563950722121496219"],
                       ["0.001769593735428761090875707413650587288829",
                        "-0.002272203333501931919887098122322205826760",
                        "0"]]}},
    {"id": "beta0",
     "inputs": {"logp": [[-1.25, -0.5, -2.0], [-0.75, -3.0, -1.5]],
                "old_logp": [[-1.5, -0.375, -2.125], [-0.5, -2.5, -1.5]],
                "ref_logp": [[-1.0, -0.625, -2.5], [-1.0, -2.75, -1.25]],
                "advantages": [1.25, -0.75],
                "mask": [[1, 1, 1], [1, 1, 0]]},
     "params": {"eps_low": 0.2,
                "eps_high": None,
                "beta": 0.0,
                "aggregation": "seq-mean-token-mean"},
     "cotangent": 1.0,
     "expect": {
         "loss": "-0.3699261157607128647458633459469224459686",
         "grad:logp": [["0",
                        "-0.1838535213717907089301858631727189033796",
                        "-0.2360725943889221493393765057941237234511"],
                       ["0", "0", "0"]]}},
    {"id": "deepseekmath-3x4",
     "inputs": {"logp": [[-0.8125, -1.0, -2.25, -0.4],
                         [-1.7, -2.0, -0.3, -5.0],
                         [-3.0, -1.1, -0.2, -0.9]],
                "old_logp": [[-1.0, -1.1875, -2.0, -0.6],
                             [-1.5, -2.4, -0.1, -5.0],
                             [-2.25, -1.0, -0.2, -1.0]],
                "ref_logp": [[-0.5, -1.25, -2.5, -0.45],
                             [-2.0, -1.9, -0.35, -4.5],
                             [-2.5, -1.2, -0.1, -0.8]],
                "advantages": [0.5, -1.0, 2.0],
                "mask": [[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]]},
     "params": {"eps_low": 0.2,
                "eps_high": None,
                "beta": 0.04,
                "aggregation": "seq-mean-token-mean"},
     "cotangent": 1.0,
     "expect": {
         "loss": "-0.1096017183616677831465542567456130612948",
         "grad:logp": [["-0.001222793137245987901583684779731369264204",
                        "0.0007373307230953171211982114223544113703455",
                        "-0.03171270190487988572235054970174228226702",
                        "0.0001625685849976199378768271315672633520665"],
                       ["0.1381830040417855303196632626938740707143",
                        "0.2479363101530407127196343630962138484743",
                        "0",
                        "0"],
                       ["-0.3235606521033448468967360339568769263535", "0", "0", "0"]]}},
    {"id": "clip-higher-beta0.1",
     "inputs": {"logp": [[-0.8125, -1.0, -2.25, -0.4],
                         [-1.7, -2.0, -0.3, -5.0],
                         [-3.0, -1.1, -0.2, -0.9]],
                "old_logp": [[-1.0, -1.1875, -2.0, -0.6],
                             [-1.5, -2.4, -0.1, -5.0],
                             [-2.25, -1.0, -0.2, -1.0]],
                "ref_logp": [[-0.5, -1.25, -2.5, -0.45],
                             [-2.0, -1.9, -0.35, -4.5],
                             [-2.5, -1.2, -0.1, -0.8]],
                "advantages": [0.5, -1.0, 2.0],
                "mask": [[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]]},
     "params": {"eps_low": 0.2,
                "eps_high": 0.28,
                "beta": 0.1,
                "aggregation": "seq-mean-token-mean"},
     "cotangent": 1.0,
     "expect": {
         "loss": "-0.1070125259427604295584961426011358677076",
         "grad:logp": [["-0.05331657656898916613733569379012707248287",
                        "-0.04841626691813590341036730946709531304248",
                        "-0.03060670582023690997659998682259060884483",
                        "-0.05048536012751302429453624748832928202562"],
                       ["0.1407748218349683521918065215975210554591",
                        "0.2468846009722842354072210765219563637736",
                        "0",
                        "0"],
                       ["-0.3365350775173474108540282123816027504885", "0", "0", "0"]]}},
    {"id": "clip-higher-token-mean",
     "inputs": {"logp": [[-0.8125, -1.0, -2.25, -0.4],
                         [-1.7, -2.0, -0.3, -5.0],
                         [-3.0, -1.1, -0.2, -0.9]],
                "old_logp": [[-1.0, -1.1875, -2.0, -0.6],
                             [-1.5, -2.4, -0.1, -5.0],
                             [-2.25, -1.0, -0.2, -1.0]],
                "ref_logp": [[-0.5, -1.25, -2.5, -0.45],
                             [-2.0, -1.9, -0.35, -4.5],
                             [-2.5, -1.2, -0.1, -0.8]],
                "advantages": [0.5, -1.0, 2.0],
                "mask": [[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]]},
     "params": {"eps_low": 0.2, "eps_high": 0.28, "beta": 0.04, "aggregation": "token-mean"},
     "cotangent": 1.0,
     "expect": {
         "loss": "-0.1183135001640789739466384518758222433044",
         "grad:logp": [["-0.08825552033677745859239960322571331502723",
                        "-0.08489530800476379283905920973642340536801",
                        "-0.05436463183693694695260094234584391245775",
                        "-0.08696436515144477865506068324845478351894"],
                       ["0.1184425748929590259882827965947492034694",
                        "0.2125168372740348966168294540824690129780",
                        "0",
                        "0"],
                       ["-0.1386688509014335058128868716958043970086", "0", "0", "0"]]}},
    {"id": "token-mean-empty-row",
     "inputs": {"logp": [[-0.8125, -1.0, -2.25, -0.4],
                         [-1.7, -2.0, -0.3, -5.0],
                         [-3.0, -1.1, -0.2, -0.9]],
                "old_logp": [[-1.0, -1.1875, -2.0, -0.6],
                             [-1.5, -2.4, -0.1, -5.0],
                             [-2.25, -1.0, -0.2, -1.0]],
                "ref_logp": [[-0.5, -1.25, -2.5, -0.45],
                             [-2.0, -1.9, -0.35, -4.5],
                             [-2.5, -1.2, -0.1, -0.8]],
                "advantages": [0.5, -1.0, 2.0],
                "mask": [[1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 0, 1]]},
     "params": {"eps_low": 0.1, "eps_high": 0.3, "beta": 0.5, "aggregation": "token-mean"},
     "cotangent": 1.0,
     "expect": {
         "loss": "-1.005018932632497702312880313496504799677",
         "grad:logp": [["-0.1123620136139126481067387702262601585867",
                        "-0.07035935946374182706433973410176815680980",
                        "-0.03982868329591498117788146671118866389954",
                        "-0.08375944161863455709514905887370931743019"],
                       ["0", "0", "0", "0"],
                       ["-0.1812991058331562125286312136848025159668",
                        "-0.2517276492985569760647841634322974156331",
                        "0",
                        "-0.3232753278841598572399942280771839466833"]]}},
]

# ------------------------------------------------------------------------------ loss: library conventions

def library_token_terms(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, beta, kl_ratio_weight,
                        log_ratio_clamp):
    """{(i, t): (policy, d policy, KL term, d KL term)} over the unmasked tokens, d = d/dlogp_it.
    log ρ is clamped to [−c, c] before exp (verl 0.9.1 compute_policy_loss_vanilla, OpenRLHF 0.11.2
    PolicyLoss): a clamped token's ratio is the constant e^±c."""
    out = {}
    for i, a in enumerate(advantages):
        for t in range(len(logp[i])):
            if mask[i][t] != 1:
                continue
            d = logp[i][t] - old_logp[i][t]
            inside = log_ratio_clamp is None or abs(d) <= log_ratio_clamp
            lr = d if inside else mpm.sign(d) * log_ratio_clamp
            c, dc = surrogate(lr, a, eps_low, eps_high, None)
            dc = dc if inside else mpm.mpf(0)
            log_r = ref_logp[i][t] - logp[i][t]
            k3, dk3 = mpm.exp(log_r) - log_r - 1, 1 - mpm.exp(log_r)
            w = mpm.exp(lr) if kl_ratio_weight else mpm.mpf(1)
            dw = w if kl_ratio_weight and inside else mpm.mpf(0)
            out[i, t] = (-c, -dc, beta * w * k3, beta * (dw * k3 + w * dk3))
    return out


def library_weights(mask, mode, mean_eps):
    """Token mean: 1/Σ m. Sequence mean of token means: 1/(rows with tokens · (|o_i| + ε))."""
    lengths = [sum(row) for row in mask]
    rows = sum(1 for n in lengths if n > 0)
    return {(i, t): (mpm.mpf(1) / sum(lengths) if mode == "token-mean" else 1 / (rows * (lengths[i] + mean_eps)))
            for i, row in enumerate(mask) for t, m in enumerate(row) if m == 1}


def library_loss_values(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, beta, aggregation,
                        kl_ratio_weight, log_ratio_clamp, kl_aggregation, mean_eps):
    terms = library_token_terms(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, beta,
                                kl_ratio_weight, log_ratio_clamp)
    wp = library_weights(mask, aggregation, mean_eps)
    wk = library_weights(mask, kl_aggregation or aggregation, mean_eps)
    return {"loss": sum(wp[k] * p + wk[k] * q for k, (p, _, q, _) in terms.items())}


def library_loss_gradient(cotangent, logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, beta,
                          aggregation, kl_ratio_weight, log_ratio_clamp, kl_aggregation, mean_eps):
    terms = library_token_terms(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, beta,
                                kl_ratio_weight, log_ratio_clamp)
    wp = library_weights(mask, aggregation, mean_eps)
    wk = library_weights(mask, kl_aggregation or aggregation, mean_eps)
    grad = [[mpm.mpf(0)] * len(row) for row in logp]
    for (i, t), (_, dp, _, dq) in terms.items():
        grad[i][t] = cotangent * (wp[i, t] * dp + wk[i, t] * dq)
    return {"grad:logp": grad}


# log ρ = (0.5, −0.75, 0.125 | −0.25, −0.625, 0.0625 | row 3 without tokens): the clamp c = 0.4375 binds at
# 0.5, −0.75 and −0.625, where the band [0.4, 1.8] (ε = 0.6 / 0.8) keeps the unclipped branch active, so the
# clamp alone sets their ratio to e^±c and their policy gradient to 0. The empty row stays out of every mean.
# Literals: decimal_tables.literals(Table.expressions(row)) at 60 digits, i.e. library_loss_values and
# library_loss_gradient, e.g. the seq-mean-token-mean weight 1/(rows·(|o_i| + mean_eps)).
LIBRARY_INPUTS = {"logp": [[-1.25, -0.5, -2.0], [-0.75, -3.0, -1.5], [-0.375, -1.0, -2.25]],
                  "old_logp": [[-1.75, 0.25, -2.125], [-0.5, -2.375, -1.5625], [-0.375, -1.0, -2.25]],
                  "ref_logp": [[-1.0, -0.625, -2.5], [-1.0, -2.75, -1.25], [-0.5, -1.5, -2.0]],
                  "advantages": [1.25, -0.75, 0.5],
                  "mask": [[1, 1, 1], [1, 1, 0], [0, 0, 0]]}
LIBRARY_LOSS_ROWS = [
    {"id": "openrlhf-seq-mean",
     "inputs": LIBRARY_INPUTS,
     "params": {"eps_low": 0.6, "eps_high": 0.8, "beta": 0.04, "aggregation": "seq-mean-token-mean", "kl_ratio_weight": False, "log_ratio_clamp": 20.0, "kl_aggregation": "token-mean", "mean_eps": 1e-08},
     "cotangent": 1.0,
     "expect": {
         "loss": "-0.4298921918080552490278472239910005358318",
         "grad:logp": [["-0.3457558002510833061214180742899815271643",
                         "-0.09746967338035583332484706469177991788022",
                         "-0.2329248388797145713226360641181384850544"],
                        ["0.1477947398311914434080317056102057080892",
                         "0.09808931401200115171946419343595527907423",
                         "0"],
                        ["0",
                         "0",
                         "0"]]}},
    {"id": "log-ratio-clamp",
     "inputs": LIBRARY_INPUTS,
     "params": {"eps_low": 0.6, "eps_high": 0.8, "beta": 0.04, "aggregation": "token-mean", "kl_ratio_weight": False, "log_ratio_clamp": 0.4375, "kl_aggregation": None, "mean_eps": 0.0},
     "cotangent": 1.0,
     "expect": {
         "loss": "-0.6165523896773653938669457684622249188213",
         "grad:logp": [["-0.002272203333501931919887098122322205826760",
                         "0.0009400247793232367966490594864708299928414",
                         "-0.2801393585444076465305563950722121496219"],
                        ["0.1185897111961394913276512474603986843833",
                         "-0.002272203333501931919887098122322205826760",
                         "0"],
                        ["0",
                         "0",
                         "0"]]}},
    {"id": "log-ratio-clamp-ratio-weighted-kl",
     "inputs": LIBRARY_INPUTS,
     "params": {"eps_low": 0.6, "eps_high": 0.8, "beta": 0.25, "aggregation": "seq-mean-token-mean", "kl_ratio_weight": True, "log_ratio_clamp": 0.4375, "kl_aggregation": None, "mean_eps": 0.0},
     "cotangent": 1.0,
     "expect": {
         "loss": "-0.4159692369338248586145091258628858251220",
         "grad:logp": [["-0.01832946545617328054662189021047637622041",
                         "0.003161070904040376149238582926329547103179",
                         "-0.2124653349500299344054388552147113511060"],
                        ["0.1581939090613791138623002104799713814822",
                         "-0.01146128698453176910414311433012811975403",
                         "0"],
                        ["0",
                         "0",
                         "0"]]}},
    {"id": "kl-seq-mean-under-token-mean",
     "inputs": LIBRARY_INPUTS,
     "params": {"eps_low": 0.6, "eps_high": 0.8, "beta": 0.5, "aggregation": "token-mean", "kl_ratio_weight": False, "log_ratio_clamp": None, "kl_aggregation": "seq-mean-token-mean", "mean_eps": 0.125},
     "cotangent": 1.0,
     "expect": {
         "loss": "-0.5972141814509123010575128533319017394733",
         "grad:logp": [["-0.4349023510100513554380363423985358095803",
                         "-0.1086913903920213090137030091941410371403",
                         "-0.2518095660437172530955557697522429044167"],
                        ["0.1428435547464278045608731556963574327067",
                         "0.04687445937340836169662036819596149512841",
                         "0"],
                        ["0",
                         "0",
                         "0"]]}},
    {"id": "mean-eps",
     "inputs": LIBRARY_INPUTS,
     "params": {"eps_low": 0.6, "eps_high": 0.8, "beta": 0.25, "aggregation": "seq-mean-token-mean", "kl_ratio_weight": False, "log_ratio_clamp": None, "kl_aggregation": None, "mean_eps": 0.125},
     "cotangent": 1.0,
     "expect": {
         "loss": "-0.4093361458757049227459288258130172911753",
         "grad:logp": [["-0.3411052708075352887326669802853301726642",
                         "-0.08977318665158675754220499591781561204292",
                         "-0.2108909170018706003099534269620059926508"],
                        ["0.1504471509495770433229612078798024290937",
                         "0.07775052169818995539979099741198251517437",
                         "0"],
                        ["0",
                         "0",
                         "0"]]}},
]


# ------------------------------------------------------------------------------ loss: CISPO, SAPO
#
# CISPO (MiniMax-M1, arXiv 2506.13585, §3.1 eq. 4–5): the objective per token is
# sg(ŵ)·A·log π with ŵ = ρ clipped to [1 − ε_low, 1 + ε_high] ('both'), to at most 1 + ε_high
# ('upper'), or to at most ε_high ('raw-upper', TRL's and Liger's cap); d/dlogp = ŵ·A (the weight
# is a stop-gradient, so this is NOT the derivative of the value: the CISPO table's hand gradient
# is checked against the derivative along logp and old_logp moved together, which keeps ρ fixed).
# SAPO (arXiv 2511.20347 §3): f·A with f = σ(τ(ρ − 1))·4/τ, τ = τ_pos if A > 0 else τ_neg;
# d/dlogp = A·4·ρ·σ(x)·(1 − σ(x)) at x = τ(ρ − 1). KL: k3, unweighted, β·k3 added per token.


def gated_token(log_ratio, logp, adv, policy_loss, eps_low, eps_high, cispo_clip, sapo_tau_pos, sapo_tau_neg,
                log_ratio_clamp=None):
    """C and dC/dlogp for one token of CISPO or SAPO. With ``log_ratio_clamp`` c (verl 0.9.1
    compute_policy_loss_cispo / _sapo: 20) ρ = exp(log ρ clamped to [−c, c]), a constant outside."""
    inside = log_ratio_clamp is None or abs(log_ratio) <= log_ratio_clamp
    rho = mpm.exp(log_ratio if inside else mpm.sign(log_ratio) * log_ratio_clamp)
    if policy_loss == "cispo":
        hi = eps_low if eps_high is None else eps_high
        cap = hi if cispo_clip == "raw-upper" else 1 + hi
        w = min(rho, cap)
        if cispo_clip == "both":
            w = max(w, 1 - eps_low)
        return w * adv * logp, w * adv
    tau = sapo_tau_pos if adv > 0 else sapo_tau_neg
    s = 1 / (1 + mpm.exp(-tau * (rho - 1)))
    return s * 4 / tau * adv, (4 * rho * s * (1 - s) * adv if inside else mpm.mpf(0))


def gated_losses(logp, old_logp, ref_logp, advantages, mask, beta, **conv):
    out = {}
    for i, a in enumerate(advantages):
        for t in range(len(logp[i])):
            if mask[i][t] == 1:
                c, dc = gated_token(logp[i][t] - old_logp[i][t], logp[i][t], a, **conv)
                log_r = ref_logp[i][t] - logp[i][t]
                out[i, t] = (-c + beta * (mpm.exp(log_r) - log_r - 1), -dc + beta * (1 - mpm.exp(log_r)))
    return out


def gated_values(logp, old_logp, ref_logp, advantages, mask, beta, aggregation, **conv):
    per_token = gated_losses(logp, old_logp, ref_logp, advantages, mask, beta, **conv)
    if aggregation == "token-mean":
        return {"loss": sum(v for v, _ in per_token.values()) / len(per_token)}
    rows = [[value for (i, _), (value, _) in per_token.items() if i == b] for b in range(len(mask))]
    return {"loss": sum(sum(r) / len(r) for r in rows) / len(rows)}


def gated_gradient(cotangent, logp, old_logp, ref_logp, advantages, mask, beta, aggregation, **conv):
    per_token = gated_losses(logp, old_logp, ref_logp, advantages, mask, beta, **conv)
    weights = token_weights(mask, aggregation)
    grad = [[mpm.mpf(0)] * len(row) for row in logp]
    for (i, t), (_, d) in per_token.items():
        grad[i][t] = cotangent * weights[i, t] * d
    return {"grad:logp": grad}


def _gated_row(rid, policy_loss, aggregation, beta, eps_low=0.2, eps_high=None, cispo_clip="upper",
               sapo_tau_pos=1.0, sapo_tau_neg=1.05, log_ratio_clamp=None):
    return {"id": rid,
            "inputs": {"logp": [[-1.25, -0.5, -2.0], [-0.75, -3.0, -1.5]],
                       "old_logp": [[-1.5, -0.375, -2.625], [-0.5, -2.5, -1.5]],
                       "ref_logp": [[-1.0, -0.625, -2.5], [-1.0, -2.75, -1.25]],
                       "advantages": [1.25, -0.75],
                       "mask": [[1, 1, 1], [1, 1, 0]]},
            "params": {"eps_low": eps_low, "eps_high": eps_high, "beta": beta, "aggregation": aggregation,
                       "policy_loss": policy_loss, "cispo_clip": cispo_clip, "sapo_tau_pos": sapo_tau_pos,
                       "sapo_tau_neg": sapo_tau_neg, "log_ratio_clamp": log_ratio_clamp},
            "cotangent": 1.0}


# log ρ = (0.25, −0.125, 0.625; −0.25, −0.5): with ε = 0.2 the 'upper' weight caps ρ = 1.284 and
# 1.868 at 1.2; 'both' also floors 0.779 and 0.607 at 0.8 (A < 0 row); the raw cap 1.5 only
# ρ = 1.868. The SAPO rows have both signs of A (τ_pos for row 0, τ_neg for row 1).
# Literals: decimal_tables.literals(Table.expressions(row)) at 60 digits, i.e. gated_values and
# gated_gradient, e.g. SAPO: -(1/(1 + mp.exp(-tau*(rho - 1))))*4/tau*A + beta*k3 per token.
CISPO_ROWS = [
    {**_gated_row('cispo-upper', 'cispo', 'token-mean', 0.0),
     "expect": {"loss": "0.7247582278568563460793821472019359561000",
                "grad:logp": [["-0.3000000000000000027755575615628913510591",
                               "-0.2206242256461488507162230358072626840555",
                               "-0.3000000000000000027755575615628913510591"],
                              ["0.1168201174607107302367755400467480970945",
                               "0.09097959895689501354056993024867706801629",
                               "0"]]}},
    {**_gated_row('cispo-both-kl', 'cispo', 'token-mean', 0.04, cispo_clip='both'),
     "expect": {"loss": "0.6369991462530273739616821690984855041039",
                "grad:logp": [["-0.3022722033335019346954446596852135568858",
                               "-0.2196842008668256139195739763207918540627",
                               "-0.2968522452777010700988621496821550325396"],
                              ["0.1217695937354287594255411704759157766534",
                               "0.1177277966664980664147783649399429835378",
                               "0"]]}},
    {**_gated_row('cispo-raw-upper', 'cispo', 'seq-mean-token-mean', 0.0, cispo_clip='raw-upper', eps_high=1.5),
     "expect": {"loss": "0.6006160234072220889017652306262535999610",
                "grad:logp": [["-0.2675052951432794758486292850130075954867",
                               "-0.1838535213717907089301858631727189033796",
                               "-0.3125000000000000000000000000000000000000"],
                              ["0.1460251468258884127959694250584351213681",
                               "0.1137244986961187669257124128108463350204",
                               "0"]]}},
    # log ρ clamped to ±0.4375 (verl's ±20 made visible): binds at 0.625 (ρ 1.868 → 1.549, under the
    # cap 2) and −0.5; CISPO's hand gradient is still ŵ·A, ŵ from the clamped ratio
    {**_gated_row('cispo-log-ratio-clamp', 'cispo', 'token-mean', 0.04, eps_high=1.0, log_ratio_clamp=0.4375),
     "expect": {"loss": "0.9095153132969286569839937892573151866049",
                "grad:logp": [["-0.3232785575054373029382422401379313204108",
                               "-0.2196842008668256139195739763207918540627",
                               "-0.3840598199362343418229425842681367658701"],
                              ["0.1185897111961394913276512474603986843833",
                               "0.09457507563068187368236625388683258612738",
                               "0"]]}},
]

SAPO_ROWS = [
    {**_gated_row('sapo', 'sapo', 'seq-mean-token-mean', 0.0),
     "expect": {"loss": "-0.8543902573372697459246796699751386071587",
                "grad:logp": [["-0.2621820679160675781344975427679608989297",
                               "-0.1832203634971920071663341623578142607503",
                               "-0.3241851621205065866943333671838456853811"],
                              ["0.1440734109340455835682261389862446566103",
                               "0.1090064626706229017580845687161391839884",
                               "0"]]}},
    {**_gated_row('sapo-kl-taus', 'sapo', 'token-mean', 0.04, sapo_tau_pos=2.0, sapo_tau_neg=3.0),
     "expect": {"loss": "-0.8483666051589513103086183985873223245049",
                "grad:logp": [["-0.2987144230079135390384821566485770000303",
                               "-0.2166658680373656526189937474831613886272",
                               "-0.2347384213103973416975409264963596068675"],
                              ["0.1066171479483678503129129781040262360215",
                               "0.06314714502090134759694029609326256454442",
                               "0"]]}},
    # the same clamp: the gate is constant at the two clamped tokens, whose gradient is the KL's alone
    {**_gated_row('sapo-log-ratio-clamp', 'sapo', 'seq-mean-token-mean', 0.04, log_ratio_clamp=0.4375),
     "expect": {"loss": "-0.7869524458398176927205577049884893662243",
                "grad:logp": [["-0.2640755706939858547344034578698960704520",
                               "-0.1824370095144226431691266127857552357563",
                               "0.002623128935249110563912843233946932099546"],
                              ["0.1462854031033315349318207732533078907213",
                               "-0.002840254166877414899858872652902757283450",
                               "0"]]}},
]


TABLES = [
    Table("grpo.advantages", ADVANTAGES_ROWS, advantages_values, grpo.advantages),
    Table("grpo.clip", CLIP_ROWS, clip_values, grpo.clip, clip_gradient, grpo.clip_vjp,
          output="objective"),
    Table("grpo.loss", LOSS_ROWS, loss_values, grpo.loss, loss_gradient, grpo.loss_vjp,
          output="loss"),
    Table("grpo.loss", LIBRARY_LOSS_ROWS, library_loss_values, grpo.loss, library_loss_gradient, grpo.loss_vjp,
          output="loss"),
    Table("grpo.loss", SAPO_ROWS, gated_values, grpo.loss, gated_gradient, grpo.loss_vjp, output="loss"),
]
# CISPO's gradient is not the derivative of its value (a stop-gradient weight): its rows are
# checked below along a direction that keeps ρ fixed, not by check_hand_gradient.
CISPO_TABLE = Table("grpo.loss", CISPO_ROWS, gated_values, grpo.loss, gated_gradient, grpo.loss_vjp,
                    output="loss")
ROWS = over_rows(TABLES + [CISPO_TABLE])
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


def test_article_example():
    """[reading-math-3]'s worked GRPO numbers, exactly: rewards (0,1,1,0) → (−1,1,1,−1)."""
    row = next(r for r in ADVANTAGES_ROWS if r["id"] == "article")
    assert row["expect"]["advantages"] == [["-1.000000000000000000000000000000000000000",
                                            "1.000000000000000000000000000000000000000",
                                            "1.000000000000000000000000000000000000000",
                                            "-1.000000000000000000000000000000000000000"]]


@pytest.mark.parametrize("row", CISPO_ROWS, ids=[r["id"] for r in CISPO_ROWS])
def test_cispo_hand_gradient_is_the_derivative_at_a_fixed_ratio(row):
    """d/dh of the written CISPO value with logp_t and old_logp_t both moved by h (ρ_t fixed,
    so ŵ_t is too) is the hand gradient of token t: the stop-gradient's definition."""
    table = CISPO_TABLE
    with mpm.workdps(RECOMPUTE_DPS):
        kwargs, ct = table._kwargs(row), table._cotangent(row)
        hand = table.hand_gradient(ct, **kwargs)["grad:logp"]
        for i, t in zip(*np.nonzero(np.asarray(row["inputs"]["mask"]))):
            def moved(h, i=i, t=t):
                lp, old = kwargs["logp"].copy(), kwargs["old_logp"].copy()
                lp[i][t] += h
                old[i][t] += h
                return ct * table.values(**{**kwargs, "logp": lp, "old_logp": old})["loss"]
            numeric = mpm.diff(moved, 0)
            assert abs(numeric - hand[i][t]) <= mpm.mpf(10) ** -35 * (1 + abs(hand[i][t]))
