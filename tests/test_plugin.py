"""End-to-end tests of the kvconform pytest plugin: inner pytest runs of the real suite on tiny matrices.

The runs go through pytest's ``pytester`` (tests/inner.py). Runs several tests read (``reference``, ``rerun``,
``distributed``, ``crashed``, ``interrupted``) are made once per module by the first test that needs them.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from typing import Any

import pytest

from kvconform.report import REPORT_FILES, strip_volatile
from tests.inner import DATA, SUITE, Inner, Run, SharedRuns

CHECKS = ("parity", "kv_parity", "growth", "shapes", "bytes", "generate", "between_calls")
HEALTHY_CELLS = ("llama-gqa[float32-cpu-dynamic]", "llama-gqa[float32-cpu-static]", "gpt2-tiny[float32-cpu-dynamic]")
BROKEN_CELL = "broken-llama[float32-cpu-dynamic]"
#: (cell, check) -> outcome for tests/data/main.yaml. The broken model fails in the ``outcome``
#: fixture, i.e. at setup, which pytest (and so the report) calls an error.
EXPECTED = {(cell, check): "pass" for cell in HEALTHY_CELLS for check in CHECKS} | {
    (BROKEN_CELL, check): "error" for check in CHECKS
}

#: Killed with os._exit in whichever xdist worker runs it (crash run only).
CRASH_TEST = "test_shapes[gpt2-tiny[float32-cpu-dynamic]]"
#: Raises KeyboardInterrupt when it is called (interrupt run only); every llama-gqa cell runs before it.
INTERRUPT_TEST = "test_parity[gpt2-tiny[float32-cpu-dynamic]]"

CRASH_HOOK = f'''

def pytest_runtest_call(item):
    """Kill this xdist worker (never the controller) the first time {CRASH_TEST} runs."""
    import os
    from pathlib import Path

    flag = Path(__file__).with_name("crashed.flag")
    if item.name == {CRASH_TEST!r} and hasattr(item.config, "workerinput") and not flag.exists():
        flag.write_text(str(os.getpid()))
        os._exit(1)
'''

INTERRUPT_HOOK = f'''

def pytest_runtest_call(item):
    """Ctrl-C in the middle of the session."""
    if item.name == {INTERRUPT_TEST!r}:
        raise KeyboardInterrupt
'''


# ----------------------------------------------------------------------------------------- helpers


def comparable(row: dict[str, Any]) -> dict[str, Any]:
    """A result row without its duration, and without the "[gw0] linux -- Python ..." line xdist puts
    above a worker's failure text (see test_xdist_results_equal_the_serial_run for that one)."""
    message = "\n".join(line for line in row["message"].splitlines() if not re.match(r"\[gw\d+\] \S+ -- Python ", line))
    return {key: value for key, value in row.items() if key != "duration_s"} | {"message": message}


def without_date(markdown: str) -> str:
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "<date>", markdown)


# ----------------------------------------------------------------------------------------- shared runs


@pytest.fixture
def reference(inner: Inner, shared_runs: SharedRuns) -> Run:
    """main.yaml in one process, with --junitxml."""
    return shared_runs.get("reference", lambda: inner.run(inner.suite("reference"), "--matrix", "matrix.yaml", "-q",
                                                          "--junitxml", "junit.xml"))


@pytest.fixture
def rerun(inner: Inner, shared_runs: SharedRuns) -> Run:
    """The reference run again, in another folder."""
    return shared_runs.get("rerun", lambda: inner.run(inner.suite("rerun"), "--matrix", "matrix.yaml", "-q"))


@pytest.fixture
def distributed(inner: Inner, shared_runs: SharedRuns) -> Run:
    """main.yaml over two xdist workers (verbose, to see which worker ran what)."""
    return shared_runs.get("distributed", lambda: inner.run(inner.suite("distributed"), "--matrix", "matrix.yaml",
                                                            "-n", "2", "-v"))


