#!/usr/bin/env python3
"""A cached forward of several tokens onto an existing Mamba state restarts the selective scan from zero.

kvconform check chunked_prefill (and prefix_reuse), cells mamba, falcon_mamba, jamba and zamba [float32-cpu-*].
The Mamba mixers of transformers 5.24 take the recurrent form only for one token (``if recurrent_state is not None
and seq_len == 1``: modeling_mamba.py:444, modeling_falcon_mamba.py:482, modeling_jamba.py:584,
modeling_zamba.py:559); any longer cached forward runs ``mamba_selective_scan`` (modeling_mamba.py:455-470,
falcon_mamba :499, jamba :601, zamba :586) without the cached recurrent state as its initial state, then
overwrites that state with the scan's final one. The conv state is carried (``update_conv_state`` concatenates it),
the SSM state is not. So a prompt prefilled in chunks (what ``generate(prefill_chunk_size=...)`` does), or a cached
prefix extended by several tokens, computes other logits than one prefill of the same tokens.

Build a seeded tiny model of each type, prefill 6 tokens once and in 3 cached forwards of 2 tokens, and compare
the logits at every position and the recurrent state. Exit 1 when the chunks leave one prefill, else 0.
"""
import inspect
import sys

import torch
import transformers

SMALL = {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128, "initializer_range": 0.15}
CONFIGS = {
    "mamba": {**SMALL, "state_size": 8, "conv_kernel": 4, "expand": 2, "time_step_rank": 8},
    "falcon_mamba": {**SMALL, "state_size": 8, "conv_kernel": 4, "expand": 2, "time_step_rank": 8},
    "jamba": {**SMALL, "num_attention_heads": 4, "num_key_value_heads": 2, "num_experts": 4, "num_experts_per_tok": 2,
              "attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1,
              "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": 8, "use_mamba_kernels": False},
    "zamba": {**SMALL, "num_hidden_layers": 3, "attention_hidden_size": 128, "num_attention_heads": 4, "attention_head_dim": 32,
              "num_key_value_heads": 2, "n_mamba_heads": 2, "attn_layer_period": 6, "attn_layer_offset": 4, "mamba_d_state": 8,
              "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": 8, "use_mamba_kernels": False,
              "layers_block_type": ["linear_attention", "hybrid", "hybrid"]},
}
ATOL, RTOL = 1e-5, 3e-5


def cache_of(output):
    return next((value for name in ("cache", "past_key_values", "cache_params") if (value := getattr(output, name, None)) is not None), None)


def cache_keyword(model) -> str:
    """The forward's cache keyword: ``cache`` from 5.24, ``past_key_values`` or ``cache_params`` before."""
    names = inspect.signature(model.forward).parameters
    return next(name for name in ("cache", "past_key_values", "cache_params") if name in names)


def first_recurrent_state(cache):
    """Layer 0's recurrent state where the cache keeps it per layer (5.15+), else None."""
    layer = next((layer for layer in getattr(cache, "layers", None) or [] if getattr(layer, "recurrent_states", None) is not None), None)
    states = None if layer is None else layer.recurrent_states
    return states if states is None or isinstance(states, torch.Tensor) else states[0]  # a dict or list of them


@torch.inference_mode()
def main() -> int:
    status = 0
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    for model_type, values in CONFIGS.items():
        torch.manual_seed(0)
        config = transformers.AutoConfig.for_model(model_type, **values)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
        one = model(input_ids=prompt, use_cache=True)
        uncached = model(input_ids=prompt, use_cache=False).logits
        cache, chunks, keyword = None, [], cache_keyword(model)
        for start in range(0, 6, 2):
            output = model(input_ids=prompt[:, start : start + 2], use_cache=True, **({keyword: cache} if cache is not None else {}))
            cache = cache_of(output)
            chunks.append(output.logits)
        chunked = torch.cat(chunks, dim=1)
        limit = ATOL + RTOL * float(uncached.abs().max())
        per_position = (chunked - one.logits).abs().amax(dim=(0, 2))
        state, one_state = first_recurrent_state(cache), first_recurrent_state(cache_of(one))
        state_delta = float((state - one_state).abs().max()) if state is not None and one_state is not None else float("nan")
        print(f"{model_type}: one prefill vs uncached |Δ| {float((one.logits - uncached).abs().max()):.2g}; 3 chunks of 2 vs one "
              f"prefill, per position: {', '.join(f'{d:.2g}' for d in per_position.tolist())} (limit {limit:.2g}); first recurrent "
              f"state |Δ| {state_delta:.3g}")
        status |= int(float(per_position.max()) > limit)
    return status


if __name__ == "__main__":
    sys.exit(main())
