import importlib.util
import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent / "exact"))
sys.path.insert(0, str(Path(__file__).parent / "harness"))


class _OldNames:
    """lossproof installs one package, ``lossproof``; from a checkout's root its folders
    conformance/ and refimpl/ would also import as top-level packages, a second copy of every
    module (other classes, other caches). Importing them by those names is a mistake: say so."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name in ("conformance", "refimpl"):
            raise ModuleNotFoundError(f"import lossproof.{name}, not {name} (lossproof's modules are "
                                      "lossproof.*; an old editable install? pip install -e .)", name=name)
        return None


sys.meta_path.insert(0, _OldNames)

# HYPOTHESIS_PROFILE=ci (the default, and what .ci/run sets): derandomized, no example database,
# so every run tries the same examples. HYPOTHESIS_PROFILE=dev: random examples, and failures
# are kept in .hypothesis/ and replayed first on the next run.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# Under ``-n``, xdist's default "load" mode sends a module's tests to either worker, and each worker
# computes the module's fixtures again (pytest also tears a module fixture down whenever a worker
# moves on to another module's test, so interleaving recomputes it even on one worker). These
# modules hold a costly module fixture (the kill table: every mutant checked; the transcribed
# defects' checks; the docs rebuilt; the theorem's table; the GPU script's run): each is sent to
# one worker whole, so that its fixture is computed once; every other test is scheduled as
# "load" does. (xdist's own "loadgroup" marks a test by rewriting its node id, which pytest 9.2
# no longer reads: the grouping is done here, by module path, in the scheduler.)
ONE_WORKER_MODULES = ("tests/mutants/test_kill_table.py", "tests/transcribed/test_transcribed.py",
                      "tests/test_docs.py", "tests/test_theorem.py", "tests/test_gpu_parity_script.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    missing = [m for m in ONE_WORKER_MODULES if not (config.rootpath / m).is_file()]
    assert not missing, f"tests/conftest.py ONE_WORKER_MODULES names no file: {missing}"

    class ModulesWhole(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER_MODULES else nodeid

    return ModulesWhole(config, log)


@pytest.fixture(scope="session")
def bundled_vectors():
    """The bundled vector set, lazily: a file is read, sha256-checked against the manifest and
    parsed when a test first needs it, once per session. Schema validation of every file is
    ``lossproof vectors lint`` (.ci/run), not a side effect of a fixture."""
    from lossproof.conformance.vectors.load import VectorSet
    return VectorSet(validate=False)


def pytest_terminal_summary(terminalreporter):
    import records   # tests/ is on sys.path when pytest loads this conftest
    lines = records.summary_lines()
    if lines:
        terminalreporter.section("lossproof records")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_collection_modifyitems(config, items):
    """Cases parametrized with backend="torch" skip, with the reason, where torch is absent
    (the NumPy and exact cases of the same tests still run)."""
    if importlib.util.find_spec("torch") is not None:
        return
    skip = pytest.mark.skip(reason="torch is not installed (the README installs the CPU build, torch==2.13.0)")
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("backend") == "torch":
            item.add_marker(skip)
