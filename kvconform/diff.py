"""Regression view between two conformance reports (a base run and a new run).

Results are keyed by ``(cell_id, check)``. The new run *regressed* when

- a result newly fails (``fail``, ``error`` or ``crashed`` where the base did not);
- a peak parity Δ grew past two bars at once: more than ``factor`` × its base value AND more than
  ``margin`` × its limit (the tolerance the check applied). Growth that stays within ``margin`` of the
  limit is rounding noise between releases (0 → 3.9e-3 under a limit of 8.7e-2 is 4% of it) and is
  counted, not listed; a result without a recorded limit is judged by the factor alone;
- a result that passed in the base is missing from the new report although the new run planned it (or
  recorded no reason: a narrower matrix or option), unless ``allow_missing`` (a shard, a ``-k`` subset);
- the new report says its run is incomplete (interrupted, stopped early, planned checks that never ran):
  a run cut short is never read as green, ``allow_missing`` or not.

A result the new run did not plan is information, with the reason its report records (``kvconform.plan``):
the release changed the model's default attention so the cell became a ``variant_dtypes`` variant,
transformers no longer runs that cache for the model, the model is excluded. Missing results are folded into
counts by reason, and results that appeared passing (model types new to the release) into one counted line,
so a regression stays visible on one screen. Checks that never ran in the base (e.g. cuda cells without
CUDA) are no results: a report only counts them by reason in ``not_run``.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from tabulate import tabulate

from kvconform.checks.table import CHECKS
from kvconform.plan import PlanIndex
from kvconform.report import BAD_OUTCOMES, Doc, code_fence, md_cell
from kvconform.run_status import incomplete_line

#: Listed change categories in display order, with their headings.
CATEGORIES = {
    "newly_failing": "newly failing",
    "parity_grew": "parity delta grew",
    "newly_passing": "newly passing",
    "parity_shrank": "parity delta shrank",
    "outcome_changed": "outcome changed",
    "appeared": "appeared",
}
#: Results missing from the new report, folded into counts by reason (``lost`` regresses).
MISSING = {
    "lost": "missing (passed in base)",
    "disappeared": "missing (did not pass in base)",
    "not_planned": "not planned by the new run",
}
#: Folded categories: counted on one line each, not listed.
FOLDED = {
    **MISSING,
    "appeared_passing": "results appeared and pass",
    "parity_noise": "parity delta moves stayed within {margin:g} of their limit (noise)",
}
#: Categories that make the new run a regression (``lost`` only without ``allow_missing``).
REGRESSIONS = ("newly_failing", "parity_grew", "lost")
#: Reasons listed for missing results before the rest is counted on one line.
MAX_REASONS = 8
#: Cells whose missing results the Markdown report lists by name.
MAX_LOST_CELLS = 50
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


def _missing_entry(entry: dict[str, Any], base: dict[str, Any], before: PlanIndex, after: PlanIndex) -> str:
    """Set the entry's ``reason`` (and the model's default-attention change) for a result only the base has;
    return its category."""
    model = base.get("model") or entry["cell_id"].partition("[")[0]
    absence = after.absence((entry["cell_id"], entry["check"]), model, lambda check: CHECKS[check].scope()
                            if check in CHECKS else f"{check} is no check of this kvconform")
    entry["reason"] = absence.reason
    old, new = before.models.get(model), after.models.get(model)
    entry["attention_change"] = f"{model} {old} -> {new}" if old and new and old != new else None
    if not absence.planned:
        return "not_planned"
    return "lost" if base["outcome"] in _PASSED else "disappeared"


def diff_documents(base: Doc, new: Doc, factor: float = DEFAULT_FACTOR, margin: float = DEFAULT_MARGIN,
                   allow_missing: bool = False) -> dict[str, Any]:
    """Compare two report documents; entries of each category are sorted by ``(cell_id, check)``.

    Returns ``{"factor", "margin", "allow_missing", "incomplete", "base_incomplete", "selection",
    "base_environment", "new_environment", <category>: [entry, ...]}`` for every listed and folded category;
    ``incomplete`` is the new report's one-line account of an interrupted run, or ``None``; ``selection``
    the options that narrowed the new run. Missing entries carry the ``reason`` the new report gives.
    """
    if not factor >= 1.0:
        raise ValueError(f"factor must be at least 1, got {factor}")
    if not 0.0 <= margin:
        raise ValueError(f"margin must be at least 0, got {margin}")
    before, after = index_results(base), index_results(new)
    plans = PlanIndex(base), PlanIndex(new)
    changes: dict[str, list[dict[str, Any]]] = {name: [] for name in (*CATEGORIES, *FOLDED)}
    for key in sorted(before.keys() | after.keys()):
        old, cur = before.get(key), after.get(key)
        entry = _entry(key, old, cur)
        if old is None:
            changes["appeared_passing" if entry["new_outcome"] == "pass" else "appeared"].append(entry)
            continue
        if cur is None:
            changes[_missing_entry(entry, old, *plans)].append(entry)
            continue
        for category in (_outcome_category(old["outcome"], cur["outcome"]), _margin_category(entry, factor, margin)):
            if category:
                changes[category].append(entry)
    return {
        "factor": factor,
        "margin": margin,
        "allow_missing": allow_missing,
        "incomplete": incomplete_line(new),
        "base_incomplete": incomplete_line(base),
        "selection": plans[1].selection,
        "base_environment": base.get("environment", {}),
        "new_environment": new.get("environment", {}),
        **changes,
    }


def _regressing(diff: dict[str, Any]) -> list[str]:
    return [name for name in REGRESSIONS if diff[name] and not (name == "lost" and diff["allow_missing"])]


def regressions(diff: dict[str, Any]) -> int:
    """Number of regressing changes; an incomplete new report counts as one (also with ``allow_missing``)."""
    return sum(len(diff[name]) for name in _regressing(diff)) + int(bool(diff["incomplete"]))


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


def _commonest_models(entries: list[dict[str, Any]]) -> str:
    labels = Counter(e["cell_id"].partition("[")[0] for e in entries)
    return "; ".join(f"{label}: {count}" for label, count in labels.most_common(3)) + ("; …" if len(labels) > 3 else "")


def missing_lines(diff: dict[str, Any]) -> list[str]:
    """Results missing from the new report, one counted line per category and reason (regressing ones first,
    then the largest), naming the commonest models; at most ``MAX_REASONS`` lines and one for the rest."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for name in MISSING:
        for entry in diff[name]:
            groups.setdefault((name, entry["reason"]), []).append(entry)
    order = sorted(groups.items(), key=lambda item: (list(MISSING).index(item[0][0]), -len(item[1]), item[0][1]))
    release = diff["new_environment"].get("transformers")
    lines = []
    for (name, reason), entries in order[:MAX_REASONS]:
        title = MISSING[name] + (f" (transformers {release})" if name == "not_planned" and release else "")
        changes = sorted({e["attention_change"] for e in entries if e["attention_change"]}) if name == "not_planned" else []
        shown = ", ".join(changes[:4]) + (f", … {len(changes) - 4} more" if len(changes) > 4 else "")
        note = f" [default attention changed: {shown}]" if changes else ""
        example = f" (e.g. {entries[0]['cell_id']} {entries[0]['check']})" if name == "lost" else ""
        lines.append(f"{len(entries)} {title}: {reason} — {_commonest_models(entries)}{example}{note}")
    rest = order[MAX_REASONS:]
    if rest:
        lines.append(f"… {sum(len(entries) for _, entries in rest)} more missing results under {len(rest)} more reasons")
    if diff["selection"] and (diff["lost"] or diff["disappeared"]):
        lines.append(f"the new run was narrowed: {' '.join(diff['selection'])}")
    return lines


