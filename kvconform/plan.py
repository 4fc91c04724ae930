"""What a run planned (the ``plan`` field of a report), read as plain data: why a result is missing from it.

A diff between releases must tell a cell the new release did not plan (its rules or transformers' support
changed: information) from a planned cell that did not run (a regression). ``plan`` (written by
``cells.plan_field``) is::

    {"models": {model_id: {"attention": "sdpa" | "eager" | ...}},
     "planned": [{"checks": [check, ...], "cells": [cell_id, ...]}, ...],
     "unplanned": [{"reason": str, "cells": [cell_id, ...]}, ...],
     "not_applicable": [{"reason": str, "keys": ["cell_id::check", ...]}, ...],
     "selection": ["--shard 1/2", "-k 'llama'", ...]}

``planned`` groups the matrix's cells by the checks they plan (also those ``-k`` deselected); ``unplanned``
holds the cells of the models' axes the matrix rules left out (e.g. ``variant_dtypes`` for an attention that
is not the model's default); ``not_applicable`` the planned checks skipped because transformers cannot run
the cache or attention for the model; ``selection`` the options that narrowed the run to a subset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Doc = dict[str, Any]
Key = tuple[str, str]

#: How the skip reason of a check that transformers cannot run for the model begins (suites/conftest.py).
NOT_APPLICABLE = "not applicable: "
NO_PLAN = "the new report records no plan (an older kvconform wrote it), so no reason is known"
PLANNED_NO_RESULT = "planned in the new run, no result (never ran, skipped, deselected or not collected)"
NOT_IN_PLAN = "not in the new run's plan and no reason recorded (a narrower matrix or option, or a removed model)"


@dataclass(frozen=True)
class Absence:
    """Why a result is missing from a report: ``planned`` (a regression if it passed before) or not, and why."""

    planned: bool
    reason: str


class PlanIndex:
    """A report's plan, indexed by cell (built once per diff)."""

    def __init__(self, doc: Doc) -> None:
        plan = doc.get("plan")
        self.present = isinstance(plan, dict)
        plan = plan if isinstance(plan, dict) else {}
        self.models: dict[str, str] = {m: v.get("attention", "") for m, v in plan.get("models", {}).items()}
        self.checks = {cell: set(group["checks"]) for group in plan.get("planned", []) for cell in group["cells"]}
        self.unplanned = {cell: group["reason"] for group in plan.get("unplanned", []) for cell in group["cells"]}
        self.not_applicable = {key: group["reason"] for group in plan.get("not_applicable", []) for key in group["keys"]}
        self.selection: list[str] = list(plan.get("selection", []))
        self.excluded = {entry["id"]: entry["reason"] for entry in doc.get("excluded", [])}

    def absence(self, key: Key, model: str, check_scope: Callable[[str], str]) -> Absence:
        """Why ``key`` (``(cell_id, check)`` of ``model``) has no result in the report; ``check_scope(check)``
        says in words which cells a check runs on."""
        cell, check = key
        if not self.present:
            return Absence(True, NO_PLAN)
        if f"{cell}::{check}" in self.not_applicable:
            return Absence(False, self.not_applicable[f"{cell}::{check}"])
        if cell in self.checks:
            if check in self.checks[cell]:
                return Absence(True, PLANNED_NO_RESULT)
            return Absence(False, f"the cell runs, but {check_scope(check)}")
        if cell in self.unplanned:
            return Absence(False, self.unplanned[cell])
        if model in self.excluded and model not in self.models:
            return Absence(False, f"excluded from the new run's matrix: {self.excluded[model]}")
        return Absence(True, NOT_IN_PLAN)


def merge_plans(docs: list[Doc]) -> dict[str, Any] | None:
    """The ``plan`` of shards merged into one report (``None`` when a shard has none): the union of the shards'
    plans, with ``--shard`` dropped from the selection (the merged shards make the whole run)."""
    plans: list[dict[str, Any]] = [doc["plan"] for doc in docs if isinstance(doc.get("plan"), dict)]
    if not plans or len(plans) < len(docs):
        return None
    models: dict[str, Any] = {}
    groups: dict[str, dict[str, set[str]]] = {"planned": {}, "unplanned": {}, "not_applicable": {}}
    fields = {"planned": ("checks", "cells"), "unplanned": ("reason", "cells"), "not_applicable": ("reason", "keys")}
    selection: list[str] = []
    for plan in plans:
        models.update(plan["models"])
        for name, (label, members) in fields.items():
            for group in plan[name]:
                label_key = " ".join(group[label]) if name == "planned" else group[label]
                groups[name].setdefault(label_key, set()).update(group[members])
        selection += [s for s in plan["selection"] if not s.startswith("--shard ") and s not in selection]
    merged: dict[str, Any] = {"models": dict(sorted(models.items())), "selection": selection}
    for name, (label, members) in fields.items():
        merged[name] = [{label: label_key.split() if name == "planned" else label_key, members: sorted(found)}
                        for label_key, found in sorted(groups[name].items())]
    return merged
