"""What a CI job sees: exit codes, one-line errors, nothing lost, reports that say when a run is incomplete.

Usage errors (exit 4, one ``ERROR:`` line, no model built, no report written) run in-process for speed,
with real-process runs of two of them; everything whose point is the process's exit status (Ctrl-C,
a report folder that breaks during the run, an unwritable step summary, an empty shard,
``--require-models``) runs ``python -m pytest`` in a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from kvconform.build.checkpoint_files import CheckpointFileError
from kvconform.build.models import ModelRefused, check_weight_safety, load_master
from kvconform.matrix import ModelSpec
from kvconform.report import REPORT_FILES, load_document
from tests.inner import DATA, Inner, Run, SharedRuns
from tests.test_maintainer import HUB_MATRIX, SMALL
from tests.test_plugin import CHECKS, INTERRUPT_TEST, assert_one_usage_error
from tests.test_report import make_doc

REPO = Path(__file__).resolve().parents[1]
GREEN = ("-k", "llama-gqa and dynamic")  # main.yaml narrowed to one healthy cell: 5 passing checks
GREEN_CELL = "llama-gqa[float32-cpu-dynamic]"


def truncated_copy(source: Path, target: Path, keep: int | None = None) -> Path:
    """A copy of a checkpoint folder whose model.safetensors lost its tail (or all but ``keep`` bytes)."""
    target.mkdir()
    for path in source.iterdir():
        data = path.read_bytes()
        if path.name == "model.safetensors":
            data = data[: keep if keep is not None else len(data) // 2]
        (target / path.name).write_bytes(data)
    return target


# ----------------------------------------------------------------------------------------- --model


def bad_model_paths(root: Path, llama_folder: Path) -> dict[str, tuple[Path, list[str]]]:
    """case -> (the --model argument, fragments its one error line must hold)."""
    (root / "empty").mkdir()
    (root / "a-file.safetensors").write_bytes(b"")
    (root / "not-json").mkdir()
    (root / "not-json" / "config.json").write_text("{model_type: llama}")
    (root / "no-weights").mkdir()
    (root / "no-weights" / "config.json").write_text((llama_folder / "config.json").read_text())
    return {
        "missing": (root / "does" / "not" / "exist", ["no such file or folder", "expected a checkpoint folder with config.json"]),
        "no-config": (root / "empty", ["the folder has no config.json"]),
        "a-file": (root / "a-file.safetensors", ["a file, not a checkpoint folder"]),
        "not-json": (root / "not-json", [f"{root / 'not-json' / 'config.json'}: not valid JSON (Expecting property name",
                                         "line 1, column 2"]),
        "no-weights": (root / "no-weights", ["holds no weights (*.safetensors"]),
        "truncated-data": (truncated_copy(llama_folder, root / "cut-data"),
                           [f"{root / 'cut-data' / 'model.safetensors'}: truncated (its tensors need"]),
        "truncated-header": (truncated_copy(llama_folder, root / "cut-header", keep=100),
                             [f"{root / 'cut-header' / 'model.safetensors'}: truncated (its header says"]),
    }


@pytest.mark.parametrize("case", ["missing", "no-config", "a-file", "not-json", "no-weights", "truncated-data",
                                  "truncated-header"])
def test_local_model_that_holds_no_model_is_a_usage_error(case: str, tmp_path: Path, llama_folder: Path,
                                                          inner: Inner) -> None:
    (tmp_path / "models").mkdir()
    argument, fragments = bad_model_paths(tmp_path / "models", llama_folder)[case]
    run = inner.run(inner.suite(), "--matrix", "matrix.yaml", "--model", str(argument))
    assert_one_usage_error(run, [f"--model {argument}:", *fragments])


def test_hub_id_missing_offline_fails_with_require_models(inner: Inner) -> None:
    """A matrix entry missing offline is a skip (tests/test_maintainer.py); with the flag its cells error, exit 1."""
    workdir = inner.suite()
    (workdir / "matrix.yaml").write_text(HUB_MATRIX)
    run = inner.run(workdir, "--matrix", "matrix.yaml", "--require-models", env={"HF_HUB_OFFLINE": "1"})
    assert run.ret == 1, run.output[-4000:]
    cell = "some-model[float32-cpu-dynamic]"
    assert {key: value for key, value in run.outcomes().items() if key[0] == cell} == {(cell, check): "error" for check in CHECKS}
    message = run.rows()[(cell, "parity")]["message"]
    assert "offline (HF_HUB_OFFLINE=1) and not in the local cache" in message, message
    assert message.endswith("(--require-models: a missing model fails its cells)"), message


@pytest.mark.parametrize("argument", ["tmp/ckpt", "some-org/some-model"])
def test_model_argument_not_here_offline_is_a_usage_error(argument: str, inner: Inner) -> None:
    """A relative path without ./ that does not exist is read as a hub id: offline and not cached, nothing could run."""
    run = inner.run(inner.suite(), "--matrix", "matrix.yaml", "--model", argument, env={"HF_HUB_OFFLINE": "1"})
    assert_one_usage_error(run, [f"--model {argument}: not a folder here and not in the local hub cache",
                                 f"pass ./{argument} for a local folder", f"`hf download {argument}`"])


def test_broken_checkpoint_files_in_the_matrix_are_named_at_load_time(tmp_path: Path, llama_folder: Path) -> None:
    """A matrix entry is loaded during the run: its cells fail with an error that names the file."""
    cut = truncated_copy(llama_folder, tmp_path / "cut")
    with pytest.raises(CheckpointFileError, match=f"^{cut / 'model.safetensors'}: truncated"):
        load_master(ModelSpec(id="cut", source="checkpoint", location=str(cut), settings=SMALL))
    (cut / "config.json").write_text('{"model_type": "llama",}')
    with pytest.raises(CheckpointFileError, match=f"^{cut / 'config.json'}: not valid JSON"):
        load_master(ModelSpec(id="cut", source="checkpoint", location=str(cut), settings=SMALL))


def test_pickle_refusal_names_the_matrix_field_and_the_option() -> None:
    spec = ModelSpec(id="pickled", source="checkpoint", location="/x", settings=SMALL)
    with pytest.raises(ModelRefused) as refused:
        check_weight_safety(["config.json", "pytorch_model.bin"], spec, "/x")
    assert "'allow_pickle: true'" in str(refused.value) and "--allow-pickle" in str(refused.value)


# ----------------------------------------------------------------------------------------- --dtype/--device/--cache/--shard


BAD_OPTIONS = {
    "dtype": (["--dtype", "float8"], "--dtype: unknown value 'float8'. Did you mean: float32, float16, bfloat16? "
                                     "Available: bfloat16, float16, float32"),
    "device-index": (["--device", "cuda:7"], "--device: unknown value 'cuda:7'. Did you mean: cuda? Available: cpu, cuda, "
                                             "mps (for a GPU pass --device cuda and choose which one with "
                                             "CUDA_VISIBLE_DEVICES=7)"),
    "device-name": (["--device", "gpu"], "--device: unknown value 'gpu'."),
    "cache": (["--cache", "bogus"], "--cache: unknown value 'bogus'. Available: dynamic, hqq-int2, hqq-int4, quantized, quanto-int2, quanto-int4, static"),
    "attn": (["--attn", "flash"], "--attn: unknown value 'flash'. Available: eager, flex_attention, sdpa"),
    "dtype-alias": (["--dtype", "fp16"], "--dtype: unknown value 'fp16'. Did you mean: float16? Available: bfloat16, float16, float32"),
    "shard-count": (["--shard", "1/0"], "--shard 1/0: N (the number of shards) must be >= 1, got 0"),
    "shard-index": (["--shard", "3/2"], "--shard 3/2: I (this shard) must be between 1 and N=2, got 3"),
}


@pytest.mark.parametrize("case", list(BAD_OPTIONS))
def test_bad_option_value_is_one_usage_error(case: str, inner: Inner) -> None:
    args, fragment = BAD_OPTIONS[case]
    run = inner.run(inner.suite(), "--matrix", "matrix.yaml", *args)
    assert_one_usage_error(run, [fragment])


@pytest.mark.parametrize(("args", "fragment"), [
    (["--model", "/path/that/does/not/exist"], "ERROR: --model /path/that/does/not/exist: no such file or folder"),
    (["--dtype", "float8"], "ERROR: --dtype: unknown value 'float8'."),
], ids=["model", "dtype"])
def test_usage_errors_from_a_real_process(args: list[str], fragment: str, inner: Inner) -> None:
    run = inner.process(inner.suite(), "--matrix", "matrix.yaml", *args)
    assert_one_usage_error(run, [fragment])


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA, so cuda cells run")
def test_device_cuda_without_cuda_is_counted_with_its_reason_and_not_a_pass(inner: Inner) -> None:
    run = inner.run(inner.suite(), "--matrix", "matrix.yaml", "--device", "cuda", "-k", "cuda", "-q")
    assert run.ret == pytest.ExitCode.NO_TESTS_COLLECTED, run.output[-4000:]  # no check ran: not a pass
    assert "kvconform: error: no check ran, all " in run.out and "a run that checks nothing is not a pass" in run.out, run.out
    doc = run.doc()
    assert doc["results"] == [] and doc["run"]["complete"] and doc["run"]["planned"]  # skipped, not lost
    assert [(group["reason"], group["checks"]) for group in doc["not_run"]] == [
        ("cuda: no CUDA device on this machine (torch.cuda.is_available() is False)", doc["run"]["planned"])]
    # Not collected as skip items (pytest's progress counts only what runs): deselected, counted in the report.
    assert re.search(r"\b\d+ deselected\b", run.out) and not re.search(r"\d+ skipped", run.out), run.out[-2000:]
    assert f"kvconform: {doc['run']['planned']} checks left out: no cuda device here (counted in the report's not_run)" in run.out


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA, so cuda cells run")
def test_cuda_cells_leave_the_run_but_stay_counted_with_k_and_under_xdist(inner: Inner) -> None:
    """main.yaml with cpu and cuda cells, narrowed by -k: only the selected cuda checks are counted, the cpu ones run;
    two xdist workers (which collect, unlike the controller) give the same report."""
    workdir = inner.suite()
    runs = [inner.run(workdir, "--matrix", "matrix.yaml", "--device", "cuda", "-k", "llama-gqa and test_parity", *extra)
            for extra in ([], ["-n", "2"])]
    docs = [run.doc() for run in runs]
    for run, doc in zip(runs, docs, strict=True):
        assert run.ret == 0, run.output[-4000:]
        assert {(row["cell_id"], row["outcome"]) for row in doc["results"]} == {
            ("llama-gqa[float32-cpu-dynamic]", "pass"), ("llama-gqa[float32-cpu-static]", "pass")}
        assert [(group["reason"], group["checks"], group["cells"]) for group in doc["not_run"]] == [
            ("cuda: no CUDA device on this machine (torch.cuda.is_available() is False)", 2, 2)]
        assert doc["run"]["planned"] == 4 and doc["run"]["complete"], doc["run"]
        assert "kvconform: 2 checks left out: no cuda device here" in run.out, run.out[-2000:]  # the controller hears of them
        assert "kvconform: 1 of 1 models done (2 of 2 checks) in " in run.out, run.out[-2000:]  # progress leaves them out
    assert re.search(r"\b2 passed, \d+ deselected", runs[0].out) and not re.search(r"\d+ skipped", runs[0].out), runs[0].out


# ----------------------------------------------------------------------------------------- --shard


def test_empty_shard_writes_a_report_that_says_so(inner: Inner) -> None:
    """main.yaml has 3 models: shard 4/4 holds none. CI uploads its report like any other shard's."""
    run = inner.process(inner.suite(), "--matrix", "matrix.yaml", "--shard", "4/4")
    assert run.ret == 0, run.output[-4000:]
    doc = run.doc()
    assert doc["results"] == [] and doc["run"]["empty_shard"] is True and doc["run"]["shard"] == "4/4"
    note = "Empty shard: shard 4/4 holds no models of the matrix, so nothing ran (more shards than models)."
    assert f"> ⚠️ **{note}**" in (run.report_dir / "conformance.md").read_text()
    assert f'<div class="banner warn">{note}</div>' in (run.report_dir / "conformance.html").read_text()
    assert "shard 4/4 holds no models of the matrix: nothing ran (the report says so)" in run.out


