import torch
import torch.nn.functional as F

TAU = 0.05   # DiscoPOP's temperature τ (Lu et al. 2024, eq. 5), a constant of this code


def discopop_loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
                  beta=0.1, loss_type="discopop"):
    """The discovered preference loss, with τ and no label smoothing written into it."""
    work = torch.promote_types(policy_chosen_logps.dtype, torch.float32)
    chosen = policy_chosen_logps.to(work) - reference_chosen_logps.to(work)
    rejected = policy_rejected_logps.to(work) - reference_rejected_logps.to(work)
    z = beta * (chosen - rejected)
    mix = torch.sigmoid(z / TAU)
    # mix·e^{−z} as exp(log σ(z/τ) − z): finite where e^{−z} alone overflows
    losses = -(1 - mix) * F.logsigmoid(z) + torch.exp(F.logsigmoid(z / TAU) - z)
    return losses.to(policy_chosen_logps.dtype)


TARGET = {
    "name": "discopop",
    "framework": "torch",
    "objectives": {"dpo.loss": discopop_loss},
    "conventions": {"dpo.loss": {"loss_type": "discopop"}},
    "fixed": {"dpo.loss": {"discopop_tau": TAU, "label_smoothing": 0.0}},   # no argument for either
}
