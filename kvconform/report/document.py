"""The report document (``conformance.json``): load, check, merge, compare and serialize it.

A document is plain JSON data built by the pytest plugin; its full contract is the JSON Schema
shipped next to this module (``conformance.schema.json``). Everything here takes and returns
builtin data, so it runs without torch or pytest.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kvconform.plan import merge_plans
from kvconform.results import OUTCOMES, SCHEMA_VERSION
from kvconform.run_status import merge_run_fields

Doc = dict[str, Any]

SCHEMA_PATH = Path(__file__).with_name("conformance.schema.json")
#: Outcomes a result row can have (checks that never ran are counted in ``not_run`` instead).
RESULT_OUTCOMES = tuple(o for o in OUTCOMES if o != "skip")

_REQUIRED_RESULT_FIELDS = ("cell_id", "model", "dtype", "device", "cache", "check", "outcome")
_OPTIONAL_RESULT_STRINGS = ("measured", "limit", "message", "nodeid", "reason", "xfail_kind")


class ReportError(ValueError):
    """A report file could not be read or is not a valid conformance document."""


# --------------------------------------------------------------------------- non-finite numbers


def finite_or_null(value: Any, path: str = "") -> tuple[Any, list[str]]:
    """``value`` with every NaN/±inf float (at any depth) replaced by ``None``, and the replaced paths.

    JSON has no Infinity; a report keeps the place as ``null`` and flags it (e.g.
    ``["figure.measured", "details.step_max_abs_delta[3]"]``).
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None, [path]
    if isinstance(value, dict):
        pairs = {key: finite_or_null(item, f"{path}.{key}" if path else str(key)) for key, item in value.items()}
        return {key: clean for key, (clean, _) in pairs.items()}, [p for _, found in pairs.values() for p in found]
    if isinstance(value, (list, tuple)):
        items = [finite_or_null(item, f"{path}[{i}]") for i, item in enumerate(value)]
        return [clean for clean, _ in items], [p for _, found in items for p in found]
    return value, []


# --------------------------------------------------------------------------- loading and validation


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON (non-finite numbers are written as null)")


# --------------------------------------------------------------------------- shared message text

#: Numbers inside a message: a template's arguments (``1.23e-05``, ``14,336``, ``7``).
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*(?:e[+-]?\d+)?")
#: Where a template takes its next argument (a control character no message holds).
SLOT = "\x1f"
#: The schema version before messages were written as templates; :func:`load_document` still reads it.
_UNPACKED_VERSION = 2


def _template(message: str) -> tuple[str, list[str]]:
    return _NUMBER.sub(SLOT, message), _NUMBER.findall(message)


def fill_template(template: str, args: Sequence[str]) -> str:
    """The message a template and its arguments stand for (``SLOT`` by ``SLOT``)."""
    parts = template.split(SLOT)
    if len(parts) != len(args) + 1:
        raise ValueError(f"message template takes {len(parts) - 1} numbers, got {len(args)}")
    return "".join(part + arg for part, arg in zip(parts, [*args, ""], strict=True))


def _test_name(result: dict[str, Any]) -> str:
    """The pytest test name a result's node id ends with (``test_parity[llama[float32-cpu-dynamic]]``)."""
    return f"test_{result.get('check')}[{result.get('cell_id')}]"


def pack_messages(doc: Doc) -> Doc:
    """A copy of ``doc`` whose messages that share their text but for numbers are ``[template index, numbers…]``
    and whose node ids that end in the usual test name keep only their file.

    The templates are stated once, in ``message_templates``; a template used by one message only
    leaves that message a plain string.
    """
    results = doc.get("results", [])
    split = [_template(r["message"]) if isinstance(r.get("message"), str) and SLOT not in r["message"] else None
             for r in results]
    uses = Counter(item[0] for item in split if item and item[1])
    index: dict[str, int] = {}
    packed = []
    for result, item in zip(results, split, strict=True):
        if item and uses[item[0]] > 1:
            result = {**result, "message": [index.setdefault(item[0], len(index)), *item[1]]}
        nodeid = result.get("nodeid")
        if isinstance(nodeid, str) and nodeid.endswith("::" + _test_name(result)):
            result = {**result, "nodeid": nodeid.removesuffix("::" + _test_name(result))}
        packed.append(result)
    return {**doc, "results": packed, **({"message_templates": list(index)} if index else {})}


