"""kvconform.transformers_memo: a remembered fact is the computed one, and a changed file is read again."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvconform import transformers_memo
from kvconform.build.model_types import model_class
from kvconform.families.registry import _default_config_is_encoder_decoder


@pytest.fixture
def fresh_memo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("KVCONFORM_CACHE_DIR", str(tmp_path))
    transformers_memo._memo.cache_clear()
    yield tmp_path
    transformers_memo._memo.cache_clear()


def counting(value: object) -> tuple[list[int], object]:
    calls: list[int] = []

    def compute() -> object:
        calls.append(1)
        return value

    return calls, compute


def test_a_fact_is_computed_once_then_read_from_disk(fresh_memo: Path) -> None:
    calls, compute = counting(True)
    assert transformers_memo.remembered("t", "LlamaForCausalLM", compute) is True
    transformers_memo._memo.cache_clear()  # another process: reads the file
    assert transformers_memo.remembered("t", "LlamaForCausalLM", compute) is True
    assert calls == [1]
    assert list(fresh_memo.glob("memo/t-transformers-*.json"))


def test_a_changed_defining_file_is_read_again(fresh_memo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, compute_first = counting("sdpa")
    transformers_memo.remembered("t", "LlamaForCausalLM", compute_first)
    monkeypatch.setattr(transformers_memo, "_stamp", lambda path: [1, 2])
    second, compute_second = counting("eager")
    assert transformers_memo.remembered("t", "LlamaForCausalLM", compute_second) == "eager"
    assert first == second == [1]


def test_a_class_without_a_known_file_is_always_computed(fresh_memo: Path) -> None:
    calls, compute = counting(3)
    for _ in range(2):
        assert transformers_memo.remembered("t", "NoSuchClassAnywhere", compute) == 3
    assert calls == [1, 1]


@pytest.mark.parametrize("model_type", ["llama", "gpt_neo", "bloom"])
def test_the_remembered_flags_are_the_imported_ones(fresh_memo: Path, model_type: str) -> None:
    from kvconform.build.model_types import model_attention
    from kvconform.matrix import ModelSpec, Settings

    spec = ModelSpec(id=model_type, source="synthetic", location=model_type, settings=Settings())
    expected = "sdpa" if model_class(model_type)._supports_sdpa else "eager"
    assert [model_attention(spec) for _ in range(2)] == [expected, expected]


def test_the_remembered_encoder_decoder_flag_is_the_default_configs(fresh_memo: Path) -> None:
    from kvconform.families.registry import _is_encoder_decoder

    for model_type in ("bart", "llama", "whisper"):
        _is_encoder_decoder.cache_clear()
        assert _is_encoder_decoder(model_type) is _default_config_is_encoder_decoder(model_type)


def test_a_remembered_auto_mapping_is_the_imported_one(fresh_memo: Path) -> None:
    from transformers.models.auto import configuration_auto, modeling_auto

    for _ in range(2):
        transformers_memo._memo.cache_clear()
        assert transformers_memo.auto_mapping("modeling_auto", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES") == dict(
            modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
        assert transformers_memo.auto_mapping("configuration_auto", "CONFIG_MAPPING_NAMES") == dict(
            configuration_auto.CONFIG_MAPPING_NAMES)


#: Plans the default matrix as the xdist controller does, then names any of transformers or torch it imported.
PLAN_DEFAULT_MATRIX = """
import sys
from kvconform.build.architecture_table import load_architecture_table
from kvconform.build.model_types import causal_lm_model_types, model_attention
from kvconform.cells import plan_cells
from kvconform.families.registry import sweep_types
from kvconform.matrix import load_matrix
matrix = load_matrix(sys.argv[1], known_model_types=causal_lm_model_types, excluded_types=load_architecture_table()[1],
                     family_sweeps=sweep_types)
cells, _ = plan_cells(matrix, model_attention)
assert len(cells) > 900, len(cells)
print(sorted(name for name in ("torch", "transformers") if name in sys.modules))
"""


def test_planning_the_default_matrix_from_the_memo_imports_neither_transformers_nor_torch(fresh_memo: Path) -> None:
    """The xdist controller plans before its workers start: from a written memo it must not pay torch's import."""
    matrix = Path(__file__).resolve().parents[1] / "model_matrix.yaml"
    runs = [subprocess.run([sys.executable, "-c", PLAN_DEFAULT_MATRIX, str(matrix)], capture_output=True, text=True,
                           check=True, timeout=300).stdout.split("\n")[-2] for _ in range(2)]
    assert runs == ["['torch', 'transformers']", "[]"], runs  # the first run writes the memo, the second reads it
