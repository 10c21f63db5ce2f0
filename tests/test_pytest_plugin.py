"""The pytest plugin runs the vectors inside a user's own suite, one test id per uid."""
import pytest

pytest.importorskip("torch", reason="the plugin is exercised with torch targets")

from lossproof.conformance import testing  # noqa: E402
from lossproof.conformance.targets import from_mapping  # noqa: E402
from lossproof.refimpl.torch import kl  # noqa: E402

pytest_plugins = ["pytester"]

TARGETS = '''
from lossproof.refimpl.torch import kl

def swapped(logp, ref_logp, kind="k3", clamp=None):
    return kl.estimator(ref_logp, logp, kind, clamp)   # k3 arguments swapped: KL(π_ref‖π)

GOOD = {"name": "good", "framework": "torch", "objectives": {"kl.estimator": kl.estimator}}
BAD = {"name": "bad", "framework": "torch", "objectives": {"kl.estimator": swapped}}
'''


@pytest.fixture
def user_suite(pytester):
    pytester.makepyfile(user_targets=TARGETS)
    return pytester


def test_correct_target_passes_every_vector(user_suite):
    result = user_suite.runpytest_subprocess("--lossproof-target=user_targets.py:GOOD",
                                            "--lossproof-objective=kl.*", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) > 10 and "failed" not in outcomes


def test_buggy_target_fails_with_uid_ids_and_repro(user_suite):
    result = user_suite.runpytest_subprocess("--lossproof-target=user_targets.py:BAD",
                                            "--lossproof-objective=kl.*", "-p", "no:cacheprovider")
    assert result.parseoutcomes().get("failed", 0) > 5
    result.stdout.fnmatch_lines(["*kl.estimator:*", "*repro: lossproof check --target user_targets.py:BAD --uid*"])


def test_unloadable_target_is_a_usage_error(user_suite):
    result = user_suite.runpytest_subprocess("--lossproof-target=nope.py:X", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*lossproof: --target 'nope.py:X': file nope.py not found*"])


def test_testing_api_yields_one_case_per_vector(bundled_vectors):
    spec = {"name": "api", "framework": "torch", "objectives": {"kl.estimator": kl.estimator}}
    tcs = testing.cases(from_mapping(spec, "api"), objective="kl.*")
    assert len(tcs) == sum(1 for _ in bundled_vectors.cases("kl.*"))
    statuses = {r.status for tc in tcs[:20] for r in testing.check(tc)}
    assert statuses <= {"pass", "skip"}
