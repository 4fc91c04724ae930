#!/usr/bin/env python
"""Benchmark kvconform's own cost: harness overhead per cell, scaling in N, loads, whole-matrix runs.

    python tools/bench.py                  # overhead + scaling + loads (a few minutes on 2 cores)
    python tools/bench.py --matrix-runs    # also the default matrix with -n auto and -n 0 (long)
    python tools/bench.py --gemma          # also Gemma 3 270M: its cold dequantization, warm load and cells
    python tools/bench.py --history llama  # also one model's history over every 5.x minor (environments cached)

The last line is ``overhead=<ratio> scaling=<ratio>``: the suite's time for the real SmolLM2 float32
cell over the time of the forward passes its checks need, and the per-step probe time at N=128 over
N=8 (SmolLM2, float32; the naive one-uncached-pass-per-step reference is timed beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from tabulate import tabulate  # noqa: E402

from kvconform.build.architecture_table import load_architecture_table  # noqa: E402
from kvconform.build.model_types import causal_lm_model_types  # noqa: E402
from kvconform.build.models import load_master  # noqa: E402
from kvconform.cache_root import CACHE_DIR_ENV  # noqa: E402
from kvconform.cells import Cell  # noqa: E402
from kvconform.checks import record_checks as checks  # noqa: E402
from kvconform.environment import cpu_description  # noqa: E402
from kvconform.matrix import load_matrix  # noqa: E402
from kvconform.probe.decode import ProbePlan, run_probe  # noqa: E402
from kvconform.runner import CellRunner  # noqa: E402


class ForwardTimer:
    """Time spent in a model's top-level forward calls and in its generate() calls."""

    def __init__(self) -> None:
        self.forward_s = 0.0
        self.generate_s = 0.0
        self._inside_generate = 0
        self._started: list[float] = []

    def attach(self, model: Any) -> None:
        model.register_forward_pre_hook(lambda *_: self._started.append(time.perf_counter()))
        model.register_forward_hook(self._stop)
        generate = model.generate

        def timed_generate(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            self._inside_generate += 1
            try:
                return generate(*args, **kwargs)
            finally:
                self._inside_generate -= 1
                self.generate_s += time.perf_counter() - start

        model.generate = timed_generate

    def _stop(self, *_: Any) -> None:
        elapsed = time.perf_counter() - self._started.pop()
        if not self._inside_generate:
            self.forward_s += elapsed

    @property
    def needed_s(self) -> float:
        return self.forward_s + self.generate_s


def default_matrix() -> Any:
    return load_matrix(ROOT / "model_matrix.yaml", known_model_types=causal_lm_model_types,
                       excluded_types=load_architecture_table()[1])


def cell_overhead(cell: Cell, repeats: int) -> dict[str, Any]:
    """Suite time for one cell (probe + every check, load excluded) against the forward time it needs."""
    runner = CellRunner()
    runner.outcome(cell)  # load and warm up once; not timed
    best: dict[str, Any] | None = None
    for _ in range(repeats):
        timer = ForwardTimer()
        runner.on_model = timer.attach
        runner.outcomes.clear()
        start = time.perf_counter()
        outcome = runner.outcome(cell)
        if outcome.record is None or outcome.geometry is None:
            raise RuntimeError(f"{cell.id}: {outcome.error or outcome.not_applicable}")
        checks.run_all(outcome.record, outcome.geometry, outcome.explanation, cell.tolerance)
        suite_s = time.perf_counter() - start
        row = {"cell": cell.id, "suite_s": suite_s, "needed_s": timer.needed_s,
               "overhead_ms": 1000 * (suite_s - timer.needed_s), "ratio": suite_s / timer.needed_s}
        best = row if best is None or row["suite_s"] < best["suite_s"] else best
    assert best is not None
    best["loads"] = runner.loads
    return best


def scaling(model: torch.nn.Module, steps: tuple[int, ...]) -> list[dict[str, Any]]:
    """Probe time per decode step (one uncached reference) against a naive per-step reference."""
    rows = []
    for n in steps:
        plan = ProbePlan(batch_size=2, prompt_length=6, decode_steps=n, seed=0, generate=False)
        run_probe(model, plan)
        start = time.perf_counter()
        run_probe(model, plan)
        probe_s = time.perf_counter() - start
        naive_s = naive_reference_s(model, plan)
        rows.append({"N": n, "probe_s": probe_s, "per_step_ms": 1000 * probe_s / n,
                     "naive_reference_s": naive_s, "naive_per_step_ms": 1000 * (probe_s + naive_s) / n})
    return rows


@torch.inference_mode()
def naive_reference_s(model: Any, plan: ProbePlan) -> float:
    """What one uncached pass per decode step would cost (the O(N²) design the suite avoids)."""
    tokens = torch.randint(3, 200, (plan.batch_size, plan.prompt_length + plan.decode_steps), device=model.device)
    start = time.perf_counter()
    for end in range(plan.prompt_length, tokens.shape[1] + 1):
        model(input_ids=tokens[:, :end], use_cache=False)
    return time.perf_counter() - start


#: Runs a command and prints the largest peak RSS among its processes (its own rusage accounting).
_PEAK_WRAPPER = (
    "import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
    "print('peak_rss_kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(done.returncode)"
)


def matrix_run(workers: str, report_dir: Path) -> dict[str, Any]:
    """Wall time and the largest process's peak RSS for the default matrix (pytest suites -n WORKERS)."""
    command = [sys.executable, "-c", _PEAK_WRAPPER, sys.executable, "-m", "pytest", "suites", "-q", "-n", workers,
               "--report-dir", str(report_dir)]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    lines = done.stdout.strip().splitlines()
    peak_kib = int(lines[-1].split()[-1]) if lines and lines[-1].startswith("peak_rss_kib") else 0
    summary = lines[-2] if len(lines) > 1 else done.stderr[-200:]
    return {"workers": workers, "wall_s": wall, "largest_process_peak_rss_mib": peak_kib / 1024, "result": summary}


#: Loads the default matrix's Gemma 3 270M (joining its parts and dequantizing where the cache has no copy).
_LOAD_GEMMA = (
    "import sys; sys.path.insert(0, sys.argv[1]); from tools.bench import default_matrix; "
    "from kvconform.build.models import load_master; "
    "load_master(next(m for m in default_matrix().models if m.id == 'gemma3-270m'))"
)

#: The Gemma cells timed: the short entry in the two dtypes users run, and the entries that cross its real window.
GEMMA_CELLS = (("gemma3-270m", "float32"), ("gemma3-270m", "bfloat16"), ("gemma3-270m-window", "bfloat16"),
               ("gemma3-270m-long", "float32"))


def gemma_costs(matrix: Any) -> dict[str, Any]:
    """Gemma 3 270M: the first dequantization on a machine (into an empty cache folder: wall time and peak RSS), a
    warm load from the cache, and each timed cell's suite time (probe + checks, dynamic cache, one repeat)."""
    with tempfile.TemporaryDirectory() as empty:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", _PEAK_WRAPPER, sys.executable, "-c", _LOAD_GEMMA, str(ROOT)], cwd=ROOT,
                              capture_output=True, text=True, env={**os.environ, CACHE_DIR_ENV: empty})
        cold_s = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"loading gemma3-270m into an empty cache failed: {done.stderr[-2000:]}")
    peak_kib = int(done.stdout.strip().splitlines()[-1].split()[-1])
    specs = {m.id: m for m in matrix.models}
    start = time.perf_counter()
    load_master(specs["gemma3-270m"])
    warm_s = time.perf_counter() - start
    cells = [cell_overhead(Cell(specs[name], dtype, "cpu", "dynamic"), 1) for name, dtype in GEMMA_CELLS]
    return {"cold_dequantize_s": cold_s, "cold_peak_rss_mib": peak_kib / 1024, "warm_load_s": warm_s,
            "cells": [{"cell": c["cell"], "suite_s": c["suite_s"], "ratio": c["ratio"]} for c in cells]}


