"""Vectors for ``grpo.advantages``, ``grpo.clip``, ``grpo.aggregate`` and ``grpo.loss``
(DeepSeekMath §4.1.1–4.1.2; PPO eq. 7; DAPO §3.1–3.3; Dr. GRPO §3; dual clip, Ye et al. 2020).

Each objective has its own convention sets; a group name labels one of them and, where a
library's defaults are meant, is the library's name (so ``trl-1.16`` is TRL's default for
every objective that has one). ``eps_low``, ``eps_high``, ``beta`` and ``norm_length`` are
arguments, not conventions: they vary inside a group.
"""
from __future__ import annotations

import math

from lossproof.conformance.generate import (
    grpo_beta0,
    grpo_cov,
    grpo_eps,
    grpo_gated,
    grpo_loss,
    grpo_low,
    grpo_rollout,
    grpo_scales,
    grpo_tis,
)
from lossproof.conformance.generate import sampling as S
from lossproof.conformance.generate.case import Case, article, generated, rows_without_tokens
from lossproof.conformance.generate.grpo_inputs import (
    ADV,
    ADV_BASELINE_GROUPS,
    ADV_GROUPS,
    AGG,
    AGG_GROUPS,
    CLIP,
    CLIP_GROUPS,
    CLIP_PARAMS,
    GRPO_SECTION,
    PPO_SECTION,
    adv_case,
    agg_case,
    away_from_kinks,
    clip_bounds,
    clip_case,
    dtype_of,
    random_rewards,
)

