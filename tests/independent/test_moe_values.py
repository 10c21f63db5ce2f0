"""Independent 40-digit values for moe.router_z_loss, moe.load_balancing and their gradients.

Written from ST-MoE (Zoph et al. 2022, arXiv 2202.08906) §3.1 eq. 5,
L_z = (1/B)·Σ_i (log Σ_j e^{x_ij})², the mean over the tokens a mask selects, with the
log-sum-exp written literally (the logits here are small). Gradient by hand:
∂L_z/∂x_ij = 2·m_i·lse_i·e^{x_ij}/Σ_k e^{x_ik} / Σ_i m_i.

The load-balancing loss written from Switch Transformer (arXiv 2101.03961) eq. 4–6 and
DeepSeek-V3 (arXiv 2412.19437) eq. 17–20: per statistics group (a layer; all layers pooled for
'concatenated'; a sequence of a layer for 'sequence') the routed shares f_e (a sorted list's
first k, distinct logits only) and the mean affinities P_e, then E·Σ f·P (Switch; f the fraction of
tokens whose top k include e) or Σ f·P with f = E/(k·T)·count (V3, P the mean of σ(x)/Σσ(x)).
Gradient by hand: ∂P_e/∂x_{t,j} = (1/n)·∂a_e/∂x_j with ∂softmax_e/∂x_j = a_e(δ_ej − a_j) and
∂(s_e/S)/∂x_j = (δ_ej·s_e(1 − s_e)·S − s_e·s_j(1 − s_j))/S²; f is constant.
"""
from __future__ import annotations

import mpmath as mpm
from decimal_tables import Table, over_rows

from lossproof.refimpl.exact import moe


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



def _top(row, k):
    order = sorted(range(len(row)), key=lambda e: row[e], reverse=True)
    assert len(set(row)) == len(row)          # the tables hold no ties
    return order[:k]


def _affinity(row, sequence):
    if sequence:
        s = [1 / (1 + mpm.exp(-x)) for x in row]
        return [v / sum(s) for v in s]
    ex = [mpm.exp(x) for x in row]
    return [v / sum(ex) for v in ex]


def _d_affinity(row, sequence, e, j):
    if sequence:
        s = [1 / (1 + mpm.exp(-x)) for x in row]
        total = sum(s)
        return ((s[e] * (1 - s[e]) * total if e == j else 0) - s[e] * s[j] * (1 - s[j])) / total ** 2
    a = _affinity(row, False)
    return a[e] * ((1 if e == j else 0) - a[j])


def _groups(layers, mask, form, seq_len):
    """[(tokens as (layer, index), weight of the group's Σ f·P)]: the statistics each form pools."""
    n = len(mask)
    live = [i for i in range(n) if mask[i]]
    if form == "concatenated":
        return [([(l, i) for l in range(len(layers)) for i in live], 1)]
    if form in ("switch", "per-layer-sum"):
        return [([(l, i) for i in live], 1) for l in range(len(layers))]
    t = seq_len or n
    seqs = [[i for i in range(b, b + t) if mask[i]] for b in range(0, n, t)]
    seqs = [q for q in seqs if q]
    return [([(l, i) for i in q], mpm.mpf(1) / len(seqs)) for l in range(len(layers)) for q in seqs]


def _f(layers, toks, k, e_count, sequence):
    counts = [sum(1 for l, i in toks if e in _top(layers[l][i], k)) for e in range(e_count)]
    scale = mpm.mpf(e_count) / (k * len(toks)) if sequence else mpm.mpf(e_count) / len(toks)
    return [c * scale for c in counts]


def balance_values(router_logits, top_k=1, form="switch", seq_len=None, mask=None):
    layers = router_logits.tolist() if router_logits.ndim == 3 else [router_logits.tolist()]
    m = mask.tolist() if mask is not None else [1] * len(layers[0])
    e_count, seq = len(layers[0][0]), form == "sequence"
    total = 0
    for toks, weight in _groups(layers, m, form, seq_len):
        f = _f(layers, toks, top_k, e_count, seq)
        p = [sum(_affinity(layers[l][i], seq)[e] for l, i in toks) / len(toks) for e in range(e_count)]
        total += weight * sum(fe * pe for fe, pe in zip(f, p))
    return {"loss": total}


def balance_gradient(cotangent, router_logits, top_k=1, form="switch", seq_len=None, mask=None):
    ct = cotangent.item() if hasattr(cotangent, "item") else cotangent
    layered = router_logits.ndim == 3
    layers = router_logits.tolist() if layered else [router_logits.tolist()]
    m = mask.tolist() if mask is not None else [1] * len(layers[0])
    e_count, seq = len(layers[0][0]), form == "sequence"
    grad = [[[mpm.mpf(0)] * e_count for _ in row] for row in layers]
    for toks, weight in _groups(layers, m, form, seq_len):
        f = _f(layers, toks, top_k, e_count, seq)
        for l, i in toks:
            for j in range(e_count):
                grad[l][i][j] += ct * weight * sum(f[e] * _d_affinity(layers[l][i], seq, e, j)
                                                   for e in range(e_count)) / len(toks)
    return {"grad:router_logits": grad if layered else grad[0]}


