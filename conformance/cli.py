"""Command line: ``lossproof`` (same as ``python -m lossproof``). Parsing and printing only.

Each command imports what it runs, inside its function, and a command's options are defined
only when that command is parsed (:class:`_Command`): ``lossproof --version``, ``list``,
``show`` and ``cite`` load neither the harness, the generator nor the certifier."""
from __future__ import annotations

import argparse
import fnmatch
import glob
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from lossproof import conformance
from lossproof.conformance.errors import LossproofError, UsageError

if TYPE_CHECKING:   # annotations only: each command imports what it runs
    from lossproof.conformance.vectors import cite
    from lossproof.conformance.vectors.load import VectorSet

DEFAULT_TIME_LIMIT = 30.0


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit status 2), naming the option, without the usage
    block: ``lossproof check: error: argument --time-limit: ...``."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


class _Command(_Parser):
    """A subcommand whose ``options(parser)`` are added when it is first parsed or its help
    printed: they name constants of the modules the command runs (tolerance models, partition
    kinds, generator families, benchmark kernels), which the other commands then never import."""

    def __init__(self, *args, options=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._options = options

    def _define(self):
        options, self._options = self._options, None
        if options is not None:
            options(self)

    def parse_known_args(self, args=None, namespace=None):
        self._define()
        return super().parse_known_args(args, namespace)

    def format_help(self):
        self._define()
        return super().format_help()


def _positive(kind):
    """An argparse type: a finite number > 0 of the given kind (float or int)."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}") from None
        if not value > 0 or value == float("inf"):
            raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
        return value
    parse.__name__ = f"positive {kind.__name__}"
    return parse


def _tolerances(args):
    from lossproof.conformance import compare
    try:
        return compare.Tolerances.from_file(args.tolerances, getattr(args, "tolerance_model", None))
    except ValueError as err:   # unreadable, not JSON, or not {glob: {dtype: k}}: a usage error
        raise UsageError(str(err)) from None


def _vector_set(args) -> VectorSet:
    """The vector set of a command. ``vectors lint`` and ``vectors certify``: the whole set,
    every file read and schema-validated at once. The others: only the files of the
    objectives the command selects (by --objective, --uid, the uid of show/cite) are read,
    when first needed, each checked against the manifest's sha256; the schema is lint's."""
    from lossproof.conformance.vectors.load import VectorSet
    if args.command == "vectors":
        return VectorSet(args.vectors)
    objectives = None
    if args.command == "check":
        objectives = args.objective or ["*"]
        if args.uid:   # a uid names its objective: only those of the selected objectives are read
            objectives = _uid_objectives(args.uid, objectives)
    elif args.command in ("show", "cite"):
        objectives = _uid_objectives([args.uid])
    elif args.command == "export-prompt":
        objectives = [args.objective]
    return VectorSet(args.vectors, objectives, validate=False)


def _uid_objectives(uids, among=("*",)) -> list[str]:
    """The objective of each uid (its ``family.name`` prefix) that matches one of the globs
    ``among``, as a glob matching only itself: the files a uid selection reads."""
    oids = dict.fromkeys(uid.split(":", 1)[0] for uid in uids)
    return [glob.escape(o) for o in oids if any(fnmatch.fnmatch(o, g) for g in among)]


def _find(vs, uid):
    try:
        return vs.by_uid(uid)
    except KeyError:
        raise UsageError(f"no vector with uid {uid!r} in {vs.directory}") from None


def _printed(case) -> cite.Printed | None:
    """An article example's value at the reals the article prints (None: not an article example,
    or one whose printed reals are not recorded)."""
    from lossproof.conformance.vectors import cite, examples
    reals = examples.printed_reals(case) if examples.is_article(case) else None
    if reals is None:
        return None
    if not reals:
        return cite.Printed("")
    from lossproof.conformance.vectors import certify   # python-flint, only for an article example
    try:
        values, bits = certify.at_printed(case, reals)
    except ValueError as err:
        return cite.Printed(examples.describe(reals), reason=str(err).split(": ", 1)[1])
    return cite.Printed(examples.describe(reals), values, bits)


def cmd_examples(args):
    from rich.console import Console
    from rich.table import Table

    from lossproof.conformance.vectors import examples
    vs = _vector_set(args)
    rows = examples.article_rows(vs)
    table = Table(title="Worked examples of the source article (exact values: 32 digits, at the binary64 inputs "
                        "as stored and at the reals the article prints)", show_lines=True)
    for col in ("objective", "inputs / params", "article prints", "exact value (binary64 inputs)",
                "exact value at the printed inputs", "uid"):
        table.add_column(col, overflow="fold")
    for r in rows:
        inputs = "; ".join(f"{k}={json.dumps(v)}" for k, v in {**r["inputs"], **r["params"]}.items())
        exact = "\n".join(f"{k} = {json.dumps(v)}" for k, v in r["exact"].items())
        printed = _printed(vs.by_uid(r["uid"]))
        at = ("the printed inputs are not recorded (conformance/vectors/examples.py PRINTED)" if printed is None else
              "the same: the inputs are exact as printed" if not printed.reals else
              f"{printed.reals}:\n" + ("\n".join(f"{k} = {json.dumps(v)}" for k, v in printed.values.items())
                                        if printed.values is not None else f"not proven: {printed.reason}"))
        table.add_row(r["objective"], inputs, r["printed"], exact, at, r["uid"])
    Console(width=200).print(table)
    print(f"{len(rows)} worked examples from {len({r['section'] for r in rows})} article sections")
    return 0


def cmd_generate(args):
    from lossproof.conformance import generate
    from lossproof.conformance.progress import bar
    from lossproof.conformance.vectors.format import MANIFEST
    from lossproof.conformance.vectors.load import default_dir
    directory = Path(args.vectors) if args.vectors else default_dir()
    start = time.perf_counter()
    with bar("generating vectors", args.quiet) as progress:
        files = generate.generate(families=args.family, progress=progress, workers=args.workers)
    if args.family:
        files = generate.with_other_families(directory, files, args.family)
    elapsed = time.perf_counter() - start
    if args.check:
        problem = generate.first_difference(directory, files)
        if problem:
            print(f"lossproof: {problem}", file=sys.stderr)
            return 1
        print(f"vectors up to date: {len(files) - 1} files, regenerated in {elapsed:.1f} s")
        return 0
    generate.write(directory, files)
    n = sum(json.loads(d)["numberOfTests"] for r, d in files.items() if r != MANIFEST)
    size = sum(len(d) for d in files.values())
    print(f"wrote {len(files) - 1} files, {n} tests, {size / 1e6:.1f} MB to {directory} in {elapsed:.1f} s")
    return 0


def cmd_lint(args):
    from lossproof.conformance.vectors.lint import lint
    vs = _vector_set(args)
    problems = lint(vs)
    for p in problems:
        print(p, file=sys.stderr)
    total = sum(sum(c.values()) for c in vs.counts().values())
    if problems:
        print(f"lossproof: {len(problems)} problem(s) in {vs.directory}", file=sys.stderr)
        return 1
    print(f"{len(vs.files)} files, {total} tests: clean")
    return 0


def cmd_certify(args):
    # only certifying needs python-flint; list/show/cite read the certificate files
    from lossproof.conformance.progress import bar
    from lossproof.conformance.vectors import certificates, certify
    vs = _vector_set(args)
    if not any(True for _ in vs.cases(args.objective)):
        raise UsageError(f"--objective {args.objective!r} matches no objective in {vs.directory}")
    start = time.perf_counter()
    with bar("certifying vectors", args.quiet) as progress:
        files, findings = certify.certify(vs, args.objective, progress=progress, workers=args.workers)
    elapsed = time.perf_counter() - start
    files = certify.with_manifest(vs, files)
    for finding in findings:
        print(f"lossproof: {finding}", file=sys.stderr)
    certified = total = 0
    for rel, data in files.items():
        if certificates.is_certificate(rel):
            doc = json.loads(data)
            certified, total = certified + doc["certified"], total + doc["numberOfVectors"]
    summary = f"{certified}/{total} vectors certified in {elapsed:.1f} s"
    if args.check:
        problem = certify.first_difference(vs, files)
        if findings or problem:
            if problem:
                print(f"lossproof: {problem}", file=sys.stderr)
            return 1
        print(f"certificates up to date: {summary}")
        return 0
    certify.write(vs, files)
    print(f"wrote {len(files) - 1} certificate files: {summary}")
    return 1 if findings else 0


def _derived_case(vs, uid: str, spec: str | None):
    """The case ``lossproof check`` derived with this uid for the target's declared conventions
    (conformance.derive: a repro line prints its uid), derived again: the golden set does not hold it."""
    from lossproof.conformance import catalog, derive
    from lossproof.conformance.targets import load
    objective = uid.split(":", 1)[0]
    if spec is None:
        raise UsageError(f"no vector with uid {uid!r} in {vs.directory}; a case derived at run time for a "
                         "target's declared conventions (group 'derived') opens with --target SPEC, the target "
                         "it was derived for")
    if objective not in catalog.BY_ID:
        raise UsageError(f"no vector with uid {uid!r}: {objective!r} is not an objective")
    target = load(spec)
    spec_ = catalog.get(objective)
    for assignment in derive.uncovered(target, vs, objective)[:derive.MAX_COMBINATIONS]:
        if derive.not_a_choice(spec_, assignment) is None:
            case = next((c for c in derive.derive(vs, objective, assignment)[0] if c.uid == uid), None)
            if case is not None:
                return case
    raise UsageError(f"no vector with uid {uid!r} in {vs.directory}, and {target.name} derives no case with it")


def cmd_show(args):
    from lossproof.conformance.report import DERIVED_GROUP
    from lossproof.conformance.vectors import certificates
    vs = _vector_set(args)
    try:
        case = vs.by_uid(args.uid)
    except KeyError:
        case = _derived_case(vs, args.uid, args.target)
    derived = case.group == DERIVED_GROUP
    t = case.test
    print(f"{case.uid}  ({case.objective}, " + ("derived at run time: not in the golden set)" if derived
                                               else f"{case.file} tcId {t['tcId']})"))
    print(f"  comment:     {t['comment']}")
    print(f"  result:      {t['result']}   dtypes: {', '.join(t['dtypes'])}")
    notes = vs.notes(case.objective)
    if derived:
        from lossproof.conformance import derive   # the generator's floor: only for a derived case
        notes = {**notes, derive.FLAG: {"description": derive.NOTE}}
    print("  flags:       " + ("-" if not t["flags"] else "\n               ".join(
        f"{flag}: {notes[flag]['description']}" for flag in t["flags"])))
    print(f"  group:       {case.group}   conventions: {json.dumps(case.conventions)}")
    if t["params"]:
        print(f"  params:      {json.dumps(t['params'])}")
    for section in ("inputs", "expected", "cotangents", "grads"):
        for name, value in t.get(section, {}).items():
            print(f"  {section[:-1] if section.endswith('s') else section} {name}: {json.dumps(value)}")
    if "error" in t:
        print(f"  must raise:  {t['error']}")
    print(f"  provenance:  {json.dumps(t['provenance'], ensure_ascii=False)}")
    print("  digits:      " + (("certified when derived (arb)" if t["provenance"].get("certified")
                                   else "not certified: the ball-arithmetic reference does not cover it")
                                  if derived else certificates.summary(vs, case)))
    return 0


def cmd_cite(args):
    from lossproof.conformance.vectors import certificates, cite
    vs = _vector_set(args)
    case = _find(vs, args.uid)
    version = vs.version(case.file)
    proof = certificates.summary(vs, case)
    if (args.output or args.element) and not args.latex:
        raise UsageError("--output and --element select the number of a --latex row")
    if args.bibtex:
        print(cite.bibtex(case, version, proof, printed=_printed(case)))
    elif args.latex:
        try:
            cite.select(case, args.output, args.element)
        except cite.CiteError as err:
            raise UsageError(str(err)) from None
        print(cite.latex(case, version, proof, args.output, args.element, printed=_printed(case)))
    else:
        print(cite.text(case, version, proof, printed=_printed(case)))
    return 0


def cmd_list(args):
    from lossproof.conformance import catalog
    from lossproof.conformance.vectors import certificates
    vs = _vector_set(args)
    counts = vs.counts()
    proven = certificates.counts(vs)
    print(f"{'objective':28} {'valid':>6} {'invalid':>8} {'accept.':>8} {'certified':>10}  conventions")
    for spec in catalog.OBJECTIVES:
        c = counts.get(spec.id, {})
        p = proven.get(spec.id)
        cert = "-" if p is None else f"{p[0]}/{p[1]}"
        print(f"{spec.id:28} {c.get('valid', 0):6} {c.get('invalid', 0):8} {c.get('acceptable', 0):8} {cert:>10}  "
              f"{', '.join(spec.conventions) or '-'}")
    return 0


def _verdict_options(args) -> tuple:
    """The options of this run that change a case's verdict: every repro line carries them."""
    out = []
    if args.vectors:
        out.append(f"--vectors {args.vectors}")
    if args.as_paper:
        out.append("--as-paper")
    if args.tolerances:
        out.append(f"--tolerances {args.tolerances}")
    if args.tolerance_model:
        out.append(f"--tolerance-model {args.tolerance_model}")
    if args.known:
        out.append(f"--known {args.known}")
    if args.strict:
        out.append("--strict")
    if args.time_limit != DEFAULT_TIME_LIMIT:
        out.append(f"--time-limit {args.time_limit:g}")
    return tuple(out)


