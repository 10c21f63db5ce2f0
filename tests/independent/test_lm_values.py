"""Independent 40-digit values for lm.cross_entropy, lm.token_logprobs and lm.entropy, with their
gradients wrt the logits.

Written from the definitions, per row z of logits, q = softmax(z') with softmax(x)_i =
e^{x_i}/Σ_j e^{x_j}, lse = log Σ_j e^{z'_j}, 0·log 0 = 0 (a −inf logit is a token of probability 0):

cross_entropy   torch.nn.functional.cross_entropy's documented loss with label smoothing ε
                (Szegedy et al. 2016 §7: the target (1−ε)·e_y + ε/V): ℓ = −Σ_v t_v log q_v, plus
                the z-loss ζ·lse² (PaLM §5), on capped logits z' = s·tanh(z/s) (Gemma 2 §2); a token
                whose label is ignore_index has ℓ = 0. 'mean': Σℓ over the counted tokens ÷ their
                number (or ÷ normalizer), 'sum': Σℓ, 'none': ℓ per token.
                ∂/∂z_j = w·(q_j − t_j + 2ζ·lse·q_j)·(1 − tanh²(z_j/s)) (the last factor only when
                capped), w = cotangent ÷ the mean's denominator or the token's cotangent.
token_logprobs  log q_y of softmax(z/T); ∂/∂z_j = c·(δ_{jy} − q_j)/T.
entropy         −Σ_v q_v log q_v of softmax(z/T) (0·log 0 = 0); ∂/∂z_j = −c·q_j·(log q_j + H)/T.

The expressions are the plain textbook ones (no shifting, no log1p): at 60 digits they are exact
for these moderate logits. Every hand gradient is also checked against mpmath.diff of the written
values.
"""
from __future__ import annotations

import mpmath as mpm
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from decimal_tables import Table, over_rows

from refimpl.exact import lm, mp


def _row(z):
    weights = [mpm.exp(x) for x in z]
    total = sum(weights)
    return [w / total for w in weights], mpm.log(total)


def _capped(z, softcap):
    return list(z) if softcap is None else [softcap * mpm.tanh(x / softcap) for x in z]


def _targets(y, v, eps):
    return [(1 - eps) * (j == y) + eps / v for j in range(v)]


def ce_values(logits, labels, ignore_index=-100, label_smoothing=0, z_loss=0, softcap=None, reduction="mean",
              normalizer=None):
    per, counted = [], 0
    for z, y in zip(logits, labels):
        if y == ignore_index:
            per.append(mpm.mpf(0))
            continue
        counted += 1
        q, lse = _row(_capped(z, softcap))
        t = _targets(y, len(z), label_smoothing)
        per.append(-sum(tj * mpm.log(qj) for tj, qj in zip(t, q) if tj > 0) + z_loss * lse ** 2)
    if reduction == "none":
        return {"loss": per}
    total = sum(per)
    if reduction == "sum":
        return {"loss": total}
    return {"loss": total / (normalizer if normalizer is not None else counted)}


def ce_gradient(cotangent, logits, labels, ignore_index=-100, label_smoothing=0, z_loss=0, softcap=None,
                reduction="mean", normalizer=None):
    counted = sum(1 for y in labels if y != ignore_index)
    grad = []
    for i, (z, y) in enumerate(zip(logits, labels)):
        if y == ignore_index:
            grad.append([mpm.mpf(0)] * len(z))
            continue
        if reduction == "none":
            w = cotangent[i]
        elif reduction == "sum":
            w = cotangent
        else:
            w = cotangent / (normalizer if normalizer is not None else counted)
        q, lse = _row(_capped(z, softcap))
        t = _targets(y, len(z), label_smoothing)
        cap = [1] * len(z) if softcap is None else [1 - mpm.tanh(x / softcap) ** 2 for x in z]
        grad.append([w * (qj - tj + 2 * z_loss * lse * qj) * cj for qj, tj, cj in zip(q, t, cap)])
    return {"grad:logits": grad}


def logprob_values(logits, labels, temperature):
    return {"logp": [mpm.log(_row([x / temperature for x in z])[0][y]) for z, y in zip(logits, labels)]}


