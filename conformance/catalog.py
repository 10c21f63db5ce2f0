"""The objective catalog: ids, argument names, conventions, outputs and gradients.

This module is the contract (DESIGN §4). Every backend — ``refimpl.exact``, ``refimpl.arrays``,
``refimpl.torch`` and every third-party target — implements ``<family>.<name>`` as a function
taking these argument names as keywords. A parameter's default is its *paper default*: a
target that does not declare a convention is checked against that value.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Input:
    name: str
    shape: str                   # symbolic, e.g. "N,V" or "...,V"
    kind: str = "float"          # float | int | mask
    neg_inf: bool = False        # −inf allowed (logits of impossible tokens)
    optional: bool = False       # may be absent (None); backends take it after the params


@dataclass(frozen=True)
class Param:
    name: str
    default: object
    choices: tuple = ()
    source: str = ""             # where the paper default comes from
    convention: bool = False     # a behaviour a target declares (vs an argument it is passed)
    added: str | None = None     # the vector-set version that introduced it, if it came later


@dataclass(frozen=True)
class Coupling:
    """A setting under which a batch loss couples the rows of a vector, so that no row partition
    reproduces it: ``param`` holding one of ``values``, and why."""
    param: str
    values: tuple
    why: str


# How a step objective's global mean is normalised (``Objective.step``); "" for no step objective.
STEP_MEANS = ("", "count", "labels", "terms")

# The fast built-in backends a catalog entry can claim (refimpl.arrays: NumPy/CuPy; refimpl.torch).
FAST_BACKENDS = ("arrays", "torch")


@dataclass(frozen=True)
class Objective:
    id: str
    summary: str
    inputs: tuple[Input, ...]
    params: tuple[Param, ...]
    outputs: tuple[str, ...]
    grads: tuple[str, ...]       # inputs differentiated (VJP with a stored cotangent)
    source: str
    reduction: str = ""          # input whose element count sets the reduction length
    low_precision: bool = True   # vectors exist for bfloat16/float16 inputs
    # The tolerance model's base multiplier of the unit roundoff (conformance.compare): the number of
    # roundings a careful implementation makes on its critical path, before the growth with the
    # reduction length. Every objective states it; there is no default to inherit by accident.
    k_base: float = 0.0
    # Outputs that are constants by definition (advantages, PPO eq. 7's Â; the sg(·) future cost of
    # Proximal KL; rollout-correction weights): a torch target's outputs must carry no gradient.
    detached: bool = False
    # The fast built-in backends that implement it (refimpl.<backend>.<family>.<name>), beside the
    # exact and certified references every objective has. refimpl.torch accumulates bfloat16/float16
    # inputs in float32 for every objective it implements.
    backends: tuple[str, ...] = ("arrays", "torch")
    generator: str = ""          # module of conformance.generate that builds its vectors; "" = its family
    docs_page: str = ""          # the page that documents it; "" = docs/<family>.md
    docs_examples: tuple[str, ...] = ()   # uids of the worked examples its page shows (none: chosen by the page)
    # The distributed checks (DESIGN §11). ``step``: how the global mean of a batch loss whose rows
    # trainers split (``--partition``) is normalised — "count" (the mask's tokens or sequences as its
    # aggregation says, the rows where there is no mask: conformance.targets.steps.normaliser_of),
    # "labels" (the labels that are not ignore_index), "terms" (the policy and the KL term, each by its
    # own count); "" for an objective no step is declared for. ``step_loss``: the output a step's
    # logged loss is judged against. ``not_step``: why a batch loss is no step objective.
    # ``split_coupled``: the settings under which a vector's rows cannot be split at all.
    # ``vocab_sharded``: a full-vocabulary function a vocabulary-parallel one (``--shard-vocab``) may be
    # declared for.
    step: str = ""
    step_loss: str = ""
    not_step: str = ""
    split_coupled: tuple[Coupling, ...] = ()
    vocab_sharded: bool = False

    def __post_init__(self):
        if not self.k_base > 0:
            raise ValueError(f"catalog entry {self.id}: k_base must be a positive number of roundings "
                             f"(lossproof.conformance.compare's tolerance base), got {self.k_base!r}")
        if self.step not in STEP_MEANS or bool(self.step) != bool(self.step_loss) or (self.step and self.not_step):
            raise ValueError(f"catalog entry {self.id}: a step objective states step (one of "
                             f"{', '.join(m for m in STEP_MEANS if m)}) and step_loss, and no not_step")
        unknown = set(self.backends) - set(FAST_BACKENDS)
        if unknown:
            raise ValueError(f"catalog entry {self.id}: unknown backend(s) {sorted(unknown)} "
                             f"(the fast backends are {', '.join(FAST_BACKENDS)})")

    @property
    def family(self) -> str:
        return self.id.split(".")[0]

    @property
    def generator_module(self) -> str:
        return f"lossproof.conformance.generate.{self.generator or self.family}"

    @property
    def page(self) -> str:
        return self.docs_page or f"docs/{self.family}.md"

    @property
    def vector_file(self) -> str:
        """Its vector file, relative to the vector directory."""
        return f"{self.family}/{self.name}.json"

    @property
    def name(self) -> str:
        return self.id.split(".")[1]

    @property
    def defaults(self) -> dict:
        return {p.name: p.default for p in self.params}

    @property
    def conventions(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params if p.convention)

    def uid_conventions(self, conventions: dict) -> dict:
        """The conventions a case's uid hashes: all of them, except a convention added after the
        case's objective had released vectors while it holds its default — the cases that existed
        before it keep their uids (papers cite them)."""
        late = {p.name: p.default for p in self.params if p.convention and p.added}
        return {k: v for k, v in conventions.items() if k not in late or v != late[k]}

    def grads_of(self, inputs: dict) -> tuple[str, ...]:
        """The differentiated inputs a call or a vector holds: an optional one it omits (None or
        absent: a bias not passed) has no gradient to expect."""
        return tuple(g for g in self.grads if inputs.get(g) is not None)

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)


# Hinton et al. 2015 §2 call the soft term "the cross entropy with the soft targets"; the catalog's
# default is the KL form of the article ([reading-math-3]), equal up to the teacher's entropy H(p).
_SOFT_TERM_SOURCE = ("[reading-math-3] §Destilación clásica writes KL(p‖q); Hinton et al. 2015 §2 write the "
                     "cross-entropy −Σ p log q = KL(p‖q) + H(p) (same gradient)")

_LOGITS_NOTE = "−inf marks an impossible token"

# How a preference loss's NLL term on the chosen response is normalised (per pair i, chosen sequence
# log-probability c_i over n_i tokens): −c_i/n_i, −c_i, or −c_i·B/Σ_j n_j (the pair's share of the batch
# token mean, so that the mean over pairs is −Σc/Σn).
_NLL_AGGREGATIONS = (None, "seq-mean-token-mean", "seq-mean-token-sum", "token-mean")  # None: no NLL term

# Token trees (family ``tabular``) travel as arrays; this is their canonical order.
_TREE_ENCODING = (
    "Tree encoding: params vocab V (≥ 2), horizon H (≥ 1) and eos (a token id or None) fix the tree; a "
    "sequence ends when it emits eos or reaches length H. Prefix order (rows P of every policy): the "
    "non-terminal prefixes breadth first — by length, then lexicographically — starting with the empty "
    "prefix. Leaf order (rewards[L]): for each prefix in that order, its children s·a that end the "
    "sequence, by token a. A policy row is one distribution with full support (within 1e-9 of summing "
    "to 1; the exact reference divides by the exact row sum).")
_TREE_PARAMS = (
    Param("vocab", None, source="tree: V tokens (required)"),
    Param("horizon", None, source="tree: maximal length H (required)"),
    Param("eos", None, source="tree: no end-of-sequence token unless given"),
)
TABULAR_RULES = tuple(r + s for s in ("", "_on_policy") for r in (
    "proximal_kl", "proximal_kl_no_ratio", "own_token_kl", "grpo_k3", "grpo_k3_ratio_weighted", "sequence_is",
    "future_clipped", "future_window", "whole_cost_clipped", "ratio_capped", "sigma_normalized",
    "gspo", "cispo", "sequence_tis", "kl_in_reward"))

# Over which classes label smoothing spreads ε (lm.cross_entropy, lm.linear_cross_entropy).
_SMOOTHING_CLASSES_SOURCE = ("all V classes, PyTorch's definition (torch.nn.functional.cross_entropy; Szegedy et al. "
                             "2016 §7: the target (1−ε)·e_y + ε/V); 'others': the V − 1 classes other than the label, "
                             "target (1−ε)·e_y + ε/(V−1) off y — Megatron-core 0.16.1 "
                             "megatron/core/tensor_parallel/cross_entropy.py _VocabParallelCrossEntropy "
                             "(smoothing = ε·V/(V − 1), after NeMo's smoothed cross-entropy)")

# Which masked means mean_eps enters (grpo.aggregate, grpo.loss, ppo.entropy_bonus).
_MEAN_EPS_SCOPE_SOURCE = ("'per-row': only each row's token count |o_i| + ε of 'seq-mean-token-mean' — verl 0.9.1 "
                          "trainer/ppo/core_algos.py agg_loss and OpenRLHF 0.11.2 aggregate_loss, whose token-mean "
                          "divides by the token count alone; 'every': every masked mean Σ m·x / (Σ m + ε), "
                          "token-mean's too — torchtune torchtune/rlhf/rewards.py masked_mean (mask.sum() + 1e-8)")
_EVERY_MEAN_COUPLED = Coupling("mean_eps_scope", ("every",),
                               "token-mean adds ε once to the whole batch's token count: no division of micro-batch "
                               "sums by a global count reproduces it")

OBJECTIVES: tuple[Objective, ...] = (
    Objective(
        "distill.softmax", "Softmax with temperature: q_i = exp(z_i/T) / Σ_j exp(z_j/T).",
        (Input("logits", "...,V", neg_inf=True),),
        (Param("temperature", 1.0, source="Hinton et al. 2015 §2"),),
        ("probs",), ("logits",), "Hinton et al. 2015 §2; [reading-math-3] §Destilación clásica",
        reduction="logits", k_base=4.0),
    Objective(
        "distill.hinton",
        "(1−λ)·CE(q^(1), y) + λ·s·KL(p^(T)‖q^(T)), s = T² when t2_scale; mean over N.",
        (Input("student_logits", "N,V", neg_inf=True), Input("teacher_logits", "N,V", neg_inf=True),
         Input("labels", "N", kind="int")),
        (Param("temperature", 1.0), Param("alpha", 0.5),
         Param("t2_scale", True, (True, False), "Hinton et al. 2015 §2 (T² keeps gradient scale)", convention=True),
         Param("soft_term", "kl", ("kl", "cross_entropy"), _SOFT_TERM_SOURCE, convention=True, added="1.3.0")),
        ("loss",), ("student_logits",), "Hinton et al. 2015 §2; [reading-math-3] §Destilación clásica",
        reduction="student_logits", k_base=8.0,
        vocab_sharded=True),
    Objective(
        "distill.token_kl",
        "Full-vocabulary token KL: reverse Σ q log(q/p) (student first) or forward Σ p log(p/q).",
        (Input("student_logits", "N,V", neg_inf=True), Input("teacher_logits", "N,V", neg_inf=True)),
        (Param("direction", "reverse", ("reverse", "forward"), "MiniLLM §2.1 eq. 1; DeepSeek-V4 §5.1.2 eq. 29", convention=True),
         Param("temperature", 1.0),
         Param("soft_term", "kl", ("kl", "cross_entropy"), _SOFT_TERM_SOURCE + "; 'cross_entropy' only with "
               "direction='forward'", convention=True, added="1.3.0")),
        ("kl",), ("student_logits",), "MiniLLM §2.1 eq. 1; [reading-math-3] §Destilación on-policy",
        reduction="student_logits", k_base=8.0,
        vocab_sharded=True),
    Objective(
        "distill.symmetric_kl",
        "w·KL(p‖q) + (1−w)·KL(q‖p) per row (p teacher, q student, both at temperature T).",
        (Input("student_logits", "N,V", neg_inf=True), Input("teacher_logits", "N,V", neg_inf=True)),
        (Param("forward_weight", 0.5, source="equal weights: half of Jeffreys' symmetrised divergence; DistiLLM "
               "(Ko et al. 2024) repository distillm/losses.py symmetric_kl weighs the reverse term lam = 0.9"),
         Param("temperature", 1.0)),
        ("kl",), ("student_logits",),
        "Jeffreys 1946 (symmetrised KL); DistiLLM (Ko et al. 2024, arXiv 2402.03898) baseline, "
        "repository distillm/losses.py symmetric_kl",
        reduction="student_logits", k_base=8.0),
    Objective(
        "distill.generalized_jsd",
        "β·KL(p‖m) + (1−β)·KL(q‖m), m = β·p + (1−β)·q (p teacher, q student), per row.",
        (Input("student_logits", "N,V", neg_inf=True), Input("teacher_logits", "N,V", neg_inf=True)),
        (Param("beta", 0.5), Param("temperature", 1.0),
         Param("endpoints", "limit", ("limit", "kl"),
               "the continuous formula; TRL/Liger special-case β=0 → KL(p‖q), β=1 → KL(q‖p)", convention=True)),
        ("jsd",), ("student_logits",), "Agarwal et al. 2024 (GKD) §3 eq. 2 (generalized JSD)",
        reduction="student_logits", k_base=8.0,
        vocab_sharded=True),
    Objective(
        "distill.skew_kl",
        "Skew KL: forward KL(p‖αp + (1−α)q) or reverse KL(q‖αq + (1−α)p) (p teacher, q student, both at T), "
        "per row.",
        (Input("student_logits", "N,V", neg_inf=True), Input("teacher_logits", "N,V", neg_inf=True)),
        (Param("alpha", 0.1, source="DistiLLM (Ko et al. 2024) §3; official code distillm/losses.py lam=0.1"),
         Param("direction", "forward", ("forward", "reverse"),
               "DistiLLM §3: α-SKL, KL(p‖αp + (1−α)q), the paper's skew KL", convention=True),
         Param("temperature", 1.0)),
        ("kl",), ("student_logits",), "DistiLLM (Ko et al. 2024, arXiv 2402.03898) §3 (α-SKL, α-SRKL)",
        reduction="student_logits", k_base=8.0),
    Objective(
        "distill.tvd",
        "Total variation distance ½·Σ_v |q_v − p_v| (p teacher, q student, both at T), per row; at a tie "
        "q_v = p_v the subgradient takes sign(0) = 0.",
        (Input("student_logits", "N,V", neg_inf=True), Input("teacher_logits", "N,V", neg_inf=True)),
        (Param("temperature", 1.0),),
        ("tvd",), ("student_logits",), "total variation distance (its definition); Liger-Kernel 0.8.5 ops/tvd.py "
        "(0.5·Σ|p − q|, gradient 0 where p == q); DistiLLM official code distillm/losses.py tv_distance",
        reduction="student_logits", k_base=8.0),
    Objective(
        "distill.sparse_kl",
        "Forward KL over a top-k teacher, Σ_k p_k (log p_k − log q_{i_k}) per row: p_k = exp(teacher_logps) at "
        "the distinct ids i_k (−inf: padding, no term), q = softmax(z/T) (the temperature divides the student "
        "only); renormalize 'none' (p as stored, the student's full log q), 'teacher' (p over its top-k), "
        "'both' (p and q over the ids) or 'tail' (p and q as they are plus a (K+1)-th bucket 1 − Σ p, 1 − Σ q: "
        "the KL over K+1 buckets; Σ p ≤ 1 exactly); times T² when t2_scale.",
        (Input("student_logits", "N,V", neg_inf=True), Input("teacher_ids", "N,K", kind="int"),
         Input("teacher_logps", "N,K", neg_inf=True)),
        (Param("renormalize", "none", ("none", "teacher", "both", "tail"),
               "the top-k estimate as stored, without renormalisation or tail: verl 0.9.1 forward_kl_topk "
               "(verl/trainer/distillation/fsdp/losses.py compute_forward_kl_topk); the estimate Anshumann et al. "
               "2025 (arXiv 2503.16870) call biased", convention=True),
         Param("temperature", 1.0),
         Param("t2_scale", False, (True, False), "no T² in verl 0.9.1 forward_kl_topk or TRL 1.16.0 IW-OPD; "
               "axolotl's top-k KD loss (src/axolotl/integrations/kd/topk_logprob/forward_kl.py loss, "
               "'Multiply by T^2 (classical KD scaling)') multiplies by T² as Hinton et al. 2015 §2",
               convention=True, added="1.7.0")),
        ("kl",), ("student_logits",),
        "top-k (sparse) knowledge distillation: Anshumann et al. 2025 (arXiv 2503.16870, ACL 2025) on caching a "
        "teacher's top-k; verl 0.9.1 forward_kl_topk; TRL 1.16.0 IW-OPD _compute_server_forward_kl_loss "
        "(loss_add_tail False: 'both'; True, its default: 'tail', _add_tail_bucket)",
        reduction="student_logits", k_base=8.0),
    Objective(
        "kl.estimator", "Sampled KL estimators with log r = ref_logp − logp: k1 = −log r, "
        "k2 = (log r)²/2, k3 = r − log r − 1, abs = |log r|; optional clamp of the value to [−c, c].",
        (Input("logp", "N"), Input("ref_logp", "N")),
        (Param("kind", "k3", ("k1", "k2", "k3", "abs"), "DeepSeekMath §4.1.1 eq. 4", convention=True),
         Param("clamp", None, source="no clamp in the papers", convention=True)),
        ("value",), ("logp",), "Schulman 2020; DeepSeekMath §4.1.1 eq. 4", k_base=4.0),
    Objective(
        "dpo.loss", "Per-pair DPO loss of the margin Δ = (π_c − ref_c) − (π_r − ref_r) in log space, "
        "plus rpo_alpha times the chosen response's NLL (RPO).",
        (Input("policy_chosen_logps", "B"), Input("policy_rejected_logps", "B"),
         Input("reference_chosen_logps", "B"), Input("reference_rejected_logps", "B"),
         Input("chosen_lengths", "B", kind="int", optional=True)),
        (Param("beta", 0.1), Param("loss_type", "sigmoid", ("sigmoid", "hinge", "ipo", "cdpo", "robust", "exo_pair",
                                                           "nca_pair", "bco_pair", "sppo_hard", "aot",
                                                           "aot_unpaired", "apo_zero", "apo_down", "discopop"),
                                    "DPO §4 eq. 7", convention=True),
         Param("label_smoothing", 0.0, source="DPO eq. 7 has none"),
         Param("discopop_tau", 0.05, source="DiscoPOP (Lu et al. 2024) eq. 5: τ = 0.05"),
         Param("reward_shift", 0.0, source="BCO (Jung et al. 2024) §3 shifts by the running reward mean δ; "
               "TRL 1.16.0 and Liger 0.8.5 bco_pair use δ = 0"),
         Param("rpo_alpha", 0.0, source="DPO eq. 7 has no NLL term; RPO (Pang et al. 2024, arXiv 2404.19733) §2 "
               "adds the chosen response's NLL (its weight; nonzero only with an nll_aggregation)", added="1.3.0"),
         Param("nll_aggregation", None, _NLL_AGGREGATIONS,
               "DPO eq. 7 has no NLL term (None); RPO (arXiv 2404.19733) §2 divides the chosen NLL by its length "
               "('seq-mean-token-mean')", convention=True, added="1.3.0")),
        ("losses", "chosen_rewards", "rejected_rewards"),
        ("policy_chosen_logps", "policy_rejected_logps"),
        "Rafailov et al. 2023 (DPO) §4 eq. 7; IPO (Azar et al. 2023) eq. 17; cDPO (Mitchell 2023); "
        "robust DPO (Chowdhury et al. 2024) eq. 8; EXO (arXiv 2402.00856) eq. 16; NCA (arXiv 2402.05369) §4; "
        "BCO (arXiv 2404.04656) §3; SPPO (arXiv 2405.00675) eq. 4.7; AOT (arXiv 2406.05882) §3; "
        "APO (arXiv 2408.06266) eqs. 7-8; DiscoPOP (arXiv 2406.08414) eq. 5", k_base=8.0,
        step="count", step_loss="loss",
        # AOT sorts the margins over the whole batch (Melnyk et al. 2024, §3); each pair's NLL share
        # −c_i·B/Σn under 'token-mean' divides by the whole batch's token count
        split_coupled=(Coupling("loss_type", ("aot", "aot_unpaired"),
                                "sorts over the whole batch: no row partition preserves it"),
                       Coupling("nll_aggregation", ("token-mean",),
                                "divides by the whole batch's token count: a per-pair mean over micro-batches "
                                "does not preserve it"))),
    Objective(
        "preference.simpo", "SimPO per pair: −log σ(β·(c/|y_c| − r/|y_r|) − γ), reference-free and length-normalised.",
        (Input("chosen_logps", "B"), Input("rejected_logps", "B"), Input("chosen_lengths", "B", kind="int"),
         Input("rejected_lengths", "B", kind="int")),
        (Param("beta", 2.0, source="SimPO repository training_configs/llama-3-8b-base-simpo.yaml (and "
               "mistral-7b-base-simpo.yaml): beta 2.0"),
         Param("gamma", 1.0, source="SimPO repository training_configs/llama-3-8b-base-simpo.yaml: gamma_beta_ratio "
               "0.5, γ = 0.5·β (mistral-7b-base-simpo.yaml has 0.8: γ = 1.6)"),
         Param("label_smoothing", 0.0, source="SimPO eq. 6 has none")),
        ("losses", "chosen_rewards", "rejected_rewards"), ("chosen_logps", "rejected_logps"),
        "Meng et al. 2024 (SimPO, arXiv 2405.14734) §2.2 eq. 6", docs_examples=("preference.simpo:e88372469ce5bb62",), k_base=8.0),
    Objective(
        "preference.cpo", "CPO per pair: −log σ(β·(c − r)) on policy sequence log-probabilities, plus cpo_alpha "
        "times the chosen response's NLL.",
        (Input("chosen_logps", "B"), Input("rejected_logps", "B"),
         Input("chosen_lengths", "B", kind="int", optional=True)),
        (Param("beta", 0.1, source="TRL 1.16.0 CPOConfig beta 0.1"),
         Param("label_smoothing", 0.0, source="CPO eq. 3 has none"),
         Param("cpo_alpha", 0.0, source="0 keeps L_prefer alone (the cases before 1.3.0); CPO §3 adds L_NLL with "
               "weight 1 (TRL 1.16.0 CPOConfig cpo_alpha 1.0)", added="1.3.0"),
         Param("nll_aggregation", None, _NLL_AGGREGATIONS,
               "None: L_prefer alone (the cases before 1.3.0); CPO §3's L_NLL = −E log π(y_w|x) is "
               "'seq-mean-token-sum'", convention=True, added="1.3.0")),
        ("losses", "chosen_rewards", "rejected_rewards"), ("chosen_logps", "rejected_logps"),
        "Xu et al. 2024 (CPO, arXiv 2401.08417) §3 eq. 3", k_base=8.0),
    Objective(
        "preference.orpo", "ORPO per pair: −c̄ − λ·log σ(log odds(c̄) − log odds(r̄)) on average log-probabilities.",
        (Input("chosen_logps", "B"), Input("rejected_logps", "B")),
        (Param("beta", 0.1, source="ORPO (Hong et al. 2024) trains with λ = 0.1; TRL 1.16.0 ORPOConfig beta 0.1"),),
        ("losses", "chosen_rewards", "rejected_rewards"), ("chosen_logps", "rejected_logps"),
        "Hong et al. 2024 (ORPO, arXiv 2403.07691) §4 eqs. 6-7", docs_examples=("preference.orpo:55f91f675d174a2d",), k_base=8.0),
    Objective(
        "preference.kto", "KTO per example: λ_y·(1 − σ(±β(ρ − z0))) with z0 = max(0, mean KL estimate), detached.",
        (Input("policy_logps", "N"), Input("reference_logps", "N"), Input("desirable", "N", kind="mask"),
         Input("kl_policy_logps", "M"), Input("kl_reference_logps", "M")),
        (Param("beta", 0.1, source="TRL 1.16.0 KTOConfig beta 0.1"),
         Param("desirable_weight", 1.0, source="KTO eq. 7: λ_D = λ_U = 1 unless the classes are imbalanced"),
         Param("undesirable_weight", 1.0, source="KTO eq. 7: λ_D = λ_U = 1 unless the classes are imbalanced")),
        ("losses", "kl"), ("policy_logps",),
        "Ethayarajh et al. 2024 (KTO, arXiv 2402.01306) §4.1 eq. 7", docs_examples=("preference.kto:2ef42699d1e9b4ac",), k_base=8.0),
    Objective(
        "grpo.advantages", "Group-relative advantages A = (r − baseline) / (std + eps); 'whiten' centres and "
        "scales r − baseline over the whole batch (REINFORCE++).",
        (Input("rewards", "B,G"),),
        (Param("scale", "group", ("group", "batch", "none", "whiten"),
               "DeepSeekMath §4.1.2; REINFORCE++ arXiv 2501.03262 ('whiten')", convention=True),
         Param("std_ddof", 0, (0, 1), "[reading-math-3]: (0,1,1,0) → std 0.5 (population)", convention=True),
         Param("eps", 0.0, source="DeepSeekMath's A_i has no eps", convention=True),
         Param("degenerate", "zero", ("zero", "drop", "raw"),
               "[reading-math-3]: 'producing zero advantages'; DAPO §3.2 drops", convention=True),
         Param("baseline", "mean", ("mean", "leave-one-out", "none"),
               "DeepSeekMath §4.1.2 (group mean); RLOO: Kool et al. 2019, Ahmadian et al. arXiv 2402.14740 §3 "
               "(leave-one-out); REINFORCE++ arXiv 2501.03262 (none)", convention=True, added="1.3.0")),
        ("advantages", "keep"), (), "DeepSeekMath §4.1.2; Dr. GRPO §3; DAPO §3.2; RLOO (Kool et al. 2019; "
        "arXiv 2402.14740 §3); REINFORCE++ (arXiv 2501.03262)", k_base=8.0, detached=True),
    Objective(
        "grpo.clip", "PPO/GRPO clipped surrogate C = min(ρA, clip(ρ, 1−ε_low, 1+ε_high)·A), "
        "ρ = exp(logp − old_logp); dual clip: C = max(C, c·A) where A < 0.",
        (Input("logp", "N"), Input("old_logp", "N"), Input("advantages", "N")),
        (Param("eps_low", 0.2, source="[reading-math-3] example"),
         Param("eps_high", None, source="= eps_low (symmetric); DAPO §3.1 clip-higher"),
         Param("dual_clip", None, source="none in PPO/GRPO; Ye et al. 2020 dual clip", convention=True),
         Param("log_ratio_clamp", None, source="no clamp in the papers; verl 0.9.1 compute_policy_loss_vanilla "
               "and OpenRLHF 0.11.2 PolicyLoss clamp log ρ to ±20 before exp", convention=True, added="1.5.0")),
        ("objective",), ("logp",), "DeepSeekMath §4.1.1 eq. 3; PPO (Schulman et al. 2017) eq. 7", k_base=4.0),
    Objective(
        "grpo.aggregate", "Masked reduction of per-token values to a scalar.",
        (Input("values", "B,T"), Input("mask", "B,T", kind="mask")),
        (Param("mode", "seq-mean-token-mean",
               ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"),
               "DeepSeekMath eq. 3 (1/G Σ_i 1/|o_i| Σ_t)", convention=True),
         Param("norm_length", None, source="padded length T (Dr. GRPO uses a constant)"),
         Param("mean_eps", 0.0, source="DeepSeekMath eq. 3 divides by |o_i|; verl 0.9.1 agg_loss and OpenRLHF "
               "0.11.2 aggregate_loss by |o_i| + 1e-8", convention=True, added="1.3.0"),
         Param("mean_eps_scope", "per-row", ("per-row", "every"), _MEAN_EPS_SCOPE_SOURCE, convention=True,
               added="1.7.0")),
        ("value",), ("values",), "DeepSeekMath §4.1.1 eq. 3; DAPO §3.3; Dr. GRPO §3",
        reduction="values", k_base=4.0,
        step="count", step_loss="value", split_coupled=(_EVERY_MEAN_COUPLED,)),
    Objective(
        "grpo.loss", "−aggregate(c_t·C_t) + β·aggregate(w_t·KL_t), w_t = ρ_t if kl_ratio_weight else 1 (the KL "
        "term reduced by kl_aggregation when given), c_t the detached rollout-correction weight is_weight (1 when "
        "absent).",
        (Input("logp", "B,T"), Input("old_logp", "B,T"), Input("ref_logp", "B,T"),
         Input("advantages", "B"), Input("mask", "B,T", kind="mask"),
         # Clip-Cov's / KL-Cov's token selection (arXiv 2505.22617 §4), carried so that vectors are
         # deterministic; vectors of version 1.5.0 on
         Input("selected", "B,T", kind="mask", optional=True),
         # the rollout correction's detached weight of each token's policy term (TRL 1.16.0, verl
         # 0.9.1, ART: the token loss times a truncated or masked IS weight); vector set 1.7.0 on
         Input("is_weight", "B,T", optional=True)),
        (Param("eps_low", 0.2), Param("eps_high", None), Param("dual_clip", None, convention=True),
         Param("beta", 0.04, source="DeepSeekMath §4.2 (β = 0.04)"),
         Param("kl_kind", "k3", ("k1", "k2", "k3", "abs"), "DeepSeekMath eq. 4", convention=True),
         Param("kl_clamp", None, convention=True),
         Param("kl_ratio_weight", False, (True, False), "off in DeepSeekMath; TRL 1.16 default on", convention=True),
         Param("aggregation", "seq-mean-token-mean",
               ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"),
               "DeepSeekMath eq. 3", convention=True),
         Param("norm_length", None),
         Param("ratio_level", "token", ("token", "sequence", "sequence-token"),
               "DeepSeekMath eq. 3 (token); GSPO arXiv 2507.18071 §4.1 eq. 5 and §4.3", convention=True,
               added="1.2.0"),
         Param("policy_loss", "ppo-clip", ("ppo-clip", "gmpo", "cispo", "sapo", "clip-cov", "kl-cov", "reinforce"),
               "PPO eq. 7; GMPO arXiv 2507.20673 §3; CISPO arXiv 2506.13585 §3.1; SAPO arXiv 2511.20347 §3; "
               "Clip-Cov and KL-Cov arXiv 2505.22617 §4 (1.5.0); REINFORCE, Williams 1992 (1.5.0)",
               convention=True, added="1.2.0"),
         Param("log_ratio_clamp", None, source="no clamp in the papers; verl 0.9.1 compute_policy_loss_vanilla "
               "(and _cispo, _sapo) and OpenRLHF 0.11.2 PolicyLoss clamp log ρ to ±20 before exp", convention=True,
               added="1.3.0"),
         Param("kl_aggregation", None, ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                        "seq-mean-token-sum-norm"),
               "None: the policy term's aggregation (DeepSeekMath eq. 3); OpenRLHF 0.11.2 ppo_actor always "
               "token-mean", convention=True, added="1.3.0"),
         Param("mean_eps", 0.0, source="DeepSeekMath eq. 3 divides by |o_i|; verl 0.9.1 agg_loss and OpenRLHF "
               "0.11.2 aggregate_loss by |o_i| + 1e-8", convention=True, added="1.3.0"),
         Param("cispo_clip", "upper", ("upper", "both", "raw-upper"),
               "MiniMax-M1 arXiv 2506.13585 §3.1 (ε_low^IS set large: no lower bound)", convention=True,
               added="1.3.0"),
         Param("sapo_tau_pos", 1.0, source="SAPO arXiv 2511.20347 (τ_pos = 1.0)", added="1.3.0"),
         Param("sapo_tau_neg", 1.05, source="SAPO arXiv 2511.20347 (τ_neg = 1.05)", added="1.3.0"),
         Param("kl_cov_ratio", 0.0002, source="KL-Cov's share of valid tokens, k = max(1, ⌊N·ratio⌋), read when "
               "`selected` is absent; verl 0.9.1 policy_loss.kl_cov_ratio (2e−4)", added="1.5.0"),
         Param("kl_cov_coef", 1.0, source="KL-Cov's weight of |log π − log π_old| on the selected tokens; verl "
               "0.9.1 policy_loss.ppo_kl_coef (1.0)", added="1.5.0"),
         Param("mean_eps_scope", "per-row", ("per-row", "every"), _MEAN_EPS_SCOPE_SOURCE, convention=True,
               added="1.7.0")),
        ("loss",), ("logp",), "DeepSeekMath §4.1.1 eq. 3–4; DAPO §3.3; Dr. GRPO §3; GSPO; GMPO; CISPO; SAPO; Clip-Cov/KL-Cov; REINFORCE",
        reduction="logp", k_base=8.0,
        step="terms", step_loss="loss", split_coupled=(_EVERY_MEAN_COUPLED,)),
    Objective(
        "gae.advantages", "GAE Â_t = Σ_l (γλ)^l δ_{t+l}, δ_t = r_t + γV_{t+1} − V_t, per row of token rewards and "
        "values; returns Â + V; optional batch whitening over the valid tokens (with whiten_eps ε: μ, σ² over N + ε, "
        "(Â − μ)/√(σ² + ε)); 0 at masked tokens; detached.",
        (Input("rewards", "B,T"), Input("values", "B,T"), Input("mask", "B,T", kind="mask")),
        (Param("gamma", 1.0, source="verl 0.9.1 algorithm.gamma and OpenRLHF 0.11.2 --algo.advantage.gamma: 1.0 "
               "(the GAE paper fixes none)"),
         Param("lam", 1.0, source="verl 0.9.1 algorithm.lam and OpenRLHF 0.11.2 --algo.advantage.lambd: 1.0"),
         Param("whiten", "none", ("none", "centred", "keep-mean"), "GAE eq. 16 has no whitening; verl masked_whiten "
               "(shift_mean True: centred, False: keep-mean); OpenRLHF (centred)", convention=True),
         Param("std_ddof", 0, (0, 1), "population std; verl masked_var is unbiased (1), OpenRLHF biased (0)",
               convention=True),
         Param("masked_tokens", "skip", ("skip", "zero"), "a masked token is not a time step (verl 0.9.1 "
               "compute_gae_advantage_return); OpenRLHF 0.11.2: a step with reward and value 0", convention=True),
         Param("whiten_eps", 0.0, source="no ε in GAE eq. 16 (no whitening); TRL's core.py whiten, copied by verl "
               "0.9.1 verl/utils/torch_functional.py masked_whiten and torchtune torchtune/rlhf/rewards.py whiten: "
               "the masked mean and variance over Σm + 1e-8, the scale rsqrt(var + 1e-8)", convention=True,
               added="1.7.0")),
        ("advantages", "returns"), (), "Schulman et al. 2016 (GAE, arXiv 1506.02438) §3 eqs. 10–16",
        reduction="rewards", low_precision=False, docs_examples=("gae.advantages:c6977c2113d474d1", "gae.advantages:06fd10302b1283fd"), k_base=8.0, detached=True),
    Objective(
        "gae.kl_rewards", "Per-token rewards r_t = score·[t = last valid token] − β·k_t, k the KL estimator kind "
        "of log r = ref_logp − logp (optionally clipped to ±clamp); 0 at masked tokens; detached.",
        (Input("scores", "B"), Input("logp", "B,T"), Input("ref_logp", "B,T"), Input("mask", "B,T", kind="mask")),
        (Param("beta", None, source="required: verl 0.9.1 algorithm.kl_ctrl.kl_coef 0.001, OpenRLHF 0.11.2 "
               "--algo.kl.init_coef 0.01"),
         Param("kind", "k1", ("k1", "k2", "k3"), "the classic RLHF penalty β·log(π/π_ref) (Ziegler et al. 2019; "
               "Stiennon et al. 2020); verl kl_penalty 'kl', OpenRLHF --algo.kl.estimator k1", convention=True),
         Param("clamp", None, source="no clamp in the papers; OpenRLHF compute_approx_kl clamps to ±10",
               convention=True)),
        ("rewards",), (), "Ziegler et al. 2019 (arXiv 1909.08593); Stiennon et al. 2020 (arXiv 2009.01325); verl "
        "0.9.1 apply_kl_penalty; OpenRLHF 0.11.2 compute_reward",
        reduction="logp", low_precision=False, docs_examples=("gae.kl_rewards:c61668eb905d1064",), k_base=4.0, detached=True),
    Objective(
        "grpo.rollout_correction", "Per-token weights for the rollout/training mismatch: unit log-ratio "
        "ℓ = old_logp − rollout_logp per token, or its sum / mean over a row; w = exp(ℓ) (ℓ clamped to ±c "
        "first if log_ratio_clamp); truncate: clamp(w, lower, upper) (TIS); mask: w, the token's own ratio "
        "or 1 inside [lower, upper], 0 outside (masked IS, IcePop); keep = 1 where a valid token is kept; "
        "0 outside the mask; detached.",
        (Input("old_logp", "B,T"), Input("rollout_logp", "B,T"), Input("mask", "B,T", kind="mask")),
        (Param("level", "token", ("token", "sequence"), "Yao et al. 2025 [tis-blog] (token-level TIS)",
               convention=True),
         Param("correction", "truncate", ("truncate", "mask"), "Yao et al. 2025 [tis-blog]: min(π_old/π_rollout, C)",
               convention=True),
         Param("lower", None, source="no lower bound in TIS [tis-blog]; IcePop α (arXiv 2510.18855)"),
         Param("upper", 2.0, source="C = 2: verl 0.9.1 rollout_is_threshold default (the blog's C unverified "
               "in our sources); TRL 1.16 uses 3.0"),
         Param("seq_log_ratio", "sum", ("sum", "mean"), "the sequence IS ratio Π_t ρ_t (sum of log-ratios); "
               "OpenRLHF 0.11.2 gates the geometric mean", convention=True),
         Param("kept_weight", "ratio", ("ratio", "token-ratio", "one"), "IcePop M(k) = k inside [α, β] "
               "(arXiv 2510.18855); OpenRLHF keeps the token's own ratio; rejection sampling keeps 1",
               convention=True),
         Param("log_ratio_clamp", None, source="none in TIS/IcePop; verl 0.9.1 clamps to ±20", convention=True)),
        ("weights", "keep"), (), "Yao et al. 2025, 'Your efficient RL framework secretly brings you off-policy "
        "RL training' [tis-blog]; IcePop, Ring-1T (arXiv 2510.18855), the IcePop objective; TRL 1.16 vLLM IS correction; verl 0.9.1 "
        "rollout correction; OpenRLHF 0.11.2 is_correction",
        reduction="old_logp", k_base=4.0, detached=True),
    Objective(
        "proximal_kl.future_cost", "F_t = Σ_{u>t} m_u·k_u, k_u = logp_u − ref_logp_u "
        "(optionally clipped to ±clip, or truncated to the next `window` tokens); detached.",
        (Input("logp", "B,T"), Input("ref_logp", "B,T"), Input("mask", "B,T", kind="mask")),
        (Param("clip", None, convention=True), Param("window", None, convention=True)),
        ("cost",), (), "Proximal KL (Bai, Yao, Zhang) summary [proximal-kl-summary]; FRPO arXiv 2601.10201",
        reduction="logp", docs_examples=(
            "proximal_kl.future_cost:0c5720f7c2442a78",   # F = 0 for a single token
            "proximal_kl.future_cost:a9aa228f22e95663"),  # F_t from terms of order 1 that cancel
        k_base=4.0, detached=True),
    Objective(
        "proximal_kl.loss", "token-mean of −ρ_t·sg(A − β·(k_t + F_t)), ρ_t = π/μ on the sampled token.",
        (Input("logp", "B,T"), Input("behavior_logp", "B,T"), Input("ref_logp", "B,T"),
         Input("advantages", "B"), Input("mask", "B,T", kind="mask")),
        (Param("beta", 0.04), Param("ratio_clip", None, convention=True), Param("ratio_cap", None, convention=True),
         Param("future_clip", None, convention=True), Param("future_window", None, convention=True),
         Param("aggregation", "token-mean",
               ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"),
               "Proximal KL summary: per-minibatch token averages", convention=True)),
        ("loss",), ("logp",), "Proximal KL (Bai, Yao, Zhang) summary [proximal-kl-summary]; FRPO arXiv 2601.10201",
        reduction="logp", docs_examples=(
            "proximal_kl.loss:607d50d196800a54",   # B = T = 1
            "proximal_kl.loss:1dc30c70283439a3",   # future cost cancelling to 0 or 2^−40
            "proximal_kl.loss:b56c3eba90994ffd"),  # masked padding
        k_base=8.0,
        step="count", step_loss="loss"),
    Objective(
        "tabular.optimum", "Optimum of E[r] − β·KL(π‖π_ref) on a token tree: π*(a|s) = π_ref(a|s)·"
        "exp((V*(s·a) − V*(s))/β) by the soft Bellman backup V*(s) = β·log Σ_a π_ref(a|s)·exp(V*(s·a)/β), "
        "V*(leaf) = r; returns π* per prefix and β·log Z = V*(root). " + _TREE_ENCODING,
        (Input("pi_ref", "P,V"), Input("rewards", "L")),
        _TREE_PARAMS + (Param("beta", None, source="required (no paper default)"),),
        ("policy", "beta_log_z"), (), "KL-regularised optimum π* ∝ π_ref·exp(r/β) (DPO §4 eq. 4) by soft "
        "Bellman backup; Proximal KL summary [proximal-kl-summary], FRPO arXiv 2601.10201",
        reduction="rewards", low_precision=False, docs_page="docs/proximal_kl.md", k_base=8.0, backends=()),
    Objective(
        "tabular.sequence_kl", "KL(π‖ρ) between the sequence distributions of two policies on a token tree "
        "and its chain-rule decomposition Σ_s P_π(s)·KL(π(·|s)‖ρ(·|s)): kl (scalar), reach[P] = P_π(s), "
        "token_kl[P] = KL(π(·|s)‖ρ(·|s)), per_step[H] = Σ_{|s|=t} P_π(s)·token_kl(s). " + _TREE_ENCODING,
        (Input("pi", "P,V"), Input("rho", "P,V")),
        _TREE_PARAMS,
        ("kl", "reach", "token_kl", "per_step"), (), "chain rule of relative entropy (Cover & Thomas "
        "Thm 2.5.3); Proximal KL summary [proximal-kl-summary]",
        reduction="pi", low_precision=False, docs_page="docs/proximal_kl.md", k_base=8.0, backends=()),
    Objective(
        "tabular.expected_update", "Exact population update of an update rule at every prefix: "
        "Δθ_s = −E_{y~μ}[∇_{θ_s} L(y)] with respect to the softmax logits θ_s of π(·|s) (rows sum to 0), "
        "advantage A = r − E_μ[r] (baseline 'mean'; E_π[r] for the *_on_policy rules, which ignore mu) or "
        "A = r ('none'); no division by E_μ|y|. Rules and their recorded parameters: "
        "refimpl/exact/_tree.py RULES (future_clipped c = 0.5, future_window W = 1, whole_cost_clipped "
        "c = 0.5, ratio_capped C = 1.5, detached min(ρ, C); gspo: GSPO's sequence ratio with the clip open; "
        "cispo ε_high = 0.2, no lower clip; sequence_tis C = 2, detached min(Π ρ, C); kl_in_reward: "
        "sg(A − β·Σ_u k_u)·Σ_t log π, no ratio). " + _TREE_ENCODING,
        (Input("pi", "P,V"), Input("mu", "P,V"), Input("pi_ref", "P,V"), Input("rewards", "L")),
        _TREE_PARAMS + (
            Param("beta", None, source="required (no paper default)"),
            Param("rule", "proximal_kl", TABULAR_RULES, "Proximal KL summary [proximal-kl-summary]: the update whose "
                  "rest point is π* for every μ with full support", convention=True),
            Param("baseline", "mean", ("mean", "none"), "Proximal KL summary: group-normalised rewards "
                  "(the infinite-group mean)", convention=True)),
        ("update",), (), "Proximal KL (Bai, Yao, Zhang) stationary-policy theorem, summary [proximal-kl-summary] "
        "(reconstructed); FRPO arXiv 2601.10201; GRPO k3 loss, DeepSeekMath §4.1.1 eq. 3–4",
        reduction="rewards", low_precision=False, docs_page="docs/proximal_kl.md", k_base=8.0, backends=()),
    Objective(
        "lm.cross_entropy",
        "Token cross-entropy of softmax(z'), z' = softcap·tanh(z/softcap) (or z): per counted token "
        "(1−ε)(lse − z'_y) + ε(lse − mean_v z'_v) + z_loss·lse², lse = log Σ_v e^{z'_v} (the mean over the V − 1 "
        "classes but y when smoothing_classes='others'); 0 at labels equal to "
        "ignore_index; reduction 'mean' (÷ the counted tokens, or ÷ normalizer when given), 'sum' or 'none'.",
        (Input("logits", "N,V", neg_inf=True), Input("labels", "N", kind="int")),
        (Param("ignore_index", -100, source="torch.nn.functional.cross_entropy (PyTorch 2.x) default"),
         Param("label_smoothing", 0.0, source="none in PyTorch's default; PyTorch's definition (Szegedy et al. 2016 "
               "§7, arXiv 1512.00567): (1−ε)·(−log q_y) + ε·mean over all V of −log q_v"),
         Param("z_loss", 0.0, source="none in PyTorch; PaLM (arXiv 2204.02311) §5 uses 1e-4·log²Z; Liger 0.8.5 "
               "lse_square_scale"),
         Param("softcap", None, source="none in PyTorch; Gemma 2 (arXiv 2408.00118) §2 final-logit soft-capping "
               "s·tanh(z/s), s = 30"),
         Param("reduction", "mean", ("mean", "sum", "none"), "torch.nn.functional.cross_entropy default 'mean' "
               "over the non-ignored tokens", convention=True),
         Param("normalizer", None, source="none: the count of non-ignored tokens; transformers "
               "loss/loss_utils.py fixed_cross_entropy divides the sum by num_items_in_batch"),
         Param("smoothing_classes", "all", ("all", "others"), _SMOOTHING_CLASSES_SOURCE, convention=True,
               added="1.7.0")),
        ("loss",), ("logits",),
        "torch.nn.functional.cross_entropy (PyTorch 2.x); label smoothing: Szegedy et al. 2016 (arXiv 1512.00567) "
        "§7; z-loss: PaLM (arXiv 2204.02311) §5; soft-capping: Gemma 2 (arXiv 2408.00118) §2; "
        "num_items_in_batch: transformers PR #34191",
        reduction="logits", k_base=8.0,
        docs_examples=("lm.cross_entropy:50b0ad65fab0f6fd",    # equal logits: log 7
                       "lm.cross_entropy:0a976d743b1c028f"),  # a micro-batch over the accumulated count
        step="labels", step_loss="loss", vocab_sharded=True,
        split_coupled=(Coupling("reduction", ("none",),
                                "returns one loss per token: there is no scalar loss to accumulate"),)),
    Objective(
        "lm.token_logprobs",
        "Log-probability of the sampled token under softmax(z/T): log q_y = z_y/T − log Σ_v e^{z_v/T}, per row.",
        (Input("logits", "N,V", neg_inf=True), Input("labels", "N", kind="int")),
        (Param("temperature", 1.0, source="no temperature (T = 1) in the definition; TRL 1.16.0 and verl 0.9.1 "
               "divide the logits by the rollout temperature first"),),
        ("logp",), ("logits",),
        "log-softmax at the sampled token: TRL 1.16.0 trl/trainer/utils.py selective_log_softmax; verl 0.9.1 "
        "verl/utils/torch_functional.py logprobs_from_logits",
        reduction="logits", k_base=4.0, docs_examples=("lm.token_logprobs:0b8c216db0ded76e",),
        vocab_sharded=True),  # T = 1e-3
    Objective(
        "lm.entropy",
        "Token entropy of softmax(z/T): H = −Σ_v q_v log q_v = lse − Σ_v q_v·z_v/T, per row.",
        (Input("logits", "N,V", neg_inf=True),),
        (Param("temperature", 1.0, source="no temperature (T = 1) in the definition; verl 0.9.1 and TRL 1.16.0 "
               "compute it from the logits after division by the rollout temperature"),),
        ("entropy",), ("logits",),
        "Shannon entropy of the token distribution; verl 0.9.1 verl/utils/torch_functional.py "
        "entropy_from_logits; TRL 1.16.0 trl/trainer/utils.py entropy_from_logits",
        reduction="logits", k_base=8.0, docs_examples=("lm.entropy:0a84d68906bcc33f",),
        vocab_sharded=True),  # equal logits: log 7
    Objective(
        "lm.linear_cross_entropy",
        "Fused-linear token cross-entropy: the logits z = hidden·weightᵀ (+ bias) [N, V], then exactly "
        "lm.cross_entropy of z (softcap, label smoothing, z-loss, ignore_index, reduction, normalizer).",
        (Input("hidden", "N,H"), Input("weight", "V,H"), Input("labels", "N", kind="int"),
         Input("bias", "V", optional=True)),
        (Param("ignore_index", -100, source="torch.nn.functional.cross_entropy (PyTorch 2.x) default"),
         Param("label_smoothing", 0.0, source="none in PyTorch's default; PyTorch's definition (Szegedy et al. 2016 "
               "§7, arXiv 1512.00567); Liger 0.8.5 LigerFusedLinearCrossEntropyLoss label_smoothing"),
         Param("z_loss", 0.0, source="none in PyTorch; PaLM (arXiv 2204.02311) §5 uses 1e-4·log²Z; Liger 0.8.5 "
               "LigerFusedLinearCrossEntropyLoss lse_square_scale"),
         Param("softcap", None, source="none in PyTorch; Gemma 2 (arXiv 2408.00118) §2 final-logit soft-capping; "
               "Liger 0.8.5 LigerFusedLinearCrossEntropyLoss softcap"),
         Param("reduction", "mean", ("mean", "sum", "none"), "torch.nn.functional.cross_entropy default 'mean' "
               "over the non-ignored tokens", convention=True),
         Param("normalizer", None, source="none: the count of non-ignored tokens; transformers "
               "loss/loss_utils.py fixed_cross_entropy divides the sum by num_items_in_batch"),
         Param("smoothing_classes", "all", ("all", "others"), _SMOOTHING_CLASSES_SOURCE, convention=True,
               added="1.7.0")),
        ("loss",), ("hidden", "weight", "bias"),
        "lm.cross_entropy of F.linear(hidden, weight, bias); Liger 0.8.5 "
        "liger_kernel/transformers/fused_linear_cross_entropy.py LigerFusedLinearCrossEntropyLoss and "
        "ops/fused_linear_cross_entropy.py; Wijmans et al. 2024, Cut Your Losses in Large-Vocabulary Language "
        "Models (Cut Cross-Entropy, arXiv 2411.09009) §3; torchtune modules/loss/ce_chunked_output_loss.py",
        reduction="weight", k_base=8.0, docs_examples=(
            "lm.linear_cross_entropy:d7b79e5c57658637",    # zero hidden states: the logits are the bias
            "lm.linear_cross_entropy:e59494e16757abc0")),  # products ~1e3 cancelling to logits of order 1
    # --- issue 27: reward-model and critic losses (family reward, ppo)
    Objective(
        "reward.pairwise", "Bradley–Terry pairwise reward loss mean_b −log σ(r_c − r_r − m), plus "
        "c·mean_b (r_c + r_r)² when center_rewards_coefficient c is given; form 'log-exp' writes the same "
        "function as log(1 + exp(r_r − r_c + m)).",
        (Input("chosen_rewards", "B"), Input("rejected_rewards", "B"), Input("margin", "B", optional=True)),
        (Param("center_rewards_coefficient", None, source="Bradley–Terry has no centring term; Eisenstein et al. "
               "2023 (arXiv 2312.09244) eq. 2 adds η·(r_c + r_r)²; TRL 1.16.0 RewardConfig default None "
               "(recommended 0.01)"),
         Param("form", "sigmoid", ("sigmoid", "log-exp"),
               "Ouyang et al. 2022 (arXiv 2203.02155) eq. 1 write −log σ(r_c − r_r); TRL 1.16.0 RewardTrainer and "
               "OpenRLHF 0.11.2 PairWiseLoss likewise; OpenRLHF LogExpLoss log(1 + exp(r_r − r_c)), citing Bai et al. "
               "2022 (arXiv 2204.05862)", convention=True)),
        ("loss",), ("chosen_rewards", "rejected_rewards"),
        "Bradley & Terry 1952; Ouyang et al. 2022 (InstructGPT, arXiv 2203.02155) §3.5 eq. 1; Eisenstein et al. "
        "2023 (arXiv 2312.09244) eq. 2; TRL 1.16.0 trainer/reward_trainer.py compute_loss; OpenRLHF 0.11.2 "
        "models/loss.py PairWiseLoss, LogExpLoss",
        reduction="chosen_rewards", k_base=8.0, docs_examples=(
            "reward.pairwise:c74436746e50ae61",   # one comparison, d = 1
            "reward.pairwise:d09363e7260451e0",   # equal rewards: log 2
            "reward.pairwise:2260736ed023fd55",   # margins equal to the differences, centring 0.01
            "reward.pairwise:1cb99ffa72f54078"),
        step="count", step_loss="loss"),  # log-exp form where e^{r_r − r_c} overflows
    Objective(
        "ppo.value_loss", "PPO critic loss: aggregate over tokens of s·max((V − R)², (V_old + clip(V − V_old, −ε, ε) − "
        "R)²), or s·(V − R)² when clip_range_value ε is None; s = ½ when half.",
        (Input("values", "B,T"), Input("old_values", "B,T"), Input("returns", "B,T"), Input("mask", "B,T", kind="mask")),
        (Param("clip_range_value", None, source="PPO (Schulman et al. 2017) eq. 9: the unclipped squared error; "
               "verl 0.9.1 critic cliprange_value 0.5, OpenRLHF 0.11.2 --critic.value_clip 0.5", convention=True),
         Param("half", False, (True, False), "PPO eq. 9 has no ½; verl 0.9.1 compute_value_loss, OpenRLHF 0.11.2 "
               "ValueLoss and TRL's former PPOTrainer multiply by 0.5", convention=True),
         Param("aggregation", "token-mean",
               ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"),
               "PPO eq. 9: Ê_t, the mean over the batch's time steps; verl 0.9.1 critic loss_agg_mode token-mean, "
               "OpenRLHF 0.11.2 ValueLoss token_level_loss True", convention=True)),
        ("loss",), ("values",),
        "Schulman et al. 2017 (PPO, arXiv 1707.06347) §5 eq. 9; OpenAI baselines ppo2 model.py (clipped value "
        "loss); verl 0.9.1 trainer/ppo/core_algos.py compute_value_loss; OpenRLHF 0.11.2 models/loss.py ValueLoss",
        reduction="values", k_base=8.0, docs_examples=(
            "ppo.value_loss:6abca7b4e4d04191",   # PPO eq. 9: errors −1 and 1
            "ppo.value_loss:5db3e534d250f8e7",   # the clipped branch the larger: gradient 0
            "ppo.value_loss:9bf562d7fc462333",   # V − V_old = ±ε exactly, differentiable
            "ppo.value_loss:2f4a3046b2a65cf6"),
        step="count", step_loss="loss"),  # the tie of the two squares (acceptable)
    Objective(
        "ppo.entropy_bonus", "The policy loss's entropy term: −c·aggregate(H_t) over the tokens the mask selects, "
        "H_t the per-token entropy (e.g. lm.entropy).",
        (Input("entropy", "B,T"), Input("mask", "B,T", kind="mask")),
        (Param("coef", 0.01, source="PPO (Schulman et al. 2017) eq. 9 c₂·S[π_θ](s_t); Table 5 (Atari): entropy "
               "coeff. 0.01; verl 0.9.1 actor.entropy_coeff 0, TRL 1.16.0 entropy_coef 0 (off)"),
         Param("aggregation", "token-mean",
               ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"),
               "PPO eq. 9: Ê_t, the mean over the batch's time steps; verl 0.9.1 workers/utils/losses.py ppo_loss "
               "reduces the entropy with the policy term's loss_agg_mode; OpenRLHF 0.11.2 always token-mean",
               convention=True),
         Param("norm_length", None, source="padded length T (Dr. GRPO uses a constant; verl loss_scale_factor)"),
         Param("mean_eps", 0.0, source="PPO eq. 9 divides by the token count; verl 0.9.1 agg_loss by |o_i| + 1e-8 in "
               "'seq-mean-token-mean'", convention=True),
         Param("mean_eps_scope", "per-row", ("per-row", "every"), _MEAN_EPS_SCOPE_SOURCE, convention=True,
               added="1.7.0")),
        ("loss",), ("entropy",),
        "Schulman et al. 2017 (PPO, arXiv 1707.06347) §5 eq. 9 and Table 5; verl 0.9.1 workers/utils/losses.py "
        "ppo_loss (policy_loss −= entropy_coeff·agg_loss(entropy, response_mask, loss_agg_mode))",
        reduction="entropy", k_base=4.0, docs_examples=(
            "ppo.entropy_bonus:62b938876495ac19",   # PPO eq. 9 with c₂ = 0.01: −0.01·4/3
            "ppo.entropy_bonus:e6615841b2cc2c08",   # a row without tokens under token-mean
            "ppo.entropy_bonus:a2de484e84416d9f",   # the same under verl's seq-mean-token-mean (acceptable)
            "ppo.entropy_bonus:ad676abb8134d8ca"),
        step="count", step_loss="loss", split_coupled=(_EVERY_MEAN_COUPLED,)),  # c = 0 (the libraries' default): loss 0
    Objective(
        "moe.router_z_loss", "ST-MoE router z-loss: the mean over (unmasked) tokens of (log Σ_e exp(x_e))², x the "
        "token's router logits.",
        (Input("router_logits", "N,E"), Input("mask", "N", kind="mask", optional=True)),
        (),
        ("loss",), ("router_logits",),
        "Zoph et al. 2022 (ST-MoE, arXiv 2202.08906) §3.1 eq. 5; transformers 5.25.0 "
        "models/switch_transformers/modeling_switch_transformers.py router_z_loss_func",
        reduction="router_logits", k_base=8.0, docs_examples=(
            "moe.router_z_loss:90e7e27ad2a4cb76",   # two tokens, two experts
            "moe.router_z_loss:436e9d21d625754f",   # logits ±1e4
            "moe.router_z_loss:14ca1f29fb8dc97e",   # lse ≈ 1e-17 from cancellation
            "moe.router_z_loss:f601ef1f9e93d335"),
        step="count", step_loss="loss"),  # a mask: the mean over the selected tokens
    Objective(
        "moe.load_balancing", "Auxiliary load-balancing loss over router logits [N, E] (or [L, N, E] for L layers): "
        "E·Σ_e f_e·P_e, f_e the fraction of (unmasked) tokens whose top-k experts include e (not "
        "differentiated), P_e the mean router probability of e; per the form, layers pooled, summed, or "
        "DeepSeek-V3's sequence-wise loss on normalised sigmoid affinities; f/k under fraction_norm 'top_k'.",
        (Input("router_logits", "N,E"), Input("mask", "N", kind="mask", optional=True)),
        (Param("top_k", 1, source="Switch Transformer (arXiv 2101.03961) §2.1: k = 1 routing; transformers 5.25.0 "
               "Mixtral num_experts_per_tok 2"),
         Param("form", "switch", ("switch", "concatenated", "per-layer-sum", "sequence"),
               "Switch Transformer (arXiv 2101.03961) §2.2 eq. 4–6, one layer; transformers 5.25.0 "
               "models/mixtral/modeling_mixtral.py load_balancing_loss_func pools the layers ('concatenated')",
               convention=True),
         Param("seq_len", None, source="form 'sequence': the N tokens are N/seq_len sequences of seq_len positions "
               "(a [B,T,E] batch flattened); None: one sequence"),
         Param("fraction_norm", "none", ("none", "top_k"),
               "Switch Transformer eq. 5 with k = 1, counted for k > 1 as transformers 5.25.0 "
               "load_balancing_loss_func does (Σ_e f_e = k); 'top_k' divides f by k (Σ_e f_e = 1): Megatron-core "
               "0.16.1 megatron/core/transformer/moe/moe_utils.py switch_load_balancing_loss_func, OLMo-core 3.0.0 "
               "olmo_core/nn/moe/loss.py load_balancing_loss; not with form 'sequence' (DeepSeek-V3 eq. 18 divides "
               "by k already)", convention=True, added="1.7.0")),
        ("loss",), ("router_logits",),
        "Fedus et al. 2021 (Switch Transformer, arXiv 2101.03961) §2.2 eq. 4–6; DeepSeek-AI 2024 (DeepSeek-V3, "
        "arXiv 2412.19437) §2.1.2 eq. 17–20; transformers 5.25.0 models/mixtral/modeling_mixtral.py "
        "load_balancing_loss_func",
        reduction="router_logits", k_base=8.0, docs_examples=(
            "moe.load_balancing:4c3c24a336a67d4f",   # Switch eq. 4, N = 3, E = 2: f = (2/3, 1/3)
            "moe.load_balancing:bc733ff80c789f38",   # DeepSeek-V3 eq. 17–20, one sequence
            "moe.load_balancing:90be683a355f945d",   # uniform counts: loss 1, gradient exactly 0
            "moe.load_balancing:dbb7297cad4ab833"),  # a tie at the top (acceptable)
        not_step="its f and P are means over the whole batch, and their product is not a sum of per-micro-batch "
                 "terms: averaging two micro-batches' losses is off by ¼(f¹−f²)(P¹−P²) (docs/distributed.md)"),
)

BY_ID = {o.id: o for o in OBJECTIVES}


def get(objective_id: str) -> Objective:
    try:
        return BY_ID[objective_id]
    except KeyError:
        raise KeyError(f"unknown objective {objective_id!r}; known: {', '.join(BY_ID)}") from None
