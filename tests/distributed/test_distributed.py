"""The distributed checks end to end, on real rank processes (gloo on CPU): the built-in steps
and vocabulary-parallel divergences pass, the classic normaliser bugs fail, misbehaving ranks
are errors that name the rank, and no process outlives a run. A few vectors each (the full
runs are `lossproof check --partition 2x2` and `--shard-vocab 2`)."""
import multiprocessing
import os
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the distributed checks run torch.distributed")

from lossproof.conformance import compare, plan
from lossproof.conformance.distributed import check
from lossproof.conformance.targets import from_mapping, load
from lossproof.conformance.targets.steps import (
    global_mean,
    global_token_normalizer,
    micro_batch_mean,
)
from lossproof.conformance.vectors.load import VectorSet
from lossproof.refimpl.torch import distill, grpo, lm, moe, ppo, reward, vocab_parallel

VS = VectorSet(None)
# token-mean, row token counts [3,1,1,3,2,1,2,3]: the even 2x2 split holds 4 tokens per micro-batch
BALANCED = "grpo.loss:a8892cbb841111e8"
STEP_UIDS = {BALANCED, "grpo.aggregate:5dc05bb163c59d9b", "proximal_kl.loss:afa2fa638037ff78",
             "dpo.loss:a9353e73841056c2"}
# lm.cross_entropy, softcap and z-loss, labels counted [0,1,1,1,1]: 2x2:even puts one counted
# token in every micro-batch, 2x2:uneven two in one and none in another
LM_BALANCED = "lm.cross_entropy:4a8035c69a769485"
# the token and pair means eligible since 1.5.0: one vector each, several splits and sequence modes
MEAN_UIDS = {LM_BALANCED, "lm.cross_entropy:0a976d743b1c028f",   # a normalizer given
             "lm.cross_entropy:942cc7419bd6a39a",                 # reduction 'sum'
             "ppo.value_loss:5cbb1870d5eca3e5", "ppo.value_loss:44db3b75c66e1672",
             "reward.pairwise:33065e36b71e6bd1", "reward.pairwise:88da62b6737808d7",
             "moe.router_z_loss:a42fc2e3e109d067"}
LM_SHARD_UIDS = {"lm.cross_entropy:4a8035c69a769485", "lm.cross_entropy:168fa869c28012e7",   # label smoothing
                 "lm.cross_entropy:30fd0f3ad304568a",   # 'none', ignore_index 0, a −inf run
                 "lm.cross_entropy:0a976d743b1c028f",   # a normalizer
                 "lm.token_logprobs:0b8c216db0ded76e",  # T = 1e-3
                 "lm.token_logprobs:fdb433d1b9b58911", "lm.entropy:962b92ed32cf094a",
                 "lm.entropy:0a84d68906bcc33f"}
SHARD_UIDS = {"distill.token_kl:640460de8614d309", "distill.hinton:28728e29bd349280",
              "distill.hinton:28729e29bd349280", "distill.generalized_jsd:a2448eeca12aa229"}


def _target(**keys):
    return from_mapping({"name": "test-steps", "framework": "torch", "conventions": "*", **keys}, "test-steps")


def _children() -> list[int]:
    """Live child processes of this process (Linux /proc; elsewhere what multiprocessing knows)."""
    listing = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
    if listing.exists():
        return [int(p) for p in listing.read_text().split()]
    return [p.pid for p in multiprocessing.active_children()]


def _statuses(results):
    return {(r.uid, r.partition, r.dtype): r.status for r in results if r.partition}


def test_builtin_steps_pass_every_partition():
    results = check.partitioned(load("torch"), VS, 2, 2, uids=STEP_UIDS)
    statuses = _statuses(results)
    kinds = {p.split(":")[1] for _, p, _ in statuses}
    assert kinds == {"even", "uneven", "empty", "short-rank"}
    assert {u for u, _, _ in statuses} == STEP_UIDS
    assert set(statuses.values()) == {"pass"}, [r.message for r in results if r.status != "pass"]
    assert all(r.repro.endswith(f"--partition {r.partition}") for r in results if r.partition)


