"""The README is the front door: short, its test command the one CI runs, every page of docs/ linked, no link dead."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
#: A newcomer's ten minutes at about 200 words a minute, code blocks included.
README_WORDS = 1500
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_readme_fits_ten_minutes() -> None:
    words = len(README.read_text(encoding="utf-8").split())
    assert words <= README_WORDS, f"README.md has {words} words (budget {README_WORDS}): move the depth to docs/"


def test_readme_links_every_page_of_docs() -> None:
    readme = README.read_text(encoding="utf-8")
    assert DOCS, "docs/ holds no page"
    unlinked = [path.name for path in DOCS if f"](docs/{path.name})" not in readme]
    assert unlinked == [], f"README.md links none of {unlinked}: add each to its Reference list"


def test_every_relative_link_resolves() -> None:
    dead = []
    for page in [README, *DOCS]:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            if not (page.parent / target.split("#")[0]).exists():
                dead.append(f"{page.relative_to(ROOT)} -> {target}")
    assert dead == []


def test_readme_test_command_is_what_ci_runs() -> None:
    """CI (.ci/run) ends with the README's "Run the tests" command, word for word."""
    readme = README.read_text(encoding="utf-8")
    section = readme.split("Run the tests", 1)[1]
    command = re.search(r"```bash\n(.+?)\n```", section, re.DOTALL)
    assert command is not None, "README.md: no bash block after 'Run the tests'"
    ci = [line for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    assert shlex.split(ci[-1]) == shlex.split(command.group(1))
