"""FSMT: a forward with use_cache=True and more than one decoder token has no causal mask.

transformers 5.24.0, modeling_fsmt.py:857-866 (FSMTModel.forward): the decoder's causal mask is built
only when `not use_cache and input_ids is not None`; otherwise `decoder_padding_mask, causal_mask = None, None`
and the decoder layers attend to FUTURE decoder tokens. A one-token-at-a-time decode is unaffected,
but a multi-token decoder prompt with a cache (generate() with decoder_input_ids longer than one token,
or any cached prefill) is computed non-causally, and so is the K/V it stores.
Exit 1 when the bug reproduces. Needs only torch and transformers (random weights, no download).
"""
import sys

import torch
from transformers import FSMTConfig, FSMTForConditionalGeneration

torch.manual_seed(0)
config = FSMTConfig(
    src_vocab_size=256, tgt_vocab_size=256, d_model=64, encoder_layers=2, decoder_layers=2,
    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
    max_position_embeddings=64, init_std=0.15, langs=["en", "de"],
)
model = FSMTForConditionalGeneration(config).eval()
source = torch.randint(3, 200, (2, 5))
decoder_ids = torch.randint(3, 200, (2, 6))
with torch.no_grad():
    reference = model(input_ids=source, decoder_input_ids=decoder_ids, use_cache=False).logits
    prefix = model(input_ids=source, decoder_input_ids=decoder_ids[:, :1], use_cache=False).logits
    cached = model(input_ids=source, decoder_input_ids=decoder_ids, use_cache=True).logits
print(f"uncached pass is causal: position 0 alone vs in the full pass |Δ| = {(prefix[:, 0] - reference[:, 0]).abs().max():.2e}")
delta = (cached - reference).abs().amax(dim=(0, 2))
print("use_cache=True vs use_cache=False, max |Δlogit| per decoder position:", [f"{d:.2e}" for d in delta.tolist()])
print("position 0 can only see itself, yet differs: the cached prefill attends to later decoder tokens")
sys.exit(1 if float(delta[0]) > 1e-4 else 0)
