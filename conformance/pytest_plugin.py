"""pytest plugin: ``pytest --lossproof-target=SPEC`` adds one test per vector (and dtype
group) to your own suite, named by the vector's uid.

Options: --lossproof-target SPEC (repeatable), --lossproof-objective GLOB,
--lossproof-vectors DIR, --lossproof-dtype DTYPE (repeatable), --lossproof-known FILE,
--lossproof-strict.
"""
from __future__ import annotations

import pytest

from lossproof.conformance.errors import LossproofError

# pytest loads this plugin in every session of every project where lossproof is installed, so
# the harness (numpy, the vectors) is imported only once a lossproof option asks for it.


def pytest_addoption(parser):
    group = parser.getgroup("lossproof", "lossproof conformance vectors")
    group.addoption("--lossproof-target", action="append", default=[], metavar="SPEC",
                    help="run the lossproof vectors against this target (package.module:NAME or file.py:NAME)")
    group.addoption("--lossproof-objective", default="*", metavar="GLOB", help="objective glob, e.g. 'grpo.*'")
    group.addoption("--lossproof-vectors", default=None, metavar="DIR", help="vector directory")
    group.addoption("--lossproof-dtype", action="append", default=[], metavar="DTYPE", help="dtypes to run")
    group.addoption("--lossproof-known", default=None, metavar="FILE",
                    help="known failures: JSON {uid or glob[@dtype]: reason and link}")
    group.addoption("--lossproof-strict", action="store_true", help="fail on invalid input that is not rejected "
                    "and on known failures that now pass")


class LossproofFailure(Exception):
    pass


class LossproofItem(pytest.Item):
    def __init__(self, *, target_case, **kwargs):
        super().__init__(**kwargs)
        self.target_case = target_case

    def runtest(self):
        from lossproof.conformance import testing
        strict, known = self.config.getoption("lossproof_strict"), self.config.getoption("lossproof_known")
        options = ((f"--known {known}",) if known else ()) + (("--strict",) if strict else ())
        results = testing.check(self.target_case, options=options)
        bad = testing.failed(results, strict=strict)
        if bad:
            raise LossproofFailure("\n".join(f"{r.status} [{r.dtype}] {r.message}\nrepro: {r.repro}" for r in bad))
        if all(r.status in ("skip", "unsupported") for r in results):
            pytest.skip(results[0].message)
        if all(r.status == "xfail" for r in results):
            pytest.xfail(results[0].known)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, LossproofFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"lossproof {self.name}"


class LossproofCollector(pytest.Collector):
    def __init__(self, *, target_spec, **kwargs):
        super().__init__(**kwargs)
        self.target_spec = target_spec

    def collect(self):
        from lossproof.conformance import testing
        config = self.config
        for tc in testing.cases(self.target_spec, config.getoption("lossproof_vectors"),
                                config.getoption("lossproof_objective"),
                                config.getoption("lossproof_dtype") or None, config.getoption("lossproof_known")):
            yield LossproofItem.from_parent(self, name=tc.uid, target_case=tc)


def pytest_collection_modifyitems(session, config, items):
    for spec in config.getoption("lossproof_target"):
        collector = LossproofCollector.from_parent(session, name=f"lossproof[{spec}]", target_spec=spec)
        try:
            items.extend(collector.collect())
        except LossproofError as err:
            raise pytest.UsageError(f"lossproof: {err}") from None
