#!/usr/bin/env python3
"""transformers 5.11-5.16: the DSA indexer (GLM-MoE-DSA, DeepSeek-V3.2) treats SDPA's boolean mask as a float mask.

Under SDPA the causal/padding mask is boolean (True = attend). GlmMoeDsaIndexer adds it to its float scores
(``index_scores = index_scores + attention_mask``, modeling_glm_moe_dsa.py:246-247 in 5.16.1), which raises every allowed
key by 1 and leaves the masked ones (later tokens, left padding, a StaticCache's unwritten slots) in the top-k; then
the attention folds the selection into the mask with ``attention_mask.masked_fill(index_mask, finfo.min)`` (:459),
which on a boolean mask writes True: every key the indexer did not pick becomes visible, later tokens included. So
wherever SDPA gets a materialised mask (a padded batch, the static cache, a forward of several tokens over a cache)
the model attends to the wrong keys: a left-padded row's logits leave the same row unpadded, and
generate(cache_implementation="static") leaves generate(). Eager attention gets a float mask and is right. 5.17 masks
with ``masked_fill(~attention_mask, -inf)`` and ``attention_mask & ~index_mask`` for boolean masks
(modeling_glm_moe_dsa.py:247-250, :453-454 in 5.17.0). deepseek_v32 (new in 5.11) has the same code.
Also shown, 5.11.0 only: assisted decoding builds its DynamicCache without the config (cache_implementation
"dynamic_full", generation/utils.py:1894-1909, 1941 in 5.11.0), so plain DynamicLayers, and the indexer's
past_key_values.update_indexer refuses them (ValueError); 5.12 passes the config.
Exit 1 while either model shows either, 0 otherwise.
"""
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig

TRANSFORMERS = ">=5.11,<5.17"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

DTYPE, SEED, ATTN = "float32", 0, "sdpa"
ZERO_INIT_STD = 0.15
SUB_CONFIG = None
MODELS = {
    "GlmMoeDsaForCausalLM": '{\n  "attention_bias": false,\n  "attention_dropout": 0.0,\n  "bos_token_id": 0,\n  "eos_token_id": 1,\n  "first_k_dense_replace": 1,\n  "head_dim": 16,\n  "hidden_act": "silu",\n  "hidden_size": 64,\n  "index_head_dim": 32,\n  "index_n_heads": 32,\n  "index_topk": 4,\n  "indexer_types": [\n    "full",\n    "full"\n  ],\n  "initializer_range": 0.15,\n  "intermediate_size": 128,\n  "kv_lora_rank": 24,\n  "layer_types": [\n    "deepseek_sparse_attention",\n    "deepseek_sparse_attention"\n  ],\n  "max_position_embeddings": 64,\n  "mlp_bias": false,\n  "mlp_layer_types": [\n    "dense",\n    "sparse"\n  ],\n  "model_type": "glm_moe_dsa",\n  "moe_intermediate_size": 64,\n  "n_group": 2,\n  "n_routed_experts": 4,\n  "n_shared_experts": 1,\n  "norm_topk_prob": true,\n  "num_attention_heads": 4,\n  "num_experts_per_tok": 2,\n  "num_hidden_layers": 2,\n  "num_key_value_heads": 4,\n  "pad_token_id": null,\n  "q_lora_rank": 32,\n  "qk_head_dim": 32,\n  "qk_nope_head_dim": 16,\n  "qk_rope_head_dim": 16,\n  "rms_norm_eps": 1e-05,\n  "rope_parameters": {\n    "rope_theta": 10000.0,\n    "rope_type": "default"\n  },\n  "routed_scaling_factor": 2.5,\n  "tie_word_embeddings": false,\n  "topk_group": 1,\n  "transformers_version": "5.16.1",\n  "use_cache": true,\n  "v_head_dim": 16,\n  "vocab_size": 256\n}\n',
    "DeepseekV32ForCausalLM": '{\n  "attention_bias": false,\n  "attention_dropout": 0.0,\n  "bos_token_id": 0,\n  "eos_token_id": 1,\n  "first_k_dense_replace": 1,\n  "head_dim": 16,\n  "hidden_act": "silu",\n  "hidden_size": 64,\n  "index_head_dim": 32,\n  "index_n_heads": 64,\n  "index_topk": 4,\n  "initializer_range": 0.15,\n  "intermediate_size": 128,\n  "kv_lora_rank": 24,\n  "layer_types": [\n    "deepseek_sparse_attention",\n    "deepseek_sparse_attention"\n  ],\n  "max_position_embeddings": 64,\n  "mlp_bias": false,\n  "mlp_layer_types": [\n    "dense",\n    "sparse"\n  ],\n  "model_type": "deepseek_v32",\n  "moe_intermediate_size": 64,\n  "n_group": 2,\n  "n_routed_experts": 4,\n  "n_shared_experts": 1,\n  "norm_topk_prob": true,\n  "num_attention_heads": 4,\n  "num_experts_per_tok": 2,\n  "num_hidden_layers": 2,\n  "num_key_value_heads": 4,\n  "pad_token_id": null,\n  "q_lora_rank": 32,\n  "qk_head_dim": 32,\n  "qk_nope_head_dim": 16,\n  "qk_rope_head_dim": 16,\n  "rms_norm_eps": 1e-06,\n  "rope_parameters": {\n    "rope_theta": 10000.0,\n    "rope_type": "default"\n  },\n  "routed_scaling_factor": 2.5,\n  "tie_word_embeddings": false,\n  "topk_group": 1,\n  "transformers_version": "5.16.1",\n  "use_cache": true,\n  "v_head_dim": 16,\n  "vocab_size": 256\n}\n',
}


