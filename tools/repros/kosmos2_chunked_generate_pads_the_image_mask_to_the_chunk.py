#!/usr/bin/env python3
"""Kosmos-2 and Kosmos-2.5: generate(prefill_chunk_size=...) with an image raises (Kosmos-2 from 5.23, Kosmos-2.5 from 5.1).

Their text models' prepare_inputs_for_generation pads ``image_embeds_position_mask`` (the image's positions in the
prompt) with ``False`` up to the length of the ids it is given, ``torch.zeros(batch_size, seq_len - mask_len)``
(modeling_kosmos2.py:1261-1270, modeling_kosmos2_5.py:1385-1392 in 5.24.0), as the prompt grows during generation.
GenerationMixin's chunked prefill hands every chunk the whole prompt's mask (generation/utils.py:4399-4400 in 5.24.0,
``is_first_iteration=True``): a chunk shorter than the prompt makes the padding length negative and the first chunk
raises "zeros: Dimension size must be non-negative". The image goes to the text model as ``image_embeds``
(modeling_kosmos2.py:1664-1668), which generate()'s refusal of raw media in a chunked prefill (pixel_values and
the like, generation/utils.py:156-170) does not list. 5.1-5.22 call prepare_inputs_for_generation without
``is_first_iteration`` in the chunks, which then drops the image (its embeddings and mask) from every chunk.
Kosmos-2.5 here too (flattened patches, 16 image tokens): it raises the same on every release from 5.1, its text model
padding the mask while its cache is empty (modeling_kosmos2_5.py:1401-1412 in 5.10.4).
Exit 1 while the bug is there (the chunked generate() raises or returns other tokens than generate()), else 0.
"""
import sys

import torch
import transformers
from transformers import Kosmos2Config, Kosmos2ForConditionalGeneration

TRANSFORMERS = ">=5.1"  # 5.0 refuses every chunked prefill ("Cannot use prefill chunking without a cache")


def _kosmos2() -> tuple[torch.nn.Module, dict]:
    config = Kosmos2Config(
        text_config={"vocab_size": 256, "embed_dim": 64, "layers": 2, "attention_heads": 4, "ffn_dim": 128,
                     "max_position_embeddings": 64, "init_std": 0.15},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 8},
        latent_query_num=4)
    ids = torch.randint(5, 200, (2, 10), generator=torch.Generator().manual_seed(0))
    image_positions = torch.zeros_like(ids, dtype=torch.bool)
    image_positions[:, 2:6] = True  # the latent_query_num image tokens, as the processor places them
    return Kosmos2ForConditionalGeneration(config).eval(), {
        "pixel_values": torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1)), "input_ids": ids,
        "image_embeds_position_mask": image_positions, "attention_mask": torch.ones_like(ids)}


def _kosmos2_5() -> tuple[torch.nn.Module, dict]:
    from transformers import Kosmos2_5Config, Kosmos2_5ForConditionalGeneration

    config = Kosmos2_5Config(
        text_config={"vocab_size": 256, "embed_dim": 64, "layers": 2, "attention_heads": 4, "ffn_dim": 128,
                     "max_position_embeddings": 64, "init_std": 0.15},
        vision_config={"hidden_size": 64, "patch_embed_hidden_size": 192, "intermediate_size": 128, "head_dim": 16,
                       "num_hidden_layers": 2, "num_attention_heads": 4, "initializer_range": 0.15},
        latent_query_num=16)
    text = torch.randint(5, 200, (2, 6), generator=torch.Generator().manual_seed(0))
    ids = torch.cat([text[:, :2], torch.full((2, 16), 4), text[:, 2:]], dim=1)  # 16 image tokens (the processor's)
    image_positions = torch.zeros_like(ids, dtype=torch.bool)
    image_positions[:, 2:18] = True
    patches = torch.randn(2, 36, 194, generator=torch.Generator().manual_seed(1))
    patches[:, :, 0] = torch.arange(36) // 8 + 1  # each patch's row and column (1-based), as the image processor writes
    patches[:, :, 1] = torch.arange(36) % 8 + 1
    return Kosmos2_5ForConditionalGeneration(config).eval(), {
        "flattened_patches": patches,
        "width": torch.tensor([64, 64]), "height": torch.tensor([32, 32]), "input_ids": ids,
        "image_embeds_position_mask": image_positions, "attention_mask": torch.ones_like(ids)}


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    found = False
    cases = [("kosmos-2", _kosmos2)] + ([("kosmos-2.5", _kosmos2_5)] if hasattr(transformers, "Kosmos2_5Config") else [])
    for name, build in cases:
        torch.manual_seed(0)
        model, given = build()
        settings = {"max_new_tokens": 3, "min_new_tokens": 3, "do_sample": False}
        with torch.no_grad():
            plain = model.generate(**given, **settings)[:, -3:].tolist()
            try:
                chunked = model.generate(**given, **settings, prefill_chunk_size=4)[:, -3:].tolist()
            except Exception as exc:  # the bug (Kosmos-2: 5.23+; Kosmos-2.5: 5.1+)
                print(f"BUG {name}: generate(prefill_chunk_size=4) raised {type(exc).__name__}: {str(exc)[:120]}")
                found = True
                continue
        print(f"{name}: generate(): {plain}; generate(prefill_chunk_size=4): {chunked}")
        if chunked != plain:
            print(f"BUG {name}: the chunked generate() parts from generate()")
            found = True
    return 1 if found else 0

if __name__ == "__main__":
    sys.exit(main())
