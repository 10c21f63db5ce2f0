from lossproof import import_bare

# verl's package __init__ imports Ray; its loss module does not need it.
core_algos = import_bare("verl.trainer.ppo.core_algos", packages=("verl",), absent=("ray",))

VERL_NAMES = {"k1": "k1", "k2": "k2", "k3": "low_var_kl"}


def kl_penalty(logp, ref_logp, kind="k3", clamp=None):
    if clamp != (10.0 if kind == "k3" else None):
        raise NotImplementedError(f"verl clamps k3 at ±10 and nothing else (kind={kind!r}, clamp={clamp!r})")
    return core_algos.kl_penalty(logp, ref_logp, VERL_NAMES[kind])


TARGET = {
    "name": "verl-kl",
    "framework": "torch",
    "objectives": {"kl.estimator": kl_penalty},
    "conventions": {"kl.estimator": [{"kind": "k3", "clamp": 10.0}, {"kind": ["k1", "k2"], "clamp": None}]},
    "dtypes": ["float64", "float32"],   # verl computes k3 in the input dtype: it loses digits in bfloat16/float16
}
