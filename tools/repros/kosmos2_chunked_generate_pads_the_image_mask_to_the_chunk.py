#!/usr/bin/env python3
"""Kosmos-2 and Kosmos-2.5: generate(prefill_chunk_size=...) with an image raises from transformers 5.23 on.

Their text models' prepare_inputs_for_generation pads ``image_embeds_position_mask`` (the image's positions in the
prompt) with ``False`` up to the length of the ids it is given, ``torch.zeros(batch_size, seq_len - mask_len)``
(modeling_kosmos2.py:1261-1270, modeling_kosmos2_5.py:1385-1392 in 5.24.0), as the prompt grows during generation.
GenerationMixin's chunked prefill hands every chunk the whole prompt's mask (generation/utils.py:4399-4400 in 5.24.0,
``is_first_iteration=True``): a chunk shorter than the prompt makes the padding length negative and the first chunk
raises "zeros: Dimension size must be non-negative". The image goes to the text model as ``image_embeds``
(modeling_kosmos2.py:1664-1668), which generate()'s refusal of raw media in a chunked prefill (pixel_values and
the like, generation/utils.py:156-170) does not list. 5.1-5.22 call prepare_inputs_for_generation without
``is_first_iteration`` in the chunks, which then drops the image (its embeddings and mask) from every chunk.
Exit 1 while the bug is there (the chunked generate() raises or returns other tokens than generate()), else 0.
"""
import sys

import torch
import transformers
from transformers import Kosmos2Config, Kosmos2ForConditionalGeneration

TRANSFORMERS = ">=5.1"  # 5.0 refuses every chunked prefill ("Cannot use prefill chunking without a cache")


def main() -> int:
    torch.manual_seed(0)
    config = Kosmos2Config(
        text_config={"vocab_size": 256, "embed_dim": 64, "layers": 2, "attention_heads": 4, "ffn_dim": 128,
                     "max_position_embeddings": 64, "init_std": 0.15},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 8},
        latent_query_num=4)
    model = Kosmos2ForConditionalGeneration(config).eval()
    ids = torch.randint(5, 200, (2, 10), generator=torch.Generator().manual_seed(0))
    image_positions = torch.zeros_like(ids, dtype=torch.bool)
    image_positions[:, 2:6] = True  # the latent_query_num image tokens, as the processor places them
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    given = {"pixel_values": pixels, "input_ids": ids, "image_embeds_position_mask": image_positions,
             "attention_mask": torch.ones_like(ids), "max_new_tokens": 3, "min_new_tokens": 3, "do_sample": False}
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    with torch.no_grad():
        plain = model.generate(**given)[:, -3:].tolist()
        print(f"generate(): {plain}")
        try:
            chunked = model.generate(**given, prefill_chunk_size=4)[:, -3:].tolist()
        except Exception as exc:  # the bug on 5.23+
            print(f"BUG: generate(prefill_chunk_size=4) raised {type(exc).__name__}: {str(exc)[:120]}")
            return 1
    print(f"generate(prefill_chunk_size=4): {chunked}")
    if chunked != plain:
        print("BUG: the chunked generate() parts from generate()")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
