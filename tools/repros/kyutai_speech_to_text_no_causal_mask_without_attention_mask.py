#!/usr/bin/env python3
"""transformers 5.0-5.17: Kyutai speech-to-text builds no causal mask when it is given no attention_mask, so a decode
step into a StaticCache attends to the cache's unwritten slots.

Expected (model bug, transformers 5.0.0-5.17.0): KyutaiSpeechToTextModel.forward builds its causal mask only
`if attention_mask is not None` (modeling_kyutai_speech_to_text.py:625-633 in 5.17.0) and hands attention `None`
otherwise (Moshi's 5.0-5.17 bug, the model it comes from: tools/repros/moshi_no_causal_mask_without_attention_mask.py).
A one-token decode step with SDPA and no mask attends to every slot of a StaticCache, the zeros past the tokens written
too: after a 2-token prefill into a static cache of 8 slots, the decode step leaves the same step given an all-ones
attention_mask (and one uncached pass over the 3 tokens). 5.18 always calls `create_causal_mask` (:625 in 5.18.0).
generate() passes an attention_mask and is not affected; a hand-written decode loop (`model(input_ids=next_ids,
past_key_values=cache)`) is. Exit 1 when the maskless step leaves the masked one by more than 1e-4, else 0.
Needs only torch and transformers (random weights, no download).
"""
import inspect
import sys

import torch
import transformers
from transformers import KyutaiSpeechToTextConfig, KyutaiSpeechToTextForConditionalGeneration, StaticCache

TRANSFORMERS = "<5.18"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
LIMIT = 1e-4


def build() -> KyutaiSpeechToTextForConditionalGeneration:
    torch.manual_seed(0)
    codec = {"model_type": "mimi", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
             "intermediate_size": 128, "upsample_groups": 64, "max_position_embeddings": 64}
    config = KyutaiSpeechToTextConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, ffn_dim=128, max_position_embeddings=64, sliding_window=16,
                                      pad_token_id=3, bos_token_id=253, audio_pad_token_id=256 + 32 * 2049,
                                      codec_config=codec, attn_implementation="sdpa")
    return KyutaiSpeechToTextForConditionalGeneration(config).eval()


@torch.inference_mode()
def main() -> int:
    print(f"transformers {transformers.__version__}")
    model = build()
    generator = torch.Generator().manual_seed(0)
    ids = torch.cat([torch.randint(4, 250, (1, 3, 1), generator=generator), torch.randint(0, 2048, (1, 3, 32), generator=generator)], dim=-1)
    keyword = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    steps = {}
    for masked in (False, True):
        cache = StaticCache(config=model.config, max_cache_len=8)
        mask = {"attention_mask": torch.ones(1, 2, dtype=torch.long)} if masked else {}
        model(input_ids=ids[:, :2], use_cache=True, **mask, **{keyword: cache})
        mask = {"attention_mask": torch.ones(1, 3, dtype=torch.long)} if masked else {}
        steps[masked] = model(input_ids=ids[:, 2:3], use_cache=True, **mask, **{keyword: cache}).logits[:, -1]
    reference = model(input_ids=ids, use_cache=False).logits[:, -1]
    unmasked, masked = float((steps[False] - reference).abs().max()), float((steps[True] - reference).abs().max())
    print(f"decode step 1 into a StaticCache of 8 slots after a 2-token prefill: |Δ| to one uncached pass {unmasked:.3g} "
          f"without an attention_mask, {masked:.3g} with an all-ones one")
    return 1 if unmasked > LIMIT else 0


if __name__ == "__main__":
    sys.exit(main())
