"""Loading targets from files: siblings importable, a file named like the module it wraps gets a
clear message, and a library module loads without its package __init__ (decorators of absent
cluster frameworks included)."""
import sys
import textwrap

import pytest

from lossproof.conformance import cli
from lossproof.conformance.targets import TargetError, load
from lossproof.conformance.targets.imports import import_bare


def test_a_target_file_imports_its_siblings(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "my_losses", raising=False)   # removed again after the test
    (tmp_path / "my_losses.py").write_text("def estimator(logp, ref_logp, kind='k3', clamp=None):\n"
                                           "    raise NotImplementedError\n")
    (tmp_path / "target.py").write_text("import my_losses\n"
                                        "T = {'name': 'sib', 'framework': 'numpy',\n"
                                        "     'objectives': {'kl.estimator': my_losses.estimator}}\n")
    assert load(f"{tmp_path / 'target.py'}:T").objectives["kl.estimator"].__module__ == "my_losses"
    monkeypatch.delitem(sys.modules, "my_losses")


def test_a_target_file_without_a_name_is_its_target(tmp_path, capsys):
    """``--target file.py`` takes the file's TARGET; a file without one is told the names it has."""
    (tmp_path / "mine.py").write_text("T = {'name': 'x', 'framework': 'numpy', 'objectives': {'kl.estimator': print}}\n"
                                      "TARGET = {'name': 'mine', 'framework': 'numpy', 'objectives': {'kl.estimator': print}}\n")
    assert load(str(tmp_path / "mine.py")).name == "mine"
    (tmp_path / "other.py").write_text("A = {'name': 'a', 'framework': 'numpy', 'objectives': {}}\nB = 1\n")
    assert cli.main(["check", "--target", str(tmp_path / "other.py")]) == 2
    assert f"defines no TARGET: name its target, {tmp_path / 'other.py'}:A\n" in capsys.readouterr().err


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
            return clusterframework.get(1) + 1

        # what module-level code of real loss modules does with a framework it does not need
        if clusterframework.is_initialized():
            raise AssertionError("a placeholder is falsy")
        HANDLE = clusterframework.ObjectRef | None
        GENERIC = clusterframework.ObjectRef[int]
        CONTEXT = clusterframework.get_runtime_context().get_node_id()
        NODES = list(clusterframework.nodes())

        def annotated(x: clusterframework.ObjectRef | None = None) -> "clusterframework.ObjectRef":
            return x
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    losses = import_bare("heavylib.trainer.losses", packages=("heavylib", "heavylib.trainer"),
                         absent=("clusterframework",))
    try:
        assert losses.plain(2) == 4 and losses.configured(2) == 6
        with pytest.raises(RuntimeError, match=r"clusterframework.get\(...\) is not available"):
            losses.uses_it()
        assert losses.NODES == [] and losses.annotated(None) is None
        assert "clusterframework" not in sys.modules
    finally:
        for name in [m for m in sys.modules if m.startswith("heavylib")]:
            del sys.modules[name]


def test_a_missing_package_is_a_target_error():
    with pytest.raises(TargetError, match="not installed"):
        import_bare("no_such_library_xyz.losses", packages=("no_such_library_xyz",))


