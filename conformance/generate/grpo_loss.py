"""``grpo.loss`` vectors with PPO's clip: token ratios (DeepSeekMath eq. 3 and the libraries'
defaults, ``LOSS_GROUPS``), sequence ratios (GSPO, GSPO-token, GMPO: ``SEQUENCE_LOSS_GROUPS``) and the
library conventions of vector set 1.3.0 (log-ratio clamp, kl_aggregation, mean_eps:
``LIBRARY_LOSS_GROUPS``). The groups are in ``grpo_inputs``; their notes and group texts live with the
other GRPO ones in ``grpo``, which puts these cases in their places among the family's."""
from __future__ import annotations

import math

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, generated, rows_without_tokens
from lossproof.conformance.generate.grpo_inputs import (
    CLIP_PARAMS,
    LIBRARY_LOSS_GROUPS,
    LOSS,
    LOSS_GROUPS,
    SEQUENCE_LOSS_GROUPS,
    dtype_of,
    empty_rows_case,
    loss_away,
    loss_case,
    loss_conventions,
    low_loss_case,
    sequence_away,
)


# ============================================================================ token ratios


def _random_loss(group, gi, i, big=False) -> Case:
    conv = loss_conventions(group)
    seed = 9900 + 100 * gi + i
    r = S.rng(seed)
    b = int(r.integers(1, 17)) if not big else 16
    t = int(r.choice([1, 3, 8, 16, 24, 32, 48, 64])) if not big else 256
    dtype = dtype_of(i)
    eps_low, eps_high = CLIP_PARAMS[(i + gi) % len(CLIP_PARAMS)]
    trl = group.startswith("trl")
    beta = float(r.choice([0.04, 0.001, 0.1] + ([0.0] if trl else [])))
    params = {"eps_low": eps_low, "eps_high": eps_high, "beta": beta}
    if conv["aggregation"] == "seq-mean-token-sum-norm":
        params["norm_length"] = None if i % 2 else float(r.choice([256, 1024]))
    s_old = float(r.choice([0.02, 0.1, 0.3] + ([0.8] if conv["dual_clip"] else [])))
    s_ref = float(r.choice([0.05, 0.3, 1.0]))
    lp = S.rounded(S.logprobs(r, (b, t)), dtype)
    old = S.rounded(S.logprobs_near(r, lp, s_old), dtype)
    ref = S.rounded(S.logprobs_near(r, lp, s_ref), dtype)
    adv = S.rounded(r.normal(0, 1, b).tolist(), dtype)
    mask = S.mask(r, b, t)
    lp = loss_away(lp, old, ref, params, conv, dtype)
    flags = ("Random",) + (("Large",) if big else ()) + (("BetaZero",) if beta == 0 else ())
    comment = (f"random B={b}, T={t}, β={beta:g}, ε=({eps_low:g}, {eps_high if eps_high is not None else eps_low:g})"
               + (f", L={params['norm_length']:g}" if params.get("norm_length") else "")
               + (", float32" if dtype else ""))
    return loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": adv, "mask": mask},
                     params, flags, comment, seed, "logprobs; old/ref = logp + normal offsets; ragged mask")


