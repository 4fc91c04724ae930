#!/usr/bin/env python3
"""RecurrentGemma cannot prefill in chunks: a multi-token cached forward drops the conv state, and
``generate(prefill_chunk_size=...)`` raises.

kvconform check chunked_prefill (and prefix_reuse), cells recurrent_gemma[float32-cpu-dynamic] and -static.
1. RecurrentGemmaRecurrentBlock.forward takes every forward of more than one token for a prefill
   (``if position_ids.shape[1] != 1:  # prefill``, modeling_recurrent_gemma.py:444) and rebuilds ``conv1d_state``
   from that forward's tokens alone (:445-446), so a chunk after the first convolves without the earlier
   tokens; the chunked prefill leaves one prefill from the second chunk on.
2. GenerationMixin's chunked prefill stores ``model_kwargs["cache"] = outputs.cache`` (generation/utils.py:4408),
   but RecurrentGemmaForCausalLM returns a ``CausalLMOutput`` (modeling_recurrent_gemma.py:752), which has no
   ``cache`` field, so generate(prefill_chunk_size=2) raises AttributeError after its first chunk.

Exit 1 when either shows, else 0.
"""
import sys

import torch
import transformers

CONFIG = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 16, "lru_width": 64, "attention_window_size": 4, "conv1d_width": 4,
          "block_types": ["recurrent", "recurrent", "attention"]}
ATOL, RTOL = 1e-5, 3e-5


@torch.inference_mode()
def main() -> int:
    torch.manual_seed(0)
    model = transformers.RecurrentGemmaForCausalLM(transformers.RecurrentGemmaConfig(**CONFIG)).eval()
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    one = model(input_ids=prompt, use_cache=True, cache=transformers.DynamicCache(config=model.config)).logits
    cache, chunks = transformers.DynamicCache(config=model.config), []
    for start in range(0, 6, 2):
        chunks.append(model(input_ids=prompt[:, start : start + 2], use_cache=True, cache=cache).logits)
    per_position = (torch.cat(chunks, dim=1) - one).abs().amax(dim=(0, 2))
    limit = ATOL + RTOL * float(one.abs().max())
    print("3 cached forwards of 2 tokens vs one prefill, max |Δlogit| per position:",
          ", ".join(f"{d:.2g}" for d in per_position.tolist()), f"(limit {limit:.2g})")
    status = int(float(per_position.max()) > limit)
    try:
        model.generate(prompt, max_new_tokens=4, do_sample=False, prefill_chunk_size=2, attention_mask=torch.ones_like(prompt))
        print("generate(prefill_chunk_size=2) runs")
    except AttributeError as exc:
        print(f"generate(prefill_chunk_size=2) raised AttributeError: {exc}")
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
