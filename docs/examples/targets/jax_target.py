import jax.numpy as jnp


def kl_k3(logp, ref_logp, kind="k3", clamp=None):
    work = jnp.promote_types(logp.dtype, jnp.float32)   # bfloat16/float16 inputs: compute in float32
    log_ratio = ref_logp.astype(work) - logp.astype(work)
    return jnp.expm1(log_ratio) - log_ratio              # k3 = r − log r − 1, without cancellation


TARGET = {"name": "my-kl-jax", "framework": "jax", "objectives": {"kl.estimator": kl_k3}}