# KL-Cov without `selected`: the top-k covariance tokens of the whole batch (the last one's k is 2)
KL_COV_UIDS = {"grpo.loss:7e4447a81044c2d0", "grpo.loss:0fef39a136e31c22", "grpo.loss:1d522b4fff580deb",
               "grpo.loss:a28175c73c99d693"}


def test_the_builtin_step_selects_kl_cov_over_the_batch():
    """Every split of the batch gets the batch's selection (a micro-batch's own top-k is another
    objective: it failed three of these splits and tied in three more)."""
    assert all(VS.by_uid(u).conventions["policy_loss"] == "kl-cov" and "selected" not in VS.by_uid(u).test["inputs"]
               for u in KL_COV_UIDS)
    results = check.partitioned(load("torch"), VS, 2, 2, uids=KL_COV_UIDS)
    statuses = _statuses(results)
    assert {u for u, _, _ in statuses} == KL_COV_UIDS
    assert set(statuses.values()) == {"pass"}, [r.message for r in results if r.status != "pass"]
    # the helper without the batch's selection: each micro-batch selects its own tokens
    per_micro_batch = _target(steps={"grpo.loss": global_mean(grpo.loss)})
    assert "fail" in _statuses(check.partitioned(per_micro_batch, VS, 2, 2, uids=KL_COV_UIDS)).values()


def test_a_case_is_planned_once_and_bounded_once_per_dtype(monkeypatch):
    """The runner asks the case plan once per vector; the bound of each dtype serves every split."""
    calls = Counter()
    ask, bound = plan.plan, compare.Tolerances.for_case
    monkeypatch.setattr(plan, "plan", lambda *a, **k: calls.update(["plan"]) or ask(*a, **k))
    monkeypatch.setattr(compare.Tolerances, "for_case", lambda *a, **k: calls.update(["bound"]) or bound(*a, **k))
    statuses = _statuses(check.partitioned(load("torch"), VS, 2, 2, uids={BALANCED}, dtypes=["float64"]))
    assert len(statuses) > 1 and set(statuses.values()) == {"pass"}
    assert calls == {"plan": 1, "bound": 1}


def test_sum_reduction_is_honoured():
    """A wrapper that sums gradients over ranks: the step must not multiply by the world size."""
    steps = {"grpo.loss": global_mean(grpo.loss, grad_reduction="sum")}
    assert set(_statuses(check.partitioned(_target(steps=steps, grad_reduction="sum"), VS, 2, 2,
                                           uids={BALANCED})).values()) == {"pass"}
    # declared "mean" (DDP), the same step is wrong by the factor 2 on every partition
    assert set(_statuses(check.partitioned(_target(steps=steps), VS, 2, 2, uids={BALANCED})).values()) == {"fail"}
    lm_steps = {"lm.cross_entropy": global_token_normalizer(lm.cross_entropy, grad_reduction="sum")}
    assert set(_statuses(check.partitioned(_target(steps=lm_steps, grad_reduction="sum"), VS, 2, 2,
                                           uids={LM_BALANCED}, dtypes=["float64"])).values()) == {"pass"}


def test_micro_batch_mean_fails_uneven_and_passes_even():
    """The Hugging Face accumulation (each micro-batch's token mean / accumulation steps) is exact
    when every micro-batch holds the same number of tokens, and biased otherwise (TRL #3021)."""
    target = _target(steps={"grpo.loss": micro_batch_mean(grpo.loss)})
    statuses = _statuses(check.partitioned(target, VS, 2, 2, uids={BALANCED}, dtypes=["float64"]))
    assert statuses[(BALANCED, "2x2:even", "float64")] == "pass"
    assert statuses[(BALANCED, "2x2:uneven", "float64")] == "fail"
    assert statuses[(BALANCED, "2x2:short-rank", "float64")] == "fail"


