"""Inline SVG charts of a report (no scripts): an overview of every model's peak Δ ÷ limit per dtype,
and, per model, the parity Δ per decode step against each dtype's tolerance (log scales).
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from kvconform.report import views
from kvconform.report.document import Doc

#: Fixed colours for common dtypes; others take the next free colour of the fallback palette.
DTYPE_COLOURS = {"float32": "#2563eb", "bfloat16": "#ea580c", "float16": "#059669"}
FALLBACK_COLOURS = ("#9333ea", "#0891b2", "#ca8a04", "#db2777", "#4b5563")
MARKERS = ("circle", "square", "diamond", "triangle")

# Chart geometry (pixels): plot area inside the margins, legend to the right of it.
WIDTH, MIN_HEIGHT, LEFT, RIGHT, TOP, BOTTOM, LEGEND_ROW = 860, 300, 72, 290, 24, 48, 18
#: Average width (pixels) of a 12 px legend character, with a margin.
LEGEND_CHAR_PX = 7.2


# --------------------------------------------------------------------------- parity charts


def _fmt(value: float) -> str:
    return "inf" if math.isinf(value) else "nan" if math.isnan(value) else f"{value:.2e}"


def parity_series(doc: Doc) -> dict[str, list[dict[str, Any]]]:
    """Parity results with per-step deltas, grouped by model (sorted)."""
    series: dict[str, list[dict[str, Any]]] = {}
    for result in views.sorted_results(doc):
        if result.get("check") == "parity" and result.get("details", {}).get("step_max_abs_delta"):
            series.setdefault(result["model"], []).append(result)
    return series


def step_deltas(result: dict[str, Any]) -> list[float]:
    """Per-step parity Δ of a result; a non-finite step (``null`` in the report) is ``inf``."""
    return [math.inf if v is None else float(v) for v in result["details"]["step_max_abs_delta"]]


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
                         f'fill="#475569">{index}</text>')
        mid_y = (self.y0 + self.y1) / 2
        parts.append(f'<text x="{(self.x0 + self.x1) / 2:.1f}" y="{self.y1 + 36}" text-anchor="middle" '
                     'font-size="12" fill="#1e293b">decode step (0 = prefill)</text>')
        parts.append(f'<text transform="translate(16 {mid_y:.1f}) rotate(-90)" text-anchor="middle" '
                     'font-size="12" fill="#1e293b">max |Δ| per step (log)</text>')
        return parts


def _series_label(result: dict[str, Any], detailed: bool) -> str:
    label = views.cell_label(result) if detailed else result.get("dtype", "")
    if result.get("outcome") != "pass":
        label += f" ({views.outcome_label(result.get('outcome', ''))})"
    return label


def legend_width(labels: list[str]) -> int:
    """Pixels right of the plot that fit the longest legend label (line, marker, text and margins)."""
    return math.ceil(20 + 32 + LEGEND_CHAR_PX * max((len(label) for label in labels), default=0) + 12)


def _legend_line(x: float, y: float, colour: str, dashed: bool) -> str:
    style = 'stroke-width="1.5" stroke-dasharray="6 4"' if dashed else 'stroke-width="2"'
    return f'<line x1="{x}" x2="{x + 24}" y1="{y:.1f}" y2="{y:.1f}" stroke="{colour}" {style}/>'


def _legend_text(x: float, y: float, text: str, small: bool = False) -> str:
    size, fill = ("11", "#64748b") if small else ("12", "#1e293b")
    return f'<text x="{x + 32}" y="{y + 4:.1f}" font-size="{size}" fill="{fill}">{escape(text)}</text>'


def _series(axes: _Axes, result: dict[str, Any], colour: str, shape: str, label: str) -> list[str]:
    """The polyline of one parity result, with a marker (and hover tooltip) per decode step."""
    steps = step_deltas(result)
    points = [(axes.x(i), axes.y(v)) for i, v in enumerate(steps)]
    line = (f'<polyline class="series" fill="none" stroke="{colour}" stroke-width="2" '
            f'points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in points)}"/>')
    return [line] + [_marker(shape, x, y, colour, f"{label}, step {i}: {_fmt(v)}")
                     for i, ((x, y), v) in enumerate(zip(points, steps, strict=False))]


def parity_chart(model: str, results: list[dict[str, Any]], colours: dict[str, str]) -> str:
    """An SVG chart of one model's parity Δ per decode step, with each dtype's tolerance dashed."""
    tolerances = sorted({(r.get("dtype", ""), r["details"]["tolerance"]) for r in results
                         if r["details"].get("tolerance") is not None})
    values = [v for r in results for v in step_deltas(r)]
    height = max(MIN_HEIGHT, TOP + LEGEND_ROW * (2 * len(results) + len(tolerances) + 1))
    n_steps = max(len(r["details"]["step_max_abs_delta"]) for r in results)
    axes = _Axes(n_steps, values + [t for _, t in tolerances], height)
    dtypes = [r.get("dtype", "") for r in results]
    detailed = len(set(dtypes)) < len(dtypes)  # several cells share a dtype: name device, cache and attention too
    labels = [_series_label(r, detailed) for r in results]
    width = WIDTH + max(0, legend_width(labels + [f"{d} tolerance {_fmt(t)}" for d, t in tolerances]) - RIGHT)
    parts = [f'<svg class="chart" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
             f"<title>Parity Δ per decode step: {escape(model)}</title>", *axes.grid()]
    for dtype, tolerance in tolerances:
        y = axes.y(tolerance)
        parts.append(f'<line class="tolerance" x1="{axes.x0}" x2="{axes.x1}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="{colours[dtype]}" stroke-width="1.5" stroke-dasharray="6 4"/>')
    legend_x, legend_y = WIDTH - RIGHT + 20, TOP + 8
    for index, result in enumerate(results):
        dtype, label = dtypes[index], labels[index]
        colour, shape = colours[dtype], MARKERS[dtypes[:index].count(dtype) % len(MARKERS)]
        peak = max(math.inf if math.isnan(v) else v for v in step_deltas(result))
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


# --------------------------------------------------------------------------- overview: peak Δ ÷ limit per model and dtype

#: Overview geometry (pixels): one row per dtype, a log-scale x axis of Δ ÷ limit.
OVERVIEW_WIDTH, OVERVIEW_ROW, OVERVIEW_LEFT, OVERVIEW_RIGHT, OVERVIEW_TOP, OVERVIEW_BOTTOM = 1000, 88, 84, 24, 22, 66
DOT = 3.0
#: Width (pixels) of the 11 px "limit" label, with a margin.
LIMIT_LABEL_PX = 30
#: Dot colour per worst outcome (the rows already name the dtype).
OUTCOME_COLOURS = {"pass": "#2563eb", "xfail": "#d97706", "xpass": "#9333ea", "fail": "#dc2626", "error": "#dc2626",
                   "crashed": "#dc2626"}


def _swarm_offsets(xs: list[float], half_height: float) -> list[float]:
    """Vertical offsets that stack dots falling into the same pixel bin: 0, +d, −d, +2d, … (wrapping)."""
    step, slots = 2 * DOT + 1, max(1, int(half_height // (2 * DOT + 1)))
    used: dict[int, int] = {}
    offsets = []
    for x in xs:
        n = used.get(int(x // step), 0)
        used[int(x // step)] = n + 1
        level = ((n + 1) // 2) % (slots + 1)
        offsets.append(level * step * (1 if n % 2 else -1))
    return offsets


def overview_chart(peaks: list[dict[str, Any]]) -> str:
    """One SVG: a row per dtype, a dot per model at its peak Δ ÷ limit (log x), the limit dashed at 1."""
    dtypes = views.dtype_order(p["dtype"] for p in peaks)
    lo, hi = _log_range([p["ratio"] for p in peaks] + [1.0])
    x0, x1 = OVERVIEW_LEFT, OVERVIEW_WIDTH - OVERVIEW_RIGHT
    height = OVERVIEW_TOP + OVERVIEW_ROW * len(dtypes) + OVERVIEW_BOTTOM
    y_bottom = OVERVIEW_TOP + OVERVIEW_ROW * len(dtypes)

    def x_of(value: float) -> float:
        exponent = math.log10(value) if 0 < value < math.inf else (lo if value <= 0 else hi)
        return x0 + (min(max(exponent, lo), hi) - lo) * (x1 - x0) / (hi - lo)

    parts = [f'<svg class="chart overview" role="img" width="{OVERVIEW_WIDTH}" height="{height}" '
             f'viewBox="0 0 {OVERVIEW_WIDTH} {height}"><title>Peak Δ ÷ limit per model and dtype</title>',
             f'<rect x="{x0}" y="{OVERVIEW_TOP}" width="{x1 - x0}" height="{y_bottom - OVERVIEW_TOP}" fill="#ffffff" stroke="#94a3b8"/>']
    zeros, infinite = any(p["ratio"] <= 0 for p in peaks), any(p["ratio"] == math.inf for p in peaks)
    for exponent in range(lo, hi + 1):
        x = x_of(10.0 ** exponent)
        label = "0" if exponent == lo and zeros else "∞" if exponent == hi and infinite else f"1e{exponent}"
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{OVERVIEW_TOP}" y2="{y_bottom}" stroke="#e2e8f0"/>'
                     f'<text x="{x:.1f}" y="{y_bottom + 15}" text-anchor="middle" font-size="11" fill="#475569">{label}</text>')
    limit_x = x_of(1.0)
    fits = limit_x + 4 + LIMIT_LABEL_PX <= OVERVIEW_WIDTH  # else the label goes left of the line, never clipped
    label_x, anchor = (limit_x + 4, "start") if fits else (limit_x - 4, "end")
    parts.append(f'<line x1="{limit_x:.1f}" x2="{limit_x:.1f}" y1="{OVERVIEW_TOP - 6}" y2="{y_bottom}" stroke="#dc2626" '
                 f'stroke-width="1.5" stroke-dasharray="6 4"/><text x="{label_x:.1f}" y="{OVERVIEW_TOP - 8}" '
                 f'text-anchor="{anchor}" font-size="11" fill="#dc2626">limit</text>')
    parts.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{y_bottom + 34}" text-anchor="middle" font-size="12" fill="#1e293b">'
                 "peak |Δ| ÷ limit (log scale; pass ≤ 1)</text>")
    for row, dtype in enumerate(dtypes):
        centre = OVERVIEW_TOP + OVERVIEW_ROW * (row + 0.5)
        parts.append(f'<text x="{x0 - 8}" y="{centre + 4:.1f}" text-anchor="end" font-size="12" fill="#1e293b">'
                     f"{escape(dtype)}</text>")
        mine = sorted((p for p in peaks if p["dtype"] == dtype), key=lambda p: (p["ratio"], p["model"]))
        xs = [x_of(p["ratio"]) for p in mine]
        for peak, x, dy in zip(mine, xs, _swarm_offsets(xs, OVERVIEW_ROW / 2 - DOT - 2), strict=False):
            colour = OUTCOME_COLOURS.get(peak["outcome"], "#475569")
            tip = (f"{peak['model']} · {dtype}: peak Δ ÷ limit {views.format_ratio(peak['ratio'])} "
                   f"({views.outcome_label(peak['outcome'])})")
            parts.append(f'<circle cx="{x:.1f}" cy="{centre + dy:.1f}" r="{DOT}" fill="{colour}" fill-opacity="0.8">'
                         f"<title>{escape(tip)}</title></circle>")
    legend = [("pass", OUTCOME_COLOURS["pass"]), ("xfail", OUTCOME_COLOURS["xfail"]), ("XPASS", OUTCOME_COLOURS["xpass"]),
              ("FAIL / error / crashed", OUTCOME_COLOURS["fail"])]
    for i, (label, colour) in enumerate(legend):
        lx = x0 + i * 170
        parts.append(f'<circle cx="{lx + 4}" cy="{y_bottom + 52}" r="{DOT + 1}" fill="{colour}"/>'
                     f'<text x="{lx + 14}" y="{y_bottom + 56}" font-size="11" fill="#475569">{escape(label)}</text>')
    return "".join(parts) + "</svg>"