def _setup() -> str:
    """One-time setup of the built-in torch backend: its compiled CPU kernel, built (or loaded
    from the cache; one process builds, the others wait for it) before the first case, so that
    no case's time limit measures it. The line that says what it found."""
    from lossproof.refimpl.torch import _compiled
    status = _compiled.status()
    if not status["available"]:
        return f"compiled CPU kernel unavailable, the torch fused path is used: {status['reason']}"
    return (f"compiled CPU kernel {'loaded' if status['cached'] else 'built'} in {status['seconds']:.1f} s: "
            f"{status['path']}")


def cmd_setup(args):
    from lossproof.conformance.targets import builtin
    if "torch" in builtin.available():
        print(_setup())
    else:
        print("PyTorch is not installed: the built-in torch backend needs no setup")
    return 0


def cmd_check(args):
    from lossproof.conformance import diagnose, report, run
    from lossproof.conformance._io import write_atomically
    from lossproof.conformance.progress import bar
    from lossproof.conformance.results import failed
    from lossproof.conformance.targets import known_file
    plan = run.prepare(run.Selection(
        backends=list(args.backend or []), targets=list(args.target or []), objectives=args.objective or ["*"],
        uids=list(args.uid or []), dtypes=run.dtype_list(args.dtype),
        device=args.device, partition=args.partition, shard_vocab=args.shard_vocab,
        known=known_file(args.known) if args.known else {}, tolerances=_tolerances(args),
        time_limit=args.time_limit, as_paper=args.as_paper, options=_verdict_options(args)))
    vs = _vector_set(args)   # reads MANIFEST.json only: the files of the selection are read when first needed
    run.cases(plan, vs)
    if any(t.spec == "torch" for t in plan.targets):
        _setup()
    targets = plan.targets
    start = time.perf_counter()
    results = run.execute(plan, vs, progress=lambda label: bar(label, args.quiet),
                          announce=_print_deviations if args.as_paper else None,
                          note=lambda line: print(f"note: {line}", file=sys.stderr))
    diagnoses = diagnose.diagnose(results, vs, targets, plan.selection.tolerances, derived=plan.derived)
    elapsed = time.perf_counter() - start
    report.console(results, quiet=args.quiet, strict=args.strict, notes=_notes(vs, results), diagnoses=diagnoses,
                   cases=args.cases)
    if not args.quiet:
        print(f"{len(targets)} target(s), {elapsed:.1f} s")
    suite = {"version": conformance.__version__,
             "vectorSetVersion": vs.version(),
             "manifest_sha256": vs.manifest_sha256}
    if args.report_json:
        report.write_json(args.report_json, report.to_json(results, suite, report.environment(targets), diagnoses))
    if args.junit:
        write_atomically(Path(args.junit), report.junit(results, strict=args.strict))
    if args.write_known:
        known = report.known_failures(results, diagnoses)
        write_atomically(Path(args.write_known), (json.dumps(known, indent=1, ensure_ascii=False) + "\n").encode())
        print(f"wrote {len(known)} known failure(s) to {args.write_known}: pass it with --known {args.write_known}",
              file=sys.stderr)
    return 1 if failed(results, strict=args.strict) else 0


