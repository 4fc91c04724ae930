"""The environment header of a report: versions, devices, git commit, matrix hash (no secrets)."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _git_commit(root: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def device_names() -> list[str]:
    """``cpu`` plus every visible accelerator by name."""
    import torch

    names = ["cpu"]
    if torch.cuda.is_available():
        names += [f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        names.append("mps")
    return names


def cpu_description() -> str:
    """The CPU and the kernels torch runs on it: bfloat16/float16 rounding, and so near-ties, depend on both."""
    import torch

    model = platform.processor() or platform.machine()
    try:
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]
        model = names[0] if names else model
    except OSError:
        pass
    forced = os.environ.get("ATEN_CPU_CAPABILITY")
    capability = torch.backends.cpu.get_cpu_capability()
    return f"{model}; torch CPU capability {capability}" + (f" (ATEN_CPU_CAPABILITY={forced})" if forced else "")


def relative_path(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` in POSIX form (``../`` steps when it lies outside), so reports name no machine."""
    try:
        return Path(os.path.relpath(path.resolve(), root.resolve())).as_posix()
    except ValueError:  # another drive on Windows
        return path.as_posix()


def describe_machine() -> dict[str, Any]:
    """The CPU (with torch's kernels for it) and the devices: the facts of the environment that import torch."""
    return {"cpu": cpu_description(), "devices": device_names()}


def describe_environment(root: Path, matrix_path: Path | None, machine: dict[str, Any] | None = None) -> dict[str, Any]:
    """Versions and provenance; only allow-listed facts, never environment variables or tokens.

    ``machine`` is ``describe_machine()`` as a worker process found it (an xdist controller imports no torch).
    """
    import kvconform

    machine = machine or describe_machine()

    matrix_hash = None
    if matrix_path is not None and matrix_path.is_file():
        matrix_hash = hashlib.sha256(matrix_path.read_bytes()).hexdigest()
    return {
        "kvconform": kvconform.__version__,
        "python": platform.python_version(),
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "accelerate": _version("accelerate"),
        "platform": platform.platform(terse=True),
        "cpu": machine["cpu"],
        "devices": machine["devices"],
        "git_commit": _git_commit(root),
        "matrix_path": relative_path(matrix_path, root) if matrix_path is not None else None,
        "matrix_sha256": matrix_hash,
        "date": datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
    }
