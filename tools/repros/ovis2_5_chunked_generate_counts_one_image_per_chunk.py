#!/usr/bin/env python3
"""Ovis2.5: generate(prefill_chunk_size=...) with a batch of images raises (transformers 5.25, the model's first release).

The chunked prefill hands each chunk the pre-encoded features of the placeholders it holds, sliced into ONE flattened
entry for the whole batch (``_slice_mm_encoder_output``: ``[rows_features]``, generation/utils.py:4429-4441 in 5.24.0).
Ovis2_5Model._merge_visual_features counts the images as ``len(visual_features)`` and checks that the ids hold exactly
that many image start and end tokens (modeling_ovis2_5.py:762, :776-790 in 5.25.0): a chunk holding the start tokens of
both rows' images finds 2 for 1 "image" and raises "Expected 1 visual boundary tokens with id ..., but found 2". The
unchunked generate() passes the per-image list and runs. Config: transformers' defaults shrunk (a Qwen3 text model of
2 layers, a 2-block vision tower), two rows each with an image of 8 tokens between its start and end ids.
Exit 1 while the bug is there (the chunked generate() raises or returns other tokens than generate()), else 0.
"""
import sys

import torch
import transformers

TRANSFORMERS = ">=5.25"  # Ovis2.5 is in transformers from 5.25


def main() -> int:
    from transformers import Ovis2_5Config, Ovis2_5ForConditionalGeneration

    torch.manual_seed(0)
    config = Ovis2_5Config(
        text_config={"model_type": "qwen3", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                     "max_position_embeddings": 64, "initializer_range": 0.15,
                     "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default", "mrope_section": [2, 3, 3]}},
        vision_config={"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "patch_size": 8, "spatial_merge_size": 2, "image_size": 32, "window_size": 32,
                       "temporal_patch_size": 1, "vocab_size": 256, "num_visual_indicator_tokens": 4,
                       "initializer_range": 0.15, "max_position_embeddings": 64},
        image_token_id=255, video_token_id=254, image_start_token_id=253, image_end_token_id=252,
        video_start_token_id=251, video_end_token_id=250)
    model = Ovis2_5ForConditionalGeneration(config).eval()
    text = torch.randint(3, 240, (2, 6), generator=torch.Generator().manual_seed(0))
    image = torch.tensor([[253, *[255] * 8, 252]] * 2)
    ids = torch.cat([text[:, :2], image, text[:, 2:]], dim=1)
    given = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "max_new_tokens": 3, "min_new_tokens": 3,
             "pixel_values": torch.randn(64, 192, generator=torch.Generator().manual_seed(1)),
             "image_grid_thw": torch.tensor([[1, 4, 8], [1, 4, 8]]), "do_sample": False, "pad_token_id": 0}
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    with torch.no_grad():
        plain = model.generate(**given)[:, ids.shape[1]:].tolist()
        print(f"generate(): {plain}")
        try:
            chunked = model.generate(**given, prefill_chunk_size=6)[:, ids.shape[1]:].tolist()
        except Exception as exc:  # the bug
            print(f"BUG: generate(prefill_chunk_size=6) raised {type(exc).__name__}: {str(exc)[:120]}")
            return 1
    print(f"generate(prefill_chunk_size=6): {chunked}")
    if chunked != plain:
        print("BUG: the chunked generate() parts from generate()")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
