#!/usr/bin/env python3
"""``generate(prefill_chunk_size=...)`` raises for every model whose cache holds linear-attention layers only.

kvconform check chunked_prefill, cells mamba, falcon_mamba and mamba2 [float32-cpu-dynamic-eager]. The chunked
prefill of GenerationMixin reads ``past_length = cache.get_seq_length()`` unconditionally (generation/utils.py:4388),
and ``Cache.get_seq_length`` raises ValueError when every layer is a LinearAttentionLayer (cache_utils.py:1773);
the unchunked prefill guards that call with ``if cache is not None and not all(cache.is_linear)``
(generation/utils.py:4307). Mamba2 itself continues a state across multi-token cached forwards correctly (3 cached
forwards of 2 tokens equal one prefill, shown below), so chunked prefill would be right if generate() ran it.

Exit 1 when generate(prefill_chunk_size=2) raises (other than 5.13-5.23's plain refusal, "Cannot use prefill chunking
without a cache") or picks other tokens than generate(), else 0.
"""
import inspect
import sys

import torch
import transformers

TRANSFORMERS = ">=5.24,<5.25"  # 5.25's LinearAttentionLayer counts its tokens (exits 0); 5.13-5.23 refuse chunking (exits 0)

CONFIG = {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "num_heads": 8, "head_dim": 16, "state_size": 8,
          "n_groups": 2, "conv_kernel": 4, "expand": 2, "initializer_range": 0.15}


@torch.inference_mode()
def main() -> int:
    torch.manual_seed(0)
    model = transformers.Mamba2ForCausalLM(transformers.Mamba2Config(**CONFIG)).eval()
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    one = model(input_ids=prompt, use_cache=True).logits
    params = inspect.signature(model.forward).parameters
    keyword = next(k for k in ("cache", "past_key_values", "cache_params") if k in params)  # the release's cache keyword
    cache, chunks = None, []
    for start in range(0, 6, 2):
        given = {keyword: cache} if cache is not None else {}
        if cache is not None and "cache_position" in params:  # 5.0-5.3 take the positions generate() passed
            given["cache_position"] = torch.arange(start, start + 2)
        output = model(input_ids=prompt[:, start : start + 2], use_cache=True, **given)
        cache, chunks = getattr(output, keyword), chunks + [output.logits]
    print(f"3 cached forwards of 2 tokens vs one prefill: max |Δlogit| {float((torch.cat(chunks, 1) - one).abs().max()):.2g}")
    settings = {"max_new_tokens": 4, "do_sample": False, "eos_token_id": None, "pad_token_id": 0, "attention_mask": torch.ones_like(prompt)}
    plain = model.generate(prompt, **settings)
    try:
        chunked = model.generate(prompt, prefill_chunk_size=2, **settings)
    except ValueError as exc:
        print(f"generate(prefill_chunk_size=2) raised ValueError: {exc}")
        # 5.13-5.23 refuse the chunked prefill of such a cache in so many words: a refusal, not this bug
        return 0 if "Cannot use prefill chunking without a cache" in str(exc) else 1
    same = torch.equal(plain, chunked)
    print(f"generate(prefill_chunk_size=2) {'picks' if same else 'does not pick'} generate()'s tokens")
    return int(not same)


if __name__ == "__main__":
    sys.exit(main())