NOTES = {
    "Article": {"category": "article", "description": "A number printed in the source article: rewards (0,1,1,0) "
                "→ mean 0.5, population std 0.5, advantages (−1,1,1,−1); ratio 0.24/0.20 = 1.2; with ε = 0.2, "
                "A = 1, ρ = 1.5 → C = 1.2 and A = −1, ρ = 0.5 → C = −0.8.",
                "bugType": "formula",
                "effect": "An implementation of another formula than the published one disagrees with the number "
                          "the source prints."},
    "Random": {"category": "random", "description": "Random inputs from a fixed seed: rewards [B ≤ 16, G ≤ 64] "
               "(binary, Gaussian, graded or offset), per-token log-probabilities with ragged right-padded "
               "masks (T ≤ 256; most T ≤ 64), old and reference log-probabilities drawn near the policy's; "
               "half the cases rounded to float32. Random tokens stay 1e-4 (relative) away from the clip "
               "band's edges, the dual-clip bound and the KL clamp, so that no side is decided by rounding.",
               "bugType": "formula",
               "links": ["https://github.com/pytorch/pytorch/issues/29372",
                         "https://github.com/NVIDIA/TorchFort/issues/38",
                         "https://github.com/XU-YIJIE/grpo-flat/issues/2",
                         "https://github.com/thinking-machines-lab/tinker-cookbook/issues/579",
                         "https://github.com/thinking-machines-lab/tinker-cookbook/pull/589",
                         "https://github.com/huggingface/trl/pull/7068",
                         "https://github.com/databricks/compose-rl/pull/53",
                         "https://github.com/huggingface/trl/pull/224",
                         "https://github.com/huggingface/trl/issues/2681",
                         "https://github.com/huggingface/trl/issues/2769",
                         "https://github.com/tristandeleu/pytorch-maml-rl/issues/24",
                         "https://github.com/THUDM/slime/pull/179",
                         "https://github.com/allenai/open-instruct/issues/534",
                         "https://github.com/huggingface/trl/pull/2881",
                         "https://github.com/huggingface/trl/issues/2995"]},
    "Large": {"category": "random", "description": "A large random case (B = 16, T = 256): realistic sizes for "
              "the reductions.",
              "bugType": "precision",
              "effect": "An accumulation that loses accuracy with the reduction length (naive sums, low-precision "
                        "partial sums) drifts at realistic sizes."},
    "ZeroStd": {"category": "edge", "description": "Groups whose rewards are all equal (exactly representable "
                "means): the formula is 0/0; 'zero' gives A = 0, 'drop' gives A = 0 and keep = 0, 'raw' "
                "gives A = 0 for G > 1. With eps > 0 the exact value (r − mean)/(0 + eps) is 0 as well.",
                "bugType": "degenerate-input",
                "effect": "All-equal rewards make (r − mean)/std a 0/0: NaN or huge advantages unless the group is "
                          "zeroed or dropped as declared.",
                "links": ["https://github.com/NVIDIA-NeMo/RL/pull/1423",
                          "https://github.com/NVIDIA-NeMo/RL/pull/4161",
                          "https://github.com/huggingface/trl/pull/7068",
                          "https://github.com/huggingface/trl/pull/6365"]},
    "ZeroStdRounding": {"category": "numerics", "description": "All-equal groups whose floating-point mean is "
                        "not exactly the common value (0.1 or 0.7 seven times, 0.1 three times, in binary64; "
                        "float32 0.1, 0.7, 0.3 seven times): "
                        "the exact advantage is 0, so an implementation must decide the degenerate case on "
                        "the rewards, not on a rounded std, and must not divide rounding noise by eps.",
                        "bugType": "degenerate-input",
                        "effect": "All-equal groups whose float mean is not the common value: a rounded std of "
                                  "~1e-17 blows the advantages up to ~1e16.",
                        "links": ["https://github.com/NVIDIA-NeMo/RL/pull/4161"]},
    "SingletonGroup": {"category": "edge", "description": "G = 1: the group std is undefined; 'zero'/'drop' "
                       "give A = 0, verl's 'raw' gives mean 0, std 1: A = r/(1 + eps) (A = r without std "
                       "scaling). With scale='batch' the batch std is used and the centred value is 0.",
                       "bugType": "degenerate-input",
                       "effect": "G = 1: the std is undefined (ddof 1 gives NaN); each library treats it "
                                 "differently.",
                       "links": ["https://github.com/StarsfieldAI/R1-V/issues/69",
                                 "https://github.com/radixark/miles_diffusion/pull/253",
                                 "https://github.com/pytorch/pytorch/issues/29372"]},
    "TinyStd": {"category": "numerics", "description": "A group whose rewards differ by 2^−40 only: the "
                "advantages are well defined (±1/√3, √3 with ddof 0) but formed from tiny differences; "
                "judged against max|r|/(std + eps).",
                "bugType": "cancellation",
                "effect": "Rewards differing by 2^−40: advantages formed from tiny differences lose digits or are "
                          "zeroed by an eps.",
                "links": ["https://github.com/keras-team/keras/pull/8726",
                          "https://github.com/pjreddie/darknet/pull/17",
                          "https://github.com/taokong/group_normalization/issues/1"]},
    "LargeOffset": {"category": "numerics", "description": "Rewards near 1e6 that differ by units: r − mean "
                    "cancels; judged against max|r|/(std + eps).",
                    "bugType": "cancellation",
                    "effect": "Rewards near 1e6 differing by units: r − mean cancels; a one-pass variance loses "
                              "every digit."},
    "ExtremeRatio": {"category": "numerics", "description": "log ρ = logp − old_logp = ±50 (ratios e^±50) and "
                     "log-probabilities near log(1e−300): the unclipped branch ρA is formed where it is "
                     "active only (no inf·0). verl 0.9.1 and OpenRLHF 0.11.2 clamp log ρ to ±20 first, which "
                     "the catalog does not express (they differ where that clamp binds).",
                     "bugType": "overflow",
                     "effect": "exp of a large log-ratio overflows to inf; inf·0 on an inactive branch turns the "
                               "loss or gradient into NaN.",
                     "links": ["https://github.com/verl-project/verl/pull/1779"]},
    "BoundaryUlps": {"category": "acceptable", "description": "Ratios within a few ulps of 1 − ε_low, 1 + ε_high "
                     "(or of the dual-clip bound c): the value is continuous there and must match, but which "
                     "branch is active — gradient ρA or 0 — is decided by rounding; either gradient is "
                     "accepted.",
                     "bugType": "clamp",
                     "effect": "Which branch is active within ulps of a clip bound is decided by rounding: the "
                               "value must still match."},
    "DualClipActive": {"category": "convention", "description": "A < 0 and ρ > c = 3: the dual clip bounds the "
                       "objective by c·A (flat, zero gradient); tokens with ρ just below c stay on the "
                       "clipped branch.",
                       "bugType": "clamp",
                       "effect": "The dual clip bound c·A for negative advantages missing or applied to the wrong "
                                 "side: the objective is unbounded for large ratios.",
                       "links": ["https://github.com/RLinf/RLinf/issues/316",
                                 "https://github.com/verl-project/verl/issues/783",
                                 "https://github.com/thu-ml/tianshou/issues/433"]},
    "SingleTokenRows": {"category": "edge", "description": "Every row holds one token: a sequence ratio "
                        "(GSPO's s_i, GMPO's geometric mean) is that token's ratio.",
                        "bugType": "degenerate-input",
                        "effect": "One-token rows make sequence ratios equal token ratios; a wrong length count "
                                  "shows here."},
    "SequenceBandEdge": {"category": "edge", "description": "Sequence ratios s_i = exp(mean log ρ) half and one and "
                         "a half times ε inside and outside the clip band (GSPO's ε = 3e−4 / 4e−4 among them), "
                         "formed from token log-ratios that spread around their mean; for GMPO, token log-ratios "
                         "5 % either side of −ε_low and ε_high. Both signs of A.",
                         "bugType": "clamp",
                         "effect": "Sequence ratios just inside or outside GSPO's tiny band: a band applied to "
                                   "token ratios or with another ε."},
    "LogRatioClamp": {"category": "convention", "description": "log ρ = ±19.5, ±20.5 and ±25 with A = ±1 under "
                      "log_ratio_clamp = 20 (verl 0.9.1 compute_policy_loss_vanilla, OpenRLHF 0.11.2 PolicyLoss): "
                      "beyond the clamp the ratio is the constant e^±20 and its gradient 0, where the unclipped "
                      "branch is active (ρ tiny with A > 0; ρ huge with A < 0 and no dual clip).",
                      "bugType": "clamp",
                      "effect": "The ±20 clamp on log ρ missing or passing a gradient where it holds."},
    "ZeroAdvantage": {"category": "edge", "description": "A = 0: the objective and its gradient are exactly 0 "
                      "whatever the ratio.",
                      "bugType": "degenerate-input",
                      "effect": "A = 0 must give exactly 0 and no gradient; ρ·0 with ρ = inf gives NaN."},
    "FullyMaskedRow": {"category": "edge", "description": "Rows with no token under a token mean: they add "
                       "nothing to the numerator or the denominator.",
                       "bugType": "masking",
                       "effect": "A row without tokens counted in a token mean changes the denominator or gives 0/0 "
                                 "= NaN.",
                       "links": ["https://github.com/huggingface/trl/issues/2995",
                                 "https://github.com/NovaSky-AI/SkyRL/pull/462"]},
    "FullyMaskedRowSeqMean": {"category": "acceptable", "description": "Rows with no token under a "
                              "sequence-mean aggregation are 0/0 in the papers: the exact reference leaves them out "
                              "of the mean over rows (as verl 0.9.1 agg_loss and OpenRLHF 0.11.2 aggregate_loss); "
                              "TRL 1.16.0 ('grpo', 'dr_grpo') and Liger 0.8.5 count them as zero-loss sequences "
                              "(divide by B). Either is accepted, in every convention group.",
                              "bugType": "masking",
                              "effect": "A row without tokens counted in the mean over rows divides by more rows "
                                        "(or gives 0/0 = NaN)."},
    "MaskedValues": {"category": "edge", "description": "Masked positions hold large finite values (±1e30); "
                     "they must not reach the result or its gradient.",
                     "bugType": "masking",
                     "effect": "Values at masked positions that leak into the result or its gradient (multiplied by "
                               "0 instead of replaced: 0·inf = NaN).",
                     "links": ["https://github.com/NovaSky-AI/SkyRL/pull/462",
                               "https://github.com/Tencent-Hunyuan/UniRL/pull/409",
                               "https://github.com/huggingface/trl/pull/3231",
                               "https://github.com/allenai/open-instruct/pull/1161",
                               "https://github.com/meta-pytorch/torchtune/pull/1875",
                               "https://github.com/huggingface/trl/pull/3138",
                               "https://github.com/huggingface/trl/pull/3256",
                               "https://github.com/NovaSky-AI/SkyRL/pull/133"]},
    "KLCancellation": {"category": "numerics", "description": "logp ≈ ref_logp (|log r| ≤ 1e−6) with A = 0: "
                       "the loss is β times a KL estimate of order 1e−13 or less, formed from terms of order 1 "
                       "(k3 = e^x − x − 1); judged against the size of its terms.",
                       "bugType": "cancellation",
                       "effect": "k3 = e^x − x − 1 formed with exp instead of expm1 loses every digit for |x| ≤ "
                                 "1e-6."},
    "KLClamped": {"category": "convention", "description": "KL estimates beyond the ±10 clamp (verl 0.9.1 "
                  "low_var_kl, OpenRLHF 0.11.2 compute_approx_kl): the penalty is constant there and its "
                  "gradient is 0.",
                  "bugType": "clamp",
                  "effect": "A clamp on the KL estimate that is missing, at another bound, or passes a gradient "
                            "where it holds.",
                  "links": ["https://github.com/verl-project/verl/issues/2928",
                            "https://github.com/verl-project/verl/pull/1779"]},
    "BetaZero": {"category": "convention", "description": "β = 0 (TRL 1.16.0's default): no KL term at all, "
                 "even where the KL estimate would be large.",
                 "bugType": "extreme-parameter",
                 "effect": "β = 0 must drop the KL term entirely; an implementation that still evaluates it can "
                           "return NaN (0·inf)."},
    "LowPrecision": {"category": "edge", "description": "Inputs exactly representable in bfloat16 or float16 "
                     "(or both: bfloat16 values inside float16's range), judged in those dtypes; random sizes "
                     "up to T = 256 (B·T ≤ 512, one 8 × 256), every convention group, tokens 2^−5 (relative) "
                     "away from every kink. A case judged in float16 keeps the plain formula's intermediates (ρ = "
                     "e^{log ρ}, the KL estimate before its clamp) inside float16's range; larger ones are "
                     "bfloat16 only. See conformance/compare.py for the careful tolerance model.",
                     "bugType": "precision"},
    "ClipEdge": {"category": "edge", "description": "Ratios 4 % and 6 % either side of 1 − ε_low, 1 + ε_high "
                 "(and of the dual-clip bound c), with both signs of A, in low precision: the side of each edge "
                 "is decided by the inputs (a ratio formed in bfloat16 is off by about 1 %), so the clipped "
                 "branch and its zero gradient must be exactly where the exact reference has them.",
                 "bugType": "clamp",
                 "effect": "Ratios a few percent from the clip bounds in low precision: the side of each edge must "
                           "be decided on the exact ratio.",
                 "links": ["https://github.com/natolambert/rlhf-book/pull/139",
                           "https://github.com/openai/spinningup/pull/315",
                           "https://github.com/areal-project/AReaL/pull/285"]},
    "ZeroVarianceGroup": {"category": "edge", "description": "Rows whose advantage is exactly 0 (a group whose "
                          "rewards are all equal, e.g. every sample correct): the policy term vanishes there, "
                          "the KL term does not.",
                          "bugType": "degenerate-input",
                          "effect": "Rows whose advantage is exactly 0 must drop the policy term but keep the KL "
                                    "term; a shortcut drops both."},
    "ArticleRewards": {"category": "edge", "description": "The article's group (0, 1, 1, 0) under a leave-one-out "
                       "baseline or the batch whitening: leave-one-out baselines 2/3 and 1/3, advantages ±4/3 before "
                       "any scaling.",
                       "bugType": "formula",
                       "effect": "The article's rewards under leave-one-out or whitening: a baseline computed over "
                                 "the wrong set."},
    "WeightBound": {"category": "edge", "description": "CISPO: ratios 5 % and 0.1 % either side of each bound of the "
                    "IS weight (1 + ε_high, 1 − ε_low, or TRL's raw cap ε_high): the weight ŵ = clip(ρ) is continuous "
                    "there, and so is the gradient ŵ·A, so the side a rounded ratio falls on barely matters, but the "
                    "value must follow the bound exactly.",
                    "bugType": "clamp",
                    "effect": "CISPO's importance-weight bounds at another value or on the wrong side.",
                    "links": ["https://github.com/verl-project/verl/pull/4105",
                              "https://github.com/NVIDIA-NeMo/RL/pull/2531"]},
    "SoftGateRange": {"category": "edge", "description": "SAPO: ratios e^−4 … e^4 for both signs of A: the gate "
                      "σ(τ(ρ − 1))·4/τ from its near-zero floor through 2/τ at ρ = 1 to its saturated 4/τ, where its "
                      "gradient 4ρσ(1 − σ)·A vanishes.",
                      "bugType": "formula",
                      "effect": "SAPO's gate evaluated with another temperature or scale across its range."},
    "AbsKink": {"category": "edge", "description": "The abs KL estimator |log r| (verl 0.9.1 kl_penalty 'abs') at "
                "log r = 0 exactly, where the catalog defines its gradient as 0 (torch.abs's subgradient), and at "
                "log r = ±2^−30 (gradient ∓1 per unit of β): the sign of ref_logp − logp is exact in every dtype.",
                "bugType": "gradient",
                "effect": "The gradient of |x| at 0 differs between implementations (sqrt(x²) gives NaN, sign(x) "
                          "gives 0): a NaN or a wrong subgradient."},
    "InvalidInput": {"category": "invalid", "description": "Input or parameter outside the objective's domain "
                     "(NaN/inf, shapes that disagree, masks that are not 0/1 or select no token, ε outside "
                     "its range, dual clip ≤ 1, unknown convention values); must be rejected.",
                     "bugType": "input-validation"},
    "InvalidForPolicyLoss": {"category": "invalid", "description": "A parameter or input outside the domain of the "
                             "group's policy loss only (ε_high = 0 as the raw cap of cispo_clip 'raw-upper', which "
                             "PPO's clip takes; Clip-Cov without `selected`; `selected` given to PPO's clip; "
                             "KL-Cov's top-k tied at the boundary); run for the targets that declare that policy "
                             "loss; must be rejected.",
                             "bugType": "input-validation",
                             "effect": "A parameter only the group's policy loss cannot take is accepted and gives "
                                       "a meaningless loss."},
}

