"""Self-contained HTML rendering of a conformance report, with inline SVG parity charts.

The page has no scripts and loads nothing from the network: styles are inline and each chart is
an SVG generated here (log-scale parity Δ per decode step, one line per dtype plus its tolerance).
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from kvconform.report import (
    BAD_OUTCOMES,
    TOTAL_WORDS,
    Doc,
    cell_rows,
    skipped_cells,
    check_names,
    environment_items,
    failures,
    outcome_counts,
    outcome_label,
    sorted_results,
)
from kvconform.run_status import banners

#: Fixed colours for common dtypes; others take the next free colour of the fallback palette.
DTYPE_COLOURS = {"float32": "#2563eb", "bfloat16": "#ea580c", "float16": "#059669"}
FALLBACK_COLOURS = ("#9333ea", "#0891b2", "#ca8a04", "#db2777", "#4b5563")
MARKERS = ("circle", "square", "diamond", "triangle")

# Chart geometry (pixels): plot area inside the margins, legend to the right of it.
WIDTH, MIN_HEIGHT, LEFT, RIGHT, TOP, BOTTOM, LEGEND_ROW = 860, 300, 72, 290, 24, 48, 18

CSS = """
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       margin: 0 auto; max-width: 1280px; padding: 1.5rem 2rem 4rem; color: #1e293b; line-height: 1.45; }
h1 { margin-bottom: .25rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #e2e8f0; padding-bottom: .2rem; }
h3 { margin: 1.5rem 0 .4rem; font-size: 1.05rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-size: .88rem; }
th, td { border: 1px solid #cbd5e1; padding: .28rem .6rem; text-align: left; vertical-align: top; }
th { background: #f1f5f9; font-weight: 600; }
table.env th { width: 11rem; }
code, pre, .fig { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.fig { font-size: .82em; color: #475569; margin-left: .35rem; }
td.o-pass { background: #dcfce7; }
td.o-fail, td.o-error, td.o-crashed { background: #fecaca; color: #7f1d1d; font-weight: 600; }
td.o-fail .fig, td.o-error .fig, td.o-crashed .fig, td a { color: #7f1d1d; }
td.o-skip { background: #f1f5f9; color: #64748b; }
td.o-xfail { background: #fef3c7; }
td.o-none { color: #94a3b8; text-align: center; }
.totals span { display: inline-block; margin: 0 .4rem .3rem 0; padding: .1rem .55rem; border-radius: 999px;
               background: #e2e8f0; font-size: .88rem; }
.totals span.t-pass { background: #dcfce7; } .totals span.t-bad { background: #fecaca; font-weight: 600; }
pre { background: #0f172a; color: #e2e8f0; padding: .75rem 1rem; border-radius: 6px; overflow-x: auto;
      font-size: .82rem; white-space: pre-wrap; }
.meta { margin: 0; padding-left: 1.2rem; font-size: .88rem; }
figure { margin: 1rem 0 1.8rem; } figcaption { font-size: .8rem; color: #64748b; }
svg.chart { max-width: 100%; height: auto; font-family: inherit; }
p.banner { background: #fef3c7; border: 1px solid #f59e0b; padding: .6rem 1rem; border-radius: 6px; }
"""


# --------------------------------------------------------------------------- tables


def _table(headers: list[str], rows: list[str], css_class: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    cls = f' class="{css_class}"' if css_class else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _anchor(result: dict[str, Any]) -> str:
    """Fragment id of a result's failure section."""
    return escape(f"failure-{result.get('check', '')}-{result.get('cell_id', '')}".replace(" ", "_"))


def _check_cell(result: dict[str, Any] | None) -> str:
    if result is None:
        return '<td class="o-none">—</td>'
    outcome = result.get("outcome", "")
    message = (result.get("message") or "").strip()
    tip = " — ".join(p for p in (f"limit {result['limit']}" if result.get("limit") else "",
                                 message.splitlines()[0] if message else "") if p)
    title = f' title="{escape(tip)}"' if tip else ""
    label = escape(outcome_label(outcome))
    if outcome in BAD_OUTCOMES:
        label = f'<a href="#{_anchor(result)}">{label}</a>'
    figure = f'<span class="fig">{escape(result.get("measured", ""))}</span>' if result.get("measured") else ""
    return f'<td class="o-{escape(outcome)}"{title}>{label}{figure}</td>'



def _summary_table(doc: Doc) -> str:
    checks = check_names(doc)
    rows = []
    for row in cell_rows(doc):
        coords = "".join(f"<td>{escape(row[k])}</td>" for k in ("model", "dtype", "device", "cache"))
        rows.append(f"<tr>{coords}{''.join(_check_cell(row['checks'].get(c)) for c in checks)}</tr>")
    notes = "".join(f"<p><em>{count} cells not run: {escape(reason)}</em></p>" for reason, count in skipped_cells(doc))
    if not rows:
        return notes or "<p><em>No results.</em></p>"
    return _table(["model", "dtype", "device", "cache", *checks], rows, "summary") + notes


def _totals(doc: Doc) -> str:
    badges = []
    for outcome, n in outcome_counts(doc).items():
        kind = "t-pass" if outcome == "pass" else "t-bad" if outcome in BAD_OUTCOMES and n else ""
        badges.append(f'<span class="{kind}">{n} {escape(TOTAL_WORDS.get(outcome, outcome))}</span>')
    return f'<p class="totals">{"".join(badges)}</p>'


def _environment(doc: Doc) -> str:
    rows = [f"<tr><th>{escape(k)}</th><td><code>{escape(v)}</code></td></tr>" for k, v in environment_items(doc)]
    return f'<table class="env"><tbody>{"".join(rows)}</tbody></table>'


def _excluded(doc: Doc) -> str:
    entries = sorted(doc.get("excluded", []), key=lambda e: e.get("id", ""))
    if not entries:
        return "<p><em>None.</em></p>"
    rows = ["<tr>" + "".join(f"<td>{escape(str(e.get(k, '')))}</td>" for k in ("id", "model_type", "reason")) + "</tr>"
            for e in entries]
    return _table(["id", "model_type", "reason"], rows)


def _failure(result: dict[str, Any]) -> str:
    title = f"{outcome_label(result['outcome'])}: {result.get('check', '')} · {result.get('cell_id', '')}"
    meta = []
    if result.get("measured") or result.get("limit"):
        meta.append(f"measured <code>{escape(result.get('measured', ''))}</code>"
                    f" (limit <code>{escape(result.get('limit', ''))}</code>)")
    meta += [f"{key}: <code>{escape(result[key])}</code>" for key in ("source", "nodeid") if result.get(key)]
    items = "".join(f"<li>{m}</li>" for m in meta)
    return (f'<h3 id="{_anchor(result)}">{escape(title)}</h3><ul class="meta">{items}</ul>'
            f"<pre>{escape(result.get('message', '') or '(no message)')}</pre>")


# --------------------------------------------------------------------------- parity charts


def _fmt(value: float) -> str:
    return "inf" if math.isinf(value) else "nan" if math.isnan(value) else f"{value:.2e}"


def parity_series(doc: Doc) -> dict[str, list[dict[str, Any]]]:
    """Parity results with per-step deltas, grouped by model (sorted)."""
    series: dict[str, list[dict[str, Any]]] = {}
    for result in sorted_results(doc):
        steps = result.get("details", {}).get("step_max_abs_delta")
        if result.get("check") == "parity" and steps:
            series.setdefault(result["model"], []).append(result)
    return series


def dtype_colours(doc: Doc) -> dict[str, str]:
    """A stable colour per dtype across all charts of the document."""
    dtypes = sorted({r.get("dtype", "") for r in doc.get("results", [])})
    fallback = iter(FALLBACK_COLOURS * (len(dtypes) // len(FALLBACK_COLOURS) + 1))
    return {d: DTYPE_COLOURS[d] if d in DTYPE_COLOURS else next(fallback) for d in dtypes}


def _log_range(values: list[float]) -> tuple[int, int]:
    """Decade exponents ``(lo, hi)`` covering the positive finite values.

    The range extends a decade down when zeros occur and a decade up when inf/nan occur, so that
    those (drawn on the bottom/top edge) never sit on a real value such as a tolerance.
    """
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    if not positive:
        return -8, 0
    lo, hi = math.floor(math.log10(min(positive))), math.ceil(math.log10(max(positive)))
    if any(v <= 0 for v in values):
        lo -= 1
    if not all(math.isfinite(v) for v in values):
        hi += 1
    return lo, max(hi, lo + 1)


def _marker(shape: str, x: float, y: float, colour: str, tip: str) -> str:
    title = f"<title>{escape(tip)}</title>"
    if shape == "square":
        return f'<rect x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6" fill="{colour}">{title}</rect>'
    if shape == "diamond":
        pts = f"{x:.1f},{y - 4:.1f} {x + 4:.1f},{y:.1f} {x:.1f},{y + 4:.1f} {x - 4:.1f},{y:.1f}"
        return f'<polygon points="{pts}" fill="{colour}">{title}</polygon>'
    if shape == "triangle":
        pts = f"{x:.1f},{y - 4:.1f} {x + 4:.1f},{y + 3:.1f} {x - 4:.1f},{y + 3:.1f}"
        return f'<polygon points="{pts}" fill="{colour}">{title}</polygon>'
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}">{title}</circle>'


def _headroom(peak: float, tolerance: float | None) -> str:
    if tolerance is None or tolerance <= 0:
        return f"peak {_fmt(peak)}"
    ratio = peak / tolerance
    if ratio >= 1:
        return f"peak {_fmt(peak)} = {ratio:.3g}× tol" if math.isfinite(ratio) else f"peak {_fmt(peak)}"
    return f"peak {_fmt(peak)} = {'<1%' if ratio < 0.01 else f'{ratio:.0%}'} of tol"


class _Axes:
    """Maps decode steps and log-scale deltas to pixel coordinates; ``values`` must all fit the y range."""

    def __init__(self, steps: int, values: list[float], height: int) -> None:
        self.steps, (self.lo, self.hi) = steps, _log_range(values)
        self.zero_at_bottom = any(v <= 0 for v in values)
        self.inf_at_top = not all(math.isfinite(v) for v in values)
        self.x0, self.x1, self.y0, self.y1 = LEFT, WIDTH - RIGHT, TOP, height - BOTTOM

    def x(self, index: int) -> float:
        if self.steps <= 1:
            return (self.x0 + self.x1) / 2
        return self.x0 + index * (self.x1 - self.x0) / (self.steps - 1)

    def y(self, value: float) -> float:
        """Zero and negative values sit on the bottom edge, non-finite ones on the top edge."""
        exponent = math.log10(value) if value > 0 and math.isfinite(value) else (self.lo if value <= 0 else self.hi)
        exponent = min(max(exponent, self.lo), self.hi)
        return self.y1 - (exponent - self.lo) * (self.y1 - self.y0) / (self.hi - self.lo)

    def grid(self) -> list[str]:
        parts = [f'<rect x="{self.x0}" y="{self.y0}" width="{self.x1 - self.x0}" height="{self.y1 - self.y0}" '
                 'fill="#ffffff" stroke="#94a3b8"/>']
        every = max(1, math.ceil((self.hi - self.lo) / 8))
        for exponent in range(self.lo, self.hi + 1, every):
            y = self.y(10.0 ** exponent)
            parts.append(f'<line x1="{self.x0}" x2="{self.x1}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e2e8f0"/>')
            label = ("0" if exponent == self.lo and self.zero_at_bottom
                     else "∞" if exponent == self.hi and self.inf_at_top else f"1e{exponent}")
            parts.append(f'<text x="{self.x0 - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
                         f'fill="#475569">{label}</text>')
        stride = max(1, math.ceil(self.steps / 10))
        for index in range(0, self.steps, stride):
            x = self.x(index)
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{self.y1}" y2="{self.y1 + 4}" stroke="#94a3b8"/>')
            parts.append(f'<text x="{x:.1f}" y="{self.y1 + 16}" text-anchor="middle" font-size="11" '
                         f'fill="#475569">{index + 1}</text>')
        mid_y = (self.y0 + self.y1) / 2
        parts.append(f'<text x="{(self.x0 + self.x1) / 2:.1f}" y="{self.y1 + 36}" text-anchor="middle" '
                     'font-size="12" fill="#1e293b">decode step</text>')
        parts.append(f'<text transform="translate(16 {mid_y:.1f}) rotate(-90)" text-anchor="middle" '
                     'font-size="12" fill="#1e293b">max |Δ| per step (log)</text>')
        return parts


def _series_label(result: dict[str, Any], detailed: bool) -> str:
    label = result.get("dtype", "")
    if detailed:
        label += f" · {result.get('device', '')} · {result.get('cache', '')}"
    if result.get("outcome") != "pass":
        label += f" ({outcome_label(result.get('outcome', ''))})"
    return label


def _legend_line(x: float, y: float, colour: str, dashed: bool) -> str:
    style = 'stroke-width="1.5" stroke-dasharray="6 4"' if dashed else 'stroke-width="2"'
    return f'<line x1="{x}" x2="{x + 24}" y1="{y:.1f}" y2="{y:.1f}" stroke="{colour}" {style}/>'


def _legend_text(x: float, y: float, text: str, small: bool = False) -> str:
    size, fill = ("11", "#64748b") if small else ("12", "#1e293b")
    return f'<text x="{x + 32}" y="{y + 4:.1f}" font-size="{size}" fill="{fill}">{escape(text)}</text>'


def _series(axes: _Axes, result: dict[str, Any], colour: str, shape: str, label: str) -> list[str]:
    """The polyline of one parity result, with a marker (and hover tooltip) per decode step."""
    steps = [float(v) for v in result["details"]["step_max_abs_delta"]]
    points = [(axes.x(i), axes.y(v)) for i, v in enumerate(steps)]
    line = (f'<polyline class="series" fill="none" stroke="{colour}" stroke-width="2" '
            f'points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in points)}"/>')
    return [line] + [_marker(shape, x, y, colour, f"{label}, step {i + 1}: {_fmt(v)}")
                     for i, ((x, y), v) in enumerate(zip(points, steps))]


def parity_chart(model: str, results: list[dict[str, Any]], colours: dict[str, str]) -> str:
    """An SVG chart of one model's parity Δ per decode step, with each dtype's tolerance dashed."""
    tolerances = sorted({(r.get("dtype", ""), r["details"]["tolerance"]) for r in results
                         if r["details"].get("tolerance") is not None})
    values = [float(v) for r in results for v in r["details"]["step_max_abs_delta"]]
    height = max(MIN_HEIGHT, TOP + LEGEND_ROW * (2 * len(results) + len(tolerances) + 1))
    n_steps = max(len(r["details"]["step_max_abs_delta"]) for r in results)
    axes = _Axes(n_steps, values + [t for _, t in tolerances], height)
    dtypes = [r.get("dtype", "") for r in results]
    detailed = len(set(dtypes)) < len(dtypes)  # several cells share a dtype: name device and cache too
    parts = [f'<svg class="chart" role="img" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}">'
             f"<title>Parity Δ per decode step: {escape(model)}</title>", *axes.grid()]
    for dtype, tolerance in tolerances:
        y = axes.y(tolerance)
        parts.append(f'<line class="tolerance" x1="{axes.x0}" x2="{axes.x1}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="{colours[dtype]}" stroke-width="1.5" stroke-dasharray="6 4"/>')
    legend_x, legend_y = WIDTH - RIGHT + 20, TOP + 8
    for index, result in enumerate(results):
        dtype, label = dtypes[index], _series_label(result, detailed)
        colour, shape = colours[dtype], MARKERS[dtypes[:index].count(dtype) % len(MARKERS)]
        peak = max(math.inf if math.isnan(v) else float(v) for v in result["details"]["step_max_abs_delta"])
        parts += _series(axes, result, colour, shape, label)
        parts += [_legend_line(legend_x, legend_y, colour, dashed=False),
                  _marker(shape, legend_x + 12, legend_y, colour, label),
                  _legend_text(legend_x, legend_y, label),
                  _legend_text(legend_x, legend_y + LEGEND_ROW * 0.8,
                               _headroom(peak, result["details"].get("tolerance")), small=True)]
        legend_y += 2 * LEGEND_ROW
    for dtype, tolerance in tolerances:
        parts += [_legend_line(legend_x, legend_y, colours[dtype], dashed=True),
                  _legend_text(legend_x, legend_y, f"{dtype} tolerance {_fmt(tolerance)}")]
        legend_y += LEGEND_ROW
    return "".join(parts) + "</svg>"


def _charts(doc: Doc) -> str:
    colours = dtype_colours(doc)
    figures = []
    for model, results in parity_series(doc).items():
        model_type = results[0].get("model_type", "")
        caption = (f"{escape(model)} ({escape(model_type)}): measured parity Δ per decode step, log scale; "
                   "dashed lines are the tolerances. Δ = 0 is drawn on the bottom edge, inf/nan on the top edge.")
        figures.append(f'<figure id="parity-{escape(model)}"><h3>{escape(model)}</h3>'
                       f"{parity_chart(model, results, colours)}<figcaption>{caption}</figcaption></figure>")
    return "".join(figures) or "<p><em>No parity measurements.</em></p>"


# --------------------------------------------------------------------------- page


def render_html(doc: Doc) -> str:
    """The full report as one self-contained HTML page (no scripts, no external resources)."""
    failed = failures(doc)
    failure_html = "".join(map(_failure, failed)) or "<p><em>None.</em></p>"
    body = [
        "<h1>KV cache conformance report</h1>",
        *(f'<p class="banner"><strong>{escape(note)}</strong></p>' for note in banners(doc)),
        _environment(doc),
        "<h2>Summary</h2>", _totals(doc), _summary_table(doc),
        "<h2>Parity margin per decode step</h2>", _charts(doc),
        "<h2>Excluded architectures</h2>", _excluded(doc),
        f"<h2>Failures ({len(failed)})</h2>", failure_html,
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>KV cache conformance report</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")
