#!/usr/bin/env python3
"""``generate(cache_implementation="static")`` on hybrid models (Qwen3-Next, LFM2, Jamba, GraniteMoeHybrid, NemotronH) raises
KeyError in transformers 5.5-5.12.

From 5.5 ``StaticCache(config)`` builds recurrent layers for a hybrid config's non-attention layer types, so a static
``generate()`` reaches ``GenerationMixin.prepare_inputs_for_generation``'s mask step for a compileable cache
(generation/utils.py:557-575 in 5.5.4, :562-580 in 5.12.1), which calls ``create_masks_for_generate``; that builds one
mask per entry of ``config.layer_types`` through ``LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING[layer_pattern]``
(masking_utils.py:1472 in 5.5.4, :1524-1527 in 5.12.1), a table of attention types only, so "linear_attention"
(Qwen3-Next, Qwen3.5), "conv" (LFM2), "mamba" and "attention" (Jamba, GraniteMoeHybrid, NemotronH) raise KeyError before
the first forward. LFM2-VL's language model is LFM2: its static ``generate()`` with an image raises the same. MiniCPM-V
4.6 (new in 5.7) wraps a Qwen3.5 text model: its static ``generate()`` raises ``KeyError: 'linear_attention'`` on
5.7-5.12 (the last row, left out by releases without the type).
Exit 1 while a static ``generate()`` raises or picks other tokens than the dynamic one, 0 when they agree.
"""
import sys

import torch
import transformers

TRANSFORMERS = ">=5.5,<5.13"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
COMMON = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "max_position_embeddings": 64, "initializer_range": 0.15, "pad_token_id": 0}
CONFIGS = {
    "qwen3_next": {"head_dim": 16, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
                   "linear_num_key_heads": 2, "linear_num_value_heads": 4, "moe_intermediate_size": 64,
                   "shared_expert_intermediate_size": 64, "num_experts_per_tok": 2, "num_experts": 4,
                   "layer_types": ["linear_attention", "full_attention"]},
    "lfm2": {"conv_L_cache": 3, "full_attn_idxs": [1], "layer_types": ["conv", "full_attention"]},
    "jamba": {"num_experts_per_tok": 2, "num_experts": 4, "expert_layer_period": 2, "expert_layer_offset": 1,
              "attn_layer_period": 2, "attn_layer_offset": 1, "use_mamba_kernels": False, "mamba_d_state": 8,
              "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": 8},
    "granitemoehybrid": {"num_local_experts": 4, "num_experts_per_tok": 2, "shared_intermediate_size": 64,
                         "layer_types": ["mamba", "attention"], "mamba_n_heads": 8, "mamba_n_groups": 1, "mamba_d_state": 8,
                         "mamba_d_head": 16, "mamba_d_conv": 4, "mamba_expand": 2},
    # NemotronH's blocks as its checkpoints name them (hybrid_override_pattern "M" Mamba2, "*" attention)
    "nemotron_h": {"hybrid_override_pattern": "M*", "head_dim": 16, "mamba_num_heads": 8, "mamba_head_dim": 16,
                   "n_groups": 1, "ssm_state_size": 8, "conv_kernel": 4, "expand": 2, "chunk_size": 8,
                   "use_mamba_kernels": False},
}


IMAGE_TOKEN = 250  # LFM2-VL: one image of 4 x 4 patches of 8 pixels, 2 x 2 placeholders after the 2 x 2 downsampling


def build(model_type: str) -> tuple[torch.nn.Module, dict]:
    """The model and its generate() inputs besides the prompt (LFM2-VL: an image in the processor's NaFlex layout)."""
    torch.manual_seed(0)
    if model_type == "minicpmv4_6":  # a text-only prompt: the masks are built before any forward
        text = {"model_type": "qwen3_5_text", **COMMON, **{key: value for key, value in CONFIGS["qwen3_next"].items()
                                                           if key.startswith(("head_dim", "linear_", "layer_types"))}}
        vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                  "patch_size": 8, "image_size": 32}
        config = transformers.AutoConfig.for_model("minicpmv4_6", text_config=text, vision_config=vision,
                                                   image_token_id=IMAGE_TOKEN, insert_layer_id=0)
        return transformers.AutoModelForImageTextToText.from_config(config).float().eval(), {}
    if model_type != "lfm2_vl":
        config = transformers.AutoConfig.for_model(model_type, **COMMON, **CONFIGS[model_type])
        return transformers.AutoModelForCausalLM.from_config(config).float().eval(), {}
    vision = {"model_type": "siglip2_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
              "num_attention_heads": 2, "patch_size": 8, "num_patches": 16}
    config = transformers.AutoConfig.for_model("lfm2_vl", text_config={"model_type": "lfm2", **COMMON, **CONFIGS["lfm2"]},
                                               vision_config=vision, image_token_id=IMAGE_TOKEN, projector_hidden_size=64)
    image = {"pixel_values": torch.randn(2, 16, 3 * 8 * 8, generator=torch.Generator().manual_seed(1)),
             "spatial_shapes": torch.tensor([[4, 4]] * 2), "pixel_attention_mask": torch.ones(2, 16, dtype=torch.long)}
    return transformers.AutoModelForImageTextToText.from_config(config).float().eval(), image


@torch.inference_mode()
def reproduces(model_type: str) -> bool:
    model, extra = build(model_type)
    prompt = torch.randint(3, 240, (2, 6), generator=torch.Generator().manual_seed(0))
    if extra:
        prompt[:, 1:5] = IMAGE_TOKEN
    runs = {}
    for implementation in (None, "static"):
        try:
            runs[implementation] = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6,
                                                  do_sample=False, pad_token_id=0, cache_implementation=implementation,
                                                  **extra)
        except Exception as exc:  # the raise is the finding
            print(f"{model_type}: generate(cache_implementation={implementation!r}) raised {type(exc).__name__}: {exc}")
    bad = len(runs) < 2 or not torch.equal(runs[None], runs["static"])
    if len(runs) == 2:
        print(f"{model_type}: dynamic {runs[None][:, 6:].tolist()}, static {runs['static'][:, 6:].tolist()}")
    return bad


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    known = transformers.models.auto.configuration_auto.CONFIG_MAPPING
    bad = [model_type for model_type in [*CONFIGS, "lfm2_vl", "minicpmv4_6"] if model_type in known and reproduces(model_type)]
    print(f"static generate() raises or parts from the dynamic one: {bad}" if bad else "static generate() agrees with dynamic")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