GROUPS = {
    "paper": "Paper defaults. grpo.advantages: DeepSeekMath §4.1.2 with the article's population std "
             "(std_ddof 0, eps 0, all-equal groups → 0). grpo.clip: PPO eq. 7 / DeepSeekMath eq. 3 without "
             "dual clip — also TRL 1.16.0 trainer/grpo_trainer.py (delta=None), Liger 0.8.5 "
             "chunked_loss/grpo_loss.py and OpenRLHF 0.11.2 models/loss.py PolicyLoss (dual_clip=None). "
             "grpo.aggregate and grpo.loss: DeepSeekMath eq. 3 seq-mean-token-mean, k3 without clamp or ratio "
             "weight — also TRL 1.16.0 loss_type='grpo' with use_bias_correction_kl=False and Liger 0.8.5 "
             "loss_type='grpo' (both count fully masked rows; verl 0.9.1 agg_loss and OpenRLHF 0.11.2 "
             "aggregate_loss divide each row by (|o_i| + 1e−8), which the catalog does not express)",
    "dapo-drop": "grpo.advantages: DAPO §3.2 dynamic sampling — groups whose rewards are all equal are "
                 "dropped (keep = 0), population std, eps 0",
    "dr-grpo": "grpo.advantages: Dr. GRPO §3 (A = r − mean, no std scaling; std_ddof and eps do not enter) — "
               "TRL 1.16.0 trainer/grpo_trainer.py scale_rewards='none'; OpenRLHF 0.11.2 "
               "trainer/ppo_utils/experience_maker.py advantage estimator 'dr_grpo' / 'reinforce_baseline'",
    "trl-1.16": "TRL 1.16.0 defaults. grpo.advantages: trainer/grpo_trainer.py scale_rewards='group', std with "
                "Bessel's correction (trainer/utils.py nanstd, ddof 1) + 1e−4, all-equal groups → 0. grpo.loss: "
                "loss_type='dapo' (token mean), use_bias_correction_kl=True (k3 × ρ, differentiable ρ), k3 "
                "without clamp",
    "trl-1.16-batch": "grpo.advantages: TRL 1.16.0 trainer/grpo_trainer.py scale_rewards='batch' (group mean, "
                      "std over the whole batch with ddof 1, + 1e−4)",
    "trl-1.16-grpo": "grpo.loss: TRL 1.16.0 trainer/grpo_trainer.py loss_type='grpo' (seq-mean-token-mean) with "
                     "use_bias_correction_kl=True; fully masked rows count as zero-loss sequences there",
    "trl-1.16-dr_grpo": "grpo.loss: TRL 1.16.0 trainer/grpo_trainer.py loss_type='dr_grpo' "
                        "(Σ m·ℓ / (B · max_completion_length): seq-mean-token-sum-norm with norm_length = "
                        "max_completion_length) with use_bias_correction_kl=True",
    "verl-0.9.1": "verl 0.9.1 trainer/ppo/core_algos.py defaults. grpo.advantages: "
                  "compute_grpo_outcome_advantage (torch.std, ddof 1, + epsilon 1e−6; a singleton group gets "
                  "mean 0 and std 1: 'raw'). grpo.loss: compute_policy_loss_vanilla with clip_ratio_c = 3 "
                  "(dual clip), kl_penalty 'low_var_kl' (k3 clamped to ±10), agg_loss 'token-mean'. Not "
                  "expressed: log ρ and log r are clamped to ±20 before exp",
    "verl-0.9.1-no-std": "grpo.advantages: verl 0.9.1 trainer/ppo/core_algos.py compute_grpo_outcome_advantage "
                         "with norm_adv_by_std_in_grpo=False (A = r − mean; a singleton group keeps r)",
    "verl-0.9.1-seq-mean-token-mean": "grpo.loss: verl 0.9.1 defaults with agg_loss loss_agg_mode="
                                      "'seq-mean-token-mean' (fully masked rows excluded; the row mean divides "
                                      "by |o_i| + 1e−8, not expressed)",
    "verl-0.9.1-seq-mean-token-sum": "grpo.loss: verl 0.9.1 defaults with agg_loss loss_agg_mode="
                                     "'seq-mean-token-sum'",
    "verl-0.9.1-seq-mean-token-sum-norm": "grpo.loss: verl 0.9.1 defaults with agg_loss loss_agg_mode="
                                          "'seq-mean-token-sum-norm' (loss_scale_factor = norm_length; None → T)",
    "openrlhf-0.11.2": "OpenRLHF 0.11.2. grpo.advantages: trainer/ppo_utils/experience_maker.py estimator "
                       "'group_norm' (torch.std, ddof 1, + 1e−9; requires G > 1). grpo.loss: models/loss.py "
                       "PolicyLoss (token_level_loss=True, dual_clip=None) + KL loss from models/utils.py "
                       "compute_approx_kl 'k3' clamped to ±10",
    "openrlhf-0.11.2-seq-mean": "grpo.loss: OpenRLHF 0.11.2 models/loss.py aggregate_loss with "
                                "token_level_loss=False for the policy term (per-sequence token means, fully "
                                "masked rows excluded; divides by |o_i| + 1e−8, not expressed) and k3 clamped "
                                "to ±10. OpenRLHF keeps its KL term a token mean even then, which one "
                                "aggregation cannot express: see docs/conventions.md",
    "openrlhf-0.11.2-k2": "grpo.loss: OpenRLHF 0.11.2 models/utils.py compute_approx_kl 'k2' ((log r)²/2, "
                          "clamped to ±10) as the KL loss, token-level PolicyLoss",
    "gspo": "grpo.loss: GSPO (Zheng et al. 2025, arXiv 2507.18071) §4.1 eq. 5: the sequence ratio "
            "s_i = exp(1/|y_i| Σ_t log ρ_t) in the clipped surrogate, 1/G Σ_i aggregation; ε = 3e−4 / 4e−4 "
            "(§5.1) among the bands; k3 KL without clamp or ratio weight (GSPO itself has no KL term: β varies)",
    "gspo-token": "grpo.loss: GSPO-token (arXiv 2507.18071 §4.3): s_i,t = sg[s_i]·π_t/sg[π_t], the value of "
                  "GSPO with a per-token gradient (equal to GSPO's for per-sequence advantages, except through "
                  "a ratio-weighted KL)",
    "gmpo": "grpo.loss: GMPO (Zhao et al. 2025, arXiv 2507.20673) §3: C_i = A_i·exp(1/|o_i| Σ_t "
            "clip_A(log ρ_t)), the token log-ratio clipped in log space on the side A points to (A > 0: at "
            "most ε_high; otherwise at least −ε_low); ε = 0.4 (the paper's e^±0.4) among the bands — also TRL "
            "1.16.0 experimental/gmpo/gmpo_trainer.py GMPOTrainer._compute_loss (epsilon 0.4 in log space; k3 "
            "averaged per sequence; a plain mean over sequences, which counts rows without tokens)",
    "trl-1.16-gspo": "grpo.loss: TRL 1.16.0 trainer/grpo_trainer.py _compute_loss with "
                     "importance_sampling_level='sequence' (log w = Σ_t Δ·m / max(Σ m, 1), no clamp), "
                     "loss_type='grpo' (per-sequence token means; TRL's GSPO recipe) and "
                     "use_bias_correction_kl=True (k3 × the differentiable sequence ratio)",
    "trl-1.16-gspo-dapo": "grpo.loss: TRL 1.16.0 importance_sampling_level='sequence' with its default "
                          "loss_type='dapo' (token mean) and use_bias_correction_kl=True",
    "verl-0.9.1-gspo": "grpo.loss: verl 0.9.1 trainer/ppo/core_algos.py compute_policy_loss_gspo "
                       "(loss_mode='gspo': GSPO-token, log s_i,t = logπ − sg logπ + sg(masked mean Δ), length "
                       "≥ 1; no dual clip) with loss_agg_mode='seq-mean-token-mean' (what its docstring "
                       "recommends), low_var_kl (k3 clamped to ±10). Its clamp of log s at 10 is not expressed "
                       "(no case comes near it)",
    "verl-0.9.1-gspo-token-mean": "grpo.loss: verl 0.9.1 loss_mode='gspo' with the config's default "
                                  "loss_agg_mode='token-mean'",
    "openrlhf-0.11.2-gspo": "grpo.loss: OpenRLHF 0.11.2 models/loss.py PolicyLoss policy_loss_type='gspo' "
                            "(ratio = exp(masked mean Δ), length ≥ 1, no clamp; sequence aggregation), KL k3 "
                            "clamped to ±10",
    "verl-0.9.1-gmpo": "grpo.loss: verl 0.9.1 trainer/ppo/core_algos.py compute_policy_loss_geo_mean "
                       "(loss_mode='geo_mean'; clip_ratio_low/high are log-space bounds; plain mean over "
                       "sequences) with the KL loss low_var_kl under loss_agg_mode='seq-mean-token-mean'",
    "verl-0.9.1-clamp": "grpo.loss: verl 0.9.1 trainer/ppo/core_algos.py compute_policy_loss_vanilla as it runs: "
                        "log ρ clamped to ±20 before exp (log_ratio_clamp = 20), clip_ratio_c = 3 (dual clip), "
                        "low_var_kl (k3 clamped to ±10; its own ±20 clamp of log r is absorbed by that one), agg_loss "
                        "'token-mean' for both terms (verl/workers/utils/losses.py ppo_loss)",
    "verl-0.9.1-clamp-seq-mean-token-mean": "grpo.loss: as verl-0.9.1-clamp with loss_agg_mode='seq-mean-token-mean'. "
                                            "agg_loss divides each row by |o_i| + 1e−8, but the actor's mask is "
                                            "boolean (losses.py: response_mask.to(bool)): the int64 count plus "
                                            "1e−8 is formed in float32 and the ε is lost (mean_eps = 0)",
    "verl-0.9.1-clamp-seq-mean-token-sum": "grpo.loss: as verl-0.9.1-clamp with loss_agg_mode='seq-mean-token-sum'",
    "verl-0.9.1-clamp-seq-mean-token-sum-norm": "grpo.loss: as verl-0.9.1-clamp with loss_agg_mode="
                                                "'seq-mean-token-sum-norm' (loss_scale_factor = norm_length; None → T)",
    "openrlhf-0.11.2-clamp": "grpo.loss: OpenRLHF 0.11.2 models/loss.py PolicyLoss (policy_loss_type 'ppo': log ρ "
                             "clamped to ±20 before exp; token_level_loss=True) + the KL loss of "
                             "trainer/ray/ppo_actor.py (models/utils.py compute_approx_kl 'k3' clamped to ±10, "
                             "aggregate_loss token mode: kl_aggregation 'token-mean'); aggregate_loss's sequence mode "
                             "divides by |o_i| + 1e−8 (mean_eps)",
    "openrlhf-0.11.2-clamp-seq-mean": "grpo.loss: OpenRLHF 0.11.2 with --actor.loss_agg_mode seq-mean-token-mean: "
                                      "the policy term's per-sequence token means over |o_i| + 1e−8, the KL term "
                                      "still a token mean (ppo_actor.py: aggregate_loss(kl, ...) in token mode)",
    "openrlhf-0.11.2-clamp-k2": "grpo.loss: OpenRLHF 0.11.2 --algo.kl.estimator k2 ((log r)²/2 clamped to ±10), "
                                "token-level PolicyLoss with its ±20 log-ratio clamp",
    "openrlhf-0.11.2-gspo-kl-token-mean": "grpo.loss: OpenRLHF 0.11.2 PolicyLoss policy_loss_type='gspo' (sequence "
                                          "ratio, no log clamp, per-sequence token means over |o_i| + 1e−8) with "
                                          "the KL term a token mean (ppo_actor.py)",
    "kl-seq-mean": "grpo.loss: a token-mean policy term (DAPO §3.3) with the KL term a mean of per-sequence token "
                   "means (kl_aggregation 'seq-mean-token-mean'): the KL term reduced differently from the policy "
                   "term, the other way round from OpenRLHF",
    "kl-seq-sum": "grpo.loss: a token-mean policy term with the KL term a mean over sequences of per-sequence "
                  "token sums (kl_aggregation 'seq-mean-token-sum'): each kl_aggregation mode has its vectors",
    "kl-seq-sum-norm": "grpo.loss: a token-mean policy term with the KL term per-sequence token sums divided by "
                       "the padded length T (kl_aggregation 'seq-mean-token-sum-norm', Dr. GRPO §3's normaliser)",
    "token-mean-eps": "grpo.aggregate: mode 'token-mean' with mean_eps 1e−8, as the verl 0.9.1 and OpenRLHF "
                      "0.11.2 adapters declare it: ε is added to per-row token counts only, so the batch token "
                      "mean is Σ m·v / Σ m whatever ε; these vectors give the declared combination cases of its "
                      "own",
    "seq-mean-token-mean-eps": "grpo.aggregate: per-row token means over |o_i| + 1e−8 (mean_eps) — verl 0.9.1 "
                               "trainer/ppo/core_algos.py agg_loss 'seq-mean-token-mean' (with a floating-point "
                               "mask) and OpenRLHF 0.11.2 models/loss.py aggregate_loss(token_level_loss=False)",
    "cispo": "grpo.loss: CISPO (MiniMax-M1, arXiv 2506.13585) §3.1 eq. 4–5: −sg(ŵ_t)·A_i·log π_t with the IS "
             "weight ŵ_t = min(ρ_t, 1 + ε_high) (the paper sets ε_low^IS large: no lower bound; it prints no "
             "ε_high^IS, so the bands vary), token mean 1/Σ|o_i|; k3 KL without clamp or ratio weight (CISPO has "
             "no KL term: β varies, 0 among it)",
    "cispo-both": "grpo.loss: CISPO with both bounds of eq. 5, ŵ_t = clip(ρ_t, 1 − ε_low, 1 + ε_high), token mean",
    "trl-1.16-cispo": "grpo.loss: TRL 1.16.0 trainer/grpo_trainer.py _compute_loss loss_type='cispo': ŵ = "
                      "clamp(ρ, max=epsilon_high) with the raw epsilon_high as the cap (unset → epsilon = 0.2; the "
                      "help text suggests 5.0) and no lower bound; Σ/(tokens) normaliser (token mean); "
                      "use_bias_correction_kl=True (k3 × ρ)",
    "liger-0.8.5-cispo": "grpo.loss: Liger 0.8.5 chunked_loss/grpo_loss.py loss_type='cispo' (clamp(ρ, "
                         "max=epsilon_high), raw cap; token mean as 'dapo'; use_bias_correction_kl=False)",
    "verl-0.9.1-cispo": "grpo.loss: verl 0.9.1 trainer/ppo/core_algos.py compute_policy_loss_cispo "
                        "(loss_mode='cispo'): ŵ = clamp(ρ, 1 − clip_ratio_low, 1 + clip_ratio_high), both sides; "
                        "loss_agg_mode token-mean; KL loss low_var_kl (k3 clamped to ±10); log ρ clamped to ±20 "
                        "first (log_ratio_clamp = 20)",
    "sapo": "grpo.loss: SAPO (Gao et al. 2025, arXiv 2511.20347) §3: −σ(τ(ρ_t − 1))·4/τ·A_i, τ = τ_pos (1.0) "
            "where A_i > 0, else τ_neg (1.05), 1/G Σ_i 1/|y_i| Σ_t aggregation; k3 KL without clamp or ratio "
            "weight (β varies, 0 among it) — also Liger 0.8.5 chunked_loss/grpo_loss.py loss_type='sapo' (per-sequence "
            "token means, use_bias_correction_kl=False; it counts fully masked rows)",
    "trl-1.16-sapo": "grpo.loss: TRL 1.16.0 trainer/grpo_trainer.py loss_type='sapo' (sapo_temperature_pos 1.0, "
                     "sapo_temperature_neg 1.05; per-sequence token means as 'grpo'); use_bias_correction_kl=True",
    "verl-0.9.1-sapo": "grpo.loss: verl 0.9.1 trainer/ppo/core_algos.py compute_policy_loss_sapo "
                       "(loss_mode='sapo', tau_pos 1.0, tau_neg 1.05; always seq-mean-token-mean) with the KL loss "
                       "low_var_kl (k3 clamped to ±10); log ρ clamped to ±20 first (log_ratio_clamp = 20)",
    "verl-0.9.1-abs": "grpo.loss: verl 0.9.1 defaults (compute_policy_loss_vanilla: log ρ clamped to ±20, "
                      "clip_ratio_c = 3; token-mean) with kl_loss_type='abs': |logp − ref_logp| "
                      "(core_algos.kl_penalty_forward), no clamp on the KL",
    "dual-clip-3": "grpo.clip: dual clip c = 3 (Ye et al. 2020) — verl 0.9.1 trainer/ppo/core_algos.py "
                   "compute_policy_loss_vanilla clip_ratio_c=3.0 (always on; log ρ clamped to ±20 first, not "
                   "expressed); OpenRLHF 0.11.2 models/loss.py PolicyLoss(dual_clip=3)",
    "token-mean": "DAPO §3.3 token-level mean Σ m·v / Σ m. grpo.aggregate mode 'token-mean': TRL 1.16.0 "
                  "loss_type 'dapo'/'bnpo', verl 0.9.1 agg_loss 'token-mean' (its default), OpenRLHF 0.11.2 "
                  "aggregate_loss token_level_loss=True, Liger 0.8.5 'dapo'. grpo.loss with k3, no clamp, no "
                  "ratio weight: Liger 0.8.5 chunked_loss/grpo_loss.py defaults (loss_type='dapo', "
                  "use_bias_correction_kl=False); TRL 1.16.0 loss_type='dapo' with use_bias_correction_kl=False",
    "seq-mean-token-sum": "grpo.aggregate: verl 0.9.1 agg_loss 'seq-mean-token-sum' (fully masked rows excluded)",
    "seq-mean-token-sum-norm": "grpo.aggregate: Dr. GRPO §3 (constant normaliser L = norm_length); verl 0.9.1 "
                               "agg_loss 'seq-mean-token-sum-norm' (loss_scale_factor, default T); TRL 1.16.0 "
                               "loss_type='dr_grpo' (L = max_completion_length; divides by B including fully "
                               "masked rows)",
    "rloo": "grpo.advantages: RLOO (Kool et al. 2019; Ahmadian et al. 2024, arXiv 2402.14740 §3): A = r − mean of "
            "the other G − 1 rewards of the group, no std scaling; G = 1 (no other reward) → 0 — also verl 0.9.1 "
            "trainer/ppo/core_algos.py compute_rloo_vectorized_outcome_advantage (a singleton gets 0), TRL 1.16.0 "
            "trainer/rloo_trainer.py normalize_advantages=False (G = 1 → 0) and OpenRLHF 0.11.2 "
            "trainer/ppo_utils/experience_maker.py estimator 'rloo' ((Σ − r)/(n − 1); G = 1 divides by 0)",
    "verl-0.9.1-rloo": "grpo.advantages: verl 0.9.1 trainer/ppo/core_algos.py compute_rloo_outcome_advantage "
                       "(n/(n − 1)·(s − mean); a singleton group keeps its raw score: 'raw')",
    "trl-1.16-rloo-normalized": "grpo.advantages: TRL 1.16.0 trainer/rloo_trainer.py with "
                                "normalize_advantages=True: the leave-one-out advantages centred by their batch "
                                "mean and divided by their batch std (nanstd, ddof 1) + 1e−4",
    "reinforce++": "grpo.advantages: REINFORCE++ (Hu et al. 2025, arXiv 2501.03262) for outcome rewards: no "
                   "baseline, the rewards whitened over the whole batch (population std, eps 0)",
    "reinforce++-baseline": "grpo.advantages: REINFORCE++ w/ baseline (arXiv 2501.03262): r − group mean, then "
                            "whitened over the whole batch (population std, eps 0) — also OpenRLHF 0.11.2 "
                            "trainer/ppo_utils/experience_maker.py estimator 'reinforce_baseline' with γ = 1 and no "
                            "KL (its whitening over the tokens, biased variance, equals this one when every "
                            "response has the same length; its rsqrt(clamp(var, 1e−8)) floor is not expressed)",
    "verl-0.9.1-reinforce++": "grpo.advantages: verl 0.9.1 trainer/ppo/core_algos.py "
                              "compute_reinforce_plus_plus_outcome_advantage for outcome rewards (γ = 1: the "
                              "return is the score) then verl.utils.torch_functional.masked_whiten (unbiased "
                              "variance; its rsqrt(var + 1e−8) and Σm + 1e−8 are not expressed)",
    "verl-0.9.1-reinforce++-baseline": "grpo.advantages: verl 0.9.1 trainer/ppo/core_algos.py "
                                       "compute_reinforce_plus_plus_baseline_outcome_advantage (s − group mean, a "
                                       "singleton group's mean is 0: 'raw'; then masked_whiten, unbiased variance; "
                                       "rsqrt(var + 1e−8) and Σm + 1e−8 not expressed)",
    "invalid": "inputs outside the domain (all conventions)",
}


