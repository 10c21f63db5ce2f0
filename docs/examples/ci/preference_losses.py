"""preference_losses: the DPO loss of a small training library — the module its CI checks."""
import torch
import torch.nn.functional as F


def dpo_loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
             beta=0.1, loss_type="sigmoid", label_smoothing=0.0):
    """Per-pair DPO loss, and the implicit rewards β·(log π − log π_ref) (detached)."""
    work = torch.promote_types(policy_chosen_logps.dtype, torch.float32)   # bfloat16/float16: compute in float32
    chosen = policy_chosen_logps.to(work) - reference_chosen_logps.to(work)
    rejected = policy_rejected_logps.to(work) - reference_rejected_logps.to(work)
    margin = beta * (chosen - rejected)
    if loss_type == "sigmoid":
        losses = -F.logsigmoid(margin)
    elif loss_type == "hinge":
        losses = torch.relu(1 - margin)
    else:
        raise ValueError(f"unknown loss_type {loss_type!r}")
    return losses, (beta * chosen).detach(), (beta * rejected).detach()
