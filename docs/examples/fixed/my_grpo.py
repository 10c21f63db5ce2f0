import torch


def advantages(rewards, scale="group", std_ddof=0, eps=0.0, degenerate="zero"):
    rewards = rewards.detach()                       # advantages are data, not part of the graph
    if rewards.dtype in (torch.bfloat16, torch.float16):
        rewards = rewards.float()                    # float32 inside; a wider result passes
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards: must be finite")
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True, correction=std_ddof)
    adv = (rewards - mean) / (std + eps)
    same = (rewards == rewards[:, :1]).all(dim=1, keepdim=True)   # decided on the rewards, not the std
    adv = torch.where(same, torch.zeros_like(adv), adv)
    return {"advantages": adv, "keep": torch.ones_like(rewards[:, 0])}


TARGET = {
    "name": "my-grpo",
    "framework": "torch",
    "conventions": {"grpo.advantages": {"std_ddof": [1, 0], "eps": [1e-4, 0.0]}},
    "objectives": {"grpo.advantages": advantages},
}
