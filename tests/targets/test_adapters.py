"""The third-party adapters (``--target trl|verl|openrlhf|liger|transformers|megatron|torchtitan|olmo|optax|tunix``).

Without a library its tests skip with the reason and the install command (scripts/install-peers.sh
installs them all). With it, ``lossproof check --target NAME`` must exit 0 as shipped: every
failure is one of the adapter's documented findings (``FINDINGS`` in
conformance/targets/peers/<name>.py, declared as known failures and listed in
docs/conventions.md), so a new failure — the library or the vectors changed — exits 1 and names
itself. A finding that no longer explains any case is stale and must go, and so is a declared
known failure that passes. Each adapter judges bfloat16/float16 results by the tolerance model of
the library's arithmetic (``ARITHMETIC``): ``native`` only where the library computes in the
inputs' dtype what the careful model assumes float32, which the careful model must then reject.
"""
import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lossproof.conformance import catalog, cli, compare, harness
from lossproof.conformance.targets import PEERS, TargetError, load, split_variants
from lossproof.conformance.targets.peers._common import Finding, build, where
from lossproof.conformance.targets.target import objective_of

LIBRARIES = {  # adapter: (import name, distribution, pinned version)
    "trl": ("trl", "trl", "1.16.0"),
    "verl": ("verl", "verl", "0.9.1"),
    "openrlhf": ("openrlhf", "openrlhf", "0.11.2"),
    "liger": ("liger_kernel", "liger-kernel", "0.8.5"),
    "transformers": ("transformers", "transformers", "5.25.0"),
    "megatron": ("megatron", "megatron-core", "0.16.1"),
    "torchtitan": ("torchtitan", "torchtitan", "0.3.0"),
    "olmo": ("olmo_core", "ai2-olmo-core", "3.0.0"),
    "optax": ("optax", "optax", "0.2.8"),
    "tunix": ("tunix", "google-tunix", "0.1.7"),
}
DOC = Path(__file__).resolve().parents[2] / "docs" / "conventions.md"


def _module(name):
    return importlib.import_module(f"lossproof.conformance.targets.peers.{name}")


def _require(name):
    module, dist, version = LIBRARIES[name]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{dist} is not installed (scripts/install-peers.sh, or pip install "
                    f"{'' if name in ('trl', 'optax') else '--no-deps '}{dist}=={version})")
    try:
        return load(name), _module(name)
    except TargetError as err:
        pytest.skip(str(err))


def _check(argv, tmp_path, capsys) -> tuple[int, dict, str]:
    """``lossproof check ARGV --quiet --report-json``: (exit status, the report, the console)."""
    report = tmp_path / "report.json"
    status = cli.main(["check", *argv, "--quiet", "--report-json", str(report)])
    return status, json.loads(report.read_text(encoding="utf-8")), capsys.readouterr().out


@pytest.fixture(scope="module")
def vs(bundled_vectors):
    return bundled_vectors


def test_the_adapters_are_the_peers():
    assert set(LIBRARIES) == set(PEERS)


