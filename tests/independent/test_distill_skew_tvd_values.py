"""Independent 40-digit values for distill.skew_kl and distill.tvd, with their gradients wrt the
student logits (the conventions of test_distill_values.py: z student, t teacher, q = softmax(z/T),
p = softmax(t/T), 0·log 0 = 0).

skew_kl  DistiLLM (Ko et al. 2024) §3: forward KL(p ‖ m), m = α·p + (1−α)·q; reverse KL(q ‖ m'),
         m' = α·q + (1−α)·p. With s = log q and ∂q_i/∂s_i-chain ∂/∂z_j = (g_j − q_j Σ g)/T:
         forward g_i = −(1−α)·q_i·p_i/m_i; reverse g_i = q_i·(log(q_i/m'_i) + 1 − α·q_i/m'_i).
tvd      ½·Σ_v |q_v − p_v|; subgradient ∂/∂z_j = q_j·(σ_j − Σ_i q_i σ_i)/(2T), σ = sign(q − p),
         sign(0) = 0 (no row here has a tie at a positive probability: the numerical derivative
         of the written value checks the hand gradient).

Every hand gradient is also checked against mpmath.diff of the written values.
"""
from __future__ import annotations

import mpmath as mpm
from decimal_tables import Table, over_rows

from lossproof.refimpl.exact import distill


def probabilities(logits, T):
    weights = [mpm.exp(x / T) if x != float("-inf") else mpm.mpf(0) for x in logits]
    total = sum(weights)
    return [w / total for w in weights]


def kl_divergence(a, b):
    """Σ a_i log(a_i / b_i), terms with a_i = 0 left out."""
    return sum((ai * mpm.log(ai / bi) for ai, bi in zip(a, b) if ai > 0), mpm.mpf(0))


def skew_values(student_logits, teacher_logits, alpha, direction, temperature):
    out = []
    for z, t in zip(student_logits, teacher_logits):
        q, p = probabilities(z, temperature), probabilities(t, temperature)
        first, other = (p, q) if direction == "forward" else (q, p)
        out.append(kl_divergence(first, [alpha * f + (1 - alpha) * o for f, o in zip(first, other)]))
    return {"kl": out}


def skew_gradient(cotangent, student_logits, teacher_logits, alpha, direction, temperature):
    grad = []
    for c, z, t in zip(cotangent, student_logits, teacher_logits):
        q, p = probabilities(z, temperature), probabilities(t, temperature)
        if direction == "forward":
            g = [-(1 - alpha) * qi * pi / (alpha * pi + (1 - alpha) * qi) if qi > 0 else mpm.mpf(0)
                 for qi, pi in zip(q, p)]
        else:
            g = []
            for qi, pi in zip(q, p):
                m = alpha * qi + (1 - alpha) * pi
                g.append(qi * (mpm.log(qi / m) + 1 - alpha * qi / m) if qi > 0 else mpm.mpf(0))
        total = sum(g)
        grad.append([c * (gj - qj * total) / temperature for gj, qj in zip(g, q)])
    return {"grad:student_logits": grad}


def tvd_values(student_logits, teacher_logits, temperature):
    out = []
    for z, t in zip(student_logits, teacher_logits):
        q, p = probabilities(z, temperature), probabilities(t, temperature)
        out.append(sum(abs(a - b) for a, b in zip(q, p)) / 2)
    return {"tvd": out}


def tvd_gradient(cotangent, student_logits, teacher_logits, temperature):
    grad = []
    for c, z, t in zip(cotangent, student_logits, teacher_logits):
        q, p = probabilities(z, temperature), probabilities(t, temperature)
        sigma = [mpm.sign(a - b) for a, b in zip(q, p)]
        mean = sum(qi * si for qi, si in zip(q, sigma))
        grad.append([c * qj * (sj - mean) / (2 * temperature) for qj, sj in zip(q, sigma)])
    return {"grad:student_logits": grad}