def unpack_messages(doc: Any) -> Any:
    """``doc`` with every packed message and node id written out (:func:`pack_messages` undone); a report of the
    version before templates comes back as the current version. Malformed packing is left for the validator."""
    if not isinstance(doc, dict):
        return doc
    if doc.get("schema_version") == _UNPACKED_VERSION and "message_templates" not in doc:
        return {**doc, "schema_version": SCHEMA_VERSION}
    templates = doc.get("message_templates", [])
    if not isinstance(templates, list) or not isinstance(doc.get("results"), list):
        return doc
    results = []
    for result in doc["results"]:
        packed = result.get("message") if isinstance(result, dict) else None
        if (isinstance(packed, list) and packed and isinstance(packed[0], int) and 0 <= packed[0] < len(templates)
                and all(isinstance(a, str) for a in packed[1:])):
            try:
                result = {**result, "message": fill_template(templates[packed[0]], packed[1:])}
            except ValueError:
                pass  # the validator names the message that is not a string
        nodeid = result.get("nodeid") if isinstance(result, dict) else None
        if isinstance(nodeid, str) and nodeid and "::" not in nodeid:
            result = {**result, "nodeid": f"{nodeid}::{_test_name(result)}"}
        results.append(result)
    return {key: value for key, value in doc.items() if key != "message_templates"} | {"results": results}


def load_document(path: str | os.PathLike[str]) -> Doc:
    """Read and check one ``conformance.json`` (messages written out); raise :class:`ReportError` naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"cannot read {path}: {exc}") from exc
    try:
        doc = unpack_messages(json.loads(text, parse_constant=_reject_constant))
    except ValueError as exc:
        raise ReportError(f"{path} is not valid JSON: {exc}") from exc
    problems = validate_document(doc)
    if problems:
        listed = "\n  ".join(problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise ReportError(f"{path} is not a valid conformance report:\n  {listed}{more}")
    return doc


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _list_of_dicts(doc: Doc, key: str, problems: list[str]) -> list[dict[str, Any]]:
    """Return ``doc[key]`` if it is a list of objects, recording problems otherwise."""
    items = doc.get(key)
    if not isinstance(items, list):
        problems.append(f"{key}: expected a list, got {type(items).__name__}")
        return []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            problems.append(f"{key}[{i}]: expected an object, got {type(item).__name__}")
    return [item for item in items if isinstance(item, dict)]


def _validate_result(i: int, result: dict[str, Any], problems: list[str]) -> None:
    where = f"results[{i}]"
    for key in _REQUIRED_RESULT_FIELDS:
        if not isinstance(result.get(key), str):
            problems.append(f"{where}.{key}: missing or not a string")
    outcome = result.get("outcome")
    if isinstance(outcome, str) and outcome not in RESULT_OUTCOMES:
        problems.append(f"{where}.outcome: {outcome!r} is not one of {', '.join(RESULT_OUTCOMES)}")
    if outcome in ("xfail", "xpass") and not isinstance(result.get("reason"), str):
        problems.append(f"{where}.reason: an {outcome} result needs its reason")
    for key in _OPTIONAL_RESULT_STRINGS:
        if key in result and not isinstance(result[key], str):
            problems.append(f"{where}.{key}: expected a string")
    if result.get("duration_s") is not None and not _is_number(result["duration_s"]):
        problems.append(f"{where}.duration_s: expected a number or null")
    figure = result.get("figure")
    if figure is not None and not (isinstance(figure, dict) and isinstance(figure.get("unit"), str)):
        problems.append(f"{where}.figure: expected an object with a unit, or null")
    details = result.get("details", {})
    if not isinstance(details, dict):
        problems.append(f"{where}.details: expected an object")
        return
    steps = details.get("step_max_abs_delta")
    if steps is not None and not (isinstance(steps, list) and all(v is None or _is_number(v) for v in steps)):
        problems.append(f"{where}.details.step_max_abs_delta: expected a list of numbers (null where non-finite)")
    if details.get("tolerance") is not None and not _is_number(details["tolerance"]):
        problems.append(f"{where}.details.tolerance: expected a number")


#: The ``plan`` field's groups: the label each holds and the list of its members (``kvconform.plan``).
_PLAN_GROUPS = {"planned": ("checks", "cells"), "unplanned": ("reason", "cells"), "not_applicable": ("reason", "keys")}


def _plan_problems(plan: Any) -> list[str]:
    """Problems that would break reading a report's ``plan`` (the schema is the full contract)."""
    if not (isinstance(plan, dict) and isinstance(plan.get("models"), dict) and isinstance(plan.get("selection"), list)):
        return ["plan: expected an object with 'models' (an object) and 'selection' (a list)"]
    problems = []
    for name, (label, members) in _PLAN_GROUPS.items():
        groups = plan.get(name)
        if not isinstance(groups, list) or not all(
                isinstance(g, dict) and label in g and isinstance(g.get(members), list) for g in groups):
            problems.append(f"plan.{name}: expected a list of objects with {label!r} and a list {members!r}")
    return problems