def test_builtin_steps_of_the_token_and_pair_means_pass_every_partition():
    results = check.partitioned(load("torch"), VS, 2, 2, uids=MEAN_UIDS)
    statuses = _statuses(results)
    assert {p.split(":")[1] for _, p, _ in statuses} == {"even", "uneven", "empty", "short-rank"}
    assert {u for u, _, _ in statuses} == MEAN_UIDS
    assert {d for _, _, d in statuses} == {"float64", "float32", "bfloat16", "float16"}
    assert set(statuses.values()) == {"pass"}, [r.message for r in results if r.status != "pass"]


@pytest.mark.parametrize("objective,fn,uid", [("lm.cross_entropy", lm.cross_entropy, LM_BALANCED),
                                              ("moe.router_z_loss", moe.router_z_loss,
                                               "moe.router_z_loss:6979f70ca9cdc54d")])
def test_a_token_mean_per_micro_batch_fails_uneven_and_passes_even(objective, fn, uid):
    """Each micro-batch's own token mean ÷ accumulation steps (the Trainer before transformers
    PR #34191 gave the model num_items_in_batch): exact when every micro-batch holds as many
    counted tokens, and biased on the uneven splits."""
    statuses = _statuses(check.partitioned(_target(steps={objective: micro_batch_mean(fn)}), VS, 2, 2, uids={uid},
                                           dtypes=["float64"]))
    assert statuses[(uid, "2x2:even", "float64")] == "pass"
    assert statuses[(uid, "2x2:uneven", "float64")] == "fail"
    assert statuses[(uid, "2x2:empty", "float64")] == "fail"


def test_a_pair_mean_per_micro_batch_fails_a_short_rank():
    """reward.pairwise and ppo.value_loss the same way: a rank with fewer pairs or tokens weighs
    them more."""
    steps = {"reward.pairwise": micro_batch_mean(reward.pairwise), "ppo.value_loss": micro_batch_mean(ppo.value_loss)}
    uids = {"reward.pairwise:33065e36b71e6bd1", "ppo.value_loss:5cbb1870d5eca3e5"}
    statuses = _statuses(check.partitioned(_target(steps=steps), VS, 2, 2, "short-rank", uids=uids,
                                           dtypes=["float64"]))
    assert set(statuses.values()) == {"fail"} and {u for u, _, _ in statuses} == uids


def test_the_entropy_bonus_is_a_global_token_mean():
    """ppo.entropy_bonus accumulates like grpo.aggregate: the built-in step (the global token count)
    passes every split, each micro-batch's own token mean ÷ steps fails the uneven one."""
    uid = "ppo.entropy_bonus:61982f272026801f"   # token-mean, 7 rows of 2 to 32 tokens
    builtin = _statuses(check.partitioned(load("torch"), VS, 2, 2, uids={uid}, dtypes=["float64"]))
    assert set(builtin.values()) == {"pass"} and (uid, "2x2:uneven", "float64") in builtin
    wrong = _statuses(check.partitioned(_target(steps={"ppo.entropy_bonus": micro_batch_mean(ppo.entropy_bonus)}),
                                        VS, 2, 2, uids={uid}, dtypes=["float64"]))
    assert wrong[(uid, "2x2:uneven", "float64")] == "fail"


def test_load_balancing_is_refused_with_its_reason(capsys):
    from lossproof.conformance import cli
    assert cli.main(["check", "--backend", "torch", "--objective", "moe.load_balancing", "--partition", "2x2"]) == 2
    err = capsys.readouterr().err
    assert "moe.load_balancing is not eligible: its f and P are means over the whole batch" in err


def test_per_token_losses_are_not_accumulated():
    uid = "lm.cross_entropy:88cbee186c138197"   # reduction 'none', 6 rows
    results = check.partitioned(load("torch"), VS, 2, 2, uids={uid})
    assert [(r.status, r.message) for r in results] == [
        ("skip", "reduction 'none' returns one loss per token: there is no scalar loss to accumulate")]


