"""The standalone repros behind the matrix's model-bug labels: each one is cited and shows its bug without kvconform.

A script whose bug is in some transformers releases only declares them on a top-level line such as
``TRANSFORMERS = "<5.24"`` (a PEP 440 specifier, or several joined by ``||``); under any other release its run is skipped with that reason,
while the citation check still covers it. Exit 1: the bug is there; exit 2: the script cannot show it on this
machine (its run is skipped with the script's own words, e.g. a compiler fault of this CPU); anything else fails.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from kvconform.known_failures import Releases, parse_releases
from tests.warm_python import WarmPython

ROOT = Path(__file__).resolve().parents[1]
REPROS = ROOT / "tools" / "repros"
SCRIPTS = sorted(path.name for path in REPROS.glob("*.py"))
#: The exit status of a repro that cannot show its bug on this machine (it prints why as its last line).
CANNOT_SHOW = 2
RELEASES = re.compile(r"^TRANSFORMERS = [\"']([^\"']+)[\"']", re.MULTILINE)


def declared_releases(source: str) -> Releases | None:
    """The transformers releases a script declares its bug to be in, or ``None`` (every release)."""
    found = RELEASES.search(source)
    return parse_releases(found.group(1)) if found else None


def test_declared_releases_read_back() -> None:
    assert declared_releases('"""doc"""\nimport torch\n\nTRANSFORMERS = "<5.24"  # why\n') == Releases((SpecifierSet("<5.24"),))
    returned = declared_releases('TRANSFORMERS = ">=5.18,<5.24 || >=5.25"  # fixed in 5.24, back in 5.25\n')
    assert returned is not None and [Version(v) in returned for v in ("5.17.0", "5.20.0", "5.24.0", "5.25.0")] == [
        False, True, False, True]
    assert declared_releases("import torch\nprint('TRANSFORMERS = \"<5.24\"')\n") is None
    assert Version("5.20.0") in SpecifierSet("<5.24") and Version("5.24.0") not in SpecifierSet("<5.24")


def test_every_cited_repro_exists_and_every_repro_is_cited() -> None:
    """A label's ``Repro: tools/repros/X.py`` names a script there; the docs (README.md, docs/*.md) or a label name
    every script, including the scripts whose run is skipped under the installed release."""
    matrix = (ROOT / "model_matrix.yaml").read_text(encoding="utf-8")
    docs = "\n".join(path.read_text(encoding="utf-8") for path in [ROOT / "README.md", *sorted(ROOT.glob("docs/*.md"))])
    assert SCRIPTS, "tools/repros/ holds no script"
    assert set(re.findall(r"tools/repros/(\w+\.py)", matrix)) <= set(SCRIPTS)
    assert [script for script in SCRIPTS if script not in matrix + docs] == []


@pytest.mark.parametrize("script", SCRIPTS)
def test_repro_shows_its_bug_without_kvconform(warm_python: WarmPython, script: str) -> None:
    """The script imports torch and transformers only; exit 1 without a traceback = the bug (or the design finding)
    is there (a script that crashes proves nothing). It runs as ``python script`` would (tests/warm_python.py)."""
    source = (REPROS / script).read_text(encoding="utf-8")
    assert not re.search(r"^\s*(from|import) kvconform", source, re.MULTILINE), f"{script} imports kvconform"
    releases = declared_releases(source)
    installed = metadata.version("transformers")
    if releases is not None and Version(installed) not in releases:
        pytest.skip(f"{script} shows a bug of transformers {releases} only; installed {installed}")
    done = warm_python.run(REPROS / script, REPROS, timeout=600)
    assert "Traceback (most recent call last)" not in done.stderr, f"{script} crashed:\n{done.stderr[-2000:]}"
    if done.returncode == CANNOT_SHOW:
        pytest.skip(f"{script}: {done.stdout.strip().splitlines()[-1]}")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
