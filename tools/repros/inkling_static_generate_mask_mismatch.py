#!/usr/bin/env python3
"""Reproduce kvconform cell inkling2_text[float32-cpu-static-eager], check parity, with torch and transformers only.

No known failure is recorded for this cell.
Prefill 6 seeded random tokens (batch 2), decode 8 greedy steps feeding the model's own cache
back, and compare every step's logits with ONE uncached forward over the whole sequence
(causality makes its logits at position t the reference for the step that predicted token t+1).
Exit 1 when some step differs by more than atol + rtol * max|reference logit| (or the model raises), else 0.
"""
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig

TRANSFORMERS = ">=5.23"  # inkling2_text is a model type from 5.23 on

DTYPE, SEED, BATCH, PROMPT, STEPS, CACHE, ATTN = 'float32', 0, 2, 6, 8, 'static', 'eager'
ATOL, RTOL = 1e-05, 3e-05
CHECK = 'parity'
CONFIG_JSON = '{\n  "attention_dropout": 0.0,\n  "bos_token_id": null,\n  "conv_kernel_size": 4,\n  "d_rel": 16,\n  "eos_token_id": 255,\n  "final_logit_softcapping": 30.0,\n  "head_dim": 16,\n  "hidden_act": "silu",\n  "hidden_size": 64,\n  "initializer_range": 0.15,\n  "layer_types": [\n    "hybrid_sliding",\n    "hybrid"\n  ],\n  "log_scaling_alpha": 0.1,\n  "log_scaling_n_floor": 128000,\n  "max_position_embeddings": 64,\n  "mlp_gate_softcap": 4.0,\n  "mlp_up_softcap": 25.0,\n  "model_type": "inkling2_text",\n  "moe_intermediate_size": 64,\n  "n_layers_per_attn_res_block": 6,\n  "n_routed_experts": 4,\n  "num_attention_heads": 4,\n  "num_experts_per_tok": 2,\n  "num_hidden_layers": 2,\n  "num_key_value_heads": 2,\n  "pad_token_id": null,\n  "qk_l2_clip_threshold": 22.627416997969522,\n  "rel_extent": 1024,\n  "rel_l2_clip_threshold": 8.0,\n  "rms_norm_eps": 1e-06,\n  "route_scale": 8.0,\n  "scoring_func": "sigmoid",\n  "sliding_window_size": 4,\n  "swa_head_dim": 16,\n  "swa_num_attention_heads": 4,\n  "swa_num_key_value_heads": 2,\n  "transformers_version": "5.24.0",\n  "unpadded_vocab_size": 256,\n  "use_cache": true,\n  "vocab_size": 256\n}\n'
SUB_CONFIG, MODEL_CLASS = None, 'Inkling2ForCausalLM'
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
    # kvconform gives all-zero weights (not biases) seeded noise, so selections do not tie (see kvconform/synthetic.py).
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


def forward(model, keyword, cache, **inputs):
    """A use_cache forward; a model that returns no cache object gets an explicit DynamicCache."""
    output = model(use_cache=True, **inputs, **({keyword: cache} if cache is not None else {}))
    returned = getattr(output, "cache", None) or getattr(output, "past_key_values", None) or cache
    if returned is None:
        returned = transformers.DynamicCache(config=model.config)
        output = model(use_cache=True, **inputs, **{keyword: returned})
    return returned, output


@torch.inference_mode()
def main():
    """generate(cache_implementation="static") with a plain GenerationConfig, as users call it."""
    model = build()
    vocab = model.config.get_text_config(decoder=True).vocab_size
    prompt = torch.randint(3, max(4, min(vocab, 32000)), (BATCH, PROMPT), generator=torch.Generator().manual_seed(SEED))
    config = transformers.GenerationConfig(max_new_tokens=STEPS, min_new_tokens=STEPS, do_sample=False, eos_token_id=None,
                                           pad_token_id=0, cache_implementation="static")
    try:
        model.generate(prompt, generation_config=config, attention_mask=torch.ones_like(prompt))
    except Exception as exc:  # the bug: generate() itself raises
        print(f"generate(cache_implementation='static') raised {type(exc).__name__}: {exc}")
        return 1
    print("generate() ran")
    return 0

def verdict(deltas, scale):
    """Print every step's max |Δ| against the limit; 1 when some step is over it."""
    limit = ATOL + RTOL * scale
    for k, delta in enumerate(deltas):
        print(f"step {k} ({'prefill' if k == 0 else 'decode'}): max |cached - uncached| = {delta:.3g}{'  > limit' if delta > limit else ''}")
    worst = max(deltas)
    print(f"worst {worst:.3g} vs limit {limit:.3g} ({DTYPE}: {ATOL:g} + {RTOL:g} * max|logit| {scale:.3g})")
    return 1 if worst > limit else 0


if __name__ == "__main__":
    sys.exit(main())
