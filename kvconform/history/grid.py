"""The history document: model × release verdicts and, per (model, check), the release that broke or fixed it.

Plain data in, plain data out. Release-to-release changes are classified by :func:`kvconform.diff.diff_documents`
(the regression rules of ``tools/diff_reports.py``): a change is ``bad`` (red) only where that diff calls it a
regression (a result newly fails, a parity Δ grew past its margin), ``fixed`` where it newly passes or shrank,
and information otherwise (a known failure that starts or ends, results a release did not plan). A missing result
is never a regression here: releases add and drop architectures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.version import Version

from kvconform.diff import diff_documents
from kvconform.report import Doc, ReportError, load_document
from kvconform.report.views import diagnosis

HISTORY_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("history.schema.json")
#: A model's verdict under one release, most severe first (the grid's legend).
VERDICTS = ("harness error", "fail", "known failure", "pass", "not applicable")
#: Outcome -> verdict of one result; a cell shows its most severe result's.
_VERDICT_OF = {"error": "harness error", "crashed": "harness error", "fail": "fail", "xpass": "fail",
               "xfail": "known failure", "pass": "pass"}
#: Outcomes whose check is wrong under a release (a known failure is a shipped bug too).
_BAD_STATE = ("fail", "error", "crashed", "xfail")
#: diff category -> history change kind.
CHANGE_KINDS = {"newly_failing": "bad", "parity_grew": "bad", "newly_passing": "fixed", "parity_shrank": "fixed",
                "outcome_changed": "info"}


def _verdict(outcomes: Sequence[str]) -> str:
    found = {_VERDICT_OF[o] for o in outcomes if o in _VERDICT_OF}
    return next((v for v in VERDICTS if v in found), "not applicable")


def _model_grid(doc: Doc | None) -> dict[str, dict[str, Any]]:
    if doc is None:
        return {}
    by_model: dict[str, list[dict[str, Any]]] = {}
    for result in doc.get("results", []):
        by_model.setdefault(result["model"], []).append(result)
    grid = {}
    for model, results in by_model.items():
        verdict = _verdict([r["outcome"] for r in results])
        counts: dict[str, int] = {}
        for r in results:
            counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
        worst = next((r for r in results if _verdict([r["outcome"]]) == verdict and verdict != "pass"), None)
        grid[model] = {"verdict": verdict, "counts": counts,
                       "note": f"{worst['check']} · {worst['cell_id']}: {diagnosis(worst, 140)}" if worst else ""}
    return grid


def _changes(releases: Sequence[str], docs: Mapping[str, Doc]) -> list[dict[str, Any]]:
    """Every classified change between consecutive releases that both have a report."""
    changes = []
    ran = [r for r in releases if r in docs]
    for base, new in zip(ran, ran[1:], strict=False):
        diff = diff_documents(docs[base], docs[new], allow_missing=True)
        for category, kind in CHANGE_KINDS.items():
            for entry in diff[category]:
                model = entry["cell_id"].partition("[")[0]
                changes.append({"model": model, "check": entry["check"], "cell_id": entry["cell_id"], "release": new,
                                "previous": base, "kind": kind, "category": category,
                                "base_outcome": entry["base_outcome"], "new_outcome": entry["new_outcome"],
                                "base_peak": entry["base_peak"], "new_peak": entry["new_peak"],
                                "message": (entry["message"] or "").strip().splitlines()[0][:300] if entry["message"] else ""})
    return changes


def _transitions(releases: Sequence[str], docs: Mapping[str, Doc]) -> list[dict[str, Any]]:
    """Per (model, check) that is bad under some release: the first bad and the first fixed release.

    The state of a (model, check) under a release is bad when any of its cells fails, errs or is a known
    failure, good when all that ran pass; releases where it did not run are skipped.
    """
    series: dict[tuple[str, str], list[tuple[str, bool, dict[str, Any]]]] = {}
    for release in releases:
        if release not in docs:
            continue
        grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for result in docs[release].get("results", []):
            grouped.setdefault((result["model"], result["check"]), []).append(result)
        for key, results in grouped.items():
            bad = [r for r in results if r["outcome"] in _BAD_STATE]
            series.setdefault(key, []).append((release, bool(bad), bad[0] if bad else results[0]))
    rows = []
    for (model, check), states in sorted(series.items()):
        if not any(bad for _, bad, _ in states):
            continue
        first_bad = next((i for i, (_, bad, _) in enumerate(states) if bad and (i == 0 or not states[i - 1][1])), None)
        if first_bad is None:
            continue
        fixed = next((i for i in range(first_bad + 1, len(states)) if not states[i][1]), None)
        bad_result = states[first_bad][2]
        rows.append({"model": model, "check": check,
                     "last_good": states[first_bad - 1][0] if first_bad > 0 else None,
                     "first_bad": states[first_bad][0] if first_bad > 0 else None,
                     "bad_since": states[first_bad][0],
                     "first_fixed": states[fixed][0] if fixed is not None else None,
                     "outcome": bad_result["outcome"], "cell_id": bad_result["cell_id"],
                     "note": diagnosis(bad_result, 200),
                     "bad_releases": [r for r, bad, _ in states if bad]})
    return rows


def build_history(runs: Sequence[Mapping[str, Any]], docs: Mapping[str, Doc], selection: Sequence[str] = ()) -> Doc:
    """The history document of ``runs`` (run records of :func:`kvconform.history.run.run_release`) and the reports
    of those that produced one (``docs``, keyed by release)."""
    ordered = sorted(runs, key=lambda run: Version(run["release"]))
    releases = [run["release"] for run in ordered]
    if len(set(releases)) != len(releases):
        twice = sorted({r for r in releases if releases.count(r) > 1}, key=Version)
        raise ValueError(f"release(s) {', '.join(twice)} ran more than once: merge histories whose shards do not overlap")
    grids = {run["release"]: _model_grid(docs.get(run["release"])) for run in ordered}
    models = sorted({model for grid in grids.values() for model in grid})
    grid = {model: {release: grids[release].get(model, {"verdict": "harness error" if run["status"] != "ok"
                                                         else "not applicable", "counts": {}, "note": ""})
                    for release, run in zip(releases, ordered, strict=True)} for model in models}
    harness_errors = sum(1 for cells in grid.values() for cell in cells.values() if cell["verdict"] == "harness error")
    harness_errors += sum(1 for run in ordered if run["status"] != "ok" and not models)
    return {
        "kind": "kvconform-history",
        "history_version": HISTORY_VERSION,
        "selection": list(selection),
        "releases": [dict(run) | {"torch": (docs.get(run["release"]) or {}).get("environment", {}).get("torch")}
                     for run in ordered],
        "models": models,
        "grid": grid,
        "totals": {"cells": len(models) * len(releases), "harness_errors": harness_errors,
                   "seconds": round(sum(run["seconds"] + run.get("env_seconds", 0.0) for run in ordered), 1),
                   **{verdict: sum(1 for cells in grid.values() for c in cells.values() if c["verdict"] == verdict)
                      for verdict in VERDICTS}},
        "transitions": _transitions(releases, docs),
        "changes": _changes(releases, docs),
    }


def load_reports(runs: Sequence[Mapping[str, Any]], base: Path) -> dict[str, Doc]:
    """The reports of ``runs`` that produced one (paths relative to ``base``), keyed by release."""
    docs = {}
    for run in runs:
        if run["status"] == "ok":
            try:
                docs[run["release"]] = load_document(base / run["report"])
            except ReportError as exc:
                raise ReportError(f"history in {base}: release {run['release']}: {exc}") from None
    return docs


def merge_histories(histories: Sequence[tuple[Doc, Path]], replace: bool = False) -> tuple[list[dict[str, Any]], dict[str, Doc], list[str]]:
    """The runs (report paths made absolute), reports and selection of several histories (shards over releases).

    Raises ``ValueError`` when their selections differ (a history compares like with like) or, unless ``replace``, when
    a release is in two of them; with ``replace`` a later history's run of a release replaces an earlier one's (a
    release run again after a fix), and the run says which run it replaced.
    """
    if not histories:
        raise ValueError("merge: no history to merge")
    selections = {tuple(doc["selection"]) for doc, _ in histories}
    if len(selections) > 1:
        raise ValueError("merge: the histories ran different selections: " + " | ".join(" ".join(s) or "(all)" for s in selections))
    runs: list[dict[str, Any]] = []
    seen: dict[str, Path] = {}
    for doc, base in histories:
        for run in doc["releases"]:
            if run["release"] in seen:
                if not replace:
                    raise ValueError(f"merge: release {run['release']} is in {seen[run['release']]} and in {base}: "
                                     "merge shards that ran different releases (or --replace: the later run counts)")
                runs = [r for r in runs if r["release"] != run["release"]]
                run = run | {"replaced": str(seen[run["release"]])}
            seen[run["release"]] = base
            runs.append({key: value for key, value in run.items() if key != "torch"}
                        | {"report": str((base / run["report"]).resolve())})
    runs.sort(key=lambda run: Version(run["release"]))
    return runs, load_reports(runs, Path("/")), list(next(iter(selections)))


def overlay_models(runs: Sequence[dict[str, Any]], docs: Mapping[str, Doc], overlays: Sequence[tuple[Doc, Path]],
                   ) -> tuple[list[dict[str, Any]], dict[str, Doc]]:
    """``runs``/``docs`` of a history with the cells of the models some later histories ran again (a re-run of a
    few models after a fix) replacing theirs, release by release.

    An overlay's models are those its reports hold under any of its releases; under each release both ran, every
    result of those models comes from the overlay, the others' from the base. A release the base lacks is refused
    (an overlay updates a history, it does not extend it); a release the overlay did not run keeps the base's
    results. Each changed run says which folders overlaid it (``overlaid``); its report is the combined document,
    which ``collect.write_combined_reports`` writes (its ``report`` is ``None`` until then).
    """
    merged = {release: dict(doc) for release, doc in docs.items()}
    by_release = {run["release"]: dict(run) for run in runs}
    for doc, base in overlays:
        reports = load_reports(doc["releases"], base)
        models = {result["model"] for report in reports.values() for result in report.get("results", [])}
        for release, report in reports.items():
            if release not in merged:
                raise ValueError(f"overlay: {base} ran release {release}, which the history it updates lacks")
            kept = [r for r in merged[release].get("results", []) if r["model"] not in models]
            merged[release] = merged[release] | {"results": kept + list(report.get("results", []))}
            run = by_release[release]
            by_release[release] = run | {"overlaid": [*run.get("overlaid", []), str(base)], "report": None}
    return sorted(by_release.values(), key=lambda run: Version(run["release"])), merged
