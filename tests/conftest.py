"""Shared helpers for the self-tests: tiny seeded models and a one-call probe-and-check."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import torch

from kvconform.build.geometry import cache_geometry, explain
from kvconform.build.models import model_in_dtype
from kvconform.build.synthetic import build_synthetic, shrink_config
from kvconform.checks import record_checks as checks
from kvconform.matrix import Tolerance
from kvconform.probe.decode import ProbePlan, run_probe
from kvconform.report import SCHEMA_PATH
from kvconform.results import CheckResult

#: The default matrix's tolerances (kept equal to model_matrix.yaml by test_matrix).
TOLERANCES = {
    "float32": Tolerance(atol=1e-5, rtol=3e-5),
    "float16": Tolerance(atol=1e-3, rtol=2e-2),
    "bfloat16": Tolerance(atol=1e-2, rtol=1e-1),
}


#: Validator of the published report schema (kvconform/report/conformance.schema.json).
SCHEMA_VALIDATOR = jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))


def schema_problems(doc: Any) -> list[str]:
    """Where ``doc`` breaks the published report schema (empty when it conforms)."""
    return [f"{'/'.join(map(str, error.absolute_path)) or '(document)'}: {error.message}"
            for error in SCHEMA_VALIDATOR.iter_errors(doc)]


def tiny(model_type: str, **overrides: Any) -> torch.nn.Module:
    """A shrunk random-weight model of ``model_type`` (float32)."""
    return build_synthetic(shrink_config(model_type, overrides), seed=0).eval()


def probe_and_check(
    model: torch.nn.Module, *, dtype: str = "float32", cache: str = "dynamic", prompt_length: int = 6,
    decode_steps: int = 8, batch_size: int = 2, paths: bool = False,
) -> dict[str, CheckResult]:
    """Probe ``model`` in ``dtype`` and run every check, as the suite does for one cell."""
    plan = ProbePlan(
        batch_size=batch_size, prompt_length=prompt_length, decode_steps=decode_steps, seed=0, cache=cache,
        locate_tolerance=TOLERANCES[dtype], ragged=paths, prefix_reuse=paths,
    )
    record = run_probe(model_in_dtype(model, dtype, "cpu"), plan)
    return checks.run_all(record, cache_geometry(model.config), explain(model.config), TOLERANCES[dtype])


@pytest.fixture(scope="session")
def llama() -> torch.nn.Module:
    """GQA: 4 query heads, 2 KV heads."""
    return tiny("llama")


@pytest.fixture(scope="session")
def mistral() -> torch.nn.Module:
    """Every layer slides with a window of 4, so a 6-token prompt already crosses it."""
    return tiny("mistral", sliding_window=4)
