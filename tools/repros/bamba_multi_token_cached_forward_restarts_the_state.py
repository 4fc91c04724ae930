#!/usr/bin/env python3
"""Up to transformers 5.12 a cached forward of several tokens restarts Bamba's Mamba2 mixer from an empty state.

Expected (model bug, transformers 5.0-5.12; kvconform checks chunked_prefill and prefix_reuse of bamba,
granitemoehybrid and falcon_h1): BambaMixer.torch_forward takes the cached state only for one token
(`use_precomputed_states = ... has_previous_state ... and seq_len == 1`: modeling_bamba.py:782-791 in 5.3.0, :663 in
5.12.1); any longer forward on a filled cache rebuilds the conv state from its own tokens (modeling_bamba.py:806-815 in
5.3.0) and starts the chunked scan from zeros (`previous_states = torch.zeros_like(...)`, :934 in 5.3.0, :797 in
5.12.1), so a prompt prefilled in chunks, or a cached prefix extended by several tokens, leaves one prefill of the same
tokens. GraniteMoeHybrid's and FalconH1's Mamba2 mixers are the same code (modeling_granitemoehybrid.py:659 and :811 in
5.3.0, :541 and :675 in 5.12.1; modeling_falcon_h1.py:853 and :1005 in 5.3.0, :683 and :819 in 5.12.1). 5.13 reads the
cache for any length (`use_precomputed_states = ... has_previous_state(self.layer_idx)`, the one-token recurrence only
for `seq_len == 1`, the conv over the cached state and `initial_states` from it: modeling_bamba.py:669-706, :809 in
5.13.1; modeling_granitemoehybrid.py:552, :518 and modeling_falcon_h1.py:694, :659 in 5.13.1). Where
generate(prefill_chunk_size=...) runs for them (it refuses on 5.0-5.4, "Cannot use prefill chunking without a cache")
its logits leave the unchunked generate()'s the same way.
On 5.0-5.1 the same cached multi-token forward of Bamba and FalconH1 without an attention_mask raises before it:
BambaModel._update_causal_mask sizes the mask to past + new + 1 keys (modeling_bamba.py:1283-1287 in 5.0.0; FalconH1's
the same) and 5.0-5.1's SDPA attention does not cut it to the keys (RuntimeError "The size of tensor a (4) must match
the size of tensor b (5)"); 5.2 builds it with masking_utils.create_causal_mask (modeling_bamba.py:1200 in 5.2.0).
One prefill of 6 tokens against 3 cached forwards of 2, every input explicit (attention_mask, position_ids,
cache_position, the cache the model's input preparation makes, as generate() feeds them). Exit 1 when the chunks leave
the one prefill (or the maskless chunk raises) for any of the types; 0 when they agree.
"""
import inspect
import sys

import torch
import transformers

TRANSFORMERS = "<5.13"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
SMALL = {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128, "num_attention_heads": 4,
         "num_key_value_heads": 2, "mamba_n_heads": 8, "mamba_d_head": 16, "mamba_d_state": 8, "initializer_range": 0.15,
         "max_position_embeddings": 64}
CONFIGS = {  # GraniteMoeHybrid's and FalconH1's Mamba2 mixers are Bamba's (the same use_precomputed_states test)
    "bamba": {**SMALL, "attn_layer_indices": [1], "mamba_n_groups": 1, "mamba_d_conv": 4, "mamba_expand": 2},
    "granitemoehybrid": {**SMALL, "layer_types": ["mamba", "attention"], "num_local_experts": 4, "shared_intermediate_size": 64},
    "falcon_h1": {**SMALL, "mamba_d_ssm": 128},
}
LIMIT = 1e-4


def keyword(model):
    parameters = inspect.signature(model.forward).parameters
    return next(k for k in ("cache", "past_key_values") if k in parameters)  # 5.24 renames it `cache`


def first_cache(model, ids):
    """The cache generate()'s first step hands the model: its input preparation's (5.0-5.4), else DynamicCache(config)."""
    prepared = model.prepare_inputs_for_generation(ids, attention_mask=torch.ones_like(ids), use_cache=True,
                                                   cache_position=torch.arange(ids.shape[1]), is_first_iteration=True)
    cache = next((prepared[k] for k in ("cache", "past_key_values") if prepared.get(k) is not None), None)
    return cache if cache is not None else transformers.DynamicCache(config=model.config)


def chunks(model, prompt, with_mask):
    cache, logits, name = first_cache(model, prompt[:, :2]), [], keyword(model)
    for start in range(0, prompt.shape[1], 2):
        given = {"attention_mask": torch.ones(prompt.shape[0], start + 2, dtype=torch.long)} if with_mask else {}
        out = model(input_ids=prompt[:, start : start + 2], use_cache=True, **{name: cache}, **given,
                    position_ids=torch.arange(start, start + 2)[None].expand(prompt.shape[0], -1),
                    cache_position=torch.arange(start, start + 2))
        cache = getattr(out, name, None) or out.past_key_values
        logits.append(out.logits)
    return torch.cat(logits, dim=1)


@torch.inference_mode()
def check(model_type, prompt):
    """Whether 3 cached forwards of 2 tokens leave one pass over the 6 (or raise without a mask)."""
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(model_type, **CONFIGS[model_type])
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    one = model(input_ids=prompt, use_cache=False).logits
    bad = False
    try:
        chunks(model, prompt, with_mask=False)
        print(f"{model_type}: 3 cached forwards of 2 tokens without an attention_mask: run")
    except RuntimeError as exc:
        print(f"{model_type}: 3 cached forwards of 2 tokens without an attention_mask: raised RuntimeError: {exc}")
        bad = True
    deltas = (chunks(model, prompt, with_mask=True) - one).abs().amax(dim=(0, 2))
    print(f"{model_type}: with the attention_mask, position_ids and cache_position generate() feeds: max |Δlogit| against "
          f"one prefill, per position {[f'{d:.3g}' for d in deltas.tolist()]}")
    bad = bad or float(deltas.max()) > LIMIT
    try:  # the generate() path, where it takes a chunked prefill
        runs = [model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, do_sample=False,
                               pad_token_id=0, output_logits=True, return_dict_in_generate=True, **extra)
                for extra in ({}, {"prefill_chunk_size": 2})]
        delta = max(float((a - b).abs().max()) for a, b in zip(runs[0].logits, runs[1].logits, strict=True))
        print(f"{model_type}: generate(prefill_chunk_size=2) against generate(): max |Δlogit| {delta:.3g}")
    except ValueError as exc:
        print(f"{model_type}: generate(prefill_chunk_size=2) refused: {exc}")
    return bad


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    bad = [model_type for model_type in CONFIGS if check(model_type, prompt)]
    print(f"BUG: the cached multi-token forward leaves one prefill ({', '.join(bad)})" if bad
          else "ok: the chunks match one prefill")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
