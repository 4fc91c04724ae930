#!/usr/bin/env python3
"""BLOOM with a StaticCache and no attention_mask crashes in transformers 5.20 (fixed in 5.21).

BloomModel.forward builds its ALiBi bias from an all-ones mask of get_seq_length() + new tokens
(modeling_bloom.py:505-510 in 5.20), but a StaticLayer hands attention all max_cache_len keys, so
alibi.baddbmm (modeling_bloom.py:270) cannot broadcast [B*H, 1, P] to [B*H, P, max_cache_len]. Only
generate() pads the 2-D mask to the static length itself (prepare_inputs_for_generation, :598-605).
5.21 builds the bias over cache.get_mask_sizes() instead. Exit 1 while the prefill raises.
"""
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig, StaticCache

TRANSFORMERS = "<5.21"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

DTYPE, SEED, BATCH, PROMPT, STEPS, CACHE, ATTN = 'float32', 0, 2, 6, 8, 'static', 'eager'
CONFIG_JSON = '{\n  "apply_residual_connection_post_layernorm": false,\n  "attention_dropout": 0.0,\n  "bos_token_id": 1,\n  "eos_token_id": 2,\n  "hidden_dropout": 0.0,\n  "hidden_size": 64,\n  "initializer_range": 0.15,\n  "layer_norm_epsilon": 1e-05,\n  "model_type": "bloom",\n  "n_head": 4,\n  "n_layer": 2,\n  "pad_token_id": null,\n  "pretraining_tp": 1,\n  "slow_but_exact": false,\n  "tie_word_embeddings": true,\n  "transformers_version": "5.20.0",\n  "use_cache": true,\n  "vocab_size": 256\n}\n'
SUB_CONFIG, MODEL_CLASS = None, 'BloomForCausalLM'
ZERO_INIT_STD = 0.15


def build():
    """The model as kvconform builds it: seeded float32 weights, then from_pretrained(dtype=...) as users load."""
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "config.json"), "w") as handle:
            handle.write(CONFIG_JSON)
        config = AutoConfig.from_pretrained(folder)
    torch.manual_seed(SEED)
    model_class = getattr(transformers, MODEL_CLASS)
    if SUB_CONFIG:  # a composite config whose causal-LM class takes one of its sub-configs
        model = model_class._from_config(getattr(config, SUB_CONFIG), dtype=torch.float32)
    else:
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # kvconform gives all-zero weights (not biases) seeded noise, so selections do not tie (see kvconform/build/synthetic.py).
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.numel() > 1 and param.is_floating_point() and not name.endswith("bias") and not param.any():
                param.copy_(torch.randn(param.shape, generator=generator) * ZERO_INIT_STD)
    model = model.float().eval()
    if DTYPE != "float32":
        with tempfile.TemporaryDirectory() as folder:
            model.save_pretrained(folder)
            model = model_class.from_pretrained(folder, dtype=getattr(torch, DTYPE)).eval()
    if model.config._attn_implementation != ATTN:  # the cell's attention implementation, as users switch it
        model.set_attn_implementation(ATTN)
    return model


@torch.inference_mode()
def main():
    model = build()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {type(model).__name__} in {DTYPE}")
    prompt = torch.randint(3, 256, (BATCH, PROMPT), generator=torch.Generator().manual_seed(SEED))
    cache = StaticCache(config=model.config, max_cache_len=PROMPT + STEPS)
    try:
        model(input_ids=prompt, use_cache=True, past_key_values=cache)
    except RuntimeError as error:
        print(f"prefill with StaticCache(max_cache_len={PROMPT + STEPS}) and no attention_mask raised RuntimeError: {error}")
        return 1
    print("the StaticCache prefill without an attention_mask runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
