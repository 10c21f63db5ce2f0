"""Knowledge-distillation objectives: tempered softmax, Hinton's combined loss, full-vocabulary
token KL (forward / reverse, forward also as a cross-entropy), the symmetric KL and the
generalized Jensen–Shannon divergence of GKD (PyTorch).

Notation: z = student logits, t = teacher logits, T = temperature, q = softmax(z/T)
(student), p = softmax(t/T) (teacher), along the last axis (the vocabulary V); leading axes
are batch axes. A logit of −inf marks an impossible token (probability exactly 0); a row with
no possible token is rejected. The teacher is a constant (detached).

This module holds the catalog functions, their input checks and the choice of path; the
kernels live in two private modules. ``softmax`` has its own backward (``_careful.Softmax``:
the centred form, accurate in saturated rows). ``hinton``, ``token_kl`` and
``generalized_jsd`` take the fused path when their logits are tensors (``_fused``: one pass
over vocabulary tiles gives the values and the gradient; rows it cannot evaluate to its
accuracy go to the careful kernels), and otherwise the plain path, the careful kernels of
``_careful`` under ``_careful.VocabRows``. ``FUSED = False`` makes every call take the plain
path. Neither path is twice differentiable. ``symmetric_kl`` is the weighted sum of the forward
and reverse ``token_kl`` (each by its path). The cross-entropy soft term (``soft_term``) is the
KL plus the teacher's entropy (``_careful.teacher_entropy``, a constant: same gradient), added
to the value of whichever path computed the KL.
"""
from __future__ import annotations

import numpy as np
import torch

from lossproof.refimpl import validate
from lossproof.refimpl.torch import _careful, _common, _fused

__all__ = ["softmax", "hinton", "token_kl", "symmetric_kl", "generalized_jsd", "skew_kl", "tvd", "sparse_kl"]

DIRECTIONS = validate.DIRECTIONS
ENDPOINTS = validate.ENDPOINTS


# ---------------------------------------------------------------------------------------------
# Input handling (messages as refimpl.exact.distill)
# ---------------------------------------------------------------------------------------------

def _row_index(flat: int, lead: tuple) -> tuple:
    return tuple(int(i) for i in np.unravel_index(flat, lead)) if lead else ()


def _first(fn, *mats):
    """First (row, token) — or (row,) — where ``fn`` of the chunks is True, else None."""
    n, v = mats[0].shape
    for sl in _careful.row_slices(n, v, mats[0].device):
        hit = fn(*(m[sl].detach() for m in mats))
        if hit.any():
            idx = hit.nonzero()[0].tolist()
            return (sl.start + idx[0],) + tuple(idx[1:])
    return None


def _logits(name: str, x, rank=None) -> torch.Tensor:
    a = _common.array(name, x, allow_neg_inf=True)
    if rank is not None:
        validate.rank(name, tuple(a.shape), rank)
    elif a.ndim < 1:
        validate.fail(name, "expected at least 1 dimension (the vocabulary axis), got a scalar")
    if a.shape[-1] == 0:
        validate.fail(name, f"the vocabulary axis must not be empty, got shape {tuple(a.shape)}")
    return a


def _rows(name: str, a: torch.Tensor) -> None:
    hit = _first(lambda z: (z == _careful.NEG_INF).all(dim=-1), a.reshape(-1, a.shape[-1]))
    if hit is not None:
        validate.fail(name, f"row {_row_index(hit[0], tuple(a.shape[:-1]))} is -inf everywhere "
                            "(no possible token)")


def _pair(student_logits, teacher_logits, temperature, rank=None):
    zs = _logits("student_logits", student_logits, rank)
    ts = _logits("teacher_logits", teacher_logits, rank)
    validate.same_shape(student_logits=tuple(zs.shape), teacher_logits=tuple(ts.shape))
    T = validate.temperature(temperature)
    _rows("student_logits", zs)
    _rows("teacher_logits", ts)
    return zs, ts, T


