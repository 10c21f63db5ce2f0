"""Loading targets from files: siblings importable, a file named like the module it wraps gets a
clear message, and a library module loads without its package __init__ (decorators of absent
cluster frameworks included)."""
import sys
import textwrap

import pytest

from conformance import cli
from conformance.targets import TargetError, load
from conformance.targets.imports import import_bare


def test_a_target_file_imports_its_siblings(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "my_losses", raising=False)   # removed again after the test
    (tmp_path / "my_losses.py").write_text("def estimator(logp, ref_logp, kind='k3', clamp=None):\n"
                                           "    raise NotImplementedError\n")
    (tmp_path / "target.py").write_text("import my_losses\n"
                                        "T = {'name': 'sib', 'framework': 'numpy',\n"
                                        "     'objectives': {'kl.estimator': my_losses.estimator}}\n")
    assert load(f"{tmp_path / 'target.py'}:T").objectives["kl.estimator"].__module__ == "my_losses"
    monkeypatch.delitem(sys.modules, "my_losses")


def test_a_target_file_named_like_the_library_it_imports(tmp_path, capsys):
    path = tmp_path / "json.py"
    path.write_text("import json\nT = {'name': 'x', 'framework': 'numpy', 'objectives': {'kl.estimator': json.dumps}}\n")
    assert cli.main(["check", "--target", f"{path}:T"]) == 2
    err = capsys.readouterr().err
    assert "named like the module 'json' it imports" in err and "json_target.py" in err


def test_import_bare_skips_the_package_init_and_stubs_absent_frameworks(tmp_path, monkeypatch):
    pkg = tmp_path / "heavylib"
    (pkg / "trainer").mkdir(parents=True)
    (pkg / "__init__.py").write_text("import clusterframework  # not installed here\n")
    (pkg / "trainer" / "__init__.py").write_text("raise ImportError('needs a GPU runtime')\n")
    (pkg / "trainer" / "losses.py").write_text(textwrap.dedent("""
        import clusterframework

        @clusterframework.remote
        def plain(x):
            return 2 * x

        @clusterframework.remote(num_gpus=1)
        def configured(x):
            return 3 * x

        def uses_it():
            return clusterframework.get(1)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    losses = import_bare("heavylib.trainer.losses", packages=("heavylib", "heavylib.trainer"),
                         absent=("clusterframework",))
    try:
        assert losses.plain(2) == 4 and losses.configured(2) == 6
        with pytest.raises(RuntimeError, match="clusterframework.get is not available"):
            losses.uses_it()
        assert "clusterframework" not in sys.modules
    finally:
        for name in [m for m in sys.modules if m.startswith("heavylib")]:
            del sys.modules[name]


def test_a_missing_package_is_a_target_error():
    with pytest.raises(TargetError, match="not installed"):
        import_bare("no_such_library_xyz.losses", packages=("no_such_library_xyz",))