@pytest.fixture
def crashed(inner: Inner, shared_runs: SharedRuns) -> Run:
    """main.yaml over two xdist workers, one of which dies while running CRASH_TEST."""

    def make() -> Run:
        run = inner.run(inner.suite("crashed", extra_conftest=CRASH_HOOK), "--matrix", "matrix.yaml", "-n", "2", "-v")
        assert (run.dir / "crashed.flag").is_file(), f"the crash hook never fired:\n{run.output[-4000:]}"
        return run

    return shared_runs.get("crashed", make)


@pytest.fixture
def interrupted(inner: Inner, shared_runs: SharedRuns) -> Run:
    """main.yaml in one process, Ctrl-C when INTERRUPT_TEST starts."""
    return shared_runs.get("interrupted", lambda: inner.run(inner.suite("interrupted", extra_conftest=INTERRUPT_HOOK),
                                                            "--matrix", "matrix.yaml", "-q"))


# ----------------------------------------------------------------------------------------- one process


def test_reference_run_reports_every_cell_and_check(reference: Run) -> None:
    assert reference.ret == 1, reference.output[-4000:]  # the broken model's cells error
    assert reference.outcomes() == EXPECTED
    for (cell_id, check), row in reference.rows().items():
        model, _, rest = cell_id.partition("[")
        assert (row["model"], row["dtype"], row["device"], row["cache"]) == (model, *rest.rstrip("]").split("-"))
        assert row["nodeid"] == f"test_conformance.py::test_{check}[{cell_id}]"
        if row["outcome"] == "pass":
            assert row["measured"], row
    for name in REPORT_FILES:
        assert (reference.report_dir / name).stat().st_size > 0
    cells = {cell["cell_id"] for cell in reference.doc()["cells"]}
    assert cells == {*HEALTHY_CELLS, BROKEN_CELL}
    assert f"report: {reference.report_dir / 'conformance.json'}" in reference.out


def test_model_that_cannot_be_built_fails_only_its_own_cells(reference: Run) -> None:
    rows = reference.rows()
    for check in CHECKS:
        message = rows[(BROKEN_CELL, check)]["message"]
        assert "\n" not in message.strip(), message
        assert message.startswith(f"{BROKEN_CELL}: model could not be built"), message
        assert "ValidationError" in message, message  # the exception type is named
        for cell in HEALTHY_CELLS:
            assert rows[(cell, check)]["outcome"] == "pass"
    markdown = (reference.report_dir / "conformance.md").read_text()
    assert "21 passed, 0 failed, 0 xfailed, 0 xpassed, 7 errored, 0 crashed, 0 not run (4 cells ran)" in markdown


def test_build_failure_summary_keeps_the_reason(reference: Run) -> None:
    """The one-line summary must say *why* (transformers puts it on the exception's second line)."""
    message = reference.rows()[(BROKEN_CELL, "parity")]["message"]
    assert "not a multiple of the number of attention heads" in message, message


def test_junitxml_is_written_alongside_the_reports(reference: Run) -> None:
    suite = ET.parse(reference.dir / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("errors"), suite.get("failures")) == ("7", "0")
    cases = {case.get("name"): case for case in suite.iter("testcase") if "[" in (case.get("name") or "")[:-1]}
    cells = {name: case for name, case in cases.items() if name.partition("[")[2][:-1] in {c for c, _ in EXPECTED}}
    assert set(cells) == {f"test_{check}[{cell}]" for cell, check in EXPECTED}
    broken = {name for name, case in cells.items() if case.find("error") is not None}
    assert broken == {f"test_{check}[{BROKEN_CELL}]" for check in CHECKS}
    assert (reference.report_dir / "conformance.json").is_file()


def test_identical_reruns_give_identical_json(reference: Run, rerun: Run) -> None:
    assert rerun.ret == 1, rerun.output[-4000:]
    assert strip_volatile(rerun.doc()) == strip_volatile(reference.doc())


