"""What the human-readable reports show, as plain data: the Markdown, HTML and JUnit writers
render these views and know nothing else about the document's layout.

Order of a report (the verdict first): a banner (an incomplete run or an empty shard, then the
verdict), the totals, the results that need attention (failures with their diagnosis tag, XPASS,
errors), known failures grouped by model, one row per model, the details of each result that needs
attention, excluded architectures, provenance, the full per-cell table and, folded last, the checks
that never ran counted by (grouped) reason.
"""

from __future__ import annotations

import math
import re
import shlex
from collections import Counter
from typing import Any

from kvconform.checks.table import CHECK_ORDER
from kvconform.report.document import Doc, result_sort_key
from kvconform.results import OUTCOMES
from kvconform.run_status import banners

#: Checks in column order; unknown checks follow alphabetically.
#: Outcomes that make a run red.
BAD_OUTCOMES = ("fail", "error", "crashed")
#: Outcomes listed under "Needs attention", in their order there: failures, then XPASS, then errors.
ATTENTION = ("fail", "xpass", "error", "crashed")
#: Most severe first: a group of results shows its first outcome in this order.
SEVERITY = ("crashed", "error", "fail", "xpass", "xfail", "pass")
OUTCOME_LABELS = {"pass": "pass", "fail": "FAIL", "skip": "skip", "xfail": "xfail", "xpass": "XPASS",
                  "error": "error", "crashed": "crashed"}
TOTAL_WORDS = {"pass": "passed", "fail": "failed", "skip": "not run", "xfail": "xfailed", "xpass": "xpassed",
               "error": "errored", "crashed": "crashed"}
#: Environment keys in display order; other keys follow alphabetically.
ENV_ORDER = ("kvconform", "python", "torch", "transformers", "accelerate", "platform", "devices",
             "git_commit", "matrix_path", "matrix_sha256", "date", "shards")
#: Environment keys of the one-line header under the title.
HEADER_ENV = ("transformers", "torch", "kvconform", "git_commit", "date")
SHORT_WIDTH = 18
#: Display order of the common dtypes; others follow alphabetically.
DTYPE_ORDER = ("float32", "float16", "bfloat16")


# --------------------------------------------------------------------------- results and figures


def sorted_results(doc: Doc) -> list[dict[str, Any]]:
    return sorted(doc.get("results", []), key=result_sort_key)


def check_names(doc: Doc) -> list[str]:
    """Checks present in the document, known ones first in :data:`CHECK_ORDER`."""
    present = {r.get("check", "") for r in doc.get("results", [])}
    return [c for c in CHECK_ORDER if c in present] + sorted(present - set(CHECK_ORDER))


def outcome_label(outcome: str) -> str:
    return OUTCOME_LABELS.get(outcome, outcome)


def worst_outcome(outcomes: list[str]) -> str:
    """The most severe of ``outcomes`` (unknown ones rank after ``xfail``)."""
    rank = {o: i for i, o in enumerate(SEVERITY)}
    return min(outcomes, key=lambda o: rank.get(o, len(SEVERITY) - 1.5)) if outcomes else "pass"


def ratio(result: dict[str, Any]) -> float | None:
    """Measured ÷ limit of an ``at_most`` figure (``inf`` when the measurement was not finite)."""
    figure = result.get("figure") or {}
    if figure.get("bound") != "at_most":
        return None
    if "figure.measured" in result.get("nonfinite", []):
        return math.inf
    return figure.get("ratio")


def format_ratio(value: float | None) -> str:
    """``0``, ``<0.01``, ``0.031``, ``1.1``, ``34``, ``non-finite``; empty for no value."""
    if value is None:
        return ""
    if not math.isfinite(value):
        return "non-finite"
    if value == 0:
        return "0"
    return "<0.01" if value < 0.01 else f"{value:.2g}" if value < 100 else f"{value:,.0f}"


def shorten(text: str, width: int = SHORT_WIDTH) -> str:
    """A table-sized figure: ``6→7→…→14`` becomes ``6→…→14``; other long text is cut with ``…``."""
    text = " ".join(str(text).split())
    if len(text) <= width:
        return text
    steps = text.split("→")
    if len(steps) > 2:
        return f"{steps[0]}→…→{steps[-1]}"
    return text[: width - 1] + "…"