def _notes(vs, results) -> dict:
    """The notes of the vector files of the objectives that ran (what each flag means)."""
    return {o: vs.notes(o) for o in dict.fromkeys(r.objective for r in results) if o in vs.objective_ids()}

def cmd_infer(args):
    from lossproof.conformance import infer, run
    from lossproof.conformance.progress import bar
    from lossproof.conformance.targets import load
    from lossproof.conformance.vectors.load import VectorSet
    target = load(args.target)
    globs = args.objective or ["*"]
    chosen = [o for o in target.objectives if any(fnmatch.fnmatchcase(o, g) for g in globs)]
    if not chosen:
        raise UsageError(f"target {target.name} implements none of {', '.join(globs)} "
                         f"(it implements {', '.join(target.objectives)})")
    dtypes = run.dtype_list(args.dtype) or ["float64"]
    vs = VectorSet(args.vectors, [glob.escape(o) for o in chosen], validate=False)
    with bar(f"inferring {target.name}", args.quiet) as progress:
        found = infer.infer(target, vs, chosen, dtypes, progress=progress)
    if not infer.checked_anything(found):
        raise UsageError(f"target {target.name}: no case of {', '.join(chosen)} was judged (every one unsupported "
                         f"or skipped in {', '.join(dtypes)})")
    for inference in found:
        print(inference.text())
    return 0 if all(i.declaration is not None for i in found) else 1