def test_lm_vocab_parallel_builtin_passes_and_the_shard_alone_fails():
    results = check.sharded(load("torch"), VS, 2, uids=LM_SHARD_UIDS)
    statuses = _statuses(results)
    assert {p.split(":")[1] for _, p, _ in statuses} == {"even", "uneven", "neg-inf"}
    assert {u for u, _, _ in statuses} == LM_SHARD_UIDS
    assert set(statuses.values()) == {"pass"}, [r.message for r in results if r.status != "pass"]
    # the single-process functions on the shard alone: a log-softmax over V/2 tokens, and a label
    # the shard does not hold is out of its range
    local = _target(sharded={"lm.entropy": lambda ctx, **kw: lm.entropy(**kw),
                             "lm.token_logprobs": lambda ctx, **kw: lm.token_logprobs(**kw)})
    bad = check.sharded(local, VS, 2, "even", uids=LM_SHARD_UIDS, dtypes=["float64"])
    assert {r.objective for r in bad} == {"lm.entropy", "lm.token_logprobs"}
    assert {r.status for r in bad} <= {"fail", "error"} and "fail" in {r.status for r in bad}


def _max_not_all_reduced(logits, labels, *, ctx, **kwargs):
    """The built-in cross-entropy with the MAX all-reduce of the row maxima left out: each rank
    shifts its exponentials by its own maximum, and the SUM all-reduce then adds sums taken
    relative to different maxima."""
    from unittest import mock

    import torch.distributed as dist
    real = dist.all_reduce

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None):
        return None if op == dist.ReduceOp.MAX else real(tensor, op=op, group=group)
    with mock.patch.object(vocab_parallel.dist, "all_reduce", all_reduce):
        return vocab_parallel.cross_entropy(logits, labels, **kwargs, vocab_start=ctx.vocab_start, group=ctx.group)


def _logprobs_without_the_max(logits, labels, temperature=1.0, *, ctx):
    """log q_y as log Σ_v e^{z_v/T} all-reduced with no maximum subtracted: exact in exact
    arithmetic, e^{z/T} overflows (or underflows to a zero sum) once |z|/T is large."""
    import torch.distributed as dist
    from torch.distributed.nn.functional import all_reduce
    x = logits / temperature
    local = labels - ctx.vocab_start
    here = (local >= 0) & (local < x.shape[-1])
    picked = torch.where(here, x.gather(1, local.clamp(0, x.shape[-1] - 1)[:, None])[:, 0], torch.zeros_like(x[:, 0]))
    total = all_reduce(torch.exp(x).sum(dim=-1), op=dist.ReduceOp.SUM, group=ctx.group)
    return all_reduce(picked, op=dist.ReduceOp.SUM, group=ctx.group) - torch.log(total)


def test_a_maximum_that_is_not_all_reduced_fails():
    cases = {u for u in LM_SHARD_UIDS if u.startswith("lm.cross_entropy:")}
    target = _target(sharded={"lm.cross_entropy": _max_not_all_reduced})
    results = check.sharded(target, VS, 2, "even", uids=cases, dtypes=["float64"])
    assert {r.uid for r in results} == cases
    assert {r.status for r in results} == {"fail"}, [(r.uid, r.status, r.message) for r in results]


def test_a_log_sum_exp_without_the_maximum_fails():
    uid = "lm.token_logprobs:0b8c216db0ded76e"   # T = 1e-3: e^{z/T} overflows
    target = _target(sharded={"lm.token_logprobs": _logprobs_without_the_max})
    results = check.sharded(target, VS, 2, "even", uids={uid}, dtypes=["float64"])
    assert [r.status for r in results] == ["fail"], [r.message for r in results]


def _equal_shards_cross_entropy(logits, labels, *, ctx, **kwargs):
    """Megatron's and Liger 0.8.5's contract (vocab_parallel_cross_entropy.py: ``vocab_start =
    rank * v_local``): every shard as wide as this one."""
    return vocab_parallel.cross_entropy(logits, labels, **kwargs, vocab_start=ctx.rank * logits.shape[-1],
                                        group=ctx.group)


