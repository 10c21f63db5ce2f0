"""``--target tunix``: Google Tunix 0.1.7 (JAX post-training), its loss functions called through
its own code (``framework: "jax"``: gradients by ``jax.vjp``), driven without a model:

- ``grpo.loss``: ``tunix/rl/algo_core.py grpo_loss_fn`` (the policy loss GRPOLearner registers as
  ``"grpo"``) with ``common.compute_per_token_logps`` — the policy forward pass — replaced, while
  the call runs, by one that returns the vector's per-token log-probabilities; the model is an
  empty ``nnx.Module`` (``nnx.split`` of it is all grpo_loss_fn does with it) and the
  ``TrainExample`` and ``GRPOConfig`` are stand-ins holding the fields grpo_loss_fn reads.
  ``loss_algo='grpo'`` (token ratios; its ``gspo-token`` is not checked). The ``selected`` input
  (a token subset) has no counterpart: unsupported.
- ``dpo.loss``: ``tunix/sft/dpo/dpo_trainer.py dpo_loss_fn`` (``algorithm='dpo'``) with
  ``compute_logps`` — the model's summed log-probabilities of the chosen and rejected completions —
  replaced by the vector's, and the reference log-probabilities precomputed (``ref_chosen_logps``,
  ``ref_rejected_logps`` of the train example), one pair per call: it returns the mean over pairs,
  and the rewards only as means (``aux['rewards/chosen']``).
- ``distill.hinton``: ``tunix/distillation/strategies/logit.py LogitStrategy.compute_loss`` (full
  vocabulary, ``distill_top_k=0``) with the labels one-hot, as its task loss
  (``optax.softmax_cross_entropy``) takes them: α·T²·mean KL(p_T‖q_T) + (1 − α)·mean CE.

The loss modules are imported with ``lossproof.import_bare``: tunix's package ``__init__`` imports
its whole trainer stack (metrax, sentencepiece, jaxtyping, …), which these functions never call;
those three are placeholders while the modules import.

In low precision grpo_loss_fn and compute_kl_divergence cast the log-probabilities and advantages
to float32 first (``jnp.astype(..., jnp.float32)``), and LogitStrategy casts the logits to float32;
dpo_loss_fn computes in the log-probabilities' dtype.

Install: ``pip install --no-deps google-tunix==0.1.7`` next to jax, optax and flax
(scripts/install-peers.sh).
"""
from __future__ import annotations

import contextlib
import functools
from types import SimpleNamespace

import numpy as np
from lossproof.conformance.targets.imports import import_bare
from lossproof.conformance.targets.peers._common import Arithmetic as A
from lossproof.conformance.targets.peers._common import Convention as C
from lossproof.conformance.targets.peers._common import (
    Finding,
    build,
    decoded,
    load_or_explain,
    require,
    where,
)

VERSION = "0.1.7"
INSTALL = "pip install --no-deps google-tunix==0.1.7"
ALGO = "tunix/rl/algo_core.py"
COMMON = "tunix/rl/common.py"
GRPO_CFG = "tunix/rl/grpo/grpo_learner.py"
DPO = "tunix/sft/dpo/dpo_trainer.py"
LOGIT = "tunix/distillation/strategies/logit.py"

# The catalog's aggregation modes under tunix's loss_agg_mode names (common.aggregate_loss).
AGG_MODES = {"seq-mean-token-mean": "sequence-mean-token-mean", "token-mean": "token-mean",
             "seq-mean-token-sum": "sequence-mean-token-sum-norm",
             "seq-mean-token-sum-norm": "sequence-mean-token-scale"}
KL_MODES = {"k1": "kl", "k2": "mse_kl", "k3": "low_var_kl"}

CONVENTIONS = [
    C("grpo.loss", "aggregation", tuple(AGG_MODES), f"{COMMON} aggregate_loss (loss_agg_mode, default "
      f"'sequence-mean-token-mean' in {GRPO_CFG}; 'token-mean'; 'sequence-mean-token-sum-norm' and "
      "'seq-mean-token-sum': Σ over the non-empty rows' counted tokens ÷ those rows; 'sequence-mean-token-scale': "
      "the same ÷ T, the padded length, Dr. GRPO)"),
    C("grpo.loss", "kl_kind", ("k1", "k2", "k3"), f"{COMMON} compute_kl_divergence (kl_loss_mode, default 'kl' in "
      f"{GRPO_CFG}: logp − ref_logp; 'mse_kl': ½(logp − ref_logp)²; 'low_var_kl': k3)"),
    C("grpo.loss", "kl_clamp", (None, 10.0), f"{COMMON} compute_kl_divergence (clamp_value = kl_clamp_value, "
      "default None in tunix/rl/algorithm_config.py; any value clips the KL to ±value)"),
    C("grpo.loss", "dual_clip", (None, 3.0), f"{ALGO} grpo_loss_fn (epsilon_c, unset by default: where A < 0 "
      "the loss is min(−c·A, clipped loss), the dual clip)"),
    C("grpo.loss", "log_ratio_clamp", (20.0, None), f"{ALGO} grpo_loss_fn (jnp.clip(seq_importance_ratio, max=20.0, "
      "min=-20.0) before exp, always)"),
    C("dpo.loss", "loss_type", ("sigmoid", "cdpo"), f"{DPO} dpo_loss_fn (−(1−ε)·log σ(βΔ) − ε·log σ(−βΔ), "
      "label_smoothing ε of DPOTrainingConfig, default 0.0: 'sigmoid'; ε > 0: conservative DPO)"),
    C("distill.hinton", "t2_scale", (True,), f"{LOGIT} LogitStrategy.compute_loss (kl_loss * temperature**2)"),
]
PARAM_DEFAULTS = [
    C("grpo.loss", "beta", (0.04,), f"{GRPO_CFG} GRPOConfig beta: 0.04"),
    C("grpo.loss", "eps_low", (0.2,), f"{GRPO_CFG} GRPOConfig epsilon: 0.2 (epsilon_high: epsilon when unset)"),
    C("dpo.loss", "beta", (0.1,), f"{DPO} DPOTrainingConfig beta: 0.1"),
    C("distill.hinton", "temperature", (2.0,), f"{LOGIT} LogitStrategy temperature: 2.0"),
    C("distill.hinton", "alpha", (0.5,), f"{LOGIT} LogitStrategy alpha: 0.5"),
]

