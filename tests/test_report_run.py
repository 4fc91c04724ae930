"""Reports of a real (tiny) run: a known failure that fails (bamba's decode positions), one that passes
(XPASS) and a model that never runs, in one process and over two xdist workers.

Every written file is checked: the JSON against the published schema (``Run.doc``), the JUnit XML by
parsing it, and the reasons, figures and provenance in JSON, Markdown, HTML and JUnit.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from kvconform.report import strip_volatile
from tests.inner import Inner, Run, SharedRuns

XFAIL_REASON = "model bug: BambaModel defaults position_ids to arange(seq_len) without the cache offset"
XPASS_REASON = "not testable: report-test: listed as failing although it passes"
SKIP_REASON = "missing: checkpoint folder does/not/exist does not exist (fix the path in the matrix or --model)"
BAMBA, LLAMA = "bamba[float32-cpu-dynamic]", "llama-gqa[float32-cpu-dynamic]"
RAN = ("parity", "kv_parity", "growth", "shapes", "bytes")


@pytest.fixture
def serial(inner: Inner, shared_runs: SharedRuns) -> Run:
    return shared_runs.get("serial", lambda: inner.run(inner.suite("serial", "report.yaml"), "--matrix", "matrix.yaml", "-q"))


@pytest.fixture
def distributed(inner: Inner, shared_runs: SharedRuns) -> Run:
    return shared_runs.get("distributed", lambda: inner.run(inner.suite("distributed", "report.yaml"), "--matrix", "matrix.yaml",
                                                            "-q", "-n", "2"))


def texts(run: Run) -> dict[str, str]:
    return {suffix: (run.report_dir / f"conformance.{suffix}").read_text(encoding="utf-8") for suffix in ("md", "html")}


def test_every_outcome_and_its_reason_is_in_the_json(serial: Run) -> None:
    assert serial.ret == 1, serial.output[-4000:]  # the XPASS is strict: it fails the run
    doc = serial.doc()  # schema-checked
    outcomes = {key: row["outcome"] for key, row in serial.rows().items()}
    assert outcomes == {(cell, check): "pass" for cell in (BAMBA, LLAMA) for check in RAN} | {
        (BAMBA, "parity"): "xfail", (BAMBA, "kv_parity"): "xfail", (LLAMA, "growth"): "xpass"}
    rows = serial.rows()
    assert (rows[(BAMBA, "parity")]["reason"], rows[(BAMBA, "parity")]["xfail_kind"]) == (XFAIL_REASON, "model bug")
    assert "cached logits diverge" in rows[(BAMBA, "parity")]["message"]  # the diagnosis stays next to the reason
    assert rows[(LLAMA, "growth")]["reason"] == XPASS_REASON
    assert not any("reason" in row for key, row in rows.items() if row["outcome"] == "pass")
    assert doc["not_run"] == [{"reason": SKIP_REASON, "cells": 1, "checks": len(RAN)}]


def test_figures_are_numbers_with_units(serial: Run) -> None:
    rows = serial.rows()
    parity = rows[(BAMBA, "parity")]
    figure = parity["figure"]
    assert (figure["unit"], figure["bound"]) == ("logit", "at_most")
    assert figure["measured"] == max(parity["details"]["step_max_abs_delta"])
    assert figure["limit"] == parity["details"]["tolerance"]
    assert math.isclose(figure["ratio"], figure["measured"] / figure["limit"]) and figure["ratio"] > 1
    assert parity["measured"] == f"{figure['measured']:.2e}"  # the display string is kept
    bytes_figure = rows[(LLAMA, "bytes")]["figure"]
    assert bytes_figure == {"measured": 7168, "limit": 7168, "unit": "B", "bound": "equal", "ratio": 1.0}
    assert rows[(LLAMA, "bytes")]["measured"] == "7,168 B"
    assert rows[(LLAMA, "shapes")]["figure"]["measured"] == [2, 2, 7, 16]
    assert rows[(LLAMA, "growth")]["figure"] == {"measured": 7, "limit": 7, "unit": "tokens", "bound": "equal", "ratio": 1.0}


def test_provenance_per_model_and_a_relative_matrix_path(serial: Run) -> None:
    doc = serial.doc()
    models = {m["id"]: m for m in doc["models"]}
    assert models["llama-gqa"] == {"id": "llama-gqa", "source": "synthetic", "location": "llama", "revision": None,
                                   "model_type": "llama", "file": None}
    assert models["missing"]["source"] == "checkpoint" and models["missing"]["model_type"] is None
    assert doc["environment"]["matrix_path"] == "matrix.yaml"
    assert str(serial.dir) not in "".join(texts(serial).values())  # no absolute path of this machine


def test_markdown_and_html_carry_every_reason(serial: Run) -> None:
    """Known failures show their kind in its own column and the evidence without the kind's prefix."""
    evidence = XFAIL_REASON.removeprefix("model bug: ")
    for suffix, text in texts(serial).items():
        for reason in (evidence, XPASS_REASON, SKIP_REASON):
            assert reason in text, f"{suffix} lacks {reason!r}"
    markdown = texts(serial)["md"]
    assert "| bamba | model bug | parity, kv_parity | float32 |" in markdown and markdown.index(evidence) < markdown.index("## Models")
    assert XFAIL_REASON not in markdown  # the kind is not repeated in front of the evidence
    folded = markdown.split("<details><summary>Not run (5 checks, 1 reason)</summary>")[1]
    assert re.search(rf"^- 5 checks in 1 cell( of 1 model)?: {re.escape(SKIP_REASON)}$", folded, re.M), folded
    attention = markdown.split("## Needs attention (1)")[1].split("##")[0]
    assert "| XPASS | growth | [llama-gqa \\| float32 · cpu · dynamic · sdpa]" in attention and XPASS_REASON in attention


