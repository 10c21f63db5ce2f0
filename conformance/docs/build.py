"""The registry of every generated artifact of the documentation, and the build.

``ARTIFACTS`` lists every file that ``lossproof docs build`` writes or co-writes: its path in the
checkout, what it is built from, what it needs beyond lossproof's own dependencies, whether it is
slow (``--fast`` leaves it out). Three kinds:

- **figure**: a PNG drawn with matplotlib (``conformance.docs.figures``). It is up to date when
  it shows what a fresh drawing shows (same content digest), whatever its bytes.
- **page**: a hand-written Markdown file holding generated blocks between
  ``<!-- generated:NAME -->`` and ``<!-- /generated:NAME -->``. The build replaces what lies
  between the markers and keeps every other byte, so prose is edited by hand and numbers never
  are. A console session's block is up to date when it differs from a fresh run only in what
  varies between machines (``conformance.docs.sessions.equivalent``).
- **generated**: a file written whole by its producer (docs/conventions.md, docs/mutation.md).

An artifact (or a block of a page) whose inputs are missing on this machine — a peer library,
torch, the recorded kill table docs/mutation.json or benchmarks/results — is left as it is and
reported as skipped with the reason, never silently. Writes are atomic and happen only when
the content changed; ``check`` writes nothing and reports every out-of-date file.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from lossproof.conformance import catalog
from lossproof.conformance._host import pool_context
from lossproof.conformance._io import write_atomically
from lossproof.conformance.docs import (
    DocsError,
    Unavailable,
    conventions,
    distributed,
    families,
    mutation,
    performance,
    sessions,
    theorem_page,
)
from lossproof.conformance.docs.blocks import read_blocks, replace_blocks
from lossproof.conformance.docs.context import Context
from lossproof.conformance.docs.figures import png_bytes, require_matplotlib, same_figure, style
from lossproof.conformance.targets import PEERS

ROOT = Path(__file__).resolve().parents[2]      # the source checkout this module lives in


@dataclass(frozen=True)
class Block:
    """One generated block of a page."""
    produce: Callable[[Context], str]
    slow: bool = False                          # kept as it is under --fast
    session: bool = False                       # a console session: run in a subprocess, alongside the others
    same: Callable[[str, str], bool] | None = None   # current vs fresh: still up to date?


@dataclass
class Produced:
    data: bytes | None                          # None: nothing was produced (skipped)
    skipped: list[str] = field(default_factory=list)   # what was left as it is, and why


@dataclass(frozen=True)
class Artifact:
    path: str                                   # relative to the root of the checkout
    kind: str                                   # "figure", "page" or "generated"
    produce: Callable[[Context, bytes | None, str], Produced]
    inputs: str                                 # what it is built from
    needs: tuple[str, ...] = ()                 # beyond lossproof's dependencies (and matplotlib)
    slow: bool = False                          # left out by --fast
    what: str = ""                              # figures: what it shows (the table of docs/index.md)
    shown_on: str = ""                          # figures: the page that shows it (relative to docs/)
    note: str = ""                              # printed before a long producer runs


@dataclass
class Outcome:
    path: str
    status: str          # "written", "unchanged", "stale" (check mode), "skipped" (inputs missing)
                         # or "left out" (slow, under --fast)
    seconds: float
    skipped: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- producers

def _page(blocks: dict[str, Block]):
    """A hand-written page whose generated blocks are rebuilt."""
    def produce(ctx: Context, old: bytes | None, path: str) -> Produced:
        if old is None:
            raise DocsError(f"{path}: missing (a hand-written page with the generated blocks {', '.join(blocks)})")
        text = old.decode("utf-8")
        current = read_blocks(text)
        skipped: list[str] = []

        def fresh(name: str, block: Block) -> str:
            if block.slow and not ctx.include_slow:
                return current.get(name, "")
            try:
                new = block.produce(ctx)
            except Unavailable as err:
                skipped.append(f"block {name}: {err}")
                return current.get(name, "")
            return current[name] if block.same and name in current and block.same(current[name], new) else new

        # Sessions wait on subprocesses: run them side by side, the in-process blocks one by one.
        with ThreadPoolExecutor(max_workers=4) as pool:
            running = {n: pool.submit(fresh, n, b) for n, b in blocks.items() if b.session}
            out = {n: fresh(n, b) for n, b in blocks.items() if not b.session}
            out.update({n: f.result() for n, f in running.items()})
        if len(skipped) == len(blocks):       # nothing of the page could be built here
            return Produced(None, sorted(skipped))
        return Produced(replace_blocks(text, {n: out[n] for n in blocks}, path).encode("utf-8"), sorted(skipped))
    return produce


def _generated(render: Callable[[Context], str]):
    """A file written whole by ``render``."""
    def produce(ctx: Context, old: bytes | None, path: str) -> Produced:
        try:
            return Produced(render(ctx).encode("utf-8"))
        except Unavailable as err:
            return Produced(None, [str(err)])
    return produce


def _figure(draw: Callable[[Context], object]):
    """A figure that ``draw`` returns, in the house style."""
    def produce(ctx: Context, old: bytes | None, path: str) -> Produced:
        try:
            with style():
                return Produced(png_bytes(draw(ctx)))
        except Unavailable as err:
            return Produced(None, [str(err)])
    return produce


def _theorem_figure(ctx: Context, old: bytes | None, path: str) -> Produced:
    return Produced(theorem_page.figure())


def _session(name: str) -> Block:
    return Block(lambda ctx: sessions.render(ctx.root, name), slow=True, session=True, same=sessions.equivalent)


def _example(path: str) -> Block:
    """A file of the checkout shown as a code block (the sessions of its page run this file)."""
    def produce(ctx: Context) -> str:
        source = ctx.root / path
        if not source.is_file():
            raise DocsError(f"{path}: not found (the page shows it, and its sessions run it)")
        return f"```python\n# {source.name}\n{source.read_text(encoding='utf-8').rstrip()}\n```"
    return Block(produce)


def _blocks(producers: dict[str, Callable[[Context], str]], **options) -> dict[str, Block]:
    return {name: Block(fn, **options) for name, fn in producers.items()}


def figures_table(_ctx: Context) -> str:
    """Every figure of the registry, for docs/index.md."""
    lines = ["| figure | shows | on the page |", "|---|---|---|"]
    for art in ARTIFACTS:
        if art.kind == "figure":
            rel = art.path.removeprefix("docs/")
            lines.append(f"| [`{rel}`]({rel}) | {art.what} | [{art.shown_on}]({art.shown_on}) |")
    return "\n".join(lines)


# What a family page shows beyond its three catalog blocks (arguments, libraries, examples): the
# proximal_kl page also carries the 50-digit stationary-policy table, which makes it slow.
_PAGE_EXTRAS = {
    "docs/proximal_kl.md": dict(
        blocks={"theorem": Block(lambda ctx: theorem_page.render(), slow=True)},
        inputs="; the 50-digit stationary-policy table and the probe of the torch backend (slow)",
        needs=("torch",), note="running the 50-digit stationary-policy table and the probe (about 30 s)"),
}


def _family_pages(slow: bool = False) -> tuple[Artifact, ...]:
    """One page per family page of the catalog (``Objective.page``), its worked examples those its
    objectives name (``Objective.docs_examples``; none: the source article's, chosen by the page);
    ``slow`` selects the pages with a slow block (they are built last)."""
    pages: dict[str, list] = {}
    for o in catalog.OBJECTIVES:
        pages.setdefault(o.page, []).append(o)
    out = []
    for page, objectives in pages.items():
        extra = _PAGE_EXTRAS.get(page, {})
        if any(b.slow for b in extra.get("blocks", {}).values()) != slow:
            continue
        family = objectives[0].family
        examples = tuple(uid for o in objectives for uid in o.docs_examples) or None
        blocks = {**_blocks(families.family_blocks(family, examples)), **extra.get("blocks", {})}
        out.append(Artifact(page, "page", _page(blocks), VECTORS + extra.get("inputs", ""),
                            needs=extra.get("needs", ()), note=extra.get("note", "")))
    return tuple(out)


# --------------------------------------------------------------------------- the registry

VECTORS = "the vector files (catalog, groups, worked examples)"
EXACT = "the exact reference (lossproof.refimpl.exact) and the vectors"
RESULTS = f"{performance.RESULTS}/*.json (python benchmarks/performance.py)"

# Fast artifacts first; the slow ones (--fast leaves them out) last.
ARTIFACTS: tuple[Artifact, ...] = (
    Artifact("docs/figures/softmax_temperature.png", "figure", _figure(families.fig_temperature), EXACT,
             what="softmax of logits (2, 0) at T = 1 and T = 2", shown_on="distill.md"),
    Artifact("docs/figures/kl_weights.png", "figure", _figure(families.fig_kl_weights), EXACT,
             what="forward vs reverse KL weights, teacher (0.8, 0.2), student (0.4, 0.6)", shown_on="distill.md"),
    Artifact("docs/figures/skew_kl.png", "figure", _figure(families.fig_skew_kl), EXACT,
             what="skew KL: the mixture αp + (1−α)q and KL(p‖q) vs the skew KL at α = 0.1, 0.5, teacher (0.8, 0.2)",
             shown_on="distill.md"),
    Artifact("docs/figures/one_token_vs_vocabulary.png", "figure", _figure(families.fig_one_token), EXACT,
             what="one sampled token vs the full vocabulary (cat, dog, fox)", shown_on="distill.md"),
    Artifact("docs/figures/dpo_gains.png", "figure", _figure(families.fig_dpo_gains), EXACT,
             what="DPO gains of two pairs with the same margin Δ = 3", shown_on="dpo.md"),
    Artifact("docs/figures/simpo_margin.png", "figure", _figure(families.fig_simpo_margin), EXACT,
             what="SimPO loss against the per-token margin, γ = 1 vs 0", shown_on="preference.md"),
    Artifact("docs/figures/grpo_advantages.png", "figure", _figure(families.fig_grpo_advantages), EXACT,
             what="GRPO advantages of rewards (0, 1, 1, 0)", shown_on="grpo.md"),
    Artifact("docs/figures/clip_objective.png", "figure", _figure(families.fig_clip), EXACT,
             what="clipped objective C_t against the ratio, A = ±1, ε = 0.2", shown_on="grpo.md"),
    Artifact("docs/figures/performance_time.png", "figure", _figure(performance.fig_time),
             f"{performance.RESULTS}/{performance.SWEEP}", needs=(performance.RESULTS,), shown_on="performance.md",
             what="time of the distillation kernels against the vocabulary size"),
    Artifact("docs/figures/performance_memory.png", "figure", _figure(performance.fig_memory),
             f"{performance.RESULTS}/{performance.SWEEP}", needs=(performance.RESULTS,), shown_on="performance.md",
             what="peak additional memory of the distillation kernels against the vocabulary size"),
    Artifact("docs/figures/gradient_accumulation.png", "figure", _figure(distributed.fig_accumulation),
             "the step helpers of lossproof.conformance.targets.steps on lossproof.refimpl.torch, one gloo process", needs=("torch",),
             what="gradient error of a per-micro-batch token mean vs the global normaliser, against the spread of "
                  "token counts", shown_on="distributed.md"),
    *_family_pages(),
    Artifact("docs/index.md", "page", _page({"figures": Block(figures_table)}), "this registry"),
    Artifact("docs/performance.md", "page", _page(_blocks(performance.BLOCKS)), RESULTS, needs=(performance.RESULTS,)),
    Artifact("docs/vectors.md", "page", _page({"tolerances": Block(families.tolerance_table),
                                               "show-grpo-group": _session("show-grpo-group"),
                                               "cite-clip": _session("cite-clip")}),
             "the tolerance policy (lossproof.conformance.compare); console sessions (slow)"),
    Artifact("docs/validate-your-implementation.md", "page", _page({
        "first-target": _example("docs/examples/first/my_grpo.py"),
        "fixed-target": _example("docs/examples/fixed/my_grpo.py"),
        **{name: _session(name) for name in ("list", "check-first-target", "show-zero-std-rounding",
                                             "check-fixed-target", "check-fixed-target-reports",
                                             "pytest-fixed-target")}}),
             "docs/examples/*/my_grpo.py; console sessions that check them (slow, torch)", needs=("torch",)),
    Artifact("README.md", "page", _page({name: _session(name) for name in
                                         ("check-torch-distill", "show-softmax", "cite-softmax-latex")}),
             "console sessions (slow, torch)", needs=("torch",)),
    Artifact("docs/figures/theorem_convergence.png", "figure", _theorem_figure,
             "the exact fixed-point iteration (lossproof.refimpl.exact.tabular, 30 digits)", slow=True,
             what="exact fixed-point iteration of several update rules (the stationary-policy theorem)",
             shown_on="proximal_kl.md", note="iterating the exact updates of 8 rules at 30 digits (about 10 s)"),
    *_family_pages(slow=True),
    Artifact("docs/distributed.md", "page", _page({"eligible": Block(distributed.eligible),
                                                      "results": Block(distributed.results, slow=True)}),
             "lossproof check --partition 2x2 (torch, trl, verl) and --shard-vocab 2 (torch, megatron, torchtitan) over "
             "every vector", needs=("torch", "trl", "verl", "megatron", "torchtitan"), slow=True,
             note="running the distributed checks of the torch backend, TRL, verl, Megatron-core and torchtitan on rank "
                  "processes (about 4 minutes)"),
    Artifact("docs/mutation.md", "generated", _generated(mutation.page),
             f"{mutation.DATA}, the kill table recorded from tests/mutants (tests/mutants/killtable.py)"),
    Artifact("docs/conventions.md", "generated", _generated(conventions.page),
             "the third-party adapters checked over the vectors, declared and --as-paper", needs=(*PEERS, "torch"),
             slow=True, note="running the third-party adapters over every vector, twice (one to two minutes)"),
)


def same(artifact: Artifact, old: bytes | None, new: bytes) -> bool:
    """Whether the file on disk is up to date: the same bytes, or for a figure the same content."""
    return same_figure(old, new) if artifact.kind == "figure" else old == new


def run(root: Path | str | None = None, check: bool = False, include_slow: bool = True,
        vectors_dir: Path | None = None, on_start: Callable[[Artifact], None] | None = None,
        on_done: Callable[[Outcome], None] | None = None, workers: int = 1) -> list[Outcome]:
    """Build (or, with ``check``, verify) every artifact under ``root`` (default: this checkout);
    ``on_start`` and ``on_done`` are called before and after each one. ``workers`` > 1 builds that
    many artifacts at a time in worker processes (the artifacts are independent; the slow ones
    are started first, since they bound the wall time); the outcomes keep the registry's order.

    Build mode writes only the files whose content changed; check mode writes nothing and marks
    the out-of-date ones "stale". The build runs from a source checkout: docs/ must exist."""
    root = Path(root) if root else ROOT
    if not (root / "docs").is_dir():
        raise DocsError(f"{root / 'docs'}: not found (lossproof docs build runs in a source checkout)")
    require_matplotlib()
    outcomes: dict[int, Outcome] = {}
    todo = []
    for index, art in enumerate(ARTIFACTS):
        if art.slow and not include_slow:
            outcomes[index] = Outcome(art.path, "left out", 0.0)
            if on_done:
                on_done(outcomes[index])
        else:
            todo.append(index)
    if workers <= 1:
        ctx = Context(root, vectors_dir, include_slow)
        for index in todo:
            if on_start:
                on_start(ARTIFACTS[index])
            outcomes[index] = _build(ARTIFACTS[index], ctx, check)
            if on_done:
                on_done(outcomes[index])
    else:
        with ProcessPoolExecutor(workers, mp_context=pool_context()) as pool:
            running = {}
            for index in sorted(todo, key=lambda i: not ARTIFACTS[i].slow):
                if on_start:
                    on_start(ARTIFACTS[index])
                running[pool.submit(_build_in_worker, index, root, vectors_dir, include_slow, check)] = index
            for future in as_completed(running):
                outcomes[running[future]] = future.result()
                if on_done:
                    on_done(outcomes[running[future]])
    return [outcomes[index] for index in range(len(ARTIFACTS))]


def _build(art: Artifact, ctx: Context, check: bool) -> Outcome:
    start = time.perf_counter()
    path = ctx.root / art.path
    old = path.read_bytes() if path.is_file() else None
    produced = art.produce(ctx, old, art.path)
    if produced.data is None:
        status = "skipped"
    elif same(art, old, produced.data):
        status = "unchanged"
    elif check:
        status = "stale"
    else:
        write_atomically(path, produced.data)
        status = "written"
    return Outcome(art.path, status, time.perf_counter() - start, produced.skipped)


def _build_in_worker(index: int, root: Path, vectors_dir: Path | None, include_slow: bool, check: bool) -> Outcome:
    return _build(ARTIFACTS[index], Context(root, vectors_dir, include_slow), check)
