"""docs/conventions.md, generated from real runs of the third-party adapters.

Needs the pinned libraries (``scripts/install-peers.sh``) and torch; without them the build
reports the page as skipped, with the reason. Each adapter is run over the vectors under its
declared conventions and under ``--as-paper``; every failure is attributed to one of the
adapter's documented findings (``FINDINGS`` in ``conformance/targets/peers/<name>.py``) or, under
``--as-paper``, to a declared convention the library cannot set to the paper value. Anything left
over is listed as unexplained; a declared known failure that passes is listed as stale (the adapter
tests require both lists to be empty).
"""
from __future__ import annotations

import importlib
import warnings
from collections import Counter, defaultdict

from lossproof.conformance import catalog, compare, harness
from lossproof.conformance.docs import Unavailable
from lossproof.conformance.docs.context import Context
from lossproof.conformance.results import summary
from lossproof.conformance.targets import PEERS, TargetError, load, split_variants
from lossproof.conformance.targets.target import VARIANT
from lossproof.conformance.theorem import probe

MAX_UIDS = 6


def _fmt(value) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _values(values) -> str:
    return "**" + _fmt(values[0]) + "**" + "".join(", " + _fmt(v) for v in values[1:])


def _key(objective: str, target_name: str) -> str:
    """The declaration key of an objective run by ``target_name``: ``objective[variant]`` for the
    target ``name[variant]`` that ``split_variants`` makes of an adapter's variant."""
    m = VARIANT.match(target_name)
    return f"{objective}[{m['variant']}]" if m else objective


def paper_gaps(parts, module) -> dict:
    """{declaration key: [Convention]} for the objectives (and variants) whose paper-default
    conventions (taken together) the library cannot be set to, with the declared conventions that
    differ from the paper. ``parts``: the adapter's target split into its variants."""
    out = {}
    for target in parts:
        for oid in target.objectives:
            spec, key = catalog.get(oid), _key(oid, target.name)
            if target.accepts(oid, {name: spec.defaults[name] for name in spec.conventions}):
                continue
            # a variant without convention rows of its own has the plain objective's
            own = [c for c in module.CONVENTIONS if c.objective == key] or \
                [c for c in module.CONVENTIONS if c.objective == oid]
            out[key] = [c for c in own if c.default != c.paper] or own
    return out


def attribute(results, parts, module, vs, as_paper: bool) -> dict:
    """{finding id | 'paper:<objective>' | 'unexplained' | 'stale': [results]} for the conformance
    results that did not simply pass. ``parts``: the adapter's target split into its variants; a
    finding of one variant (``Finding.variant``) explains that variant's results only.

    A known failure (``xfail``) belongs to the finding whose reason the adapter declared for it.
    A failure or an error belongs, under ``--as-paper``, to the paper conventions the library
    cannot be set to, else to a finding that covers its case, else it is unexplained. A declared
    known failure that passed (``xpass``) is stale."""
    gaps = paper_gaps(parts, module)
    by_name = {t.name: t for t in parts}
    by_reason = {f.reason: f.id for f in module.FINDINGS}
    out: dict = defaultdict(list)
    for r in results:
        if r.axis != "conformance" or r.status not in ("fail", "error", "xfail", "xpass"):
            continue
        if r.status == "xpass":
            hit = "stale"
        elif r.status == "xfail":
            hit = by_reason.get(r.known, "unexplained")
        elif as_paper and gaps.get(_key(r.objective, r.target)):
            hit = f"paper:{_key(r.objective, r.target)}"
        else:
            case, target = vs.by_uid(r.uid), by_name[r.target]
            m = VARIANT.match(r.target)
            specific = [f for f in module.FINDINGS if not f.as_paper_only
                        and f.variant in (None, m["variant"] if m else None)]
            tolerance = compare.Tolerances({}).for_case(catalog.get(r.objective), case.test, r.dtype,
                                                        target.tolerance_model_for(r.objective))
            hit = next((f.id for f in specific if f.covers(case, r.dtype, tolerance)), "unexplained")
        out[hit].append(r)
    return out


