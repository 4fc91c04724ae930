"""Conformance report documents: load, validate, merge, render as Markdown and write to disk.

A report document is the plain JSON data written by the pytest plugin (``conformance.json``);
everything here takes and returns builtin data so it can run without torch or pytest.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from tabulate import tabulate

from kvconform.results import OUTCOMES, SCHEMA_VERSION
from kvconform.run_status import banners, merge_run_fields

Doc = dict[str, Any]

#: Checks in the column order of the summary table; unknown checks follow alphabetically.
CHECK_ORDER = ("parity", "growth", "shapes", "bytes", "generate")
#: Outcomes that make a run red.
BAD_OUTCOMES = ("fail", "error", "crashed")
OUTCOME_LABELS = {"pass": "pass", "fail": "FAIL", "skip": "skip", "xfail": "xfail", "xpass": "XPASS",
                  "error": "error", "crashed": "crashed"}
TOTAL_WORDS = {"pass": "passed", "fail": "failed", "skip": "skipped", "xfail": "xfailed", "xpass": "xpassed",
               "error": "errored", "crashed": "crashed"}
#: Environment keys in display order; other keys follow alphabetically.
ENV_ORDER = ("kvconform", "python", "torch", "transformers", "accelerate", "platform", "devices",
             "git_commit", "matrix_path", "matrix_sha256", "date", "shards")
REPORT_FILES = ("conformance.json", "conformance.md", "conformance.html")
#: GitHub refuses step summaries larger than 1 MiB.
GITHUB_SUMMARY_LIMIT = 1024 * 1024
TRUNCATION_NOTE = ("\n> **Note:** this summary was truncated to stay within GitHub's 1 MiB step-summary limit; "
                   "see the full `conformance.md` / `conformance.html` artifacts.\n")

_REQUIRED_RESULT_FIELDS = ("cell_id", "model", "dtype", "device", "cache", "check", "outcome")
_OPTIONAL_RESULT_STRINGS = ("model_type", "source", "measured", "limit", "message", "nodeid")


class ReportError(ValueError):
    """A report file could not be read or is not a valid conformance document."""


# --------------------------------------------------------------------------- loading and validation


def load_document(path: str | os.PathLike[str]) -> Doc:
    """Read and validate one ``conformance.json``; raise :class:`ReportError` naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"cannot read {path}: {exc}") from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path} is not valid JSON: {exc}") from exc
    problems = validate_document(doc)
    if problems:
        listed = "\n  ".join(problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise ReportError(f"{path} is not a valid conformance report:\n  {listed}{more}")
    return doc


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _list_of_dicts(doc: Doc, key: str, problems: list[str]) -> list[dict[str, Any]]:
    """Return ``doc[key]`` if it is a list of objects, recording problems otherwise."""
    items = doc.get(key)
    if not isinstance(items, list):
        problems.append(f"{key}: expected a list, got {type(items).__name__}")
        return []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            problems.append(f"{key}[{i}]: expected an object, got {type(item).__name__}")
    return [item for item in items if isinstance(item, dict)]


def _validate_details(where: str, details: Any, problems: list[str]) -> None:
    if not isinstance(details, dict):
        problems.append(f"{where}.details: expected an object")
        return
    steps = details.get("step_max_abs_delta")
    if steps is not None and not (isinstance(steps, list) and all(_is_number(v) for v in steps)):
        problems.append(f"{where}.details.step_max_abs_delta: expected a list of numbers")
    tolerance = details.get("tolerance")
    if tolerance is not None and not _is_number(tolerance):
        problems.append(f"{where}.details.tolerance: expected a number")


def _validate_result(i: int, result: dict[str, Any], problems: list[str]) -> None:
    where = f"results[{i}]"
    for key in _REQUIRED_RESULT_FIELDS:
        if not isinstance(result.get(key), str):
            problems.append(f"{where}.{key}: missing or not a string")
    outcome = result.get("outcome")
    if isinstance(outcome, str) and outcome not in OUTCOMES:
        problems.append(f"{where}.outcome: {outcome!r} is not one of {', '.join(OUTCOMES)}")
    for key in _OPTIONAL_RESULT_STRINGS:
        if key in result and not isinstance(result[key], str):
            problems.append(f"{where}.{key}: expected a string")
    if result.get("revision") is not None and not isinstance(result["revision"], str):
        problems.append(f"{where}.revision: expected a string or null")
    if result.get("duration_s") is not None and not _is_number(result["duration_s"]):
        problems.append(f"{where}.duration_s: expected a number or null")
    if "details" in result:
        _validate_details(where, result["details"], problems)


def validate_document(doc: Any) -> list[str]:
    """Return the problems that make ``doc`` an invalid report document (empty when it is fine)."""
    if not isinstance(doc, dict):
        return [f"document: expected a JSON object, got {type(doc).__name__}"]
    problems: list[str] = []
    if doc.get("schema_version") != SCHEMA_VERSION:
        problems.append(f"schema_version: expected {SCHEMA_VERSION}, got {doc.get('schema_version')!r}")
    if not isinstance(doc.get("environment"), dict):
        problems.append("environment: expected an object")
    for i, entry in enumerate(_list_of_dicts(doc, "excluded", problems)):
        for key in ("id", "reason"):
            if not isinstance(entry.get(key), str):
                problems.append(f"excluded[{i}].{key}: missing or not a string")
    seen: set[tuple[str, str]] = set()
    for i, result in enumerate(_list_of_dicts(doc, "results", problems)):
        _validate_result(i, result, problems)
        key = (str(result.get("cell_id")), str(result.get("check")))
        if key in seen:
            problems.append(f"results[{i}]: duplicate result for cell {key[0]!r}, check {key[1]!r}")
        seen.add(key)
    run = doc.get("run")
    if run is not None and not (isinstance(run, dict) and isinstance(run.get("complete"), bool)):
        problems.append("run: expected an object with a boolean 'complete'")
    for i, cell in enumerate(_list_of_dicts(doc, "cells", problems)):
        if not isinstance(cell.get("cell_id"), str):
            problems.append(f"cells[{i}].cell_id: missing or not a string")
        for key in ("load_s", "probe_s"):
            if cell.get(key) is not None and not _is_number(cell[key]):
                problems.append(f"cells[{i}].{key}: expected a number or null")
    return problems


# --------------------------------------------------------------------------- merging and comparison


def result_sort_key(result: dict[str, Any]) -> tuple[str, str, str]:
    """Deterministic order of results: model, then cell, then check."""
    return (result.get("model", ""), result.get("cell_id", ""), result.get("check", ""))


def merge_documents(docs: list[Doc]) -> Doc:
    """Merge report shards (e.g. a CI fan-out) into one document.

    Results, cells and exclusions are concatenated (exclusions de-duplicated by id) and sorted
    deterministically; the environment comes from the first shard plus a ``shards`` count.
    Raises ``ValueError`` for an empty list, mixed schema versions or a result present twice.
    """
    if not docs:
        raise ValueError("merge_documents: no documents to merge")
    versions = sorted({repr(doc.get("schema_version")) for doc in docs})
    if len(versions) > 1:
        raise ValueError(f"cannot merge reports with different schema versions: {', '.join(versions)}")
    results = [copy.deepcopy(r) for doc in docs for r in doc.get("results", [])]
    seen: set[tuple[str, str]] = set()
    for result in results:
        key = (result.get("cell_id"), result.get("check"))
        if key in seen:
            raise ValueError(f"result for cell {key[0]!r}, check {key[1]!r} appears in more than one shard")
        seen.add(key)
    excluded: dict[str, dict[str, Any]] = {}
    for doc in docs:
        for entry in doc.get("excluded", []):
            excluded.setdefault(entry.get("id", ""), copy.deepcopy(entry))
    cells = [copy.deepcopy(c) for doc in docs for c in doc.get("cells", [])]
    environment = copy.deepcopy(docs[0].get("environment", {}))
    environment["shards"] = sum(doc.get("environment", {}).get("shards", 1) for doc in docs)
    return {
        "schema_version": docs[0].get("schema_version"),
        "environment": environment,
        "run": merge_run_fields(docs),
        "excluded": [excluded[key] for key in sorted(excluded)],
        "results": sorted(results, key=result_sort_key),
        "cells": sorted(cells, key=lambda c: (c.get("model", ""), c.get("cell_id", ""))),
    }


def strip_volatile(doc: Doc) -> Doc:
    """Return a copy of ``doc`` without timings and dates, for comparing two runs."""
    stripped = copy.deepcopy(doc)
    stripped.get("environment", {}).pop("date", None)
    for result in stripped.get("results", []):
        result.pop("duration_s", None)
    for cell in stripped.get("cells", []):
        for key in [key for key in cell if key.endswith("_s") or key == "loads"]:
            del cell[key]
    return stripped


# --------------------------------------------------------------------------- shared views (Markdown and HTML)


def sorted_results(doc: Doc) -> list[dict[str, Any]]:
    return sorted(doc.get("results", []), key=result_sort_key)


def check_names(doc: Doc) -> list[str]:
    """Checks present in the document, known ones first in :data:`CHECK_ORDER`."""
    present = {r.get("check", "") for r in doc.get("results", [])}
    return [c for c in CHECK_ORDER if c in present] + sorted(present - set(CHECK_ORDER))


def cell_rows(doc: Doc) -> list[dict[str, Any]]:
    """One row per cell that ran: its coordinates and ``checks`` mapping check name -> result.

    Cells whose every check was skipped (e.g. an absent device) are summarized by ``skipped_cells``.
    """
    return [row for row in _all_cell_rows(doc) if not _all_skipped(row)]


def _all_skipped(row: dict[str, Any]) -> bool:
    return all(r.get("outcome") == "skip" for r in row["checks"].values())


def skipped_cells(doc: Doc) -> list[tuple[str, int]]:
    """``(reason, number of cells)`` for cells whose every check was skipped, most common first."""
    reasons = Counter(
        next(iter(row["checks"].values())).get("message", "") or "(no reason)"
        for row in _all_cell_rows(doc) if _all_skipped(row)
    )
    return sorted(reasons.items(), key=lambda item: (-item[1], item[0]))


def _all_cell_rows(doc: Doc) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for result in sorted_results(doc):
        row = rows.setdefault(result["cell_id"], {
            key: result.get(key, "") for key in ("cell_id", "model", "model_type", "dtype", "device", "cache")
        } | {"checks": {}})
        row["checks"][result.get("check", "")] = result
    return sorted(rows.values(), key=lambda r: (r["model"], r["dtype"], r["device"], r["cache"], r["cell_id"]))


def outcome_label(outcome: str) -> str:
    return OUTCOME_LABELS.get(outcome, outcome)


def outcome_counts(doc: Doc) -> dict[str, int]:
    """Number of results per outcome: every known outcome, then any unknown ones."""
    counts = Counter(r.get("outcome", "") for r in doc.get("results", []))
    return {o: counts.get(o, 0) for o in OUTCOMES} | {o: counts[o] for o in sorted(set(counts) - set(OUTCOMES))}


def totals_line(doc: Doc) -> str:
    """E.g. ``"12 passed, 1 failed, 2 skipped, 0 xfailed, 0 errored, 0 crashed (5 cells)"``."""
    parts = [f"{n} {TOTAL_WORDS.get(o, o)}" for o, n in outcome_counts(doc).items()]
    never_ran = (doc.get("run") or {}).get("never_ran", 0)
    missing = f"; {never_ran} planned checks never ran" if never_ran else ""
    return f"{', '.join(parts)} ({len(_all_cell_rows(doc))} cells){missing}"


def failures(doc: Doc) -> list[dict[str, Any]]:
    return [r for r in sorted_results(doc) if r.get("outcome") in BAD_OUTCOMES]


def environment_items(doc: Doc) -> list[tuple[str, str]]:
    """Environment as ``(key, text)`` pairs in display order."""
    env = doc.get("environment", {})
    keys = [k for k in ENV_ORDER if k in env] + sorted(set(env) - set(ENV_ORDER))
    return [(k, ", ".join(map(str, env[k])) if isinstance(env[k], list) else str(env[k])) for k in keys]


# --------------------------------------------------------------------------- Markdown


def md_cell(text: str) -> str:
    """Make ``text`` safe inside a Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def code_fence(text: str) -> str:
    """Wrap ``text`` in a code fence longer than any backtick run inside it."""
    longest, run = 0, 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text.rstrip()}\n{fence}"


def check_cell_text(result: dict[str, Any] | None) -> str:
    """Summary-table text of one check: outcome label plus its key figure."""
    if result is None:
        return "—"
    return f"{outcome_label(result.get('outcome', ''))} {result.get('measured', '')}".strip()


def summary_table_markdown(doc: Doc) -> str:
    checks = check_names(doc)
    rows = [[md_cell(row[k]) for k in ("model", "dtype", "device", "cache")]
            + [md_cell(check_cell_text(row["checks"].get(c))) for c in checks] for row in cell_rows(doc)]
    if not rows:
        return "_No results._"
    headers = ["model", "dtype", "device", "cache", *checks]
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def skipped_cells_markdown(doc: Doc) -> list[str]:
    """Lines for cells left out of the summary table because every check was skipped."""
    return [f"_{count} cells not run: {md_cell(reason)}_" for reason, count in skipped_cells(doc)]


def _environment_markdown(doc: Doc) -> str:
    return "\n".join(f"- **{key}**: {md_cell(value)}" for key, value in environment_items(doc))


def _excluded_markdown(doc: Doc) -> str:
    rows = [[md_cell(e.get(k, "")) for k in ("id", "model_type", "reason")]
            for e in sorted(doc.get("excluded", []), key=lambda e: e.get("id", ""))]
    if not rows:
        return "_None._"
    return tabulate(rows, headers=["id", "model_type", "reason"], tablefmt="github", disable_numparse=True)


def _failure_markdown(result: dict[str, Any]) -> str:
    lines = [f"### {outcome_label(result['outcome'])}: {result.get('check', '')} · {result.get('cell_id', '')}", ""]
    if result.get("measured") or result.get("limit"):
        lines.append(f"- measured: `{result.get('measured', '')}` (limit `{result.get('limit', '')}`)")
    for key in ("source", "nodeid"):
        if result.get(key):
            lines.append(f"- {key}: `{result[key]}`")
    lines += ["", code_fence(result.get("message", "") or "(no message)")]
    return "\n".join(lines)


def render_markdown(doc: Doc) -> str:
    """The full Markdown report; the same document always gives the same text."""
    sections = [
        "# KV cache conformance report",
        *(f"> **{note}**" for note in banners(doc)),
        _environment_markdown(doc),
        "## Summary",
        f"**Totals:** {totals_line(doc)}",
        summary_table_markdown(doc),
        *skipped_cells_markdown(doc),
        "## Excluded architectures",
        _excluded_markdown(doc),
    ]
    failed = failures(doc)
    if failed:
        sections += [f"## Failures ({len(failed)})", *map(_failure_markdown, failed)]
    return "\n\n".join(sections) + "\n"


# --------------------------------------------------------------------------- writing


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


def document_json(doc: Doc) -> str:
    """Canonical JSON text of a document (sorted keys, indent 2)."""
    return json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def write_reports(doc: Doc, out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write ``conformance.json``, ``.md`` and ``.html`` into ``out_dir`` (created if needed)."""
    from kvconform.report_html import render_html  # imported here: report_html builds on this module

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    texts = (document_json(doc), render_markdown(doc), render_html(doc))
    return [write_text_atomic(out / name, text) for name, text in zip(REPORT_FILES, texts)]


def _close_open_fence(lines: list[str]) -> list[str]:
    """Append a closing fence if ``lines`` end inside a code block."""
    fence = ""
    for line in lines:
        stripped = line.strip()
        if not fence and stripped.startswith("```"):
            fence = stripped[: len(stripped) - len(stripped.lstrip("`"))]
        elif fence and stripped.startswith(fence) and not stripped.strip("`"):
            fence = ""
    return lines + [fence] if fence else lines


def truncate_markdown(text: str, max_bytes: int) -> str:
    """Cut ``text`` at a line boundary so that it (plus a note) fits in ``max_bytes`` of UTF-8.

    Returns ``""`` when not even the note fits.
    """
    if len(text.encode("utf-8")) <= max_bytes:
        return text
    budget = max_bytes - len(TRUNCATION_NOTE.encode("utf-8")) - 64  # room to close a fence
    if budget <= 0:
        return ""
    head = text.encode("utf-8")[:budget].decode("utf-8", errors="ignore")
    lines = head.split("\n")[:-1]  # drop the partial last line
    return "\n".join(_close_open_fence(lines)) + "\n" + TRUNCATION_NOTE


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
