"""Low-precision GRPO vectors, judged in bfloat16 and float16 (the careful model of
conformance/compare.py): random sizes up to T = 256 on the two low-precision grids
(``sampling.in_low``), every convention group in turn, tokens NEAR_LOW away from every kink; and the
edges: ratios a few percent either side of the clip band's edges (valid) and on the grid points next
to them (acceptable), zero-variance groups (A = 0), rows without tokens, log-ratios up to ±24
(beyond float16: judged in bfloat16), KL estimates beyond the clamp."""
from __future__ import annotations

import math

from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, rows_without_tokens
from lossproof.conformance.generate.grpo_inputs import (
    ADV_GROUPS,
    AGG_GROUPS,
    CLIP_GROUPS,
    CLIP_PARAMS,
    LOSS_GROUPS,
    adv_case,
    agg_case,
    away_from_kinks,
    clip_bounds,
    clip_case,
    loss_away,
    loss_case,
    random_rewards,
)

LOW_LENGTHS = (1, 2, 3, 5, 8, 16, 24, 32, 64, 100, 128, 256)
LOW_ELEMS = 512          # B·T of a random case (the large case: 8 × 256)
LOW_RANDOM = 48


def _low_adv_cases() -> list[Case]:
    out = []
    kinds = ("binary", "graded", "normal", "offset")
    groups = list(ADV_GROUPS)
    for i in range(LOW_RANDOM):
        seed, grid = 23000 + i, S.low_grid(i)
        group = groups[i % len(groups)]
        r = S.rng(seed)
        b, g = int(r.integers(1, 17)), int(r.choice([2, 4, 5, 8, 16, 64]))
        kind = kinds[i % len(kinds)]
        rewards = S.in_low(random_rewards(r, kind, b, g), grid)
        out.append(adv_case(group, rewards, ("Random", "LowPrecision"), f"random {kind} rewards B={b}, G={g}, "
                            f"exact in {S.grid_note(grid)}", seed, f"{kind} rewards rounded to the {grid} grid",
                            low=True))
    for gi, group in enumerate(groups):
        out.append(adv_case(group, [[1.0] * 8, [0.0] * 8, [0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0], [0.25] * 8],
                            ("ZeroStd", "LowPrecision"), "all-equal groups (1, 0, 0.25) beside a mixed one",
                            23100 + gi, "fixed", low=True))
        step = 2.0 ** -7
        out.append(adv_case(group, [[1.0, 1.0 + step, 1.0, 1.0 + step], [0.5, 0.5, 0.5 + step / 2, 0.5]],
                            ("TinyStd", "LowPrecision"), "groups whose rewards differ by one bfloat16 step (std "
                            "2^−8 or less, of the order of eps)", 23110 + gi, "fixed", low=True))
        if group != "openrlhf-0.11.2":   # OpenRLHF's group_norm requires G > 1
            out.append(adv_case(group, [[0.25], [1.5], [-0.75], [3.0]], ("SingletonGroup", "LowPrecision"),
                                "G = 1 for every prompt", 23120 + gi, "fixed", low=True))
    return out


def _low_clip_case(group, lp, old, adv, params, flags, comment, seed, recipe, result="valid"):
    return clip_case(group, {"logp": lp, "old_logp": old, "advantages": adv}, params, flags + ("LowPrecision",),
                     comment, seed, recipe, result=result, low=True)


def _edge_tokens(targets, grid, offsets):
    """logp and old_logp (= −1.5) whose ratio is each target times (1 + offset), on the grid."""
    lp, old = [], []
    for t in targets:
        for d in offsets:
            lp.append(S.in_low([-1.5 + math.log(t * (1 + d))], grid)[0])
            old.append(-1.5)
    return lp, old


def _neighbours(targets, grid):
    """logp on the two grid points either side of −1.5 + log(target): ratios within one grid step."""
    lp, old = [], []
    for t in targets:
        x = -1.5 + math.log(t)
        step = 2.0 ** (math.floor(math.log2(-x)) - (7 if grid == S.BOTH else 10))
        for v in (math.floor(x / step) * step, math.ceil(x / step) * step):
            lp.append(S.in_low([v], grid)[0])
            old.append(-1.5)
    return lp, old


