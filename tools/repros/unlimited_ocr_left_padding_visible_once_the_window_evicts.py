#!/usr/bin/env python3
"""UnlimitedOcr: a left-padded prompt's pad columns are attended once its reference sliding window evicts (5.20+).

UnlimitedOcr's reference sliding window (R-SWA) keeps the prompt apart and the last ``sliding_window`` decoded tokens;
its cache layer hands attention ``[prompt keys, window keys]`` and reports ``get_mask_sizes`` as the window's offset
(``kv_offset``: the decoded tokens evicted) plus the prompt length (modeling_unlimited_ocr.py:1330-1343 in 5.24.0).
create_reference_sliding_window_causal_mask (:1663-1709) ORs a prefill overlay (``kv_idx - kv_offset <
prefill_length``) into create_sliding_window_causal_mask and hands it the 2-D padding mask as it is; sdpa_mask ANDs that
padding mask in at ``kv_idx + kv_offset`` for every key (masking_utils.py:512, :527, :531; padding_mask_function,
:166-177), while the prompt keys are not shifted. Once the window has evicted (kv_offset > 0) a left-padded row's pad
column, a prompt key, is looked up at a later column that holds 1, and the decoded tokens attend it: from the first step
past the window, the padded row's logits leave the same prompt's unpadded run (and its greedy tokens part). Dense MLP
layers, a text-only prompt: no image and no router is involved. Exit 1 while the bug is there, else 0.
"""
import sys

import torch
import transformers

TRANSFORMERS = ">=5.20"  # UnlimitedOcr is in transformers from 5.20 (tests/test_repros.py skips it elsewhere)

WINDOW, STEPS = 4, 8


def main() -> int:
    from transformers import UnlimitedOcrConfig, UnlimitedOcrForConditionalGeneration

    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    torch.manual_seed(0)
    text = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 64,
            "initializer_range": 0.15, "bos_token_id": 0, "eos_token_id": 1, "sliding_window": WINDOW,
            "layer_types": ["reference_sliding_attention"] * 2, "mlp_layer_types": ["dense", "dense"],
            "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64, "n_group": 2, "topk_group": 1}
    tower = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32, "patch_size": 8,
             "initializer_range": 0.15}
    vision = {"sam_config": {**tower, "window_size": 4, "downsample_channels": [32, 64]},
              "encoder_config": {**tower, "intermediate_size": 128}}
    model = UnlimitedOcrForConditionalGeneration(UnlimitedOcrConfig(text_config=text, vision_config=vision)).eval()
    prompt = torch.randint(5, 200, (1, 5), generator=torch.Generator().manual_seed(0))
    pad = 3  # any id: the column is masked
    padded = torch.cat([torch.full((1, 1), pad), prompt], dim=1)
    settings = {"max_new_tokens": STEPS, "min_new_tokens": STEPS, "do_sample": False, "output_logits": True,
                "return_dict_in_generate": True}
    with torch.no_grad():
        alone = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), **settings)
        batch = model.generate(input_ids=padded, attention_mask=torch.cat([torch.zeros((1, 1), dtype=torch.long),
                                                                            torch.ones_like(prompt)], dim=1), **settings)
    gaps = [float((a - b).abs().max()) for a, b in zip(batch.logits, alone.logits, strict=True)]
    print(f"max |Δlogit| per generated token, one masked left pad against none (window {WINDOW}): "
          f"{[f'{g:.1e}' for g in gaps]}")
    print(f"tokens: padded {batch.sequences[0, -STEPS:].tolist()}, unpadded {alone.sequences[0, -STEPS:].tolist()}")
    if max(gaps[:WINDOW + 1]) < 1e-4 and max(gaps[WINDOW + 1:]) > 1e-3:
        print(f"BUG: the first {WINDOW + 1} tokens agree; once the window evicts, the pad column is attended")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
