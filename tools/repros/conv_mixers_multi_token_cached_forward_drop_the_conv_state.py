#!/usr/bin/env python3
"""Up to transformers 5.14 a cached forward of several tokens drops the cached conv state of LFM2's, Jamba's, Zamba's
and Mamba's mixers (or raises).

Expected (model bug, transformers 5.0-5.14; kvconform checks chunked_prefill and prefix_reuse of lfm2, lfm2_moe, jamba,
zamba, mamba and falcon_mamba): the mixers continue the cached conv state for one token only.
- Lfm2ShortConv (lfm2_moe's the same) takes any forward on a filled cache for one decode step: `cache_position[0] > 0`
  (modeling_lfm2.py:508 in 5.3.0), `has_previous_state(self.layer_idx)` (:376 in 5.14.1); it rolls the conv window
  by one, writes the chunk into it and computes one convolution output for every token of the chunk.
- JambaMambaMixer and ZambaMambaMixer read the conv state only `if has_previous_state and seq_len == 1`
  (modeling_jamba.py:403, modeling_zamba.py:395 in 5.14.1); a longer forward convolves from zero left context and
  stores `pad(hidden_states)` as the new conv state.
- MambaMixer and FalconMambaMixer take a cached forward of any length for the one-token decode step
  (`cache_position.shape[0] != conv_kernel_size` in 5.0-5.3, modeling_mamba.py:390; `has_previous_state` from 5.5,
  modeling_mamba.py:293 in 5.14.1): its conv yields one output, and the scan over the chunk's length raises
  (IndexError "index 1 is out of bounds for dimension 2 with size 1"; RuntimeError on 5.4).
So a prompt prefilled in chunks (generate(prefill_chunk_size=...) from 5.5), or a cached prefix extended by several
tokens, leaves one prefill of the same tokens. 5.15 carries the conv state for any length: the one-token update only
`if use_precomputed_states and seq_len == 1`, else `cache_params.update_conv_state(...)` prepends the cached window
(modeling_lfm2.py:366, modeling_jamba.py:522-532, modeling_mamba.py:403-413 in 5.15.1). (Jamba's, Zamba's and Mamba's
SSM scan still restarts from zero there: tools/repros/mamba_multi_token_forward_restarts_scan.py.)
One prefill of 6 tokens against 3 cached forwards of 2 (cache_position where the forward takes it, as generate()
feeds it); layer 0's conv state after them against the one prefill's (and, for LFM2, which has no SSM state, the logits). Exit 1
when a chunk raises or they differ.
"""
import inspect
import sys

import torch
import transformers

TRANSFORMERS = "<5.15"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
SMALL = {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128, "initializer_range": 0.15,
         "max_position_embeddings": 64}
