#!/usr/bin/env python3
"""transformers 5.5-5.9: a config with num_kv_shared_layers=0 (every Gemma 4 default, and the published 26B-A4B and
31B checkpoints) gets a StaticCache without a single layer, so a static generate() raises IndexError.

Expected (model bug, transformers 5.5.4-5.9.0): StaticCache.__init__ drops the KV-shared layers with
`layer_types = layer_types[: -config.num_kv_shared_layers]` whenever the config has the attribute (cache_utils.py:1351-1352
in 5.5.4, :1395-1396 in 5.9.0); with 0 that slice is `[:-0]`, the empty list, so the cache holds no layer and the first
attention layer's `past_key_values.update(...)` (modeling_gemma4.py:1224 in 5.5.4) reads `self.layers[layer_idx]` of an
empty list (cache_utils.py:937 in 5.5.4): IndexError, in generate(cache_implementation="static") and in a forward on
StaticCache(config=...). 5.10 slices only when the count is > 0 (`if num_kv_shared_layers > 0`, cache_utils.py:1396-1397
in 5.10.4). (The DynamicCache's same slice stays until 5.14: dynamic_cache_zero_kv_shared_layers_builds_no_sliding_layers.py.)
Exit 1 while StaticCache(config) builds no layer or static generate() raises or parts from the dynamic one; 0 when it
builds one layer per decoder layer and picks the dynamic cache's tokens.
"""
import sys

import torch
import transformers
from transformers import Gemma4ForCausalLM, Gemma4TextConfig

TRANSFORMERS = ">=5.5,<5.10"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


@torch.inference_mode()
def main() -> int:
    config = Gemma4TextConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
                              layer_types=["sliding_attention", "full_attention"], sliding_window=4,
                              hidden_size_per_layer_input=0, vocab_size_per_layer_input=256, num_kv_shared_layers=0,
                              pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = Gemma4ForCausalLM(config).eval()
    cache = transformers.StaticCache(config=config, max_cache_len=16)
    print(f"transformers {transformers.__version__}: num_kv_shared_layers=0, layer_types {config.layer_types}; "
          f"StaticCache(config) holds {len(cache.layers)} layers {[type(layer).__name__ for layer in cache.layers]}")
    bad = len(cache.layers) != config.num_hidden_layers
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    runs = {}
    for implementation in (None, "static"):
        try:
            runs[implementation] = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6,
                                                  do_sample=False, pad_token_id=0, cache_implementation=implementation)
        except Exception as exc:  # the raise is the finding
            print(f"generate(cache_implementation={implementation!r}) raised {type(exc).__name__}: {exc}")
    bad = bad or len(runs) < 2 or not torch.equal(runs[None], runs["static"])
    if len(runs) == 2:
        print(f"static generate() against the dynamic one: the same tokens {torch.equal(runs[None], runs['static'])}")
    print("BUG: Gemma 4's static cache has no layers" if bad else "ok: Gemma 4's static cache runs")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
