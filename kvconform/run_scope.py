"""What a run covers: whether it is a conformance run at all, its matrix file, the narrowing that names its report
folder and decides whether the sweep's exclusions print."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import kvconform

#: The import name of the suites an installed kvconform ships (the checkout's ``suites/``, setup.py).
SUITES_PACKAGE = "kvconform.suites"
#: The matrix a run reads unless ``--matrix`` names another: this file at the rootdir, else the default one.
MATRIX_FILE = "model_matrix.yaml"


def default_matrix() -> Path:
    """The default matrix: the copy a wheel ships inside the package, or in a checkout the repository's own."""
    shipped = Path(kvconform.__file__).parent / MATRIX_FILE
    return shipped if shipped.is_file() else Path(kvconform.__file__).parents[1] / MATRIX_FILE


def matrix_path(config: pytest.Config) -> Path:
    """``--matrix``, else ``model_matrix.yaml`` at the rootdir, else the default matrix."""
    if config.getoption("matrix"):
        return Path(config.getoption("matrix"))
    at_root = Path(config.rootpath) / MATRIX_FILE
    return at_root if at_root.is_file() else default_matrix()


def is_conformance_run(config: pytest.Config) -> bool:
    """Whether this pytest run is kvconform's: its rootdir holds a matrix, ``--matrix``, ``--model`` or
    ``--list-models`` is given, or the arguments name the suites. Anywhere else (another project's tests in an
    environment where the plugin is installed) the plugin stays inert: no matrix read, no report written."""
    if (Path(config.rootpath) / MATRIX_FILE).is_file() or any(
            config.getoption(option) for option in ("matrix", "kvconform_models", "list_models")):
        return True
    spec = importlib.util.find_spec(SUITES_PACKAGE)
    shipped = Path(spec.origin).parent.resolve() if spec is not None and spec.origin else None
    for arg in config.args:
        name = arg.split("::")[0]
        if config.option.pyargs and (name == SUITES_PACKAGE or name.startswith(f"{SUITES_PACKAGE}.")):
            return True
        path = Path(config.invocation_params.dir, name).resolve()
        if shipped is not None and (path == shipped or shipped in path.parents):
            return True
    return False


def narrowing(config: pytest.Config) -> list[str]:
    """What makes this run other than the default matrix: ``matrix-X``, ``model-ID``, ``dtype-float32``, ``k-EXPR``…"""
    from kvconform.cli_models import model_id
    from kvconform.options import NARROWING

    parts = []
    matrix = config.getoption("matrix")
    if matrix and Path(matrix).resolve() != (Path(config.rootpath) / MATRIX_FILE).resolve():
        parts.append(f"matrix-{Path(matrix).stem}")
    parts += [f"model-{model_id(argument)}" for argument in config.getoption("kvconform_models")]
    for option, (field, _) in NARROWING.items():
        parts += [f"{option.removeprefix('--')}-{value}" for value in config.getoption(f"kvconform_{field}")]
    if config.getoption("shard"):
        parts.append("shard-" + str(config.getoption("shard")).replace("/", "of"))
    parts += [f"{flag}-{value}" for flag, value in (("k", config.option.keyword), ("m", config.option.markexpr)) if value]
    return parts


def selects_tests(config: pytest.Config) -> bool:
    """Whether the command line names test files or test ids rather than folders (``suites``, ``--pyargs
    kvconform.suites``)."""
    return any("::" in arg or Path(config.invocation_params.dir, arg).is_file()
               or (config.option.pyargs and arg.startswith(f"{SUITES_PACKAGE}.")) for arg in config.args)


def includes_sweep(config: pytest.Config) -> bool:
    """The run covers its whole matrix (the default or another ``--matrix``): nothing narrowed it."""
    return not selects_tests(config) and all(part.startswith("matrix-") for part in narrowing(config))
