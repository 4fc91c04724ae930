"""kvconform.transformers_memo: a remembered fact is the computed one, and a changed file is read again."""

from __future__ import annotations

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
    monkeypatch.setattr(transformers_memo, "_file_stamp", lambda name: [1, 2])
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