def test_a_shard_start_from_equal_widths_fails_the_uneven_split():
    uid = "lm.cross_entropy:4a8035c69a769485"   # V = 6, labels 0, 4, 4, 5: the last on the 1-token shard
    target = _target(sharded={"lm.cross_entropy": _equal_shards_cross_entropy})
    statuses = _statuses(check.sharded(target, VS, 2, uids={uid}, dtypes=["float64"]))
    assert statuses == {(uid, "vocab2:even", "float64"): "pass", (uid, "vocab2:uneven", "float64"): "fail"}


def test_vocab_parallel_builtin_passes_and_local_softmax_fails():
    results = check.sharded(load("torch"), VS, 2, uids=SHARD_UIDS)
    statuses = _statuses(results)
    assert {p.split(":")[1] for _, p, _ in statuses} == {"even", "uneven", "neg-inf"}
    assert set(statuses.values()) == {"pass"}, [r.message for r in results if r.status != "pass"]
    local = _target(sharded={"distill.token_kl": lambda ctx, **kw: distill.token_kl(**kw)})
    bad = {r.partition: r for r in check.sharded(local, VS, 2, uids=SHARD_UIDS)}
    assert bad["vocab2:even"].status == "fail" and "rank 0: kl" in bad["vocab2:even"].message
    assert {r.status for r in bad.values()} <= {"fail", "error"}
    # a shard whose row holds only −inf logits: the single-process function rejects it outright
    assert bad["vocab2:neg-inf"].status == "error" and "rank 0: raised InputError" in bad["vocab2:neg-inf"].message


def _kl_through_autograd_all_reduce(student_logits, teacher_logits, direction="reverse", temperature=1.0, *, ctx):
    """Reverse KL over shards with torch.distributed.nn's differentiable all-reduce: the values are
    right, but its backward sums the replicated cotangent over the ranks (gradient × K)."""
    import torch.distributed as dist
    from torch.distributed.nn.functional import all_reduce

    def log_softmax(x):
        top = x.detach().amax(dim=-1, keepdim=True)
        dist.all_reduce(top, op=dist.ReduceOp.MAX, group=ctx.group)
        return x - top - torch.log(all_reduce(torch.exp(x - top).sum(dim=-1, keepdim=True), group=ctx.group))
    log_q = log_softmax(student_logits / temperature)
    log_p = log_softmax(teacher_logits.detach() / temperature)
    return all_reduce((torch.exp(log_q) * (log_q - log_p)).sum(dim=-1), group=ctx.group)


def test_a_differentiable_all_reduce_multiplies_the_gradient_by_the_ranks():
    uid = next(c.uid for c in VS.cases("distill.token_kl") if c.result == "valid"
               and c.conventions.get("direction") == "reverse" and "-Infinity" not in str(c.test["inputs"])
               and "Infinity" not in str(c.test["inputs"]) and len(c.test["inputs"]["student_logits"][0]) >= 8)
    target = _target(sharded={"distill.token_kl": _kl_through_autograd_all_reduce})
    results = check.sharded(target, VS, 2, "even", uids={uid}, dtypes=["float64"])
    assert [r.status for r in results] == ["fail"]
    assert results[0].outputs["kl"]["err_over_tol"] <= 1          # the values are the global ones
    assert results[0].outputs["grad:student_logits"]["max_rel"] == pytest.approx(1.0, rel=1e-6)   # twice


def _raises_on_rank_1(micro_batches, ctx):
    if ctx.rank == 1:
        raise RuntimeError("boom")
    return global_mean(grpo.loss)(micro_batches, ctx)


def _computes_forever_on_rank_1(micro_batches, ctx):
    if ctx.rank == 1:   # CPU time, not a sleep: the limit is the rank's CPU time, whatever the load
        while True:
            pass
    return global_mean(grpo.loss)(micro_batches, ctx)