def token_cases() -> list[Case]:
    out = []
    large = {"paper", "trl-1.16", "verl-0.9.1"}
    for gi, group in enumerate(LOSS_GROUPS):
        conv = LOSS_GROUPS[group]
        for i in range(5):
            out.append(_random_loss(group, gi, i))
        if group in large:
            out.append(_random_loss(group, gi, 50, big=True))
        out.append(low_loss_case(group, gi, 9950 + gi))
        # KL ≈ 0: A = 0, ρ = 1, |log r| ≤ 1e−6.
        lp = [[-2.0, -0.5, -3.0, -1.25], [-0.75, -4.0, -1.0, -6.0]]
        offs = [[1e-8, -3e-7, 1e-6, -2e-9], [5e-7, -1e-6, 7e-8, 0.0]]
        ref = [[a + d for a, d in zip(ra, rd)] for ra, rd in zip(lp, offs)]
        out.append(loss_case(group, {"logp": lp, "old_logp": lp, "ref_logp": ref, "advantages": [0.0, 0.0],
                                     "mask": [[1, 1, 1, 1], [1, 1, 1, 0]]}, {}, ("KLCancellation",),
                              "A = 0, ρ = 1, |log r| between 0 and 1e−6", 0, "fixed"))
        # Rows without tokens.
        seed = 9970 + gi
        r = S.rng(seed)
        lp = S.logprobs(r, (5, 6))
        old = S.logprobs_near(r, lp, 0.1)
        ref = S.logprobs_near(r, lp, 0.3)
        lp = loss_away(lp, old, ref, {}, conv, None)
        mask = S.with_empty_rows(S.mask(r, 5, 6), [1, 3])
        flag, result = rows_without_tokens(conv)
        out.append(loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref,
                                     "advantages": r.normal(0, 1, 5).tolist(), "mask": mask}, {},
                             (flag,), "rows 1 and 3 without tokens", seed, "logprobs; ragged mask with emptied rows",
                             result=result))
    # Extreme ratios (log ρ = ±50) with modest KL, under the paper, TRL (ρ-weighted KL) and verl (dual clip).
    for group in ("paper", "trl-1.16", "verl-0.9.1", "openrlhf-0.11.2"):
        lp = [[0.0, -50.0, -1e-3, -690.0], [-50.0, 0.0, -640.0, -2.0]]
        old = [[-50.0, 0.0, -50.001, -640.0], [0.0, -50.0, -690.0, -2.5]]
        ref = [[-0.5, -50.25, -0.5, -690.125], [-50.5, -0.125, -640.5, -2.25]]
        out.append(loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": [1.0, -1.0],
                                     "mask": [[1, 1, 1, 1], [1, 1, 1, 1]]}, {}, ("ExtremeRatio",),
                              "ratios e^±50 with A = ±1; probabilities ~1e−300", 0, "fixed"))
    # Ratios at the band's edges (and at the dual-clip bound for verl): implementation-defined gradient.
    for group in ("paper", "verl-0.9.1", "trl-1.16"):
        dual = LOSS_GROUPS[group]["dual_clip"]
        targets = [0.8, 1.2] + ([dual] if dual else [])
        base = -1.5
        lp = [[S.ulp_steps(base + math.log(tgt), k) for k in (-2, 0, 2)] for tgt in targets]
        old = [[base] * 3 for _ in targets]
        ref = [[base - 0.25] * 3 for _ in targets]
        adv = [1.0 if tgt == 1.2 else -1.0 for tgt in targets]
        out.append(loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": adv,
                                     "mask": [[1, 1, 1]] * len(targets)}, {}, ("BoundaryUlps",),
                              "ratios within 2 ulps of 1 ± ε" + (" and of c" if dual else ""), 0, "fixed",
                              result="acceptable"))
    # Dual clip active (verl): A < 0, ρ > 3.
    for group in ("verl-0.9.1", "verl-0.9.1-seq-mean-token-mean"):
        lp = [[-0.1, -0.2, -0.05, -0.3], [-1.0, -0.4, -0.7, -0.9]]
        ratios = [[3.5, 10.0, math.exp(5.0), 2.5], [2.9, 1.1, 0.5, 4.0]]
        old = [[a - math.log(q) for a, q in zip(ra, rq)] for ra, rq in zip(lp, ratios)]
        ref = [[a - 0.1 for a in row] for row in lp]
        out.append(loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": [-1.0, -0.5],
                                     "mask": [[1, 1, 1, 1], [1, 1, 1, 0]]}, {}, ("DualClipActive",),
                              "A < 0 with ρ = 3.5, 10, e^5, 4 (dual clip active) and ρ ≤ 2.9", 0, "fixed"))
    # KL clamp active (verl, OpenRLHF): |KL| > 10 where log r = ±15 (k3: e^15 − 16; e^−15 + 14).
    for group in ("verl-0.9.1", "openrlhf-0.11.2", "openrlhf-0.11.2-k2"):
        lp = [[-20.0, -1.0, -2.0], [-0.5, -17.0, -3.0]]
        old = [[-20.1, -1.05, -1.9], [-0.45, -17.2, -3.1]]
        ref = [[-5.0, -16.0, -2.5], [-0.25, -2.0, -3.5]]
        out.append(loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": [0.5, -1.0],
                                     "mask": [[1, 1, 1], [1, 1, 1]]}, {"beta": 0.1}, ("KLClamped",),
                              "log r = ±15 and ±0.5: clamped and unclamped KL tokens", 0, "fixed"))
    # β = 0 (TRL's default): a huge KL estimate does not enter.
    out.append(loss_case("trl-1.16", {"logp": [[-40.0, -1.0], [-0.5, -2.0]], "old_logp": [[-40.1, -1.1], [-0.6, -1.9]],
                                      "ref_logp": [[-1.0, -38.0], [-0.5, -2.5]], "advantages": [1.0, -0.5],
                                      "mask": [[1, 1], [1, 1]]}, {"beta": 0.0}, ("BetaZero",),
                          "β = 0 with |log r| = 37 and 39", 0, "fixed"))
    ok = {"logp": [[-1.0, -2.0]], "old_logp": [[-1.1, -2.1]], "ref_logp": [[-1.2, -1.9]], "advantages": [1.0],
          "mask": [[1, 1]]}
    bad = [
        ({**ok, "advantages": [1.0, -1.0]}, {}, {}, "advantages do not match the batch"),
        ({**ok, "advantages": [[1.0]]}, {}, {}, "per-token advantages [B,1] instead of [B]"),
        ({**ok, "ref_logp": [[-1.2]]}, {}, {}, "ref_logp shape differs"),
        ({**ok, "mask": [[0, 0]]}, {}, {}, "mask selects no token"),
        ({**ok, "mask": [[1, 3]]}, {}, {}, "mask value 3"),
        ({**ok, "logp": [[math.nan, -2.0]]}, {}, {}, "NaN log-probability"),
        ({**ok, "ref_logp": [[-math.inf, -1.9]]}, {}, {}, "−inf reference log-probability"),
        ({"logp": [-1.0, -2.0], "old_logp": [-1.1, -2.1], "ref_logp": [-1.2, -1.9], "advantages": [1.0],
          "mask": [1, 1]}, {}, {}, "rank-1 log-probabilities"),
        (ok, {"beta": -0.04}, {}, "negative β"),
        (ok, {"eps_low": 1.5}, {}, "eps_low outside [0, 1)"),
        (ok, {"eps_high": -0.1}, {}, "negative eps_high"),
        (ok, {}, {"dual_clip": 0.9}, "dual_clip ≤ 1"),
        (ok, {}, {"kl_kind": "k4"}, "unknown KL estimator"),
        (ok, {}, {"kl_clamp": 0.0}, "kl_clamp = 0"),
        (ok, {}, {"kl_ratio_weight": 1}, "kl_ratio_weight not a boolean"),
        (ok, {}, {"aggregation": "sum"}, "unknown aggregation"),
        (ok, {"norm_length": 0.0}, {"aggregation": "seq-mean-token-sum-norm"}, "norm_length = 0"),
    ]
    for inputs, params, conv, why in bad:
        out.append(Case(LOSS, inputs, params={"eps_low": 0.2, "eps_high": None, "beta": 0.04, "norm_length": None,
                                              **params},
                        conventions=conv, group="invalid", result="invalid", flags=("InvalidInput",), comment=why,
                        provenance=generated(0, "fixed")))
    return out


