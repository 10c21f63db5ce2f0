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


# Under ``-n``, xdist's default "load" mode sends a module's tests to every worker, and each worker
# computes the module's fixtures again: the kill table (every mutant checked), the transcribed
# defects' checks, the docs rebuilt, the theorem's table, the GPU script's run. The modules that
# hold such a fixture are marked ``xdist_group``; "loadgroup" is "load" with each group kept on one
# worker, so that each fixture is computed once. The workers parse the command line again, so the
# switch travels to them in their workerinput (their collection names a test by its group then).
_GROUPS = "lossproof_loadgroup"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"
    elif getattr(config, "workerinput", {}).get(_GROUPS):
        config.option.loadgroup = True


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput[_GROUPS] = node.config.option.dist == "loadgroup"


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
