"""The measured tables and figures of docs/performance.md, rendered from the JSON that
``lossproof bench`` wrote under benchmarks/results/ (``python benchmarks/performance.py`` runs
the three measurements of ``RUNS``; about 40 minutes on 2 cores).

Rendering only reads those files, so the page is deterministic: same JSON, same bytes. The
JSON lives in the source checkout (benchmarks/ is not in the wheel); without it the build
reports the page and its figures as skipped.
"""
from __future__ import annotations

import json
from collections.abc import Callable

from lossproof.conformance.docs import Unavailable
from lossproof.conformance.docs.context import Context
from lossproof.conformance.docs.figures import new_figure

RESULTS = "benchmarks/results"           # relative to the root of the checkout
TARGET, SWEEP, EXACT = "cpu_4096x131072.json", "cpu_vocab_sweep.json", "exact.json"
INTERLEAVED = "cpu_bandwidth.json"  # python benchmarks/cpu_bandwidth.py (not a lossproof bench run)
# The measurements behind the page: output file → arguments of `lossproof bench`.
RUNS = {
    TARGET: ["--sizes", "4096x131072", "--reps", "2", "--no-exact"],
    SWEEP: ["--sizes", "1024x32768,1024x65536,1024x131072,1024x152064",
            "--kernel", "token_kl.reverse", "--kernel", "generalized_jsd", "--reps", "2", "--no-exact"],
    EXACT: ["--sizes", "64x1024", "--kernel", "token_kl.reverse", "--method", "lossproof", "--reps", "1"],
}
METHODS = ("lossproof", "lossproof-tiles", "naive", "trl", "liger", "lossproof-plain")
METHOD_NAMES = {"lossproof": "lossproof (fused)", "lossproof-tiles": "lossproof (torch tiles)",
                "lossproof-plain": "lossproof (plain path)", "naive": "naive torch", "trl": "TRL 1.16 chunked",
                "liger": "Liger 0.8.5 chunked"}
COLORS = {"lossproof": "#1b7837", "lossproof-tiles": "#5aae61", "lossproof-plain": "#7fbf7b", "naive": "#762a83",
          "trl": "#e08214", "liger": "#2166ac"}
# The kernels the compiled path ran in results recorded before their record listed them
# (``compiled.kernels``): the token KL only.
COMPILED_KERNELS = ("token_kl.reverse", "token_kl.forward")
TARGETS = {"speedup": 2.0, "memory": 0.05, "bandwidth": 0.5, "library": 1.0}   # the page's four targets


def command(name: str) -> str:
    return "lossproof bench " + " ".join(RUNS[name]) + f" --json {RESULTS}/{name}"


def load(ctx: Context, name: str) -> dict:
    path = ctx.root / RESULTS / name
    if not path.is_file():
        raise Unavailable(f"{RESULTS}/{name} not found (run 'python benchmarks/performance.py' in a source "
                          "checkout to measure it)")
    return json.loads(path.read_text(encoding="utf-8"))


def _ms(x) -> str:
    return "—" if x is None else (f"{x * 1e3:,.0f} ms" if x >= 0.1 else f"{x * 1e3:.1f} ms")


def _mib(x) -> str:
    return "—" if x is None else f"{x / 2**20:,.0f} MiB" if x >= 2**20 * 10 else f"{x / 2**20:.1f} MiB"


def _ratio(x, digits=2) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def _name(doc, row) -> str:
    """The method's name; the default path's row says whether it ran the compiled kernel (runs
    before the compiled kernel existed record nothing: the torch tiles)."""
    compiled = doc.get("compiled", {})
    if (row["method"] == "lossproof" and compiled.get("available")
            and row["kernel"] in compiled.get("kernels", COMPILED_KERNELS)):
        return "lossproof (compiled)"
    return METHOD_NAMES.get(row["method"], row["method"])


def _kernel_order(k: str):
    return (k != "token_kl.reverse", k)


