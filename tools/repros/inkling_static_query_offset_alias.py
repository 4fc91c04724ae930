#!/usr/bin/env python3
"""Reproduce kvconform cell inkling_text[float32-cpu-static], checks parity and generate, with torch and transformers only.

Expected (model bug): InklingAttention reads q_offset = cache.get_query_offset(layer) before
cache.update (modeling_inkling.py:233) and uses it after (:241); for a StaticLayer that is the
layer's own cumulative_length tensor (cache_utils.py StaticLayer.get_seq_length, :502-504 in 5.24.0
and 5.25.0; 5.25's LinearAttentionAndStaticFullAttentionLayer returns it explicitly, :1451-1452), which
update() increments in place (cache_utils.py:483), so every decoded query of a full-attention layer gets
position + 1 in the relative position bias (Δ 0.42 from decode step 1; the static sliding layers
keep an int and pass). Repro: tools/repros/inkling_static_query_offset_alias.py
Prefill 6 seeded random tokens (batch 2), decode 8 greedy steps feeding the model's own cache
back, and compare every step's logits with ONE uncached forward over the whole sequence
(causality makes its logits at position t the reference for the step that predicted token t+1).
Then the path users run: generate(cache_implementation="static") against uncached generate(). Up to 5.24 that
call raises first, on the masks generate() builds for the "hybrid_sliding" layers (inkling_static_generate_mask_mismatch.py);
5.25 builds them right and its static generate() parts from the uncached one at token 4 (the alias: with
get_query_offset returning an int, the tokens agree).
Exit 1 when some step differs by more than atol + rtol * max|reference logit| (or the model raises), or the static
generate() runs and gives other tokens than the uncached one, else 0.
"""
import copy
import inspect
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig, StaticCache

DTYPE, SEED, BATCH, PROMPT, STEPS, CACHE, ATTN = 'float32', 0, 2, 6, 8, 'static', 'sdpa'
ATOL, RTOL = 1e-05, 3e-05
CHECK = 'parity'
CONFIG_JSON = '{\n  "attention_dropout": 0.0,\n  "bos_token_id": 1,\n  "chain_hidden_post_norm": false,\n  "conv_kernel_size": 4,\n  "d_rel": 16,\n  "eos_token_id": 2,\n  "head_dim": 16,\n  "hidden_act": "silu",\n  "hidden_size": 64,\n  "initializer_range": 0.15,\n  "intermediate_size": 128,\n  "layer_types": [\n    "hybrid_sliding",\n    "hybrid"\n  ],\n  "local_layer_ids": null,\n  "log_scaling_alpha": 0.1,\n  "log_scaling_n_floor": null,\n  "logits_mup_width_multiplier": 1.0,\n  "max_position_embeddings": 64,\n  "mlp_layer_types": [\n    "sparse",\n    "sparse"\n  ],\n  "model_type": "inkling_text",\n  "moe_intermediate_size": 64,\n  "mtp_hidden_states_first": true,\n  "mtp_local_layer_ids": null,\n  "n_routed_experts": 4,\n  "n_shared_experts": 1,\n  "num_attention_heads": 4,\n  "num_experts_per_tok": 2,\n  "num_hidden_layers": 2,\n  "num_key_value_heads": 2,\n  "num_mtp_layers": null,\n  "number_of_conv_states": 4,\n  "pad_token_id": null,\n  "rel_extent": 1024,\n  "rms_norm_eps": 1e-06,\n  "rms_norm_eps_moe_gate": 1e-06,\n  "route_scale": 8.0,\n  "shared_expert_sink": true,\n  "sliding_window_size": 4,\n  "swa_head_dim": 16,\n  "swa_num_attention_heads": 4,\n  "swa_num_key_value_heads": 2,\n  "transformers_version": "5.24.0",\n  "unpadded_vocab_size": null,\n  "vocab_size": 256\n}\n'
SUB_CONFIG, MODEL_CLASS = None, 'InklingForCausalLM'
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
    model = build()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {type(model).__name__} in {DTYPE}")
    keyword = next(k for k in ("cache", "past_key_values", "cache_params") if k in inspect.signature(model.forward).parameters)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    prompt = torch.randint(3, max(4, min(vocab, 32000)), (BATCH, PROMPT), generator=torch.Generator().manual_seed(SEED))
    total = PROMPT + STEPS
    fresh = lambda: StaticCache(config=model.config, max_cache_len=total) if CACHE == "static" else None
    try:
        if CHECK == "ragged":
            return ragged(model, keyword, prompt, fresh())
        if CHECK == "generate":
            return generate(model, prompt)
        cache, output = forward(model, keyword, fresh(), input_ids=prompt)
        logits, sequence = [output.logits[:, -1]], [prompt]
        for _ in range(STEPS):
            token = logits[-1].argmax(-1, keepdim=True)
            sequence.append(token)
            cache, output = forward(model, keyword, cache, input_ids=token)
            logits.append(output.logits[:, -1])
        full = torch.cat(sequence, dim=1)
        if CHECK == "prefix_reuse":
            # Prefill PROMPT-2 tokens, copy that cache, extend the copy by 2 tokens at once, then decode the same tokens.
            prefix = max(1, PROMPT - 2)
            stored, _ = forward(model, keyword, fresh(), input_ids=full[:, :prefix])
            reused, output = forward(model, keyword, copy.deepcopy(stored), input_ids=full[:, prefix:PROMPT])
            logits = [output.logits[:, -1]]
            for position in range(PROMPT, total):
                reused, output = forward(model, keyword, reused, input_ids=full[:, position : position + 1])
                logits.append(output.logits[:, -1])
        reference = model(input_ids=full, use_cache=False).logits[:, PROMPT - 1 :].float()
    except Exception as exc:  # the crash is the finding
        print(f"the model raised {type(exc).__name__}: {exc}")
        return 1
    print(f"after the prefill, get_query_offset(1) is layer 1's own cumulative_length tensor: {alias(model, keyword, prompt)}")
    parity = verdict([float((step.float() - reference[:, k]).abs().max()) for k, step in enumerate(logits)],
                     float(reference.abs().max()))
    return max(parity, static_generate(model, prompt))