def _require_support(name: str, inner: torch.Tensor, outer: torch.Tensor, what: str) -> None:
    """supp inner ⊆ supp outer row by row, else the divergence is +inf: reject, naming ``name``."""
    v = inner.shape[-1]
    hit = _first(lambda a, b: (a != _careful.NEG_INF) & (b == _careful.NEG_INF),
                 inner.reshape(-1, v), outer.reshape(-1, v))
    if hit is not None:
        validate.fail(name, f"-inf at row {_row_index(hit[0], tuple(inner.shape[:-1]))}, token "
                            f"{hit[1]}, where the other distribution has probability > 0: {what} "
                            "is infinite (support mismatch)")


# ---------------------------------------------------------------------------------------------
# Choice of path
# ---------------------------------------------------------------------------------------------

FUSED = True  # False: every call takes the plain path (the reference the fused one is tested against)


def _fast_pair(student_logits, teacher_logits, rank=None):
    """(student, teacher) when the fused path applies: tensors of a supported floating dtype,
    same shape and device, at least one row, a non-empty vocabulary; else None."""
    if not FUSED:
        return None
    zs, ts = student_logits, teacher_logits
    if not (isinstance(zs, torch.Tensor) and isinstance(ts, torch.Tensor)):
        return None
    if zs.dtype not in _common._FLOATS or ts.dtype not in _common._FLOATS:
        return None
    if zs.shape != ts.shape or zs.device != ts.device or zs.ndim < 1 or zs.numel() == 0:
        return None
    if rank is not None and zs.ndim != rank:
        return None
    return zs, ts


def _params_ok(fn) -> bool:
    """True when the parameter checks pass; on any InputError the caller takes the plain path,
    which raises the first error in the plain order."""
    try:
        fn()
    except validate.InputError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Objectives
# ---------------------------------------------------------------------------------------------

def softmax(logits, temperature: float = 1.0):
    """Tempered softmax q_i = exp(z_i/T) / Σ_j exp(z_j/T) along the last axis.

    Hinton, Vinyals & Dean 2015 §2; [reading-math-3] §"Destilación clásica" ((2,0) → (0.88, 0.12)
    at T=1, (0.73, 0.27) at T=2). ``logits`` [...,V]; returns probs of the same shape; a −inf
    logit has probability 0 and gradient 0. Gradient by ``_careful.Softmax`` (accurate in
    saturated rows).
    """
    z = _logits("logits", logits)
    T = validate.temperature(temperature)
    _rows("logits", z)
    return _careful.Softmax.apply(z, T, _common.work_dtype(z.dtype)).to(z.dtype)


def _labels(labels, n: int, v: int, device) -> torch.Tensor:
    y = _common.int_array("labels", labels)
    validate.rank("labels", tuple(y.shape), 1)
    validate.same_shape(**{"student_logits rows": (n,)}, labels=tuple(y.shape))
    bad = ((y < 0) | (y >= v)).nonzero()
    if len(bad):
        i = int(bad[0, 0])
        validate.fail("labels", f"label {int(y[i])} at row {i} is outside [0, {v})")
    return y.to(device)