ARITHMETIC = [
    A("grpo.loss", "careful", f"{ALGO}:399-408 (the log-probabilities and advantages cast to float32 first), "
      f"{COMMON}:147-150 (the KL's inputs cast to float32): everything after in float32"),
    A("dpo.loss", "native", f"{DPO}:471-481 (the log-ratios, their difference delta and log_sigmoid(β·delta) in the "
      "log-probabilities' dtype: a difference of rounded log-ratios that cancels)"),
    A("distill.hinton", "careful", f"{LOGIT}:113-114 (s_logits, t_logits = the logits .astype(jnp.float32): the "
      "softmaxes, the KL and the cross-entropy in float32)"),
]


def _has_neg_inf_student(case) -> bool:
    return bool(np.isneginf(decoded(case.test["inputs"])["student_logits"]).any())


FINDINGS = [
    Finding("tunix-logit-nan-at-neg-inf", "bug",
            "LogitStrategy's task loss is optax.softmax_cross_entropy(student logits, one-hot labels) = "
            "−Σ labels·log_softmax: a −∞ student logit (an impossible token, e.g. a masked vocabulary entry) off "
            "the label gives 0·(−∞) = NaN, so the loss and every gradient are NaN where the exact loss is finite "
            "(optax's safe_softmax_cross_entropy exists for this). Repro: optax.softmax_cross_entropy("
            "jnp.array([0.0, -jnp.inf]), jnp.array([1.0, 0.0])) → nan (want 0)",
            f"{LOGIT}:150 LogitStrategy.compute_loss (optax.softmax_cross_entropy); "
            "optax/losses/_classification.py:296 softmax_cross_entropy",
            where(objectives=("distill.hinton",), test=_has_neg_inf_student)),
]


@functools.cache
def _modules():
    """(algo_core, dpo_trainer, logit), imported once."""
    packages = ("tunix", "tunix.rl", "tunix.sft", "tunix.sft.dpo", "tunix.generate", "tunix.perf",
                "tunix.distillation", "tunix.distillation.strategies")
    absent = ("metrax", "sentencepiece", "jaxtyping")
    algo_core = import_bare("tunix.rl.algo_core", packages=packages, absent=absent)
    dpo = import_bare("tunix.sft.dpo.dpo_trainer", packages=packages, absent=absent)
    logit = import_bare("tunix.distillation.strategies.logit", packages=packages, absent=absent)
    return algo_core, dpo, logit


