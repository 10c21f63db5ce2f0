"""Library code beside the target file (not itself a target)."""
import torch


def k3(log_ratio):
    return torch.expm1(log_ratio) - log_ratio
