#!/usr/bin/env python3
"""Reproduce kvconform cell recurrent_gemma[float32-cpu-dynamic], check parity, with torch and transformers only.

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

DTYPE, SEED, BATCH, PROMPT, STEPS, CACHE, ATTN = 'float32', 0, 2, 6, 8, 'dynamic', 'sdpa'
ATOL, RTOL = 1e-05, 3e-05
CHECK = 'parity'
CONFIG_JSON = '{\n  "attention_bias": false,\n  "attention_dropout": 0.0,\n  "attention_window_size": 4,\n  "block_types": [\n    "recurrent",\n    "recurrent",\n    "attention"\n  ],\n  "bos_token_id": 2,\n  "conv1d_width": 4,\n  "eos_token_id": 1,\n  "final_w_init_variance_scale": 0.6666666666666666,\n  "head_dim": 16,\n  "hidden_activation": "gelu_pytorch_tanh",\n  "hidden_size": 64,\n  "intermediate_size": 128,\n  "logits_soft_cap": 30.0,\n  "lru_width": 64,\n  "model_type": "recurrent_gemma",\n  "num_attention_heads": 4,\n  "num_hidden_layers": 3,\n  "num_key_value_heads": 2,\n  "pad_token_id": 0,\n  "rms_norm_eps": 1e-06,\n  "rope_parameters": {\n    "partial_rotary_factor": 0.5,\n    "rope_theta": 10000.0,\n    "rope_type": "default"\n  },\n  "tie_word_embeddings": true,\n  "transformers_version": "5.24.0",\n  "use_cache": true,\n  "vocab_size": 256,\n  "w_init_variance_scale": 0.01\n}\n'
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
    """Beam search (3 beams, 3 returned) with and without the cache: the beams and their scores must agree."""
    torch.manual_seed(SEED)
    model = build()
    vocab = model.config.get_text_config(decoder=True).vocab_size
    prompt = torch.randint(3, max(4, min(vocab, 32000)), (BATCH, PROMPT), generator=torch.Generator().manual_seed(SEED))
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
