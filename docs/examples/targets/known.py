from functools import partial

import torch


def advantages(rewards, scale="group", std_ddof=0, eps=0.0, degenerate="zero", fixed=False):
    if (scale, std_ddof, eps, degenerate) != ("group", 0, 0.0, "zero"):
        raise NotImplementedError("only the paper's advantages: group scale, population std, no eps")
    rewards = rewards.detach()                                  # advantages are constants
    if rewards.dtype in (torch.bfloat16, torch.float16):
        rewards = rewards.float()                               # float32 inside (a wider result passes)
    mean = rewards.mean(dim=1, keepdim=True)
    std = ((rewards - mean) ** 2).mean(dim=1, keepdim=True).sqrt()
    if fixed:
        flat = (rewards == rewards[:, :1]).all(dim=1, keepdim=True)
    else:
        flat = std == 0     # the bug: equal rewards whose computed mean is inexact have a tiny std, not 0
    adv = torch.where(flat, torch.zeros_like(rewards), (rewards - mean) / std)
    return {"advantages": adv, "keep": torch.ones_like(mean[:, 0])}


REASON = "equal rewards get ±1, not 0, when their mean rounds (https://example.com/my-lib/issues/42)"
UNDECLARED = {"name": "my-advantages", "framework": "torch", "objectives": {"grpo.advantages": advantages}}
DECLARED = {**UNDECLARED, "known": {
    "grpo.advantages:cf0e66dd9ddb80c9": REASON,
    "grpo.advantages:04ac68de505f8479": REASON,
    "grpo.advantages:714e91de9275a9d4@float32": REASON,      # passes in float64
}}
FIXED = {**UNDECLARED, "objectives": {"grpo.advantages": partial(advantages, fixed=True)}}
