#!/usr/bin/env python3
"""transformers 5.0-5.1: MoshiForCausalLM (SDPA) applies its sliding window only when it is given an attention_mask.

Expected (model bug, transformers 5.0.0-5.1.0; 5.2 fixes it): MoshiModel.forward builds its 4-D mask only
`if attention_mask is not None` (modeling_moshi.py:1254-1258 in 5.1.0, :1259-1263 in 5.0.0), and that mask also masks
every key at `cache_position - sliding_window` or before (_prepare_4d_causal_attention_mask_with_cache_position,
modeling_moshi.py:1432-1439 in 5.1.0, :1437-1444 in 5.0.0). Without an attention_mask, MoshiSdpaAttention gets no
mask and attends with `is_causal=True` (modeling_moshi.py:705 in 5.1.0): plain causal attention, no window. So
model(input_ids) and model(input_ids, attention_mask=all ones) part as soon as a sequence is longer than the window.
generate() passes an attention_mask: assisted decoding, whose cache 5.1 builds with full layers ("dynamic_full",
generation/utils.py:1970-1980 in 5.1.0), returns the logits of the windowed (masked) forward exactly, and they leave
the plain model(sequence) from the first token whose position reaches the window. (5.0 hands assisted decoding the
config's sliding layers, and generate() refuses to crop them, so the assisted path cannot show it there; the forward
does.) Latent in the published config (sliding_window = max_position_embeddings = 3000), shown by a window of 4.
5.2 builds the mask with masking_utils.create_causal_mask (modeling_moshi.py:1097-1104 in 5.2.0), plain causal for
Moshi's config, so the two calls agree (the cache's own window is the separate finding of later releases).
Exit 1 when the SDPA forward without attention_mask differs from the one with an all-ones mask; 0 when they agree.
"""
import sys

import torch
import transformers
from transformers import MoshiConfig, MoshiForCausalLM

TRANSFORMERS = "<5.2"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

SHRUNK = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
              ffn_dim=128, max_position_embeddings=64, audio_vocab_size=64, num_codebooks=2, depth_hidden_size=32,
              depth_num_hidden_layers=1, depth_num_attention_heads=2, depth_ffn_dim=64, initializer_range=0.2)
WINDOW = 4


def delta(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


@torch.inference_mode()
def main() -> int:
    print(f"transformers {transformers.__version__}, window {WINDOW}")
    config = MoshiConfig(**SHRUNK, sliding_window=WINDOW, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = MoshiForCausalLM(config).eval()
    torch.manual_seed(1)
    assistant = MoshiForCausalLM(config).eval()
    assistant.generation_config.update(num_assistant_tokens=3, num_assistant_tokens_schedule="constant",
                                       assistant_confidence_threshold=0.0)
    prompt = torch.randint(3, 256, (1, 2), generator=torch.Generator().manual_seed(0))
    settings = dict(max_new_tokens=10, min_new_tokens=10, do_sample=False, eos_token_id=None, pad_token_id=0,
                    output_logits=True, return_dict_in_generate=True)
    try:
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), assistant_model=assistant, **settings)
        sequence, logits = out.sequences, torch.cat(out.logits)
    except ValueError as exc:  # 5.0: the assisted cache has sliding layers, which generate() will not crop
        print(f"assisted generate() refuses: {exc}")
        sequence, logits = torch.randint(3, 256, (1, 12), generator=torch.Generator().manual_seed(1)), None
    plain = model(input_ids=sequence).logits[0, prompt.shape[1] - 1 : -1]
    masked = model(input_ids=sequence, attention_mask=torch.ones_like(sequence)).logits[0, prompt.shape[1] - 1 : -1]
    if logits is not None:
        print("assisted generate(): per generated token, max |Δ| to model(sequence):",
              ", ".join(f"{delta(logits[k], plain[k]):.2g}" for k in range(len(logits))))
        print("                     and to model(sequence, attention_mask=ones):",
              ", ".join(f"{delta(logits[k], masked[k]):.2g}" for k in range(len(logits))))
    parted = delta(plain, masked)
    print(f"model({sequence.shape[1]} tokens) vs the same call with an all-ones attention_mask: max |Δ| {parted:.3g}")
    return 1 if parted > 1e-4 else 0


if __name__ == "__main__":
    sys.exit(main())
