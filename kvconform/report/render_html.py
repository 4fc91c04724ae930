"""The HTML report (``conformance.html``): one self-contained page, attention first, no scripts.

Styles are inline and charts are inline SVG (``charts.py``); the full per-cell table is folded
in a ``<details>`` element, so the page opens on what needs attention.
"""

from __future__ import annotations

from html import escape
from typing import Any

from kvconform.report import charts, views
from kvconform.report.document import Doc

CSS = """
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       margin: 0 auto; max-width: 1280px; padding: 1.5rem 2rem 4rem; color: #1e293b; line-height: 1.45; }
h1 { margin-bottom: .25rem; } h2 { margin-top: 2rem; border-bottom: 1px solid #e2e8f0; padding-bottom: .2rem; }
h3 { margin: 1.5rem 0 .4rem; font-size: 1.05rem; }
.sub { color: #64748b; font-size: .88rem; margin: 0 0 1rem; }
.banner { padding: .6rem 1rem; border-radius: 6px; font-size: 1.15rem; font-weight: 600; margin: .4rem 0; }
.banner.bad { background: #fecaca; color: #7f1d1d; } .banner.warn { background: #fef3c7; color: #78350f; }
.banner.ok { background: #dcfce7; color: #14532d; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-size: .88rem; }
th, td { border: 1px solid #cbd5e1; padding: .25rem .55rem; text-align: left; vertical-align: top; }
th { background: #f1f5f9; font-weight: 600; }
table.env th { width: 11rem; }
td.reason { max-width: 46rem; }
table.models, table.cells { font-size: .8rem; } table.models thead th, table.cells thead th { overflow-wrap: anywhere; }
table.cells tbody th { font-weight: normal; background: none; white-space: nowrap; }
.wide { overflow-x: auto; max-width: 100%; }
table.cells td { padding: .15rem .35rem; } table.cells td:not([class]) { background: #dcfce7; }
table.cells td:empty { background: none; }
code, pre, .fig { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.fig { font-size: .82em; color: #475569; margin-left: .35rem; }
td.o-pass { background: #dcfce7; }
td.o-fail, td.o-error, td.o-crashed { background: #fecaca; color: #7f1d1d; font-weight: 600; }
td.o-fail .fig, td.o-error .fig, td.o-crashed .fig, td a { color: #7f1d1d; }
td.o-xfail { background: #fef3c7; } td.o-xpass { background: #f3e8ff; font-weight: 600; }
td.o-none { color: #94a3b8; text-align: center; }
.totals span { display: inline-block; margin: 0 .4rem .3rem 0; padding: .1rem .55rem; border-radius: 999px;
               background: #e2e8f0; font-size: .88rem; }
.totals span.t-pass { background: #dcfce7; } .totals span.t-bad { background: #fecaca; font-weight: 600; }
.totals span.t-xfail { background: #fef3c7; }
ul.notrun { margin: .2rem 0 0; padding-left: 1.2rem; font-size: .88rem; color: #475569; }
pre { background: #0f172a; color: #e2e8f0; padding: .75rem 1rem; border-radius: 6px; overflow-x: auto;
      font-size: .82rem; white-space: pre-wrap; }
.meta { margin: 0; padding-left: 1.2rem; font-size: .88rem; }
details { margin: .6rem 0; } summary { cursor: pointer; font-weight: 600; }
details.section > summary { font-size: 1.25rem; margin-top: 2rem; }
figure { margin: .6rem 0 1.4rem; } figcaption { font-size: .8rem; color: #64748b; }
svg.chart { max-width: 100%; height: auto; font-family: inherit; }
"""


