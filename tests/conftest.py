"""Shared helpers for the self-tests: tiny seeded models, a one-call probe-and-check, inner pytest runs."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch
from _pytest import pytester as pytester_module

from kvconform.build.geometry import cache_geometry, explain
from kvconform.build.models import cache_dir, model_in_dtype
from kvconform.build.synthetic import build_synthetic, shrink_config
from kvconform.checks import record_checks as checks
from kvconform.known_failures import KnownFailure, known_failure
from kvconform.matrix import Tolerance
from kvconform.probe.decode import ProbePlan, run_probe
from kvconform.results import CheckResult
from tests.inner import Inner, KeepingTransformers, SharedRuns
from tests.warm_python import WarmPython

# Under xdist, the processes a self-test starts (inner pytest runs, repros, other CPU kernels) use this worker's share
# of the cores, as the worker itself does (plugin._share_cores): two workers each starting a 2-thread process on 2 cores
# made test_portable_verdicts 2 to 6 times slower than alone.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT", "").isdigit():
    os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))

#: The default matrix's tolerances (kept equal to model_matrix.yaml by test_matrix).
TOLERANCES = {
    "float32": Tolerance(atol=1e-5, rtol=3e-5),
    "float16": Tolerance(atol=1e-3, rtol=2e-2),
    "bfloat16": Tolerance(atol=1e-2, rtol=1e-1),
}


@cache
def _default_xfails() -> dict[str, Mapping[str, KnownFailure]]:
    """The default matrix's known failures by model id, as they apply to the installed transformers release."""
    from kvconform.build.architecture_table import load_architecture_table
    from kvconform.build.model_types import causal_lm_model_types
    from kvconform.matrix import load_matrix

    matrix = load_matrix(Path(__file__).resolve().parents[1] / "model_matrix.yaml", known_model_types=causal_lm_model_types,
                         excluded_types=load_architecture_table()[1])
    return {spec.id: spec.xfail for spec in matrix.models}


def labelled(model_id: str, result: CheckResult, dtype: str = "float32", cache: str = "dynamic",
             attn: str = "sdpa") -> KnownFailure | None:
    """The default matrix's strict known failure that ``result`` (failed) is on the installed release for that cell of
    ``model_id`` (its label applies there and its ``expect`` is in the message), or ``None``. A self-test on a healthy
    model leaves out only such failures: a release's labelled model bug (5.25's crop of linear-attention caches) is
    not the harness's, while any other failure, or a labelled check failing otherwise, still fails the test."""
    if result.passed:
        return None
    entry = known_failure(_default_xfails().get(model_id, {}), result.name, dtype, cache, attn)
    return entry if entry is not None and entry.matches(result.message) else None


def tiny(model_type: str, **overrides: Any) -> torch.nn.Module:
    """A shrunk random-weight model of ``model_type`` (float32)."""
    return build_synthetic(shrink_config(model_type, overrides), seed=0).eval()


def probe_and_check(
    model: torch.nn.Module, *, dtype: str = "float32", cache: str = "dynamic", prompt_length: int = 6,
    decode_steps: int = 8, batch_size: int = 2, paths: bool = False,
) -> dict[str, CheckResult]:
    """Probe ``model`` in ``dtype`` and run every check, as the suite does for one cell."""
    plan = ProbePlan(
        batch_size=batch_size, prompt_length=prompt_length, decode_steps=decode_steps, seed=0, cache=cache,
        locate_tolerance=TOLERANCES[dtype], ragged=paths, prefix_reuse=paths,
    )
    record = run_probe(model_in_dtype(model, dtype, "cpu"), plan)
    return checks.run_all(record, cache_geometry(model.config), explain(model.config), TOLERANCES[dtype])


@pytest.fixture(scope="session")
def llama() -> torch.nn.Module:
    """GQA: 4 query heads, 2 KV heads."""
    return tiny("llama")


@pytest.fixture(scope="session")
def mistral() -> torch.nn.Module:
    """Every layer slides with a window of 4, so a 6-token prompt already crosses it."""
    return tiny("mistral", sliding_window=4)


@pytest.fixture(scope="session")
def warm_python() -> Iterator[WarmPython]:
    """Standalone scripts run as ``python SCRIPT`` would, without paying torch's and transformers' imports each time."""
    server = WarmPython()
    yield server
    server.close()


@pytest.fixture(scope="session")
def outer_cache_dir() -> Path:
    """kvconform's cache folder as the outer run sees it: session-scoped, so it is read before the function-scoped
    ``pytester`` points HOME at a temporary folder."""
    return cache_dir()


@pytest.fixture
def keeping_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    """pytester's ``sys.modules`` snapshots keep transformers' modules (tests/inner.py says why)."""
    monkeypatch.setattr(pytester_module, "SysModulesSnapshot", KeepingTransformers)


@pytest.fixture
def pytester(keeping_transformers: None, pytester: pytest.Pytester) -> pytest.Pytester:
    """pytest's own, made after ``keeping_transformers``: its snapshot and each in-process run's keep transformers."""
    return pytester


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, outer_cache_dir: Path) -> Inner:
    """Inner pytest runs of the suite under this test's pytester folder (tests/inner.py)."""
    return Inner(pytester, monkeypatch, outer_cache_dir)


@pytest.fixture(scope="module")
def shared_runs() -> SharedRuns:
    """Inner runs several tests of this module read, each made once (tests/inner.py)."""
    return SharedRuns()


def save_llama(folder: Path, **config: Any) -> torch.nn.Module:
    """tests.conftest.tiny("llama") as a safetensors checkpoint folder (config overrides go into config.json)."""
    model = tiny("llama")
    model.save_pretrained(folder, safe_serialization=True)
    if config:
        data = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(data | config, indent=2))
    return model


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ckpt") / "tiny-llama"
    save_llama(folder)
    return folder