def hinton(student_logits, teacher_logits, labels, temperature: float = 1.0, alpha: float = 0.5,
           t2_scale: bool = True, soft_term: str = "kl"):
    """Hinton distillation loss, mean over the N rows:

        L = 1/N Σ_n [ (1−α)(−log q_{y_n}^{(1)}) + α·s·KL(p^{(T)} ‖ q^{(T)}) ],  s = T² if t2_scale else 1.

    Hinton et al. 2015 §2 (soft targets at T, hard labels at T = 1, soft term times T²);
    [reading-math-3] §"Destilación clásica" (λ = ``alpha``). ``student_logits``, ``teacher_logits``
    [N,V], ``labels`` [N] integers in [0, V). Returns the scalar loss; gradient wrt
    ``student_logits`` by the fused path (``_fused.FastHinton``) or the plain one
    (``_careful.Hinton``). A −inf student logit at the label or where p > 0 makes the loss
    infinite and is rejected (naming ``student_logits``) whatever α is.
    ``soft_term='cross_entropy'``: the soft term is −Σ p log q = KL + H(p) (Hinton §2's form): the
    value gains α·s·mean H(p), the gradient is unchanged.
    """
    fast = _fast_pair(student_logits, teacher_logits, rank=2)
    if fast is not None and _params_ok(lambda: _hinton_params(fast[0], labels, temperature, alpha, t2_scale,
                                                              soft_term)):
        zs, ts = fast
        y, T, a, s = _hinton_params(zs, labels, temperature, alpha, t2_scale, soft_term)
        check = lambda: _hinton_inputs(zs, ts, labels, temperature, alpha, t2_scale, soft_term)  # noqa: E731
        loss = _fused.rows(_fused.FastHinton, _careful.Hinton(T, a, s), zs, ts, check, y, mean=True, T=T, alpha=a, s=s)
        return _plus_entropy(loss, zs, ts, T, soft_term, a * s, mean=True).to(_common.result_dtype(zs, ts))
    zs, ts, y, T, a, s = _hinton_inputs(student_logits, teacher_logits, labels, temperature, alpha, t2_scale,
                                        soft_term)
    rows = _careful.vocab_rows(_careful.Hinton(T, a, s), zs, ts, y)
    return _plus_entropy(rows.mean(), zs, ts, T, soft_term, a * s, mean=True).to(_common.result_dtype(zs, ts))


def _plus_entropy(value, zs, ts, T, soft_term, weight, mean=False):
    """``value`` (a KL, in the working dtype) turned into the cross-entropy form by adding
    weight·H(p) (its mean over rows for a mean), when ``soft_term`` asks for it."""
    if soft_term != "cross_entropy":
        return value
    h = _careful.teacher_entropy(ts, T, _common.work_dtype(_common.result_dtype(zs, ts)))
    return value + weight * (h.mean() if mean else h)


def _hinton_params(zs, labels, temperature, alpha, t2_scale, soft_term):
    """Hinton's checks that read no logit: labels, α, the T² flag, T, the soft term (fused path)."""
    validate.soft_term(soft_term)
    n, v = zs.shape
    if n == 0:
        validate.fail("student_logits", "needs at least one row (the loss is a mean over rows)")
    y = _labels(labels, n, v, zs.device)
    a = validate.alpha(alpha)
    T = validate.temperature(temperature)
    s = T * T if validate.t2_scale(t2_scale) else 1.0
    return y, T, a, s


def _hinton_inputs(student_logits, teacher_logits, labels, temperature, alpha, t2_scale, soft_term):
    """All of Hinton's input checks, in the plain order (the first failing one raises)."""
    zs, ts, T = _pair(student_logits, teacher_logits, temperature, rank=2)
    validate.soft_term(soft_term)
    n, v = zs.shape
    if n == 0:
        validate.fail("student_logits", "needs at least one row (the loss is a mean over rows)")
    y = _labels(labels, n, v, zs.device)
    a = validate.alpha(alpha)
    s = T * T if validate.t2_scale(t2_scale) else 1.0
    dead = (zs.detach().gather(1, y[:, None])[:, 0] == _careful.NEG_INF).nonzero()
    if len(dead):
        i = int(dead[0, 0])
        validate.fail("student_logits", f"-inf at the label (row {i}, token {int(y[i])}): "
                                        "the cross-entropy term is infinite")
    _require_support("student_logits", ts, zs, "KL(p‖q)")
    return zs, ts, y, T, a, s