# The probe runs in float32: Liger computes log-probabilities in float32 whatever the inputs, so a
# float64 probe would measure that rounding (2.8e-9) against the float64 tolerance (1e-10).
PROBE_DTYPE = "float32"


def run(name: str, target, vs) -> dict:
    """Both runs of one adapter (declared conventions, --as-paper), their attribution, and the
    stationary-policy probe of its grpo.loss (β > 0 on every built-in tree)."""
    module = importlib.import_module(f"lossproof.conformance.targets.peers.{name}")
    parts = split_variants(target)
    declared = [r for t in parts for r in harness.run(t, vs)]
    paper = [r for t in parts for r in harness.run(t, vs, as_paper=True)]
    probes = (probe.probe_all(target, dtype=PROBE_DTYPE, objectives=["grpo.loss"])
              if "grpo.loss" in target.objectives else [])
    return {"name": name, "target": target, "parts": parts, "module": module, "declared": declared, "paper": paper,
            "declared_by": attribute(declared, parts, module, vs, False),
            "paper_by": attribute(paper, parts, module, vs, True), "probes": probes}


def _probe_section(runs: list[dict]) -> list[str]:
    lines = ["## The stationary-policy probe of each GRPO/PPO loss", "",
             "`lossproof probe --target NAME --objective grpo.loss` asks each library's `grpo.loss` the question of "
             "[proximal_kl.md](proximal_kl.md): on the built-in token trees, with β > 0 and responses sampled "
             f"from an older policy μ, does its exact expected update (computed from the library's own gradient, "
             f"in {PROBE_DTYPE}) match the rule it implements, and does that rule keep the optimum π* ∝ π_ref·e^(r/β) "
             "stationary? The rules are those of the declared conventions (k3 as a loss term, with or without the "
             "ratio weight); a KL the library always clamps has no exact rule and is not probed.", "",
             r"| library | variant | tree | β | rule | matches the rule | max \|Δθ\| at π* | π* stationary |",
             "|---|---|---|---|---|---|---|---|"]
    refused = []
    for r in runs:
        for p in r["probes"]:
            if "refused" in p:
                refused.append((r["target"].name, p["refused"]))
                continue
            variant = f"{p['aggregation']}, kl_ratio_weight={p['params'].get('kl_ratio_weight')}"
            lines.append(f"| {r['target'].name} | {variant} | {p['tree']} | {p['beta']:g} | `{p['rule']}` | "
                         f"{'yes' if p['matches'] else '**no**'} | {p['residual_at_optimum']:.3g} | "
                         f"{'yes' if p['stationary'] else 'no (biased)'} |")
    for name, reason in dict.fromkeys(refused):
        lines += ["", f"{name}: not probed — {reason}."]
    probed = [p for r in runs for p in r["probes"] if "refused" not in p]
    if probed and all(p["matches"] and not p["stationary"] for p in probed):
        lines += ["", "Every probed library computes exactly the update of its rule, and with β > 0 that rule moves "
                  "the optimum off-policy, as GRPO's k3-as-loss does in the exact table: the bias is in the rule, "
                  "not in the libraries' code."]
    return lines


def _counts(results) -> dict:
    """{declaration key: Counter} of conformance statuses, plus 'invalid' (invalid inputs judged)
    and 'rejected'."""
    by = defaultdict(Counter)
    for r in results:
        key = _key(r.objective, r.target)
        if r.axis == "conformance":
            by[key][r.status] += 1
        elif r.status not in ("skip", "unsupported"):
            by[key]["invalid"] += 1
            by[key]["rejected"] += r.status == "rejected"
    return by


def _totals(results) -> str:
    c, v = summary(results)["conformance"], summary(results)["validation"]
    judged = sum(n for status, n in v.items() if status not in ("skip", "unsupported"))
    return (f"{c['pass'] + c['xpass']} passed, {c['xfail']} known failures, {c['fail']} failed, {c['error']} errors; "
            f"invalid inputs: {v['rejected']} of {judged} rejected")


