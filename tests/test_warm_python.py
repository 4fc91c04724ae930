"""tests/warm_python.py runs a script as ``python SCRIPT`` would: streams, exit status, folder, and no shared state."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.warm_python import KILLED, WarmPython


def _script(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.write_text(source)
    return path


@pytest.mark.parametrize(("source", "status"), [
    ("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)\n", 3),
    ("print('out')\nimport sys\nprint('err', file=sys.stderr)\n", 0),
    ("print('out')\nimport sys\nsys.exit('err')\n", 1),
    ("print('out')\nimport sys\nprint('err', file=sys.stderr)\nraise ValueError('boom')\n", 1),
])
def test_a_script_ends_as_under_python(warm_python: WarmPython, tmp_path: Path, source: str, status: int) -> None:
    script = _script(tmp_path, "s.py", source)
    warm = warm_python.run(script, tmp_path)
    cold = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert (warm.returncode, warm.stdout) == (cold.returncode, cold.stdout) == (status, "out\n")
    assert warm.stderr.splitlines()[-1] == cold.stderr.splitlines()[-1]


def test_a_script_runs_in_its_folder_as_main_and_sees_nothing_of_the_one_before(warm_python: WarmPython,
                                                                               tmp_path: Path) -> None:
    first = _script(tmp_path, "first.py", "import torch\ntorch.left_behind = 1\nLEFT = 1\n")
    second = _script(tmp_path, "second.py", "import os, sys, torch\n"
                     "print(__name__, os.getcwd(), sys.argv[0], hasattr(torch, 'left_behind'), 'LEFT' in globals())\n")
    assert warm_python.run(first, tmp_path).returncode == 0
    run = warm_python.run(second, tmp_path)
    assert run.stdout.split() == ["__main__", str(tmp_path), str(second), "False", "False"]


def test_a_script_past_its_timeout_is_killed(warm_python: WarmPython, tmp_path: Path) -> None:
    script = _script(tmp_path, "slow.py", "import time\ntime.sleep(60)\n")
    assert warm_python.run(script, tmp_path, timeout=0.5).returncode == KILLED
    assert warm_python.run(_script(tmp_path, "after.py", "print('next')\n"), tmp_path).stdout == "next\n"
