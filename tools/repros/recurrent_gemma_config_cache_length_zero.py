#!/usr/bin/env python3
"""RecurrentGemma's config-built caches report length 0 in transformers 5.18 to 5.22 and again from 5.25 (5.17, 5.23
and 5.24 are right).

5.18 removed RecurrentGemmaModel.forward's rebinding of get_seq_length/get_mask_sizes to the first attention
layer (modeling_recurrent_gemma.py:670-677 in 5.17.0); 5.18.0 derives position_ids from get_seq_length()
(modeling_recurrent_gemma.py:663-664 in 5.18.0).

DynamicCache(config=...) and StaticCache(config=...) give RecurrentGemma an attention layer for its layer 0,
a recurrent block that never stores a token, so get_seq_length() (layer 0) stays 0 after the prefill. The
model derives position_ids from it (modeling_recurrent_gemma.py:650-652 in 5.20), and for a static cache
generate() builds the 4-D masks from it (generation/utils.py:721-738), so greedy generate() with
cache_implementation="static" picks other tokens than without the cache, and generate() continued from the cache
it returned (past_key_values=...) raises RuntimeError on the mask shape (5.18.0-5.22.2). 5.23 types the cache layers
by the model's layer types (layers_block_type names the blocks linear_attention / sliding_attention,
configuration_recurrent_gemma.py:99-102 in 5.23.0), and Cache.get_seq_length() falls back from a linear-attention
layer 0 to the first attention layer (cache_utils.py:1711-1721 in 5.23.0, :1760-1777 in 5.24.0).

5.25 brings the length 0 back another way: it drops that fallback (Cache.get_seq_length returns
layers[0].get_seq_length(), cache_utils.py:1811-1815 in 5.25.0) and gives linear-attention layers a count of
their own, cumulative_length_linear (cache_utils.py:1096, :1213-1214), advanced only by update_conv_state
(:1281-1283) and increase_count (:1216-1222). RecurrentGemma's layer 0 is such a layer (config.layer_types maps
"recurrent" blocks to "linear_attention", configuration_recurrent_gemma.py:100-102), but the model keeps its conv
and recurrent states on its modules (modeling_recurrent_gemma.py:413-454) and calls neither, so get_seq_length()
is 0 after any number of tokens. A forward without position_ids then numbers its tokens from 0
(modeling_recurrent_gemma.py:653-656 in 5.25.0), and position 0 resets the RG-LRU state (:307): a decode loop
feeding the cache back, model(input_ids=next_token, past_key_values=cache), gives other logits than the uncached
forward from its first step (|dlogit| 0.12 there, 0.24 at worst over 8 steps here). generate() hands the model position_ids made from the attention
mask (generation/utils.py:2890-2893, 911-925) and 5.25's get_mask_sizes still falls back to the first attention
layer (cache_utils.py:1874-1884), so its tokens are right; a continued generate() re-feeds its whole sequence
(past_length 0, generation/utils.py:4321-4336). Exit 1 while get_seq_length() is 0 after a prefill, the static
generate() differs, the continued generate() raises, or the decode loop's logits leave the uncached forward's.
"""
import copy
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig, StaticCache

TRANSFORMERS = ">=5.18,<5.23 || >=5.25"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

DTYPE, SEED, BATCH, PROMPT, STEPS, CACHE, ATTN = 'float32', 0, 2, 6, 8, 'static', 'sdpa'
CONFIG_JSON = '{\n  "attention_bias": false,\n  "attention_dropout": 0.0,\n  "attention_window_size": 4,\n  "block_types": [\n    "recurrent",\n    "recurrent",\n    "attention"\n  ],\n  "bos_token_id": 2,\n  "conv1d_width": 4,\n  "eos_token_id": 1,\n  "final_w_init_variance_scale": 0.6666666666666666,\n  "head_dim": 16,\n  "hidden_activation": "gelu_pytorch_tanh",\n  "hidden_size": 64,\n  "intermediate_size": 128,\n  "logits_soft_cap": 30.0,\n  "lru_width": 64,\n  "model_type": "recurrent_gemma",\n  "num_attention_heads": 4,\n  "num_hidden_layers": 3,\n  "num_key_value_heads": 2,\n  "pad_token_id": 0,\n  "rms_norm_eps": 1e-06,\n  "rope_parameters": {\n    "partial_rotary_factor": 0.5,\n    "rope_theta": 10000.0,\n    "rope_type": "default"\n  },\n  "tie_word_embeddings": true,\n  "transformers_version": "5.20.0",\n  "use_cache": true,\n  "vocab_size": 256,\n  "w_init_variance_scale": 0.01\n}\n'
SUB_CONFIG, MODEL_CLASS = None, 'RecurrentGemmaForCausalLM'
ATOL, RTOL = 1e-05, 3e-05  # kvconform's float32 parity limit: atol + rtol * max|reference logit|
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
    # generate() continued from the cache it returned, as users continue a conversation.
    config = copy.deepcopy(model.generation_config)
    config.update(max_new_tokens=4, min_new_tokens=4, do_sample=False, num_beams=1, eos_token_id=None, pad_token_id=0,
                  return_dict_in_generate=True)
    first = model.generate(prompt, generation_config=config, attention_mask=torch.ones_like(prompt))
    try:
        model.generate(first.sequences, generation_config=config, attention_mask=torch.ones_like(first.sequences),
                       past_key_values=first.past_key_values)
        continued = None
    except RuntimeError as exc:
        continued = f"{type(exc).__name__}: {exc}"
    print(f"generate() continued from the cache it returned: {continued or 'runs'}")
    # A decode loop as users write one: prefill, then feed each greedy token with the cache (no position_ids).
    cache = transformers.DynamicCache(config=model.config)
    logits = model(input_ids=prompt, use_cache=True, past_key_values=cache).logits[:, -1]
    sequence, worst, limit = prompt, 0.0, 0.0
    for _ in range(STEPS):
        sequence = torch.cat([sequence, logits.argmax(-1, keepdim=True)], dim=1)
        logits = model(input_ids=sequence[:, -1:], use_cache=True, past_key_values=cache).logits[:, -1]
        reference = model(input_ids=sequence).logits[:, -1]
        worst = max(worst, float((logits - reference).abs().max()))
        limit = max(limit, ATOL + RTOL * float(reference.abs().max()))
    print(f"decode loop of {STEPS} steps on DynamicCache(config=...): get_seq_length() {int(cache.get_seq_length())} "
          f"(expected {PROMPT + STEPS}), worst |dlogit| against the uncached forward {worst:.3g} (limit {limit:.3g})")
    return int(any(length != PROMPT for length in lengths.values()) or not torch.equal(runs[True], runs[False])
               or continued is not None or worst > limit)


if __name__ == "__main__":
    sys.exit(main())
