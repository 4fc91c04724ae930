"""What pyproject.toml cannot say: the wheel ships ``suites/`` as the package ``kvconform.suites`` and the repository's
``model_matrix.yaml`` as ``kvconform/model_matrix.yaml`` (an installed kvconform's default matrix), while the
checkout keeps both at its top level."""

from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    """build_py, plus the default matrix copied into the built package (an editable install reads the checkout's)."""

    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            target = Path(self.build_lib, "kvconform")
            self.mkpath(str(target))
            self.copy_file("model_matrix.yaml", str(target / "model_matrix.yaml"))


setup(
    packages=[*find_packages(include=["kvconform", "kvconform.*"]), "kvconform.suites"],
    package_dir={"kvconform.suites": "suites"},
    cmdclass={"build_py": BuildPy},
)
