#!/usr/bin/env python3
"""generate(prefill_chunk_size=...) of a speech encoder-decoder cuts the feature extractor's attention mask to the
decoder chunk (transformers 5.1.0 to 5.25.0).

The chunked branch of GenerationMixin._prefill pops ``attention_mask`` and gives each chunk
``attention_mask[:, :current_length]`` (generation/utils.py:3840-3845 in 5.1.0, :4362-4392 in 5.24.0); for an
encoder-decoder that mask is the encoder's: here the mask a speech feature extractor returns over the audio samples
(SpeechT5, a wav2vec2 speech-encoder-decoder) or frames (Speech2Text). Their forwards rebuild the cross-attention mask from it
(``_get_feature_vector_attention_mask(encoder length, attention_mask)``: modeling_speecht5.py:1962,
modeling_speech_to_text.py:812, modeling_speech_encoder_decoder.py:436 in 5.24.0),
so every decoder chunk reads the encoder output under the mask of the audio's first 2, 4, 6 samples or frames, and
the chunked generate() parts from generate() without chunking from the prefill's logits on. An all-ones mask (clips
of one length) and a padded batch (its last row half as long, zero-padded and masked, as the feature extractors pad)
both part; generate() without a mask runs both alike from 5.2 (5.1 makes an all-ones mask itself and cuts it too).
5.0 refuses chunked prefill. Exit 1 while the bug is there (max |Δlogit| of the chunked generate() over 1e-3), else 0.
"""
import sys

import torch
import transformers
from transformers import (
    BertConfig,
    Speech2TextConfig,
    Speech2TextForConditionalGeneration,
    SpeechEncoderDecoderConfig,
    SpeechEncoderDecoderModel,
    SpeechT5Config,
    SpeechT5ForSpeechToText,
    Wav2Vec2Config,
)

TRANSFORMERS = ">=5.1"  # 5.0 refuses chunked prefill
LOGIT_LIMIT = 1e-3  # float32: one prefill and its chunks agree to ~1e-6


def _speecht5() -> tuple[torch.nn.Module, str, torch.Tensor]:
    config = SpeechT5Config(vocab_size=64, hidden_size=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                            decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, conv_dim=(16,) * 7,
                            num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2, max_speech_positions=200,
                            max_text_positions=64, initializer_range=0.15)
    return SpeechT5ForSpeechToText(config).eval(), "input_values", torch.randn(2, 3200, generator=torch.Generator().manual_seed(1))


def _speech_to_text() -> tuple[torch.nn.Module, str, torch.Tensor]:
    config = Speech2TextConfig(vocab_size=64, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                               decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, input_feat_per_channel=16,
                               conv_channels=32, max_source_positions=64, max_target_positions=64, init_std=0.15)
    return Speech2TextForConditionalGeneration(config).eval(), "input_features", torch.randn(2, 40, 16, generator=torch.Generator().manual_seed(1))


def _speech_encoder_decoder() -> tuple[torch.nn.Module, str, torch.Tensor]:
    encoder = Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                             conv_dim=(16,) * 7, num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2,
                             initializer_range=0.15)
    decoder = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                         is_decoder=True, add_cross_attention=True, initializer_range=0.15)
    config = SpeechEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.decoder_start_token_id, config.pad_token_id = 2, 1
    return SpeechEncoderDecoderModel(config).eval(), "input_values", torch.randn(2, 3200, generator=torch.Generator().manual_seed(1))


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    found = False
    for name, build in (("speecht5", _speecht5), ("speech_to_text", _speech_to_text),
                        ("speech-encoder-decoder (wav2vec2 + BERT)", _speech_encoder_decoder)):
        torch.manual_seed(0)
        model, key, audio = build()
        ones = torch.ones(audio.shape[:2], dtype=torch.long)
        padded, mask = audio.clone(), ones.clone()
        half = audio.shape[1] // 2
        padded[1, half:], mask[1, half:] = 0, 0  # the last row half as long, as a feature extractor pads and masks it
        prompt = torch.tensor([[2, 5, 9, 11, 20, 7], [2, 8, 3, 30, 12, 6]])
        settings = {"decoder_input_ids": prompt, "max_new_tokens": 3, "do_sample": False, "return_dict_in_generate": True,
                    "output_logits": True, "eos_token_id": None, "pad_token_id": 1}
        for described, values, attention in (("no mask", audio, None), ("all-ones mask", audio, ones),
                                             ("padded batch and its mask", padded, mask)):
            given = {key: values, **({"attention_mask": attention} if attention is not None else {}), **settings}
            with torch.no_grad():
                plain = model.generate(**given)
                try:
                    chunked = model.generate(**given, prefill_chunk_size=2)
                except ValueError as exc:  # 5.0.0
                    print(f"{name}, {described}: generate() refuses a chunked prefill ({exc}): not the bug")
                    continue
            delta = max(float((a - b).abs().max()) for a, b in zip(plain.logits, chunked.logits, strict=True))
            print(f"{name}, {described}: max |Δlogit| chunked against plain generate() {delta:.3g}")
            if delta > LOGIT_LIMIT and attention is not None:
                print(f"BUG {name}: generate(prefill_chunk_size=2) with the feature extractor's mask parts from generate()")
                found = True
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
