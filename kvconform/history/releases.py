"""Which transformers releases a history covers: ``--releases`` parsed against the releases the index has."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterable, Sequence

from packaging.version import InvalidVersion, Version

#: The major series the history covers.
SERIES = 5
_MINOR = re.compile(r"^\d+\.\d+$")


class ReleaseError(ValueError):
    """A ``--releases`` entry names no release of the index."""


def available_releases(python: str = sys.executable) -> list[str]:
    """Every final transformers 5.x release on the package index, oldest first (``pip index versions``)."""
    out = subprocess.run([python, "-m", "pip", "index", "versions", "transformers"], capture_output=True, text=True,
                         timeout=120, check=False)
    line = next((line for line in out.stdout.splitlines() if line.startswith("Available versions:")), None)
    if line is None:
        raise ReleaseError(f"`pip index versions transformers` listed no releases (exit {out.returncode}): "
                           f"{(out.stderr or out.stdout).strip()[-300:]}")
    return sorted_releases(v.strip() for v in line.partition(":")[2].split(","))


def sorted_releases(versions: Iterable[str]) -> list[str]:
    """Final releases of the series, oldest first (pre-releases and other majors dropped)."""
    parsed = []
    for text in versions:
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if version.major == SERIES and not version.is_prerelease and not version.is_devrelease:
            parsed.append(version)
    return [str(v) for v in sorted(set(parsed))]


def last_patches(available: Sequence[str]) -> list[str]:
    """The last patch release of each minor, oldest first."""
    latest: dict[tuple[int, int], Version] = {}
    for text in available:
        version = Version(text)
        key = (version.major, version.minor)
        latest[key] = max(latest.get(key, version), version)
    return [str(latest[key]) for key in sorted(latest)]


def _endpoint(text: str, entry: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise ReleaseError(f"--releases {entry!r}: {text!r} is not a version (ranges are like 5.8..5.24 or "
                           "5.8.0..5.10.4)") from None


def _range(entry: str, available: Sequence[str]) -> list[str]:
    low_text, _, high_text = entry.partition("..")
    low, high = _endpoint(low_text, entry), _endpoint(high_text, entry)
    if low > high:
        raise ReleaseError(f"--releases {entry!r}: the range runs backwards ({low} > {high})")
    minors = bool(_MINOR.match(low_text)) and bool(_MINOR.match(high_text))
    pool = last_patches(available) if minors else list(available)

    def minor(v: Version) -> tuple[int, int]:
        return v.major, v.minor

    chosen = [v for v in pool
              if (minor(low) <= minor(Version(v)) <= minor(high) if minors else low <= Version(v) <= high)]
    if not chosen:
        raise ReleaseError(f"--releases {entry!r}: no release of the index lies in it (index: {available[0]} … {available[-1]})")
    return chosen


def parse_releases(entries: Sequence[str], available: Sequence[str]) -> list[str]:
    """The releases ``entries`` name, oldest first, without repeats.

    An entry is a release (``5.6.2``), ``all`` (every 5.x release), ``all-minor`` (the last patch of each
    minor), a range of minors ``5.8..5.24`` (the last patch of each, both ends included) or a range of
    releases ``5.8.0..5.10.4`` (every release between, both ends included).
    """
    if not available:
        raise ReleaseError("the package index lists no transformers 5.x release")
    chosen: set[str] = set()
    for entry in entries:
        if entry == "all":
            chosen.update(available)
        elif entry == "all-minor":
            chosen.update(last_patches(available))
        elif ".." in entry:
            chosen.update(_range(entry, available))
        elif entry in available:
            chosen.add(entry)
        else:
            minor = [v for v in available if v.startswith(entry + ".")]
            hint = (f"; the {entry} minor has {', '.join(minor)}" if minor
                    else f" (the index has {available[0]} … {available[-1]}; or all, all-minor, 5.8..5.24)")
            raise ReleaseError(f"--releases: {entry!r} is not a transformers {SERIES}.x release{hint}")
    return sorted(chosen, key=Version)


def shard(releases: Sequence[str], spec: str) -> list[str]:
    """Shard ``I/N`` of ``releases``: every N-th release from the I-th, so each shard spans old and new ones."""
    index, slash, count = spec.partition("/")
    if not (slash and index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise ReleaseError(f"--shard expects I/N with 1 <= I <= N, such as 2/4, got {spec!r}")
    return list(releases[int(index) - 1::int(count)])
