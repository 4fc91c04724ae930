#!/usr/bin/env python3
"""Up to transformers 5.6 a cached forward of several tokens restarts the gated-delta-net mixer from an empty state.

Expected (model bug, transformers 5.0-5.6; kvconform checks chunked_prefill and prefix_reuse of qwen3_next, qwen3_5,
qwen3_5_moe, qwen3_5_text, qwen3_5_moe_text and olmo_hybrid): the linear-attention mixer reads the cached conv and
recurrent states for one token only (`use_precomputed_states = ... has_previous_state ... and seq_len == 1`,
modeling_qwen3_next.py:697-702 in 5.3.0, :603-605 in 5.6.2; modeling_qwen3_5.py:524 / :433, modeling_qwen3_5_moe.py:525
/ :434; olmo_hybrid `use_precomputed = ... and seq_len == 1`, modeling_olmo_hybrid.py:731 / :726): any longer forward
on a filled cache rebuilds the conv state from its own tokens (zero left context) and runs the chunked delta rule with
`initial_state=None` (modeling_qwen3_next.py:770 / :673), so a prompt prefilled in chunks or a cached prefix extended
by several tokens leaves one prefill of the same tokens. On 5.5-5.6 generate(prefill_chunk_size=2) shows it (5.0-5.4
refuse the chunked prefill, "Cannot use prefill chunking without a cache"). 5.7 reads the cache for any length:
the conv over the cached context (`torch.cat([conv_state, mixed_qkv])`, modeling_qwen3_next.py:639 in 5.7.0) and the
delta rule from the cached state (`initial_state=recurrent_state if use_precomputed_states else None`, :695;
modeling_qwen3_5.py:470/:528, modeling_qwen3_5_moe.py:471/:529, modeling_olmo_hybrid.py:797).
One pass of 6 tokens against 3 cached forwards of 2 (position_ids and, where the forward takes it, cache_position as
generate() feeds them). Exit 1 when the chunks leave the one pass; 0 when they agree.
"""
import inspect
import sys

import torch
import transformers

TRANSFORMERS = "<5.7"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
SMALL = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 64, "initializer_range": 0.15, "head_dim": 16,
         "layer_types": ["linear_attention", "full_attention"], "linear_key_head_dim": 16, "linear_value_head_dim": 16,
         "linear_num_key_heads": 2, "linear_num_value_heads": 4}
MOE = {"moe_intermediate_size": 64, "shared_expert_intermediate_size": 64, "num_experts_per_tok": 2, "num_experts": 4}
CONFIGS = {
    "qwen3_next": {**SMALL, **MOE},
    "qwen3_5_text": SMALL,
    "qwen3_5_moe_text": {**SMALL, **MOE},
    "olmo_hybrid": {**SMALL, "pad_token_id": 255, "eos_token_id": 254},
}
LIMIT = 1e-4


def keyword(model):
    parameters = inspect.signature(model.forward).parameters
    return next(k for k in ("cache", "past_key_values") if k in parameters)  # 5.24 renames it `cache`


@torch.inference_mode()
def check(model_type, prompt):
    """Whether 3 cached forwards of 2 tokens leave one pass over the 6 (and what generate(prefill_chunk_size=2) does)."""
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(model_type, **CONFIGS[model_type])
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    name, parameters = keyword(model), inspect.signature(model.forward).parameters
    one = model(input_ids=prompt, use_cache=False).logits
    cache, chunks = None, []
    for start in range(0, prompt.shape[1], 2):
        given = {name: cache} if cache is not None else {}
        if "cache_position" in parameters:
            given["cache_position"] = torch.arange(start, start + 2)
        output = model(input_ids=prompt[:, start : start + 2], use_cache=True,
                       position_ids=torch.arange(start, start + 2)[None].expand(prompt.shape[0], -1), **given)
        cache = getattr(output, name, None) if getattr(output, name, None) is not None else output.past_key_values
        chunks.append(output.logits)
    deltas = (torch.cat(chunks, dim=1) - one).abs().amax(dim=(0, 2))
    try:  # the path users run, where it takes a chunked prefill
        runs = [model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, do_sample=False,
                               pad_token_id=0, output_logits=True, return_dict_in_generate=True, **extra)
                for extra in ({}, {"prefill_chunk_size": 2})]
        delta = max(float((a - b).abs().max()) for a, b in zip(runs[0].logits, runs[1].logits, strict=True))
        generated = f"max |Δlogit| {delta:.3g}"
    except ValueError as exc:
        generated = f"refused ({exc})"
    print(f"{model_type}: 3 cached forwards of 2 tokens vs one pass, max |Δlogit| per position "
          f"{[f'{d:.2g}' for d in deltas.tolist()]}; generate(prefill_chunk_size=2) vs generate(): {generated}")
    return float(deltas.max()) > LIMIT


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    known = [model_type for model_type in CONFIGS if model_type in transformers.CONFIG_MAPPING]  # qwen3_5*: 5.2+, olmo_hybrid: 5.3+
    bad = [model_type for model_type in known if check(model_type, prompt)]
    print(f"BUG: the chunks leave one pass ({', '.join(bad)})" if bad else "ok: the chunks match one pass")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
