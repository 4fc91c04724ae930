#!/usr/bin/env python3
"""transformers 5.5-5.13: a config with num_kv_shared_layers=0 (every Gemma 4 default, and the published 26B-A4B and
31B checkpoints) gets a DynamicCache whose sliding-attention layers keep every token instead of the window.

Expected (model bug, transformers 5.5.4-5.13.1, the releases that ship gemma4): DynamicCache(config=...) drops the
KV-shared layers with `layer_types = layer_types[: -decoder_config.num_kv_shared_layers]` whenever the config has the
attribute (cache_utils.py:1565-1566 in 5.13.1, :1239-1240 in 5.5.4); with 0 that slice is `[:-0]`, the empty list, so
no typed layer is built and the cache falls back to lazily added full DynamicLayers: generate() on Gemma4ForCausalLM
(which builds DynamicCache(config=self.config), modeling_gemma4.py:1687 in 5.13.1) keeps the whole sequence in every
sliding_attention layer. 5.14 slices only when the count is > 0 (`if num_kv_shared_layers is not None and
num_kv_shared_layers > 0`, cache_utils.py:1633-1635 in 5.14.1) and the sliding layers keep sliding_window - 1 tokens.
Exit 1 when a sliding_attention layer of generate()'s cache holds more than sliding_window tokens; 0 when it holds
at most the window.
"""
import sys

import torch
import transformers
from transformers import Gemma4ForCausalLM, Gemma4TextConfig

TRANSFORMERS = ">=5.5,<5.14"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


@torch.inference_mode()
def main() -> int:
    config = Gemma4TextConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
                              layer_types=["sliding_attention", "full_attention"], sliding_window=4,
                              hidden_size_per_layer_input=0, vocab_size_per_layer_input=256, num_kv_shared_layers=0,
                              pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = Gemma4ForCausalLM(config).eval()
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, min_new_tokens=4,
                         do_sample=False, pad_token_id=0, return_dict_in_generate=True)
    cache = out.past_key_values
    held = [(type(layer).__name__, None if layer.keys is None else layer.keys.shape[-2]) for layer in cache.layers]
    seen = out.sequences.shape[1] - 1
    print(f"transformers {transformers.__version__}: num_kv_shared_layers=0, sliding_window=4, layer_types "
          f"{config.layer_types}; after generate() ({seen} tokens cached) the cache layers hold {held}")
    sliding = held[0][1]
    if sliding is not None and sliding > config.sliding_window:
        print(f"the sliding_attention layer keeps {sliding} tokens, more than its window {config.sliding_window}")
        return 1
    print(f"the sliding_attention layer keeps {sliding} tokens, within its window {config.sliding_window}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
