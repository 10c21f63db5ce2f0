"""Defects transcribed from public bug reports in libraries lossproof has no adapter for, each a
small torch function in the target format (docs/targets.md) beside its corrected twin: code not
written for lossproof's tests, to measure whether a check catches real defects and whether the
diagnosis names their cause (``test_transcribed.py`` asserts that every defect fails, that the
diagnosis names ``expected`` (or one of ``also``) and no other cause, and that every twin passes
with no diagnosis).

``expected`` is the cause a reader of the report would name, in the words of the diagnosis kinds
(conformance/diagnose.py): ``convention`` (computes another declared convention), ``condition``
(fails only where a predicate on the inputs or parameters holds), ``factor`` (a constant factor),
``factor-tracking`` (a factor that follows a parameter or a count: T², 1/V, a token count),
``constant`` (a constant, an eps or offset, other than the declared one), ``sign`` (a line that
says "(the sign)": a factor −1, a parameter taken as its negative), ``input-ignored``,
``value-only`` (the value is wrong, the gradient right), ``non-finite``, ``cancellation``,
``known-form`` (a wrong formula of ``conformance.bugforms`` whose line states the report's defect),
``formula`` (another formula that none of those names).
"""
from __future__ import annotations

from dataclasses import dataclass

from transcribed import distill, lm, prefs, rl


@dataclass(frozen=True)
class Defect:
    id: str
    library: str
    file: str
    link: str
    description: str
    expected: str
    objective: str
    defect: object              # the function as the library wrote it
    twin: object                # the same function corrected
    conventions: dict | None = None   # the declaration both carry (None: the paper's)
    dtypes: tuple = ("float64", "float32")
    also: tuple = ()            # other causes that name the defect as exactly (a convention it computes)

    def target(self, fixed: bool) -> dict:
        fn = self.twin if fixed else self.defect
        spec = {"name": f"{self.id}{'-twin' if fixed else ''}", "framework": "torch",
                "objectives": {self.objective: fn}, "dtypes": list(self.dtypes)}
        if self.conventions is not None:
            spec["conventions"] = {self.objective: self.conventions}
        return spec


CE = "lm.cross_entropy"
CE_REDUCTIONS = {"reduction": ["mean", "sum", "none"]}