def test_junit_xml_is_written_by_default_with_figures(serial: Run) -> None:
    suite = ET.parse(serial.report_dir / "conformance.junit.xml").getroot().find("testsuite")
    assert suite is not None
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert len(cases) == 2 * len(RAN) + 1  # every result, and one case for the never-run reason
    xfail = cases[f"test_parity[{BAMBA}]"]
    assert xfail.find("skipped").get("message") == XFAIL_REASON
    props: dict[str, Any] = {p.get("name"): p.get("value") for p in xfail.iter("property")}
    row = serial.rows()[(BAMBA, "parity")]
    assert float(props["measured_value"]) == row["figure"]["measured"] and float(props["limit_value"]) == row["figure"]["limit"]
    assert (props["measured"], props["unit"], props["xfail_kind"]) == (row["measured"], "logit", "model bug")
    assert cases[f"test_growth[{LLAMA}]"].find("failure").get("message") == f"XPASS: {XPASS_REASON}"
    assert cases[f"not run: {SKIP_REASON}"].find("skipped") is not None


def test_xdist_workers_give_the_same_document(serial: Run, distributed: Run) -> None:
    """Reasons, kinds, figures and model types travel from the workers on pytest's own reports."""
    assert distributed.ret == 1, distributed.output[-4000:]
    assert strip_volatile(distributed.doc()) == strip_volatile(serial.doc())


def test_a_strict_xpass_is_reported_as_xpass_with_its_reason(serial: Run) -> None:
    """pytest reports a strict XPASS as a failure whose text starts with [XPASS(strict)]."""
    assert "[XPASS(strict)] " + XPASS_REASON in serial.output, serial.output[-4000:]
    row = serial.rows()[(LLAMA, "growth")]
    assert (row["outcome"], row["reason"], row["xfail_kind"]) == ("xpass", XPASS_REASON, "not testable")
    assert row["message"].startswith("the known failure no longer occurs: remove its entry from the matrix")
