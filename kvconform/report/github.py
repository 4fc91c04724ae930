"""The GitHub Actions job summary: the Markdown report, cut to GitHub's 1 MiB step-summary limit."""

from __future__ import annotations

import os
from pathlib import Path

from kvconform.report.document import Doc
from kvconform.report.render_md import render_markdown

#: GitHub refuses step summaries larger than 1 MiB.
GITHUB_SUMMARY_LIMIT = 1024 * 1024
TRUNCATION_NOTE = ("\n> **Note:** this summary was truncated to stay within GitHub's 1 MiB step-summary limit; "
                   "see the full `conformance.md` / `conformance.html` artifacts.\n")


def _close_open_blocks(lines: list[str]) -> list[str]:
    """Append a closing fence if ``lines`` end inside a code block, and close an open ``<details>``."""
    fence, details = "", 0
    for line in lines:
        stripped = line.strip()
        if not fence and stripped.startswith("```"):
            fence = stripped[: len(stripped) - len(stripped.lstrip("`"))]
        elif fence and stripped.startswith(fence) and not stripped.strip("`"):
            fence = ""
        elif not fence:
            details += stripped.startswith("<details>") - stripped.startswith("</details>")
    return lines + ([fence] if fence else []) + ["", "</details>"] * max(details, 0)


def truncate_markdown(text: str, max_bytes: int) -> str:
    """Cut ``text`` at a line boundary so that it (plus a note) fits in ``max_bytes`` of UTF-8.

    Returns ``""`` when not even the note fits. The report puts what needs attention first, so a
    cut loses the per-cell table at the end before anything else.
    """
    if len(text.encode("utf-8")) <= max_bytes:
        return text
    budget = max_bytes - len(TRUNCATION_NOTE.encode("utf-8")) - 64  # room to close a fence and a <details>
    if budget <= 0:
        return ""
    head = text.encode("utf-8")[:budget].decode("utf-8", errors="ignore")
    lines = head.split("\n")[:-1]  # drop the partial last line
    return "\n".join(_close_open_blocks(lines)) + "\n" + TRUNCATION_NOTE


def append_github_summary(doc: Doc) -> Path | None:
    """Append the Markdown report to ``$GITHUB_STEP_SUMMARY`` if set, within GitHub's 1 MiB limit.

    Returns the summary path, or ``None`` when not running under GitHub Actions.
    """
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    used = path.stat().st_size if path.exists() else 0
    text = truncate_markdown(render_markdown(doc), GITHUB_SUMMARY_LIMIT - used - 1)
    if text:
        with path.open("a", encoding="utf-8", newline="\n") as handle:
            handle.write("\n" + text)
    return path
