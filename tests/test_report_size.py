"""Report sizes of the default matrix (2,642 cells × 9 checks), on a synthetic document built from one
real cell's results (tests/data/report_cell_rows.json) with fresh numbers per cell."""

from __future__ import annotations

import json
import random
import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kvconform.report import document_json, load_document, render_html, render_junit, render_markdown, write_reports
from kvconform.results import SCHEMA_VERSION

DATA = json.loads((Path(__file__).parent / "data" / "report_cell_rows.json").read_text(encoding="utf-8"))
#: Cells of the default matrix (``python -m pytest suites`` on transformers 5.24).
DEFAULT_CELLS = 2642
#: Budgets (bytes) of the default matrix's reports.
HTML_BUDGET = 500_000
#: Per result, mostly its numbers (per-step deltas, traces, figures at full precision); before the
#: templates, the short node ids and one line per result it was 1,543 B, the JUnit 600 B.
JSON_BUDGET_PER_RESULT = 800
JUNIT_BUDGET_PER_RESULT = 340
_SCI = re.compile(r"\d\.\d\de-\d\d")
VARIANTS = [(dtype, cache, attn) for dtype in ("float32", "bfloat16", "float16") for cache in ("dynamic", "static", "quantized")
            for attn in ("sdpa", "eager")]


def _fresh(value: Any, rng: random.Random) -> Any:
    """``value`` with every float (and every ``1.23e-05`` inside a text) replaced by a new random one."""
    if isinstance(value, float):
        return rng.uniform(0.1, 9.9) * 10.0 ** rng.randint(-7, -3)
    if isinstance(value, str):
        return _SCI.sub(lambda _: f"{rng.uniform(1, 9.99):.2f}e-0{rng.randint(4, 7)}", value)
    if isinstance(value, list):
        return [_fresh(v, rng) for v in value]
    if isinstance(value, dict):
        return {k: v if k in ("unit", "bound") else _fresh(v, rng) for k, v in value.items()}
    return value


def _row(template: dict[str, Any], model: str, variant: tuple[str, str, str], rng: random.Random) -> dict[str, Any]:
    dtype, cache, attn = variant
    cell_id = f"{model}[{dtype}-cpu-{cache}{'' if attn == 'sdpa' else '-' + attn}]"
    row = {**template, "model": model, "dtype": dtype, "cache": cache, "attn": attn, "cell_id": cell_id,
           "nodeid": f"suites/test_conformance.py::test_{template['check']}[{cell_id}]"}
    for key in ("message", "measured", "limit", "figure", "details", "duration_s"):
        row[key] = _fresh(template[key], rng)
    return row


def default_matrix_document(cells: int = DEFAULT_CELLS) -> dict[str, Any]:
    """A report of ``cells`` cells × the 9 checks of a causal LM; one cell in 60 has a known failure."""
    rng = random.Random(0)
    results = []
    for index in range(cells):
        model, variant = f"model{index // len(VARIANTS):03d}", VARIANTS[index % len(VARIANTS)]
        for template in DATA["cell"]:
            known = index % 60 == 0 and template["check"] == DATA["xfail"]["check"]
            results.append(_row({**template, **{k: DATA["xfail"][k] for k in ("outcome", "reason", "xfail_kind", "message")}}
                                if known else template, model, variant, rng))
    models = sorted({r["model"] for r in results})
    cell_ids = sorted({r["cell_id"] for r in results})
    return {
        "schema_version": SCHEMA_VERSION,
        "environment": {"kvconform": "0.1.0", "transformers": "5.24.0", "torch": "2.13.0", "python": "3.11.7"},
        "run": {"complete": True, "stopped": None, "planned": len(results), "never_ran": 0, "cells_never_ran": 0,
                "shard": None, "empty_shard": False},
        "models": [{"id": m, "source": "synthetic", "location": m, "revision": None, "model_type": m} for m in models],
        "excluded": DATA["excluded"],
        "results": results,
        "not_run": [{"reason": "cuda: no CUDA device on this machine (torch.cuda.is_available() is False)",
                     "cells": cells, "checks": 9 * cells}],
        "cells": [{"cell_id": c, "load_s": 0.05, "probe_s": 0.4} for c in cell_ids],
    }


@pytest.fixture(scope="module")
def big() -> dict[str, Any]:
    return default_matrix_document()


def test_the_html_of_the_default_matrix_is_within_budget(big: dict[str, Any]) -> None:
    page = render_html(big)
    assert len(page.encode()) <= HTML_BUDGET, f"{len(page.encode()):,} B > {HTML_BUDGET:,} B"
    not_passing = {r["cell_id"] for r in big["results"] if r["outcome"] != "pass"}
    cells = page.split("<summary>Cells that did not pass every check")[1].split("</thead>")[1]
    assert cells.count("<tr><th") == len(not_passing) > 0  # every cell that did not pass is in the (folded) table


def test_the_json_states_shared_message_text_once(big: dict[str, Any], tmp_path: Path) -> None:
    text = document_json(big)
    size = len(text.encode())
    assert size <= JSON_BUDGET_PER_RESULT * len(big["results"]), f"{size / len(big['results']):.0f} B per result"
    raw = json.loads(text)
    plain = Counter(r["message"] for r in raw["results"] if isinstance(r["message"], str) and r["message"])
    assert max(plain.values(), default=1) == 1  # a message used twice is a template, stated once
    assert len(raw["message_templates"]) == len(set(raw["message_templates"])) <= 2 * len(DATA["cell"])
    assert not any("::" in r["nodeid"] for r in raw["results"])  # the test name is derived, not repeated
    (tmp_path / "conformance.json").write_text(text, encoding="utf-8")
    assert load_document(tmp_path / "conformance.json") == big  # and reads back exactly


def test_the_junit_carries_only_what_did_not_pass_in_full(big: dict[str, Any]) -> None:
    xml = render_junit(big)
    assert len(xml.encode()) <= JUNIT_BUDGET_PER_RESULT * len(big["results"]), f"{len(xml.encode()) / len(big['results']):.0f} B per result"
    root = ET.fromstring(xml)
    assert not [case for case in root.iter("testcase") if any((child.text or "").strip() for child in case
                                                               if child.tag in ("skipped", "system-out"))]
    assert "cache grew by one per step" not in xml  # the messages of passes are in the JSON only


def test_an_old_report_still_reads(tmp_path: Path) -> None:
    doc = default_matrix_document(cells=3)
    old = {**doc, "schema_version": SCHEMA_VERSION - 1}
    (tmp_path / "old.json").write_text(json.dumps(old, indent=2), encoding="utf-8")
    assert load_document(tmp_path / "old.json") == doc


def test_writing_all_reports_of_the_default_matrix(big: dict[str, Any], tmp_path: Path) -> None:
    paths = write_reports(big, tmp_path)
    sizes = {p.name: p.stat().st_size for p in paths}
    assert sizes["conformance.html"] <= HTML_BUDGET
    assert render_markdown(big).startswith("# KV cache conformance report\n\n> ")  # the verdict is the first line
