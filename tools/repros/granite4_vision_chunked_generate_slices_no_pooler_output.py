#!/usr/bin/env python3
"""Granite 4 Vision: generate(prefill_chunk_size=...) with an image raises KeyError 'pooler_output' (transformers 5.23+).

From 5.23 a chunked prefill hands each chunk the pre-encoded image features of the placeholders it holds:
GenerationMixin._prefill slices ``mm_encoder_outputs`` per chunk with ``_slice_mm_encoder_output``, which reads
``output["pooler_output"]`` (generation/utils.py:4435 in 5.24.0). Granite4VisionModel.get_image_features returns a
Granite4VisionImageFeaturesOutput whose features are only in ``deepstack_features`` (a list of ``(llm_layer,
per-image features)`` pairs, modeling_granite4_vision.py:111-119, :888-920), its ``pooler_output`` None, and the model
reads only those (:998-1010). So ``output["pooler_output"]`` raises KeyError before the first chunk, and the slicer's
deepstack branch (:4437-4440) expects per-layer lists of tensors, not Granite's pairs. The config follows transformers'
own tester's choices for the fields the default leaves None (deepstack_layer_map [[1, 0]], downsample_rate "1/2").
Exit 1 while the bug is there (the chunked generate() raises or returns other tokens than generate()), else 0.
"""
import sys

import torch
import transformers
from transformers import Granite4VisionConfig, Granite4VisionForConditionalGeneration

TRANSFORMERS = ">=5.23"  # the chunked prefill's per-chunk slicing of pre-encoded features


def main() -> int:
    torch.manual_seed(0)
    config = Granite4VisionConfig(
        vision_config={"model_type": "clip_vision_model", "hidden_size": 64, "intermediate_size": 128, "projection_dim": 64,
                       "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32, "patch_size": 8,
                       "initializer_range": 0.15},
        text_config={"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
                     "initializer_range": 0.15},
        qformer_config={"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 1,
                        "intermediate_size": 128, "max_position_embeddings": 64, "encoder_hidden_size": 64},
        image_token_index=255, image_grid_pinpoints=[[32, 64], [64, 32], [64, 64]], downsample_rate="1/2",
        deepstack_layer_map=[[1, 0]])
    model = Granite4VisionForConditionalGeneration(config).eval()
    text = torch.randint(3, 240, (2, 6), generator=torch.Generator().manual_seed(0))
    ids = torch.cat([text[:, :2], torch.full((2, 14), 255), text[:, 2:]], dim=1)  # 14 image tokens of a 32 x 64 image
    given = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
             "pixel_values": torch.randn(2, 3, 3, 32, 32, generator=torch.Generator().manual_seed(1)),
             "image_sizes": torch.tensor([[32, 64], [32, 64]]), "max_new_tokens": 3, "min_new_tokens": 3,
             "do_sample": False, "pad_token_id": 0}
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    with torch.no_grad():
        plain = model.generate(**given)[:, ids.shape[1]:].tolist()
        print(f"generate(): {plain}")
        try:
            chunked = model.generate(**given, prefill_chunk_size=7)[:, ids.shape[1]:].tolist()
        except Exception as exc:  # the bug
            print(f"BUG: generate(prefill_chunk_size=7) raised {type(exc).__name__}: {str(exc)[:120]}")
            return 1
    print(f"generate(prefill_chunk_size=7): {chunked}")
    if chunked != plain:
        print("BUG: the chunked generate() parts from generate()")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
