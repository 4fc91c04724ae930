#!/usr/bin/env python3
"""transformers 5.0-5.1: Mllama's text model sizes its causal mask past + new + 1 keys without an attention_mask, so a
cached forward of several tokens raises.

MllamaTextModel._update_causal_mask takes target_length = past_seen_tokens + sequence_length + 1 when no 2-D
attention_mask is given (modeling_mllama.py:893-897 in 5.1.0), one column more than the keys a DynamicCache returns,
and 5.0-5.1's SDPA attention does not cut the mask to the keys: a forward of several tokens over a filled cache (a
prefix extended by 2 tokens at once, a prompt prefilled in chunks) raises RuntimeError on the shapes (a one-token
decode takes SDPA's is_causal shortcut and runs). Bamba and FalconH1 built their masks the same way
(bamba_multi_token_cached_forward_restarts_the_state.py). 5.2 builds the mask with masking_utils.create_causal_mask
(modeling_mllama.py:1163 in 5.2.0), sized by the cache, and the same script exits 0.
Prefill a 4-token prefix, extend the copied cache by 2 tokens at once, decode greedily, and compare every step's logits
with ONE uncached forward. Exit 1 when some step differs by more than atol + rtol * max|reference logit| (or the model
raises), else 0.
"""
import copy
import inspect
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig

TRANSFORMERS = "<5.2"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

DTYPE, SEED, BATCH, PROMPT, STEPS, ATTN = 'float32', 0, 2, 6, 8, 'sdpa'
ATOL, RTOL = 1e-05, 3e-05
CONFIG_JSON = '{\n  "image_token_index": 255,\n  "model_type": "mllama",\n  "text_config": {\n    "bos_token_id": 254,\n    "cross_attention_layers": [\n      1\n    ],\n    "dropout": 0,\n    "eos_token_id": 253,\n    "hidden_act": "silu",\n    "hidden_size": 64,\n    "initializer_range": 0.15,\n    "intermediate_size": 128,\n    "max_position_embeddings": 64,\n    "model_type": "mllama_text_model",\n    "num_attention_heads": 4,\n    "num_hidden_layers": 2,\n    "num_key_value_heads": 2,\n    "pad_token_id": 255,\n    "rms_norm_eps": 1e-05,\n    "rope_parameters": {\n      "rope_theta": 500000.0,\n      "rope_type": "default"\n    },\n    "tie_word_embeddings": false,\n    "use_cache": true,\n    "vocab_size": 256\n  },\n  "transformers_version": "5.1.0",\n  "vision_config": {\n    "attention_heads": 16,\n    "hidden_act": "gelu",\n    "hidden_size": 64,\n    "image_size": 448,\n    "initializer_range": 0.15,\n    "intermediate_layers_indices": [\n      1\n    ],\n    "intermediate_size": 128,\n    "max_num_tiles": 4,\n    "model_type": "mllama_vision_model",\n    "norm_eps": 1e-05,\n    "num_channels": 3,\n    "num_global_layers": 8,\n    "num_hidden_layers": 2,\n    "patch_size": 14,\n    "supported_aspect_ratios": [\n      [\n        1,\n        1\n      ],\n      [\n        1,\n        2\n      ],\n      [\n        1,\n        3\n      ],\n      [\n        1,\n        4\n      ],\n      [\n        2,\n        1\n      ],\n      [\n        2,\n        2\n      ],\n      [\n        3,\n        1\n      ],\n      [\n        4,\n        1\n      ]\n    ],\n    "vision_output_dim": 7680\n  }\n}\n'
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
    model = build()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {type(model).__name__} in {DTYPE}")
    keyword = next(k for k in ("cache", "past_key_values", "cache_params") if k in inspect.signature(model.forward).parameters)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    prompt = torch.randint(3, max(4, min(vocab, 32000)), (BATCH, PROMPT), generator=torch.Generator().manual_seed(SEED))
    total = PROMPT + STEPS
    try:
        cache, output = forward(model, keyword, None, input_ids=prompt)
        logits, sequence = [output.logits[:, -1]], [prompt]
        for _ in range(STEPS):
            token = logits[-1].argmax(-1, keepdim=True)
            sequence.append(token)
            cache, output = forward(model, keyword, cache, input_ids=token)
            logits.append(output.logits[:, -1])
        full = torch.cat(sequence, dim=1)
        # Prefill PROMPT-2 tokens, copy that cache, extend the copy by 2 tokens at once, then decode the same tokens.
        prefix = max(1, PROMPT - 2)
        stored, _ = forward(model, keyword, None, input_ids=full[:, :prefix])
        reused, output = forward(model, keyword, copy.deepcopy(stored), input_ids=full[:, prefix:PROMPT])
        logits = [output.logits[:, -1]]
        for position in range(PROMPT, total):
            reused, output = forward(model, keyword, reused, input_ids=full[:, position : position + 1])
            logits.append(output.logits[:, -1])
        reference = model(input_ids=full, use_cache=False).logits[:, PROMPT - 1 :].float()
    except Exception as exc:  # the crash is the finding
        print(f"the model raised {type(exc).__name__}: {exc}")
        return 1
    return verdict([float((step.float() - reference[:, k]).abs().max()) for k, step in enumerate(logits)],
                   float(reference.abs().max()))


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
