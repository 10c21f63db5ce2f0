"""``--target optax``: optax 0.2.8 (JAX), its losses that are catalog objectives, called as a JAX
training step calls them (``framework: "jax"``: gradients by ``jax.vjp`` through optax's own code).

- ``lm.cross_entropy``: ``optax.losses.softmax_cross_entropy_with_integer_labels(logits, labels,
  where=counted)``. optax has no ignore index and no reduction: it returns the loss of every row,
  and its ``where`` (one flag per row) gives 0 where a row is left out. The adapter passes
  ``labels != ignore_index`` as ``where`` and, since an ignored label is no class index, the label
  0 in those rows (their loss is 0 whatever it is). ``reduction='none'`` is all it computes;
  label smoothing, z-loss and soft-capping are not in it (unsupported).
- ``lm.cross_entropy[smooth-labels]``: ``optax.smooth_labels`` of the one-hot labels, then
  ``optax.safe_softmax_cross_entropy`` (the form optax's documentation pairs with label smoothing;
  the ``safe_`` one gives 0·log 0 = 0 at a −∞ logit). An ignored row's target is all zeros
  (its loss and gradient are 0). ``smooth_labels`` spreads α over all V classes, as PyTorch does.
- ``distill.token_kl`` with ``soft_term='cross_entropy'`` (forward): ``optax.safe_softmax_cross_entropy
  (student logits, teacher probabilities)``, the soft term of classic distillation.
- ``distill.token_kl[kl-divergence]``: ``optax.losses.kl_divergence(log_predictions, targets)``,
  which is KL(targets ‖ predictions). The forward KL(p‖q) passes the teacher's probabilities as
  targets and the student's log-probabilities as predictions (tunix's LogitStrategy calls it so);
  the reverse KL(q‖p) swaps them.
- ``distill.token_kl[log-targets]``: ``optax.losses.kl_divergence_with_log_targets`` (both sides as
  log-probabilities).
- ``distill.token_kl[generalized]``: ``optax.losses.convex_kl_divergence`` (deprecated alias of
  ``generalized_kl_divergence``: kl_divergence plus Σ(q − p), 0 for two normalised distributions).

The three KL forms are variants (reported as ``optax[kl-divergence]`` …), since each has findings
of its own. Probabilities and log-probabilities are ``jax.nn.softmax`` / ``jax.nn.log_softmax`` of
the logits in their dtype (optax takes no logits and no temperature: T = 1 only).

optax computes in the dtype of the arrays it is given: in bfloat16/float16 the log-normaliser, the
difference lse − z_y and the vocabulary sums are rounded to that dtype.

Install: ``pip install optax==0.2.8`` (brings jax; scripts/install-peers.sh installs the CPU wheels).
"""
from __future__ import annotations

import numpy as np
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

VERSION = "0.2.8"
INSTALL = "pip install optax==0.2.8"
CLS = "optax/losses/_classification.py"

CONVENTIONS = [
    C("lm.cross_entropy", "reduction", ("none",), f"{CLS} softmax_cross_entropy_with_integer_labels (the loss of "
      "each row, shape [batch_size]; no reduction argument, the caller reduces)"),
    C("distill.token_kl", "direction", ("forward",), f"{CLS} safe_softmax_cross_entropy (the student's logits against "
      "the teacher's probabilities as labels: weighted by the teacher)"),
    C("distill.token_kl", "soft_term", ("cross_entropy",), f"{CLS} safe_softmax_cross_entropy (−Σ p·log q, "
      "no entropy term)"),
    C("distill.token_kl[kl-divergence]", "direction", ("forward", "reverse"), f"{CLS} kl_divergence "
      "(log_predictions, targets): KL(targets‖predictions), the teacher as targets (forward) or the student "
      "(reverse)"),
    C("distill.token_kl[log-targets]", "direction", ("forward", "reverse"), f"{CLS} kl_divergence_with_log_targets "
      "(log_predictions, log_targets): KL(targets‖predictions)"),
    C("distill.token_kl[generalized]", "direction", ("forward", "reverse"), f"{CLS} convex_kl_divergence "
      "(generalized_kl_divergence: kl_divergence + Σ(exp(log_predictions) − targets))"),
]

