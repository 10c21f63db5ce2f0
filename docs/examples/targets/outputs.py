import torch
import torch.nn.functional as F


def dpo(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
        beta=0.1, loss_type="sigmoid", label_smoothing=0.0):
    if loss_type != "sigmoid":
        raise NotImplementedError(f"loss_type={loss_type!r}: only the sigmoid loss is implemented")
    work = torch.promote_types(policy_chosen_logps.dtype, torch.float32)
    chosen = beta * (policy_chosen_logps.to(work) - reference_chosen_logps.to(work))
    rejected = beta * (policy_rejected_logps.to(work) - reference_rejected_logps.to(work))
    margin = chosen - rejected
    losses = -(1 - label_smoothing) * F.logsigmoid(margin) - label_smoothing * F.logsigmoid(-margin)
    return losses, chosen.detach(), rejected.detach()     # the rewards are logged metrics: detached


def losses_only(**arguments):
    return dpo(**arguments)[0]


def as_dict(**arguments):
    return dict(zip(("losses", "chosen_rewards", "rejected_rewards"), dpo(**arguments)))


TUPLE = {"name": "dpo-tuple", "framework": "torch", "objectives": {"dpo.loss": dpo}}          # catalog order
DICT = {"name": "dpo-dict", "framework": "torch", "objectives": {"dpo.loss": as_dict}}        # by output name
BARE = {"name": "dpo-bare", "framework": "torch", "objectives": {"dpo.loss": losses_only}}    # the primary output