# A row without tokens under a per-sequence mean is 0/0 in the papers: the exact reference
# leaves it out of the mean over rows, other libraries count it as a zero-loss row; such cases
# are implementation-defined (acceptable) in every group alike, whatever one library does.


# ============================================================================ advantages


def _adv_cases() -> list[Case]:
    out = [Case(ADV, {"rewards": [[0.0, 1.0, 1.0, 0.0]]}, conventions=ADV_GROUPS["paper"], group="paper",
                flags=("Article",), comment="rewards (0,1,1,0): mean 0.5, population std 0.5 → (−1,1,1,−1)",
                provenance=article(GRPO_SECTION, "En el grupo ilustrado (0,1,1,0), la media es 0.5 y la desviación "
                                   "típica poblacional es 0.5, lo que da ventajas (−1,1,1,−1)"))]
    kinds = ("binary", "normal", "graded", "offset")
    sizes = [2, 4, 5, 8, 16, 64, 3, 7, 12, 32]
    for gi, group in enumerate(ADV_GROUPS):
        singleton_ok = group != "openrlhf-0.11.2"  # OpenRLHF's group_norm requires G > 1
        for i in range(9):
            seed = 7000 + 100 * gi + i
            r = S.rng(seed)
            b = int(r.integers(1, 17))
            g = int(sizes[(i + gi) % len(sizes)]) if i < 8 or not singleton_ok else 1
            if i == 8 and singleton_ok:
                b = max(b, 2)
            kind = kinds[i % len(kinds)]
            rewards = S.rounded(random_rewards(r, kind, b, g), dtype_of(i))
            flags = ("Random",) + (("SingletonGroup",) if g == 1 else ())
            out.append(adv_case(group, rewards, flags, f"random {kind} rewards B={b}, G={g}"
                                + (", float32" if dtype_of(i) else ""), seed, f"{kind} rewards"))
        out.append(adv_case(group, [[1.0] * 4, [0.0] * 4, [0.0, 1.0, 0.0, 0.0], [0.5] * 4, [-1.0] * 4],
                            ("ZeroStd",), "all-equal groups (1, 0, 0.5, −1) beside a mixed one", 0, "fixed"))
        out.append(adv_case(group, [[0.1] * 7, [0.7] * 7, [0.0, 1.0, 0.5, 0.25, 0.0, 1.0, 1.0]],
                            ("ZeroStdRounding",), "0.1 and 0.7 seven times (float mean ≠ value)", 0, "fixed"))
        out.append(adv_case(group, S.in_dtype([[0.1] * 7, [0.7] * 7, [0.3] * 7], "float32"), ("ZeroStdRounding",),
                            "float32 0.1, 0.7, 0.3 seven times (float32 mean ≠ value)", 0, "fixed"))
        out.append(adv_case(group, [[0.1] * 3, [0.3, 0.1, 0.2]], ("ZeroStdRounding",),
                            "0.1 three times (binary64 mean ≠ 0.1)", 0, "fixed"))
        out.append(adv_case(group, [[1.0, 1.0, 1.0, 1.0 + 2.0 ** -40], [0.0, 0.0, 2.0 ** -40, 0.0]], ("TinyStd",),
                            "groups whose rewards differ by 2^−40", 0, "fixed"))
        out.append(adv_case(group, [[1e6, 1e6 + 1, 1e6 + 1, 1e6], [1e6 + 3, 1e6 - 2, 1e6 + 7, 1e6 + 1]],
                            ("LargeOffset",), "rewards near 1e6 differing by units", 0, "fixed"))
        if singleton_ok:
            out.append(adv_case(group, [[0.0], [1.0], [0.5], [-2.0], [3.25]], ("SingletonGroup",),
                                "G = 1 for every prompt", 0, "fixed"))
            out.append(adv_case(group, [[0.75]], ("SingletonGroup",), "a single reward (B = G = 1)", 0, "fixed"))
    bad = [
        ({"rewards": [0.0, 1.0, 1.0, 0.0]}, {}, "rank-1 rewards (expected [B, G])"),
        ({"rewards": [[]]}, {}, "empty group (G = 0)"),
        ({"rewards": [[0.0, math.nan]]}, {}, "NaN reward"),
        ({"rewards": [[0.0, math.inf]]}, {}, "+inf reward"),
        ({"rewards": [[0.0, -math.inf]]}, {}, "−inf reward"),
        ({"rewards": [[0.0, 1.0]]}, {"std_ddof": 2}, "std_ddof = 2"),
        ({"rewards": [[0.0, 1.0]]}, {"eps": 1.0}, "eps = 1 (outside [0, 1))"),
        ({"rewards": [[0.0, 1.0]]}, {"eps": -1e-4}, "negative eps"),
        ({"rewards": [[0.0, 1.0]]}, {"scale": "global"}, "unknown scale"),
        ({"rewards": [[0.0, 1.0]]}, {"degenerate": "skip"}, "unknown degenerate rule"),
    ]
    for inputs, conv, why in bad:
        out.append(Case(ADV, inputs, conventions=conv, group="invalid", result="invalid", flags=("InvalidInput",),
                        comment=why, provenance=generated(0, "fixed")))
    return out