def token_kl(student_logits, teacher_logits, direction: str = "reverse", temperature: float = 1.0,
             soft_term: str = "kl"):
    """Full-vocabulary KL between student q and teacher p at the next token, per row:

        reverse:  kl = Σ_v q_v log(q_v / p_v)   (student first)
        forward:  kl = Σ_v p_v log(p_v / q_v)

    at temperature T, no T² factor. Reverse: MiniLLM (Gu et al. 2024) §2.1 eq. 1; DeepSeek-V4
    §5.1.2 eq. 29; [reading-math-3] §"De la KL de secuencia a la KL de token". 0·log 0 = 0; an
    infinite KL (support mismatch) is rejected (reverse: names ``teacher_logits``; forward:
    ``student_logits``). Logits [...,V]; returns kl [...]; gradient wrt ``student_logits``
    by the fused path (``_fused.FastReverse``, ``_fused.FastForward``) or the plain one
    (``_careful.ReverseKL``: q(ℓ − kl)/T, ``_careful.ForwardKL``: (q − p)/T).
    Forward with ``soft_term='cross_entropy'``: kl = −Σ p log q = KL(p‖q) + H(p) (Hinton et al.
    2015 §2), the forward KL of either path plus ``_careful.teacher_entropy``.
    """
    fast = _fast_pair(student_logits, teacher_logits)
    if fast is not None and _params_ok(lambda: (validate.temperature(temperature),
                                                validate.direction(direction),
                                                validate.soft_term(soft_term, direction))):
        zs, ts = fast
        T = validate.temperature(temperature)
        check = lambda: _token_kl_inputs(zs, ts, direction, temperature, soft_term)  # noqa: E731
        fast_cls, careful = ((_fused.FastReverse, _careful.ReverseKL(T)) if direction == "reverse"
                             else (_fused.FastForward, _careful.ForwardKL(T)))
        kl = _fused.rows(fast_cls, careful, zs, ts, check, T=T)
        return _plus_entropy(kl, zs, ts, T, soft_term, 1.0).to(_common.result_dtype(zs, ts))
    zs, ts, T = _token_kl_inputs(student_logits, teacher_logits, direction, temperature, soft_term)
    kernel = _careful.ReverseKL(T) if direction == "reverse" else _careful.ForwardKL(T)
    kl = _careful.vocab_rows(kernel, zs, ts)
    return _plus_entropy(kl, zs, ts, T, soft_term, 1.0).to(_common.result_dtype(zs, ts))


def _token_kl_inputs(student_logits, teacher_logits, direction, temperature, soft_term="kl"):
    """All of token_kl's input checks, in the plain order."""
    zs, ts, T = _pair(student_logits, teacher_logits, temperature)
    validate.direction(direction)
    validate.soft_term(soft_term, direction)
    if direction == "reverse":
        _require_support("teacher_logits", zs, ts, "reverse KL(q‖p)")
    else:
        _require_support("student_logits", ts, zs, "forward KL(p‖q)")
    return zs, ts, T


def symmetric_kl(student_logits, teacher_logits, forward_weight: float = 0.5, temperature: float = 1.0):
    """Weighted symmetric KL per row (p teacher, q student, both at T; no T² factor):

        kl = w·KL(p ‖ q) + (1−w)·KL(q ‖ p),   w = ``forward_weight`` ∈ [0, 1].

    Jeffreys 1946, weighted; the DistiLLM (Ko et al. 2024, arXiv 2402.03898) baseline
    ``symmetric_kl`` (repository distillm/losses.py; λ = 0.9 on the reverse term). Both terms must
    be finite whatever w is (a support mismatch is rejected, naming the argument whose −inf makes
    one infinite). Logits [...,V]; returns kl [...]; the forward and reverse ``token_kl`` — each
    by the fused path for tensors, else the plain one — weighted and summed (autograd adds their
    gradients).
    """
    fast = _fast_pair(student_logits, teacher_logits)
    if fast is not None and _params_ok(lambda: (validate.temperature(temperature),
                                                validate.forward_weight(forward_weight))):
        zs, ts = fast
        w, T = validate.forward_weight(forward_weight), validate.temperature(temperature)
        check = lambda: _symmetric_inputs(zs, ts, forward_weight, temperature)  # noqa: E731
        forward = _fused.rows(_fused.FastForward, _careful.ForwardKL(T), zs, ts, check, T=T)
        reverse = _fused.rows(_fused.FastReverse, _careful.ReverseKL(T), zs, ts, check, T=T)
    else:
        zs, ts, T, w = _symmetric_inputs(student_logits, teacher_logits, forward_weight, temperature)
        forward = _careful.vocab_rows(_careful.ForwardKL(T), zs, ts)
        reverse = _careful.vocab_rows(_careful.ReverseKL(T), zs, ts)
    return (w * forward + (1 - w) * reverse).to(_common.result_dtype(zs, ts))


