"""The compiled CPU kernel's build (``refimpl.torch._compiled``): processes share one build by a
lock on its cache entry, and an interrupted build leaves no compiler running."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the compiled kernel is the torch backend's")

from lossproof.refimpl.torch import _compiled

ROOT = Path(__file__).resolve().parents[2]
REAL = _compiled._compiler()
pytestmark = pytest.mark.skipif(REAL is None or not hasattr(os, "killpg"),
                                reason="needs a C++ compiler and POSIX process groups")


def _fake_compiler(folder: Path, body: str) -> Path:
    """A compiler driver that logs each build to ``builds.log`` and then runs ``body`` (sh)."""
    path = folder / "fake-c++"
    path.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$1" = "--version" ]; then exec {REAL} --version; fi
        echo "$$" >> {folder}/builds.log
        """) + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def test_parallel_processes_build_once(tmp_path):
    """Two processes start with an empty cache: one builds, the other waits for the lock and
    loads what it built."""
    # -O0: the same source and symbols in a fraction of the -O3 build's time
    cxx = _fake_compiler(tmp_path, f'exec {REAL} $(echo "$@" | sed "s/-O3/-O0/; s/-march=native//")\n')
    env = {**os.environ, "CXX": str(cxx), "LOSSPROOF_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    code = "import json; from lossproof.refimpl.torch import _compiled; print(json.dumps(_compiled.status()))"
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    statuses = [json.loads(p.communicate(timeout=600)[0]) for p in procs]
    assert all(s["available"] for s in statuses), statuses
    assert sorted(s["cached"] for s in statuses) == [False, True]
    assert len((tmp_path / "builds.log").read_text().split()) == 1


class _Interrupt(BaseException):
    pass


def test_an_interrupted_build_leaves_no_process_and_is_not_retried(tmp_path, monkeypatch):
    """An exception while the compiler runs (here a timer's, as a time limit would raise) ends
    the driver and the child it started (as ``c++`` starts ``cc1plus``); the process remembers
    the failure and takes the torch path instead of building again."""
    cxx = _fake_compiler(tmp_path, f"sleep 300 &\necho $! > {tmp_path}/child.pid\nwait\n")
    monkeypatch.setenv("CXX", str(cxx))
    monkeypatch.setenv("LOSSPROOF_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(_compiled, "ENABLED", True)

    def interrupt(signum, frame):
        raise _Interrupt()
    previous = signal.signal(signal.SIGALRM, interrupt)
    _compiled.reset()
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        with pytest.raises(_Interrupt):
            _compiled.library()
        signal.setitimer(signal.ITIMER_REAL, 0)
        assert _compiled.library() is None
        assert _compiled.status()["reason"] == "the build was interrupted (_Interrupt)"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        _compiled.reset()
    driver, = (tmp_path / "builds.log").read_text().split()   # one build, not retried
    child = int((tmp_path / "child.pid").read_text())
    for pid in (int(driver), child):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not list((tmp_path / "cache").glob(".lossproof_kernels_*"))   # no partial output left


def test_a_build_that_fails_says_why(tmp_path, monkeypatch):
    cxx = _fake_compiler(tmp_path, "echo 'fatal error: no room' >&2\nexit 1\n")
    monkeypatch.setenv("CXX", str(cxx))
    monkeypatch.setenv("LOSSPROOF_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(_compiled, "ENABLED", True)
    _compiled.reset()
    try:
        assert _compiled.library() is None
        assert _compiled.status()["reason"] == f"{cxx} could not build _kernels.cpp: fatal error: no room"
    finally:
        _compiled.reset()