def validate_document(doc: Any) -> list[str]:
    """Problems that would break reading ``doc`` (empty when fine); the schema is the full contract."""
    if not isinstance(doc, dict):
        return [f"document: expected a JSON object, got {type(doc).__name__}"]
    problems: list[str] = []
    if doc.get("schema_version") != SCHEMA_VERSION:
        problems.append(f"schema_version: expected {SCHEMA_VERSION}, got {doc.get('schema_version')!r}")
    if not isinstance(doc.get("environment"), dict):
        problems.append("environment: expected an object")
    for i, entry in enumerate(_list_of_dicts(doc, "excluded", problems)):
        for key in ("id", "reason"):
            if not isinstance(entry.get(key), str):
                problems.append(f"excluded[{i}].{key}: missing or not a string")
    for i, model in enumerate(_list_of_dicts(doc, "models", problems)):
        if not isinstance(model.get("id"), str):
            problems.append(f"models[{i}].id: missing or not a string")
    for i, group in enumerate(_list_of_dicts(doc, "not_run", problems)):
        if not isinstance(group.get("reason"), str) or not all(_is_number(group.get(k)) for k in ("cells", "checks")):
            problems.append(f"not_run[{i}]: expected a reason and numbers of cells and checks")
    run = doc.get("run")
    if run is not None and not (isinstance(run, dict) and isinstance(run.get("complete"), bool)):
        problems.append("run: expected an object with a boolean 'complete'")
    if "plan" in doc:
        problems += _plan_problems(doc["plan"])
    seen: set[tuple[str, str]] = set()
    for i, result in enumerate(_list_of_dicts(doc, "results", problems)):
        _validate_result(i, result, problems)
        cell_check = (str(result.get("cell_id")), str(result.get("check")))
        if cell_check in seen:
            problems.append(f"results[{i}]: duplicate result for cell {cell_check[0]!r}, check {cell_check[1]!r}")
        seen.add(cell_check)
    for i, cell in enumerate(_list_of_dicts(doc, "cells", problems)):
        if not isinstance(cell.get("cell_id"), str):
            problems.append(f"cells[{i}].cell_id: missing or not a string")
        for key in ("load_s", "probe_s"):
            if cell.get(key) is not None and not _is_number(cell[key]):
                problems.append(f"cells[{i}].{key}: expected a number or null")
    return problems


# --------------------------------------------------------------------------- building, merging, comparing


def result_sort_key(result: dict[str, Any]) -> tuple[str, str, str]:
    """Deterministic order of results: model, then cell, then check."""
    return (result.get("model", ""), result.get("cell_id", ""), result.get("check", ""))