def alias(model, keyword, prompt):
    """Whether the query offset the attention reads before update() is the very tensor update() increments."""
    cache, _ = forward(model, keyword, StaticCache(config=model.config, max_cache_len=PROMPT + STEPS), input_ids=prompt)
    return cache.get_query_offset(1) is cache.layers[1].cumulative_length


def static_generate(model, prompt):
    """generate(cache_implementation="static") against uncached generate(): 1 when it runs and the tokens differ."""
    runs = {}
    for use_cache in (True, False):
        config = copy.deepcopy(model.generation_config)
        config.update(max_new_tokens=STEPS, min_new_tokens=STEPS, do_sample=False, num_beams=1, use_cache=use_cache,
                      eos_token_id=None, pad_token_id=0, **({"cache_implementation": "static"} if use_cache else {}))
        try:
            runs[use_cache] = model.generate(prompt, generation_config=config, attention_mask=torch.ones_like(prompt))
        except RuntimeError as exc:  # up to 5.24: the static masks of the hybrid_sliding layers (another label)
            print(f"generate(use_cache={use_cache}, cache_implementation='static') raised {type(exc).__name__}: "
                  f"{str(exc).splitlines()[0]} (the static masks, inkling_static_generate_mask_mismatch.py: not this bug)")
            return 0
    cached, uncached = runs[True][:, PROMPT:], runs[False][:, PROMPT:]
    print(f"generate(cache_implementation='static') {cached.tolist()}")
    print(f"generate(use_cache=False)               {uncached.tolist()}")
    return int(not torch.equal(cached, uncached))


def ragged(model, keyword, prompt, cache):
    """Rows of lengths PROMPT, PROMPT-1, ... left-padded with id 0 and masked, decoded together; each row is
    compared with one uncached pass over its own unpadded tokens."""
    width = prompt.shape[1]
    lengths = [max(2, width - row) for row in range(BATCH)]
    mask = torch.zeros_like(prompt)
    for row, length in enumerate(lengths):
        mask[row, width - length :] = 1
    padded = torch.where(mask.bool(), prompt, torch.zeros_like(prompt))
    positions = "position_ids" in inspect.signature(model.forward).parameters

    def step(ids, attention, cache, feed_mask=True):
        extra = {"position_ids": (attention.cumsum(-1) - 1).clamp(min=0)[:, -ids.shape[1] :]} if positions else {}
        return forward(model, keyword, cache, input_ids=ids, **({"attention_mask": attention} if feed_mask else {}), **extra)

    cache, output = step(padded, mask, cache)
    logits, tokens = [output.logits[:, -1]], []
    for k in range(STEPS):
        token = logits[-1].argmax(-1, keepdim=True)
        tokens.append(token)
        mask = torch.cat([mask, torch.ones_like(token)], dim=1)
        if k == 0:  # feed the mask on cached steps only where generate() does (Mamba-style models drop it)
            try:
                prepared = model.prepare_inputs_for_generation(token, attention_mask=mask, use_cache=True,
                                                               is_first_iteration=False, **{keyword: cache})
                feed_mask = prepared.get("attention_mask") is not None
            except (TypeError, ValueError, AttributeError):  # needs generate()'s own state: GenerationMixin feeds it
                feed_mask = True
        cache, output = step(token, mask, cache, feed_mask)
        logits.append(output.logits[:, -1])
    generated = torch.cat(tokens, dim=1)
    deltas, scale = [0.0] * len(logits), 0.0
    for row, length in enumerate(lengths):
        own = torch.cat([prompt[row : row + 1, width - length :], generated[row : row + 1]], dim=1)
        extra = {"position_ids": torch.arange(own.shape[1])[None]} if positions else {}
        reference = model(input_ids=own, use_cache=False, **extra).logits[0, length - 1 :].float()
        scale = max(scale, float(reference.abs().max()))
        for k, step_logits in enumerate(logits):
            deltas[k] = max(deltas[k], float((step_logits[row].float() - reference[k]).abs().max()))
    print(f"left-padded rows of lengths {lengths}; each row against its own unpadded uncached pass")
    return verdict(deltas, scale)


def generate(model, prompt):
    """Greedy generate() with and without the cache, from the model's own generation config."""
    runs = {}
    for use_cache in (True, False):
        config = copy.deepcopy(model.generation_config)
        config.update(max_new_tokens=STEPS, min_new_tokens=STEPS, do_sample=False, num_beams=1, use_cache=use_cache,
                      eos_token_id=None, pad_token_id=0)
        runs[use_cache] = model.generate(prompt, generation_config=config, attention_mask=torch.ones_like(prompt))
    cached, uncached = runs[True][:, PROMPT:], runs[False][:, PROMPT:]
    print(f"cached   {cached.tolist()}")
    print(f"uncached {uncached.tolist()}")
    return int(not torch.equal(cached, uncached))


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
