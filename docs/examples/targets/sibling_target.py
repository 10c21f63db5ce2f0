import torch

import kl_formulas        # beside this file: a target file's folder is importable


def kl_k3(logp, ref_logp, kind="k3", clamp=None):
    work = torch.promote_types(logp.dtype, torch.float32)
    return kl_formulas.k3(ref_logp.to(work) - logp.to(work))


TARGET = {"name": "my-kl-siblings", "framework": "torch", "objectives": {"kl.estimator": kl_k3}}
