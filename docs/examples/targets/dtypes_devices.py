import torch


def kl_k3(logp, ref_logp, kind="k3", clamp=None):
    log_ratio = ref_logp - logp                 # in the input dtype: exact enough in float32, not in bfloat16
    return torch.expm1(log_ratio) - log_ratio   # new tensors, if any, belong on logp.device


TARGET = {
    "name": "my-kl-float",
    "framework": "torch",
    "objectives": {"kl.estimator": kl_k3},
    "dtypes": ["float64", "float32"],          # default for torch: float64, float32, bfloat16, float16
    "devices": ["cpu", "cuda"],                # the first is the default; --device cuda selects the other
}
