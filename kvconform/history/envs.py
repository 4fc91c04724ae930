"""One environment per transformers release: a ``pip install --target`` folder put first on ``PYTHONPATH``.

The folder holds that release and those of its own requirements the running interpreter's environment does not
satisfy (5.0.0 wants ``huggingface-hub<2`` and ``typer-slim``, 5.24 neither); never torch: every release runs on
the interpreter's one torch, so verdicts differ by transformers only. A folder is created once (built beside its
final name, then renamed, so an interrupted install leaves nothing half made) and reused by every later run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from email.parser import Parser
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from kvconform.cache_root import cache_dir

#: The file that marks a finished environment (written last, before the rename).
MARKER = "kvconform-release.json"
#: Never installed into a release folder: the interpreter's own build is the one every release runs on.
SHARED = ("torch",)
#: Declared requirements a release can run without once their feature is switched off, with the switch. 5.25 declares
#: ``kernels>=0.19.1`` for Hub kernels (downloaded at load time; this index has 0.17.2 and the Hub is not reachable),
#: and its ``from_pretrained`` defaults to ``use_kernels=True`` unless ``USE_HUB_KERNELS`` disables them
#: (modeling_utils.py:4415-4423, integrations/hub_kernels.py:65-66 in 5.25.0). Where the index has no version that
#: satisfies one, the release is installed without it, its marker says so, and its runs set the switch.
OPTIONAL_AT_RUNTIME: dict[str, dict[str, str]] = {"kernels": {"USE_HUB_KERNELS": "0"}}


class EnvironmentError_(RuntimeError):
    """A release environment could not be created (the pip command and its last words are in the message)."""


@dataclass(frozen=True)
class ReleaseEnv:
    """A release's folder and what it added to the interpreter's environment."""

    release: str
    path: Path
    added: tuple[str, ...]
    """Requirements installed beside transformers (those the interpreter's environment did not satisfy)."""
    seconds: float
    """How long its creation took (0 when it was already there)."""
    without: tuple[str, ...] = ()
    """Declared requirements left out: not on the index, their feature switched off (:data:`OPTIONAL_AT_RUNTIME`)."""

    def switches(self) -> dict[str, str]:
        """Environment variables that switch off the features of the requirements it was made without."""
        out: dict[str, str] = {}
        for requirement in self.without:
            out.update(OPTIONAL_AT_RUNTIME.get(Requirement(requirement).name.lower(), {}))
        return out

    def pythonpath(self, *rest: str | os.PathLike[str]) -> str:
        """``PYTHONPATH`` that imports this release first, then ``rest``."""
        return os.pathsep.join([str(self.path), *(str(p) for p in rest)])

    def shell_prefix(self, *rest: str | os.PathLike[str]) -> str:
        """The variables a shell command sets to run under this release: its switches and :meth:`pythonpath`."""
        return " ".join([*(f"{key}={value}" for key, value in self.switches().items()), f"PYTHONPATH={self.pythonpath(*rest)}"])


def releases_dir() -> Path:
    return cache_dir() / "releases" / f"py{sys.version_info.major}.{sys.version_info.minor}"


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def unmet_requirements(metadata_text: str) -> list[str]:
    """The release's unconditional requirements (no extras) that the running environment does not satisfy,
    torch excluded."""
    unmet = []
    for line in Parser().parsestr(metadata_text).get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        if requirement.name.lower() in SHARED:
            continue
        installed = _installed(requirement.name)
        if installed is None or not requirement.specifier.contains(installed, prereleases=True):
            unmet.append(str(requirement))
    return unmet


def optional_pins(metadata_text: str, installed: Callable[[str], str | None] = _installed) -> list[str]:
    """The release's own versions of the run-time optional packages (:data:`OPTIONAL_AT_RUNTIME`) that the running
    environment has at a version the release's extras do not accept. A release imports such a package whenever it is
    there: 5.0.0 builds its Hub-kernel mapping from the kernels 0.10 API (``LayerRepository`` without a version,
    integrations/hub_kernels.py:86-99), which kernels 0.19.1 (5.25's requirement) refuses, so every model build raises
    (ValueError: Either a revision or a version must be specified). Its folder then gets the version it declares."""
    pins: dict[str, str] = {}
    for line in Parser().parsestr(metadata_text).get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        name = requirement.name.lower()
        if name not in OPTIONAL_AT_RUNTIME or name in pins or requirement.marker is None:
            continue
        version = installed(requirement.name)
        if version is not None and not requirement.specifier.contains(version, prereleases=True):
            pins[name] = f"{requirement.name}{requirement.specifier}"
    return list(pins.values())


def _pin_optionals(env: ReleaseEnv) -> None:
    """Install into ``env``'s folder (without their dependencies) the optional packages it needs at its own version
    (:func:`optional_pins`) and does not hold yet: the running environment may have changed since it was made."""
    info = env.path / f"transformers-{env.release}.dist-info" / "METADATA"
    for pin in optional_pins(info.read_text(encoding="utf-8"), _installed):
        name = Requirement(pin).name
        held = [p for p in env.path.glob("*.dist-info") if p.name.lower().startswith(name.lower().replace("-", "_") + "-")]
        if not held:
            _pip(["--no-deps", "--target", str(env.path), pin], f"transformers {env.release}'s own {name}")


def _pip(args: list[str], what: str) -> None:
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode:
        tail = (done.stderr or done.stdout).strip().splitlines()[-6:]
        raise EnvironmentError_(f"{what}: `{' '.join(command)}` exited {done.returncode}:\n" + "\n".join(tail))


def _load(path: Path, release: str) -> ReleaseEnv | None:
    try:
        marker = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if marker.get("transformers") != release:
        return None
    return ReleaseEnv(release, path, tuple(marker.get("added", [])), 0.0, tuple(marker.get("without", [])))


def ensure_release(release: str, root: Path | None = None) -> ReleaseEnv:
    """The environment of transformers ``release``, created under ``root`` (default :func:`releases_dir`) if absent."""
    import time

    root = root or releases_dir()
    final = root / release
    found = _load(final, release)
    if found:
        _pin_optionals(found)
        return found
    start = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    staging = root / f".{release}.tmp{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        _pip(["--no-deps", "--target", str(staging), f"transformers=={release}"], f"transformers {release}")
        info = staging / f"transformers-{release}.dist-info" / "METADATA"
        added, without = _install_requirements(staging, release, unmet_requirements(info.read_text(encoding="utf-8")))
        leaked = [name for name in SHARED if (staging / name).exists()]
        if leaked:
            raise EnvironmentError_(f"transformers {release}: installing {', '.join(added)} pulled {', '.join(leaked)} into "
                                    f"{staging}; every release must run on the interpreter's own build")
        seconds = time.monotonic() - start
        marker = {"transformers": release, "added": added, "without": without, "python": sys.version.split()[0], "seconds": round(seconds, 1)}
        (staging / MARKER).write_text(json.dumps(marker, indent=1) + "\n")
        try:
            staging.rename(final)
        except OSError:  # another process finished the same release first
            existing = _load(final, release)
            if existing is None:
                raise
            return existing
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    made = ReleaseEnv(release, final, tuple(added), seconds, tuple(without))
    _pin_optionals(made)
    return made


def _install_requirements(staging: Path, release: str, unmet: list[str]) -> tuple[list[str], list[str]]:
    """Install ``unmet`` into ``staging``; when that fails, once more without the run-time optional ones. Returns what
    was installed and what was left out."""
    if not unmet:
        return [], []
    try:
        _pip(["--target", str(staging), *unmet], f"transformers {release}'s requirements")
        return unmet, []
    except EnvironmentError_:
        required = [r for r in unmet if Requirement(r).name.lower() not in OPTIONAL_AT_RUNTIME]
        if len(required) == len(unmet):
            raise
    if required:
        _pip(["--target", str(staging), *required], f"transformers {release}'s requirements")
    return required, [r for r in unmet if r not in required]
