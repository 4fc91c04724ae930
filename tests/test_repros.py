"""The standalone repros behind the matrix's model-bug labels: each one is cited and shows its bug without kvconform."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPROS = ROOT / "tools" / "repros"
SCRIPTS = sorted(path.name for path in REPROS.glob("*.py"))


def test_every_cited_repro_exists_and_every_repro_is_cited():
    """A label's ``Repro: tools/repros/X.py`` names a script there; the README or a label names every script."""
    matrix = (ROOT / "model_matrix.yaml").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert SCRIPTS, "tools/repros/ holds no script"
    assert set(re.findall(r"tools/repros/(\w+\.py)", matrix)) <= set(SCRIPTS)
    assert [script for script in SCRIPTS if script not in matrix + readme] == []


@pytest.mark.parametrize("script", SCRIPTS)
def test_repro_shows_its_bug_without_kvconform(script):
    """The script imports torch and transformers only; exit 1 = the bug (or the design finding) is there."""
    source = (REPROS / script).read_text(encoding="utf-8")
    assert not re.search(r"^\s*(from|import) kvconform", source, re.MULTILINE), f"{script} imports kvconform"
    done = subprocess.run([sys.executable, str(REPROS / script)], capture_output=True, text=True, cwd=REPROS,
                          timeout=600)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