def _print_deviations(target) -> None:
    """--as-paper: the declared conventions that differ from the paper defaults, before the run."""
    from lossproof.conformance import catalog
    from lossproof.conformance.targets import ANY
    devs = target.deviations()
    if target.conventions == ANY:
        return  # implements every convention: each vector runs with its own
    if not devs:
        print(f"{target.name}: declares the paper defaults (nothing deviates)")
        return
    print(f"{target.name}: declared conventions that differ from the paper (checked against the paper instead):")
    for objective in dict.fromkeys(d[0] for d in devs):
        spec = catalog.get(objective)
        paper = {name: spec.defaults[name] for name in spec.conventions}
        items = ", ".join(f"{name} {json.dumps(value)} (paper {json.dumps(default)})"
                          for oid, name, value, default in devs if oid == objective)
        settable = "the paper setting is available" if target.accepts(objective, paper) else "no paper setting"
        print(f"  {objective}: {items} — {settable}")


def cmd_scaffold(args):
    from lossproof.conformance._io import write_atomically
    from lossproof.conformance.targets import scaffold
    text = scaffold.skeleton(args.function, args.objective, Path(args.output).name if args.output else "target.py")
    if not args.output:
        sys.stdout.write(text)
        return 0
    if Path(args.output).exists():
        raise UsageError(f"--output {args.output}: the file exists (lossproof scaffold does not overwrite)")
    write_atomically(Path(args.output), text.encode())
    print(f"wrote {args.output}: resolve its TODOs, then: lossproof check --target {args.output}:TARGET "
          f"--objective {args.objective}")
    return 0


def cmd_export_prompt(args):
    from lossproof.conformance import exchange
    counts = exchange.export_prompts(_vector_set(args), Path(args.directory), args.objective)
    if not counts:
        raise UsageError(f"no vector matched --objective {args.objective!r}")
    print(f"wrote prompts for {sum(counts.values())} vectors of {len(counts)} objectives to {args.directory}")
    return 0


def cmd_validate(args):
    from lossproof.conformance import exchange, report
    from lossproof.conformance.results import failed
    results = exchange.validate(_vector_set(args), Path(args.responses),
                                _tolerances(args))
    report.console(results, quiet=args.quiet)
    if args.report_json:
        vs = _vector_set(args)
        suite = {"version": conformance.__version__,
                 "vectorSetVersion": vs.version(),
                 "manifest_sha256": vs.manifest_sha256}
        env = {"python": "", "platform": "", "backends": {}, "devices": []}
        report.write_json(args.report_json, report.to_json(results, suite, env))
    return 1 if failed(results) else 0


def _counting(progress, total):
    """Turn theorem.run's per-step messages into ``progress(done, total)`` calls."""
    done = [0]

    def note(_msg):
        progress(done[0], total)
        done[0] += 1
    return note


