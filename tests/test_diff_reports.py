"""Tests of the regression diff between two reports, as a library and as the tools/diff_reports.py CLI."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kvconform.diff import diff_documents, regressions, render_diff_markdown, render_diff_text
from kvconform.results import SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "diff_reports.py"


def make_result(cell_id: str, check: str, outcome: str = "pass", peak: float | None = None) -> dict[str, Any]:
    details = {} if peak is None else {"step_max_abs_delta": [peak / 10, peak], "tolerance": 1e-2}
    return {"cell_id": cell_id, "model": cell_id.split("[")[0], "dtype": "float32", "device": "cpu",
            "cache": "dynamic", "check": check, "outcome": outcome, "measured": "", "limit": "",
            "message": "" if outcome == "pass" else f"{check} broke on {cell_id}", "details": details}


@pytest.fixture
def base() -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "environment": {"kvconform": "0.1.0", "torch": "2.13.0+cpu", "date": "2026-11-29T03:00:00Z"},
        "models": [],
        "excluded": [],
        "not_run": [],
        "results": [
            make_result("a[float32-cpu-dynamic]", "parity", peak=1e-4),
            make_result("a[float32-cpu-dynamic]", "growth"),
            make_result("b[float32-cpu-dynamic]", "parity", "fail", peak=5e-2),
            make_result("b[float32-cpu-dynamic]", "growth", "xfail") | {"reason": "known to fail"},
            make_result("c[float32-cpu-dynamic]", "shapes"),
        ],
        "cells": [],
    }


def find(doc: dict[str, Any], cell_id: str, check: str) -> dict[str, Any]:
    return next(r for r in doc["results"] if (r["cell_id"], r["check"]) == (cell_id, check))


def run_tool(tmp_path: Path, base: Any, new: Any, *args: str) -> subprocess.CompletedProcess[str]:
    paths = []
    for name, doc in (("base.json", base), ("new.json", new)):
        path = tmp_path / name
        if doc is not None:
            path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        paths.append(str(path))
    return subprocess.run([sys.executable, str(TOOL), *paths, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


# --------------------------------------------------------------------------- library


def test_identical_runs_have_no_changes(base: dict[str, Any]) -> None:
    diff = diff_documents(base, copy.deepcopy(base))
    assert regressions(diff) == 0
    assert render_diff_text(diff) == "No differences.\n\nNo regressions (0 informational changes).\n"


def test_categories(base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    find(new, "a[float32-cpu-dynamic]", "growth").update(outcome="fail", message="cache length 5 != 6")
    find(new, "b[float32-cpu-dynamic]", "parity").update(outcome="pass", details={
        "step_max_abs_delta": [1e-3], "tolerance": 1e-2})  # newly passing, delta shrank 50x
    find(new, "b[float32-cpu-dynamic]", "growth")["outcome"] = "pass"  # xfail -> pass: informational
    new["results"].remove(find(new, "c[float32-cpu-dynamic]", "shapes"))
    new["results"].append(make_result("d[float32-cpu-dynamic]", "shapes", "fail"))
    diff = diff_documents(base, new)
    keys = {name: [(e["cell_id"], e["check"]) for e in diff[name]] for name in (
        "newly_failing", "newly_passing", "parity_grew", "parity_shrank", "outcome_changed", "appeared", "disappeared")}
    assert keys == {
        "newly_failing": [("a[float32-cpu-dynamic]", "growth")],
        "newly_passing": [("b[float32-cpu-dynamic]", "parity")],
        "parity_grew": [],
        "parity_shrank": [("b[float32-cpu-dynamic]", "parity")],
        "outcome_changed": [("b[float32-cpu-dynamic]", "growth")],
        "appeared": [("d[float32-cpu-dynamic]", "shapes")],
        "disappeared": [("c[float32-cpu-dynamic]", "shapes")],
    }
    assert regressions(diff) == 1
    assert diff["newly_failing"][0]["message"] == "cache length 5 != 6"


def test_parity_growth_beyond_factor_regresses(base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    find(new, "a[float32-cpu-dynamic]", "parity")["details"]["step_max_abs_delta"] = [1e-5, 3e-4]  # x3, still passing
    diff = diff_documents(base, new, factor=2.0)
    assert [e["cell_id"] for e in diff["parity_grew"]] == ["a[float32-cpu-dynamic]"]
    assert regressions(diff) == 1
    assert "x3 (tolerance 1.00e-02)" in render_diff_text(diff)
    assert regressions(diff_documents(base, new, factor=4.0)) == 0


def test_parity_growth_from_zero_and_nan(base: dict[str, Any]) -> None:
    find(base, "a[float32-cpu-dynamic]", "parity")["details"]["step_max_abs_delta"] = [0.0, 0.0]
    new = copy.deepcopy(base)
    find(new, "a[float32-cpu-dynamic]", "parity")["details"]["step_max_abs_delta"] = [0.0, 1e-7]
    assert len(diff_documents(base, new)["parity_grew"]) == 1
    find(new, "a[float32-cpu-dynamic]", "parity")["details"]["step_max_abs_delta"] = [float("nan")]
    assert len(diff_documents(base, new)["parity_grew"]) == 1
    shrunk = diff_documents(new, base)  # inf -> 0: a shrink, rendered without dividing by zero
    assert len(shrunk["parity_shrank"]) == 1 and "inf -> 0.00e+00" in render_diff_text(shrunk)
    with pytest.raises(ValueError, match="factor"):
        diff_documents(base, new, factor=0.5)


def test_markdown_report_lists_changes_and_messages(base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    new["environment"]["torch"] = "2.14.0+cpu"
    find(new, "a[float32-cpu-dynamic]", "growth").update(outcome="crashed", message="worker died\nsignal 11")
    text = render_diff_markdown(diff_documents(base, new))
    assert re.search(r"^\| torch\s+\| 2.13.0\+cpu\s+\| 2.14.0\+cpu\s+\|$", text, re.M)
    assert "**REGRESSED: 1 newly failing (factor 2).**" in text
    assert "## Newly failing (1)" in text
    assert "| a[float32-cpu-dynamic] | growth  | pass   | crashed |" in text
    assert "### growth · a[float32-cpu-dynamic]\n\n```text\nworker died\nsignal 11\n```" in text


# --------------------------------------------------------------------------- CLI


def test_cli_exit_0_when_nothing_regressed(tmp_path: Path, base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    find(new, "b[float32-cpu-dynamic]", "parity")["outcome"] = "pass"
    proc = run_tool(tmp_path, base, new)
    assert proc.returncode == 0, proc.stderr
    assert "newly passing" in proc.stdout
    assert "No regressions (1 informational change)." in proc.stdout


def test_cli_exit_1_for_newly_failing_cell(tmp_path: Path, base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    find(new, "c[float32-cpu-dynamic]", "shapes")["outcome"] = "error"
    proc = run_tool(tmp_path, base, new)
    assert proc.returncode == 1, proc.stderr
    assert "| newly failing | c[float32-cpu-dynamic] | shapes  | pass   | error |" in proc.stdout
    assert "REGRESSED: 1 newly failing" in proc.stdout


def test_cli_exit_1_for_parity_growth_and_factor_option(tmp_path: Path, base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    find(new, "a[float32-cpu-dynamic]", "parity")["details"]["step_max_abs_delta"] = [1e-4, 5e-4]  # x5
    proc = run_tool(tmp_path, base, new)
    assert proc.returncode == 1, proc.stderr
    assert "parity delta grew" in proc.stdout
    assert run_tool(tmp_path, base, new, "--factor", "6").returncode == 0


@pytest.mark.parametrize("new", [None, "{oops", json.dumps({"schema_version": 2})],
                         ids=["missing", "bad-json", "bad-schema"])
def test_cli_exit_2_for_bad_input(tmp_path: Path, base: dict[str, Any], new: str | None) -> None:
    proc = run_tool(tmp_path, base, new)
    assert proc.returncode == 2
    assert "new.json" in proc.stderr and proc.stdout == ""


def test_cli_writes_markdown(tmp_path: Path, base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    find(new, "a[float32-cpu-dynamic]", "growth").update(outcome="fail", message="cache length 5 != 6")
    out = tmp_path / "notes" / "diff.md"
    proc = run_tool(tmp_path, base, new, "--markdown", str(out))
    assert proc.returncode == 1, proc.stderr
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# KV cache conformance: changes between runs")
    assert "## Newly failing (1)" in text and "```text\ncache length 5 != 6\n```" in text