# Literals: decimal_tables.literals(Table.expressions(row)) at 60 digits of the expressions above.
NINF = float("-inf")
SKEW_ROWS = [{'id': 'forward-a0.1-T1.0',
  'inputs': {'student_logits': [[2.0, 0.0, -1.5, 0.75], [-0.5, 3.25, 1.0, -2.0]],
             'teacher_logits': [[1.5, 0.5, -1.0, 0.25], [0.0, 2.5, 1.75, -1.25]]},
  'params': {'alpha': 0.1, 'direction': 'forward', 'temperature': 1.0},
  'cotangent': [1.0, -0.5],
  'expect': {'kl': ['0.06142524945836266075226880442229542521300',
                    '0.1538975121275039667527706017393986300255'],
             'grad:student_logits': [['0.08240435080662019217028304449811671096658',
                                      '-0.08667400743515452555638281048918815851030',
                                      '-0.01933958515971222700868165136954227403083',
                                      '0.02360924178824656039478141736061372157454'],
                                     ['0.01143443070439742909237587255526240620449',
                                      '-0.08524751149443752115180030714158010945054',
                                      '0.07031243098164615984586809805172886509833',
                                      '0.003500649808393932213556336534588838147716']]}},
 {'id': 'forward-a0.5-T2.0',
  'inputs': {'student_logits': [[2.0, 0.0, -1.5, 0.75], [-0.5, 3.25, 1.0, -2.0]],
             'teacher_logits': [[1.5, 0.5, -1.0, 0.25], [0.0, 2.5, 1.75, -1.25]]},
  'params': {'alpha': 0.5, 'direction': 'forward', 'temperature': 2.0},
  'cotangent': [1.0, -0.5],
  'expect': {'kl': ['0.006454610374014322967360756142644803617603',
                    '0.01549626196001531745505838367705743568828'],
             'grad:student_logits': [['0.007790625509295387715447863145617355735433',
                                      '-0.008123416567831508092369903634825530782251',
                                      '-0.003837230280625814743524889122054955040335',
                                      '0.004170021339161935120446929611263130087154'],
                                     ['0.002280697378986345762545416627384757813453',
                                      '-0.01011919431546059174167190329127014131122',
                                      '0.006408555026983412176478277817282707829736',
                                      '0.001429941909490833802648208846602675668031']]}},
 {'id': 'forward-a0.25-T0.5',
  'inputs': {'student_logits': [[2.0, 0.0, -1.5, 0.75], [-0.5, 3.25, 1.0, -2.0]],
             'teacher_logits': [[1.5, 0.5, -1.0, 0.25], [0.0, 2.5, 1.75, -1.25]]},
  'params': {'alpha': 0.25, 'direction': 'forward', 'temperature': 0.5},
  'cotangent': [1.0, -0.5],
  'expect': {'kl': ['0.04664552881900595054924925884454117712765',
                    '0.1057002877046203640231934876244333120440'],
             'grad:student_logits': [['0.04359549080761302590723665201578892087093',
                                      '-0.04493675720725635860312716559971333846482',
                                      '-0.002237269403307775110172984641506927412161',
                                      '0.003578535802951107806063498225431345006058'],
                                     ['0.0008973871640379344264923112190293105325053',
                                      '-0.02150088656313462849258640824062787465104',
                                      '0.02055255470937477692225285965714236918072',
                                      '0.00005094468972191714384123736445619493781685']]}},
 {'id': 'forward-neginf',
  'inputs': {'student_logits': [[0.5, NINF, 1.25, -0.75]], 'teacher_logits': [[NINF, 0.25, 1.0, -0.5]]},
  'params': {'alpha': 0.1, 'direction': 'forward', 'temperature': 1.0},
  'cotangent': [1.5],
  'expect': {'kl': ['0.6647953250759588099054672116535816477590'],
             'grad:student_logits': [['0.2845768494195143904033990049289171140175',
                                      '0',
                                      '-0.1979220705082738353826498475468752619422',
                                      '-0.08665477891124055502074915738204185207525']]}},
 {'id': 'reverse-a0.1-T1.0',
  'inputs': {'student_logits': [[2.0, 0.0, -1.5, 0.75], [-0.5, 3.25, 1.0, -2.0]],
             'teacher_logits': [[1.5, 0.5, -1.0, 0.25], [0.0, 2.5, 1.75, -1.25]]},
  'params': {'alpha': 0.1, 'direction': 'reverse', 'temperature': 1.0},
  'cotangent': [1.0, -0.5],
  'expect': {'kl': ['0.05426875495817147355092119066774778059018',
                    '0.1323986649874977061279650341155494151286'],
             'grad:student_logits': [['0.06691289543753395695530721363933809369050',
                                      '-0.07037988576926701723243016654311774323513',
                                      '-0.01570387518292474704287102422653410196543',
                                      '0.01917086551465780731999397713031375151006'],
                                     ['0.009438501242359269117228260259364208400012',
                                      '-0.06513753999588171321290581086623851611907',
                                      '0.05305746320548551134983715592304573879105',
                                      '0.002641575548036932745840394683828568928009']]}},
 {'id': 'reverse-a0.5-T2.0',
  'inputs': {'student_logits': [[2.0, 0.0, -1.5, 0.75], [-0.5, 3.25, 1.0, -2.0]],
             'teacher_logits': [[1.5, 0.5, -1.0, 0.25], [0.0, 2.5, 1.75, -1.25]]},
  'params': {'alpha': 0.5, 'direction': 'reverse', 'temperature': 2.0},
  'cotangent': [1.0, -0.5],
  'expect': {'kl': ['0.006866787440577298278192654826794140603924',
                    '0.01598695751351537121887279000912414088519'],
             'grad:student_logits': [['0.008636541408744898012688103413403013784589',
                                      '-0.009005467338258252408172147400843343761367',
                                      '-0.004253881562394852117894656394424663531962',
                                      '0.004622807491908206513378700381864993508740'],
                                     ['0.002225574239812733361090292408873320689292',
                                      '-0.01079146420912827442509491973818033515248',
                                      '0.007003253004795539845511080287379710739311',
                                      '0.001562636964520001218493547041927303723879']]}},
 {'id': 'reverse-a0.25-T0.5',
  'inputs': {'student_logits': [[2.0, 0.0, -1.5, 0.75], [-0.5, 3.25, 1.0, -2.0]],
             'teacher_logits': [[1.5, 0.5, -1.0, 0.25], [0.0, 2.5, 1.75, -1.25]]},
  'params': {'alpha': 0.25, 'direction': 'reverse', 'temperature': 0.5},
  'cotangent': [1.0, -0.5],
  'expect': {'kl': ['0.04797740151347599693021531837722295679057',
                    '0.1123979451025777056736397454152298408951'],
             'grad:student_logits': [['0.04791126149291655583525709358273583241186',
                                      '-0.04938530763884852186269194662925382198077',
                                      '-0.002458749687783344792951986683817433086309',
                                      '0.003932795833715310820386839730335422655223'],
                                     ['0.001043398105339342857835105640936345386218',
                                      '-0.02727937137834632883686024066062911369734',
                                      '0.02617110159795529787328084360261750817424',
                                      '0.00006487167505168810574429141707526013688197']]}},
 {'id': 'reverse-neginf',
  'inputs': {'student_logits': [[0.5, NINF, 1.25, -0.75]], 'teacher_logits': [[NINF, 0.25, 1.0, -0.5]]},
  'params': {'alpha': 0.1, 'direction': 'reverse', 'temperature': 1.0},
  'cotangent': [1.5],
  'expect': {'kl': ['0.6716936453245847994288332854698191523104'],
             'grad:student_logits': [['0.4387534923715804978343358019899238331025',
                                      '0',
                                      '-0.3398168742931256626509278918903326632203',
                                      '-0.09893661807845483518340791009959116988227']]}}]

