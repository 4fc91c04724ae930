"""Kosmos-2: its text decoder cannot read a StaticCache; generate(cache_implementation="static") raises.

transformers 5.24.0, modeling_kosmos2.py:901-923 (Kosmos2TextTransformer._prepare_decoder_attention_mask): the decoder
builds its own causal mask of width cache_length + new tokens (cache_length = get_seq_length(), :1007), but a
StaticCache hands attention its preallocated max_cache_len keys, so sdpa gets a mask narrower than its keys
(RuntimeError: The size of tensor a (...) must match the size of tensor b (...)). Kosmos2ForConditionalGeneration.generate
hands the prompt to this decoder (self.text_model.generate); the dynamic cache runs.
Exit 1 when the bug reproduces. Needs only torch and transformers (random weights, no download).
"""
import sys

import torch
from transformers.models.kosmos2.configuration_kosmos2 import Kosmos2TextConfig
from transformers.models.kosmos2.modeling_kosmos2 import Kosmos2TextForCausalLM

torch.manual_seed(0)
config = Kosmos2TextConfig(vocab_size=256, embed_dim=64, layers=2, ffn_dim=128, attention_heads=4, max_position_embeddings=64)
model = Kosmos2TextForCausalLM(config).eval()
prompt = torch.randint(3, 200, (2, 6))


def outcome(cache_implementation: str | None) -> str:
    try:
        model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, do_sample=False,
                       cache_implementation=cache_implementation)
        return "runs"
    except RuntimeError as exc:
        return f"raises RuntimeError: {exc}"


runs = {impl: outcome(impl) for impl in (None, "static")}
for impl, result in runs.items():
    print(f"cache_implementation={impl}: {result}")
sys.exit(1 if runs[None] == "runs" and runs["static"] != "runs" else 0)
