"""Write a report document to disk: JSON, Markdown, HTML and JUnit XML, each atomically."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from kvconform.report.document import Doc, document_json
from kvconform.report.render_html import render_html
from kvconform.report.render_junit import render_junit
from kvconform.report.render_md import render_markdown

REPORT_FILES = ("conformance.json", "conformance.md", "conformance.html", "conformance.junit.xml")
_RENDERERS = (document_json, render_markdown, render_html, render_junit)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` via a temporary file in the same directory and ``os.replace``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_reports(doc: Doc, out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write every file of :data:`REPORT_FILES` into ``out_dir`` (created if needed)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    texts = [render(doc) for render in _RENDERERS]  # render everything before replacing any file
    return [write_text_atomic(out / name, text) for name, text in zip(REPORT_FILES, texts, strict=False)]