def cmd_theorem(args):
    import mpmath
    from rich.console import Console
    from rich.table import Table

    from lossproof.conformance._io import write_atomically
    from lossproof.conformance.progress import bar
    from lossproof.conformance.theorem import table as theorem
    trees = args.tree or list(theorem.REDUCED_TREES if args.reduced else theorem.ALL_TREES)
    rules = args.rule or list(theorem.REDUCED_RULES if args.reduced else theorem.ALL_RULES)
    dps = args.dps if args.dps is not None else (theorem.REDUCED_DPS if args.reduced else 50)
    start = time.perf_counter()
    with bar("stationary-policy table", args.quiet) as progress:
        total = len(trees) * (len(rules) + 1)
        out = theorem.run(dps=dps, trees=trees, reduced=args.reduced, rules=rules,
                          progress=_counting(progress, total))
        progress(total, total)
    elapsed = time.perf_counter() - start
    if args.json:
        write_atomically(Path(args.json), (json.dumps(out, indent=1, ensure_ascii=False) + "\n").encode())
    v = theorem.verdict(out)
    console = Console(width=160)
    for tree in v["trees"]:
        table = Table(title=f"{tree['name']}: β = {mpmath.nstr(tree['beta'], 6)}, "
                            f"β·log Z = J(π*) = {mpmath.nstr(tree['beta_log_z'], 15)}", title_justify="left")
        for col in ("rule", "claim", "max |Δθ| at π*", "KL(π_fix‖π*)", "J(π_fix)", "rest point"):
            table.add_column(col, justify="left" if col in ("rule", "claim", "rest point") else "right")
        for r in tree["rows"]:
            where = "interior" if not r["boundary"] else f"boundary ({r['boundary']} → 0)"
            if not r["converged"]:
                where += ", NOT converged"
            table.add_row(r["rule"], "unbiased" if r["unbiased"] else "biased", mpmath.nstr(r["residual"], 3),
                          mpmath.nstr(r["kl"], 4), mpmath.nstr(r["objective"], 12), where)
        if not args.quiet:
            console.print(table)
    if v["worst_proximal_kl"] is not None:
        print(f"proximal_kl: largest |Δθ| at π* = {mpmath.nstr(v['worst_proximal_kl'], 3)} over "
              f"{len(v['trees'])} tree(s) at {v['dps']} digits")
    print(f"{v['biased']} biased (tree, rule) pair(s), {len(trees) * len(rules) - v['biased']} unbiased; "
          f"{elapsed:.1f} s" + (f"; table written to {args.json}" if args.json else ""))
    if v["contradicted"]:
        print(f"lossproof: the theorem's claims do not hold for {', '.join(v['contradicted'])}", file=sys.stderr)
        return 1
    return 0


def cmd_probe(args):
    from rich.console import Console
    from rich.table import Table

    from lossproof.conformance._io import write_atomically
    from lossproof.conformance.progress import bar
    from lossproof.conformance.targets import builtin, load
    from lossproof.conformance.theorem import probe
    if args.device.startswith("cuda") and not builtin.cuda_available():
        raise UsageError(f"--device {args.device}: this machine has no CUDA device (torch.cuda.is_available() is False)")
    targets = [load(spec) for spec in (args.target or ["torch"])]
    results = []
    for target in targets:
        with bar(f"probing {target.name}", args.quiet) as progress:
            results += probe.probe_all(target, trees=args.tree, behavior=probe.ON_POLICY if args.on_policy else None,
                                       dtype=args.dtype, device=args.device, objectives=args.objective,
                                       progress=progress)
    if args.json:
        doc = {"schema": "lossproof-probe/1", "results": results}
        write_atomically(Path(args.json), (json.dumps(doc, indent=1, ensure_ascii=False) + "\n").encode())
    table = Table(title="Stationary-policy probe: the target's expected update vs the exact one "
                        f"({'on-policy' if args.on_policy else 'off-policy, μ = the tree behaviour policy'})",
                  title_justify="left")
    for col in ("target", "objective", "variant", "tree", "rule", "max |target − exact|", "max |Δθ| at π*",
                "π* stationary", "matches"):
        table.add_column(col, justify="right" if col.startswith("max") else "left")
    probed = [r for r in results if "refused" not in r]
    for r in probed:
        variant = r["aggregation"] + (f", kl_ratio_weight={r['params'].get('kl_ratio_weight')}"
                                      if r["objective"] == "grpo.loss" else "")
        table.add_row(r["target"], r["objective"], variant, r["tree"], r["rule"], f"{r['max_abs_diff']:.2e}",
                      f"{r['residual_at_optimum']:.2e}", "yes" if r["stationary"] else "no (biased)",
                      "yes" if r["matches"] else "NO")
    if not args.quiet:
        Console(width=180).print(table)
    for target, objective, reason in dict.fromkeys((r["target"], r["objective"], r["refused"])
                                                   for r in results if "refused" in r):
        print(f"not probed: {target} {objective}: {reason}")
    if not probed:
        raise UsageError("nothing was probed: " + "; ".join(dict.fromkeys(r["refused"] for r in results)))
    bad = [r for r in probed if not r["matches"]]
    print(f"{len(probed)} probe(s): {sum(r['stationary'] for r in probed)} keep π* stationary, "
          f"{len(bad)} disagree with the exact update of their rule")
    return 1 if bad else 0