def count_not_run(skipped: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Checks that never ran (rows with a ``reason`` and a ``cell_id``), counted by reason, most first."""
    checks = Counter(row["reason"] for row in skipped)
    cells = Counter(reason for reason, _ in {(row["reason"], row["cell_id"]) for row in skipped})
    return [{"reason": reason, "cells": cells[reason], "checks": n}
            for reason, n in sorted(checks.items(), key=lambda item: (-item[1], item[0]))]


def merge_documents(docs: list[Doc]) -> Doc:
    """Merge report shards (e.g. a CI fan-out) into one document.

    Results, cells, models and exclusions are concatenated (models and exclusions de-duplicated by
    id), never-run counts added up by reason, and everything sorted deterministically; the
    environment comes from the first shard plus a ``shards`` count, ``run`` is complete only if
    every shard's run is, and ``plan`` is the union of the shards' (absent if a shard has none). Raises ``ValueError`` for an
    empty list, mixed schema versions or a result present twice.
    """
    if not docs:
        raise ValueError("merge_documents: no documents to merge")
    versions = sorted({repr(doc.get("schema_version")) for doc in docs})
    if len(versions) > 1:
        raise ValueError(f"cannot merge reports with different schema versions: {', '.join(versions)}")
    results = [copy.deepcopy(r) for doc in docs for r in doc.get("results", [])]
    seen: set[tuple[str, str]] = set()
    for result in results:
        key = (result.get("cell_id"), result.get("check"))
        if key in seen:
            raise ValueError(f"result for cell {key[0]!r}, check {key[1]!r} appears in more than one shard")
        seen.add(key)
    by_id: dict[str, dict[str, dict[str, Any]]] = {"excluded": {}, "models": {}}
    for doc in docs:
        for name, entries in by_id.items():
            for entry in doc.get(name, []):
                entries.setdefault(entry.get("id", ""), copy.deepcopy(entry))
    not_run: dict[str, dict[str, Any]] = {}
    for doc in docs:
        for group in doc.get("not_run", []):
            total = not_run.setdefault(group["reason"], {"reason": group["reason"], "cells": 0, "checks": 0})
            total["cells"] += group["cells"]
            total["checks"] += group["checks"]
    environment = copy.deepcopy(docs[0].get("environment", {}))
    environment["shards"] = sum(doc.get("environment", {}).get("shards", 1) for doc in docs)
    plan = merge_plans(docs)
    return {
        "schema_version": docs[0].get("schema_version"),
        "environment": environment,
        "run": merge_run_fields(docs),
        "models": [by_id["models"][key] for key in sorted(by_id["models"])],
        "excluded": [by_id["excluded"][key] for key in sorted(by_id["excluded"])],
        "results": sorted(results, key=result_sort_key),
        "not_run": sorted(not_run.values(), key=lambda g: (-g["checks"], g["reason"])),
        "cells": sorted((copy.deepcopy(c) for doc in docs for c in doc.get("cells", [])),
                        key=lambda c: (c.get("model", ""), c.get("cell_id", ""))),
        **({"plan": plan} if plan is not None else {}),
    }


def strip_volatile(doc: Doc) -> Doc:
    """Return a copy of ``doc`` without timings and dates, for comparing two runs."""
    stripped = copy.deepcopy(doc)
    stripped.get("environment", {}).pop("date", None)
    for result in stripped.get("results", []):
        result.pop("duration_s", None)
    for cell in stripped.get("cells", []):
        for key in [key for key in cell if key.endswith("_s") or key == "loads"]:
            del cell[key]
    return stripped


def document_json(doc: Doc) -> str:
    """Canonical JSON text of a document: messages packed (:func:`pack_messages`), sorted keys, one line per
    result; raises ``ValueError`` on NaN/inf."""
    packed = pack_messages(doc)

    def dump(value: Any) -> str:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)

    rows = ",\n".join(dump(result) for result in packed["results"])
    fields = ['"results":[\n' + rows + "\n]" if key == "results" else f"{dump(key)}:{dump(packed[key])}"
              for key in sorted(packed)]
    return "{\n" + ",\n".join(fields) + "\n}\n"