def logprob_gradient(cotangent, logits, labels, temperature):
    grad = []
    for c, z, y in zip(cotangent, logits, labels):
        q = _row([x / temperature for x in z])[0]
        grad.append([c * ((j == y) - qj) / temperature for j, qj in enumerate(q)])
    return {"grad:logits": grad}


def entropy_values(logits, temperature):
    out = []
    for z in logits:
        q = _row([x / temperature for x in z])[0]
        out.append(-sum(qj * mpm.log(qj) for qj in q if qj > 0))
    return {"entropy": out}


def entropy_gradient(cotangent, logits, temperature):
    grad = []
    for c, z in zip(cotangent, logits):
        q = _row([x / temperature for x in z])[0]
        h = -sum(qj * mpm.log(qj) for qj in q if qj > 0)
        grad.append([-c * qj * (mpm.log(qj) + h) / temperature if qj > 0 else mpm.mpf(0) for qj in q])
    return {"grad:logits": grad}


NI = float("-inf")
# Literals: decimal_tables.literals(Table.expressions(row)) at 60 digits, i.e. the functions above.
CE_ROWS = [{'id': 'mean',
  'inputs': {'logits': [[2.0, 0.0, -1.5, 0.75, 0.25],
                        [-0.5, 3.25, 1.0, -2.0, 0.125],
                        [1.375, -0.625, 0.5, 2.5, -3.0]],
             'labels': [0, -100, 3]},
  'params': {},
  'cotangent': 1.0,
  'expect': {'loss': '0.4483994423357423340576555490194447421662',
             'grad:logits': [['-0.1924612548192316225300905731091085869290',
                              '0.04162084318527174488126538638958414165430',
                              '0.009286865405442368712884704015101390067821',
                              '0.08811132571465381118110192162132544023383',
                              '0.05344222051386369775483856108309761497307'],
                             ['0', '0', '0', '0', '0'],
                             ['0.1076425733175027990840382024877691139956',
                              '0.01456783814824208920238199179118627873734',
                              '0.04487210051652613533615307346139299734306',
                              '-0.1684375320065333793760132234039389125042',
                              '0.001355020024262355753439955663590522428174']]}},
 {'id': 'sum',
  'inputs': {'logits': [[2.0, 0.0, -1.5, 0.75, 0.25],
                        [-0.5, 3.25, 1.0, -2.0, 0.125],
                        [1.375, -0.625, 0.5, 2.5, -3.0]],
             'labels': [4, 1, 2]},
  'params': {'reduction': 'sum'},
  'cotangent': -0.5,
  'expect': {'loss': '4.810703063342833279293607760527215894657',
             'grad:logits': [['-0.3075387451807683774699094268908914130710',
                              '-0.04162084318527174488126538638958414165430',
                              '-0.009286865405442368712884704015101390067821',
                              '-0.08811132571465381118110192162132544023383',
                              '0.4465577794861363022451614389169023850269'],
                             ['-0.009981205950541845387142709793715006597844',
                              '0.07558832331749559725465190754633834509182',
                              '-0.04473266161733664366821191031812914552777',
                              '-0.002227108082218862739715181985035638784602',
                              '-0.01864734766739824545958210544945855418161'],
                             ['-0.1076425733175027990840382024877691139956',
                              '-0.01456783814824208920238199179118627873734',
                              '0.4551278994834738646638469265386070026569',
                              '-0.3315624679934666206239867765960610874958',
                              '-0.001355020024262355753439955663590522428174']]}},
 {'id': 'none',
  'inputs': {'logits': [[2.0, 0.0, -1.5, 0.75, 0.25],
                        [-0.5, 3.25, 1.0, -2.0, 0.125],
                        [1.375, -0.625, 0.5, 2.5, -3.0]],
             'labels': [1, -100, 0]},
  'params': {'reduction': 'none'},
  'cotangent': [1.5, -2.0, 0.25],
  'expect': {'loss': ['2.486007018525161872804032377564470027933', '0', '1.535791866146322795311278720474419456399'],
             'grad:logits': [['0.9226162355423051324097282806726742392129',
                              '-1.375137470444184765356203840831247575037',
                              '0.02786059621632710613865411204530417020346',
                              '0.2643339771439614335433057648639763207015',
                              '0.1603266615415910932645156832492928449192'],
                             ['0', '0', '0', '0', '0'],
                             ['-0.1961787133412486004579808987561154430022',
                              '0.007283919074121044601190995895593139368671',
                              '0.02243605025826306766807653673069649867153',
                              '0.1657812339967333103119933882980305437479',
                              '0.0006775100121311778767199778317952612140869']]}},
 {'id': 'normalizer',
  'inputs': {'logits': [[2.0, 0.0, -1.5, 0.75, 0.25],
                        [-0.5, 3.25, 1.0, -2.0, 0.125],
                        [1.375, -0.625, 0.5, 2.5, -3.0]],
             'labels': [0, 2, -100]},
  'params': {'normalizer': 10.0},
  'cotangent': 1.0,
  'expect': {'loss': '0.2899911197196510483982329040052796438258',
             'grad:logits': [['-0.03849225096384632450601811462182171738580',
                              '0.008324168637054348976253077277916828330861',
                              '0.001857373081088473742576940803020278013564',
                              '0.01762226514293076223622038432426508804677',
                              '0.01068844410277273955096771221661952299461'],
                             ['0.001996241190108369077428541958743001319569',
                              '0.08488233533650088054906961849073233098164',
                              '-0.09105346767653267126635761793637417089445',
                              '0.0004454216164437725479430363970071277569204',
                              '0.003729469533479649091916421089891710836321'],
                             ['0', '0', '0', '0', '0']]}},
 {'id': 'smoothing',
  'inputs': {'logits': [[2.0, 0.0, -1.5, 0.75, 0.25],
                        [-0.5, 3.25, 1.0, -2.0, 0.125],
                        [1.375, -0.625, 0.5, 2.5, -3.0]],
             'labels': [3, 0, 1]},
  'params': {'label_smoothing': 0.1},
  'cotangent': 1.0,
  'expect': {'loss': '3.021901021114277757544089870925425550705',
             'grad:logits': [['0.1983591634538455846098652763855420952394',
                              '0.02108056212351449621743591605133724762832',
                              '-0.0004754230630384212281512055316512534293300',
                              '-0.2479257828568974577323013527522409859459',
                              '0.02896148034257579813315136584701289650750'],
                             ['-0.3000125293663054349282741606373146083699',
                              '0.2762744511216696014601577200940555897976',
                              '0.02315510774489109540873359867036725021063',
                              '-0.005181927945187425210264220218361754284809',
                              '0.005764898444932163269647062091253522646526'],
                             ['0.06509504887833519901928446011679389585589',
                              '-0.2969547745678386057181146393056670936103',
                              '0.02324806701101742318736104076587648475416',
                              '0.2143749786623110800459168428556552115226',
                              '-0.005763319983825096534447704432658498522428']]}},
 {'id': 'z-loss',
  'inputs': {'logits': [[2.0, 0.0, -1.5, 0.75, 0.25],
                        [-0.5, 3.25, 1.0, -2.0, 0.125],
                        [1.375, -0.625, 0.5, 2.5, -3.0]],
             'labels': [2, 4, 0]},
  'params': {'z_loss': 0.001},
  'cotangent': 2.0,
  'expect': {'loss': '2.945670248422720977356915028914229309508',
             'grad:logits': [['0.4120904428516586673047241974116636147442',
                              '0.05577037680243038174600901537047016626231',
                              '-0.6542226135592020997104892606442181513402',
                              '0.1180658886172402441172666095537673153717',
                              '0.07161058131257302244189537059539566787469'],
                             ['0.01339914094926308488097188849483956688342',
                              '0.5697459710340147108068793148444007889857',
                              '0.06005078354423157027356652543544950771571',
                              '0.002989752465860456210536871423949379086982',
                              '-0.6416337757551413572622953290730306703847'],
                             ['-0.5223077019050265442832803797152061170231',
                              '0.01953686138376075675819290216525442554104',
                              '0.06017776960923592574743314529292157658345',
                              '0.4446569155511682492258018163015100876397',
                              '0.001817211182390043026391591325001110531392']]}},
 {'id': 'softcap',
  'inputs': {'logits': [[2.0, 40.0, -1.5, -35.0], [0.5, 3.0, -0.25, 1.0]], 'labels': [1, 3]},
  'params': {'softcap': 5.0},
  'cotangent': 1.0,
  'expect': {'loss': '1.021433948764176235430460671307914215661',
             'grad:logits': [['0.01840917684871887009055662760280042071644',
                              '-0.00000001003224426365024553567316378663020414245',
                              '0.0006864422631281346747915702013281359308118',
                              '0.00000000007213780815871877834496464640800788347184'],
                             ['0.04121564748025141709408553676704093570744',
                              '0.2638652730201540945827953193637303327840',
                              '0.01965183165889336649466042465602737929753',
                              '-0.4153122082661223076134350987644928704683']]}},
 {'id': 'all',
  'inputs': {'logits': [[2.0, 0.0, -1.5, 0.75, 0.25],
                        [-0.5, 3.25, 1.0, -2.0, 0.125],
                        [1.375, -0.625, 0.5, 2.5, -3.0]],
             'labels': [3, 7, 2]},
  'params': {'ignore_index': 7, 'label_smoothing': 0.25, 'z_loss': 0.01, 'softcap': 2.5, 'reduction': 'none'},
  'cotangent': [0.75, 1.0, -1.25],
  'expect': {'loss': ['1.731536187485787853317671239060928364889', '0', '2.172831055354835776321929739032339095415'],
             'grad:logits': [['0.2125842407721803215131408202227721507193',
                              '0.04192445233658805981858291970125149229934',
                              '-0.01192429931198462370461985441961793405304',
                              '-0.3985154619372820659387416052847390138753',
                              '0.06375868834407777258871761894762922944374'],
                             ['0', '0', '0', '0', '0'],
                             ['-0.2280660240092334057951179275137179040322',
                              '0.005268251925718693586185176455616500490581',
                              '0.7958331780955929334473828329707462324858',
                              '-0.2696268152143507884784270152845771289747',
                              '0.01508089199716916459176276692491309747830']]}},
 {'id': 'neg-inf',
  'inputs': {'logits': [[NI, 1.0, 2.0, -0.5], [0.5, NI, NI, 3.0]], 'labels': [2, 0]},
  'params': {},
  'cotangent': 1.0,
  'expect': {'loss': '1.475214383072616258204682020722969934270',
             'grad:logits': [['0',
                              '0.1268580908175125977529432159673730415013',
                              '-0.1551639569377482392104190292077821023510',
                              '0.02830586612023564145747581324040906084961'],
                             ['-0.4620709099893782244033469116768761134346',
                              '0',
                              '0',
                              '0.4620709099893782244033469116768761134346']]}}]
