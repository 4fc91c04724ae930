#!/usr/bin/env python3
"""transformers 5.2-5.10: GLM-MoE-DSA's sparse indexer is not causal under SDPA, and its StaticCache forward raises.

GlmMoeDsaModel builds its mask with create_causal_mask (modeling_glm_moe_dsa.py:790-796 in 5.8.1), which under SDPA
returns None for an unpadded batch (SDPA's is_causal shortcut). The attention then hands the indexer no mask
(indexer_mask None, :398-404), the indexer takes the top-k over every key of the forward, later tokens included
(:223-228), and the attention mask it builds is only that top-k selection (combined_mask = index_mask, :429-433): an
uncached forward lets each position attend to the tokens after it, so its logits at a position change when more
tokens follow (not prefix-stable) and generate(use_cache=False) leaves generate(). Eager gets the 4-D causal mask
and is causal. With a StaticCache the mask covers all max_cache_len slots while the indexer's own key cache holds
the tokens seen, and `index_scores + attention_mask` (:224) raises on the shapes: generate(cache_implementation=
"static") cannot run. 5.11 masks the keys after each query's position when the mask is None
(key_positions > position_ids, modeling_glm_moe_dsa.py:466-469 in 5.11.0) and keeps the indexer's keys in the cache
(past_key_values passed to the indexer, :447-454): both go away. Exit 1 while either is there, 0 otherwise.
"""
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig

TRANSFORMERS = ">=5.2,<5.11"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

DTYPE, SEED, ATTN = "float32", 0, "sdpa"
CONFIG_JSON = '{\n  "attention_bias": false,\n  "attention_dropout": 0.0,\n  "bos_token_id": 0,\n  "eos_token_id": 1,\n  "hidden_act": "silu",\n  "hidden_size": 64,\n  "index_head_dim": 32,\n  "index_n_heads": 32,\n  "index_topk": 4,\n  "indexer_types": [\n    "full",\n    "full"\n  ],\n  "initializer_range": 0.15,\n  "intermediate_size": 128,\n  "kv_lora_rank": 24,\n  "max_position_embeddings": 64,\n  "mlp_layer_types": [\n    "dense",\n    "sparse"\n  ],\n  "model_type": "glm_moe_dsa",\n  "moe_intermediate_size": 64,\n  "n_group": 2,\n  "n_routed_experts": 4,\n  "n_shared_experts": 1,\n  "norm_topk_prob": true,\n  "num_attention_heads": 4,\n  "num_experts_per_tok": 2,\n  "num_hidden_layers": 2,\n  "num_key_value_heads": 4,\n  "pad_token_id": null,\n  "q_lora_rank": 32,\n  "qk_head_dim": 32,\n  "qk_nope_head_dim": 16,\n  "qk_rope_head_dim": 16,\n  "rms_norm_eps": 1e-05,\n  "rope_parameters": {\n    "rope_theta": 10000.0,\n    "rope_type": "default"\n  },\n  "routed_scaling_factor": 2.5,\n  "tie_word_embeddings": false,\n  "topk_group": 1,\n  "transformers_version": "5.8.1",\n  "use_cache": true,\n  "v_head_dim": 16,\n  "vocab_size": 256\n}\n'
SUB_CONFIG, MODEL_CLASS = None, "GlmMoeDsaForCausalLM"
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
def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    model = build()
    tokens = torch.randint(3, model.config.vocab_size, (2, 14), generator=torch.Generator().manual_seed(SEED))
    short = model(input_ids=tokens[:, :6], use_cache=False).logits[:, 5]
    full = model(input_ids=tokens, use_cache=False).logits[:, 5]
    leak = float((short - full).abs().max())
    print(f"sdpa, no cache: logits at position 5 over 6 tokens vs over 14 tokens: max |delta| {leak:.3g}")
    bugs = [f"the uncached SDPA forward is not causal (position 5 changes by {leak:.3g} when 8 tokens follow)"] if leak > 1e-4 else []
    kwargs = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 0, "attention_mask": torch.ones_like(tokens[:, :6])}
    cached = model.generate(tokens[:, :6], **kwargs)[:, 6:]
    uncached = model.generate(tokens[:, :6], use_cache=False, **kwargs)[:, 6:]
    print(f"generate():                {cached.tolist()}\ngenerate(use_cache=False): {uncached.tolist()}")
    try:
        static = model.generate(tokens[:, :6], cache_implementation="static", **kwargs)[:, 6:]
        print(f"generate(static):          {static.tolist()}")
    except RuntimeError as exc:
        bugs.append(f"generate(cache_implementation='static') raised RuntimeError: {exc}")
    for bug in bugs:
        print(f"BUG: {bug}")
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
