import torch


def logged_entropy(logits):
    """The policy's token entropy, logged as a metric: no graph is kept for it, on purpose."""
    with torch.no_grad():
        z = logits.to(torch.promote_types(logits.dtype, torch.float32))   # float32 inside for bfloat16/float16
        logp = torch.log_softmax(z, dim=-1)
        p = logp.exp()
        return -torch.where(p > 0, p * logp, 0.0).sum(dim=-1).to(logits.dtype)


TARGET = {
    "name": "logged-entropy",
    "framework": "torch",
    "objectives": {"lm.entropy": logged_entropy},
    "temperature_free": ["lm.entropy"],        # it takes no temperature
    "value_only": {"lm.entropy": "*"},         # its outputs carry no gradient: their values are judged
}