BALANCE_ROWS = [
    {"id": "switch-k1",
     "inputs": {"router_logits": [[2.0, 0.0, -0.5], [1.0, -1.0, 0.25], [0.0, 1.0, -2.0], [0.5, 0.75, 1.5]]},
     "params": {"top_k": 1, "form": "switch"},
     "cotangent": 1.0,
     "expect": {
         "loss": "1.106778584158939664827286205969997625031",
         "grad:router_logits": [["0.02750554541371242909117947295576447449330",
                                 "-0.01712108340256167673312094325851834315843",
                                 "-0.01038446201115075235805852969724613133486"],
                                ["0.04408398084876458137718529154010387952750",
                                 "-0.009817508654992129072200437852668655368991",
                                 "-0.03426647219377245230498485368743522415851"],
                                ["0.03602963388978270369744722818121551086525",
                                 "-0.03432089704229170708824329876499294832740",
                                 "-0.001708736847490996609203929416222562537850"],
                                ["0.02998962059013061975850646440937357980699",
                                 "-0.009621309088962124471626579783020702203097",
                                 "-0.02036831150116849528687988462635287760389"]]}},
    {"id": "concatenated-k2-masked-nondyadic",
     "inputs": {"router_logits": [[[0.1, -0.7, 1.3, 0.2], [5.0, -5.0, 5.5, 4.0], [-2.9, 0.4, 0.45, -0.3]],
                                  [[0.3, 0.9, -1.1, 0.0], [1.0, 2.0, 3.0, 4.0], [0.7, -0.2, 1.15, 1.6]]],
                "mask": [1, 0, 1]},
     "params": {"top_k": 2, "form": "concatenated"},
     "cotangent": -0.5,
     "expect": {
         "loss": "2.173549835830815477185405953314654180704",
         "grad:router_logits": [[["0.02968149508463071709678441614135184229506",
                                  "0.003775941112751168031411616657442341617567",
                                  "-0.04274475270585009216598538372279445906672",
                                  "0.009287316508468207037789350924000275154092"],
                                 ["0",
                                  "0",
                                  "0",
                                  "0"],
                                 ["0.002483715639483879861171364175841651551886",
                                  "0.01897931366565565145100033506680451742627",
                                  "-0.03088787754755159299455897471202338885494",
                                  "0.009424848242412061682387275469377219876784"]],
                                [["0.02632317477811355770083875105429919751276",
                                  "-0.01182416179064273716799584400128932618841",
                                  "-0.009691667551531409877452437720696837458792",
                                  "-0.004807345435939410655390469332313033865555"],
                                 ["0",
                                  "0",
                                  "0",
                                  "0"],
                                 ["0.02540662036904092372921325056826849692074",
                                  "0.0009779466551207898078923818584100644366686",
                                  "-0.03230079952664432204457919089031175928366",
                                  "0.005916232502482608507473558463633197926246"]]]}},
    {"id": "per-layer-sum-k2",
     "inputs": {"router_logits": [[[0.5, -1.5, 2.0], [0.0, 0.25, -0.75]], [[1.0, 0.0, -1.0], [-0.5, 1.25, 0.75]]]},
     "params": {"top_k": 2, "form": "per-layer-sum"},
     "cotangent": 0.75,
     "expect": {
         "loss": "4.010440059404032836015943290719242702574",
         "grad:router_logits": [[["0.08231369143139652503360712905543150747348",
                                  "-0.002412797917233036349093270229178563974829",
                                  "-0.07990089351416348868451385882625294349865"],
                                 ["0.1300355256635853386080669505727830919403",
                                  "-0.09506358656302621966851002420605436724581",
                                  "-0.03497193910055911893955692636672872469446"]],
                                [["-0.09157691361926498851524135524091337528491",
                                  "0.1039705011618630300347418467671830002771",
                                  "-0.01239358754259804151950049152626962499219"],
                                 ["-0.03084029715442219478953418876590111208554",
                                  "0.1384835111333901690557402511096337651213",
                                  "-0.1076432139789679742662060623437326530358"]]]}},
    {"id": "sequence-seq-len-masked-nondyadic",
     "inputs": {"router_logits": [[0.3, -1.2, 2.2], [1.7, 0.4, -0.6], [-0.9, 0.8, 0.1],
                                  [2.5, -2.5, 0.35], [0.05, 1.1, -0.4], [3.0, 3.5, -3.0]],
                "mask": [1, 1, 0, 1, 1, 1]},
     "params": {"top_k": 1, "form": "sequence", "seq_len": 3},
     "cotangent": 1.5,
     "expect": {
         "loss": "1.133677080643721076713902743117255267662",
         "grad:router_logits": [["0.01093424080131004636129094291182768478732",
                                 "-0.05069242130208627563262864381420397762694",
                                 "0.004016629317980179451164068354340086053812"],
                                ["0.01359666256101903822119704496353720176836",
                                 "-0.05012908664152441157542473837232230475769",
                                 "0.02381749799702955586800522655831152222599"],
                                ["0",
                                 "0",
                                 "0"],
                                ["0.003555927477679940021834026426598568138610",
                                 "0.01460202287530960372334985148398779800354",
                                 "-0.02590941391388543779766006943485667720549"],
                                ["-0.007870927890371542816207635597501321059210",
                                 "0.02224655432676416287052697587110166780130",
                                 "-0.04366438053295826525460322601400618426913"],
                                ["-0.002684994468587418894246383242648819709110",
                                 "0.001918474769828435493085204087506480478898",
                                 "-0.008416072272472158425662571449910207690865"]]}},
]

TABLES = [Table("moe.router_z_loss", MOE_ROWS, z_loss_values, moe.router_z_loss, z_loss_gradient,
                moe.router_z_loss_vjp, output="loss"),
          Table("moe.load_balancing", BALANCE_ROWS, balance_values, moe.load_balancing, balance_gradient,
                moe.load_balancing_vjp, output="loss")]
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