LOGPROB_ROWS = [{'id': 'T1',
  'inputs': {'logits': [[2.0, 0.0, -1.5, 0.75, 0.25],
                        [-0.5, 3.25, 1.0, -2.0, 0.125],
                        [1.375, -0.625, 0.5, 2.5, -3.0]],
             'labels': [0, 1, 4]},
  'params': {'temperature': 1.0},
  'cotangent': [1.0, -0.5, 2.0],
  'expect': {'logp': ['-0.4860070185251618728040323775644700279335',
                      '-0.1639041786713486111782966624883264103248',
                      '-5.910791866146322795311278720474419456399'],
             'grad:logits': [['0.3849225096384632450601811462182171738580',
                              '-0.08324168637054348976253077277916828330861',
                              '-0.01857373081088473742576940803020278013564',
                              '-0.1762226514293076223622038432426508804677',
                              '-0.1068844410277273955096771221661952299461'],
                             ['0.009981205950541845387142709793715006597844',
                              '-0.07558832331749559725465190754633834509182',
                              '0.04473266161733664366821191031812914552777',
                              '0.002227108082218862739715181985035638784602',
                              '0.01864734766739824545958210544945855418161'],
                             ['-0.4305702932700111963361528099510764559826',
                              '-0.05827135259296835680952796716474511494937',
                              '-0.1794884020661045413446122938455719893722',
                              '-1.326249871973866482495947106384244349983',
                              '1.994579919902950576986240177345637910287']]}},
 {'id': 'T0.5',
  'inputs': {'logits': [[2.0, 0.0, -1.5, 0.75, 0.25],
                        [-0.5, 3.25, 1.0, -2.0, 0.125],
                        [1.375, -0.625, 0.5, 2.5, -3.0]],
             'labels': [3, 2, 1]},
  'params': {'temperature': 0.5},
  'cotangent': [0.25, 1.5, -1.0],
  'expect': {'logp': ['-2.623552938064208966634751406413489662212',
                      '-4.513528152012993219840005526043653617718',
                      '-6.368371324169750590700107344876321169869'],
             'grad:logits': [['-0.4418874273378455363364321585035890557516',
                              '-0.008093450548591743060653974112524756259265',
                              '-0.0004029491757946630471125880957559810473415',
                              '0.4637276711350547703088705611053801216431',
                              '-0.01334384407282282786467184039351032858492'],
                             ['-0.001636957630483716736739206019871537854273',
                              '-2.959688826582055342910208460042270646141',
                              '2.967120827071225512993443008936184380044',
                              '-0.00008149932146418936650463439412033851151249',
                              '-0.005713543537222263979990708479921857536465'],
                             ['0.1872662002553253328947812469753158439494',
                              '-1.996570099900058080649833886437388381585',
                              '0.03254198609334863714194032763481187004512',
                              '1.776732239101142260125715872822679140390',
                              '0.00002967445024185048739643900458152720141072']]}},
 {'id': 'neg-inf',
  'inputs': {'logits': [[NI, 1.0, 2.0, -0.5], [0.5, NI, NI, 3.0]], 'labels': [2, 3]},
  'params': {'temperature': 1.5},
  'cotangent': [1.0, 2.0],
  'expect': {'logp': ['-0.5319760023608544690861737378483226068192', '-0.1730079888858390784380473333341588217472'],
             'grad:logits': [['0',
                              '-0.2010688731483452628121175005155618567207',
                              '0.2750379778391301425835855571968274704315',
                              '-0.07396910469078487977146805668126561371084'],
                             ['-0.2118254731745535351667113146974400721003',
                              '0',
                              '0',
                              '0.2118254731745535351667113146974400721003']]}}]
