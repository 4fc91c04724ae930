"""Every command in tools/ starts: its imports resolve and it prints its usage (a moved module breaks this first)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools"


@pytest.mark.parametrize("tool", sorted(path.name for path in TOOLS.glob("*.py")))
def test_tool_prints_its_usage(tool: str) -> None:
    done = subprocess.run([sys.executable, str(TOOLS / tool), "--help"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "usage:" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]


#: Tools that run models by design, so they import torch before parsing their arguments.
RUN_MODELS = {"bench.py", "fault_ladder.py", "logit_noise.py"}
ANSWER_AT_ONCE = sorted(path.name for path in TOOLS.glob("*.py") if path.name not in RUN_MODELS)
WATCH = """import runpy, sys
sys.argv = [sys.argv[1], "--help"]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit:
    pass
print(sorted(name for name in ("torch", "transformers") if name in sys.modules), file=sys.stderr)
"""


@pytest.mark.parametrize("tool", ANSWER_AT_ONCE)
def test_tool_answers_help_before_loading_torch_or_transformers(tool: str) -> None:
    """``--help`` (and a usage error) answers at once: torch and transformers load after the arguments parse."""
    done = subprocess.run([sys.executable, "-c", WATCH, str(TOOLS / tool)], capture_output=True, text=True, timeout=300)
    assert "usage:" in done.stdout and done.stderr.strip().splitlines()[-1] == "[]", done.stderr[-2000:]
