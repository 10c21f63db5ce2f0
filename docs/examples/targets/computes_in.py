import torch


def token_logprobs(logits, labels):
    logp = torch.log_softmax(logits.float(), dim=-1)   # float32 whatever the inputs, as the library does
    return logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)


TARGET = {
    "name": "float32-logprobs",
    "framework": "torch",
    "objectives": {"lm.token_logprobs": token_logprobs},
    "temperature_free": ["lm.token_logprobs"],
    "computes_in": "float32",                  # by design: it is not checked in float64
}