@pytest.mark.parametrize("name", LIBRARIES)
def test_missing_library_is_a_usage_error(name, monkeypatch, capsys):
    module, dist, version = LIBRARIES[name]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda n, *a, **k: None if n == module else real(n, *a, **k))
    with pytest.raises(TargetError, match=f"^{re.escape(dist)} is not installed: pip install .*{re.escape(version)}"):
        load(name)
    assert cli.main(["check", "--target", name, "--objective", "kl.*", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{dist} is not installed: pip install" in err and "Traceback" not in err


def test_core_check_needs_no_peer():
    # Importing the adapters (as the CLI does) must not import any library.
    for name in LIBRARIES:
        _module(name)
    assert cli.main(["check", "--backend", "numpy", "--objective", "kl.*", "--quiet"]) == 0


@pytest.mark.parametrize("name", LIBRARIES)
def test_declaration_cites_real_library_files(name):
    target, module = _require(name)
    import_name, dist, version = LIBRARIES[name]
    assert target.version == version
    root = Path(importlib.util.find_spec(import_name).submodule_search_locations[0]).parent
    for conv in module.CONVENTIONS + getattr(module, "PARAM_DEFAULTS", []):
        spec = catalog.get(objective_of(conv.objective))
        assert conv.param in {p.name for p in spec.params}, conv
        for value in conv.values:
            choices = spec.param(conv.param).choices
            assert not choices or value in choices, (conv, value)
        files = re.findall(r"[\w/]+\.(?:py|yaml)", conv.source)
        assert files, conv
        for f in files:
            assert (root / f).is_file(), f"{name}: {conv.objective}.{conv.param} cites {f}, not in {dist} {version}"
    for finding in module.FINDINGS:
        for f in re.findall(r"[\w/]+\.(?:py|yaml)", finding.source):
            assert (root / f).is_file(), f"{finding.id} cites {f}"
    for arithmetic in module.ARITHMETIC:
        lines = re.findall(r"([\w/]+\.py):(\d+)", arithmetic.source)
        assert lines, f"{name}: {arithmetic.objective} cites no library line"
        for f, line in lines:
            assert (root / f).is_file(), f"{name}: {arithmetic.objective} cites {f}"
            assert int(line) <= len((root / f).read_text(encoding="utf-8").splitlines()), (arithmetic, f, line)


@pytest.mark.parametrize("name", LIBRARIES)
def test_tolerance_models_are_the_declared_arithmetic(name):
    """The target's low-precision tolerance model is its ``ARITHMETIC`` table: one row per
    objective (or variant, ``objective[variant]``) it implements, ``careful`` or ``native``; a
    variant without a row of its own is judged by the plain objective's."""
    target, module = _require(name)
    keys = [a.objective for a in module.ARITHMETIC]
    assert len(keys) == len(set(keys)) and set(keys) <= set(target.objectives), keys
    assert all(a.model in compare.MODELS for a in module.ARITHMETIC)
    declared = {a.objective: a.model for a in module.ARITHMETIC}
    for part in split_variants(target):
        variant = part.name[len(name):]   # "" or "[variant]"
        for oid in part.objectives:
            want = declared.get(oid + variant, declared.get(oid))
            if want is not None:
                assert part.tolerance_model_for(oid) == want, (part.name, oid)


@pytest.mark.parametrize("name", LIBRARIES)
def test_findings_are_the_known_failures(name):
    """Each finding is declared as a known failure whose reason names it, says what it is and
    where in the library; the ids are unique."""
    target, module = _require(name)
    ids = [f.id for f in module.FINDINGS]
    assert len(ids) == len(set(ids)) and all(i.startswith(f"{name}-") for i in ids), ids
    for finding in module.FINDINGS:
        assert finding.reason.startswith(f"{finding.id} ({finding.kind}): ") and finding.source in finding.reason
        assert finding.kind in ("bug", "deviation", "precision", "numerics"), finding
    # a variant's finding is a known rule of that variant's target only, the others of every one
    for part in split_variants(target):
        variant = part.name[len(name) + 1:-1] or None
        assert [reason for reason, _ in part.known_rules] == \
            [f.reason for f in module.FINDINGS if f.variant is None] + \
            [f.reason for f in module.FINDINGS if f.variant is not None and f.variant == variant], part.name


def _triton_idle(module) -> tuple[set, set]:
    """The objectives and findings of an adapter's Triton kernels (``TRITON_ONLY``, ``TRITON_FINDINGS``)
    when they cannot run here (no CUDA device, no Triton interpreter): reported unsupported with the
    reason, so they pass on no vector and explain no failure."""
    runnable = getattr(module, "triton_runnable", None)
    if runnable is None or runnable():
        return set(), set()
    return set(module.TRITON_ONLY), set(module.TRITON_FINDINGS)


# the adapters with a vocabulary-parallel function, and the words of their out-of-contract splits
SHARDED = {"megatron": "equal widths", "torchtitan": "chunks of"}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SHARDED))
def test_sharded_adapter_passes_as_shipped(name, tmp_path, capsys):
    """``--shard-vocab 2``: the library's vocabulary-parallel function, the shard context standing in
    for its tensor-parallel group, fails no case; every sharded objective passes on some vector; the
    splits whose boundaries the library does not derive itself are unsupported, not failed."""
    target, _ = _require(name)
    status, report, _ = _check(["--target", name, "--shard-vocab", "2"], tmp_path, capsys)
    cases = [c for c in report["cases"] if c["axis"] == "conformance"]
    bad = [f"{c['status']} {c['uid']} ({c['dtype']}): {c['message'][:160]}" for c in cases
           if c["status"] in ("fail", "error", "xpass")]
    assert status == 0 and not bad, "\n".join(bad)
    assert {c["objective"] for c in cases if c["status"] == "pass"} == set(target.sharded)
    assert any(c["status"] == "unsupported" and SHARDED[name] in c["message"] for c in cases)