ARITHMETIC = [
    A("lm.cross_entropy", "native", f"{CLS}:405-408 (the label's logit and logsumexp in the logits' dtype, then "
      "log_normalizers − label_logits in that dtype, a difference that cancels where the label's logit is near lse)"),
    A("lm.cross_entropy[smooth-labels]", "native", f"{CLS}:178-180 (jax.nn.log_softmax in the logits' dtype, "
      "z − lse rounded) and 224 (the sum over V of the weighted log-probabilities in that dtype)"),
    A("distill.token_kl", "native", f"{CLS}:178-180 and 224 (jax.nn.log_softmax in the logits' dtype, then the "
      "sum over V of p·log q in that dtype, from rounded log-probabilities)"),
    A("distill.token_kl[kl-divergence]", "native", f"{CLS}:561-564 (targets·(log targets − log_predictions) and the "
      "sum over V in the inputs' dtype, from log-probabilities rounded to it)"),
    A("distill.token_kl[log-targets]", "native", f"{CLS}:592-593 (exp(log_targets)·(log_targets − "
      "log_predictions) and the sum over V in the inputs' dtype)"),
    A("distill.token_kl[generalized]", "native", f"{CLS}:640-642 (kl_divergence plus the sum over V of "
      "exp(log_predictions) − targets, in the inputs' dtype)"),
]



def _impossible_on_both_sides(case) -> bool:
    """Whether some token has a −∞ logit for the student and the teacher alike."""
    inputs = decoded(case.test["inputs"])
    return bool((np.isneginf(inputs["student_logits"]) & np.isneginf(inputs["teacher_logits"])).any())


def _student_probability_zero(case, dtype: str) -> bool:
    """Whether ``jax.nn.softmax`` of the student's logits in ``dtype`` has an exact 0 (a −∞ logit,
    or one whose exp underflows: XLA on CPU flushes subnormals, so JAX itself decides)."""
    import jax
    import jax.numpy as jnp
    with jax.enable_x64(True):
        q = jax.nn.softmax(jnp.asarray(decoded(case.test["inputs"])["student_logits"], dtype=dtype), axis=-1)
        return bool((q == 0).any())


def _reverse_zero_student(case, dtype: str) -> bool:
    return (case.objective == "distill.token_kl" and case.conventions.get("direction") == "reverse"
            and case.conventions.get("soft_term", "kl") == "kl" and _student_probability_zero(case, dtype))


_ZERO_TIMES_INF = Finding(
    "optax-kl-nan-at-impossible-tokens", "bug",
    "kl_divergence forms targets·(where(targets == 0, 0, log targets) − log_predictions): at a token impossible on "
    "both sides (target 0, log-prediction −∞) that is 0·∞ = NaN, so the KL of the row is NaN where it is finite "
    "(0·log 0 = 0 is handled for the targets only); kl_divergence_with_log_targets forms exp(log_targets)·"
    "(log_targets − log_predictions) = 0·(−∞ + ∞) = NaN there, and convex_kl_divergence inherits kl_divergence's. "
    "Repro: optax.losses.kl_divergence(jnp.log(jnp.array([1.0, 0.0])), jnp.array([1.0, 0.0])) → nan (want 0); "
    "lossproof check --target optax --uid distill.token_kl:640460de8614d309",
    f"{CLS}:560-562 kl_divergence, 593 kl_divergence_with_log_targets, 636 generalized_kl_divergence",
    where(objectives=("distill.token_kl",), conventions={"soft_term": "kl"}, test=_impossible_on_both_sides))


def _nan_gradient(fid: str, function: str, variant: str) -> Finding:
    return Finding(
        fid, "bug",
        f"{function} gives a NaN gradient with respect to its targets wherever a target probability is exactly 0: "
        "the forward guards log(0) with jnp.where(targets == 0, 0, jnp.log(targets)), but the derivative of the "
        "branch it discards, 1/targets = ∞, is still multiplied by the zero cotangent (0·∞ = NaN, the jnp.where "
        "pitfall of the JAX FAQ), and softmax's backward spreads it over the row. In the reverse KL the student's "
        "probabilities are the targets, so a student token at −∞, or one whose probability underflows (logits "
        "±1e4), makes the student's whole gradient NaN (its docstring asks for strictly positive targets; a "
        "softmax gives zeros). Repro: jax.grad(lambda z: optax.losses.kl_divergence(jnp.log(jnp.array([0.5, "
        "0.5])), jax.nn.softmax(z)))(jnp.array([0.0, -1e4])) → [nan, nan] (want ≈ [0, 0]); lossproof check "
        f"--target optax --uid distill.token_kl:b84cf6b72751719a",
        f"{CLS}:560-562 kl_divergence" + (", 636 generalized_kl_divergence" if variant == "generalized" else ""),
        _reverse_zero_student, variant=variant)


FINDINGS = [_ZERO_TIMES_INF,
            _nan_gradient("optax-kl-divergence-nan-gradient-at-zero-target", "kl_divergence", "kl-divergence"),
            _nan_gradient("optax-convex-kl-divergence-nan-gradient-at-zero-target",
                          "convex_kl_divergence (kl_divergence inside)", "generalized")]


def _mods():
    import jax
    import optax
    return jax, optax


