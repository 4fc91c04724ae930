"""Conformance reports: the JSON document and its Markdown, HTML and JUnit renderings.

Data flows one way: ``document`` (load, check, merge, serialize the plain-data document) ->
``views`` (what a reader sees, in order) -> ``render_md`` / ``render_html`` (+ ``charts``) /
``render_junit`` -> ``writer`` (files) and ``github`` (job summary). No module imports torch or pytest.
"""

from kvconform.report.document import (
    SCHEMA_PATH,
    Doc,
    ReportError,
    count_not_run,
    document_json,
    finite_or_null,
    load_document,
    merge_documents,
    strip_volatile,
    validate_document,
)
from kvconform.report.github import GITHUB_SUMMARY_LIMIT, append_github_summary, truncate_markdown
from kvconform.report.render_html import render_html
from kvconform.report.render_junit import render_junit
from kvconform.report.render_md import code_fence, md_cell, render_markdown
from kvconform.report.views import BAD_OUTCOMES, totals_line
from kvconform.report.writer import REPORT_FILES, write_reports, write_text_atomic

__all__ = [
    "BAD_OUTCOMES", "GITHUB_SUMMARY_LIMIT", "REPORT_FILES", "SCHEMA_PATH", "Doc", "ReportError", "append_github_summary",
    "code_fence", "count_not_run", "document_json", "finite_or_null", "load_document", "md_cell", "merge_documents",
    "render_html", "render_junit", "render_markdown", "strip_volatile", "totals_line", "truncate_markdown",
    "validate_document", "write_reports", "write_text_atomic",
]
