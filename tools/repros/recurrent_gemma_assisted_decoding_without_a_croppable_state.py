#!/usr/bin/env python3
"""RecurrentGemma runs assisted decoding and calls its cache croppable in transformers 5.25, though nothing can roll
back its state: generate(assistant_model=...) raises AttributeError, and cache.crop raises TypeError.

RecurrentGemma keeps its conv and recurrent states on its modules (conv1d_state, rg_lru.recurrent_states,
modeling_recurrent_gemma.py:413-454 in 5.25.0), outside the Cache, and its forward returns a CausalLMOutput without
the cache (modeling_recurrent_gemma.py:752-757). Up to 5.24 RecurrentGemmaForCausalLM declares _is_stateful = True
(modeling_recurrent_gemma.py:542 in 5.24.0) and generate() refuses assisted decoding for it in so many words
("assisted generation is not supported with stateful models", generation/utils.py:1885-1890 in 5.24.0); the
linear-attention layers that DynamicCache(config=...) builds for its recurrent blocks say is_croppable False until a
conv state is written (a property, cache_utils.py:1150-1160 in 5.24.0), which RecurrentGemma never does.

5.25 removes _is_stateful from every model and that refusal from generate(), and makes is_croppable a class
attribute, True for every linear-attention layer (LinearAttentionCacheLayerMixin, cache_utils.py:1082 in 5.25.0).
So generate(assistant_model=...) now runs the assisted loop and, after the first verification forward, reads
outputs.cache (generation/utils.py:4103), which RecurrentGemma's output does not have: AttributeError
"'CausalLMOutput' object has no attribute 'cache'". A cache it prefilled reports is_croppable True, and crop(-k)
reads the conv_kernel_size of a layer never written (None; cache_utils.py:1200, and crop(0) at :1194): TypeError.
Were both to pass, crop would still leave the module states as they are. 5.4-5.12 (the first releases whose forward
takes a cache) did not declare _is_stateful yet (5.13 adds it, modeling_recurrent_gemma.py:560 in 5.13.1), so there too
generate(assistant_model=...) runs and reads outputs.past_key_values to crop it (generation/utils.py:3686 in 5.12.1):
AttributeError. Their caches have no is_croppable (5.17), and assisted decoding crops whatever cache it runs with,
with crop(length - k) (generation/utils.py:3686 in 5.12.1): DynamicSlidingWindowLayer.crop, after DynamicLayer.crop
returns early, sets cumulative_length = self.keys.shape[-2] (cache_utils.py:244 in 5.4.0, :274 in 5.8.1, :284 in
5.12.1), and the layers of RecurrentGemma's recurrent blocks are never written (keys None): AttributeError.
Exit 1 when generate(assistant_model=...) does anything but refuse or return greedy generate()'s tokens, or when a
prefilled cache assisted decoding would crop (is_croppable, or where that does not exist yet and generate() does not
refuse, any cache) raises on the release's crop of one token or then leaves decoding off the uncached forward.
"""
import copy
import inspect
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig

TRANSFORMERS = ">=5.4,<5.13 || >=5.25"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

DTYPE, SEED, PROMPT, STEPS, ATTN = 'float32', 0, 6, 8, 'sdpa'
ATOL, RTOL = 1e-05, 3e-05  # kvconform's float32 parity limit: atol + rtol * max|reference logit|
CONFIG_JSON = '{\n  "attention_bias": false,\n  "attention_dropout": 0.0,\n  "attention_window_size": 4,\n  "block_types": [\n    "recurrent",\n    "recurrent",\n    "attention"\n  ],\n  "bos_token_id": 2,\n  "conv1d_width": 4,\n  "eos_token_id": 1,\n  "final_w_init_variance_scale": 0.6666666666666666,\n  "head_dim": 16,\n  "hidden_activation": "gelu_pytorch_tanh",\n  "hidden_size": 64,\n  "intermediate_size": 128,\n  "logits_soft_cap": 30.0,\n  "lru_width": 64,\n  "model_type": "recurrent_gemma",\n  "num_attention_heads": 4,\n  "num_hidden_layers": 3,\n  "num_key_value_heads": 2,\n  "pad_token_id": 0,\n  "rms_norm_eps": 1e-06,\n  "rope_parameters": {\n    "partial_rotary_factor": 0.5,\n    "rope_theta": 10000.0,\n    "rope_type": "default"\n  },\n  "tie_word_embeddings": true,\n  "transformers_version": "5.20.0",\n  "use_cache": true,\n  "vocab_size": 256,\n  "w_init_variance_scale": 0.01\n}\n'
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


