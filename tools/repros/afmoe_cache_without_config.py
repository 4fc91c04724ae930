#!/usr/bin/env python3
"""AFMoE in transformers 5.0.0: the cache generate() decodes with keeps every token in its sliding-window layers.

AfmoeModel.forward builds ``DynamicCache()`` without the config (modeling_afmoe.py:579 in 5.0.0), and 5.0.0's generate()
gives a model no cache of its own with the default generation config (generation/utils.py _prepare_cache_for_generation
creates one only for a cache_implementation), so the model's config-less cache is what generate() decodes with: plain
DynamicLayers where the config names sliding_attention layers, holding the whole sequence instead of the last
sliding_window - 1 tokens (the logits are right: the mask still applies the window; the memory grows with the sequence).
5.1.0 builds DynamicCache(config=self.config) (modeling_afmoe.py:580 in 5.1.0), whose sliding layers keep window - 1.
Exit 1 while the bug is there (a sliding layer of generate()'s cache holds more than window - 1 positions), else 0.
"""
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

TRANSFORMERS = "<5.1"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


def main() -> int:
    window = 4
    config = AutoConfig.for_model("afmoe", vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                  num_experts=4, num_experts_per_tok=2, num_dense_layers=1, sliding_window=window,
                                  layer_types=["sliding_attention", "full_attention"], max_position_embeddings=64)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    ids = torch.randint(3, 256, (1, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=False, return_dict_in_generate=True)
    layers = [(kind, type(layer).__name__, layer.keys.shape[-2]) for kind, layer in zip(config.layer_types, out.past_key_values.layers, strict=True)]
    print(f"torch {torch.__version__}, transformers {transformers.__version__}; generate()'s cache after 14 tokens: {layers}")
    kept = max(length for kind, _, length in layers if kind == "sliding_attention")
    if kept > window - 1:
        print(f"BUG: a sliding-window layer (window {window}) holds {kept} positions, not {window - 1}")
        return 1
    print(f"ok: the sliding-window layers hold {window - 1} positions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