# ============================================================================ sequence ratios

SEQUENCE_BANDS = [(3e-4, 4e-4), (0.2, 0.28), (0.2, None)]   # GSPO §5.1's band first
GMPO_BANDS = [(0.4, None), (0.2, 0.3), (0.4, 0.6)]            # GMPO §4: e^±0.4


def _bands(conv):
    return GMPO_BANDS if conv["policy_loss"] == "gmpo" else SEQUENCE_BANDS


def _random_sequence_loss(group, gi, i, big=False, single=False) -> Case:
    conv = loss_conventions(group)
    seed = 30000 + 100 * gi + i
    r = S.rng(seed)
    b = int(r.integers(1, 17)) if not big else 16
    t = int(r.choice([1, 3, 8, 16, 24, 32, 48, 64])) if not big else 256
    dtype = dtype_of(i)
    eps_low, eps_high = _bands(conv)[(i + gi) % 3]
    beta = float(r.choice([0.04, 0.001, 0.1, 0.0]))
    params = {"eps_low": eps_low, "eps_high": eps_high, "beta": beta}
    if conv["policy_loss"] == "gmpo":
        spreads = [0.1, 0.3, 0.6]
    else:
        spreads = [5e-4, 3e-3, 0.02] if eps_low < 0.01 else [0.02, 0.1, 0.3]
    s_old = float(r.choice(spreads))
    lp = S.rounded(S.logprobs(r, (b, t)), dtype)
    old = S.rounded(S.logprobs_near(r, lp, s_old), dtype)
    ref = S.rounded(S.logprobs_near(r, lp, float(r.choice([0.05, 0.3, 1.0]))), dtype)
    adv = S.rounded(r.normal(0, 1, b).tolist(), dtype)
    if single:
        mask = [[1 if j == int(r.integers(0, t)) else 0 for j in range(t)] for _ in range(b)]
        mask = [row if any(row) else [1] + [0] * (t - 1) for row in mask]
    else:
        mask = S.mask(r, b, t)
    lp = sequence_away(lp, old, ref, mask, adv, params, conv, dtype)
    flags = ("Random",) + (("Large",) if big else ()) + (("SingleTokenRows",) if single else ()) \
        + (("BetaZero",) if beta == 0 else ())
    comment = (f"random B={b}, T={t}, β={beta:g}, ε=({eps_low:g}, {eps_high if eps_high is not None else eps_low:g})"
               + (", one token per row" if single else "") + (", float32" if dtype else ""))
    return loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": adv, "mask": mask},
                     params, flags, comment, seed, "logprobs; old/ref = logp + normal offsets; ragged mask")