def _table(headers: list[str], rows: list[str], css_class: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    cls = f' class="{css_class}"' if css_class else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _row(cells: list[str]) -> str:
    return "<tr>" + "".join(cells) + "</tr>"


def _td(text: Any, css_class: str = "") -> str:
    cls = f' class="{css_class}"' if css_class else ""
    return f"<td{cls}>{escape(str(text))}</td>"


# --------------------------------------------------------------------------- sections


def _head(doc: Doc) -> str:
    banner = "".join(f'<div class="banner {level}">{escape(text)}</div>' for level, text in views.banner(doc))
    badges = []
    for outcome, n in views.outcome_counts(doc).items():
        kind = ("t-pass" if outcome == "pass" else "t-bad" if outcome in (*views.ATTENTION,) and n
                else "t-xfail" if outcome == "xfail" and n else "")
        badges.append(f'<span class="{kind}">{n} {escape(views.TOTAL_WORDS.get(outcome, outcome))}</span>')
    badges.append(f"<span>{views.counted(views.cells_ran(doc), 'cell')} ran</span>")
    return f'{banner}<p class="totals">{"".join(badges)}</p><p class="sub">{escape(views.header_line(doc))}</p>'


def _not_run(doc: Doc) -> str:
    lines = "".join(f"<li>{escape(line)}</li>" for line in views.not_run(doc))
    if not lines:
        return ""
    return (f'<details class="section"><summary>{escape(views.not_run_title(doc))}</summary>'
            f'<ul class="notrun">{lines}</ul></details>')


def _attention(doc: Doc) -> str:
    found = views.attention(doc)
    if not found:
        return "<h2>Needs attention (0)</h2><p><em>Nothing: no failures, errors, crashes or unexpected passes.</em></p>"
    rows = [_row([f'<td class="o-{escape(item["outcome"])}"><a href="#{item["anchor"]}">'
                  f'{escape(views.outcome_label(item["outcome"]))}</a></td>',
                  _td(", ".join(item["checks"])), _td(item["label"]), _td(item["figures"]), _td(item["diagnosis"], "reason")])
            for item in found]
    return (f"<h2>Needs attention ({sum(len(item['results']) for item in found)})</h2>"
            + _table(["outcome", "checks", "cell", "measured / limit", "diagnosis"], rows))


def _known_failures(doc: Doc) -> str:
    groups = views.known_failures(doc)
    if not groups:
        return ""
    kinds = any(g["kind"] for g in groups)
    rows = [_row([_td(g["model"]), *([_td(g["kind"] or "—")] if kinds else []),
                  _td(views.checks_text(g)), _td(", ".join(g["dtypes"])),
                  _td(views.format_ratio(g["worst"]) or "—", "o-xfail"), _td(g["reason"], "reason")]) for g in groups]
    return (f"<h2>{escape(views.known_failures_title(groups))}</h2>"
            f"<p>{escape(views.KNOWN_FAILURES_NOTE)}</p>"
            + _table(["model", *(["kind"] if kinds else []), "checks", "dtypes", "worst Δ/limit", "reason"], rows))


def _excluded(doc: Doc) -> str:
    entries = views.excluded(doc)
    if not entries:
        return ""
    rows = [_row([_td(e["id"]), _td(e["reason"], "reason")]) for e in entries]
    return f"<h2>Excluded architectures ({len(entries)})</h2>" + _table(["id", "reason"], rows)


def _overview(doc: Doc) -> str:
    peaks = views.peak_ratios(doc)
    if not peaks:
        return ""
    checks = ", ".join(views.at_most_checks(doc))
    caption = (f"Each dot is one model in one dtype at its largest |Δ| ÷ limit over {checks} and its caches and devices "
               "(hover a dot for the model). Dots right of the dashed line are over the limit. "
               "Δ = 0 is drawn on the left edge, non-finite values on the right edge.")
    return ("<h2>Parity margin</h2><figure>" + charts.overview_chart(peaks)
            + f"<figcaption>{escape(caption)}</figcaption></figure>")


def _model_cell(summary: dict[str, Any] | None, anchors: dict[tuple[str, str], str]) -> str:
    if summary is None:
        return '<td class="o-none">—</td>'
    text = escape(summary["text"])
    target = anchors.get(summary["first_attention"]) if summary["first_attention"] else None
    if target:
        text = f'<a href="#{target}">{text}</a>'
    return f'<td class="o-{escape(summary["outcome"])}">{text}</td>'


def _models(doc: Doc) -> str:
    rows = views.model_rows(doc)
    if not rows:
        return "<h2>Models (0)</h2><p><em>No results.</em></p>"
    checks, anchors = views.check_names(doc), views.attention_anchors(doc)
    short = [_row([_td(r["label"]), _td(r["cells"]),
                   *(_td(text, f"o-{r['outcome']}" if key == "outcome" else "reason" if key == "not_passing" else "")
                     for key, text in views.model_overview(r).items())]) for r in rows]
    body = [_row([_td(r["label"]), *(_model_cell(r["checks"].get(c), anchors) for c in checks)]) for r in rows]
    note = views.figures_note(doc) + " Worst over each model's cells."
    return (f"<h2>Models ({len(rows)})</h2>" + _table(list(views.MODELS_COLUMNS), short)
            + f'<details><summary>Models × checks</summary><p>{escape(note)}</p><div class="wide">'
            + _table(["model", *checks], body, "models") + "</div></details>")


def _step_charts(doc: Doc) -> str:
    """Per-step parity charts of the models whose parity did not pass (open when one needs attention)."""
    colours = charts.dtype_colours(doc)
    figures = []
    for model, results in charts.parity_series(doc).items():
        outcome = views.worst_outcome([r["outcome"] for r in results])
        if outcome == "pass":
            continue
        peak = views.format_ratio(max((v for r in results if (v := views.ratio(r)) is not None), default=None))
        summary = f"{model}: parity {views.outcome_label(outcome)}" + (f", peak {peak}× limit" if peak else "")
        is_open = " open" if outcome in views.ATTENTION else ""
        figures.append(f'<details id="parity-{escape(model)}"{is_open}><summary>{escape(summary)}</summary><figure>'
                       f"{charts.parity_chart(model, results, colours)}<figcaption>Measured parity Δ per decode step, "
                       "log scale; dashed lines are the tolerances. Δ = 0 is drawn on the bottom edge, non-finite "
                       "values on the top edge.</figcaption></figure></details>")
    if not figures:
        return ""
    return f"<h2>Parity per decode step: models that did not pass ({len(figures)})</h2>" + "".join(figures)


def _details(doc: Doc) -> str:
    found = views.attention(doc)
    if not found:
        return ""
    parts = ["<h2>Details</h2>"]
    for item in found:
        title = f"{views.outcome_label(item['outcome'])}: {', '.join(item['checks'])} · {item['label']}"
        meta = [f"cell <code>{escape(item['cell_id'])}</code>"]
        if item["figures"]:
            first = item["results"][0]
            meta.append(f"measured <code>{escape(first.get('measured', ''))}</code>"
                        f" (limit <code>{escape(first.get('limit', ''))}</code>)")
        if item["reason"]:
            kind = f" ({escape(item['xfail_kind'])})" if item["xfail_kind"] else ""
            meta.append(f"known failure{kind}: {escape(item['reason'])}")
        if item["rerun"]:
            meta.append(f"re-run: <code>{escape(item['rerun'])}</code>")
        items = "".join(f"<li>{m}</li>" for m in meta)
        parts.append(f'<h3 id="{item["anchor"]}">{escape(title)}</h3><ul class="meta">{items}</ul>'
                     f"<pre>{escape(item['message'] or '(no message)')}</pre>")
    return "".join(parts)


def _provenance(doc: Doc) -> str:
    parts = ["<h2>Provenance</h2>"]
    rows = views.provenance_rows(doc)
    if rows:
        keys = ("model", "model_type", "source", "revision", "file")
        parts.append(_table(["model", "model_type", "source", "revision", "weights file"],
                            [_row([_td(r[k]) for k in keys]) for r in rows]))
    synthetic = views.synthetic_count(doc)
    if synthetic:
        parts.append(f"<p>{synthetic} synthetic models: the installed transformers' default configs, shrunk, "
                     "seeded random weights.</p>")
    env = "".join(f"<tr><th>{escape(k)}</th><td><code>{escape(v)}</code></td></tr>" for k, v in views.environment_items(doc))
    parts.append(f'<table class="env"><tbody>{env}</tbody></table>')
    return "".join(parts)


def _cell(result: dict[str, Any] | None, anchors: dict[tuple[str, str], str]) -> str:
    """One per-cell table entry in short markup (end tags omitted; a pass has no class, a check that did not
    run is empty): the default matrix's table has ~4·10⁴ of them."""
    if result is None:
        return "<td>"
    figure = escape(views.figure_text(result))
    if result["outcome"] == "pass" and figure:
        return f"<td>{figure}"
    label = escape(views.outcome_label(result["outcome"]))
    target = anchors.get((result["cell_id"], result["check"]))
    if target:
        label = f"<a href=#{target}>{label}</a>"
    return f"<td class=o-{escape(result['outcome'])}>{label}" + (f" <span class=fig>{figure}</span>" if figure else "")


def _cells(doc: Doc) -> str:
    """The cells with a result that did not pass, per model (the page stays small: the figures of every cell
    are in the Markdown report and the JSON)."""
    rows = views.cell_rows(doc)
    shown = [r for r in rows if any(res["outcome"] != "pass" for res in r["checks"].values())]
    if not shown:
        return f"<p>All {views.counted(len(rows), 'cell')} passed every check they ran.</p>" if rows else ""
    checks, anchors = views.check_names(doc), views.attention_anchors(doc)
    per_model: dict[str, list[dict[str, Any]]] = {}
    for row in shown:
        per_model.setdefault(row["model"], []).append(row)
    bodies = []
    for model, mine in per_model.items():
        lines = [f"<tr><th>{escape(views.cell_label(r))}" + "".join(_cell(r["checks"].get(c), anchors) for c in checks)
                 for r in mine]
        lines[0] = f"<tr><th rowspan={len(mine)}>{escape(model)}" + lines[0].removeprefix("<tr>")
        bodies.append("<tbody>" + "".join(lines))
    head = "".join(f"<th>{escape(h)}</th>" for h in ["model", "dtype · device · cache · attention", *checks])
    note = (f"{views.counted(len(rows) - len(shown), 'other cell')} passed every check they ran; conformance.md and "
            f"conformance.json have the figures of every cell. {views.figures_note(doc)}")
    return (f'<details class="section"><summary>Cells that did not pass every check ({len(shown)} of {len(rows)})'
            f'</summary><p>{escape(note)}</p><div class="wide"><table class="cells"><thead><tr>{head}</tr></thead>'
            f'{"".join(bodies)}</table></div></details>')


def render_html(doc: Doc) -> str:
    """The full report as one self-contained HTML page (no scripts, no external resources)."""
    body = ["<h1>KV cache conformance report</h1>", _head(doc), _attention(doc), _known_failures(doc), _overview(doc),
            _models(doc), _step_charts(doc), _details(doc), _excluded(doc), _provenance(doc), _cells(doc), _not_run(doc)]
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>KV cache conformance report</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
            + "\n".join(part for part in body if part) + "\n</body>\n</html>\n")
