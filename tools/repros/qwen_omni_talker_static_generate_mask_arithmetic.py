#!/usr/bin/env python3
"""The Qwen Omni talkers' generate(talker_cache_implementation="static") raises in the talker's forward: mask arithmetic.

Expected (model bug; 5.0-5.14 refuse the control, a batch with audio output): Qwen2.5-Omni on 5.15.1-5.25.0,
Qwen3-Omni-MoE on 5.15.1-5.17.0 (5.18 computes its talker's positions otherwise: its static call runs).
Qwen2_5OmniTalkerForConditionalGeneration.forward computes its rotary index from the 2-D padding mask,
`delta0 = (1 - attention_mask).sum(dim=-1)` (modeling_qwen2_5_omni.py:2390-2396 in 5.24.0), but with a StaticCache
generate() hands the forward what create_masks_for_generate made of the mask (prepare_inputs_for_generation), a
per-layer-type dict: TypeError "unsupported operand type(s) for -: 'int' and 'dict'". Qwen3OmniMoeTalkerForConditional-
Generation.forward does the same (modeling_qwen3_omni_moe.py:3091 in 5.17.0) and is handed None there: TypeError
"... 'int' and 'NoneType'". The `talker_` arguments of generate() reach the talker's generate() (modeling_qwen2_5_omni.py
:3878-3879). The thinkers had the same arithmetic until 5.16 (qwen_omni_thinker_static_generate_mask_arithmetic.py).
The control: the same generate() without the static cache runs. The models are the tiny ones of the
qwen*_omni*_uncached_generate_feeds_the_talker_whole_sequences.py repros.
Exit 1 when either static generate() raises that arithmetic error; 0 when both run; 2 when neither shows it and one
raises anything else (or its control fails).
"""
import sys

import torch
from transformers import (
    Qwen2_5OmniConfig,
    Qwen2_5OmniForConditionalGeneration,
    Qwen3OmniMoeConfig,
    Qwen3OmniMoeForConditionalGeneration,
)

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



ROPE3 = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [3, 2, 3], "interleaved": True}
SMALL3 = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 2, "moe_intermediate_size": 64, "num_experts": 4, "num_experts_per_tok": 2,
         "norm_topk_prob": True, "rope_parameters": ROPE3}
CONFIG3 = {  # the published layout (Qwen3-Omni-30B-A3B-Instruct), shrunk: see kvconform/families/families.yaml
    "im_start_token_id": 255, "im_end_token_id": 254, "tts_pad_token_id": 253, "tts_bos_token_id": 252,
    "tts_eos_token_id": 251, "system_token_id": 250, "user_token_id": 249, "assistant_token_id": 248,
    "thinker_config": {"text_config": {**SMALL3, "vocab_size": 256}, "vision_start_token_id": 247,
                       "audio_start_token_id": 246, "audio_token_id": 245, "image_token_id": 244, "video_token_id": 243,
                       "audio_config": {"d_model": 64, "encoder_layers": 2, "encoder_attention_heads": 4,
                                        "encoder_ffn_dim": 128, "output_dim": 64, "downsample_hidden_size": 8},
                       "vision_config": {"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 4,
                                         "out_hidden_size": 64, "deepstack_visual_indexes": [0, 1]}},
    "talker_config": {"text_config": {**SMALL3, "vocab_size": 1280, "shared_expert_intermediate_size": 128},
                      "code_predictor_config": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                                                "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2,
                                                "vocab_size": 256, "num_code_groups": 16},
                      "num_code_groups": 16, "thinker_hidden_size": 64, "accept_hidden_layer": 1, "spatial_merge_size": 2,
                      "codec_pad_id": 356, "codec_bos_id": 357, "codec_eos_token_id": 358, "codec_nothink_id": 363,
                      "codec_think_bos_id": 364, "codec_think_eos_id": 365, "speaker_id": {"chelsie": 509},
                      "audio_token_id": 245, "image_token_id": 244, "video_token_id": 243, "vision_start_token_id": 247,
                      "audio_start_token_id": 246},
    "code2wav_config": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
                        "num_hidden_layers": 2, "codebook_size": 256, "codebook_dim": 64, "decoder_dim": 64,
                        "num_quantizers": 16},
}


ARITHMETIC = ("unsupported operand type(s) for -: 'int' and ",)


def qwen2_5_omni():
    model = Qwen2_5OmniForConditionalGeneration(Qwen2_5OmniConfig(**CONFIG)).float().eval()
    talker = model.config.talker_config
    model.speaker_map["Chelsie"] = {"bos_token": talker.tts_text_start_token_id, "cond": torch.zeros(1, 192),
                                    "ref_mel": torch.zeros(1, 30, 80)}
    text = torch.randint(3, 240, (BATCH, TEXT), generator=torch.Generator().manual_seed(SEED))
    return model, {"input_ids": text, "speaker": "Chelsie"}


def qwen3_omni_moe():
    model = Qwen3OmniMoeForConditionalGeneration(Qwen3OmniMoeConfig(**CONFIG3)).float().eval()
    config = model.config
    text = torch.randint(3, 240, (BATCH, TEXT), generator=torch.Generator().manual_seed(SEED))

    def ids(*values):
        return torch.tensor([values]).expand(BATCH, -1)

    prompt = torch.cat([ids(config.im_start_token_id, config.user_token_id, 198), text,
                        ids(config.im_end_token_id, 198, config.im_start_token_id, config.assistant_token_id, 198)], dim=1)
    return model, {"input_ids": prompt, "speaker": "chelsie"}


def static_generate(name, build):
    """0: the static call runs; 1: it raises the mask arithmetic error; 2: the control fails or another error."""
    torch.manual_seed(SEED)
    try:  # the control: the model builds and generate() runs with the default (dynamic) cache
        model, given = build()
        settings = {**given, "attention_mask": torch.ones_like(given["input_ids"]), "thinker_max_new_tokens": THINKER_TOKENS,
                    "thinker_do_sample": False, "talker_max_new_tokens": CODES, "talker_do_sample": False}
        model.generate(**settings)
    except Exception as exc:  # a release that cannot run the control shows nothing here
        print(f"{name}: the control raised {type(exc).__name__}: {exc}")
        return 2
    try:
        model.generate(**settings, talker_cache_implementation="static")
    except Exception as exc:  # which error it is decides
        print(f"{name}: generate(talker_cache_implementation='static') raised {type(exc).__name__}: {exc}")
        return 1 if isinstance(exc, (TypeError, RuntimeError)) and any(text in str(exc) for text in ARITHMETIC) else 2
    print(f"{name}: generate(talker_cache_implementation='static') ran (the control ran too)")
    return 0


@torch.inference_mode()
def main():
    results = [static_generate("Qwen2.5-Omni", qwen2_5_omni), static_generate("Qwen3-Omni-MoE", qwen3_omni_moe)]
    return 1 if 1 in results else max(results)


if __name__ == "__main__":
    sys.exit(main())
