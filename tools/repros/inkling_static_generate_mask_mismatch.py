#!/usr/bin/env python3
"""generate() builds the static-cache mask of inkling's "hybrid_sliding" layers as a full causal mask: shapes clash.

Expected (model bug, transformers 5.24): for a compileable (static) cache generate() builds the 4-D masks before the
forward (generation/utils.py:729-748, masking_utils.create_masks_for_generate). The mask function it takes for a
"hybrid_sliding" layer's attention part is create_causal_mask (LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING,
masking_utils.py:1539; "sliding_attention" and the other sliding kinds map to create_sliding_window_causal_mask), so the
sliding layers get a mask over max_cache_len keys while their static sliding layer hands attention its window's keys;
InklingModel's own forward builds that mask with create_sliding_window_causal_mask (modeling_inkling.py:715). The hybrid
static layers themselves are consistent. Eager attention raises "The size of tensor a (6) must match the size of
tensor b (13)" (sdpa its own size error); inkling_text, inkling2_text and inkling2_loop_text share the mapping.
Control: with that one entry mapped to create_sliding_window_causal_mask, generate(cache_implementation="static") runs
and its tokens equal uncached generate()'s.
Exit 1 when generate() raises while the mask generate() builds for the sliding layers is wider than the one the model
builds and the control agrees; 0 when generate() runs; 2 when the control fails (then this script shows nothing).
"""
import inspect
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig, masking_utils

# inkling2_text is a model type from 5.23 on; 5.25.0 builds the masks right (exits 0). On 5.23.0 the mask of every layer
# takes the sliding layer's sizes (static_hybrid_full_layer_counted_as_linear.py), so the sliding layers' generate() mask
# is not wider there and the control raises on the full layer: this script exits 2 (shows nothing) on 5.23.0.
TRANSFORMERS = ">=5.24,<5.25"

SEED, BATCH, PROMPT, STEPS, ATTN = 0, 2, 6, 8, "eager"
ZERO_INIT_STD = 0.15

CONFIG_JSON = '{\n  "attention_dropout": 0.0,\n  "bos_token_id": null,\n  "conv_kernel_size": 4,\n  "d_rel": 16,\n  "eos_token_id": 255,\n  "final_logit_softcapping": 30.0,\n  "head_dim": 16,\n  "hidden_act": "silu",\n  "hidden_size": 64,\n  "initializer_range": 0.15,\n  "layer_types": [\n    "hybrid_sliding",\n    "hybrid"\n  ],\n  "log_scaling_alpha": 0.1,\n  "log_scaling_n_floor": 128000,\n  "max_position_embeddings": 64,\n  "mlp_gate_softcap": 4.0,\n  "mlp_up_softcap": 25.0,\n  "model_type": "inkling2_text",\n  "moe_intermediate_size": 64,\n  "n_layers_per_attn_res_block": 6,\n  "n_routed_experts": 4,\n  "num_attention_heads": 4,\n  "num_experts_per_tok": 2,\n  "num_hidden_layers": 2,\n  "num_key_value_heads": 2,\n  "pad_token_id": null,\n  "qk_l2_clip_threshold": 22.627416997969522,\n  "rel_extent": 1024,\n  "rel_l2_clip_threshold": 8.0,\n  "rms_norm_eps": 1e-06,\n  "route_scale": 8.0,\n  "scoring_func": "sigmoid",\n  "sliding_window_size": 4,\n  "swa_head_dim": 16,\n  "swa_num_attention_heads": 4,\n  "swa_num_key_value_heads": 2,\n  "transformers_version": "5.24.0",\n  "unpadded_vocab_size": 256,\n  "use_cache": true,\n  "vocab_size": 256\n}\n'
ZERO_INIT_STD = 0.15


def build():
    """The shrunk model as kvconform builds it: seeded float32 weights, eval mode, eager attention."""
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "config.json"), "w") as handle:
            handle.write(CONFIG_JSON)
        config = AutoConfig.from_pretrained(folder)
    torch.manual_seed(SEED)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # kvconform gives all-zero weights (not biases) seeded noise, so selections do not tie (see kvconform/synthetic.py).
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.numel() > 1 and param.is_floating_point() and not name.endswith("bias") and not param.any():
                param.copy_(torch.randn(param.shape, generator=generator) * ZERO_INIT_STD)
    model = model.float().eval()
    model.set_attn_implementation(ATTN)
    return model


def generate(model, prompt, use_cache):
    implementation = {"cache_implementation": "static"} if use_cache else {}
    return model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=STEPS, min_new_tokens=STEPS,
                          do_sample=False, eos_token_id=None, pad_token_id=0, use_cache=use_cache, **implementation)


def sliding_mask_widths(model, prompt):
    """Key length of the prefill mask for the sliding layers: generate()'s precomputed one, and the model's own."""
    cache = transformers.StaticCache(config=model.config, max_cache_len=PROMPT + STEPS - 1)
    # the cache's keyword: past_key_values up to 5.23, cache from 5.24
    cache_keyword = "cache" if "cache" in inspect.signature(masking_utils.create_masks_for_generate).parameters \
        else "past_key_values"
    arguments = {"config": model.config, "inputs_embeds": torch.empty((BATCH, PROMPT, 0)),
                 "attention_mask": torch.ones_like(prompt), cache_keyword: cache,
                 "position_ids": torch.arange(PROMPT).expand(BATCH, -1)}
    for_generate = masking_utils.create_masks_for_generate(**arguments)["sliding_attention"]
    own = masking_utils.create_sliding_window_causal_mask(**arguments)
    print(f"static cache layers: {[type(layer).__name__ for layer in cache.layers]}")
    print(f"prefill mask of the sliding layers: generate() builds {tuple(for_generate.shape)}, "
          f"the model's forward {tuple(own.shape)}")
    return for_generate.shape[-1], own.shape[-1]


@torch.inference_mode()
def main():
    model = build()
    prompt = torch.randint(3, model.config.vocab_size, (BATCH, PROMPT), generator=torch.Generator().manual_seed(SEED))
    generated, own = sliding_mask_widths(model, prompt)
    try:
        generate(model, prompt, use_cache=True)
        print("generate(cache_implementation='static') ran")
        return 0
    except RuntimeError as exc:
        print(f"generate(cache_implementation='static') raised RuntimeError: {exc}")
    mapping = masking_utils.LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING["hybrid_sliding"]
    kept = mapping["sliding_attention"]
    mapping["sliding_attention"] = masking_utils.create_sliding_window_causal_mask
    try:
        cached, uncached = generate(model, prompt, use_cache=True), generate(model, prompt, use_cache=False)
    except RuntimeError as exc:
        print(f"control (hybrid_sliding -> create_sliding_window_causal_mask) raised RuntimeError: {exc}")
        return 2
    finally:
        mapping["sliding_attention"] = kept
    same = torch.equal(cached, uncached)
    print(f"control (hybrid_sliding -> create_sliding_window_causal_mask): generate() runs, cached and uncached tokens "
          f"{'agree' if same else 'differ'}")
    if not same:
        return 2
    return 1 if generated > own else 0


if __name__ == "__main__":
    sys.exit(main())