def cmd_docs(args):
    from lossproof.conformance._host import usable_cores
    from lossproof.conformance.docs import build as docs_build
    if args.docs_command == "list":
        for art in docs_build.ARTIFACTS:
            print(f"{art.path}  ({art.kind}{', slow' if art.slow else ''})\n    from: {art.inputs}\n"
                  f"    needs: {', '.join(art.needs) or 'nothing beyond lossproof[docs]'}")
        return 0
    start = time.perf_counter()

    def note(artifact):   # every note announces slow work, which --fast leaves out
        if artifact.note and not (args.quiet or args.fast):
            print(f"{artifact.path}: {artifact.note}", file=sys.stderr, flush=True)

    def done(o):
        if not args.quiet and o.status != "left out":
            print(f"{o.status:>9} {o.seconds:6.1f} s  {o.path}", flush=True)
        for reason in o.skipped:   # printed even with --quiet: a skip is never silent
            part = "" if o.status == "skipped" else " (in part)"
            print(f"lossproof: {o.path}: skipped{part}: {reason}", file=sys.stderr, flush=True)
    outcomes = docs_build.run(check=args.check, include_slow=not args.fast, on_start=note, on_done=done,
                              workers=args.workers or usable_cores())
    elapsed = time.perf_counter() - start
    stale = [o.path for o in outcomes if o.status == "stale"]
    for path in stale:
        print(f"lossproof: {path}: out of date (run 'lossproof docs build')", file=sys.stderr)
    if stale:
        return 1
    count = {status: sum(o.status == status for o in outcomes) for status in ("written", "skipped", "left out")}
    built = len(outcomes) - count["skipped"] - count["left out"]
    print(f"docs {'up to date' if args.check else 'built'}: {built} files, {count['written']} rewritten; "
          f"{count['skipped']} skipped (inputs missing); {count['left out']} left out (--fast); {elapsed:.1f} s")
    return 0


def _bench_linear(args):
    """``lossproof bench --kernel linear_cross_entropy`` (conformance.bench.linear)."""
    from lossproof.conformance.bench import linear
    from lossproof.conformance.bench import run as bench
    if len(args.kernel) > 1:
        raise UsageError("--kernel linear_cross_entropy runs alone (its inputs are hidden states and a weight, "
                         "not logits)")
    try:
        sizes = [linear.parse_size(x) for x in args.sizes.split(",")] if args.sizes else \
            [linear.QUICK_SIZE if args.quick else linear.DEFAULT_SIZE]
    except ValueError:
        raise UsageError(f"--sizes {args.sizes!r}: expected NxHxV[,...] for linear_cross_entropy, "
                         "e.g. 2048x1024x32768") from None
    bad = [x for x in args.method or [] if x not in linear.METHODS]
    if bad:
        raise UsageError(f"--method {bad[0]!r}: choose from {', '.join(linear.METHODS)}")
    if args.device != "cpu":
        raise UsageError("--kernel linear_cross_entropy measures the CPU (--device cpu)")
    log = (lambda *a: None) if args.quiet else print
    docs = [linear.run(size, args.method, args.reps or (2 if args.quick else 3), args.dtype, log) for size in sizes]
    for doc in docs:
        s = doc["summary"]
        for key in ("time_vs_gemms", "peak_extra_fraction"):
            if s.get(key) is not None:
                print(f"linear_cross_entropy {'x'.join(map(str, s['size']))} {key}: {s[key]:.3g}")
    if args.json:
        bench.write_json(args.json, docs[0] if len(docs) == 1 else {"runs": docs})
        print(f"wrote {args.json}")
    return 0


def cmd_bench(args):
    from lossproof.conformance.bench import methods as bench_methods
    from lossproof.conformance.bench import run as bench
    if args.kernel and "linear_cross_entropy" in args.kernel:
        return _bench_linear(args)
    try:
        sizes = bench.parse_sizes(args.sizes) if args.sizes else None
    except ValueError:
        raise UsageError(f"--sizes {args.sizes!r}: expected NxV[,NxV...], e.g. 4096x131072") from None
    for name, given, known in (("--kernel", args.kernel, bench_methods.KERNELS),
                               ("--method", args.method, bench_methods.METHODS)):
        bad = [x for x in given or [] if x not in known]
        if bad:
            raise UsageError(f"{name} {bad[0]!r}: choose from {', '.join(known)}")
    doc = bench.run(quick=args.quick, sizes=sizes, kernels=args.kernel, methods=args.method, reps=args.reps,
                    exact=not args.no_exact, log=(lambda *a: None) if args.quiet else print, device=args.device,
                    dtype=args.dtype)
    s = doc["summary"]
    for key in ("token_kl_speedup_vs_naive", "token_kl_peak_extra_fraction", "token_kl_bandwidth_fraction",
                "token_kl_speedup_vs_best_library", "generate_seconds", "check_estimated_full_seconds"):
        if s.get(key) is not None:
            print(f"{key}: {s[key]:.3g}")
    if args.json:
        bench.write_json(args.json, doc)
        print(f"wrote {args.json}")
    return 0


