"""Where reports go: check a report folder before the run, keep the results when writing fails after it."""

from __future__ import annotations

import os
import re
import tempfile
from datetime import datetime
from pathlib import Path

#: Longest folder name a narrowed run gets under reports/ (the rest of what it ran is in its report).
MAX_NAME = 80


def report_dir_problem(path: Path) -> str | None:
    """Why reports cannot be written into ``path``, or ``None``.

    Found by doing it: the missing folders are created and a file is written, then both are removed,
    so the check leaves nothing behind (permission bits alone say nothing for root or under /proc).
    """
    if path.exists() and not path.is_dir():
        return "it is a file, not a folder"
    missing: list[Path] = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    created: list[Path] = []
    try:
        for folder in reversed(missing):
            folder.mkdir()
            created.append(folder)
        handle, name = tempfile.mkstemp(dir=path, prefix=".kvconform-write-check-")
        os.close(handle)
        os.unlink(name)
    except OSError as exc:
        return describe_error(exc)
    finally:
        for folder in reversed(created):
            try:
                folder.rmdir()
            except OSError:
                pass
    return None


def run_folder(parts: list[str], selected_tests: bool, now: datetime) -> str | None:
    """The folder under ``reports/`` of a run that is not the default matrix, named from what it ran (``parts``
    such as ``model-tiny-llama``, ``k-llama``, ``cache-static``), timestamped when it ran chosen test ids;
    ``None`` for the default matrix, whose reports stay in ``reports/`` itself."""
    if not parts and not selected_tests:
        return None
    named = "_".join(re.sub(r"[^A-Za-z0-9.+=-]+", "-", part).strip("-") for part in parts)[:MAX_NAME].strip("-_")
    stamp = now.strftime("%Y%m%d-%H%M%S") if selected_tests or not named else ""
    return "_".join(filter(None, [named, stamp]))


def write_fallback(text: str) -> Path:
    """Save a report's JSON text in the temporary folder (else the working folder) and return its path."""
    try:
        return _write_new_file(Path(tempfile.gettempdir()), text)
    except OSError:
        return _write_new_file(Path.cwd(), text)


def _write_new_file(folder: Path, text: str) -> Path:
    handle, name = tempfile.mkstemp(dir=folder, prefix="kvconform-results-", suffix=".json")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(text)
    return Path(name)


def describe_error(exc: OSError) -> str:
    """An OSError as ``Type: reason: path`` on one line."""
    where = f": {exc.filename}" if exc.filename else ""
    return f"{type(exc).__name__}: {exc.strerror or exc}{where}"
