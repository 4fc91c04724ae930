"""The one generate() and beam paths on family cells: each family's adapter gives them its prompt (an image, an
encoder input), the runner runs them as for causal LMs, and the same checks judge them."""

from __future__ import annotations

import pytest

from kvconform.cells import Cell
from kvconform.checks import record_checks as checks
from kvconform.families import AUDIO_LANGUAGE, SEQ2SEQ, SPEECH_SEQ2SEQ, VISION_LANGUAGE
from kvconform.matrix import ModelSpec, Settings
from kvconform.results import CheckResult
from kvconform.runner import CellRunner
from tests.conftest import TOLERANCES
from tests.family_faults import planted as planted_family_fault
from tests.faults import planted

MODELS = {"llava": VISION_LANGUAGE, "qwen2_vl": VISION_LANGUAGE, "t5": SEQ2SEQ, "whisper": SPEECH_SEQ2SEQ,
          "qwen2_audio": AUDIO_LANGUAGE}
GENERATE_PATHS = ("generate", "beam")


def _cell(model_type: str) -> Cell:
    settings = Settings(dtypes=("float32",), devices=("cpu",), tolerances=TOLERANCES, generate=True, beam=True)
    family = MODELS[model_type]
    return Cell(ModelSpec(id=f"{model_type}-family", source="synthetic", location=model_type, settings=settings, family=family),
                "float32", "cpu", "dynamic", "sdpa")


def _results(runner: CellRunner, model_type: str) -> dict[str, CheckResult]:
    """Probe the family cell afresh (faults are planted around this call): the core checks and the generate paths."""
    cell = _cell(model_type)
    runner.outcomes.pop(cell.id, None)
    outcome = runner.outcome(cell)
    assert outcome.error is None, outcome.error
    record = outcome.record
    return {name: checks.run_check(name, record, outcome.geometry, outcome.explanation, cell.tolerance)
            for name in ("parity", "growth", "shapes", "bytes", *GENERATE_PATHS)}


@pytest.fixture(scope="module")
def runner() -> CellRunner:
    return CellRunner()


@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_generate_and_beam_run_on_every_family_and_pass_healthy(runner, model_type):
    results = _results(runner, model_type)
    failed = {name: result.message for name, result in results.items() if not result.passed}
    assert not failed, failed
    assert results["generate"].measured == "8/8 equal", results["generate"].message
    assert "num_beams=3, 6 returned beams: the same beams" in results["beam"].message, results["beam"].message


@pytest.mark.parametrize("model_type", ["llava", "t5"])
def test_beam_search_that_never_reorders_the_cache_is_caught_on_a_family_cell(runner, model_type):
    """The causal path's fault, on a vision-language and an encoder-decoder cell (its self-attention half): only beam
    search reorders, so only the beam check fails: its beams part (llava), or the same beams come back with other
    scores (t5)."""
    with planted("beam_not_reordered"):
        results = _results(runner, model_type)
    assert {name for name, result in results.items() if not result.passed} == {"beam"}, results["beam"].message
    expected = {"llava": "suspect the cache reorder between steps", "t5": "same tokens, but beam scores differ by"}
    assert expected[model_type] in results["beam"].message, results["beam"].message


def test_a_cached_generate_that_loses_the_image_is_caught():
    """The generate() path's own fault: LLaVA's cached generate() prefills without the pixel values. The hand-driven
    decode keeps the image (parity, growth, shapes and bytes pass); generate() with and without the cache part, and so
    do the beams."""
    with planted_family_fault("cached_generate_drops_the_image"):
        results = _results(CellRunner(), "llava")
    assert {name for name, result in results.items() if not result.passed} == {"generate", "beam"}, results
    assert results["generate"].message.startswith("greedy tokens part at generated token 0"), results["generate"].message