ENTROPY_ROWS = [{'id': 'T1',
  'inputs': {'logits': [[2.0, 0.0, -1.5, 0.75, 0.25],
                        [-0.5, 3.25, 1.0, -2.0, 0.125],
                        [1.375, -0.625, 0.5, 2.5, -3.0]]},
  'params': {'temperature': 1.0},
  'cotangent': [1.0, -0.5, 2.0],
  'expect': {'entropy': ['1.124824535189502903413976619072671578016',
                         '0.5799907583629644409782181522747602855570',
                         '0.9384302668702076053977039309118819410796'],
             'grad:logits': [['-0.3929222749488920655851171831497582419901',
                              '0.1133071253709044641118735965142089706675',
                              '0.05314283324629523579637583865492733592238',
                              '0.1077041977205584451681025031378192180860',
                              '0.1187681186111339205087652448428027173141'],
                             ['-0.03327647646937336052241410849313341897630',
                              '0.1765920029320071600362963689487208125504',
                              '-0.08203582846614742021459511249874508164978',
                              '-0.01076564764711502885252813738671194832543',
                              '-0.05051405034937135044675901057013036359892'],
                             ['0.2572061589885598252886599186352216258364',
                              '0.1513517735628546929869264358243696112047',
                              '0.2642718307175640604190814920751077511264',
                              '-0.6997803614085478893387376256221585604720',
                              '0.02695059813956931064406977908745957230461']]}},
 {'id': 'T2.5',
  'inputs': {'logits': [[2.0, 0.0, -1.5, 0.75, 0.25],
                        [-0.5, 3.25, 1.0, -2.0, 0.125],
                        [1.375, -0.625, 0.5, 2.5, -3.0]]},
  'params': {'temperature': 2.5},
  'cotangent': [0.25, 1.5, -1.0],
  'expect': {'entropy': ['1.513576453662334433873242992766772123583',
                         '1.357764656861353751899025787757771507593',
                         '1.412456978857769950744135931860037623840'],
             'grad:logits': [['-0.01730232327294426989936943954921955236366',
                              '0.005067929831042506874465557182516480086921',
                              '0.008067368300005474519758019809801975189029',
                              '0.0003402224931436312198286517805003265486591',
                              '0.003826802648752657285317210776400770539053'],
                             ['0.05611656743808713934896747519708330127163',
                              '-0.1899692202101979552965953551777429511111',
                              '0.03045634303657341080972755824742997867317',
                              '0.05242157613672633202193328132341045036619',
                              '0.05097473359881107311596704040981922080009'],
                             ['0.005387958858442974261735651079612661857113',
                              '-0.03448392637040977487482153164514712502918',
                              '-0.02152496622455394592761950484455224012909',
                              '0.08090603776804545723715468528456758669758',
                              '-0.03028510403152471069644929987448088339643']]}},
 {'id': 'neg-inf',
  'inputs': {'logits': [[NI, 1.0, 2.0, -0.5], [0.5, NI, NI, 3.0]]},
  'params': {'temperature': 0.75},
  'cotangent': [1.0, 2.0],
  'expect': {'entropy': ['0.6238342351559809975225795673340213436143', '0.1498697349668336687644647305732121119844'],
             'grad:logits': [['0',
                              '0.2627448193872553916626895027206678613414',
                              '-0.3715219374515815913191410773645451375232',
                              '0.1087771180643261996564515746438772761818'],
                             ['0.2956331036598008899278193789407040015741',
                              '0',
                              '0',
                              '-0.2956331036598008899278193789407040015741']]}}]

