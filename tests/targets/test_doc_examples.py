"""docs/targets.md ("Writing a target") stays true to the code it documents.

Every example file the page shows is the file under docs/examples/targets/; every console session
is what the command prints today (run here, in a copy of that folder); the table of what an
implementation must reject is what the invalid vectors say; the report fields are the schema's;
and the behaviours the prose states (which outputs are read, that a vjp is checked, what a
declaration makes unsupported) hold for the examples.

The page's generated blocks lie between ``<!-- generated:NAME -->`` and ``<!-- /generated:NAME -->``
(the format of ``lossproof docs build``). After a change to an example, the vectors or the
console output, rewrite them with ``python tests/targets/test_doc_examples.py``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import json
import re
import shlex
import shutil
import sys
import tempfile
from functools import cache
from pathlib import Path
from unittest import mock

import pytest

torch = pytest.importorskip("torch", reason="the page's examples are torch targets")

from lossproof.conformance import catalog, cli, harness, plan, testing, timelimit, verdict  # noqa: E402
from lossproof.conformance.docs.blocks import read_blocks, replace_blocks  # noqa: E402
from lossproof.conformance.docs.sessions import equivalent  # noqa: E402
from lossproof.conformance.targets import Target, load  # noqa: E402
from lossproof.conformance.vectors import load as vectors_load  # noqa: E402
from lossproof.conformance.vectors.load import VectorSet  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "targets.md"
EXAMPLES = ROOT / "docs" / "examples" / "targets"
SCHEMA = ROOT / "conformance" / "schema" / "report-3.json"

# A target file named like the module it imports (described in the page's prose, written here).
SHADOWING = ("torch.py", ("import torch\n\nTARGET = {'name': 'shadow', 'framework': 'torch', "
                          "'objectives': {'kl.estimator': torch.sub}}\n"))


@dataclasses.dataclass(frozen=True)
class Session:
    commands: tuple[tuple[str, int], ...]     # (the command line as the page shows it, its exit status)
    files: tuple[tuple[str, str], ...] = ()   # written into the working directory besides the examples
    needs: tuple[str, ...] = ()               # libraries it imports beyond lossproof's and torch


def command(*pieces: str, status: int = 0) -> tuple[str, int]:
    """A command line of the page (written in pieces to fit here) and the exit status it ends with."""
    return " ".join(pieces), status


SESSIONS = {
    "check-minimal": Session((
        command("lossproof check --target minimal.py:TARGET --objective kl.estimator | head -n 6"),)),
    "check-conventions": Session((
        command("lossproof check --target conventions.py:PAPER --target conventions.py:K1",
                "--target conventions.py:LIST --target conventions.py:ANY --target conventions.py:COMBOS",
                "--objective kl.estimator --dtype float64 | head -n 15"),)),
    "check-as-paper": Session((
        command("lossproof check --target conventions.py:LIST --target conventions.py:K1",
                "--objective kl.estimator --dtype float64 --as-paper --quiet"),)),
    "check-params": Session((
        command("lossproof check --target params.py:TARGET --objective grpo.clip | head -n 3"),)),
    "check-known-undeclared": Session((
        command("lossproof check --target known.py:UNDECLARED --objective grpo.advantages --quiet", status=1),)),
    "check-known-declared": Session((
        command("lossproof check --target known.py:DECLARED --objective grpo.advantages --quiet"),
        command("lossproof check --target known.py:UNDECLARED --objective grpo.advantages",
                "--known known.json --quiet | head -n 2"))),
    "check-known-stale": Session((
        command("lossproof check --target known.py:FIXED --objective grpo.advantages --known known.json --quiet"),
        command("lossproof check --target known.py:FIXED --objective grpo.advantages --known known.json",
                "--strict --quiet | tail -n 2", status=1))),
    "check-validation": Session((
        command("lossproof check --target minimal.py:TARGET --target validating.py:TARGET",
                "--objective kl.estimator --dtype float64 | head -n 9"),
        command("lossproof check --target minimal.py:TARGET --objective kl.estimator --dtype float64",
                "--strict --quiet | head -n 4", status=1))),
    "check-jax": Session((
        command("lossproof check --target jax_target.py:TARGET --objective kl.estimator | head -n 6"),),
        needs=("jax",)),
    "dtype-refused": Session((
        command("lossproof check --target dtypes_devices.py:TARGET --objective kl.estimator",
                "--dtype bfloat16 2>&1", status=2),)),
    "check-value-only": Session((
        command("lossproof check --target value_only.py:TARGET --objective lm.entropy | head -n 3"),)),
    "check-fixed": Session((
        command("lossproof check --target fixed.py:TARGET --objective dpo.loss | head -n 3"),)),
    "check-computes-in": Session((
        command("lossproof check --target computes_in.py:TARGET --objective lm.token_logprobs | head -n 3"),
        command("lossproof check --target computes_in.py:TARGET --objective lm.token_logprobs",
                "--dtype float64 2>&1", status=2))),
    "check-bare-import": Session((
        command("lossproof check --target bare_import.py:TARGET --objective kl.estimator --quiet"),),
        needs=("verl",)),
    "named-like-the-module": Session((
        command("lossproof check --target torch.py:TARGET 2>&1", status=2),), files=(SHADOWING,)),
    "pytest-plugin": Session((
        command("python -m pytest -q -p no:cacheprovider --lossproof-target minimal.py:TARGET",
                "--lossproof-objective kl.estimator | tail -n 1"),
        command("python -m pytest -q -p no:cacheprovider --lossproof-target minimal.py:TARGET",
                "--lossproof-objective kl.estimator --lossproof-strict | tail -n 1", status=1))),
}

# The example files, each shown in one block of the page.
EXAMPLE_BLOCKS = {f"example-{path.stem.replace('_', '-')}{'-json' if path.suffix == '.json' else ''}": path.name
                  for path in sorted(EXAMPLES.iterdir()) if path.suffix in (".py", ".json")}

_PIPE = re.compile(r"^(head|tail) -n (\d+)$")
# Elapsed times differ from run to run: shown as "…".
_TIMINGS = ((re.compile(r"^(\d+ target\(s\)), \d+(?:\.\d+)? s$", re.M), r"\1, … s"),
            (re.compile(r" in \d+(?:\.\d+)?s( \(\d+:\d+:\d+\))?$", re.M), " in …s"))


# --------------------------------------------------------------------------- the generated blocks

@cache
def _vector_set() -> VectorSet:
    return VectorSet(validate=False)


@contextlib.contextmanager
def _shared_vectors():
    """Every command of the page reads the bundled vectors: one lazy set, each file read once,
    instead of one per command, for the CLI (which imports VectorSet when a command runs) and for
    the pytest plugin."""
    def shared(directory=None, *_, **__):   # the selection and validate=: the shared set holds every file
        return VectorSet(directory) if directory else _vector_set()
    with mock.patch.object(vectors_load, "VectorSet", shared), mock.patch.object(testing, "VectorSet", shared):
        yield


def _workdir(tmp: Path, session: Session) -> Path:
    work = tmp / "work"
    shutil.copytree(EXAMPLES, work, ignore=shutil.ignore_patterns("__pycache__"))
    for name, text in session.files:
        (work / name).write_text(text, encoding="utf-8")
    return work


def _lossproof(argv: list[str], cwd: Path, with_stderr: bool) -> tuple[int, str]:
    """``lossproof ARGV`` run in this process (the vectors and torch are loaded already)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _shared_vectors():
        try:
            status = cli.main(argv)
        except SystemExit as exit_:       # argparse's own usage errors
            status = exit_.code
    return status, out.getvalue() + (err.getvalue() if with_stderr else "")