def _symmetric_inputs(student_logits, teacher_logits, forward_weight, temperature):
    """All of symmetric_kl's input checks, in the plain order."""
    zs, ts, T = _pair(student_logits, teacher_logits, temperature)
    w = validate.forward_weight(forward_weight)
    _require_support("student_logits", ts, zs, "forward KL(p‖q)")
    _require_support("teacher_logits", zs, ts, "reverse KL(q‖p)")
    return zs, ts, T, w


def generalized_jsd(student_logits, teacher_logits, beta: float = 0.5, temperature: float = 1.0,
                    endpoints: str = "limit"):
    """Generalized Jensen–Shannon divergence, per row (p teacher, q student, both at T):

        jsd = β·KL(p ‖ m) + (1−β)·KL(q ‖ m),   m = β·p + (1−β)·q,   β ∈ [0, 1].

    Agarwal et al. 2024 (GKD) §3 eq. 2; TRL GKDTrainer.generalized_jsd_loss.
    ``endpoints='limit'``: the continuous formula, 0 at β = 0 and β = 1 (zero gradient).
    ``endpoints='kl'``: β = 0 gives KL(p‖q) and β = 1 gives KL(q‖p), as TRL and Liger special-
    case them (infinite ones are rejected, naming the argument whose −inf causes it).
    Logits [...,V]; returns jsd [...]; gradient wrt ``student_logits`` by the fused path
    (``_fused.FastJSD``) or the plain one (``_careful.JSD``: (1−β)·q(ℓ − KL(q‖m))/T,
    ℓ = log q − log m).
    """
    fast = _fast_pair(student_logits, teacher_logits)
    if fast is not None and _params_ok(lambda: (validate.temperature(temperature),
                                                validate.jsd_beta(beta),
                                                validate.endpoints(endpoints))):
        b = validate.jsd_beta(beta)
        if not (b in (0, 1) and endpoints == "limit"):
            zs, ts = fast
            T = validate.temperature(temperature)
            check = lambda: _jsd_inputs(zs, ts, beta, temperature, endpoints)  # noqa: E731
            if b == 0:
                fast_cls, careful, extra = _fused.FastForward, _careful.ForwardKL(T), {}
            elif b == 1:
                fast_cls, careful, extra = _fused.FastReverse, _careful.ReverseKL(T), {}
            else:
                fast_cls, careful, extra = _fused.FastJSD, _careful.JSD(T, b), {"beta": b}
            return _fused.rows(fast_cls, careful, zs, ts, check, T=T, **extra).to(_common.result_dtype(zs, ts))
    zs, ts, T, b = _jsd_inputs(student_logits, teacher_logits, beta, temperature, endpoints)
    out = _common.result_dtype(zs, ts)
    if b in (0, 1) and endpoints == "limit":
        # A zero that stays in the graph (gradient exactly 0, also at −inf logits).
        flat = torch.where(torch.zeros_like(zs, dtype=torch.bool), zs, torch.zeros_like(zs))
        return flat.sum(dim=-1).to(out)
    kernel = _careful.ForwardKL(T) if b == 0 else _careful.ReverseKL(T) if b == 1 else _careful.JSD(T, b)
    return _careful.vocab_rows(kernel, zs, ts).to(out)


def _jsd_inputs(student_logits, teacher_logits, beta, temperature, endpoints):
    """All of generalized_jsd's input checks, in the plain order."""
    zs, ts, T = _pair(student_logits, teacher_logits, temperature)
    b = validate.jsd_beta(beta)
    validate.endpoints(endpoints)
    if endpoints == "kl" and b == 0:
        _require_support("student_logits", ts, zs, "beta=0 with endpoints='kl' → KL(p‖q)")
    if endpoints == "kl" and b == 1:
        _require_support("teacher_logits", zs, ts, "beta=1 with endpoints='kl' → KL(q‖p)")
    return zs, ts, T, b