TVD_ROWS = [{'id': 'T1.0',
  'inputs': {'student_logits': [[2.0, 0.0, -1.5, 0.75], [-0.5, 3.25, 1.0, -2.0]],
             'teacher_logits': [[1.5, 0.5, -1.0, 0.25], [0.0, 2.5, 1.75, -1.25]]},
  'params': {'temperature': 1.0},
  'cotangent': [1.0, -0.5],
  'expect': {'tvd': ['0.1451257921215046839929979669717242264130',
                     '0.2479804302919552072365121187875606206093'],
             'grad:student_logits': [['0.07851055875544399204994889877685048561318',
                                      '-0.08257846444633119417373485968093588687243',
                                      '-0.01842574599672129812031844959386808823196',
                                      '0.02249365168760850024410441049795348949122'],
                                     ['0.009141418817705392657759908719322982017578',
                                      '-0.05215014186517683987094768355926361512940',
                                      '0.04096899680269297288527949872130984330533',
                                      '0.002039726244778474327908276118630789806493']]}},
 {'id': 'T2.0',
  'inputs': {'student_logits': [[2.0, 0.0, -1.5, 0.75], [-0.5, 3.25, 1.0, -2.0]],
             'teacher_logits': [[1.5, 0.5, -1.0, 0.25], [0.0, 2.5, 1.75, -1.25]]},
  'params': {'temperature': 2.0},
  'cotangent': [1.0, -0.5],
  'expect': {'tvd': ['0.1069649448794277797433273619312632377137',
                     '0.1748624046385263006740796136347957580503'],
             'grad:student_logits': [['0.06278473967776901254582778202236980531105',
                                      '-0.06546670660742691801369547726908995392550',
                                      '-0.03092428251945766327811089610019610790895',
                                      '0.03360624944911556874597859134691625652341'],
                                     ['0.01594864891741008140493165144346529899212',
                                      '-0.05724554725051065593702298749393090692376',
                                      '0.03376329002310685820202230141607496021349',
                                      '0.007533608309993716330069034634390647718150']]}},
 {'id': 'T0.5',
  'inputs': {'student_logits': [[2.0, 0.0, -1.5, 0.75], [-0.5, 3.25, 1.0, -2.0]],
             'teacher_logits': [[1.5, 0.5, -1.0, 0.25], [0.0, 2.5, 1.75, -1.25]]},
  'params': {'temperature': 0.5},
  'cotangent': [1.0, -0.5],
  'expect': {'tvd': ['0.09859916482786282205782731522934485935636',
                     '0.1757156256223860539157928345676737879874'],
             'grad:student_logits': [['0.03170531952135107398045034138684892934786',
                                      '-0.03268077085762821691377306106966787696733',
                                      '-0.001627079773003231581496271249391098756364',
                                      '0.002602531109280374514818990932210046375827'],
                                     ['0.0005403769300947493370464715688128154826140',
                                      '-0.01142104149511468207233013820113208082303',
                                      '0.01085376078185688901539745206045435696642',
                                      '0.00002690378316304371988621457186490837398968']]}},
 {'id': 'neginf',
  'inputs': {'student_logits': [[0.5, NINF, 1.25, -0.75]], 'teacher_logits': [[NINF, 0.25, 1.0, -0.5]]},
  'params': {'temperature': 1.0},
  'cotangent': [1.5],
  'expect': {'tvd': ['0.3260229939999495509522048721063110387477'],
             'grad:student_logits': [['0.03709970175890966318222807761420408504741',
                                      '0',
                                      '0.07854006923993703257760350282134924295192',
                                      '-0.1156397709988466957598315804355533279993']]}}]

TABLES = [
    Table("distill.skew_kl", SKEW_ROWS, skew_values, distill.skew_kl, skew_gradient, distill.skew_kl_vjp,
          output="kl"),
    Table("distill.tvd", TVD_ROWS, tvd_values, distill.tvd, tvd_gradient, distill.tvd_vjp, output="tvd"),
]
ROWS = over_rows(TABLES)


@ROWS
def test_literals_are_the_written_expressions(table, row):
    table.check_literals(row)


@ROWS
def test_hand_gradient_is_the_derivative_of_the_written_objective(table, row):
    table.check_hand_gradient(row)


@ROWS
def test_reference_matches_literals(table, row):
    table.check_reference(row)
