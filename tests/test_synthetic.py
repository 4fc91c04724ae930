"""Self-tests of the synthetic model builder and its architecture table."""

from __future__ import annotations

import pytest
import torch

from kvconform.build.architecture_table import load_architecture_table
from kvconform.build.model_types import causal_lm_model_types
from kvconform.build.synthetic import build_synthetic, shrink_config


def test_model_types_are_sorted_and_cover_common_architectures() -> None:
    types = causal_lm_model_types()
    assert types == sorted(types)
    assert {"llama", "gpt2", "gemma2", "mamba"} <= set(types)


def test_shrink_keeps_gqa() -> None:
    config = shrink_config("llama")
    assert (config.hidden_size, config.num_hidden_layers) == (64, 2)
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (4, 2, 16)
    assert config.vocab_size == 256


def test_shrink_keeps_mqa() -> None:
    assert shrink_config("gpt_bigcode").multi_query is True


@pytest.mark.parametrize("model_type", ["gemma2", "gemma3_text", "cohere2"])
def test_shrink_keeps_both_kinds_of_a_sliding_hybrid(model_type: str) -> None:
    config = shrink_config(model_type)
    assert set(config.layer_types) == {"sliding_attention", "full_attention"}
    assert config.num_hidden_layers == len(config.layer_types)
    assert config.sliding_window == 4


def test_shrink_remaps_layer_index_lists() -> None:
    config = shrink_config("llama4_text")
    assert config.num_hidden_layers == len(config.layer_types) == 2
    assert all(0 <= index < 2 for index in config.moe_layers)


def test_shrink_applies_table_overrides() -> None:
    overrides, _ = load_architecture_table()
    assert overrides["nemotron"] == {"num_key_value_heads": 2}
    assert shrink_config("nemotron").num_key_value_heads == 2
    assert shrink_config("bert").is_decoder is True


def test_shrink_applies_caller_overrides_last() -> None:
    config = shrink_config("llama", {"num_hidden_layers": 3, "rms_norm_eps": 1e-5})
    assert (config.num_hidden_layers, config.rms_norm_eps) == (3, 1e-5)


def test_shrink_accepts_dotted_sub_config_keys() -> None:
    config = shrink_config("gemma3", {"text_config.hidden_size": 128})
    assert config.text_config.hidden_size == 128


def test_excluded_entries_name_real_types_with_reasons() -> None:
    overrides, excluded = load_architecture_table()
    known = set(causal_lm_model_types())
    assert excluded
    for reason in excluded.values():
        assert isinstance(reason, str) and reason.strip()
    # The table serves a range of transformers releases: a few names may belong to other releases only.
    named = set(overrides) | set(excluded)
    assert len(named & known) >= 0.9 * len(named), sorted(named - known)


def test_unknown_model_type_lists_close_matches() -> None:
    with pytest.raises(ValueError, match="llama") as info:
        shrink_config("lama")
    assert "close matches" in str(info.value)


def test_build_is_deterministic_for_a_seed() -> None:
    config = shrink_config("llama")
    first, second = build_synthetic(config, seed=3), build_synthetic(config, seed=3)
    other = build_synthetic(config, seed=4)
    assert not first.training and first.dtype == torch.float32
    first_state, second_state = first.state_dict(), second.state_dict()
    assert first_state.keys() == second_state.keys()
    assert all(torch.equal(first_state[k], second_state[k]) for k in first_state)
    assert not torch.equal(first_state["lm_head.weight"], other.state_dict()["lm_head.weight"])


def test_build_from_sub_config() -> None:
    model = build_synthetic(shrink_config("musicgen"), seed=0)
    assert type(model).__name__ == "MusicgenForCausalLM"


def test_a_composite_config_that_requires_its_sub_configs_gets_the_declared_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """Up to 5.9 MusicgenConfig() raises TypeError without text_encoder/audio_encoder/decoder; the shrink then passes
    the defaults later releases declare (architectures.yaml default_sub_configs)."""
    from transformers import AutoConfig

    from kvconform.build import synthetic

    real = AutoConfig.for_model

    def old_release(model_type: str, **kwargs: object) -> object:
        if model_type in ("musicgen", "llama") and not kwargs:
            raise TypeError(f"{model_type}: __init__() missing 3 required positional arguments")
        return real(model_type, **kwargs)

    monkeypatch.setattr(synthetic.AutoConfig, "for_model", staticmethod(old_release))
    config = synthetic.default_config("musicgen", {})
    assert (config.text_encoder.model_type, config.audio_encoder.model_type) == ("t5", "encodec")
    assert type(config.decoder).__name__ == "MusicgenDecoderConfig"
    with pytest.raises(TypeError, match="llama"):  # a type the table names no defaults for keeps its error
        synthetic.default_config("llama", {})


def test_a_declared_sub_config_replaces_a_broken_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """5.0-5.3's Pix2StructConfig and 5.8-5.19's Granite4VisionConfig build a broken default of a sub-config without
    raising; a declared default is given as a checkpoint gives it, whether or not the bare default builds."""
    from kvconform.build import synthetic

    monkeypatch.setattr(synthetic, "default_sub_configs", lambda: {"llava": {"text_config": {"model_type": "mistral"}}})
    assert synthetic.default_config("llava", {}).text_config.model_type == "mistral"  # the bare default is llama's


def test_a_causal_class_of_the_text_config_is_built_from_it_as_from_pretrained_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before 5.8 AutoModelForCausalLM.from_config hands Emu3ForCausalLM the composite Emu3Config (AttributeError on
    pad_token_id); from_pretrained swaps in the text config in every release, and the build does the same."""
    from kvconform.build import synthetic

    def without_the_swap(config: object, **kwargs: object) -> object:
        raise AttributeError(f"'{type(config).__name__}' object has no attribute 'pad_token_id'")

    monkeypatch.setattr(synthetic.AutoModelForCausalLM, "from_config", without_the_swap)
    model = build_synthetic(shrink_config("emu3"), seed=0)
    assert (type(model).__name__, type(model.config).__name__) == ("Emu3ForCausalLM", "Emu3TextConfig")


def test_sub_config_dicts_leave_out_generic_defaults_as_a_saved_config_does() -> None:
    """5.0-5.19's DbrxFFNConfig raises "Found unknown kwargs" for the generic fields its own to_dict writes."""
    from kvconform.build import synthetic

    default = synthetic.default_config("dbrx", {})
    values = synthetic.shrink_values(default.to_dict())
    assert "return_dict" in values["ffn_config"]
    kept = synthetic._sub_configs_as_saved(default, values)["ffn_config"]
    assert not {"return_dict", "id2label", "output_hidden_states"} & set(kept)
    assert kept["ffn_hidden_size"] == values["ffn_config"]["ffn_hidden_size"] != 3584  # the shrink's size, not the default
    assert shrink_config("dbrx").ffn_config.ffn_hidden_size == kept["ffn_hidden_size"]