def _vectors_run(results) -> Counter:
    out = Counter()
    for uid, key in {(r.uid, _key(r.objective, r.target)) for r in results if r.status not in ("skip", "unsupported")}:
        out[key] += 1
    return out


def _uid_list(results) -> str:
    seen = []
    for r in results:
        key = (r.uid, r.dtype)
        if key not in seen:
            seen.append(key)
    shown = ", ".join(f"`{u}` ({d})" for u, d in seen[:MAX_UIDS])
    more = f", … {len(seen) - MAX_UIDS} more" if len(seen) > MAX_UIDS else ""
    return shown + more


def render(runs: list[dict], vs, torch_version: str) -> str:
    version = vs.version()
    lines = [
        "# Conventions of TRL, verl, OpenRLHF, Liger-Kernel, transformers, Megatron-core, torchtitan and OLMo-core",
        "",
        "<!-- Generated by `lossproof docs build` (conformance/docs/conventions.py) from real runs; do not edit by hand. -->",
        "",
        f"Generated from `lossproof check --target NAME` and `lossproof check --target NAME --as-paper` over the "
        f"bundled vectors (vector set {version}, manifest sha256 `{vs.manifest_sha256[:16]}…`, "
        f"{sum(sum(c.values()) for c in vs.counts().values())} vectors) with "
        + ", ".join(f"{r['target'].name} {r['target'].version}" for r in runs)
        + f" and torch {torch_version} on CPU.",
        "",
        "Each adapter (`conformance/targets/peers/<name>.py`) calls the library's own loss code — never a "
        "re-implementation — and declares the library's conventions, each with the library file it comes "
        "from. Under its declared conventions a library is checked on the vector groups it can be configured "
        "to; under `--as-paper` it is checked on the paper-default groups only, with every convention it "
        "cannot set to the paper value computed its own way (that is where the deviations show). Each documented "
        "finding (a library bug, a deviation the catalog cannot express, a narrower internal precision) is declared "
        "by the adapter as a known failure of the cases it covers: a run lists them as known failures, and only a "
        "new failure makes it exit 1.",
        "",
        "## Installing the peers",
        "",
        "```sh",
        "pip install torch==2.13.0 -e .      # lossproof itself, torch CPU build",
        "scripts/install-peers.sh            # trl 1.16.0, transformers 5.25.0; verl 0.9.1, openrlhf 0.11.2, liger-kernel 0.8.5, "
        "megatron-core 0.16.1, torchtitan 0.3.0, ai2-olmo-core 3.0.0 --no-deps",
        "lossproof check --target trl --target verl --target openrlhf --target liger --target transformers "
        "--target megatron --target torchtitan --target olmo",
        "```",
        "",
        "The script installs TRL with its dependencies (transformers, pinned to 5.25.0 for `--target "
        "transformers`, accelerate, datasets; torch 2.13.0 satisfies it, no other torch is pulled) and the other "
        "six with `--no-deps` plus the runtime imports their loss modules need (omegaconf, codetiming, tensordict 0.10.0, pyvers, cloudpickle, "
        "orjson; spmd_types 0.2.3 for torchtitan). GPU-only and cluster packages (vLLM, DeepSpeed, flash-attn, Ray, Triton) are not installed: "
        "the adapters import the loss modules with those packages replaced by placeholders that the loss "
        "code never calls. Without a library, `--target NAME` exits with status 2 and the install command. "
        "Measured on a 2-core CI-like machine (fresh virtual environment, local package index): the base install "
        "(torch 2.13.0 CPU + lossproof) 110 s, `scripts/install-peers.sh` 82 s; the TRL, verl, OpenRLHF and "
        "Liger adapters then run over all the vectors in about 80 s (transformers in about 3 s more).",
        "",
        "## Convention matrix",
        "",
        "Values a library can be configured to, its default in bold (— : the library has no such objective; "
        "*paper*: not a setting in the library, the paper default applies).",
        "",
    ]
    names = [r["name"] for r in runs]
    rows = []
    for spec in catalog.OBJECTIVES:
        for param in spec.conventions:
            rows.append((spec.id, param))
    lines.append("| objective | convention | paper default | " + " | ".join(names) + " |")
    lines.append("|---|---|---|" + "---|" * len(names))
    for oid, param in rows:
        cells = []
        any_declared = False
        for r in runs:
            conv = next((c for c in r["module"].CONVENTIONS if c.objective == oid and c.param == param), None)
            if oid not in r["target"].objectives:
                cells.append("—")
            elif conv is None:
                cells.append("*paper*")
            else:
                any_declared = True
                cells.append(_values(conv.values))
        if any_declared:
            lines.append(f"| {oid} | {param} | {_fmt(catalog.get(oid).defaults[param])} | " + " | ".join(cells) + " |")
    lines += ["", "Parameter defaults that differ between the libraries (arguments, not conventions):", "",
              "| library | objective | parameter | library default | paper default | source |", "|---|---|---|---|---|---|"]
    for r in runs:
        for c in getattr(r["module"], "PARAM_DEFAULTS", []):
            lines.append(f"| {r['name']} | {c.objective} | {c.param} | {_fmt(c.default)} | {_fmt(c.paper)} | "
                         f"{c.source} |")
    for r in runs:
        t, module = r["target"], r["module"]
        lines += ["", f"## {t.name} {t.version}", "", (module.__doc__ or "").strip().replace("``", "`"), "",
                  "### Declared conventions", "", "| objective | convention | values (default first) | paper default | "
                  "comes from |", "|---|---|---|---|---|"]
        for c in module.CONVENTIONS:
            lines.append(f"| {c.objective} | {c.param} | {_values(c.values)} | {_fmt(c.paper)} | {c.source} |")
        alternatives = getattr(module, "ALTERNATIVES", {})
        if alternatives:
            lines += ["", "Conventions that do not vary independently are declared as combinations:", ""]
            for oid, combos in alternatives.items():
                lines.append(f"- {oid}: " + "; ".join(
                    "{" + ", ".join(f"{k}={_fmt(v)}" for k, v in combo.items()) + "}" for combo in combos))
        lines += ["", "### Verdict", "",
                  "Results are (vector, dtype) pairs; *vectors* counts the distinct vectors that ran; *known* "
                  "counts the failures a documented finding declares (below); *rejected* counts the invalid inputs "
                  "the library rejected, of those it was given.", "",
                  "| objective | declared: vectors | pass | known | fail | error | skip | rejected | as-paper: vectors | "
                  "pass | known | fail | error | skip | rejected |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        dc, pc = _counts(r["declared"]), _counts(r["paper"])
        dv, pv = _vectors_run(r["declared"]), _vectors_run(r["paper"])
        for oid in sorted(t.objectives):
            d, p = dc[oid], pc[oid]
            lines.append(f"| {oid} | {dv[oid]} | {d['pass'] + d['xpass']} | {d['xfail']} | {d['fail']} | {d['error']} | "
                         f"{d['skip'] + d['unsupported']} | {d['rejected']}/{d['invalid']} | {pv[oid]} | "
                         f"{p['pass'] + p['xpass']} | {p['xfail']} | {p['fail']} | {p['error']} | "
                         f"{p['skip'] + p['unsupported']} | {p['rejected']}/{p['invalid']} |")
        lines += ["", f"Declared conventions: {_totals(r['declared'])}. As paper: {_totals(r['paper'])}."]
        lines += ["", "### Findings under the declared conventions", ""]
        by = r["declared_by"]
        findings = {f.id: f for f in module.FINDINGS}
        if not any(by.values()):
            lines.append("Every checked vector passes.")
        for fid, f in findings.items():
            hits = by.get(fid, [])
            if not hits:
                continue
            first = hits[0]
            lines += [f"- **{fid}** ({f.kind}, {len(hits)} results on {len({h.uid for h in hits})} vectors): "
                      f"{f.summary}. Source: {f.source}.",
                      f"  Cases: {_uid_list(hits)}. Reproduce: `{first.repro}`."]
        if by.get("unexplained"):
            lines += ["", f"**Unexplained failures ({len(by['unexplained'])})** — not covered by a documented "
                      "finding:", ""]
            for h in by["unexplained"]:
                lines.append(f"- `{h.uid}` ({h.dtype}): {h.message[:200]}")
        if by.get("stale"):
            lines += ["", f"**Stale known failures ({len(by['stale'])})** — cases a finding declares that pass:", ""]
            by_reason = {f.reason: f.id for f in module.FINDINGS}
            stale = defaultdict(list)
            for h in by["stale"]:
                stale[by_reason.get(h.known, h.known)].append(h)
            for fid, hits in stale.items():
                lines.append(f"- {fid}: {len(hits)} results on {len({h.uid for h in hits})} vectors; "
                             f"{_uid_list(hits)}.")
        lines += ["", "### Deviations from the paper (`--as-paper`)", ""]
        devs = t.deviations()
        gaps = paper_gaps(r["parts"], module)
        if not devs:
            lines.append("The declared defaults are the paper defaults.")
        for oid in dict.fromkeys(d[0] for d in devs):
            items = ", ".join(f"{param} {_fmt(value[0] if isinstance(value, list) else value)} (paper {_fmt(paper)})"
                              for o, param, value, paper in devs if o == oid)
            lines.append(f"- {oid}: {items} — " + ("no setting of the library gives the paper's conventions"
                                                   if oid in gaps else "the paper's conventions can be set"))
        pby = r["paper_by"]
        paper_hits = {k: v for k, v in pby.items() if k.startswith("paper:")}
        if paper_hits:
            lines += ["", "Failures under `--as-paper` on the objectives whose paper conventions the library cannot be "
                      "set to (attributed to those conventions first; float64 results among them may also carry a "
                      "precision finding above):", ""]
            for key, hits in sorted(paper_hits.items()):
                oid = key.split(":", 1)[1]
                convs = ", ".join(f"{c.param}={_values(c.values)} (paper {_fmt(c.paper)})" for c in gaps[oid])
                lines.append(f"- {oid}: {len(hits)} results on {len({h.uid for h in hits})} vectors ({convs}); "
                             f"e.g. {_uid_list(hits)}.")
        other = {k: v for k, v in pby.items() if not k.startswith("paper:") and k not in ("unexplained", "stale")}
        if other:
            lines += ["", "Other `--as-paper` failures, explained by the findings above: "
                      + ", ".join(f"{k} ({len(v)})" for k, v in sorted(other.items())) + "."]
        if pby.get("unexplained"):
            lines += ["", f"**Unexplained `--as-paper` failures ({len(pby['unexplained'])})**:", ""]
            for h in pby["unexplained"]:
                lines.append(f"- `{h.uid}` ({h.dtype}): {h.message[:200]}")
    lines += [""] + _probe_section(runs)
    return "\n".join(lines) + "\n"


def page(ctx: Context) -> str:
    """docs/conventions.md from fresh runs of every adapter over ``ctx.vs``."""
    try:
        import torch  # optional dependency: every adapter runs the library's torch code
    except ImportError:
        raise Unavailable("torch is not installed: the adapters run the libraries' torch code") from None
    loaded, missing = {}, []
    for name in PEERS:
        try:
            loaded[name] = load(name)
        except TargetError as err:
            missing.append(str(err))
    if missing:
        more = f" (and {len(missing) - 1} more peer(s) missing)" if len(missing) > 1 else ""
        raise Unavailable(missing[0] + more)
    # The libraries warn about the degenerate inputs the vectors give them on purpose (the std
    # of one reward, ...); the page records what they compute, the warnings add nothing to it.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = [run(name, target, ctx.vs) for name, target in loaded.items()]
    return render(runs, ctx.vs, torch.__version__.split("+")[0])