def folded_lines(diff: dict[str, Any]) -> list[str]:
    """The missing results by reason, then one counted line per other folded category, naming its commonest
    models, and a note when the base run was incomplete."""
    lines = missing_lines(diff)
    for name, title in FOLDED.items():
        if diff[name] and name not in MISSING:
            lines.append(f"{len(diff[name])} {title.format(margin=diff['margin'])} — {_commonest_models(diff[name])}")
    if diff["base_incomplete"]:
        lines.append(f"note: the base report is an {diff['base_incomplete']}")
    return lines


def verdict(diff: dict[str, Any]) -> str:
    """One line: whether the new run regressed, and how."""
    counts = [f"{len(diff[name])} {CATEGORIES.get(name) or MISSING[name]}" for name in _regressing(diff)]
    if diff["incomplete"]:
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
    if diff["lost"]:
        cells: dict[str, list[str]] = {}
        for entry in diff["lost"]:
            cells.setdefault(entry["cell_id"], []).append(entry["check"])
        listed = [f"- `{cell}`: {', '.join(checks)}" for cell, checks in list(cells.items())[:MAX_LOST_CELLS]]
        more = [f"- … {len(cells) - MAX_LOST_CELLS} more cells"] if len(cells) > MAX_LOST_CELLS else []
        sections += [f"## {MISSING['lost'].capitalize()} ({len(diff['lost'])})", "\n".join(listed + more)]
    for entry in diff["newly_failing"]:
        sections += [f"### {entry['check']} · {entry['cell_id']}", code_fence(entry["message"] or "(no message)")]
    return "\n\n".join(sections) + "\n"
