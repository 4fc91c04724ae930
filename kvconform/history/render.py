"""The history document as Markdown and HTML: a model × release grid on the first screen, then what changed."""

from __future__ import annotations

import html
from typing import Any

from kvconform.report import Doc, md_cell

#: Grid symbol and HTML class of each verdict.
SYMBOLS = {"pass": ("✓", "pass"), "fail": ("✗", "fail"), "known failure": ("xf", "xfail"),
           "not applicable": ("·", "na"), "harness error": ("E", "error")}
#: Changes listed in the Markdown before the rest is counted.
MAX_CHANGES = 60


def _short(release: str) -> str:
    return release.removesuffix(".0") if release.count(".") == 2 else release


def summary_line(doc: Doc) -> str:
    totals = doc["totals"]
    counts = ", ".join(f"{totals[v]} {v}" for v in SYMBOLS if totals.get(v))
    return (f"{len(doc['models'])} models × {len(doc['releases'])} releases = {totals['cells']} cells ({counts}); "
            f"harness errors: {totals['harness_errors']}; cost {totals['seconds']:.0f} s")


def _legend() -> str:
    return " · ".join(f"{symbol} {verdict}" for verdict, (symbol, _) in SYMBOLS.items())


def _bad_cell(row: dict[str, Any]) -> str:
    return row["first_bad"] or f"≤{row['bad_since']} (first release run)"


def render_history_markdown(doc: Doc) -> str:
    """The history as Markdown: summary, grid, first-bad/first-fixed table, classified changes, costs."""
    releases = [run["release"] for run in doc["releases"]]
    lines = ["# KV cache conformance across transformers releases", "",
             f"**{summary_line(doc)}**" + (f" · selection: `{' '.join(doc['selection'])}`" if doc["selection"] else ""),
             "", _legend(), "",
             "| model | " + " | ".join(_short(r) for r in releases) + " |",
             "|---|" + "---|" * len(releases)]
    for model in doc["models"]:
        cells = [SYMBOLS[doc["grid"][model][r]["verdict"]][0] for r in releases]
        lines.append(f"| {md_cell(model)} | " + " | ".join(cells) + " |")
    errors = [run for run in doc["releases"] if run["status"] != "ok"]
    if errors:
        lines += ["", "## Harness errors", ""] + [f"- {run['release']}: {md_cell((run['error'] or '').splitlines()[0])}"
                                                   for run in errors]
    lines += ["", f"## First bad and first fixed release per (model, check) ({len(doc['transitions'])})", ""]
    if doc["transitions"]:
        lines += ["| model | check | last good | first bad | first fixed | outcome | cell | diagnosis |",
                  "|---|---|---|---|---|---|---|---|"]
        for row in doc["transitions"]:
            lines.append(f"| {md_cell(row['model'])} | {row['check']} | {row['last_good'] or '—'} | {_bad_cell(row)} | "
                         f"{row['first_fixed'] or '—'} | {row['outcome']} | `{row['cell_id']}` | {md_cell(row['note'])} |")
    else:
        lines.append("No (model, check) changed state across these releases.")
    changes = doc["changes"]
    red = [c for c in changes if c["kind"] == "bad"]
    lines += ["", f"## Release-to-release changes ({len(red)} regressions, "
                  f"{sum(c['kind'] == 'fixed' for c in changes)} fixes, {sum(c['kind'] == 'info' for c in changes)} informational)",
              "", "Classified by the rules of `tools/diff_reports.py`: red only for a result that newly fails or a parity Δ "
                  "that grew past its margin; missing results are not regressions across releases.", ""]
    if changes:
        lines += ["| release | kind | cell | check | outcome | note |", "|---|---|---|---|---|---|"]
        for change in sorted(changes, key=lambda c: ({"bad": 0, "fixed": 1, "info": 2}[c["kind"]]))[:MAX_CHANGES]:
            outcome = f"{change['base_outcome']} → {change['new_outcome']}"
            lines.append(f"| {change['previous']} → {change['release']} | {change['kind']} | `{change['cell_id']}` | "
                         f"{change['check']} | {outcome} | {md_cell(change['message'][:140])} |")
        if len(changes) > MAX_CHANGES:
            lines.append(f"\n… {len(changes) - MAX_CHANGES} more in history.json")
    lines += ["", "## Cost per release", "", "| release | status | environment s | run s | added requirements |",
              "|---|---|---|---|---|"]
    for run in doc["releases"]:
        lines.append(f"| {run['release']} | {run['status']} | {run.get('env_seconds', 0):.0f} | {run['seconds']:.0f} | "
                     f"{md_cell(_requirements(run))} |")
    return "\n".join(lines) + "\n"


def _requirements(run: Doc) -> str:
    """The requirements a release's environment added, and those it was made without."""
    added = ", ".join(run.get("added", [])) or "—"
    without = run.get("without") or []
    return added + (f"; without {', '.join(without)} (not on the index; its feature switched off)" if without else "")


_CSS = """body{font:14px system-ui,sans-serif;margin:1.5em}table{border-collapse:collapse;margin:.6em 0}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:center}td.model{text-align:left;font-family:monospace}
.pass{background:#c8f0c8}.fail{background:#f4a6a6}.xfail{background:#f7e0a0}.na{background:#eee;color:#999}
.error{background:#b00;color:#fff}td.note{text-align:left;font-size:12px}"""


def render_history_html(doc: Doc) -> str:
    """The history as one self-contained HTML page: the coloured grid (hover a cell for its diagnosis), then the
    first-bad/first-fixed table."""
    esc = html.escape
    releases = [run["release"] for run in doc["releases"]]
    head = "".join(f"<th>{esc(_short(r))}</th>" for r in releases)
    rows = []
    for model in doc["models"]:
        cells = []
        for release in releases:
            cell = doc["grid"][model][release]
            symbol, css = SYMBOLS[cell["verdict"]]
            title = esc(f"{model} @ {release}: {cell['verdict']}" + (f" — {cell['note']}" if cell["note"] else ""))
            cells.append(f'<td class="{css}" title="{title}">{symbol}</td>')
        rows.append(f'<tr><td class="model">{esc(model)}</td>{"".join(cells)}</tr>')
    transitions = "".join(
        f"<tr><td class=model>{esc(t['model'])}</td><td>{esc(t['check'])}</td><td>{esc(t['last_good'] or '—')}</td>"
        f"<td>{esc(_bad_cell(t))}</td><td>{esc(t['first_fixed'] or '—')}</td><td>{esc(t['outcome'])}</td>"
        f"<td class=note>{esc(t['cell_id'])}: {esc(t['note'])}</td></tr>" for t in doc["transitions"])
    legend = " ".join(f'<span class="{css}">&nbsp;{symbol}&nbsp;</span> {esc(v)}' for v, (symbol, css) in SYMBOLS.items())
    return (f"<!doctype html><html><head><meta charset=utf-8><title>kvconform history</title><style>{_CSS}</style></head>"
            f"<body><h1>KV cache conformance across transformers releases</h1><p><b>{esc(summary_line(doc))}</b></p>"
            f"<p>{legend}</p><table><tr><th>model</th>{head}</tr>{''.join(rows)}</table>"
            f"<h2>First bad and first fixed release per (model, check)</h2><table><tr><th>model</th><th>check</th>"
            f"<th>last good</th><th>first bad</th><th>first fixed</th><th>outcome</th><th>cell: diagnosis</th></tr>"
            f"{transitions}</table></body></html>\n")
