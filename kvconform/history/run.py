"""Run the suite under one release's environment, in a subprocess, and record what came of it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvconform.families import ID_SUFFIX
from kvconform.history.envs import ReleaseEnv
from kvconform.report import ReportError, load_document

#: pytest exit codes of a run that produced verdicts (0 all passed, 1 some failed); others are harness errors.
VERDICT_EXITS = (0, 1)
#: Lines of the run's output kept in the history for a harness error.
TAIL_LINES = 12


def model_selection(models: Sequence[str], keyword: str | None) -> list[str]:
    """pytest arguments that select matrix entries by id (``--model`` here) and a ``-k`` expression.

    A cell id is ``ID[dtype-device-cache…]`` inside a test name ``test_CHECK[ID[…]]``, so ``[ID[`` names
    exactly that entry (``[llama[`` selects neither ``llama4`` nor ``code_llama``). A family sweep's entry is named
    ``TYPE-SUFFIX`` (``qwen2_5_omni_thinker-vl``), so a bare model type also selects its family entries.
    """
    parts = []
    if models:
        parts.append("(" + " or ".join(pattern for model in models for pattern in _entry_patterns(model)) + ")")
    if keyword:
        parts.append(f"({keyword})")
    return ["-k", " and ".join(parts)] if parts else []


def _entry_patterns(model: str) -> list[str]:
    if any(model.endswith(f"-{suffix}") for suffix in ID_SUFFIX.values()):
        return [f"[{model}["]
    return [f"[{model}[", *(f"[{model}-{suffix}[" for suffix in ID_SUFFIX.values())]


def run_release(env: ReleaseEnv, root: Path, out_dir: Path, pytest_args: Sequence[str], timeout_s: float) -> dict[str, Any]:
    """Run ``pytest suites`` of checkout ``root`` under ``env``, its reports into ``out_dir``.

    Returns the run record of the history document (``history.schema.json``, ``$defs/run``): ``status`` is
    ``ok`` when pytest gave verdicts and wrote a valid report, else ``harness error`` with the reason.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pytest", str(root / "suites"), "-q", "--tb=line", "-p", "no:randomly",
               "--report-dir", str(out_dir), *pytest_args]
    environ = {**os.environ, "PYTHONPATH": env.pythonpath(root), "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
               **env.switches()}
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=root, env=environ, capture_output=True, text=True, timeout=timeout_s, check=False)
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        partial = [part.decode(errors="replace") if isinstance(part, bytes) else part or "" for part in (exc.stdout, exc.stderr)]
        code, output = None, "".join(partial) + f"\n(timed out after {timeout_s:g} s)"
    seconds = time.monotonic() - start
    (out_dir / "pytest.log").write_text(output)
    record: dict[str, Any] = {"release": env.release, "status": "ok", "exit_code": code, "seconds": round(seconds, 1),
                              "env_seconds": round(env.seconds, 1), "added": list(env.added),
                              "without": list(env.without),
                              "report": str(out_dir / "conformance.json"), "error": None}
    problem = None
    if code not in VERDICT_EXITS:
        problem = f"pytest exited {code}" if code is not None else f"timed out after {timeout_s:g} s"
    else:
        try:
            load_document(out_dir / "conformance.json")
        except ReportError as exc:
            problem = f"no valid report: {exc}"
    if problem:
        tail = [line for line in output.splitlines() if line.strip()][-TAIL_LINES:]
        record.update(status="harness error", error="\n".join([problem, *tail]))
    return record
