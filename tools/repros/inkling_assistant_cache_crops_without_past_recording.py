"""Inkling in transformers 5.14: assisted generate() raises RuntimeError when the assistant's cache drops rejected
drafts: the cache the assistant's own generate() builds does not record its conv states' past, which its crop requires.

transformers 5.14.1: _assisted_decoding turns on past recording for the main model's cache only
(cache.activate_past_recording(), generation/utils.py:3641-3645); the assistant's generate() builds a cache of its own,
and the candidate generator crops it after every burst with rejected drafts, where Inkling's hybrid layers (a short
convolution beside sliding-window attention, LinearAttentionAndSlidingWindowAttentionLayer) refuse:
"`crop` was called, but the current layer does not track past states" (cache_utils.py:912-916). 5.15 marks a cache
generate() builds for an assistant for past recording (generation/utils.py:2026-2028 in 5.15.1) and the call returns
greedy's tokens. The model as its own assistant shows it with a prompt of at least the convolution's kernel (a shorter
one meets 5.14's short-convolution finding first). Exit 1 when the bug reproduces. Needs only torch and transformers.
"""
import sys

import torch
from transformers import InklingForCausalLM, InklingTextConfig

TRANSFORMERS = ">=5.14,<5.15"

torch.manual_seed(0)
config = InklingTextConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, head_dim=16, sliding_window=4)
model = InklingForCausalLM(config).eval()
model.generation_config.update(num_assistant_tokens=3, num_assistant_tokens_schedule="constant")
prompt = torch.randint(3, 200, (1, 10), generator=torch.Generator().manual_seed(0))
kwargs = {"attention_mask": torch.ones_like(prompt), "max_new_tokens": 10, "do_sample": False}
with torch.no_grad():
    greedy = model.generate(prompt, **kwargs)
    try:
        assisted = model.generate(prompt, assistant_model=model, **kwargs)
    except RuntimeError as exc:
        print(f"generate(assistant_model=model) raised RuntimeError: {exc}")
        sys.exit(1)
print(f"generate(assistant_model=model) returns greedy's tokens: {torch.equal(assisted, greedy)}")
sys.exit(0)
