import torch


def advantages(rewards, scale="group", std_ddof=0, eps=0.0, degenerate="zero"):
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True)           # torch's default: the sample std
    adv = (rewards - mean) / (std + 1e-4)
    return {"advantages": adv, "keep": torch.ones_like(rewards[:, 0])}


TARGET = {"name": "my-grpo", "framework": "torch", "objectives": {"grpo.advantages": advantages}}