TABLES = [
    Table("lm.cross_entropy", CE_ROWS, ce_values, lm.cross_entropy, ce_gradient, lm.cross_entropy_vjp, output="loss"),
    Table("lm.token_logprobs", LOGPROB_ROWS, logprob_values, lm.token_logprobs, logprob_gradient,
          lm.token_logprobs_vjp, output="logp"),
    Table("lm.entropy", ENTROPY_ROWS, entropy_values, lm.entropy, entropy_gradient, lm.entropy_vjp,
          output="entropy"),
]
ROWS = over_rows(TABLES)


@ROWS
def test_literals_are_the_written_expressions(table, row):
    table.check_literals(row)


@ROWS
def test_hand_gradient_is_the_derivative_of_the_written_values(table, row):
    table.check_hand_gradient(row)


@ROWS
def test_reference_matches_literals(table, row):
    table.check_reference(row)


# ------------------------------------------------------------------------------ PyTorch float64
#
# A second, independent implementation: PyTorch's own float64 kernels, on random inputs, against the
# exact reference to 1e-12 of the result's scale (float64 rounding of a few dozen terms is ~1e-15).


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kwargs", [{}, {"reduction": "sum"}, {"reduction": "none"}, {"label_smoothing": 0.3},
                                    {"ignore_index": 2, "label_smoothing": 0.7, "reduction": "none"}])
