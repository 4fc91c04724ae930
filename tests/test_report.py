"""Tests of the report layer: validation, merging, Markdown/HTML rendering and writing."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest

from kvconform.report import (
    GITHUB_SUMMARY_LIMIT,
    REPORT_FILES,
    ReportError,
    append_github_summary,
    load_document,
    merge_documents,
    render_markdown,
    strip_volatile,
    validate_document,
    write_reports,
    write_text_atomic,
)
from kvconform.report_html import render_html
from kvconform.results import SCHEMA_VERSION

FAIL_MESSAGE = "parity broke at decode step 3:\n  max |Δ| 4.1e-02 > tolerance 1.2e-03\n  argmax differs"


def make_result(model: str, dtype: str, check: str, outcome: str = "pass", **extra: Any) -> dict[str, Any]:
    cell_id = f"{model}[{dtype}-cpu-dynamic]"
    result = {
        "cell_id": cell_id, "model": model, "model_type": "llama", "source": f"hub:{model}", "revision": None,
        "dtype": dtype, "device": "cpu", "cache": "dynamic", "check": check, "outcome": outcome,
        "measured": "5.0e-05" if check == "parity" else "ok", "limit": "1.2e-03" if check == "parity" else "",
        "message": "" if outcome == "pass" else f"{check} went wrong", "details": {},
        "duration_s": 0.25, "nodeid": f"suites/test_conformance.py::test_{check}[{cell_id}]",
    }
    if check == "parity":
        result["details"] = {"step_max_abs_delta": [1e-5, 2e-5, 5e-5, 0.0], "tolerance": 1.2e-3, "argmax_agree": True}
    return result | extra


def make_doc(results: list[dict[str, Any]], excluded: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    cells = sorted({r["cell_id"]: r["model"] for r in results}.items())
    return {
        "schema_version": SCHEMA_VERSION,
        "environment": {"kvconform": "0.1.0", "python": "3.11.7", "torch": "2.13.0+cpu", "transformers": "5.24.0",
                        "devices": ["cpu"], "git_commit": "abc123", "date": "2026-11-30T03:00:00Z"},
        "excluded": excluded or [],
        "results": results,
        "cells": [{"cell_id": c, "model": m, "load_s": 1.5, "probe_s": 0.5} for c, m in cells],
    }


@pytest.fixture
def doc() -> dict[str, Any]:
    """Two models, two dtypes for one of them, one failing parity result."""
    failing = make_result("tiny-gpt2", "float32", "parity", "fail", measured="4.1e-02", message=FAIL_MESSAGE,
                          details={"step_max_abs_delta": [1e-6, 3e-3, 4.1e-2], "tolerance": 1.2e-3,
                                   "argmax_agree": False})
    results = [
        make_result("smollm2-135m", "float32", "parity"),
        make_result("smollm2-135m", "float32", "growth", measured="4→5→6"),
        make_result("smollm2-135m", "bfloat16", "parity",
                    details={"step_max_abs_delta": [2e-4, 8e-4], "tolerance": 2e-2}),
        make_result("smollm2-135m", "bfloat16", "growth", "skip", measured=""),
        failing,
        make_result("tiny-gpt2", "float32", "growth"),
    ]
    excluded = [{"id": "reformer", "model_type": "reformer", "reason": "custom cache keyword"}]
    return make_doc(results, excluded)


# --------------------------------------------------------------------------- validation and loading


def test_validate_accepts_fixture_and_reports_problems(doc: dict[str, Any]) -> None:
    assert validate_document(doc) == []
    bad = json.loads(json.dumps(doc))
    bad["schema_version"] = 99
    bad["results"][0]["outcome"] = "bogus"
    del bad["results"][1]["cell_id"]
    bad["results"][2]["details"]["step_max_abs_delta"] = ["x"]
    bad["results"].append(dict(bad["results"][3]))
    problems = validate_document(bad)
    assert "schema_version: expected 1, got 99" in problems
    assert any(p.startswith("results[0].outcome: 'bogus'") for p in problems)
    assert "results[1].cell_id: missing or not a string" in problems
    assert "results[2].details.step_max_abs_delta: expected a list of numbers" in problems
    assert any(p.startswith("results[6]: duplicate result") for p in problems)
    assert validate_document([]) == ["document: expected a JSON object, got list"]


def test_load_document_names_the_file(tmp_path, doc: dict[str, Any]) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(doc))
    assert load_document(good) == doc
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ReportError, match="broken.json is not valid JSON"):
        load_document(broken)
    with pytest.raises(ReportError, match="cannot read .*missing.json"):
        load_document(tmp_path / "missing.json")
    invalid = tmp_path / "invalid.json"
    invalid.write_text(json.dumps({"schema_version": 1}))
    with pytest.raises(ReportError, match="invalid.json is not a valid conformance report"):
        load_document(invalid)


# --------------------------------------------------------------------------- merging and volatility


def test_merge_of_two_shards_equals_combined_doc(doc: dict[str, Any]) -> None:
    first = make_doc(doc["results"][:4], doc["excluded"])  # CI fan-out by model
    second = make_doc(doc["results"][4:], doc["excluded"])
    merged = merge_documents([second, first])
    assert merged["environment"]["shards"] == 2
    expected = merge_documents([doc])
    expected["environment"]["shards"] = 2
    assert merged == expected
    assert [r["cell_id"] for r in merged["results"]] == sorted(r["cell_id"] for r in doc["results"])
    assert merged["excluded"] == doc["excluded"]  # de-duplicated by id
    assert [r["check"] for r in merged["results"][:2]] == ["growth", "parity"]
    assert validate_document(merged) == []


def test_merge_rejects_mixed_schema_versions_and_duplicates(doc: dict[str, Any]) -> None:
    other = dict(doc, schema_version=SCHEMA_VERSION + 1)
    with pytest.raises(ValueError, match="different schema versions"):
        merge_documents([doc, other])
    with pytest.raises(ValueError, match="more than one shard"):
        merge_documents([doc, doc])
    with pytest.raises(ValueError, match="no documents"):
        merge_documents([])


def test_strip_volatile_equalises_runs_differing_in_timings(doc: dict[str, Any]) -> None:
    rerun = json.loads(json.dumps(doc))
    rerun["environment"]["date"] = "2026-12-01T04:00:00Z"
    for result in rerun["results"]:
        result["duration_s"] = 9.0
    rerun["cells"][0]["load_s"] = 42.0
    assert rerun != doc
    assert strip_volatile(rerun) == strip_volatile(doc)
    assert "date" in doc["environment"]  # the input is not modified
    rerun["results"][0]["measured"] = "6.0e-05"
    assert strip_volatile(rerun) != strip_volatile(doc)


# --------------------------------------------------------------------------- Markdown


def test_markdown_has_table_totals_exclusions_and_failure_section(doc: dict[str, Any]) -> None:
    text = render_markdown(doc)
    assert "- **torch**: 2.13.0+cpu" in text
    assert re.search(r"^\| model\s+\| dtype\s+\| device\s+\| cache\s+\| parity\s+\| growth\s+\|$", text, re.M)
    assert re.search(r"^\| smollm2-135m \| bfloat16 \| cpu\s+\| dynamic \| pass 5.0e-05 \| skip\s+\|$", text, re.M)
    assert re.search(r"^\| tiny-gpt2\s+\| float32 .*\| FAIL 4.1e-02 \| pass ok\s+\|$", text, re.M)
    assert "| reformer | reformer     | custom cache keyword |" in text
    section = text.split("### FAIL: parity · tiny-gpt2[float32-cpu-dynamic]", 1)[1]
    assert f"```text\n{FAIL_MESSAGE}\n```" in section
    assert text.count("### ") == 1


def test_markdown_totals_and_fences(doc: dict[str, Any]) -> None:
    totals = "**Totals:** 4 passed, 1 failed, 1 skipped, 0 xfailed, 0 xpassed, 0 errored, 0 crashed (3 cells)"
    assert totals in render_markdown(doc)
    doc["results"][4]["message"] = "a ``` fence inside"
    doc["results"][0]["measured"] = "a|b"
    text = render_markdown(doc)
    assert "````text\na ``` fence inside\n````" in text
    assert "pass a\\|b" in text


def test_markdown_is_deterministic(doc: dict[str, Any]) -> None:
    shuffled = dict(doc, results=list(reversed(doc["results"])))
    assert render_markdown(shuffled) == render_markdown(doc)
    assert render_html(shuffled) == render_html(doc)


# --------------------------------------------------------------------------- HTML


def test_html_is_self_contained_and_escaped(doc: dict[str, Any]) -> None:
    doc["results"][4]["message"] = "<script>alert(1)</script> & more"
    page = render_html(doc)
    assert page.startswith("<!DOCTYPE html>")
    for needle in ("http://", "https://", "<script", "<link", "@import", "url("):
        assert needle not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page


def test_html_has_a_chart_per_model_with_series_and_dashed_tolerance(doc: dict[str, Any]) -> None:
    page = render_html(doc)
    charts = re.findall(r"<svg\b.*?</svg>", page, re.S)
    assert len(charts) == 2
    smollm, tiny = charts
    assert "smollm2-135m" in smollm and "tiny-gpt2" in tiny
    assert smollm.count("<polyline") == 2  # float32 and bfloat16
    assert tiny.count("<polyline") == 1
    for chart in charts:
        assert re.search(r'<line class="tolerance"[^>]*stroke-dasharray', chart)
        assert "decode step" in chart and "tolerance" in chart
    float32_colour = re.search(r'<polyline class="series" fill="none" stroke="(#[0-9a-f]{6})"', tiny)[1]
    assert re.search(rf'class="tolerance"[^>]*stroke="{float32_colour}"', tiny)
    assert "float32 (FAIL)" in tiny  # legend marks the failing series


def test_html_highlights_failing_and_passing_cells(doc: dict[str, Any]) -> None:
    page = render_html(doc)
    anchor = "failure-parity-tiny-gpt2[float32-cpu-dynamic]"
    link = rf'<a href="#{re.escape(anchor)}">FAIL</a>'
    assert re.search(rf'<td class="o-fail"[^>]*>{link}<span class="fig">4.1e-02</span>', page)
    assert f'<h3 id="{anchor}">FAIL: parity · tiny-gpt2[float32-cpu-dynamic]</h3>' in page
    assert re.search(r'<td class="o-pass"[^>]*>pass<span class="fig">5.0e-05</span></td>', page)
    css = re.search(r"<style>(.*?)</style>", page, re.S)[1]
    assert re.search(r"td\.o-fail[^{]*\{[^}]*background: #fecaca", css)
    assert re.search(r"td\.o-pass \{ background: #dcfce7", css)


# --------------------------------------------------------------------------- writing


def test_write_reports_is_atomic_and_replaces_existing_files(tmp_path, doc: dict[str, Any]) -> None:
    out = tmp_path / "nested" / "reports"
    out.mkdir(parents=True)
    (out / "conformance.md").write_text("stale report")
    paths = write_reports(doc, out)
    assert [p.name for p in paths] == list(REPORT_FILES)
    assert sorted(os.listdir(out)) == sorted(REPORT_FILES)  # no temp files left behind
    assert (out / "conformance.md").read_text(encoding="utf-8") == render_markdown(doc)
    text = (out / "conformance.json").read_text(encoding="utf-8")
    assert json.loads(text) == doc
    assert text.startswith('{\n  "cells": [')  # sorted keys, indent 2
    assert (out / "conformance.html").read_text(encoding="utf-8") == render_html(doc)


def test_write_reports_creates_the_directory(tmp_path, doc: dict[str, Any]) -> None:
    paths = write_reports(doc, tmp_path / "new" / "dir")
    assert all(p.is_file() for p in paths)


def test_failed_atomic_write_keeps_old_file_and_no_temp(tmp_path, monkeypatch) -> None:
    target = tmp_path / "conformance.md"
    target.write_text("old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_text_atomic(target, "new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["conformance.md"]


def test_github_summary_is_appended_when_set(tmp_path, monkeypatch, doc: dict[str, Any]) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert append_github_summary(doc) is None
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step output\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert append_github_summary(doc) == summary
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("# earlier step output\n")
    assert "| smollm2-135m | bfloat16 | cpu" in text
    assert "truncated" not in text


def test_github_summary_is_truncated_below_one_mib(tmp_path, monkeypatch) -> None:
    long_message = "x" * 2000 + "\n" + "Δ" * 2000  # multi-byte characters near the cut
    results = [make_result(f"model-{i:05d}", "float32", "parity", "fail", message=long_message) for i in range(600)]
    doc = make_doc(results)
    assert len(render_markdown(doc).encode("utf-8")) > GITHUB_SUMMARY_LIMIT
    summary = tmp_path / "summary.md"
    summary.write_text("previous content\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    append_github_summary(doc)
    data = summary.read_bytes()
    assert GITHUB_SUMMARY_LIMIT - 8192 < len(data) <= GITHUB_SUMMARY_LIMIT
    text = data.decode("utf-8")
    assert text.startswith("previous content\n")
    assert "| model-00000 | float32 | cpu" in text
    assert "truncated to stay within GitHub's 1 MiB" in text
    body = text.split("**Note:**")[0]
    assert len(re.findall(r"^```", body, re.M)) % 2 == 0  # no code block left open


def test_cells_that_never_ran_are_summarized_not_tabled() -> None:
    ran = make_result("m", "float32", "parity")
    absent = make_result("m", "float32", "parity", outcome="skip", device="cuda",
                         cell_id="m[float32-cuda-dynamic]", message="cuda: no CUDA device on this machine")
    markdown = render_markdown(make_doc([ran, absent]))
    assert "_1 cells not run: cuda: no CUDA device on this machine_" in markdown
    assert "| cuda " not in markdown and "| cpu " in markdown
    assert "(2 cells)" in markdown
