"""Regression view between two conformance reports (a base run and a new run).

Results are keyed by ``(cell_id, check)``. The new run *regressed* when

- a result newly fails (``fail``, ``error`` or ``crashed`` where the base did not);
- a peak parity Δ grew past two bars at once: more than ``factor`` × its base value AND more than
  ``margin`` × its limit (the tolerance the check applied). Growth that stays within ``margin`` of the
  limit is rounding noise between releases (0 → 3.9e-3 under a limit of 8.7e-2 is 4% of it) and is
  counted, not listed; a result without a recorded limit is judged by the factor alone;
- a result that passed in the base is missing from the new report, or the new report says it is
  incomplete (an interrupted run). ``allow_missing`` makes both informational (a shard, a ``-k`` subset).

Everything else is informational. Results that appeared passing (model types new to the release) are
folded into one counted line, so a regression stays visible on one screen. Checks that never ran (e.g.
cuda cells without CUDA) are no results: a report only counts them by reason in ``not_run``.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from tabulate import tabulate

from kvconform.report import BAD_OUTCOMES, Doc, code_fence, md_cell
from kvconform.run_status import incomplete_line

#: Listed change categories in display order, with their headings.
CATEGORIES = {
    "newly_failing": "newly failing",
    "parity_grew": "parity delta grew",
    "lost": "missing (passed in base)",
    "newly_passing": "newly passing",
    "parity_shrank": "parity delta shrank",
    "outcome_changed": "outcome changed",
    "appeared": "appeared",
    "disappeared": "disappeared",
}
#: Folded categories: counted on one line each, not listed.
FOLDED = {
    "appeared_passing": "results appeared and pass",
    "parity_noise": "parity delta moves stayed within {margin:g} of their limit (noise)",
}
#: Categories that make the new run a regression (``lost`` only without ``allow_missing``).
REGRESSIONS = ("newly_failing", "parity_grew", "lost")
DEFAULT_FACTOR = 2.0
DEFAULT_MARGIN = 0.5
_ENV_KEYS = ("kvconform", "torch", "transformers", "accelerate", "git_commit", "date")
#: Outcomes of a result that ran and passed: losing one is a regression.
_PASSED = ("pass", "xpass")

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


def _margin_category(entry: dict[str, Any], factor: float, margin: float) -> str | None:
    """``parity_grew``/``parity_shrank`` for a move beyond ``factor`` that exceeds ``margin`` × the limit,
    ``parity_noise`` for one that stays within it, ``None`` for no such move."""
    base, new, limit = entry["base_peak"], entry["new_peak"], entry["tolerance"]
    if base is None or new is None or base == new:
        return None
    grew = new > base * factor
    if not grew and not base > new * factor:
        return None
    if limit is not None and max(base, new) <= margin * limit:
        return "parity_noise"
    return "parity_grew" if grew else "parity_shrank"


def _presence_category(base: dict[str, Any] | None, new: dict[str, Any] | None) -> str:
    """The category of a result present in only one report."""
    outcome = (new or base or {}).get("outcome")
    if base is None:
        return "appeared_passing" if outcome == "pass" else "appeared"
    return "lost" if outcome in _PASSED else "disappeared"


def diff_documents(base: Doc, new: Doc, factor: float = DEFAULT_FACTOR, margin: float = DEFAULT_MARGIN,
                   allow_missing: bool = False) -> dict[str, Any]:
    """Compare two report documents; entries of each category are sorted by ``(cell_id, check)``.

    Returns ``{"factor", "margin", "allow_missing", "incomplete", "base_environment", "new_environment",
    <category>: [entry, ...]}`` for every listed and folded category; ``incomplete`` is the new report's
    one-line account of an interrupted run, or ``None``.
    """
    if not factor >= 1.0:
        raise ValueError(f"factor must be at least 1, got {factor}")
    if not 0.0 <= margin:
        raise ValueError(f"margin must be at least 0, got {margin}")
    before, after = index_results(base), index_results(new)
    changes: dict[str, list[dict[str, Any]]] = {name: [] for name in (*CATEGORIES, *FOLDED)}
    for key in sorted(before.keys() | after.keys()):
        old, cur = before.get(key), after.get(key)
        entry = _entry(key, old, cur)
        if old is None or cur is None:
            changes[_presence_category(old, cur)].append(entry)
            continue
        for category in (_outcome_category(old["outcome"], cur["outcome"]), _margin_category(entry, factor, margin)):
            if category:
                changes[category].append(entry)
    return {
        "factor": factor,
        "margin": margin,
        "allow_missing": allow_missing,
        "incomplete": incomplete_line(new),
        "base_environment": base.get("environment", {}),
        "new_environment": new.get("environment", {}),
        **changes,
    }


def _regressing(diff: dict[str, Any]) -> list[str]:
    return [name for name in REGRESSIONS if diff[name] and not (name == "lost" and diff["allow_missing"])]


def _incomplete_counts(diff: dict[str, Any]) -> bool:
    return bool(diff["incomplete"]) and not diff["allow_missing"]


def regressions(diff: dict[str, Any]) -> int:
    """Number of regressing changes; an incomplete new report counts as one (neither with ``allow_missing``)."""
    return sum(len(diff[name]) for name in _regressing(diff)) + int(_incomplete_counts(diff))


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
        share = f", {max(entry['new_peak'], entry['base_peak']) / tolerance:.0%} of it" if tolerance else ""
        note = _ratio(entry) + (f" (tolerance {tolerance:.2e}{share})" if tolerance is not None else "")
    else:
        base, new = entry["base_outcome"] or "—", entry["new_outcome"] or "—"
        figures = f"{entry['measured']} / {entry['limit']}" if entry["measured"] or entry["limit"] else ""
        note = "; ".join(p for p in (figures, _first_line(entry["message"])) if p)
    return [CATEGORIES[category], entry["cell_id"], entry["check"], base, new, note]


def diff_rows(diff: dict[str, Any]) -> list[list[str]]:
    """Table rows ``[change, cell, check, base, new, note]`` in category order."""
    return [_row(name, entry) for name in CATEGORIES for entry in diff[name]]


def folded_lines(diff: dict[str, Any]) -> list[str]:
    """One counted line per folded category with entries, naming its commonest models."""
    lines = []
    for name, title in FOLDED.items():
        entries = diff[name]
        if not entries:
            continue
        labels = Counter(e["cell_id"].partition("[")[0] for e in entries)
        common = labels.most_common(3)
        detail = "; ".join(f"{label}: {count}" for label, count in common) + ("; …" if len(labels) > 3 else "")
        lines.append(f"{len(entries)} {title.format(margin=diff['margin'])} — {detail}")
    return lines


def verdict(diff: dict[str, Any]) -> str:
    """One line: whether the new run regressed, and how."""
    counts = [f"{len(diff[name])} {CATEGORIES[name]}" for name in _regressing(diff)]
    if _incomplete_counts(diff):
        counts.append(f"the new report is an {diff['incomplete']}")
    rules = f"factor {diff['factor']:g}, margin {diff['margin']:g}"
    if counts:
        return f"REGRESSED: {', '.join(counts)} ({rules})."
    changed = sum(len(diff[name]) for name in (*CATEGORIES, *FOLDED))
    return f"No regressions ({changed} informational change{'s' if changed != 1 else ''}; {rules})."


_HEADERS = ["change", "cell", "check", "base", "new", "note"]


def render_diff_text(diff: dict[str, Any]) -> str:
    """Plain-text view for a terminal: the table of listed changes, the folded counts, a verdict line."""
    rows = diff_rows(diff)
    table = tabulate(rows, headers=_HEADERS, tablefmt="github", disable_numparse=True) if rows else "No listed differences."
    return "\n\n".join([table, *(["\n".join(folded_lines(diff))] if folded_lines(diff) else []), verdict(diff)]) + "\n"


def _environment_table(diff: dict[str, Any]) -> str:
    base, new = diff["base_environment"], diff["new_environment"]
    rows = [[key, md_cell(base.get(key, "")), md_cell(new.get(key, ""))]
            for key in _ENV_KEYS if key in base or key in new]
    return tabulate(rows, headers=["", "base", "new"], tablefmt="github", disable_numparse=True)


def render_diff_markdown(diff: dict[str, Any]) -> str:
    """Markdown regression report (e.g. for a release note)."""
    sections = ["# KV cache conformance: changes between runs", _environment_table(diff), f"**{verdict(diff)}**"]
    folded = folded_lines(diff)
    if folded:
        sections.append("\n".join(f"- {md_cell(line)}" for line in folded))
    for name, title in CATEGORIES.items():
        if diff[name]:
            rows = [[md_cell(c) for c in _row(name, entry)[1:]] for entry in diff[name]]
            sections += [f"## {title.capitalize()} ({len(diff[name])})",
                         tabulate(rows, headers=_HEADERS[1:], tablefmt="github", disable_numparse=True)]
    for entry in diff["newly_failing"]:
        sections += [f"### {entry['check']} · {entry['cell_id']}", code_fence(entry["message"] or "(no message)")]
    return "\n\n".join(sections) + "\n"
