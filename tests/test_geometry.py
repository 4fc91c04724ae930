"""Expected cache geometry comes from config evidence: GQA, MQA, MLA, sliding, linear, shared layers."""

from __future__ import annotations

from transformers import AutoConfig

from kvconform.build.geometry import FULL, NO_KV, SLIDING, cache_geometry, explain


def test_gqa_uses_kv_heads_not_query_heads():
    config = AutoConfig.for_model("llama", num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, head_dim=16)
    geometry = cache_geometry(config)
    assert [layer.kv_heads for layer in geometry.layers] == [2, 2]
    assert geometry.query_heads == 8
    assert geometry.layers[0].expected_shapes(3, 10, None) == ((3, 2, 10, 16), (3, 2, 10, 16))


def test_mha_without_kv_field_and_head_dim_from_hidden_size():
    config = AutoConfig.for_model("gpt2", n_layer=2, n_head=4, n_embd=64)
    layer = cache_geometry(config).layers[0]
    assert (layer.kv_heads, layer.k_head_dim) == (4, 16)
    assert "hidden_size / num_attention_heads" in explain(config)


def test_mla_before_the_latent_cache_stores_k_and_v_per_query_head(monkeypatch):
    """5.0-5.14's MLA attention (no ``expand_kv``) caches K = nope + rope and V per query head, not the latent."""
    import kvconform.build.geometry as geometry

    config = AutoConfig.for_model("deepseek_v3", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=12)
    assert cache_geometry(config).layers[0].expected_shapes(2, 5, None) == ((2, 1, 5, 32), (2, 1, 5, 8))
    monkeypatch.setattr(geometry, "mla_caches_latents", lambda model_type: False)
    assert cache_geometry(config).layers[0].expected_shapes(2, 5, None) == ((2, 4, 5, 24), (2, 4, 5, 12))
    assert "expanded per query head" in explain(config)


def test_the_latent_design_is_read_from_the_releases_attention_class():
    from kvconform.compat import mla_caches_latents

    assert mla_caches_latents("deepseek_v3") and mla_caches_latents("glm4_moe_lite")  # 5.24: expand_kv
    assert mla_caches_latents("no_such_model_type")  # no modeling module: the newest design


def test_mqa_flags_give_one_kv_head():
    falcon = AutoConfig.for_model("falcon", num_hidden_layers=2, num_attention_heads=4, hidden_size=64, multi_query=True,
                                  new_decoder_architecture=False)
    assert cache_geometry(falcon).layers[0].kv_heads == 1
    bigcode = AutoConfig.for_model("gpt_bigcode", n_layer=2, n_head=4, n_embd=64, multi_query=True)
    assert cache_geometry(bigcode).layers[0].kv_heads == 1


def test_mla_caches_one_latent_head_of_rank_width_and_a_rotary_key():
    config = AutoConfig.for_model("deepseek_v3", num_hidden_layers=2, kv_lora_rank=32, qk_rope_head_dim=8,
                                  num_attention_heads=4, num_key_value_heads=4)
    layer = cache_geometry(config).layers[0]
    assert (layer.kv_heads, layer.k_head_dim, layer.v_head_dim) == (1, 32, 8)
    assert layer.expected_shapes(batch=2, seen=5, max_cache_len=None) == ((2, 1, 5, 32), (2, 1, 5, 8))


def test_mla_nope_layer_caches_an_empty_rotary_slot_rope_layers_do_not():
    """mistral_large4's NoPE layers project no rotary key (qk_rope_head_dim 0, modeling_mistral_large4.py:348) and
    cache that empty slot (:442); no_rope_layers says which layers they are. A non-MLA layer's shape does not change."""
    config = AutoConfig.for_model("mistral_large4_text", num_hidden_layers=3, kv_lora_rank=24, qk_rope_head_dim=16,
                                  num_attention_heads=4, num_key_value_heads=4, no_rope_layers=[1, 0, 1])
    layers = cache_geometry(config).layers
    assert [(layer.k_head_dim, layer.v_head_dim) for layer in layers] == [(24, 16), (24, 0), (24, 16)]
    assert "no_rope_layers[1]=0" in layers[1].reason and "no_rope" not in layers[0].reason
    assert layers[1].expected_shapes(batch=2, seen=5, max_cache_len=None) == ((2, 1, 5, 24), (2, 1, 5, 0))
    smollm3 = AutoConfig.for_model("smollm3", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   head_dim=16, no_rope_layers=[1, 0])
    assert [(layer.k_head_dim, layer.v_head_dim) for layer in cache_geometry(smollm3).layers] == [(16, 16), (16, 16)]


def test_sliding_layers_keep_window_minus_one_and_static_keeps_window():
    config = AutoConfig.for_model("gemma2", num_hidden_layers=2, sliding_window=4, head_dim=16,
                                  num_attention_heads=4, num_key_value_heads=2)
    sliding, full = cache_geometry(config).layers
    assert (sliding.kind, full.kind) == (SLIDING, FULL)
    assert [sliding.stored_length(n, None) for n in (2, 3, 4, 9)] == [2, 3, 3, 3]
    assert full.stored_length(9, None) == 9
    assert (sliding.stored_length(9, 14), full.stored_length(9, 14)) == (4, 14)


def test_linear_attention_layers_keep_no_kv_and_count_zero_bytes():
    config = AutoConfig.for_model("qwen3_next", num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    geometry = cache_geometry(config)
    assert [layer.kind for layer in geometry.layers] == [NO_KV, FULL]
    assert "linear_attention" in geometry.layers[0].reason
    assert geometry.expected_bytes(batch=1, seen=5, max_cache_len=None, bytes_per_value=2) == 2 * 2 * 16 * 5 * 2


def test_bytes_formula_matches_the_seeds_worked_example():
    config = AutoConfig.for_model("llama", num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, head_dim=128)
    assert cache_geometry(config).expected_bytes(batch=1, seen=1024, max_cache_len=None, bytes_per_value=2) == 134_217_728


def test_full_attention_layers_read_their_own_head_width_and_kv_heads():
    # gemma4 states the full-attention layers' head width and (with attention_k_eq_v) KV heads as config fields up
    # to 5.14 and as per_layer_config overrides from 5.15: both read the same.
    config = AutoConfig.for_model("gemma4_text", num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"],
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
                                  attention_k_eq_v=True, num_global_key_value_heads=1, sliding_window=4)
    sliding, full = cache_geometry(config).layers
    assert (sliding.kv_heads, sliding.k_head_dim, sliding.v_head_dim) == (2, 16, 16)
    assert (full.kv_heads, full.k_head_dim, full.v_head_dim) == (1, 32, 32)


def test_attention_head_dim_is_the_head_width_where_no_head_dim_aliases_it():
    # Zamba states its head width as attention_head_dim (2 * hidden_size // num_attention_heads by default); releases
    # before 5.5 have no head_dim alias for it, where hidden_size / num_attention_heads is half the width it caches.
    from types import SimpleNamespace

    from kvconform.build.geometry import head_dims

    config = SimpleNamespace(hidden_size=64, num_attention_heads=4, attention_head_dim=32)
    assert head_dims(config) == (32, 32, "attention_head_dim")
    assert head_dims(SimpleNamespace(hidden_size=64, num_attention_heads=4, head_dim=16, attention_head_dim=32))[:2] == (16, 16)
