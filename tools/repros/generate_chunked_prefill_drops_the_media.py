#!/usr/bin/env python3
"""generate(prefill_chunk_size=...) in transformers 5.1-5.22 prefills a vision- or audio-language prompt without its media.

The chunked branch of GenerationMixin._prefill calls ``prepare_inputs_for_generation(input_chunk, **model_kwargs)``
for every chunk without ``is_first_iteration`` (generation/utils.py:3849 in 5.1.0, :4138 in 5.17.0, :4344 in 5.22.2),
and the models hand their media (pixel_values, input_features, from 5.18 the pre-encoded mm_encoder_outputs) to the
forward on the first iteration only (LLaVA: ``if is_first_iteration or not use_cache``, modeling_llava.py:401-406 in
5.10.4; from 5.18 the generic MULTIMODAL_INPUTS_TO_DROP_OUTSIDE_PREFILL): no chunk gets the image, its placeholder ids are
embedded as text, and the tokens part from plain generate() from the first one. 5.23 passes ``is_first_iteration=True``
to the chunks and hands each its placeholders' pre-encoded features (refusing raw media it cannot split); 5.0 refuses
every chunked prefill. LLaVA here, with an image of 17 feature tokens in a 23-token prompt, prefill_chunk_size=8.
Exit 1 while the bug is there (the chunked generate() returns other tokens than generate()), else 0.
"""
import sys

import torch
import transformers
from transformers import LlavaConfig, LlavaForConditionalGeneration

TRANSFORMERS = ">=5.1,<5.23"  # 5.0 refuses chunked prefill; 5.23 hands each chunk its features


def main() -> int:
    torch.manual_seed(0)
    config = LlavaConfig(
        vision_config={"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                       "num_attention_heads": 2, "image_size": 16, "patch_size": 4, "projection_dim": 32},
        text_config={"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                     "max_position_embeddings": 64, "initializer_range": 0.15},
        image_token_index=255, vision_feature_select_strategy="full", image_seq_length=17)
    model = LlavaForConditionalGeneration(config).eval()
    text = torch.randint(3, 240, (2, 6), generator=torch.Generator().manual_seed(0))
    ids = torch.cat([text[:, :2], torch.full((2, 17), 255), text[:, 2:]], dim=1)  # the processor's 17 image tokens
    given = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "max_new_tokens": 3, "min_new_tokens": 3,
             "pixel_values": torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1)),
             "do_sample": False, "pad_token_id": 0}
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    with torch.no_grad():
        plain = model.generate(**given)[:, ids.shape[1]:].tolist()
        chunked = model.generate(**given, prefill_chunk_size=8)[:, ids.shape[1]:].tolist()
    print(f"generate(): {plain}; generate(prefill_chunk_size=8): {chunked}")
    if chunked != plain:
        print("BUG: the chunked generate() parts from generate() (its chunks got no image)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
