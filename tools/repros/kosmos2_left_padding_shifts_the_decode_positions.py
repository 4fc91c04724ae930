#!/usr/bin/env python3
"""Kosmos-2 and Kosmos-2.5: a left-padded prompt decodes at positions shifted by its pad count (transformers 5.x).

Their text models number tokens from their ids, fairseq-style:
``(cumsum(input_ids != padding_idx) + cache_length) * mask + padding_idx`` (create_position_ids_from_input_ids,
modeling_kosmos2.py:625-638 and modeling_kosmos2_5.py:684-697 in 5.24.0), and generate() hands them no position_ids
(prepare_inputs_for_generation pops them: "Kosmos2 has offset for position ids", modeling_kosmos2.py:1283-1284;
modeling_kosmos2_5.py:1394-1396; Kosmos-2.5 from 5.10, its 5.1-5.9 positions being wrong otherwise).
The prefill skips the pad columns, but a decode step adds ``cache_length``, which counts them: with k left pads (a batch
the processor pads to one length, or ``pad_to_multiple_of``), every token after the first generated one sits k positions
later than the same prompt's unpadded run, and the logits part. Exit 1 while the bug is there (the padded prompt's first
token agrees with its unpadded generate(), the next ones part), else 0.
"""
import sys

import torch
import transformers
from transformers import Kosmos2Config, Kosmos2ForConditionalGeneration

PADS = 3


def _kosmos2() -> tuple[torch.nn.Module, dict, int]:
    config = Kosmos2Config(
        text_config={"vocab_size": 256, "embed_dim": 64, "layers": 2, "attention_heads": 4, "ffn_dim": 128,
                     "max_position_embeddings": 64, "init_std": 0.15, "pad_token_id": 1},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 8},
        latent_query_num=4)
    ids = torch.randint(5, 200, (2, 10), generator=torch.Generator().manual_seed(0))
    image_positions = torch.zeros_like(ids, dtype=torch.bool)
    image_positions[:, 2:6] = True  # the latent_query_num image tokens, as the processor places them
    return Kosmos2ForConditionalGeneration(config).eval(), {
        "pixel_values": torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1)), "input_ids": ids,
        "image_embeds_position_mask": image_positions}, config.text_config.pad_token_id


def _kosmos2_5() -> tuple[torch.nn.Module, dict, int]:
    from transformers import Kosmos2_5Config, Kosmos2_5ForConditionalGeneration

    config = Kosmos2_5Config(
        text_config={"vocab_size": 256, "embed_dim": 64, "layers": 2, "attention_heads": 4, "ffn_dim": 128,
                     "max_position_embeddings": 64, "init_std": 0.15, "pad_token_id": 1},
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
        "flattened_patches": patches, "width": torch.tensor([64, 64]), "height": torch.tensor([32, 32]), "input_ids": ids,
        "image_embeds_position_mask": image_positions}, config.text_config.pad_token_id


def _left_padded(given: dict, pad_id: int) -> dict:
    """The prompt with PADS masked columns on the left, as the processor pads a batch (the image mask False there)."""
    ids, positions = given["input_ids"], given["image_embeds_position_mask"]
    return {**given, "input_ids": torch.cat([torch.full((2, PADS), pad_id), ids], dim=1),
            "image_embeds_position_mask": torch.cat([torch.zeros((2, PADS), dtype=torch.bool), positions], dim=1),
            "attention_mask": torch.cat([torch.zeros((2, PADS), dtype=torch.long), torch.ones_like(ids)], dim=1)}


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    settings = {"max_new_tokens": 4, "min_new_tokens": 4, "do_sample": False, "output_logits": True,
                "return_dict_in_generate": True}
    found = False
    cases = [("kosmos-2", _kosmos2)] + ([("kosmos-2.5", _kosmos2_5)] if hasattr(transformers, "Kosmos2_5Config") else [])
    for name, build in cases:
        torch.manual_seed(0)
        model, given, pad_id = build()
        with torch.no_grad():
            plain = model.generate(**given, attention_mask=torch.ones_like(given["input_ids"]), **settings)
            padded = model.generate(**_left_padded(given, pad_id), **settings)
        # the first two tokens are compared: the second is fed the first, which agrees while the prefill does
        gaps = [float((a - b).abs().max()) for a, b in zip(plain.logits[:2], padded.logits[:2], strict=True)]
        print(f"{name}: max |Δlogit| of the first two generated tokens, {PADS} masked left pads against none: "
              f"{[f'{g:.1e}' for g in gaps]}")
        if gaps[0] < 1e-4 and gaps[1] > 1e-3:
            print(f"BUG {name}: the first token (the prefill) agrees, the decode step parts: it sits at a shifted position")
            found = True
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
