"""The published report schema (kvconform/report/conformance.schema.json): a valid JSON Schema that
accepts real documents, rejects what the loader rejects, and documents every field the checks write.

Every inner run of tests/test_plugin.py, tests/test_maintainer.py and tests/test_report_run.py is
also validated against it (``Run.doc``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest

from kvconform.report import SCHEMA_PATH, validate_document
from tests.conftest import probe_and_check
from tests.faults import planted
from tests.schema import schema_problems
from tests.test_report import sample_doc

SCHEMA = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def test_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_sample_document_conforms() -> None:
    assert schema_problems(sample_doc()) == []


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = doc
        for key in parents:
            target = target[int(key)] if key.isdigit() else target[key]
        if value is KeyError:
            del target[int(last) if last.isdigit() else last]
        else:
            target[int(last) if last.isdigit() else last] = value
    return mutate


BROKEN = {
    "wrong schema version": _set("schema_version", 1),
    "unknown outcome": _set("results.0.outcome", "bogus"),
    "skip row (counted in not_run instead)": _set("results.0.outcome", "skip"),
    "missing cell id": _set("results.1.cell_id", KeyError),
    "xfail without its reason": _set("results.6.reason", KeyError),
    "step deltas as text": _set("results.2.details.step_max_abs_delta", ["x"]),
    "figure without a unit": _set("results.0.figure", {"measured": 1.0}),
    "not_run counts as text": _set("not_run.0.cells", "six"),
    "environment not an object": _set("environment", []),
    "model without an id": _set("models.0.id", KeyError),
    "run without its verdict": _set("run.complete", KeyError),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_schema_rejects_what_the_loader_rejects(case: str) -> None:
    doc = copy.deepcopy(sample_doc())
    BROKEN[case](doc)
    assert validate_document(doc), f"the loader accepts a document with {case}"
    assert schema_problems(doc), f"the schema accepts a document with {case}"


def test_schema_rejects_undocumented_fields() -> None:
    doc = sample_doc()
    doc["results"][0]["details"]["new_field"] = 1
    doc["results"][1]["model_type"] = "llama"  # provenance lives in models, not in every row
    problems = schema_problems(doc)
    assert any(p.startswith("results/0/details") and "new_field" in p for p in problems), problems
    assert any(p.startswith("results/1") and "model_type" in p for p in problems), problems


def test_every_details_field_the_checks_write_is_documented(llama) -> None:
    """Healthy cells with the extra paths, and a planted fault (parity then adds its K/V localization)."""
    results = list(probe_and_check(llama, paths=True).values())
    with planted("stale_column"):
        results += probe_and_check(llama).values()
    written = {key for result in results for key in result.details}
    documented = set(SCHEMA["$defs"]["details"]["properties"])
    assert {"divergence", "diagnosis", "bytes_trace"} <= written
    assert written <= documented, f"undocumented details fields: {sorted(written - documented)}"
    figure = jsonschema.Draft202012Validator({"$ref": "#/$defs/figure", "$defs": SCHEMA["$defs"]})
    for result in results:
        if result.figure is not None:
            figure.validate(result.figure.to_dict())


def test_the_result_row_type_is_the_schema_result() -> None:
    """ResultRow (what the plugin writes) and the schema's result object name the same fields and outcomes."""
    from kvconform.results import OUTCOMES, ResultRow

    result = json.loads(SCHEMA_PATH.read_text())["$defs"]["result"]
    assert set(ResultRow.__required_keys__) == set(result["required"])
    assert set(ResultRow.__required_keys__ | ResultRow.__optional_keys__) == set(result["properties"])
    assert set(result["properties"]["outcome"]["enum"]) == set(OUTCOMES) - {"skip"}  # skips are counted, not rows
