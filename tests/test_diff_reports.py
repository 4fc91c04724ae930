"""Tests of the regression diff between two reports, as a library and as the tools/diff_reports.py CLI."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kvconform.cells import VARIANT_DTYPES, check_applies, plan_cells, plan_field
from kvconform.checks.table import CHECK_ORDER, CHECKS
from kvconform.diff import diff_documents, regressions, render_diff_markdown, render_diff_text
from kvconform.matrix import parse_matrix
from kvconform.report import merge_documents, validate_document
from kvconform.results import SCHEMA_VERSION
from tests.schema import SCHEMA_VALIDATOR

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "diff_reports.py"


def make_result(cell_id: str, check: str, outcome: str = "pass", peak: float | None = None,
                limit: float | None = 1e-2, message: str | None = None) -> dict[str, Any]:
    details: dict[str, Any] = {} if peak is None else {"step_max_abs_delta": [peak / 10, peak]}
    if peak is not None and limit is not None:
        details["tolerance"] = limit
    model, _, rest = cell_id.partition("[")
    dtype, device, cache = rest.rstrip("]").split("-")[:3]
    return {"cell_id": cell_id, "model": model, "dtype": dtype, "device": device,
            "cache": cache, "check": check, "outcome": outcome, "measured": "", "limit": "",
            "message": message if message is not None else "" if outcome == "pass" else f"{check} broke on {cell_id}",
            "details": details}


def set_peak(doc: dict[str, Any], cell_id: str, peak: float) -> None:
    find(doc, cell_id, "parity")["details"]["step_max_abs_delta"] = [peak / 10, peak]


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
    assert render_diff_text(diff) == "No listed differences.\n\nNo regressions (0 informational changes; factor 2, margin 0.5).\n"


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
        "newly_failing", "newly_passing", "parity_grew", "parity_shrank", "outcome_changed", "appeared", "lost")}
    assert keys == {
        "newly_failing": [("a[float32-cpu-dynamic]", "growth")],
        "newly_passing": [("b[float32-cpu-dynamic]", "parity")],
        "parity_grew": [],
        "parity_shrank": [("b[float32-cpu-dynamic]", "parity")],
        "outcome_changed": [("b[float32-cpu-dynamic]", "growth")],
        "appeared": [("d[float32-cpu-dynamic]", "shapes")],
        "lost": [("c[float32-cpu-dynamic]", "shapes")],  # passed in the base, missing now
    }
    assert regressions(diff) == 2
    assert regressions(diff_documents(base, new, allow_missing=True)) == 1
    assert diff["newly_failing"][0]["message"] == "cache length 5 != 6"


def test_parity_growth_beyond_factor_and_margin_regresses(base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    set_peak(new, "a[float32-cpu-dynamic]", 6e-3)  # x60, still passing, 60% of the limit 1e-2
    diff = diff_documents(base, new, factor=2.0)
    assert [e["cell_id"] for e in diff["parity_grew"]] == ["a[float32-cpu-dynamic]"]
    assert regressions(diff) == 1
    assert "x60 (tolerance 1.00e-02, 60% of it)" in render_diff_text(diff)
    assert regressions(diff_documents(base, new, factor=100.0)) == 0  # below the factor
    assert regressions(diff_documents(base, new, margin=0.7)) == 0  # within the margin


# Two pairs from a transformers 5.20.0 -> 5.24.0 comparison: (base Δ, new Δ, limit), growth far below the limit.
RELEASE_NOISE = [(0.0, 3.9e-3, 8.7e-2), (6.3e-6, 1.4e-5, 1.5e-4)]


@pytest.mark.parametrize(("before", "after", "limit"), RELEASE_NOISE, ids=["0-to-4pct", "x2.2-to-9pct"])
def test_parity_growth_within_the_margin_is_counted_noise(base: dict[str, Any], before: float, after: float,
                                                          limit: float) -> None:
    for doc, peak in ((base, before), (new := copy.deepcopy(base), after)):
        find(doc, "a[float32-cpu-dynamic]", "parity")["details"] = {"step_max_abs_delta": [peak], "tolerance": limit}
    diff = diff_documents(base, new)
    assert regressions(diff) == 0 and not diff["parity_grew"]
    assert [e["cell_id"] for e in diff["parity_noise"]] == ["a[float32-cpu-dynamic]"]
    assert "1 parity delta moves stayed within 0.5 of their limit (noise) — a: 1" in render_diff_text(diff)


@pytest.mark.parametrize(("after", "limit", "grew"), [
    (4.4e-2, 8.7e-2, True),    # 0 -> 51% of the limit: past both bars
    (4.3e-2, 8.7e-2, False),   # 0 -> 49% of the limit: within the margin
    (3.0e-4, 1.5e-4, True),    # 6.3e-6 -> over the limit (and newly failing in a real report)
])
def test_margin_rule_both_sides(base: dict[str, Any], after: float, limit: float, grew: bool) -> None:
    find(base, "a[float32-cpu-dynamic]", "parity")["details"] = {"step_max_abs_delta": [0.0], "tolerance": limit}
    new = copy.deepcopy(base)
    find(new, "a[float32-cpu-dynamic]", "parity")["details"] = {"step_max_abs_delta": [after], "tolerance": limit}
    assert (regressions(diff_documents(base, new)) == 1) is grew


def test_parity_growth_without_a_limit_uses_the_factor_alone(base: dict[str, Any]) -> None:
    for doc in (base, new := copy.deepcopy(base)):
        find(doc, "a[float32-cpu-dynamic]", "parity")["details"].pop("tolerance")
    set_peak(new, "a[float32-cpu-dynamic]", 3e-4)  # x3 of 1e-4
    assert len(diff_documents(base, new)["parity_grew"]) == 1
    assert regressions(diff_documents(base, new, factor=4.0)) == 0


def test_parity_growth_from_zero_and_nan(base: dict[str, Any]) -> None:
    find(base, "a[float32-cpu-dynamic]", "parity")["details"]["step_max_abs_delta"] = [0.0, 0.0]
    new = copy.deepcopy(base)
    find(new, "a[float32-cpu-dynamic]", "parity")["details"]["step_max_abs_delta"] = [0.0, 6e-3]
    assert len(diff_documents(base, new)["parity_grew"]) == 1
    find(new, "a[float32-cpu-dynamic]", "parity")["details"]["step_max_abs_delta"] = [float("nan")]
    assert len(diff_documents(base, new)["parity_grew"]) == 1
    shrunk = diff_documents(new, base)  # inf -> 0: a shrink, rendered without dividing by zero
    assert len(shrunk["parity_shrank"]) == 1 and "inf -> 0.00e+00" in render_diff_text(shrunk)
    with pytest.raises(ValueError, match="factor"):
        diff_documents(base, new, factor=0.5)
    with pytest.raises(ValueError, match="margin"):
        diff_documents(base, new, margin=-1)


def test_markdown_report_lists_changes_and_messages(base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    new["environment"]["torch"] = "2.14.0+cpu"
    find(new, "a[float32-cpu-dynamic]", "growth").update(outcome="crashed", message="worker died\nsignal 11")
    text = render_diff_markdown(diff_documents(base, new))
    assert re.search(r"^\| torch\s+\| 2.13.0\+cpu\s+\| 2.14.0\+cpu\s+\|$", text, re.M)
    assert "**REGRESSED: 1 newly failing (factor 2, margin 0.5).**" in text
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
    assert "No regressions (1 informational change; factor 2, margin 0.5)." in proc.stdout


def test_cli_exit_1_for_newly_failing_cell(tmp_path: Path, base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    find(new, "c[float32-cpu-dynamic]", "shapes")["outcome"] = "error"
    proc = run_tool(tmp_path, base, new)
    assert proc.returncode == 1, proc.stderr
    assert "| newly failing | c[float32-cpu-dynamic] | shapes  | pass   | error |" in proc.stdout
    assert "REGRESSED: 1 newly failing" in proc.stdout


def test_cli_exit_1_for_parity_growth_and_factor_and_margin_options(tmp_path: Path, base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    set_peak(new, "a[float32-cpu-dynamic]", 5e-3)  # x50, 50% of the limit
    proc = run_tool(tmp_path, base, new, "--margin", "0.4")
    assert proc.returncode == 1, proc.stderr
    assert "parity delta grew" in proc.stdout
    assert run_tool(tmp_path, base, new, "--margin", "0.4", "--factor", "60").returncode == 0
    assert run_tool(tmp_path, base, new).returncode == 0  # default margin 0.5: 50% is within it


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


# --------------------------------------------------------------------------- a release upgrade: red only for real


CUDA_SKIP = "cuda: no CUDA device on this machine (torch.cuda.is_available() is False)"
DTYPE_LIMITS = {"float32": 1.5e-4, "float16": 2.1e-2, "bfloat16": 8.7e-2}


def release_report(model_types: list[str], peaks: dict[str, float] | None = None) -> dict[str, Any]:
    """A sweep-shaped report: per type and dtype a passing cpu cell (parity, growth); its cuda cell never ran."""
    peaks = peaks or {}
    results = []
    for model_type in model_types:
        for dtype, limit in DTYPE_LIMITS.items():
            cpu = f"{model_type}[{dtype}-cpu-dynamic]"
            results += [make_result(cpu, "parity", peak=peaks.get(cpu, limit / 100), limit=limit),
                        make_result(cpu, "growth")]
    cuda_cells = len(model_types) * len(DTYPE_LIMITS)
    return {"schema_version": SCHEMA_VERSION, "environment": {"transformers": "5.x"}, "models": [], "excluded": [],
            "results": results, "not_run": [{"reason": CUDA_SKIP, "cells": cuda_cells, "checks": 2 * cuda_cells}],
            "cells": []}


@pytest.fixture
def release_pair() -> tuple[dict[str, Any], dict[str, Any]]:
    """5.20-like base (20 types) and 5.24-like new report (the same plus 40 new types, four Δ that grew well
    within their limits): 240 results appear; the cuda cells never ran, so they are no results to compare."""
    old_types = [f"t{n:02d}" for n in range(20)]
    base = release_report(old_types, {"t00[bfloat16-cpu-dynamic]": 0.0, "t01[float32-cpu-dynamic]": 6.3e-6,
                                      "t02[float16-cpu-dynamic]": 1e-4, "t03[bfloat16-cpu-dynamic]": 1e-3})
    new = release_report(old_types + [f"n{n:02d}" for n in range(40)],
                         {"t00[bfloat16-cpu-dynamic]": 3.9e-3, "t01[float32-cpu-dynamic]": 1.4e-5,
                          "t02[float16-cpu-dynamic]": 1e-3, "t03[bfloat16-cpu-dynamic]": 4e-3})
    return base, new


def test_release_upgrade_noise_is_green_and_fits_on_one_screen(tmp_path: Path, release_pair: Any) -> None:
    base, new = release_pair
    proc = run_tool(tmp_path, base, new)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) <= 10, proc.stdout
    assert lines[0] == "No listed differences."
    assert "240 results appeared and pass — n00: 6; n01: 6; n02: 6; …" in lines
    assert "4 parity delta moves stayed within 0.5 of their limit (noise) — t00: 1; t01: 1; t02: 1; …" in lines
    assert lines[-1] == "No regressions (244 informational changes; factor 2, margin 0.5)."
    assert "cuda" not in proc.stdout


def test_release_upgrade_with_a_real_regression_is_red_at_the_top(tmp_path: Path, release_pair: Any) -> None:
    base, new = release_pair
    set_peak(new, "t04[bfloat16-cpu-dynamic]", 6e-2)  # 8.7e-4 -> 6e-2: x69 and 69% of the limit 8.7e-2
    find(new, "t05[float32-cpu-dynamic]", "growth").update(outcome="fail", message="cache length 5 != 6")
    proc = run_tool(tmp_path, base, new)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) <= 12, proc.stdout
    rows = [[col.strip() for col in line.strip("|").split("|")] for line in lines[2:4]]
    assert rows[0] == ["newly failing", "t05[float32-cpu-dynamic]", "growth", "pass", "fail", "cache length 5 != 6"]
    assert rows[1] == ["parity delta grew", "t04[bfloat16-cpu-dynamic]", "parity", "8.70e-04", "6.00e-02",
                       "x69 (tolerance 8.70e-02, 69% of it)"]
    assert lines[-1] == "REGRESSED: 1 newly failing, 1 parity delta grew (factor 2, margin 0.5)."


# --------------------------------------------------------------------------- missing results


def test_cli_exit_1_when_a_passing_result_disappears_unless_allowed(tmp_path: Path, base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    new["results"].remove(find(new, "c[float32-cpu-dynamic]", "shapes"))
    proc = run_tool(tmp_path, base, new)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ("1 missing (passed in base): the new report records no plan (an older kvconform wrote it), so no reason "
            "is known — c: 1 (e.g. c[float32-cpu-dynamic] shapes)") in proc.stdout.splitlines()
    assert "REGRESSED: 1 missing (passed in base)" in proc.stdout
    allowed = run_tool(tmp_path, base, new, "--allow-missing")
    assert allowed.returncode == 0, allowed.stdout
    assert "No regressions (1 informational change;" in allowed.stdout


def test_cli_exit_1_when_the_new_report_is_incomplete_even_if_missing_is_allowed(tmp_path: Path,
                                                                                base: dict[str, Any]) -> None:
    """Same results, but the new report says its run was interrupted with checks left: never a green diff."""
    new = copy.deepcopy(base)
    new["run"] = {"complete": False, "stopped": "interrupted (Ctrl-C or pytest.exit)", "planned": 7, "never_ran": 2,
                  "cells_never_ran": 1, "shard": None, "empty_shard": False}
    proc = run_tool(tmp_path, base, new)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == (
        "REGRESSED: the new report is an incomplete run: interrupted (Ctrl-C or pytest.exit); 2 of 7 planned checks "
        "never ran (1 cells) (factor 2, margin 0.5).")
    allowed = run_tool(tmp_path, base, new, "--allow-missing")  # a subset may lack results; a cut-short run is no subset
    assert allowed.returncode == 1 and allowed.stdout.splitlines()[-1] == proc.stdout.splitlines()[-1], allowed.stdout


def test_cli_markdown_that_cannot_be_written_is_one_error_line(tmp_path: Path, base: dict[str, Any]) -> None:
    (tmp_path / "a-file").write_text("")
    proc = run_tool(tmp_path, base, base, "--markdown", str(tmp_path / "a-file" / "diff.md"))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"diff_reports: error: could not write --markdown {tmp_path / 'a-file' / 'diff.md'}")


# --------------------------------------------------------------------------- missing results and the new run's plan


PLAN_VALIDATOR = type(SCHEMA_VALIDATOR)(SCHEMA_VALIDATOR.schema["properties"]["plan"])
RELEASE_MATRIX = {
    "version": 1,
    "defaults": {"dtypes": ["float32", "float16"], "devices": ["cpu"], "caches": ["dynamic"],
                 "attentions": ["sdpa", "eager"], "beam": True,
                 "tolerances": {"float32": {"atol": 1e-5, "rtol": 3e-5}, "float16": {"atol": 1e-3, "rtol": 2e-2}}},
    "models": [{"sweep": "causal-lm", "variant_dtypes": ["float32"]}],
}


def planned_report(eager_default: set[str], transformers: str, selection: list[str] | None = None) -> dict[str, Any]:
    """A report of codegen and llama whose every planned check passed, planned by the real rules
    (``cells.plan_cells``): the models in ``eager_default`` have no sdpa in this "release"."""
    matrix = parse_matrix(copy.deepcopy(RELEASE_MATRIX), path=Path("matrix.yaml"), known_model_types=lambda: ["codegen", "llama"],
                          excluded_types={})
    planned, unplanned = plan_cells(matrix, lambda spec: "eager" if spec.id in eager_default else "sdpa")
    results = [make_result(cell.id, check, peak=1e-6 if check == "parity" else None, limit=1.5e-4)
               | {"attn": cell.attn, "model": cell.spec.id} for cell in planned for check in CHECK_ORDER if check_applies(check, cell)]
    return {"schema_version": SCHEMA_VERSION, "environment": {"transformers": transformers}, "models": [], "excluded": [],
            "results": results, "not_run": [], "cells": [],
            "plan": plan_field(planned, unplanned, [], selection or [])}


@pytest.fixture
def attention_change() -> tuple[dict[str, Any], dict[str, Any]]:
    """codegen runs eager by default in the base release and sdpa in the new one (gptj and codegen, 5.20 -> 5.24)."""
    return planned_report({"codegen"}, "5.20.0"), planned_report(set(), "5.24.0")


def test_planned_reports_conform_to_the_schema(attention_change: Any) -> None:
    for doc in attention_change:
        assert list(PLAN_VALIDATOR.iter_errors(doc["plan"])) == []
        assert validate_document(doc) == []
    broken = copy.deepcopy(attention_change[1])
    broken["plan"]["unplanned"] = [{"cells": ["x"]}]
    assert validate_document(broken) == ["plan.unplanned: expected a list of objects with 'reason' and a list 'cells'"]


def test_cells_the_new_release_did_not_plan_are_information(tmp_path: Path, attention_change: Any) -> None:
    base, new = attention_change
    diff = diff_documents(base, new)
    missing = {(e["cell_id"], e["check"]): e["reason"] for e in diff["not_planned"]}
    # codegen's float16 eager cell was its default path; in the new release it is a variant, run in float32 only.
    assert missing[("codegen[float16-cpu-dynamic-eager]", "parity")] == VARIANT_DTYPES.format(dtypes=["float32"])
    # Its float32 eager cell still runs, but beam runs with the default attention only.
    assert missing[("codegen[float32-cpu-dynamic-eager]", "beam")] == f"the cell runs, but {CHECKS['beam'].scope()}"
    # And so do the reuse paths (generate here).
    assert missing[("codegen[float32-cpu-dynamic-eager]", "generate")] == f"the cell runs, but {CHECKS['generate'].scope()}"
    assert len(missing) == 8 and not diff["lost"] and regressions(diff) == 0  # and between_calls
    proc = run_tool(tmp_path, base, new)
    assert proc.returncode == 0, proc.stdout
    assert ("5 not planned by the new run (transformers 5.24.0): variant cells (a cache other than dynamic, or an "
            "attention other than the model's default) run in variant_dtypes ['float32'] only — codegen: 5 "
            "[default attention changed: codegen eager -> sdpa]") in proc.stdout.splitlines()
    assert proc.stdout.splitlines()[-1].startswith("No regressions (")
    assert len(proc.stdout.splitlines()) <= 10, proc.stdout


def test_a_planned_cell_missing_from_the_new_run_regresses(tmp_path: Path, attention_change: Any) -> None:
    base, new = attention_change
    new["results"] = [r for r in new["results"] if r["cell_id"] != "llama[float16-cpu-dynamic]"]
    diff = diff_documents(base, new)
    assert [(e["cell_id"], e["check"]) for e in diff["lost"]] == [
        ("llama[float16-cpu-dynamic]", check) for check in ("bytes", "growth", "kv_parity", "parity", "shapes")]
    assert regressions(diff) == 5
    proc = run_tool(tmp_path, base, new)
    assert proc.returncode == 1, proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[2] == ("5 missing (passed in base): planned in the new run, no result (never ran, skipped, deselected "
                        "or not collected) — llama: 5 (e.g. llama[float16-cpu-dynamic] bytes)")
    assert lines[-1] == "REGRESSED: 5 missing (passed in base) (factor 2, margin 0.5)."
    # The cells the release did not plan stay information beside the regression.
    assert any(line.startswith("5 not planned by the new run") for line in lines)
    assert run_tool(tmp_path, base, new, "--allow-missing").returncode == 0
    text = render_diff_markdown(diff)
    assert "## Missing (passed in base) (5)\n\n- `llama[float16-cpu-dynamic]`: bytes, growth, kv_parity, parity, shapes\n" in text


def test_a_model_the_new_run_did_not_select_regresses_and_says_how_it_was_narrowed(tmp_path: Path,
                                                                                 attention_change: Any) -> None:
    base, _ = attention_change
    new = planned_report(set(), "5.24.0", selection=["-k 'codegen'"])
    new["results"] = [r for r in new["results"] if r["model"] == "codegen"]
    proc = run_tool(tmp_path, base, new)
    assert proc.returncode == 1, proc.stdout
    assert "the new run was narrowed: -k 'codegen'" in proc.stdout.splitlines()
    assert "missing (passed in base): planned in the new run, no result" in proc.stdout


def test_a_cut_short_run_is_reported_as_such(tmp_path: Path, attention_change: Any) -> None:
    base, new = attention_change
    new["results"] = [r for r in new["results"] if r["model"] != "llama"]
    new["run"] = {"complete": False, "stopped": "interrupted (Ctrl-C or pytest.exit)", "planned": 30, "never_ran": 9,
                  "cells_never_ran": 2, "shard": None, "empty_shard": False}
    for args in ((), ("--allow-missing",)):
        proc = run_tool(tmp_path, base, new, *args)
        assert proc.returncode == 1, proc.stdout
        assert proc.stdout.splitlines()[-1].endswith(
            "the new report is an incomplete run: interrupted (Ctrl-C or pytest.exit); 9 of 30 planned checks never "
            "ran (2 cells) (factor 2, margin 0.5).")
    assert run_tool(tmp_path, base, new).stdout.splitlines()[-1].startswith(
        "REGRESSED: 19 missing (passed in base), the new report is an incomplete run: ")


def test_checks_transformers_cannot_run_and_excluded_models_are_information(attention_change: Any) -> None:
    base, new = attention_change
    reason = "not applicable: CodeGenForCausalLM keeps its own cache"
    new["plan"]["not_applicable"] = [{"reason": reason, "keys": ["codegen[float32-cpu-dynamic-eager]::parity"]}]
    new["results"] = [r for r in new["results"] if r["model"] != "llama" and (r["cell_id"], r["check"]) != (
        "codegen[float32-cpu-dynamic-eager]", "parity")]
    for group in new["plan"]["planned"]:
        group["cells"] = [cell for cell in group["cells"] if not cell.startswith("llama")]
    del new["plan"]["models"]["llama"]
    new["excluded"] = [{"id": "llama", "model_type": "llama", "reason": "needs a GPU"}]
    diff = diff_documents(base, new)
    reasons = Counter(e["reason"] for e in diff["not_planned"])
    assert reasons[reason] == 1
    assert reasons["excluded from the new run's matrix: needs a GPU"] == 19
    assert regressions(diff) == 0


def test_missing_results_fold_into_a_bounded_number_of_lines(attention_change: Any) -> None:
    base, new = attention_change
    new["results"] = []
    new["plan"]["not_applicable"] = [{"reason": f"not applicable: reason {n}", "keys": [f"{r['cell_id']}::{r['check']}"]}
                                     for n, r in enumerate(base["results"])]
    text = render_diff_text(diff_documents(base, new))
    lines = text.splitlines()
    assert len(base["results"]) == 32 and len(lines) == 13, text  # table, 8 reasons, the rest, verdict
    assert lines[-3] == "… 24 more missing results under 24 more reasons"


def test_shard_plans_merge_into_the_whole_run(attention_change: Any) -> None:
    _, whole = attention_change
    shards = []
    for model in ("codegen", "llama"):
        shard_doc = copy.deepcopy(whole)
        shard_doc["results"] = [r for r in whole["results"] if r["model"] == model]
        plan = shard_doc["plan"]
        plan["models"] = {model: plan["models"][model]}
        for name, members in (("planned", "cells"), ("unplanned", "cells")):
            plan[name] = [g | {members: [c for c in g[members] if c.startswith(model)]} for g in plan[name]]
            plan[name] = [g for g in plan[name] if g[members]]
        plan["selection"] = [f"--shard {len(shards) + 1}/2"]
        shards.append(shard_doc)
    merged = merge_documents(shards)
    assert merged["plan"] == whole["plan"]
    assert "plan" not in merge_documents([shards[0], {k: v for k, v in shards[1].items() if k != "plan"}])
