import torch


def kl(logp, ref_logp, kind="k3", clamp=None):
    """k1, k2, k3 or abs; this implementation clamps only k3."""
    if kind not in ("k1", "k2", "k3", "abs"):
        raise ValueError(f"kind: must be 'k1', 'k2', 'k3' or 'abs', got {kind!r}")
    if clamp is not None and clamp <= 0:
        raise ValueError(f"clamp: must be > 0, got {clamp!r}")
    if clamp is not None and kind != "k3":
        raise NotImplementedError(f"clamp={clamp} with kind={kind!r}: only k3 can be clamped")
    work = torch.promote_types(logp.dtype, torch.float32)
    log_ratio = ref_logp.to(work) - logp.to(work)
    if kind == "k1":
        return -log_ratio
    if kind == "k2":
        return log_ratio * log_ratio / 2
    if kind == "abs":
        return log_ratio.abs()
    value = torch.expm1(log_ratio) - log_ratio
    return value if clamp is None else value.clamp(-clamp, clamp)


def declaring(name, conventions):
    return {"name": name, "framework": "torch", "objectives": {"kl.estimator": kl},
            "conventions": {"kl.estimator": conventions}}


PAPER = declaring("paper", {})                                   # undeclared: the paper defaults (k3, no clamp)
K1 = declaring("k1", {"kind": "k1"})                             # one value
LIST = declaring("list", {"kind": ["k1", "k2", "k3"]})           # several; the first is the default
ANY = declaring("any", {"kind": "*", "clamp": "*"})              # every value the vectors hold
COMBOS = declaring("combos", [{"kind": "*", "clamp": None},      # combinations: any kind unclamped,
                              {"kind": "k3", "clamp": 10.0}])    # or k3 clamped at 10