# The fused path (``_fused``) streams vocabulary tiles with one running log-sum-exp per model,
# which is all the KL forms and the JSD need. It declines these two, which take the plain path
# (``_careful.VocabRows``, chunked rows, the same analytic gradients) for tensors too:
FUSED_DECLINED = {
    "distill.skew_kl": "no fused kernel: the skew mixture's log m and its gradient weights are "
                       "written for the careful kernels only; the plain path serves every call",
    "distill.tvd": "no fused kernel: |q − p| and sign(q − p) need both normalised rows at every "
                   "token (a second pass over the tiles); the plain path serves every call",
    "distill.sparse_kl": "no fused kernel: the teacher is K stored log-probabilities, not a logit row, so "
                         "only the student's log-sum-exp spans the vocabulary; autograd through "
                         "log_softmax (``sparse_kl``) serves every call",
}


def skew_kl(student_logits, teacher_logits, alpha: float = 0.1, direction: str = "forward",
            temperature: float = 1.0):
    """Skew KL per row (p teacher, q student, both at T):

        forward (α-SKL):  kl = KL(p ‖ α·p + (1−α)·q)
        reverse (α-SRKL): kl = KL(q ‖ α·q + (1−α)·p)

    DistiLLM (Ko et al. 2024, arXiv 2402.03898) §3; α = 0.1 as the official code (0 < α ≤ 1;
    α = 1 gives 0 with gradient 0). Logits [...,V]; returns kl [...]; gradient wrt
    ``student_logits`` by ``_careful.SkewKL`` on the plain path (``FUSED_DECLINED``).
    """
    zs, ts, T = _pair(student_logits, teacher_logits, temperature)
    a = validate.skew_alpha(alpha)
    validate.direction(direction)
    out = _common.result_dtype(zs, ts)
    if a == 1.0:
        # A zero that stays in the graph (gradient exactly 0, also at −inf logits).
        flat = torch.where(torch.zeros_like(zs, dtype=torch.bool), zs, torch.zeros_like(zs))
        return flat.sum(dim=-1).to(out)
    return _careful.vocab_rows(_careful.SkewKL(T, a, direction), zs, ts).to(out)


def tvd(student_logits, teacher_logits, temperature: float = 1.0):
    """Total variation distance ½·Σ_v |q_v − p_v| per row (p teacher, q student, both at T).

    Its subgradient takes sign(0) = 0 at a tie q_v = p_v (torch.abs's backward and Liger-Kernel
    0.8.5 ops/tvd.py do the same). Logits [...,V]; returns tvd [...]; gradient wrt
    ``student_logits`` by ``_careful.TVD`` on the plain path (``FUSED_DECLINED``).
    """
    zs, ts, T = _pair(student_logits, teacher_logits, temperature)
    return _careful.vocab_rows(_careful.TVD(T), zs, ts).to(_common.result_dtype(zs, ts))


def _nested(t: torch.Tensor, cast) -> list:
    return [[cast(x) for x in row] for row in t.detach().cpu().tolist()]


