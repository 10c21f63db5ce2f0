"""Fused Triton kernels for the full-vocabulary objectives (DESIGN §12).

Same module and function names as ``refimpl.torch`` (the catalog ids), for the objectives
that read a whole vocabulary row: ``distill.softmax``, ``distill.hinton``,
``distill.token_kl``, ``distill.generalized_jsd``, ``distill.symmetric_kl``,
``distill.skew_kl``, ``distill.tvd``, ``lm.cross_entropy``, and ``lm.linear_cross_entropy``
(torch GEMMs over row chunks, the cross-entropy kernels on each chunk's logits: ``lm``); plus
``logprobs.selective_log_softmax``, the log-probability of the sampled token that the GRPO
and Proximal KL losses take as input.

Each objective is a forward kernel (one pass over vocabulary tiles with an online maximum and
normaliser: the row's value and statistics) and a backward kernel (one more pass: the
gradient for the row's cotangent), under ``torch.autograd.Function``; see ``_kernels``.

Tensors live on a CUDA device, or on the CPU when Triton runs its interpreter
(``TRITON_INTERPRET=1`` set before Triton is imported), which is how CI checks these kernels
against the vectors without a GPU. bfloat16/float16 inputs accumulate in float32, float64
inputs in float64; values come back in the inputs' dtype, gradients in the student's.
"""

SUPPORTED_DTYPES = ("float64", "float32", "bfloat16", "float16")
