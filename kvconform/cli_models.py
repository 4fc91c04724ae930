"""Turn ``--model`` arguments into matrix specs that use the matrix's defaults."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from kvconform.matrix import Matrix, MatrixError, ModelSpec, Settings


def _model_id(argument: str) -> str:
    name = Path(argument.rstrip("/")).name if not argument.endswith(".gguf") else Path(argument).stem
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-").lower() or "model"


def spec_from_argument(argument: str, defaults: Settings, *, revision: str | None = None,
                       trust_remote_code: bool = False, allow_pickle: bool = False) -> ModelSpec:
    """A local folder, a ``.gguf`` file, or else a hub id."""
    path = Path(argument).expanduser()
    if argument.endswith(".gguf"):
        source = "gguf"
    elif path.is_dir() or argument.startswith((".", "/", "~")):
        source = "checkpoint"
    else:
        source = "hub"
    if revision and source != "hub":
        raise MatrixError(f"--revision applies to hub ids only, not to {source} {argument!r}")
    return ModelSpec(
        id=_model_id(argument), source=source, location=str(path) if source != "hub" else argument,
        settings=defaults, revision=revision, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle,
    )


def specs_from_cli(config: pytest.Config, matrix: Matrix) -> tuple[ModelSpec, ...]:
    """One spec per ``--model``, with the matrix defaults."""
    defaults = matrix.defaults
    specs = tuple(
        spec_from_argument(
            argument, defaults, revision=config.getoption("revision"),
            trust_remote_code=config.getoption("trust_remote_code"), allow_pickle=config.getoption("allow_pickle"),
        )
        for argument in config.getoption("kvconform_models")
    )
    ids = [spec.id for spec in specs]
    return tuple(replace(spec, id=f"{spec.id}-{n}") if ids.count(spec.id) > 1 else spec for n, spec in enumerate(specs))