def _wrong_shape_on_rank_1(micro_batches, ctx):
    out = global_mean(grpo.loss)(micro_batches, ctx)
    if ctx.rank == 1:
        micro_batches[0]["logp"].grad.data = torch.zeros(3, dtype=micro_batches[0]["logp"].dtype)
    return out


@pytest.mark.parametrize("step,words", [(_raises_on_rank_1, "rank 1: raised RuntimeError: boom"),
                                        (_computes_forever_on_rank_1,
                                         "rank 1: exceeded lossproof's per-case limit of 3 s CPU time"),
                                        (_wrong_shape_on_rank_1,
                                         "rank 1: the gradient of logp in micro-batch 0 has shape (3,)")])
def test_a_failing_rank_is_an_error_naming_it_and_leaves_no_process(step, words):
    before = set(_children())
    results = check.partitioned(_target(steps={"grpo.loss": step}), VS, 2, 2, "even", uids={BALANCED},
                                dtypes=["float64"], time_limit=3.0)
    assert [r.status for r in results] == ["error"]
    assert words in results[0].message
    assert results[0].probes.get("timeout") == (3.0 if step is _computes_forever_on_rank_1 else None)
    assert set(_children()) <= before


def test_more_ranks_than_cores_and_no_process_after_a_run():
    """R = 4 on a 2-core machine: the ranks share the cores, the verdicts do not change."""
    before = set(_children())
    results = check.partitioned(load("torch"), VS, 4, 1, uids={BALANCED}, dtypes=["float64"])
    assert results and {r.status for r in results} == {"pass"}
    assert set(_children()) <= before


def _sharded_error(task, rank, world, group, device):
    """Call a vocab-parallel lm function on this rank's half of ``task['logits']``: its InputError."""
    import numpy as np

    from lossproof.refimpl import validate
    z = np.asarray(task["logits"], dtype=np.float64)
    half = z.shape[1] // 2
    kwargs = dict(task["kwargs"])
    if task["fn"] != "entropy":
        kwargs["vocab_start"] = half * rank
    try:
        getattr(vocab_parallel, task["fn"])(torch.tensor(z[:, half * rank:half * (rank + 1)]), group=group, **kwargs)
    except validate.InputError as err:
        return {"status": "ok", "message": str(err)}
    return {"status": "ok", "message": ""}


@pytest.mark.parametrize("fn,logits,kwargs,rejected", [
    # rank 1's half of row 0 is −inf everywhere: valid, the row has tokens on rank 0
    ("entropy", [[0.0, 1.0, -float("inf"), -float("inf")], [0.0, 0.0, 0.0, 0.0]], {}, False),
    ("entropy", [[-float("inf")] * 4], {}, True),                                                # no possible token
    ("token_logprobs", [[0.0, 1.0, 2.0, -float("inf")]], {"labels": [3]}, True),                 # −inf at the label
    ("cross_entropy", [[0.0, -float("inf"), 2.0, 3.0]], {"labels": [2], "label_smoothing": 0.1}, True),
    ("cross_entropy", [[0.0, 1.0, float("nan"), 3.0]], {"labels": [0]}, True),                   # NaN on rank 1 only
])
def test_lm_vocab_parallel_rejects_what_the_single_process_function_rejects_on_every_rank(fn, logits, kwargs,
                                                                                         rejected):
    from lossproof.conformance.distributed.pool import RankPool
    from lossproof.refimpl import validate
    try:
        getattr(lm, fn)(torch.tensor(logits, dtype=torch.float64), **kwargs)
        expected = ""
    except validate.InputError as err:
        expected = str(err)
    with RankPool(2, _sharded_error, "cpu", 20.0) as pool:
        got = [o["message"] for o in pool.run({"id": 1, "fn": fn, "logits": logits, "kwargs": kwargs})]
    if "NaN" in expected:   # the rank without it names the other shard
        assert got == ["logits: another vocabulary shard holds NaN or +inf", expected]
    else:
        assert got == [expected, expected]
    assert bool(expected) == rejected