def history_cost(model: str, releases: str) -> dict[str, Any]:
    """One model's history over ``releases`` (``tools/history.py run``): wall time, each release's run and environment
    seconds as the history records them, and its totals (harness errors included)."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, str(ROOT / "tools" / "history.py"), "run", "--releases", releases, "--model", model,
                   "--out", out, "--", "-n", "2"]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - start
        path = Path(out) / "history.json"
        if not path.exists():
            raise RuntimeError(f"the history of {model} wrote no history.json: {done.stderr[-2000:]}")
        history = json.loads(path.read_text())
    per_release = [{"release": r["release"], "run_s": r["seconds"], "env_s": r["env_seconds"], "status": r["status"]}
                   for r in history["releases"]]
    return {"model": model, "releases": len(per_release), "wall_s": wall, "per_release": per_release,
            "totals": history["totals"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="Timed repeats per cell (best is kept)")
    parser.add_argument("--matrix-runs", action="store_true", help="Also time the default matrix with -n auto and -n 0")
    parser.add_argument("--gemma", action="store_true", help="Also time Gemma 3 270M: cold dequantization, warm load, cells")
    parser.add_argument("--history", metavar="MODEL", help="Also time MODEL's history over every 5.x minor release")
    parser.add_argument("--history-releases", default="all-minor", help="The releases of --history (default all-minor)")
    parser.add_argument("--json", type=Path, help="Also write the figures to this JSON file")
    args = parser.parse_args()

    print(f"CPU: {cpu_description()}; load average {os.getloadavg()[0]:.1f}")
    matrix = default_matrix()
    smollm2 = next(m for m in matrix.models if m.id == "smollm2-135m")
    tiny = next(m for m in matrix.models if m.id == "llama")
    figures: dict[str, Any] = {}
    figures["overhead"] = [
        cell_overhead(Cell(smollm2, "float32", "cpu", "dynamic"), args.repeats),
        *(cell_overhead(Cell(tiny, dtype, "cpu", "dynamic"), args.repeats) for dtype in ("float32", "bfloat16")),
    ]
    print(tabulate([{k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in row.items()} for row in figures["overhead"]],
                   headers="keys", tablefmt="github"))
    figures["scaling"] = scaling(load_master(smollm2), (8, 32, 128))
    print()
    print(tabulate([{k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in row.items()} for row in figures["scaling"]],
                   headers="keys", tablefmt="github"))
    if args.gemma:
        figures["gemma"] = gemma_costs(matrix)
        print()
        print(tabulate([{k: v for k, v in figures["gemma"].items() if k != "cells"}], headers="keys", tablefmt="github", floatfmt=".1f"))
        print(tabulate(figures["gemma"]["cells"], headers="keys", tablefmt="github", floatfmt=".2f"))
    if args.matrix_runs:
        figures["matrix"] = [matrix_run(w, Path(f"/tmp/kvconform-bench-{w}")) for w in ("auto", "0")]
        print()
        print(tabulate(figures["matrix"], headers="keys", tablefmt="github", floatfmt=".1f"))
    if args.history:
        figures["history"] = history_cost(args.history, args.history_releases)
        runs = [row["run_s"] for row in figures["history"]["per_release"]]
        print()
        print(tabulate(figures["history"]["per_release"], headers="keys", tablefmt="github", floatfmt=".1f"))
        print(f"history of {args.history}: {len(runs)} releases in {figures['history']['wall_s']:.0f} s wall "
              f"({min(runs):.1f}-{max(runs):.1f} s a release); {figures['history']['totals']}")
    figures["cpu"] = cpu_description()
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    ratio = figures["overhead"][0]["ratio"]
    per_step = {row["N"]: row["per_step_ms"] for row in figures["scaling"]}
    print(f"overhead={ratio:.3f} scaling={per_step[128] / per_step[8]:.3f}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