@pytest.mark.slow
@pytest.mark.parametrize("name", LIBRARIES)
def test_adapter_passes_as_shipped(name, tmp_path, capsys):
    """One full run: exit 0, no failure or error, no declared known failure that passes (xpass:
    stale), the console lists every finding, and every finding explains some failing case (one
    that explains none is stale: remove it)."""
    target, module = _require(name)
    status, report, out = _check(["--target", name], tmp_path, capsys)
    cases = [c for c in report["cases"] if c["axis"] == "conformance"]
    bad = [f"{c['status']} {c['uid']} ({c['dtype']}): {c['message'][:160]}" for c in cases
           if c["status"] in ("fail", "error")]
    assert status == 0 and not bad, "\n".join(bad)
    idle_objectives, idle_findings = _triton_idle(module)
    findings = [f for f in module.FINDINGS if f.id not in idle_findings]
    for finding in findings:
        # listed under the target or one of its variants (``optax[kl-divergence]: …``)
        assert (f"{name}: " in out or f"{name}[" in out) and finding.reason in out, f"{finding.id} is not listed"
    explained = {c["known"] for c in cases if c["status"] == "xfail"}
    stale = [f.id for f in findings if f.reason not in explained]
    assert not stale, f"{name}: findings that explain no failing case: {stale}"
    xpass = [f"{c['uid']} ({c['dtype']}): {c['known'][:60]}" for c in cases if c["status"] == "xpass"]
    assert not xpass, "stale known failures:\n" + "\n".join(xpass)
    # Every objective the adapter implements passes on some vector.
    passing = {(c["target"], c["objective"]) for c in cases if c["status"] == "pass"}
    assert {(p.name, oid) for p in split_variants(target) for oid in p.objectives} - passing == \
        {(name, oid) for oid in idle_objectives}


