#!/usr/bin/env python3
"""generate(prefill_chunk_size=...) in transformers 5.1-5.22 prefills a vision- or audio-language prompt without its media.

The chunked branch of GenerationMixin._prefill calls ``prepare_inputs_for_generation(input_chunk, **model_kwargs)``
for every chunk without ``is_first_iteration`` (generation/utils.py:3849 in 5.1.0, :4138 in 5.17.0, :4344 in 5.22.2),
and the models hand their media (pixel_values, input_features, from 5.18 the pre-encoded mm_encoder_outputs) to the
forward on the first iteration only (LLaVA: ``if is_first_iteration or not use_cache``, modeling_llava.py:401-406 in
5.10.4; from 5.18 the generic MULTIMODAL_INPUTS_TO_DROP_OUTSIDE_PREFILL): no chunk gets the image, its placeholder ids are
embedded as text, and the tokens part from plain generate() from the first one. 5.23 passes ``is_first_iteration=True``
to the chunks and hands each its placeholders' pre-encoded features (refusing raw media it cannot split); 5.0 refuses
every chunked prefill. LLaVA (an image of 17 feature tokens), Qwen2-VL (whose rope index, given the image's grid in a
chunk without its features, raises on 5.1-5.18) and Qwen2-Audio (the audio dropped) here, prefill_chunk_size=8; and
ShieldGemma2's language model (Gemma3ForConditionalGeneration under a ShieldGemma2Config, as its checkpoint holds it),
whose tiny build repeats one token from 5.13 on: its tokens hold there and its logits part, and a forward pre-hook
shows which forwards got the image (pixel_values, or from 5.18 the pre-encoded mm_encoder_outputs).
Exit 1 while the bug is there (the chunked generate() returns other tokens or logits than generate()), else 0.
"""
import inspect
import sys

import torch
import transformers
from transformers import (
    Gemma3ForConditionalGeneration,
    LlavaConfig,
    LlavaForConditionalGeneration,
    Qwen2AudioConfig,
    Qwen2AudioForConditionalGeneration,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    ShieldGemma2Config,
)

TRANSFORMERS = ">=5.1,<5.23"  # 5.0 refuses chunked prefill; 5.23 hands each chunk its features
LOGIT_LIMIT = 1e-3  # float32: one prefill and its chunks agree to ~1e-6 where each chunk gets its image
MEDIA = ("pixel_values", "input_features", "mm_encoder_outputs")


def _llava() -> tuple[torch.nn.Module, dict]:
    config = LlavaConfig(
        vision_config={"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                       "num_attention_heads": 2, "image_size": 16, "patch_size": 4, "projection_dim": 32},
        text_config={"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                     "max_position_embeddings": 64, "initializer_range": 0.15},
        image_token_index=255, vision_feature_select_strategy="full", image_seq_length=17)
    text = torch.randint(3, 240, (2, 6), generator=torch.Generator().manual_seed(0))
    ids = torch.cat([text[:, :2], torch.full((2, 17), 255), text[:, 2:]], dim=1)  # the processor's 17 image tokens
    return LlavaForConditionalGeneration(config).eval(), {
        "input_ids": ids, "attention_mask": torch.ones_like(ids),
        "pixel_values": torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))}


def _qwen2_vl() -> tuple[torch.nn.Module, dict]:
    config = Qwen2VLConfig(
        text_config={"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
                     "initializer_range": 0.15, "bos_token_id": None, "eos_token_id": None,
                     "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default",
                                                                    "mrope_section": [2, 3, 3]}},
        vision_config={"depth": 2, "embed_dim": 64, "hidden_size": 64, "num_heads": 4, "patch_size": 8,
                       "spatial_merge_size": 2, "temporal_patch_size": 2, "initializer_range": 0.15},
        image_token_id=255, video_token_id=254, vision_start_token_id=253, vision_end_token_id=252)
    model = Qwen2VLForConditionalGeneration(config).eval()
    text = torch.randint(3, 240, (2, 6), generator=torch.Generator().manual_seed(0))
    image = torch.tensor([[253, *[255] * 8, 252]] * 2)  # a 32 x 64 image: 4 x 8 patches merged 2 x 2
    ids = torch.cat([text[:, :2], image, text[:, 2:]], dim=1)
    given = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
             "pixel_values": torch.randn(64, 384, generator=torch.Generator().manual_seed(1)),
             "image_grid_thw": torch.tensor([[1, 4, 8], [1, 4, 8]])}
    if "mm_token_type_ids" in inspect.signature(model.forward).parameters:  # as the processor returns them (5.2x)
        given["mm_token_type_ids"] = (ids == 255).long()
    return model, given