def _baseline_cases() -> list[Case]:
    """grpo.advantages under the leave-one-out baseline and the batch whitening (vector set 1.3.0)."""
    out = []
    kinds = ("binary", "normal", "graded", "offset")
    sizes = [2, 4, 5, 8, 16, 3, 7, 12]
    for gi, group in enumerate(ADV_BASELINE_GROUPS):
        for i in range(9):
            seed = 7600 + 100 * gi + i
            r = S.rng(seed)
            b = int(r.integers(1, 17))
            g = int(sizes[(i + gi) % len(sizes)])
            if i == 8:
                b = max(b, 2)
            kind = kinds[i % len(kinds)]
            rewards = S.rounded(random_rewards(r, kind, b, g), dtype_of(i))
            out.append(adv_case(group, rewards, ("Random",), f"random {kind} rewards B={b}, G={g}"
                                + (", float32" if dtype_of(i) else ""), seed, f"{kind} rewards"))
        out.append(adv_case(group, [[0.0, 1.0, 1.0, 0.0]], ("ArticleRewards",), "the article's group (0,1,1,0): "
                            "leave-one-out baselines 2/3 and 1/3", 0, "fixed"))
        out.append(adv_case(group, [[1.0] * 4, [0.0] * 4, [0.0, 1.0, 0.0, 0.0], [0.5] * 4],
                            ("ZeroStd",), "all-equal groups (1, 0, 0.5) beside a mixed one", 0, "fixed"))
        out.append(adv_case(group, [[1.0] * 3, [0.25] * 3], ("ZeroStd",), "every group all-equal", 0, "fixed"))
        out.append(adv_case(group, [[0.1] * 7, [0.7] * 7, [0.0, 1.0, 0.5, 0.25, 0.0, 1.0, 1.0]],
                            ("ZeroStdRounding",), "0.1 and 0.7 seven times (float mean ≠ value)", 0, "fixed"))
        out.append(adv_case(group, [[1.0, 1.0, 1.0, 1.0 + 2.0 ** -40], [0.0, 0.0, 2.0 ** -40, 0.0]], ("TinyStd",),
                            "groups whose rewards differ by 2^−40", 0, "fixed"))
        out.append(adv_case(group, [[1e6, 1e6 + 1, 1e6 + 1, 1e6], [1e6 + 3, 1e6 - 2, 1e6 + 7, 1e6 + 1]],
                            ("LargeOffset",), "rewards near 1e6 differing by units", 0, "fixed"))
        out.append(adv_case(group, [[0.0], [1.0], [0.5], [-2.0], [3.25]], ("SingletonGroup",),
                            "G = 1 for every prompt", 0, "fixed"))
        out.append(adv_case(group, [[0.75]], ("SingletonGroup",), "a single reward (B = G = 1)", 0, "fixed"))
        for i in range(3):
            seed, grid = 23500 + 10 * gi + i, S.low_grid(i)
            r = S.rng(seed)
            b, g = int(r.integers(1, 17)), int(r.choice([2, 4, 5, 8, 16]))
            kind = kinds[i % len(kinds)]
            rewards = S.in_low(random_rewards(r, kind, b, g), grid)
            out.append(adv_case(group, rewards, ("Random", "LowPrecision"), f"random {kind} rewards B={b}, G={g}, "
                                f"exact in {S.grid_note(grid)}", seed, f"{kind} rewards rounded to the {grid} grid",
                                low=True))
    out.append(Case(ADV, {"rewards": [[0.0, 1.0]]}, conventions={"baseline": "median"}, group="invalid",
                    result="invalid", flags=("InvalidInput",), comment="unknown baseline",
                    provenance=generated(0, "fixed")))
    out.append(Case(ADV, {"rewards": [[0.0, 1.0]]}, conventions={"scale": "whitened"}, group="invalid",
                    result="invalid", flags=("InvalidInput",), comment="unknown scale (whitened, not whiten)",
                    provenance=generated(0, "fixed")))
    return out


