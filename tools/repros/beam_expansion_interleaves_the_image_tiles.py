"""Beam search with an image of several tiles or patches gives each beam of one prompt a different part of the image.

transformers 5.0-5.17: generate() expands its inputs for beam search with ``repeat_interleave(num_beams, dim=0)`` on
every tensor (GenerationMixin._expand_inputs_for_generation, generation/utils.py:882-903 in 5.14.1), also on media whose
first axis counts tiles or patches rather than prompts: Cohere2-Vision's pixel_values [tiles, 3, H, W], the Qwen-VL-
style [patches, dim] of Kimi-K2.5, MiniMax-M3-VL and HunYuan-VL, Inkling's [patches, ...], MiniCPM-V 4.6's packed
slices. An image of tiles [A1, A2, A3] becomes [A1, A1, A1, A2, A2, A2, A3, A3, A3] and the model fills the beams'
placeholders in that order (one tile or patch per placeholder): beam 0 sees A1 three times, beam 1 A2, beam 2 A3. The
beams of one prompt then score their tokens on different images (the cached run keeps each beam's image in its reordered
cache; an uncached run re-runs each row with the image of its row), so cached and uncached beam search part. 5.18
encodes the media once before the expansion and expands the features per image
(_prepare_multimodal_encoder_kwargs_for_generation, _expand_multimodal_outputs, generation/utils.py:1025-1048, 1127-1198
in 5.18.0): Kimi-K2.5, MiniMax-M3-VL and the Qwen omni thinkers (one feature entry per image; the thinkers'
_expand_inputs_for_generation defers to the generic one, modeling_qwen2_5_omni.py:2057-2075 in 5.16.1) pass from 5.18. 5.18 still interleaves the entries
(``repeat_interleave``), wrong where a prompt's image has several (Cohere2-Vision's tiles, MiniCPM-V 4.6's slices); 5.19
repeats each prompt's group whole (``inputs.repeat(...)``; generation/utils.py:1118-1121 in 5.18.0 and 5.19.0).
Idefics3 and SmolVLM fail on 5.18 only: their pixel_values [prompts, tiles, 3, H, W] are right under the generic
expansion up to 5.17, but their get_image_features returns one pooler_output entry per tile (modeling_idefics3.py:603-610
in 5.18.0), which 5.18 interleaves; so does MiniCPM-V 4.7 (new in 5.18): MiniCPMV4_7Merger.forward returns one entry per
packed slice (modeling_minicpmv4_7.py:531-575 in 5.18.0), get_image_features hands them on as pooler_output (:637). HunYuan-VL's get_image_features returns all images' features as one entry until
5.20 splits them per image (modeling_hunyuan_vl.py:981-986 in 5.20.2); Inkling is left out of the pre-encoding
(its input_modalities lacks "image") until 5.21 declares it (modeling_inkling.py:1024, 1211 in 5.21.1).

Here: two prompts, each with its own image of several tiles or patches, beam search (3 beams, 3 returned) with and
without the cache. Exit 1 when a type's cached and uncached beams or scores part (the fixed releases agree within 1e-5).
Needs only torch and transformers (random weights); types a release lacks are skipped.
"""
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForImageTextToText

TRANSFORMERS = "<5.21"

TEXT = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 64, "initializer_range": 0.15}
VISION = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "patch_size": 8,
          "image_size": 32}
MROPE = {"rope_theta": 10000.0, "rope_type": "default", "mrope_section": [2, 3, 3]}
THINKER_AUDIO = {"num_mel_bins": 128, "encoder_layers": 2, "encoder_attention_heads": 4, "encoder_ffn_dim": 128, "d_model": 64,
                 "output_dim": 64, "max_source_positions": 64}
