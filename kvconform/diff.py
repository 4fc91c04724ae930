"""Regression view between two conformance reports (a base run and a new run).

Results are keyed by ``(cell_id, check)``. A run *regressed* when a result newly fails or when its
peak parity Δ grew by more than the given factor; every other change is informational.
"""

from __future__ import annotations

import math
from typing import Any

from tabulate import tabulate

from kvconform.report import BAD_OUTCOMES, Doc, code_fence, md_cell

#: Change categories in display order, with their headings.
CATEGORIES = {
    "newly_failing": "newly failing",
    "parity_grew": "parity delta grew",
    "newly_passing": "newly passing",
    "parity_shrank": "parity delta shrank",
    "outcome_changed": "outcome changed",
    "appeared": "appeared",
    "disappeared": "disappeared",
}
#: Categories that make the new run a regression.
REGRESSIONS = ("newly_failing", "parity_grew")
DEFAULT_FACTOR = 2.0
_ENV_KEYS = ("kvconform", "torch", "transformers", "accelerate", "git_commit", "date")

Key = tuple[str, str]


def index_results(doc: Doc) -> dict[Key, dict[str, Any]]:
    """Results of ``doc`` keyed by ``(cell_id, check)``."""
    return {(r["cell_id"], r["check"]): r for r in doc.get("results", [])}


def parity_peak(result: dict[str, Any] | None) -> float | None:
    """Largest per-step parity Δ of a result (a non-finite step, ``null`` in the report, counts as infinite),
    or ``None`` without data."""
    steps = (result or {}).get("details", {}).get("step_max_abs_delta")
    if not steps:
        return None
    return max(math.inf if v is None or math.isnan(v) else float(v) for v in steps)


def _entry(key: Key, base: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    latest = new or base or {}
    return {
        "cell_id": key[0],
        "check": key[1],
        "base_outcome": base.get("outcome") if base else None,
        "new_outcome": new.get("outcome") if new else None,
        "base_peak": parity_peak(base),
        "new_peak": parity_peak(new),
        "tolerance": latest.get("details", {}).get("tolerance"),
        "measured": latest.get("measured", ""),
        "limit": latest.get("limit", ""),
        "message": latest.get("message", ""),
    }


def _outcome_category(base: str, new: str) -> str | None:
    if base == new:
        return None
    if new in BAD_OUTCOMES and base not in BAD_OUTCOMES:
        return "newly_failing"
    if new == "pass" and base in BAD_OUTCOMES:
        return "newly_passing"
    return "outcome_changed"


def _margin_category(base: float | None, new: float | None, factor: float) -> str | None:
    if base is None or new is None or base == new:
        return None
    if new > base * factor:
        return "parity_grew"
    if base > new * factor:
        return "parity_shrank"
    return None


def diff_documents(base: Doc, new: Doc, factor: float = DEFAULT_FACTOR) -> dict[str, Any]:
    """Compare two report documents; entries of each category are sorted by ``(cell_id, check)``.

    Returns ``{"factor", "base_environment", "new_environment", <category>: [entry, ...]}``.
    """
    if not factor >= 1.0:
        raise ValueError(f"factor must be at least 1, got {factor}")
    before, after = index_results(base), index_results(new)
    changes: dict[str, list[dict[str, Any]]] = {name: [] for name in CATEGORIES}
    for key in sorted(before.keys() | after.keys()):
        old, cur = before.get(key), after.get(key)
        if old is None or cur is None:
            changes["appeared" if old is None else "disappeared"].append(_entry(key, old, cur))
            continue
        for category in (_outcome_category(old["outcome"], cur["outcome"]),
                         _margin_category(parity_peak(old), parity_peak(cur), factor)):
            if category:
                changes[category].append(_entry(key, old, cur))
    return {
        "factor": factor,
        "base_environment": base.get("environment", {}),
        "new_environment": new.get("environment", {}),
        **changes,
    }


def regressions(diff: dict[str, Any]) -> int:
    """Number of regressing changes (newly failing results plus parity deltas that grew)."""
    return sum(len(diff[name]) for name in REGRESSIONS)


# --------------------------------------------------------------------------- rendering


def _fmt_peak(value: float | None) -> str:
    return "—" if value is None else f"{value:.2e}"


def _ratio(entry: dict[str, Any]) -> str:
    base, new = entry["base_peak"], entry["new_peak"]
    if not base or not new or math.isinf(base) or math.isinf(new):
        return f"{_fmt_peak(base)} -> {_fmt_peak(new)}"
    return f"x{new / base:.3g}" if new >= base else f"/{base / new:.3g}"


def _first_line(text: str, width: int = 90) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def _row(category: str, entry: dict[str, Any]) -> list[str]:
    if category.startswith("parity_"):
        base, new = _fmt_peak(entry["base_peak"]), _fmt_peak(entry["new_peak"])
        tolerance = entry["tolerance"]
        note = _ratio(entry) + (f" (tolerance {tolerance:.2e})" if tolerance is not None else "")
    else:
        base, new = entry["base_outcome"] or "—", entry["new_outcome"] or "—"
        figures = f"{entry['measured']} / {entry['limit']}" if entry["measured"] or entry["limit"] else ""
        note = "; ".join(p for p in (figures, _first_line(entry["message"])) if p)
    return [CATEGORIES[category], entry["cell_id"], entry["check"], base, new, note]


def diff_rows(diff: dict[str, Any]) -> list[list[str]]:
    """Table rows ``[change, cell, check, base, new, note]`` in category order."""
    return [_row(name, entry) for name in CATEGORIES for entry in diff[name]]


def verdict(diff: dict[str, Any]) -> str:
    """One line: whether the new run regressed, and how."""
    counts = [f"{len(diff[name])} {CATEGORIES[name]}" for name in REGRESSIONS if diff[name]]
    if counts:
        return f"REGRESSED: {', '.join(counts)} (factor {diff['factor']:g})."
    changed = sum(len(diff[name]) for name in CATEGORIES)
    return f"No regressions ({changed} informational change{'s' if changed != 1 else ''})."


_HEADERS = ["change", "cell", "check", "base", "new", "note"]


def render_diff_text(diff: dict[str, Any]) -> str:
    """Plain-text view for a terminal: the table of changes and a verdict line."""
    rows = diff_rows(diff)
    table = tabulate(rows, headers=_HEADERS, tablefmt="github", disable_numparse=True) if rows else "No differences."
    return f"{table}\n\n{verdict(diff)}\n"


def _environment_table(diff: dict[str, Any]) -> str:
    base, new = diff["base_environment"], diff["new_environment"]
    rows = [[key, md_cell(base.get(key, "")), md_cell(new.get(key, ""))]
            for key in _ENV_KEYS if key in base or key in new]
    return tabulate(rows, headers=["", "base", "new"], tablefmt="github", disable_numparse=True)


def render_diff_markdown(diff: dict[str, Any]) -> str:
    """Markdown regression report (e.g. for a release note)."""
    sections = ["# KV cache conformance: changes between runs", _environment_table(diff), f"**{verdict(diff)}**"]
    for name, title in CATEGORIES.items():
        if diff[name]:
            rows = [[md_cell(c) for c in _row(name, entry)[1:]] for entry in diff[name]]
            sections += [f"## {title.capitalize()} ({len(diff[name])})",
                         tabulate(rows, headers=_HEADERS[1:], tablefmt="github", disable_numparse=True)]
    for entry in diff["newly_failing"]:
        sections += [f"### {entry['check']} · {entry['cell_id']}", code_fence(entry["message"] or "(no message)")]
    return "\n\n".join(sections) + "\n"
