import torch


def kl_k3(logp, ref_logp, kind="k3", clamp=None):
    work = torch.promote_types(logp.dtype, torch.float32)   # bfloat16/float16 inputs: compute in float32
    log_ratio = ref_logp.to(work) - logp.to(work)
    return torch.expm1(log_ratio) - log_ratio                # k3 = r − log r − 1, without cancellation


TARGET = {"name": "my-kl", "framework": "torch", "objectives": {"kl.estimator": kl_k3}}
