#!/usr/bin/env python3
"""DynamicCache.crop raises on a layer that never stored a token in transformers 5.20 (fixed in 5.22).

A text-only Mllama prompt never writes the cross-attention layers' cache, and DynamicLayer.crop slices
self.keys, which is still None (cache_utils.py:179 in 5.20): TypeError. Assisted decoding rolls the cache
back with exactly this call from 5.14 (generation/utils.py:3816 in 5.14.1; before, with crop(length to keep),
under which the layer returns early). 5.22 returns early when the layer is not initialized. Exit 1 while crop(-3) after a prefill raises.
"""
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig

TRANSFORMERS = ">=5.14,<5.22"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

DTYPE, SEED, BATCH, PROMPT, STEPS, CACHE, ATTN = 'float32', 0, 2, 6, 8, 'dynamic', 'sdpa'
CONFIG_JSON = '{\n  "image_token_index": 255,\n  "model_type": "mllama",\n  "text_config": {\n    "bos_token_id": 255,\n    "cross_attention_layers": [\n      1\n    ],\n    "dropout": 0.0,\n    "eos_token_id": 254,\n    "hidden_act": "silu",\n    "hidden_size": 64,\n    "initializer_range": 0.15,\n    "intermediate_size": 128,\n    "max_position_embeddings": 64,\n    "model_type": "mllama_text_model",\n    "num_attention_heads": 4,\n    "num_hidden_layers": 2,\n    "num_key_value_heads": 2,\n    "pad_token_id": 253,\n    "rms_norm_eps": 1e-05,\n    "rope_parameters": {\n      "rope_theta": 500000.0,\n      "rope_type": "default"\n    },\n    "tie_word_embeddings": false,\n    "use_cache": true,\n    "vocab_size": 256\n  },\n  "transformers_version": "5.20.0",\n  "vision_config": {\n    "attention_heads": 16,\n    "hidden_act": "gelu",\n    "hidden_size": 64,\n    "image_size": 448,\n    "initializer_range": 0.15,\n    "intermediate_layers_indices": [\n      1\n    ],\n    "intermediate_size": 128,\n    "max_num_tiles": 4,\n    "model_type": "mllama_vision_model",\n    "norm_eps": 1e-05,\n    "num_channels": 3,\n    "num_global_layers": 8,\n    "num_hidden_layers": 2,\n    "patch_size": 14,\n    "supported_aspect_ratios": [\n      [\n        1,\n        1\n      ],\n      [\n        1,\n        2\n      ],\n      [\n        1,\n        3\n      ],\n      [\n        1,\n        4\n      ],\n      [\n        2,\n        1\n      ],\n      [\n        2,\n        2\n      ],\n      [\n        3,\n        1\n      ],\n      [\n        4,\n        1\n      ]\n    ],\n    "vision_output_dim": 7680\n  }\n}\n'
SUB_CONFIG, MODEL_CLASS = None, 'MllamaForCausalLM'
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
    prompt = torch.randint(3, 256, (BATCH, PROMPT + 3), generator=torch.Generator().manual_seed(SEED))
    cache = transformers.DynamicCache(config=model.config)
    model(input_ids=prompt, use_cache=True, past_key_values=cache)
    empty = [index for index, layer in enumerate(cache.layers) if not layer.is_initialized]
    print(f"layers that stored nothing after the prefill: {empty}")
    try:
        cache.crop(-3)
    except TypeError as error:
        print(f"cache.crop(-3) raised TypeError: {error}")
        return 1
    print(f"cache.crop(-3) works: length {cache.get_seq_length()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