# ----------------------------------------------------------------------------------------- --report-dir


def test_report_dir_that_is_a_file_is_a_usage_error_before_any_model_runs(inner: Inner,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import kvconform.runner

    loads: list[ModelSpec] = []
    monkeypatch.setattr(kvconform.runner, "load_master", loads.append)
    workdir = inner.suite()
    (workdir / "reports").write_text("a file where the report folder should be")
    run = inner.run(workdir, "--matrix", "matrix.yaml")
    assert run.ret == 4 and not loads, run.output[-4000:]
    assert run.output.strip() == (f"ERROR: --report-dir {workdir / 'reports'}: cannot write reports there "
                                  "(it is a file, not a folder); pass a writable folder, or --no-reports")


def test_report_dir_under_proc_is_a_usage_error(inner: Inner) -> None:
    if not Path("/proc/self").exists():
        pytest.skip("no /proc on this system")
    run = inner.run(inner.suite(), "--matrix", "matrix.yaml", "--report-dir", "/proc/kvconform/reports")
    assert run.ret == 4, run.output[-4000:]
    line = run.output.strip()
    assert line.startswith("ERROR: --report-dir /proc/kvconform/reports: cannot write reports there (") and "\n" not in line


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only folders")
def test_report_dir_without_write_permission_is_a_usage_error(tmp_path: Path, inner: Inner) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    run = inner.run(inner.suite(), "--matrix", "matrix.yaml", "--report-dir", str(locked / "reports"))
    assert run.ret == 4 and "PermissionError" in run.output, run.output[-4000:]


BREAK_REPORT_DIR = '''

def pytest_runtest_call(item):
    """Put a file where the report folder goes, after the up-front check passed."""
    from pathlib import Path

    target = Path(item.config.getoption("report_dir"))
    if not target.exists():
        target.write_text("a file where the report folder should be")
'''


def test_report_write_failure_at_the_end_keeps_results_summary_and_fails(tmp_path: Path, inner: Inner) -> None:
    workdir = inner.suite(extra_conftest=BREAK_REPORT_DIR)
    temp = tmp_path / "tmp"
    temp.mkdir()
    run = inner.process(workdir, "--matrix", "matrix.yaml", *GREEN, env={"TMPDIR": str(temp)})
    assert run.ret == 1, run.output[-4000:]  # every check passed, but the reports are not where CI looks
    assert "Traceback" not in run.output, run.output[-4000:]
    [fallback] = temp.glob("kvconform-results-*.json")
    errors = [line for line in run.out.splitlines() if line.startswith("kvconform: error:")]
    assert errors == [f"kvconform: error: could not write the reports to {workdir / 'reports'} (FileExistsError: "
                      f"File exists: {workdir / 'reports'}); the results are saved in {fallback} (render them: "
                      f"python tools/render_report.py {fallback} --out DIR)"], run.out[-4000:]
    assert re.fullmatch(r"=+ 7 passed, 32 deselected(, \d+ warnings?)? in [\d.]+s =+", run.out.splitlines()[-1]), run.out[-1000:]
    assert {(row["cell_id"], row["outcome"]) for row in load_document(fallback)["results"]} == {(GREEN_CELL, "pass")}


def assert_summary_warning_only(run: Run, target: Path) -> None:
    assert run.ret == 0, run.output[-4000:]
    assert "Traceback" not in run.output
    warnings = [line for line in run.out.splitlines() if line.startswith("kvconform: warning:")]
    assert len(warnings) == 1 and warnings[0].startswith("kvconform: warning: could not append to GITHUB_STEP_SUMMARY ("), run.out
    assert warnings[0].endswith("; the run's result is unaffected") and str(target) in warnings[0]
    assert all((run.report_dir / name).is_file() for name in REPORT_FILES)


def test_github_step_summary_in_a_missing_folder_is_a_warning_only(tmp_path: Path, inner: Inner) -> None:
    target = tmp_path / "no-such-folder" / "summary.md"
    run = inner.process(inner.suite(), "--matrix", "matrix.yaml", *GREEN,
                      env={"GITHUB_STEP_SUMMARY": str(target)})
    assert_summary_warning_only(run, target)


def test_github_step_summary_naming_a_folder_is_a_warning_only(tmp_path: Path, inner: Inner) -> None:
    """In-process (``inner`` hides the outer GITHUB_STEP_SUMMARY), so the inner conftest sets and clears it."""
    hook = f"""

def pytest_configure(config):
    import os
    os.environ["GITHUB_STEP_SUMMARY"] = {str(tmp_path)!r}


def pytest_unconfigure(config):
    import os
    os.environ.pop("GITHUB_STEP_SUMMARY", None)
"""
    run = inner.run(inner.suite(extra_conftest=hook), "--matrix", "matrix.yaml", *GREEN)
    assert_summary_warning_only(run, tmp_path)


def test_render_report_out_that_cannot_be_written_is_one_error_line(tmp_path: Path) -> None:
    report = tmp_path / "conformance.json"
    report.write_text(json.dumps(make_doc([])))
    (tmp_path / "a-file").write_text("")
    for out, reason in ((tmp_path / "a-file", "it is a file, not a folder"),
                        (tmp_path / "a-file" / "sub", "NotADirectoryError: Not a directory")):
        proc = subprocess.run([sys.executable, str(REPO / "tools" / "render_report.py"), str(report), "--out", str(out)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
        assert proc.stderr.startswith(f"render_report: error: --out {out}: cannot write reports there ({reason}")
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr


# ----------------------------------------------------------------------------------------- interrupted runs


SIGINT_HOOK = f'''

def pytest_runtest_call(item):
    """A real SIGINT (what Ctrl-C or a CI cancel sends) when {INTERRUPT_TEST} starts."""
    import os
    import signal

    if item.name == {INTERRUPT_TEST!r}:
        # A user's shell delivers Ctrl-C to a default handler; a parent that ignores SIGINT (an xdist worker after
        # some tests) would pass SIG_IGN on to this process, and Python then installs no KeyboardInterrupt handler.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.kill(os.getpid(), signal.SIGINT)
'''


@pytest.fixture
def sigint_run(inner: Inner, shared_runs: SharedRuns) -> Run:
    """main.yaml in a real process that gets SIGINT after both llama-gqa cells (14 checks) finished."""
    return shared_runs.get("sigint", lambda: inner.process(inner.suite("sigint", extra_conftest=SIGINT_HOOK),
                                                           "--matrix", "matrix.yaml"))


def test_interrupted_run_says_so_in_json_markdown_and_html(sigint_run: Run) -> None:
    assert sigint_run.ret == int(pytest.ExitCode.INTERRUPTED), sigint_run.output[-4000:]
    doc = sigint_run.doc()
    assert doc["run"] == {"complete": False, "stopped": "interrupted (Ctrl-C or pytest.exit)", "planned": 28,
                          "never_ran": 14, "cells_never_ran": 2, "shard": None, "empty_shard": False}
    assert len(doc["results"]) == 14
    banner = ("Incomplete run: interrupted (Ctrl-C or pytest.exit); 14 of 28 planned checks never ran (2 cells); "
              "the totals below count only the checks that finished.")
    markdown = (sigint_run.report_dir / "conformance.md").read_text()
    assert markdown.splitlines()[2] == f"> ⚠️ **{banner}**"  # first, above the verdict of what finished
    assert ("14 passed, 0 failed, 0 xfailed, 0 xpassed, 0 errored, 0 crashed, 0 not run (2 cells ran); "
            "14 planned checks never ran") in markdown
    assert f'<div class="banner warn">{banner}</div>' in (sigint_run.report_dir / "conformance.html").read_text()
    [stopped] = ET.parse(sigint_run.report_dir / "conformance.junit.xml").getroot().iter("error")  # red in a CI test view
    assert (stopped.get("type"), stopped.get("message")) == (
        "incomplete", "incomplete run: interrupted (Ctrl-C or pytest.exit); 14 of 28 planned checks never ran (2 cells)")
    assert "kvconform: incomplete run: interrupted (Ctrl-C or pytest.exit); 14 of 28 planned checks never ran (2 cells)" in sigint_run.out


def test_complete_run_is_marked_complete(inner: Inner) -> None:
    run = inner.run(inner.suite(), "--matrix", str(DATA / "main.yaml"), *GREEN)
    assert run.ret == 0, run.output[-4000:]
    assert run.doc()["run"] == {"complete": True, "stopped": None, "planned": 7, "never_ran": 0, "cells_never_ran": 0,
                                "shard": None, "empty_shard": False}
    assert "Incomplete" not in (run.report_dir / "conformance.md").read_text()


def test_run_stopped_by_exitfirst_is_marked_incomplete(inner: Inner) -> None:
    """-x stops at broken-llama's first error: its other 5 checks never run."""
    run = inner.run(inner.suite(), "--matrix", "matrix.yaml", "-q", "-x")
    assert run.ret == 1, run.output[-4000:]
    assert run.doc()["run"] == {"complete": False, "stopped": "stopped early (stopping after 1 failures)", "planned": 28,
                                "never_ran": 6, "cells_never_ran": 1, "shard": None, "empty_shard": False}


def test_diff_against_an_interrupted_report_exits_1(sigint_run: Run, inner: Inner) -> None:
    base = inner.run(inner.suite(), "--matrix", "matrix.yaml", "-q")
    assert base.ret == 1 and base.doc()["run"]["complete"], base.output[-4000:]  # broken-llama errors, as in main.yaml
    command = [sys.executable, str(REPO / "tools" / "diff_reports.py"), str(base.report_dir / "conformance.json"),
               str(sigint_run.report_dir / "conformance.json")]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == (
        "REGRESSED: 7 missing (passed in base), the new report is an incomplete run: interrupted (Ctrl-C or "
        "pytest.exit); 14 of 28 planned checks never ran (2 cells) (factor 2, margin 0.5).")
    assert subprocess.run([*command, "--allow-missing"], capture_output=True, timeout=60).returncode == 1  # cut short


# ----------------------------------------------------------------------------------------- ragged with one row


RAGGED_MATRIX = """
version: 1
defaults:
  dtypes: [float32]
  devices: [cpu]
  prompt_length: 4
  decode_steps: 2
  generate: false
  ragged: true
  tolerances:
    float32: {atol: 1.0e-5, rtol: 1.0e-4}
models:
  - {id: one-row, synthetic: llama, batch_size: 1}
  - {id: short-prompt, synthetic: llama, batch_size: 2, prompt_length: 2}
  - {id: two-rows, synthetic: llama, batch_size: 2}
"""


def test_ragged_that_could_not_fail_is_skipped_with_the_reason(inner: Inner) -> None:
    workdir = inner.suite()
    (workdir / "ragged.yaml").write_text(RAGGED_MATRIX)
    run = inner.run(workdir, "--matrix", "ragged.yaml", "-q")
    assert run.ret == 0, run.output[-4000:]
    rows = run.rows()
    assert ("one-row[float32-cpu-dynamic]", "ragged") not in rows and ("short-prompt[float32-cpu-dynamic]", "ragged") not in rows
    skipped = {group["reason"]: (group["cells"], group["checks"]) for group in run.doc()["not_run"]}
    assert skipped[("ragged: batch_size 1 and prompt_length 4 give rows of lengths [4], so no row is padded; "
                    "it needs batch_size >= 2 and prompt_length >= 3")] == (1, 1)
    assert [counts for reason, counts in skipped.items() if "give rows of lengths [2, 2], so no row is padded" in reason] == [(1, 1)]
    control = rows[("two-rows[float32-cpu-dynamic]", "ragged")]
    assert control["outcome"] == "pass" and "left-padded rows of lengths [4, 3]" in control["message"], control
    assert rows[("one-row[float32-cpu-dynamic]", "parity")]["outcome"] == "pass"  # the cell's other checks still run


def test_every_option_has_a_prefixed_spelling_that_means_the_same() -> None:
    """--kvconform-dtype is --dtype: the prefixed names cannot clash with another plugin's options."""
    import kvconform.plugin

    parser = pytest.Parser()
    kvconform.plugin.pytest_addoption(parser)
    group = parser.getgroup("kvconform")
    for option in group.options:
        names = option.names()
        plain = [n for n in names if not n.startswith("--kvconform-")]
        assert plain and [f"--kvconform-{n[2:]}" for n in plain] == [n for n in names if n.startswith("--kvconform-")], names
    parsed = parser.parse_known_args(["--kvconform-dtype", "float16", "--dtype", "bfloat16", "--kvconform-shard", "1/2"])
    assert parsed.kvconform_dtypes == ["float16", "bfloat16"] and parsed.shard == "1/2"
