import os
import sys
from pathlib import Path

from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent / "exact"))
sys.path.insert(0, str(Path(__file__).parent / "harness"))

# HYPOTHESIS_PROFILE=ci (the default, and what .ci/run sets): derandomized, no example database,
# so every run tries the same examples. HYPOTHESIS_PROFILE=dev: random examples, and failures
# are kept in .hypothesis/ and replayed first on the next run.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_terminal_summary(terminalreporter):
    import records   # tests/ is on sys.path when pytest loads this conftest
    lines = records.summary_lines()
    if lines:
        terminalreporter.section("lossproof records")
        for line in lines:
            terminalreporter.write_line(line)
