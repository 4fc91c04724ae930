"""Whisper: generate(prefill_chunk_size=...) raises TypeError, "got multiple values for keyword argument 'position_ids'".

transformers 5.24.0, generation/utils.py:4393-4395 (GenerationMixin._prefill, chunked branch): every chunk's model
kwargs get the chunk's `position_ids`, which Whisper's prepare_inputs_for_generation passes on beside its
`decoder_position_ids`; WhisperModel.forward (modeling_whisper.py:962-971) passes `position_ids=decoder_position_ids` to
its decoder and the same `**kwargs` beside it, so the decoder call is given `position_ids` twice. The same generate() without `prefill_chunk_size` runs. Exit 1 when the bug reproduces. Needs
only torch and transformers (random weights, no download).
"""
import sys

import torch
from transformers import GenerationConfig, WhisperConfig, WhisperForConditionalGeneration

TRANSFORMERS = ">=5.4"  # the releases this bug is in (5.1-5.3 run it; tests/test_repros.py skips it elsewhere)

torch.manual_seed(0)
config = WhisperConfig(
    vocab_size=256, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
    encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=32, max_target_positions=64,
    decoder_start_token_id=1, pad_token_id=0, eos_token_id=2, bos_token_id=1,
)
model = WhisperForConditionalGeneration(config).eval()
features = torch.randn(2, 16, 64)
settings = {"max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False, "num_beams": 1, "eos_token_id": None, "pad_token_id": 0}
with torch.no_grad():
    plain = model.generate(features, generation_config=GenerationConfig(**settings))
    print("generate():", plain.tolist())
    try:
        chunked = model.generate(features, generation_config=GenerationConfig(**settings, prefill_chunk_size=2))
    except TypeError as exc:
        print("generate(prefill_chunk_size=2) raised TypeError:", str(exc)[-80:])
        sys.exit(1 if "multiple values for keyword argument 'position_ids'" in str(exc) else 0)
print("generate(prefill_chunk_size=2):", chunked.tolist())
sys.exit(0)
