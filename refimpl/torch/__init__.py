"""PyTorch implementations of the catalog objectives, differentiable by autograd.

Same modules, function names and keyword arguments as ``refimpl.exact`` (and the catalog,
``conformance/catalog.py``), meant for training code::

    from lossproof.refimpl.torch.grpo import loss

Inputs are tensors on any device (the computation follows them); outputs are tensors in the
input dtype (a dict by output name for multi-output objectives). Every input outside the
catalog's ``grads`` is a constant: it is detached, so no gradient reaches it.

Precision. float64 inputs are computed in float64. bfloat16 and float16 inputs are upcast to
float32 for every reduction and transcendental, and the result is cast back to the input
dtype; their gradients come back in the input dtype. float32 inputs are computed in float32.
``proximal_kl.future_cost`` accumulates its running sums in float64 for every dtype.

Custom backward passes (everything else is plain autograd):
- ``distill.hinton``, ``distill.token_kl``, ``distill.generalized_jsd``: one
  ``torch.autograd.Function`` over rows of the vocabulary (``_careful.VocabRows``) with the
  analytic gradient, recomputed in chunks of rows in backward, so that no [N,V] float32
  intermediate is kept between forward and backward (memory), and with q·(ℓ − KL) formed
  relative to the most probable token (accuracy in saturated rows). Not twice differentiable.
  Tensor inputs take the fused path first (``_fused.FusedRows``: values and gradient in one
  pass over vocabulary tiles, tile-sized buffers only; rows it cannot evaluate to its accuracy
  are redone by the careful kernels of ``_careful``; docs/performance.md).
- ``distill.symmetric_kl``: the weighted sum of the forward and reverse token KL, each by its
  own path above. ``soft_term='cross_entropy'`` adds the teacher's entropy H(p) (no graph:
  the gradient is the KL's) to the value of either path.
- ``distill.skew_kl``, ``distill.tvd``: the same ``_careful.VocabRows`` with their analytic
  gradients; the fused path declines them (``distill.FUSED_DECLINED``).
- ``distill.sparse_kl``: autograd through log_softmax, gathered at the teacher's ids (the teacher is
  K stored log-probabilities); the fused path declines it too.
- ``distill.softmax``: ``_careful.Softmax``, same memory as torch's softmax (saves q), its
  backward q·(c − Σqc)/T in the same centred form: torch's loses every digit of a saturated
  row's gradient (logits ±1e4 at T = 1e-3). Not twice differentiable.
- ``lm.cross_entropy``: tensor logits take the fused path (``_fused_ce.FusedCrossEntropy``:
  row chunks, value and gradient in one pass, the compiled CPU kernel where it applies; no [N,V]
  intermediate besides the gradient); ``lm.FUSED = False`` gives the plain ``lm._CrossEntropy``.
  ``_fused_linear.linear_cross_entropy``: the same loss of logits h·Wᵀ (+ b), chunked over rows,
  dh, dW, db formed in forward (no [N,V] tensor at all).
- ``kl.estimator`` with ``kind='k3'`` (also inside ``grpo.loss``): ``kl._K3`` returns
  expm1(x) − x (series near 0) with gradient expm1(x), instead of autograd's
  (expm1(x) + 1) − 1, which loses the relative accuracy as the policy approaches the
  reference (x → 0).
Stop-gradients and flat branches use ``.detach()`` / ``torch.no_grad`` and the double ``where``
(``grpo._surrogate``, the masks of ``grpo.loss`` and ``proximal_kl.loss``), so that masked
positions, clipped ratios and overflowing flat branches get exactly zero gradient, never NaN.
"""

SUPPORTED_DTYPES = ("float64", "float32", "bfloat16", "float16")