def test_a_stand_in_object_replaces_a_module_while_the_loss_module_imports(tmp_path, monkeypatch):
    import types
    (tmp_path / "rayuser").mkdir()
    (tmp_path / "rayuser" / "__init__.py").write_text("raise ImportError('the package __init__ must not run')\n")
    (tmp_path / "rayuser" / "losses.py").write_text(textwrap.dedent("""
        import ray

        @ray.remote
        def double(x):
            return 2 * x

        WORKERS = ray.available_resources()["GPU"]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    ray = types.SimpleNamespace(remote=lambda fn: fn, available_resources=lambda: {"GPU": 0})
    before = sys.modules.get("ray")
    try:
        losses = import_bare("rayuser.losses", packages=("rayuser",), stand_ins={"ray": ray})
        assert losses.double(3) == 6 and losses.WORKERS == 0 and losses.ray is ray
        assert sys.modules.get("ray") is before    # the stand-in is gone again
    finally:
        for name in [m for m in sys.modules if m.startswith("rayuser")]:
            del sys.modules[name]


@pytest.mark.parametrize("how", [
    "from lossproof.conformance.targets.imports import import_bare\nm = import_bare('mylibxyz.losses', packages=('mylibxyz',))\n",
    "import importlib\nm = importlib.import_module('mylibxyz.losses')\n",
    "from lossproof.conformance.targets.imports import import_bare\n"
    "m = import_bare('other.losses', packages=['mylibxyz', 'other']) if False else __import__('json')\n"
    "m.kl = len\n",
    "import mylibxyz.losses as m\n",
])
def test_a_target_file_shadowing_its_library_however_it_imports_it(tmp_path, monkeypatch, capsys, how):
    lib = tmp_path / "site"
    (lib / "mylibxyz").mkdir(parents=True)
    (lib / "mylibxyz" / "__init__.py").write_text("")
    (lib / "mylibxyz" / "losses.py").write_text("def kl(logp, ref_logp, kind='k3', clamp=None):\n    return logp\n")
    monkeypatch.syspath_prepend(str(lib))
    work = tmp_path / "work"
    work.mkdir()
    (work / "mylibxyz.py").write_text(how + "T = {'name': 'x', 'framework': 'numpy', "
                                            "'objectives': {'kl.estimator': m.kl}}\n")
    assert cli.main(["check", "--target", f"{work / 'mylibxyz.py'}:T"]) == 2
    err = capsys.readouterr().err
    assert "named like the module 'mylibxyz' it imports" in err and "mylibxyz_target.py" in err
    assert len(err.splitlines()) == 1


def test_a_string_that_imports_nothing_is_not_an_import(tmp_path):
    (tmp_path / "numpy.py").write_text("T = {'name': 'numpy', 'framework': 'numpy', "
                                       "'objectives': {'kl.estimator': len}}\n")
    assert load(f"{tmp_path / 'numpy.py'}:T").name == "numpy"


def test_a_package_shadowed_by_a_module_is_named(tmp_path, monkeypatch):
    (tmp_path / "shadowedxyz.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TargetError, match="a module and not the package shadowedxyz: a file named like the library"):
        import_bare("shadowedxyz.losses", packages=("shadowedxyz",))


@pytest.mark.parametrize("source, hint", [
    ("from lossproof.conformance.targets._peers import import_bare\n",
     "lossproof.conformance.targets._peers no longer exists: use lossproof.conformance.targets.imports (import_bare)"),
    ("import lossproof.conformance.targets.trl\n", "use lossproof.conformance.targets.peers.trl"),
    # the first releases' top-level packages (each line names an old name on purpose)
    ("from conformance.targets.imports import import_bare\n",   # old name on purpose
     "conformance no longer exists: use lossproof (from lossproof import import_bare"),
    ("from refimpl.torch import kl\n", "refimpl no longer exists: use lossproof.refimpl"),   # old name on purpose
    ("import PIL_absent_xyz.Image\n",
     "needs the package PIL_absent_xyz, which is not installed: pip install PIL_absent_xyz"),
])
def test_a_missing_module_at_load_time_says_what_to_do(tmp_path, capsys, source, hint):
    (tmp_path / "old.py").write_text(source)
    assert cli.main(["check", "--target", f"{tmp_path / 'old.py'}:T"]) == 2
    err = capsys.readouterr().err
    assert hint in err and len(err.splitlines()) == 1


def test_a_missing_module_at_call_time_is_one_line(tmp_path, capsys, monkeypatch):
    from lossproof.conformance.targets import imports
    monkeypatch.setitem(imports.DISTRIBUTIONS, "PILxyz", "Pillowxyz")
    (tmp_path / "t.py").write_text("def kl(logp, ref_logp, kind='k3', clamp=None):\n"
                                   "    import PILxyz.Image\n"
                                   "T = {'name': 'pil', 'framework': 'numpy', 'objectives': {'kl.estimator': kl}}\n")
    assert cli.main(["check", "--target", f"{tmp_path / 't.py'}:T", "--objective", "kl.estimator"]) == 1
    out = capsys.readouterr().out
    line = "pil: needs the package Pillowxyz (module PILxyz), which is not installed: pip install Pillowxyz"
    assert out.count(line) == 1 and "ERROR " not in out
    assert "validation:  0 rejected" in out


def test_a_missing_module_is_not_a_known_failure(tmp_path, capsys):
    """A declared known failure explains the library's numbers, not an environment that lacks a
    module (verl's loss code imports Pillow through verl/utils/dataset): the cases stay errors."""
    (tmp_path / "t.py").write_text("def kl(logp, ref_logp, kind='k3', clamp=None):\n"
                                   "    import PIL_absent_xyz.Image\n"
                                   "T = {'name': 'pil', 'framework': 'numpy', 'objectives': {'kl.estimator': kl},\n"
                                   "     'known_rules': [('pil-everything (bug): every case', lambda case, dtype: True)]}\n")
    assert cli.main(["check", "--target", f"{tmp_path / 't.py'}:T", "--objective", "kl.estimator"]) == 1
    out = capsys.readouterr().out
    assert "needs the package PIL_absent_xyz" in out and " 0 known failures" in out
