#!/usr/bin/env python3
"""transformers 5.8-5.17: EXAONE 4.5's beam-search input expansion counts image placeholder tokens as images.

Expected (model bug, transformers 5.8.1-5.17.0): Exaone4_5ForConditionalGeneration overrides
``_expand_inputs_for_generation`` (modeling_exaone4_5.py:947-1000 in 5.17.0) and splits ``image_grid_thw`` (one row per
image) by ``_get_image_nums_and_video_nums``' per-prompt count (:980), which counts the ``image_token_id`` positions
(``image_mask = input_ids == image_token_id``, :939). The processor writes ``grid_t * grid_h * grid_w / merge_size**2``
placeholder tokens per image (processing_exaone4_5.py:55-57), so every image of more than one placeholder, i.e. every
real one, makes ``torch.split`` raise and generate(num_beams>1) with an image cannot run (num_return_sequences > 1
expands the same way). 5.18 drops the override for generate()'s own per-image expansion of the encoded media.
Exit 1 when beam search with one image per prompt raises that split error, 0 when it runs.
"""
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForImageTextToText

TRANSFORMERS = ">=5.8,<5.18"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

IMAGE = 67  # Exaone4_5_Config.image_token_id's default


@torch.inference_mode()
def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    config = AutoConfig.for_model(
        "exaone4_5",
        text_config={"model_type": "exaone4", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 64,
                     "sliding_window": None, "layer_types": ["full_attention", "full_attention"]},
        vision_config={"model_type": "exaone4_5_vision", "depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 4, "num_key_value_heads": 4,
                       "patch_size": 8, "window_size": 32, "out_hidden_size": 64, "fullatt_block_indexes": [1]},
    )
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config).eval()
    # one 32 x 32-pixel image per prompt: a 4 x 4 grid of 8-pixel patches, merged 2 x 2 into 4 placeholders (an image
    # of a single placeholder would hide the bug; every real image has many)
    grid = torch.tensor([[1, 4, 4], [1, 4, 4]])
    patch = 3 * 2 * 8 * 8  # channels x temporal_patch_size x patch_size**2
    pixel_values = torch.randn(32, patch, generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([[5, IMAGE, IMAGE, IMAGE, IMAGE, 10, 11], [6, IMAGE, IMAGE, IMAGE, IMAGE, 20, 21]])
    try:
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=pixel_values,
                             image_grid_thw=grid, num_beams=3, max_new_tokens=4, do_sample=False, pad_token_id=0)
    except RuntimeError as exc:
        if "split_with_sizes expects split_sizes to sum exactly" not in str(exc):
            raise
        print(f"BUG: beam search raised RuntimeError: {exc}")
        return 1
    print(f"beam search ran: {out[:, 7:].tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
