"""The Markdown report (``conformance.md``, also the GitHub job summary): the verdict, then what needs attention."""

from __future__ import annotations

from typing import Any

from kvconform.report import views
from kvconform.report.document import Doc

BANNER_MARK = {"bad": "❌", "warn": "⚠️", "ok": "✅"}


def md_cell(text: Any) -> str:
    """Make ``text`` safe inside a Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A GitHub pipe table without padding (the rendered page aligns it; the text stays small)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def code_fence(text: str) -> str:
    """Wrap ``text`` in a code fence longer than any backtick run inside it."""
    longest, run = 0, 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text.rstrip()}\n{fence}"


def _head(doc: Doc) -> list[str]:
    lines = [f"> {BANNER_MARK[level]} **{md_cell(text)}**" for level, text in views.banner(doc)]
    return ["\n>\n".join(lines), f"**Totals:** {views.totals_line(doc)}", f"_{md_cell(views.header_line(doc))}_"]


def _not_run(doc: Doc) -> list[str]:
    lines = views.not_run(doc)
    if not lines:
        return []
    items = "\n".join(f"- {md_cell(line)}" for line in lines)
    return [f"<details><summary>{views.not_run_title(doc)}</summary>\n\n{items}\n\n</details>"]


def _attention(doc: Doc) -> list[str]:
    found = views.attention(doc)
    if not found:
        return ["## Needs attention (0)", "_Nothing: no failures, errors, crashes or unexpected passes._"]
    rows = [[views.outcome_label(item["outcome"]), ", ".join(item["checks"]), f"[{item['label']}](#{item['anchor']})",
             item["figures"], item["diagnosis"]] for item in found]
    return [f"## Needs attention ({sum(len(item['results']) for item in found)})",
            table(["outcome", "checks", "cell", "measured / limit", "diagnosis"], rows)]


def _known_failures(doc: Doc) -> list[str]:
    groups = views.known_failures(doc)
    if not groups:
        return []
    kinds = any(g["kind"] for g in groups)
    rows = [[g["model"], *([g["kind"] or "—"] if kinds else []), views.checks_text(g), ", ".join(g["dtypes"]),
             views.format_ratio(g["worst"]) or "—", g["reason"]] for g in groups]
    return [f"## {views.known_failures_title(groups)}", views.KNOWN_FAILURES_NOTE,
            table(["model", *(["kind"] if kinds else []), "checks", "dtypes", "worst Δ/limit", "reason"], rows)]


def _excluded(doc: Doc) -> list[str]:
    entries = views.excluded(doc)
    if not entries:
        return []
    return [f"## Excluded architectures ({len(entries)})", table(["id", "reason"], [[e["id"], e["reason"]] for e in entries])]


def _model_cell(summary: dict[str, Any] | None, anchors: dict[tuple[str, str], str]) -> str:
    if summary is None:
        return "—"
    target = anchors.get(summary["first_attention"]) if summary["first_attention"] else None
    return f"[{summary['text']}](#{target})" if target else summary["text"]


def _models(doc: Doc) -> list[str]:
    rows = views.model_rows(doc)
    if not rows:
        return ["## Models (0)", "_No results._"]
    checks, anchors = views.check_names(doc), views.attention_anchors(doc)
    short = [[row["label"], row["cells"], *views.model_overview(row).values()] for row in rows]
    body = [[row["label"], *(_model_cell(row["checks"].get(c), anchors) for c in checks)] for row in rows]
    return [f"## Models ({len(rows)})", table(list(views.MODELS_COLUMNS), short),
            f"<details><summary>Models × checks</summary>\n\n{views.figures_note(doc)} Worst over each model's cells."
            f"\n\n{table(['model', *checks], body)}\n\n</details>"]


def _details(doc: Doc) -> list[str]:
    found = views.attention(doc)
    if not found:
        return []
    sections = ["## Details"]
    for item in found:
        lines = [f'<a id="{item["anchor"]}"></a>',
                 f"### {views.outcome_label(item['outcome'])}: {', '.join(item['checks'])} · {md_cell(item['label'])}", "",
                 f"- cell: `{item['cell_id']}`"]
        if item["figures"]:
            first = item["results"][0]
            lines.append(f"- measured: `{first.get('measured', '')}` (limit `{first.get('limit', '')}`)")
        if item["reason"]:
            kind = f" ({item['xfail_kind']})" if item["xfail_kind"] else ""
            lines.append(f"- known failure{kind}: {md_cell(item['reason'])}")
        if item["rerun"]:
            lines.append(f"- re-run: `{item['rerun']}`")
        lines += ["", code_fence(item["message"] or "(no message)")]
        sections.append("\n".join(lines))
    return sections


def _provenance(doc: Doc) -> list[str]:
    parts = ["## Provenance"]
    rows = views.provenance_rows(doc)
    if rows:
        parts.append(table(["model", "model_type", "source", "revision", "weights file"],
                           [[r["model"], r["model_type"], r["source"], r["revision"], r["file"]] for r in rows]))
    synthetic = views.synthetic_count(doc)
    if synthetic:
        parts.append(f"{synthetic} synthetic models: the installed transformers' default configs, shrunk, seeded random weights.")
    parts.append("\n".join(f"- **{key}**: {md_cell(value)}" for key, value in views.environment_items(doc)))
    return parts


def _cells(doc: Doc) -> list[str]:
    rows = views.cell_rows(doc)
    if not rows:
        return []
    checks = views.check_names(doc)
    body = [[row["model"], views.cell_label(row),
             *(views.cell_text(row["checks"].get(c)) for c in checks)] for row in rows]
    return [f"<details><summary>All cells ({len(rows)})</summary>\n\n{views.figures_note(doc)}\n\n"
            f"{table(['model', 'dtype · device · cache · attention', *checks], body)}\n\n</details>"]


def render_markdown(doc: Doc) -> str:
    """The full Markdown report; the same document always gives the same text."""
    sections = ["# KV cache conformance report", *_head(doc), *_attention(doc), *_known_failures(doc),
                *_models(doc), *_details(doc), *_excluded(doc), *_provenance(doc), *_cells(doc), *_not_run(doc)]
    return "\n\n".join(sections) + "\n"
