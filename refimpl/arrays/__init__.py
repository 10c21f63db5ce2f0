"""Fast implementations of every catalog objective over the Python array API.

One code path for NumPy, CuPy and any array-API library: the namespace is taken from the
inputs with ``array_api_compat.array_namespace`` (lists and Python numbers mean NumPy), and
every computation runs in the inputs' dtype (float64 or float32; lists → float64).
Same module and function names as ``refimpl.exact`` (``family.name`` is ``name`` in the
``family`` module, with ``name_vjp(cotangent, **kwargs)`` for the analytic gradient), same
argument checks and InputError messages (``refimpl.validate``). Like every fast backend it
is a conformance target, checked against the exact reference, never trusted.
"""
from lossproof.refimpl.arrays import distill, dpo, gae, grpo, kl, lm, moe, ppo, preference, proximal_kl, reward  # noqa: F401
from lossproof.refimpl.arrays._xp import SUPPORTED_DTYPES  # noqa: F401

