"""The published report schema as a validator for the self-tests."""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from kvconform.report import SCHEMA_PATH

#: Validator of the published report schema (kvconform/report/conformance.schema.json).
SCHEMA_VALIDATOR = jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))


def schema_problems(doc: Any) -> list[str]:
    """Where ``doc`` breaks the published report schema (empty when it conforms)."""
    return [f"{'/'.join(map(str, error.absolute_path)) or '(document)'}: {error.message}"
            for error in SCHEMA_VALIDATOR.iter_errors(doc)]


def undocumented_details(results: Any) -> list[str]:
    """The ``details`` keys of check results (``CheckResult`` values) that the published schema does not document."""
    documented = set(SCHEMA_VALIDATOR.schema["$defs"]["details"]["properties"])
    return sorted({f"{result.name}: {key}" for result in results for key in result.details if key not in documented})
