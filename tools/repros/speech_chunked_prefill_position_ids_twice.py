"""Moonshine, Canary, CohereAsr: generate(prefill_chunk_size=...) raises TypeError, "got multiple values for keyword
argument 'position_ids'", as Whisper's does (whisper_chunked_prefill_position_ids_twice.py).

transformers 5.24.0, generation/utils.py:4393-4395 (GenerationMixin._prefill, chunked branch): every chunk's model
kwargs get the chunk's `position_ids`, which each model's prepare_inputs_for_generation passes on; the encoder-decoder
forwards hand their decoder `position_ids=decoder_position_ids` and the same `**kwargs` beside it (modeling_moonshine.py:792,
modeling_canary.py:542, modeling_cohere_asr.py:515), so the decoder call is given `position_ids` twice. The same
generate() without `prefill_chunk_size` runs. The configs are the suite's shrunk builds (speech-seq2seq sweep).
Exit 1 when the bug reproduces on every model. Needs only torch and transformers (random weights, no download).
"""
import sys

import torch
from transformers import (
    CanaryConfig,
    CanaryForConditionalGeneration,
    CohereAsrConfig,
    CohereAsrForConditionalGeneration,
    GenerationConfig,
    MoonshineConfig,
    MoonshineForConditionalGeneration,
)

ENCODER = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
           "max_position_embeddings": 64, "initializer_range": 0.15, "subsampling_conv_channels": 256, "num_mel_bins": 128}
DECODER = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 64, "initializer_range": 0.15,
           "pad_token_id": 2, "bos_token_id": 4, "eos_token_id": 3}
MODELS = {
    "moonshine": (MoonshineForConditionalGeneration, MoonshineConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, encoder_num_hidden_layers=2, decoder_num_hidden_layers=2,
        encoder_num_attention_heads=4, decoder_num_attention_heads=4, encoder_num_key_value_heads=4,
        decoder_num_key_value_heads=4, max_position_embeddings=64, initializer_range=0.15, decoder_start_token_id=1,
        bos_token_id=1, eos_token_id=2), {"input_values": (2, 3200)}),
    "canary": (CanaryForConditionalGeneration, CanaryConfig(encoder_config=ENCODER, decoder_config=DECODER, vocab_size=256,
                                                             decoder_start_token_id=7, pad_token_id=2, bos_token_id=4,
                                                             eos_token_id=3), {"input_features": (2, 32, 128)}),
    "cohere_asr": (CohereAsrForConditionalGeneration, CohereAsrConfig(encoder_config=ENCODER, **DECODER),
                   {"input_features": (2, 32, 128)}),
}
reproduced = []
for name, (cls, config, shapes) in MODELS.items():
    torch.manual_seed(0)
    model = cls(config).eval()
    inputs = {key: torch.randn(*shape) for key, shape in shapes.items()}
    settings = {"max_new_tokens": 6, "min_new_tokens": 6, "do_sample": False, "num_beams": 1, "eos_token_id": None,
                "pad_token_id": 2, "decoder_start_token_id": config.decoder_start_token_id or config.bos_token_id}
    prompt = torch.tensor([[settings["decoder_start_token_id"], 11, 12, 13, 14]] * 2)
    with torch.no_grad():
        plain = model.generate(**inputs, decoder_input_ids=prompt, generation_config=GenerationConfig(**settings))
        try:
            model.generate(**inputs, decoder_input_ids=prompt, generation_config=GenerationConfig(**settings, prefill_chunk_size=2))
            print(f"{name}: generate() and generate(prefill_chunk_size=2) both run")
        except TypeError as exc:
            print(f"{name}: generate() runs ({plain.shape[1]} tokens); generate(prefill_chunk_size=2) raised TypeError: {str(exc).splitlines()[-1][-70:]}")
            reproduced.append("multiple values for keyword argument 'position_ids'" in str(exc))
sys.exit(1 if len(reproduced) == len(MODELS) and all(reproduced) else 0)