def test_identical_reruns_give_identical_markdown(reference: Run, rerun: Run) -> None:
    first = (reference.report_dir / "conformance.md").read_text()
    second = (rerun.report_dir / "conformance.md").read_text()
    assert "- **date**:" in first
    assert without_date(second) == without_date(first)


def test_strip_volatile_removes_every_timing_the_plugin_records(reference: Run) -> None:
    """Per-cell timings (and the per-process load counter) differ run to run and with -n."""
    for cell in strip_volatile(reference.doc())["cells"]:
        volatile = sorted(key for key in cell if key.endswith("_s") or key == "loads")
        assert not volatile, f"strip_volatile leaves {volatile} in {cell['cell_id']}"


def test_interrupted_session_still_writes_what_finished(interrupted: Run) -> None:
    assert interrupted.ret == 2, interrupted.output[-4000:]  # pytest's "interrupted"
    assert "KeyboardInterrupt" in interrupted.output
    finished = {(cell, check): "pass" for cell in HEALTHY_CELLS[:2] for check in CHECKS}
    assert interrupted.outcomes() == finished
    markdown = (interrupted.report_dir / "conformance.md").read_text()
    assert "14 passed" in markdown and "(2 cells ran)" in markdown


def test_k_with_a_cell_id_selects_exactly_that_cells_checks(inner: Inner) -> None:
    run = inner.run(inner.suite(), "--matrix", "matrix.yaml", "-q", "-k", "llama-gqa[float32-cpu-dynamic]")
    assert run.ret == 0, run.output[-4000:]
    summary = run.result.parseoutcomes()
    assert summary["passed"] == 7 and set(summary) == {"passed", "deselected"}, run.out[-2000:]
    assert run.outcomes() == {("llama-gqa[float32-cpu-dynamic]", check): "pass" for check in CHECKS}


# ----------------------------------------------------------------------------------------- xdist


def test_xdist_run_reports_every_cell_and_check(distributed: Run) -> None:
    assert distributed.ret == 1, distributed.output[-4000:]
    assert distributed.outcomes() == EXPECTED
    for row in distributed.rows().values():
        assert "@" not in row["nodeid"]


def test_xdist_results_equal_the_serial_run(reference: Run, distributed: Run) -> None:
    assert strip_volatile(distributed.doc())["results"] == strip_volatile(reference.doc())["results"]


def test_xdist_document_equals_the_serial_run(reference: Run, distributed: Run) -> None:
    assert strip_volatile(distributed.doc()) == strip_volatile(reference.doc())


def test_xdist_keeps_each_model_on_one_worker(distributed: Run) -> None:
    """The plugin puts one xdist_group per model so a model is built (and each cell probed) once."""
    workers: dict[str, set[str]] = defaultdict(set)
    for worker, model in re.findall(r"^\[(gw\d+)\].*?::test_\w+\[([^\[\]]+)\[", distributed.out, re.MULTILINE):
        workers[model].add(worker)
    assert set(workers) == {"llama-gqa", "gpt2-tiny", "broken-llama"}, distributed.out[-4000:]
    spread = {model: sorted(found) for model, found in workers.items() if len(found) > 1}
    assert not spread, f"models built in several workers (plain -n does not group by xdist_group): {spread}"


def test_crashed_worker_gets_a_crashed_row_and_the_rest_still_report(reference: Run, crashed: Run) -> None:
    assert crashed.ret == 1, crashed.output[-4000:]
    assert re.search(r"worker 'gw\d' crashed while running", crashed.output), crashed.output[-4000:]
    rows = crashed.rows()
    crash_key = ("gpt2-tiny[float32-cpu-dynamic]", "shapes")
    # The hook crashes once only, so a scheduler that re-ran the crashed test would turn this into "pass".
    assert rows[crash_key]["outcome"] == "crashed"
    assert "crashed" in rows[crash_key]["message"]
    expected = dict(EXPECTED) | {crash_key: "crashed"}
    assert crashed.outcomes() == expected
    reference_rows = reference.rows()
    for key, row in rows.items():
        if key != crash_key:
            assert comparable(row) == comparable(reference_rows[key]), key


