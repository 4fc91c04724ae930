#!/usr/bin/env python3
"""Inkling's generate() raises in transformers 5.14 on a prompt shorter than its short-convolution kernel.

Expected (model bug, transformers 5.14.x): InklingShortConvolution.forward (modeling_inkling.py:500-542 in 5.14.1)
hands a cached forward's inputs to past_key_values.update_conv_state, which on the first forward (no previous state)
left-pads them with zeros up to conv_kernel_size when they are shorter (cache_utils.py:988-995 in 5.14.1), but it
drops the extra leading outputs only `if use_precomputed_states` (modeling_inkling.py:537-538), which is False on that
first forward: the convolution returns conv_kernel_size (4, the config default) positions, and adding the residual of
the prompt's length raises "The size of tensor a (4) must match the size of tensor b (2)". Every cached forward that
starts a cache with fewer than 4 tokens raises: generate() on a 1-3 token prompt, generate(prefill_chunk_size=2).
5.15 drops the extra outputs whenever a cache is passed (`if past_key_values is not None:`, modeling_inkling.py:538 in
5.15.1); with that one line on 5.14.1 the prompt decodes as without a cache.
A tiny random InklingForCausalLM (conv_kernel_size 4, sliding window 4), a 2-token prompt, greedy generate() of 8
tokens with the cache and without. Exit 1 when the cached generate() raises that size mismatch; 0 when it returns
the uncached tokens; 2 otherwise.
"""
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

TRANSFORMERS = ">=5.14,<5.15"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

CONFIG = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 64,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
          "swa_head_dim": 16, "swa_num_attention_heads": 4, "swa_num_key_value_heads": 2, "d_rel": 16,
          "layer_types": ["hybrid_sliding", "hybrid"], "mlp_layer_types": ["dense", "dense"],
          "sliding_window_size": 4, "conv_kernel_size": 4, "max_position_embeddings": 64,
          "logits_mup_width_multiplier": 1.0, "pad_token_id": 0}


@torch.inference_mode()
def main() -> int:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("inkling_text", **CONFIG)).eval()
    prompt = torch.randint(3, 256, (1, 2), generator=torch.Generator().manual_seed(0))
    settings = {"max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False, "eos_token_id": None, "pad_token_id": 0,
                "attention_mask": torch.ones_like(prompt)}
    uncached = model.generate(prompt, use_cache=False, **settings)
    try:
        cached = model.generate(prompt, **settings)
    except RuntimeError as exc:
        print(f"transformers {transformers.__version__}: generate() on a 2-token prompt raised RuntimeError: {exc}")
        return 1 if "must match the size of tensor" in str(exc) else 2
    same = torch.equal(cached, uncached)
    print(f"transformers {transformers.__version__}: cached generate() {'returns' if same else 'does not return'} the uncached tokens")
    return 0 if same else 2


if __name__ == "__main__":
    sys.exit(main())
