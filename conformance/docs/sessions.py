"""The console sessions shown in README.md and docs/*.md, run by the build and pasted as they
came, so that what a reader sees is what the command prints today.

A session is one or more commands, shown after ``$ ``, each run in a fresh temporary directory
(a copy of ``workdir`` from the checkout when the session needs files, e.g. a target file the
page shows) as a separate process: ``lossproof`` is ``python -m lossproof`` of this
interpreter, ``python`` is this interpreter. Only stdout is shown (progress goes to stderr);
``| head -n K`` and ``| tail -n K`` keep the first or last K lines. Each command must end
with its declared exit status, or the build fails.

What changes from run to run is normalised (elapsed seconds become ``…``). What changes from
machine to machine is left as printed but compared loosely: the worst error/tolerance ratios
of ``lossproof check`` depend on the CPU's vector instructions, so a session whose only
difference is in those ratios counts as up to date, and the page keeps what it shows.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lossproof.conformance.docs import DocsError, Unavailable

TIMEOUT_S = 300
_TIMINGS = (
    (re.compile(r"^(\d+ target\(s\)), \d+(?:\.\d+)? s$", re.M), r"\1, … s"),        # lossproof check
    (re.compile(r" in \d+(?:\.\d+)?s( \(\d+:\d+:\d+\))?$", re.M), " in …s"),        # pytest
)
_RATIOS = re.compile(r"\b(bfloat16|float16|float32|float64) \d[\d.e+-]*")   # check's worst error/tolerance
_PIPE = re.compile(r"^(head|tail) -n (\d+)$")


@dataclass(frozen=True)
class Command:
    line: str              # as shown after "$ "
    status: int = 0        # the exit status the command must end with


@dataclass(frozen=True)
class Session:
    commands: tuple[Command, ...]
    workdir: str | None = None      # a folder of the checkout copied as the working directory
    torch: bool = False             # runs a torch target: skipped where torch is not installed


def _check(line: str, status: int = 0) -> Command:
    return Command(line, status)


SESSIONS: dict[str, Session] = {
    # README.md
    "check-torch-distill": Session((_check("lossproof check --backend torch --objective 'distill.*'"),), torch=True),
    "show-softmax": Session((_check("lossproof show distill.softmax:b6309f9537961a6a"),)),
    "cite-softmax-latex": Session((_check("lossproof cite distill.softmax:b6309f9537961a6a --latex"),)),
    # docs/validate-your-implementation.md
    "list": Session((_check("lossproof list"),)),
    "check-first-target": Session((
        _check("lossproof check --target my_grpo.py:TARGET --objective grpo.advantages --quiet | head -n 1", 1),
        _check("lossproof check --target my_grpo.py:TARGET --objective grpo.advantages --quiet | tail -n 2", 1),
        _check("lossproof check --target my_grpo.py:TARGET --uid grpo.advantages:cb725563a3114348 --dtype float64 "
               "--quiet | head -n 5", 1),
    ), workdir="docs/examples/first", torch=True),
    "show-zero-std-rounding": Session((_check("lossproof show grpo.advantages:714e91de9275a9d4"),)),
    "check-fixed-target": Session((_check("lossproof check --target my_grpo.py:TARGET --objective grpo.advantages"),),
                                  workdir="docs/examples/fixed", torch=True),
    "check-fixed-target-reports": Session((_check(
        "lossproof check --target my_grpo.py:TARGET --objective grpo.advantages --report-json report.json "
        "--junit junit.xml --quiet"),), workdir="docs/examples/fixed", torch=True),
    "pytest-fixed-target": Session((_check(
        "python -m pytest -q -p no:cacheprovider --lossproof-target my_grpo.py:TARGET "
        "--lossproof-objective grpo.advantages | tail -n 1"),), workdir="docs/examples/fixed", torch=True),
    # docs/vectors.md
    "show-grpo-group": Session((_check("lossproof show grpo.advantages:cb725563a3114348"),)),
    "cite-clip": Session((_check("lossproof cite grpo.clip:c112848979dae3f3"),
                          _check("lossproof cite grpo.clip:c112848979dae3f3 --bibtex"),
                          _check("lossproof cite grpo.clip:c112848979dae3f3 --latex"))),
}


def _argv(words: list[str]) -> list[str]:
    if words[0] == "lossproof":
        return [sys.executable, "-m", "lossproof", *words[1:]]
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    raise DocsError(f"a session runs lossproof or python, not {words[0]!r}")


def _run(command: Command, cwd: Path, name: str) -> str:
    stages = [s.strip() for s in command.line.split(" | ")]
    env = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"}
    done = subprocess.run(_argv(shlex.split(stages[0])), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)     # the status is compared with the declared one
    if done.returncode != command.status:
        last = (done.stderr.strip().splitlines() or ["(no output on stderr)"])[-1]
        raise DocsError(f"session {name}: `{command.line}` exited with status {done.returncode}, "
                        f"expected {command.status}: {last}")
    lines = [ln.rstrip() for ln in done.stdout.splitlines()]
    for stage in stages[1:]:
        m = _PIPE.match(stage)
        if not m:
            raise DocsError(f"session {name}: only '| head -n K' and '| tail -n K' can follow a command")
        k = int(m.group(2))
        lines = lines[:k] if m.group(1) == "head" else lines[-k:]
    text = "\n".join(lines)
    for pattern, replacement in _TIMINGS:
        text = pattern.sub(replacement, text)
    return f"$ {command.line}\n{text}".rstrip()


def render(root: Path, name: str) -> str:
    """The fenced console block of session ``name``, run now."""
    session = SESSIONS[name]
    if session.torch and importlib.util.find_spec("torch") is None:
        raise Unavailable(f"torch is not installed: the session {name} checks a torch target")
    with tempfile.TemporaryDirectory(prefix="lossproof-session-") as tmp:
        cwd = Path(tmp) / "work"
        if session.workdir:
            source = Path(root) / session.workdir
            if not source.is_dir():
                raise DocsError(f"session {name}: {session.workdir} not found under {root}")
            shutil.copytree(source, cwd)
        else:
            cwd.mkdir()
        shown = [_run(c, cwd, name) for c in session.commands]
    return "```console\n" + "\n".join(shown) + "\n```"


def equivalent(old: str, new: str) -> bool:
    """Whether a shown session still says what a fresh run says, the machine-dependent error
    ratios aside."""
    return _RATIOS.sub(r"\1 #", old) == _RATIOS.sub(r"\1 #", new)
