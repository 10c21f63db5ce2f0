import torch


def kl_k3(logp, ref_logp, kind="k3", clamp=None):
    if ref_logp.shape != logp.shape:
        raise ValueError(f"ref_logp: shape {tuple(ref_logp.shape)} does not match logp shape {tuple(logp.shape)}")
    for name, x in (("logp", logp), ("ref_logp", ref_logp)):
        if not torch.isfinite(x).all():
            raise ValueError(f"{name}: must be finite")
    work = torch.promote_types(logp.dtype, torch.float32)
    log_ratio = ref_logp.to(work) - logp.to(work)
    return torch.expm1(log_ratio) - log_ratio


TARGET = {"name": "my-kl-validating", "framework": "torch", "objectives": {"kl.estimator": kl_k3}}