def sparse_kl(student_logits, teacher_ids, teacher_logps, renormalize: str = "none", temperature: float = 1.0,
              t2_scale: bool = False):
    """Forward KL over a top-k teacher, Σ_k p_k (log p_k − log q_{i_k}) per row (ids with p_k > 0;
    −inf log-probabilities are padding), q = softmax(z/T) — the temperature divides the student
    only. ``renormalize``: 'none' (verl 0.9.1 forward_kl_topk: p as stored, the student's full
    log q), 'teacher' (p over its top-k), 'both' (p and q over the ids; TRL 1.16.0 IW-OPD without
    its tail bucket), 'tail' (a (K+1)-th bucket 1 − Σp, 1 − Σq on both sides; TRL's default).
    ``t2_scale``: each row times T² (axolotl's top-k KD loss). ``student_logits`` [N,V], ``teacher_ids`` [N,K] integers, ``teacher_logps``
    [N,K]; returns kl [N]. Plain autograd in the working dtype (float32 for bfloat16/float16):
    log_softmax, gathered; 'both' renormalises the gathered logits themselves, so that the tokens
    off the ids get a gradient of exactly 0 (``FUSED_DECLINED``). Sources:
    ``refimpl.exact.distill.sparse_kl``.
    """
    zs = _logits("student_logits", student_logits, rank=2)
    ids = _common.int_array("teacher_ids", teacher_ids)
    lp = _common.array("teacher_logps", teacher_logps, allow_neg_inf=True)
    validate.rank("teacher_ids", tuple(ids.shape), 2)
    validate.rank("teacher_logps", tuple(lp.shape), 2)
    validate.sparse_teacher(_nested(ids, int), _nested(lp, float), tuple(zs.shape))
    validate.renormalize(renormalize)
    if renormalize == "tail":
        validate.sparse_tail(_nested(ids, int), _nested(lp, float), _nested(zs > float("-inf"), bool))
    T = validate.temperature(temperature)
    scale = T * T if validate.t2_scale(t2_scale) else 1.0
    _rows("student_logits", zs)
    out = _common.result_dtype(zs, lp)
    work = _common.work_dtype(out)
    ids = ids.to(zs.device)
    z = _common.upcast(zs, work)
    lp = _common.constant(lp, work).to(zs.device)
    live = lp > float("-inf")
    z_ids = z.gather(-1, ids)
    dead = (live & (z_ids.detach() == float("-inf"))).nonzero()
    if len(dead):
        i, k = (int(x) for x in dead[0])
        validate.fail("student_logits", f"-inf at row ({i},), token {int(ids[i, k])}, where the teacher has "
                                        "probability > 0: the KL is infinite (support mismatch)")
    neg_inf = torch.full_like(lp, float("-inf"))
    if renormalize in ("teacher", "both"):
        lp = lp - torch.logsumexp(lp, dim=-1, keepdim=True)
    if renormalize == "both":
        lq = torch.log_softmax(torch.where(live, z_ids / T, neg_inf), dim=-1)
    else:
        log_q = torch.log_softmax(z / T, dim=-1)
        lq = log_q.gather(-1, ids)
    zero = torch.zeros_like(lp)
    kl = torch.where(live, lp.exp() * (torch.where(live, lp, zero) - torch.where(live, lq, zero)), zero).sum(dim=-1)
    if renormalize == "tail":
        kl = kl + _tail_term(log_q, ids, live, lp)
    return (kl * scale).to(out)


def _tail_term(log_q, ids, live, lp):
    """p_t (log p_t − log q_t) per row for 'tail': p_t = −expm1(log Σ p) (a constant; 0 for a one-hot
    teacher, and rounding's p_t ≤ 0 where ``validate.sparse_tail`` found 0 < p_t < ~1e-16 read as 0),
    log q_t = logsumexp of log q over the possible tokens off the live ids (a direct sum: no 1 − Σ q
    cancellation). Selects, not products, keep −inf and its NaN gradients out of rows without a tail."""
    p_t = -torch.expm1(torch.logsumexp(lp, dim=-1))
    pos = p_t > 0
    held = torch.zeros_like(log_q, dtype=torch.bool).scatter_(-1, ids, live)
    off = ~held & (log_q.detach() > float("-inf"))
    some = off.any(dim=-1, keepdim=True)
    lw = torch.where(off, log_q, torch.full_like(log_q, float("-inf")))
    log_qt = torch.logsumexp(torch.where(some, lw, torch.zeros_like(lw)), dim=-1)
    one = torch.ones_like(p_t)
    term = p_t * (torch.log(torch.where(pos, p_t, one)) - torch.where(pos, log_qt, one))
    return torch.where(pos, term, torch.zeros_like(term))
