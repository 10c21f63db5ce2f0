"""Build step that pyproject.toml cannot express: ship the vector files inside the package.

The source tree keeps the vectors at the top-level ``vectors/`` (where ``lossproof vectors
generate`` writes them); a built wheel carries a copy at ``conformance/vectors/files/`` so that
an installation outside any checkout runs ``lossproof check``. An editable install reads the
tree's ``vectors/`` directly (``conformance.vectors.load.default_dir``).
"""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SOURCE = Path(__file__).resolve().parent / "vectors"


class BuildWithVectors(build_py):
    def run(self):
        super().run()
        if not (SOURCE / "MANIFEST.json").is_file():
            raise SystemExit(f"cannot build lossproof: {SOURCE}/MANIFEST.json is missing "
                             "(run 'lossproof vectors generate' in a source checkout)")
        target = Path(self.build_lib) / "conformance" / "vectors" / "files"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(SOURCE, target, ignore=shutil.ignore_patterns(".*"))


setup(cmdclass={"build_py": BuildWithVectors})
