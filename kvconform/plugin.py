"""The pytest plugin: matrix options, one test per cell × check, results gathered into reports.

Workers attach each check's plain-dict verdict to its test report (``user_properties``); xdist
ships reports to the controller as builtin data, so the controller sees every finished test even
when a worker crashes, and writes the reports once at session end (also after Ctrl-C).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kvconform.cells import Cell, check_applies, plan_cells, plan_field, shard, untestable
from kvconform.collection_gc import CollectionGc
from kvconform.known_failures import ExpectedFailure, known_failure
from kvconform.matrix import Matrix, MatrixError, load_matrix
from kvconform.report.document import count_not_run, finite_or_null
from kvconform.results import SCHEMA_VERSION, Outcome, ResultRow

RESULT_KEY = "kvconform_result"
TIMING_KEY = "kvconform_cell"
#: ``{"model_type": ...}`` of the model a worker loaded for the cell.
MODEL_KEY = "kvconform_model"
#: Set by ``pytest_handlecrashitem`` on the report of a test whose xdist worker died.
CRASHED_KEY = "kvconform_crashed"
#: The kind of a known failure (e.g. "model bug"), attached to the test at collection.
XFAIL_KIND_KEY = "kvconform_xfail_kind"
#: How pytest's failure text of a strict xfail that passed begins.
STRICT_XPASS = "[XPASS(strict)]"
STATE = pytest.StashKey["KvconformState"]()


class KvconformState:
    """Per-process state: the resolved matrix, its cells and (on the controller) the results."""

    def __init__(self, config: pytest.Config, matrix: Matrix) -> None:
        self.config = config
        self.matrix = matrix
        from kvconform.build.model_types import model_attention

        self.cells, self.unplanned = plan_cells(matrix, model_attention)
        self.cells_by_id = {cell.id: cell for cell in self.cells}
        self.results: dict[str, ResultRow] = {}
        self.cell_timings: dict[str, dict[str, Any]] = {}
        self.model_types: dict[str, str] = {}
        self.runner: Any = None
        self.written: list[Path] = []
        #: ``(cell_id, check)`` of every collected conformance test (``None`` until collection finished).
        self.planned: set[tuple[str, str]] | None = None
        #: One-line problems met while writing at session end, printed in the terminal summary.
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.incomplete: str | None = None
        #: Node ids of the selected checks of cells whose device this machine lacks: left out of the run (pytest
        #: counts them as deselected, so its progress means something), reported as skips with the reason.
        self.not_collected: set[str] = set()
        #: The folder under reports/ of a run that is not the default matrix ("" for the default; ``None`` until known).
        self.report_folder: str | None = None
        #: The controller's progress.ProgressReporter (``None`` on workers).
        self.progress: Any = None
        #: Under xdist, a worker's ``machine_facts`` (the controller itself imports no torch to learn them).
        self.machine: dict[str, Any] | None = None

    @property
    def is_worker(self) -> bool:
        return hasattr(self.config, "workerinput")

    @property
    def empty_shard(self) -> bool:
        """``--shard I/N`` left this run without models (more shards than models)."""
        return bool(self.config.getoption("shard")) and not self.matrix.models


def pytest_addoption(parser: pytest.Parser) -> None:
    """Every option also has a ``--kvconform-`` spelling, which cannot clash with another plugin's options.

    Values are validated right after parsing (``options.check_choices``), in one line with close matches,
    rather than by argparse ``choices``, whose error prints the usage and no close matches."""
    group = parser.getgroup("kvconform", "KV-cache conformance")
    group.addoption("--matrix", "--kvconform-matrix", default=None, help="Model matrix YAML (default: model_matrix.yaml at the rootdir, else the built-in default matrix)")
    group.addoption(
        "--model", "--kvconform-model", action="append", default=[], dest="kvconform_models",
        help="Run only this checkpoint (local folder, .gguf file or hub id) with the matrix defaults; repeatable",
    )
    group.addoption("--revision", "--kvconform-revision", default=None, help="Pinned hub revision for --model hub ids")
    group.addoption("--dtype", "--kvconform-dtype", action="append", default=[], dest="kvconform_dtypes", help="Only these dtypes; repeatable")
    group.addoption("--device", "--kvconform-device", action="append", default=[], dest="kvconform_devices", help="Only these devices; repeatable")
    group.addoption("--cache", "--kvconform-cache", action="append", default=[], dest="kvconform_caches", help="Only these cache implementations; repeatable")
    group.addoption("--attn", "--kvconform-attn", action="append", default=[], dest="kvconform_attentions",
                    help="Only these attention implementations (sdpa, eager); repeatable")
    group.addoption("--trust-remote-code", "--kvconform-trust-remote-code", action="store_true", help="Allow --model checkpoints to run their own code")
    group.addoption("--allow-pickle", "--kvconform-allow-pickle", action="store_true", help="Allow --model checkpoints with pickle weights")
    group.addoption(
        "--require-models", "--kvconform-require-models", action="store_true",
        help="Fail (instead of skip) the cells of a model that is not on this machine, e.g. a hub id missing offline",
    )
    group.addoption("--shard", "--kvconform-shard", default=None, help="Run shard I/N of the models (e.g. 2/4), split deterministically by model")
    group.addoption("--list-models", "--kvconform-list-models", action="store_true", help="Print the resolved matrix and the excluded architectures, then exit")
    group.addoption("--report-dir", "--kvconform-report-dir", default=None, help="Where conformance reports go (default: reports/ at the rootdir)")
    group.addoption("--no-reports", "--kvconform-no-reports", action="store_true", help="Do not write conformance reports")


def quiet_torch_trace() -> None:
    """Keep torch's structured-trace records out of test reports unless ``TORCH_TRACE`` asks for them.

    pytest attaches its log capture to every non-propagating logger, and torch's ``torch.__trace`` logger is
    always at DEBUG, so each ``torch.compile`` (flex_attention's kernels) in a failing test put thousands of
    ``DEBUG torch.__trace`` lines into its report.
    """
    if not os.environ.get("TORCH_TRACE") and os.environ.get("TORCH_COMPILE_DEBUG", "0") != "1":
        logging.getLogger("torch.__trace").addFilter(lambda record: False)


def isolate_inductor_cache() -> None:
    """One inductor cache folder per CPU kernel capability, unless ``TORCHINDUCTOR_CACHE_DIR`` names one.

    torch 2.13's inductor cache key ignores the vector ISA: a flex_attention kernel compiled under
    ``ATEN_CPU_CAPABILITY=avx2`` was reused under another capability, where it aborted the process (or failed to
    compile: "'at::vec' has not been declared").
    """
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        import torch

        from kvconform.cache_root import cache_dir

        capability = torch.backends.cpu.get_cpu_capability().lower()
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir() / "inductor" / capability)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kvconform_check(name): a conformance check run on every matrix cell")
    from kvconform.run_scope import is_conformance_run

    if not is_conformance_run(config):
        return  # installed (pytest11), in another project's run: every hook below finds no state and does nothing
    quiet_torch_trace()
    if not _runs_no_tests(config):  # an xdist controller starts its workers without importing torch
        isolate_inductor_cache()
        config.pluginmanager.register(CollectionGc(worker=hasattr(config, "workerinput")), "kvconform-collection-gc")
    state = KvconformState(config, _matrix_or_usage_error(config))
    config.stash[STATE] = state
    if not state.is_worker:
        _check_report_dir(config)
        config.pluginmanager.register(ResultCollector(state), "kvconform-results")
        from kvconform import progress

        state.progress = progress.ProgressReporter(config, lambda: _planned_by_model(state), lambda report: _progress_key(state, report),
                                                   interval_s=progress.INTERVAL_S)
        config.pluginmanager.register(state.progress, "kvconform-progress")
    if hasattr(config, "workerinput"):
        _share_cores(int(config.workerinput.get("workercount", 1)))


def _runs_no_tests(config: pytest.Config) -> bool:
    """An xdist controller: its workers run the tests."""
    return not hasattr(config, "workerinput") and getattr(config.option, "dist", "no") != "no"


def _matrix_or_usage_error(config: pytest.Config) -> Matrix:
    """The resolved matrix; a problem in the file or an option is one usage error (exit 4)."""
    try:
        return resolve_matrix(config)
    except (MatrixError, ValueError) as exc:
        raise pytest.UsageError(str(exc)) from None


def report_dir(config: pytest.Config) -> Path:
    """``--report-dir``, else ``reports/`` for the default matrix and a folder of its own under it for any other run."""
    if config.getoption("report_dir"):
        return Path(config.getoption("report_dir"))
    state = config.stash[STATE]
    if state.report_folder is None:
        from datetime import datetime

        from kvconform.report_dir import run_folder
        from kvconform.run_scope import narrowing, selects_tests

        # A --collect-only run (IDEs run one on every save) checks nothing: it never replaces a run's reports.
        collect_only = ["collect-only"] if config.option.collectonly else []
        state.report_folder = run_folder(narrowing(config) + collect_only, selects_tests(config), datetime.now()) or ""
    return Path(config.rootpath) / "reports" / state.report_folder


def _check_report_dir(config: pytest.Config) -> None:
    """Before any model runs: a report folder that cannot be written is a usage error, not a lost run."""
    from kvconform.report_dir import report_dir_problem

    if config.getoption("no_reports") or config.getoption("list_models"):
        return
    problem = report_dir_problem(report_dir(config))
    if problem:
        raise pytest.UsageError(
            f"--report-dir {report_dir(config)}: cannot write reports there ({problem}); "
            "pass a writable folder, or --no-reports")


def _share_cores(workers: int) -> None:
    """Give each xdist worker its share of the cores: oversubscribed BLAS threads cost more than they give. A process
    given fewer threads (``OMP_NUM_THREADS``: a run started by a process that holds only a share itself) keeps them."""
    import os

    import torch

    share = max(1, (os.cpu_count() or 1) // max(1, workers))
    given = os.environ.get("OMP_NUM_THREADS", "")
    torch.set_num_threads(min(share, int(given)) if given.isdigit() and int(given) > 0 else share)


def resolve_matrix(config: pytest.Config) -> Matrix:
    """The matrix file, narrowed by --model/--dtype/--device/--cache/--shard (each option checked first)."""
    from kvconform.build.architecture_table import load_architecture_table
    from kvconform.build.model_types import causal_lm_model_types
    from kvconform.cli_models import specs_from_cli
    from kvconform.families.registry import sweep_types
    from kvconform.options import NARROWING, check_choices, narrow, parse_shard

    wanted = {option: check_choices(option, config.getoption(f"kvconform_{field}"))
              for option, (field, _) in NARROWING.items() if config.getoption(f"kvconform_{field}")}
    shard_of = parse_shard(str(config.getoption("shard"))) if config.getoption("shard") else None
    from kvconform.run_scope import matrix_path

    matrix = load_matrix(matrix_path(config), known_model_types=causal_lm_model_types, excluded_types=load_architecture_table()[1],
                         family_sweeps=sweep_types)
    if config.getoption("kvconform_models"):
        matrix = replace(matrix, models=specs_from_cli(config, matrix), excluded={})
    narrowed = []
    for spec in matrix.models:
        for option, values in wanted.items():
            spec = narrow(spec, option, values)
        narrowed.append(spec)
    matrix = replace(matrix, models=tuple(narrowed))
    return shard(matrix, *shard_of) if shard_of else matrix


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """Answer ``--list-models`` without collecting or running anything."""
    if not config.getoption("list_models"):
        return None
    from kvconform.build.support import spec_paths
    from kvconform.listing import render_listing

    print(render_listing(_matrix_or_usage_error(config), spec_paths))
    return 0


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "cell" not in metafunc.fixturenames or STATE not in metafunc.config.stash:
        return
    cells = metafunc.config.stash[STATE].cells
    mark = metafunc.definition.get_closest_marker("kvconform_check")
    if mark is not None:
        cells = [cell for cell in cells if check_applies(mark.args[0], cell)]
    metafunc.parametrize("cell", cells, ids=[cell.id for cell in cells])


def _cell_of(item: pytest.Item) -> Cell | None:
    callspec = getattr(item, "callspec", None)
    cell = callspec.params.get("cell") if callspec is not None else None
    return cell if isinstance(cell, Cell) else None


def _check_of(item: pytest.Item) -> str:
    mark = item.get_closest_marker("kvconform_check")
    return str(mark.args[0]) if mark else str(getattr(item, "originalname", item.name)).removeprefix("test_")


@pytest.hookimpl(trylast=True)  # after -k/-m: only the checks the run selected are counted
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run each cell's checks together, in matrix order, and apply skip/xfail marks; checks of a device this
    machine lacks (cuda without CUDA) leave the run, to be reported as skips (``_skip_not_collected``)."""
    state = config.stash.get(STATE, None)
    if state is None:
        return
    missing_device = {device: _device_missing(device) for device in {cell.device for cell in state.cells}}
    absent = [item for item in items if missing_device.get(getattr(_cell_of(item), "device", ""))]
    if absent:
        state.not_collected |= {item.nodeid for item in absent}
        left = set(map(id, absent))
        items[:] = [item for item in items if id(item) not in left]
        config.hook.pytest_deselected(items=absent)
    order = {cell.id: index for index, cell in enumerate(state.cells)}
    items.sort(key=lambda item: order.get(cell.id, -1) if (cell := _cell_of(item)) else -1)
    for item in items:
        cell = _cell_of(item)
        if cell is None:
            continue
        missing = untestable(_check_of(item), cell)
        if missing:
            item.add_marker(pytest.mark.skip(reason=missing))
        known = known_failure(cell.spec.xfail, _check_of(item), cell.dtype, cell.cache, cell.attn)
        if known is not None:
            # Strict and precise: only the expected failure (raised as ExpectedFailure) is an xfail.
            item.add_marker(pytest.mark.xfail(reason=known.label, strict=True, raises=ExpectedFailure))
            item.user_properties.append((XFAIL_KIND_KEY, known.kind))


def _plan(state: KvconformState, nodeids: list[str]) -> None:
    """Record the conformance tests about to run, so a report can count those that never did."""
    parsed = [found for found in map(_parse_nodeid, nodeids) if found and found[1] in state.cells_by_id]
    state.planned = (state.planned or set()) | {(cell_id, check) for check, cell_id in parsed}


def pytest_collection_finish(session: pytest.Session) -> None:
    state = session.config.stash.get(STATE, None)
    if state is not None and not state.is_worker:
        _plan(state, [item.nodeid for item in session.items])
        _skip_not_collected(state, state.not_collected)


def _nodeid_cell(state: KvconformState, nodeid: str) -> Cell | None:
    parsed = _parse_nodeid(nodeid)
    return state.cells_by_id.get(parsed[1]) if parsed else None


def _skip_not_collected(state: KvconformState, nodeids: set[str]) -> None:
    """The checks left out for a missing device: planned, and a skip row each with the device's reason."""
    missing = (state.machine or {}).get("missing") or {}
    _plan(state, sorted(nodeids))
    for nodeid in nodeids:
        parsed = _parse_nodeid(nodeid)
        if parsed is None or parsed[1] not in state.cells_by_id:
            continue
        check, cell_id = parsed
        cell = state.cells_by_id[cell_id]
        row = _row(cell, check, nodeid)
        row["outcome"] = "skip"
        row["message"] = row["reason"] = (missing[cell.device] if cell.device in missing else _device_missing(cell.device)) or ""
        state.results.setdefault(f"{cell_id}::{check}", row)


#: ``workeroutput`` key of a worker's not-collected node ids (every worker collects the same; the controller unions).
NOT_COLLECTED_KEY = "kvconform_not_collected"
#: ``workeroutput`` key of a worker's ``machine_facts``.
MACHINE_KEY = "kvconform_machine"


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """Under xdist the controller collects nothing: a worker sends the checks it left out at its end."""
    state = node.config.stash.get(STATE, None)
    if state is None:
        return
    output = getattr(node, "workeroutput", {})
    state.machine = output.get(MACHINE_KEY) or state.machine
    left_out = set(output.get(NOT_COLLECTED_KEY, []))
    state.not_collected |= left_out  # the terminal summary counts them; the progress leaves them out
    _skip_not_collected(state, left_out)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """Under xdist the controller collects nothing itself; each worker sends its test ids."""
    if STATE in node.config.stash:
        _plan(node.config.stash[STATE], ids)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``-n N`` send all of a model's cells to one worker, so each model is built once."""
    if config.getvalue("dist") not in ("load", "loadgroup") or STATE not in config.stash:
        return None
    from xdist.scheduler import LoadScopeScheduling

    cells = config.stash[STATE].cells_by_id

    class ByModel(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no type information
        """LoadScope with one scope per model; a test that crashed its worker is reported, not re-run."""

        def _split_scope(self, nodeid: str) -> str:
            parsed = _parse_nodeid(nodeid)
            return f"kvconform:{cells[parsed[1]].spec.id}" if parsed and parsed[1] in cells else nodeid

        def remove_node(self, node: Any) -> str | None:
            # LoadScope re-queues the crashing test with its scope, so a test that always crashes would
            # take down one worker after another; mark it done and re-queue only the rest.
            workload = self.assigned_work.pop(node)
            pending = [(scope, nodeid) for scope, unit in workload.items() for nodeid, done in unit.items() if not done]
            if not pending:
                return None
            scope, crashitem = pending[0]
            workload[scope][crashitem] = True
            self.workqueue.update({scope: unit for scope, unit in workload.items() if not all(unit.values())})
            for other in self.assigned_work:
                self._reschedule(other)
            return crashitem

    return ByModel(config, log)


def machine_facts(state: KvconformState) -> dict[str, Any]:
    """The report's CPU and devices, and why each absent device of the matrix is absent (these need torch)."""
    from kvconform.environment import describe_machine

    devices = sorted({cell.device for cell in state.cells})
    return {**describe_machine(), "missing": {device: _device_missing(device) for device in devices}}


def _device_missing(device: str) -> str | None:
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        return "cuda: no CUDA device on this machine (torch.cuda.is_available() is False)"
    if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        return "mps: no Apple MPS device on this machine"
    return None


# ----------------------------------------------------------------------------------------- results

_PARAM = re.compile(r"^(?P<test>[^\[]+)\[(?P<cell>.*)\]$")


def _parse_nodeid(nodeid: str) -> tuple[str, str] | None:
    match = _PARAM.match(nodeid.split("::")[-1])
    return (match["test"].removeprefix("test_"), match["cell"]) if match else None


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched: Any) -> None:
    """xdist's hook for the test running when a worker died: mark its report (the row says ``crashed``; the
    ByModel scheduler does not re-run it)."""
    report.user_properties.append((CRASHED_KEY, True))


def _outcome(report: pytest.TestReport) -> Outcome | None:
    """The row outcome a phase report settles, or ``None`` when it settles nothing."""
    if dict(report.user_properties).get(CRASHED_KEY):
        return "crashed"
    if report.when == "setup":
        if report.skipped:
            return "xfail" if hasattr(report, "wasxfail") else "skip"
        return "error" if report.failed else None
    if report.when == "call":
        if hasattr(report, "wasxfail"):
            return "xfail" if report.skipped else "xpass"
        if report.failed and str(report.longrepr or "").startswith(STRICT_XPASS):
            return "xpass"
        called: dict[str, Outcome] = {"passed": "pass", "failed": "fail", "skipped": "skip"}
        return called[report.outcome]
    return "error" if report.failed else None


def _skip_reason(report: pytest.TestReport) -> str:
    if isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return str(report.longrepr or "(no reason)")


def _xfail_reason(report: pytest.TestReport) -> str:
    """The xfail mark's reason: pytest's ``wasxfail``, or the text after a strict XPASS's tag."""
    reason = getattr(report, "wasxfail", None)
    if reason is None:
        reason = str(report.longrepr or "").removeprefix(STRICT_XPASS).strip()
    return reason or "(no reason given)"


def _message(report: pytest.TestReport, verdict: dict[str, Any] | None) -> str:
    text = str(report.longrepr or "")
    if text.startswith(STRICT_XPASS):
        return f"the known failure no longer occurs: remove its entry from the matrix ({text.removeprefix(STRICT_XPASS).strip()})"
    if verdict is not None:
        return verdict["message"]
    if report.skipped and isinstance(report.longrepr, tuple):
        return _skip_reason(report)
    lines = [line for line in text.splitlines() if line.startswith("E ")] or text.splitlines()[-3:]
    return "\n".join(line.removeprefix("E ").strip() for line in lines)[:4000]


class ResultCollector:
    """Controller side (or the only process): turns phase reports into one result row per test."""

    def __init__(self, state: KvconformState) -> None:
        self.state = state

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        state = self.state
        parsed = _parse_nodeid(report.nodeid)
        if parsed is None or parsed[1] not in state.cells_by_id:
            return
        check, cell_id = parsed
        props: dict[str, Any] = dict(report.user_properties or [])
        if TIMING_KEY in props:
            state.cell_timings[cell_id] = props[TIMING_KEY]
        if MODEL_KEY in props:
            state.model_types[state.cells_by_id[cell_id].spec.id] = props[MODEL_KEY]["model_type"]
        outcome = _outcome(report)
        if outcome is None:
            return
        key = f"{cell_id}::{check}"
        row = state.results.get(key) or _row(state.cells_by_id[cell_id], check, report.nodeid)
        if row["outcome"] == "crashed":
            row["message"] += f"\n(xdist re-ran it on another worker: {outcome})"
            return
        if report.when == "teardown":
            row["outcome"], row["message"] = "error", row["message"] + "\n(teardown error) " + _message(report, None)
            state.results[key] = row
            return
        verdict = props.get(RESULT_KEY)
        row["outcome"], row["message"] = outcome, _message(report, verdict)
        if outcome in ("xfail", "xpass"):
            row["reason"] = _xfail_reason(report)
            if props.get(XFAIL_KIND_KEY):
                row["xfail_kind"] = props[XFAIL_KIND_KEY]
        elif outcome == "skip":
            row["reason"] = _skip_reason(report)
        if verdict is not None:
            figures, nonfinite = finite_or_null({key: verdict[key] for key in ("figure", "details")})
            row["measured"], row["limit"] = verdict["measured"], verdict["limit"]
            row["figure"], row["details"] = figures["figure"], figures["details"]
            if nonfinite:
                row["nonfinite"] = nonfinite
        row["duration_s"] = round(row.get("duration_s", 0.0) + report.duration, 4)
        state.results[key] = row


def _planned_by_model(state: KvconformState) -> list[tuple[str, str]]:
    """``(model, "cell::check")`` of every planned check that runs here (not those of a missing device)."""
    left_out = {found for nodeid in state.not_collected if (found := _parse_nodeid(nodeid))}
    return [(state.cells_by_id[cell_id].spec.id, f"{cell_id}::{check}") for cell_id, check in sorted(state.planned or ())
            if (check, cell_id) not in left_out and cell_id in state.cells_by_id]


def _progress_key(state: KvconformState, report: pytest.TestReport) -> tuple[str, str, bool] | None:
    """A conformance test's ``(model, "cell::check", whether this report ends it)``, or ``None`` for other tests."""
    parsed = _parse_nodeid(report.nodeid)
    if parsed is None or parsed[1] not in state.cells_by_id:
        return None
    check, cell_id = parsed
    ends = report.when == "teardown" or bool(dict(report.user_properties or []).get(CRASHED_KEY))
    return state.cells_by_id[cell_id].spec.id, f"{cell_id}::{check}", ends


def _row(cell: Cell, check: str, nodeid: str) -> ResultRow:
    """A result row before its outcome is known (provenance is per model, in the document's ``models``)."""
    return {
        "cell_id": cell.id, "model": cell.spec.id, "dtype": cell.dtype, "device": cell.device, "cache": cell.cache, "attn": cell.attn,
        "check": check, "outcome": "pass", "measured": "", "limit": "", "figure": None, "message": "", "details": {},
        "duration_s": 0.0, "nodeid": nodeid,
    }


def build_document(state: KvconformState, stopped: str | None = None) -> dict[str, Any]:
    """The ``conformance.json`` document of this run; ``stopped`` says why it ended early, if it did.

    Skipped checks are counted by reason (``not_run``); planned checks without any result, in ``run``.
    """
    from kvconform.environment import describe_environment
    from kvconform.provenance import describe_model
    from kvconform.run_status import run_field

    rows = sorted(state.results.values(), key=lambda r: (r["model"], r["cell_id"], r["check"]))
    ran = [row for row in rows if row["outcome"] != "skip"]
    specs = {spec.id: spec for spec in state.matrix.models}
    return {
        "schema_version": SCHEMA_VERSION,
        "environment": describe_environment(Path(state.config.rootpath), state.matrix.path, state.machine),
        "run": run_field(planned=state.planned, finished=[(row["cell_id"], row["check"]) for row in rows],
                         stopped=stopped, shard=state.config.getoption("shard"), empty_shard=state.empty_shard),
        "models": [describe_model(specs[model], state.model_types.get(model)) for model in sorted({r["model"] for r in rows})],
        "excluded": [
            {"id": model_type, "model_type": model_type, "reason": reason}
            for model_type, reason in sorted(state.matrix.excluded.items())
        ],
        "results": ran,
        "not_run": count_not_run([row for row in rows if row["outcome"] == "skip"]),
        "plan": plan_field(state.cells, state.unplanned, [row for row in rows if row["outcome"] == "skip"],
                           _selection(state.config)),
        "cells": [dict(cell_id=cell_id, **timings) for cell_id, timings in sorted(state.cell_timings.items())],
    }


def _selection(config: pytest.Config) -> list[str]:
    """The options that narrowed this run to a subset of the matrix, as typed (empty for a whole run)."""
    from kvconform.options import NARROWING

    chosen = [f"--model {model}" for model in config.getoption("kvconform_models")]
    chosen += [f"{option} {value}" for option, (field, _) in NARROWING.items()
               for value in config.getoption(f"kvconform_{field}")]
    chosen += [f"--shard {config.getoption('shard')}"] if config.getoption("shard") else []
    chosen += [f"{flag} {value!r}" for flag, name in (("-k", "keyword"), ("-m", "markexpr")) if (value := config.getoption(name))]
    return chosen


def _stopped(session: pytest.Session, exitstatus: int) -> str | None:
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        return "interrupted (Ctrl-C or pytest.exit)"
    if session.shouldfail or session.shouldstop:
        return f"stopped early ({session.shouldfail or session.shouldstop})"
    return None


def _has_report(state: KvconformState) -> bool:
    """Reports are written when conformance tests ran or were planned, and for an empty shard."""
    return bool(state.results or state.planned or state.empty_shard)


def _nothing_checked(state: KvconformState) -> str | None:
    """Why a run that planned conformance checks ran none of them (every one skipped), or ``None``."""
    if state.config.option.collectonly or not state.planned or state.empty_shard:
        return None  # nothing was to run
    if any(row["outcome"] != "skip" for row in state.results.values()):
        return None
    reasons = sorted({row.get("reason", "") for row in state.results.values()})
    shown = (f": {reasons[0]}" if reasons else "") + (
        f" (and {len(reasons) - 1} other reasons, listed in the report)" if len(reasons) > 1 else "")
    return (f"kvconform: error: no check ran, all {len(state.planned)} planned checks were skipped{shown}; "
            "a run that checks nothing is not a pass")


@pytest.hookimpl(tryfirst=True)  # under xdist, before xdist's own teardown: the workers exit while the reports are written
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    state = config.stash.get(STATE, None)
    if state is not None and state.is_worker:
        config.workeroutput[NOT_COLLECTED_KEY] = sorted(state.not_collected)  # type: ignore[attr-defined]
        config.workeroutput[MACHINE_KEY] = machine_facts(state)  # type: ignore[attr-defined]
    if state is None or state.is_worker:
        return
    nothing = _nothing_checked(state)
    if nothing and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        state.errors.append(nothing)
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED
    if config.getoption("no_reports") or not _has_report(state):
        return
    from kvconform.report import append_github_summary
    from kvconform.report_dir import describe_error
    from kvconform.run_status import incomplete_line

    out_dir = report_dir(config)
    with _workers_exiting(config):
        document = build_document(state, _stopped(session, exitstatus))
        _write(state, session, document, out_dir)
    try:
        append_github_summary(document)
    except OSError as exc:
        state.warnings.append(
            f"kvconform: warning: could not append to GITHUB_STEP_SUMMARY ({describe_error(exc)}); the run's result is unaffected")
    state.incomplete = incomplete_line(document)


@contextmanager
def _workers_exiting(config: pytest.Config) -> Iterator[None]:
    """Under xdist, the workers exit while the body runs: an idle worker waits for the controller's teardown, and its
    interpreter's exit (seconds, with torch and the models loaded) then overlaps the report writing; xdist's own
    teardown, later, finds no worker left to wait for."""
    nodemanager = getattr(config.pluginmanager.getplugin("dsession"), "nodemanager", None)
    if nodemanager is None:
        yield
        return
    teardown = threading.Thread(target=nodemanager.teardown_nodes, name="kvconform-worker-teardown")
    teardown.start()
    try:
        yield
    finally:
        teardown.join()


def _write(state: KvconformState, session: pytest.Session, document: dict[str, Any], out_dir: Path) -> None:
    """Write the reports; a folder that cannot take them gets a fallback file and fails the run."""
    from kvconform.report import document_json, write_reports
    from kvconform.report_dir import describe_error, write_fallback

    try:
        state.written = write_reports(document, out_dir)
    except OSError as exc:
        try:
            fallback = write_fallback(document_json(document))
            kept = f"the results are saved in {fallback} (render them: python tools/render_report.py {fallback} --out DIR)"
        except OSError as again:
            kept = f"and no fallback file could be written either ({describe_error(again)}): the results are lost"
        state.errors.append(f"kvconform: error: could not write the reports to {out_dir} ({describe_error(exc)}); {kept}")
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is None or state.is_worker or not (_has_report(state) or state.errors or state.warnings):
        return
    from kvconform.run_scope import includes_sweep

    write = terminalreporter.write_line
    terminalreporter.section("kvconform")
    if state.matrix.excluded and includes_sweep(config):
        if config.get_verbosity() < 0:
            write(f"{len(state.matrix.excluded)} architectures excluded (not testable here; listed in the report and by --list-models)")
        else:
            write(f"{len(state.matrix.excluded)} architectures excluded (not testable here):")
            for model_type, reason in sorted(state.matrix.excluded.items()):
                write(f"  {model_type}: {reason}")
    if state.matrix.unmatched:
        write("sweep exclude/xfail entries naming no model_type of this transformers release: " + state.matrix.unmatched_text())
    if state.not_collected:
        devices = sorted({cell.device for nodeid in state.not_collected if (cell := _nodeid_cell(state, nodeid))})
        write(f"kvconform: {len(state.not_collected)} checks left out: no {', '.join(devices)} device here "
              "(counted in the report's not_run)")
    if state.empty_shard:
        write(f"shard {config.getoption('shard')} holds no models of the matrix: nothing ran (the report says so)")
    if state.incomplete:
        write(f"kvconform: {state.incomplete}", yellow=True, bold=True)
    progress = state.progress.summary() if state.progress is not None else None
    if progress:
        write(f"kvconform: {progress}")
    if state.written and state.report_folder:
        what = "a --collect-only run (no check ran)" if config.option.collectonly else "not the default matrix"
        write(f"kvconform: {what}, so this run's reports are in {report_dir(config)} "
              "(reports/ itself keeps the full run's; --report-dir DIR chooses)", bold=True)
    for path in state.written:
        write(f"report: {path}")
    for line in state.warnings:
        write(line, yellow=True)
    for line in state.errors:
        write(line, red=True, bold=True)