def _band_edge_case(group, gi) -> Case:
    """Rows whose sequence ratio sits 0.5·ε and 1.5·ε inside and outside each edge (GSPO), or whose
    token log-ratios sit 5 % either side of −ε_low, ε_high (GMPO); both signs of A."""
    conv = loss_conventions(group)
    seed = 31000 + gi
    r = S.rng(seed)
    eps_low, eps_high = _bands(conv)[0]
    hi = eps_low if eps_high is None else eps_high
    lp, old, adv = [], [], []
    if conv["policy_loss"] == "gmpo":
        rows = [[k * e * f for e, k in ((eps_low, -1), (hi, 1)) for f in (0.95, 1.05)]]
    else:
        rows = [[math.log(x)] for x in (1 - 0.5 * eps_low, 1 - 1.5 * eps_low, 1 + 0.5 * hi, 1 + 1.5 * hi)]
    for target in rows:
        for a in (1.0, -1.0):
            base = S.logprobs(r, (4,))
            if len(target) == 1:   # a spread around the mean that the row's ratio is made of
                z = r.normal(0, 0.05, 4)
                d = (target[0] + z - z.mean()).tolist()
            else:
                d = target
            lp.append(base)
            old.append([x - y for x, y in zip(base, d)])
            adv.append(a)
    ref = S.logprobs_near(r, lp, 0.3)
    mask = [[1] * 4 for _ in lp]
    params = {"eps_low": eps_low, "eps_high": eps_high, "beta": 0.04}
    return loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": adv, "mask": mask},
                     params, ("SequenceBandEdge",), "sequence ratios (GMPO: token log-ratios) either side of "
                     "the band's edges, A = ±1", seed, "logprobs; log-ratios placed around the band's edges")


def _sequence_boundary_case(group) -> Case:
    """One-token rows whose ratio is within 2 ulps of a band edge: the branch is decided by rounding."""
    conv = SEQUENCE_LOSS_GROUPS[group]
    eps_low, eps_high = _bands(conv)[0]
    hi = eps_low if eps_high is None else eps_high
    gmpo = conv["policy_loss"] == "gmpo"
    edges = [(-eps_low, -1.0), (hi, 1.0)] if gmpo else [(math.log(1 - eps_low), -1.0), (math.log(1 + hi), 1.0)]
    base = -1.5
    lp = [[S.ulp_steps(base + x, k)] for x, _ in edges for k in (-2, 0, 2)]
    adv = [a for _, a in edges for _ in (-2, 0, 2)]
    return loss_case(group, {"logp": lp, "old_logp": [[base]] * len(lp), "ref_logp": [[base - 0.25]] * len(lp),
                             "advantages": adv, "mask": [[1]] * len(lp)},
                      {"eps_low": eps_low, "eps_high": eps_high}, ("BoundaryUlps",),
                      "one-token rows within 2 ulps of the band's edges", 0, "fixed", result="acceptable")


