#!/usr/bin/env python3
"""transformers 5.0-5.15: generate(cache_implementation="static") on a Qwen omni thinker raises at its prefill.

Expected (model bug): the thinkers' forward computes their multimodal rotary index from the 2-D padding mask,
`delta0 = (1 - attention_mask).sum(dim=-1)` (Qwen2_5OmniThinkerForConditionalGeneration.forward,
modeling_qwen2_5_omni.py:2022 in 5.2.0, :1987 in 5.14.1, :1974 in 5.15.1; Qwen3OmniMoeThinkerForConditionalGeneration,
modeling_qwen3_omni_moe.py:2210 in 5.2.0, :2145 in 5.13.1, :2139 in 5.15.1), but with a StaticCache generate() hands the forward the
mask create_masks_for_generate made of it (generation/utils.py prepare_inputs_for_generation): a 4-D bool tensor
(RuntimeError "Subtraction, the `-` operator, with a bool tensor is not supported") or, for Qwen2.5-Omni on 5.2-5.10
and 5.14-5.15, a per-layer-type dict (TypeError "unsupported operand type(s) for -: 'int' and 'dict'"). On 5.0-5.1 generate() does not get that far: the thinkers' own legacy _prepare_4d_causal_attention_mask_with_cache_position
(modeling_qwen2_5_omni.py:152, modeling_qwen3_omni_moe.py:159 in 5.0.0) lacks the config keyword generate() passes it
(generation/utils.py:719 in 5.0.0): TypeError "got an unexpected keyword argument 'config'". 5.16 moves both
thinkers' rotary index to generate()'s _prepare_position_ids_for_generation and compute_3d_position_ids, which do no
arithmetic on the 4-D mask (modeling_qwen2_5_omni.py:1866-1879, 2077; modeling_qwen3_omni_moe.py:1986, 2244 in 5.16.1).
vision_start_token_id is set as every published thinker_config sets it (151652): the thinker config classes do not
declare it and generate() reads it (get_rope_index).
Exit 1 when either thinker's static generate() raises or gives other tokens than its dynamic generate(); 0 when both agree.
"""
import sys

import torch
import transformers

TRANSFORMERS = "<5.16"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

AUDIO = dict(num_mel_bins=128, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128, d_model=64, output_dim=64,
             max_source_positions=64)
VISION = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=4, patch_size=8, spatial_merge_size=2,
              temporal_patch_size=2, out_hidden_size=64)


def text(**extra):
    return dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64,
                rope_parameters={"rope_theta": 1e6, "rope_type": "default", "mrope_section": [2, 3, 3]}, **extra)


def thinkers():
    from transformers import Qwen2_5OmniThinkerConfig, Qwen2_5OmniThinkerForConditionalGeneration
    yield "Qwen2.5-Omni thinker", Qwen2_5OmniThinkerForConditionalGeneration, Qwen2_5OmniThinkerConfig(
        audio_config=AUDIO, vision_config=VISION, text_config=text(), vision_start_token_id=249, audio_token_index=255,
        image_token_index=254, video_token_index=253, audio_start_token_id=252, audio_end_token_id=251, user_token_id=250)
    from transformers import Qwen3OmniMoeThinkerConfig, Qwen3OmniMoeThinkerForConditionalGeneration
    yield "Qwen3-Omni-MoE thinker", Qwen3OmniMoeThinkerForConditionalGeneration, Qwen3OmniMoeThinkerConfig(
        audio_config=AUDIO, vision_config=VISION, text_config=text(moe_intermediate_size=64, num_experts_per_tok=2, num_experts=4),
        vision_start_token_id=249, audio_start_token_id=255, user_token_id=254, audio_token_id=253, image_token_id=252,
        video_token_id=251)


@torch.inference_mode()
def main() -> int:
    print(f"transformers {transformers.__version__}")
    prompt = torch.randint(3, 240, (2, 6), generator=torch.Generator().manual_seed(0))
    wrong = False
    for name, model_class, config in thinkers():
        runs = {}
        for cache in ("static", None):  # a fresh instance each (Qwen3-Omni's static call after a dynamic one runs on 5.14-5.15)
            torch.manual_seed(0)
            model = model_class(config).eval()
            try:
                runs[cache] = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=5, do_sample=False,
                                             pad_token_id=0, cache_implementation=cache)[:, prompt.shape[1]:]
            except (RuntimeError, TypeError) as exc:
                print(f"{name}: generate(cache_implementation={cache!r}) raised {type(exc).__name__}: {exc}".splitlines()[0])
        if "static" in runs and None in runs and torch.equal(runs[None], runs["static"]):
            print(f"{name}: static and dynamic generate() agree: {runs['static'].tolist()}")
        else:
            wrong = True
    return int(wrong)


if __name__ == "__main__":
    sys.exit(main())