ATTENTION = {"num_attention_heads": 4, "num_key_value_heads": 2}
MAMBA = {"state_size": 8, "conv_kernel": 4, "expand": 2, "time_step_rank": 8}
HYBRID_MAMBA = {"mamba_d_state": 8, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": 8, "use_mamba_kernels": False}
CONFIGS = {
    "lfm2": {**SMALL, **ATTENTION, "layer_types": ["conv", "full_attention"], "full_attn_idxs": [1]},
    "lfm2_moe": {**SMALL, **ATTENTION, "layer_types": ["conv", "full_attention"], "num_dense_layers": 1,
                 "moe_intermediate_size": 64, "num_experts_per_tok": 2, "num_experts": 4},
    "jamba": {**SMALL, **ATTENTION, **HYBRID_MAMBA, "num_experts": 4, "num_experts_per_tok": 2, "attn_layer_period": 2,
              "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1},
    "zamba": {**SMALL, **ATTENTION, **HYBRID_MAMBA, "num_hidden_layers": 3, "attention_hidden_size": 128,
              "attention_head_dim": 32, "n_mamba_heads": 2, "attn_layer_period": 6, "attn_layer_offset": 4,
              "layers_block_type": ["mamba", "hybrid", "hybrid"]},  # "linear_attention" for "mamba" from 5.14
    "mamba": {**SMALL, **MAMBA},
    "falcon_mamba": {**SMALL, **MAMBA},
}
LIMIT = 1e-4
#: The types without a recurrent (SSM) state: their chunks' logits must equal one prefill's (the others' SSM scan
#: restarts from zero in every release, which moves the logits and every later layer's conv input).
CONV_ONLY = {"lfm2", "lfm2_moe"}


def keyword(model):
    parameters = inspect.signature(model.forward).parameters
    return next(k for k in ("cache", "past_key_values", "cache_params") if k in parameters)  # the release's name


def returned(output, name):
    found = getattr(output, name, None)
    return found if found is not None else getattr(output, "past_key_values", None)


def first_inputs(model, ids):
    """The cache (and cache_position) generate()'s first step hands the model where its input preparation makes the cache
    (zamba's ZambaHybridDynamicCache up to 5.4: its forward builds none), else nothing: the model builds its own."""
    prepared = model.prepare_inputs_for_generation(ids, attention_mask=torch.ones_like(ids), use_cache=True,
                                                   cache_position=torch.arange(ids.shape[1]), is_first_iteration=True)
    name = keyword(model)
    if prepared.get(name) is None:
        return {}
    given = {name: prepared[name]}
    if "cache_position" in inspect.signature(model.forward).parameters:
        given["cache_position"] = prepared.get("cache_position", torch.arange(ids.shape[1]))
    return given


def conv_states(cache):
    """The cache's conv-state tensors, whatever the release keeps them in: layer objects (5.5+: a tensor, a list or a
    dict per layer), else the per-layer lists of the older model-specific caches."""
    found = []
    if getattr(cache, "layers", None) is not None:
        for layer in cache.layers:
            states = getattr(layer, "conv_states", None)
            states = list(states.values()) if isinstance(states, dict) else states
            found += [s for s in (states if isinstance(states, (list, tuple)) else [states]) if torch.is_tensor(s)]
        if found:
            return found
    for name in ("conv_states", "conv_cache"):
        states = getattr(cache, name, None)
        if isinstance(states, dict):
            states = list(states.values())
        if isinstance(states, (list, tuple)):
            return [s for s in states if torch.is_tensor(s) and s.numel()]
        if torch.is_tensor(states):
            return list(states)
    return found


@torch.inference_mode()
def check(model_type, prompt):
    """Whether 3 cached forwards of 2 tokens raise or leave another conv state than one prefill of the 6."""
    torch.manual_seed(0)
    values = CONFIGS[model_type]
    try:
        config = transformers.AutoConfig.for_model(model_type, **values)
    except Exception:  # 5.14+ validates zamba's block types and calls its Mamba blocks linear_attention
        blocks = ["linear_attention" if kind == "mamba" else kind for kind in values["layers_block_type"]]
        config = transformers.AutoConfig.for_model(model_type, **{**values, "layers_block_type": blocks})
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    name, parameters = keyword(model), inspect.signature(model.forward).parameters
    one = model(input_ids=prompt, use_cache=True, **first_inputs(model, prompt))
    cache, chunks = None, []
    try:
        for start in range(0, prompt.shape[1], 2):
            given = {name: cache} if cache is not None else first_inputs(model, prompt[:, :2])
            if "cache_position" in parameters and cache is not None:  # generate() passes it (5.0-5.3 need it)
                given["cache_position"] = torch.arange(start, start + 2)
            output = model(input_ids=prompt[:, start : start + 2], use_cache=True, **given)
            cache = returned(output, name)
            chunks.append(output.logits)
    except (IndexError, RuntimeError) as exc:
        print(f"{model_type}: the second cached forward of 2 tokens raised {type(exc).__name__}: {exc}")
        return True
    logits = float((torch.cat(chunks, dim=1) - one.logits).abs().max())
    # the first mixer's (layer 0's) conv state: its input, the embeddings, is the same in both runs; a later layer's
    # input differs where an earlier layer's SSM state restarted (the other repro's bug)
    mine, reference = conv_states(cache), conv_states(returned(one, name))
    conv = float((mine[0] - reference[0]).abs().max())
    try:  # the path users run, where it takes a chunked prefill
        runs = [model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, do_sample=False,
                               pad_token_id=0, output_logits=True, return_dict_in_generate=True, **extra)
                for extra in ({}, {"prefill_chunk_size": 2})]
        delta = max(float((a - b).abs().max()) for a, b in zip(runs[0].logits, runs[1].logits, strict=True))
        generated = f"max |Δlogit| {delta:.3g}"
    except (ValueError, IndexError, RuntimeError) as exc:
        generated = f"raised {type(exc).__name__}: {exc}"
    print(f"{model_type}: 3 cached forwards of 2 tokens vs one prefill: max |Δlogit| {logits:.3g}, layer 0's conv state "
          f"|Δ| {conv:.3g}; generate(prefill_chunk_size=2) vs generate(): {generated}")
    return conv > LIMIT or (model_type in CONV_ONLY and logits > LIMIT)


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    bad = [model_type for model_type in CONFIGS if check(model_type, prompt)]
    print(f"BUG: the cached multi-token forward drops the conv state ({', '.join(bad)})" if bad
          else "ok: the chunks carry the conv state")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