def build(config_json, class_name):
    """The model as kvconform builds it: seeded float32 weights, then from_pretrained(dtype=...) as users load."""
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "config.json"), "w") as handle:
            handle.write(config_json)
        config = AutoConfig.from_pretrained(folder)
    torch.manual_seed(SEED)
    model_class = getattr(transformers, class_name)
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
def shows_it(class_name: str) -> bool:
    model = build(MODELS[class_name], class_name)
    tokens = torch.randint(3, model.config.vocab_size, (2, 6), generator=torch.Generator().manual_seed(SEED))
    padded = torch.cat([torch.zeros(2, 2, dtype=torch.long), tokens], dim=1)
    mask = torch.cat([torch.zeros(2, 2, dtype=torch.long), torch.ones_like(tokens)], dim=1)
    plain = model(input_ids=tokens, attention_mask=torch.ones_like(tokens)).logits[:, -1]
    left = model(input_ids=padded, attention_mask=mask).logits[:, -1]
    padding = float((plain - left).abs().max())
    kwargs = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 0, "attention_mask": torch.ones_like(tokens)}
    dynamic = model.generate(tokens, **kwargs)[:, 6:]
    static = model.generate(tokens, cache_implementation="static", **kwargs)[:, 6:]
    print(f"{class_name}: last-position logits, 2 masked pad columns vs none: max |delta| {padding:.3g}")
    print(f"  generate():                                {dynamic.tolist()}")
    print(f"  generate(cache_implementation='static'):   {static.tolist()}")
    try:
        model.generate(tokens[:1], assistant_model=model, **{**kwargs, "attention_mask": torch.ones_like(tokens[:1])})
        refused = False
    except ValueError as exc:
        refused = "update_indexer" in str(exc)
        print(f"  generate(assistant_model=...) raised ValueError: {exc}")
    return padding > 1e-4 or not torch.equal(dynamic, static) or refused


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    shown = [name for name in MODELS if hasattr(transformers, name) and shows_it(name)]
    for name in shown:
        print(f"BUG: {name}: the indexer mishandles SDPA's boolean mask, or assisted decoding's cache has no indexer layers")
    return 1 if shown else 0


if __name__ == "__main__":
    sys.exit(main())