@pytest.mark.slow
def test_liger_triton_kernel_under_the_interpreter(tmp_path):
    """Liger's Triton cross-entropy on CPU through Triton's interpreter (TRITON_INTERPRET=1, read when
    the kernels are decorated: a child process that sets it before Liger is imported). Its vectors pass
    or are its declared findings (float32 inside for float64), and none is stale."""
    _require("liger")
    report = tmp_path / "report.json"
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(DOC.parents[1])}
    run = subprocess.run([sys.executable, "-m", "lossproof", "check", "--target", "liger", "--objective",
                          "lm.cross_entropy", "--quiet", "--report-json", str(report)],
                         env=env, capture_output=True, text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    statuses = {c["status"] for c in json.loads(report.read_text(encoding="utf-8"))["cases"]
                if c["axis"] == "conformance"}
    assert {"pass", "xfail"} <= statuses and not statuses & {"fail", "error", "xpass"}, statuses


@pytest.mark.slow
@pytest.mark.parametrize("name", LIBRARIES)
def test_native_declarations_are_needed(name, vs):
    """An objective declared ``native`` fails the careful model on some bfloat16/float16 vector:
    the looser bound is the library's arithmetic, not a convenience."""
    target, module = _require(name)
    native = [a.objective for a in module.ARITHMETIC if a.model == "native"]
    rejected = set()
    for part in split_variants(target):   # a variant's row is judged on its own target, name[variant]
        variant = part.name[len(name):]
        own = [oid for oid in part.objectives if oid + variant in native]
        if not own:
            continue
        results = harness.run(part, vs, objective=own, dtypes=["bfloat16", "float16"],
                              tolerances=compare.Tolerances({}, "careful"))
        rejected |= {r.objective + variant for r in results
                     if r.axis == "conformance" and r.status in ("fail", "xfail")}
    assert set(native) <= rejected, f"{name}: native although careful passes: {sorted(set(native) - rejected)}"


@pytest.mark.slow
@pytest.mark.parametrize("model", [None, "native"])
@pytest.mark.parametrize("name, objective", [("liger", "dpo.loss"), ("trl", "dpo.loss")])
def test_deviation_rules_follow_the_run_tolerance_model(name, objective, model, vs):
    """A known rule that predicts whether a deviation shows judges it by the bound of the run:
    loosening the tolerance model (``--tolerance-model native``) must not turn known failures
    stale. (``careful`` is not a loosening: a library declared ``native`` then fails for real.)
    (Liger's ignored label smoothing was judged by its declared model and went stale under
    ``native``: 2 xpass in bfloat16.) OpenRLHF's grpo.loss had such a rule for its token-mean KL term
    until vector set 1.3.0 declared it (``kl_aggregation``); its remaining one judges float64 only."""
    target, _ = _require(name)
    results = harness.run(target, vs, objective=[objective], dtypes=["bfloat16", "float16"],
                          tolerances=compare.Tolerances({}, model))
    statuses = {r.status for r in results if r.axis == "conformance"}
    assert "xfail" in statuses and not statuses & {"xpass", "fail", "error"}, sorted(statuses)


@pytest.mark.parametrize("name, objective, wrap", [
    ("verl", "kl.estimator", "kl_estimator"),
    ("trl", "dpo.loss", "dpo_loss"),
    ("openrlhf", "grpo.loss", "grpo_loss"),
    ("liger", "dpo.loss", "dpo_loss"),
])
def test_a_new_failure_fails_the_run(name, objective, wrap, monkeypatch, tmp_path, capsys):
    """A change in the library's numbers that no finding declares exits 1, and the cases it
    breaks are failures, not known failures; the known ones stay known."""
    _, module = _require(name)
    status, before, _ = _check(["--target", name, "--objective", objective], tmp_path, capsys)
    assert status == 0
    known_before = {(c["uid"], c["dtype"]) for c in before["cases"] if c["status"] == "xfail"}

    real = getattr(module, wrap)

    def perturbed(*args, **kwargs):   # the primary output, 0.1 % off
        out = real(*args, **kwargs)
        if isinstance(out, dict):
            primary = next(iter(out))
            return {**out, primary: out[primary] * (1 + 1e-3)}
        return out * (1 + 1e-3)

    monkeypatch.setattr(module, wrap, perturbed)
    status, after, out = _check(["--target", name, "--objective", objective, "--cases"], tmp_path, capsys)
    assert status == 1
    failed = [c for c in after["cases"] if c["status"] == "fail"]
    assert failed and all(not c["known"] for c in failed)
    assert "FAIL" in out and f"repro: lossproof check --target {name} --uid" in out
    # The declared deviations stay declared: a perturbed known failure is still a known one.
    status_after = {(c["uid"], c["dtype"]): c["status"] for c in after["cases"]}
    assert all(status_after[key] in ("xfail", "xpass") for key in known_before)


# adapters whose every declared convention is the paper's: --as-paper changes nothing for them
PAPER_ONLY = {"torchtitan"}


@pytest.mark.parametrize("name", sorted(PAPER_ONLY))
def test_an_adapter_of_paper_conventions_lists_no_deviation(name):
    target, _ = _require(name)
    assert target.deviations() == []


@pytest.mark.parametrize("name", [n for n in LIBRARIES if n not in PAPER_ONLY])
def test_as_paper_lists_the_deviations(name, vs, capsys):
    target, module = _require(name)
    devs = target.deviations()
    assert devs, name
    spec = catalog.get(devs[0][0])
    paper = {p.name: p.default for p in spec.params if p.convention}
    uid = next(c.uid for c in vs.cases(spec.id) if c.group == "paper"
               or all(c.conventions.get(k, v) == v for k, v in paper.items()))
    cli.main(["check", "--target", name, "--as-paper", "--uid", uid, "--quiet"])
    out = capsys.readouterr().out
    assert "differ from the paper" in out
    for objective, param, value, paper in devs:   # a variant's row is listed under its target, name[variant]
        assert f"{objective_of(objective)}:" in out and param in out


def _router_z_loss(router_logits, mask=None):
    """ST-MoE eq. 5 over the tokens ``mask`` selects (torch, float64 here)."""
    import torch
    lse = torch.logsumexp(router_logits, dim=-1)
    m = torch.ones_like(lse) if mask is None else mask.to(lse.dtype)
    return torch.where(m == 1, lse * lse, torch.zeros_like(lse)).sum() / m.sum()


def test_a_variant_finding_explains_its_variant_only(vs):
    """An adapter's second call form (``objective[variant]``, here the router z-loss without its
    mask) is its own target ``name[variant]``; a finding declared for that variant
    (``Finding(variant=...)``) explains that target's failures and is no known rule of the plain
    one, whose cases it would otherwise mark known and report stale (xpass). An arithmetic row of
    the variant key is the variant's tolerance model, not the plain objective's."""
    pytest.importorskip("torch")
    from lossproof.conformance.targets.peers._common import Arithmetic
    from lossproof.conformance.targets.peers.transformers import _no_mask_shows

    finding = Finding("lib-no-mask", "deviation", "the mask is not passed on", "lib.py z_loss",
                      where(objectives=("moe.router_z_loss",), shows=_no_mask_shows), variant="no-mask")
    target = build("lib", "1.0", {"moe.router_z_loss": _router_z_loss,
                                  "moe.router_z_loss[no-mask]": lambda router_logits, mask=None:
                                  _router_z_loss(router_logits)},
                   [], [finding], [Arithmetic("moe.router_z_loss[no-mask]", "native", "lib.py:1")], dtypes=("float64",))
    plain, variant = split_variants(target)
    assert (plain.name, variant.name) == ("lib", "lib[no-mask]")
    assert plain.known_rules == () and [r for r, _ in variant.known_rules] == [finding.reason]
    assert (plain.tolerance_model_for("moe.router_z_loss"), variant.tolerance_model_for("moe.router_z_loss")) == \
        (None, "native")
    statuses = {t.name: {r.status for r in harness.run(t, vs, objective="moe.router_z_loss", dtypes=["float64"])
                         if r.axis == "conformance"} for t in (plain, variant)}
    assert statuses["lib"] == {"pass"}, statuses
    assert statuses["lib[no-mask]"] == {"pass", "xfail"}, statuses


def test_import_bare_removes_its_placeholders():
    _require("openrlhf")
    from lossproof.conformance.targets.peers import openrlhf
    openrlhf._load()
    for name in ("deepspeed", "vllm", "flash_attn"):
        module = sys.modules.get(name)
        assert module is None or not type(module).__name__.startswith("_Absent")


@pytest.mark.parametrize("name", LIBRARIES)
def test_conventions_doc_lists_every_declared_convention(name):
    _, module = _require(name)
    assert DOC.is_file(), "docs/conventions.md is missing: lossproof docs build"
    text = DOC.read_text(encoding="utf-8")
    for conv in module.CONVENTIONS:
        assert conv.source in text, f"{name} {conv.objective}.{conv.param}: regenerate docs/conventions.md"


def test_transformers_trainer_step_is_the_global_token_mean(tmp_path):
    """transformers' gradient-accumulation step (``Trainer.compute_loss`` with num_items_in_batch,
    conformance/targets/peers/transformers.py causal_lm_step), written for ``--partition`` before
    lm.cross_entropy is a step objective: micro-batches of 2 and 5 rows (1 and 4 counted labels)
    give the gradient of the token mean over the whole batch (refimpl/arrays, float64), where a
    mean per micro-batch divided by the accumulation steps would weigh the lone label of the first
    twice as much as each of the others."""
    _require("transformers")
    import numpy as np
    import torch
    import torch.distributed as dist

    from lossproof.conformance.targets.peers.transformers import causal_lm_step
    from lossproof.conformance.targets.steps import StepContext
    from lossproof.refimpl.arrays import lm
    z = np.random.default_rng(7).normal(size=(7, 5))
    y = np.array([1, -100, 3, 0, -100, 4, 2])
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    try:
        leaf = torch.tensor(z, dtype=torch.float32, requires_grad=True)
        labels = torch.tensor(y)
        logged = causal_lm_step([{"logits": leaf[:2], "labels": labels[:2]}, {"logits": leaf[2:], "labels": labels[2:]}],
                                StepContext(rank=0, world_size=1, group=None, accumulation_steps=2))
    finally:
        dist.destroy_process_group()
    want = lm.cross_entropy_vjp(np.float64(1.0), z, y)["logits"]
    assert np.allclose(leaf.grad.double().numpy(), want, rtol=0, atol=1e-7)
    assert abs(logged - float(lm.cross_entropy(z, y))) < 1e-6


def test_optax_findings_reproduce():
    """The repro lines of optax's findings, against the exact values: kl_divergence at a token impossible
    on both sides is NaN where the KL is 0, and its gradient through softmax targets of which one
    underflows to 0 is NaN where the exact one is ≈ 0 (kl_divergence_with_log_targets gives it: the
    same divergence without the guarded log)."""
    _require("optax")
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    with jax.enable_x64(True):
        assert np.isnan(float(optax.losses.kl_divergence(jnp.log(jnp.array([1.0, 0.0])), jnp.array([1.0, 0.0]))))
        z, half = jnp.array([0.0, -1e4]), jnp.log(jnp.array([0.5, 0.5]))
        guarded = jax.grad(lambda x: optax.losses.kl_divergence(half, jax.nn.softmax(x)))(z)
        logs = jax.grad(lambda x: optax.losses.kl_divergence_with_log_targets(half, jax.nn.log_softmax(x)))(z)
    # exact: d KL(q‖p)/dz_j = q_j (log(q_j/p_j) − KL); q = (1, e^−1e4) to float64: 0 to 1e-300
    assert np.isnan(np.asarray(guarded)).all() and np.allclose(np.asarray(logs), 0.0, rtol=0, atol=1e-300)
