#!/usr/bin/env python3
"""Kosmos-2: a left-padded prompt decodes at positions shifted by its pad count (transformers 5.x).

Kosmos2TextSinusoidalPositionalEmbedding numbers tokens from their ids, fairseq-style:
``(cumsum(input_ids != padding_idx) + cache_length) * mask + padding_idx`` (create_position_ids_from_input_ids,
modeling_kosmos2.py:625-638 in 5.24.0), and generate() hands it no position_ids (prepare_inputs_for_generation pops
them, "Kosmos2 has offset for position ids", modeling_kosmos2.py:1280-1281). The prefill skips the pad columns, but a
decode step adds ``cache_length``, which counts them: with k left pads (a batch the processor pads to one length, or
``pad_to_multiple_of``), every token after the first generated one sits k positions later than the same prompt's
unpadded run, and the tokens part. Exit 1 while the bug is there (the padded prompt's tokens part from its unpadded
generate()), else 0.
"""
import sys

import torch
import transformers
from transformers import Kosmos2Config, Kosmos2ForConditionalGeneration


def main() -> int:
    torch.manual_seed(0)
    config = Kosmos2Config(
        text_config={"vocab_size": 256, "embed_dim": 64, "layers": 2, "attention_heads": 4, "ffn_dim": 128,
                     "max_position_embeddings": 64, "init_std": 0.15, "pad_token_id": 1},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 8},
        latent_query_num=4)
    model = Kosmos2ForConditionalGeneration(config).eval()
    ids = torch.randint(5, 200, (2, 10), generator=torch.Generator().manual_seed(0))
    image_positions = torch.zeros_like(ids, dtype=torch.bool)
    image_positions[:, 2:6] = True  # the latent_query_num image tokens, as the processor places them
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    pads = 3
    padded_ids = torch.cat([torch.full((2, pads), config.text_config.pad_token_id), ids], dim=1)
    padded_positions = torch.cat([torch.zeros((2, pads), dtype=torch.bool), image_positions], dim=1)
    settings = {"max_new_tokens": 4, "min_new_tokens": 4, "do_sample": False, "output_logits": True,
                "return_dict_in_generate": True}
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    with torch.no_grad():
        plain = model.generate(pixel_values=pixels, input_ids=ids, image_embeds_position_mask=image_positions,
                               attention_mask=torch.ones_like(ids), **settings)
        padded = model.generate(pixel_values=pixels, input_ids=padded_ids, image_embeds_position_mask=padded_positions,
                                attention_mask=torch.cat([torch.zeros((2, pads), dtype=torch.long), torch.ones_like(ids)], dim=1),
                                **settings)
    # teacher-forced comparison: the padded run's tokens are fed to both only while they agree, so compare step by step
    gaps = [float((a - b).abs().max()) for a, b in zip(plain.logits, padded.logits, strict=True)]
    print(f"max |Δlogit| per generated token, {pads} masked left pads against none: {[f'{g:.1e}' for g in gaps]}")
    if gaps[0] < 1e-4 and max(gaps[1:]) > 1e-3:
        print("BUG: the first token (the prefill) agrees, the decode steps part: they sit at shifted positions")
        return 1
    return 0

if __name__ == "__main__":
    sys.exit(main())