def _check_options(chk):
    from lossproof.conformance import compare
    from lossproof.conformance.distributed import partitions
    chk.add_argument("--backend", action="append", metavar="NAME", help="built-in backend: numpy, torch, cupy, triton, jax")
    chk.add_argument("--target", action="append", metavar="SPEC", help="package.module:NAME, path/file.py:NAME or "
                     "a third-party adapter: trl, verl, openrlhf, liger, transformers")
    chk.add_argument("--objective", action="append", metavar="GLOB", help="e.g. 'grpo.*' (repeatable)")
    chk.add_argument("--dtype", action="append", metavar="DTYPE", help="float64, float32, bfloat16, float16")
    chk.add_argument("--device", help="cpu or cuda (default: the target's first device)")
    chk.add_argument("--uid", action="append", help="run only this vector (repeatable)")
    chk.add_argument("--tolerances", metavar="FILE", help="per-target tolerance overrides (JSON)")
    chk.add_argument("--tolerance-model", choices=compare.MODELS, default=None,
                     help="bfloat16/float16 bound: careful (float32 inside, the default unless a target declares "
                          "otherwise) or native (reductions in the low dtype: looser, see docs/vectors.md)")
    chk.add_argument("--time-limit", type=_positive(float), default=DEFAULT_TIME_LIMIT, metavar="S",
                     help=f"per-case limit (default {DEFAULT_TIME_LIMIT:g} s)")
    chk.add_argument("--known", metavar="FILE", help="known failures: JSON {uid or glob[@dtype]: reason and link}")
    chk.add_argument("--strict", action="store_true", help="also fail on an invalid input not rejected and on a "
                     "known failure that now passes")
    chk.add_argument("--as-paper", action="store_true", help="judge against the paper defaults, not the "
                     "target's declared conventions")
    chk.add_argument("--partition", metavar="RxM[:KIND]", help="distributed: run the target's training step on R "
                     "processes × M micro-batches per rank (torch.distributed) for the batch losses; KIND: "
                     f"{', '.join(partitions.ROW_KINDS)} (default: all)")
    chk.add_argument("--shard-vocab", metavar="K[:KIND]", help="distributed: split the vocabulary of the "
                     "distillation divergences and lm token objectives over K processes; KIND: "
                     f"{', '.join(partitions.VOCAB_KINDS)} (default: all)")
    chk.add_argument("--report-json", metavar="PATH")
    chk.add_argument("--junit", metavar="PATH")
    chk.add_argument("--cases", action="store_true", help="after the diagnoses, print every failing case")
    chk.add_argument("--write-known", metavar="FILE", help="write the failing cases as a known-failures file "
                     "(for --known), each with its diagnosis as the reason")
    chk.add_argument("--quiet", action="store_true")


def _validate_options(val):
    from lossproof.conformance import compare
    val.add_argument("responses")
    val.add_argument("--tolerances", metavar="FILE")
    val.add_argument("--tolerance-model", choices=compare.MODELS, default=None,
                     help="bfloat16/float16 bound: careful (default) or native")
    val.add_argument("--report-json", metavar="PATH")
    val.add_argument("--quiet", action="store_true")


def _generate_options(gen):
    from lossproof.conformance import generate
    gen.add_argument("--check", action="store_true", help="compare with the files on disk instead of writing")
    gen.add_argument("--workers", type=_positive(int), default=None, help="processes (default: available cores)")
    gen.add_argument("--family", action="append", choices=generate.FAMILY_MODULES, default=None,
                     help="regenerate only this family's files (repeatable); the others stay as on disk")
    gen.add_argument("--quiet", action="store_true")


