#!/usr/bin/env python3
"""generate(prefill_chunk_size=...) in transformers 5.1-5.2 decodes every token one position ahead.

After the chunked prefill, GenerationMixin._prefill sets ``model_kwargs["cache_position"]`` to the last prompt position
+ 1 (generation/utils.py:3857 in 5.1.0, :3892 in 5.2.0), and the generation loop's _update_model_kwargs_for_generation
adds the new token count to it again (generation/utils.py:1049 in 5.1.0): from the first decode step on, every token is
placed one position further than it is. Full causal attention over a dynamic cache sees the same keys either way (llama
agrees on 5.1.0); a sliding window (mistral here), or positions read from cache_position (BART's learned decoder
positions here), moves by one, and the tokens part from generate() without chunking. The prefill's own logits agree.
On 5.2.0 mistral's prefill parts already (its position_ids bug: generate_chunked_prefill_positions_of_the_last_chunk.py);
BART, an encoder-decoder, gets no such position_ids and shows this bug alone there. 5.3.0 resets the positions to the
whole prompt's (``torch.arange(input_ids.shape[1])``, generation/utils.py:3817 in 5.3.0).
Exit 1 while the bug is there (the chunked generate() returns other tokens from the first decode step), else 0.
"""
import sys

import torch
import transformers
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    GenerationConfig,
    MistralConfig,
    MistralForCausalLM,
    WhisperConfig,
    WhisperForConditionalGeneration,
)

TRANSFORMERS = ">=5.1,<5.3"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


SETTINGS = {"max_new_tokens": 4, "min_new_tokens": 4, "do_sample": False, "pad_token_id": 0, "output_logits": True,
            "return_dict_in_generate": True}


def gaps(model: torch.nn.Module, **inputs: torch.Tensor) -> list[float]:
    """max |Δlogit| per generated token of generate(prefill_chunk_size=2) against generate()."""
    def config(**extra: int) -> GenerationConfig:  # the model's own generation config (Whisper's decoder start and tasks)
        settings = GenerationConfig.from_dict({**model.generation_config.to_dict(), **SETTINGS, **extra})
        return settings

    with torch.no_grad():
        plain = model.generate(**inputs, generation_config=config())
        chunked = model.generate(**inputs, generation_config=config(prefill_chunk_size=2))
    return [float((a - b).abs().max()) for a, b in zip(plain.logits, chunked.logits, strict=True)]


def main() -> int:
    prompt = torch.randint(3, 200, (2, 6), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    mistral = MistralForCausalLM(MistralConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, max_position_embeddings=64, initializer_range=0.15, sliding_window=4)).eval()
    torch.manual_seed(0)
    bart = BartForConditionalGeneration(BartConfig(
        vocab_size=256, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64, init_std=0.15, decoder_start_token_id=2)).eval()
    torch.manual_seed(0)
    # Whisper numbers its decoder positions from cache_position (modeling_whisper.py:820-821 in 5.2.0); its generate()
    # starts from the decoder start token alone, a prompt of one chunk: the decode steps still sit one ahead.
    whisper = WhisperForConditionalGeneration(WhisperConfig(
        vocab_size=256, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=32, max_target_positions=64,
        init_std=0.15, decoder_start_token_id=252, pad_token_id=255, eos_token_id=253, bos_token_id=254)).eval()
    features = torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(1))
    runs = {"mistral (sliding window 4)": gaps(mistral, input_ids=prompt, attention_mask=torch.ones_like(prompt)),
            "bart (decoder prompt of 6)": gaps(bart, input_ids=prompt[:, :5], decoder_input_ids=prompt)}
    try:
        runs["whisper (generate(input_features))"] = gaps(whisper, input_features=features)
    except TypeError as exc:  # 5.4+: position_ids passed twice (whisper_chunked_prefill_position_ids_twice.py)
        print(f"whisper: generate(prefill_chunk_size=2) raised TypeError: {str(exc)[-70:]}")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    found = False
    for name, measured in runs.items():
        print(f"{name}: max |Δlogit| per generated token, chunked against unchunked generate():", [f"{g:.1e}" for g in measured])
        if measured[0] < 1e-4 and max(measured[1:]) > 1e-2:
            print(f"BUG {name}: the prefill agrees and the decode steps part: they sit one position ahead")
            found = True
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