def _said(exc: Exception) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


@torch.inference_mode()
def main():
    global SEED
    model = build()
    SEED = 1
    assistant = build()  # a draft model of the same architecture, other seeded weights
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {type(model).__name__} in {DTYPE}")
    prompt = torch.randint(3, 256, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    config = copy.deepcopy(model.generation_config)
    config.update(max_new_tokens=STEPS, min_new_tokens=STEPS, do_sample=False, num_beams=1, eos_token_id=None, pad_token_id=0)
    mask = torch.ones_like(prompt)
    greedy = model.generate(prompt, generation_config=config, attention_mask=mask)[:, PROMPT:]
    bug = refused = False
    try:
        assisted = model.generate(prompt, generation_config=config, attention_mask=mask, assistant_model=assistant)[:, PROMPT:]
    except ValueError as exc:  # generate()'s own refusal (5.24: stateful models)
        print(f"generate(assistant_model=...) refuses: {_said(exc)}")
        refused = True
    except Exception as exc:  # any other exception is the finding
        print(f"generate(assistant_model=...) raised {_said(exc)}")
        bug = True
    else:
        same = torch.equal(assisted, greedy)
        print(f"generate(assistant_model=...) {assisted.tolist()}, greedy generate() {greedy.tolist()}: "
              f"{'the same' if same else 'other'} tokens")
        bug |= not same
    cache = transformers.DynamicCache(config=model.config)
    record = getattr(cache, "activate_past_recording", None)  # as assisted decoding does before its first forward
    if record is not None:  # 5.25 asks the layers to keep the states of the last tokens; before, no argument
        takes_count = any(p.kind is p.VAR_KEYWORD or p.name == "recurrent_states_to_keep"
                          for p in inspect.signature(record).parameters.values())
        record(**({"recurrent_states_to_keep": 1} if takes_count else {}))
    model(input_ids=prompt, use_cache=True, past_key_values=cache)
    flag = getattr(cache, "is_croppable", None)  # 5.17+; before, assisted decoding crops any cache it runs with
    croppable = bool(flag) if flag is not None else not refused
    print(f"after a {PROMPT}-token prefill the cache ({[type(layer).__name__ for layer in cache.layers]}) says "
          f"is_croppable {flag}; assisted decoding {'would' if croppable else 'would not'} crop it")
    if croppable:
        by_count = "tokens_to_remove" in inspect.signature(cache.crop).parameters  # 5.15+: crop(-k); before crop(length - k)
        call = -1 if by_count or flag is not None else cache.get_seq_length() - 1
        try:
            cache.crop(call)
            logits = model(input_ids=prompt[:, -1:], use_cache=True, past_key_values=cache,
                           position_ids=torch.tensor([[PROMPT - 1]])).logits[:, -1]
        except Exception as exc:  # a croppable cache whose crop raises is the finding
            print(f"crop({call}) then re-feeding the cropped token raised {_said(exc)}")
            bug = True
        else:
            reference = model(input_ids=prompt).logits[:, -1]
            delta, limit = float((logits - reference).abs().max()), ATOL + RTOL * float(reference.abs().max())
            print(f"crop({call}) then the cropped token again: |dlogit| {delta:.3g} against the uncached forward (limit {limit:.3g})")
            bug |= delta > limit
    return int(bug)


if __name__ == "__main__":
    sys.exit(main())