def sequence_cases() -> list[Case]:
    out = []
    for gi, group in enumerate(SEQUENCE_LOSS_GROUPS):
        conv = SEQUENCE_LOSS_GROUPS[group]
        for i in range(6):
            out.append(_random_sequence_loss(group, gi, i))
        out.append(_random_sequence_loss(group, gi, 6, single=True))
        out.append(_random_sequence_loss(group, gi, 7, single=True))
        if group in ("gspo", "gmpo"):
            out.append(_random_sequence_loss(group, gi, 50, big=True))
        out.append(_band_edge_case(group, gi))
        out.append(_sequence_boundary_case(group))
        band = _bands(conv)[1]
        out.append(low_loss_case(group, gi, 31100 + gi, {"eps_low": band[0], "eps_high": band[1]}, sequence=True))
        # Zero advantages: only the KL term remains.
        seed = 31200 + gi
        r = S.rng(seed)
        lp = S.logprobs(r, (3, 5))
        old = S.logprobs_near(r, lp, 0.3)
        ref = S.logprobs_near(r, lp, 0.3)
        mask = S.mask(r, 3, 5)
        lp = sequence_away(lp, old, ref, mask, [0.0] * 3, {}, conv, None)
        out.append(loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": [0.0, 0.0, 0.0],
                                     "mask": mask}, {"beta": 0.1}, ("ZeroAdvantage",),
                              "A = 0 in every row: only the KL term", seed, "logprobs; A = 0"))
        # Token log-ratios of ±60 whose mean is moderate: Π_t ρ_t must not be formed.
        lp = [[-1.0, -61.0, -2.0, -0.5], [-60.5, -0.25, -3.0, -1.5]]
        old = [[-61.0, -1.0, -2.125, -0.625], [-0.5, -60.25, -3.125, -1.25]]
        ref = [[-1.25, -61.125, -2.5, -0.75], [-60.75, -0.5, -3.25, -1.75]]
        out.append(loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": [1.0, -1.0],
                                     "mask": [[1, 1, 1, 1], [1, 1, 1, 1]]}, {"eps_low": 0.2, "eps_high": 0.28},
                              ("ExtremeRatio",), "token log-ratios ±60 whose row means are 0.0625 and −0.0625", 0,
                              "fixed"))
        # Rows without tokens: the sequence ratio of such a row is 1 (TRL, verl: length ≥ 1), and the
        # sequence means leave it out (or count it: acceptable, as for the token-level groups).
        seed = 31300 + gi
        r = S.rng(seed)
        lp = S.logprobs(r, (5, 6))
        old = S.logprobs_near(r, lp, 0.1)
        ref = S.logprobs_near(r, lp, 0.3)
        adv = r.normal(0, 1, 5).tolist()
        mask = S.with_empty_rows(S.mask(r, 5, 6), [1, 3])
        lp = sequence_away(lp, old, ref, mask, adv, {}, conv, None)
        flag, result = rows_without_tokens(conv)
        out.append(loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": adv, "mask": mask},
                             {}, (flag,), "rows 1 and 3 without tokens", seed,
                             "logprobs; ragged mask with emptied rows", result=result))
    ok = {"logp": [[-1.0, -2.0]], "old_logp": [[-1.1, -2.1]], "ref_logp": [[-1.2, -1.9]], "advantages": [1.0],
          "mask": [[1, 1]]}
    bad = [
        ({"ratio_level": "seq"}, "unknown ratio_level"),
        ({"policy_loss": "gspo"}, "unknown policy_loss (GSPO is ratio_level='sequence')"),
        ({"policy_loss": "gmpo"}, "GMPO with token ratios (its ratio is a sequence ratio)"),
        ({"policy_loss": "gmpo", "ratio_level": "sequence-token"}, "GMPO with GSPO-token's ratio"),
    ]
    for conv, why in bad:
        out.append(Case(LOSS, ok, params={"eps_low": 0.2, "eps_high": None, "beta": 0.04, "norm_length": None},
                        conventions=conv, group="invalid", result="invalid", flags=("InvalidInput",), comment=why,
                        provenance=generated(0, "fixed")))
    return out


# ============================================================================ library conventions


