"""Run a history (each release in its environment) and write its documents; read them back for merge."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvconform.history.envs import EnvironmentError_, ensure_release
from kvconform.history.grid import build_history, load_reports
from kvconform.history.render import render_history_html, render_history_markdown
from kvconform.history.run import run_release
from kvconform.report import Doc, finite_or_null, write_text_atomic

HISTORY_FILES = ("history.json", "history.md", "history.html")


def release_dir(out: Path, release: str) -> Path:
    return out / "releases" / release


def run_history(releases: Sequence[str], root: Path, out: Path, pytest_args: Sequence[str], timeout_s: float,
                say: Callable[[str], None] = print) -> Doc:
    """Run ``pytest suites`` with ``pytest_args`` under every release (creating environments as needed), writing the
    history of ``out`` after each, and return it. A release whose environment cannot be made is a harness error of
    its run."""
    runs: list[dict[str, Any]] = []
    for release in releases:
        try:
            env = ensure_release(release)
        except EnvironmentError_ as exc:
            runs.append({"release": release, "status": "harness error", "exit_code": None, "seconds": 0.0,
                         "env_seconds": 0.0, "added": [], "report": None, "error": str(exc)})
            say(f"{release}: harness error: {exc}")
            continue
        if env.seconds:
            say(f"{release}: environment created in {env.seconds:.0f} s ({', '.join(env.added) or 'transformers only'})")
        record = run_release(env, root, release_dir(out, release), pytest_args, timeout_s)
        record["report"] = os.path.relpath(record["report"], out)
        runs.append(record)
        say(f"{release}: {record['status']} in {record['seconds']:.0f} s" + (f": {record['error']}" if record["error"] else ""))
        write_history(runs, load_reports(runs, out), list(pytest_args), out)  # an interrupted history keeps what ran
    return write_history(runs, load_reports(runs, out), list(pytest_args), out)


def write_history(runs: Sequence[dict[str, Any]], docs: dict[str, Doc], selection: list[str], out: Path) -> Doc:
    """Build the history of ``runs`` and write ``history.json`` / ``.md`` / ``.html`` into ``out`` (report paths
    relative to it)."""
    out.mkdir(parents=True, exist_ok=True)
    relative = [run | {"report": os.path.relpath(run["report"], out) if run["report"] and os.path.isabs(run["report"])
                       else run["report"]} for run in runs]
    doc = finite_or_null(build_history(relative, docs, selection))[0]  # an infinite Δ is written as null
    write_text_atomic(out / "history.json", json.dumps(doc, indent=1, sort_keys=True) + "\n")
    write_text_atomic(out / "history.md", render_history_markdown(doc))
    write_text_atomic(out / "history.html", render_history_html(doc))
    return doc


def write_combined_reports(runs: Sequence[dict[str, Any]], docs: dict[str, Doc], out: Path) -> list[dict[str, Any]]:
    """``runs`` with each run that has no report file yet (an overlaid one) given its combined report, written into
    ``out``'s release folder."""
    written = []
    for run in runs:
        if run["report"] is None:
            path = release_dir(out, run["release"]) / "conformance.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, json.dumps(docs[run["release"]], indent=1, sort_keys=True) + "\n")
            run = run | {"report": str(path.resolve())}
        written.append(run)
    return written


def read_history(folder: Path) -> Doc:
    """A folder's ``history.json`` (``ValueError`` naming the folder when absent or not a history)."""
    path = folder / "history.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{folder}: no readable history.json ({exc}); pass the --out folder of a `history.py run`") from None
    if not isinstance(doc, dict) or doc.get("kind") != "kvconform-history":
        raise ValueError(f"{path} is not a kvconform history (kind {doc.get('kind') if isinstance(doc, dict) else None!r})")
    return doc