def _reference_row(doc) -> dict:
    return next(r for r in doc["rows"] if r.get("available"))


def target_table(ctx: Context) -> str:
    """Every kernel and method at N = 4096, V = 131072, with the rows-scaling footnote."""
    doc = load(ctx, TARGET)
    rows = doc["rows"]
    kernels = [k for k in ("token_kl.reverse", "token_kl.forward", "generalized_jsd", "hinton")
               if any(r["kernel"] == k for r in rows)]
    out = ["| kernel | method | median fwd+bwd | speed-up vs naive | peak extra memory | of one logits tensor | of copy bandwidth |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for k in kernels:
        for r in (r for r in rows if r["kernel"] == k):
            name = _name(doc, r)
            if not r.get("available"):
                out.append(f"| {k} | {name} | n/a: {r.get('reason', '')} | | | | |")
                continue
            note = " ¹" if r.get("scaled_from_rows") else ""
            out.append(f"| {k} | {name}{note} | {_ms(r['median_s'])} | {_ratio(r.get('speedup_vs_naive'), 1)}× | "
                       f"{_mib(r.get('peak_extra_bytes'))} | {_ratio(r.get('peak_extra_fraction'), 3)} | "
                       f"{_ratio(r.get('bandwidth_fraction'))} |")
    scaled = [f"{r['kernel']} {_name(doc, r)} on {r['scaled_from_rows']} rows"
              for r in rows if r.get("scaled_from_rows")]
    if scaled:
        out += ["", "¹ run on fewer rows because its peak would not fit in the machine's memory "
                f"({'; '.join(scaled)}), and scaled to N = 4096 (rows are independent: time and memory grow "
                "linearly with N)."]
    ref = _reference_row(doc)
    out += ["", "Peak extra memory is the process's peak resident set during one forward + backward, above what "
            "was resident before it, minus the gradient itself (which every method must return); \"of copy "
            "bandwidth\" is 3·B/time (read both logits, write the gradient; B = one logits tensor, "
            f"{ref['logits_bytes'] / 2**30:.0f} GiB here) over the bandwidth of copying one logits tensor in the "
            f"same run ({ref['copy_bandwidth_gbs']:.1f} GB/s)."]
    return "\n".join(out)


def targets_table(ctx: Context) -> str:
    """The reverse token KL against the four targets of the kernel work."""
    doc = load(ctx, TARGET)
    s = doc["summary"]
    sp, mem, bw = s["token_kl_speedup_vs_naive"], s["token_kl_peak_extra_fraction"], s["token_kl_bandwidth_fraction"]
    lib = s.get("token_kl_speedup_vs_best_library")

    def verdict(ok: bool, why: str = "") -> str:
        return "met" if ok else "not met" + why
    return "\n".join([
        "| target | measured | |", "|---|---:|---|",
        f"| at least {TARGETS['speedup']:g}× faster than naive torch | {sp:.1f}× | {verdict(sp >= TARGETS['speedup'])} |",
        f"| peak additional memory at most {TARGETS['memory']:.0%} of one logits tensor | {mem:.2%} | "
        f"{verdict(mem <= TARGETS['memory'])} |",
        f"| at least {TARGETS['bandwidth']:.0%} of copy bandwidth | {bw:.0%} | "
        f"{verdict(bw >= TARGETS['bandwidth'], ' (see below)')} |",
        "| no slower than the best library measured | "
        + (f"{lib:.1f}× faster than the fastest | {verdict(lib >= TARGETS['library'])} |" if lib is not None
           else "no library measured | — |"),
    ])


def bandwidth_note(ctx: Context) -> str:
    """The copy's cost per logit on the measuring machine, the fraction of it each lossproof path
    reached (reverse token KL), and the compiled kernel's build."""
    doc = load(ctx, TARGET)
    ref = _reference_row(doc)
    gbs = ref["copy_bandwidth_gbs"]
    rev = {r["method"]: r for r in doc["rows"] if r["kernel"] == "token_kl.reverse" and r.get("available")}
    out = (f"On the measuring machine the copy moves those 12 bytes per logit in {12 / gbs:.2f} ns ({gbs:.0f} GB/s "
           f"on {doc['machine']['cores']} cores). ")
    if "lossproof-tiles" in rev and "lossproof" in rev:
        out += (f"The compiled kernel reached {rev['lossproof']['bandwidth_fraction']:.0%} of the copy's bandwidth "
                f"({rev['lossproof']['median_s'] / (rev['lossproof']['n'] * rev['lossproof']['v']) * 1e9:.2f} ns per "
                f"logit), the torch tiles {rev['lossproof-tiles']['bandwidth_fraction']:.0%} "
                f"({rev['lossproof-tiles']['median_s'] / (rev['lossproof']['n'] * rev['lossproof']['v']) * 1e9:.2f} ns).")
    else:
        out += (f"The eager fused path, which must go through memory between operations, stays compute-bound at "
                f"{doc['summary']['token_kl_bandwidth_fraction']:.0%} of the copy's bandwidth.")
    c = doc.get("compiled")
    if c and c.get("available"):
        out += (f" Its build ({c.get('compiler', 'C++')}) is cached; this run "
                f"{'loaded it from the cache' if c.get('cached') else 'built it'} in {c['seconds']:.2f} s, "
                "before any timing.")
    elif c:
        out += f" The compiled kernel was not available in this run: {c.get('reason')}."
    load_avg = doc["machine"].get("load_average")
    if load_avg:
        out += (f" Load average at the end of the run: {load_avg[0]:.1f} on {doc['machine']['cores']} cores (other "
                "work shared the machine; every figure is a ratio to a timing of the same run).")
    return out


def sweep_table(ctx: Context) -> str:
    """Median time / peak extra memory of each kernel and method against V (N = 1024)."""
    rows = [r for r in load(ctx, SWEEP)["rows"] if r.get("available")]
    vs = sorted({r["v"] for r in rows})
    out = ["| kernel | method | " + " | ".join(f"V = {v:,}" for v in vs) + " |",
           "|---|---|" + "---:|" * len(vs)]
    for k in sorted({r["kernel"] for r in rows}, key=_kernel_order):
        for m in METHODS:
            cells = []
            for v in vs:
                r = next((x for x in rows if x["kernel"] == k and x["method"] == m and x["v"] == v), None)
                cells.append("—" if r is None else f"{_ms(r['median_s'])} / {_mib(r.get('peak_extra_bytes'))}")
            if any(c != "—" for c in cells):
                out.append(f"| {k} | {METHOD_NAMES[m]} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def exact_table(ctx: Context) -> str:
    """Generation time of the vector set per family, and check time against the number of vectors."""
    ex = load(ctx, EXACT).get("exact")
    if not ex:
        raise Unavailable(f"{RESULTS}/{EXACT} holds no exact-side measurement (it was run with --no-exact)")
    lines = ["| family | vectors | generation | per vector (one worker) |", "|---|---:|---:|---:|"]
    for fam, f in ex["families"].items():
        sec = f.get("seconds", f.get("estimated_seconds"))
        err = f" ({f['error']})" if f.get("error") else ""
        lines.append(f"| {fam} | {f['vectors']} | {sec:.1f} s{err} | {f['seconds_per_vector']:.3f} s |")
    lines.append(f"| **all** | {ex['vectors_total']} | **{ex['generate_seconds']:.0f} s** on {ex['workers']} workers | |")
    chk = ex.get("check", {})
    if chk.get("points"):
        lines += ["", "| vectors checked (torch, CPU, every dtype) | seconds | seconds per vector |", "|---:|---:|---:|"]
        for p in chk["points"]:
            lines.append(f"| {p['vectors']} | {p['seconds']:.1f} | {p['seconds'] / max(1, p['vectors']):.4f} |")
    elif chk.get("error"):
        lines.append(f"\nCheck not measured: {chk['error']}")
    return "\n".join(lines)


def _machine(doc) -> str:
    m = doc["machine"]
    mem = f"{m['memory_bytes'] / 2**30:.0f} GiB" if m.get("memory_bytes") else "?"
    load_avg = ", ".join(f"{x:.1f}" for x in m["load_average"]) if m.get("load_average") else "?"
    return (f"{m['cpu']}, {m['cores']} cores ({m['cpu_capability']}), {mem} RAM; Python {m['python']}, "
            f"torch {m['torch']} ({m['torch_threads']} threads), numpy {m['numpy']}; load average at the "
            f"end of the run {load_avg}")


def gpu_note(ctx: Context) -> str:
    notes = sorted({load(ctx, name).get("gpu", "not recorded") for name in RUNS})
    return "GPU in these runs: " + "; ".join(notes) + "."


def machines(ctx: Context) -> str:
    """Where and how long each measurement ran, and the commands that reproduce them."""
    lines = [f"- `{name}`: {_machine(doc)}; {doc['seconds']:.0f} s." for name, doc in
             ((name, load(ctx, name)) for name in RUNS)]
    lines += ["", "Reproduce (writes the JSON these tables come from; `lossproof docs build` then rewrites this "
              "page and its figures):", "", "```bash", *(command(n) for n in RUNS), "```"]
    return "\n".join(lines)


def interleaved_table(ctx: Context) -> str:
    """The reverse token KL's fraction of copy bandwidth with every timing between two copies."""
    doc = load(ctx, INTERLEAVED)
    lines = ["| method | median fwd+bwd | per logit | median copy | of copy bandwidth (median) | best round |",
             "|---|---:|---:|---:|---:|---:|"]
    for m, r in doc["methods"].items():
        lines.append(f"| {_name(doc, {'method': m, 'kernel': doc['kernel']})} | {_ms(r['median_s'])} | "
                     f"{r['ns_per_logit']:.2f} ns | {_ms(r['median_copy_s'])} | {r['median_fraction']:.2f} | "
                     f"{max(r['fractions']):.2f} |")
    lines += ["", (f"{doc['kernel']}, N = {doc['n']}, V = {doc['v']:,}, {doc['dtype']}, {doc['rounds']} rounds; "
                   f"{_machine(doc)}; {doc['seconds']:.0f} s. Reproduce: `python benchmarks/cpu_bandwidth.py "
                   f"--rounds {doc['rounds']} --json {RESULTS}/{INTERLEAVED}`.")]
    return "\n".join(lines)


BLOCKS: dict[str, Callable[[Context], str]] = {
    "target-table": target_table,
    "targets": targets_table,
    "bandwidth": bandwidth_note,
    "interleaved": interleaved_table,
    "sweep-table": sweep_table,
    "exact": exact_table,
    "gpu": gpu_note,
    "machines": machines,
}


def _sweep_figure(ctx: Context, key: str, label: str, unit: float):
    rows = [r for r in load(ctx, SWEEP)["rows"] if r.get("available")]
    kernels = sorted({r["kernel"] for r in rows}, key=_kernel_order)
    fig = new_figure(5.2 * len(kernels), 4.0)
    for ax, k in zip(fig.subplots(1, len(kernels), squeeze=False)[0], kernels):
        for m in METHODS:
            pts = sorted((r["v"], r[key]) for r in rows if r["kernel"] == k and r["method"] == m and r.get(key) is not None)
            if pts:
                ax.plot([v for v, _ in pts], [y / unit for _, y in pts], marker="o", color=COLORS[m],
                        label=METHOD_NAMES[m])
        ax.set_title(f"{k}, N = {rows[0]['n']}, float32")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("vocabulary size V")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def fig_time(ctx: Context):
    return _sweep_figure(ctx, "median_s", "forward + backward, median (s)", 1)


def fig_memory(ctx: Context):
    return _sweep_figure(ctx, "peak_extra_bytes", "peak additional memory (GiB)", 2**30)
