#!/usr/bin/env python3
"""AXK2's sparse attention ignores causality under a boolean (SDPA) mask in transformers 5.15-5.16.

Expected (model bug, transformers 5.15.x-5.16.x): AXK2Indexer.forward adds the attention mask to the index scores
(`index_scores = index_scores + attention_mask`, modeling_axk2.py:282-283 in 5.16.1) and AXK2Attention.forward
folds the top-k selection into it with `attention_mask.masked_fill(index_mask, torch.finfo(dtype).min)`
(:649). Both assume an additive float mask; SDPA's masks are boolean (True = attend) wherever one is materialized
(a cached forward of several tokens, padding, every StaticCache forward). Then the masked keys get +0 instead of
-inf, so the indexer may select them, and masked_fill writes True (attend) at every key the indexer did NOT select:
the attention sees every key, future and empty-slot ones included, as soon as there are more keys than index_topk
(2048, the config default). Eager's float masks and SDPA's skipped masks (one prefill, one-token dynamic decode) are
right. 5.17 branches on `attention_mask.dtype == torch.bool` in both places (masked_fill(~attention_mask, -inf);
attention_mask & ~index_mask; modeling_axk2.py:282-285, :643-646 in 5.17.0); those two branches on 5.16.1 turn
every kvconform axk2 cell green.
A tiny random AXK2ForCausalLM, sdpa. (1) The default index_topk (2048): a 2052-token prompt in the cache, then one
forward of 4 more tokens, against one uncached forward of all 2056 (|Δ| 6.5e-4 on 5.16.1, 1.5e-7 on 5.17.0).
(2) The path users run, with index_topk 4 so that a short prompt has more keys than it: generate(prefill_chunk_size=4)
of 6 tokens after an 8-token prompt against uncached generate(), logits compared. Exit 1 when either leaves the
uncached logits by more than 1e-5 (1) or 1e-3 (2); 0 when both agree.
"""
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

TRANSFORMERS = ">=5.15,<5.17"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

CONFIG = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 64,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 32,
          "kv_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16, "index_n_heads": 2,
          "index_head_dim": 16, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1,
          "first_k_dense_replace": 2, "max_position_embeddings": 4096}


def build(**overrides):
    torch.manual_seed(0)
    config = AutoConfig.for_model("axk2", **{**CONFIG, **overrides})
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


@torch.inference_mode()
def extension() -> float:
    model = build()
    ids = torch.randint(3, 256, (1, 2056), generator=torch.Generator().manual_seed(0))
    assert model.config.index_topk < ids.shape[1], model.config.index_topk
    reference = model(ids).logits
    cache = DynamicCache(config=model.config)
    model(ids[:, :2052], past_key_values=cache)
    return (model(ids[:, 2052:], past_key_values=cache).logits - reference[:, 2052:]).abs().max().item()


@torch.inference_mode()
def chunked_generate() -> float:
    model = build(index_topk=4)
    prompt = torch.randint(3, 256, (1, 8), generator=torch.Generator().manual_seed(0))
    settings = {"max_new_tokens": 6, "min_new_tokens": 6, "do_sample": False, "eos_token_id": None, "pad_token_id": 0,
                "attention_mask": torch.ones_like(prompt), "output_logits": True, "return_dict_in_generate": True}
    uncached = model.generate(prompt, use_cache=False, **settings)
    chunked = model.generate(prompt, prefill_chunk_size=4, **settings)
    return max((a - b).abs().max().item() for a, b in zip(uncached.logits, chunked.logits, strict=True))


def main() -> int:
    one, two = extension(), chunked_generate()
    print(f"transformers {transformers.__version__}: 4 tokens on a 2052-token cache (index_topk 2048): max |Δ| {one:.3g} "
          f"from the uncached forward; generate(prefill_chunk_size=4) (index_topk 4): max |Δ| {two:.3g} from uncached generate()")
    return 1 if one > 1e-5 or two > 1e-3 else 0


if __name__ == "__main__":
    sys.exit(main())