def _pytest(argv: list[str], cwd: Path, with_stderr: bool) -> tuple[int, str]:
    """``python -m pytest ARGV`` run in this process, as the plugin runs in the user's suite."""
    assert argv[:2] == ["-m", "pytest"], f"a session runs lossproof or python -m pytest, not python {argv}"
    # Artefacts of running here rather than in a fresh process, left out: pytest warns that it
    # cannot rewrite the asserts of a plugin's module imported already (anyio, by the verl
    # example), and its unraisable-exception hook collects this large heap five times a session.
    artefact = ["-W", "ignore::pytest.PytestAssertRewriteWarning", "-p", "no:unraisableexception"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _shared_vectors():
        status = pytest.main(argv[2:] + artefact)
    return int(status), out.getvalue() + (err.getvalue() if with_stderr else "")


def _run(line: str, status: int, cwd: Path) -> str:
    stages = [s.strip() for s in line.split(" | ")]
    words = shlex.split(stages[0])
    with_stderr = words[-1] == "2>&1"
    words = words[:-1] if with_stderr else words
    runner = {"lossproof": _lossproof, "python": _pytest}[words[0]]
    got, text = runner(words[1:], cwd, with_stderr)
    assert got == status, f"`{line}` exited with status {got}, the page says {status}:\n{text}"
    lines = [ln.rstrip() for ln in text.splitlines()]
    for stage in stages[1:]:
        kind, k = _PIPE.match(stage).groups()
        lines = lines[:int(k)] if kind == "head" else lines[-int(k):]
    shown = "\n".join(lines)
    for pattern, replacement in _TIMINGS:
        shown = pattern.sub(replacement, shown)
    return f"$ {line}\n{shown}".rstrip()


def render_session(name: str) -> str:
    session = SESSIONS[name]
    with tempfile.TemporaryDirectory(prefix="lossproof-targets-page-") as tmp:
        work = _workdir(Path(tmp), session)
        shown = [_run(line, status, work) for line, status in session.commands]
    return "```console\n" + "\n".join(shown) + "\n```"


def render_example(name: str) -> str:
    path = EXAMPLES / name
    text = path.read_text(encoding="utf-8").rstrip()
    if path.suffix == ".json":
        return f"```json\n{text}\n```"
    return f"```python\n# {name}\n{text}\n```"


# What an invalid vector's error says (after "ARGUMENT: "), and the rule the page states for it.
INPUT_RULES = (
    (r"^every token is ignore_index", "every token `ignore_index` under reduction 'mean' (0/0)"),
    (r"^-inf in row \S+ with label_smoothing > 0", "−inf in a counted row with `label_smoothing` > 0"),
    (r"^contains NaN", "NaN"),
    (r"^contains \+inf", "+inf"),
    (r"^contains -inf", "−inf"),
    (r"^row \S+ is -inf everywhere", "a row that is −inf everywhere"),
    (r"^-inf at row .* where the other distribution has probability > 0",
     "−inf where the other distribution is > 0 (infinite KL)"),
    (r"^-inf at the label", "−inf at the label (infinite cross-entropy)"),
    (r"^(the vocabulary axis )?must not be empty", "an empty axis"),
    (r"^expected (at least )?\d+ (or \d+ )?dimensions?", "the wrong number of dimensions"),
    (r"^\[L, N, E\] logits with form 'switch'", "layered [L, N, E] logits with form 'switch' (one layer)"),
    (r"^only applies to policy_loss (.*), got", r"given with a policy loss other than \1"),
    (r"^selects a token the mask leaves out", "selecting a token the mask leaves out"),
    (r"^policy_loss='(\S+)' needs the selected tokens", r"missing with policy_loss '\1' (its selection is random)"),
    (r"^the top-\d+ covariance is tied at the boundary", "missing where the top-k covariance ties at the boundary"),
    (r"^shape .* does not match|^expected shape", "a shape that does not match"),
    (r"^label -?\d+ at row \d+ is outside", "a label outside [0, V)"),
    (r"^length \d+ does not match the vocabulary size", "a length other than the vocabulary size V"),
    (r"^selects no token", "a mask that selects no token"),
    (r"^must contain only 0 and 1", "mask values other than 0 and 1"),
    (r"^prefix .*: probabilities sum to", "a row that does not sum to 1"),
    (r"^prefix .*: probabilities must be finite and > 0", "a probability ≤ 0 (full support is required)"),
    (r"^constant under the sampling policy", "constant rewards under `sigma_normalized` (σ = 0)"),
    (r"^lengths must be >= 1", "a length below 1"),
    (r"^must be < 0 \(the odds", "a log-probability ≥ 0 (infinite odds)"),
    (r"^required when the NLL weight is nonzero", "missing where the NLL term divides by it"),
    (r"^row \d+ repeats an id", "an id repeated in a row"),
    (r"^id -?\d+ at row \d+ is outside", "an id outside [0, V)"),
    (r"^expected integers, got", "a value that is not an integer"),
    (r"^needs 1 <= K <= V ids per row", "more ids per row than the vocabulary (K > V)"),
    (r"^row \d+: the probabilities sum to", "top-k probabilities summing to more than 1 (+ 0.01)"),
    (r"^-inf at row .* where the teacher has probability > 0", "−inf where the teacher is > 0 (infinite KL)"),
    (r"^row \d+: renormalize='tail' needs", "top-k probabilities summing to more than 1 ('tail': no tolerance)"),
    (r"^must be >= 0 \(a ratio of probabilities\)", "a weight below 0 (a ratio of probabilities)"),
    (r"^row \S+ is -inf at every token off the teacher's ids",
     "−inf at every token off the teacher's ids while its tail is > 0 ('tail': infinite KL)"),
)
VALUE_RULES = (
    (r"^must be one of ", "not one of its values"),
    (r"^must be False with (\S+)", r"True with \1"),
    (r"^must be <= the number of experts", "more than the number of experts E"),
    (r"^must divide the number of tokens", "not a divisor of the number of tokens"),
    (r"^applies to form '(\S+)' only", r"set with a form other than '\1'"),
    (r"^must be > (\S+), got", r"≤ \1"),
    (r"^must be >= (\S+), got", r"< \1"),
    (r"^must be in ([\[(].*?[\])]), got", r"outside \1"),
    (r"^must be an integer >= (\d+), got", r"not an integer ≥ \1"),
    (r"^must be True or False", "not a boolean"),
    (r"^must be 0 or 1, got", "not 0 or 1"),
    (r"^must be None or a token id in", "not a token id in [0, V)"),
    (r"^expected a real number, got None", "missing (None)"),
    (r"^expected a real number, got '", "a string, not a number"),
    (r"^must be None with (\S+) ", r"set with \1"),
    (r"^expected a real number, got", "not a real number"),
    (r"^'(\S+)' needs (\S+), got", r"'\1' without \2"),
    (r"^must be <= upper, got", "above `upper`"),
    (r"^lower and upper are both None", "None while `lower` is None too"),
    (r"^must be None with (\S+)$", r"set with \1"),
    (r"^only applies to (\S+), got", r"set without \1"),
    (r"^only applies with (\S+) ", r"set without \1"),
    (r"^the raw cap of (\S+) must be > (\S+), got", r"≤ \2 with \1"),
    (r"^applies to whitening, got", "set without whitening (whiten 'none')"),
    (r"^'others' spreads the smoothing over the V − 1 classes", "'others' with V = 1 (no class besides the label)"),
    (r"^'top_k' does not apply to form '(\S+)'", r"'top_k' with form '\1' (its f already divides by k)"),
    (r"^mode (\S+) takes no mean over tokens", r"ε > 0 where mode \1 divides by no token count (scope 'every')"),
)


def _rule(case) -> tuple[str, int, str]:
    """(the argument an invalid vector is about, the rule's rank, the rule as the page states it)."""
    spec = catalog.get(case.objective)
    inputs, params = [i.name for i in spec.inputs], [p.name for p in spec.params]
    culprit, _, problem = case.test["error"].partition(": ")
    if culprit not in inputs + params:            # e.g. "tree.ref: ..." for pi_ref: the comment names it
        culprit = case.test["comment"].partition(":")[0]
    assert culprit in inputs + params, f"{case.uid}: no argument named in {case.test['error']!r}"
    rules = INPUT_RULES if culprit in inputs else VALUE_RULES
    for rank, (pattern, rule) in enumerate(rules):
        m = re.search(pattern, problem)
        if m:
            return culprit, rank, m.expand(rule)
    raise AssertionError(f"{case.uid}: no rule of the page matches {case.test['error']!r}: add one")


def validation_rules(vs: VectorSet) -> str:
    """What each objective must reject, from the invalid vectors' errors: one row per objective."""
    rows = ["| objective | inputs | parameters | conventions |", "|---|---|---|---|"]
    for spec in catalog.OBJECTIVES:
        by_input: dict[tuple[int, str], list[str]] = {}
        values: dict[str, list[str]] = {"param": [], "convention": []}
        for case in vs.cases(spec.id):
            if case.result != "invalid":
                continue
            name, rank, rule = _rule(case)
            if name in (i.name for i in spec.inputs):
                names = by_input.setdefault((rank, rule), [])
                names += [name] if name not in names else []
            else:
                item = f"`{name}` {rule}"
                column = values["convention" if name in spec.conventions else "param"]
                column += [item] if item not in column else []
        if not by_input and not any(values.values()):
            continue
        inputs = "; ".join(f"{rule}: {', '.join(f'`{n}`' for n in names)}"
                           for (_, rule), names in sorted(by_input.items()))
        rows.append(f"| `{spec.id}` | {inputs} | {'; '.join(values['param'])} | {'; '.join(values['convention'])} |")
    return "\n".join(rows)


def report_excerpt() -> str:
    """The summary and the first rejected case of the JSON report of a validating target."""
    with tempfile.TemporaryDirectory(prefix="lossproof-targets-page-") as tmp:
        work = _workdir(Path(tmp), Session(()))
        status, _ = _lossproof(["check", "--target", "validating.py:TARGET", "--objective", "kl.estimator",
                                "--dtype", "float64", "--report-json", "report.json", "--quiet"], work, False)
        assert status == 0
        doc = json.loads((work / "report.json").read_text(encoding="utf-8"))
    case = next(c for c in doc["cases"] if c["status"] == "rejected")
    excerpt = {"schema": doc["schema"], "summary": doc["summary"], "cases": [case]}
    return "```json\n" + json.dumps(excerpt, indent=1, ensure_ascii=False) + "\n```"


def blocks() -> dict:
    """{block name: a function producing its fresh content}"""
    return {**{name: (lambda n=name: render_session(n)) for name in SESSIONS},
            **{name: (lambda f=file: render_example(f)) for name, file in EXAMPLE_BLOCKS.items()},
            "validation-rules": lambda: validation_rules(_vector_set()),
            "report-json": report_excerpt}


# --------------------------------------------------------------------------- the page matches

@pytest.fixture(scope="module")
def page() -> str:
    return PAGE.read_text(encoding="utf-8")


@pytest.fixture(autouse=True)
def _no_leftovers(monkeypatch):
    """Target files put their folder on sys.path and their siblings in sys.modules: undo it."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("lossproof_target_") or name == "kl_formulas":
            del sys.modules[name]


def test_the_page_has_exactly_the_generated_blocks(page):
    assert set(read_blocks(page)) == set(blocks())
    replace_blocks(page, {name: "" for name in blocks()}, str(PAGE))   # every marker opens and closes once


@pytest.mark.parametrize("name", sorted(EXAMPLE_BLOCKS))
def test_an_example_shown_is_the_file(page, name):
    assert read_blocks(page)[name] == render_example(EXAMPLE_BLOCKS[name]), (
        f"{name}: the page differs from {EXAMPLE_BLOCKS[name]}: run python {Path(__file__).relative_to(ROOT)}")


@pytest.mark.parametrize("name", sorted(SESSIONS))
def test_a_session_shows_what_the_command_prints(page, name):
    for library in SESSIONS[name].needs:      # found, not imported: verl's own __init__ needs Ray
        if importlib.util.find_spec(library) is None:
            pytest.skip(f"the session {name} runs an example that imports {library}, which is not installed "
                        "(scripts/install-peers.sh)")
    shown, fresh = read_blocks(page)[name], render_session(name)
    assert equivalent(shown, fresh), f"{name} prints now:\n{fresh}"


def test_the_validation_rules_are_what_the_invalid_vectors_say(page):
    assert read_blocks(page)["validation-rules"] == validation_rules(_vector_set())


def test_the_report_excerpt_and_fields_are_the_schema(page):
    assert read_blocks(page)["report-json"] == report_excerpt()
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    case_fields = schema["properties"]["cases"]["items"]["required"]
    metrics = schema["properties"]["cases"]["items"]["properties"]["outputs"]["additionalProperties"]["required"]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", _section(page, "### JSON"), re.M))
    assert documented == set(case_fields) | set(metrics) | set(schema["required"])


def test_every_target_key_is_documented(page):
    # set by the loader: spec, objective_dtypes (from a dtypes mapping) and variant_rules (from the
    # known_rules of one variant)
    keys = {f.name for f in dataclasses.fields(Target)} - {"spec", "objective_dtypes", "variant_rules"}
    assert set(re.findall(r"^\| `([a-z_]+)` \|", _section(page, "## The keys"), re.M)) == keys


def test_the_detached_objectives_and_quoted_messages_are_the_harness(page):
    sentence = re.search(r"the outputs of ((?:`[a-z_.]+`(?:, | and ))+`[a-z_.]+`) are", " ".join(page.split()))
    assert sentence, "the page no longer names the detached objectives"
    assert set(re.findall(r"`([a-z_.]+)`", sentence.group(1))) == {o.id for o in catalog.OBJECTIVES if o.detached}
    sources = "".join(Path(m.__file__).read_text(encoding="utf-8") for m in (harness, plan, timelimit, verdict,
                                                                            sys.modules[Target.__module__],
                                                                            sys.modules["lossproof.conformance.report"],
                                                                            sys.modules["lossproof.conformance.results"]))
    for quoted in (" ".join(q.split()) for q in re.findall(r"«([^»]+)»", page)):
        assert quoted in sources, f"the page quotes «{quoted}», which the code no longer says"


def _section(page: str, heading: str) -> str:
    start = page.index(heading + "\n")
    level = heading.split(" ")[0]
    end = re.compile(rf"^#{{1,{len(level)}}} ", re.M).search(page, start + len(heading))
    return page[start:end.start() if end else len(page)]


# --------------------------------------------------------------------------- the examples behave as stated

def _judge(spec: str, objective: str, **options) -> list:
    return harness.run(load(str(EXAMPLES / spec)), _vector_set(), objective=objective, **options)


def test_a_bare_tensor_is_the_primary_output_a_tuple_and_a_dict_are_all_outputs():
    checked = {}
    for name in ("BARE", "TUPLE", "DICT"):
        results = _judge(f"outputs.py:{name}", "dpo.loss", dtypes=["float64"])
        assert {r.status for r in results if r.axis == "conformance"} <= {"pass", "skip"}, name
        checked[name] = {o for r in results if r.status == "pass" for o in r.outputs}
    assert checked["BARE"] == {"losses", "grad:policy_chosen_logps", "grad:policy_rejected_logps"}
    assert checked["TUPLE"] == checked["DICT"] == checked["BARE"] | {"chosen_rewards", "rejected_rewards"}


def test_a_vjp_is_checked_and_a_wrong_one_fails(tmp_path):
    results = _judge("numpy_vjp.py:TARGET", "kl.estimator")
    passed = [r for r in results if r.status == "pass"]
    assert passed and all("grad:logp" in r.outputs for r in passed)
    assert {r.status for r in results if r.axis == "conformance"} == {"pass", "skip"}
    wrong = tmp_path / "wrong_vjp.py"
    wrong.write_text((EXAMPLES / "numpy_vjp.py").read_text(encoding="utf-8").replace(
        '{"logp": -cotangent', '{"logp": cotangent'), encoding="utf-8")
    results = harness.run(load(f"{wrong}:TARGET"), _vector_set(), objective="kl.estimator", dtypes=["float64"])
    failed = [r for r in results if r.status == "fail"]
    assert failed and all("grad:logp" in r.message for r in failed)


def test_a_params_declaration_makes_other_values_unsupported_not_failed():
    results = _judge("params.py:TARGET", "grpo.clip", dtypes=["float64"])
    unsupported = [r for r in results if r.status == "unsupported"]
    assert unsupported and all("eps_high=" in r.message and "is not among the values the target takes"
                               in r.message for r in unsupported)
    assert not [r for r in results if r.status in ("fail", "error")]


def test_every_dtype_passes_for_the_examples_that_claim_them():
    """The sessions run float64 (or one objective); the examples hold in every dtype they claim."""
    for spec, objective in (("minimal.py:TARGET", "kl.estimator"), ("validating.py:TARGET", "kl.estimator"),
                            ("sibling_target.py:TARGET", "kl.estimator"), ("outputs.py:DICT", "dpo.loss"),
                            ("conventions.py:COMBOS", "kl.estimator"), ("dtypes_devices.py:TARGET", "kl.estimator"),
                            ("value_only.py:TARGET", "lm.entropy"), ("fixed.py:TARGET", "dpo.loss"),
                            ("computes_in.py:TARGET", "lm.token_logprobs")):
        results = _judge(spec, objective)
        assert not [r for r in results if r.status in ("fail", "error")], spec
        claimed = set(load(str(EXAMPLES / spec)).all_dtypes())
        assert {r.dtype for r in results if r.status == "pass"} == claimed, spec


def test_a_device_the_machine_has_runs_and_one_it_lacks_is_a_usage_error(tmp_path):
    work = _workdir(tmp_path, Session(()))
    status, text = _lossproof(["check", "--target", "dtypes_devices.py:TARGET", "--objective", "kl.estimator",
                               "--device", "cuda", "--quiet"], work, with_stderr=True)
    if torch.cuda.is_available():
        assert status == 0, text
    else:
        assert status == 2 and "this machine has no CUDA device" in text


if __name__ == "__main__":
    fresh = {name: produce() for name, produce in blocks().items()}
    PAGE.write_text(replace_blocks(PAGE.read_text(encoding="utf-8"), fresh, str(PAGE)), encoding="utf-8")
    print(f"rewrote the {len(fresh)} generated blocks of {PAGE.relative_to(ROOT)}")