# ----------------------------------------------------------------------------------------- bad input


BAD_MATRICES = {
    # case: (matrix path relative to tests/data, fragments the single error line must contain)
    "unknown-key": ("bad_unknown_key.yaml", ["models[0] (id 'llama-gqa')", "unknown field 'dtype'", "Did you mean 'dtypes'?"]),
    "wrong-type": ("bad_wrong_type.yaml", ["models[0] (id 'llama-gqa')", "'decode_steps'", "must be int", "'eight'"]),
    "unknown-model-type": ("bad_model_type.yaml", ["models[1] (id 'llama-gqa')", "'synthetic'", "'lama'", "Did you mean: llama"]),
    "unknown-dtype": ("bad_dtype.yaml", ["models[0] (id 'llama-gqa')", "'dtypes'", "'float64'", "Did you mean", "float32"]),
    "duplicate-id": ("bad_duplicate_id.yaml", ["duplicate model id 'tiny'"]),
    "invalid-yaml": ("bad_yaml.yaml", ["not valid YAML", "line 9"]),
    "duplicate-key": ("bad_duplicate_key.yaml", ["found the key 'parity' twice (first at line 10)"]),
    "missing-file": ("does_not_exist.yaml", ["not found"]),
}


def assert_one_usage_error(run: Run, fragments: list[str]) -> str:
    assert run.ret == 4, f"exit code {run.ret}, want 4 (usage error):\n{run.output[-4000:]}"
    assert "Traceback" not in run.output, run.output[-4000:]
    lines = [line for line in run.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR: "), f"want one 'ERROR: ' line, got:\n{run.output}"
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert not run.report_dir.exists()
    return lines[0]


@pytest.mark.parametrize("case", list(BAD_MATRICES))
def test_bad_matrix_gives_one_clear_usage_error(case: str, inner: Inner) -> None:
    name, fragments = BAD_MATRICES[case]
    run = inner.run(inner.path, "--matrix", str(DATA / name))
    assert_one_usage_error(run, [f"{DATA / name}:", *fragments])


def test_bad_shard_option_gives_one_usage_error(inner: Inner) -> None:
    run = inner.run(inner.suite(), "--matrix", "matrix.yaml", "--shard", "3/2")
    assert_one_usage_error(run, ["--shard 3/2"])


def test_bad_matrix_from_a_real_process(inner: Inner) -> None:
    """The same, as a user types it: a separate interpreter, nothing imported beforehand."""
    run = inner.process(inner.path, "--matrix", str(DATA / "bad_unknown_key.yaml"))
    assert_one_usage_error(run, ["bad_unknown_key.yaml: models[0] (id 'llama-gqa')", "Did you mean 'dtypes'?"])


# ----------------------------------------------------------------------------------------- --list-models


def test_report_folder_is_named_from_what_the_run_narrowed() -> None:
    from datetime import datetime

    from kvconform.report_dir import MAX_NAME, run_folder

    now = datetime(2026, 12, 1, 12, 30, 5)
    assert run_folder([], False, now) is None  # the default matrix: reports/ itself
    assert run_folder(["model-tiny-llama", "cache-static"], False, now) == "model-tiny-llama_cache-static"
    assert run_folder(["k-llama and not (parity)"], False, now) == "k-llama-and-not-parity"
    assert run_folder([], True, now) == "20261201-123005"  # test ids chosen on the command line
    assert run_folder(["k-gpt2"], True, now) == "k-gpt2_20261201-123005"
    assert len(run_folder(["model-" + "x" * 200], False, now) or "") == MAX_NAME


def test_a_narrowed_run_keeps_the_full_runs_reports_and_the_excluded_list_only_with_the_sweep(inner: Inner) -> None:
    """As typed (no --report-dir), collecting only: the whole default matrix (listing.yaml's, with a sweep) lists
    the excluded architectures (a count with -q) and writes reports/collect-only/; ``-k gpt2`` writes
    reports/k-gpt2_collect-only/, says so, and lists none; another matrix file gets its own folder too."""
    (inner.path / "model_matrix.yaml").write_text((DATA / "listing.yaml").read_text())
    (inner.path / "pytest.ini").write_text("[pytest]\n")
    inner.pytester.makepyfile(**{"test_conformance": (SUITE / "test_conformance.py").read_text(),
                                 "conftest": (SUITE / "conftest.py").read_text()})
    whole = inner.run(inner.path, "--collect-only", as_typed=True)
    folded = inner.run(inner.path, "--collect-only", "-q", as_typed=True)
    narrowed = inner.run(inner.path, "--collect-only", "-k", "gpt2", as_typed=True)
    (inner.path / "other.yaml").write_text((DATA / "listing.yaml").read_text())
    other = inner.run(inner.path, "--collect-only", "--matrix", "other.yaml", "--cache", "static", "--device", "cuda",
                      as_typed=True)
    assert [run.ret for run in (whole, folded, narrowed, other)] == [0] * 4, other.output[-2000:]  # collecting is no failure
    reports = inner.path / "reports"
    # A collect-only run checks nothing, so even the whole matrix's never replaces reports/ itself.
    assert sorted(path.relative_to(reports).as_posix() for path in reports.rglob("conformance.json")) == [
        "collect-only/conformance.json", "k-gpt2_collect-only/conformance.json",
        "matrix-other_device-cuda_cache-static_collect-only/conformance.json"]
    assert (f"a --collect-only run (no check ran), so this run's reports are in {reports / 'k-gpt2_collect-only'}"
            in narrowed.out), narrowed.out[-2000:]
    assert f"report: {reports / 'k-gpt2_collect-only' / 'conformance.json'}" in narrowed.out
    assert "mamba: listing-test" in whole.out and "not the default matrix" not in whole.out, whole.out[-2000:]
    assert re.search(r"^\d+ architectures excluded \(not testable here; listed in the report", folded.out, re.MULTILINE)
    assert "mamba: listing-test" not in folded.out, folded.out[-2000:]
    assert "architectures excluded" not in narrowed.out and "mamba" not in narrowed.out, narrowed.out[-2000:]


def test_list_models_prints_the_matrix_and_runs_nothing(inner: Inner, monkeypatch: pytest.MonkeyPatch) -> None:
    import kvconform.runner

    loads: list[Any] = []
    monkeypatch.setattr(kvconform.runner, "load_master", lambda spec: loads.append(spec))
    (inner.path / "listing.yaml").write_text((DATA / "listing.yaml").read_text())
    run = inner.run(inner.path, "--matrix", "listing.yaml", "--list-models")
    assert run.ret == 0, run.output[-4000:]
    lines = run.out.splitlines()
    excluded_at = next(i for i, line in enumerate(lines) if line.endswith("architectures excluded:"))
    header = next(line for line in lines if line.startswith("| id "))
    assert [h.strip() for h in header.strip("|").split("|")][:5] == ["id", "model_type", "source", "dtypes", "devices"]
    table = {cols[0]: cols for line in lines[:excluded_at] if line.startswith("| ")
             for cols in [[c.strip() for c in line.strip("|").split("|")]]}
    assert table["llama-gqa"][:6] == ["llama-gqa", "llama", "synthetic:llama", "float32", "cpu", "dynamic,static"]
    assert table["gpt2"][:5] == ["gpt2", "gpt2", "synthetic:gpt2", "float32", "cpu"]  # from the sweep
    assert "mamba" not in table
    excluded = "\n".join(lines[excluded_at:])
    assert "listing-test: state-space model, left out on purpose" in excluded
    assert re.search(r"^\| mamba\s+\|", excluded, re.MULTILINE)
    assert not loads
    assert not re.search(r"collected \d+ item|\d+ (passed|failed|errors?|skipped)|no tests ran", run.output)
    assert not run.report_dir.exists()