# ============================================================================ clip


def _clip_cases() -> list[Case]:
    out = []
    p0 = {"eps_low": 0.2, "eps_high": None}
    # Article: ρ = 0.24/0.20 with A = 1 sits on the band's upper edge up to rounding.
    out.append(Case(CLIP, {"logp": [math.log(0.24)], "old_logp": [math.log(0.20)], "advantages": [1.0]}, params=p0,
                    conventions=CLIP_GROUPS["paper"], group="paper", flags=("Article", "BoundaryUlps"),
                    result="acceptable", comment="ρ = 0.24/0.20 = 1.2 = 1 + ε: C = 1.2 (gradient side by rounding)",
                    cotangents={"objective": [1.0]},
                    provenance=article(PPO_SECTION, "el cociente es 0.24/0.20=1.2")))
    out.append(Case(CLIP, {"logp": [math.log(1.5)], "old_logp": [0.0], "advantages": [1.0]}, params=p0,
                    conventions=CLIP_GROUPS["paper"], group="paper", flags=("Article",),
                    comment="A = 1, ε = 0.2, ρ = 1.5: terms 1.5 and 1.2 → C = 1.2", cotangents={"objective": [1.0]},
                    provenance=article(PPO_SECTION, "Con A=1, ε=0.2 y ρt=1.5, los dos términos son 1.5 y 1.2, "
                                       "por lo que Ct=1.2")))
    out.append(Case(CLIP, {"logp": [math.log(0.5)], "old_logp": [0.0], "advantages": [-1.0]}, params=p0,
                    conventions=CLIP_GROUPS["paper"], group="paper", flags=("Article",),
                    comment="A = −1, ρ = 0.5: terms −0.5 and −0.8 → C = −0.8", cotangents={"objective": [1.0]},
                    provenance=article(PPO_SECTION, "Con A=−1 y ρt=0.5, son −0.5 y −0.8, por lo que Ct=−0.8")))
    for gi, group in enumerate(CLIP_GROUPS):
        dual = CLIP_GROUPS[group]["dual_clip"]
        for i in range(36):
            seed = 8000 + 100 * gi + i
            r = S.rng(seed)
            n = int(r.choice([1, 3, 8, 16, 32, 64, 100])) if i < 24 else 512
            eps_low, eps_high = CLIP_PARAMS[i % len(CLIP_PARAMS)]
            spread = float(r.choice([0.05, 0.2, 0.5] if not dual else [0.2, 0.6, 1.2]))
            dtype = dtype_of(i)
            lp = S.rounded(S.logprobs(r, n), dtype)
            old = S.rounded(S.logprobs_near(r, lp, spread), dtype)
            adv = S.rounded(r.normal(0, 1, n).tolist(), dtype)
            lp = away_from_kinks(lp, old, clip_bounds(eps_low, eps_high, dual), dtype)
            out.append(clip_case(group, {"logp": lp, "old_logp": old, "advantages": adv},
                                 {"eps_low": eps_low, "eps_high": eps_high}, ("Random",),
                                 f"random N={n}, ε=({eps_low:g}, {eps_high if eps_high is not None else eps_low:g})"
                                 + (", float32" if dtype else ""), seed, "logprobs; old = logp + normal offset"))
        ext_lp = [0.0, -50.0, 0.0, -50.0, -690.0, -640.0, -1e-3, -50.0]
        ext_old = [-50.0, 0.0, -50.0, 0.0, -640.0, -690.0, -50.001, -1e-3]
        ext_adv = [1.0, 1.0, -1.0, -1.0, 0.5, -0.5, -2.0, 2.0]
        out.append(clip_case(group, {"logp": ext_lp, "old_logp": ext_old, "advantages": ext_adv}, p0,
                             ("ExtremeRatio",), "ratios e^±50 with both signs of A; probabilities ~1e−300",
                             8900 + gi, "fixed"))
        out.append(clip_case(group, {"logp": [-0.5, -3.0, -1.0, -2.0], "old_logp": [-1.5, -1.0, -1.0, -0.25],
                                     "advantages": [0.0, 0.0, 0.0, 0.0]}, p0, ("ZeroAdvantage",),
                              "A = 0 at ratios e, e^−2, 1, e^−1.75", 8910 + gi, "fixed"))
        for k, dtype in enumerate(("bfloat16", "float16")):
            seed = 8920 + 10 * gi + k
            r = S.rng(seed)
            eps_low, eps_high = CLIP_PARAMS[k]
            lp = S.in_dtype(S.logprobs(r, 24), dtype)
            old = S.in_dtype(S.logprobs_near(r, lp, 0.5), dtype)
            adv = S.in_dtype(r.uniform(-2, 2, 24).tolist(), dtype)
            lp = away_from_kinks(lp, old, clip_bounds(eps_low, eps_high, dual), dtype)
            out.append(clip_case(group, {"logp": lp, "old_logp": old, "advantages": adv},
                                 {"eps_low": eps_low, "eps_high": eps_high}, ("LowPrecision",),
                                 f"inputs exact in {dtype}", seed, f"logprobs rounded to {dtype}", low=True))
        for k, (eps_low, eps_high) in enumerate([(0.2, None), (0.2, 0.28)]):
            for dtype in (None, "float32"):
                out.append(_boundary_clip(group, eps_low, eps_high, dual, dtype, 8950 + 10 * gi + 2 * k
                                          + (dtype is not None)))
    dual = CLIP_GROUPS["dual-clip-3"]["dual_clip"]
    lp = [-0.1, -0.2, -0.05, -0.3, -1.0, -0.4, -0.7]
    ratios = [3.5, 10.0, math.exp(5.0), 2.5, 2.9, 1.1, 0.5]
    old = [a - math.log(q) for a, q in zip(lp, ratios)]
    out.append(clip_case("dual-clip-3", {"logp": lp, "old_logp": old, "advantages": [-1.0, -0.5, -2.0, -1.0,
                                                                                     -1.5, -1.0, 1.0]},
                          p0, ("DualClipActive",), f"A < 0 with ρ = 3.5, 10, e^5 (dual clip c = {dual:g} active), "
                          "ρ = 2.5, 2.9 (clipped branch), 1.1, and A > 0", 8990, "fixed"))
    bad = [
        ({"logp": [-1.0, -2.0], "old_logp": [-1.0, -2.0], "advantages": [1.0]}, {}, {}, "shapes disagree"),
        ({"logp": [math.nan], "old_logp": [-1.0], "advantages": [1.0]}, {}, {}, "NaN log-probability"),
        ({"logp": [-1.0], "old_logp": [math.inf], "advantages": [1.0]}, {}, {}, "+inf old log-probability"),
        ({"logp": [-math.inf], "old_logp": [-1.0], "advantages": [1.0]}, {}, {}, "−inf log-probability"),
        ({"logp": [-1.0], "old_logp": [-1.0], "advantages": [math.nan]}, {}, {}, "NaN advantage"),
        ({"logp": [-1.0], "old_logp": [-1.2], "advantages": [1.0]}, {"eps_low": -0.1}, {}, "negative eps_low"),
        ({"logp": [-1.0], "old_logp": [-1.2], "advantages": [1.0]}, {"eps_low": 1.0}, {}, "eps_low = 1"),
        ({"logp": [-1.0], "old_logp": [-1.2], "advantages": [1.0]}, {"eps_high": -0.2}, {}, "negative eps_high"),
        ({"logp": [-1.0], "old_logp": [-1.2], "advantages": [-1.0]}, {}, {"dual_clip": 1.0}, "dual_clip = 1"),
        ({"logp": [-1.0], "old_logp": [-1.2], "advantages": [-1.0]}, {}, {"dual_clip": 0.5}, "dual_clip < 1"),
    ]
    for inputs, params, conv, why in bad:
        out.append(Case(CLIP, inputs, params={**p0, **params}, conventions=conv, group="invalid", result="invalid",
                        flags=("InvalidInput",), comment=why, provenance=generated(0, "fixed")))
    return out