def _qwen2_audio() -> tuple[torch.nn.Module, dict]:
    config = Qwen2AudioConfig(
        audio_config={"num_mel_bins": 128, "encoder_layers": 2, "encoder_attention_heads": 4, "encoder_ffn_dim": 128,
                      "d_model": 64, "max_source_positions": 64, "initializer_range": 0.15},
        text_config={"model_type": "qwen2", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                     "max_position_embeddings": 64, "initializer_range": 0.15},
        audio_token_index=255)
    text = torch.randint(3, 240, (2, 6), generator=torch.Generator().manual_seed(0))
    ids = torch.cat([text[:, :2], torch.full((2, 32), 255), text[:, 2:]], dim=1)  # 128 frames: 32 audio tokens
    return Qwen2AudioForConditionalGeneration(config).eval(), {
        "input_ids": ids, "attention_mask": torch.ones_like(ids),
        "input_features": torch.randn(2, 128, 128, generator=torch.Generator().manual_seed(1)),
        "feature_attention_mask": torch.ones(2, 128, dtype=torch.long)}


def _shieldgemma2() -> tuple[torch.nn.Module, dict]:
    config = ShieldGemma2Config(
        text_config={"model_type": "gemma3_text", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                     "max_position_embeddings": 64, "sliding_window": 64, "initializer_range": 0.15},
        vision_config={"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                       "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 16, "patch_size": 4},
        mm_tokens_per_image=4, image_token_index=255, boi_token_index=254, eoi_token_index=253)
    text = torch.randint(3, 240, (2, 6), generator=torch.Generator().manual_seed(0))
    ids = torch.cat([text[:, :2], torch.tensor([[254, 255, 255, 255, 255, 253]] * 2), text[:, 2:]], dim=1)
    return Gemma3ForConditionalGeneration(config).eval(), {
        "input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": (ids == 255).long(),
        "pixel_values": torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))}


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    found = False
    for name, build in (("llava", _llava), ("qwen2_vl", _qwen2_vl), ("qwen2_audio", _qwen2_audio),
                        ("shieldgemma2", _shieldgemma2)):
        torch.manual_seed(0)
        model, given = build()
        width = given["input_ids"].shape[1]
        settings = {"max_new_tokens": 3, "min_new_tokens": 3, "do_sample": False, "pad_token_id": 0,
                    "return_dict_in_generate": True, "output_logits": True}
        media: list[bool] = []
        model.register_forward_pre_hook(lambda _m, _a, kw, seen=media: seen.append(any(kw.get(k) is not None for k in MEDIA)),
                                        with_kwargs=True)
        with torch.no_grad():
            plain = model.generate(**given, **settings)
            media.clear()
            try:
                chunked = model.generate(**given, **settings, prefill_chunk_size=8)
            except Exception as exc:  # the Qwen2-VL-style variant: the rope index over a chunk given the image's grid
                if "Chunked prefill cannot split the raw multimodal inputs" in str(exc):  # 5.23+: raw audio refused
                    print(f"{name}: generate() refuses a chunked prefill of its raw media (not the bug)")
                    continue
                if "Cannot use prefill chunking without a cache" in str(exc):  # 5.0: every chunked prefill refused
                    print(f"{name}: generate() refuses a chunked prefill (not the bug)")
                    continue
                print(f"BUG {name}: generate(prefill_chunk_size=8) raised {type(exc).__name__}: {str(exc)[:120]}")
                found = True
                continue
        tokens, chunked_tokens = plain.sequences[:, width:].tolist(), chunked.sequences[:, width:].tolist()
        delta = max(float((a - b).abs().max()) for a, b in zip(plain.logits, chunked.logits, strict=True))
        print(f"{name}: generate(): {tokens}; generate(prefill_chunk_size=8): {chunked_tokens}, max |Δlogit| {delta:.3g}; "
              f"its forwards that got the media: {media}")
        if chunked_tokens != tokens or delta > LOGIT_LIMIT:
            print(f"BUG {name}: the chunked generate() parts from generate() (its chunks got no media)")
            found = True
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