DEFECTS = (
    Defect("torchtune-microbatch-normalisation", "torchtune", "recipes/full_finetune_single_device.py",
           "https://github.com/meta-pytorch/torchtune/pull/1875",
           "Each micro-batch's loss divided by its own non-padding tokens, not by the tokens of the "
           "whole accumulated batch (num_items / normalizer ignored).",
           "factor-tracking", CE, lm.ce_microbatch_count, lm.cross_entropy, CE_REDUCTIONS, also=("convention",)),
    Defect("open-lm-zloss-square-of-mean", "open_lm", "z-loss of the training loss (the PR title; file not named in the report)",
           "https://github.com/mlfoundations/open_lm/pull/92",
           "The z-loss is ζ·(mean lse)² instead of ζ·mean(lse²).",
           "condition", CE, lm.ce_zloss_square_of_mean, lm.cross_entropy, CE_REDUCTIONS,
           also=("known-form",)),   # the form 'z-loss of the mean': ζ·(mean lse)², the report's words
    Defect("pytorch-smoothing-counts-ignored", "PyTorch", "torch.nn.CrossEntropyLoss(label_smoothing=…) (the issue's reproduction)",
           "https://github.com/pytorch/pytorch/issues/73205",
           "Label smoothing's uniform part is summed over ignored tokens too.",
           "condition", CE, lm.ce_smoothing_counts_ignored, lm.cross_entropy, CE_REDUCTIONS),
    Defect("utils-pytorch-denominator-counts-padding", "eladhoffer/utils.pytorch", "cross_entropy.py",
           "https://github.com/eladhoffer/utils.pytorch/issues/4",
           "The smoothed cross-entropy is averaged over every token, padding included.",
           "condition", CE, lm.ce_denominator_counts_padding, lm.cross_entropy, CE_REDUCTIONS,
           also=("factor-tracking",)),   # loss·valid/all: a factor that tracks the ignored labels
    Defect("megatron-smoothing-local-vocabulary", "Megatron-LM", "megatron/core/tensor_parallel/cross_entropy.py",
           "https://github.com/NVIDIA/Megatron-LM/issues/7464",
           "Vocabulary-parallel label smoothing averages the log-probabilities over the rank's "
           "shard of the vocabulary only.",
           "condition", CE, lm.ce_smoothing_local_vocab, lm.cross_entropy, CE_REDUCTIONS),
    Defect("megatron-gathered-logits-log-tp", "Megatron-LM", "GPTModel labels path with gathered logits (the issue's table, row 2)",
           "https://github.com/NVIDIA/Megatron-LM/issues/7452",
           "With gathered logits the loss is the right one plus log(TP); the gradient is unchanged.",
           "value-only", CE, lm.ce_plus_log_tp, lm.cross_entropy, CE_REDUCTIONS),
    Defect("opennmt-smoothing-over-other-classes", "OpenNMT-py", "onmt/utils/loss.py (LabelSmoothingLoss)",
           "https://github.com/OpenNMT/OpenNMT-py/issues/1463",
           "The smoothing mass is spread over the V − 1 classes other than the label, not over all V.",
           "factor-tracking", CE, lm.ce_smoothing_over_other_classes, lm.cross_entropy, CE_REDUCTIONS,
           also=("condition",)),   # fails only where label_smoothing is set: the smoothing is applied wrong
    Defect("conve-smoothing-one-over-v", "ConvE", "main.py",
           "https://github.com/TimDettmers/ConvE/issues/55",
           "The smoothed target adds 1/V to every class instead of ε/V.",
           "constant", CE, lm.ce_smoothing_adds_one_over_v, lm.cross_entropy, CE_REDUCTIONS,
           also=("condition",)),   # fails only where label_smoothing is set: the smoothing is applied wrong
    Defect("unsloth-zoo-softcap-times-logit", "unsloth-zoo", "unsloth_zoo/rl_replacements.py",
           "https://github.com/unslothai/unsloth-zoo/pull/593",
           "The soft cap is z·tanh(z/s) instead of s·tanh(z/s).",
           "condition", CE, lm.ce_softcap_times_logit, lm.cross_entropy, CE_REDUCTIONS),
    Defect("cut-cross-entropy-softcap-never-applied", "apple/ml-cross-entropy",
           "cut_cross_entropy/transformers/gemma2.py",
           "https://github.com/apple/ml-cross-entropy/issues/48",
           "The Gemma 2 patch never passes softcap to the loss.",
           "condition", CE, lm.ce_softcap_never_applied, lm.cross_entropy, CE_REDUCTIONS, also=("convention",)),
    Defect("pytorch-ood-entropy-nan", "pytorch-ood", "the Entropy detector (issue #84)",
           "https://github.com/kkirchheim/pytorch-ood/pull/85",
           "−Σ q·log q gives 0·(−inf) = NaN on rows with impossible tokens.",
           "non-finite", "lm.entropy", lm.entropy_zero_times_log_zero, lm.entropy),
    Defect("slime-logprobs-without-temperature", "slime", "the trainer's log-probabilities (the PR title)",
           "https://github.com/THUDM/slime/pull/557",
           "The trainer's log-probabilities ignore the sampling temperature.",
           "convention", "lm.token_logprobs", lm.token_logprobs_no_temperature, lm.token_logprobs,
           also=("condition",)),
    Defect("rl-kernel-temperature-twice", "RL-Kernel", "rl_engine/kernels/sampling.py",
           "https://github.com/RL-Align/RL-Kernel/issues/81",
           "The logits are divided by the temperature twice: softmax(z/T²).",
           "factor-tracking", "lm.token_logprobs", lm.token_logprobs_temperature_twice, lm.token_logprobs,
           also=("condition", "convention")),
    Defect("kimi-audio-temperature-after-log-softmax", "Kimi-Audio", "the sampler (sample_text_logits, "
           "sample_audio_logits)", "https://github.com/MoonshotAI/Kimi-Audio/pull/161",
           "The temperature is applied after log_softmax (log q / T), not to the logits before it.",
           "condition", "lm.token_logprobs", lm.token_logprobs_temperature_after_log_softmax, lm.token_logprobs),
    Defect("areal-kl-estimator-fallthrough", "AReaL", "areal/utils/data.py",
           "https://github.com/areal-project/AReaL/pull/408",
           "A chain of ifs without elif: every kl_estimator value ends up computing k3.",
           "convention", "kl.estimator", rl.kl_estimator_fallthrough, rl.kl_estimator,
           {"kind": ["k3", "k1", "k2", "abs"], "clamp": [None, 10.0]}),
    Defect("rocket-learn-kl-reversed-ratio", "rocket-learn", "the PPO KL estimate (file not named in the report)",
           "https://github.com/Rolv-Arild/rocket-learn/pull/12",
           "The k3 estimator formed from the log-ratio of the wrong direction.",
           "sign", "kl.estimator", rl.kl_estimator_reversed_ratio, rl.kl_estimator,
           also=("known-form",)),   # the form 'log-ratio reversed': log(π/π_ref) where k3 takes log(π_ref/π)
    Defect("pipelinerl-first-group-statistics", "PipelineRL", "advantage computation introduced in PR #37 (file not named in the report)",
           "https://github.com/ServiceNow/PipelineRL/pull/54",
           "The reward mean and standard deviation come from the first rollouts only and are applied "
           "to every group.",
           "condition", "grpo.advantages", rl.advantages_first_group_stats, rl.advantages,
           also=("known-form",)),   # the form "first group's statistics": the first group's mean and std for all
    Defect("nemo-rl-one-pass-variance", "NeMo-RL", "calculate_baseline_and_std_per_prompt",
           "https://github.com/NVIDIA-NeMo/RL/pull/4161",
           "The group std as √(E[x²] − E[x]²): a rounding residue where the std is 0, every digit lost for "
           "rewards far from 0.",
           "cancellation", "grpo.advantages", rl.advantages_one_pass_variance, rl.advantages,
           also=("degenerate-group",)),
    Defect("rlinf-dual-clip-ignored", "RLinf", "policy_loss (file not named in the report)",
           "https://github.com/RLinf/RLinf/issues/316",
           "clip_ratio_c (the dual clip) is accepted but not used by the policy loss.",
           "condition", "grpo.clip", rl.clip_dual_ignored, rl.clip,
           {"dual_clip": [None, 3.0], "log_ratio_clamp": [None, 20.0]}, also=("convention",)),
    Defect("trax-clip-without-advantage", "trax", "PPOLoss (file not named in the report)",
           "https://github.com/google/trax/pull/396",
           "The clipped branch is clip(ρ) itself, not clip(ρ)·A.",
           "formula", "grpo.clip", rl.clip_without_advantage, rl.clip),
    Defect("open-instruct-batch-token-mean", "open-instruct", "open_instruct/grpo_vllm_thread_ray_gtrl.py",
           "https://github.com/allenai/open-instruct/issues/636",
           "The GRPO loss is normalised over the batch's tokens, not per sequence then over sequences.",
           "convention", "grpo.aggregate", rl.aggregate_batch_token_mean, rl.aggregate),
    Defect("ragen-kl-loss-maximised", "RAGEN (verl fork)", "the actor's KL loss, verl commit a65c9157",
           "https://github.com/mll-lab-nu/RAGEN/issues/58",
           "The KL loss enters the actor loss with the wrong sign: the KL to the reference is maximised.",
           "sign", "grpo.loss", rl.grpo_loss_kl_maximised, rl.grpo_loss),
    Defect("ms-swift-dpo-loss-type-ignored", "ms-swift", "swift/megatron/trainers/dpo_trainer.py",
           "https://github.com/modelscope/ms-swift/pull/10167",
           "Megatron DPO never passes loss_type: hinge and ipo train as sigmoid DPO.",
           "convention", "dpo.loss", prefs.dpo_loss_type_ignored, prefs.dpo_loss,
           {"loss_type": ["sigmoid", "hinge", "ipo"]}),
    Defect("axolotl-orpo-log-one-minus-exp", "axolotl", "src/axolotl/core/trainers/base.py",
           "https://github.com/axolotl-ai-cloud/axolotl/pull/3910",
           "ORPO's log odds use log(1 − exp(p)), which loses every digit as p approaches 0.",
           "cancellation", "preference.orpo", prefs.orpo_log_one_minus_exp, prefs.orpo),
    Defect("colossalai-orpo-offset", "ColossalAI", "applications/ColossalChat/coati/models/loss.py",
           "https://github.com/hpcaitech/ColossalAI/pull/6407",
           "ORPO's log odds use log(1.0001 − exp(p)): a constant 1e-4 added inside the logarithm.",
           "constant", "preference.orpo", prefs.orpo_offset_one_point_0001, prefs.orpo,
           also=("known-form",)),   # the form 'offset inside the log-odds': log(1.0001 − e^p), the constant 1e-4
    Defect("deepspeed-chat-log-of-sigmoid", "DeepSpeed-Chat", "applications/DeepSpeed-Chat/training/utils/"
           "model/reward_model.py", "https://github.com/deepspeedai/DeepSpeedExamples/issues/423",
           "The reward loss is −log(sigmoid(d)): infinite once σ(d) underflows.",
           "non-finite", "reward.pairwise", prefs.pairwise_log_of_sigmoid, prefs.pairwise),
    Defect("ms-swift-reward-margin-broadcast", "ms-swift", "the Transformers and Megatron reward trainers and the RLHF collator",
           "https://github.com/modelscope/ms-swift/pull/9927",
           "Rewards [B, 1] minus margins [B] broadcast to [B, B]: every pair mixed with every margin.",
           "condition", "reward.pairwise", prefs.pairwise_margin_broadcast, prefs.pairwise,
           also=("known-form",)),   # the form 'margin broadcast': the mean over every pair and every margin
    Defect("distiller-no-t2", "IntelLabs/distiller", "the knowledge-distillation loss (file not named in the report)",
           "https://github.com/IntelLabs/distiller/issues/122",
           "The soft distillation term is not multiplied by T².",
           "factor-tracking", "distill.hinton", distill.hinton_no_t2, distill.hinton, also=("convention",)),
    Defect("kd-pytorch-kldiv-elementwise-mean", "knowledge-distillation-pytorch", "model/net.py",
           "https://github.com/haitongli/knowledge-distillation-pytorch/issues/2",
           "nn.KLDivLoss()'s default elementwise mean divides the KL by N·V instead of N.",
           "factor-tracking", "distill.hinton", distill.hinton_kldiv_elementwise_mean, distill.hinton,
           also=("known-form",)),
    Defect("aprender-balance-chosen-probability", "aprender", "compute_load_balance_loss (Rust; transcribed to torch)",
           "https://github.com/paiml/aprender/pull/2162",
           "P_e accumulates the router probability only over the top-k selected experts.",
           # the form "P from the top-k weights" states this defect (P over the top-k routing weights only)
           "known-form", "moe.load_balancing", distill.load_balancing_chosen_probability, distill.load_balancing),
)
