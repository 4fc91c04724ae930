#!/usr/bin/env python3
"""transformers 5.25: Zamba's (and Zaya's) Mamba mixer records no recurrent states for ``crop``, while 5.25's
``LinearAttentionLayer`` declares itself croppable, so assisted decoding crashes or continues from the wrong state.

5.25 makes linear-attention layers croppable (``LinearAttentionLayer.is_croppable = True``): after
``activate_past_recording(recurrent_states_to_keep=K)`` the mixers are to hand ``update_recurrent_state`` the states
after each of a forward's last K tokens (``cache.get_recurrent_states_to_keep(layer_idx)``, read by every other
mixer, e.g. ``modeling_mamba2.py:455-459``), and ``crop(-k)`` restores ``recurrent_states_history[-k]``
(``cache_utils.py:1204``). ZambaMambaMixer never asks for K and hands over the final state only
(``modeling_zamba.py:678``; Zaya the same at ``modeling_zaya.py:254``), so the history holds just the state from before
the forward: ``crop(-1)`` restores that (the next token is computed without the tokens of the forward), and
``crop(-k)`` for k >= 2 raises IndexError. Assisted decoding records K = the drafts per burst and crops the rejected
ones (``generation/utils.py:4002``), so ``generate(assistant_model=...)`` raises or parts from greedy ``generate()``.
5.24 marks these caches not croppable, and assisted decoding does not run on them.

Shown for both on the cache (crop(-k), k = 1 … 3, of a 9-token prefill) and on the path users run
(generate(assistant_model=...) with a differently seeded assistant of the same architecture, against greedy).
Exit 1 while the bug is there (a crop or assisted run raises or leaves the uncached / greedy logits), else 0.
Needs only torch and transformers (random weights, no download).
"""
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

TRANSFORMERS = ">=5.25"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
KEEP = 3


CONFIGS = {
    "zamba": {"vocab_size": 256, "hidden_size": 64, "attention_hidden_size": 128, "intermediate_size": 128,
              "num_hidden_layers": 3, "num_attention_heads": 4, "attention_head_dim": 32, "num_key_value_heads": 2,
              "n_mamba_heads": 2, "attn_layer_period": 6, "attn_layer_offset": 4, "mamba_d_state": 8, "mamba_dt_rank": 8,
              "max_position_embeddings": 64, "initializer_range": 0.15,
              "layers_block_type": ["linear_attention", "hybrid", "hybrid"], "use_mamba_kernels": False},
    "zaya": {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 64, "initializer_range": 0.15,
             "moe_intermediate_size": 64, "num_experts": 4, "num_experts_per_tok": 1, "router_hidden_size": 256,
             "layer_types": ["hybrid", "hybrid"], "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 106},
}


def build(model_type: str, seed: int) -> AutoModelForCausalLM:
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **CONFIGS[model_type])).eval()


def crops(model: AutoModelForCausalLM, ids: torch.Tensor) -> list[str]:
    """crop(-k) of a 9-token prefill recording KEEP states, then the next token against one uncached pass."""
    reference = model(input_ids=ids, use_cache=False).logits
    results = []
    for k in range(1, KEEP + 1):
        cache = DynamicCache(config=model.config)
        cache.activate_past_recording(recurrent_states_to_keep=KEEP)
        model(input_ids=ids[:, :9], past_key_values=cache, use_cache=True)
        kept = [len(h) for layer in cache.layers for h in getattr(layer, "recurrent_states_history", {}).values()]
        try:
            cache.crop(-k)
        except IndexError as exc:
            results.append(f"crop(-{k}) raised IndexError: {exc} (states kept per layer: {kept})")
            continue
        step = model(input_ids=ids[:, 9 - k : 10 - k], past_key_values=cache, use_cache=True).logits[:, -1]
        delta = float((step - reference[:, 9 - k]).abs().max())
        results.append(f"crop(-{k}): next token |Δlogit| {delta:.3g} against one uncached pass (states kept: {kept})")
    return results


def assisted(model: AutoModelForCausalLM, assistant: AutoModelForCausalLM, prompt: torch.Tensor) -> str:
    """generate(assistant_model=...) against greedy generate(); the assistant drafts KEEP tokens every burst (a trained
    assistant does when it is confident; this random one is told to)."""
    settings = {"max_new_tokens": 12, "min_new_tokens": 12, "do_sample": False, "output_logits": True,
                "return_dict_in_generate": True}
    greedy = model.generate(prompt, **settings)
    assistant.generation_config.update(num_assistant_tokens=KEEP, num_assistant_tokens_schedule="constant",
                                       assistant_confidence_threshold=0.0)
    try:
        drafted = model.generate(prompt, assistant_model=assistant, **settings)
    except IndexError as exc:
        return f"generate(assistant_model=...) raised IndexError: {exc}"
    worst = max(float((a - g).abs().max()) for a, g in zip(drafted.logits, greedy.logits, strict=True))
    return f"generate(assistant_model=...): max |Δlogit| {worst:.3g} against greedy generate()"


def main() -> int:
    ids = torch.randint(3, 256, (1, 10), generator=torch.Generator().manual_seed(0))
    print(f"torch {torch.__version__}, transformers {transformers.__version__}; a 9-token prefill recording {KEEP} states:")
    bad = 0
    with torch.no_grad():
        for model_type in CONFIGS:
            model = build(model_type, 0)
            lines = [*crops(model, ids), assisted(model, build(model_type, 1), ids[:, :6])]
            print("\n".join(f"{model_type}: {line}" for line in lines))
            bad += sum("raised" in line or float(line.split("|Δlogit| ")[1].split()[0]) > 1e-4 for line in lines)
    if bad:
        print(f"BUG: {bad} crops or assisted runs do not continue from the state after the kept tokens")
        return 1
    print("ok: every crop(-k) restores the state after token 9 - k, and assisted decoding equals greedy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