def _low_clip_cases() -> list[Case]:
    out = []
    groups = list(CLIP_GROUPS)
    for i in range(LOW_RANDOM):
        seed, grid = 23200 + i, S.low_grid(i)
        group = groups[i % 2]
        dual = CLIP_GROUPS[group]["dual_clip"]
        r = S.rng(seed)
        n = 512 if i == LOW_RANDOM - 1 else int(r.choice(LOW_LENGTHS))
        eps_low, eps_high = CLIP_PARAMS[i % len(CLIP_PARAMS)]
        spread = float(r.choice([0.05, 0.2, 0.5] if not dual else [0.2, 0.6, 1.2]))
        lp = S.rounded(S.logprobs(r, n), grid)
        old = S.rounded(S.logprobs_near(r, lp, spread), grid)
        adv = S.rounded(r.normal(0, 1, n).tolist(), grid)
        lp = away_from_kinks(lp, old, clip_bounds(eps_low, eps_high, dual), grid)
        out.append(_low_clip_case(group, lp, old, adv, {"eps_low": eps_low, "eps_high": eps_high}, ("Random",),
                                  f"random N={n}, ε=({eps_low:g}, {eps_high if eps_high is not None else eps_low:g}),"
                                  f" inputs exact in {S.grid_note(grid)}", seed,
                                  f"logprobs; old = logp + normal offset; rounded to the {grid} grid"))
    for gi, group in enumerate(groups):
        dual = CLIP_GROUPS[group]["dual_clip"]
        seed = 23300 + 20 * gi
        for k, (eps_low, eps_high) in enumerate([(0.2, None), (0.2, 0.28)]):
            p = {"eps_low": eps_low, "eps_high": eps_high}
            targets = clip_bounds(eps_low, eps_high, dual)
            for j, grid in enumerate(S.LOW_GRIDS):
                lp, old = _edge_tokens(targets, grid, (-0.06, -0.04, 0.04, 0.06))
                adv = [(1.0, -1.0)[m % 2] if not (dual and m >= 8) else -1.0 for m in range(len(lp))]
                out.append(_low_clip_case(group, lp, old, adv, p, ("ClipEdge",), "ratios 4 and 6 % either side of "
                                          "the clip edges, exact in " + S.grid_note(grid), seed + 4 * k + j,
                                          "fixed offsets from the edges"))
                lp, old = _neighbours(targets, grid)
                adv = [(1.0, -1.0)[(m // 2) % 2] if not (dual and m >= 4) else -1.0 for m in range(len(lp))]
                out.append(_low_clip_case(group, lp, old, adv, p, ("BoundaryUlps",), "ratios on the grid points "
                                          "next to the clip edges, exact in " + S.grid_note(grid),
                                          seed + 4 * k + j + 2, "nearest grid points", result="acceptable"))
        p0 = {"eps_low": 0.2, "eps_high": None}
        out.append(_low_clip_case(group, [-0.5, -3.0, -1.0, -2.0, -6.0], [-1.5, -1.0, -1.0, -0.25, -0.125],
                                  [0.0] * 5, p0, ("ZeroAdvantage",), "A = 0 (a zero-variance group)", seed + 10,
                                  "fixed"))
        out.append(_low_clip_case(group, [-0.125, -9.0, -0.25, -9.5, -4.0, -1.0],
                                  [-9.0, -0.125, -9.5, -0.25, -1.0, -4.0], [1.0, 1.0, -1.0, -1.0, 0.5, -2.0], p0,
                                  ("ExtremeRatio",), "log ρ = ±8.875, ±9.25, ±3", seed + 11, "fixed"))
        out.append(_low_clip_case(group, [-2.0 ** -26, -24.5, -0.25, -25.0], [-24.0, -0.5, -25.0, -0.25],
                                  [1.0, 1.0, -1.0, -1.0], p0, ("ExtremeRatio",), "log ρ = ±24 and ±24.75, bfloat16 "
                                  "only (ρ beyond float16's range; a logp of −2^−26 below it)", seed + 12, "fixed"))
    return out


def _low_agg_cases() -> list[Case]:
    out = []
    groups = list(AGG_GROUPS)
    for i in range(LOW_RANDOM):
        seed, grid = 23400 + i, S.low_grid(i)
        group = groups[i % len(groups)]
        r = S.rng(seed)
        b, t = S.low_shape(r, LOW_LENGTHS, i == LOW_RANDOM - 1, LOW_ELEMS)
        sigma = float(r.choice([0.01, 1.0, 100.0]))
        values = S.in_low(r.normal(0, sigma, (b, t)).tolist(), grid)
        mask = S.mask(r, b, t)
        norm_length = (None if i % 3 == 0 else float(r.choice([256, 1024, 4096]))) \
            if group == "seq-mean-token-sum-norm" else None
        flags = ("Random", "LowPrecision") + (("Large",) if b * t > LOW_ELEMS else ())
        out.append(agg_case(group, values, mask, flags, f"random B={b}, T={t}, σ={sigma:g}, values exact in "
                            f"{S.grid_note(grid)}" + (f", L={norm_length:g}" if norm_length else ""), seed,
                            f"normal values rounded to the {grid} grid, ragged mask", norm_length, low=True))
    for gi, group in enumerate(groups):
        seed = 23500 + 10 * gi
        r = S.rng(seed)
        flag, result = rows_without_tokens({"mode": AGG_GROUPS[group]})
        values = S.in_low(r.normal(0, 1, (6, 12)).tolist(), S.BOTH)
        mask = S.with_empty_rows(S.mask(r, 6, 12), [1, 4])
        out.append(agg_case(group, values, mask, (flag, "LowPrecision"), "rows without tokens among ragged rows", seed,
                            "normal values, ragged mask, emptied rows", result=result, low=True))
        for k, (big, grid) in enumerate(((1e30, "bfloat16"), (65280.0, S.BOTH))):
            r = S.rng(seed + 1 + k)
            values = r.normal(0, 1, (3, 8)).tolist()
            mask = S.mask(r, 3, 8, min_len=2)
            for a, row in enumerate(mask):
                for j, m in enumerate(row):
                    if not m:
                        values[a][j] = big if (a + j) % 2 else -big
            values = S.in_dtype(values, "bfloat16") if grid == "bfloat16" else S.in_low(values, grid)
            out.append(agg_case(group, values, mask, ("MaskedValues", "LowPrecision"),
                                f"±{big:g} at every masked position, exact in "
                                + ("bfloat16" if grid == "bfloat16" else S.grid_note(grid)), seed + 1 + k,
                                "normal values; padding filled with large values", low=True))
    return out


def _low_loss_cases() -> list[Case]:
    out = []
    groups = list(LOSS_GROUPS)
    for i in range(LOW_RANDOM):
        seed, grid = 23600 + i, S.low_grid(i)
        group = groups[i % len(groups)]
        conv = LOSS_GROUPS[group]
        r = S.rng(seed)
        b, t = S.low_shape(r, LOW_LENGTHS, i == LOW_RANDOM - 1, LOW_ELEMS)
        eps_low, eps_high = CLIP_PARAMS[i % len(CLIP_PARAMS)]
        beta = float(r.choice([0.04, 0.001, 0.1] + ([0.0] if group.startswith("trl") else [])))
        params = {"eps_low": eps_low, "eps_high": eps_high, "beta": beta}
        if conv["aggregation"] == "seq-mean-token-sum-norm":
            params["norm_length"] = None if i % 2 else float(r.choice([256, 1024]))
        s_old = float(r.choice([0.02, 0.1, 0.3] + ([0.8] if conv["dual_clip"] else [])))
        s_ref = float(r.choice([0.05, 0.3, 1.0]))
        lp = S.rounded(S.logprobs(r, (b, t)), grid)
        old = S.rounded(S.logprobs_near(r, lp, s_old), grid)
        ref = S.rounded(S.logprobs_near(r, lp, s_ref), grid)
        adv = S.rounded(r.normal(0, 1, b).tolist(), grid)
        zero_rows = [a for a in range(b) if r.uniform() < 0.2]   # zero-variance groups
        for a in zero_rows:
            adv[a] = 0.0
        mask = S.mask(r, b, t)
        lp = loss_away(lp, old, ref, params, conv, grid)
        flags = ("Random", "LowPrecision") + (("Large",) if b * t > LOW_ELEMS else ()) \
            + (("ZeroVarianceGroup",) if zero_rows else ()) + (("BetaZero",) if beta == 0 else ())
        out.append(loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": adv, "mask": mask},
                             params, flags, f"random B={b}, T={t}, β={beta:g}, ε=({eps_low:g}, "
                             f"{eps_high if eps_high is not None else eps_low:g}), inputs exact in "
                             f"{S.grid_note(grid)}" + (f", {len(zero_rows)} rows with A = 0" if zero_rows else ""),
                             seed, f"logprobs; old/ref = logp + normal offsets; rounded to the {grid} grid",
                             low=True))
    for gi, group in enumerate(groups):
        conv = LOSS_GROUPS[group]
        seed = 23700 + 10 * gi
        r = S.rng(seed)
        lp = S.in_low(S.logprobs(r, (4, 6)), S.BOTH)
        old = S.in_low(S.logprobs_near(r, lp, 0.1), S.BOTH)
        ref = S.in_low(S.logprobs_near(r, lp, 0.3), S.BOTH)
        lp = loss_away(lp, old, ref, {}, conv, S.BOTH)
        out.append(loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref, "advantages": [0.0] * 4,
                                     "mask": S.mask(r, 4, 6)}, {}, ("ZeroVarianceGroup", "LowPrecision"),
                              "every group zero-variance (A = 0): only the KL term", seed, "logprobs; A = 0",
                              low=True))
        mask = S.with_empty_rows(S.mask(r, 5, 6), [1, 3])
        lp = S.in_low(S.logprobs(r, (5, 6)), S.BOTH)
        old = S.in_low(S.logprobs_near(r, lp, 0.1), S.BOTH)
        ref = S.in_low(S.logprobs_near(r, lp, 0.3), S.BOTH)
        lp = loss_away(lp, old, ref, {}, conv, S.BOTH)
        flag, result = rows_without_tokens(conv)
        out.append(loss_case(group, {"logp": lp, "old_logp": old, "ref_logp": ref,
                                     "advantages": S.in_low(r.normal(0, 1, 5).tolist(), S.BOTH), "mask": mask}, {},
                             (flag, "LowPrecision"), "rows 1 and 3 without tokens", seed + 1,
                             "logprobs; ragged mask with emptied rows", result=result, low=True))
        if conv["kl_clamp"]:
            out.append(loss_case(group, {"logp": [[-20.0, -1.0, -2.0], [-0.5, -17.0, -3.0]],
                                         "old_logp": [[-20.125, -1.0625, -1.875], [-0.4375, -17.25, -3.125]],
                                         "ref_logp": [[-9.0, -16.0, -2.5], [-0.25, -6.0, -3.5]],
                                         "advantages": [0.5, -1.0], "mask": [[1, 1, 1], [1, 1, 1]]}, {"beta": 0.1},
                                  ("KLClamped", "LowPrecision"), "log r = 11, −15 and ±0.5: clamped and unclamped "
                                  "KL (e^11 inside float16's range)", seed + 2, "fixed", low=True))
    return out


# ============================================================================ all


def cases() -> list[Case]:
    return _low_adv_cases() + _low_clip_cases() + _low_agg_cases() + _low_loss_cases()