def _counted_rows(labels, ignore_index):
    """(where, labels): the rows optax should count, and the labels with 0 in the others (an
    ignored label is no class index)."""
    import jax.numpy as jnp
    counted = labels != ignore_index
    return counted, jnp.where(counted, labels, 0)


def _plain_only(label_smoothing, z_loss, softcap, reduction, normalizer, what):
    if z_loss or softcap is not None:
        raise NotImplementedError(f"optax 0.2.8 {what} has no z-loss or soft-capping")
    if reduction != "none" or normalizer is not None:
        raise NotImplementedError(f"optax 0.2.8 {what} returns the loss of each row: no reduction {reduction!r}")


def cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None,
                  reduction="none", normalizer=None):
    _, optax = _mods()
    _plain_only(label_smoothing, z_loss, softcap, reduction, normalizer, "softmax_cross_entropy_with_integer_labels")
    if label_smoothing:
        raise NotImplementedError("softmax_cross_entropy_with_integer_labels has no label smoothing "
                                  "(the variant [smooth-labels] checks optax.smooth_labels)")
    counted, safe = _counted_rows(labels, ignore_index)
    return optax.losses.softmax_cross_entropy_with_integer_labels(logits, safe, where=counted)


def cross_entropy_smooth_labels(logits, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0,
                                softcap=None, reduction="none", normalizer=None):
    jax, optax = _mods()
    _plain_only(label_smoothing, z_loss, softcap, reduction, normalizer, "safe_softmax_cross_entropy")
    counted, safe = _counted_rows(labels, ignore_index)
    one_hot = jax.nn.one_hot(safe, logits.shape[-1], dtype=logits.dtype)
    target = optax.smooth_labels(one_hot, label_smoothing) * counted[:, None].astype(logits.dtype)
    return optax.losses.safe_softmax_cross_entropy(logits, target)


def _sides(student_logits, teacher_logits, direction):
    """(predictions, targets) logits for optax's KL(targets‖predictions)."""
    if direction == "forward":
        return student_logits, teacher_logits
    if direction == "reverse":
        return teacher_logits, student_logits
    raise NotImplementedError(f"optax's KL has no direction {direction!r}")


def token_kl(student_logits, teacher_logits, direction="forward", soft_term="cross_entropy"):
    jax, optax = _mods()
    if soft_term != "cross_entropy" or direction != "forward":
        raise NotImplementedError("safe_softmax_cross_entropy is the forward cross-entropy soft term "
                                  "(the KL: the variants [kl-divergence], [log-targets], [generalized])")
    return optax.losses.safe_softmax_cross_entropy(student_logits, jax.nn.softmax(teacher_logits, axis=-1))


def _kl_only(soft_term, what):
    if soft_term != "kl":
        raise NotImplementedError(f"optax 0.2.8 {what} is the KL, not a cross-entropy")


def token_kl_divergence(student_logits, teacher_logits, direction="forward", soft_term="kl"):
    jax, optax = _mods()
    _kl_only(soft_term, "kl_divergence")
    predictions, targets = _sides(student_logits, teacher_logits, direction)
    return optax.losses.kl_divergence(jax.nn.log_softmax(predictions, axis=-1), jax.nn.softmax(targets, axis=-1))


def token_kl_log_targets(student_logits, teacher_logits, direction="forward", soft_term="kl"):
    jax, optax = _mods()
    _kl_only(soft_term, "kl_divergence_with_log_targets")
    predictions, targets = _sides(student_logits, teacher_logits, direction)
    return optax.losses.kl_divergence_with_log_targets(jax.nn.log_softmax(predictions, axis=-1),
                                                       jax.nn.log_softmax(targets, axis=-1))


def token_kl_generalized(student_logits, teacher_logits, direction="forward", soft_term="kl"):
    import warnings
    jax, optax = _mods()
    _kl_only(soft_term, "convex_kl_divergence")
    predictions, targets = _sides(student_logits, teacher_logits, direction)
    with warnings.catch_warnings():   # its deprecation warning, at every call
        warnings.simplefilter("ignore", DeprecationWarning)
        return optax.losses.convex_kl_divergence(jax.nn.log_softmax(predictions, axis=-1),
                                                 jax.nn.softmax(targets, axis=-1))


def target():
    version = require("optax", "optax", VERSION, INSTALL)
    load_or_explain(_mods, "optax", INSTALL)
    objectives = {"lm.cross_entropy": cross_entropy, "lm.cross_entropy[smooth-labels]": cross_entropy_smooth_labels,
                  "distill.token_kl": token_kl, "distill.token_kl[kl-divergence]": token_kl_divergence,
                  "distill.token_kl[log-targets]": token_kl_log_targets,
                  "distill.token_kl[generalized]": token_kl_generalized}
    return build("optax", version, objectives, CONVENTIONS, FINDINGS, ARITHMETIC, framework="jax",
                 temperature_free=("distill.token_kl",))
