#!/usr/bin/env python3
"""Reproduce kvconform cell lfm2[float32-cpu-static], check parity, with torch and transformers only.

No known failure is recorded for this cell.
Prefill 6 seeded random tokens (batch 2), decode 8 greedy steps feeding the model's own cache
back, and compare every step's logits with ONE uncached forward over the whole sequence
(causality makes its logits at position t the reference for the step that predicted token t+1).
Exit 1 when some step differs by more than atol + rtol * max|reference logit| (or the model raises), else 0.
"""
import inspect
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig, StaticCache

TRANSFORMERS = ">=5.24"  # StaticLayer has no crop before 5.24 (a StaticCache cannot be rolled back there)

DTYPE, SEED, BATCH, PROMPT, STEPS, CACHE, ATTN = 'float32', 0, 2, 6, 8, 'static', 'sdpa'
ATOL, RTOL = 1e-05, 3e-05
CHECK = 'parity'
CONFIG_JSON = '{\n  "block_auto_adjust_ff_dim": true,\n  "block_ffn_dim_multiplier": 1.0,\n  "block_multiple_of": 256,\n  "bos_token_id": 1,\n  "conv_L_cache": 3,\n  "conv_bias": false,\n  "eos_token_id": 2,\n  "full_attn_idxs": [\n    1\n  ],\n  "hidden_size": 64,\n  "initializer_range": 0.15,\n  "intermediate_size": 128,\n  "layer_types": [\n    "conv",\n    "full_attention"\n  ],\n  "max_position_embeddings": 64,\n  "model_type": "lfm2",\n  "norm_eps": 1e-05,\n  "num_attention_heads": 4,\n  "num_hidden_layers": 2,\n  "num_key_value_heads": 2,\n  "pad_token_id": 0,\n  "rope_parameters": {\n    "rope_theta": 1000000.0,\n    "rope_type": "default"\n  },\n  "tie_word_embeddings": true,\n  "transformers_version": "5.24.0",\n  "use_cache": true,\n  "vocab_size": 256\n}\n'
SUB_CONFIG, MODEL_CLASS = None, 'Lfm2ForCausalLM'
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
    """Prefill PROMPT+3 tokens into a StaticCache recording its past (as assisted decoding does), crop(-3), decode the
    same tokens again one by one and compare with one uncached pass."""
    from transformers.cache_utils import LinearAttentionCacheLayerMixin

    model = build()
    keyword = next(k for k in ("cache", "past_key_values") if k in inspect.signature(model.forward).parameters)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    ids = torch.randint(3, max(4, min(vocab, 32000)), (BATCH, PROMPT + STEPS), generator=torch.Generator().manual_seed(SEED))
    with torch.inference_mode():
        cache = StaticCache(config=model.config, max_cache_len=PROMPT + STEPS)
        cache.activate_past_recording()
        model(input_ids=ids[:, : PROMPT + 3], use_cache=True, **{keyword: cache})
        for layer in cache.layers:
            print(f"{type(layer).__name__}.crop is LinearAttentionCacheLayerMixin.crop: {type(layer).crop is LinearAttentionCacheLayerMixin.crop}")
        cache.crop(-3)
        print("get_seq_length() after crop(-3):", int(cache.get_seq_length()), f"(expected {PROMPT});",
              "cache.is_compileable while recording:", cache.is_compileable, "(a fresh StaticCache: True)")
        reference = model(input_ids=ids, use_cache=False).logits.float()
        deltas = []
        for position in range(PROMPT, PROMPT + STEPS):
            logits = model(input_ids=ids[:, position : position + 1], use_cache=True, **{keyword: cache}).logits[:, -1].float()
            cache.crop(0)
            deltas.append(float((logits - reference[:, position]).abs().max()))
    return verdict(deltas, float(reference[:, PROMPT:].abs().max()))

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