def figure_text(result: dict[str, Any]) -> str:
    """The short figure of one result in a table: Δ ÷ limit for ``at_most`` checks, else the measured value."""
    value = ratio(result)
    return format_ratio(value) if value is not None else shorten(result.get("measured", ""))


def at_most_checks(doc: Doc) -> list[str]:
    """Checks whose table figure is a Δ ÷ limit ratio."""
    found = {r["check"] for r in doc.get("results", []) if (r.get("figure") or {}).get("bound") == "at_most"}
    return [c for c in check_names(doc) if c in found]


def figures_note(doc: Doc) -> str:
    """The sentence that says what the figures of the model and cell tables are."""
    ratios = at_most_checks(doc)
    if not ratios:
        return "Figures are the measured values."
    return (f"Figures: for {', '.join(ratios)} the worst |Δ| ÷ its limit (passes at ≤ 1), for the other checks the "
            "measured value; a figure without an outcome passed.")


def _slug(text: str) -> str:
    """A fragment id: letters, digits and hyphens only."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def counted(n: int, noun: str) -> str:
    """``1 check``, ``2 checks``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def first_line(text: str, width: int = 160) -> str:
    line = next((part.strip() for part in (text or "").splitlines() if part.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"


#: Diagnosis tags the checks put in a message; a table shows them in full, first.
DIAGNOSIS_TAGS = ("top-k ties", "near-tie selections", "prefill differs", "cache fault")
_TAG = re.compile(r"\[(" + "|".join(re.escape(t) for t in DIAGNOSIS_TAGS) + r")\]")


def diagnosis_tag(result: dict[str, Any]) -> str:
    """``[top-k ties]``-style tag of a result: its ``details.diagnosis``, else the first tag in its message."""
    tag = (result.get("details") or {}).get("diagnosis")
    if isinstance(tag, str) and tag:
        return f"[{tag}]"
    found = _TAG.search(result.get("message", ""))
    return found.group(0) if found else ""


def diagnosis(result: dict[str, Any], width: int = 160) -> str:
    """The table text of a message: its diagnosis tag in full, then the first line (cut to ``width``)."""
    tag = diagnosis_tag(result)
    line = first_line(_TAG.sub("", result.get("message", "")).replace("  ", " ") if tag else result.get("message", ""),
                      width)
    return f"{tag} {line}".strip()


def cell_label(row: dict[str, Any]) -> str:
    """``float32 · cpu · dynamic · eager``: a cell's dtype, device, cache and attention (when the report has it)."""
    return " · ".join(str(row[k]) for k in ("dtype", "device", "cache", "attn") if row.get(k))


def cell_name(row: dict[str, Any]) -> str:
    """``afmoe | float32 · cpu · dynamic · eager``."""
    return f"{row.get('model', '')} | {cell_label(row)}"


# --------------------------------------------------------------------------- totals and banner


def outcome_counts(doc: Doc) -> dict[str, int]:
    """Checks per outcome (``skip``: checks that never ran), every known outcome then any unknown ones."""
    counts = Counter(r.get("outcome", "") for r in doc.get("results", []))
    counts["skip"] += sum(group["checks"] for group in doc.get("not_run", []))
    return {o: counts.get(o, 0) for o in OUTCOMES} | {o: counts[o] for o in sorted(set(counts) - set(OUTCOMES))}


def cells_ran(doc: Doc) -> int:
    return len({r["cell_id"] for r in doc.get("results", [])})


def never_ran(doc: Doc) -> int:
    """Planned checks of an incomplete run that have no result (0 for a complete run)."""
    return (doc.get("run") or {}).get("never_ran", 0)


def totals_line(doc: Doc) -> str:
    """E.g. ``"12 passed, 1 failed, 0 xfailed, 0 xpassed, 0 errored, 0 crashed, 5 not run (3 cells ran)"``,
    then ``"; 10 planned checks never ran"`` when the run was incomplete."""
    counts = outcome_counts(doc)
    order = [o for o in counts if o != "skip"] + ["skip"]
    parts = [f"{counts[o]} {TOTAL_WORDS.get(o, o)}" for o in order]
    missing = f"; {never_ran(doc)} planned checks never ran" if never_ran(doc) else ""
    return f"{', '.join(parts)} ({counted(cells_ran(doc), 'cell')} ran){missing}"


#: Reasons that differ only in a detail (a layer-type set, a class name) and count as one line.
REASON_GROUPS = (
    (re.compile(r"^(not applicable: transformers builds no QuantizedCache\(backend='fp8'\) for this config: ValueError: "
                r"`QuantizedCache` is only supported for models with only full attention layers)\..*", re.S),
     r"\1 (the models' layer types differ)"),
    (re.compile(r"^(.*generate\(\) refuses assisted decoding for) \w+ (\(.*)$", re.S), r"\1 the model's class \2"),
)


def reason_group(reason: str) -> str:
    """The line ``reason`` is counted under (:data:`REASON_GROUPS`), else the reason itself."""
    for pattern, replacement in REASON_GROUPS:
        if pattern.match(reason):
            return pattern.sub(replacement, reason)
    return reason


def _models_by_reason(doc: Doc) -> dict[str, set[str]]:
    """Per never-run reason the models it concerns, from the document's plan (empty without one)."""
    plan = doc.get("plan") or {}
    found: dict[str, set[str]] = {}
    for group in [*plan.get("unplanned", []), *plan.get("not_applicable", [])]:
        members = group.get("cells", group.get("keys", []))
        found.setdefault(group.get("reason", ""), set()).update(str(m).split("[")[0] for m in members)
    return found


def not_run_groups(doc: Doc) -> list[dict[str, Any]]:
    """Never-run counts merged by :func:`reason_group`, most checks first.

    Each: ``reason`` (the group's line), ``checks``, ``cells``, ``models`` (a count, or ``None`` when the
    document has no plan naming them) and ``variants`` (how many distinct reasons it merged).
    """
    models = _models_by_reason(doc)
    groups: dict[str, dict[str, Any]] = {}
    for entry in doc.get("not_run", []):
        line = reason_group(entry["reason"])
        group = groups.setdefault(line, {"reason": line, "checks": 0, "cells": 0, "models": set(), "variants": 0,
                                         "known": True})
        group["checks"] += entry["checks"]
        group["cells"] += entry["cells"]
        group["variants"] += 1
        group["known"] &= entry["reason"] in models
        group["models"] |= models.get(entry["reason"], set())
    return [{**g, "models": len(g["models"]) if g.pop("known") else None}
            for g in sorted(groups.values(), key=lambda g: (-g["checks"], g["reason"]))]


def not_run(doc: Doc) -> list[str]:
    """One line per (grouped) reason checks never ran, most first: ``4 checks in 1 cell (1 model): <reason>``."""
    lines = []
    for g in not_run_groups(doc):
        models = f" of {counted(g['models'], 'model')}" if g["models"] is not None else ""
        lines.append(f"{counted(g['checks'], 'check')} in {counted(g['cells'], 'cell')}{models}: {g['reason']}")
    return lines


def not_run_title(doc: Doc) -> str:
    """``Not run (542 checks, 3 reasons)``."""
    groups = not_run_groups(doc)
    return f"Not run ({counted(sum(g['checks'] for g in groups), 'check')}, {counted(len(groups), 'reason')})"


def banner(doc: Doc) -> list[tuple[str, str]]:
    """``(level, text)`` lines above everything else; level is ``bad``, ``warn`` or ``ok``.

    An incomplete run or an empty shard comes first (``warn``), then the verdict of the checks that ran.
    """
    notes = [("warn", note) for note in banners(doc)]
    counts = outcome_counts(doc)
    urgent = [f"{counts[o]} {TOTAL_WORDS[o]}" for o in ATTENTION if counts.get(o)]
    known = f"; {counted(counts['xfail'], 'known failure')}" if counts.get("xfail") else ""
    if urgent:
        n = sum(counts[o] for o in ATTENTION)
        return notes + [("bad", f"{counted(n, 'check')} need{'s' if n == 1 else ''} attention: {', '.join(urgent)}{known}")]
    if not doc.get("results"):
        return notes or [("warn", "No check ran.")]
    return notes + [("ok", f"No failures: {counted(counts['pass'], 'check')} passed{known}.")]


# --------------------------------------------------------------------------- sections


def attention(doc: Doc) -> list[dict[str, Any]]:
    """Failures, xpasses, errors and crashes in the order of :data:`ATTENTION`, then by cell.

    Results of one cell with the same outcome and message (a model that could not be built fails
    every check alike) form one item: ``outcome``, ``cell_id``, ``checks``, ``results``, ``anchor``
    (fragment id of its details), ``figures`` (measured / limit text of a single check), ``label``
    (model, dtype, device, cache and attention), ``diagnosis`` (the reason of an xpass, else the message's
    diagnosis tag in full and its first line) and ``rerun`` (a command).
    """
    rank = {o: i for i, o in enumerate(ATTENTION)}
    order = {c: i for i, c in enumerate(check_names(doc))}
    groups: dict[tuple[int, str, str, str], list[dict[str, Any]]] = {}
    for result in sorted_results(doc):
        if result.get("outcome") in rank:
            key = (rank[result["outcome"]], result["cell_id"], result["outcome"], result.get("message", ""))
            groups.setdefault(key, []).append(result)
    items = []
    for (_, cell_id, outcome, message), results in sorted(groups.items(), key=lambda item: item[0][:3]):
        results.sort(key=lambda r: order.get(r["check"], len(order)))
        first = results[0]
        figures = f"{first.get('measured', '')} / {first.get('limit', '')}" if len(results) == 1 and (
            first.get("measured") or first.get("limit")) else ""
        items.append({
            "outcome": outcome, "cell_id": cell_id, "model": first["model"],
            "checks": [r["check"] for r in results],
            "results": results, "anchor": _slug(f"{outcome}-{cell_id}-{first['check']}"), "figures": figures,
            "diagnosis": first.get("reason") or diagnosis(first), "label": cell_name(first), "message": message, "reason": evidence(first),
            "xfail_kind": first.get("xfail_kind", ""), "rerun": _rerun(results, _cell_options(doc)),
        })
    return items


def _cell_options(doc: Doc) -> str:
    """The options of the run that its cells exist only with (``--model PATH``), as a re-run needs them."""
    selection = (doc.get("plan") or {}).get("selection") or []
    return "".join(f" --model {shlex.quote(option.removeprefix('--model '))}" for option in selection
                   if option.startswith("--model "))


#: The suite files the package ships (``kvconform.suites``).
SHIPPED_SUITES = ("test_conformance.py", "test_families.py")


def _rerun(results: list[dict[str, Any]], options: str = "") -> str:
    """A command that re-runs ``results`` (one test by node id, or one cell's tests by ``-k``) with ``options``.

    pytest names a test file outside the rootdir by its bare file name: a shipped suite file so named ran from the
    installed package (``kvconform ...`` in the user's folder), where that node id is no path, so the command is
    ``kvconform -k``."""
    nodeid = results[0].get("nodeid", "")
    if not nodeid:
        return ""
    path, _, name = nodeid.partition("::")
    if path in SHIPPED_SUITES:
        test = name.split("[", 1)[0]
        select = f"{test} and {results[0]['cell_id']}" if len(results) == 1 else results[0]["cell_id"]
        return f"kvconform -k '{select}'{options}"
    if len(results) == 1:
        return f"python -m pytest '{nodeid}'{options}"
    return f"python -m pytest {nodeid.split('::')[0]} -k '{results[0]['cell_id']}'{options}"


def attention_anchors(doc: Doc) -> dict[tuple[str, str], str]:
    """``(cell_id, check)`` -> fragment id of the details of every result that needs attention."""
    return {(r["cell_id"], r["check"]): item["anchor"] for item in attention(doc) for r in item["results"]}


def evidence(result: dict[str, Any]) -> str:
    """A known failure's reason without the ``kind: `` prefix pytest's label gives it (shown next to the kind)."""
    reason, kind = result.get("reason", ""), result.get("xfail_kind", "")
    return reason.removeprefix(f"{kind}: ") if kind else reason


def known_failures(doc: Doc) -> list[dict[str, Any]]:
    """xfail results grouped by model, kind and reason.

    Each group: ``model``, ``kind`` (may be empty), ``reason`` (its :func:`evidence`), ``checks`` (check -> count),
    ``dtypes``, ``count``, ``worst`` (largest Δ ÷ limit or ``None``) and ``cell_id`` (one cell to re-run).
    """
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for result in sorted_results(doc):
        if result.get("outcome") != "xfail":
            continue
        key = (result["model"], result.get("xfail_kind", ""), evidence(result))
        group = groups.setdefault(key, {"model": key[0], "kind": key[1], "reason": key[2], "checks": Counter(),
                                        "dtypes": [], "count": 0, "worst": None, "cell_id": result["cell_id"]})
        group["checks"][result["check"]] += 1
        group["count"] += 1
        if result["dtype"] not in group["dtypes"]:
            group["dtypes"].append(result["dtype"])
        value = ratio(result)
        if value is not None and (group["worst"] is None or value > group["worst"]):
            group["worst"] = value
    order = {c: i for i, c in enumerate(check_names(doc))}
    for group in groups.values():
        group["checks"] = dict(sorted(group["checks"].items(), key=lambda item: order.get(item[0], len(order))))
        group["dtypes"] = dtype_order(group["dtypes"])
    return [groups[key] for key in sorted(groups)]


def dtype_order(dtypes: Any) -> list[str]:
    """``dtypes`` in :data:`DTYPE_ORDER`, unknown ones after it alphabetically."""
    present = set(dtypes)
    return [d for d in DTYPE_ORDER if d in present] + sorted(present - set(DTYPE_ORDER))


KNOWN_FAILURES_NOTE = "Expected failures with the evidence from the matrix; a fixed model turns them into XPASS."


def known_failures_title(groups: list[dict[str, Any]]) -> str:
    """``Known failures (192 checks in 35 models)``."""
    count, models = sum(g["count"] for g in groups), len({g["model"] for g in groups})
    return f"Known failures ({counted(count, 'check')} in {counted(models, 'model')})"


def checks_text(group: dict[str, Any]) -> str:
    """``parity ×3, prefix_reuse`` for a known-failure group."""
    return ", ".join(f"{check} ×{n}" if n > 1 else check for check, n in group["checks"].items())


def excluded(doc: Doc) -> list[dict[str, Any]]:
    return sorted(doc.get("excluded", []), key=lambda e: e.get("id", ""))


def models_by_id(doc: Doc) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in doc.get("models", [])}


def model_label(model_id: str, info: dict[str, Any] | None) -> str:
    """``smollm2-135m (llama)``; just the id when it is its own model_type (the sweep)."""
    model_type = (info or {}).get("model_type")
    return f"{model_id} ({model_type})" if model_type and model_type != model_id else model_id


def model_rows(doc: Doc) -> list[dict[str, Any]]:
    """One row per model: ``model``, ``label``, ``cells``, ``outcome`` (worst) and per check a summary.

    A check summary is ``{"outcome", "count", "not_pass", "ratio", "text", "first_attention"}``: the
    worst outcome over the model's cells, how many cells ran it and did not pass, the largest Δ ÷ limit,
    table text, and the ``(cell_id, check)`` of its first result that needs attention (or ``None``).
    """
    info = models_by_id(doc)
    by_model: dict[str, list[dict[str, Any]]] = {}
    for result in sorted_results(doc):
        by_model.setdefault(result["model"], []).append(result)
    rows, names = [], check_names(doc)
    for model, results in sorted(by_model.items()):
        by_check: dict[str, list[dict[str, Any]]] = {}
        for result in results:
            by_check.setdefault(result["check"], []).append(result)
        checks = {check: _check_summary(by_check[check]) for check in names if check in by_check}
        rows.append({"model": model, "label": model_label(model, info.get(model)),
                     "cells": len({r["cell_id"] for r in results}),
                     "outcome": worst_outcome([r["outcome"] for r in results]), "checks": checks})
    return rows


def model_overview(row: dict[str, Any]) -> dict[str, str]:
    """The short Models table's texts of one :func:`model_rows` row: ``outcome``, ``worst`` (the largest
    Δ ÷ limit and its check) and ``not_passing`` (``crop FAIL, parity xfail 2/6``, or empty)."""
    ratios = [(s["ratio"], check) for check, s in row["checks"].items() if s["ratio"] is not None]
    worst = max(ratios, default=None)
    not_passing = [f"{check} {s['text']}".strip() if s["ratio"] is None else f"{check} {outcome_label(s['outcome'])}"
                   for check, s in row["checks"].items() if s["outcome"] != "pass"]
    return {"outcome": outcome_label(row["outcome"]), "worst": f"{format_ratio(worst[0])} ({worst[1]})" if worst else "—",
            "not_passing": ", ".join(not_passing)}


MODELS_COLUMNS = ("model", "cells", "outcome", "worst Δ/limit", "not passing")


def _check_summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    outcome = worst_outcome([r["outcome"] for r in results])
    not_pass = sum(r["outcome"] != "pass" for r in results)
    ratios = [v for r in results if (v := ratio(r)) is not None]
    worst = max(ratios) if ratios else None
    parts = [] if outcome == "pass" and worst is not None else [outcome_label(outcome)]
    if worst is not None:
        parts.append(format_ratio(worst))
    elif outcome != "pass" and len(results) > 1:
        parts.append(f"{not_pass}/{len(results)}")
    first = next(((r["cell_id"], r["check"]) for r in results if r["outcome"] in ATTENTION), None)
    return {"outcome": outcome, "count": len(results), "not_pass": not_pass, "ratio": worst, "text": " ".join(parts),
            "first_attention": first}


def cell_rows(doc: Doc) -> list[dict[str, Any]]:
    """One row per cell that ran: ``cell_id``, ``model``, ``dtype``, ``device``, ``cache`` and ``checks``."""
    rows: dict[str, dict[str, Any]] = {}
    for result in sorted_results(doc):
        row = rows.setdefault(result["cell_id"], {k: result.get(k, "") for k in ("cell_id", "model", "dtype", "device", "cache", "attn")}
                              | {"checks": {}})
        row["checks"][result.get("check", "")] = result
    return sorted(rows.values(), key=lambda r: (r["model"], r["dtype"], r["device"], r["cache"], r["attn"], r["cell_id"]))


def cell_text(result: dict[str, Any] | None) -> str:
    """Per-cell table text of one check: its short figure, after the outcome label unless it passed."""
    if result is None:
        return "—"
    figure = figure_text(result)
    if result.get("outcome") == "pass" and figure:
        return figure
    return f"{outcome_label(result.get('outcome', ''))} {figure}".strip()


def peak_ratios(doc: Doc) -> list[dict[str, Any]]:
    """Per model and dtype the largest Δ ÷ limit over its ``at_most`` results, with the worst outcome.

    Items: ``model``, ``dtype``, ``ratio`` (``inf`` when not finite), ``outcome``; by model then dtype.
    """
    peaks: dict[tuple[str, str], dict[str, Any]] = {}
    for result in sorted_results(doc):
        value = ratio(result)
        if value is None:
            continue
        peak = peaks.setdefault((result["model"], result["dtype"]),
                                {"model": result["model"], "dtype": result["dtype"], "ratio": value, "outcomes": []})
        peak["ratio"] = max(peak["ratio"], value)
        peak["outcomes"].append(result["outcome"])
    return [{"model": p["model"], "dtype": p["dtype"], "ratio": p["ratio"], "outcome": worst_outcome(p["outcomes"])}
            for _, p in sorted(peaks.items())]


# --------------------------------------------------------------------------- provenance


def environment_items(doc: Doc) -> list[tuple[str, str]]:
    """Environment as ``(key, text)`` pairs in display order."""
    env = doc.get("environment", {})
    keys = [k for k in ENV_ORDER if k in env] + sorted(set(env) - set(ENV_ORDER))
    return [(k, ", ".join(map(str, env[k])) if isinstance(env[k], list) else str(env[k])) for k in keys]


def header_line(doc: Doc) -> str:
    """``transformers 5.24.0 · torch 2.13.0 · kvconform 0.1.0 · commit 846e363 · 2026-11-30T08:58:00Z``."""
    env = doc.get("environment", {})
    parts = []
    for key in HEADER_ENV:
        value = env.get(key)
        if value:
            parts.append(f"commit {str(value)[:12]}" if key == "git_commit" else str(value) if key == "date" else f"{key} {value}")
    return " · ".join(parts)


def provenance_rows(doc: Doc) -> list[dict[str, str]]:
    """Models that are not synthetic, as ``{"model", "model_type", "source", "revision", "file"}`` texts."""
    rows = []
    for model in doc.get("models", []):
        if model.get("source") == "synthetic":
            continue
        weights = model.get("file")
        file_text = ""
        if weights:
            package = f" from {weights['package']} {weights['package_version'] or ''}".rstrip() if weights.get("package") else ""
            file_text = f"{weights['name']} ({weights['bytes']:,} B{package}), sha256 {weights['sha256']}"
        rows.append({"model": model["id"], "model_type": model.get("model_type") or "—",
                     "source": f"{model['source']}: {model['location']}", "revision": model.get("revision") or "—",
                     "file": file_text or "—"})
    return rows


def synthetic_count(doc: Doc) -> int:
    return sum(m.get("source") == "synthetic" for m in doc.get("models", []))