def _log_ratio_clamp_case(group) -> Case:
    """log ρ = ±19.5, ±20.5 and ±25 with A = ±1: the ±20 clamp binds on the outer four, where the
    unclipped branch is active (ρ tiny with A > 0, ρ huge with A < 0 and no dual clip)."""
    deltas = [-25.0, -20.5, -19.5, 19.5, 20.5, 25.0]
    lp, old, ref = [], [], []
    for a_row in range(2):
        # the lower of logp and old_logp sits at −1.5 − 0.25·j − 0.125·row, the other |log ρ| above it
        lp.append([-1.5 - 0.25 * j - 0.125 * a_row + min(d, 0.0) for j, d in enumerate(deltas)])
        old.append([x - d for x, d in zip(lp[-1], deltas)])
        ref.append([x - 0.375 for x in lp[-1]])
    return loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": [1.0, -1.0],
                             "mask": [[1] * 6, [1] * 6]}, {}, ("LogRatioClamp",),
                      "log ρ = ±19.5, ±20.5, ±25 with A = ±1 around the ±20 clamp", 0, "fixed")


def library_cases() -> list[Case]:
    """Groups of the library conventions (vector set 1.3.0): log ρ clamped to ±20 (verl 0.9.1,
    OpenRLHF 0.11.2), the KL term a token mean (OpenRLHF) or a sequence mean under a token-mean
    policy term, and |o_i| + 1e−8 in per-row token means (OpenRLHF; verl's actor loses it, see
    docs/grpo.md)."""
    out = []
    for k, group in enumerate(LIBRARY_LOSS_GROUPS):
        gi = 100 + k
        conv = LIBRARY_LOSS_GROUPS[group]
        if conv["ratio_level"] != "token":
            for i in range(6):
                out.append(_random_sequence_loss(group, gi, i))
            out.append(_random_sequence_loss(group, gi, 6, single=True))
            out.append(_random_sequence_loss(group, gi, 7, single=True))
            out.append(_band_edge_case(group, gi))
            out.append(low_loss_case(group, gi, 32000 + k, {"eps_low": 0.2, "eps_high": 0.28}, sequence=True))
            continue
        for i in range(7):
            out.append(_random_loss(group, gi, i))
        out.append(low_loss_case(group, gi, 32000 + k))
        if conv["log_ratio_clamp"] is not None:
            out.append(_log_ratio_clamp_case(group))
            lp = [[0.0, -50.0, -1e-3, -690.0], [-50.0, 0.0, -640.0, -2.0]]
            old = [[-50.0, 0.0, -50.001, -640.0], [0.0, -50.0, -690.0, -2.5]]
            ref = [[-0.5, -50.25, -0.5, -690.125], [-50.5, -0.125, -640.5, -2.25]]
            out.append(loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": [1.0, -1.0],
                                         "mask": [[1, 1, 1, 1], [1, 1, 1, 1]]}, {}, ("ExtremeRatio",),
                                  "ratios e^±50 with A = ±1; probabilities ~1e−300", 0, "fixed"))
        if conv["kl_clamp"] is not None:
            lp = [[-20.0, -1.0, -2.0], [-0.5, -17.0, -3.0]]
            old = [[-20.1, -1.05, -1.9], [-0.45, -17.2, -3.1]]
            ref = [[-5.0, -16.0, -2.5], [-0.25, -2.0, -3.5]]
            out.append(loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": [0.5, -1.0],
                                         "mask": [[1, 1, 1], [1, 1, 1]]}, {"beta": 0.1}, ("KLClamped",),
                                  "log r = ±15 and ±0.5: clamped and unclamped KL tokens", 0, "fixed"))
        else:
            out.append(_random_loss(group, gi, 7))
        out.append(empty_rows_case(group, 32100 + k, {"beta": 0.1}))
    ok = {"logp": [[-1.0, -2.0]], "old_logp": [[-1.1, -2.1]], "ref_logp": [[-1.2, -1.9]], "advantages": [1.0],
          "mask": [[1, 1]]}
    bad = [
        ({"log_ratio_clamp": 0.0}, "log_ratio_clamp = 0"),
        ({"log_ratio_clamp": -20.0}, "negative log_ratio_clamp"),
        ({"log_ratio_clamp": 20.0, "ratio_level": "sequence"}, "log_ratio_clamp with sequence ratios"),
        ({"kl_aggregation": "sum"}, "unknown kl_aggregation"),
        ({"mean_eps": -1e-8}, "negative mean_eps"),
    ]
    for conv, why in bad:
        out.append(Case(LOSS, ok, params={"eps_low": 0.2, "eps_high": None, "beta": 0.04, "norm_length": None},
                        conventions=conv, group="invalid", result="invalid", flags=("InvalidInput",), comment=why,
                        provenance=generated(0, "fixed")))
    return out
