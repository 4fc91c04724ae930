"""Turn ``--model`` arguments into matrix specs that use the matrix's defaults."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from kvconform.build.checkpoint_files import CheckpointFileError, check_safetensors_files, read_config, weight_files
from kvconform.matrix import Matrix, MatrixError, ModelSpec, Settings


def model_id(argument: str) -> str:
    """The id a `--model` argument gets: its folder or file name, lower-case, safe in test ids."""
    name = Path(argument.rstrip("/")).name if not argument.endswith(".gguf") else Path(argument).stem
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-").lower() or "model"


def _is_hub_id(argument: str) -> bool:
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id  # type: ignore[attr-defined]  # exported, not listed in __all__

    try:
        validate_repo_id(argument)
    except HFValidationError:
        return False
    return True


def spec_from_argument(argument: str, defaults: Settings, *, revision: str | None = None,
                       trust_remote_code: bool = False, allow_pickle: bool = False) -> ModelSpec:
    """A local folder, a ``.gguf`` file, or else a hub id; a local path must hold a model (``MatrixError`` if not)."""
    path = Path(argument).expanduser()
    if argument.endswith(".gguf"):
        source = "gguf"
    elif path.exists() or argument.startswith((".", "/", "~")) or not _is_hub_id(argument):
        source = "checkpoint"
    else:
        source = "hub"
    if revision and source != "hub":
        raise MatrixError(f"--revision applies to hub ids only, not to {source} {argument!r}")
    if source != "hub":
        _check_local(argument, path, source)
    else:
        _check_hub(argument, revision)
    return ModelSpec(
        id=model_id(argument), source=source, location=str(path) if source != "hub" else argument,
        settings=defaults, revision=revision, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle,
        family=_family(argument, path, source, revision),
    )


def _hub_config(argument: str, revision: str | None) -> Path | None:
    """config.json of a hub id from the local hub cache only, or ``None`` when it is not there."""
    from transformers.utils.hub import cached_file

    try:
        found = cached_file(argument, "config.json", revision=revision, local_files_only=True)
    except Exception:  # noqa: BLE001 - hub errors are many; all mean "not cached"
        return None
    return Path(found) if found else None


def _check_hub(argument: str, revision: str | None) -> None:
    """Offline, a hub id named on the command line must be in the local hub cache: a run that could only skip it
    would check nothing."""
    from kvconform.build.models import hub_offline

    if hub_offline() and _hub_config(argument, revision) is None:
        how = f"hf download {argument}" + (f" --revision {revision}" if revision else "")
        raise MatrixError(f"--model {argument}: not a folder here and not in the local hub cache (HF_HUB_OFFLINE=1); "
                          f"pass ./{argument} for a local folder, or download it on a connected machine with `{how}`")


def _family(argument: str, path: Path, source: str, revision: str | None) -> str:
    """Vision-language or encoder-decoder checkpoints by their config.json (a hub id's only if already cached)."""
    from kvconform.families import CAUSAL_LM
    from kvconform.families.registry import family_of_config

    if source == "gguf":
        return CAUSAL_LM
    if source == "checkpoint":
        return family_of_config(read_config(path))
    found = _hub_config(argument, revision)  # not cached: loaded as a causal LM
    return family_of_config(read_config(found.parent)) if found else CAUSAL_LM


def _check_local(argument: str, path: Path, source: str) -> None:
    """A local ``--model`` must exist and hold a model: a .gguf file, or a folder with config.json and weights."""
    expected = "a checkpoint folder with config.json and weights, a .gguf file, or a hub id such as org/name"
    where = f"--model {argument}"
    if not path.exists():
        raise MatrixError(f"{where}: no such file or folder (expected {expected})")
    if source == "gguf":
        if not path.is_file():
            raise MatrixError(f"{where}: not a file (expected a .gguf file)")
        return
    if not path.is_dir():
        raise MatrixError(f"{where}: a file, not a checkpoint folder (expected {expected})")
    if not (path / "config.json").is_file():
        raise MatrixError(f"{where}: the folder has no config.json (expected {expected})")
    try:
        read_config(path)
        if not weight_files(path):
            raise MatrixError(f"{where}: {path} holds no weights (*.safetensors, or pickle *.bin with --allow-pickle)")
        check_safetensors_files(path)
    except CheckpointFileError as exc:
        raise MatrixError(f"{where}: {exc}") from None


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

