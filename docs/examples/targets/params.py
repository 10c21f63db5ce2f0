import torch


def clipped_surrogate(logp, old_logp, advantages, eps_low=0.2, eps_high=None, dual_clip=None):
    ratio = torch.exp(logp - old_logp)
    clipped = ratio.clamp(1 - eps_low, 1 + eps_low)        # symmetric: this code has no eps_high
    return torch.minimum(ratio * advantages, clipped * advantages)


TARGET = {
    "name": "symmetric-clip",
    "framework": "torch",
    "objectives": {"grpo.clip": clipped_surrogate},
    "params": {"grpo.clip": {"eps_high": [None]}},     # the only value it takes: other cases are unsupported
}
