#!/usr/bin/env python3
"""RecurrentGemma's config-built caches report length 0 in transformers 5.18 to 5.23 (5.17 and 5.24 are right).

5.18 removed RecurrentGemmaModel.forward's rebinding of get_seq_length/get_mask_sizes to the first attention
layer (modeling_recurrent_gemma.py:670-677 in 5.17.0); 5.18.0 derives position_ids from get_seq_length()
(modeling_recurrent_gemma.py:663-664 in 5.18.0).

DynamicCache(config=...) and StaticCache(config=...) give RecurrentGemma an attention layer for its layer 0,
a recurrent block that never stores a token, so get_seq_length() (layer 0) stays 0 after the prefill. The
model derives position_ids from it (modeling_recurrent_gemma.py:650-652 in 5.20), and for a static cache
generate() builds the 4-D masks from it (generation/utils.py:721-738), so greedy generate() with
cache_implementation="static" picks other tokens than without the cache. 5.24 types the cache layers by
the model's layer types. Exit 1 while get_seq_length() is 0 after a prefill or the static generate() differs.
"""
import copy
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig, StaticCache

TRANSFORMERS = ">=5.18,<5.24"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

DTYPE, SEED, BATCH, PROMPT, STEPS, CACHE, ATTN = 'float32', 0, 2, 6, 8, 'static', 'sdpa'
CONFIG_JSON = '{\n  "attention_bias": false,\n  "attention_dropout": 0.0,\n  "attention_window_size": 4,\n  "block_types": [\n    "recurrent",\n    "recurrent",\n    "attention"\n  ],\n  "bos_token_id": 2,\n  "conv1d_width": 4,\n  "eos_token_id": 1,\n  "final_w_init_variance_scale": 0.6666666666666666,\n  "head_dim": 16,\n  "hidden_activation": "gelu_pytorch_tanh",\n  "hidden_size": 64,\n  "intermediate_size": 128,\n  "logits_soft_cap": 30.0,\n  "lru_width": 64,\n  "model_type": "recurrent_gemma",\n  "num_attention_heads": 4,\n  "num_hidden_layers": 3,\n  "num_key_value_heads": 2,\n  "pad_token_id": 0,\n  "rms_norm_eps": 1e-06,\n  "rope_parameters": {\n    "partial_rotary_factor": 0.5,\n    "rope_theta": 10000.0,\n    "rope_type": "default"\n  },\n  "tie_word_embeddings": true,\n  "transformers_version": "5.20.0",\n  "use_cache": true,\n  "vocab_size": 256,\n  "w_init_variance_scale": 0.01\n}\n'
SUB_CONFIG, MODEL_CLASS = None, 'RecurrentGemmaForCausalLM'
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
    lengths = {}
    for name, cache in (("DynamicCache", transformers.DynamicCache(config=model.config)),
                        ("StaticCache", StaticCache(config=model.config, max_cache_len=PROMPT + STEPS))):
        model(input_ids=prompt, use_cache=True, past_key_values=cache)
        lengths[name] = cache.get_seq_length()
        print(f"{name}(config=...): get_seq_length() after a {PROMPT}-token prefill = {lengths[name]}")
    runs = {}
    for use_cache in (True, False):
        config = copy.deepcopy(model.generation_config)
        config.update(max_new_tokens=STEPS, min_new_tokens=STEPS, do_sample=False, num_beams=1, use_cache=use_cache,
                      eos_token_id=None, pad_token_id=0, **({"cache_implementation": "static"} if use_cache else {}))
        runs[use_cache] = model.generate(prompt, generation_config=config, attention_mask=torch.ones_like(prompt))[:, PROMPT:]
    print(f"generate(cache_implementation='static') {runs[True].tolist()}")
    print(f"generate(use_cache=False)               {runs[False].tolist()}")
    return int(any(length != PROMPT for length in lengths.values()) or not torch.equal(runs[True], runs[False]))


if __name__ == "__main__":
    sys.exit(main())
