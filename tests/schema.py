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
