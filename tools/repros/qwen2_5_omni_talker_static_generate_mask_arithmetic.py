#!/usr/bin/env python3
"""Qwen2.5-Omni's generate(talker_cache_implementation="static") raises in the talker's forward: mask arithmetic on a dict.

Expected (model bug, transformers 5.15.1-5.25.0; 5.0-5.14 refuse the control, a batch with audio output):
Qwen2_5OmniTalkerForConditionalGeneration.forward computes its rotary index from the 2-D padding
mask, `delta0 = (1 - attention_mask).sum(dim=-1)` (modeling_qwen2_5_omni.py:2390-2396 in 5.24.0), but with a
StaticCache generate() hands the forward what create_masks_for_generate made of the mask (prepare_inputs_for_generation):
a per-layer-type dict (TypeError "unsupported operand type(s) for -: 'int' and 'dict'") or a 4-D bool tensor
(RuntimeError "Subtraction, the `-` operator, with a bool tensor is not supported"). The `talker_` arguments of
Qwen2_5OmniForConditionalGeneration.generate reach the talker's generate() (:3878-3879). The thinkers had the same
arithmetic until 5.16 (qwen_omni_thinker_static_generate_mask_arithmetic.py); the talker keeps it. The control: the
same generate() without the static cache runs. The model is the tiny one of
qwen2_5_omni_uncached_generate_feeds_the_talker_whole_sequences.py.
Exit 1 when the static generate() raises that arithmetic error; 0 when it runs; 2 when it raises anything else.
"""
import sys

import torch
from transformers import Qwen2_5OmniConfig, Qwen2_5OmniForConditionalGeneration

TRANSFORMERS = ">=5.15"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

SEED, BATCH, TEXT, THINKER_TOKENS, CODES = 0, 2, 6, 4, 8
ROPE = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]}
SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 2, "rope_parameters": ROPE}
CONFIG = {
    "thinker_config": {"text_config": {**SMALL, "vocab_size": 256}, "vision_start_token_id": 245, "audio_token_index": 255,
                       "image_token_index": 254, "video_token_index": 253, "audio_start_token_id": 252,
                       "audio_end_token_id": 251, "user_token_id": 250,
                       "audio_config": {"d_model": 64, "encoder_layers": 2, "encoder_attention_heads": 4,
                                        "encoder_ffn_dim": 128, "output_dim": 64},
                       "vision_config": {"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 4,
                                         "out_hidden_size": 64, "fullatt_block_indexes": [1]}},
    "talker_config": {**SMALL, "head_dim": 16, "vocab_size": 256, "embedding_size": 64, "tts_text_start_token_id": 252,
                      "tts_text_end_token_id": 251, "tts_text_pad_token_id": 250, "tts_codec_start_token_id": 249,
                      "tts_codec_end_token_id": 248, "tts_codec_pad_token_id": 247, "tts_codec_mask_token_id": 246,
                      "vision_start_token_id": 245, "audio_token_index": 255, "image_token_index": 254,
                      "video_token_index": 253, "audio_start_token_id": 243, "audio_end_token_id": 242},
    "token2wav_config": {"dit_config": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                                        "head_dim": 16, "emb_dim": 64, "ff_mult": 2},
                         "bigvgan_config": {"upsample_initial_channel": 64}},
}



ARITHMETIC = ("unsupported operand type(s) for -: 'int' and 'dict'", "with a bool tensor is not supported")


@torch.inference_mode()
def main():
    torch.manual_seed(SEED)
    text = torch.randint(3, 240, (BATCH, TEXT), generator=torch.Generator().manual_seed(SEED))
    settings = {"input_ids": text, "attention_mask": torch.ones_like(text), "speaker": "Chelsie",
                "thinker_max_new_tokens": THINKER_TOKENS, "thinker_do_sample": False, "talker_max_new_tokens": CODES,
                "talker_do_sample": False}
    try:  # the control: the model builds and generate() runs with the default (dynamic) cache
        model = Qwen2_5OmniForConditionalGeneration(Qwen2_5OmniConfig(**CONFIG)).float().eval()
        talker = model.config.talker_config
        model.speaker_map["Chelsie"] = {"bos_token": talker.tts_text_start_token_id, "cond": torch.zeros(1, 192),
                                        "ref_mel": torch.zeros(1, 30, 80)}
        model.generate(**settings)
    except Exception as exc:  # a release that cannot run the control shows nothing here
        print(f"the control raised {type(exc).__name__}: {exc}; this script shows nothing here")
        return 2
    print("generate(): ran")
    try:
        model.generate(**settings, talker_cache_implementation="static")
    except Exception as exc:  # which error it is decides the exit status
        print(f"generate(talker_cache_implementation='static'): raised {type(exc).__name__}: {exc}")
        return 1 if isinstance(exc, (TypeError, RuntimeError)) and any(text in str(exc) for text in ARITHMETIC) else 2
    print("generate(talker_cache_implementation='static'): ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
