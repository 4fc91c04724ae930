#!/usr/bin/env python3
"""DeepSeek-V4 beam search with the cache picks other beams than without it in transformers 5.20 (fixed in 5.23).

DeepseekV4HCACache / DeepseekV4CSACache (modeling_deepseek_v4.py:156-252 in 5.20) keep the compressor's
buffer_kv / buffer_gate / compressed_kv and the CSA overlap states beside the sliding-window K/V but define
no reorder_cache, so beam search's cache.reorder_cache(beam_idx) reorders only the K/V: each beam continues
with another beam's compressed history. 5.23 adds reorder_cache for those states. Exit 1 while the cached
and uncached beams (or their scores) differ.
"""
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig

TRANSFORMERS = "<5.23"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

DTYPE, SEED, BATCH, PROMPT, STEPS, CACHE, ATTN = 'float32', 0, 2, 6, 8, 'dynamic', 'eager'
CONFIG_JSON = '{\n  "attention_bias": false,\n  "attention_dropout": 0.0,\n  "bos_token_id": 0,\n  "compress_rates": {\n    "compressed_sparse_attention": 4,\n    "heavily_compressed_attention": 128\n  },\n  "compress_rope_theta": 160000.0,\n  "eos_token_id": 1,\n  "hc_eps": 1e-06,\n  "hc_mult": 4,\n  "hc_sinkhorn_iters": 20,\n  "head_dim": 16,\n  "hidden_act": "silu",\n  "hidden_size": 64,\n  "index_head_dim": 32,\n  "index_n_heads": 64,\n  "index_topk": 4,\n  "initializer_range": 0.15,\n  "layer_types": [\n    "heavily_compressed_attention",\n    "compressed_sparse_attention",\n    "heavily_compressed_attention"\n  ],\n  "max_position_embeddings": 64,\n  "mlp_bias": false,\n  "mlp_layer_types": [\n    "hash_moe",\n    "moe",\n    "moe"\n  ],\n  "model_type": "deepseek_v4",\n  "moe_intermediate_size": 64,\n  "n_routed_experts": 4,\n  "n_shared_experts": 1,\n  "norm_topk_prob": true,\n  "num_attention_heads": 4,\n  "num_experts_per_tok": 2,\n  "num_hidden_layers": 3,\n  "num_key_value_heads": 1,\n  "num_nextn_predict_layers": 1,\n  "o_groups": 8,\n  "o_lora_rank": 32,\n  "output_router_logits": false,\n  "pad_token_id": null,\n  "partial_rotary_factor": 1.0,\n  "q_lora_rank": 32,\n  "qk_rope_head_dim": 16,\n  "rms_norm_eps": 1e-06,\n  "rope_parameters": {\n    "compress": {\n      "partial_rotary_factor": 1.0,\n      "rope_theta": 160000.0,\n      "rope_type": "default"\n    },\n    "main": {\n      "partial_rotary_factor": 1.0,\n      "rope_theta": 10000.0,\n      "rope_type": "default"\n    }\n  },\n  "rope_theta": 10000.0,\n  "routed_scaling_factor": 1.5,\n  "router_aux_loss_coef": 0.001,\n  "router_jitter_noise": 0.0,\n  "scoring_func": "sqrtsoftplus",\n  "sliding_window": 4,\n  "swiglu_limit": 10.0,\n  "tie_word_embeddings": false,\n  "transformers_version": "5.20.0",\n  "use_cache": true,\n  "vocab_size": 256\n}\n'
SUB_CONFIG, MODEL_CLASS = None, 'DeepseekV4ForCausalLM'
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
    runs = {}
    for use_cache in (True, False):
        config = transformers.GenerationConfig(max_new_tokens=STEPS, min_new_tokens=STEPS, do_sample=False, num_beams=3,
                                               num_return_sequences=3, early_stopping=False, length_penalty=1.0, use_cache=use_cache,
                                               eos_token_id=None, pad_token_id=0, output_scores=True, return_dict_in_generate=True)
        runs[use_cache] = model.generate(prompt, generation_config=config, attention_mask=torch.ones_like(prompt))
    cached, uncached = runs[True], runs[False]
    print("cached   beams", cached.sequences[:, PROMPT:].tolist(), "scores", [round(s, 4) for s in cached.sequences_scores.tolist()])
    print("uncached beams", uncached.sequences[:, PROMPT:].tolist(), "scores", [round(s, 4) for s in uncached.sequences_scores.tolist()])
    delta = float((cached.sequences_scores - uncached.sequences_scores).abs().max())
    same = torch.equal(cached.sequences, uncached.sequences)
    print(f"same beams: {same}; max |score delta| {delta:.3g}")
    return int(not same or delta > 1e-4)


if __name__ == "__main__":
    sys.exit(main())
