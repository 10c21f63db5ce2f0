"""docs/distributed.md: the objectives each split is for (from the catalog), the figure of gradient
accumulation's bias and the results of the distributed checks (the built-in backend and the peer
adapters, run for real)."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import tempfile
from collections import Counter

from lossproof.conformance import catalog
from lossproof.conformance.docs import Unavailable
from lossproof.conformance.docs.context import Context
from lossproof.conformance.docs.figures import BLUE, GREY, RED, new_figure

TOKENS, MICRO = 64, 2     # the figure: one rank, two micro-batches sharing 64 tokens
RUNS = (("torch", "--partition 2x2"), ("torch", "--shard-vocab 2"), ("trl", "--partition 2x2"),
        ("verl", "--partition 2x2"), ("megatron", "--shard-vocab 2"), ("torchtitan", "--shard-vocab 2"))


# what the built-in torch step of each kind of Objective.step divides by (conformance.targets.steps)
STEP_MEANS = {"count": "the unmasked tokens, sequences or rows its aggregation counts (`global_mean`)",
              "labels": "the labels that are not `ignore_index` (`global_token_normalizer`)",
              "terms": "the policy term and the KL term, each its own count (`global_mean_terms`)"}


def eligible(_ctx: Context) -> str:
    """The objectives ``--partition`` and ``--shard-vocab`` are for, and the settings refused, as the
    catalog states them (``Objective.step``, ``step_loss``, ``split_coupled``, ``not_step``,
    ``vocab_sharded``)."""
    lines = ["| objective | `--partition`: the global count a step divides by | logged loss | not split when | "
             "`--shard-vocab` |", "|---|---|---|---|---|"]
    for o in catalog.OBJECTIVES:
        if not (o.step or o.not_step or o.vocab_sharded):
            continue
        step = STEP_MEANS[o.step] if o.step else f"not eligible: {o.not_step}" if o.not_step else "—"
        coupled = "; ".join(f"{c.param} {' or '.join(repr(v) for v in c.values)}" for c in o.split_coupled)
        lines.append(f"| `{o.id}` | {step} | {f'`{o.step_loss}`' if o.step_loss else '—'} | {coupled or '—'} | "
                     f"{'yes' if o.vocab_sharded else '—'} |")
    return "\n".join(lines)


def _torch():
    if importlib.util.find_spec("torch") is None:
        raise Unavailable("torch is not installed: the steps are torch code")
    import torch
    return torch


@contextlib.contextmanager
def _one_process_group():
    """A gloo group of this process alone (world size 1), for steps that all-reduce."""
    import torch.distributed as dist
    with tempfile.TemporaryDirectory(prefix="lossproof-docs-") as tmp:
        dist.init_process_group("gloo", init_method=f"file://{os.path.join(tmp, 'init')}", rank=0, world_size=1)
        try:
            yield dist.group.WORLD
        finally:
            dist.destroy_process_group()


def accumulation_errors() -> tuple[list, list, list]:
    """(spread, per-micro-batch mean error, global normaliser error): the largest relative error
    of the per-token gradient of a token mean, against the exact 1/N, when 64 tokens fall into two
    micro-batches of 32 ± d tokens; spread = (n_max − n_min)/(N/M). Each error is measured by
    running the step helpers of conformance.targets.steps on refimpl.torch's grpo.aggregate."""
    torch = _torch()
    from lossproof.conformance.targets.steps import StepContext, global_mean, micro_batch_mean
    from lossproof.refimpl.torch import grpo
    steps = (micro_batch_mean(grpo.aggregate), global_mean(grpo.aggregate))
    spread, errors = [], ([], [])
    with _one_process_group() as group:
        for d in range(0, TOKENS // 2 - 3, 2):
            counts = (TOKENS // 2 + d, TOKENS // 2 - d)
            spread.append((counts[0] - counts[1]) / (TOKENS / MICRO))
            for step, out in zip(steps, errors):
                batches = []
                for n in counts:
                    mask = torch.zeros(1, TOKENS, dtype=torch.float64)
                    mask[0, :n] = 1
                    values = torch.linspace(-1, 1, TOKENS, dtype=torch.float64).reshape(1, TOKENS)
                    batches.append({"values": values.requires_grad_(True), "mask": mask, "mode": "token-mean"})
                step(batches, StepContext(0, 1, group, MICRO))
                grads = torch.cat([b["values"].grad[b["mask"] != 0] for b in batches])
                out.append(float((grads * TOKENS - 1).abs().max()))
    return spread, errors[0], errors[1]


def fig_accumulation(ctx: Context):
    spread, naive, exact = accumulation_errors()
    fig = new_figure(7.2, 3.9)
    ax = fig.subplots()
    ax.plot(spread, [100 * e for e in naive], "o-", color=RED, lw=2,
            label="each micro-batch's token mean ÷ accumulation steps")
    ax.plot(spread, [100 * e for e in exact], "s-", color=BLUE, lw=2,
            label="sum ÷ global token count (all-reduced)")
    ax.axhline(0, color=GREY, lw=0.6)
    ax.set_xlabel("spread of the micro-batches' token counts, (n_max − n_min) / mean")
    ax.set_ylabel("largest error of a token's gradient (%)")
    ax.set_title(f"Token mean over {TOKENS} tokens in {MICRO} micro-batches: gradient against the exact 1/N")
    ax.legend(loc="upper left", frameon=False)
    return fig


def results(ctx: Context) -> str:
    """The runs of RUNS, as a table of counts, and a reproduction of every finding."""
    _torch()
    missing = [name for name in ("trl", "verl", "megatron", "torchtitan") if importlib.util.find_spec(name) is None]
    if missing:
        raise Unavailable(f"{', '.join(missing)} not installed: the peer steps run the libraries' code")
    from lossproof.conformance.distributed import check
    from lossproof.conformance.targets import load
    lines = ["| target | check | cases | pass | known failure | fail | error | not eligible |", "|---|---|---|---|---|---|---|---|"]
    findings: dict[str, object] = {}
    for name, option in RUNS:
        target = load(name)
        if option.startswith("--partition"):
            results_ = check.partitioned(target, ctx.vs, 2, 2)
        else:
            results_ = check.sharded(target, ctx.vs, 2)
        n = Counter(r.status for r in results_)
        checked = sum(n[s] for s in ("pass", "xfail", "fail", "error", "xpass"))
        lines.append(f"| {name} | `{option}` | {checked} | {n['pass']} | {n['xfail']} | {n['fail']} | {n['error']} | "
                     f"{n['skip'] + n['unsupported']} |")
        # the findings about splits, each with its smallest float64 case as the reproduction
        split_reasons = {reason for reason, _ in target.known_splits}
        for r in results_:
            if r.status == "xfail" and r.dtype == "float64" and r.known in split_reasons:
                size = len(next(iter(ctx.case(r.uid).test["inputs"].values())))
                if r.known not in findings or size < findings[r.known][0]:
                    findings[r.known] = (size, r)
    out = ["\n".join(lines), ""]
    for reason, (_, r) in findings.items():
        finding, _, rest = reason.partition(" ")
        layout = r.message[r.message.rfind("[r0[") + 1:-1]
        out.append(f"- **{finding}** {rest}  \n  reproduce: `{r.repro}` — rows (unmasked tokens) per rank and "
                   f"micro-batch: `{layout}`")
    return "\n".join(out).rstrip()