def test_cross_entropy_agrees_with_pytorch_float64(seed, kwargs):
    r = np.random.default_rng(seed)
    z = r.normal(0, 3, (6, 9))
    y = r.integers(0, 9, 6)
    y[1] = kwargs.get("ignore_index", -100)
    t = torch.tensor(z, requires_grad=True)
    want = F.cross_entropy(t, torch.tensor(y), **kwargs)
    ct = torch.tensor(r.normal(size=6)) if kwargs.get("reduction") == "none" else torch.tensor(1.0, dtype=torch.float64)
    want.backward(ct)
    got = mp.to_float(lm.cross_entropy(z.tolist(), y.tolist(), **kwargs))
    grad = mp.to_float(lm.cross_entropy_vjp(ct.tolist(), z.tolist(), y.tolist(), **kwargs)["logits"])
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grad, t.grad.numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("temperature", [1.0, 0.6, 2.0])
def test_logprobs_and_entropy_agree_with_pytorch_float64(temperature):
    r = np.random.default_rng(11)
    z = r.normal(0, 3, (5, 7))
    y = r.integers(0, 7, 5)
    logq = torch.log_softmax(torch.tensor(z) / temperature, dim=-1)
    np.testing.assert_allclose(mp.to_float(lm.token_logprobs(z.tolist(), y.tolist(), temperature=temperature)),
                               logq[torch.arange(5), torch.tensor(y)].numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mp.to_float(lm.entropy(z.tolist(), temperature=temperature)),
                               -(logq.exp() * logq).sum(-1).numpy(), rtol=1e-12, atol=1e-12)
