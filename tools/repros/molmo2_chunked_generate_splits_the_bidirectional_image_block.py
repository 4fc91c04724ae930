#!/usr/bin/env python3
"""Molmo2: generate(prefill_chunk_size=k) with k shorter than an image's ids splits the image's bidirectional attention
block across chunks, so the prefill's cache and the greedy tokens leave those of generate() without chunking.

Expected (model bug, every release with Molmo2, 5.24.0-5.25.0 here): Molmo2Processor marks every id it writes for an
image in mm_token_type_ids (the patches, <im_col> after each high-resolution row, the crops' start and end ids:
processing_molmo2.py:79-90, :140-160; processing_utils.py:1022), and Molmo2's forward joins the marked positions into
ONE bidirectional block when it prefills (block_sequence_ids, modeling_molmo2.py:860-863). The chunked prefill slices
mm_token_type_ids up to each chunk's end and hands each chunk the pre-encoded features of its own placeholders
(generation/utils.py:4364-4405 in 5.24.0), so the image's ids in the first chunk never attend to those of later chunks,
which one prefill lets them do. A chunk size that holds the whole image (the control) equals generate() without
chunks. The image inputs have the layout Molmo2ImageProcessor gives a 32x64 image with 32x32 crops and 8x8 patches
(its image_grids [2, 2, 2, 4]; pooling indices 2x2 patches per token, random pixels).
Exit 1 when the chunked prefill's logits leave generate()'s without chunks by more than 1e-3; 0 otherwise.
"""
import sys

import torch
import transformers
from transformers import Molmo2Config, Molmo2ForConditionalGeneration

TRANSFORMERS = ">=5.24"  # the releases checked (tests/test_repros.py skips it elsewhere)

START, END, PATCH, COLUMN, LOW_RES_START = 256, 257, 258, 259, 260


@torch.inference_mode()
def main() -> int:
    small = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}
    config = Molmo2Config(
        vision_config={**small, "num_hidden_layers": 2, "image_size": [32, 32], "patch_size": 8, "num_position_embeddings": 16},
        adapter_config={**small, "vision_feature_layer": [1, 0], "text_hidden_size": 64},
        text_config={**small, "num_hidden_layers": 2, "vocab_size": 256, "additional_vocab_size": 128,
                     "max_position_embeddings": 64, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default",
                                                                          "mrope_section": [2, 3, 3]}},
        image_start_token_id=START, image_end_token_id=END, image_patch_id=PATCH, low_res_image_start_token_id=LOW_RES_START,
        frame_start_token_id=263, frame_end_token_id=264)
    torch.manual_seed(0)
    model = Molmo2ForConditionalGeneration(config).eval()
    # Molmo2Processor.replace_image_token for image_grids [2, 2, 2, 4]: the low-resolution crop (2x2 patches, no
    # columns, as the published processor_config.json's use_single_crop_col_tokens false), then the high-resolution one
    # (2 rows of 4 patches, each closed by <im_col>).
    image = [LOW_RES_START, *[PATCH] * 4, END, START, *([*[PATCH] * 4, COLUMN] * 2), END]
    text = torch.randint(3, 250, (1, 6), generator=torch.Generator().manual_seed(0))
    ids = torch.cat([text[:, :2], torch.tensor([image]), text[:, 2:]], dim=1)
    pooling = [[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 15], [16, 17, 20, 21], [18, 33, 22, 37],
               [34, 49, 38, 53], [50, 51, 54, 55], [24, 25, 28, 29], [26, 41, 30, 45], [42, 57, 46, 61], [58, 59, 62, 63]]
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
              "pixel_values": torch.randn(4, 16, 192, generator=torch.Generator().manual_seed(1)),
              "image_token_pooling": torch.tensor(pooling), "image_grids": torch.tensor([[2, 2, 2, 4]]),
              "image_num_crops": torch.tensor([4]),
              "mm_token_type_ids": torch.isin(ids, torch.tensor([START, END, PATCH, COLUMN, LOW_RES_START])).long()}

    def greedy(chunk: int | None) -> tuple[list[int], torch.Tensor]:
        out = model.generate(**inputs, max_new_tokens=8, do_sample=False, prefill_chunk_size=chunk, output_logits=True,
                             return_dict_in_generate=True, suppress_tokens=list(range(250, 384)))
        return out.sequences[0, ids.shape[1]:].tolist(), torch.stack(out.logits)

    tokens, logits = greedy(None)
    first, last = ids.tolist()[0].index(LOW_RES_START), len(image) + 1
    print(f"transformers {transformers.__version__}: a {ids.shape[1]}-token prompt, the image's {len(image)} ids at "
          f"positions {first}-{last}, all marked in mm_token_type_ids")
    worst = 0.0
    for chunk in (8, ids.shape[1] - 2):
        chunked, chunked_logits = greedy(chunk)
        delta = float((chunked_logits - logits).abs().max())
        print(f"prefill_chunk_size={chunk}: chunks end at {list(range(chunk, ids.shape[1], chunk))}; same greedy tokens: "
              f"{chunked == tokens}; max |Δlogit| against no chunks: {delta:.3g}")
        worst = delta if chunk < last else worst
    return 1 if worst > 1e-3 else 0


if __name__ == "__main__":
    sys.exit(main())
