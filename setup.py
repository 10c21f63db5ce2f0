"""Build steps that pyproject.toml cannot express.

One import package. The repository keeps its folders (``lossproof/`` holds only the public
face; ``conformance/`` and ``refimpl/`` the code); a wheel installs them as the single package
``lossproof``, with ``lossproof.conformance`` and ``lossproof.refimpl`` inside, so that
installing lossproof adds one name to site-packages. An editable install maps the same names
to the folders (setuptools' editable finder), and a checkout without any install finds them
through ``lossproof/__init__.py``.

The vector files. The source tree keeps them at the top-level ``vectors/`` (where ``lossproof
vectors generate`` writes them); a built wheel carries a copy at
``lossproof/conformance/vectors/files/`` so that an installation outside any checkout runs
``lossproof check``. An editable install reads the tree's ``vectors/`` directly
(``conformance/vectors/load.py`` ``default_dir``).
"""
import shutil
from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SOURCE = ROOT / "vectors"
FOLDERS = {"lossproof": "lossproof", "lossproof.conformance": "conformance", "lossproof.refimpl": "refimpl"}


def packages() -> list[str]:
    """Every package under the three folders, by its installed name (namespace folders such as
    refimpl/exact included, as pyproject's package discovery found them before)."""
    out = []
    for name, folder in FOLDERS.items():
        out += [name] + [f"{name}.{p}" for p in find_namespace_packages(str(ROOT / folder), exclude=["*__pycache__*"])
                         if name != "lossproof"]
    return sorted(out)


class BuildWithVectors(build_py):
    def run(self):
        super().run()
        if not (SOURCE / "MANIFEST.json").is_file():
            raise SystemExit(f"cannot build lossproof: {SOURCE}/MANIFEST.json is missing "
                             "(run 'lossproof vectors generate' in a source checkout)")
        target = Path(self.build_lib) / "lossproof" / "conformance" / "vectors" / "files"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(SOURCE, target, ignore=shutil.ignore_patterns(".*"))


setup(packages=packages(), package_dir=FOLDERS, cmdclass={"build_py": BuildWithVectors})
