"""What a run covers: the narrowing that names its report folder and decides whether the sweep's exclusions print."""

from __future__ import annotations

from pathlib import Path

import pytest


def narrowing(config: pytest.Config) -> list[str]:
    """What makes this run other than the default matrix: ``matrix-X``, ``model-ID``, ``dtype-float32``, ``k-EXPR``…"""
    from kvconform.cli_models import model_id
    from kvconform.options import NARROWING

    parts = []
    matrix = config.getoption("matrix")
    if matrix and Path(matrix).resolve() != (Path(config.rootpath) / "model_matrix.yaml").resolve():
        parts.append(f"matrix-{Path(matrix).stem}")
    parts += [f"model-{model_id(argument)}" for argument in config.getoption("kvconform_models")]
    for option, (field, _) in NARROWING.items():
        parts += [f"{option.removeprefix('--')}-{value}" for value in config.getoption(f"kvconform_{field}")]
    if config.getoption("shard"):
        parts.append("shard-" + str(config.getoption("shard")).replace("/", "of"))
    parts += [f"{flag}-{value}" for flag, value in (("k", config.option.keyword), ("m", config.option.markexpr)) if value]
    return parts


def selects_tests(config: pytest.Config) -> bool:
    """Whether the command line names test files or test ids rather than folders (``suites``)."""
    return any("::" in arg or Path(config.invocation_params.dir, arg).is_file() for arg in config.args)


def includes_sweep(config: pytest.Config) -> bool:
    """The run covers its whole matrix (the default or another ``--matrix``): nothing narrowed it."""
    return not selects_tests(config) and all(part.startswith("matrix-") for part in narrowing(config))