THINKER_VISION = {"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 4, "patch_size": 8,
                  "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 64}
CONFIGS = {
    "cohere2_vision": {"text_config": {**TEXT, "model_type": "cohere2", "sliding_window": 4,
                                       "layer_types": ["sliding_attention", "full_attention"]},
                       "vision_config": {**VISION, "model_type": "siglip_vision_model"}, "downsample_factor": 2,
                       "image_token_id": 255, "alignment_intermediate_size": 128},
    "kimi_k25": {"text_config": {**TEXT, "num_key_value_heads": 4, "model_type": "deepseek_v3", "moe_intermediate_size": 64,
                                 "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2, "n_group": 2,
                                 "topk_group": 1, "first_k_dense_replace": 1, "kv_lora_rank": 24, "q_lora_rank": 32,
                                 "qk_rope_head_dim": 16, "v_head_dim": 16, "qk_nope_head_dim": 16},
                 "vision_config": {"patch_size": 8, "num_attention_heads": 4, "num_hidden_layers": 2, "hidden_size": 64,
                                   "intermediate_size": 128, "pos_emb_height": 64, "pos_emb_width": 64},
                 "projection_hidden_size": 64, "image_token_id": 250, "video_token_id": 251, "vision_start_token_id": 252,
                 "vision_end_token_id": 253},
    "minimax_m3_vl": {"text_config": {**TEXT, "num_experts_per_tok": 2, "num_local_experts": 4, "dense_intermediate_size": 128,
                                      "shared_intermediate_size": 64, "rotary_dim": 8, "mlp_layer_types": ["sparse", "sparse"],
                                      "index_n_heads": 4, "index_head_dim": 32,
                                      "layer_types": ["full_attention", "full_attention"]},
                      "vision_config": {**VISION, "temporal_patch_size": 2, "spatial_merge_size": 2},
                      "image_token_index": 255, "video_token_index": 254, "projector_hidden_size": 64, "merged_hidden_size": 256},
    "minicpmv4_6": {"text_config": {**TEXT, "model_type": "qwen3_5_text", "linear_conv_kernel_dim": 4, "linear_key_head_dim": 16,
                                    "linear_value_head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                                    "layer_types": ["linear_attention", "full_attention"],
                                    "rope_parameters": {"rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                                        "rope_type": "default", "mrope_section": [1, 1, 0]}},
                    "vision_config": {**VISION, "insert_layer_id": 6, "window_kernel_size": [2, 2]}, "insert_layer_id": 6,
                    "image_size": 32, "drop_vision_last_layer": False, "image_token_id": 250, "downsample_mode": "16x",
                    "merge_kernel_size": [2, 2], "merger_times": 1, "patch_size": 8},
    # MiniCPM-V 4.7 (new in 5.18): 4.6's packed slices; 5.18's pre-encoding returns one feature entry per slice and
    # interleaves them, 5.19 does not
    "minicpmv4_7": {"text_config": {**TEXT, "model_type": "qwen3_5_text", "linear_conv_kernel_dim": 4, "linear_key_head_dim": 16,
                                    "linear_value_head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                                    "layer_types": ["linear_attention", "full_attention"],
                                    "rope_parameters": {"rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                                        "rope_type": "default", "mrope_section": [1, 1, 0]}},
                    "vision_config": {**VISION, "insert_layer_id": 6, "window_kernel_size": [2, 2]}, "insert_layer_id": 6,
                    "image_size": 32, "image_token_id": 250, "downsample_mode": "16x", "merge_kernel_size": [2, 2],
                    "merger_times": 1},
    "hunyuan_vl": {"text_config": {**TEXT, "rope_parameters": MROPE},
                   "vision_config": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                                     "num_key_value_heads": 2, "num_hidden_layers": 2, "out_hidden_size": 64, "patch_size": 8,
                                     "spatial_merge_size": 2, "temporal_patch_size": 1, "text_hidden_size": 64},
                   "image_token_id": 255},
    "inkling_mm_model": {"text_config": {**TEXT, "swa_num_attention_heads": 4, "swa_num_key_value_heads": 2, "swa_head_dim": 16,
                                         "sliding_window_size": 4, "d_rel": 16, "layer_types": ["hybrid_sliding", "hybrid"],
                                         "mlp_layer_types": ["dense", "dense"], "conv_kernel_size": 4},
                         "audio_config": {"text_hidden_size": 64}, "image_token_id": 255, "audio_token_id": 254,
                         "image_bos_token_id": 253, "audio_bos_token_id": 252,
                         "vision_config": {"text_hidden_size": 64, "patch_size": 20, "temporal_patch_size": 2, "hidden_size": 64,
                                           "n_layers": 2, "num_attention_heads": 4}},
    # Idefics3 and SmolVLM: pixel_values [prompts, tiles, 3, H, W] (the first axis counts prompts, so the generic expansion
    # is right up to 5.17); 5.18's pre-encoding returns one feature entry per tile and interleaves them, 5.19 does not
    "idefics3": {"text_config": {**TEXT, "model_type": "llama"}, "vision_config": VISION, "scale_factor": 2,
                 "image_token_id": 255, "pad_token_id": 0},
    # SmolVLM on 64-pixel tiles: 16 tokens per tile, a multiple of the patch size, which 5.20's merger requires
    "smolvlm": {"text_config": {**TEXT, "model_type": "llama"}, "vision_config": {**VISION, "image_size": 64}, "scale_factor": 2,
                "image_token_id": 255, "pad_token_id": 0},
    # the Qwen omni thinkers: their _expand_inputs_for_generation defers to the generic one (modeling_qwen2_5_omni.py:2057-2075
    # in 5.16.1); vision_start_token_id as every published thinker_config sets it (151652)
    "qwen2_5_omni_thinker": {"audio_config": THINKER_AUDIO, "vision_config": THINKER_VISION, "text_config": {**TEXT, "rope_parameters": MROPE},
                             "vision_start_token_id": 249, "audio_token_index": 255, "image_token_index": 254,
                             "video_token_index": 253, "audio_start_token_id": 252, "audio_end_token_id": 251, "user_token_id": 250},
    "qwen3_omni_moe_thinker": {"audio_config": THINKER_AUDIO, "vision_config": {**THINKER_VISION, "deepstack_visual_indexes": [1]},
                               "text_config": {**TEXT, "rope_parameters": MROPE, "moe_intermediate_size": 64,
                                               "num_experts_per_tok": 2, "num_experts": 4},
                               "vision_start_token_id": 249, "audio_start_token_id": 255, "user_token_id": 250,
                               "audio_token_id": 253, "image_token_id": 254, "video_token_id": 251},
}


def media(model_type, seed):
    """One image of several tiles or patches, its placeholder id and count, and the extra ids around the placeholders."""
    g = torch.Generator().manual_seed(seed)
    if model_type == "cohere2_vision":  # 3 tiles of 32 x 32 pixels, (32 / 8 / 2) ** 2 = 4 tokens each
        return {"pixel_values": torch.randn(3, 3, 32, 32, generator=g)}, 255, 12, [], []
    if model_type in ("kimi_k25", "minimax_m3_vl"):  # a 4 x 8 grid of patches, merged 2 x 2 -> 8 tokens
        dim = 3 * 8 * 8 * (2 if model_type == "minimax_m3_vl" else 1)
        image = {"pixel_values": torch.randn(32, dim, generator=g), "image_grid_thw": torch.tensor([[1, 4, 8]])}
        if model_type == "kimi_k25":
            image["pixel_values"] = image["pixel_values"].reshape(32, 3, 8, 8)
            return image, 250, 8, [252], [253]
        return image, 255, 8, [], []
    if model_type.endswith("_thinker"):  # a 4 x 8 grid of patches (2 frames of 8 x 8 pixels), merged 2 x 2 -> 8 tokens
        image = {"pixel_values": torch.randn(32, 3 * 2 * 8 * 8, generator=g), "image_grid_thw": torch.tensor([[1, 4, 8]])}
        return image, 254, 8, [249], []
    if model_type == "idefics3":  # 3 tiles of 32 x 32 pixels, (32 / 8 / 2) ** 2 = 4 tokens each
        return {"pixel_values": torch.randn(1, 3, 3, 32, 32, generator=g)}, 255, 12, [], []
    if model_type == "smolvlm":  # 3 tiles of 64 x 64 pixels, (64 / 8 / 2) ** 2 = 16 tokens each
        return {"pixel_values": torch.randn(1, 3, 3, 64, 64, generator=g)}, 255, 48, [], []
    if model_type in ("minicpmv4_6", "minicpmv4_7"):  # 3 slices of 4 x 4 patches of 8 x 8 pixels, packed side by side; 16x: 1 token each
        slices = {"pixel_values": torch.randn(1, 3, 8, 3 * 16 * 8, generator=g),
                  "target_sizes": torch.tensor([[4, 4]] * 3, dtype=torch.int32)}
        return slices, 250, 3, [], []
    if model_type == "hunyuan_vl":  # a 4 x 8 grid merged 2 x 2: 2 rows of (4 + 1 separator) + 2 boundary tokens
        patches = {"pixel_values": torch.randn(32, 3 * 8 * 8, generator=g), "image_grid_thw": torch.tensor([[1, 4, 8]])}
        return patches, 255, 12, [], []
    # inkling_mm_model: 8 patches, one token each
    return {"pixel_values": torch.randn(8, 2, 20, 20, 3, generator=g)}, 255, 8, [253], []


failed = []
for model_type, values in CONFIGS.items():
    if model_type not in transformers.models.auto.configuration_auto.CONFIG_MAPPING:
        print(f"{model_type}: not in transformers {transformers.__version__}")
        continue
    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, tie_word_embeddings=False, **values)
    model = AutoModelForImageTextToText.from_config(config).eval()
    images, rows = [], []
    for seed, text in ((1, [17, 42, 30, 77, 91]), (2, [23, 61, 88, 12, 54])):  # two prompts, each with its own image
        image, token, count, before, after = media(model_type, seed)
        rows.append(text[:2] + [*before, *[token] * count, *after] + text[2:])
        if model_type == "hunyuan_vl":
            image["mm_token_type_ids"] = torch.tensor([[int(t == token) for t in rows[-1]]], dtype=torch.int32)
        images.append(image)
    prompt = torch.tensor(rows)
    # MiniCPM-V 4.6 and 4.7 pack every slice of the batch into one row of pixel_values
    packed = model_type in ("minicpmv4_6", "minicpmv4_7")
    batch = {key: torch.cat([image[key] for image in images], dim=-1 if packed and key == "pixel_values" else 0)
             for key in images[0]}
    settings = {"max_new_tokens": 6, "min_new_tokens": 6, "do_sample": False, "num_beams": 3, "num_return_sequences": 3,
                "length_penalty": 0.0, "early_stopping": False, "output_scores": True, "return_dict_in_generate": True,
                "suppress_tokens": [token], "pad_token_id": 0, "eos_token_id": None}
    with torch.no_grad():
        runs = {use_cache: model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), use_cache=use_cache,
                                          **{k: v.clone() for k, v in batch.items()}, **settings)
                for use_cache in (True, False)}
    tokens_part = not torch.equal(runs[True].sequences, runs[False].sequences)
    delta = float((runs[True].sequences_scores - runs[False].sequences_scores).abs().max())
    bad = tokens_part or delta > 1e-3
    print(f"{model_type}: cached and uncached beam search: {'the beams part' if tokens_part else 'the same beams'}, "
          f"max |Δscore| {delta:.2e}{' (the beams saw other parts of the images)' if bad else ''}")
    if bad:
        failed.append(model_type)
sys.exit(1 if failed else 0)