def _bench_options(bn):
    from lossproof.conformance.bench import methods as bench_methods
    bn.add_argument("--quick", action="store_true", help="small sizes, the exact side sampled (under 2 minutes)")
    bn.add_argument("--json", metavar="PATH", help="write every row and the summary as JSON")
    bn.add_argument("--sizes", metavar="NxV,...", help="e.g. 4096x131072 (default: by --quick); NxHxV for "
                                                       "linear_cross_entropy, e.g. 2048x1024x32768 (the default)")
    bn.add_argument("--kernel", action="append", metavar="NAME",
                    help=", ".join(bench_methods.KERNELS) + "; or linear_cross_entropy (alone: the fused linear "
                         "cross-entropy against its three GEMMs, naive torch and the libraries)")
    bn.add_argument("--method", action="append", metavar="NAME",
                    help=", ".join(bench_methods.METHODS) + "; for linear_cross_entropy: gemms, lossproof, "
                         "lossproof-tiles, naive, torch-chunked, liger, verl")
    bn.add_argument("--reps", type=int, default=None, metavar="K", help="timed runs per method (default 3; 2 with --quick)")
    bn.add_argument("--no-exact", action="store_true", help="skip the exact side (generation and check timings)")
    bn.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    bn.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16", "float64"),
                    help="dtype of the logits (default float32)")
    bn.add_argument("--quiet", action="store_true")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="lossproof", description="Exact conformance vectors for LLM training objectives.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--version", action="version", version=f"lossproof {conformance.__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Command)

    def with_vectors(sp):
        sp.add_argument("--vectors", metavar="DIR", help="vector directory (default: the bundled vectors/)")
        return sp

    chk = with_vectors(sub.add_parser("check", help="run backends or targets over the vectors",
                                      options=_check_options))
    chk.set_defaults(fn=cmd_check)
    sub.add_parser("setup", help="build the built-in torch backend's compiled CPU kernel (check does it "
                   "before its first case)").set_defaults(fn=cmd_setup)
    sc = sub.add_parser("scaffold", help="write a target file for a library's function, from its signature")
    sc.add_argument("function", metavar="MODULE:FUNCTION", help="e.g. mylib.losses:dpo_loss")
    sc.add_argument("--objective", required=True, metavar="ID", help="the catalog objective it implements")
    sc.add_argument("--output", metavar="FILE", help="write the target here (default: print it)")
    sc.set_defaults(fn=cmd_scaffold)

    inf = with_vectors(sub.add_parser("infer", help="the conventions declaration that fits a target's functions"))
    inf.add_argument("--target", required=True, metavar="SPEC", help="package.module:NAME or path/file.py:NAME")
    inf.add_argument("--objective", action="append", metavar="GLOB", help="e.g. 'grpo.*' (repeatable; default all)")
    inf.add_argument("--dtype", action="append", metavar="DTYPE", help="dtypes to judge in (default float64)")
    inf.add_argument("--quiet", action="store_true")
    inf.set_defaults(fn=cmd_infer)
    exp = with_vectors(sub.add_parser("export-prompt", help="write vector inputs for out-of-process targets"))
    exp.add_argument("directory")
    exp.add_argument("--objective", default="*", metavar="GLOB")
    exp.set_defaults(fn=cmd_export_prompt)
    val = with_vectors(sub.add_parser("validate", help="judge a responses file (lossproof-responses/1)",
                                      options=_validate_options))
    val.set_defaults(fn=cmd_validate)
    with_vectors(sub.add_parser("examples", help="the source article's worked examples")).set_defaults(fn=cmd_examples)
    vec = sub.add_parser("vectors", help="generate, lint or certify the vector files")
    vsub = vec.add_subparsers(dest="vectors_command", required=True)
    gen = with_vectors(vsub.add_parser("generate", help="regenerate vectors/ from the exact reference",
                                       options=_generate_options))
    gen.set_defaults(fn=cmd_generate)
    with_vectors(vsub.add_parser("lint", help="check the vector files")).set_defaults(fn=cmd_lint)
    cer = with_vectors(vsub.add_parser("certify", help="prove every printed digit with ball arithmetic "
                                                       "(writes the .cert.json files)"))
    cer.add_argument("--check", action="store_true",
                     help="recompute and compare with the stored certificates instead of writing")
    cer.add_argument("--objective", default="*", metavar="GLOB", help="objectives to certify (default: all)")
    cer.add_argument("--workers", type=_positive(int), default=None, help="processes (default: available cores)")
    cer.add_argument("--quiet", action="store_true")
    cer.set_defaults(fn=cmd_certify)
    show = with_vectors(sub.add_parser("show", help="print one vector"))
    show.add_argument("uid")
    show.add_argument("--target", metavar="SPEC", help="a uid that is not in the golden set: the target whose "
                      "declared conventions it was derived for (a repro line of group 'derived')")
    show.set_defaults(fn=cmd_show)
    c = with_vectors(sub.add_parser("cite", help="citation for one vector"))
    c.add_argument("uid")
    fmt = c.add_mutually_exclusive_group()
    fmt.add_argument("--bibtex", action="store_true")
    fmt.add_argument("--latex", action="store_true")
    c.add_argument("--output", metavar="NAME", help="--latex: the output (or grad:INPUT) to cite; default the first")
    c.add_argument("--element", metavar="I[,J...]",
                   help="--latex: its element, one index per axis; default the first")
    c.set_defaults(fn=cmd_cite)
    with_vectors(sub.add_parser("list", help="objectives and vector counts")).set_defaults(fn=cmd_list)
    th = sub.add_parser("theorem", help="the stationary-policy table on the built-in token trees")
    th.add_argument("--json", metavar="PATH", help="write the full table (every digit, the rest points) as JSON")
    th.add_argument("--reduced", action="store_true", help="the CI size: two trees, 17 rules, 30 digits")
    th.add_argument("--dps", type=int, default=None, metavar="N", help="working digits (default 50; --reduced caps at 30)")
    th.add_argument("--tree", action="append", metavar="NAME", help="only this built-in tree (repeatable)")
    th.add_argument("--rule", action="append", metavar="RULE", help="only this rule (repeatable)")
    th.add_argument("--quiet", action="store_true")
    th.set_defaults(fn=cmd_theorem)
    pr = sub.add_parser("probe", help="does a proximal_kl.loss / grpo.loss implementation keep π* stationary?")
    pr.add_argument("--target", action="append", metavar="SPEC", help="torch, numpy, package.module:NAME or "
                    "path/file.py:NAME (default: torch)")
    pr.add_argument("--objective", action="append", choices=["proximal_kl.loss", "grpo.loss"])
    pr.add_argument("--tree", action="append", metavar="NAME", help="only this built-in tree (repeatable)")
    pr.add_argument("--on-policy", action="store_true", help="μ = π instead of the tree's behaviour policy")
    pr.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    pr.add_argument("--device", default="cpu")
    pr.add_argument("--json", metavar="PATH")
    pr.add_argument("--quiet", action="store_true")
    pr.set_defaults(fn=cmd_probe)
    docs = sub.add_parser("docs", help="the generated pages, tables, figures and console sessions of docs/ and README.md")
    dsub = docs.add_subparsers(dest="docs_command", required=True)
    db = dsub.add_parser("build", help="regenerate every generated artifact (lossproof docs list names them)")
    db.add_argument("--check", action="store_true", help="write nothing; exit 1 naming every out-of-date file")
    db.add_argument("--fast", action="store_true", help="leave out the slow artifacts: the 50-digit theorem, the "
                    "console sessions, the kill table and the adapters' runs (a few minutes together)")
    db.add_argument("--workers", type=_positive(int), default=None,
                    help="processes building artifacts side by side (default: available cores; 1: one by one)")
    db.add_argument("--quiet", action="store_true")
    db.set_defaults(fn=cmd_docs)
    dl = dsub.add_parser("list", help="every generated artifact: what it is built from and what it needs")
    dl.set_defaults(fn=cmd_docs)
    bn = sub.add_parser("bench", help="time and memory of the distillation kernels against naive torch and the libraries",
                        options=_bench_options)
    bn.set_defaults(fn=cmd_bench)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)   # --version and --help exit here, having imported no command
    from lossproof.refimpl.validate import InputError
    try:
        return args.fn(args)
    except BrokenPipeError:
        # the reader went away (`lossproof list | head`): stop quietly, as other command-line tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (LossproofError, InputError, OSError) as err:
        if args.debug:
            raise
        print(f"lossproof: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lossproof: interrupted", file=sys.stderr)
        return 130