def _boundary_clip(group, eps_low, eps_high, dual, dtype, seed) -> Case:
    """Tokens whose ratio is within a few ulps (of binary64, or of float32 after rounding) of the
    band's edges (and of the dual-clip bound), with both signs of A."""
    hi = eps_low if eps_high is None else eps_high
    targets = [1 - eps_low, 1 + hi] + ([dual] if dual else [])
    lp, old, adv = [], [], []
    base = -1.5
    for t in targets:
        for k in (-2, 0, 2):
            for a in (1.0, -1.0):
                x = base + math.log(t)
                x = S.ulp_steps(x, k) if dtype is None else S.rounded([x], dtype)[0]
                lp.append(x)
                old.append(base)
                adv.append(a if not (dual and t == dual) else -abs(a))
    inputs = {"logp": lp, "old_logp": old, "advantages": adv}
    return clip_case(group, inputs, {"eps_low": eps_low, "eps_high": eps_high}, ("BoundaryUlps",),
                     "ratios within a few ulps of the band's edges" + (" and of the dual-clip bound" if dual else "")
                     + (" (float32 inputs)" if dtype else ""), seed, "fixed", result="acceptable")


# ============================================================================ aggregate


def _agg_cases() -> list[Case]:
    out = []
    lengths = [1, 2, 5, 8, 16, 32, 64, 100]
    for gi, group in enumerate(AGG_GROUPS):
        norm = group == "seq-mean-token-sum-norm"
        empty_flag, empty_result = rows_without_tokens({"mode": AGG_GROUPS[group]})
        for i in range(20):
            seed = 9000 + 100 * gi + i
            r = S.rng(seed)
            b = int(r.integers(1, 17))
            t = int(lengths[(i + gi) % len(lengths)])
            if i == 15:
                b, t = (16, 256) if gi < 2 else (8, 128)
            dtype = dtype_of(i)
            values = S.rounded(r.normal(0, 1, (b, t)).tolist(), dtype)
            mask = S.mask(r, b, t)
            norm_length = (None if i % 3 == 0 else float(r.choice([256, 1024, 4096]))) if norm else None
            flags = ("Random",) + (("Large",) if i == 15 and gi < 2 else ())
            out.append(agg_case(group, values, mask, flags, f"random B={b}, T={t}" + (", float32" if dtype else "")
                                + (f", L={norm_length:g}" if norm_length else ""), seed, "normal values, ragged mask",
                                norm_length))
        for k in range(2):
            seed = 9500 + 10 * gi + k
            r = S.rng(seed)
            b, t = 6, 12
            values = S.rounded(r.normal(0, 1, (b, t)).tolist(), "float32" if k == 0 else None)
            mask = S.with_empty_rows(S.mask(r, b, t), [1, 4] if k == 0 else [0])
            out.append(agg_case(group, values, mask, (empty_flag,), "rows without tokens among ragged rows",
                                seed, "normal values, ragged mask, emptied rows", 512.0 if norm and k else None,
                                result=empty_result))
        for k, dtype in enumerate(("bfloat16", "float16")):
            seed = 9600 + 10 * gi + k
            r = S.rng(seed)
            values = S.in_dtype(r.normal(0, 1, (4, 16)).tolist(), dtype)
            out.append(agg_case(group, values, S.mask(r, 4, 16), ("LowPrecision",), f"values exact in {dtype}",
                                seed, f"normal values rounded to {dtype}", low=True))
        r = S.rng(9700 + gi)
        values = r.normal(0, 1, (3, 8)).tolist()
        mask = S.mask(r, 3, 8, min_len=2)
        for i, row in enumerate(mask):
            for j, m in enumerate(row):
                if not m:
                    values[i][j] = 1e30 if (i + j) % 2 else -1e30
        out.append(agg_case(group, values, mask, ("MaskedValues",), "±1e30 at every masked position",
                            9700 + gi, "normal values; padding filled with ±1e30"))
        out.append(agg_case(group, [[0.0, 0.0, 0.0], [0.0, 2.5, 0.0]], [[0, 0, 0], [0, 1, 0]],
                            (empty_flag,), "a single token in the whole batch", 0, "fixed",
                            result=empty_result))
        out.append(agg_case(group, [[1.5, -0.25, 3.0, 0.125]], [[1, 1, 1, 1]], ("Random",),
                            "one full row (no padding)", 0, "fixed"))
    ok = [[1.0, 2.0], [3.0, 4.0]]
    bad = [
        ({"values": ok, "mask": [[0, 0], [0, 0]]}, {}, {}, "mask selects no token"),
        ({"values": ok, "mask": [[1, 2], [1, 0]]}, {}, {}, "mask value 2"),
        ({"values": ok, "mask": [[1, 0.5], [1, 0]]}, {}, {}, "mask value 0.5"),
        ({"values": ok, "mask": [[1, 1, 0], [1, 0, 0]]}, {}, {}, "mask shape differs"),
        ({"values": [[1.0, math.nan], [3.0, 4.0]], "mask": [[1, 1], [1, 1]]}, {}, {}, "NaN value"),
        ({"values": [[1.0, math.inf], [3.0, 4.0]], "mask": [[1, 0], [1, 1]]}, {}, {}, "+inf value (masked)"),
        ({"values": [1.0, 2.0], "mask": [1, 1]}, {}, {}, "rank-1 values"),
        ({"values": ok, "mask": [[1, 1], [1, 0]]}, {}, {"mode": "sum"}, "unknown mode"),
        ({"values": ok, "mask": [[1, 1], [1, 0]]}, {"norm_length": 0.0}, {"mode": "seq-mean-token-sum-norm"},
         "norm_length = 0"),
        ({"values": ok, "mask": [[1, 1], [1, 0]]}, {"norm_length": -4.0}, {"mode": "seq-mean-token-sum-norm"},
         "negative norm_length"),
    ]
    for inputs, params, conv, why in bad:
        out.append(Case(AGG, inputs, params={"norm_length": None, **params}, conventions=conv, group="invalid",
                        result="invalid", flags=("InvalidInput",), comment=why, provenance=generated(0, "fixed")))
    return out


def cases() -> list[Case]:
    # the sequence-ratio cases come last: the cases that were already there keep their places
    return (_adv_cases() + _clip_cases() + _agg_cases() + grpo_loss.token_cases() + grpo_low.cases()
            + grpo_loss.sequence_cases() + grpo_loss.library_cases() + grpo_eps.per_row_cases() + _baseline_cases()
            + grpo_rollout.cases() + grpo_gated.cases() + grpo_eps.per_row_cases("token-mean", 33500)
            + grpo_cov.cases() + grpo_eps.aggregate_cases() + grpo_eps.loss_cases() + grpo_beta0.cases()
            + grpo_tis.cases())


SCALES = grpo_scales.SCALES
# grpo.rollout_correction and the cases of vector set 1.5.0 (grpo_cov) keep their groups and flags in
# their own modules, as do those of vector set 1.7.0 (grpo_eps, grpo_beta0, grpo_tis)
GROUPS = {**GROUPS, **grpo_rollout.GROUPS, **grpo_cov.GROUPS, **grpo_eps.GROUPS, **grpo_beta0.GROUPS,
          **grpo_tis.GROUPS}
NOTES = {**NOTES, **grpo_rollout.NOTES, **grpo_cov.NOTES, **grpo_tis.NOTES}
