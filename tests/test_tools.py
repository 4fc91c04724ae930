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
