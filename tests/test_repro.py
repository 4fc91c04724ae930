"""tools/repro.py: every "model bug" of the matrix reproduces without kvconform; a healthy cell does not."""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from kvconform.build.architecture_table import load_architecture_table
from kvconform.build.model_types import causal_lm_model_types, model_attention
from kvconform.cells import Cell, expand_cells
from kvconform.matrix import Matrix, load_matrix
from kvconform.repro import REPRO_CHECKS, repro_script
from tests.conftest import probe_and_check, tiny
from tests.warm_python import ScriptRun, WarmPython

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "repro.py"


@cache
def _matrix() -> Matrix:
    return load_matrix(REPO / "model_matrix.yaml", known_model_types=causal_lm_model_types,
                       excluded_types=load_architecture_table()[1])


@cache
def _cpu_cells() -> dict[str, Cell]:
    """The default matrix's cpu cells by id."""
    return {cell.id: cell for cell in expand_cells(_matrix(), model_attention) if cell.device == "cpu"}


def _model_bugs() -> list[tuple[str, str]]:
    """(cell id, check) for one entry per distinct model-bug reason of the default matrix: the first cpu cell
    whose dtype, cache and attention carry the key's tags (float32 and the dynamic cache first)."""
    cells = list(_cpu_cells().values())
    cases = []
    for spec in _matrix().models:
        if spec.family != "causal-lm":  # tools/repro.py writes causal-LM scripts; families: tests/test_families.py
            continue
        by_reason: dict[str, list[str]] = {}
        for key, known in spec.xfail.items():
            if known.kind == "model bug":
                by_reason.setdefault(known.reason, []).append(key)
        for reason, keys in by_reason.items():
            # A reason's first key on a check tools/repro.py writes; a bug only other checks reach cites its own
            # standalone script in tools/repros/ (tests/test_repros.py runs every one).
            written = [key for key in keys if key.partition("@")[0] in ("*", *REPRO_CHECKS)]
            if not written:
                cited = re.findall(r"tools/repros/[\w.]+\.py", reason)
                assert cited and all((REPO / path).is_file() for path in cited), (spec.id, keys, "needs a repro script")
                continue
            key = written[0]
            check, _, qualifier = key.partition("@")
            tags = set(qualifier.split("-")) - {""}
            matching = [c for c in cells if c.spec.id == spec.id and tags <= {c.dtype, c.cache, c.attn}]
            cell = min(matching, key=lambda c: (c.dtype != "float32", c.cache != "dynamic", c.attn != c.model_attn))
            cases.append((cell.id, "parity" if check == "*" else check))
    return cases


def _run(warm_python: WarmPython, script: Path) -> ScriptRun:
    """Run a written script as ``python script`` would (tests/warm_python.py)."""
    assert not re.search(r"^\s*(from|import) kvconform", script.read_text(), re.M), "a repro must not import kvconform"
    return warm_python.run(script, script.parent, timeout=300)


def _write_and_run(warm_python: WarmPython, tmp_path: Path, cell_id: str, check: str) -> ScriptRun:
    """The script tools/repro.py writes for the cell (written in this process, as the tool writes it), run."""
    script = tmp_path / "repro.py"
    script.write_text(repro_script(_cpu_cells()[cell_id], check))
    return _run(warm_python, script)


def test_the_matrix_has_model_bugs_to_reproduce() -> None:
    assert len(_model_bugs()) >= 5


@pytest.mark.parametrize(("cell_id", "check"), _model_bugs())
def test_every_model_bug_reproduces_standalone(warm_python, tmp_path, cell_id, check) -> None:
    run = _write_and_run(warm_python, tmp_path, cell_id, check)
    assert run.returncode == 1, f"{cell_id} {check} did not reproduce:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"


def test_a_healthy_cell_does_not_reproduce_and_measures_what_the_suite_measures(warm_python, tmp_path) -> None:
    """Written by the tool itself, as a user runs it."""
    script = tmp_path / "repro.py"
    made = subprocess.run([sys.executable, str(TOOL), "llama[float32-cpu-dynamic]", "--check", "parity", "-o", str(script)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert script.read_text() == repro_script(_cpu_cells()["llama[float32-cpu-dynamic]"], "parity")
    run = _run(warm_python, script)
    assert run.returncode == 0, run.stdout + run.stderr
    worst = float(re.search(r"^worst (\S+) vs limit", run.stdout, re.M).group(1))
    suite = max(probe_and_check(tiny("llama"))["parity"].details["step_max_abs_delta"])
    assert worst == pytest.approx(suite, abs=1e-5)  # healthy: float32 rounding on both sides


def test_the_script_builds_the_same_model_as_the_suite(warm_python, tmp_path) -> None:
    """bamba's divergence, per step, is the suite's own measurement."""
    run = _write_and_run(warm_python, tmp_path, "bamba[float32-cpu-dynamic]", "parity")
    printed = [float(x) for x in re.findall(r"^step \d+ \(\w+\): max \|cached - uncached\| = (\S+)", run.stdout, re.M)]
    suite = probe_and_check(tiny("bamba"))["parity"].details["step_max_abs_delta"]
    assert printed == pytest.approx(suite, rel=5e-3, abs=1e-5)  # printed to 3 significant digits


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bamba[float32-cpu-dynamc]"], "unknown cell id 'bamba[float32-cpu-dynamc]'; did you mean: bamba[float32-cpu-dynamic]"),
        (["smollm2-135m[float32-cpu-dynamic]"], "repro scripts rebuild synthetic (random-weight) models"),
    ],
)
def test_cells_it_cannot_write_exit_2_with_one_line(args, message) -> None:
    run = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True)
    assert run.returncode == 2
    assert message in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