@contextlib.contextmanager
def _replaced(module, name, value):
    """``module.name`` is ``value`` while the block runs (the model forward a loss function calls)."""
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def _empty_model():
    from flax import nnx

    class _NoModel(nnx.Module):   # nnx.split(model) is all the loss functions do with it here
        pass
    return _NoModel()


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, selected=None, eps_low=0.2, eps_high=None, dual_clip=None,
              beta=0.04, kl_kind="k1", kl_clamp=None, kl_ratio_weight=False, aggregation="seq-mean-token-mean",
              norm_length=None, ratio_level="token", policy_loss="ppo-clip", log_ratio_clamp=20.0,
              kl_aggregation=None, mean_eps=0.0, cispo_clip="upper", sapo_tau_pos=1.0, sapo_tau_neg=1.05,
              kl_cov_ratio=2e-4, kl_cov_coef=1.0):
    import jax.numpy as jnp
    algo_core, _, _ = _modules()
    if selected is not None:
        raise NotImplementedError("tunix 0.1.7 grpo_loss_fn has no token subset (selected)")
    if (ratio_level, policy_loss, kl_ratio_weight, kl_aggregation, mean_eps) != ("token", "ppo-clip", False, None, 0.0):
        raise NotImplementedError("tunix 0.1.7 grpo_loss_fn: token ratios, the PPO clip, an unweighted KL reduced as "
                                  "the policy term, row means over the token count")
    if aggregation not in AGG_MODES or kl_kind not in KL_MODES or log_ratio_clamp not in (20.0, None):
        raise NotImplementedError(f"tunix 0.1.7 grpo_loss_fn has no {aggregation!r} / {kl_kind!r} / clamp "
                                  f"{log_ratio_clamp!r}")
    if norm_length is not None and aggregation == "seq-mean-token-sum-norm":
        raise NotImplementedError("grpo_loss_fn calls aggregate_loss without a norm: the padded length")
    config = SimpleNamespace(beta=beta, epsilon=eps_low, epsilon_high=eps_low if eps_high is None else eps_high,
                             epsilon_c=dual_clip, loss_algo="grpo", loss_agg_mode=AGG_MODES[aggregation],
                             kl_loss_mode=KL_MODES[kl_kind], kl_clamp_value=kl_clamp, temperature=1.0)
    example = SimpleNamespace(completion_ids=jnp.zeros(logp.shape, dtype=jnp.int32), prompt_ids=None,
                              completion_mask=mask, advantages=advantages, old_per_token_logps=old_logp,
                              ref_per_token_logps=ref_logp)

    def forward(graphdef, state, **kwargs):   # the policy's per-token log-probabilities and (unused) logits
        return logp, jnp.zeros(logp.shape + (1,), dtype=jnp.float32)

    with _replaced(algo_core.common, "compute_per_token_logps", forward):
        loss, _ = algo_core.grpo_loss_fn(_empty_model(), example, config, pad_id=0, eos_id=1)
    return loss


def dpo_loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
             chosen_lengths=None, beta=0.1, loss_type="sigmoid", label_smoothing=0.0, discopop_tau=0.05,
             reward_shift=0.0, rpo_alpha=0.0, nll_aggregation=None):
    import jax.numpy as jnp
    _, dpo, _ = _modules()
    if loss_type not in ("sigmoid", "cdpo") or rpo_alpha or nll_aggregation is not None or reward_shift:
        raise NotImplementedError(f"tunix 0.1.7 dpo_loss_fn is sigmoid DPO with label smoothing (cDPO) only, "
                                  f"not {loss_type!r} (rpo_alpha, reward_shift: none)")
    losses, chosen, rejected = [], [], []
    for i in range(policy_chosen_logps.shape[0]):   # one pair per call: dpo_loss_fn returns means
        pair = slice(i, i + 1)
        example = SimpleNamespace(input_ids=None, positions=None, attention_mask=None, logits_to_keep=1,
                                  completion_mask=None, images=None, ref_chosen_logps=reference_chosen_logps[pair],
                                  ref_rejected_logps=reference_rejected_logps[pair])

        def forward(*args, pair=pair, **kwargs):   # the model's summed chosen / rejected log-probabilities
            return policy_chosen_logps[pair], policy_rejected_logps[pair]

        with _replaced(dpo, "compute_logps", forward):
            loss, aux = dpo.dpo_loss_fn(_empty_model(), example, algorithm="dpo", beta=beta,
                                        label_smoothing=label_smoothing)
        losses.append(loss)
        chosen.append(aux["rewards/chosen"])
        rejected.append(aux["rewards/rejected"])
    return {"losses": jnp.stack(losses), "chosen_rewards": jnp.stack(chosen), "rejected_rewards": jnp.stack(rejected)}


def hinton(student_logits, teacher_logits, labels, temperature=2.0, alpha=0.5, t2_scale=True, soft_term="kl"):
    import jax
    _, _, logit = _modules()
    if not t2_scale or soft_term != "kl":
        raise NotImplementedError("tunix 0.1.7 LogitStrategy scales the KL by T² (no cross-entropy soft term)")
    strategy = logit.LogitStrategy(None, None, None, temperature=temperature, alpha=alpha)
    one_hot = jax.nn.one_hot(labels, student_logits.shape[-1], dtype=student_logits.dtype)
    loss, _ = strategy.compute_loss(student_logits, teacher_logits, one_hot)
    return loss


def target():
    import importlib.util
    version = require("tunix", "google-tunix", VERSION, INSTALL)
    for module, dist in (("optax", "optax"), ("flax", "flax")):
        if importlib.util.find_spec(module) is None:
            from lossproof.conformance.targets.target import TargetError
            raise TargetError(f"google-tunix needs {dist}, which is not installed: pip install {dist} "
                              "(or scripts/install-peers.sh)")
    load_or_explain(_modules, "google-tunix", INSTALL)
    objectives = {"grpo.loss": grpo_loss, "dpo.loss": dpo_loss, "distill.hinton": hinton}
    # grpo_loss_fn (ALGO:399: per_token_logps = jnp.astype(per_token_logps, jnp.float32)) and
    # LogitStrategy.compute_loss (LOGIT:113: s_logits = student_output.astype(jnp.float32)) cast their
    # inputs to float32 "for stability": by design, so float64 is left out of their runs.
    return build("tunix", version, objectives, CONVENTIONS, FINDINGS, ARITHMETIC, framework="jax",
                 computes_in={"grpo.loss": "float32", "distill.hinton": "float32"})
